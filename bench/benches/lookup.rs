//! criterion micro-benchmarks of lookups (the offset index alone, against a `Vec` and against
//! Kafka's mmap, is `benches/index.rs`):
//! - time-index search in the warm section (the last 8 KiB, where tail lookups land) and in the
//!   cold part, against a plain binary search over a `Vec` (the in-memory limit);
//! - the whole warm offset lookup: index search plus the phase-2 header walk over bytes in memory
//!   (a log on the engine's simulated disk, so no system call is timed), for batches that are
//!   all indexed (16 KiB) and batches four to an index entry (1 KiB);
//! - the phase-2 header walk alone, per batch hop.
use std::hint::black_box;
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use seglog::index::TimeIndex;
use seglog::io::sim::SimStorage;
use seglog::log::{Log, LogOptions};
use seglog::segment::BatchScanner;
use seglog::LogConfig;
use seglog_bench::workload::{make_batch, stamp, Rng};

const ENTRIES: usize = 262_144;
const INDEX_BYTES: u32 = 10 << 20;

/// 4096 targets: in the last `warm` entries, or anywhere before them.
fn targets(keys: &[i64], warm: usize, in_warm: bool) -> Vec<i64> {
    let mut rng = Rng::new(7);
    let (lo, hi) = if in_warm { (keys.len() - warm, keys.len()) } else { (0, keys.len() - warm) };
    (0..4096).map(|_| keys[rng.range(lo as i64, hi as i64) as usize] + rng.range(0, 16)).collect()
}

fn time_index(c: &mut Criterion) {
    let mut idx = TimeIndex::create(0, INDEX_BYTES, None).expect("index");
    let mut keys = Vec::with_capacity(ENTRIES);
    let mut plain: Vec<(i64, i32)> = Vec::with_capacity(ENTRIES);
    let ts0 = 1_700_000_000_000i64;
    for i in 0..ENTRIES {
        let ts = ts0 + i as i64 * 16;
        idx.maybe_append(ts, i as i64 * 16, false);
        keys.push(ts);
        plain.push((ts, i as i32 * 16));
    }
    let warm = 8192 / 12;
    let mut g = c.benchmark_group("time_index_262144");
    for (zone, in_warm) in [("warm", true), ("cold", false)] {
        let t = targets(&keys, warm, in_warm);
        g.bench_function(BenchmarkId::new("seglog_lookup", zone), |b| {
            let mut i = 0;
            b.iter(|| {
                i = (i + 1) & 4095;
                black_box(idx.lookup(black_box(t[i])))
            })
        });
        g.bench_function(BenchmarkId::new("vec_binary_search", zone), |b| {
            let mut i = 0;
            b.iter(|| {
                i = (i + 1) & 4095;
                let target = black_box(t[i]);
                let n = plain.partition_point(|e| e.0 <= target);
                black_box(n.checked_sub(1).map(|s| plain[s]))
            })
        });
    }
    g.finish();
}

/// A log holding `batches` batches of `batch_bytes` (one record each) whose whole active segment
/// stays in the tail cache, so that header walks read memory as tail lookups do in the engine.
/// Its directory is a temporary one under /var/tmp.
fn memory_log(batch_bytes: usize, batches: usize) -> (Log, tempfile::TempDir) {
    let dir = tempfile::tempdir_in("/var/tmp").or_else(|_| tempfile::tempdir()).expect("temporary directory");
    let config = LogConfig { segment_bytes: 1 << 30, ..LogConfig::default() };
    let options = LogOptions { tail_cache_bytes: 1 << 30, ..LogOptions::with_config(config) };
    let mut log = Log::open(dir.path().join("lookup-0"), options).expect("open");
    let t = make_batch(batch_bytes, 1, 0);
    for i in 0..batches {
        let mut b = t.clone();
        stamp(&mut b, 1_700_000_000_000 + i as i64);
        log.append_as_leader(&mut b, 0).expect("append");
    }
    (log, dir)
}

/// The same log on the engine's simulated disk (every read takes the simulator's lock).
fn sim_log(batch_bytes: usize, batches: usize) -> Log {
    let config = LogConfig { segment_bytes: 1 << 30, ..LogConfig::default() };
    let options = LogOptions { storage: Arc::new(SimStorage::new()), ..LogOptions::with_config(config) };
    let mut log = Log::open("/sim/lookup-0", options).expect("open");
    let t = make_batch(batch_bytes, 1, 0);
    for i in 0..batches {
        let mut b = t.clone();
        stamp(&mut b, 1_700_000_000_000 + i as i64);
        log.append_as_leader(&mut b, 0).expect("append");
    }
    log
}

fn warm_lookup(c: &mut Criterion) {
    let mut g = c.benchmark_group("warm_offset_lookup");
    for (batch_bytes, batches) in [(16_384usize, 4096usize), (1024, 16_384)] {
        let (log, _dir) = memory_log(batch_bytes, batches);
        let seg = log.floor_segment(0).expect("segment");
        let mut rng = Rng::new(11);
        let t: Vec<i64> = (0..4096).map(|_| rng.range(0, batches as i64)).collect();
        g.bench_function(BenchmarkId::new("translate_offset_tail_cache", format!("{batch_bytes}B_batches")), |b| {
            let mut i = 0;
            b.iter(|| {
                i = (i + 1) & 4095;
                black_box(seg.translate_offset(black_box(t[i]), 0).expect("lookup"))
            })
        });
        g.bench_function(BenchmarkId::new("index_only", format!("{batch_bytes}B_batches")), |b| {
            let idx = seg.offset_index();
            let mut i = 0;
            b.iter(|| {
                i = (i + 1) & 4095;
                black_box(idx.lookup(black_box(t[i])))
            })
        });
        let slog = sim_log(batch_bytes, batches);
        let sseg = slog.floor_segment(0).expect("segment");
        g.bench_function(BenchmarkId::new("translate_offset_sim_disk", format!("{batch_bytes}B_batches")), |b| {
            let mut i = 0;
            b.iter(|| {
                i = (i + 1) & 4095;
                black_box(sseg.translate_offset(black_box(t[i]), 0).expect("lookup"))
            })
        });
    }
    g.finish();

    // The walk alone: 64 hops over 1 KiB batches in memory (the tail cache).
    let (log, _dir) = memory_log(1024, 4096);
    let seg = log.floor_segment(0).expect("segment");
    let mut g = c.benchmark_group("header_walk");
    g.throughput(Throughput::Elements(64));
    g.bench_function("64_hops_1KiB_batches", |b| {
        b.iter(|| {
            let mut s = BatchScanner::new(seg.log_file().clone(), 0, seg.size());
            let mut last = 0;
            for _ in 0..64 {
                last = s.next_batch().expect("walk").expect("batch").last_offset();
            }
            black_box(last)
        })
    });
    g.finish();
}

criterion_group!(benches, time_index, warm_lookup);
criterion_main!(benches);
