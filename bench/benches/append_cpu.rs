//! criterion micro-benchmark of the append path's CPU cost per batch, with no I/O: a partition
//! log opened as a shard opens it (no write-through: appends fill the active segment's in-memory
//! tail, and the shard's flush step would hand them to the kernel later) takes leader appends. It
//! covers validation (framing, CRC-32C, every record decoded), offset assignment in place, the
//! index rule and the copy into the tail; not the shard queue, the write or the kernel. A second
//! group does the same on the engine's simulated disk with write-through, whose bookkeeping (it
//! remembers every unsynced write for crash simulation) is most of its cost.
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use seglog::io::sim::SimStorage;
use seglog::log::{Log, LogOptions, Writes};
use seglog::LogConfig;
use seglog_bench::workload::make_batch;

/// Appends per log before a fresh one is made (outside the timing), to bound memory.
const PER_LOG: u64 = 2048;

/// A log in a fresh temporary directory (under /var/tmp), appends kept in memory.
fn fresh_log() -> (Log, tempfile::TempDir) {
    let dir = tempfile::tempdir_in("/var/tmp").or_else(|_| tempfile::tempdir()).expect("temporary directory");
    let config = LogConfig { segment_bytes: 1 << 30, ..LogConfig::default() };
    let options = LogOptions { writes: Writes::Caller, tail_cache_bytes: 1 << 30, ..LogOptions::with_config(config) };
    (Log::open(dir.path().join("append-0"), options).expect("open"), dir)
}

/// A log on the simulated disk, each append written through to it.
fn sim_log() -> (Log, ()) {
    let config = LogConfig { segment_bytes: 1 << 30, ..LogConfig::default() };
    let options = LogOptions { storage: Arc::new(SimStorage::new()), ..LogOptions::with_config(config) };
    (Log::open("/sim/append-0", options).expect("open"), ())
}

fn append(c: &mut Criterion) {
    group(c, "append_cpu", &[(1024, 1), (16_384, 1), (16_384, 16), (65_536, 64)], fresh_log);
    group(c, "append_cpu_sim_disk", &[(16_384, 16)], sim_log);
}

fn group<G>(c: &mut Criterion, name: &str, sizes: &[(usize, usize)], make: fn() -> (Log, G)) {
    let mut g = c.benchmark_group(name);
    for &(size, records) in sizes {
        let template = make_batch(size, records, 1_700_000_000_000);
        g.throughput(Throughput::Bytes(size as u64));
        g.bench_function(BenchmarkId::from_parameter(format!("{size}B_x{records}")), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                let mut done = 0u64;
                while done < iters {
                    let (mut log, guard) = make();
                    let n = (iters - done).min(PER_LOG);
                    let mut batches: Vec<Vec<u8>> = (0..n).map(|_| template.clone()).collect();
                    let t = Instant::now();
                    for b in batches.iter_mut() {
                        log.append_as_leader(b, 0).expect("append");
                    }
                    total += t.elapsed();
                    done += n;
                    drop(log);
                    drop(guard);
                }
                total
            })
        });
    }
    g.finish();
}

criterion_group!(benches, append);
criterion_main!(benches);
