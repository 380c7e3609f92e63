//! The shard's asynchronous writes (one in flight per partition, appends served meanwhile): the
//! flush policy still covers appends made while a synced write is in flight, interval durability
//! syncs every append within flush.ms, and a batch whose ticket is dropped does not keep the
//! shard from sleeping. (Found in review of the change that made writes asynchronous; each failed
//! before its fix.) Runs in every I/O mode (`SEGLOG_IO_MODE`).

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{batch_n, small_config, T0};
use seglog::config::{LogConfig, ManualClock};
use seglog::io::Storage;
use seglog::log::{Log, LogOptions, Recovery, Writes};

fn shard_like_log(config: LogConfig) -> (tempfile::TempDir, Arc<ManualClock>, Arc<dyn Storage>, Log) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(T0));
    let storage = seglog_tests::test_storage();
    let options = LogOptions {
        config,
        clock: clock.clone(),
        recovery: Recovery::default(),
        storage: storage.clone(),
        // As the shard opens its logs: appends stay in the tail until the shard writes them.
        writes: Writes::Caller,
        ..seglog_tests::log_options()
    };
    let log = Log::open(tmp.path().join("topic-0"), options).expect("open log");
    (tmp, clock, storage, log)
}

/// Drives one shard write the way `Shard::start_writes` / `Shard::poll_writes` do: take the
/// writes (with the fdatasync when `sync`), submit them without waiting, hand them back.
fn start_write(log: &mut Log, storage: &Arc<dyn Storage>, sync: bool) {
    let ops = log.take_writes(0, sync).expect("take_writes");
    assert!(!ops.is_empty());
    let synced_up_to = sync.then_some(log.log_end_offset());
    let io = storage.submit_async(vec![ops]).pop().expect("one batch");
    log.writes_started(io, synced_up_to);
}

/// Durability::Interval / flush.messages / flush.ms: a batch appended while a synced write is in
/// flight is not covered by that write's fdatasync, yet `Log::poll_writes` resets
/// `unflushed_messages` to 0 and `first_unflushed_ms` to None when the write completes. The log
/// then never reports a flush as due for that batch (`flush_due` returns false whenever
/// `unflushed_messages == 0`), so neither `Shard::start_writes` (sync = flush_due) nor
/// `Shard::periodic` ever fdatasyncs it: an acknowledged append stays non-durable indefinitely,
/// well past flush.ms, and the recovery point stays below it.
#[test]
fn an_append_made_while_a_synced_write_is_in_flight_stays_due_for_a_flush() {
    let config = LogConfig { flush_messages: 1, flush_ms: 1_000, ..small_config() };
    let (_tmp, clock, storage, mut log) = shard_like_log(config);

    let mut a = batch_n(1, T0, 16);
    log.append_as_leader(&mut a, 0).expect("append A");
    assert!(log.flush_due(clock_now(&clock), None), "A is due (flush.messages = 1)");
    start_write(&mut log, &storage, true); // A's write + fdatasync

    // B arrives while A's write is in flight (the shard keeps serving appends meanwhile).
    let mut b = batch_n(1, T0, 16);
    log.append_as_leader(&mut b, 0).expect("append B");
    let leo = log.log_end_offset();

    // A's write and fdatasync complete.
    assert!(log.poll_writes(true).expect("a write was outstanding").is_ok());
    assert!(log.recovery_point() < leo, "B is not covered by A's fdatasync");

    // The shard now writes B: with flush.messages = 1 it must link an fdatasync, and failing
    // that, the periodic flush must pick it up once flush.ms has passed.
    clock.advance(10_000);
    assert!(
        log.flush_due(clock_now(&clock), None),
        "B (appended during A's synced write, not durable, recovery point {} < log end {leo}) is never due for a \
         flush: unflushed_messages/first_unflushed_ms were reset when A's write completed",
        log.recovery_point()
    );
}

fn clock_now(clock: &Arc<ManualClock>) -> i64 {
    seglog::config::Clock::now_ms(&**clock)
}

/// An asynchronous batch whose `AsyncIo` is dropped without being completed (an ActiveSegment or
/// Log dropped with a write in flight: neither has a Drop that settles it) stays in the ring's
/// `async_batches` forever once it completes (its buffers and file with it), and
/// `wait_doorbell_or_io` treats any completed-but-uncollected batch as a reason not to sleep, so
/// from then on the shard's sleep returns at once: the shard spins at 100 % CPU.
#[test]
fn a_dropped_async_batch_does_not_stop_the_shard_from_sleeping() {
    use seglog::io::{AlignedBuf, IoMode, IoOp, IoOpKind, OpenMode, UringStorage};
    for mode in [IoMode::Buffered, IoMode::Direct] {
        let Ok(s) = UringStorage::new(mode) else {
            eprintln!("io_uring unavailable: skipped");
            return;
        };
        let tmp = tempfile::tempdir_in("/var/tmp").expect("tempdir");
        let f = s.open_log(&tmp.path().join("0.log"), OpenMode::CreateNew).expect("open");
        let mut buf = AlignedBuf::new(4096, 4096);
        buf.extend_from_slice(&[7u8; 4096]);
        let op =
            IoOp { file: f, kind: IoOpKind::Write { buf: buf.into(), pos: 0, dsync: false }, tag: 1, link_next: false };
        let io = s.submit_async(vec![vec![op]]).pop().expect("one batch");
        drop(io); // e.g. a Log dropped with its write in flight
                  // Let it complete and be reaped.
        std::thread::sleep(Duration::from_millis(50));
        s.poll_async();

        let bell = seglog::io::eventfd::EventFd::new().expect("eventfd");
        let t = Instant::now();
        for _ in 0..5 {
            seglog::io::wait_doorbell_or_io(&bell, mode, Duration::from_millis(20));
        }
        assert!(
            t.elapsed() >= Duration::from_millis(80),
            "{mode}: five 20 ms sleeps with nothing happening returned after {:?}: the leaked completed batch \
             keeps wait_doorbell_or_io from ever sleeping",
            t.elapsed()
        );
    }
}

/// The same defect end to end: under `Durability::Interval { flush_ms: 20, flush_messages: 1 }`
/// every acknowledged append must be durable (recovery point at the log end) within about
/// flush_ms once producers stop. Pipelined appends land while the previous synced write is in
/// flight; when it completes, their count is forgotten, their write goes out without an
/// fdatasync, and no timer ever syncs them. (io_uring modes only: in sync mode a write completes
/// within its turn, so nothing is appended while it is in flight.)
#[test]
fn interval_durability_syncs_every_append_within_flush_ms() {
    use seglog::{Durability, Engine, EngineConfig, IoMode, TopicPartition};
    let mode = common::env_io_mode().unwrap_or(IoMode::Direct);
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let mut cfg = EngineConfig::new(dir.path());
    cfg.io_mode = mode;
    cfg.shards = Some(1);
    cfg.durability = Durability::Interval { flush_ms: 20, flush_messages: 1 };
    let engine = Engine::open(cfg).unwrap();
    if engine.io_mode() == IoMode::Sync {
        eprintln!("sync mode: nothing is appended while a write is in flight; skipped");
        return;
    }
    let tp = TopicPartition::new("t", 0);
    engine.open_partition(&tp, None).wait().unwrap();
    let mut stuck = Vec::new();
    // Rounds of: a burst of pipelined appends (the first starts a synced write, the rest land
    // while it is in flight), then an idle pause far longer than flush_ms.
    for round in 0..12u64 {
        let burst = [2usize, 3, 8, 50][round as usize % 4];
        let mut pending = Vec::new();
        for i in 0..burst {
            pending.push(engine.append(&tp, batch_n(1, T0 + i as i64, 100), 0));
            if i == 0 {
                std::thread::sleep(Duration::from_micros(20 * (round % 4)));
            }
        }
        for p in pending {
            p.wait().unwrap();
        }
        std::thread::sleep(Duration::from_millis(300)); // 15 x flush_ms; the shard wakes every 100 ms
        let (rp, leo) = engine.with_log(&tp, |l| Ok((l.recovery_point(), l.log_end_offset()))).wait().unwrap();
        if rp < leo {
            stuck.push((round, rp, leo));
        }
    }
    engine.shutdown().unwrap();
    assert!(
        stuck.is_empty(),
        "{mode}: acknowledged appends still not durable 300 ms (15 x flush_ms) after the last one: (round, recovery \
         point, log end) {stuck:?}"
    );
}

#[test]
fn completing_writes_synchronously_keeps_the_log_usable() {
    // `Log::complete_writes` (the synchronous API for a broker with its own runtime) goes through
    // the same bookkeeping as an asynchronous write: with nothing to write it is a no-op, and a
    // completed synced write advances the recovery point.
    let (_tmp, _clock, storage, mut log) = shard_like_log(small_config());
    let ops = log.take_writes(0, false).expect("take_writes");
    assert!(ops.is_empty(), "nothing appended, nothing to write");
    log.complete_writes(storage.submit(ops), None).expect("completing nothing is fine");
    log.append_as_leader(&mut batch_n(3, T0, 10), 0).expect("append");
    let leo = log.log_end_offset();
    let ops = log.take_writes(0, true).expect("take_writes");
    assert!(!ops.is_empty());
    log.complete_writes(storage.submit(ops), Some(leo)).expect("complete");
    assert_eq!(log.recovery_point(), leo);
    assert_eq!(log.unwritten_bytes(), 0);
    log.append_as_leader(&mut batch_n(1, T0, 10), 0).expect("the log is not failed");
}

/// A log on the simulated disk, as the shard opens its logs (no write-through): its writes stay
/// in flight until polled or claimed.
fn log_on_sim() -> (seglog::io::sim::SimStorage, Arc<dyn Storage>, Log) {
    let sim = seglog::io::sim::SimStorage::new();
    sim.put_dir("/data");
    let storage: Arc<dyn Storage> = Arc::new(sim.clone());
    let options = LogOptions {
        config: small_config(),
        clock: Arc::new(ManualClock::new(T0)),
        storage: storage.clone(),
        writes: Writes::Caller,
        ..seglog_tests::log_options()
    };
    let log = Log::open("/data/topic-0", options).expect("open log");
    (sim, storage, log)
}

/// A log on the simulated disk whose first write (A) was settled by a flush and not yet
/// reported, with a second append (B) not yet written.
fn log_with_an_unreported_write() -> (seglog::io::sim::SimStorage, Arc<dyn Storage>, Log) {
    let (sim, storage, mut log) = log_on_sim();
    log.append_as_leader(&mut batch_n(1, T0, 16), 0).expect("append A");
    start_write(&mut log, &storage, false);
    log.flush().expect("flush settles A");
    log.append_as_leader(&mut batch_n(1, T0, 16), 0).expect("append B");
    (sim, storage, log)
}

/// A write started while the outcome of an earlier one (settled by a flush) is still unreported
/// is settled in turn by the next flush, and each outcome is reported once, in order. (Found in
/// review: the second flush panicked, its write still in flight.)
#[test]
fn writes_settled_by_a_flush_are_reported_in_order() {
    let (sim, storage, mut log) = log_with_an_unreported_write();
    start_write(&mut log, &storage, false);
    assert!(sim.ops_in_flight() > 0, "B is in flight");
    log.append_as_leader(&mut batch_n(1, T0, 16), 0).expect("append C");
    log.flush().expect("flush settles B and writes C");
    assert_eq!(log.recovery_point(), log.log_end_offset());
    assert!(log.poll_writes(false).expect("A's outcome").is_ok());
    assert!(log.poll_writes(false).expect("B's outcome").is_ok());
    assert!(log.poll_writes(true).is_none(), "each outcome once");
    assert!(!log.writes_outstanding());
    let got = log.read(0, 1 << 20, None, true).expect("read");
    assert_eq!(got.log_end_offset, 3);
}

/// `complete_writes` reports and applies its own batch, not the unreported outcome of an earlier
/// write. (Found in review: it returned the earlier outcome and left its own unapplied, the
/// recovery point behind.)
#[test]
fn complete_writes_applies_its_own_batch() {
    let (_sim, storage, mut log) = log_with_an_unreported_write();
    let leo = log.log_end_offset();
    let ops = log.take_writes(0, true).expect("take B");
    let done = storage.submit(ops);
    assert!(log.complete_writes(done, Some(leo)).is_ok());
    assert_eq!(log.recovery_point(), leo, "B's fdatasync moved the recovery point");
    assert!(log.poll_writes(false).expect("A's outcome, still reported").is_ok());
    assert!(log.poll_writes(false).is_none());
}

/// Writes taken and not handed back are a caller bug the log names, not a silent loss.
#[test]
#[should_panic(expected = "writes taken by Log::take_writes were not handed back")]
fn a_flush_between_take_writes_and_writes_started_is_a_caller_bug() {
    let (_sim, _storage, mut log) = log_on_sim();
    log.append_as_leader(&mut batch_n(1, T0, 16), 0).expect("append");
    let _ops = log.take_writes(0, false).expect("take");
    let _ = log.flush();
}
