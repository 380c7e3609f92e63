//! Zero fill (`LogOptions::zero_fill_bytes`, `EngineConfig::zero_fill`): the active segment keeps
//! zeros written past its data, so that appends overwrite initialized blocks. What must hold:
//! the zeros are never data (reads, recovery), a data write never races a zero write (appends
//! that catch up with a refill stay intact), and everything that changes the file's length
//! (seal, close, truncation) waits for zero writes and leaves the file exactly its batches,
//! as Kafka's tools expect. Runs on a real disk (`/var/tmp`, or `SEGLOG_TEST_DIR`): O_DIRECT
//! alignment is not checked by tmpfs. Every I/O mode (`SEGLOG_IO_MODE`).

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::{batch, log_path, read_all, small_config, T0};
use seglog::config::{LogConfig, ManualClock};
use seglog::io::Storage;
use seglog::log::{Log, LogOptions, Recovery, Writes};
use seglog::{Durability, Engine, EngineConfig, IoMode, TopicPartition, ZeroFill};
use seglog_tests::while_held;

fn disk_tempdir() -> tempfile::TempDir {
    let base = std::env::var_os("SEGLOG_TEST_DIR").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/var/tmp"));
    tempfile::tempdir_in(base).expect("tempdir on disk")
}

struct ShardLike {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
    clock: Arc<ManualClock>,
    storage: Arc<dyn Storage>,
    log: Log,
}

fn options(config: LogConfig, clock: &Arc<ManualClock>, storage: &Arc<dyn Storage>, zero_fill: u32) -> LogOptions {
    LogOptions {
        config,
        clock: clock.clone(),
        storage: storage.clone(),
        recovery: Recovery::default(),
        // As the shard opens its logs: appends stay in the tail until the shard writes them.
        writes: Writes::Caller,
        zero_fill_bytes: zero_fill,
        ..seglog_tests::log_options()
    }
}

/// The I/O mode of the engine test: `SEGLOG_IO_MODE`, else direct.
fn test_mode() -> IoMode {
    common::env_io_mode().unwrap_or(IoMode::Direct)
}

/// Zero fill applies to O_DIRECT files only: the log-level tests run in direct mode whatever
/// `SEGLOG_IO_MODE` says (asynchronous io_uring writes, where zero writes are really in flight
/// while the next data write is taken). `None` (the test skips) where direct mode is refused.
fn direct_storage() -> Option<Arc<dyn Storage>> {
    let opened = seglog::io::select::open_storage(IoMode::Direct);
    if opened.mode != IoMode::Direct {
        eprintln!("skipped: direct mode unavailable ({:?})", opened.fallback);
        return None;
    }
    Some(opened.storage)
}

fn shard_like(config: LogConfig, zero_fill: u32) -> Option<ShardLike> {
    let storage = direct_storage()?;
    Some(shard_like_on(config, zero_fill, storage))
}

fn shard_like_on(config: LogConfig, zero_fill: u32, storage: Arc<dyn Storage>) -> ShardLike {
    let tmp = disk_tempdir();
    let dir = tmp.path().join("topic-0");
    let clock = Arc::new(ManualClock::new(T0));
    let log = Log::open(&dir, options(config, &clock, &storage, zero_fill)).expect("open log");
    ShardLike { _tmp: tmp, dir, clock, storage, log }
}

impl ShardLike {
    /// One shard turn: the data write (with its fdatasync when `sync`) and then the zero fill,
    /// each its own batch, submitted together without waiting, as `Shard::start_writes` does.
    /// Returns how many zero writes were submitted.
    fn start_turn(&mut self, sync: bool) -> usize {
        self.turn(sync, true)
    }

    /// A turn's data write alone (with its fdatasync when `sync`), as the shard starts it for a
    /// partition that takes no refill.
    fn write_turn(&mut self, sync: bool) {
        self.turn(sync, false);
    }

    /// [`ShardLike::start_turn`], taking the zero fill only with `refill`.
    fn turn(&mut self, sync: bool, refill: bool) -> usize {
        let ops = self.log.take_writes(0, sync).expect("take_writes");
        if ops.is_empty() {
            return 0;
        }
        let zeros = if refill { self.log.take_zero_fill(0) } else { Vec::new() };
        let n_zero = zeros.len();
        let synced_up_to = sync.then_some(self.log.log_end_offset());
        let mut batches = vec![ops];
        if !zeros.is_empty() {
            batches.push(zeros);
        }
        let mut ios = self.storage.submit_async(batches).into_iter();
        self.log.writes_started(ios.next().expect("data batch"), synced_up_to);
        if let Some(z) = ios.next() {
            self.log.zero_fill_started(z);
        }
        n_zero
    }

    /// Reports every write outcome, as the shard's loop does (one kept by an operation that
    /// waited for its write comes first, then the write in flight).
    fn finish_turn(&mut self) {
        while let Some(r) = self.log.poll_writes(true) {
            r.expect("write");
        }
    }

    /// Checks that the open log reads back `expected` (and nothing past it: the zeros are not
    /// data), closes it, checks that its segments' files hold exactly `expected`, reopens it with
    /// `recovery` and checks that it reads back `expected` again.
    fn close_and_check(self, config: LogConfig, recovery: Recovery, expected: &[u8]) {
        assert_same(&read_all(&self.log), expected, "read back before the close");
        let bases: Vec<i64> = self.log.segments().map(|s| s.base_offset()).collect();
        let ShardLike { _tmp, dir, clock, storage, log } = self;
        log.close().expect("close");
        let on_disk: Vec<u8> = bases.iter().flat_map(|b| file(&log_path(&dir, *b))).collect();
        assert_same(&on_disk, expected, "the closed segments' files hold exactly the batches");
        let log = Log::open(&dir, LogOptions { recovery, ..options(config, &clock, &storage, 0) }).expect("reopen");
        assert_same(&read_all(&log), expected, "read back after the reopen");
    }

    fn append(&mut self, size: usize) -> Vec<u8> {
        let mut b = batch(&[T0], size);
        self.log.append_as_leader(&mut b, 0).expect("append");
        b
    }
}

fn file(path: &Path) -> Vec<u8> {
    std::fs::read(path).expect("read file")
}

/// Equal byte strings, or a panic naming the lengths and the first difference (not the bytes).
#[track_caller]
fn assert_same(got: &[u8], want: &[u8], what: &str) {
    if got != want {
        let at = got.iter().zip(want).position(|(a, b)| a != b).unwrap_or(got.len().min(want.len()));
        panic!("{what}: {} bytes, expected {}; first difference at byte {at}", got.len(), want.len());
    }
}

/// While active, the `.log` runs ahead of the data with zeros; a clean close cuts it back to
/// exactly the batches, and a clean reopen serves the same bytes.
#[test]
fn the_zeros_run_ahead_of_the_data_and_close_cuts_them() {
    let Some(mut t) = shard_like(small_config(), 1 << 20) else { return };
    let mut appended = Vec::new();
    let mut zero_writes = 0;
    for i in 0..20 {
        appended.extend(t.append(1000 + 37 * i));
        zero_writes += t.start_turn(false);
        t.finish_turn();
    }
    assert!(zero_writes > 0, "no zero fill was taken");
    // One more turn lets the ring report the zero writes (they are polled lazily).
    appended.extend(t.append(512));
    t.start_turn(false);
    t.finish_turn();
    let size = t.log.active_segment().size() as usize;
    assert_eq!(size, appended.len());
    let on_disk = file(&log_path(&t.dir, 0));
    assert!(on_disk.len() > size, "the file ({}) should run ahead of the data ({size})", on_disk.len());
    assert_same(&on_disk[..size], &appended, "the data in the file");
    assert!(on_disk[size..].iter().all(|&b| b == 0), "past the data: zeros only");
    t.close_and_check(small_config(), Recovery::Clean, &appended);
}

/// A partition whose appends queue beside other partitions' writes takes no refill (the shard's
/// rule; alone it takes small ones, see below): with no zeros ahead of
/// its data, the `.log`'s length is kept ahead of it (sparse, half a lead to a lead past the
/// block the data ends in: 8 to 16 MiB for a standalone log), so that its writes land inside the
/// file's size instead of extending it.
/// Refills taken after that write their zeros inside that length; a close cuts the file back
/// to the batches. (That zeros ahead keep the length where they end: active.rs,
/// `zeros_ahead_keep_the_length_where_they_end`.)
#[test]
fn without_zeros_ahead_the_length_runs_ahead_of_the_data() {
    let Some(mut t) = shard_like(small_config(), 256 << 10) else { return };
    let mut appended = Vec::new();
    // Durable turns without refills, as a busy partition's.
    for i in 0..40 {
        appended.extend(t.append(16_000 + 7 * i));
        t.write_turn(true);
        t.finish_turn();
    }
    let ahead = common::file_len(&log_path(&t.dir, 0)) - t.log.active_segment().size() as u64;
    // Measured from the data's end, not its block's: up to a block more than the lead.
    let lead = seglog::segment::DEFAULT_LENGTH_LEAD as u64;
    assert!((lead / 2..=lead + 4096).contains(&ahead), "the length runs {ahead} bytes ahead of the data");
    assert_eq!(t.log.zero_fill_stats().fills, 0);
    // Then turns that refill, as the partition's appends stop queueing.
    let mut zero_writes = 0;
    for i in 0..4 {
        appended.extend(t.append(1000 + 13 * i));
        zero_writes += t.start_turn(true);
        t.finish_turn();
    }
    assert!(zero_writes > 0, "no zero fill was taken");
    t.close_and_check(small_config(), Recovery::Clean, &appended);
}

/// The lead starts at 256 KiB and doubles at each refill, and a refill comes when half of the
/// last lead is left: one refill per half lead of data, not a cascade of refills at the
/// segment's start (each doubling the lead and so making the next one due at once).
#[test]
fn refills_come_when_half_the_lead_is_used() {
    let Some(mut t) = shard_like(small_config(), 64 << 20) else { return };
    let mut fills_at = Vec::new();
    let mut appended = 0usize;
    let mut largest = 0u64;
    while appended < 13 << 20 {
        let b = t.append(64 * 1024);
        appended += b.len();
        largest = largest.max(b.len() as u64);
        if t.start_turn(false) > 0 {
            fills_at.push(t.log.active_segment().size() as u64);
        }
        t.finish_turn();
    }
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    let at: Vec<String> = fills_at.iter().map(|&b| format!("{:.2}", mib(b))).collect();
    // Leads 256 KiB, 512 KiB, ... 8 MiB: the first refill at the first append, then each once
    // half of the previous lead is used (13 MiB of data: 0.06, 0.25, 0.56, 1.1, 2.2, 4.2 and 8.2
    // MiB). Refills are taken per turn, so each comes up to two appends after its point.
    assert_eq!(fills_at.len(), 7, "refills at {at:?} MiB");
    assert!(mib(fills_at[0]) < 0.1, "{at:?}");
    for k in 1..fills_at.len() {
        let half_lead = (256u64 << 10 << (k - 1)) / 2;
        let gap = fills_at[k] - fills_at[k - 1];
        assert!(
            (half_lead..=half_lead + 2 * largest).contains(&gap),
            "refill {k} came {gap} bytes after the one before, expected {half_lead} to {}: {at:?} MiB",
            half_lead + 2 * largest
        );
    }
    assert_eq!(t.log.zero_fill_stats().fills, 7);
}

/// Rolled segments are cut to their batches too (zero fill is capped at segment.bytes, and the
/// next segment starts its own). The lead is small next to the segment, so every segment gets
/// zeros (a refill starts an eighth of the lead past the data: with a lead as large as the
/// segment no refill would fit before its end).
#[test]
fn rolled_segments_are_exactly_their_batches() {
    let config = LogConfig { segment_bytes: 256 * 1024, ..small_config() };
    let Some(mut t) = shard_like(config.clone(), 64 << 10) else { return };
    let mut appended = Vec::new();
    let mut zero_writes = 0;
    for i in 0..240 {
        appended.extend(t.append(3000 + 101 * (i % 7)));
        zero_writes += t.start_turn(i % 3 == 0);
        t.finish_turn();
    }
    // Without zeros past the data there would be nothing to cut at the rolls.
    assert!(zero_writes > 0, "no zero writes: the test would not test the cut");
    let bases: Vec<i64> = t.log.segments().map(|s| s.base_offset()).collect();
    assert!(bases.len() >= 3, "expected rolls, got segments {bases:?}");
    let sealed: Vec<(i64, u32)> = t
        .log
        .segments()
        .filter(|s| s.base_offset() != bases[bases.len() - 1])
        .map(|s| (s.base_offset(), s.size()))
        .collect();
    for (base, size) in sealed {
        let len = common::file_len(&log_path(&t.dir, base));
        assert_eq!(len, size as u64, "sealed segment {base}: file length vs data");
    }
    t.close_and_check(config, Recovery::Clean, &appended);
}

/// A lead of a few kilobytes: nearly every turn's data reaches zero writes still in flight, and
/// must wait for them rather than race them. Every byte must be intact, in the file and after a
/// reopen with full recovery.
#[test]
fn appends_that_catch_up_with_zero_writes_stay_intact() {
    for (lead, turns, size) in [(8 * 1024, 300, 9000), (8 << 20, 120, 200 * 1024)] {
        appends_catch_up(lead, turns, size);
    }
}

fn appends_catch_up(lead: u32, turns: usize, max_size: usize) {
    let Some(mut t) = shard_like(small_config(), lead) else { return };
    let mut appended = Vec::new();
    let mut zero_writes = 0;
    for i in 0..turns {
        appended.extend(t.append(700 + (i * 38_923) % max_size));
        zero_writes += t.start_turn(i % 5 == 0);
        // Half the turns append again while the write is in flight (the next turn writes it).
        if i % 2 == 0 {
            appended.extend(t.append(300 + (i * 97) % 2000));
        }
        t.finish_turn();
    }
    t.start_turn(false);
    t.finish_turn();
    assert!(zero_writes >= 10, "lead {lead}: only {zero_writes} zero writes");
    if lead <= 64 * 1024 {
        // A lead this short: data writes reach refills still in flight and wait for them.
        let waits = t.log.zero_fill_stats().waits;
        assert!(waits > 0, "lead {lead}: no data write waited for a refill ({:?})", t.log.zero_fill_stats());
    }
    // Full recovery revalidates every batch.
    t.close_and_check(small_config(), Recovery::default(), &appended);
}

/// Truncation waits for zero writes in flight and leaves the file at the cut: a zero write
/// landing after it would extend the file again.
#[test]
fn truncation_waits_for_zero_writes_and_leaves_the_file_at_the_cut() {
    let Some(mut t) = shard_like(small_config(), 4 << 20) else { return };
    let mut kept = Vec::new();
    for _ in 0..5 {
        kept.extend(t.append(2000));
    }
    let cut = t.log.log_end_offset();
    t.append(3000);
    // The data write and the first refill (the first lead, 256 KiB: one zero write of 224 KiB
    // past a 32 KiB gap) in flight, not waited for: a device takes tens of microseconds for it.
    assert!(t.start_turn(false) > 0, "a refill was taken");
    let waits = t.log.zero_fill_stats().waits;
    t.log.truncate_to(cut).expect("truncate");
    let waited = t.log.zero_fill_stats().waits - waits;
    assert!(waited <= 1, "one refill, waited for {waited} times");
    if waited == 0 {
        // The refill completed, and was seen to, right after its submission: a thread descheduled
        // between the two on a loaded machine (one run in a debug `cargo test --workspace`).
        eprintln!("the refill was done before the truncation: its wait not exercised");
    }
    assert_eq!(t.log.log_end_offset(), cut);
    assert_same(&file(&log_path(&t.dir, 0)), &kept, "after the truncation the file is exactly the kept batches");
    // Appends go on after the cut, with zero fill again.
    kept.extend(t.append(1500));
    assert!(t.start_turn(true) > 0, "a refill after the cut");
    t.finish_turn();
    t.close_and_check(small_config(), Recovery::default(), &kept);
}

/// A crash (the log dropped without a close) leaves the zeros past the data in the file:
/// recovery reads them as a torn tail, cuts them and keeps every batch.
#[test]
fn recovery_cuts_the_zero_tail_a_crash_leaves() {
    let Some(mut t) = shard_like(small_config(), 1 << 20) else { return };
    let mut appended = Vec::new();
    for i in 0..10 {
        appended.extend(t.append(1500 + 10 * i));
        t.start_turn(true);
        t.finish_turn();
    }
    // Let the refill be reported, then "crash".
    appended.extend(t.append(900));
    t.start_turn(true);
    t.finish_turn();
    let ShardLike { _tmp, dir, clock, storage, log } = t;
    drop(log);
    let before = common::file_len(&log_path(&dir, 0));
    assert!(before > appended.len() as u64, "the crash should leave zeros past the data");
    let (log, report) =
        Log::open_with_report(&dir, options(small_config(), &clock, &storage, 0)).expect("reopen after the crash");
    assert_same(&read_all(&log), &appended, "read back");
    assert_eq!(common::file_len(&log_path(&dir, 0)), appended.len() as u64);
    let cut: u64 = report.truncations.iter().map(|t| t.2).sum();
    assert_eq!(cut, before - appended.len() as u64, "recovery cut the zero tail: {:?}", report.truncations);
}

/// The write-through path (a log used without the engine) zero-fills synchronously.
#[test]
fn write_through_logs_zero_fill_too() {
    let tmp = disk_tempdir();
    let dir = tmp.path().join("topic-0");
    let clock = Arc::new(ManualClock::new(T0));
    let Some(storage) = direct_storage() else { return };
    let opts = LogOptions { writes: Writes::Through, ..options(small_config(), &clock, &storage, 256 * 1024) };
    let mut log = Log::open(&dir, opts).expect("open");
    let mut appended = Vec::new();
    for _ in 0..10 {
        let mut b = batch(&[T0], 4000);
        log.append_as_leader(&mut b, 0).expect("append");
        appended.extend(b);
    }
    let on_disk = file(&log_path(&dir, 0));
    assert!(on_disk.len() > appended.len());
    assert_same(&on_disk[..appended.len()], &appended, "the data in the file");
    assert!(on_disk[appended.len()..].iter().all(|&b| b == 0));
    log.close().expect("close");
    assert_same(&file(&log_path(&dir, 0)), &appended, "the file");
}

/// Through the page cache there is no zero fill, whatever the setting.
#[test]
fn no_zero_fill_through_the_page_cache() {
    let storage = seglog::io::select::open_storage(IoMode::Buffered).storage;
    let mut t = shard_like_on(small_config(), 1 << 20, storage);
    let mut appended = Vec::new();
    for _ in 0..10 {
        appended.extend(t.append(5000));
        assert_eq!(t.start_turn(true), 0, "no zero writes in {}", t.storage.mode());
        t.finish_turn();
    }
    assert_eq!(t.log.zero_fill_stats().fills, 0);
    assert_same(&file(&log_path(&t.dir, 0)), &appended, "the file");
}

/// An engine of one unpinned shard on `dir` in the test's I/O mode.
fn engine_on(dir: &Path, durability: Durability, zero_fill: ZeroFill) -> Engine {
    let mut cfg = EngineConfig::new(dir);
    cfg.io_mode = test_mode();
    cfg.shards = Some(1);
    cfg.pin_threads = false;
    cfg.durability = durability;
    cfg.zero_fill = zero_fill;
    Engine::open(cfg).expect("engine")
}

/// Opens partitions 0..`n` of `topic`.
fn open_partitions(engine: &Engine, topic: &str, n: usize) -> Vec<TopicPartition> {
    let tps: Vec<TopicPartition> = (0..n as i32).map(|p| TopicPartition::new(topic, p)).collect();
    for tp in &tps {
        engine.open_partition(tp, None).wait().expect("open partition");
    }
    tps
}

/// After shutdown each partition's first `.log` holds exactly the batches appended to it.
fn assert_files_hold(dir: &Path, tps: &[TopicPartition], appended: &[Vec<u8>], context: &str) {
    for (tp, bytes) in tps.iter().zip(appended) {
        let on_disk = file(&log_path(&dir.join(tp.dir_name()), 0));
        assert_same(&on_disk, bytes, &format!("{context}{tp:?} after shutdown"));
    }
}

/// An append of `bytes` to each of `to` in order, sent while the shard is held so that one turn
/// writes them all whatever the disk's speed; waits for them and returns each as stored.
fn send_held(engine: &Engine, to: &[TopicPartition], bytes: usize) -> Vec<Vec<u8>> {
    let sent: Vec<_> = while_held(engine, &to[0], || {
        to.iter()
            .map(|tp| {
                let b = batch(&[T0], bytes);
                (engine.append(tp, b.clone(), 0), b)
            })
            .collect()
    });
    sent.into_iter().map(|(c, b)| as_stored(b, &c.wait().expect("append"))).collect()
}

/// One append of `bytes` to each of `tps` in one turn (each beside the others), each added as
/// stored to its partition's `appended`.
fn held_round(engine: &Engine, tps: &[TopicPartition], bytes: usize, appended: &mut [Vec<u8>]) {
    for (stored, batch) in appended.iter_mut().zip(send_held(engine, tps, bytes)) {
        stored.extend(batch);
    }
}

/// The batch as the log stores it: the engine stamps the base offset and the epoch (outside
/// the CRC), as the log does.
fn as_stored(mut b: Vec<u8>, info: &seglog::log::AppendInfo) -> Vec<u8> {
    b[0..8].copy_from_slice(&info.first_offset.to_be_bytes());
    b[12..16].copy_from_slice(&0i32.to_be_bytes());
    b
}

/// The engine: `Auto` zero-fills under every-batch durability in direct mode only; `Off` never;
/// a `Lead` in any mode. What it wrote is exactly the batches after shutdown.
#[test]
fn the_engine_zero_fills_as_configured() {
    for (zero_fill, durability) in [
        (ZeroFill::Auto, Durability::EveryBatch),
        (ZeroFill::Auto, Durability::None),
        (ZeroFill::Off, Durability::EveryBatch),
        (ZeroFill::Lead(512 * 1024), Durability::None),
    ] {
        let tmp = disk_tempdir();
        let engine = engine_on(tmp.path(), durability, zero_fill);
        let tp = TopicPartition::new("z", 0);
        engine.open_partition(&tp, None).wait().expect("open partition");
        let mut appended = Vec::new();
        for _ in 0..20 {
            let b = batch(&[T0], 8000);
            let info = engine.append(&tp, b.clone(), 0).wait().expect("append");
            appended.extend(as_stored(b, &info));
        }
        let used = engine.io_mode();
        let fills: u64 = engine.stats().expect("stats").iter().map(|s| s.zero_fills).sum();
        let expected = zero_fill.lead_bytes(durability, used) > 0;
        assert_eq!(fills > 0, expected, "{zero_fill} {durability:?} in {used}: {fills} zero fills");
        engine.shutdown().expect("shutdown");
        let on_disk = file(&log_path(&tmp.path().join(tp.dir_name()), 0));
        assert_same(&on_disk, &appended, &format!("{zero_fill} {durability:?}: the segment after shutdown"));
    }
}

/// An engine shard shares its zero-fill lead among its partitions: each keeps at most its share
/// of zeros ahead of its data, so the zeros a shard writes stay close to the data it writes
/// however many partitions it holds (with the whole lead each, 64 partitions wrote several times
/// their data in zeros). What the partitions wrote is exactly their batches after shutdown.
#[test]
fn a_shard_shares_its_zero_fill_lead_among_its_partitions() {
    const LEAD: u32 = 2 << 20;
    const PARTITIONS: usize = 4;
    let tmp = disk_tempdir();
    let engine = engine_on(tmp.path(), Durability::EveryBatch, ZeroFill::Lead(LEAD));
    let direct = engine.io_mode() == IoMode::Direct;
    let tps = open_partitions(&engine, "share", PARTITIONS);
    let mut appended = vec![Vec::new(); PARTITIONS];
    // About 1.9 MiB a partition: past the second doubling of a lead of its own (256 KiB, 512
    // KiB, 1 MiB, 2 MiB), so a partition keeping the whole lead writes more zeros than allowed.
    for _ in 0..160 {
        for (tp, bytes) in tps.iter().zip(appended.iter_mut()) {
            let b = batch(&[T0], 12_000);
            let info = engine.append(tp, b.clone(), 0).wait().expect("append");
            bytes.extend(as_stored(b, &info));
        }
    }
    let share = (LEAD / PARTITIONS as u32) as u64;
    let mut fills = 0;
    for (tp, bytes) in tps.iter().zip(&appended) {
        let stats = engine.with_log(tp, |log| Ok(log.zero_fill_stats())).wait().expect("stats");
        fills += stats.fills;
        // The zeros end at most a share (rounded up to a block) past the data.
        assert!(
            stats.bytes <= bytes.len() as u64 + share + 4096,
            "{tp:?}: {} zero bytes for {} data bytes with a share of {share}",
            stats.bytes,
            bytes.len()
        );
    }
    assert_eq!(fills > 0, direct, "zero fill ran ({fills} refills) only in direct mode");
    engine.shutdown().expect("shutdown");
    assert_files_hold(tmp.path(), &tps, &appended, "");
}

/// One partition on an engine of its own, `count` appends of `bytes` in rounds of 8, each
/// round's write carrying all 8: the shard is held (a `with_log` closure that waits) while the
/// round is sent, so the appends queue whatever the machine's load, and the round is waited
/// for before the next. Returns its zero-fill stats, the shard's writes, the bytes appended and
/// the I/O mode. The file is exactly its batches after shutdown.
fn busy_partition_alone(bytes: usize, count: usize) -> (seglog::segment::ZeroFillStats, u64, u64, IoMode) {
    assert_eq!(count % BUSY_ROUND, 0, "whole rounds");
    let tmp = disk_tempdir();
    // The lead set, not `Auto`: a busy partition then always takes refills (under `Auto` the
    // shard's trial chooses).
    let engine = engine_on(tmp.path(), Durability::EveryBatch, ZeroFill::Lead(ZeroFill::DEFAULT_LEAD_BYTES));
    let tp = TopicPartition::new("busy", 0);
    engine.open_partition(&tp, None).wait().expect("open partition");
    let mut appended = Vec::new();
    for _ in 0..count / BUSY_ROUND {
        busy_round(&engine, &tp, bytes, &mut appended);
    }
    let stats = engine.with_log(&tp, |log| Ok(log.zero_fill_stats())).wait().expect("stats");
    let writes: u64 = engine.stats().expect("stats").iter().map(|s| s.flushes).sum();
    let mode = engine.io_mode();
    engine.shutdown().expect("shutdown");
    let on_disk = file(&log_path(&tmp.path().join(tp.dir_name()), 0));
    assert_same(&on_disk, &appended, "the segment after shutdown");
    (stats, writes, appended.len() as u64, mode)
}

/// Appends in a round of [`busy_round`].
const BUSY_ROUND: usize = 8;

/// [`BUSY_ROUND`] appends of `bytes` to `tp` in one turn, so that one write carries them all,
/// added as stored to `appended`.
fn busy_round(engine: &Engine, tp: &TopicPartition, bytes: usize, appended: &mut Vec<u8>) {
    appended.extend(send_held(engine, &vec![tp.clone(); BUSY_ROUND], bytes).concat());
}

/// Under zero fill `Auto` the shard chooses whether a busy partition writing alone takes
/// refills by timing its writes with and without them, taking turns, and then keeps to the
/// choice: during the trial only the turns with refills take them, the engine's statistics
/// show the choice, and the refills after it follow it. Whichever the disk chooses, the file is
/// exactly its batches.
#[test]
fn a_busy_partition_alone_gets_the_refills_its_shard_measured_faster() {
    let tmp = disk_tempdir();
    let engine = engine_on(tmp.path(), Durability::EveryBatch, ZeroFill::Auto);
    let tp = TopicPartition::new("busy", 0);
    engine.open_partition(&tp, None).wait().expect("open partition");
    let choice = || engine.stats().expect("stats")[0].busy_refills;
    let refills = || engine.stats().expect("stats")[0].zero_fills;
    let mut appended = Vec::new();
    if engine.io_mode() != IoMode::Direct {
        for _ in 0..20 {
            busy_round(&engine, &tp, 16_000, &mut appended);
        }
        assert_eq!(choice(), None, "zero fill is off in {}: nothing to choose", engine.io_mode());
    } else {
        // The trial takes six turns of 6 MiB of writes: 36 MiB, about 290 rounds of 128 KB (a round
        // is one write), whatever the disk's speed.
        let mut rounds = 0;
        while choice().is_none() {
            assert!(rounds < 1000, "no choice after {rounds} rounds");
            busy_round(&engine, &tp, 16_000, &mut appended);
            rounds += 1;
        }
        let chosen = choice().expect("chosen");
        eprintln!("chosen after {rounds} rounds: {chosen:?}");
        assert_eq!(chosen.trials, 1, "{chosen:?}");
        assert!(chosen.with_writes >= 100 && chosen.without_writes >= 100, "{chosen:?}");
        assert!(chosen.with_us_per_mib > 0 && chosen.without_us_per_mib > 0, "{chosen:?}");
        // Three turns of 6 MiB with refills of a 1 MiB lead (one every 512 KiB or so), none in
        // the turns without.
        assert!(chosen.with_refills >= 12, "{chosen:?}");
        assert_eq!(chosen.without_refills, 0, "refills in the turns without: {chosen:?}");
        // The choice holds for a minute: 40 rounds (5 MB) take refills only if it was for them.
        let before = refills();
        for _ in 0..40 {
            busy_round(&engine, &tp, 16_000, &mut appended);
        }
        let taken = refills() - before;
        if chosen.refills {
            assert!(taken >= 4, "{taken} refills after choosing them: {chosen:?}");
        } else {
            assert_eq!(taken, 0, "refills after choosing none: {chosen:?}");
        }
        assert_eq!(choice(), Some(chosen), "the same choice, no second trial within the hold");
    }
    engine.shutdown().expect("shutdown");
    let on_disk = file(&log_path(&tmp.path().join(tp.dir_name()), 0));
    assert_same(&on_disk, &appended, "the segment after shutdown");
}

/// A partition whose appends queue (its writes carry several) while no other partition of its
/// shard writes takes refills of a small lead (1 MiB, where one whose appends do not queue
/// doubles its lead up to its share, 64 MiB here): its writes overwrite zeros, and the zeros in
/// the device's queue beside its next writes stay small. With writes over a quarter of that
/// lead it takes none: they would reach a refill still in flight, and the shard would wait.
#[test]
fn a_busy_partition_writing_alone_keeps_a_small_lead() {
    // 800 appends of 12 KB (9.6 MB) in 100 writes of 8. A lead doubling at each refill would
    // reach 16 MiB by the end; a lead of 1 MiB takes a refill every 512 KiB or so.
    let (stats, writes, data, mode) = busy_partition_alone(12_000, 800);
    assert_eq!(writes, 100, "one write a round");
    if mode != IoMode::Direct {
        eprintln!("refills not checked: zero fill is off in {mode}");
        return;
    }
    // The zeros end at most the lead past the data (0.5 MB past it here, 15.6 MB when busy refills
    // were not capped).
    assert!(
        stats.bytes <= data + (1 << 20),
        "{} zero bytes for {data} data bytes: the lead grew past 1 MiB",
        stats.bytes
    );
    // And refills came all along (a lead that doubles comes with half as many each time).
    assert!(stats.fills >= 12, "{} refills for {data} bytes in {writes} writes", stats.fills);
    // 96 appends of 300 KB in 12 writes of 2.4 MB: none is small enough for a busy refill.
    let (stats, writes, data, _) = busy_partition_alone(300_000, 96);
    assert_eq!(writes, 12, "one write a round");
    assert_eq!(stats.fills, 0, "{stats:?} for {data} bytes in {writes} writes of 8 appends of 300 KB");
}

/// A shard's refill goes as a burst of independent writes while its partition writes alone, and
/// paced (128 KiB writes, one after another) while other partitions' writes share the device,
/// so that at most one of its writes sits in front of their appends; there a partition keeps a
/// small lead (256 KiB, where alone it grows to its share, 1 MiB here), so that each refill is
/// short. Either way the partitions' files hold exactly their batches after shutdown.
#[test]
fn refills_beside_other_partitions_writes_are_paced() {
    const PARTITIONS: usize = 4;
    let tmp = disk_tempdir();
    let engine = engine_on(tmp.path(), Durability::EveryBatch, ZeroFill::Lead(4 << 20));
    let tps = open_partitions(&engine, "paced", PARTITIONS);
    let stats = |tp: &TopicPartition| engine.with_log(tp, |log| Ok(log.zero_fill_stats())).wait().expect("stats");
    let mut appended = vec![Vec::new(); PARTITIONS];
    // The first partition alone, each append waited for: nothing else is in flight at its turns.
    for _ in 0..100 {
        let b = batch(&[T0], 12_000);
        let info = engine.append(&tps[0], b.clone(), 0).wait().expect("append");
        appended[0].extend(as_stored(b, &info));
    }
    let alone = stats(&tps[0]);
    // Then all of them, a round at a time, each round written in one turn.
    for _ in 0..100 {
        held_round(&engine, &tps, 12_000, &mut appended);
    }
    let together: Vec<_> = tps.iter().map(stats).collect();
    if engine.io_mode() == IoMode::Direct {
        assert!(alone.fills > 0 && alone.paced == 0, "alone: {alone:?}");
        let fills: u64 = together.iter().map(|s| s.fills).sum::<u64>() - alone.fills;
        let paced: u64 = together.iter().map(|s| s.paced).sum();
        assert!(paced > 0, "together: {paced} of {fills} refills paced ({together:?})");
        // The partitions that only wrote together: the zeros they wrote come to at most their data
        // and the small lead (a 64 KiB block of slack), where a lead of their share ends 512 KiB
        // or more past the data once it has grown. No write of theirs reached zeros in flight.
        for (i, (s, data)) in together.iter().zip(&appended).enumerate().skip(1) {
            let bound = data.len() as u64 + (256 << 10) + (64 << 10);
            assert!(s.fills > 0 && s.waits == 0, "partition {i}: {s:?}");
            assert!(s.bytes <= bound, "partition {i}: {} zero bytes for {} data bytes ({s:?})", s.bytes, data.len());
        }
        assert!(together.iter().all(|s| s.failures == 0), "{together:?}");
    } else {
        eprintln!("refills not checked: zero fill is off in {}", engine.io_mode());
    }
    engine.shutdown().expect("shutdown");
    assert_files_hold(tmp.path(), &tps, &appended, "");
}

/// With many partitions' writes in flight a shard takes no paced refill: the device's queue is
/// deep, and zeros would be a second write of every byte where bandwidth is what the appends
/// wait for. Each round holds the shard in a `with_log` call while 40 partitions (more than the
/// shard's crowd of 32 writes) get one append each, so that one turn starts all 40 writes
/// whatever the disk's speed. (The hold after a crowded turn is the unit test's.) Their files hold
/// exactly their batches after shutdown.
#[test]
fn no_paced_refills_while_many_partitions_write() {
    const PARTITIONS: usize = 40;
    const ROUNDS: usize = 40;
    let tmp = disk_tempdir();
    let engine = engine_on(tmp.path(), Durability::EveryBatch, ZeroFill::Lead(4 << 20));
    let tps = open_partitions(&engine, "crowd", PARTITIONS);
    let mut appended = vec![Vec::new(); PARTITIONS];
    for _ in 0..ROUNDS {
        held_round(&engine, &tps, 12_000, &mut appended);
    }
    let stats: Vec<_> =
        tps.iter().map(|tp| engine.with_log(tp, |log| Ok(log.zero_fill_stats())).wait().expect("stats")).collect();
    if engine.io_mode() == IoMode::Direct {
        // Every write starts beside 39 others: no burst either. Without the gate: 40 paced refills,
        // one a round.
        let fills: u64 = stats.iter().map(|s| s.fills).sum();
        assert_eq!(fills, 0, "refills with {PARTITIONS} partitions' writes starting together: {stats:?}");
    } else {
        eprintln!("refills not checked: zero fill is off in {}", engine.io_mode());
    }
    engine.shutdown().expect("shutdown");
    assert_files_hold(tmp.path(), &tps, &appended, "");
}

#[test]
fn zero_fill_settings_parse() {
    assert_eq!("auto".parse::<ZeroFill>(), Ok(ZeroFill::Auto));
    assert_eq!("off".parse::<ZeroFill>(), Ok(ZeroFill::Off));
    assert_eq!("0".parse::<ZeroFill>(), Ok(ZeroFill::Off));
    assert_eq!("65536".parse::<ZeroFill>(), Ok(ZeroFill::Lead(65536)));
    assert_eq!("8MiB".parse::<ZeroFill>(), Ok(ZeroFill::Lead(8 << 20)));
    assert_eq!("512k".parse::<ZeroFill>(), Ok(ZeroFill::Lead(512 << 10)));
    assert!("8XB".parse::<ZeroFill>().is_err());
    assert!("5GiB".parse::<ZeroFill>().is_err(), "more than u32");
    assert!("lots".parse::<ZeroFill>().is_err());
    for z in [ZeroFill::Auto, ZeroFill::Off, ZeroFill::Lead(123_456)] {
        assert_eq!(z.to_string().parse::<ZeroFill>(), Ok(z), "round trip of {z}");
    }
    assert_eq!(ZeroFill::Auto.lead_bytes(Durability::EveryBatch, IoMode::Direct), ZeroFill::DEFAULT_LEAD_BYTES);
    assert_eq!(ZeroFill::Auto.lead_bytes(Durability::EveryBatch, IoMode::Buffered), 0);
    assert_eq!(ZeroFill::Auto.lead_bytes(Durability::None, IoMode::Direct), 0);
    assert_eq!(ZeroFill::Lead(4096).lead_bytes(Durability::None, IoMode::Direct), 4096);
    assert_eq!(ZeroFill::Lead(4096).lead_bytes(Durability::EveryBatch, IoMode::Buffered), 0, "direct mode only");
    assert_eq!(ZeroFill::Lead(4096).lead_bytes(Durability::EveryBatch, IoMode::Sync), 0, "direct mode only");
}

/// A shard shut down right after appends, with a zero-fill refill likely in flight, settles the
/// refill on its own thread (the only one that can complete it) before its logs close side by
/// side on other threads: every shutdown is clean, and the files hold exactly the batches.
#[test]
fn shutdown_right_after_appends_settles_the_refill_first() {
    const PARTITIONS: usize = 4;
    for round in 0..8 {
        let tmp = disk_tempdir();
        let engine = engine_on(tmp.path(), Durability::EveryBatch, ZeroFill::Lead(2 << 20));
        let tps = open_partitions(&engine, "stop", PARTITIONS);
        let mut appended = vec![Vec::new(); PARTITIONS];
        for _ in 0..=round {
            let pending: Vec<_> = tps
                .iter()
                .map(|tp| {
                    let b = batch(&[T0], 12_000);
                    (b.clone(), engine.append(tp, b, 0))
                })
                .collect();
            for ((b, p), bytes) in pending.into_iter().zip(appended.iter_mut()) {
                bytes.extend(as_stored(b, &p.wait().expect("append")));
            }
        }
        engine.shutdown().unwrap_or_else(|e| panic!("round {round}: {e}"));
        assert_files_hold(tmp.path(), &tps, &appended, &format!("round {round}: "));
    }
}
