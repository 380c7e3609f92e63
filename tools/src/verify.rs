//! `seglog verify DIR`: checks every byte Kafka would trust in a partition directory or a whole
//! tree of them, without changing anything.
//!
//! Damage (exit code 1): a batch whose CRC-32C fails, an entry Kafka's reader refuses, a torn
//! tail (partial last batch, or zeros after the last batch), offsets that do not increase across
//! batches and segments, a batch below its segment's base offset, an index entry that does not
//! match its log, an index that fails Kafka's sanity check, a sidecar file that does not parse, a
//! `.txnindex` whose entries are not the ones the log's ABORT markers give (`txncheck`).
//! Not damage (reported as notes): a missing `.index` or `.timeindex` (Kafka rebuilds or creates
//! it at load), an index not trimmed (zero padding), files Kafka keeps beside segments, unknown
//! files.
//!
//! A file named like a segment or sidecar file that is not a regular file (a FIFO, a socket, a
//! directory, a symbolic link) is damage of kind `file-type`; it is never opened for reading in a
//! way that could block, and the rest of the partition is checked.
//!
//! Memory is bounded whatever the files hold: logs and indexes are read in bounded chunks and
//! checked as they are read, and only the first `--max-problems` problems of each file are kept
//! (every problem is counted).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use seglog::format::record;
use serde::Serialize;

use crate::files::{self, thousands};
use crate::indexcheck::{self, FileFlavour, IndexEntry, IndexStream, OffsetEntryAbs, TimeCheckEvent, TimeEntryAbs};
use crate::layout::{self, PartitionDir};
use crate::logscan::{self, BatchInfo, LogSummary, MAX_BATCH_IN_MEMORY};
use crate::progress::Progress;
use crate::sidecar;
use crate::txncheck;
use crate::units::human_bytes;

#[derive(clap::Args, Debug)]
#[command(after_help = crate::EXIT_CODES)]
pub struct Args {
    /// A partition directory (`<topic>-<partition>`) or any directory above partition directories
    /// (a Kafka log directory, or a tree of them); partition directories are found up to 8
    /// levels down.
    dir: PathBuf,
    /// Also decode every record of every batch (decompressing when needed), not only the batch
    /// framing and CRC.
    #[arg(long)]
    deep: bool,
    /// Print one JSON document instead of text.
    #[arg(long)]
    json: bool,
    /// Print only problems and the summary, not the per-partition lines and notes.
    #[arg(long, short)]
    quiet: bool,
    /// List every problem kept; by default, after 5 problems of one kind in one file the rest are
    /// counted (--json always lists every one kept).
    #[arg(long)]
    all: bool,
    /// Problems kept (and listed by --all and --json) per file; the rest are only counted, so
    /// that memory stays bounded whatever a file holds.
    #[arg(long, value_name = "N", default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..))]
    max_problems: u64,
}

/// One piece of damage: which file, where in it, what.
#[derive(Clone, Debug, Serialize)]
pub struct Problem {
    pub file: PathBuf,
    /// Byte position in `file`, when the problem has one.
    pub position: Option<u64>,
    pub kind: &'static str,
    pub detail: String,
}

/// What verify found in one partition directory.
#[derive(Clone, Debug, Default, Serialize)]
pub struct PartitionReport {
    pub path: PathBuf,
    pub topic: Option<String>,
    pub partition: Option<i32>,
    pub segments: usize,
    pub batches: u64,
    pub records: u64,
    pub bytes: u64,
    /// First and next offset of the data found, when there is any.
    pub first_offset: Option<i64>,
    pub next_offset: Option<i64>,
    pub offset_index_entries: u64,
    pub time_index_entries: u64,
    /// How many time-index files follow each convention.
    pub time_index_flavours: BTreeMap<String, usize>,
    #[serde(skip)]
    pub problems: ProblemList,
    pub notes: Vec<String>,
}

impl PartitionReport {
    fn add(&mut self, p: Problem) {
        self.problems.push(p);
    }

    fn json(&self) -> serde_json::Result<serde_json::Value> {
        let mut v = serde_json::to_value(self)?;
        self.problems.add_json(&mut v)?;
        Ok(v)
    }
}

/// The problems of a partition (or of the log directory's own files), in bounded memory: the
/// first `max_per_file` of each file are kept, and every one is counted by file.
#[derive(Clone, Debug, Default)]
pub struct ProblemList {
    kept: Vec<Problem>,
    max_per_file: usize,
    total: usize,
    /// Problems per file, kept or not.
    by_file: BTreeMap<PathBuf, usize>,
}

impl ProblemList {
    fn new(max_per_file: u64) -> ProblemList {
        ProblemList { max_per_file: usize::try_from(max_per_file).unwrap_or(usize::MAX), ..Default::default() }
    }

    fn push(&mut self, p: Problem) {
        self.total += 1;
        let n = match self.by_file.get_mut(p.file.as_path()) {
            Some(n) => {
                *n += 1;
                *n
            }
            None => {
                self.by_file.insert(p.file.clone(), 1);
                1
            }
        };
        if n <= self.max_per_file {
            self.kept.push(p);
        }
    }

    /// Every problem, kept or not.
    pub fn len(&self) -> usize {
        self.total
    }

    pub fn is_empty(&self) -> bool {
        self.total == 0
    }

    /// Files whose problems were not all kept, and how many were not.
    fn not_kept(&self) -> impl Iterator<Item = (&Path, usize)> {
        self.by_file.iter().filter(|(_, n)| **n > self.max_per_file).map(|(f, n)| (f.as_path(), n - self.max_per_file))
    }

    /// `problems` (the kept ones), `problem_count` and `problems_not_listed` into a JSON object.
    fn add_json(&self, v: &mut serde_json::Value) -> serde_json::Result<()> {
        v["problems"] = serde_json::to_value(&self.kept)?;
        v["problem_count"] = self.total.into();
        v["problems_not_listed"] = self
            .not_kept()
            .map(|(f, n)| serde_json::json!({"file": f.to_string_lossy(), "count": n}))
            .collect::<Vec<_>>()
            .into();
        Ok(())
    }
}

/// Totals over the whole run.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Totals {
    pub partitions: usize,
    pub segments: usize,
    pub batches: u64,
    pub records: u64,
    pub bytes: u64,
    pub problems: usize,
    pub notes: usize,
}

/// The previous batch seen in this partition, for the offset-order check.
struct Prev {
    last_offset: i64,
    file: PathBuf,
    position: u64,
}

fn problem(file: &Path, position: Option<u64>, kind: &'static str, detail: String) -> Problem {
    Problem { file: file.to_path_buf(), position, kind, detail }
}

/// Checks one segment's `.log` as it is walked, returning its summary.
fn check_log(
    log_path: &Path,
    base: i64,
    deep: bool,
    prev: &mut Option<Prev>,
    r: &mut PartitionReport,
    mut valid_batch: impl FnMut(&BatchInfo, Option<&[u8]>),
) -> std::io::Result<LogSummary> {
    let summary = logscan::summarize_log(log_path, |b, bytes| {
        if b.crc_ok() {
            valid_batch(b, bytes);
        }
        let h = &b.header;
        if deep && b.crc_ok() {
            check_records(log_path, b, bytes, r);
        }
        check_batch(log_path, base, b, r);
        check_follows(log_path, b, prev, r);
        r.batches += 1;
        r.records += h.records_count.max(0) as u64;
        r.first_offset.get_or_insert(h.base_offset);
        r.next_offset = Some(b.last_offset().saturating_add(1));
    })?;
    if let Some(pos) = summary.end.problem_position() {
        let kind = if matches!(summary.end, logscan::LogEnd::Corrupt { .. }) { "corrupt" } else { "torn-tail" };
        r.add(problem(log_path, Some(pos), kind, summary.end.describe()));
    }
    Ok(summary)
}

/// `offsets A..=B` of batch `b`, for messages.
fn offset_range(b: &BatchInfo) -> String {
    format!("offsets {}..={}", b.header.base_offset, b.last_offset())
}

/// `--deep`: decodes every record of batch `b` (its `bytes`, `None` when it is too large to
/// hold in memory, which is noted).
fn check_records(log_path: &Path, b: &BatchInfo, bytes: Option<&[u8]>, r: &mut PartitionReport) {
    let range = offset_range(b);
    match bytes {
        None => r.notes.push(format!(
            "{}: the batch at byte {} ({range}) is {} bytes, more than the tools decode ({MAX_BATCH_IN_MEMORY}): its records were not checked",
            log_path.display(),
            b.position,
            b.size()
        )),
        Some(bytes) => {
            let mut scratch = Vec::new();
            let res = record::batch_records(bytes, &mut scratch).and_then(|it| {
                for rec in it {
                    rec?;
                }
                Ok(())
            });
            if let Err(e) = res {
                r.add(problem(
                    log_path,
                    Some(b.position),
                    "records",
                    format!("records of the batch at byte {} ({range}) cannot be decoded: {e}", b.position),
                ));
            }
        }
    }
}

/// Batch `b` on its own: its CRC, its counts, its codec, and its offsets against the segment's
/// `base`.
fn check_batch(log_path: &Path, base: i64, b: &BatchInfo, r: &mut PartitionReport) {
    let h = &b.header;
    let at = Some(b.position);
    let range = offset_range(b);
    if !b.crc_ok() {
        r.add(problem(
            log_path,
            at,
            "crc",
            format!(
                "CRC-32C mismatch in the batch at byte {} ({range}): stored {:#010x}, computed {:#010x}",
                b.position, h.crc, b.computed_crc
            ),
        ));
    }
    if h.last_offset_delta < 0 || h.records_count < 0 {
        r.add(problem(
            log_path,
            at,
            "batch",
            format!(
                "batch at byte {} has lastOffsetDelta {} and recordsCount {}",
                b.position, h.last_offset_delta, h.records_count
            ),
        ));
    }
    if let Err(e) = h.compression() {
        r.add(problem(log_path, at, "batch", format!("batch at byte {}: {e}", b.position)));
    }
    if h.base_offset < base {
        r.add(problem(
            log_path,
            at,
            "offsets",
            format!("batch at byte {} ({range}) starts below the segment's base offset {base}", b.position),
        ));
    } else if b.last_offset().saturating_sub(base) > i32::MAX as i64 {
        r.add(problem(
            log_path,
            at,
            "offsets",
            format!(
                "batch at byte {} ({range}) is more than 2^31-1 offsets past the segment's base {base}",
                b.position
            ),
        ));
    }
}

/// Batch `b` must start after the batch before it, `prev` (in this segment or the one before);
/// then it becomes `prev`.
fn check_follows(log_path: &Path, b: &BatchInfo, prev: &mut Option<Prev>, r: &mut PartitionReport) {
    let h = &b.header;
    match prev.as_mut() {
        Some(p) => {
            if h.base_offset <= p.last_offset {
                let where_prev = if p.file == log_path {
                    format!("the batch at byte {}", p.position)
                } else {
                    format!("the batch at byte {} of {}", p.position, p.file.display())
                };
                r.add(problem(
                    log_path,
                    Some(b.position),
                    "offsets",
                    format!(
                        "batch at byte {} ({}) does not follow {where_prev}, which ends at offset {}",
                        b.position,
                        offset_range(b),
                        p.last_offset
                    ),
                ));
            }
            if p.file != log_path {
                p.file = log_path.to_path_buf();
            }
            p.last_offset = b.last_offset();
            p.position = b.position;
        }
        None => *prev = Some(Prev { last_offset: b.last_offset(), file: log_path.to_path_buf(), position: b.position }),
    }
}

/// A file that is not a regular file, as damage; any other error as the command's error.
fn not_regular_or(path: &Path, e: std::io::Error, r: &mut PartitionReport) -> Result<(), String> {
    if files::as_not_regular(&e).is_some() {
        r.add(problem(path, None, "file-type", e.to_string()));
        Ok(())
    } else {
        Err(format!("{}: {e}", path.display()))
    }
}

fn padding_notes(path: &Path, p: &indexcheck::Padding, entry_size: u64, last: bool, r: &mut PartitionReport) {
    if p.trailing_zero_entries > 0 {
        let why = if last {
            "the active segment's index was not trimmed (Kafka trims at clean shutdown, rebuilds after a crash)"
        } else {
            "not trimmed at roll"
        };
        r.notes.push(format!(
            "{}: {} trailing zero entries (preallocated space): {why}",
            path.display(),
            p.trailing_zero_entries
        ));
    }
    if p.nonzero_after_stop > 0 {
        r.add(problem(
            path,
            Some(p.entries as u64 * entry_size),
            "index",
            format!(
                "{} non-zero entries after the zero entry at slot {} (byte {}): the index is not sorted",
                p.nonzero_after_stop,
                p.entries,
                p.entries as u64 * entry_size
            ),
        ));
    }
}

fn check_indexes(
    seg: &layout::SegmentFiles,
    next_base: Option<i64>,
    log: &mut LogSummary,
    last: bool,
    r: &mut PartitionReport,
) -> Result<(), String> {
    let base = seg.base_offset;
    let log_path = seg.log.as_ref().expect("segments with a log");
    match &seg.index {
        None => r.notes.push(format!(
            "{}: no .index beside it (not damage: Kafka rebuilds a missing offset index at load)",
            log_path.display()
        )),
        Some(path) => check_offset_index(path, base, log_path, log, last, r)?,
    }
    match &seg.time_index {
        None => r.notes.push(format!(
            "{}: no .timeindex beside it (not damage: Kafka creates an empty one at load)",
            log_path.display()
        )),
        Some(path) => check_time_index(path, base, log_path, log, last, r)?,
    }
    if let Some(path) = &seg.txn_index {
        match sidecar::TxnIndex::open(path) {
            Err(e) => not_regular_or(path, e, r)?,
            Ok(t) => {
                let rules = seglog::log::TxnIndexRules::new(base, next_base);
                if let Err(e) = t.each_in(rules, |_| Ok(())).map_err(|e| format!("{}: {e}", path.display()))? {
                    r.add(problem(path, None, "txnindex", e));
                }
            }
        }
    }
    Ok(())
}

/// Opens the index file at `path` (of the segment at `base`; `last`: the active one) and checks
/// what needs no `.log`: Kafka's sanity check (reported as `sanity_kind`) and the zero padding.
/// `None` when the file is not a regular file (reported as such).
fn open_index<E: IndexEntry>(
    path: &Path,
    base: i64,
    last: bool,
    sanity_kind: &'static str,
    r: &mut PartitionReport,
) -> Result<Option<(IndexStream<E>, indexcheck::Padding)>, String> {
    let mut idx = match IndexStream::<E>::open(path, base) {
        Err(e) => return not_regular_or(path, e, r).map(|()| None),
        Ok(idx) => idx,
    };
    let io = |e: std::io::Error| format!("{}: {e}", path.display());
    let pad = idx.padding().map_err(io)?;
    if let Err(e) = idx.sanity().map_err(io)? {
        r.add(problem(path, None, sanity_kind, format!("fails Kafka's sanity check: {e}")));
    }
    padding_notes(path, &pad, E::SIZE as u64, last, r);
    Ok(Some((idx, pad)))
}

/// The `.index` at `path` (of the segment at `base`, whose `.log` at `log_path` was walked into
/// `log`): Kafka's sanity check, its padding, and every entry against the batches.
fn check_offset_index(
    path: &Path,
    base: i64,
    log_path: &Path,
    log: &mut LogSummary,
    last: bool,
    r: &mut PartitionReport,
) -> Result<(), String> {
    let Some((mut idx, pad)) = open_index::<OffsetEntryAbs>(path, base, last, "index-sanity", r)? else {
        return Ok(());
    };
    r.offset_index_entries += pad.entries as u64;
    indexcheck::check_offset_index(&mut idx, log, |m| {
        r.add(problem(path, Some(m.slot as u64 * 8), "index", m.detail));
        Ok(())
    })
    .map_err(|e| format!("{}: {e}", log_path.display()))?;
    Ok(())
}

/// The `.timeindex` at `path`, as [`check_offset_index`] does the `.index`; also counts which
/// flavour of time index it is.
fn check_time_index(
    path: &Path,
    base: i64,
    log_path: &Path,
    log: &mut LogSummary,
    last: bool,
    r: &mut PartitionReport,
) -> Result<(), String> {
    let Some((mut idx, pad)) = open_index::<TimeEntryAbs>(path, base, last, "timeindex-sanity", r)? else {
        return Ok(());
    };
    r.time_index_entries += pad.entries as u64;
    let check = indexcheck::check_time_index(&mut idx, log, |ev| {
        let TimeCheckEvent::Error(e) = ev else {
            return Ok(());
        };
        let slot = match &e {
            // The batch's CRC failure is reported against the log.
            indexcheck::TimeIndexError::CorruptBatch { .. } => return Ok(()),
            indexcheck::TimeIndexError::ShallowOffsetNotFound { slot, .. }
            | indexcheck::TimeIndexError::Mismatch { slot, .. }
            | indexcheck::TimeIndexError::OutOfOrder { slot, .. }
            | indexcheck::TimeIndexError::Records { slot, .. } => *slot,
        };
        r.add(problem(path, Some(slot as u64 * 12), "timeindex", e.describe()));
        Ok(())
    })
    .map_err(|e| format!("{}: {e}", log_path.display()))?;
    if pad.entries > 0 {
        let key = match check.flavour {
            FileFlavour::BatchLastOffset => "batch-last-offset",
            FileFlavour::ExactRecordOffset => "exact-record-offset",
            FileFlavour::Indistinguishable => "indistinguishable",
            FileFlavour::Mixed => "mixed",
            FileFlavour::Unknown => "unknown",
        };
        *r.time_index_flavours.entry(key.into()).or_default() += 1;
    }
    Ok(())
}

fn check_checkpoints(files: &[(PathBuf, layout::CheckpointKind)], problems: &mut ProblemList) -> Result<(), String> {
    for (path, kind) in files {
        // Looked at first so that a FIFO or a link is damage, not the command's error (the read
        // itself refuses them too, race-free).
        if let Err(e) = files::check_regular(path) {
            if files::as_not_regular(&e).is_some() {
                problems.push(problem(path, None, "file-type", e.to_string()));
                continue;
            }
        }
        match sidecar::decode_checkpoint(path, *kind) {
            Ok(_) => {}
            Err((true, e)) => return Err(e),
            Err((false, e)) => problems.push(problem(path, None, "checkpoint", e)),
        }
    }
    Ok(())
}

/// Verifies one partition directory.
pub fn verify_partition(
    p: &PartitionDir,
    deep: bool,
    max_problems: u64,
    progress: &Progress,
) -> Result<PartitionReport, String> {
    let mut r = PartitionReport {
        path: p.path.clone(),
        topic: p.topic_partition.as_ref().map(|(t, _)| t.clone()),
        partition: p.topic_partition.as_ref().map(|(_, n)| *n),
        notes: p.notes.clone(),
        problems: ProblemList::new(max_problems),
        ..Default::default()
    };
    let mut prev: Option<Prev> = None;
    let mut txn = txncheck::TxnReplay::start(p);
    let segs: Vec<_> = p.log_segments().collect();
    if segs.is_empty() {
        r.notes.push(format!("{}: no segments (Kafka creates an empty one at load)", p.path.display()));
    }
    let mut prev_next: Option<(i64, PathBuf)> = None;
    for (i, seg) in segs.iter().enumerate() {
        let log_path = seg.log.as_ref().expect("log segments");
        if let Some((next, file)) = &prev_next {
            if seg.base_offset < *next {
                r.add(problem(
                    log_path,
                    None,
                    "offsets",
                    format!(
                        "segment base offset {} is below the next offset {next} of the previous segment {}",
                        seg.base_offset,
                        file.display()
                    ),
                ));
            }
        }
        // The segment's `.txnindex` against the entries its ABORT markers give.
        let txn_path = seg
            .txn_index
            .clone()
            .unwrap_or_else(|| p.path.join(seglog::format::filename::txn_index_file_name(seg.base_offset)));
        // A file that does not open is reported by the structure check. At most `max_problems`
        // findings are kept per file, the rest counted.
        let keep = max_problems as usize;
        let mut stream = txncheck::TxnStream::open(seg.txn_index.as_deref(), txn.known_from(), keep).ok();
        let mut findings = Vec::new();
        let mut txn_error = None;
        let walked = check_log(log_path, seg.base_offset, deep, &mut prev, &mut r, |b, bytes| {
            if let (Some(t), Some(stream)) = (txn.batch(&b.header, bytes), stream.as_mut()) {
                match stream.expect(t) {
                    Ok(f) => findings.extend(f),
                    Err(e) => txn_error = Some(e),
                }
            }
        });
        let mut summary = match walked {
            Ok(s) => s,
            Err(e) => {
                not_regular_or(log_path, e, &mut r)?;
                continue;
            }
        };
        if let Some(stream) = stream {
            let (rest, unchecked) =
                stream.finish(txn.known_from()).map_err(|e| format!("{}: {e}", txn_path.display()))?;
            findings.extend(rest);
            if unchecked > 0 {
                let why = txn.inexact().unwrap_or_default();
                r.notes.push(format!("{}: {unchecked} entries not checked ({why})", txn_path.display()));
            }
        }
        if let Some(e) = txn_error {
            return Err(format!("{}: {e}", txn_path.display()));
        }
        for f in findings {
            match f {
                txncheck::Finding::Problem(pos, detail) => r.add(problem(&txn_path, pos, "txnindex", detail)),
                txncheck::Finding::Note(n) => r.notes.push(format!("{}: {n}", txn_path.display())),
            }
        }

        let next_base = segs.get(i + 1).map(|s| s.base_offset);
        check_indexes(seg, next_base, &mut summary, i + 1 == segs.len(), &mut r)?;
        if let Some(b) = summary.last {
            prev_next = Some((b.last_offset.saturating_add(1), log_path.clone()));
        }
        r.segments += 1;
        r.bytes += summary.file_len;
        progress.inc(summary.file_len);
    }
    for s in &p.snapshots {
        match sidecar::Snapshot::open(s) {
            Err(e) => not_regular_or(s, e, &mut r)?,
            Ok(snap) => {
                if let Err(e) = snap.check().map_err(|e| format!("{}: {e}", s.display()))? {
                    r.add(problem(s, None, "snapshot", e));
                }
            }
        }
    }
    check_checkpoints(&p.checkpoints, &mut r.problems)?;
    Ok(r)
}

/// Problems of one kind in one file printed before the rest are summarised (a torn or truncated
/// log makes every later index entry wrong; one line each would bury the cause).
const SHOWN_PER_FILE_AND_KIND: usize = 5;

fn print_problems(problems: &ProblemList, all: bool) {
    let mut seen: BTreeMap<(&Path, &str), usize> = BTreeMap::new();
    for p in &problems.kept {
        let n = seen.entry((p.file.as_path(), p.kind)).or_default();
        *n += 1;
        if all || *n <= SHOWN_PER_FILE_AND_KIND {
            println!("  DAMAGE [{}] {}: {}", p.kind, location(p), p.detail);
        }
    }
    for ((file, kind), n) in seen {
        if !all && n > SHOWN_PER_FILE_AND_KIND {
            println!(
                "  DAMAGE [{kind}] {}: ... and {} more problems of this kind (--all lists them)",
                file.display(),
                n - SHOWN_PER_FILE_AND_KIND
            );
        }
    }
    for (file, n) in problems.not_kept() {
        println!(
            "  ... and {} more problems in {} (only the first {} of each file are kept; --max-problems N keeps more)",
            thousands(n as u64),
            file.display(),
            problems.max_per_file
        );
    }
}

fn location(p: &Problem) -> String {
    match p.position {
        Some(pos) => format!("{} at byte {pos}", p.file.display()),
        None => p.file.display().to_string(),
    }
}

pub fn run(args: Args) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let d = layout::discover(&args.dir)?;
    crate::live::warn_if_live(std::iter::once(args.dir.as_path()).chain(d.partitions.iter().map(|p| p.path.as_path())));
    let total_bytes: u64 = d
        .partitions
        .iter()
        .flat_map(|p| p.log_segments())
        .filter_map(|s| s.log.as_ref().and_then(|l| std::fs::metadata(l).ok()))
        .map(|m| m.len())
        .sum();
    let progress = Progress::new(total_bytes, "verifying", true);
    let mut reports = Vec::new();
    for p in &d.partitions {
        reports.push(verify_partition(p, args.deep, args.max_problems, &progress)?);
    }
    let mut root_problems = ProblemList::new(args.max_problems);
    check_checkpoints(&d.checkpoints, &mut root_problems)?;
    progress.finish();

    let t = totals(&reports, &root_problems, &d.notes);
    if d.partitions.is_empty() {
        return Err(format!(
            "{}: no partition directories (<topic>-<partition> with .log files) found",
            args.dir.display()
        )
        .into());
    }

    if args.json {
        let mut doc = serde_json::json!({
            "dir": args.dir,
            "ok": t.problems == 0,
            "totals": t,
            "partitions": reports.iter().map(PartitionReport::json).collect::<serde_json::Result<Vec<_>>>()?,
            "notes": d.notes,
        });
        root_problems.add_json(&mut doc)?;
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        println!("seglog verify {}", args.dir.display());
        for r in &reports {
            if !args.quiet {
                print_partition(r);
            }
            print_problems(&r.problems, args.all);
        }
        print_problems(&root_problems, args.all);
        if !args.quiet {
            for n in &d.notes {
                println!("note: {n}");
            }
        }
        println!(
            "Summary: {} partitions, {} segments, {} batches, {} records, {} bytes ({}); {} problems, {} notes",
            t.partitions,
            t.segments,
            t.batches,
            t.records,
            t.bytes,
            human_bytes(t.bytes),
            t.problems,
            t.notes
        );
    }
    Ok(if t.problems > 0 { ExitCode::from(1) } else { ExitCode::SUCCESS })
}

/// The totals over every partition's report, the log directory's own problems and its notes.
fn totals(reports: &[PartitionReport], root_problems: &ProblemList, root_notes: &[String]) -> Totals {
    let mut t = Totals { partitions: reports.len(), ..Default::default() };
    for r in reports {
        t.segments += r.segments;
        t.batches += r.batches;
        t.records += r.records;
        t.bytes += r.bytes;
        t.problems += r.problems.len();
        t.notes += r.notes.len();
    }
    t.problems += root_problems.len();
    t.notes += root_notes.len();
    t
}

/// One partition's line of the text report, and its notes.
fn print_partition(r: &PartitionReport) {
    let flav = if r.time_index_flavours.is_empty() {
        String::new()
    } else {
        let v: Vec<String> = r.time_index_flavours.iter().map(|(k, n)| format!("{n} {k}")).collect();
        format!("; time indexes: {}", v.join(", "))
    };
    let offsets = match (r.first_offset, r.next_offset) {
        (Some(a), Some(b)) => format!(", offsets {a}..{b}"),
        _ => String::new(),
    };
    println!(
        "{}: {} segments, {} batches, {} records, {}{offsets}, {} index entries checked{flav}: {}",
        r.path.display(),
        r.segments,
        r.batches,
        r.records,
        human_bytes(r.bytes),
        r.offset_index_entries + r.time_index_entries,
        if r.problems.is_empty() { "OK".to_owned() } else { format!("{} PROBLEMS", r.problems.len()) }
    );
    for n in &r.notes {
        println!("  note: {n}");
    }
}
