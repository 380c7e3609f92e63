//! The workloads of `seglog bench`, run through the engine on a real directory: produce, tail
//! fetches, lagging (catch-up) reads, seek-heavy reads, time lookups, a mixed run, recovery and a
//! clean open of many segments; and one partition through the standalone `Log` beside the
//! reference designs ([`log`]).
//! Each returns a [`RunReport`]: throughput, an HDR latency summary, the shards' I/O counters per
//! operation, the process's page faults and CPU seconds per GB, and the I/O and huge-page modes the
//! engine really ran in. The disk's own figure (fio) is attached by the driver ([`crate::cli`]).
//!
//! Must not: print (the driver does), or leave files outside the directory it is given.

pub mod consume;
pub mod interval;
pub mod log;
pub mod mixed;
pub mod open;
pub mod produce;
pub mod recovery;

use std::path::Path;
use std::time::Instant;

use seglog::engine::ShardStats;
use seglog::format::batch;
use seglog::format::builder::BatchBuilder;
use seglog::{Durability, Engine, EngineConfig, IoMode, LogConfig, SyncMethod, TopicPartition, ZeroFill};

use crate::pct::{Hist, Latency};
use crate::rusage::Usage;

/// What every seglog run of one configuration shares.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Setup {
    #[serde(serialize_with = "ser_mode")]
    pub mode: IoMode,
    pub shards: usize,
    pub partitions: usize,
    /// Target size of each batch on disk, and records in it (the record size follows).
    pub batch_bytes: usize,
    pub records_per_batch: usize,
    #[serde(serialize_with = "ser_durability")]
    pub durability: Durability,
    pub segment_bytes: u32,
    pub index_interval_bytes: u32,
    pub preallocate: bool,
    /// The engine's zero fill (`auto` turns it on for the durable runs).
    #[serde(serialize_with = "ser_display")]
    pub zero_fill: ZeroFill,
    /// How the engine makes a durable write durable (RWF_DSYNC writes, the engine's default, or
    /// a write linked to an fdatasync); matters only for durable runs.
    #[serde(serialize_with = "ser_sync_method")]
    pub sync_method: SyncMethod,
}

fn ser_display<S: serde::Serializer, T: std::fmt::Display>(v: &T, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&v.to_string())
}

fn ser_mode<S: serde::Serializer>(m: &IoMode, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(m.name())
}
fn ser_durability<S: serde::Serializer>(d: &Durability, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&durability_name(*d))
}
fn ser_sync_method<S: serde::Serializer>(m: &SyncMethod, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(m.name())
}

/// A short name for a durability policy.
pub fn durability_name(d: Durability) -> String {
    match d {
        Durability::None => "none".into(),
        Durability::EveryBatch => "every-batch".into(),
        Durability::Interval { flush_ms, flush_messages } => {
            if flush_messages == i64::MAX {
                format!("interval:{flush_ms}ms")
            } else {
                format!("interval:{flush_ms}ms/{flush_messages}msgs")
            }
        }
    }
}

/// Parses `none`, `every-batch` or `interval:MS`.
pub fn parse_durability(s: &str) -> Result<Durability, String> {
    match s {
        "none" => Ok(Durability::None),
        "every-batch" | "every_batch" | "durable" => Ok(Durability::EveryBatch),
        _ => match s.strip_prefix("interval:") {
            Some(ms) => ms
                .trim_end_matches("ms")
                .parse::<i64>()
                .map(|flush_ms| Durability::Interval { flush_ms, flush_messages: i64::MAX })
                .map_err(|e| format!("interval:{ms}: {e}")),
            None => Err(format!("unknown durability {s:?} (none, every-batch, interval:MS)")),
        },
    }
}

impl Setup {
    pub fn log_config(&self) -> LogConfig {
        LogConfig {
            segment_bytes: self.segment_bytes,
            index_interval_bytes: self.index_interval_bytes,
            preallocate: self.preallocate,
            ..LogConfig::default()
        }
    }

    /// Opens (or reopens) the engine on `dir` and every bench partition.
    pub fn open(&self, dir: &Path) -> seglog::Result<(Engine, Vec<TopicPartition>)> {
        let mut cfg = EngineConfig::new(dir);
        cfg.io_mode = self.mode;
        cfg.shards = Some(self.shards);
        cfg.durability = self.durability;
        cfg.zero_fill = self.zero_fill;
        cfg.sync_method = self.sync_method;
        cfg.log_config = self.log_config();
        let engine = Engine::open(cfg)?;
        let tps = partitions(self.partitions);
        for tp in &tps {
            engine.open_partition(tp, None).wait()?;
        }
        Ok((engine, tps))
    }
}

/// The bench's partitions: `bench-0`, `bench-1`, ...
pub fn partitions(n: usize) -> Vec<TopicPartition> {
    (0..n.max(1)).map(|i| TopicPartition::new("bench", i as i32)).collect()
}

/// A batch of `records` records whose total size is `bytes` (as close as the varints allow, and
/// exact for any size of at least 80 bytes per record), all with timestamp `ts`.
pub fn make_batch(bytes: usize, records: usize, ts: i64) -> Vec<u8> {
    let records = records.max(1);
    // Every record but the last gets `value_len` bytes; the last absorbs the remainder.
    let build = |value_len: usize, last_len: usize| {
        let mut b = BatchBuilder::new();
        let value = vec![0x5au8; value_len.max(last_len)];
        for i in 0..records {
            let len = if i + 1 == records { last_len } else { value_len };
            b.push(ts, None, Some(&value[..len]), &[]);
        }
        b.build().expect("bench batch")
    };
    let value_len = (bytes.saturating_sub(61) / records).saturating_sub(8).max(1);
    let mut last_len = value_len;
    let mut out = build(value_len, last_len);
    for _ in 0..16 {
        let diff = out.len() as i64 - bytes as i64;
        if diff == 0 {
            break;
        }
        let next = last_len as i64 - diff;
        if next < 0 {
            break;
        }
        // A varint length that changes size can overshoot by a byte: nudge and retry.
        last_len = if next as usize == last_len { last_len.saturating_sub(1) } else { next as usize };
        out = build(value_len, last_len);
    }
    out
}

/// Sets a batch's timestamps (base and max; records carry delta 0) and recomputes its CRC, as a
/// producer stamping a fresh batch does.
pub fn stamp(batch_bytes: &mut [u8], ts: i64) {
    batch_bytes[27..35].copy_from_slice(&ts.to_be_bytes());
    batch_bytes[35..43].copy_from_slice(&ts.to_be_bytes());
    let crc = batch::compute_crc(batch_bytes);
    batch_bytes[17..21].copy_from_slice(&crc.to_be_bytes());
}

/// The first timestamp of a bench run: far enough in the past that a run of millions of batches,
/// one millisecond apart, never reaches `message.timestamp.after.max.ms` (one hour ahead).
pub fn first_timestamp_ms() -> i64 {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64);
    now - 50_000_000
}

/// The shards' counters summed, with the process's resource usage, at one moment.
#[derive(Clone, Debug, Default)]
pub struct Counters {
    pub io_enters: u64,
    pub io_ops: u64,
    pub writes: u64,
    pub bytes_written: u64,
    pub bytes_read: u64,
    pub fsyncs: u64,
    pub tail_cache_hits: u64,
    pub fetches: u64,
    /// Bytes appended (batches taken by the shards), partition flushes started (one per
    /// partition write, with its sync when durable) and zero-fill refills started.
    pub appended_bytes: u64,
    pub flushes: u64,
    pub zero_fills: u64,
    /// Each shard's last choice of refills for a busy partition writing alone, where it made
    /// one (zero fill auto).
    pub busy_refills: Vec<BusyRefills>,
    /// The shards' write latencies (submission started to seen complete), merged.
    pub write_latency: seglog::LatencyHistogram,
    pub usage: Usage,
}

impl Counters {
    pub fn of(engine: &Engine) -> Counters {
        Counters::from_stats(&engine.stats().unwrap_or_default())
    }

    /// The counters of shard statistics already taken.
    pub fn from_stats(stats: &[ShardStats]) -> Counters {
        let sum = |f: fn(&ShardStats) -> u64| stats.iter().map(f).sum::<u64>();
        Counters {
            io_enters: sum(|s| s.io_enters),
            io_ops: sum(|s| s.io_ops),
            writes: sum(|s| s.writes),
            bytes_written: sum(|s| s.bytes_written),
            bytes_read: sum(|s| s.bytes_read),
            fsyncs: sum(|s| s.fsyncs),
            tail_cache_hits: sum(|s| s.tail_cache_hits),
            fetches: sum(|s| s.fetches),
            appended_bytes: sum(|s| s.appended_bytes),
            flushes: sum(|s| s.flushes),
            zero_fills: sum(|s| s.zero_fills),
            busy_refills: stats
                .iter()
                .filter_map(|s| {
                    s.busy_refills.map(|c| BusyRefills {
                        shard: s.shard,
                        refills: c.refills,
                        with_us_per_mib: c.with_us_per_mib,
                        without_us_per_mib: c.without_us_per_mib,
                        trials: c.trials,
                    })
                })
                .collect(),
            write_latency: stats.iter().fold(seglog::LatencyHistogram::new(), |mut h, s| {
                h.merge(&s.write_latency);
                h
            }),
            usage: Usage::now(),
        }
    }
    /// Counters since `earlier`.
    pub fn since(&self, earlier: &Counters) -> Counters {
        Counters {
            io_enters: self.io_enters.saturating_sub(earlier.io_enters),
            io_ops: self.io_ops.saturating_sub(earlier.io_ops),
            writes: self.writes.saturating_sub(earlier.writes),
            bytes_written: self.bytes_written.saturating_sub(earlier.bytes_written),
            bytes_read: self.bytes_read.saturating_sub(earlier.bytes_read),
            fsyncs: self.fsyncs.saturating_sub(earlier.fsyncs),
            tail_cache_hits: self.tail_cache_hits.saturating_sub(earlier.tail_cache_hits),
            fetches: self.fetches.saturating_sub(earlier.fetches),
            appended_bytes: self.appended_bytes.saturating_sub(earlier.appended_bytes),
            flushes: self.flushes.saturating_sub(earlier.flushes),
            zero_fills: self.zero_fills.saturating_sub(earlier.zero_fills),
            busy_refills: self.busy_refills.clone(),
            write_latency: self.write_latency.since(&earlier.write_latency),
            usage: self.usage.since(&earlier.usage),
        }
    }
}

/// A shard's choice of refills for a busy partition writing alone
/// ([`seglog::engine::BusyRefillChoice`]).
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct BusyRefills {
    pub shard: usize,
    pub refills: bool,
    /// Microseconds per MiB written with refills and without, in the last trial.
    pub with_us_per_mib: u64,
    pub without_us_per_mib: u64,
    pub trials: u64,
}

/// The disk's own figure for the same pattern, measured by fio in the same repetition.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct DiskRef {
    /// The fio job, e.g. "seq write O_DIRECT bs=16384 qd=1".
    pub job: String,
    pub mb_per_s: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
}

/// One run of one workload by one system.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct RunReport {
    /// produce, durable, tail, tail-in-shard, lag, seek, lookup-warm, time, mixed/..., recovery.
    pub workload: String,
    /// seglog, kafka-ref (page cache + mmap index, Kafka's design) or commitlog (the crate).
    pub system: String,
    pub mode_requested: String,
    /// The I/O mode really used.
    pub mode: String,
    /// The index memory really used (explicit / transparent huge pages, normal pages), or n/a.
    pub huge_pages: String,
    pub durability: String,
    pub batch_bytes: usize,
    /// Operations timed: batches appended, fetches, lookups.
    pub ops: u64,
    pub bytes: u64,
    pub records: u64,
    pub seconds: f64,
    pub mb_per_s: f64,
    pub records_per_s: f64,
    pub latency: Latency,
    /// io_uring_enter (or plain I/O system calls) and I/O operations per operation, over all shards.
    pub enters_per_op: f64,
    pub ios_per_op: f64,
    /// Bytes per write handed to the kernel (the block size fio is given), zero-fill writes
    /// (1 MiB each) included.
    pub avg_write_bytes: f64,
    /// Bytes appended per partition flush: the new data each partition write carried, zero
    /// fill left out (the block size of the durable sweep's fio jobs).
    pub bytes_per_flush: f64,
    /// Zero-fill refills started during the run.
    pub zero_fills: u64,
    /// Each shard's choice, at the run's end, of refills for a busy partition writing alone
    /// (zero fill auto; empty where no shard made one).
    pub busy_refills: Vec<BusyRefills>,
    pub fsyncs: u64,
    /// The engine's partition writes, from the start of their submission to seen complete (with
    /// the sync when durable), p50 and p99 in microseconds: the device's and kernel's part of
    /// `latency`. Zero when the run wrote nothing.
    pub write_p50_us: f64,
    pub write_p99_us: f64,
    pub tail_cache_hits: u64,
    pub minor_faults: u64,
    pub major_faults: u64,
    /// Process CPU (user + system, all threads) per GB moved.
    pub cpu_s_per_gb: f64,
    pub disk: Option<DiskRef>,
    /// A second disk reference: for durable runs, fio's write + fdatasync over a file written
    /// in full beforehand (the layout zero fill gives seglog's appends; `disk` keeps fio's
    /// default, a fallocated file).
    pub alt_disk: Option<DiskRef>,
    /// For durable runs: fio's O_DSYNC writes over a written file, the operation a durable
    /// append is (a write durable on completion), whole latency with submission.
    pub dsync_disk: Option<DiskRef>,
    /// Throughput over time, (seconds since start, MB/s) per 100 ms.
    pub timeline: Vec<(f64, f64)>,
    pub note: String,
    #[serde(skip)]
    pub hist: Hist,
}

impl RunReport {
    /// Fills the rate, latency, per-operation and usage fields from what a run measured.
    pub fn finish(mut self, hist: Hist, seconds: f64, delta: &Counters) -> RunReport {
        self.seconds = seconds;
        let s = seconds.max(1e-9);
        self.mb_per_s = self.bytes as f64 / s / 1e6;
        self.records_per_s = self.records as f64 / s;
        self.latency = hist.latency();
        self.hist = hist;
        let ops = self.ops.max(1) as f64;
        self.enters_per_op = delta.io_enters as f64 / ops;
        self.ios_per_op = delta.io_ops as f64 / ops;
        self.avg_write_bytes = if delta.writes > 0 { delta.bytes_written as f64 / delta.writes as f64 } else { 0.0 };
        self.bytes_per_flush = if delta.flushes > 0 { delta.appended_bytes as f64 / delta.flushes as f64 } else { 0.0 };
        self.zero_fills = delta.zero_fills;
        self.busy_refills = delta.busy_refills.clone();
        self.fsyncs = delta.fsyncs;
        let writes = Latency::from_engine(&delta.write_latency);
        (self.write_p50_us, self.write_p99_us) = (writes.p50_us, writes.p99_us);
        self.tail_cache_hits = delta.tail_cache_hits;
        self.minor_faults = delta.usage.minor_faults;
        self.major_faults = delta.usage.major_faults;
        self.cpu_s_per_gb = if self.bytes > 0 { delta.usage.cpu_s / (self.bytes as f64 / 1e9) } else { 0.0 };
        self
    }

    /// A report for `system` running `workload` with the engine's modes filled in.
    pub fn for_engine(workload: &str, setup: &Setup, engine: &Engine) -> RunReport {
        RunReport {
            workload: workload.into(),
            system: "seglog".into(),
            mode_requested: setup.mode.name().into(),
            mode: engine.io_mode().name().into(),
            huge_pages: huge_page_mode(engine),
            durability: durability_name(setup.durability),
            batch_bytes: setup.batch_bytes,
            ..RunReport::default()
        }
    }

    /// seglog's figure over the disk's (throughput ratio), when both are known.
    pub fn throughput_ratio(&self) -> Option<f64> {
        self.disk.as_ref().filter(|d| d.mb_per_s > 0.0).map(|d| self.mb_per_s / d.mb_per_s)
    }
}

/// What pages back the engine's index arena (first shard), as the engine reports it.
pub fn huge_page_mode(engine: &Engine) -> String {
    engine.index_memory().first().and_then(|r| r.arena.backing).map_or_else(|| "n/a".into(), |b| b.name().to_string())
}

/// Bytes completed per 100 ms since a start instant: a throughput timeline.
#[derive(Clone, Debug)]
pub struct Timeline {
    t0: Instant,
    buckets: Vec<u64>,
}

impl Timeline {
    pub const BUCKET_S: f64 = 0.1;
    pub fn new(t0: Instant) -> Timeline {
        Timeline { t0, buckets: Vec::new() }
    }
    pub fn add(&mut self, at: Instant, bytes: u64) {
        let i = (at.saturating_duration_since(self.t0).as_secs_f64() / Self::BUCKET_S) as usize;
        if self.buckets.len() <= i {
            self.buckets.resize(i + 1, 0);
        }
        self.buckets[i] += bytes;
    }
    /// (seconds, MB/s) per bucket.
    pub fn points(&self) -> Vec<(f64, f64)> {
        self.buckets
            .iter()
            .enumerate()
            .map(|(i, &b)| (i as f64 * Self::BUCKET_S, b as f64 / Self::BUCKET_S / 1e6))
            .collect()
    }
}

/// A small deterministic generator for random offsets and timestamps.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    /// Uniform in `[lo, hi)` (`lo` when empty).
    pub fn range(&mut self, lo: i64, hi: i64) -> i64 {
        if hi <= lo {
            lo
        } else {
            lo + (self.next_u64() % (hi - lo) as u64) as i64
        }
    }
}

/// The `.log` files under `dir` (recursively), for cache eviction and size checks.
pub fn log_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(dir) else { return out };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(log_files(&p));
        } else if p.extension().is_some_and(|x| x == "log") {
            out.push(p);
        }
    }
    out
}

/// Writes back and drops the page cache of every `.log` file under `dir` (fdatasync, then
/// `posix_fadvise(DONTNEED)`), so that the next read of them comes from the disk.
pub fn drop_cache(dir: &Path) {
    for p in log_files(dir) {
        if let Ok(f) = std::fs::File::open(&p) {
            let _ = f.sync_data();
            drop_clean_pages(&f);
        }
    }
}

/// Drops the clean page-cache pages of `f` (`posix_fadvise(DONTNEED)`; dirty pages stay).
pub fn drop_clean_pages(f: &std::fs::File) {
    use nix::fcntl::{posix_fadvise, PosixFadviseAdvice};
    let _ = posix_fadvise(f, 0, 0, PosixFadviseAdvice::POSIX_FADV_DONTNEED);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_have_the_asked_size_and_stamp_keeps_them_valid() {
        for (n, r) in [(16_384usize, 16usize), (16_384, 1), (4096, 4), (1024, 1), (65_536, 64)] {
            let mut b = make_batch(n, r, 1_000);
            assert_eq!(b.len(), n, "size {n} records {r}");
            let h = batch::validate_batch(&b, true).unwrap();
            assert_eq!(h.records_count as usize, r);
            stamp(&mut b, 123_456);
            let h = batch::validate_batch(&b, true).unwrap();
            assert_eq!((h.base_timestamp, h.max_timestamp), (123_456, 123_456));
        }
    }

    #[test]
    fn sync_method_names_round_trip() {
        for m in SyncMethod::ALL {
            assert_eq!(m.name().parse::<SyncMethod>().unwrap(), m);
        }
        assert_eq!("dsync".parse::<SyncMethod>().unwrap(), SyncMethod::DsyncWrites);
        assert!("fsync".parse::<SyncMethod>().is_err());
    }

    #[test]
    fn durability_names_round_trip() {
        for s in ["none", "every-batch", "interval:5ms"] {
            assert_eq!(durability_name(parse_durability(s).unwrap()), s);
        }
    }
}
