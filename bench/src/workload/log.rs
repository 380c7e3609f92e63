//! The `log` workload: one partition through the standalone [`Log`] (not the engine), driven by
//! one caller on a thread of its own, as a broker with its own runtime embeds it; and the same
//! measurement of the Kafka reference design ([`crate::kafka_ref`]) and of the `commitlog` crate
//! on the same batches, through the reference read loops of [`crate::refs`].
//!
//! Each system appends the same batches (`records` records in batches of the run's size, each
//! batch its own timestamp), then looks up the same random record offsets one at a time, warm
//! (right after the appends: the page cache and seglog's tail cache as the appends left them)
//! and cold. Every lookup asks for the batch holding the offset and nothing more (seglog and the
//! Kafka reference: max bytes 1, at least one batch; commitlog: one message) and is checked,
//! untimed: the batch returned holds the offset asked for and its bytes are the ones appended.
//!
//! - Appends: `Log::append_as_leader`, one batch per call, then `finish_writes` (every
//!   appended byte in the file); no fsync in the timed part, as the Kafka reference's produce
//!   (`write(2)` per append) has none. All three sync what they seal at a roll: seglog's `seal`
//!   and the Kafka reference fdatasync the segment, commitlog msyncs the index (not the data).
//! - Cold: seglog's `Log` is closed and opened again (clean), so no tail cache helps. Then the
//!   page cache of every file in the directory is dropped (fdatasync, `posix_fadvise(DONTNEED)`),
//!   and, for every system but seglog in direct mode (which reads with O_DIRECT), that of each
//!   `.log` file again before **every** cold lookup, untimed: dropped once, each cold read and
//!   its read-ahead would warm the pages around it, and after a few thousand lookups most would
//!   be warm. Indexes stay as each design keeps them: seglog's in its memory (loaded at the
//!   reopen or at the first lookup of a segment), the others' memory-mapped (a mapped page is
//!   not dropped).
//!
//! Must not: print, or leave files outside the directory it is given.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::Instant;

use seglog::format::batch::{BatchHeader, BATCH_HEADER_SIZE};
use seglog::log::{Log, LogOptions, Recovery, SegmentResources};
use seglog::{Durability, IoMode};

use super::{drop_clean_pages, first_timestamp_ms, log_files, make_batch, stamp, Counters, Rng, RunReport, Setup};
use super::{durability_name, Timeline};
use crate::pct::Hist;
use crate::refs;
use crate::rusage::Usage;

/// The appends: one row per system and mode.
pub const APPEND: &str = "log-append";
/// The same appends from an idempotent producer (producer id, epoch and a sequence per batch):
/// what the producer-state checks cost (issue 18: within 5 % of `log-append`).
pub const APPEND_IDEMPOTENT: &str = "log-append-idempotent";
/// The plain appends again on a fresh log, right before [`APPEND_IDEMPOTENT`]: the pair the
/// idempotent target compares, run back to back.
pub const APPEND_PLAIN: &str = "log-append-plain";
/// A consumer catching up from the start of a transactional log (1 % of its transactions
/// aborted), reading uncommitted (to the high watermark).
pub const CATCHUP_UNCOMMITTED: &str = "log-catchup-uncommitted";
/// The same catch-up reading committed (to the last stable offset, with the aborted
/// transactions): issue 18's target, >= 90 % of the uncommitted one.
pub const CATCHUP_COMMITTED: &str = "log-catchup-committed";
/// Rolls of a log with no producers, and of one with up to [`ROLL_PRODUCERS`] idempotent
/// producers (one per record of the run, at most that many): the difference is what writing
/// their `.snapshot` at each roll costs.
pub const ROLL: &str = "log-roll";
pub const ROLL_WITH_PRODUCERS: &str = "log-roll-producers";
/// The most producers of [`ROLL_WITH_PRODUCERS`].
pub const ROLL_PRODUCERS: i64 = 100_000;
/// The point lookups right after the appends.
pub const WARM: &str = "log-point-warm";
/// The point lookups with nothing of the data cached.
pub const COLD: &str = "log-point-cold";

/// Errors of the workload: the engine's, I/O, and failed checks (the thread it runs on passes
/// them back).
pub type LogResult<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// How much the workload does.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct LogParams {
    /// Records appended (rounded down to whole batches, at least one batch).
    pub records: u64,
    /// Point lookups, warm and again cold.
    pub lookups: u64,
    /// Seed of the lookup offsets (every system looks up the same ones).
    pub seed: u64,
}

/// The batches every system appends: batch `i` is the run's template stamped with timestamp
/// `first_ts + i`, exactly as [`refs::kafka_produce`] and [`refs::commitlog_produce`] make theirs.
#[derive(Clone, Debug)]
pub struct Batches {
    template: Vec<u8>,
    records_per_batch: i64,
    count: u64,
    /// Stamped with this producer id (epoch 0, the sequence of its first record) when set.
    producer: Option<i64>,
}

impl Batches {
    /// The batches of `setup`'s size holding `records` records.
    pub fn new(setup: &Setup, records: u64) -> Batches {
        let records_per_batch = setup.records_per_batch.max(1) as u64;
        Batches {
            template: make_batch(setup.batch_bytes, setup.records_per_batch, 0),
            records_per_batch: records_per_batch as i64,
            count: (records / records_per_batch).max(1),
            producer: None,
        }
    }
    /// The same batches from idempotent producer `id`.
    pub fn idempotent(&self, id: i64) -> Batches {
        Batches { producer: Some(id), ..self.clone() }
    }
    /// Batch `i` as the producer sends it (base offset 0), its timestamps `first_ts + i`.
    pub fn nth(&self, first_ts: i64, i: u64) -> Vec<u8> {
        let mut b = self.template.clone();
        if let Some(id) = self.producer {
            let seq = ((i as i64 * self.records_per_batch) % (i32::MAX as i64 + 1)) as i32;
            set_producer(&mut b, id, seq, false);
        }
        stamp(&mut b, first_ts + i as i64);
        b
    }
    /// Batch `i` as producer `id` sends it inside a transaction, at sequence `seq`.
    pub fn transactional(&self, first_ts: i64, i: u64, id: i64, seq: i32) -> Vec<u8> {
        let mut b = self.template.clone();
        set_producer(&mut b, id, seq, true);
        stamp(&mut b, first_ts + i as i64);
        b
    }
    /// Batches appended.
    pub fn count(&self) -> u64 {
        self.count
    }
    /// Bytes of one batch.
    pub fn batch_len(&self) -> usize {
        self.template.len()
    }
    /// Bytes of all of them.
    pub fn bytes(&self) -> u64 {
        self.count * self.template.len() as u64
    }
    /// Records of all of them: the log end offset once appended.
    pub fn records(&self) -> i64 {
        self.count as i64 * self.records_per_batch
    }
    /// The index of the batch holding record `offset`.
    pub fn index_of(&self, offset: i64) -> u64 {
        (offset / self.records_per_batch) as u64
    }
}

/// Stamps producer id `id`, epoch 0 and first sequence `seq` in a batch's header (inside the CRC,
/// which [`stamp`] computes), and the transactional attribute.
fn set_producer(b: &mut [u8], id: i64, seq: i32, transactional: bool) {
    if transactional {
        b[22] |= 0x10;
    }
    b[43..51].copy_from_slice(&id.to_be_bytes());
    b[51..53].copy_from_slice(&0i16.to_be_bytes());
    b[53..57].copy_from_slice(&seq.to_be_bytes());
}

/// The record offsets every system looks up: `n` uniform in `[0, end)` from `seed`.
pub fn lookup_offsets(seed: u64, n: u64, end: i64) -> Vec<i64> {
    let mut rng = Rng::new(seed);
    (0..n).map(|_| rng.range(0, end)).collect()
}

/// Checks that `got` starts with one whole batch whose bytes from the magic byte on (the CRC,
/// attributes, timestamps and records) are `want`'s, and returns its header. The base offset
/// and partition leader epoch are left to the caller: each design stamps its own.
pub fn check_batch(got: &[u8], want: &[u8]) -> Result<BatchHeader, String> {
    if got.len() < BATCH_HEADER_SIZE {
        return Err(format!("{} bytes returned, less than a batch header", got.len()));
    }
    let h = BatchHeader::parse(got).map_err(|e| format!("batch header: {e}"))?;
    let size = h.size_in_bytes() as usize;
    if size != want.len() || got.len() < size {
        return Err(format!("batch of {size} bytes ({} returned), {} appended", got.len(), want.len()));
    }
    if got[16..size] != want[16..] {
        return Err(format!("batch at base offset {}: bytes differ from the ones appended", h.base_offset));
    }
    Ok(h)
}

/// Checks a lookup of record `offset` in a design that stamps offsets (seglog, the Kafka
/// reference): the batch returned is batch `offset / records per batch`, holds `offset`, and has
/// the bytes appended.
fn check_stamped(batches: &Batches, first_ts: i64, offset: i64, got: &[u8]) -> Result<(), String> {
    let i = batches.index_of(offset);
    let h = check_batch(got, &batches.nth(first_ts, i))?;
    let base = i as i64 * batches.records_per_batch;
    if h.base_offset != base || offset > h.last_offset() {
        return Err(format!(
            "lookup of offset {offset}: batch {}..={} returned, {base}..={} appended there",
            h.base_offset,
            h.last_offset(),
            base + batches.records_per_batch - 1
        ));
    }
    Ok(())
}

/// The page cache of a directory's files, dropped once for all of them and then on demand for
/// the `.log` files (the data every lookup reads).
#[derive(Debug)]
pub struct Evictor {
    logs: Vec<File>,
}

impl Evictor {
    /// Writes back (fdatasync) and drops the page cache of every file under `dir` (indexes,
    /// checkpoints, segments: pages a design keeps mapped stay), and opens its `.log` files for
    /// [`Evictor::evict`].
    pub fn new(dir: &Path) -> std::io::Result<Evictor> {
        for p in files_under(dir)? {
            let f = File::open(&p)?;
            f.sync_data()?;
            drop_clean_pages(&f);
        }
        let logs = log_files(dir).iter().map(File::open).collect::<std::io::Result<Vec<_>>>()?;
        Ok(Evictor { logs })
    }
    /// Drops the `.log` files' clean pages from the page cache (`posix_fadvise(DONTNEED)`).
    pub fn evict(&self) -> std::io::Result<()> {
        self.logs.iter().for_each(drop_clean_pages);
        Ok(())
    }
}

/// Every regular file under `dir`, recursively.
fn files_under(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let t = e.file_type()?;
        if t.is_dir() {
            out.extend(files_under(&e.path())?);
        } else if t.is_file() {
            out.push(e.path());
        }
    }
    Ok(out)
}

/// This thread's I/O counters (the `Log` runs on it, so they are the log's) and the process's
/// usage.
fn thread_counters() -> Counters {
    let io = seglog::io::thread_stats();
    Counters {
        io_enters: io.enters,
        io_ops: io.ops,
        writes: io.writes,
        bytes_written: io.bytes_written,
        bytes_read: io.bytes_read,
        fsyncs: io.fsyncs,
        usage: Usage::now(),
        ..Counters::default()
    }
}

/// The seglog side in `setup.mode`: appends, warm lookups, cold lookups, on a thread of its own
/// (io_uring rings and the I/O counters are per thread). Returns the [`APPEND`], [`WARM`] and
/// [`COLD`] rows.
pub fn run(dir: &Path, setup: &Setup, p: &LogParams) -> LogResult<Vec<RunReport>> {
    let (dir, setup, p) = (dir.to_path_buf(), setup.clone(), *p);
    std::thread::Builder::new()
        .name("bench-log".into())
        .spawn(move || run_on_this_thread(&dir, &setup, &p))?
        .join()
        .map_err(|_| "the log workload's thread panicked")?
}

/// Point lookups of `offsets` in `log`, each timed alone, `before` untimed before each and the
/// check after it. Returns the histogram, the bytes and the reads' own time.
fn seglog_lookups(
    log: &Log,
    batches: &Batches,
    first_ts: i64,
    offsets: &[i64],
    before: impl Fn() -> std::io::Result<()>,
) -> LogResult<(Hist, u64, f64)> {
    let (mut hist, mut bytes, mut seconds) = (Hist::new(), 0u64, 0.0f64);
    for &offset in offsets {
        before()?;
        let s = Instant::now();
        let d = log.read(offset, 1, None, true)?;
        let took = s.elapsed();
        hist.record(took);
        seconds += took.as_secs_f64();
        bytes += d.records.len() as u64;
        check_stamped(batches, first_ts, offset, &d.records)?;
    }
    Ok((hist, bytes, seconds))
}

/// [`run`]'s body, on the thread that owns the `Log`.
fn run_on_this_thread(dir: &Path, setup: &Setup, p: &LogParams) -> LogResult<Vec<RunReport>> {
    let opened = seglog::io::storage_for_mode(setup.mode);
    let options = |recovery: Recovery| LogOptions {
        storage: opened.storage.clone(),
        recovery,
        ..LogOptions::with_config(setup.log_config())
    };
    let path: PathBuf = dir.join("log-0");
    let batches = Batches::new(setup, p.records);
    let fallback = opened.fallback.as_ref().map_or(String::new(), |why| format!("; fell back to sync: {why}"));
    // The log's index arena: the process-wide one (`LogOptions`' default resources), read
    // when a row is made (after the appends have put indexes in it).
    let huge_pages =
        || SegmentResources::process_default().report().arena.backing.map_or_else(|| "n/a".into(), |b| b.name().into());
    let report = |workload: &str| RunReport {
        workload: workload.into(),
        system: "seglog".into(),
        mode_requested: setup.mode.name().into(),
        mode: opened.mode.name().into(),
        huge_pages: huge_pages(),
        durability: durability_name(Durability::None),
        batch_bytes: batches.batch_len(),
        ..RunReport::default()
    };
    let mut out = Vec::new();
    std::fs::create_dir_all(dir)?;

    // Appends.
    let mut log = Log::open(&path, options(Recovery::default()))?;
    let first_ts = first_timestamp_ms();
    let (hist, seconds, delta, timeline) = timed_appends(&mut log, &batches, first_ts)?;
    let mut r = report(APPEND);
    r.ops = batches.count();
    r.bytes = batches.bytes();
    r.records = batches.records() as u64;
    r.timeline = timeline.points();
    r.note = format!(
        "Log::append_as_leader, one caller, one batch per call, then every byte in the file, no fsync (seal fsyncs at a roll); preallocate {}{fallback}",
        setup.preallocate
    );
    out.push(r.finish(hist, seconds, &delta));

    // Warm lookups: the page cache and the tail cache as the appends left them.
    let offsets = lookup_offsets(p.seed, p.lookups, batches.records());
    let lookup_report = |workload: &str, (hist, bytes, seconds): (Hist, u64, f64), delta: Counters, note: String| {
        let mut r = report(workload);
        r.ops = offsets.len() as u64;
        r.bytes = bytes;
        r.records = offsets.len() as u64 * batches.records_per_batch as u64;
        r.note = note;
        r.finish(hist, seconds, &delta)
    };
    let c0 = thread_counters();
    let warm = seglog_lookups(&log, &batches, first_ts, &offsets, || Ok(()))?;
    let note = "Log::read(offset, max 1 B, min one batch), checked; right after the appends".to_string();
    out.push(lookup_report(WARM, warm, thread_counters().since(&c0), note));

    // Cold: a clean reopen (no tail cache), and the page cache dropped before every lookup.
    log.close()?;
    let log = Log::open(&path, options(Recovery::Clean))?;
    let direct = opened.mode == IoMode::Direct;
    let evictor = Evictor::new(&path)?;
    let c0 = thread_counters();
    let before = || if direct { Ok(()) } else { evictor.evict() };
    let cold = seglog_lookups(&log, &batches, first_ts, &offsets, before)?;
    let note = if direct {
        "the same lookups after a clean reopen, the page cache of its files dropped (O_DIRECT reads)".to_string()
    } else {
        "the same lookups after a clean reopen, the .log files' page cache dropped before each".to_string()
    };
    out.push(lookup_report(COLD, cold, thread_counters().since(&c0), note));
    log.close()?;

    // The plain appends again, then the same from an idempotent producer, each on a log of its
    // own, back to back: the pair the idempotent target compares.
    // Idempotent appends between two plain passes, each on a fresh log: the plain row is both
    // passes together, so that neither side always runs first.
    let idem = batches.idempotent(1);
    let mut plain = (Hist::new(), 0.0, Counters::default());
    let mut idempotent = None;
    for (name, b) in [("log-plain-1", &batches), ("log-idempotent-0", &idem), ("log-plain-2", &batches)] {
        let mut log = Log::open(dir.join(name), options(Recovery::default()))?;
        let (hist, seconds, delta, _) = timed_appends(&mut log, b, first_ts)?;
        log.close()?;
        if b.producer.is_some() {
            idempotent = Some((hist, seconds, delta));
        } else {
            plain.0.merge(&hist);
            plain.1 += seconds;
            plain.2 = delta;
        }
    }
    let (hist, seconds, delta) = idempotent.expect("the idempotent pass ran");
    let mut r = report(APPEND_IDEMPOTENT);
    r.ops = idem.count();
    r.bytes = idem.bytes();
    r.records = idem.records() as u64;
    r.note = "as log-append, the batches of one idempotent producer (a sequence per batch, checked), between the two passes of log-append-plain".into();
    out.push(r.finish(hist, seconds, &delta));
    let mut r = report(APPEND_PLAIN);
    r.ops = 2 * batches.count();
    r.bytes = 2 * batches.bytes();
    r.records = 2 * batches.records() as u64;
    r.note = "as log-append, on a fresh log, once right before and once right after log-append-idempotent (both passes; the counters are the second's)".into();
    out.push(r.finish(plain.0, plain.1, &plain.2));

    out.extend(catch_up(dir, &options, &batches, first_ts, &report)?);
    for (workload, producers) in [(ROLL, 0), (ROLL_WITH_PRODUCERS, (p.records as i64).min(ROLL_PRODUCERS))] {
        out.push(rolls(&dir.join(workload), &options, producers, first_ts, report(workload))?);
    }
    Ok(out)
}

/// Passes of each read in [`catch_up`], alternating.
const CATCH_UP_PASSES: usize = 3;

/// A transactional log of the run's batches (8 producers, each batch one transaction, then its
/// marker, every 100th an ABORT), reopened cleanly (no tail cache), then read from the start to
/// its end in fetches of 1 MiB, alternately uncommitted and committed, [`CATCH_UP_PASSES`] times
/// each: the [`CATCHUP_UNCOMMITTED`] and [`CATCHUP_COMMITTED`] rows, every pass checked (all of it
/// read; the committed one handed every aborted transaction, the other none).
fn catch_up(
    dir: &Path,
    options: &dyn Fn(Recovery) -> LogOptions,
    batches: &Batches,
    first_ts: i64,
    report: &dyn Fn(&str) -> RunReport,
) -> LogResult<Vec<RunReport>> {
    use seglog::log::{FetchIsolation, MarkerType, TxnMarker};
    const PRODUCERS: u64 = 8;
    let path = dir.join("log-txn-0");
    let mut log = Log::open(&path, options(Recovery::default()))?;
    let mut seqs = [0i32; PRODUCERS as usize];
    let mut aborted = std::collections::HashSet::new();
    for i in 0..batches.count() {
        let pid = (i % PRODUCERS) as usize;
        let mut b = batches.transactional(first_ts, i, pid as i64, seqs[pid]);
        seqs[pid] = seqs[pid].wrapping_add(batches.records_per_batch as i32);
        let first = log.append_as_leader(&mut b, 0)?.first_offset;
        let kind = if i % 100 == 99 {
            aborted.insert(first);
            MarkerType::Abort
        } else {
            MarkerType::Commit
        };
        log.append_txn_marker(
            &TxnMarker { producer_id: pid as i64, producer_epoch: 0, coordinator_epoch: 0, kind },
            0,
        )?;
    }
    log.close()?;
    let log = Log::open(&path, options(Recovery::Clean))?;
    let end = log.log_end_offset();
    if log.last_stable_offset() != end {
        return Err(format!("last stable offset {} below the log end {end}", log.last_stable_offset()).into());
    }
    let mut rows = Vec::new();
    // (latencies, bytes, seconds) of each isolation's passes; the I/O counters are not kept (the
    // passes alternate).
    let mut passes: Vec<(Hist, u64, f64)> = (0..2).map(|_| (Hist::new(), 0, 0.0)).collect();
    for pass in 0..CATCH_UP_PASSES {
        // Each isolation first in turn, so that neither always reads after the other.
        let order = if pass % 2 == 0 { [0, 1] } else { [1, 0] };
        for k in order {
            let isolation = [FetchIsolation::HighWatermark, FetchIsolation::TxnCommitted][k];
            let (mut next, mut handed) = (0i64, std::collections::HashSet::new());
            let p = &mut passes[k];
            while next < end {
                let s = Instant::now();
                let d = log.fetch(next, 1 << 20, isolation, true)?;
                let took = s.elapsed();
                p.0.record(took);
                p.2 += took.as_secs_f64();
                p.1 += d.records.len() as u64;
                handed.extend(d.aborted_transactions.iter().map(|a| a.first_offset));
                next = d.next_offset().ok_or_else(|| format!("an empty fetch at {next} below {end}"))?;
            }
            let want = if isolation == FetchIsolation::TxnCommitted { aborted.len() } else { 0 };
            if handed.len() != want || !handed.iter().all(|f| aborted.contains(f)) {
                return Err(
                    format!("{isolation:?}: {} aborted transactions handed, {want} expected", handed.len()).into()
                );
            }
        }
    }
    for ((hist, bytes, seconds), (workload, what)) in passes.into_iter().zip([
        (CATCHUP_UNCOMMITTED, "Log::fetch(HighWatermark)"),
        (CATCHUP_COMMITTED, "Log::fetch(TxnCommitted): to the LSO, with the aborted transactions"),
    ]) {
        let mut r = report(workload);
        r.ops = hist.count();
        r.bytes = bytes;
        r.records = (CATCH_UP_PASSES as u64) * batches.records() as u64;
        r.note = format!(
            "{what}, 1 MiB fetches from offset 0 to the end of a log of {} one-batch transactions of 8 producers, 1 in 100 aborted, after a clean reopen; {CATCH_UP_PASSES} passes alternating with the other isolation, each first in turn",
            batches.count()
        );
        rows.push(r.finish(hist, seconds, &Counters::default()));
    }
    log.close()?;
    Ok(rows)
}

/// Rolls timed: 50 times a small batch appended, then `Log::roll` (which fsyncs the sealed
/// segment, creates the new one and writes the producers' `.snapshot`), on a log holding
/// `producers` idempotent producers (one small batch each, appended first).
fn rolls(
    dir: &Path,
    options: &dyn Fn(Recovery) -> LogOptions,
    producers: i64,
    first_ts: i64,
    mut r: RunReport,
) -> LogResult<RunReport> {
    const ROLLS: u64 = 50;
    let mut log = Log::open(dir, options(Recovery::default()))?;
    let small = Batches { template: make_batch(128, 1, 0), records_per_batch: 1, count: 1, producer: None };
    for pid in 0..producers {
        let mut b = small.idempotent(pid).nth(first_ts, 0);
        log.append_as_leader(&mut b, 0)?;
    }
    let (mut hist, mut seconds) = (Hist::new(), 0.0);
    let c0 = thread_counters();
    for i in 0..ROLLS {
        log.append_as_leader(&mut small.nth(first_ts, i), 0)?;
        let s = Instant::now();
        log.roll(None)?;
        let took = s.elapsed();
        hist.record(took);
        seconds += took.as_secs_f64();
    }
    let delta = thread_counters().since(&c0);
    if log.producer_state().len() as i64 != producers {
        return Err(format!("{} producers kept, {producers} appended", log.producer_state().len()).into());
    }
    r.ops = ROLLS;
    r.note = format!(
        "Log::roll after one small append, {ROLLS} times, with {producers} idempotent producers in the state (the .snapshot written at each roll: {} bytes)",
        10 + 46 * producers
    );
    log.close()?;
    Ok(r.finish(hist, seconds, &delta))
}

/// Appends every batch of `batches` (each must go in at its own offsets, not be taken for a
/// retry), then waits for every byte to be in the file: the latency of each call, the seconds,
/// the counters' delta and the bytes over time.
fn timed_appends(log: &mut Log, batches: &Batches, first_ts: i64) -> LogResult<(Hist, f64, Counters, Timeline)> {
    let mut hist = Hist::new();
    let c0 = thread_counters();
    let t0 = Instant::now();
    let mut timeline = Timeline::new(t0);
    for i in 0..batches.count() {
        let mut b = batches.nth(first_ts, i);
        let s = Instant::now();
        let info = log.append_as_leader(&mut b, 0)?;
        let now = Instant::now();
        hist.record(now - s);
        timeline.add(now, b.len() as u64);
        if info.duplicate || info.first_offset != i as i64 * batches.records_per_batch {
            return Err(format!("batch {i} appended at offset {} ({info:?})", info.first_offset).into());
        }
    }
    log.finish_writes()?;
    Ok((hist, t0.elapsed().as_secs_f64(), thread_counters().since(&c0), timeline))
}

/// The Kafka reference design on the same batches: one partition, its produce (`write(2)` per
/// append, no fsync: the run's durability is not applied), then the same point lookups warm and
/// cold. Returns its [`APPEND`], [`WARM`] and [`COLD`] rows.
pub fn kafka_reference(dir: &Path, setup: &Setup, p: &LogParams) -> LogResult<Vec<RunReport>> {
    let batches = Batches::new(setup, p.records);
    let setup = Setup { partitions: 1, durability: Durability::None, ..setup.clone() };
    let (mut r, run) = refs::kafka_produce(dir, &setup, batches.bytes())?;
    r.workload = APPEND.into();
    r.note = "write(2) per append, page cache, no fsync (fdatasync of the sealed segment at a roll)".into();
    let mut out = vec![r];
    let offsets = lookup_offsets(p.seed, p.lookups, batches.records());
    let targets = || offsets.iter().map(|&o| (0usize, o));
    let check =
        |offset: i64, got: &[u8]| check_stamped(&batches, run.first_ts, offset, got).map_err(std::io::Error::other);
    let rows = |workload: &str, reads: refs::Reads, note: &str| {
        let mut r = refs::report("kafka-ref", workload, &Setup { durability: Durability::None, ..setup.clone() });
        r.note = note.into();
        reads.report(r, setup.records_per_batch as u64)
    };
    let warm = refs::kafka_reads(&run, targets(), 1, || Ok(()), check)?;
    out.push(rows(WARM, warm, "read(offset, max 1 B): mapped index, header walk, pread; checked"));
    let evictor = Evictor::new(dir)?;
    let cold = refs::kafka_reads(&run, targets(), 1, || evictor.evict(), check)?;
    out.push(rows(COLD, cold, "the same lookups, the .log files' page cache dropped before each (index maps stay)"));
    Ok(out)
}

/// The `commitlog` crate on the same batches: one message per batch (its payload the whole v2
/// batch; commitlog's offset `i` is batch `i`, records `16 i ..= 16 i + 15` at 16 records per
/// batch), `append_msg` each (one `write(2)` of its 20-byte header and the batch, a dense index
/// entry through the map; no flush), then the same record offsets looked up as the message of
/// their batch (`read(i, one message)`: the mapped index, one pread, its CRC checked), warm and
/// cold. Returns its [`APPEND`], [`WARM`] and [`COLD`] rows.
pub fn commitlog_reference(dir: &Path, setup: &Setup, p: &LogParams) -> LogResult<Vec<RunReport>> {
    use commitlog::message::MessageSet;
    let batches = Batches::new(setup, p.records);
    let mut log = refs::commitlog_open(dir, setup)?;
    let (mut r, first_ts) = refs::commitlog_produce(&mut log, setup, batches.count(), false)?;
    r.workload = APPEND.into();
    r.note = "append_msg, one message per batch, no flush (msyncs the sealed index at a roll, not the data)".into();
    let mut out = vec![r];
    let offsets = lookup_offsets(p.seed, p.lookups, batches.records());
    let targets = || offsets.iter().map(|&o| batches.index_of(o));
    let check = |i: u64, got: &commitlog::message::MessageBuf| {
        let m = got.iter().next().ok_or_else(|| std::io::Error::other(format!("message {i}: nothing returned")))?;
        if m.offset() != i {
            return Err(std::io::Error::other(format!("message {i}: message {} returned", m.offset())));
        }
        check_batch(m.payload(), &batches.nth(first_ts, i)).map(|_| ()).map_err(std::io::Error::other)
    };
    let one = setup.batch_bytes + 64;
    let rows = |workload: &str, reads: refs::Reads, note: &str| {
        let mut r = refs::report("commitlog", workload, &Setup { durability: Durability::None, ..setup.clone() });
        r.note = note.into();
        reads.report(r, setup.records_per_batch as u64)
    };
    let warm = refs::commitlog_reads(&log, targets(), one, || Ok(()), check)?;
    out.push(rows(WARM, warm, "read(batch's message, one message): mapped dense index, pread, CRC; checked"));
    let evictor = Evictor::new(dir)?;
    let cold = refs::commitlog_reads(&log, targets(), one, || evictor.evict(), check)?;
    out.push(rows(COLD, cold, "the same lookups, the .log files' page cache dropped before each (index maps stay)"));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small_setup(mode: IoMode) -> Setup {
        Setup {
            mode,
            shards: 1,
            partitions: 1,
            batch_bytes: 4096,
            records_per_batch: 4,
            durability: Durability::None,
            segment_bytes: 64 << 10,
            index_interval_bytes: 4096,
            preallocate: false,
            zero_fill: seglog::ZeroFill::Off,
            sync_method: seglog::SyncMethod::default(),
        }
    }

    #[test]
    fn the_check_refuses_a_batch_not_appended() {
        let b = Batches::new(&small_setup(IoMode::Sync), 40);
        let want = b.nth(1000, 3);
        assert!(check_batch(&want, &want).is_ok());
        assert!(check_batch(&b.nth(1000, 4), &want).is_err(), "another timestamp");
        assert!(check_batch(&want[..100], &want).is_err(), "cut short");
        let mut stamped = want.clone();
        seglog::format::batch::set_base_offset(&mut stamped, 12);
        assert!(check_stamped(&b, 1000, 13, &stamped).is_ok());
        assert!(check_stamped(&b, 1000, 16, &stamped).is_err(), "offset 16 is in batch 4");
    }

    /// Every system (seglog in each I/O mode) appends, looks up and checks on a small log, and
    /// reports the three rows with the figures filled in (seglog a fourth: the idempotent
    /// appends).
    #[test]
    fn every_system_reports_appends_and_checked_lookups() {
        let d = tempfile::tempdir_in(std::env::temp_dir()).unwrap();
        let setup = small_setup(IoMode::Sync);
        let p = LogParams { records: 400, lookups: 50, seed: 7 };
        let mut rows = Vec::new();
        for mode in [IoMode::Direct, IoMode::Buffered, IoMode::Sync] {
            let setup = Setup { mode, ..setup.clone() };
            rows.extend(run(&d.path().join(format!("seglog-{}", mode.name())), &setup, &p).unwrap());
        }
        rows.extend(kafka_reference(&d.path().join("kafka"), &setup, &p).unwrap());
        rows.extend(commitlog_reference(&d.path().join("commitlog"), &setup, &p).unwrap());
        let names: Vec<(String, String)> = rows.iter().map(|r| (r.system.clone(), r.workload.clone())).collect();
        let seglog_only =
            [APPEND_PLAIN, APPEND_IDEMPOTENT, CATCHUP_UNCOMMITTED, CATCHUP_COMMITTED, ROLL, ROLL_WITH_PRODUCERS];
        for system in ["seglog", "kafka-ref", "commitlog"] {
            for w in [APPEND, WARM, COLD].into_iter().chain(seglog_only) {
                let n = names.iter().filter(|x| x.0 == system && x.1 == w).count();
                let want = match system {
                    "seglog" => 3,
                    _ if seglog_only.contains(&w) => 0,
                    _ => 1,
                };
                assert_eq!(n, want, "{system} {w}: {names:?}");
            }
        }
        for r in &rows {
            let ops = match r.workload.as_str() {
                APPEND | APPEND_IDEMPOTENT => 100,
                APPEND_PLAIN => 200,
                // A fetch reads one segment (64 KiB here) at most.
                CATCHUP_UNCOMMITTED | CATCHUP_COMMITTED => {
                    assert!(r.ops >= 7 * CATCH_UP_PASSES as u64 && r.bytes >= 3 * 400 * 1024, "{r:?}");
                    continue;
                }
                _ => 50,
            };
            assert_eq!(r.ops, ops, "{} {}", r.system, r.workload);
            if r.workload.starts_with("log-roll") {
                assert!(r.bytes == 0 && r.latency.p50_us > 0.0 && r.note.contains("idempotent producers"), "{r:?}");
            } else {
                assert!(r.bytes >= ops.min(50) * 4096 && r.latency.p50_us > 0.0, "{r:?}");
            }
        }
    }
}
