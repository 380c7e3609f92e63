//! Opening and closing partitions again and again leaves nothing behind: after each cycle the
//! engine holds the same descriptors, write-buffer chunks and partitions as after the first, and
//! the process's memory does not grow with each cycle. Reopened after a clean shutdown, a
//! partition holds one descriptor (its active `.log`), and a shard's descriptors stay under
//! `max_open_files`, active `.log`s included, while every sealed segment is read. One test in its
//! binary, so that the process's descriptor count and resident memory are the engine's alone.

use seglog::format::builder::BatchBuilder;
use seglog::{Engine, EngineConfig, IoMode, TopicPartition};

const PARTITIONS: usize = 500;
const CYCLES: usize = 10;

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map(|d| d.count()).unwrap_or(0)
}

fn resident_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1).and_then(|v| v.parse::<u64>().ok()))
        .map_or(0, |pages| pages * 4096)
}

fn batch(i: usize) -> Vec<u8> {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    let mut b = BatchBuilder::new();
    b.push(now, None, Some(&vec![(i % 251) as u8; 300 + i % 700][..]), &[]);
    b.build().unwrap()
}

/// One cycle: every partition opened, given one batch (a new leader epoch in each odd cycle, so
/// the epoch checkpoint writer has work), read back, and closed.
fn cycle(e: &Engine, tps: &[TopicPartition], n: usize) {
    let opens: Vec<_> = tps.iter().map(|tp| e.open_partition(tp, None)).collect();
    opens.into_iter().for_each(|o| drop(o.wait().unwrap()));
    let epoch = (n / 2) as i32;
    let appends: Vec<_> = tps.iter().enumerate().map(|(p, tp)| e.append(tp, batch(p + n), epoch)).collect();
    for (p, a) in appends.into_iter().enumerate() {
        assert_eq!(a.wait().unwrap().first_offset, n as i64, "cycle {n}, partition {p}");
    }
    for tp in tps {
        let f = e.fetch(tp, n as i64, 1 << 20, None).wait().unwrap();
        assert!(!f.records.is_empty(), "cycle {n}: {tp:?} reads nothing back");
    }
    let closes: Vec<_> = tps.iter().map(|tp| e.close_partition(tp)).collect();
    closes.into_iter().for_each(|c| c.wait().unwrap());
}

#[test]
fn open_close_cycles_leave_nothing_behind() {
    for mode in [IoMode::Direct, IoMode::Buffered, IoMode::Sync] {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = EngineConfig::new(dir.path());
        cfg.io_mode = mode;
        cfg.shards = Some(1);
        cfg.pin_threads = false;
        let e = Engine::open(cfg).unwrap();
        let tps: Vec<TopicPartition> = (0..PARTITIONS).map(|p| TopicPartition::new("cycles", p as i32)).collect();
        cycle(&e, &tps, 0);
        let (fds, mut rss) = (open_fds(), resident_bytes());
        let chunks = e.stats().unwrap()[0].write_buffers.chunks_in_use;
        let mut growth = Vec::new();
        for n in 1..CYCLES {
            cycle(&e, &tps, n);
            let s = e.stats().unwrap().remove(0);
            assert_eq!(s.partitions, 0, "{mode}: cycle {n}");
            assert_eq!(open_fds(), fds, "{mode}: cycle {n} left descriptors open");
            assert_eq!(s.write_buffers.chunks_in_use, chunks, "{mode}: cycle {n} kept write-buffer chunks");
            let now = resident_bytes();
            growth.push(now.saturating_sub(rss));
            rss = now;
        }
        // A partition's state is several KiB (its log, segment, indexes, tail): kept once per
        // cycle, every cycle would grow by megabytes. The allocator grows now and then (a new
        // arena, a threshold it moves), not every cycle: the least growth of a cycle is the leak.
        println!("{mode}: resident memory growth per cycle {growth:?}");
        let least = *growth.iter().min().unwrap() as f64 / PARTITIONS as f64;
        assert!(least < 256.0, "{mode}: {least:.0} bytes per partition in every cycle: {growth:?}");
        // Every cycle's batch is there, in order, after a restart; each partition holds its
        // active `.log` open and nothing else (its index files are closed until written).
        e.shutdown().unwrap();
        let mut cfg = EngineConfig::new(dir.path());
        cfg.io_mode = mode;
        cfg.shards = Some(1);
        cfg.pin_threads = false;
        let before = open_fds();
        let e = Engine::open(cfg).unwrap();
        let held = open_fds() - before;
        assert!(
            (PARTITIONS..PARTITIONS + 16).contains(&held),
            "{mode}: {held} descriptors after reopening {PARTITIONS} partitions"
        );
        for tp in tps.iter().step_by(50) {
            e.open_partition(tp, None).wait().unwrap();
            let epochs = e.with_log(tp, |l| Ok(l.leader_epochs().to_vec())).wait().unwrap();
            // Cycle n appends at offset n with epoch n / 2.
            let want: Vec<(i32, i64)> = (0..CYCLES.div_ceil(2)).map(|k| (k as i32, 2 * k as i64)).collect();
            assert_eq!(epochs, want, "{mode}: {tp:?}");
            let ends = e.partitions().unwrap();
            assert!(ends.iter().any(|(t, _, end)| t == tp && *end == CYCLES as i64), "{mode}: {ends:?}");
        }
        e.shutdown().unwrap();
    }
    descriptors_stay_under_the_limit();
}

/// The process's descriptors open on segment files (`.log`, `.index`, `.timeindex`) under `dir`.
fn segment_fds(dir: &std::path::Path) -> usize {
    let Ok(d) = std::fs::read_dir("/proc/self/fd") else { return 0 };
    d.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|p| p.starts_with(dir) && p.extension().is_some_and(|x| x == "log" || x == "index" || x == "timeindex"))
        .count()
}

/// 48 partitions of 4 one-batch segments each (batches of 700-750 bytes, 1 KiB segments) on a
/// shard with `max_open_files` = 64: writing them, reading every segment, and reopening and
/// reading them all again, the engine never holds more than 64 segment files open, its 48
/// active `.log`s included.
fn descriptors_stay_under_the_limit() {
    const LIMIT: usize = 64;
    const PARTS: usize = 48;
    let dir = tempfile::tempdir().unwrap();
    let config = || {
        let mut cfg = EngineConfig::new(dir.path());
        cfg.shards = Some(1);
        cfg.pin_threads = false;
        cfg.max_open_files = LIMIT;
        cfg.log_config.segment_bytes = 1024;
        cfg
    };
    let within = |what: &str| {
        let n = segment_fds(dir.path());
        assert!(n <= LIMIT, "{what}: {n} segment files open, max_open_files {LIMIT}");
    };
    let e = Engine::open(config()).unwrap();
    let tps: Vec<TopicPartition> = (0..PARTS).map(|p| TopicPartition::new("limit", p as i32)).collect();
    for tp in &tps {
        e.open_partition(tp, None).wait().unwrap();
    }
    for round in 0..4 {
        let appends: Vec<_> = tps.iter().enumerate().map(|(p, tp)| e.append(tp, batch(400 + p), 0)).collect();
        for a in appends {
            a.wait().unwrap();
        }
        within(&format!("round {round}"));
    }
    let read_all = |e: &Engine| {
        for tp in &tps {
            for offset in 0..4 {
                let f = e.fetch(tp, offset, 1 << 20, None).wait().unwrap();
                assert!(!f.records.is_empty(), "{tp:?} at {offset}");
                within(&format!("{tp:?} at {offset}"));
            }
        }
    };
    read_all(&e);
    let files = e.index_memory().remove(0).files;
    assert_eq!(files.held, PARTS, "{files:?}");
    assert!(files.open + PARTS <= LIMIT && files.evictions > 0, "{files:?}");
    e.shutdown().unwrap();
    let e = Engine::open(config()).unwrap();
    within("reopened");
    read_all(&e);
    e.shutdown().unwrap();
}
