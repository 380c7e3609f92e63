//! The write path's buffers and sync methods, through the engine: each shard reports whether its
//! write buffers are registered with its ring (fixed buffers) or why not, and
//! `SyncMethod::DsyncWrites` makes `Durability::EveryBatch` appends durable with RWF_DSYNC writes
//! and no fdatasync, except the first flush after a reopen, whose earlier bytes may not be.
//! Each shard also times its writes (`ShardStats::write_latency`).

use seglog::engine::{ShardStats, SyncMethod};
use seglog::format::builder::BatchBuilder;
use seglog::io::pool::BufferMode;
use seglog::{Durability, Engine, EngineConfig, IoMode, TopicPartition};

fn batch(i: u32, bytes: usize) -> Vec<u8> {
    // Recent timestamps, so retention never takes the batches; the same in every run of the
    // test process, so runs can be compared byte for byte.
    static NOW: std::sync::OnceLock<i64> = std::sync::OnceLock::new();
    let now = *NOW
        .get_or_init(|| std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64);
    let mut b = BatchBuilder::new();
    b.push(now + i as i64, None, Some(&vec![(i % 251) as u8; bytes]), &[]);
    b.build().unwrap()
}

fn engine(dir: &std::path::Path, mode: IoMode, method: SyncMethod) -> Engine {
    let mut cfg = EngineConfig::new(dir);
    cfg.io_mode = mode;
    cfg.shards = Some(1);
    cfg.durability = Durability::EveryBatch;
    cfg.sync_method = method;
    Engine::open(cfg).unwrap()
}

fn stats(e: &Engine) -> ShardStats {
    e.stats().unwrap().remove(0)
}

/// Appends `n` batches one at a time (each its own loop turn); returns the fdatasyncs they took.
fn append_each(e: &Engine, tp: &TopicPartition, from: u32, n: u32) -> u64 {
    let before = stats(e).fsyncs;
    for i in from..from + n {
        e.append(tp, batch(i, 1000 + i as usize * 37), 0).wait().unwrap();
    }
    stats(e).fsyncs - before
}

fn read_all(e: &Engine, tp: &TopicPartition) -> Vec<u8> {
    let mut out = Vec::new();
    let mut offset = 0;
    loop {
        let f = e.fetch(tp, offset, 1 << 20, None).wait().unwrap();
        if f.records.is_empty() {
            return out;
        }
        let batches = seglog::format::batch::split_batches(&f.records, true).unwrap();
        offset = batches.last().unwrap().1.last_offset() + 1;
        out.extend_from_slice(&f.records);
    }
}

#[test]
fn dsync_writes_replace_the_fdatasync() {
    for mode in [IoMode::Direct, IoMode::Buffered, IoMode::Sync] {
        let dir = tempfile::tempdir().unwrap();
        let tp = TopicPartition::new("t", 0);
        let e = engine(dir.path(), mode, SyncMethod::DsyncWrites);
        e.open_partition(&tp, None).wait().unwrap();
        // The first append starts a leader epoch: its checkpoint is written off the shard.
        append_each(&e, &tp, 0, 1);
        assert_eq!(append_each(&e, &tp, 1, 19), 0, "{mode}: a new segment needs no fdatasync");
        let written = read_all(&e, &tp);
        e.shutdown().unwrap();

        // After a reopen the bytes already in the file may not be durable: the first flush
        // carries an fdatasync, the next ones none.
        let e = engine(dir.path(), mode, SyncMethod::DsyncWrites);
        assert!(read_all(&e, &tp) == written, "{mode}: the data read back after a reopen differs");
        assert_eq!(append_each(&e, &tp, 20, 1), 1, "{mode}");
        assert_eq!(append_each(&e, &tp, 21, 10), 0, "{mode}");
        let all = read_all(&e, &tp);
        e.shutdown().unwrap();

        // The same data as with write + fdatasync, which syncs once per turn.
        let dir2 = tempfile::tempdir().unwrap();
        let e = engine(dir2.path(), mode, SyncMethod::Fdatasync);
        e.open_partition(&tp, None).wait().unwrap();
        append_each(&e, &tp, 0, 1);
        assert_eq!(append_each(&e, &tp, 1, 30), 30, "{mode}");
        assert!(read_all(&e, &tp) == all, "{mode}: fdatasync and RWF_DSYNC runs stored different data");
        e.shutdown().unwrap();
        let a = std::fs::read(dir.path().join("t-0/00000000000000000000.log")).unwrap();
        let b = std::fs::read(dir2.path().join("t-0/00000000000000000000.log")).unwrap();
        assert!(a == b, "{mode}: the logs differ ({} and {} bytes)", a.len(), b.len());
    }
}

#[test]
fn shard_stats_time_every_partition_write_and_nothing_else() {
    for mode in [IoMode::Direct, IoMode::Buffered, IoMode::Sync] {
        let dir = tempfile::tempdir().unwrap();
        let tp = TopicPartition::new("t", 0);
        // Direct mode under EveryBatch zero-fills ahead of the data: those writes are not timed.
        let e = engine(dir.path(), mode, SyncMethod::DsyncWrites);
        e.open_partition(&tp, None).wait().unwrap();
        let before = stats(&e);
        let started = std::time::Instant::now();
        let mut slowest = std::time::Duration::ZERO;
        for i in 0..40 {
            let t = std::time::Instant::now();
            e.append(&tp, batch(i, 4000), 0).wait().unwrap();
            slowest = slowest.max(t.elapsed());
        }
        let wall = started.elapsed();
        let after = stats(&e);
        let h = after.write_latency.since(&before.write_latency);
        let flushes = after.flushes - before.flushes;
        assert!(flushes >= 40, "{mode}: one write per append taken one at a time, got {flushes}");
        assert_eq!(h.count(), flushes, "{mode}: every partition write timed once");
        // The mode the engine really runs in (it falls back when io_uring is refused).
        if e.io_mode() == IoMode::Direct {
            assert!(after.zero_fills > 0, "{mode}: the check needs refills to leave out");
        }
        // A write is timed inside its append: none can take longer than the slowest append, and
        // together they cannot take longer than the whole loop.
        assert!(h.max() <= slowest, "{mode}: a write timed {:?}, the slowest append {slowest:?}", h.max());
        assert!(h.quantile(0.5) > std::time::Duration::ZERO, "{mode}: {h:?}");
        assert!(h.quantile(0.5) * 20 <= wall, "{mode}: {h:?} over a loop of {wall:?}");
        e.shutdown().unwrap();
    }
}

#[test]
fn shard_stats_say_whether_write_buffers_are_registered() {
    for mode in [IoMode::Direct, IoMode::Buffered, IoMode::Sync] {
        let dir = tempfile::tempdir().unwrap();
        let tp = TopicPartition::new("t", 0);
        let mut cfg = EngineConfig::new(dir.path());
        cfg.io_mode = mode;
        cfg.shards = Some(1);
        let e = Engine::open(cfg).unwrap();
        e.open_partition(&tp, None).wait().unwrap();
        for i in 0..50 {
            e.append(&tp, batch(i, 20_000), 0).wait().unwrap();
        }
        let s = stats(&e).write_buffers;
        match mode {
            IoMode::Sync => {
                assert!(matches!(&s.mode, BufferMode::Unregistered(why) if why.contains("sync")), "{s:?}");
                assert_eq!((s.fixed_writes, s.registered_bytes), (0, 0), "{s:?}");
            }
            _ => match &s.mode {
                BufferMode::Registered { .. } => {
                    assert!(s.fixed_writes >= 50 && s.registered_bytes >= 1, "{mode}: {s:?}");
                }
                // A kernel or RLIMIT_MEMLOCK refusing registration is a fallback, not a failure.
                BufferMode::Unregistered(why) => {
                    eprintln!("{mode}: write buffers not registered here: {why}");
                    assert!(s.unregistered_writes >= 50, "{s:?}");
                }
                BufferMode::NotYet => panic!("{mode}: {s:?}"),
            },
        }
        assert!(s.slabs >= 1 && s.chunks_in_use >= 1, "{mode}: {s:?}");
        e.shutdown().unwrap();
    }
    // io_uring refused: the engine runs in sync mode and says so for its buffers too.
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = EngineConfig::new(dir.path());
    cfg.simulate_uring_refusal = true;
    cfg.shards = Some(1);
    let e = Engine::open(cfg).unwrap();
    assert!(matches!(stats(&e).write_buffers.mode, BufferMode::Unregistered(_)));
    e.shutdown().unwrap();
}

/// A one-shard engine in `mode` with these budgets and `partitions` partitions open.
fn many_partitions(
    dir: &std::path::Path,
    mode: IoMode,
    partitions: u32,
    tail_cache_budget: u64,
    write_buffer_budget: u64,
) -> (Engine, Vec<TopicPartition>) {
    let mut cfg = EngineConfig::new(dir);
    cfg.io_mode = mode;
    cfg.shards = Some(1);
    cfg.tail_cache_budget_bytes = tail_cache_budget;
    cfg.write_buffer_budget_bytes = write_buffer_budget;
    let e = Engine::open(cfg).unwrap();
    let tps: Vec<TopicPartition> = (0..partitions as i32).map(|p| TopicPartition::new("many", p)).collect();
    for tp in &tps {
        e.open_partition(tp, None).wait().unwrap();
    }
    (e, tps)
}

/// A shard's partitions share its tail-cache budget: with a budget too small for a chunk each,
/// an idle partition's tail holds no chunk (in direct mode only its partial last block, in a
/// buffer of its own), so the shard's write buffers in use do not grow with its partitions;
/// with a budget of a chunk each or more, every tail keeps one. Either way every partition
/// reads back exactly what was appended, from the file where the tail gave its bytes back.
#[test]
fn partitions_share_the_tail_cache_budget_and_idle_ones_hold_no_chunk() {
    const PARTITIONS: u32 = 300;
    let mode = seglog_tests::test_io_mode().unwrap_or(IoMode::Direct);
    let mut in_use = Vec::new();
    for budget in [4u64 << 20, 300 << 20] {
        let dir = tempfile::tempdir().unwrap();
        let (e, tps) = many_partitions(dir.path(), mode, PARTITIONS, budget, (2 * budget).max(256 << 20));
        let mut want = vec![Vec::new(); tps.len()];
        for round in 0..4u32 {
            let pending: Vec<_> = tps
                .iter()
                .enumerate()
                .map(|(p, tp)| {
                    let b = batch(round * PARTITIONS + p as u32, 700 + (p * 53 + round as usize * 911) % 5000);
                    (p, b.clone(), e.append(tp, b, 0))
                })
                .collect();
            for (p, mut b, done) in pending {
                let info = done.wait().unwrap();
                // As stored: the offset the log gave it and the leader epoch of the append.
                b[..8].copy_from_slice(&info.first_offset.to_be_bytes());
                b[12..16].copy_from_slice(&0i32.to_be_bytes());
                want[p].extend(b);
            }
        }
        let s = stats(&e).write_buffers;
        eprintln!("{mode}, budget {budget}: {} chunks in use for {PARTITIONS} partitions", s.chunks_in_use);
        in_use.push(s.chunks_in_use);
        for (tp, want) in tps.iter().zip(&want) {
            assert!(read_all(&e, tp) == *want, "{mode}, budget {budget}: {tp} reads back what was appended");
        }
        e.shutdown().unwrap();
    }
    assert!(in_use[0] <= 4, "{mode}: {} chunks in use with 14 KiB of budget each", in_use[0]);
    assert!(in_use[1] >= PARTITIONS as u64, "{mode}: {} chunks in use with 1 MiB each", in_use[1]);
}

/// A shard holds its write buffers under `write_buffer_budget_bytes`: with 300 partitions
/// appended to at once (queued while the shard is held in a closure, so that one turn finds
/// them all), each append takes a chunk until its write is done, and past the budget the shard
/// leaves the queued appends until writes give chunks back. Every append is acknowledged and
/// reads back exactly; without the budget the chunks in use reach the partitions.
#[test]
fn the_write_buffer_budget_bounds_a_shards_chunks() {
    const PARTITIONS: u32 = 300;
    const BUDGET_CHUNKS: u64 = 8;
    let mode = seglog_tests::test_io_mode().unwrap_or(IoMode::Direct);
    let mut peaks = Vec::new();
    for budget in [BUDGET_CHUNKS * 256 * 1024, 1 << 30] {
        let dir = tempfile::tempdir().unwrap();
        let (e, tps) = many_partitions(dir.path(), mode, PARTITIONS, 1 << 20, budget);
        let mut want = vec![Vec::new(); tps.len()];
        for round in 0..3u32 {
            // The shard is held before any append is sent: otherwise a shard slow to wake takes
            // the hold with the first appends, writes them before it takes the rest, and their
            // chunks (a buffered write completes at once) come back before the last partitions
            // take theirs (CI saw a peak of 299 without the budget).
            let pending: Vec<_> = seglog_tests::while_held(&e, &tps[0], || {
                tps.iter()
                    .enumerate()
                    .map(|(p, tp)| {
                        let b = batch(round * PARTITIONS + p as u32, 2000 + (p * 37) % 3000);
                        (p, b.clone(), e.append(tp, b, 0))
                    })
                    .collect()
            });
            for (p, mut b, done) in pending {
                let info = done.wait().unwrap();
                b[..8].copy_from_slice(&info.first_offset.to_be_bytes());
                b[12..16].copy_from_slice(&0i32.to_be_bytes());
                want[p].extend(b);
            }
        }
        let s = stats(&e);
        eprintln!(
            "{mode}, budget {budget}: peak {} chunks, {} budget waits",
            s.write_buffers.peak_chunks, s.budget_waits
        );
        peaks.push((s.write_buffers.peak_chunks, s.budget_waits));
        for (tp, want) in tps.iter().zip(&want) {
            assert!(read_all(&e, tp) == *want, "{mode}, budget {budget}: {tp} reads back what was appended");
        }
        e.shutdown().unwrap();
    }
    // An append may take two chunks (it crosses a chunk boundary), and one is taken before the
    // check sees the budget reached.
    assert!(peaks[0].0 <= BUDGET_CHUNKS + 2, "{mode}: peak {} chunks over a budget of {BUDGET_CHUNKS}", peaks[0].0);
    assert!(peaks[0].1 > 0, "{mode}: the budget never made appends wait");
    assert!(peaks[1].0 >= PARTITIONS as u64, "{mode}: without the budget the peak is {}", peaks[1].0);
}

/// With many partitions writing at once, the shard looks at a partition for a completed write
/// once per write where the storage names the batches that completed (the io_uring modes), not
/// at every partition in flight each loop turn: the turn's cost follows what completed, not what
/// is outstanding (issue 17: thousands of partitions on a shard).
#[test]
fn a_shard_looks_only_at_partitions_whose_write_completed() {
    for mode in [IoMode::Direct, IoMode::Buffered] {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = EngineConfig::new(dir.path());
        cfg.io_mode = mode;
        cfg.shards = Some(1);
        cfg.durability = Durability::None;
        let e = Engine::open(cfg).unwrap();
        if stats(&e).io_mode != Some(mode) {
            // Without io_uring every write is done at submission: nothing to tell apart.
            eprintln!("skipped {mode}: the engine runs in {:?}", stats(&e).io_mode);
            continue;
        }
        let tps: Vec<TopicPartition> = (0..300).map(|p| TopicPartition::new("many", p)).collect();
        for tp in &tps {
            e.open_partition(tp, None).wait().unwrap();
        }
        let before = stats(&e);
        let started = std::time::Instant::now();
        for round in 0..4u32 {
            // One append in flight per partition, all at once.
            let pending: Vec<_> = tps.iter().map(|tp| e.append(tp, batch(round, 3000), 0)).collect();
            for p in pending {
                p.wait().unwrap();
            }
        }
        let s = stats(&e);
        let (writes, checks) = (s.flushes - before.flushes, s.completion_checks - before.completion_checks);
        let sweeps = s.completion_sweeps - before.completion_sweeps;
        assert!(writes >= 4 && writes <= 4 * tps.len() as u64, "{mode}: {writes} writes");
        // A sweep of every partition in flight only as a backstop, after a second without a
        // completion (a stall of the disk), at most once a second.
        let most_sweeps = started.elapsed().as_secs() + 1;
        assert!(sweeps <= most_sweeps, "{mode}: {sweeps} sweeps in {:?}", started.elapsed());
        let most = writes + sweeps * tps.len() as u64;
        assert!(checks <= most, "{mode}: {checks} looks for {writes} writes and {sweeps} sweeps");
        for tp in &tps {
            let f = e.fetch(tp, 3, 1 << 20, None).wait().unwrap();
            assert_eq!((f.log_end_offset, f.records.is_empty()), (4, false), "{mode}: {tp}");
        }
        e.shutdown().unwrap();
    }
}

/// The shard's timed work (at most every 10 ms: flushes that `flush.ms` calls for, deleted files
/// whose delay ran out) looks only at the logs that may have some, not at every open one: idle
/// partitions cost it nothing (issue 17). Those that have some still get it done.
#[test]
fn timed_work_looks_only_at_partitions_that_have_some() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = EngineConfig::new(dir.path());
    cfg.shards = Some(1);
    cfg.durability = Durability::None;
    let e = Engine::open(cfg).unwrap();
    let idle: Vec<TopicPartition> = (0..300).map(|p| TopicPartition::new("idle", p)).collect();
    for tp in &idle {
        e.open_partition(tp, None).wait().unwrap();
        e.append(tp, batch(0, 500), 0).wait().unwrap();
    }
    let before = stats(&e);
    std::thread::sleep(std::time::Duration::from_millis(200));
    let visits = stats(&e).timed_work_visits - before.timed_work_visits;
    assert_eq!(visits, 0, "300 partitions with nothing timed to do were looked at {visits} times in 200 ms");

    // flush.ms: the append lists the partition, and it is looked at until the flush it calls
    // for is done. Nothing but stats is asked of the shard meanwhile (an embedder's closure
    // would list the partition itself).
    let flushed = TopicPartition::new("flushed", 0);
    let config = seglog::LogConfig { flush_ms: 30, ..Default::default() };
    e.open_partition(&flushed, Some(config)).wait().unwrap();
    e.append(&flushed, batch(0, 500), 0).wait().unwrap();
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut last = stats(&e).timed_work_visits;
    while std::time::Instant::now() < until {
        std::thread::sleep(std::time::Duration::from_millis(250));
        let now = stats(&e).timed_work_visits;
        if now > before.timed_work_visits && now == last {
            break; // looked at, and no longer
        }
        last = now;
    }
    let recovery_point = e.with_log(&flushed, |l| Ok(l.recovery_point())).wait().unwrap();
    assert_eq!(recovery_point, 1, "flush.ms = 30 flushed the partition's append");

    // file.delete.delay.ms: the `.deleted` files go once the delay has run out.
    let trimmed = TopicPartition::new("trimmed", 0);
    let config = seglog::LogConfig { segment_bytes: 4096, file_delete_delay_ms: 30, ..Default::default() };
    e.open_partition(&trimmed, Some(config)).wait().unwrap();
    for i in 0..4 {
        e.append(&trimmed, batch(i, 3000), 0).wait().unwrap();
    }
    let (start, waiting) = e
        .with_log(&trimmed, |l| {
            l.set_high_watermark(l.log_end_offset());
            let start = l.delete_records(3)?;
            Ok((start, l.pending_deletions()))
        })
        .wait()
        .unwrap();
    assert_eq!(start, 3);
    assert!(waiting > 0, "delete_records left its segments' files waiting for the delay");
    let part_dir = dir.path().join(trimmed.dir_name());
    let deleted = || {
        std::fs::read_dir(&part_dir)
            .unwrap()
            .filter(|f| f.as_ref().unwrap().path().to_string_lossy().ends_with(".deleted"))
            .count()
    };
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while deleted() > 0 && std::time::Instant::now() < until {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert_eq!(deleted(), 0, "the .deleted files were removed after file.delete.delay.ms");
    let visits = stats(&e).timed_work_visits - before.timed_work_visits;
    assert!(visits > 0, "the two partitions with timed work were looked at");

    // Idle again: the two are looked at no more.
    let before = stats(&e);
    std::thread::sleep(std::time::Duration::from_millis(100));
    assert_eq!(stats(&e).timed_work_visits - before.timed_work_visits, 0, "no log has timed work left");
    e.shutdown().unwrap();
}
