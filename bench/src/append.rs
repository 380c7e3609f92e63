//! The append workload: batches of a fixed size appended through the engine to one or more
//! partitions, with a window of outstanding appends per producer so a shard can gather several
//! per loop turn, as a broker handling many producers would.

use std::collections::VecDeque;
use std::path::Path;
use std::time::Instant;

use seglog::engine::SyncMethod;
use seglog::format::builder::BatchBuilder;
use seglog::{Durability, Engine, EngineConfig, IoMode, LogConfig, TopicPartition};

use crate::pct::{Hist, Latency};
use crate::workload::Counters;

/// What to run.
#[derive(Clone, Debug)]
pub struct AppendParams {
    pub mode: IoMode,
    pub durability: Durability,
    /// Size of each batch on disk.
    pub batch_bytes: usize,
    pub total_bytes: u64,
    /// Appends in flight per partition.
    pub window: usize,
    pub partitions: usize,
    pub shards: usize,
    pub preallocate: bool,
    /// How `Durability::EveryBatch` syncs.
    pub sync_method: SyncMethod,
    /// Producer threads; each appends to every partition in turn, keeping `window` appends in
    /// flight per partition.
    pub producers: usize,
    /// Pin each shard thread to a core (the engine's default).
    pub pin_threads: bool,
    /// Cores to pin the shards to (the engine's `cores`); `None`: the engine's default (the
    /// allowed cores, shard i on the i-th).
    pub cores: Option<Vec<usize>>,
    /// How long a producer spins on its completion before it sleeps (see
    /// `Completion::wait_spinning`); `None`: `Completion::wait`, which adapts its spin.
    pub wait_spin_us: Option<u64>,
    /// The engine's `io_spin_us` (its default when `None`; it applies while at most one
    /// partition writes).
    pub io_spin_us: Option<u64>,
    /// The engine's zero fill.
    pub zero_fill: seglog::ZeroFill,
}

/// What it measured.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct AppendResult {
    pub mode_requested: String,
    pub mode: String,
    pub appends: u64,
    pub bytes: u64,
    pub seconds: f64,
    pub mb_per_s: f64,
    pub latency: Latency,
    /// io_uring_enter (or plain I/O syscalls) per appended batch, over all shards.
    pub enters_per_batch: f64,
    pub io_ops_per_batch: f64,
    /// Bytes handed to the kernel per write operation (the block size fio should use).
    pub avg_write_bytes: f64,
    /// Bytes appended per partition flush (one write, or two across a tail chunk boundary, plus
    /// the fdatasync when durable): the new bytes each `.log` flush carries, without the partial
    /// block it rewrites.
    pub bytes_per_flush: f64,
    /// Bytes written per byte appended (O_DIRECT rewrites the partial last block each flush).
    pub write_amplification: f64,
    pub fsyncs: u64,
    /// The shards' write buffers (registered fixed buffers or not), from the first shard.
    pub write_buffers: String,
    /// Share of the writes from pool memory that went out as WRITE_FIXED.
    pub fixed_write_share: f64,
    /// The shards' writes themselves (`ShardStats::write_latency`, submission to completion
    /// seen, sync included), p50 and p99 in microseconds.
    pub write_p50_us: f64,
    pub write_p99_us: f64,
}

/// A batch of exactly `bytes` bytes (one record; `bytes` must be at least 80).
pub fn batch_of(bytes: usize, ts: i64) -> Vec<u8> {
    // header 61 + record: len varint(3) + attrs 1 + tsDelta 1 + offsetDelta 1 + key -1 (1) +
    // value len varint + value + headers 1.
    let mut value_len = bytes.saturating_sub(61 + 3 + 5 + 3);
    loop {
        let mut b = BatchBuilder::new();
        b.push(ts, None, Some(&vec![0x5a; value_len]), &[]);
        let out = b.build().expect("bench batch");
        match out.len().cmp(&bytes) {
            std::cmp::Ordering::Equal => return out,
            std::cmp::Ordering::Greater => value_len -= out.len() - bytes,
            std::cmp::Ordering::Less => value_len += bytes - out.len(),
        }
        if value_len == 0 {
            return out;
        }
    }
}

pub fn run(dir: &Path, p: &AppendParams) -> seglog::Result<AppendResult> {
    let mut cfg = EngineConfig::new(dir);
    cfg.io_mode = p.mode;
    cfg.shards = Some(p.shards);
    cfg.durability = p.durability;
    cfg.sync_method = p.sync_method;
    cfg.zero_fill = p.zero_fill;
    cfg.pin_threads = p.pin_threads;
    cfg.cores = p.cores.clone();
    if let Some(us) = p.io_spin_us {
        cfg.io_spin_us = us;
    }
    cfg.log_config = LogConfig { preallocate: p.preallocate, ..LogConfig::default() };
    let engine = Engine::open(cfg)?;
    let tps: Vec<TopicPartition> = (0..p.partitions).map(|i| TopicPartition::new("bench", i as i32)).collect();
    for tp in &tps {
        engine.open_partition(tp, None).wait()?;
    }
    let stats0 = engine.stats()?;
    let batch = batch_of(p.batch_bytes, 1_700_000_000_000);
    let producers = p.producers.max(1) as u64;
    let per_producer = (p.total_bytes / batch.len() as u64 / producers).max(1);
    let appends = per_producer * producers;
    let t0 = Instant::now();
    let lat: Hist = std::thread::scope(|s| -> seglog::Result<Hist> {
        let workers: Vec<_> = (0..producers)
            .map(|_| {
                s.spawn(|| {
                    produce(
                        &engine,
                        &tps,
                        &batch,
                        per_producer,
                        p.window,
                        p.wait_spin_us.map(std::time::Duration::from_micros),
                    )
                })
            })
            .collect();
        let mut all = Hist::new();
        for w in workers {
            all.merge(&w.join().expect("producer thread")?);
        }
        Ok(all)
    })?;
    let seconds = t0.elapsed().as_secs_f64();
    let stats1 = engine.stats()?;
    let sum =
        |f: fn(&seglog::engine::ShardStats) -> u64, s: &[seglog::engine::ShardStats]| s.iter().map(f).sum::<u64>();
    let delta = Counters::from_stats(&stats1).since(&Counters::from_stats(&stats0));
    let (enters, ops, written, fsyncs) = (delta.io_enters, delta.io_ops, delta.bytes_written, delta.fsyncs);
    let writes = delta.writes.max(1);
    let flushes = (sum(|s| s.flushes, &stats1) - sum(|s| s.flushes, &stats0)).max(1);
    let fixed = sum(|s| s.write_buffers.fixed_writes, &stats1) - sum(|s| s.write_buffers.fixed_writes, &stats0);
    let plain =
        sum(|s| s.write_buffers.unregistered_writes, &stats1) - sum(|s| s.write_buffers.unregistered_writes, &stats0);
    let bytes = appends * batch.len() as u64;
    let write_lat = Latency::from_engine(&delta.write_latency);
    let r = AppendResult {
        mode_requested: p.mode.name().into(),
        mode: engine.io_mode().name().into(),
        appends,
        bytes,
        seconds,
        mb_per_s: bytes as f64 / seconds / 1e6,
        latency: lat.latency(),
        enters_per_batch: enters as f64 / appends as f64,
        io_ops_per_batch: ops as f64 / appends as f64,
        avg_write_bytes: written as f64 / writes as f64,
        bytes_per_flush: bytes as f64 / flushes as f64,
        write_amplification: written as f64 / bytes as f64,
        fsyncs,
        write_buffers: stats1.first().map(|s| format!("{:?}", s.write_buffers.mode)).unwrap_or_default(),
        fixed_write_share: fixed as f64 / (fixed + plain).max(1) as f64,
        write_p50_us: write_lat.p50_us,
        write_p99_us: write_lat.p99_us,
    };
    engine.shutdown()?;
    Ok(r)
}

/// One producer: `appends` appends spread over `tps` in turn, `window` in flight per partition;
/// returns the appends' latencies.
fn produce(
    engine: &Engine,
    tps: &[TopicPartition],
    batch: &[u8],
    appends: u64,
    window: usize,
    spin: Option<std::time::Duration>,
) -> seglog::Result<Hist> {
    let wait = |c: seglog::Completion<seglog::log::AppendInfo>| match spin {
        Some(d) => c.wait_spinning(d),
        None => c.wait(),
    };
    let mut inflight: VecDeque<(seglog::Completion<seglog::log::AppendInfo>, Instant)> = VecDeque::new();
    let mut lat = Hist::new();
    for i in 0..appends {
        let tp = &tps[(i as usize) % tps.len()];
        inflight.push_back((engine.append(tp, batch.to_vec(), 0), Instant::now()));
        if inflight.len() >= window.max(1) * tps.len() {
            let (c, t) = inflight.pop_front().expect("non-empty");
            wait(c)?;
            lat.record(t.elapsed());
        }
    }
    while let Some((c, t)) = inflight.pop_front() {
        wait(c)?;
        lat.record(t.elapsed());
    }
    Ok(lat)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_have_the_asked_size() {
        for n in [100usize, 1000, 4096, 16_384, 65_536] {
            let b = batch_of(n, 0);
            assert_eq!(b.len(), n);
            seglog::format::batch::validate_batch(&b, true).unwrap();
        }
    }
}
