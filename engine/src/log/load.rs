//! Opening a partition directory (a subset of Kafka's `LogLoader`): leftover `.deleted` and
//! `.cleaned` files are removed, orphan index files are removed, missing indexes are rebuilt,
//! and, unless the last shutdown was clean, every segment from the recovery point on is
//! revalidated batch by batch; the first invalid byte ends the log and later segments go.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;

use super::epoch::LeaderEpochCache;
use super::{Log, LogOptions};
use crate::config::LogConfig;
use crate::error::{Error, Result};
use crate::format::filename::{FileKind, FileSuffix, SegmentFileName};
use crate::io::Storage;
use crate::segment::{ActiveSegment, Segment, SegmentResources, SegmentSettings};

/// What the caller knows about the previous shutdown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recovery {
    /// The log was closed cleanly: indexes are sanity-checked, not rebuilt.
    Clean,
    /// The log may have crashed: segments holding offsets at or above this recovery point are
    /// revalidated and their indexes rebuilt (0 = all of them).
    FromRecoveryPoint(i64),
}

impl Default for Recovery {
    fn default() -> Self {
        Recovery::FromRecoveryPoint(0)
    }
}

/// What loading did.
#[derive(Debug, Default)]
pub struct LoadReport {
    pub segments: usize,
    pub segments_recovered: usize,
    /// Indexes rebuilt because they were missing or failed the sanity check.
    pub indexes_rebuilt: usize,
    /// `(file, valid bytes kept, bytes cut, why)` for each torn or corrupt tail.
    pub truncations: Vec<(std::path::PathBuf, u64, u64, String)>,
    /// Segments deleted because they followed a truncation.
    pub segments_removed: Vec<i64>,
    /// Leftover files deleted (`.deleted`, `.cleaned`, orphan indexes).
    pub files_removed: Vec<String>,
    /// Why the leader-epoch checkpoint was rebuilt from the batches, if it was.
    pub epoch_cache_rebuilt: Option<String>,
    /// The damaged `.txnindex` files rebuilt from the log, each with its problem.
    pub txn_indexes_rebuilt: Vec<String>,
}

/// Opens the partition directory `dir` (docs/architecture.md, "Opening a directory"): takes its
/// locks, loads what is on disk ([`load`]) and makes a `Log` of it.
pub(super) fn open(dir: &Path, mut options: LogOptions) -> Result<(Log, LoadReport)> {
    options.config.validate()?;
    // One owner, before anything in the directory is read or changed (or it is created).
    let locks = crate::io::lock::lock_partition(&*options.storage, dir, options.log_dir_lock.take(), true)?;
    let (loaded, mut report) = load(dir, &options)?;
    let clean = matches!(options.recovery, Recovery::Clean);
    let Loaded {
        sealed,
        active,
        log_start_offset,
        log_end_offset,
        recovery_point,
        epochs,
        snapshots,
        txn_indexes,
        recovered,
        now,
    } = loaded;
    let LogOptions {
        config,
        storage,
        clock,
        tail_cache_bytes,
        zero_fill_bytes,
        length_lead_bytes,
        writes,
        resources,
        ..
    } = options;
    let sealed = sealed.into_iter().map(|(b, s)| (b, s.into_sealed())).collect();
    let seed = now as u64 ^ (dir.as_os_str().len() as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut log = Log {
        dir: dir.to_path_buf(),
        config,
        storage,
        clock,
        sealed,
        active: Some(active),
        log_start_offset,
        log_end_offset,
        high_watermark: log_end_offset,
        recovery_point,
        unflushed_messages: 0,
        last_flush_ms: now,
        failed: None,
        write: Default::default(),
        written: log_end_offset,
        unwritten: Default::default(),
        sync_wanted: false,
        write_settled: Default::default(),
        taken: false,
        rng: seed,
        tail_cache_bytes,
        zero_fill_bytes,
        length_lead_bytes,
        writes,
        epochs,
        producers: super::producer_state::ProducerState::new(log_end_offset),
        producer_snapshots: snapshots,
        txn: Default::default(),
        txn_cache: Default::default(),
        pending_deletes: Vec::new(),
        timed_listed: false,
        first_unflushed_ms: None,
        resources,
        _locks: locks,
    };
    let jitter = log.next_jitter();
    log.active.as_mut().expect("active").set_roll_jitter_ms(jitter);
    // The `.txnindex` files of the recovered segments (still in the log), and damaged ones, are
    // written again from the log as the producer state is rebuilt.
    let damaged = log.load_txn_indexes(&txn_indexes)?;
    let mut rebuild: BTreeSet<i64> = recovered.into_iter().filter(|b| log.has_segment(*b)).collect();
    rebuild.extend(damaged.iter().map(|(b, _)| *b));
    report.txn_indexes_rebuilt = damaged.into_iter().map(|(_, p)| p).collect();
    log.rebuild_producer_state(clean, &rebuild)?;
    Ok((log, report))
}

/// What [`load`] found: the segments, the offsets and the leader-epoch cache of the log.
struct Loaded {
    sealed: BTreeMap<i64, Segment>,
    active: ActiveSegment,
    log_start_offset: i64,
    log_end_offset: i64,
    recovery_point: i64,
    epochs: LeaderEpochCache,
    /// The offsets of the producer snapshots found.
    snapshots: BTreeSet<i64>,
    /// The base offsets of the segments with a `.txnindex` file.
    txn_indexes: BTreeSet<i64>,
    /// The base offsets of the segments recovered (after a crash, or whose indexes failed their
    /// check): their `.txnindex` files are rebuilt.
    recovered: BTreeSet<i64>,
    /// The clock when the active segment was made active.
    now: i64,
}

/// Loads the locked directory `dir`: finds its segments, opens them, recovers what the last
/// shutdown may have left torn, makes the last segment active, works out the log's offsets and
/// loads the leader-epoch cache.
fn load(dir: &Path, options: &LogOptions) -> Result<(Loaded, LoadReport)> {
    let LogOptions {
        ref config,
        ref storage,
        ref clock,
        recovery,
        log_start_offset,
        tail_cache_bytes,
        recovery_threads,
        ref progress,
        zero_fill_bytes,
        length_lead_bytes,
        ref resources,
        ..
    } = *options;
    let mut report = LoadReport::default();
    let Inventory { logs: bases, snapshots, txn_indexes } = find_segments(&**storage, dir, &mut report)?;
    let settings = segment_settings(config, tail_cache_bytes, zero_fill_bytes, length_lead_bytes);
    let mut segments = open_segments(storage, dir, &bases, settings, resources, &mut report)?;

    // Pass 3: recovery.
    let mut recovered_segments = BTreeSet::new();
    let recovered_epochs = match recovery {
        Recovery::Clean => {
            check_or_recover(segments.values_mut(), &bases, &mut report, &mut recovered_segments)?;
            Vec::new()
        }
        Recovery::FromRecoveryPoint(rp) => {
            let progress = progress.as_ref().map(|p| &*p.0);
            let recovered = recover_from(rp, &mut segments, &bases, recovery_threads, progress, &mut report)?;
            recovered_segments = recovered.recovered;
            // The log ends in the first segment that lost bytes: every later segment goes.
            if !recovered.doomed.is_empty() {
                delete_segments(&**storage, &recovered.doomed, &mut report)?;
                storage.sync_dir(dir)?;
            }
            recovered.epoch_starts
        }
    };

    let now = clock.now_ms();
    let mut active = activate_last(storage, dir, &mut segments, settings, resources, now, log_start_offset)?;
    let mut log_end_offset = active.read_next_offset()?;
    // Kafka's LogLoader: a log start offset (from the checkpoint) beyond the log end means every
    // segment is gone logically; delete them all and start an empty log there.
    if let Some(s) = log_start_offset.filter(|&s| s > log_end_offset) {
        delete_all(&**storage, std::mem::take(&mut segments), active, &mut report)?;
        active = new_active(storage, dir, s, settings, resources, now)?;
        log_end_offset = s;
    }
    let first_base = segments.keys().next().copied().unwrap_or(active.base_offset());
    let log_start_offset = match log_start_offset {
        Some(s) => s.max(first_base).min(log_end_offset),
        None => first_base,
    };
    let recovery_point = match recovery {
        Recovery::Clean => log_end_offset,
        Recovery::FromRecoveryPoint(rp) => rp.min(log_end_offset),
    };
    // The leader-epoch cache: the checkpoint, plus epochs seen in recovered segments, cut to the
    // log's offsets (Kafka truncates it at the log end and the log start after loading).
    let all = segments.values().chain(std::iter::once(&*active));
    let rescanned_from = match recovery {
        Recovery::FromRecoveryPoint(rp) => Some(rp),
        Recovery::Clean => None,
    };
    let mut epochs = load_epochs(storage.clone(), dir, all, recovered_epochs, rescanned_from, &mut report)?;
    epochs.truncate_from_end(log_end_offset)?;
    epochs.truncate_from_start(log_start_offset)?;
    let loaded = Loaded {
        sealed: segments,
        active,
        log_start_offset,
        log_end_offset,
        recovery_point,
        epochs,
        snapshots,
        txn_indexes,
        recovered: recovered_segments,
        now,
    };
    Ok((loaded, report))
}

/// The files [`find_segments`] found.
struct Inventory {
    /// The base offsets of the `.log` files.
    logs: BTreeSet<i64>,
    /// The offsets of the producer `.snapshot` files.
    snapshots: BTreeSet<i64>,
    /// The base offsets of the `.txnindex` files (each with its `.log`).
    txn_indexes: BTreeSet<i64>,
}

/// Pass 1, leftovers and the inventory: resolves a log cleaner's leftovers, removes `.deleted`
/// and `.cleaned` files and index files without a `.log` (fsyncing the directory if anything
/// went), and lists the rest.
fn find_segments(storage: &dyn Storage, dir: &Path, report: &mut LoadReport) -> Result<Inventory> {
    let mut names = storage.list_dir(dir)?;
    names.sort();
    if names.iter().any(|n| {
        n.ends_with(crate::format::filename::SWAP_FILE_SUFFIX)
            || n.ends_with(crate::format::filename::CLEANED_FILE_SUFFIX)
    }) {
        resolve_cleaner_leftovers(storage, dir, &names, report)?;
        names = storage.list_dir(dir)?;
        names.sort();
    }

    let mut logs: BTreeSet<i64> = BTreeSet::new();
    let mut snapshots: BTreeSet<i64> = BTreeSet::new();
    let mut indexes: Vec<(SegmentFileName, String)> = Vec::new();
    for name in &names {
        let parsed = match SegmentFileName::parse(name) {
            Ok(Some(p)) => p,
            Ok(None) => continue,
            Err(e) => {
                return Err(Error::Corrupt { path: dir.join(name), pos: 0, source: e });
            }
        };
        match parsed.suffix {
            FileSuffix::Deleted | FileSuffix::Cleaned => {
                storage.remove_file(&dir.join(name))?;
                report.files_removed.push(name.clone());
            }
            FileSuffix::Swap => {
                // resolve_cleaner_leftovers renamed or removed every swap file.
                return Err(Error::CorruptIndex {
                    path: dir.join(name),
                    detail: "a .swap file survived swap resolution".into(),
                });
            }
            FileSuffix::None => match parsed.kind {
                FileKind::Log => {
                    logs.insert(parsed.base_offset);
                }
                FileKind::Index | FileKind::TimeIndex | FileKind::TxnIndex => indexes.push((parsed, name.clone())),
                FileKind::Snapshot => {
                    snapshots.insert(parsed.base_offset);
                }
            },
        }
    }
    let mut txn_indexes = BTreeSet::new();
    for (parsed, name) in indexes {
        if !logs.contains(&parsed.base_offset) {
            storage.remove_file(&dir.join(&name))?;
            report.files_removed.push(name);
        } else if parsed.kind == FileKind::TxnIndex {
            txn_indexes.insert(parsed.base_offset);
        }
    }
    if !report.files_removed.is_empty() {
        storage.sync_dir(dir)?;
    }
    Ok(Inventory { logs, snapshots, txn_indexes })
}

/// What each segment of a log with `config` is made with (`Log::settings` for a log already
/// open).
pub(super) fn segment_settings(
    config: &LogConfig,
    tail_cache_bytes: u64,
    zero_fill_bytes: u32,
    length_lead_bytes: u32,
) -> SegmentSettings {
    SegmentSettings {
        index_interval_bytes: config.index_interval_bytes,
        segment_index_bytes: config.segment_index_bytes,
        preallocate_bytes: if config.preallocate { config.segment_bytes } else { 0 },
        tail_cache_bytes,
        zero_fill_bytes,
        length_lead_bytes,
        segment_bytes: config.segment_bytes,
    }
}

/// The base offset of the segment after `base` in `bases`: `base`'s offsets must stay below it.
fn next_base(bases: &BTreeSet<i64>, base: i64) -> Option<i64> {
    use std::ops::Bound::{Excluded, Unbounded};
    bases.range((Excluded(base), Unbounded)).next().copied()
}

/// Pass 2, open: opens the segment at each of `bases` without reading its indexes; one whose
/// `.index` is missing is recovered at once, which rebuilds both indexes.
fn open_segments(
    storage: &Arc<dyn Storage>,
    dir: &Path,
    bases: &BTreeSet<i64>,
    settings: SegmentSettings,
    resources: &SegmentResources,
    report: &mut LoadReport,
) -> Result<BTreeMap<i64, Segment>> {
    let mut segments: BTreeMap<i64, Segment> = BTreeMap::new();
    for &base in bases {
        let (mut seg, missing_index) = Segment::open_lazy(storage.clone(), dir, base, settings, resources)?;
        if missing_index {
            let r = seg.recover_bounded(next_base(bases, base))?;
            report.indexes_rebuilt += 1;
            note_truncation(report, &seg, &r);
        }
        segments.insert(base, seg);
    }
    report.segments = segments.len();
    Ok(segments)
}

/// Sanity-checks each of `segs` and recovers one that fails: every segment after a clean
/// shutdown, the segments below the recovery point after a crash.
fn check_or_recover<'a>(
    segs: impl Iterator<Item = &'a mut Segment>,
    bases: &BTreeSet<i64>,
    report: &mut LoadReport,
    recovered: &mut BTreeSet<i64>,
) -> Result<()> {
    for seg in segs {
        let next = next_base(bases, seg.base_offset());
        if seg.sanity_check_bounded(next).is_err() {
            let r = seg.recover_bounded(next)?;
            report.indexes_rebuilt += 1;
            note_truncation(report, seg, &r);
            recovered.insert(seg.base_offset());
        }
    }
    Ok(())
}

/// What [`recover_from`] leaves for the rest of the open.
struct Recovered {
    /// `(epoch, start offset)` of each leader epoch the recovered batches start.
    epoch_starts: Vec<(i32, i64)>,
    /// The segments after the first one that lost bytes, taken out of the log, to be deleted.
    doomed: Vec<Segment>,
    /// The base offsets of the segments recovered (the doomed ones included).
    recovered: BTreeSet<i64>,
}

/// Pass 3 after a crash: recovers every segment holding offsets at or above the recovery point
/// `rp` (up to `threads` at a time) and stops at the first that loses bytes.
fn recover_from(
    rp: i64,
    segments: &mut BTreeMap<i64, Segment>,
    bases: &BTreeSet<i64>,
    threads: usize,
    progress: Option<&(dyn Fn(RecoveryProgress) + Send + Sync)>,
    report: &mut LoadReport,
) -> Result<Recovered> {
    // Segments holding offsets >= rp: the floor segment of rp and everything after.
    let start = segments.range(..=rp).next_back().map(|(b, _)| *b).unwrap_or(i64::MIN);
    // Below the recovery point the data was flushed; still, indexes that fail the sanity
    // check are rebuilt rather than trusted (Kafka checks nothing there), and a last batch
    // reaching the next segment's base is cut (that segment only: later ones were flushed).
    let mut recovered = BTreeSet::new();
    check_or_recover(segments.range_mut(..start).map(|(_, s)| s), bases, report, &mut recovered)?;
    let todo_bases: Vec<i64> = segments.range(start..).map(|(b, _)| *b).collect();
    recovered.extend(&todo_bases);
    let mut todo: Vec<Segment> = todo_bases.iter().map(|b| segments.remove(b).expect("listed")).collect();
    let bounds: Vec<Option<i64>> = todo_bases.iter().map(|&b| next_base(bases, b)).collect();
    let results = recover_segments(&mut todo, &bounds, threads, progress);
    let mut epoch_starts = Vec::new();
    let mut truncated_at: Option<usize> = None;
    for (i, (seg, r)) in todo.iter().zip(results).enumerate() {
        let r = r?;
        report.segments_recovered += 1;
        report.indexes_rebuilt += 1;
        epoch_starts.extend(r.epoch_starts.iter().copied());
        if r.truncated_bytes > 0 {
            note_truncation(report, seg, &r);
            truncated_at = Some(i);
            break;
        }
    }
    let keep = truncated_at.map(|i| i + 1).unwrap_or(todo.len());
    let doomed = todo.split_off(keep);
    for seg in todo {
        segments.insert(seg.base_offset(), seg);
    }
    Ok(Recovered { epoch_starts, doomed, recovered })
}

/// The last segment becomes the active one, its max timestamp reloaded; an empty log gets a new
/// one at the log start offset (or 0).
fn activate_last(
    storage: &Arc<dyn Storage>,
    dir: &Path,
    segments: &mut BTreeMap<i64, Segment>,
    settings: SegmentSettings,
    resources: &SegmentResources,
    now: i64,
    log_start_offset: Option<i64>,
) -> Result<ActiveSegment> {
    let start = log_start_offset.unwrap_or(0).max(0);
    match segments.pop_last() {
        Some((_, mut seg)) => {
            seg.reload_max_timestamp()?;
            seg.into_active(storage.clone(), settings, now, 0)
        }
        None => new_active(storage, dir, start, settings, resources, now),
    }
}

/// A new, empty active segment at `base`, its directory entry made durable.
fn new_active(
    storage: &Arc<dyn Storage>,
    dir: &Path,
    base: i64,
    settings: SegmentSettings,
    resources: &SegmentResources,
    now: i64,
) -> Result<ActiveSegment> {
    let seg = ActiveSegment::create(storage.clone(), dir, base, settings, resources, now, 0)?;
    storage.sync_dir(dir)?;
    Ok(seg)
}

/// Deletes the files of every segment, sealed ones first, then the active one's.
fn delete_all(
    storage: &dyn Storage,
    segments: BTreeMap<i64, Segment>,
    active: ActiveSegment,
    report: &mut LoadReport,
) -> Result<()> {
    delete_segments(storage, segments.values(), report)?;
    drop(segments);
    let old = active.into_segment()?;
    delete_segments(storage, [&old], report)
}

/// The leader-epoch cache from `leader-epoch-checkpoint`, with the epoch starts `recovered` saw
/// assigned. A damaged checkpoint is rebuilt from the batches of `segs` instead: every batch
/// header carries its leader epoch. After a crash, the file's entries from `rescanned_from` (the
/// recovery point: every batch from there on was rescanned into `recovered`) are dropped first:
/// a log whose epoch checkpoint lags (`log::epoch`) may have cut them before the crash. (An entry
/// there with no batch behind it, which Kafka writes when a partition becomes leader, goes too;
/// the next leader append assigns it again.)
fn load_epochs<'a>(
    storage: Arc<dyn Storage>,
    dir: &Path,
    segs: impl Iterator<Item = &'a Segment>,
    mut recovered: Vec<(i32, i64)>,
    rescanned_from: Option<i64>,
    report: &mut LoadReport,
) -> Result<LeaderEpochCache> {
    let (mut epochs, problem) = LeaderEpochCache::load(storage, dir)?;
    if let Some(e) = problem {
        report.epoch_cache_rebuilt = Some(e.to_string());
        recovered.clear();
        for seg in segs {
            let mut scan = seg.scanner(0);
            while let Some(b) = scan.next_batch()? {
                recovered.push((b.header.partition_leader_epoch, b.header.base_offset));
            }
        }
        epochs.flush()?;
    }
    epochs.reassign_from(rescanned_from, recovered)?;
    Ok(epochs)
}

/// Recovery progress, reported after each segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecoveryProgress {
    pub segments_done: usize,
    pub segments_total: usize,
    pub bytes_left: u64,
}

/// Recovers `segs` with up to `threads` threads (each segment's revalidation and index rebuild is
/// independent of the others'), each bounded by the next segment's base offset in `next_bases`
/// (parallel to `segs`), returning each segment's result in order.
fn recover_segments(
    segs: &mut [Segment],
    next_bases: &[Option<i64>],
    threads: usize,
    progress: Option<&(dyn Fn(RecoveryProgress) + Send + Sync)>,
) -> Vec<Result<crate::segment::RecoveryResult>> {
    use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
    use std::sync::Mutex;
    let total = segs.len();
    let bytes_left = AtomicU64::new(segs.iter().map(|s| s.log_file().len().unwrap_or(0)).sum());
    let done = AtomicUsize::new(0);
    let report = |bytes: u64| {
        let d = done.fetch_add(1, Ordering::SeqCst) + 1;
        let left = bytes_left.fetch_sub(bytes, Ordering::SeqCst).saturating_sub(bytes);
        if let Some(p) = progress {
            p(RecoveryProgress { segments_done: d, segments_total: total, bytes_left: left });
        }
    };
    let threads = threads.clamp(1, total.max(1));
    if threads == 1 {
        return segs
            .iter_mut()
            .zip(next_bases)
            .map(|(s, &next)| {
                let bytes = s.log_file().len().unwrap_or(0);
                let r = s.recover_bounded(next);
                report(bytes);
                r
            })
            .collect();
    }
    type Slot<'a> = Mutex<(&'a mut Segment, Option<Result<crate::segment::RecoveryResult>>)>;
    let slots: Vec<Slot<'_>> = segs.iter_mut().map(|s| Mutex::new((s, None))).collect();
    let next = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                let Some(slot) = slots.get(i) else { break };
                let mut g = slot.lock().unwrap_or_else(|p| p.into_inner());
                let bytes = g.0.log_file().len().unwrap_or(0);
                let r = g.0.recover_bounded(next_bases.get(i).copied().flatten());
                g.1 = Some(r);
                drop(g);
                report(bytes);
            });
        }
    });
    slots
        .into_iter()
        .map(|m| m.into_inner().unwrap_or_else(|p| p.into_inner()).1.expect("every segment recovered"))
        .collect()
}

/// Kafka's `LogLoader` passes for what a log cleaner leaves after a crash: `.cleaned` files are
/// unfinished cleaner output (removed); `.swap` files at or above the lowest `.cleaned` offset
/// belong to an unfinished split (removed); the other swaps are finished cleaner output that was
/// about to replace the segments they cover: those segments are removed and the swap files
/// renamed into place.
fn resolve_cleaner_leftovers(
    storage: &dyn Storage,
    dir: &Path,
    names: &[String],
    report: &mut LoadReport,
) -> Result<()> {
    use crate::format::filename::SWAP_FILE_SUFFIX;
    let mut min_cleaned = i64::MAX;
    let mut swaps: BTreeMap<i64, Vec<String>> = BTreeMap::new();
    for name in names {
        let Ok(Some(p)) = SegmentFileName::parse(name) else { continue };
        match p.suffix {
            FileSuffix::Cleaned => {
                min_cleaned = min_cleaned.min(p.base_offset);
                storage.remove_file(&dir.join(name))?;
                report.files_removed.push(name.clone());
            }
            FileSuffix::Swap => swaps.entry(p.base_offset).or_default().push(name.clone()),
            _ => {}
        }
    }
    for (base, files) in swaps {
        let log_swap = files.iter().find(|n| n.ends_with(&format!(".log{SWAP_FILE_SUFFIX}")));
        if base >= min_cleaned || log_swap.is_none() {
            for f in files {
                storage.remove_file(&dir.join(&f))?;
                report.files_removed.push(f);
            }
            continue;
        }
        // The offsets the swap covers: [base, next offset after its last batch).
        let path = dir.join(log_swap.expect("checked"));
        let file = storage.open(&path, crate::io::OpenMode::Read)?;
        let len = file.len()?.min(i32::MAX as u64) as u32;
        let mut scan = crate::segment::BatchScanner::new(file, 0, len);
        let mut next = base;
        let mut valid = true;
        while let Ok(Some(b)) = scan.next_batch() {
            if b.header.base_offset < next {
                valid = false; // batches below the swap's base, or going backwards
                break;
            }
            next = b.header.next_offset();
        }
        if !valid {
            for f in files {
                storage.remove_file(&dir.join(&f))?;
                report.files_removed.push(f);
            }
            continue;
        }
        // Segments inside [base, next) are replaced: remove their files.
        for name in names {
            let Ok(Some(p)) = SegmentFileName::parse(name) else { continue };
            let covered = p.suffix == FileSuffix::None && p.base_offset >= base && p.base_offset < next.max(base + 1);
            if covered && !matches!(p.kind, FileKind::Snapshot) && storage.exists(&dir.join(name)) {
                storage.remove_file(&dir.join(name))?;
                report.files_removed.push(name.clone());
            }
        }
        for f in files {
            let live = f.trim_end_matches(SWAP_FILE_SUFFIX).to_string();
            storage.rename(&dir.join(&f), &dir.join(&live))?;
        }
    }
    storage.sync_dir(dir)
}

fn note_truncation(report: &mut LoadReport, seg: &Segment, r: &crate::segment::RecoveryResult) {
    if r.truncated_bytes > 0 {
        let why = r.first_error.as_ref().map(|e| e.to_string()).unwrap_or_else(|| "partial batch at the end".into());
        report.truncations.push((seg.log_path(), r.valid_bytes as u64, r.truncated_bytes, why));
    }
}

/// Deletes the files of each of `segs` (`.log`, `.index`, `.timeindex`, `.txnindex`) and
/// reports them removed.
fn delete_segments<'a>(
    storage: &dyn Storage,
    segs: impl IntoIterator<Item = &'a Segment>,
    report: &mut LoadReport,
) -> Result<()> {
    for seg in segs {
        delete_segment_files(storage, seg)?;
        report.segments_removed.push(seg.base_offset());
    }
    Ok(())
}

fn delete_segment_files(storage: &dyn Storage, seg: &Segment) -> Result<()> {
    for p in [seg.log_path(), seg.index_path(), seg.time_index_path()] {
        if storage.exists(&p) {
            storage.remove_file(&p)?;
        }
    }
    let txn = seg.dir().join(crate::format::filename::txn_index_file_name(seg.base_offset()));
    if storage.exists(&txn) {
        storage.remove_file(&txn)?;
    }
    Ok(())
}
