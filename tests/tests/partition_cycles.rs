//! Opening and closing partitions again and again leaves nothing behind: after each cycle the
//! engine holds the same descriptors, write-buffer chunks and partitions as after the first, and
//! the process's memory does not grow with each cycle. The only test of its binary, so that the
//! process's descriptor count and resident memory are the engine's alone.

use seglog::format::builder::BatchBuilder;
use seglog::{Engine, EngineConfig, IoMode, TopicPartition};

const PARTITIONS: usize = 500;
const CYCLES: usize = 6;

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
        // Every cycle's batch is there, in order, after a restart.
        e.shutdown().unwrap();
        let mut cfg = EngineConfig::new(dir.path());
        cfg.io_mode = mode;
        cfg.shards = Some(1);
        cfg.pin_threads = false;
        let e = Engine::open(cfg).unwrap();
        for tp in tps.iter().step_by(50) {
            e.open_partition(tp, None).wait().unwrap();
            let epochs = e.with_log(tp, |l| Ok(l.leader_epochs().to_vec())).wait().unwrap();
            assert_eq!(epochs, vec![(0, 0), (1, 2), (2, 4)], "{mode}: {tp:?}");
            let ends = e.partitions().unwrap();
            assert!(ends.iter().any(|(t, _, end)| t == tp && *end == CYCLES as i64), "{mode}: {ends:?}");
        }
        e.shutdown().unwrap();
    }
}
