//! `seglog rebuild-index DIR`: rebuilds each segment's `.index` and `.timeindex` from its `.log`
//! with Kafka's rule (the engine's own `Segment::recover`, run over a read-only overlay so the
//! rebuild happens in memory), and its `.txnindex` from the partition's ABORT markers (the
//! engine's producer replay, `txncheck`), and says per segment whether the result differs from the
//! files on disk and how. A dry run by default; `--write` replaces the files that differ (temporary file,
//! fsync, rename, fsync of the directory).
//!
//! Time indexes written by older brokers name the exact record holding the max timestamp, where a
//! rebuild names the batch's last offset (KAFKA-16310). When that is the only difference (the
//! entries name the same batches and timestamps) it is reported as a flavour difference, not
//! counted, and not rewritten, unless `--strict-flavour`.
//!
//! Memory: one segment at a time; the files on disk are read in chunks and compared with the
//! engine's rebuilt indexes where they lie (no copy). What the engine's recovery holds is checked
//! first or capped, and a segment past a cap is reported as not rebuilt: the rebuilt `.index` and
//! `.timeindex` (each at most `--segment-index-bytes`, Kafka's `segment.index.bytes`, default
//! 10 MiB, past which Kafka cannot append to an index either), the batch it reads whole (at most
//! [`MAX_BATCH_IN_MEMORY`]) and its list of leader-epoch changes (at most [`MAX_EPOCH_CHANGES`]).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use seglog::segment::{Segment, SegmentResources, SegmentSettings};
use serde::Serialize;

use crate::indexcheck::{ends_entries, IndexEntry, IndexStream, OffsetIndexStream, TimeIndexStream};
use crate::layout::{self, PartitionDir, SegmentFiles};
use crate::logscan::{self, LogSummary, MAX_BATCH_IN_MEMORY};
use crate::overlay::OverlayStorage;
use crate::progress::Progress;
use crate::sidecar;
use crate::txncheck::TxnReplay;
use seglog::log::AbortedTxn;

#[derive(clap::Args, Debug)]
#[command(after_help = crate::EXIT_CODES)]
pub struct Args {
    /// A partition directory, or a directory above partition directories.
    dir: PathBuf,
    /// The index.interval.bytes to rebuild with (suffixes allowed: 4KiB).
    #[arg(long, value_name = "N", default_value = "4096", value_parser = parse_interval)]
    index_interval_bytes: u32,
    /// Replace the .index, .timeindex and .txnindex files that differ (write a temporary file, fsync, rename
    /// over the old one, fsync the directory). Without it nothing is written (dry run). Stop the
    /// broker first: seglog refuses when another process holds the log directory's .lock.
    #[arg(long)]
    write: bool,
    /// Count a time index that differs only in flavour (older brokers' exact record offsets
    /// instead of batch last offsets) as a difference, and rewrite it with --write.
    #[arg(long)]
    strict_flavour: bool,
    /// Kafka's segment.index.bytes: the longest .index or .timeindex a rebuild may produce. A
    /// segment whose rebuilt index would be longer is reported as not rebuilt (Kafka cannot append
    /// past it either); the rebuilt indexes are held in memory, so this bounds what a rebuild takes.
    /// Suffixes allowed; at most 2147483647.
    #[arg(long, value_name = "N", default_value = "10MiB", value_parser = crate::units::parse_segment_index_bytes)]
    segment_index_bytes: u32,
    /// Print one JSON document instead of text.
    #[arg(long)]
    json: bool,
}

fn parse_interval(s: &str) -> Result<u32, String> {
    let v = crate::units::parse_bytes(s)?;
    u32::try_from(v)
        .ok()
        .filter(|v| *v <= i32::MAX as u32)
        .ok_or_else(|| format!("{s}: index.interval.bytes must be at most {}", i32::MAX))
}

/// How a rebuilt index compares with the file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "kebab-case")]
pub enum Comparison {
    Same,
    /// The file is missing.
    Missing {
        rebuilt_entries: usize,
    },
    /// Same entries, but the file has zero padding after them (not trimmed).
    NotTrimmed {
        trailing_zero_entries: usize,
    },
    /// Only the time-index flavour differs: same batches, same timestamps.
    FlavourOnly,
    /// Not rebuilt (the segment's `refused` says why).
    NotRebuilt,
    Differs {
        disk_entries: usize,
        rebuilt_entries: usize,
        first_difference: usize,
        disk: Option<String>,
        rebuilt: Option<String>,
    },
}

impl Comparison {
    fn counts(&self, strict_flavour: bool) -> bool {
        match self {
            Comparison::Same => false,
            Comparison::FlavourOnly => strict_flavour,
            _ => true,
        }
    }
    fn describe(&self, what: &str) -> String {
        match self {
            Comparison::Same => format!("{what} same"),
            Comparison::Missing { rebuilt_entries } => format!("{what} missing (rebuilt: {rebuilt_entries} entries)"),
            Comparison::NotTrimmed { trailing_zero_entries } => {
                format!("{what} differs: same entries, but {trailing_zero_entries} trailing zero entries (not trimmed)")
            }
            Comparison::FlavourOnly => {
                format!("{what} equivalent (older broker's exact-record-offset flavour; same batches and timestamps)")
            }
            Comparison::NotRebuilt => format!("{what} not rebuilt"),
            Comparison::Differs { disk_entries, rebuilt_entries, first_difference, disk, rebuilt } => format!(
                "{what} differs: {disk_entries} entries on disk, {rebuilt_entries} rebuilt; first difference at entry {first_difference}: disk {}, rebuilt {}",
                disk.as_deref().unwrap_or("(none)"),
                rebuilt.as_deref().unwrap_or("(none)")
            ),
        }
    }
}

/// How the `.txnindex` the log's ABORT markers give compares with the file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "kebab-case")]
pub enum TxnComparison {
    /// The same entries (none: no file, or an empty one); `other_lso` of them with another last
    /// stable offset than a batch-by-batch replay gives (Kafka's followers compute it after a
    /// whole fetch), which is not a difference.
    Same {
        entries: usize,
        other_lso: usize,
    },
    Differs {
        disk_entries: usize,
        rebuilt_entries: usize,
        detail: String,
    },
    /// Not compared, nor written (why).
    NotChecked {
        why: String,
    },
}

impl TxnComparison {
    fn counts(&self) -> bool {
        matches!(self, TxnComparison::Differs { .. })
    }
    /// The text report's words, `None` for a segment without aborted transactions.
    fn describe(&self) -> Option<String> {
        match self {
            TxnComparison::Same { entries: 0, .. } => None,
            TxnComparison::Same { entries, other_lso: 0 } => Some(format!(".txnindex same ({entries} entries)")),
            TxnComparison::Same { entries, other_lso } => Some(format!(
                ".txnindex same ({entries} entries; {other_lso} with another last stable offset than a batch-by-batch replay, as Kafka's followers write them)"
            )),
            TxnComparison::Differs { disk_entries, rebuilt_entries, detail } => {
                Some(format!(".txnindex differs: {disk_entries} entries on disk, {rebuilt_entries} rebuilt: {detail}"))
            }
            TxnComparison::NotChecked { why } => Some(format!(".txnindex not checked: {why}")),
        }
    }
}

/// The result for one segment.
#[derive(Clone, Debug, Serialize)]
pub struct SegmentResult {
    pub log: PathBuf,
    pub base_offset: i64,
    pub offset_index: Comparison,
    pub time_index: Comparison,
    pub txn_index: TxnComparison,
    /// Why the log could not be rebuilt from in full (torn tail, bad CRC), if so.
    pub log_damage: Option<String>,
    /// Why the indexes were not rebuilt at all (too large to hold), if so.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
    pub differs: bool,
    /// Files replaced (with `--write`).
    pub written: Vec<PathBuf>,
}

/// A rebuilt index's entries, up to Kafka's stop rule as for a file (a rebuild never writes an
/// entry the rule would stop at), decoded from the engine's bytes where they lie.
fn rebuilt_entries<E: IndexEntry>(bytes: &[u8], base: i64) -> impl Iterator<Item = E> + '_ {
    bytes.chunks_exact(E::SIZE).enumerate().map_while(move |(i, slot)| {
        let (e, rel) = E::decode(slot, base);
        (!ends_entries(i, rel)).then_some(e)
    })
}

/// The first entry where the file's entries and `rebuilt` differ: its number, and the file's
/// entry there (`None` when the file's entries end first). Streams the file.
fn first_difference<E: IndexEntry + PartialEq>(
    disk: &mut IndexStream<E>,
    mut rebuilt: impl Iterator<Item = E>,
) -> std::io::Result<(usize, Option<E>)> {
    disk.rewind();
    let mut i = 0;
    while let Some((_, e)) = disk.next_entry()? {
        if rebuilt.next() != Some(e) {
            return Ok((i, Some(e)));
        }
        i += 1;
    }
    Ok((i, None))
}

fn compare_offset(disk: Option<&mut OffsetIndexStream>, rebuilt: &[u8], base: i64) -> std::io::Result<Comparison> {
    let Some(d) = disk else {
        return Ok(Comparison::Missing { rebuilt_entries: rebuilt.len() / 8 });
    };
    if d.bytes_equal(rebuilt)? {
        return Ok(Comparison::Same);
    }
    let entries = || rebuilt_entries::<crate::indexcheck::OffsetEntryAbs>(rebuilt, base);
    let rebuilt_count = entries().count();
    let pad = d.padding()?;
    let (first, disk_first) = first_difference(d, entries())?;
    let same_entries = first == rebuilt_count && pad.entries == rebuilt_count;
    if same_entries && pad.nonzero_after_stop == 0 && pad.partial_bytes == 0 {
        return Ok(Comparison::NotTrimmed { trailing_zero_entries: pad.trailing_zero_entries });
    }
    let show =
        |e: Option<crate::indexcheck::OffsetEntryAbs>| e.map(|e| format!("(offset {}, byte {})", e.offset, e.position));
    Ok(Comparison::Differs {
        disk_entries: pad.slots,
        rebuilt_entries: rebuilt_count,
        first_difference: first,
        disk: show(disk_first),
        rebuilt: show(entries().nth(first)),
    })
}

fn compare_time(
    disk: Option<&mut TimeIndexStream>,
    rebuilt: &[u8],
    base: i64,
    log: &mut LogSummary,
) -> std::io::Result<Comparison> {
    let Some(d) = disk else {
        return Ok(Comparison::Missing { rebuilt_entries: rebuilt.len() / 12 });
    };
    if d.bytes_equal(rebuilt)? {
        return Ok(Comparison::Same);
    }
    let entries = || rebuilt_entries::<crate::indexcheck::TimeEntryAbs>(rebuilt, base);
    let rebuilt_count = entries().count();
    let pad = d.padding()?;
    let clean = pad.nonzero_after_stop == 0 && pad.partial_bytes == 0;
    let (first, disk_first) = first_difference(d, entries())?;
    if first == rebuilt_count && pad.entries == rebuilt_count && clean {
        return Ok(Comparison::NotTrimmed { trailing_zero_entries: pad.trailing_zero_entries });
    }
    // Older brokers: the entry names the record, the rebuild names the batch's last offset.
    if clean && pad.trailing_zero_entries == 0 && pad.entries == rebuilt_count {
        d.rewind();
        let mut normalized_equal = true;
        let mut r = entries();
        while let Some((_, e)) = d.next_entry()? {
            let last = log.first_batch_ending_at_or_after(e.offset)?.map_or(e.offset, |b| b.last_offset);
            if r.next().is_none_or(|x| (x.timestamp, x.offset) != (e.timestamp, last)) {
                normalized_equal = false;
                break;
            }
        }
        if normalized_equal {
            return Ok(Comparison::FlavourOnly);
        }
    }
    let show = |e: Option<crate::indexcheck::TimeEntryAbs>| {
        e.map(|e| format!("(timestamp {}, offset {})", e.timestamp, e.offset))
    };
    Ok(Comparison::Differs {
        disk_entries: pad.slots,
        rebuilt_entries: rebuilt_count,
        first_difference: first,
        disk: show(disk_first),
        rebuilt: show(entries().nth(first)),
    })
}

/// Opens an index file, if the segment has one.
fn open_opt<E: IndexEntry>(path: &Option<PathBuf>, base: i64) -> Result<Option<IndexStream<E>>, String> {
    match path {
        None => Ok(None),
        Some(p) => IndexStream::open(p, base).map(Some).map_err(|e| format!("{}: {e}", p.display())),
    }
}

/// Replaces `path` with `bytes`: `<path>.seglog-rebuild.tmp`, fsync, rename, fsync directory.
fn replace_file(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut name = path.as_os_str().to_owned();
    name.push(".seglog-rebuild.tmp");
    let tmp = PathBuf::from(name);
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

/// Leader-epoch changes a segment's batches may name: the engine's recovery lists each one
/// (16 bytes), so a crafted log of tiny batches with ever-growing epochs (the epoch is not covered
/// by the CRC) would make that list as long as the log has batches.
pub const MAX_EPOCH_CHANGES: u64 = 1 << 20;

/// A segment that is not rebuilt, and why.
fn refused(log: PathBuf, base_offset: i64, why: String) -> SegmentResult {
    SegmentResult {
        log,
        base_offset,
        offset_index: Comparison::NotRebuilt,
        time_index: Comparison::NotRebuilt,
        txn_index: TxnComparison::NotChecked { why: "the segment is not rebuilt".into() },
        log_damage: None,
        refused: Some(why),
        differs: true,
        written: Vec::new(),
    }
}

/// The settings the engine rebuilds a segment with: the interval asked for, and room for more
/// than --segment-index-bytes in each index.
fn rebuild_settings(args: &Args) -> SegmentSettings {
    SegmentSettings {
        index_interval_bytes: args.index_interval_bytes,
        // Room for more than --segment-index-bytes in each index (24 bytes: two time entries,
        // three offset entries), so a rebuild that needs more is seen as such rather than cut
        // short (the engine stops adding entries to a full index); memory stays within it.
        segment_index_bytes: args.segment_index_bytes + 24,
        preallocate_bytes: 0,
        tail_cache_bytes: 0,
        zero_fill_bytes: 0,
        length_lead_bytes: 0,
        segment_bytes: i32::MAX as u32,
    }
}

/// Walks the `.log` at `log_path` (headers only) for its summary and for what the engine's
/// recovery will hold, as it will count it (it stops at the first invalid batch, so it may count
/// less): leader-epoch changes, and the largest batch (read whole). The second value is why the
/// segment is not rebuilt when either is past its cap.
///
/// The valid batches also go through the partition's producer replay `txn`, and the `.txnindex`
/// entries their markers give into `aborted`, up to `max_aborted` (then `None`).
fn walk_before_rebuild(
    log_path: &Path,
    txn: &mut TxnReplay,
    aborted: &mut Option<Vec<AbortedTxn>>,
    max_aborted: usize,
) -> Result<(LogSummary, Option<String>), String> {
    let (mut epoch_changes, mut last_epoch) = (0u64, None::<i32>);
    let mut largest: Option<(u64, u64)> = None;
    let summary = logscan::summarize_log(log_path, |b, bytes| {
        if b.crc_ok() {
            if let Some(t) = txn.batch(&b.header, bytes) {
                if aborted.as_ref().is_some_and(|v| v.len() >= max_aborted) {
                    *aborted = None;
                }
                if let Some(v) = aborted.as_mut() {
                    v.push(t);
                }
            }
        }
        let epoch = b.header.partition_leader_epoch;
        if epoch >= 0 && last_epoch.is_none_or(|l| epoch > l) {
            epoch_changes += 1;
            last_epoch = Some(epoch);
        }
        if largest.is_none_or(|(size, _)| b.size() > size) {
            largest = Some((b.size(), b.position));
        }
    })
    .map_err(|e| format!("{}: {e}", log_path.display()))?;
    if let Some((size, pos)) = largest.filter(|&(size, _)| size > MAX_BATCH_IN_MEMORY) {
        let why = format!(
            "the batch at byte {pos} is {size} bytes, more than the {MAX_BATCH_IN_MEMORY} a rebuild reads whole (the engine's recovery reads each batch whole to check its CRC: run verify)"
        );
        return Ok((summary, Some(why)));
    }
    if epoch_changes > MAX_EPOCH_CHANGES {
        let why = format!(
            "its batches name {epoch_changes} leader epochs, more than the {MAX_EPOCH_CHANGES} a rebuild holds in memory (the epoch is not covered by the CRC: run verify)"
        );
        return Ok((summary, Some(why)));
    }
    Ok((summary, None))
}

/// Why a rebuilt index (`.index` or `.timeindex`, entries of `size` bytes) is not kept: it is
/// longer than `max_index_bytes`, --segment-index-bytes.
fn index_too_long(what: &str, bytes: &[u8], size: usize, max_index_bytes: usize) -> Option<String> {
    (bytes.len() > max_index_bytes).then(|| {
        format!(
            "the rebuilt {what} needs more than {} entries ({size} bytes each), more than --segment-index-bytes ({max_index_bytes}) holds (Kafka cannot append past segment.index.bytes either; raise --segment-index-bytes to rebuild it: the memory a rebuild takes grows with it)",
            max_index_bytes / size
        )
    })
}

/// Compares the `.txnindex` at `path` (if any) with the entries the log's markers give
/// (`rebuilt`, `None` past the cap of `max` entries), reading at most `max` entries of the file.
fn compare_txn(
    path: Option<&Path>,
    rebuilt: Option<&[AbortedTxn]>,
    inexact: Option<&str>,
    (base, next_base): (i64, Option<i64>),
    max: usize,
) -> Result<TxnComparison, String> {
    if let Some(why) = inexact {
        return Ok(TxnComparison::NotChecked { why: why.to_owned() });
    }
    let Some(rebuilt) = rebuilt else {
        return Ok(TxnComparison::NotChecked {
            why: format!("its markers abort more than {max} transactions, more than a rebuild holds in memory (--segment-index-bytes)"),
        });
    };
    let mut disk: Vec<AbortedTxn> = Vec::new();
    let mut problem = None;
    if let Some(path) = path {
        let t = sidecar::TxnIndex::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let r = t.each_in(seglog::log::TxnIndexRules::new(base, next_base), |e| {
            if disk.len() >= max {
                return Err(std::io::Error::other("too many entries"));
            }
            disk.push(AbortedTxn {
                producer_id: e.producer_id,
                first_offset: e.first_offset,
                last_offset: e.last_offset,
                last_stable_offset: e.last_stable_offset,
            });
            Ok(())
        });
        match r {
            Ok(Ok(_)) => {}
            Ok(Err(p)) => problem = Some(p),
            Err(_) => problem = Some(format!("more than {max} entries")),
        }
    }
    let key = |t: &AbortedTxn| (t.producer_id, t.first_offset, t.last_offset);
    if problem.is_none() && disk.len() == rebuilt.len() && disk.iter().zip(rebuilt).all(|(a, b)| key(a) == key(b)) {
        let other_lso = disk.iter().zip(rebuilt).filter(|(a, b)| a != b).count();
        return Ok(TxnComparison::Same { entries: disk.len(), other_lso });
    }
    let detail = match problem {
        Some(p) => p,
        None if path.is_none() => "the file is missing".into(),
        None => {
            let i = disk.iter().zip(rebuilt).take_while(|(a, b)| key(a) == key(b)).count();
            format!("first difference at entry {i}: disk {:?}, rebuilt {:?}", disk.get(i), rebuilt.get(i))
        }
    };
    Ok(TxnComparison::Differs { disk_entries: disk.len(), rebuilt_entries: rebuilt.len(), detail })
}

fn txn_bytes(entries: &[AbortedTxn]) -> Vec<u8> {
    entries.iter().flat_map(|t| t.encode()).collect()
}

fn rebuild_segment(
    p: &PartitionDir,
    s: &SegmentFiles,
    args: &Args,
    txn: &mut TxnReplay,
) -> Result<SegmentResult, String> {
    let log_path = s.log.clone().expect("log segments");
    let max_index_bytes = args.segment_index_bytes as usize;
    // The engine opens the files itself: refuse a FIFO or a link before it gets the paths.
    s.check_regular()?;
    let mut disk_idx: Option<OffsetIndexStream> = open_opt(&s.index, s.base_offset)?;
    let mut disk_tidx: Option<TimeIndexStream> = open_opt(&s.time_index, s.base_offset)?;
    let max_aborted = args.segment_index_bytes as usize / seglog::log::TXN_ENTRY_BYTES;
    let next_base = p.log_segments().map(|x| x.base_offset).find(|&b| b > s.base_offset);
    let mut aborted = Some(Vec::new());
    let (mut summary, too_much) = walk_before_rebuild(&log_path, txn, &mut aborted, max_aborted)?;
    if let Some(why) = too_much {
        return Ok(refused(log_path, s.base_offset, why));
    }
    // A fresh overlay per segment: nothing is held from one segment to the next.
    let storage = OverlayStorage::rebuilding();
    let (mut seg, _) = Segment::open_existing(
        &storage,
        &p.path,
        s.base_offset,
        rebuild_settings(args),
        &SegmentResources::process_default(),
    )
    .map_err(|e| format!("opening segment {}: {e}", log_path.display()))?;
    let rec = seg.recover().map_err(|e| format!("rebuilding {}: {e}", log_path.display()))?;
    let loading = |e: seglog::Error| format!("rebuilding {}: {e}", log_path.display());
    let offset_ref = seg.try_offset_index().map_err(loading)?;
    let time_ref = seg.try_time_index().map_err(loading)?;
    let (rebuilt_idx, rebuilt_tidx) = (offset_ref.as_bytes(), time_ref.as_bytes());
    for (what, bytes, size) in [(".index", rebuilt_idx, 8), (".timeindex", rebuilt_tidx, 12)] {
        if let Some(why) = index_too_long(what, bytes, size, max_index_bytes) {
            return Ok(refused(log_path, s.base_offset, why));
        }
    }
    let log_damage = if rec.truncated_bytes > 0 {
        Some(format!(
            "only the first {} bytes are whole valid batches ({} bytes after them: {}); the rebuilt index covers those",
            rec.valid_bytes,
            rec.truncated_bytes,
            rec.first_error.map_or_else(|| summary.end.describe(), |e| e.to_string())
        ))
    } else {
        None
    };
    let offset_index = compare_offset(disk_idx.as_mut(), rebuilt_idx, s.base_offset)
        .map_err(|e| format!("{}: {e}", s.index.as_deref().unwrap_or(&log_path).display()))?;
    let time_index = compare_time(disk_tidx.as_mut(), rebuilt_tidx, s.base_offset, &mut summary)
        .map_err(|e| format!("{}: {e}", s.time_index.as_deref().unwrap_or(&log_path).display()))?;
    let txn_index = compare_txn(
        s.txn_index.as_deref(),
        aborted.as_deref(),
        txn.inexact(),
        (s.base_offset, next_base),
        max_aborted,
    )?;
    let differs = log_damage.is_some()
        || offset_index.counts(args.strict_flavour)
        || time_index.counts(args.strict_flavour)
        || txn_index.counts();
    let mut written = Vec::new();
    if args.write && log_damage.is_none() {
        let stem = seglog::format::filename::segment_stem(s.base_offset);
        for (differs, ext, bytes) in [
            (offset_index.counts(args.strict_flavour), "index", rebuilt_idx),
            (time_index.counts(args.strict_flavour), "timeindex", rebuilt_tidx),
        ] {
            if differs {
                let path = p.path.join(format!("{stem}.{ext}"));
                replace_file(&path, bytes).map_err(|e| format!("{}: {e}", path.display()))?;
                written.push(path);
            }
        }
        if let (true, Some(entries)) = (txn_index.counts(), aborted.as_deref()) {
            let path = p.path.join(seglog::format::filename::txn_index_file_name(s.base_offset));
            replace_file(&path, &txn_bytes(entries)).map_err(|e| format!("{}: {e}", path.display()))?;
            written.push(path);
        }
    }
    Ok(SegmentResult {
        log: log_path,
        base_offset: s.base_offset,
        offset_index,
        time_index,
        txn_index,
        log_damage,
        refused: None,
        differs,
        written,
    })
}

pub fn run(args: Args) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let d = layout::discover(&args.dir)?;
    if d.partitions.is_empty() {
        return Err(format!("{}: no partition directories found", args.dir.display()).into());
    }
    // --write owns each partition it may change for the whole run, as a log would: refused
    // while an engine, a Log, another command or a Kafka broker holds it or its log directory.
    let _locks = if args.write {
        lock_partitions(&args.dir, &d.partitions)?
    } else {
        crate::live::warn_if_live(d.partitions.iter().map(|p| p.path.as_path()));
        Vec::new()
    };
    let total: u64 = d.partitions.iter().map(|p| p.log_segments().count() as u64).sum();
    let progress = Progress::new(total, "rebuilding", false);
    let mut results: Vec<(PathBuf, Vec<SegmentResult>)> = Vec::new();
    for p in &d.partitions {
        let mut v = Vec::new();
        let mut txn = TxnReplay::start(p);
        for s in p.log_segments() {
            v.push(rebuild_segment(p, s, &args, &mut txn)?);
            progress.inc(1);
        }
        results.push((p.path.clone(), v));
    }
    progress.finish();
    let t = Tally::of(results.iter().flat_map(|(_, v)| v));
    if args.json {
        let mut doc = serde_json::json!({
            "dir": args.dir,
            "index_interval_bytes": args.index_interval_bytes,
            "dry_run": !args.write,
            "segments": t.segments,
            "differ": t.differ,
            "damaged_logs": t.damaged,
            "time_index_flavour_only": t.flavour_only,
            "files_written": t.written,
            "partitions": results.iter().map(|(p, v)| serde_json::json!({"dir": p, "segments": v})).collect::<Vec<_>>(),
        });
        if t.not_rebuilt > 0 {
            doc["not_rebuilt"] = t.not_rebuilt.into();
        }
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        print_text(&args, &results, &t);
    }
    let failed = if args.write { t.damaged > 0 || t.not_rebuilt > 0 } else { t.differ > 0 };
    Ok(if failed { ExitCode::from(1) } else { ExitCode::SUCCESS })
}

/// Takes every partition's lock for `--write`. Partitions of the log directory given (`dir`)
/// are owned through its `.lock`, as an engine owns them (one descriptor in all); any other
/// (DIR itself, or a tree of log directories) through its own lock, as a lone log.
fn lock_partitions(
    dir: &Path,
    partitions: &[PartitionDir],
) -> Result<Vec<seglog::io::lock::PartitionLocks>, Box<dyn std::error::Error>> {
    let storage = seglog::io::std_backend::StdStorage::default();
    let dir_lock = if partitions.iter().any(|p| seglog::io::lock::log_dir_of(&p.path) == dir) {
        seglog::io::Storage::lock(&storage, dir, seglog::io::lock::LockKind::LogDir)?.map(std::sync::Arc::new)
    } else {
        None
    };
    let mut locks = Vec::new();
    for p in partitions {
        let held = dir_lock.clone().filter(|l| l.path() == seglog::io::lock::log_dir_of(&p.path));
        locks.push(seglog::io::lock::lock_partition(&storage, &p.path, held, false)?);
    }
    Ok(locks)
}

/// The counts of a run's results.
struct Tally {
    segments: usize,
    differ: usize,
    damaged: usize,
    not_rebuilt: usize,
    flavour_only: usize,
    /// Files written.
    written: usize,
}

impl Tally {
    fn of<'a>(results: impl Iterator<Item = &'a SegmentResult>) -> Tally {
        let all: Vec<&SegmentResult> = results.collect();
        Tally {
            segments: all.len(),
            differ: all.iter().filter(|r| r.differs).count(),
            damaged: all.iter().filter(|r| r.log_damage.is_some()).count(),
            not_rebuilt: all.iter().filter(|r| r.refused.is_some()).count(),
            flavour_only: all.iter().filter(|r| r.time_index == Comparison::FlavourOnly).count(),
            written: all.iter().map(|r| r.written.len()).sum(),
        }
    }
}

/// The text report: one line per segment, then the summary.
fn print_text(args: &Args, results: &[(PathBuf, Vec<SegmentResult>)], t: &Tally) {
    println!(
        "rebuild-index {} (index.interval.bytes {}, {})",
        args.dir.display(),
        args.index_interval_bytes,
        if args.write { "--write: differing files are replaced" } else { "dry run: nothing written" }
    );
    for (dir, v) in results {
        println!("{}", dir.display());
        for r in v {
            let name = r.log.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            let verdict = if r.differs { "DIFFERS" } else { "same" };
            let mut parts = match &r.refused {
                Some(why) => vec![format!("not rebuilt: {why}; not written")],
                None => vec![r.offset_index.describe(".index"), r.time_index.describe(".timeindex")],
            };
            parts.extend(r.txn_index.describe());
            if let Some(dmg) = &r.log_damage {
                parts.push(format!("log damaged: {dmg}; not written, run verify"));
            }
            for w in &r.written {
                parts.push(format!("wrote {}", w.display()));
            }
            println!("  {name}: {verdict}: {}", parts.join("; "));
        }
    }
    let (damaged, not_rebuilt, flavour_only, written) = (t.damaged, t.not_rebuilt, t.flavour_only, t.written);
    println!(
        "Summary: {} segments, {} differ, {} same{}{}{}; {}",
        t.segments,
        t.differ,
        t.segments - t.differ,
        if damaged > 0 { format!(", {damaged} with damaged logs") } else { String::new() },
        if not_rebuilt > 0 { format!(", {not_rebuilt} not rebuilt") } else { String::new() },
        if flavour_only > 0 && !args.strict_flavour {
            format!(" ({flavour_only} time indexes differ only in flavour, not counted)")
        } else {
            String::new()
        },
        if args.write { format!("{written} files written") } else { "dry run: nothing written".into() }
    );
}
