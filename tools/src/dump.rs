//! `seglog dump FILES...`: kafka-dump-log for Kafka's on-disk files.
//!
//! Text output follows kafka-dump-log's line formats (`baseOffset: … isvalid: true`,
//! `| offset: …`, `offset: … position: …`, `timestamp: … offset: …`) so scripts written for it
//! keep working; seglog adds lines of its own for what Kafka's tool leaves out (how a `.log`
//! ends, zero padding of an index, the time-index flavour). `--json` prints one JSON document.
//! Nothing is written to the files.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use seglog::format::batch::BatchHeader;
use seglog::format::filename::FileKind;
use seglog::format::record::{self, Record};
use serde_json::{json, Value};

use crate::indexcheck::{self, OffsetIndexFile, TimeIndexFile};
use crate::layout::{self, CheckpointKind, FileClass};
use crate::logscan::{BatchInfo, LogEnd, LogSummary, LogWalker};
use crate::sidecar;

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

/// Text output, or nothing when JSON is collected instead.
struct Out {
    text: bool,
    w: std::io::BufWriter<std::io::Stdout>,
}

impl Out {
    fn line(&mut self, s: impl AsRef<str>) -> std::io::Result<()> {
        if self.text {
            self.w.write_all(s.as_ref().as_bytes())?;
            self.w.write_all(b"\n")?;
        }
        Ok(())
    }
}

pub fn run(args: Args) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let mut files = args.files.clone();
    files.extend(args.files_opt.iter().cloned());
    if files.is_empty() {
        return Err("no files given (seglog dump FILES..., see --help)".into());
    }
    let mut out = Out { text: !args.json, w: std::io::BufWriter::new(std::io::stdout()) };
    let mut status = Status::default();
    let mut docs = Vec::new();
    for path in &files {
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
        match r {
            Ok(v) => docs.push(v),
            Err(e) => {
                status.error = true;
                out.w.flush()?;
                eprintln!("seglog dump: {e}");
                docs.push(json!({"path": path, "error": e}));
            }
        }
    }
    if args.json {
        let doc = json!({"files": docs, "damage_found": status.damage, "errors": status.error});
        serde_json::to_writer_pretty(&mut out.w, &doc)?;
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

fn dump_file(path: &Path, kind: Kind, args: &Args, out: &mut Out, st: &mut Status) -> Result<Value, String> {
    let io = |e: std::io::Error| format!("{}: {e}", path.display());
    match kind {
        Kind::Log => dump_log(path, args, out, st).map_err(io),
        Kind::Index => dump_offset_index(path, args, out, st),
        Kind::TimeIndex => dump_time_index(path, args, out, st),
        Kind::Snapshot => {
            let bytes = sidecar::read_all(path).map_err(io)?;
            match sidecar::decode_snapshot(&bytes) {
                Ok(entries) => {
                    for e in &entries {
                        out.line(format!(
                            "producerId: {} producerEpoch: {} coordinatorEpoch: {} currentTxnFirstOffset: {} lastSequence: {} lastOffset: {} offsetDelta: {} timestamp: {}",
                            e.producer_id, e.producer_epoch, e.coordinator_epoch, e.current_txn_first_offset,
                            e.last_sequence, e.last_offset, e.offset_delta, e.timestamp
                        )).map_err(io)?;
                    }
                    out.line(format!("{} producers", entries.len())).map_err(io)?;
                    Ok(json!({"path": path, "kind": "snapshot", "producers": entries}))
                }
                Err(e) => {
                    st.damage = true;
                    out.line(format!("corrupt snapshot {}: {e}", path.display())).map_err(io)?;
                    Ok(json!({"path": path, "kind": "snapshot", "problem": e}))
                }
            }
        }
        Kind::TxnIndex => {
            let bytes = sidecar::read_all(path).map_err(io)?;
            match sidecar::decode_txn_index(&bytes) {
                Ok(entries) => {
                    for t in &entries {
                        out.line(format!(
                            "version: {} producerId: {} firstOffset: {} lastOffset: {} lastStableOffset: {}",
                            t.version, t.producer_id, t.first_offset, t.last_offset, t.last_stable_offset
                        ))
                        .map_err(io)?;
                    }
                    Ok(json!({"path": path, "kind": "txnindex", "aborted_transactions": entries}))
                }
                Err(e) => {
                    st.damage = true;
                    out.line(format!("corrupt transaction index {}: {e}", path.display())).map_err(io)?;
                    Ok(json!({"path": path, "kind": "txnindex", "problem": e}))
                }
            }
        }
        Kind::Checkpoint(k) => match sidecar::decode_checkpoint(path, k) {
            Ok(d) => {
                for l in &d.lines {
                    out.line(l).map_err(io)?;
                }
                Ok(json!({"path": path, "kind": "checkpoint", "contents": d.json}))
            }
            Err((true, e)) => Err(e),
            Err((false, e)) => {
                st.damage = true;
                out.line(format!("invalid checkpoint file: {e}")).map_err(io)?;
                Ok(json!({"path": path, "kind": "checkpoint", "problem": e}))
            }
        },
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
    let type_id = i16::from_be_bytes([k[2], k[3]]);
    let name = usize::try_from(type_id).ok().and_then(|i| CONTROL_TYPES.get(i)).copied().unwrap_or("UNKNOWN");
    match (type_id, r.value) {
        (0 | 1, Some(v)) if v.len() >= 6 => {
            format!(" endTxnMarker: {name} coordinatorEpoch: {}", i32::from_be_bytes([v[2], v[3], v[4], v[5]]))
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

/// Prints (or collects) the records of one batch. Returns the records' JSON, and an error text
/// when they could not be decoded.
fn dump_records(
    b: &BatchInfo,
    bytes: &[u8],
    args: &Args,
    out: &mut Out,
    last_offset: &mut Option<i64>,
    gaps: &mut Vec<(i64, i64)>,
) -> std::io::Result<(Vec<Value>, Option<String>)> {
    let h = &b.header;
    let print_data = args.print_data_log;
    let mut scratch = Vec::new();
    let mut recs = Vec::new();
    let iter = match record::batch_records(bytes, &mut scratch) {
        Ok(i) => i,
        Err(e) => {
            let msg = format!("records of the batch at byte {} cannot be read: {e}", b.position);
            out.line(format!("| {msg}"))?;
            return Ok((recs, Some(msg)));
        }
    };
    for r in iter {
        let r = match r {
            Ok(r) => r,
            Err(e) => {
                let msg = format!("record error in the batch at byte {}: {e}", b.position);
                out.line(format!("| {msg}"))?;
                return Ok((recs, Some(msg)));
            }
        };
        let offset = r.offset(h.base_offset);
        if let Some(l) = *last_offset {
            if offset != l + 1 {
                gaps.push((l, offset));
            }
        }
        *last_offset = Some(offset);
        let ts = r.timestamp(h.base_timestamp, h.max_timestamp, h.timestamp_type());
        let key_size = r.key.map_or(-1, |k| k.len() as i64);
        let value_size = r.value.map_or(-1, |v| v.len() as i64);
        if out.text {
            let mut line = String::from("|");
            let mut sep = " ";
            if !args.skip_record_metadata {
                let keys: Vec<String> = r.headers.iter().map(|hd| lossy(hd.key)).collect();
                line.push_str(&format!(
                    " offset: {offset} {}: {ts} keySize: {key_size} valueSize: {value_size} sequence: {} headerKeys: [{}]",
                    h.timestamp_type().name(),
                    record_sequence(h, &r),
                    keys.join(",")
                ));
                if h.is_control() {
                    line.push_str(&control_text(&r));
                }
            }
            if print_data && !h.is_control() {
                if let Some(k) = r.key {
                    line.push_str(&format!("{sep}key: {}", lossy(k)));
                    sep = " ";
                }
                if let Some(v) = r.value {
                    line.push_str(&format!("{sep}payload: {}", lossy(v)));
                }
                if !r.headers.is_empty() {
                    line.push_str(&format!(" headers: {}", headers_text(&r)));
                }
            }
            out.line(line)?;
        } else {
            let mut v = json!({
                "offset": offset,
                "timestamp": ts,
                "key_size": key_size,
                "value_size": value_size,
                "sequence": record_sequence(h, &r),
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
            recs.push(v);
        }
    }
    Ok((recs, None))
}

fn dump_log(path: &Path, args: &Args, out: &mut Out, st: &mut Status) -> std::io::Result<Value> {
    let base = indexcheck::base_offset_from_name(path);
    match base {
        Some(b) => out.line(format!("Log starting offset: {b}"))?,
        None => out.line("Log starting offset: unknown (the file name has no offset)")?,
    }
    let deep = args.deep_iteration || args.print_data_log;
    let mut w = LogWalker::open(path, args.max_bytes)?;
    let mut batches = Vec::new();
    let (mut n, mut records, mut bad_crc) = (0u64, 0u64, 0u64);
    let mut last_offset = None;
    let mut gaps = Vec::new();
    let mut record_errors = Vec::new();
    while let Some((b, bytes)) = w.next_batch()? {
        n += 1;
        records += b.header.records_count.max(0) as u64;
        if !b.crc_ok() {
            bad_crc += 1;
        }
        out.line(batch_line(&b))?;
        let mut j = batch_json(&b);
        if deep {
            let (recs, err) = dump_records(&b, bytes, args, out, &mut last_offset, &mut gaps)?;
            if !out.text {
                j["records"] = json!(recs);
            }
            if let Some(e) = err {
                record_errors.push(e);
            }
        }
        if !out.text {
            batches.push(j);
        }
    }
    let end = w.end_state();
    let valid_bytes = w.position();
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    if end.invalid_bytes() > 0 {
        out.line(format!("Found {} invalid bytes at the end of {name}", end.invalid_bytes()))?;
        out.line(format!("{}: {}", path.display(), end.describe()))?;
    }
    if !gaps.is_empty() && out.text {
        out.w.flush()?;
        eprintln!("Non-consecutive offsets in {}", path.display());
        for (a, b) in &gaps {
            eprintln!("  {a} is followed by {b}");
        }
    }
    out.line(format!(
        "Summary: {n} batches, {records} records, {bad_crc} invalid CRCs, {valid_bytes} of {} bytes in whole batches, {}",
        w.file_len(),
        end.describe()
    ))?;
    if bad_crc > 0 || end.problem_position().is_some() || !record_errors.is_empty() {
        st.damage = true;
    }
    Ok(json!({
        "path": path,
        "kind": "log",
        "base_offset": base,
        "file_len": w.file_len(),
        "batches": batches,
        "summary": {
            "batches": n,
            "records": records,
            "invalid_crcs": bad_crc,
            "valid_bytes": valid_bytes,
            "non_consecutive_offsets": gaps,
            "record_errors": record_errors,
        },
        "end": end_json(&end),
    }))
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

fn sanity_only(
    path: &Path,
    sanity: &Result<(), String>,
    out: &mut Out,
    st: &mut Status,
    kind: &str,
) -> Result<Value, String> {
    let io = |e: std::io::Error| format!("{}: {e}", path.display());
    match sanity {
        Ok(()) => out.line(format!("{} passed sanity check.", path.display())).map_err(io)?,
        Err(e) => {
            st.damage = true;
            out.line(format!("{} failed sanity check: {e}", path.display())).map_err(io)?;
        }
    }
    Ok(json!({"path": path, "kind": kind, "sanity_check": {"passed": sanity.is_ok(), "detail": sanity.as_ref().err()}}))
}

fn dump_offset_index(path: &Path, args: &Args, out: &mut Out, st: &mut Status) -> Result<Value, String> {
    let io = |e: std::io::Error| format!("{}: {e}", path.display());
    let base = base_of(path)?;
    let idx = OffsetIndexFile::read(path, base).map_err(io)?;
    if idx.padding.slots == 0 {
        out.line(format!("{} is empty.", path.display())).map_err(io)?;
        if args.index_sanity_check {
            return sanity_only(path, &idx.sanity, out, st, "index");
        }
        return Ok(json!({"path": path, "kind": "index", "base_offset": base, "entries": [], "padding": idx.padding}));
    }
    if args.index_sanity_check {
        return sanity_only(path, &idx.sanity, out, st, "index");
    }
    let log = match sibling_log(path) {
        Ok(l) => Some(l),
        Err(e) if args.verify_index_only => return Err(e),
        Err(e) => {
            out.line(format!("note: {e}; entries not checked")).map_err(io)?;
            None
        }
    };
    let check = log.as_ref().map(|l| indexcheck::check_offset_index(&idx, l));
    if !args.verify_index_only {
        for e in &idx.entries {
            out.line(format!("offset: {} position: {}", e.offset, e.position)).map_err(io)?;
        }
    }
    padding_line(out, &idx.padding).map_err(io)?;
    if let Some(c) = &check {
        if !c.mismatches.is_empty() {
            st.damage = true;
            out.line(format!("Mismatches in :{}", path.display())).map_err(io)?;
            for m in &c.mismatches {
                out.line(format!(
                    "  Index offset: {}, log offset: {}",
                    m.index_offset,
                    m.log_offset.map_or_else(|| "none".to_owned(), |o| o.to_string())
                ))
                .map_err(io)?;
                out.line(format!("    {}", m.detail)).map_err(io)?;
            }
        }
        out.line(format!(
            "{}: offset index: {} entries checked against the log, {} mismatches",
            path.display(),
            idx.entries.len(),
            c.mismatches.len()
        ))
        .map_err(io)?;
    }
    Ok(json!({
        "path": path,
        "kind": "index",
        "base_offset": base,
        "file_len": idx.file_len,
        "entries": if args.verify_index_only { json!(null) } else { json!(idx.entries) },
        "entries_checked": idx.entries.len(),
        "padding": idx.padding,
        "sanity_check": {"passed": idx.sanity.is_ok(), "detail": idx.sanity.as_ref().err()},
        "mismatches": check.map(|c| c.mismatches),
    }))
}

fn dump_time_index(path: &Path, args: &Args, out: &mut Out, st: &mut Status) -> Result<Value, String> {
    let io = |e: std::io::Error| format!("{}: {e}", path.display());
    let base = base_of(path)?;
    let idx = TimeIndexFile::read(path, base).map_err(io)?;
    if args.index_sanity_check {
        return sanity_only(path, &idx.sanity, out, st, "timeindex");
    }
    let log = match sibling_log(path) {
        Ok(l) => Some(l),
        Err(e) if args.verify_index_only => return Err(e),
        Err(e) => {
            out.line(format!("note: {e}; entries not checked")).map_err(io)?;
            None
        }
    };
    let check = match &log {
        Some(l) => Some(indexcheck::check_time_index(&idx, l).map_err(io)?),
        None => None,
    };
    if !args.verify_index_only {
        for e in &idx.entries {
            out.line(format!("timestamp: {} offset: {}", e.timestamp, e.offset)).map_err(io)?;
        }
    }
    padding_line(out, &idx.padding).map_err(io)?;
    if let Some(c) = &check {
        if !c.errors.is_empty() {
            st.damage = true;
            for e in &c.errors {
                out.line(format!("{}: {}", path.display(), e.describe())).map_err(io)?;
            }
        }
        out.line(format!(
            "{}: time index: {} entries checked against the log, flavour: {}, {} errors",
            path.display(),
            idx.entries.len(),
            c.flavour.describe(),
            c.errors.len()
        ))
        .map_err(io)?;
    }
    Ok(json!({
        "path": path,
        "kind": "timeindex",
        "base_offset": base,
        "file_len": idx.file_len,
        "entries": if args.verify_index_only { json!(null) } else { json!(idx.entries) },
        "entries_checked": idx.entries.len(),
        "padding": idx.padding,
        "sanity_check": {"passed": idx.sanity.is_ok(), "detail": idx.sanity.as_ref().err()},
        "flavour": check.as_ref().map(|c| c.flavour),
        "entry_flavours": check.as_ref().map(|c| c.entry_flavours.clone()),
        "errors": check.map(|c| c.errors),
    }))
}
