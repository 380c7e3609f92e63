//! Crash simulation on [`SimStorage`]: small seeded workloads (appends of varied sizes across
//! tiny segments, flushes, group commits, rolls, clean close and reopen, truncation, DeleteRecords,
//! retention) are cut by a power loss after every I/O operation `k` in turn. Each crash state
//! is recovered with `Log::open` and checked against a model of what was appended and what was
//! acknowledged durable; then the recovery itself is cut at several points and run again, and
//! must give the same log.
//!
//! The promises checked (docs/durability.md):
//! 1. a batch below an observed recovery point (every flush, roll and clean close moves it)
//!    survives with the same offset and bytes;
//! 2. recovered batches are a contiguous run of what was appended, in order; only unflushed
//!    batches can be missing, and only as a suffix;
//! 3. nothing truncated, deleted or never appended comes back;
//! 4. every index entry points at a batch start (offset index: the batch's last offset; time
//!    index: its max timestamp), recovered indexes are exactly Kafka's rebuild, and fetches and
//!    timestamp lookups agree with a linear scan;
//! 6. a crash during recovery, then recovery again, gives the same log.
//!
//! About half the workloads run with zero fill (`LogOptions::zero_fill_bytes`: zeros written
//! ahead of the active segment's data; without write-through taken and submitted with each group
//! commit, as the shard does). While a workload runs, after every step, the files are checked as
//! reads see them: a sealed `.log` is exactly its batches, the active one runs past its data with
//! zeros only, the data is the batches appended (no zero write lands on it), and a clean close
//! leaves every `.log` exactly its batches. After recovery only a preallocated new segment may run
//! past its data.
//!
//! `SEGLOG_CRASH_SEED` (base seed), `SEGLOG_CRASH_STATES` (how many crash states at least) and
//! `SEGLOG_CRASH_K` (only this I/O index, with `SEGLOG_CRASH_SEED` naming one workload) steer
//! long runs and reproductions. A failure prints the seed, `k`, the crash variant and the point
//! at which recovery was cut; a failing seed becomes a regression test at the end of this file.

mod common;

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use common::{BatchMeta, T0};
use seglog::config::{LogConfig, ManualClock};
use seglog::format::batch::{split_batches, BatchHeader};
use seglog::format::builder::BatchBuilder;
use seglog::format::filename::{self, FileKind, FileSuffix, SegmentFileName};
use seglog::format::record::batch_records;
use seglog::format::Compression;
use seglog::io::sim::{CrashConfig, Fault, SimRng, SimStorage};
use seglog::io::{DirectAlignment, Storage};
use seglog::log::{AsyncWrites, ListOffset, LoadReport, Log, LogOptions, Recovery, Writes};

/// Whether `Log::truncate_to` is crash-safe (promises 2 and 3). It is not yet:
/// - the `.log` is cut with `set_len` and not fsynced, so after a crash the truncated batches can
///   come back until the next flush of that segment;
/// - later segments are renamed `.deleted` and the cut segment is truncated before the directory
///   is fsynced, so a crash can keep the cut and lose the renames: the log then has a hole (the
///   cut segment ends at the target, the next one starts past it, with the truncated data).
///
/// While false, the model tolerates exactly that (truncated batches at or past the cut coming
/// back), and `truncation_is_durable_when_truncate_to_returns` /
/// `crash_during_truncation_leaves_no_hole` check it.
const TRUNCATION_DURABLE: bool = true;
/// Whether a crash during `Log::truncate_to` leaves every index usable. It does not yet: the
/// truncation makes the segment holding the target active again, which resizes its index files
/// back to `segment.index.bytes` (zeros) before anything is durable; when the crash comes before
/// the broker checkpoints the lowered recovery point, that segment lies below the recovery point,
/// is not recovered, and its time index now ends in zero entries: its max timestamp reads as 0 and
/// timestamp lookups skip it. While false, timestamp lookups are not compared after a crash inside
/// `truncate_to` (`crash_during_truncation_keeps_time_lookups_right` checks it).
const TRUNCATE_LEAVES_SAFE_INDEXES: bool = true;

thread_local! {
    /// Set by the tests that check the known engine bugs above: no tolerance on this thread.
    static STRICT: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

fn truncation_durable() -> bool {
    TRUNCATION_DURABLE || STRICT.with(|s| s.get())
}
fn truncate_leaves_safe_indexes() -> bool {
    TRUNCATE_LEAVES_SAFE_INDEXES || STRICT.with(|s| s.get())
}
const PARENT: &str = "/data";
const DIR: &str = "/data/topic-0";
const DEFAULT_SEED: u64 = 0x5E_6106_C4A5;
const DEFAULT_STATES: u64 = 20_000;
/// Crash variants per I/O index: different draws of what the power cut keeps.
const VARIANTS: u64 = 2;
/// Points at which each recovery is itself cut.
const RECOVERY_CUTS: u64 = 3;

// ---------------------------------------------------------------------------------------------
// Workloads
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Debug)]
struct BatchSpec {
    records: usize,
    value_len: usize,
    codec: Compression,
    /// Follower batches: offsets skipped before this batch (compaction-like gaps).
    gap: i64,
}

#[derive(Clone, Debug)]
enum Step {
    /// One append request holding these batches.
    Append(Vec<BatchSpec>),
    /// `Log::flush`.
    Flush,
    /// The engine's group commit: `take_writes(sync)` and the zero writes, one `submit_async`,
    /// `writes_started`, then `poll_writes` (the write may be left in flight: see `group_commit`).
    GroupCommit,
    Roll,
    /// Clean close, then reopen with `Recovery::Clean`.
    Reopen,
    AdvanceClock(i64),
    /// `truncate_to(log end - n)`.
    TruncateBack(i64),
    /// The high watermark to the log end, then `delete_records(log start + n)`.
    DeleteRecords(i64),
    /// `apply_retention` (after the high watermark is moved to the log end).
    Retention,
}

#[derive(Clone, Debug)]
struct Workload {
    seed: u64,
    config: LogConfig,
    /// `.log` files are O_DIRECT-like (512-byte aligned writes through the tail).
    direct: bool,
    /// The simulated filesystem's block, which the tail's direct writes are aligned to: 512 (the
    /// device's alignment) or 4096 (ext4's blocks on a 512-byte-sector disk).
    fs_block: usize,
    write_through: bool,
    follower: bool,
    steps: Vec<Step>,
    /// `LogOptions::zero_fill_bytes` (0 for none).
    zero_fill_bytes: u32,
    /// How many group commits (percent) are left in flight, their batches running late and out
    /// of order on the simulated disk. 0: every batch runs whole at submission, in order (the
    /// I/O sequence the regression seeds found before writes could be in flight name).
    in_flight_percent: u32,
    /// With `write_through`: 0 writes each append before it returns (`Writes::Through`); n > 0
    /// lets the log submit its own writes, up to n in flight (`Writes::Async`).
    async_in_flight: usize,
}

fn pick<T: Copy>(rng: &mut SimRng, xs: &[T]) -> T {
    xs[rng.below(xs.len() as u64) as usize]
}

impl Workload {
    /// The workload of `seed`: [`Workload::without_zero_fill`], then zero fill drawn from the same
    /// generator after everything else, so that a seed keeps the config and steps it had before
    /// zero fill existed (its I/O sequence, and so its `k`s, change when zero fill is drawn on).
    ///
    /// Half of the direct workloads then get a filesystem of 4 KiB blocks (the tail's writes
    /// aligned to them over 512-byte sectors), from a generator of their own.
    ///
    /// Zero fill writes whole 4096-byte blocks from the block after the one the data ends in, and
    /// stops at `segment.bytes` rounded up to 4096: under segments of less than 4096 bytes it could
    /// only ever zero an empty segment's first block. Most zero-fill workloads therefore get
    /// segments of several blocks (drawn last too), so that appends run into the zeros.
    fn generate(seed: u64) -> Workload {
        let (mut wl, mut rng) = Workload::draw(seed);
        wl.zero_fill_bytes = if rng.percent(50) { 0 } else { pick(&mut rng, &[512, 4096, 8192, 16_384, 65_536]) };
        if wl.zero_fill_bytes > 0 && rng.percent(70) {
            wl.config.segment_bytes = 4096 + rng.below(16_384) as u32;
        }
        wl.in_flight_percent = 50;
        // Half of the direct workloads on a filesystem of 4 KiB blocks, drawn from a generator of
        // its own so that config, steps and zero fill stay those drawn before.
        if wl.direct && SimRng::new(seed ^ 0xF5B1_0C4E).percent(50) {
            wl.fs_block = 4096;
        }
        wl
    }

    /// The workload of `seed` with every flush a group commit, each left in flight.
    fn commits_in_flight(seed: u64) -> Workload {
        let mut wl = Workload::generate(seed);
        wl.write_through = false;
        wl.in_flight_percent = 100;
        for step in &mut wl.steps {
            if matches!(step, Step::Flush) {
                *step = Step::GroupCommit;
            }
        }
        wl
    }

    /// The workload of `seed` with appends that return before their writes are done
    /// (`Writes::Async`, up to 1 to 4 writes in flight, drawn from a generator of its own so
    /// that config and steps are those of [`Workload::generate`]), running late and out of
    /// order; the clock's steps are where the embedder's loop polls the log.
    ///
    /// The log writes whole tail chunks (256 KiB) while others are in flight, so the values
    /// are scaled up 256 times and the segments hold a few chunks: appends span chunks, and
    /// several writes are in flight at once.
    fn async_appends(seed: u64) -> Workload {
        let mut wl = Workload::generate(seed);
        let mut rng = SimRng::new(seed ^ 0xA5F0_5EED);
        wl.write_through = true;
        wl.async_in_flight = 1 + rng.below(4) as usize;
        wl.config.segment_bytes = 768 * 1024 + rng.below(512 * 1024) as u32;
        wl.config.segment_index_bytes = wl.config.segment_index_bytes.max(4096);
        wl.config.index_interval_bytes *= 256;
        if wl.config.retention_bytes > 0 {
            wl.config.retention_bytes *= 256;
        }
        for step in &mut wl.steps {
            match step {
                Step::GroupCommit => *step = Step::Flush,
                Step::Append(specs) => specs.iter_mut().for_each(|s| s.value_len *= 256),
                _ => {}
            }
        }
        wl
    }

    /// The workload of `seed` as drawn before zero fill existed (zero fill off): for the
    /// regression seeds found then, whose `k` names an I/O of that sequence.
    fn without_zero_fill(seed: u64) -> Workload {
        Workload::draw(seed).0
    }

    /// Everything but zero fill, and the generator to draw more from.
    fn draw(seed: u64) -> (Workload, SimRng) {
        let mut rng = SimRng::new(seed);
        let config = LogConfig {
            segment_bytes: 700 + rng.below(2_300) as u32,
            index_interval_bytes: pick(&mut rng, &[0, 100, 300, 700]),
            segment_index_bytes: pick(&mut rng, &[48, 96, 4096]),
            preallocate: rng.percent(20),
            segment_ms: if rng.percent(20) { 5_000 } else { LogConfig::default().segment_ms },
            retention_ms: pick(&mut rng, &[-1, 20_000, 60_000]),
            retention_bytes: pick(&mut rng, &[-1, -1, 2_500]),
            file_delete_delay_ms: pick(&mut rng, &[0, 1_000]),
            flush_messages: if rng.percent(15) { 4 } else { i64::MAX },
            ..LogConfig::default()
        };
        let follower = rng.percent(20);
        let write_through = !rng.percent(25);
        let direct = rng.percent(25);
        let n = 14 + rng.below(14) as usize;
        let mut steps = Vec::with_capacity(n);
        for _ in 0..n {
            let roll = rng.below(100);
            let step = match roll {
                0..=54 => {
                    let batches = if rng.percent(20) { 2 + rng.below(2) as usize } else { 1 };
                    let mut specs = Vec::new();
                    for _ in 0..batches {
                        specs.push(BatchSpec {
                            records: 1 + rng.below(5) as usize,
                            value_len: pick(&mut rng, &[0, 10, 40, 120, 300]),
                            codec: if rng.percent(15) {
                                pick(&mut rng, &[Compression::Gzip, Compression::Lz4, Compression::Zstd])
                            } else {
                                Compression::None
                            },
                            gap: if follower && rng.percent(25) { 1 + rng.below(3) as i64 } else { 0 },
                        });
                    }
                    Step::Append(specs)
                }
                55..=64 => Step::Flush,
                65..=71 if !write_through => Step::GroupCommit,
                65..=71 => Step::Flush,
                72..=75 => Step::Roll,
                76..=79 => Step::Reopen,
                80..=87 => Step::AdvanceClock(pick(&mut rng, &[100, 3_000, 30_000])),
                88..=91 => Step::TruncateBack(1 + rng.below(6) as i64),
                92..=95 => Step::DeleteRecords(1 + rng.below(4) as i64),
                _ => Step::Retention,
            };
            steps.push(step);
        }
        (
            Workload {
                seed,
                config,
                direct,
                fs_block: 512,
                write_through,
                follower,
                steps,
                zero_fill_bytes: 0,
                in_flight_percent: 0,
                async_in_flight: 0,
            },
            rng,
        )
    }
}

// ---------------------------------------------------------------------------------------------
// The model and running a workload
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Debug)]
struct ModelBatch {
    base: i64,
    next: i64,
    bytes: Vec<u8>,
}

/// What the workload appended and what it was told.
#[derive(Clone, Debug, Default)]
struct Model {
    /// Every batch that may be in the log, in order (truncated ones removed). The last request
    /// may have failed: its batches are here but need not be in the log.
    batches: Vec<ModelBatch>,
    /// Batches ending at or below this must survive (the largest recovery point observed since
    /// the last truncation, or the log end after a clean close).
    durable_next: i64,
    /// The recovery point a broker would have checkpointed last.
    recovery_point: i64,
    /// The log start offset a broker would have checkpointed last.
    log_start: i64,
    /// Segments below this base were deleted (retention, DeleteRecords) and must stay gone.
    first_kept_base: i64,
    /// The lowest offset a truncation cut since the active segment was last fsynced, and the
    /// batches it removed (see [`TRUNCATION_DURABLE`]).
    unsynced_truncation: Option<i64>,
    resurrectable: Vec<ModelBatch>,
    /// A `truncate_to` call was cut (see [`TRUNCATE_LEAVES_SAFE_INDEXES`]).
    truncating: bool,
    /// A retention or DeleteRecords call was cut: segments ending at or below this may be gone.
    deleting_below: Option<i64>,
    /// A clean close completed and nothing ran since: a broker would reopen with `Clean`.
    closed: bool,
    clock_ms: i64,
    appends: u64,
}

impl Model {
    /// The active segment was fsynced: a truncation in it is durable.
    fn synced(&mut self) {
        self.unsynced_truncation = None;
        self.resurrectable.clear();
    }

    fn observe(&mut self, log: &Log) {
        if self.unsynced_truncation.is_some_and(|cut| log.recovery_point() > cut) {
            self.synced();
        }
        self.recovery_point = log.recovery_point();
        self.durable_next = self.durable_next.max(log.recovery_point());
        self.log_start = self.log_start.max(log.log_start_offset());
    }
}

fn options(
    wl: &Workload,
    storage: &SimStorage,
    clock: &Arc<ManualClock>,
    recovery: Recovery,
    log_start: Option<i64>,
) -> LogOptions {
    LogOptions {
        config: wl.config.clone(),
        storage: Arc::new(storage.clone()),
        clock: clock.clone(),
        recovery,
        log_start_offset: log_start,
        tail_cache_bytes: 1024,
        writes: match (wl.write_through, wl.async_in_flight) {
            (false, _) => Writes::Caller,
            (true, 0) => Writes::Through,
            // Little unwritten memory (about two chunks), so that appends also wait for writes.
            (true, n) => Writes::Async(AsyncWrites { max_in_flight: n, max_unwritten_bytes: 600 * 1024 }),
        },
        zero_fill_bytes: wl.zero_fill_bytes,
        ..seglog_tests::log_options()
    }
}

thread_local! {
    /// Faults every storage of this thread gets (for checking the harness itself).
    static FAULTS: std::cell::RefCell<Vec<Fault>> = const { std::cell::RefCell::new(Vec::new()) };
}

fn new_storage(wl: &Workload) -> SimStorage {
    let sim = if wl.direct {
        SimStorage::with_alignment(DirectAlignment { mem: 512, offset: 512, fs_block: wl.fs_block })
    } else {
        SimStorage::new()
    };
    FAULTS.with(|f| f.borrow().iter().for_each(|&x| sim.inject(x)));
    sim.put_dir(PARENT);
    sim.set_now_ms(T0);
    if wl.in_flight_percent == 0 {
        sim.set_async_at_once();
    } else if wl.async_in_flight > 0 {
        // Writes the log submits itself stay in flight longer: several of them at once.
        sim.set_async_completions(wl.seed, 15);
    } else {
        sim.set_async_completions(wl.seed, 50);
    }
    sim
}

/// The bytes of one append request.
fn build_request(wl: &Workload, model: &mut Model, specs: &[BatchSpec], next_offset: i64, epoch: i32) -> Vec<u8> {
    let mut out = Vec::new();
    let mut next = next_offset;
    for spec in specs {
        model.appends += 1;
        let id = model.appends;
        let mut b = BatchBuilder::new().compression(spec.codec);
        if wl.follower {
            next += spec.gap;
            b = b.base_offset(next).partition_leader_epoch(epoch);
        }
        let mut rng = SimRng::new(wl.seed ^ id.wrapping_mul(0x1000_0001));
        for r in 0..spec.records {
            let ts = model.clock_ms + rng.below(1_000) as i64 - 500;
            let mut key = id.to_be_bytes().to_vec();
            key.extend_from_slice(&(r as u16).to_be_bytes());
            let value: Vec<u8> = (0..spec.value_len).map(|j| (id as usize * 31 + r * 7 + j) as u8).collect();
            b.push(ts, Some(&key), Some(&value), &[]);
        }
        let bytes = b.build().expect("build batch");
        next += spec.records as i64;
        out.extend_from_slice(&bytes);
    }
    out
}

/// Runs `wl` on `sim` until it completes or an operation fails (the storage halted or a fault
/// was injected). Returns the model and whether every step completed.
fn run(wl: &Workload, sim: &SimStorage) -> (Model, bool) {
    let (model, completed, _log) = run_open(wl, sim);
    (model, completed)
}

/// [`run`], handing back the log still open (`None` when it was closed and could not be
/// opened again), for a caller that cuts the power under it: a log dropped first would wait
/// for its writes in flight, and write what it holds unwritten.
fn run_open(wl: &Workload, sim: &SimStorage) -> (Model, bool, Option<Log>) {
    let mut model = Model { clock_ms: T0, first_kept_base: i64::MIN, ..Model::default() };
    let clock = Arc::new(ManualClock::new(T0));
    let mut log = match Log::open(DIR, options(wl, sim, &clock, Recovery::default(), None)) {
        Ok(l) => l,
        Err(_) => return (model, false, None),
    };
    let segment_bytes = wl.config.segment_bytes as usize;
    for (i, step) in wl.steps.iter().enumerate() {
        model.closed = false;
        let epoch = 1 + (i / 8) as i32;
        let ok = match step {
            Step::Append(specs) => {
                let leo = log.log_end_offset();
                let mut req = build_request(wl, &mut model, specs, leo, epoch);
                if req.len() > segment_bytes {
                    continue;
                }
                // A failed append may still have reached the file: its batches join the model
                // (leader offsets are stamped in place, so they are read after the call).
                let r = if wl.follower { log.append_as_follower(&req) } else { log.append_as_leader(&mut req, epoch) };
                if wl.follower || r.is_ok() || leader_stamped(&req, leo) {
                    for (pos, h) in split_batches(&req, false).expect("whole batches") {
                        let bytes = req[pos..pos + h.size_in_bytes() as usize].to_vec();
                        model.batches.push(ModelBatch { base: h.base_offset, next: h.next_offset(), bytes });
                    }
                }
                if let Err(e) = &r {
                    if !matches!(e, seglog::Error::Io { .. } | seglog::Error::Failed { .. }) {
                        panic!("seed {:#x}: append refused unexpectedly: {e}", wl.seed);
                    }
                }
                r.is_ok()
            }
            Step::Flush => {
                let ok = log.flush().is_ok();
                if ok {
                    model.synced();
                }
                ok
            }
            Step::GroupCommit => {
                // Group commits left in flight, as the shard leaves them: appends go on meanwhile,
                // and the next group commit, flush, roll or close settles them.
                let wait = !SimRng::new(wl.seed ^ (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15))
                    .percent(wl.in_flight_percent);
                match group_commit(&mut log, sim, wait) {
                    Ok(true) => {
                        model.synced();
                        true
                    }
                    Ok(false) => true,
                    Err(_) => false,
                }
            }
            Step::Roll => {
                let before = log.segments().count();
                let ok = log.roll(None).is_ok();
                // A roll seals (fsyncs) the active segment, except when that segment is empty and
                // is replaced in place.
                if ok && log.segments().count() > before {
                    model.synced();
                }
                ok
            }
            Step::Reopen => {
                let leo = log.log_end_offset();
                let sizes: Vec<(i64, u32)> = log.segments().map(|s| (s.base_offset(), s.size())).collect();
                if log.close().is_err() {
                    return (model, false, None);
                }
                // A clean close leaves every `.log` exactly its batches (no zero fill, no
                // preallocation, no O_DIRECT padding): Kafka's tools read the file to its end.
                for (base, size) in sizes {
                    let path = Path::new(DIR).join(filename::log_file_name(base));
                    let len = sim.file_len(&path);
                    if len != Some(size as u64) {
                        live_failure(
                            wl,
                            i,
                            step,
                            format!("after a clean close {} is {len:?} bytes, its data {size}", path.display()),
                        );
                    }
                }
                model.durable_next = model.durable_next.max(leo);
                model.recovery_point = leo;
                model.synced();
                let before = sim.io_count();
                match Log::open(DIR, options(wl, sim, &clock, Recovery::Clean, Some(model.log_start))) {
                    Ok(l) => {
                        // A follower's truncation can leave the log end past its last batch
                        // (Kafka's too); the open ends the log after that batch, and the
                        // appends from there on are not durable until flushed. Never before it.
                        let data_end = model.batches.last().map_or(0, |b| b.next);
                        if l.log_end_offset() < data_end {
                            live_failure(
                                wl,
                                i,
                                step,
                                format!(
                                    "the clean reopen ends at {}, its last batch at {data_end}",
                                    l.log_end_offset()
                                ),
                            );
                        }
                        model.durable_next = model.durable_next.min(l.log_end_offset());
                        log = l;
                        true
                    }
                    Err(_) => {
                        // Cut before the open changed anything: the clean-shutdown marker is
                        // still there. Once the open has written, the broker had deleted the
                        // marker first (KAFKA-10471), so the next start is a hard one.
                        model.closed = sim.io_count() == before;
                        return (model, false, None);
                    }
                }
            }
            Step::AdvanceClock(ms) => {
                model.clock_ms += ms;
                clock.set(model.clock_ms);
                sim.set_now_ms(model.clock_ms);
                // The embedder's loop: collect completions, write the partial block, fsync if
                // flush.ms says so (a no-op for the other write modes). A failure it reports
                // fails the next append too.
                let _ = log.poll();
                true
            }
            Step::TruncateBack(n) => {
                let target = (log.log_end_offset() - n).max(log.log_start_offset()).max(first_base(&log));
                // While it runs, a truncation may already have removed the batches it cuts.
                let cut = model.batches.iter().find(|b| b.next > target).map(|b| b.base).unwrap_or(target);
                model.durable_next = model.durable_next.min(cut);
                model.truncating = true;
                // See TRUNCATION_DURABLE: from here until the segment is fsynced, the batches
                // past the cut may come back after a crash (also behind a hole).
                model.resurrectable.extend(model.batches.iter().filter(|b| b.next > cut).cloned());
                model.unsynced_truncation = Some(model.unsynced_truncation.unwrap_or(cut).min(cut));
                match log.truncate_to(target) {
                    Ok(_) => {
                        model.truncating = false;
                        let end = log.log_end_offset();
                        model.batches.retain(|b| b.next <= end);
                        model.durable_next = model.durable_next.min(end);
                        true
                    }
                    Err(_) => false,
                }
            }
            Step::DeleteRecords(n) => {
                let leo = log.log_end_offset();
                log.set_high_watermark(leo);
                let target = (log.log_start_offset() + n).min(leo);
                // Until it returns, any segment below the high watermark may be gone.
                model.deleting_below = Some(leo);
                match log.delete_records(target) {
                    Ok(_) => {
                        model.first_kept_base = model.first_kept_base.max(first_base(&log));
                        model.deleting_below = None;
                        true
                    }
                    Err(_) => false,
                }
            }
            Step::Retention => {
                let leo = log.log_end_offset();
                log.set_high_watermark(leo);
                // Until it returns, any segment below the high watermark may be gone.
                model.deleting_below = Some(leo);
                match log.apply_retention() {
                    Ok(_) => {
                        model.first_kept_base = model.first_kept_base.max(first_base(&log));
                        model.deleting_below = None;
                        true
                    }
                    Err(_) => false,
                }
            }
        };
        if !ok {
            return (model, false, Some(log));
        }
        model.observe(&log);
        if let Err(e) = check_live(wl, sim, &log, &model) {
            live_failure(wl, i, step, e);
        }
    }
    (model, true, Some(log))
}

/// The engine's write turn for one log, as the shard runs it: the outcome of the last turn's
/// writes if they were left in flight, then the data writes with their fdatasync and the zero
/// writes that keep the zero-fill lead as a batch of their own, both submitted at once. With
/// `wait` the data batch is then completed; without, it is polled once and may stay in flight
/// (the zero batch is polled by the log). True when a group commit completed (this turn's, or
/// one left in flight before): every commit holds an fdatasync.
fn group_commit(log: &mut Log, sim: &SimStorage, wait: bool) -> seglog::Result<bool> {
    let mut synced = false;
    while let Some(r) = log.poll_writes(true) {
        r?;
        synced = true;
    }
    let leo = log.log_end_offset();
    let ops = log.take_writes(7, true)?;
    let zeros = log.take_zero_fill(7);
    let batches = if zeros.is_empty() { vec![ops] } else { vec![ops, zeros] };
    let mut ios = sim.submit_async(batches).into_iter();
    log.writes_started(ios.next().expect("the data batch"), Some(leo));
    if let Some(z) = ios.next() {
        log.zero_fill_started(z);
    }
    match log.poll_writes(wait) {
        Some(r) => r.map(|()| true),
        None => Ok(synced || !log.writes_outstanding()),
    }
}

fn live_failure(wl: &Workload, i: usize, step: &Step, e: String) -> ! {
    panic!("seed {:#x}, step {i} ({step:?}), live state: {e}", wl.seed)
}

/// What the files hold while the log runs (after every step that completed; what reads see, not
/// what a crash keeps): every sealed `.log` is exactly its data; the active one may run past its
/// data, with zeros only (zero fill, preallocation, O_DIRECT padding); and once every appended
/// byte was handed to the kernel, each segment's data is the batches appended at those offsets,
/// byte for byte (no zero write ever landed on data).
fn check_live(wl: &Workload, sim: &SimStorage, log: &Log, model: &Model) -> Result<(), String> {
    let segments: Vec<_> = log.segments().collect();
    let written = log.unwritten_bytes() == 0;
    for (i, seg) in segments.iter().enumerate() {
        let path = Path::new(DIR).join(filename::log_file_name(seg.base_offset()));
        let bytes = sim.file(&path).ok_or_else(|| format!("{} is missing", path.display()))?;
        let size = seg.size() as usize;
        let active = i + 1 == segments.len();
        if active {
            if let Some(p) = bytes.iter().skip(size).position(|&b| b != 0) {
                return Err(format!(
                    "{} holds a non-zero byte at {} past its data ({size} bytes)",
                    path.display(),
                    size + p
                ));
            }
            if !written {
                continue;
            }
            if bytes.len() < size {
                return Err(format!("{} is {} bytes, its data {size}, all written", path.display(), bytes.len()));
            }
        } else if bytes.len() != size {
            return Err(format!("sealed {} is {} bytes, its data {size}", path.display(), bytes.len()));
        }
        let batches = split_batches(&bytes[..size], false)
            .map_err(|(pos, e)| format!("{} has an invalid batch at byte {pos}: {e}", path.display()))?;
        for (pos, h) in batches {
            let got = &bytes[pos..pos + h.size_in_bytes() as usize];
            if !model.batches.iter().rev().any(|m| m.base == h.base_offset && m.bytes == got) {
                return Err(format!(
                    "{} byte {pos}: batch {}..={} is not what was appended there (workload direct={}, fs block {}, zero fill {})",
                    path.display(),
                    h.base_offset,
                    h.last_offset(),
                    wl.direct,
                    wl.fs_block,
                    wl.zero_fill_bytes
                ));
            }
        }
    }
    Ok(())
}

/// True when a leader request's first batch carries the offset the log assigned (the stamping
/// happened, so the batches may be in the log).
fn leader_stamped(req: &[u8], leo: i64) -> bool {
    BatchHeader::parse(req).is_ok_and(|h| h.base_offset == leo)
}

fn first_base(log: &Log) -> i64 {
    log.segments().next().map(|s| s.base_offset()).unwrap_or(0)
}

// ---------------------------------------------------------------------------------------------
// Checking a recovered log
// ---------------------------------------------------------------------------------------------

/// What two recoveries of the same state must agree on.
#[derive(Debug, PartialEq, Eq)]
struct Observed {
    log_start: i64,
    log_end: i64,
    /// (base, size, offset index bytes, time index bytes)
    segments: Vec<(i64, u32, Vec<u8>, Vec<u8>)>,
    data: Vec<u8>,
}

impl Observed {
    fn without_indexes(&self) -> (i64, i64, Vec<(i64, u32)>, &[u8]) {
        (self.log_start, self.log_end, self.segments.iter().map(|s| (s.0, s.1)).collect(), &self.data)
    }
}

struct PhysBatch {
    segment: i64,
    position: u32,
    header: BatchHeader,
    bytes: Vec<u8>,
}

fn open_log(wl: &Workload, sim: &SimStorage, model: &Model, recovery: Recovery) -> seglog::Result<(Log, LoadReport)> {
    let start = (model.log_start > 0).then_some(model.log_start);
    let clock = Arc::new(ManualClock::new(model.clock_ms));
    Log::open_with_report(DIR, options(wl, sim, &clock, recovery, start))
}

/// Recovers `sim` and checks promises 1-4. Returns what was recovered.
fn recover_and_check(wl: &Workload, sim: &SimStorage, model: &Model, recovery: Recovery) -> Result<Observed, String> {
    let (log, report) = open_log(wl, sim, model, recovery).map_err(|e| format!("recovery failed: {e}"))?;
    check(wl, sim, &log, &report, model, recovery)
}

fn check(
    wl: &Workload,
    sim: &SimStorage,
    log: &Log,
    report: &LoadReport,
    model: &Model,
    recovery: Recovery,
) -> Result<Observed, String> {
    let dir = Path::new(DIR);
    let interval = wl.config.index_interval_bytes;
    let segments: Vec<_> = log.segments().collect();
    let bases: Vec<i64> = segments.iter().map(|s| s.base_offset()).collect();
    // Segments this open revalidated: from the floor of the recovery point on.
    let recovered_from = match recovery {
        Recovery::Clean => None,
        Recovery::FromRecoveryPoint(rp) => Some(bases.iter().copied().rfind(|&b| b <= rp).unwrap_or(i64::MIN)),
    };
    let mut phys: Vec<PhysBatch> = Vec::new();
    let mut observed =
        Observed { log_start: log.log_start_offset(), log_end: log.log_end_offset(), segments: vec![], data: vec![] };
    for (i, seg) in segments.iter().enumerate() {
        let base = seg.base_offset();
        let path = dir.join(filename::log_file_name(base));
        let len = sim.file_len(&path).ok_or_else(|| format!("{} is missing", path.display()))?;
        let bytes = sim.file(&path).expect("exists");
        // Recovery cuts the active segment to its batches (zero fill resumes with the next
        // append), but a segment it creates (none survived) is preallocated: only then may the
        // active segment's file run past its data, with zeros.
        let active = i + 1 == segments.len();
        let zero_tail = bytes.len() as u64 >= seg.size() as u64 && bytes[seg.size() as usize..].iter().all(|&b| b == 0);
        if len != seg.size() as u64 && !(active && zero_tail && wl.config.preallocate) {
            return Err(format!("{} is {len} bytes but the segment holds {}", path.display(), seg.size()));
        }
        let bytes = &bytes[..seg.size() as usize];
        let batches = split_batches(bytes, false)
            .map_err(|(pos, e)| format!("{} has an invalid batch at byte {pos} after recovery: {e}", path.display()))?;
        let next_base = bases.get(i + 1).copied().unwrap_or(i64::MAX);
        let mut metas = Vec::new();
        for (pos, h) in batches {
            if h.base_offset < base || h.last_offset() >= next_base {
                return Err(format!(
                    "batch {}..={} in segment {base} (next segment {next_base})",
                    h.base_offset,
                    h.last_offset()
                ));
            }
            metas.push(BatchMeta {
                position: pos as u32,
                size: h.size_in_bytes() as u32,
                last_offset: h.last_offset(),
                max_timestamp: h.max_timestamp,
            });
            let b = bytes[pos..pos + h.size_in_bytes() as usize].to_vec();
            phys.push(PhysBatch { segment: base, position: pos as u32, header: h, bytes: b });
        }
        let headers: Vec<(u32, BatchHeader)> =
            phys.iter().filter(|p| p.segment == base).map(|p| (p.position, p.header)).collect();
        check_indexes(seg, &headers)?;
        if recovered_from.is_some_and(|f| base >= f) {
            let (idx, tidx) = rebuilt_indexes(base, &metas, interval, wl.config.segment_index_bytes);
            if seg.offset_index().as_bytes() != &idx[..] || seg.time_index().as_bytes() != &tidx[..] {
                return Err(format!("segment {base}: rebuilt indexes differ from Kafka's rule"));
            }
        }
        observed.segments.push((
            base,
            seg.size(),
            seg.offset_index().as_bytes().to_vec(),
            seg.time_index().as_bytes().to_vec(),
        ));
        observed.data.extend_from_slice(bytes);
    }

    // Offsets strictly increase across the whole log.
    for w in phys.windows(2) {
        if w[1].header.base_offset <= w[0].header.last_offset() {
            return Err(format!(
                "offsets go backwards: batch {}..={} then {}..={}",
                w[0].header.base_offset,
                w[0].header.last_offset(),
                w[1].header.base_offset,
                w[1].header.last_offset()
            ));
        }
    }
    // Promise 2/3: a contiguous run of the model's batches, byte for byte.
    let start_idx = match phys.first() {
        None => None,
        Some(f) if !truncation_durable() && model.resurrectable.iter().any(|r| r.bytes == f.bytes) => {
            model.batches.iter().position(|m| m.base >= f.header.base_offset).or(Some(model.batches.len()))
        }
        Some(f) => Some(model.batches.iter().position(|m| m.base == f.header.base_offset).ok_or_else(|| {
            format!(
                "batch at offset {} (segment {}) was never appended or was truncated",
                f.header.base_offset, f.segment
            )
        })?),
    };
    let mut matched = phys.len();
    if let Some(i) = start_idx {
        for (j, p) in phys.iter().enumerate() {
            // Known engine bug (see `truncation_is_durable_when_truncate_to_returns`): until the
            // truncated segment is fsynced, the batches a truncation removed can come back.
            if !truncation_durable()
                && model.unsynced_truncation.is_some_and(|cut| p.header.base_offset >= cut)
                && model.resurrectable.iter().any(|r| r.bytes == p.bytes)
            {
                matched = matched.min(j);
                continue;
            }
            if j > matched {
                return Err(format!(
                    "batch {}..={} at segment {} byte {} follows resurrected truncated batches",
                    p.header.base_offset,
                    p.header.last_offset(),
                    p.segment,
                    p.position
                ));
            }
            match model.batches.get(i + j) {
                Some(m) if m.bytes == p.bytes => {}
                Some(m) => {
                    return Err(format!(
                        "batch {}..={} at segment {} byte {} differs from what was appended at offset {} \
                         (resurrected truncated data?)",
                        p.header.base_offset,
                        p.header.last_offset(),
                        p.segment,
                        p.position,
                        m.base
                    ))
                }
                None => {
                    return Err(format!(
                        "batch {}..={} at segment {} byte {} was never appended (model ends at {})",
                        p.header.base_offset,
                        p.header.last_offset(),
                        p.segment,
                        p.position,
                        model.batches.last().map(|b| b.next).unwrap_or(0)
                    ))
                }
            }
        }
        if phys[0].header.base_offset < model.first_kept_base {
            return Err(format!(
                "batch at offset {} came back from a deleted segment (first kept base {})",
                phys[0].header.base_offset, model.first_kept_base
            ));
        }
    }
    // Promise 1: acknowledged batches survive (those still inside the log start).
    let present = |k: usize| start_idx.is_some_and(|i| k >= i && k < i + matched);
    for (k, m) in model.batches.iter().enumerate() {
        let deletable = model.deleting_below.is_some_and(|d| m.next <= d);
        if m.next <= model.durable_next
            && m.next > log.log_start_offset()
            && m.base >= model.first_kept_base
            && !deletable
            && !present(k)
        {
            return Err(format!(
                "acknowledged batch {}..{} (durable below {}) was lost; recovered log {}..{}",
                m.base,
                m.next,
                model.durable_next,
                log.log_start_offset(),
                log.log_end_offset()
            ));
        }
    }
    // Offsets of the log.
    let leo = log.log_end_offset();
    // An empty last segment (a roll whose append was lost) ends the log at its base: a follower's
    // gap before it was appended as such.
    let last_base = *bases.last().expect("a segment");
    let expected_leo = phys.last().map(|p| p.header.next_offset()).unwrap_or(last_base).max(last_base);
    if leo != expected_leo {
        return Err(format!("log end offset {leo}, but the last batch ends at {expected_leo}"));
    }
    let start = log.log_start_offset();
    if start < model.log_start.min(leo) || start > leo || start < bases[0] {
        return Err(format!(
            "log start offset {start} (checkpoint {}, log end {leo}, first base {})",
            model.log_start, bases[0]
        ));
    }
    check_reads(log, &phys)?;
    if truncate_leaves_safe_indexes() || !model.truncating {
        check_time_lookups(sim, log, &phys)?;
    }
    check_directory(sim, &bases, report)?;
    Ok(observed)
}

/// What recovery's rebuild must produce: Kafka's per-batch rule (the same as
/// `common::kafka_indexes` with the final entry), except that entries stop once either index is
/// full (a segment written over several sessions can need more than `segment.index.bytes` holds;
/// the time index keeps its last slot for the final entry).
fn rebuilt_indexes(base: i64, batches: &[BatchMeta], interval: u32, index_bytes: u32) -> (Vec<u8>, Vec<u8>) {
    let max_offset_entries = (index_bytes / 8) as usize;
    let max_time_entries = (index_bytes / 12) as usize;
    let (mut oi, mut ti) = (Vec::new(), Vec::new());
    let mut max = (-1i64, base);
    let mut last_ts = -1i64;
    let mut since: u64 = 0;
    let mut push_time = |ti: &mut Vec<u8>, (ts, off): (i64, i64)| {
        if ts > last_ts {
            ti.extend_from_slice(&ts.to_be_bytes());
            ti.extend_from_slice(&((off - base) as i32).to_be_bytes());
            last_ts = ts;
        }
    };
    for b in batches {
        if b.max_timestamp > max.0 {
            max = (b.max_timestamp, b.last_offset);
        }
        if since > interval as u64 && oi.len() / 8 < max_offset_entries && ti.len() / 12 + 1 < max_time_entries {
            oi.extend_from_slice(&((b.last_offset - base) as i32).to_be_bytes());
            oi.extend_from_slice(&(b.position as i32).to_be_bytes());
            push_time(&mut ti, max);
            since = 0;
        }
        since += b.size as u64;
    }
    if ti.len() / 12 < max_time_entries {
        push_time(&mut ti, max);
    }
    (oi, ti)
}

/// Promise 4, structurally, for indexes recovery did not rebuild (sealed segments below the
/// recovery point, a clean open): each entry is *safe*, which is what makes lookups correct.
/// Offset entry `(o, p)`: `p` is a batch start and that batch's base is at most `o` (a batch
/// before `p` then ends below `o`). Time entry `(t, o)`: `o` is in the segment and every batch
/// before the one holding `o` has a max timestamp below `t`. Kafka's own entries are safe; so
/// is the `(base, 0)` of a zero-filled slot, which a crash can leave in a preallocated index file
/// (such slots only make lookups start at byte 0).
fn check_indexes(seg: &seglog::segment::Segment, batches: &[(u32, BatchHeader)]) -> Result<(), String> {
    let base = seg.base_offset();
    let oi = seg.offset_index();
    for i in 0..oi.entries() {
        let e = oi.entry(i);
        if e.offset == base && e.position == 0 {
            continue; // a zero-filled slot: lookups start at byte 0, even in an empty segment
        }
        let Some((_, h)) = batches.iter().find(|(p, _)| *p == e.position) else {
            return Err(format!(
                "segment {base}: offset index entry {i} ({}, {}) is not a batch start",
                e.offset, e.position
            ));
        };
        if h.base_offset > e.offset {
            return Err(format!(
                "segment {base}: offset index entry {i} says {} at byte {}, the batch there starts at {}",
                e.offset, e.position, h.base_offset
            ));
        }
    }
    let ti = seg.time_index();
    for i in 0..ti.entries() {
        let e = ti.entry(i);
        if e.offset < base {
            return Err(format!(
                "segment {base}: time index entry {i} ({}, {}) is below the base",
                e.timestamp, e.offset
            ));
        }
        let before = batches.iter().take_while(|(_, h)| h.last_offset() < e.offset);
        if let Some((p, h)) = before.clone().find(|(_, h)| h.max_timestamp >= e.timestamp) {
            return Err(format!(
                "segment {base}: time index entry {i} ({}, {}) skips the batch at byte {p} with max timestamp {}",
                e.timestamp, e.offset, h.max_timestamp
            ));
        }
    }
    Ok(())
}

/// Fetches agree with the batches: a read at any offset of a batch starts with that batch.
fn check_reads(log: &Log, phys: &[PhysBatch]) -> Result<(), String> {
    let start = log.log_start_offset();
    for p in phys {
        let (b, l) = (p.header.base_offset, p.header.last_offset());
        if l < start {
            continue;
        }
        for o in [b.max(start), (b + l) / 2, l] {
            if o < start {
                continue;
            }
            let f = log.read(o, 1, None, true).map_err(|e| format!("read at {o}: {e}"))?;
            if !f.records.starts_with(&p.bytes) {
                return Err(format!(
                    "read at {o} does not start with batch {b}..={l} (segment {} byte {})",
                    p.segment, p.position
                ));
            }
        }
    }
    let leo = log.log_end_offset();
    match log.read(leo, 1_000, None, true) {
        Ok(f) if f.records.is_empty() => {}
        other => return Err(format!("read at the log end {leo}: {other:?}")),
    }
    if log.read(leo + 1, 1_000, None, true).is_ok() {
        return Err(format!("read past the log end {leo} succeeded"));
    }
    if start > 0 && log.read(start - 1, 1_000, None, true).is_ok() {
        return Err(format!("read below the log start {start} succeeded"));
    }
    Ok(())
}

/// Timestamp lookups agree with Kafka's rule applied to a linear scan of the records: the first
/// segment whose max timestamp reaches `t`, then its first record with timestamp >= t at or
/// after the log start.
fn check_time_lookups(sim: &SimStorage, log: &Log, phys: &[PhysBatch]) -> Result<(), String> {
    let start = log.log_start_offset();
    // (segment, offset, timestamp) of every record.
    let mut records: Vec<(i64, i64, i64)> = Vec::new();
    // Kafka's `LogSegment.largestTimestamp`: the largest batch timestamp, or the `.log` file's
    // modification time for a segment without one (an empty segment left by a truncation or a
    // follower's roll); the lookup takes the first segment whose largest timestamp reaches the
    // target, even an empty one, and then finds nothing.
    let mut seg_max: BTreeMap<i64, i64> = BTreeMap::new();
    for seg in log.segments() {
        let path = Path::new(DIR).join(filename::log_file_name(seg.base_offset()));
        let mtime = sim
            .open(&path, seglog::io::OpenMode::Read)
            .and_then(|f| f.modified_ms())
            .map_err(|e| format!("{}: {e}", path.display()))?;
        seg_max.insert(seg.base_offset(), mtime);
    }
    let mut batch_max: BTreeMap<i64, i64> = BTreeMap::new();
    for p in phys {
        let mut scratch = Vec::new();
        let h = &p.header;
        for r in batch_records(&p.bytes, &mut scratch).map_err(|e| format!("records: {e}"))? {
            let r = r.map_err(|e| format!("record: {e}"))?;
            records.push((
                p.segment,
                r.offset(h.base_offset),
                r.timestamp(h.base_timestamp, h.max_timestamp, h.timestamp_type()),
            ));
        }
        let m = batch_max.entry(p.segment).or_insert(-1);
        *m = (*m).max(h.max_timestamp);
    }
    for (seg, m) in batch_max {
        if m >= 0 {
            seg_max.insert(seg, m);
        }
    }
    let mut targets: Vec<i64> = records.iter().step_by(3).flat_map(|r| [r.2, r.2 + 1]).collect();
    targets.push(T0 - 10_000);
    for t in targets {
        let seg = seg_max.iter().find(|(_, &m)| m >= t).map(|(s, _)| *s);
        let expected = seg.and_then(|s| records.iter().find(|r| r.0 == s && r.1 >= start && r.2 >= t).map(|r| r.1));
        let got = log.offset_for_time(ListOffset::Timestamp(t)).map_err(|e| format!("offset_for_time({t}): {e}"))?;
        if got.map(|g| g.offset) != expected {
            return Err(format!("offset_for_time({t}) = {got:?}, linear scan says {expected:?}"));
        }
    }
    Ok(())
}

/// After recovery the directory holds the live segments' files and nothing of dead ones.
fn check_directory(sim: &SimStorage, bases: &[i64], report: &LoadReport) -> Result<(), String> {
    for name in sim.list_dir(Path::new(DIR)).map_err(|e| e.to_string())? {
        match SegmentFileName::parse(&name) {
            Ok(Some(n)) if n.suffix == FileSuffix::None && bases.contains(&n.base_offset) => {}
            Ok(Some(n)) if n.kind == FileKind::Snapshot => {}
            Ok(None) => {}
            other => {
                return Err(format!("unexpected file {name} ({other:?}) after recovery; report: {report:?}"));
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Driving crash states
// ---------------------------------------------------------------------------------------------

#[derive(Default)]
struct Tally {
    states: u64,
    recovery_cuts: u64,
    workloads: u64,
    /// Crash states cut while writes were in flight (submitted without waiting, not yet run).
    with_writes_in_flight: u64,
    /// Crash states whose log had several data writes in flight at the cut.
    with_several_writes: u64,
    /// Workloads on a filesystem of 4 KiB blocks over 512-byte sectors.
    on_4k_blocks: u64,
}

fn recovery_for(model: &Model, variant: u64) -> Recovery {
    match variant {
        0 => Recovery::FromRecoveryPoint(model.recovery_point),
        _ if model.closed => Recovery::Clean,
        _ => Recovery::FromRecoveryPoint(0),
    }
}

fn catch<T>(f: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(p) => Err(format!(
            "panic: {}",
            p.downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default()
        )),
    }
}

/// One crash state: the workload cut after `k` I/Os, crash variant `variant`; then recovery cut
/// at several points. Returns how many crash states it checked.
fn crash_state(wl: &Workload, k: u64, variant: u64, tally: &mut Tally) -> Result<(), String> {
    let sim = new_storage(wl);
    sim.halt_after(Some(k));
    // The power goes with the process still running: the log stays open until every crash of
    // this state has been taken (each a copy of the disk as the cut left it), and only then is
    // it dropped (a drop waits for the writes in flight, on the cut disk).
    let (model, _still_open) = catch(|| {
        let (model, _, log) = run_open(wl, &sim);
        if log.as_ref().is_some_and(|l| l.writes_in_flight() > 1) {
            tally.with_several_writes += 1;
        }
        Ok((model, log))
    })?;
    if sim.ops_in_flight() > 0 {
        tally.with_writes_in_flight += 1;
    }
    let draw = SimRng::new(wl.seed ^ k.wrapping_mul(0x9E37_79B9) ^ variant.wrapping_mul(0x85EB_CA6B) ^ 0xC2B2_AE35);
    let crashed = || sim.crash(&mut draw.clone());
    let recovery = recovery_for(&model, variant);

    let s1 = crashed();
    let first = catch(|| recover_and_check(wl, &s1, &model, recovery)).map_err(|e| format!("recovery: {e}"))?;
    tally.states += 1;
    let recovery_ops = s1.io_count();

    // Promise 6: cut the same recovery at several points, recover again.
    let mut cuts = SimRng::new(wl.seed ^ k ^ 0xABCD ^ variant);
    let mut points: Vec<u64> =
        (0..RECOVERY_CUTS.min(recovery_ops.saturating_sub(1))).map(|_| 1 + cuts.below(recovery_ops - 1)).collect();
    points.sort_unstable();
    points.dedup();
    for j in points {
        let s1b = crashed();
        s1b.halt_after(Some(j));
        let _ = catch(|| {
            let _ = open_log(wl, &s1b, &model, recovery);
            Ok(())
        });
        let s2 = s1b.crash(&mut cuts);
        // A crash during a clean open is a hard shutdown for the next one (KAFKA-10471).
        let again = match recovery {
            Recovery::Clean => Recovery::FromRecoveryPoint(model.recovery_point),
            r => r,
        };
        let second = catch(|| recover_and_check(wl, &s2, &model, again))
            .map_err(|e| format!("recovery after a crash at recovery I/O {j}: {e}"))?;
        let same =
            if recovery == again { first == second } else { first.without_indexes() == second.without_indexes() };
        if !same {
            return Err(format!(
                "recovery cut at I/O {j} then run again gives a different log: first (start {}, end {}, segments {:?}), \
                 second (start {}, end {}, segments {:?})",
                first.log_start,
                first.log_end,
                first.segments.iter().map(|s| (s.0, s.1)).collect::<Vec<_>>(),
                second.log_start,
                second.log_end,
                second.segments.iter().map(|s| (s.0, s.1)).collect::<Vec<_>>()
            ));
        }
        tally.states += 1;
        tally.recovery_cuts += 1;
    }
    Ok(())
}

/// Every I/O index of one workload. Panics with the seed and `k` on the first failure.
fn run_workload(seed: u64, sweep: &Sweep, only_k: Option<u64>, tally: &mut Tally) {
    let wl = (sweep.workload)(seed);
    let full = new_storage(&wl);
    let (_, completed) = run(&wl, &full);
    assert!(completed, "seed {seed:#x}: the workload fails without any crash: {wl:?}");
    let total = full.io_count();
    let ks: Vec<u64> = match only_k {
        Some(k) => vec![k],
        None => (0..=total).collect(),
    };
    for k in ks {
        for variant in 0..VARIANTS {
            if let Err(e) = crash_state(&wl, k, variant, tally) {
                panic!(
                    "crash state failed: seed={seed:#x} k={k} (of {total} I/Os) variant={variant}: {e}\n\
                     reproduce: SEGLOG_CRASH_SEED={seed:#x} SEGLOG_CRASH_K={k} cargo test -p seglog-tests --test crash_sim \
                     -- {} --exact --nocapture\nworkload: {wl:?}",
                    sweep.test
                );
            }
        }
    }
    tally.workloads += 1;
    tally.on_4k_blocks += (wl.direct && wl.fs_block == 4096) as u64;
}

fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    let v = v.trim();
    match v.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => v.parse().ok(),
    }
}

/// A run of crash states over workloads drawn from consecutive seeds.
struct Sweep {
    /// The test's name (for the reproduction line).
    test: &'static str,
    workload: fn(u64) -> Workload,
    default_states: u64,
}

fn sweep(sweep: Sweep) -> Tally {
    let base = env_u64("SEGLOG_CRASH_SEED").unwrap_or(DEFAULT_SEED);
    let target = env_u64("SEGLOG_CRASH_STATES").unwrap_or(sweep.default_states);
    let only_k = env_u64("SEGLOG_CRASH_K");
    let started = Instant::now();
    let mut tally = Tally::default();
    if only_k.is_some() {
        run_workload(base, &sweep, only_k, &mut tally);
    } else {
        let mut i = 0;
        while tally.states < target {
            run_workload(base.wrapping_add(i), &sweep, None, &mut tally);
            i += 1;
        }
    }
    println!(
        "{}: {} crash states ({} after a crash during recovery, {} cut with writes in flight, {} with several \
         data writes of the log in flight) over {} workloads ({} direct on 4 KiB blocks) from seed {base:#x} in {:.1?}",
        sweep.test,
        tally.states,
        tally.recovery_cuts,
        tally.with_writes_in_flight,
        tally.with_several_writes,
        tally.workloads,
        tally.on_4k_blocks,
        started.elapsed()
    );
    tally
}

#[test]
fn crash_states() {
    let tally = sweep(Sweep { test: "crash_states", workload: Workload::generate, default_states: DEFAULT_STATES });
    // Only the default sweep is sure to draw one; a seed, `k` or count of one's own may not.
    if ["SEGLOG_CRASH_K", "SEGLOG_CRASH_SEED", "SEGLOG_CRASH_STATES"].iter().all(|v| env_u64(v).is_none()) {
        assert!(tally.on_4k_blocks > 0, "no direct workload on 4 KiB blocks ran");
    }
}

/// Every flush a group commit left in flight: the power is cut while data writes (and zero
/// writes) are queued or partly done, and each may land whole, torn or not at all.
#[test]
fn crash_states_with_commits_in_flight() {
    let tally = sweep(Sweep {
        test: "crash_states_with_commits_in_flight",
        workload: Workload::commits_in_flight,
        default_states: DEFAULT_STATES / 4,
    });
    assert_cut_in_flight(&tally, false);
}

/// Appends that return once in memory, the log submitting up to 4 writes of its own at once:
/// the power is cut while several writes are in flight, completing out of order.
#[test]
fn crash_states_with_async_appends() {
    let tally = sweep(Sweep {
        test: "crash_states_with_async_appends",
        workload: Workload::async_appends,
        default_states: DEFAULT_STATES / 4,
    });
    assert_cut_in_flight(&tally, true);
}

/// A sweep meant to cut the power with writes in flight did so in at least 5 % of its states
/// (not counting cuts during recovery), and, with `several`, in at least 1 % with several data
/// writes of the log in flight. A run of one `k` (SEGLOG_CRASH_K) is not judged.
fn assert_cut_in_flight(tally: &Tally, several: bool) {
    if env_u64("SEGLOG_CRASH_K").is_some() {
        return;
    }
    let cuts = tally.states - tally.recovery_cuts;
    assert!(
        tally.with_writes_in_flight * 20 > cuts,
        "few crash states had writes in flight: {} of {cuts}",
        tally.with_writes_in_flight
    );
    assert!(
        !several || tally.with_several_writes * 100 > cuts,
        "few crash states had several data writes in flight: {} of {cuts}",
        tally.with_several_writes
    );
}

// ---------------------------------------------------------------------------------------------
// Injected I/O errors
// ---------------------------------------------------------------------------------------------

/// A workload with flushes and rolls, run with the n-th fsync (or write) failing: the call that
/// hit it fails, the log refuses appends from then on, and after a crash and recovery every
/// acknowledged batch is there.
fn injected_faults(kind: fn(u64) -> Fault, count: fn(&SimStorage) -> u64) {
    // Without zero fill: a failed zero write or zero-fill fdatasync is not a log error (see
    // `failed_zero_writes_are_never_log_errors`), and the workload must notice every fault.
    let mut wl = Workload::without_zero_fill(DEFAULT_SEED ^ 0xFA17);
    wl.follower = false;
    wl.write_through = true;
    wl.steps = (0..24)
        .map(|i| match i % 6 {
            5 => Step::Flush,
            3 if i % 12 == 3 => Step::Roll,
            _ => Step::Append(vec![BatchSpec { records: 1 + i % 3, value_len: 120, codec: Compression::None, gap: 0 }]),
        })
        .collect();
    let full = new_storage(&wl);
    assert!(run(&wl, &full).1);
    let n = count(&full);
    assert!(n >= 4, "{n}");
    for nth in 1..=n {
        let sim = new_storage(&wl);
        sim.inject(kind(nth));
        let (model, completed) = run(&wl, &sim);
        assert!(!completed, "fault {:?}: the workload did not notice", kind(nth));
        let mut rng = SimRng::new(nth);
        for variant in 0..4 {
            let crashed =
                if variant == 0 { sim.crash_with(&mut rng, &CrashConfig::DURABLE_ONLY) } else { sim.crash(&mut rng) };
            let r =
                catch(|| recover_and_check(&wl, &crashed, &model, Recovery::FromRecoveryPoint(model.recovery_point)));
            if let Err(e) = r {
                panic!("fault {:?}, crash variant {variant}: {e}", kind(nth));
            }
        }
        // Without a crash, reopening the same storage also keeps everything acknowledged.
        let r = catch(|| recover_and_check(&wl, &sim, &model, Recovery::FromRecoveryPoint(model.recovery_point)));
        if let Err(e) = r {
            panic!("fault {:?}, reopened without a crash: {e}", kind(nth));
        }
    }
}

#[test]
fn failed_fsync_is_never_acknowledged() {
    injected_faults(Fault::Sync, |s| s.counters().syncs);
}

#[test]
fn failed_write_is_never_acknowledged() {
    injected_faults(Fault::Write, |s| s.counters().writes);
}

/// After a failed fsync the log refuses appends until it is reopened.
#[test]
fn failed_fsync_puts_the_log_in_the_failed_state() {
    let wl = Workload::without_zero_fill(1);
    let sim = new_storage(&wl);
    let clock = Arc::new(ManualClock::new(T0));
    let mut log = Log::open(DIR, options(&wl, &sim, &clock, Recovery::default(), None)).unwrap();
    let mut model = Model { clock_ms: T0, ..Model::default() };
    let specs = [BatchSpec { records: 2, value_len: 10, codec: Compression::None, gap: 0 }];
    let mut req = build_request(&wl, &mut model, &specs, 0, 1);
    log.append_as_leader(&mut req, 1).unwrap();
    sim.inject(Fault::Sync(sim.counters().syncs + 1));
    assert!(log.flush().is_err());
    let mut req = build_request(&wl, &mut model, &specs, 0, 1);
    assert!(matches!(log.append_as_leader(&mut req, 1), Err(seglog::Error::Failed { .. })));
    assert!(matches!(log.flush(), Err(seglog::Error::Failed { .. })));
    assert_eq!(log.recovery_point(), 0, "a failed flush must not move the recovery point");
}

// ---------------------------------------------------------------------------------------------
// Zero fill: a failed zero write is not a log error
// ---------------------------------------------------------------------------------------------

/// A workload whose appends run through several 4096-byte blocks of a zero-filled segment, with
/// flushes (group commits without write-through) and a roll.
fn zero_fill_workload(direct: bool, write_through: bool) -> Workload {
    let mut wl = Workload::without_zero_fill(DEFAULT_SEED ^ 0x2E40);
    // One segment holds the appends up to the roll step.
    wl.config.segment_bytes = 16_384;
    wl.config.segment_index_bytes = 4096;
    wl.config.segment_ms = LogConfig::default().segment_ms;
    wl.config.preallocate = false;
    wl.config.flush_messages = i64::MAX;
    wl.follower = false;
    wl.direct = direct;
    wl.write_through = write_through;
    wl.zero_fill_bytes = 8192;
    wl.steps = (0..30)
        .map(|i| match i {
            15 => Step::Roll,
            _ if i % 6 == 5 => Step::Flush,
            _ if !write_through && i % 3 == 2 => Step::GroupCommit,
            _ => Step::Append(vec![BatchSpec { records: 2, value_len: 300, codec: Compression::None, gap: 0 }]),
        })
        .collect();
    wl
}

/// `variants` crash states of `sim` (the first keeps only what was made durable, the others are
/// drawn from `seed`), each recovered and checked against `model`.
fn survives_crashes(wl: &Workload, sim: &SimStorage, model: &Model, seed: u64, variants: usize, what: &str) {
    let mut rng = SimRng::new(seed);
    for variant in 0..variants {
        let crashed =
            if variant == 0 { sim.crash_with(&mut rng, &CrashConfig::DURABLE_ONLY) } else { sim.crash(&mut rng) };
        let r = catch(|| recover_and_check(wl, &crashed, model, Recovery::FromRecoveryPoint(model.recovery_point)));
        if let Err(e) = r {
            panic!("{what}, crash variant {variant}: {e}");
        }
    }
}

/// The writes a zero-fill workload makes, and how many of them are zero writes (the difference
/// to the same workload without zero fill). Both runs must complete.
fn writes_and_zero_writes(wl: &Workload) -> (u64, u64) {
    let full = new_storage(wl);
    assert!(run(wl, &full).1);
    let without = Workload { zero_fill_bytes: 0, ..wl.clone() };
    let plain = new_storage(&without);
    assert!(run(&without, &plain).1);
    (full.counters().writes, full.counters().writes - plain.counters().writes)
}

/// Every write of a zero-fill workload failing in turn: a failed data write fails the workload
/// (as without zero fill), a failed zero write fails nothing (zero fill is off for the rest of
/// that segment, every step completes, flushes included: the log is not in the failed state);
/// exactly the zero writes are tolerated; and either way every acknowledged batch survives a
/// crash and recovery.
#[test]
fn failed_zero_writes_are_never_log_errors() {
    for write_through in [true, false] {
        // Zero fill applies to O_DIRECT files only: through the page cache the setting writes
        // nothing.
        let (_, zero_writes) = writes_and_zero_writes(&zero_fill_workload(false, write_through));
        assert_eq!(zero_writes, 0, "write_through={write_through}, page cache: zero writes");

        let wl = zero_fill_workload(true, write_through);
        let (writes, zero_writes) = writes_and_zero_writes(&wl);
        assert!(zero_writes >= 2, "write_through={write_through}: {zero_writes} zero writes");
        let mut tolerated = 0;
        for nth in 1..=writes {
            let sim = new_storage(&wl);
            sim.inject(Fault::Write(nth));
            let (model, completed) = run(&wl, &sim);
            tolerated += completed as u64;
            let what = format!("write_through={write_through} write {nth} of {writes} failing");
            survives_crashes(&wl, &sim, &model, nth, 4, &what);
            if completed {
                // Every batch was flushed by the last step: all of them are durable.
                assert_eq!(model.durable_next, model.batches.last().expect("appended").next, "{what}");
            }
        }
        assert_eq!(
            tolerated, zero_writes,
            "write_through={write_through}: failures tolerated should be the zero writes"
        );
    }
}

/// One append of two 300-byte records, written as the log's mode writes it: through, or by a
/// group commit (data and fdatasync, then the zero writes).
fn append_and_write(wl: &Workload, sim: &SimStorage, log: &mut Log, model: &mut Model) -> seglog::Result<()> {
    append_only(wl, log, model)?;
    if !wl.write_through {
        group_commit(log, sim, true)?;
    }
    Ok(())
}

fn append_only(wl: &Workload, log: &mut Log, model: &mut Model) -> seglog::Result<()> {
    let spec = [BatchSpec { records: 2, value_len: 300, codec: Compression::None, gap: 0 }];
    let leo = log.log_end_offset();
    let mut req = build_request(wl, model, &spec, leo, 1);
    log.append_as_leader(&mut req, 1)?;
    model.batches.push(ModelBatch { base: leo, next: log.log_end_offset(), bytes: req });
    Ok(())
}

/// The length of the active segment's `.log`, and what it is without anything past the data
/// (O_DIRECT pads the last block).
fn active_file_len(wl: &Workload, sim: &SimStorage, log: &Log) -> (u64, u64) {
    let seg = log.active_segment();
    let len = sim.file_len(Path::new(DIR).join(filename::log_file_name(seg.base_offset()))).expect("active .log");
    let size = seg.size() as u64;
    let block = wl.fs_block as u64;
    (len, if wl.direct { size.div_ceil(block) * block } else { size })
}

/// The zero write after the first append fails: the append succeeds and reads back, the file
/// holds nothing but zeros past the data, the segment takes no zero writes any more although
/// its data runs past the block where they would start, the log is not failed (appends and
/// flushes go on, the recovery point moves), a new segment zero-fills again, and after a flush
/// everything survives a crash and recovery.
#[test]
fn failed_zero_write_is_not_a_log_error() {
    // O_DIRECT files only (see failed_zero_writes_are_never_log_errors).
    for write_through in [true, false] {
        let what = format!("write_through={write_through}");
        let wl = zero_fill_workload(true, write_through);
        let clock = Arc::new(ManualClock::new(T0));
        let open = |sim: &SimStorage| Log::open(DIR, options(&wl, sim, &clock, Recovery::default(), None)).unwrap();
        let new_model = || Model { clock_ms: T0, first_kept_base: i64::MIN, ..Model::default() };

        // Without a fault, the first append is followed by zeros past its block.
        // The writes run in the order submitted: the fault below names one by its number.
        let twin = new_storage(&wl);
        twin.set_async_at_once();
        let mut twin_log = open(&twin);
        let before = twin.counters().writes;
        append_and_write(&wl, &twin, &mut twin_log, &mut new_model()).unwrap();
        let (len, data) = active_file_len(&wl, &twin, &twin_log);
        let twin_fills = twin_log.zero_fill_stats().fills;
        assert!(
            twin_fills >= 1 && len > data,
            "{what}: no zero fill after the first append ({len} bytes, data {data})"
        );

        // With the write after the data's failing: the first zero write (written through, the
        // new leader epoch's checkpoint (assigned before the data), the data, then the zeros; by
        // a group commit, the checkpoint at the append, then the data linked to its fdatasync,
        // then the zeros).
        let sim = new_storage(&wl);
        sim.set_async_at_once();
        let mut log = open(&sim);
        let mut model = new_model();
        assert_eq!(sim.counters().writes, before);
        let r = if write_through {
            sim.inject(Fault::Write(before + 3));
            append_only(&wl, &mut log, &mut model)
        } else {
            append_only(&wl, &mut log, &mut model).unwrap();
            sim.inject(Fault::Write(sim.counters().writes + 2));
            group_commit(&mut log, &sim, true).map(|_| ())
        };
        r.unwrap_or_else(|e| panic!("{what}: append with a failed zero write: {e}"));
        assert_eq!(sim.counters().writes, twin.counters().writes, "{what}: not the same writes tried");
        // The file may run ahead of the data (its length kept ahead, sparse, once no zeros lie
        // ahead): past the data it holds zeros only.
        let stats = log.zero_fill_stats();
        assert_eq!((stats.fills, stats.failures), (twin_fills, 1), "{what}: the zero write did not fail");
        let path = Path::new(DIR).join(filename::log_file_name(log.active_segment().base_offset()));
        let (_, data) = active_file_len(&wl, &sim, &log);
        let bytes = sim.read_small_file(&path, 1 << 20).unwrap();
        assert!(bytes[data as usize..].iter().all(|&b| b == 0), "{what}: the failed zero write left something");
        let f = log.read(0, 1, None, true).unwrap();
        assert!(f.records.starts_with(&model.batches[0].bytes), "{what}: the append does not read back");

        // Zero fill is off for this segment (with it on, the file would run past the data
        // again at once); the log is not failed.
        for _ in 0..8 {
            append_and_write(&wl, &sim, &mut log, &mut model)
                .unwrap_or_else(|e| panic!("{what}: append after a failed zero write: {e}"));
            assert_eq!(log.zero_fill_stats().fills, stats.fills, "{what}: zero fill went on in the segment");
        }
        assert!(log.active_segment().size() > 4096, "{what}: the appends stay in the first block");
        log.flush().unwrap_or_else(|e| panic!("{what}: flush after a failed zero write: {e}"));
        model.observe(&log);
        assert_eq!(log.recovery_point(), log.log_end_offset(), "{what}");

        // A new segment zero-fills again.
        log.roll(None).unwrap();
        model.observe(&log);
        append_and_write(&wl, &sim, &mut log, &mut model).unwrap();
        assert!(log.zero_fill_stats().fills >= 1, "{what}: no zero fill in the new segment");
        log.flush().unwrap();
        model.observe(&log);
        assert_eq!(model.durable_next, model.batches.last().unwrap().next, "{what}");
        check_live(&wl, &sim, &log, &model).unwrap_or_else(|e| panic!("{what}: {e}"));

        survives_crashes(&wl, &sim, &model, 0x2E40, 8, &what);
    }
}

/// The harness exercises zero fill: among the workloads `crash_states` runs first, some write
/// zeros (more writes than the same workload without zero fill).
#[test]
fn crash_workloads_write_zeros() {
    let mut zeroing = 0;
    for i in 0..40 {
        let wl = Workload::generate(DEFAULT_SEED + i);
        if wl.zero_fill_bytes > 0 {
            zeroing += (writes_and_zero_writes(&wl).1 > 0) as u32;
        }
    }
    assert!(zeroing >= 5, "only {zeroing} of the first 40 workloads write zeros");
}

/// One crash state of one workload as drawn before zero fill existed (all its variants), for the
/// regression tests found then. A seed found since (`crash_states` draws zero fill) replays with
/// `replay_workload(&Workload::generate(seed), k)`.
fn replay(seed: u64, k: u64) {
    replay_workload(&Workload::without_zero_fill(seed), k);
}

/// One crash state of `wl` (all its variants).
fn replay_workload(wl: &Workload, k: u64) {
    let seed = wl.seed;
    let mut tally = Tally::default();
    for variant in 0..VARIANTS {
        if let Err(e) = crash_state(wl, k, variant, &mut tally) {
            panic!("seed={seed:#x} k={k} variant={variant}: {e}");
        }
    }
}

fn replay_strict(seed: u64, k: u64) {
    STRICT.with(|s| s.set(true));
    replay(seed, k);
}

// Regression seeds. Each failed once; the comment says what was wrong.

/// Recovery failed the whole open ("append to a full time index"): a segment written over two
/// sessions needs more index entries in a rebuild than `segment.index.bytes` (48 here) holds.
/// Fixed in `Segment::recover` (entries stop when an index is full).
#[test]
fn regression_rebuild_of_a_full_index() {
    replay(0x5e6106c4a7, 94);
}

/// A clean reopen cut after its first write: the harness must not treat it as a clean shutdown
/// (KAFKA-10471); the preallocated zeros of the resized index made a Clean open wrong.
#[test]
fn regression_cut_clean_open_is_a_hard_shutdown() {
    replay(0x5e6106c4a7, 86);
}

/// Known engine bug (TRUNCATION_DURABLE): `truncate_to` returned, then a crash before the next
/// flush brought the truncated batch 25..=28 back.
#[test]
fn truncation_is_durable_when_truncate_to_returns() {
    replay_strict(0x5e6106c4a9, 75);
}

#[test]
fn regression_truncation_resurrection_tolerated() {
    replay(0x5e6106c4a9, 75);
}

/// Known engine bug (TRUNCATION_DURABLE): a crash inside `truncate_to` kept the cut of segment 8
/// (it ends at 11) but not the rename of segment 14: offsets 11..=13 are a hole and 14..=17,
/// truncated data, are back.
#[test]
fn crash_during_truncation_leaves_no_hole() {
    replay_strict(0x5e6106c4ce, 87);
}

#[test]
fn regression_truncation_hole_tolerated() {
    replay(0x5e6106c4ce, 87);
}

/// Known engine bug (TRUNCATE_LEAVES_SAFE_INDEXES): a crash inside `truncate_to` left segment 0
/// (below the recovery point, so not recovered) with its time index resized to 4092 bytes of
/// zeros; its max timestamp read as 0 and `offset_for_time` skipped it.
#[test]
fn crash_during_truncation_keeps_time_lookups_right() {
    replay_strict(0x5e6106c4ae, 44);
}

#[test]
fn regression_truncation_index_zeros_tolerated() {
    replay(0x5e6106c4ae, 44);
}

/// The harness notices lost acknowledged data: with a disk whose fsyncs do nothing, some crash
/// state of the first workloads must fail promise 1.
#[test]
fn the_harness_catches_a_lying_fsync() {
    FAULTS.with(|f| f.borrow_mut().push(Fault::LyingSync));
    let sweep = Sweep { test: "the_harness_catches_a_lying_fsync", workload: Workload::generate, default_states: 0 };
    let caught = (0..4u64).any(|i| {
        catch_unwind(AssertUnwindSafe(|| run_workload(DEFAULT_SEED + i, &sweep, None, &mut Tally::default()))).is_err()
    });
    FAULTS.with(|f| f.borrow_mut().clear());
    assert!(caught, "no crash state failed although no fsync made anything durable");
}

/// A follower roll to a base past the log end, cut before the append: the log ends at the empty
/// segment's base.
#[test]
fn regression_empty_last_segment_after_a_follower_gap() {
    replay(0x5e6106c4b2, 52);
}

/// Truncation to 0 (the first batch straddled the target), then a roll that replaced the empty
/// active segment in place (no fsync): the truncated batch 0..=4 can still come back.
#[test]
fn regression_roll_of_an_empty_segment_does_not_sync() {
    replay(0x10d4, 37);
}

/// Recovery after a crash in a follower's truncations leaves an empty segment in front of one
/// with data, and a time lookup whose target is below that empty segment's modification time
/// finds nothing, as Kafka's does (`largestTimestamp` of a segment without a timestamp is its
/// file's modification time, and the lookup stops at the first segment that reaches the target).
/// The model took only batch timestamps and expected the record in the next segment. Fixed in the
/// model (`check_time_lookups`).
#[test]
fn regression_time_lookup_stops_at_an_empty_segment() {
    replay_workload(&Workload::generate(0x195), 52);
}

/// A follower's truncation left the log end (17) past its last batch (14); the clean reopen ended
/// the log at 14, as Kafka's does, but the model kept 17 as durable, and the append after the
/// reopen, which a crash may lose, counted as acknowledged. The harness was wrong, not the log.
#[test]
fn regression_reopen_ends_a_follower_log_at_its_last_batch() {
    replay_workload(&Workload::generate(0x123501), 73);
}
