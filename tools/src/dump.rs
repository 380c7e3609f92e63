//! `seglog dump FILES...`: kafka-dump-log for Kafka's on-disk files.
//!
//! Text output follows kafka-dump-log's line formats (`baseOffset: … isvalid: true`,
//! `| offset: …`, `offset: … position: …`, `timestamp: … offset: …`) so scripts written for it
//! keep working; seglog adds lines of its own for what Kafka's tool leaves out (how a `.log`
//! ends, zero padding of an index, the time-index flavour). `--json` prints one JSON document.
//! Nothing is written to the files.
//!
//! Output is streamed, text and JSON alike: each batch, record and entry is written as it is
//! decoded, and files are read in bounded chunks, so memory does not grow with a file's length
//! (only the few lists that close a file's JSON object are capped, at [`LISTED`] items).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use seglog::format::batch::BatchHeader;
use seglog::format::filename::FileKind;
use seglog::format::record::{self, Record};
use seglog::format::{be_i16, be_i32};
use serde::Serialize;
use serde_json::{json, Value};

use crate::indexcheck::{self, IndexEntry, IndexStream, OffsetIndexStream, TimeCheckEvent, TimeIndexStream};
use crate::layout::{self, CheckpointKind, FileClass};
use crate::logscan::{BatchInfo, LogEnd, LogSummary, LogWalker, MAX_BATCH_IN_MEMORY};
use crate::sidecar;

/// Items kept of a list that is printed after a file's batches (non-consecutive offsets, record
/// errors in `--json`); the rest are counted.
const LISTED: usize = 100;

#[derive(clap::Args, Debug)]
#[command(after_help = crate::EXIT_CODES)]
pub struct Args {
    /// Files to dump: .log, .index, .timeindex, .snapshot, .txnindex, and Kafka's checkpoint files
    /// (recovery-point-offset-checkpoint, log-start-offset-checkpoint,
    /// replication-offset-checkpoint, cleaner-offset-checkpoint, leader-epoch-checkpoint,
    /// .kafka_cleanshutdown, partition.metadata).
    #[arg(value_name = "FILES")]
    files: Vec<PathBuf>,
    /// The same as FILES, comma-separated (kafka-dump-log's spelling).
    #[arg(long = "files", value_delimiter = ',', value_name = "FILE,...")]
    files_opt: Vec<PathBuf>,
    /// For .log files, also print every record (offset, timestamp, key and value sizes, sequence,
    /// header keys), decompressing batches when needed.
    #[arg(long)]
    deep_iteration: bool,
    /// Print record keys, values and headers as UTF-8 (invalid bytes replaced). Implies
    /// --deep-iteration.
    #[arg(long)]
    print_data_log: bool,
    /// With --print-data-log, print only keys, values and headers, not the record metadata.
    #[arg(long)]
    skip_record_metadata: bool,
    /// Read only the batches that lie wholly within the first N bytes of each .log file
    /// (suffixes allowed: 64KiB, 1MB).
    #[arg(long, value_name = "N", value_parser = crate::units::parse_bytes)]
    max_bytes: Option<u64>,
    /// For .index and .timeindex files, check every entry against the segment's .log instead of
    /// printing the entries (kafka-dump-log --verify-index-only). Exit code 1 if any check fails.
    #[arg(long)]
    verify_index_only: bool,
    /// For .index and .timeindex files, run only Kafka's sanity check (file length a multiple of
    /// the entry size, last offset not below the base offset, time index not decreasing).
    /// Exit code 1 if it fails.
    #[arg(long)]
    index_sanity_check: bool,
    /// Print one JSON document instead of text.
    #[arg(long)]
    json: bool,
}

/// What one file turned out to be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Log,
    Index,
    TimeIndex,
    Snapshot,
    TxnIndex,
    Checkpoint(CheckpointKind),
}

fn kind_of(path: &Path) -> Option<Kind> {
    let name = path.file_name()?.to_string_lossy().into_owned();
    match layout::classify(&name) {
        FileClass::Segment(s) => Some(match s.kind {
            FileKind::Log => Kind::Log,
            FileKind::Index => Kind::Index,
            FileKind::TimeIndex => Kind::TimeIndex,
            FileKind::Snapshot => Kind::Snapshot,
            FileKind::TxnIndex => Kind::TxnIndex,
        }),
        FileClass::Checkpoint(k) => Some(Kind::Checkpoint(k)),
        // Names with a segment extension but no 20-digit stem (`copy.log`, `5.index`).
        FileClass::BadSegmentName(_) | FileClass::Unknown | FileClass::KnownOther(_) => {
            match name.rsplit('.').next()? {
                "log" => Some(Kind::Log),
                "index" => Some(Kind::Index),
                "timeindex" => Some(Kind::TimeIndex),
                "snapshot" => Some(Kind::Snapshot),
                "txnindex" => Some(Kind::TxnIndex),
                _ => None,
            }
        }
    }
}

/// Accumulated outcome over all files.
#[derive(Default)]
struct Status {
    damage: bool,
    error: bool,
}

/// Where dump's output goes: text lines (`line`), or one JSON document written piece by piece as
/// it is produced (`begin_*`, `key`, `value`, `end`), laid out as `serde_json`'s pretty printer
/// does. In text mode the JSON calls do nothing, and in JSON mode `line` does nothing.
struct Out {
    text: bool,
    w: std::io::BufWriter<std::io::Stdout>,
    /// JSON: the open containers (`true` for an object) and whether each has a member yet.
    stack: Vec<(bool, bool)>,
    /// JSON: a key was written, its value comes next.
    after_key: bool,
}

impl Out {
    fn new(text: bool) -> Out {
        Out { text, w: std::io::BufWriter::new(std::io::stdout()), stack: Vec::new(), after_key: false }
    }

    fn line(&mut self, s: impl AsRef<str>) -> std::io::Result<()> {
        if self.text {
            self.w.write_all(s.as_ref().as_bytes())?;
            self.w.write_all(b"\n")?;
        }
        Ok(())
    }

    fn json(&self) -> bool {
        !self.text
    }

    fn indent(&mut self) -> std::io::Result<()> {
        for _ in 0..self.stack.len() {
            self.w.write_all(b"  ")?;
        }
        Ok(())
    }

    /// What goes before a member: nothing after a key, else a comma (but for the first) and a new
    /// line.
    fn separate(&mut self) -> std::io::Result<()> {
        if std::mem::take(&mut self.after_key) {
            return Ok(());
        }
        if let Some(top) = self.stack.last_mut() {
            let first = !top.1;
            top.1 = true;
            self.w.write_all(if first { b"\n" } else { b",\n" })?;
            self.indent()?;
        }
        Ok(())
    }

    fn begin(&mut self, object: bool) -> std::io::Result<()> {
        if self.json() {
            self.separate()?;
            self.w.write_all(if object { b"{" } else { b"[" })?;
            self.stack.push((object, false));
        }
        Ok(())
    }
    fn begin_object(&mut self) -> std::io::Result<()> {
        self.begin(true)
    }
    fn begin_array(&mut self) -> std::io::Result<()> {
        self.begin(false)
    }

    /// Closes the innermost container.
    fn end(&mut self) -> std::io::Result<()> {
        if let Some((object, members)) = self.stack.pop() {
            if members {
                self.w.write_all(b"\n")?;
                self.indent()?;
            }
            self.w.write_all(if object { b"}" } else { b"]" })?;
        }
        Ok(())
    }

    /// Containers open (JSON).
    fn depth(&self) -> usize {
        self.stack.len()
    }

    /// Closes containers until `depth` are open (after an error in the middle of a file).
    fn close_to(&mut self, depth: usize) -> std::io::Result<()> {
        if std::mem::take(&mut self.after_key) {
            self.w.write_all(b"null")?; // a key whose value never came
        }
        while self.stack.len() > depth {
            self.end()?;
        }
        Ok(())
    }

    fn key(&mut self, k: &str) -> std::io::Result<()> {
        if self.json() {
            self.separate()?;
            serde_json::to_writer(&mut self.w, k)?;
            self.w.write_all(b": ")?;
            self.after_key = true;
        }
        Ok(())
    }

    /// One value, pretty-printed at the current depth.
    fn value(&mut self, v: &impl Serialize) -> std::io::Result<()> {
        if self.json() {
            self.separate()?;
            let s = serde_json::to_string_pretty(v)?;
            let mut lines = s.split('\n');
            if let Some(first) = lines.next() {
                self.w.write_all(first.as_bytes())?;
            }
            for l in lines {
                self.w.write_all(b"\n")?;
                self.indent()?;
                self.w.write_all(l.as_bytes())?;
            }
        }
        Ok(())
    }

    fn field(&mut self, k: &str, v: &impl Serialize) -> std::io::Result<()> {
        self.key(k)?;
        self.value(v)
    }

    /// Each member of a JSON object as a field of the open object.
    fn fields(&mut self, v: &Value) -> std::io::Result<()> {
        if let Some(m) = v.as_object() {
            for (k, v) in m {
                self.field(k, v)?;
            }
        }
        Ok(())
    }
}

/// A path as JSON text (lossy for a name that is not UTF-8, which `serde` refuses).
fn path_str(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

pub fn run(args: Args) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let mut files = args.files.clone();
    files.extend(args.files_opt.iter().cloned());
    if files.is_empty() {
        return Err("no files given (seglog dump FILES..., see --help)".into());
    }
    crate::live::warn_if_live(files.iter().map(|p| p.as_path()));
    let mut out = Out::new(!args.json);
    let mut status = Status::default();
    out.begin_object()?;
    out.key("files")?;
    out.begin_array()?;
    for path in &files {
        let depth = out.depth();
        out.begin_object()?;
        out.field("path", &path_str(path))?;
        let r = match kind_of(path) {
            None => Err(format!(
                "{}: unknown file type (expected .log, .index, .timeindex, .snapshot, .txnindex, or one of Kafka's checkpoint files: {})",
                path.display(),
                CHECKPOINT_NAMES
            )),
            Some(kind) => {
                out.line(format!("Dumping {}", path.display()))?;
                dump_file(path, kind, &args, &mut out, &mut status)
            }
        };
        if let Err(e) = r {
            status.error = true;
            out.w.flush()?;
            eprintln!("seglog dump: {e}");
            out.close_to(depth + 1)?;
            out.field("error", &e)?;
        }
        out.close_to(depth)?;
    }
    out.end()?;
    out.field("damage_found", &status.damage)?;
    out.field("errors", &status.error)?;
    out.end()?;
    if out.json() {
        out.w.write_all(b"\n")?;
    }
    out.w.flush()?;
    Ok(if status.error {
        ExitCode::from(2)
    } else if status.damage {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

const CHECKPOINT_NAMES: &str = "recovery-point-offset-checkpoint, log-start-offset-checkpoint, replication-offset-checkpoint, cleaner-offset-checkpoint, leader-epoch-checkpoint, .kafka_cleanshutdown, partition.metadata";

/// Dumps one file, writing the members of its JSON object (the caller opened it and wrote the
/// path). `Err` is an error for this file (I/O, not a regular file, ...), naming it.
fn dump_file(path: &Path, kind: Kind, args: &Args, out: &mut Out, st: &mut Status) -> Result<(), String> {
    let io = |e: std::io::Error| format!("{}: {e}", path.display());
    match kind {
        Kind::Log => dump_log(path, args, out, st).map_err(io),
        Kind::Index => dump_offset_index(path, args, out, st),
        Kind::TimeIndex => dump_time_index(path, args, out, st),
        Kind::Snapshot => dump_snapshot(path, out, st).map_err(io),
        Kind::TxnIndex => dump_txn_index(path, out, st).map_err(io),
        Kind::Checkpoint(k) => match sidecar::decode_checkpoint(path, k) {
            Ok(d) => {
                for l in &d.lines {
                    out.line(l).map_err(io)?;
                }
                out.field("kind", &"checkpoint").map_err(io)?;
                out.field("contents", &d.json).map_err(io)
            }
            Err((true, e)) => Err(e),
            Err((false, e)) => {
                st.damage = true;
                out.line(format!("invalid checkpoint file: {e}")).map_err(io)?;
                out.field("kind", &"checkpoint").map_err(io)?;
                out.field("problem", &e).map_err(io)
            }
        },
    }
}

fn dump_snapshot(path: &Path, out: &mut Out, st: &mut Status) -> std::io::Result<()> {
    let snap = sidecar::Snapshot::open(path)?;
    out.field("kind", &"snapshot")?;
    match snap.check()? {
        Ok(n) => {
            out.key("producers")?;
            out.begin_array()?;
            snap.each(|e| {
                out.line(format!(
                    "producerId: {} producerEpoch: {} coordinatorEpoch: {} currentTxnFirstOffset: {} lastSequence: {} lastOffset: {} offsetDelta: {} timestamp: {}",
                    e.producer_id, e.producer_epoch, e.coordinator_epoch, e.current_txn_first_offset,
                    e.last_sequence, e.last_offset, e.offset_delta, e.timestamp
                ))?;
                out.value(&e)
            })?;
            out.end()?;
            out.line(format!("{n} producers"))
        }
        Err(e) => {
            st.damage = true;
            out.line(format!("corrupt snapshot {}: {e}", path.display()))?;
            out.field("problem", &e)
        }
    }
}

fn dump_txn_index(path: &Path, out: &mut Out, st: &mut Status) -> std::io::Result<()> {
    let txn = sidecar::TxnIndex::open(path)?;
    out.field("kind", &"txnindex")?;
    // A first pass checks every entry, so that a bad file prints none (as a whole-file decode).
    match txn.each(|_| Ok(()))? {
        Ok(_) => {
            out.key("aborted_transactions")?;
            out.begin_array()?;
            txn.each(|t| {
                out.line(format!(
                    "version: {} producerId: {} firstOffset: {} lastOffset: {} lastStableOffset: {}",
                    t.version, t.producer_id, t.first_offset, t.last_offset, t.last_stable_offset
                ))?;
                out.value(&t)
            })?
            .map_err(|e| std::io::Error::other(format!("the file changed while reading it: {e}")))?;
            out.end()
        }
        Err(e) => {
            st.damage = true;
            out.line(format!("corrupt transaction index {}: {e}", path.display()))?;
            out.field("problem", &e)
        }
    }
}

/// kafka-dump-log's batch line.
fn batch_line(b: &BatchInfo) -> String {
    let h = &b.header;
    let codec = h.compression().map_or_else(|_| format!("unknown({})", h.attributes.0 & 0x07), |c| c.name().to_owned());
    let horizon = if h.attributes.has_delete_horizon() {
        format!("OptionalLong[{}]", h.base_timestamp)
    } else {
        "OptionalLong.empty".into()
    };
    format!(
        "baseOffset: {} lastOffset: {} count: {} baseSequence: {} lastSequence: {} producerId: {} producerEpoch: {} partitionLeaderEpoch: {} isTransactional: {} isControl: {} deleteHorizonMs: {} position: {} {}: {} size: {} magic: {} compresscodec: {} crc: {} isvalid: {}",
        h.base_offset,
        h.last_offset(),
        h.records_count,
        h.base_sequence,
        h.last_sequence(),
        h.producer_id,
        h.producer_epoch,
        h.partition_leader_epoch,
        h.is_transactional(),
        h.is_control(),
        horizon,
        b.position,
        h.timestamp_type().name(),
        h.max_timestamp,
        b.size(),
        h.magic,
        codec,
        h.crc,
        b.crc_ok()
    )
}

fn batch_json(b: &BatchInfo) -> Value {
    let h = &b.header;
    json!({
        "base_offset": h.base_offset,
        "last_offset": h.last_offset(),
        "count": h.records_count,
        "position": b.position,
        "size": b.size(),
        "magic": h.magic,
        "codec": h.compression().map(|c| c.name()).unwrap_or("unknown"),
        "timestamp_type": h.timestamp_type().name(),
        "max_timestamp": h.max_timestamp,
        "base_timestamp": h.base_timestamp,
        "producer_id": h.producer_id,
        "producer_epoch": h.producer_epoch,
        "base_sequence": h.base_sequence,
        "last_sequence": h.last_sequence(),
        "transactional": h.is_transactional(),
        "control": h.is_control(),
        "delete_horizon_ms": h.attributes.has_delete_horizon().then_some(h.base_timestamp),
        "partition_leader_epoch": h.partition_leader_epoch,
        "crc": h.crc,
        "computed_crc": b.computed_crc,
        "crc_valid": b.crc_ok(),
    })
}

fn end_json(end: &LogEnd) -> Value {
    match end {
        LogEnd::Clean => json!({"state": "clean"}),
        LogEnd::Limited { position } => json!({"state": "limited", "position": position}),
        other => json!({
            "state": match other {
                LogEnd::Corrupt { .. } => "corrupt",
                _ => "torn-tail",
            },
            "position": other.problem_position(),
            "invalid_bytes": other.invalid_bytes(),
            "detail": other.describe(),
        }),
    }
}

/// Kafka's `record.sequence`: baseSequence + offsetDelta (wrapping at i32::MAX), or -1.
fn record_sequence(h: &BatchHeader, r: &Record) -> i64 {
    if h.base_sequence < 0 {
        return -1;
    }
    let s = h.base_sequence as i64 + r.offset_delta as i64;
    if s > i32::MAX as i64 {
        s - i32::MAX as i64 - 1
    } else {
        s
    }
}

const CONTROL_TYPES: [&str; 7] =
    ["ABORT", "COMMIT", "LEADER_CHANGE", "SNAPSHOT_HEADER", "SNAPSHOT_FOOTER", "KRAFT_VERSION", "KRAFT_VOTERS"];

/// kafka-dump-log's description of a control record.
fn control_text(r: &Record) -> String {
    let Some(k) = r.key.filter(|k| k.len() >= 4) else {
        return " controlType: UNKNOWN(invalid key)".into();
    };
    let type_id = be_i16(k, 2);
    let name = usize::try_from(type_id).ok().and_then(|i| CONTROL_TYPES.get(i)).copied().unwrap_or("UNKNOWN");
    match (type_id, r.value) {
        (0 | 1, Some(v)) if v.len() >= 6 => {
            format!(" endTxnMarker: {name} coordinatorEpoch: {}", be_i32(v, 2))
        }
        _ => format!(" controlType: {name}({type_id})"),
    }
}

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn headers_text(r: &Record) -> String {
    let hs: Vec<String> = r
        .headers
        .iter()
        .map(|h| match h.value {
            Some(v) => format!("{}={}", lossy(h.key), lossy(v)),
            None => format!("{}=null", lossy(h.key)),
        })
        .collect();
    format!("[{}]", hs.join(","))
}

/// The first [`LISTED`] items of a list, and how many there were.
#[derive(Debug)]
struct Capped<T> {
    items: Vec<T>,
    total: u64,
}

impl<T> Default for Capped<T> {
    fn default() -> Self {
        Capped { items: Vec::new(), total: 0 }
    }
}

impl<T> Capped<T> {
    fn push(&mut self, t: T) {
        if self.items.len() < LISTED {
            self.items.push(t);
        }
        self.total += 1;
    }
}

/// Offsets that do not follow each other, written to stderr as they are found (text mode; Kafka
/// prints them after the file's batches) and kept, capped, for the JSON summary.
struct Gaps<'a> {
    path: &'a Path,
    last_offset: Option<i64>,
    list: Capped<(i64, i64)>,
    err: std::io::BufWriter<std::io::Stderr>,
}

impl Gaps<'_> {
    fn see(&mut self, offset: i64, out: &mut Out) -> std::io::Result<()> {
        if let Some(l) = self.last_offset {
            if l.checked_add(1) != Some(offset) {
                if out.text {
                    if self.list.total == 0 {
                        out.w.flush()?;
                        writeln!(self.err, "Non-consecutive offsets in {}", self.path.display())?;
                    }
                    writeln!(self.err, "  {l} is followed by {offset}")?;
                }
                self.list.push((l, offset));
            }
        }
        self.last_offset = Some(offset);
        Ok(())
    }
}

/// Prints the records of one batch (as text lines, or as JSON values of the open array); an
/// error text when they could not be decoded.
fn dump_records(
    b: &BatchInfo,
    bytes: &[u8],
    args: &Args,
    out: &mut Out,
    gaps: &mut Gaps,
) -> std::io::Result<Option<String>> {
    let h = &b.header;
    let mut scratch = Vec::new();
    let iter = match record::batch_records(bytes, &mut scratch) {
        Ok(i) => i,
        Err(e) => {
            let msg = format!("records of the batch at byte {} cannot be read: {e}", b.position);
            out.line(format!("| {msg}"))?;
            return Ok(Some(msg));
        }
    };
    for r in iter {
        let r = match r {
            Ok(r) => r,
            Err(e) => {
                let msg = format!("record error in the batch at byte {}: {e}", b.position);
                out.line(format!("| {msg}"))?;
                return Ok(Some(msg));
            }
        };
        let offset = r.offset(h.base_offset);
        gaps.see(offset, out)?;
        if out.text {
            out.line(record_line(h, &r, offset, args))?;
        } else {
            out.value(&record_json(h, &r, offset, args.print_data_log))?;
        }
    }
    Ok(None)
}

/// One record of a batch with header `h`, at `offset`, as a kafka-dump-log `| offset: …` line.
fn record_line(h: &BatchHeader, r: &Record, offset: i64, args: &Args) -> String {
    let ts = r.timestamp(h.base_timestamp, h.max_timestamp, h.timestamp_type());
    let key_size = r.key.map_or(-1, |k| k.len() as i64);
    let value_size = r.value.map_or(-1, |v| v.len() as i64);
    let mut line = String::from("|");
    let mut sep = " ";
    if !args.skip_record_metadata {
        let keys: Vec<String> = r.headers.iter().map(|hd| lossy(hd.key)).collect();
        line.push_str(&format!(
            " offset: {offset} {}: {ts} keySize: {key_size} valueSize: {value_size} sequence: {} headerKeys: [{}]",
            h.timestamp_type().name(),
            record_sequence(h, r),
            keys.join(",")
        ));
        if h.is_control() {
            line.push_str(&control_text(r));
        }
    }
    if args.print_data_log && !h.is_control() {
        if let Some(k) = r.key {
            line.push_str(&format!("{sep}key: {}", lossy(k)));
            sep = " ";
        }
        if let Some(v) = r.value {
            line.push_str(&format!("{sep}payload: {}", lossy(v)));
        }
        if !r.headers.is_empty() {
            line.push_str(&format!(" headers: {}", headers_text(r)));
        }
    }
    line
}

/// One record of a batch with header `h`, at `offset`, as JSON; with its key, value and headers
/// when `print_data`.
fn record_json(h: &BatchHeader, r: &Record, offset: i64, print_data: bool) -> Value {
    let ts = r.timestamp(h.base_timestamp, h.max_timestamp, h.timestamp_type());
    let key_size = r.key.map_or(-1, |k| k.len() as i64);
    let value_size = r.value.map_or(-1, |v| v.len() as i64);
    let mut v = json!({
        "offset": offset,
        "timestamp": ts,
        "key_size": key_size,
        "value_size": value_size,
        "sequence": record_sequence(h, r),
        "header_count": r.headers.len(),
        "header_keys": r.headers.iter().map(|hd| lossy(hd.key)).collect::<Vec<_>>(),
    });
    if print_data {
        v["key"] = json!(r.key.map(lossy));
        v["value"] = json!(r.value.map(lossy));
        v["headers"] = json!(r
            .headers
            .iter()
            .map(|hd| json!({"key": lossy(hd.key), "value": hd.value.map(lossy)}))
            .collect::<Vec<_>>());
    }
    v
}

fn dump_log(path: &Path, args: &Args, out: &mut Out, st: &mut Status) -> std::io::Result<()> {
    let mut w = LogWalker::open(path, args.max_bytes)?;
    let base = indexcheck::base_offset_from_name(path);
    match base {
        Some(b) => out.line(format!("Log starting offset: {b}"))?,
        None => out.line("Log starting offset: unknown (the file name has no offset)")?,
    }
    out.field("kind", &"log")?;
    out.field("base_offset", &base)?;
    out.field("file_len", &w.file_len())?;
    let deep = args.deep_iteration || args.print_data_log;
    let (mut n, mut records, mut bad_crc) = (0u64, 0u64, 0u64);
    let mut gaps =
        Gaps { path, last_offset: None, list: Capped::default(), err: std::io::BufWriter::new(std::io::stderr()) };
    let mut record_errors = Capped::default();
    out.key("batches")?;
    out.begin_array()?;
    while let Some((b, bytes)) = w.next_batch()? {
        n += 1;
        records += b.header.records_count.max(0) as u64;
        if !b.crc_ok() {
            bad_crc += 1;
        }
        out.line(batch_line(&b))?;
        if !deep {
            out.value(&batch_json(&b))?;
            continue;
        }
        if let Some(e) = dump_batch_with_records(&b, bytes, args, out, &mut gaps)? {
            record_errors.push(e);
        }
    }
    out.end()?;
    gaps.err.flush()?;
    let end = w.end_state();
    let valid_bytes = w.position();
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    if end.invalid_bytes() > 0 {
        out.line(format!("Found {} invalid bytes at the end of {name}", end.invalid_bytes()))?;
        out.line(format!("{}: {}", path.display(), end.describe()))?;
    }
    out.line(format!(
        "Summary: {n} batches, {records} records, {bad_crc} invalid CRCs, {valid_bytes} of {} bytes in whole batches, {}",
        w.file_len(),
        end.describe()
    ))?;
    if bad_crc > 0 || end.problem_position().is_some() || record_errors.total > 0 {
        st.damage = true;
    }
    out.field(
        "summary",
        &json!({
            "batches": n,
            "records": records,
            "invalid_crcs": bad_crc,
            "valid_bytes": valid_bytes,
            "non_consecutive_offsets": gaps.list.items,
            "non_consecutive_offsets_count": gaps.list.total,
            "record_errors": record_errors.items,
            "record_errors_count": record_errors.total,
        }),
    )?;
    out.field("end", &end_json(&end))
}

/// Batch `b` with its records (`bytes`: the whole batch, `None` when it is too large to hold in
/// memory). Returns the records' error, if one stopped them.
fn dump_batch_with_records(
    b: &BatchInfo,
    bytes: Option<&[u8]>,
    args: &Args,
    out: &mut Out,
    gaps: &mut Gaps,
) -> std::io::Result<Option<String>> {
    out.begin_object()?;
    out.fields(&batch_json(b))?;
    out.key("records")?;
    out.begin_array()?;
    let err = match bytes {
        Some(bytes) => dump_records(b, bytes, args, out, gaps)?,
        None => {
            // Not damage: the batch's CRC was checked (in chunks); only its records are not
            // shown.
            out.line(format!(
                "| records of the batch at byte {} not decoded: {} bytes, more than the tools hold in memory ({MAX_BATCH_IN_MEMORY})",
                b.position,
                b.size()
            ))?;
            None
        }
    };
    out.end()?;
    out.end()?;
    Ok(err)
}

/// The sibling `.log` of an index file, walked, or why not.
fn sibling_log(path: &Path) -> Result<LogSummary, String> {
    let log = indexcheck::sibling(path, "log");
    if std::fs::symlink_metadata(&log).is_err() {
        return Err(format!("{}: no segment log {} to check against", path.display(), log.display()));
    }
    crate::logscan::summarize_log(&log, |_, _| {}).map_err(|e| format!("{}: {e}", log.display()))
}

fn padding_line(out: &mut Out, p: &indexcheck::Padding) -> std::io::Result<()> {
    if p.trailing_zero_entries > 0 {
        out.line(format!("{} trailing zero entries (preallocated space)", p.trailing_zero_entries))?;
    }
    if p.nonzero_after_stop > 0 {
        out.line(format!(
            "{} non-zero entries after the first zero entry (slot {}): ignored, as Kafka's checks stop at a zero entry",
            p.nonzero_after_stop, p.entries
        ))?;
    }
    if p.partial_bytes > 0 {
        out.line(format!(
            "{} bytes after the last whole entry: the file length is not a multiple of the entry size",
            p.partial_bytes
        ))?;
    }
    Ok(())
}

fn base_of(path: &Path) -> Result<i64, String> {
    indexcheck::base_offset_from_name(path)
        .ok_or_else(|| format!("{}: cannot tell the segment's base offset from the file name", path.display()))
}

fn sanity_json(sanity: &Result<(), String>) -> Value {
    json!({"passed": sanity.is_ok(), "detail": sanity.as_ref().err()})
}

fn sanity_only(
    path: &Path,
    sanity: &Result<(), String>,
    out: &mut Out,
    st: &mut Status,
    kind: &str,
) -> Result<(), String> {
    let io = |e: std::io::Error| format!("{}: {e}", path.display());
    match sanity {
        Ok(()) => out.line(format!("{} passed sanity check.", path.display())).map_err(io)?,
        Err(e) => {
            st.damage = true;
            out.line(format!("{} failed sanity check: {e}", path.display())).map_err(io)?;
        }
    }
    out.field("kind", &kind).map_err(io)?;
    out.field("sanity_check", &sanity_json(sanity)).map_err(io)
}

/// The entries of an index, streamed (unless `--verify-index-only`): text lines and the JSON
/// `entries` array.
fn dump_entries<E: IndexEntry>(
    idx: &mut IndexStream<E>,
    args: &Args,
    out: &mut Out,
    line: impl Fn(&E) -> String,
) -> std::io::Result<()> {
    if args.verify_index_only {
        return out.field("entries", &Value::Null);
    }
    out.key("entries")?;
    out.begin_array()?;
    idx.rewind();
    while let Some((_, e)) = idx.next_entry()? {
        out.line(line(&e))?;
        out.value(&e)?;
    }
    out.end()
}

fn dump_offset_index(path: &Path, args: &Args, out: &mut Out, st: &mut Status) -> Result<(), String> {
    let io = |e: std::io::Error| format!("{}: {e}", path.display());
    let base = base_of(path)?;
    let mut idx = OffsetIndexStream::open(path, base).map_err(io)?;
    if idx.slots() == 0 {
        out.line(format!("{} is empty.", path.display())).map_err(io)?;
        if args.index_sanity_check {
            return sanity_only(path, &idx.sanity().map_err(io)?, out, st, "index");
        }
        out.field("kind", &"index").map_err(io)?;
        out.field("base_offset", &base).map_err(io)?;
        out.field("entries", &json!([])).map_err(io)?;
        return out.field("padding", &idx.padding().map_err(io)?).map_err(io);
    }
    if args.index_sanity_check {
        return sanity_only(path, &idx.sanity().map_err(io)?, out, st, "index");
    }
    let mut log = match sibling_log(path) {
        Ok(l) => Some(l),
        Err(e) if args.verify_index_only => return Err(e),
        Err(e) => {
            out.line(format!("note: {e}; entries not checked")).map_err(io)?;
            None
        }
    };
    out.field("kind", &"index").map_err(io)?;
    out.field("base_offset", &base).map_err(io)?;
    out.field("file_len", &idx.file_len).map_err(io)?;
    dump_entries(&mut idx, args, out, |e| format!("offset: {} position: {}", e.offset, e.position)).map_err(io)?;
    let padding = idx.padding().map_err(io)?;
    padding_line(out, &padding).map_err(io)?;
    match &mut log {
        None => out.field("mismatches", &Value::Null).map_err(io)?,
        Some(log) => {
            out.key("mismatches").map_err(io)?;
            out.begin_array().map_err(io)?;
            let mut first = true;
            let mismatches = indexcheck::check_offset_index(&mut idx, log, |m| {
                if std::mem::take(&mut first) {
                    out.line(format!("Mismatches in :{}", path.display()))?;
                }
                out.line(format!(
                    "  Index offset: {}, log offset: {}",
                    m.index_offset,
                    m.log_offset.map_or_else(|| "none".to_owned(), |o| o.to_string())
                ))?;
                out.line(format!("    {}", m.detail))?;
                out.value(&m)
            })
            .map_err(|e| format!("{}: {e}", indexcheck::sibling(path, "log").display()))?;
            out.end().map_err(io)?;
            if mismatches > 0 {
                st.damage = true;
            }
            out.line(format!(
                "{}: offset index: {} entries checked against the log, {} mismatches",
                path.display(),
                padding.entries,
                mismatches
            ))
            .map_err(io)?;
        }
    }
    out.field("entries_checked", &padding.entries).map_err(io)?;
    out.field("padding", &padding).map_err(io)?;
    out.field("sanity_check", &sanity_json(&idx.sanity().map_err(io)?)).map_err(io)
}

fn dump_time_index(path: &Path, args: &Args, out: &mut Out, st: &mut Status) -> Result<(), String> {
    let io = |e: std::io::Error| format!("{}: {e}", path.display());
    let base = base_of(path)?;
    let mut idx = TimeIndexStream::open(path, base).map_err(io)?;
    if args.index_sanity_check {
        return sanity_only(path, &idx.sanity().map_err(io)?, out, st, "timeindex");
    }
    let mut log = match sibling_log(path) {
        Ok(l) => Some(l),
        Err(e) if args.verify_index_only => return Err(e),
        Err(e) => {
            out.line(format!("note: {e}; entries not checked")).map_err(io)?;
            None
        }
    };
    out.field("kind", &"timeindex").map_err(io)?;
    out.field("base_offset", &base).map_err(io)?;
    out.field("file_len", &idx.file_len).map_err(io)?;
    dump_entries(&mut idx, args, out, |e| format!("timestamp: {} offset: {}", e.timestamp, e.offset)).map_err(io)?;
    let padding = idx.padding().map_err(io)?;
    padding_line(out, &padding).map_err(io)?;
    let flavour = match &mut log {
        None => {
            out.field("entry_flavours", &Value::Null).map_err(io)?;
            out.field("errors", &Value::Null).map_err(io)?;
            None
        }
        Some(log) => Some(check_time_entries(path, &mut idx, log, padding.entries, out, st)?),
    };
    out.field("entries_checked", &padding.entries).map_err(io)?;
    out.field("padding", &padding).map_err(io)?;
    out.field("sanity_check", &sanity_json(&idx.sanity().map_err(io)?)).map_err(io)?;
    out.field("flavour", &flavour).map_err(io)
}

/// Checks every entry of the time index `idx` (at `path`, `entries` of them) against its
/// segment's walked `log`, printing the errors (and in JSON each entry's flavour); returns the
/// file's flavour.
fn check_time_entries(
    path: &Path,
    idx: &mut TimeIndexStream,
    log: &mut LogSummary,
    entries: usize,
    out: &mut Out,
    st: &mut Status,
) -> Result<indexcheck::FileFlavour, String> {
    let io = |e: std::io::Error| format!("{}: {e}", path.display());
    let log_path = log.path.clone();
    let log_err = |e: std::io::Error| format!("{}: {e}", log_path.display());
    // JSON: the entries' flavours and the errors are two arrays, so two passes.
    if out.json() {
        out.key("entry_flavours").map_err(io)?;
        out.begin_array().map_err(io)?;
        indexcheck::check_time_index(idx, log, |ev| match ev {
            TimeCheckEvent::Entry(f) => out.value(&f),
            TimeCheckEvent::Error(_) => Ok(()),
        })
        .map_err(log_err)?;
        out.end().map_err(io)?;
        out.key("errors").map_err(io)?;
        out.begin_array().map_err(io)?;
    }
    let check = indexcheck::check_time_index(idx, log, |ev| match ev {
        TimeCheckEvent::Entry(..) => Ok(()),
        TimeCheckEvent::Error(e) => {
            out.line(format!("{}: {}", path.display(), e.describe()))?;
            out.value(&e)
        }
    })
    .map_err(log_err)?;
    out.end().map_err(io)?;
    if check.errors > 0 {
        st.damage = true;
    }
    out.line(format!(
        "{}: time index: {} entries checked against the log, flavour: {}, {} errors",
        path.display(),
        entries,
        check.flavour.describe(),
        check.errors
    ))
    .map_err(io)?;
    Ok(check.flavour)
}
