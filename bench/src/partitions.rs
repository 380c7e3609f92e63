//! The many-partitions sweep (`seglog bench --workloads partitions`, issue 17): one shard with
//! 1, 100, 1,000 and 10,000 partitions, appends from one producer with one append in flight per
//! partition (`uniform`) or the same number in flight spread over Zipf-drawn partitions (`zipf`:
//! a few hot, most quiet), each point on a fresh engine and right after it, in the same
//! repetition, fio's many-files job on the same disk: one file per partition, the batch size as
//! block size, one write in flight per file (queue depth = partitions), files taken in turn or
//! Zipf-drawn as seglog's partitions are, O_DIRECT in direct mode.
//!
//! Each point also reports what a partition costs: the seconds to create the partitions, to open
//! them again after the clean shutdown at the end, and to give each its first append (a leader epoch and a segment's first bytes, which the measured
//! appends then no longer pay, made durable with `Engine::flush_all`), and the process's
//! resident memory once every partition holds one small batch and is idle, less the
//! write-buffer pool (bounded by the shard's write-buffer budget, the tail cache's within it),
//! per partition. The proof (at 10,000
//! partitions): throughput >= 0.8x fio's, p99 <= 10x fio's, idle memory <= 64 KiB per partition.
//! fio's p99 at a queue depth of one write per file already holds the queueing that depth
//! implies (each write waits for the partitions' writes ahead of it), as seglog's does: no term
//! is added for it.
//!
//! Segments are not preallocated here (Kafka's default): ten thousand preallocated segments
//! would reserve ten thousand times `segment.bytes`.

use std::path::Path;
use std::time::Instant;

use seglog::{Durability, Engine};

use crate::cli::num;
use crate::fio::FioResult;
use crate::pct::median;
use crate::workload::produce::{self, Pick, ProduceParams, Zipf};
use crate::workload::{make_batch, partitions, RunReport, Setup};

/// The workload's name in `--workloads` (it runs only when named there).
pub const WORKLOAD: &str = "partitions";

/// The proof, at [`PROOF_PARTITIONS`]: at least this share of fio's throughput...
pub const MIN_THROUGHPUT_RATIO: f64 = 0.8;
/// ...at most this multiple of fio's p99...
pub const MAX_P99_RATIO: f64 = 10.0;
/// ...and at most this many bytes of memory per idle partition beyond the budgets.
pub const MAX_IDLE_BYTES: f64 = 64.0 * 1024.0;
pub const PROOF_PARTITIONS: usize = 10_000;

/// The size of each partition's first batch, appended before the measured ones. Not a multiple
/// of the 4 KiB block: every later batch then starts and ends inside a block, as a producer's
/// batches do.
pub const FIRST_BATCH_BYTES: usize = 128;
/// The block an O_DIRECT write of a partition starts and ends on.
const BLOCK_BYTES: u64 = 4096;
const _: () = assert!(!(FIRST_BATCH_BYTES as u64).is_multiple_of(BLOCK_BYTES));

/// How appends spread over the partitions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Skew {
    /// One append in flight per partition.
    Uniform,
    /// As many in flight, each to a partition drawn from a Zipf distribution.
    Zipf,
}

impl Skew {
    pub fn name(self) -> &'static str {
        match self {
            Skew::Uniform => "uniform",
            Skew::Zipf => "zipf",
        }
    }
}

/// What the sweep runs (from `seglog bench`'s `--partitions-sweep-*` flags).
#[derive(Clone, Debug, serde::Serialize)]
pub struct PartitionsPlan {
    pub partitions: Vec<usize>,
    pub skews: Vec<Skew>,
    /// The Zipf exponent (fio's default for its zipf distributions, 1.1, by default).
    pub zipf_s: f64,
    /// Bytes appended per point (fio writes what seglog appended).
    pub bytes: u64,
    /// A point's appends stop after this long even short of `bytes` (0 = no limit).
    pub max_seconds: f64,
}

impl PartitionsPlan {
    pub fn default_plan() -> PartitionsPlan {
        PartitionsPlan {
            partitions: vec![1, 100, 1000, 10_000],
            skews: vec![Skew::Uniform, Skew::Zipf],
            zipf_s: 1.1,
            bytes: 1 << 30,
            max_seconds: 30.0,
        }
    }

    /// The points, in the order they run. Skew means nothing with one partition.
    pub fn points(&self) -> Vec<PointKey> {
        let mut v = Vec::new();
        for &partitions in &self.partitions {
            for &skew in &self.skews {
                if partitions == 1 && skew == Skew::Zipf {
                    continue;
                }
                v.push(PointKey { partitions: partitions.max(1), skew });
            }
        }
        v
    }
}

#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct PointKey {
    pub partitions: usize,
    pub skew: Skew,
}

/// seglog's side of one point.
#[derive(Clone, Debug, serde::Serialize)]
pub struct SeglogSide {
    pub report: RunReport,
    /// Creating the partitions (every open sent at once, then waited for).
    pub open_s: f64,
    /// Giving each partition its first append, then `Engine::flush_all` (the appends and the
    /// leader-epoch checkpoints they started made durable).
    pub first_appends_s: f64,
    /// Resident memory (bytes) before the engine opened, and with every partition idle after
    /// its first append.
    pub rss_before: u64,
    pub rss_idle: u64,
    /// The write-buffer pool's chunks then (the most ever in use at once, all of them kept), in
    /// bytes: within the write-buffer budget.
    pub budgeted_bytes: u64,
    /// (rss_idle - rss_before - budgeted_bytes) / partitions.
    pub idle_bytes_per_partition: f64,
    /// Resident memory after the measured appends.
    pub rss_after: u64,
    /// Opening the engine again after its clean shutdown, and every partition (opens sent
    /// together).
    pub reopen_s: f64,
}

/// The process's resident memory in bytes (from /proc/self/statm), 0 where unreadable.
pub fn resident_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1).and_then(|v| v.parse::<u64>().ok()))
        .map_or(0, |pages| pages * 4096)
}

/// seglog's side of one point: a fresh engine on a new directory under `base` with
/// `key.partitions` partitions on one shard (no preallocation), a first small append to each,
/// the idle memory, then the measured appends; a clean shutdown; the directory is removed.
pub fn run_seglog(
    base: &Path,
    setup: &Setup,
    key: &PointKey,
    plan: &PartitionsPlan,
    pin_client: bool,
) -> Result<SeglogSide, Box<dyn std::error::Error>> {
    let setup = Setup {
        shards: 1,
        partitions: key.partitions,
        durability: Durability::None,
        preallocate: false,
        ..setup.clone()
    };
    let dir = tempfile::tempdir_in(base)?;
    let rss_before = resident_bytes();
    let config = || {
        let mut cfg = seglog::EngineConfig::new(dir.path());
        cfg.io_mode = setup.mode;
        cfg.shards = Some(1);
        cfg.durability = setup.durability;
        cfg.zero_fill = setup.zero_fill;
        cfg.sync_method = setup.sync_method;
        cfg.log_config = setup.log_config();
        cfg
    };
    let engine = Engine::open(config())?;
    let tps = partitions(key.partitions);
    let open_all = |engine: &Engine| -> seglog::Result<f64> {
        let t = Instant::now();
        let opens: Vec<_> = tps.iter().map(|tp| engine.open_partition(tp, None)).collect();
        for o in opens {
            o.wait()?;
        }
        Ok(t.elapsed().as_secs_f64())
    };
    let open_s = open_all(&engine)?;
    // A small first batch: what an idle partition holds is then the engine's, not the
    // producer's freed batches kept by the allocator.
    let small = make_batch(FIRST_BATCH_BYTES, 1, crate::workload::first_timestamp_ms());
    let t = Instant::now();
    let firsts: Vec<_> = tps.iter().map(|tp| engine.append(tp, small.clone(), 0)).collect();
    for f in firsts {
        f.wait()?;
    }
    // Durable, with the leader-epoch checkpoints the first appends started written: the
    // measured appends then do not share the disk with that one-time work.
    engine.flush_all()?;
    let first_appends_s = t.elapsed().as_secs_f64();
    let rss_idle = resident_bytes();
    // The write-buffer pool keeps the chunks it ever handed out (reused, never unmapped): the
    // most in use at once, which the write-buffer budget bounds.
    let chunks: u64 = engine.stats()?.iter().map(|s| s.write_buffers.peak_chunks).sum();
    let budgeted_bytes = chunks * seglog::io::pool::CHUNK_BYTES as u64;
    let idle_bytes_per_partition =
        rss_idle.saturating_sub(rss_before).saturating_sub(budgeted_bytes) as f64 / key.partitions as f64;
    let pp = ProduceParams { total_bytes: plan.bytes, window: 1, rate: 0.0, max_seconds: plan.max_seconds, pin_client };
    let pick = match key.skew {
        Skew::Uniform => Pick::EachPartition,
        Skew::Zipf => Pick::Skewed(Zipf::new(key.partitions, plan.zipf_s, 0x5eed)),
    };
    let mut report = produce::run_slots(&engine, &tps, &setup, &pp, pick, WORKLOAD)?;
    report.note = format!("{}; {}", report.note, key.skew.name());
    let rss_after = resident_bytes();
    engine.shutdown()?;
    // Opened again after the clean shutdown: the engine, then every partition.
    let t = Instant::now();
    let engine = Engine::open(config())?;
    let reopen_s = t.elapsed().as_secs_f64() + open_all(&engine)?;
    engine.shutdown()?;
    drop(dir);
    Ok(SeglogSide {
        report,
        open_s,
        first_appends_s,
        rss_before,
        rss_idle,
        budgeted_bytes,
        idle_bytes_per_partition,
        rss_after,
        reopen_s,
    })
}

/// fio's many-files job beside a point: `files` files in a directory of their own, `bs`-byte
/// sequential writes into each (new files, nothing reserved: seglog's segments without
/// preallocation), `files` writes in flight, files taken in turn or Zipf-drawn.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct ManyFilesWrite {
    pub files: usize,
    pub bs: u64,
    /// Bytes written over all files.
    pub bytes: u64,
    pub direct: bool,
    /// The Zipf exponent when files are Zipf-drawn.
    pub zipf: Option<f64>,
    /// Bytes each write of a file rewrites of the one before it (0: none): each write starts
    /// this far before the end of the last (`--rw=write:-N`).
    pub overlap_bytes: u64,
}

impl ManyFilesWrite {
    /// The job beside seglog's run `r` at `key`: what it appended, at its batch size.
    pub fn beside(r: &RunReport, key: &PointKey, plan: &PartitionsPlan) -> ManyFilesWrite {
        let bs = ((r.batch_bytes as u64).div_ceil(BLOCK_BYTES)).max(1) * BLOCK_BYTES;
        ManyFilesWrite {
            files: key.partitions,
            bs,
            bytes: (r.bytes / bs).max(key.partitions as u64) * bs,
            direct: r.mode == seglog::IoMode::Direct.name(),
            zipf: (key.skew == Skew::Zipf).then_some(plan.zipf_s),
            overlap_bytes: 0,
        }
    }

    /// The same appends written as seglog's O_DIRECT writes were in run `r` at one append in
    /// flight per partition, when every one of them has the same shape: batches of whole blocks
    /// after a first batch that is not, so each write of a batch also rewrites the block the
    /// last one ended in (five blocks for four of data at 16 KiB). As many writes per file, each
    /// a block longer and starting a block before the end of the last. Not where a partition
    /// rolled (a new segment starts on a block, its writes rewrite nothing) or zero fill wrote
    /// ahead (writes fio does not make). Its MB/s counts the device's bytes;
    /// [`ManyFilesWrite::useful_share`] turns them into appended bytes.
    pub fn same_pattern(&self, r: &RunReport, segment_bytes: u64) -> Option<ManyFilesWrite> {
        let per_file = self.bytes / self.files.max(1) as u64;
        let no_roll = FIRST_BATCH_BYTES as u64 + per_file <= segment_bytes;
        let shaped = self.bs == r.batch_bytes as u64 && r.zero_fills == 0 && no_roll;
        (self.direct && self.zipf.is_none() && shaped).then(|| ManyFilesWrite {
            bs: self.bs + BLOCK_BYTES,
            bytes: self.bytes / self.bs * (self.bs + BLOCK_BYTES),
            overlap_bytes: BLOCK_BYTES,
            ..self.clone()
        })
    }

    /// The share of the job's bytes that are new data (all of them without overlap).
    pub fn useful_share(&self) -> f64 {
        (self.bs - self.overlap_bytes) as f64 / self.bs as f64
    }

    /// fio's arguments with the files in `dir`. Each file may take every byte (a Zipf-drawn
    /// hot file takes far more than its share; fio stops at `io_size`).
    pub fn args(&self, dir: &Path) -> Vec<String> {
        let files = self.files.max(1) as u64;
        let per_file = match self.zipf {
            Some(_) => self.bytes,
            // Each write advances the file by bs - overlap; the last one ends overlap further.
            None => (self.bytes / files).max(self.bs) / self.bs * (self.bs - self.overlap_bytes) + self.overlap_bytes,
        };
        vec![
            "--name=many-files".to_string(),
            format!("--directory={}", dir.display()),
            format!("--nrfiles={files}"),
            format!("--filesize={per_file}"),
            format!("--io_size={}", self.bytes),
            match self.overlap_bytes {
                0 => "--rw=write".into(),
                n => format!("--rw=write:-{n}"),
            },
            format!("--bs={}", self.bs),
            format!("--iodepth={files}"),
            format!("--direct={}", self.direct as u8),
            match self.zipf {
                Some(s) => format!("--file_service_type=zipf:{s}"),
                None => "--file_service_type=roundrobin".into(),
            },
            "--fallocate=none".into(),
            "--ioengine=io_uring".into(),
            "--lat_percentiles=1".into(),
            "--output-format=json".into(),
        ]
    }

    pub fn describe(&self) -> String {
        format!(
            "{} files, bs={}{}, qd={}, {}, {}",
            self.files,
            self.bs,
            if self.overlap_bytes > 0 { format!(" overlapping by {}", self.overlap_bytes) } else { String::new() },
            self.files,
            if self.direct { "O_DIRECT" } else { "buffered" },
            self.zipf.map_or("round-robin".into(), |s| format!("zipf:{s}"))
        )
    }

    /// Runs the job in a new directory under `base`, removed after.
    pub fn run(&self, base: &Path) -> Result<FioResult, String> {
        let dir = tempfile::tempdir_in(base).map_err(|e| format!("fio directory in {}: {e}", base.display()))?;
        crate::fio::run(&self.args(dir.path()))
    }
}

/// One repetition of one point: both sides.
#[derive(Clone, Debug, serde::Serialize)]
pub struct PartitionsRun {
    pub rep: usize,
    pub key: PointKey,
    pub seglog: SeglogSide,
    pub fio_job: Option<String>,
    pub fio: Option<FioResult>,
    /// fio's job with seglog's write pattern ([`ManyFilesWrite::same_pattern`]), where there is
    /// one: its result, its MB/s already turned into appended bytes.
    pub fio_same: Option<FioResult>,
}

/// One point over its repetitions (medians).
#[derive(Clone, Debug, serde::Serialize)]
pub struct PartitionsPoint {
    pub key: PointKey,
    pub reps: usize,
    pub open_s: f64,
    pub first_appends_s: f64,
    pub reopen_s: f64,
    pub mb_per_s: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub ios_per_op: f64,
    pub rss_after_mb: f64,
    /// The write-buffer pool when idle (`SeglogSide::budgeted_bytes`), MB.
    pub pool_mb: f64,
    pub idle_kib_per_partition: f64,
    pub fio_job: String,
    pub fio_mb_per_s: f64,
    pub fio_p99_us: f64,
    pub throughput_ratio: Option<f64>,
    pub p99_ratio: Option<f64>,
    /// fio with seglog's write pattern, in appended bytes ([`PartitionsRun::fio_same`]).
    pub fio_same_mb_per_s: Option<f64>,
    pub same_throughput_ratio: Option<f64>,
    /// At [`PROOF_PARTITIONS`] with fio's figures: the three bounds met.
    pub proof_met: Option<bool>,
}

pub fn summarize(runs: &[PartitionsRun]) -> Vec<PartitionsPoint> {
    let mut keys: Vec<&PointKey> = Vec::new();
    for r in runs {
        if !keys.contains(&&r.key) {
            keys.push(&r.key);
        }
    }
    keys.into_iter()
        .map(|key| {
            let g: Vec<&PartitionsRun> = runs.iter().filter(|r| &r.key == key).collect();
            let m = |f: &dyn Fn(&PartitionsRun) -> f64| median(&g.iter().map(|r| f(r)).collect::<Vec<_>>());
            let some = |f: &dyn Fn(&PartitionsRun) -> Option<f64>| {
                let v: Vec<f64> = g.iter().filter_map(|r| f(r)).collect();
                (!v.is_empty()).then(|| median(&v))
            };
            let fio_mb = some(&|r| r.fio.map(|f| f.mb_per_s));
            let fio_p99 = some(&|r| r.fio.map(|f| f.lat_p99_us));
            let throughput_ratio =
                some(&|r| r.fio.filter(|f| f.mb_per_s > 0.0).map(|f| r.seglog.report.mb_per_s / f.mb_per_s));
            let p99_ratio =
                some(&|r| r.fio.filter(|f| f.lat_p99_us > 0.0).map(|f| r.seglog.report.latency.p99_us / f.lat_p99_us));
            let fio_same_mb = some(&|r| r.fio_same.map(|f| f.mb_per_s));
            let same_throughput_ratio =
                some(&|r| r.fio_same.filter(|f| f.mb_per_s > 0.0).map(|f| r.seglog.report.mb_per_s / f.mb_per_s));
            let idle = m(&|r| r.seglog.idle_bytes_per_partition);
            let proof_met = match (throughput_ratio, p99_ratio) {
                (Some(t), Some(p)) if key.partitions == PROOF_PARTITIONS => {
                    Some(t >= MIN_THROUGHPUT_RATIO && p <= MAX_P99_RATIO && idle <= MAX_IDLE_BYTES)
                }
                _ => None,
            };
            PartitionsPoint {
                key: key.clone(),
                reps: g.len(),
                open_s: m(&|r| r.seglog.open_s),
                first_appends_s: m(&|r| r.seglog.first_appends_s),
                reopen_s: m(&|r| r.seglog.reopen_s),
                mb_per_s: m(&|r| r.seglog.report.mb_per_s),
                p50_us: m(&|r| r.seglog.report.latency.p50_us),
                p99_us: m(&|r| r.seglog.report.latency.p99_us),
                p999_us: m(&|r| r.seglog.report.latency.p999_us),
                ios_per_op: m(&|r| r.seglog.report.ios_per_op),
                rss_after_mb: m(&|r| r.seglog.rss_after as f64 / 1e6),
                pool_mb: m(&|r| r.seglog.budgeted_bytes as f64 / 1e6),
                idle_kib_per_partition: idle / 1024.0,
                fio_job: g.iter().find_map(|r| r.fio_job.clone()).unwrap_or_default(),
                fio_mb_per_s: fio_mb.unwrap_or(0.0),
                fio_p99_us: fio_p99.unwrap_or(0.0),
                throughput_ratio,
                p99_ratio,
                fio_same_mb_per_s: fio_same_mb,
                same_throughput_ratio,
                proof_met,
            }
        })
        .collect()
}

fn ratio(r: Option<f64>) -> String {
    r.map_or("-".into(), |r| format!("{r:.2}x"))
}

/// The sweep's table and the proof lines (empty when the sweep did not run).
pub fn render(points: &[PartitionsPoint], plan: &PartitionsPlan, setup: &Setup) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    if points.is_empty() {
        return s;
    }
    let reps = points.iter().map(|p| p.reps).max().unwrap_or(0);
    let _ = writeln!(
        s,
        "\npartitions sweep (one shard, {} B batches, one append in flight per partition, zipf s = {}, up to {} MiB or {} s per point, no preallocation; medians of {} rep(s)):",
        setup.batch_bytes,
        plan.zipf_s,
        plan.bytes >> 20,
        plan.max_seconds,
        reps
    );
    let _ = writeln!(
        s,
        "  fio beside each point: one file per partition, bs = batch, qd = partitions, new files; same: fio again with seglog's O_DIRECT writes at one append in flight (each a block longer, rewriting the block the last one ended in), in appended MB/s, at the uniform points; open/first/reopen: seconds to create the partitions, to give each its first append and flush_all, and to open the engine and every partition again after the clean shutdown; pool: the write-buffer pool (within its budget); idle: resident memory per idle partition beyond the pool"
    );
    let _ = writeln!(
        s,
        "  {:>6} {:<7} | {:>6} {:>6} {:>6} | {:>7} {:>9} {:>9} {:>9} {:>5} | {:>7} {:>9} | {:>6} {:>6} | {:>9} {:>6} | {:>7} {:>7} {:>8}",
        "parts",
        "skew",
        "open s",
        "first",
        "reopen",
        "MB/s",
        "p50 us",
        "p99 us",
        "p99.9 us",
        "io/op",
        "fio MB/s",
        "fio p99",
        "MB/s x",
        "p99 x",
        "same MB/s",
        "same x",
        "RSS MB",
        "pool MB",
        "idle KiB"
    );
    for p in points {
        let _ = writeln!(
            s,
            "  {:>6} {:<7} | {:>6.2} {:>6.2} {:>6.2} | {:>7} {:>9} {:>9} {:>9} {:>5.2} | {:>7} {:>9} | {:>6} {:>6} | {:>9} {:>6} | {:>7} {:>7} {:>8.1}",
            p.key.partitions,
            p.key.skew.name(),
            p.open_s,
            p.first_appends_s,
            p.reopen_s,
            num(p.mb_per_s),
            num(p.p50_us),
            num(p.p99_us),
            num(p.p999_us),
            p.ios_per_op,
            num(p.fio_mb_per_s),
            num(p.fio_p99_us),
            ratio(p.throughput_ratio),
            ratio(p.p99_ratio),
            p.fio_same_mb_per_s.map_or("-".into(), num),
            ratio(p.same_throughput_ratio),
            num(p.rss_after_mb),
            num(p.pool_mb),
            p.idle_kib_per_partition
        );
    }
    let proof: Vec<&PartitionsPoint> = points.iter().filter(|p| p.proof_met.is_some()).collect();
    if !proof.is_empty() {
        let _ = writeln!(
            s,
            "\n  issue 17 proof at {PROOF_PARTITIONS} partitions: throughput >= {MIN_THROUGHPUT_RATIO}x and p99 <= {MAX_P99_RATIO}x fio's, idle memory <= {} KiB per partition",
            MAX_IDLE_BYTES / 1024.0
        );
        for p in proof {
            let _ = writeln!(
                s,
                "  [{:<6}] {}: throughput {}, p99 {} ({} vs {} us), idle {:.1} KiB",
                if p.proof_met == Some(true) { "MET" } else { "MISSED" },
                p.key.skew.name(),
                ratio(p.throughput_ratio),
                ratio(p.p99_ratio),
                num(p.p99_us),
                num(p.fio_p99_us),
                p.idle_kib_per_partition
            );
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// fio's job names the files by count in a directory, one write in flight per file, and the
    /// skew's file choice.
    #[test]
    fn the_many_files_job_has_one_write_in_flight_per_file() {
        let job =
            ManyFilesWrite { files: 1000, bs: 16_384, bytes: 1 << 30, direct: true, zipf: None, overlap_bytes: 0 };
        let args = job.args(Path::new("/d"));
        for want in [
            "--directory=/d",
            "--nrfiles=1000",
            "--iodepth=1000",
            "--filesize=1064960",
            "--io_size=1073741824",
            "--file_service_type=roundrobin",
            "--fallocate=none",
            "--direct=1",
        ] {
            assert!(args.iter().any(|a| a == want), "no {want} in {args:?}");
        }
        let zipf = ManyFilesWrite { zipf: Some(1.1), ..job };
        let args = zipf.args(Path::new("/d"));
        assert!(args.iter().any(|a| a == "--file_service_type=zipf:1.1"), "{args:?}");
        assert!(args.iter().any(|a| a == "--filesize=1073741824"), "{args:?}");
    }

    /// seglog's writes at one append in flight: as many writes per file, each a block longer
    /// and starting a block before the end of the last, so the file ends where seglog's `.log`
    /// data does; only where every write has that shape.
    #[test]
    fn the_same_pattern_job_rewrites_a_block_per_write() {
        let job = ManyFilesWrite {
            files: 1000,
            bs: 16_384,
            bytes: 1000 * 64 * 16_384,
            direct: true,
            zipf: None,
            overlap_bytes: 0,
        };
        let run = RunReport { batch_bytes: 16_384, ..RunReport::default() };
        let segment = 32 << 20;
        let same = job.same_pattern(&run, segment).unwrap();
        assert_eq!((same.bs, same.overlap_bytes, same.bytes), (20_480, 4096, 1000 * 64 * 20_480));
        assert!((same.useful_share() - 0.8).abs() < 1e-9);
        let args = same.args(Path::new("/d"));
        for want in ["--rw=write:-4096", "--bs=20480", "--iodepth=1000", &format!("--filesize={}", 64 * 16_384 + 4096)]
        {
            assert!(args.iter().any(|a| a == want), "no {want} in {args:?}");
        }
        let odd = RunReport { batch_bytes: 16_000, ..run.clone() };
        assert!(job.same_pattern(&odd, segment).is_none(), "batches that are not whole blocks vary in shape");
        let zero_filled = RunReport { zero_fills: 3, ..run.clone() };
        assert!(job.same_pattern(&zero_filled, segment).is_none(), "zero fill writes what fio does not");
        assert!(job.same_pattern(&run, 64 * 16_384).is_none(), "a rolled segment starts on a block");
        assert!(ManyFilesWrite { direct: false, ..job.clone() }.same_pattern(&run, segment).is_none(), "page cache");
        assert!(
            ManyFilesWrite { zipf: Some(1.1), ..job }.same_pattern(&run, segment).is_none(),
            "several appends a write"
        );
    }

    /// The points: skew only where there is more than one partition.
    #[test]
    fn one_partition_has_no_skewed_point() {
        let plan = PartitionsPlan { partitions: vec![1, 100], ..PartitionsPlan::default_plan() };
        let keys: Vec<(usize, Skew)> = plan.points().iter().map(|k| (k.partitions, k.skew)).collect();
        assert_eq!(keys, vec![(1, Skew::Uniform), (100, Skew::Uniform), (100, Skew::Zipf)]);
    }

    /// A Zipf draw favours the first ranks as 1/k^s says and stays in range.
    #[test]
    fn zipf_draws_follow_the_distribution() {
        let mut z = Zipf::new(100, 1.0, 42);
        let mut counts = [0u32; 100];
        for _ in 0..200_000 {
            counts[z.sample()] += 1;
        }
        // P(0) = 1 / H(100) = 0.193; P(1) = half of it.
        let p0 = counts[0] as f64 / 200_000.0;
        assert!((p0 - 0.193).abs() < 0.01, "{p0}");
        let r = counts[0] as f64 / counts[1] as f64;
        assert!((r - 2.0).abs() < 0.15, "{r}");
        assert!(counts[99] > 0);
    }
}
