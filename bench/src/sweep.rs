//! The durable-append sweep (`seglog bench --workloads durable-sweep`, issue 16): durable appends
//! (`Durability::EveryBatch`) at every combination of partitions and appends in flight per
//! partition, for each zero-fill setting and sync method, in each I/O mode of the run; each point
//! on a fresh engine, and after it, in the same repetition, fio's equivalent job on the same
//! disk: one file per partition written by one job through one io_uring (as one shard writes its
//! partitions), at the bytes each of seglog's partition writes carried, at the same total queue
//! depth (partitions x in flight), O_DIRECT in direct mode and through the page cache otherwise,
//! with O_DSYNC writes for the `dsync-writes` method and write + fdatasync for `fdatasync`. Per
//! point: seglog's and fio's MB/s, p50, p99 and p99.9, and their ratios; and the proof for
//! the points in direct mode with the engine's default zero fill and sync method (throughput
//! >= 0.95x and p99 <= 1.5x fio's).
//!
//! Each side runs the point once unmeasured right before its measured run
//! ([`SweepPlan::warmup`], `--sweep-warmup`, on by default; fio's job over written blocks has
//! none), so that each is measured on the disk as its own files left it, as a broker's appends
//! follow its own retention's deletions. Measured on this machine kind at 64 partitions x 1 in
//! flight: the engine's run right after fio's job deleted its 64 files made 330-444 MB/s with a
//! p99 of 27-47 ms (its writes' p99 20-29 ms), with zero fill on or off and after a 20 s pause
//! too; its next run, right after its own files were deleted, 621-702 MB/s with 2.7-2.8 ms;
//! fio's job made 768-847 MB/s with 2.5-4.1 ms whichever side ran before it. Running fio first
//! in every other repetition, tried before the warm-up, changed nothing: the engine then
//! followed that fio job (docs/benchmarks.md, "Each side measured after its own deletions").
//!
//! Owns the sweep's points, its two sides and its summary, table and charts; the driver
//! ([`crate::cli`]) runs the points in order and settles the disk before each side. Must not
//! print (the driver does) or leave files outside the directory it is given.

use std::path::Path;

use seglog::{Durability, Engine, IoMode, SyncMethod, ZeroFill};

use crate::cli::num;
use crate::fio::{FilesWrite, FioLayout, FioResult, FioSync};
use crate::pct::median;
use crate::plot;
use crate::workload::produce::{self, ProduceParams};
use crate::workload::{RunReport, Setup};

/// The workload's name in `--workloads` (it runs only when named there).
pub const WORKLOAD: &str = "durable-sweep";

/// The proof: at least this share of fio's throughput...
pub const MIN_THROUGHPUT_RATIO: f64 = 0.95;
/// ...and at most this multiple of fio's p99.
pub const MAX_P99_RATIO: f64 = 1.5;

/// The layout of fio's files.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayoutChoice {
    /// New files, as a log's new segments start: fallocated with `preallocate`, else given
    /// their length first in direct mode (the engine keeps a direct-mode `.log`'s length ahead
    /// of its data) and extended by each write through the page cache (the default, and the
    /// proof's yardstick). Zero fill is work seglog does on the measured path to turn its writes
    /// into overwrites; fio's files get no such work done for them beforehand. At points with zero fill on, fio also runs over blocks
    /// written beforehand, the disk's ceiling for writes that change no metadata (the table's
    /// `written` columns).
    Fresh,
    /// The layout seglog's appends meet at that point: blocks written beforehand when zero fill
    /// is on, else fallocated space with `preallocate`, else as `Fresh` (a length set first in
    /// direct mode, writes that extend the file through the page cache).
    Match,
    /// The same layout at every point.
    Fixed(FioLayout),
}

impl std::str::FromStr for LayoutChoice {
    type Err = String;
    fn from_str(s: &str) -> Result<LayoutChoice, String> {
        match s {
            "fresh" => Ok(LayoutChoice::Fresh),
            "match" => Ok(LayoutChoice::Match),
            other => other.parse().map(LayoutChoice::Fixed).map_err(|e| format!("{e}, fresh or match")),
        }
    }
}

impl std::fmt::Display for LayoutChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LayoutChoice::Fresh => f.write_str("fresh"),
            LayoutChoice::Match => f.write_str("match"),
            LayoutChoice::Fixed(l) => f.write_str(l.name()),
        }
    }
}

/// fio's queue depth at a point.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum FioDepth {
    /// As many writes in flight as seglog has appends in flight: partitions x in flight. fio's
    /// writes are as large as seglog's partition writes, which each carry several appends when
    /// more than one is in flight, so fio has several times the bytes in flight that seglog's
    /// producer offers it (a heavier load, with its higher throughput and latency).
    Appends,
    /// As many bytes in flight as seglog's appends (the default): per file, in flight x batch
    /// bytes / fio's block size writes (at least one), as in the issue's own fio figure (8
    /// files, 64 KiB writes, 2 in flight each, against 8 partitions x 8 appends of 16 KiB).
    /// The same offered load on both sides, so that throughputs and latencies compare.
    Bytes,
}

impl FioDepth {
    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            FioDepth::Appends => "appends",
            FioDepth::Bytes => "bytes",
        }
    }
}

/// What the sweep runs (from `seglog bench`'s `--sweep-*` flags).
#[derive(Clone, Debug, serde::Serialize)]
pub struct SweepPlan {
    /// Partitions of one shard (default 1, 8, 64).
    pub partitions: Vec<usize>,
    /// Appends in flight per partition (default 1, 8).
    pub in_flight: Vec<usize>,
    /// Zero-fill settings (default auto, off). Settings that give the same lead in a mode (all
    /// of them in buffered and sync mode, where zero fill is off) run once there.
    #[serde(serialize_with = "ser_each")]
    pub zero_fill: Vec<ZeroFill>,
    /// Sync methods (default dsync-writes, fdatasync).
    #[serde(serialize_with = "ser_sync_methods")]
    pub sync_methods: Vec<SyncMethod>,
    /// `preallocate` settings of the partitions' segments (default false, true: Kafka's
    /// default first).
    pub preallocate: Vec<bool>,
    /// Bytes appended per point (fio writes what seglog appended), at least
    /// [`SweepPlan::min_windows`] windows.
    pub bytes: u64,
    /// Each point appends at least this many times its appends in flight (partitions x in
    /// flight; 0 for no floor): at 64 partitions x 8 in flight, 256 MiB took 0.3 s, and the
    /// p99 was that of the pipeline's start (the first windows' appends wait for the first
    /// writes of new files, the first 100 ms ran at half the rate), not of the appends.
    pub min_windows: u64,
    /// A point's seglog side stops appending after this long, even short of `bytes` (0 = no
    /// limit).
    pub max_seconds: f64,
    #[serde(serialize_with = "ser_name")]
    pub fio_layout: LayoutChoice,
    #[serde(serialize_with = "ser_depth")]
    pub fio_depth: FioDepth,
    /// Each side runs the point once unmeasured right before its measured run, so that each is
    /// measured on the disk as its own files left it (see the module docs).
    pub warmup: bool,
}

fn ser_depth<S: serde::Serializer>(d: &FioDepth, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(d.name())
}

fn ser_name<S: serde::Serializer, T: std::fmt::Display>(v: &T, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&v.to_string())
}

fn ser_each<S: serde::Serializer, T: std::fmt::Display>(v: &[T], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(v.iter().map(|x| x.to_string()))
}

fn ser_sync_methods<S: serde::Serializer>(v: &[SyncMethod], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(v.iter().map(|m| m.name()))
}

/// A list shown as `a,b,c`.
struct Joined<'a, T>(&'a [T]);

impl<T: std::fmt::Display> std::fmt::Display for Joined<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, x) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{x}")?;
        }
        Ok(())
    }
}

/// [`SweepPlan::min_windows`] by default: the first two windows are then half a per cent of a
/// point's appends, below its p99.
pub const DEFAULT_MIN_WINDOWS: u64 = 400;

impl SweepPlan {
    /// The bytes a point of `partitions` x `in_flight` appends of `batch_bytes` each appends:
    /// [`SweepPlan::bytes`], or [`SweepPlan::min_windows`] windows when that is more.
    pub fn point_bytes(&self, partitions: usize, in_flight: usize, batch_bytes: usize) -> u64 {
        let window = (partitions * in_flight * batch_bytes) as u64;
        self.bytes.max(self.min_windows.saturating_mul(window))
    }

    /// The default sweep: partitions {1, 8, 64} x in flight {1, 8}, zero fill auto and off,
    /// both sync methods, 256 MiB per point (or 400 windows when more), at most 10 s of appends per point, fio on fresh
    /// files.
    pub fn default_plan() -> SweepPlan {
        SweepPlan {
            partitions: vec![1, 8, 64],
            in_flight: vec![1, 8],
            zero_fill: vec![ZeroFill::Auto, ZeroFill::Off],
            sync_methods: vec![SyncMethod::DsyncWrites, SyncMethod::Fdatasync],
            preallocate: vec![false, true],
            bytes: 256 << 20,
            min_windows: DEFAULT_MIN_WINDOWS,
            max_seconds: 10.0,
            fio_layout: LayoutChoice::Fresh,
            fio_depth: FioDepth::Bytes,
            warmup: true,
        }
    }

    /// The points of one I/O mode, in the order they run: partitions, in flight, then the
    /// settings (sync method, preallocation, zero fill) innermost, so that the settings compared
    /// at one point run back to back (the disk's speed drifts over minutes: fio's own figures
    /// moved by up to 2x between the start and the end of one sweep when settings ran apart). Zero-fill settings that give the same lead in `mode` share one point.
    pub fn points(&self, mode: IoMode) -> Vec<PointConfig> {
        let mut fills: Vec<(u32, Vec<ZeroFill>)> = Vec::new();
        for &z in &self.zero_fill {
            let lead = z.lead_bytes(Durability::EveryBatch, mode);
            match fills.iter_mut().find(|(l, _)| *l == lead) {
                Some((_, same)) => same.push(z),
                None => fills.push((lead, vec![z])),
            }
        }
        let mut out = Vec::new();
        let default_preallocate = seglog::LogConfig::default().preallocate;
        for &partitions in &self.partitions {
            for &in_flight in &self.in_flight {
                for &sync_method in &self.sync_methods {
                    for &preallocate in &self.preallocate {
                        for (lead, same) in &fills {
                            out.push(PointConfig {
                                key: PointKey {
                                    mode: mode.name().into(),
                                    sync_method: sync_method.name().into(),
                                    preallocate,
                                    zero_fill: Joined(same).to_string().replace(',', "="),
                                    partitions: partitions.max(1),
                                    in_flight: in_flight.max(1),
                                },
                                mode,
                                sync_method,
                                zero_fill: same[0],
                                lead_bytes: *lead,
                                engine_defaults: sync_method == SyncMethod::default()
                                    && preallocate == default_preallocate
                                    && same.contains(&ZeroFill::default()),
                            });
                        }
                    }
                }
            }
        }
        out
    }
}

/// Which point of the sweep.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct PointKey {
    /// The I/O mode asked for.
    pub mode: String,
    pub sync_method: String,
    /// Segments preallocated (`preallocate`).
    pub preallocate: bool,
    /// The zero-fill setting; settings that ran as one point are joined by `=` (`auto=off` in
    /// buffered mode, where both mean no zero fill).
    pub zero_fill: String,
    pub partitions: usize,
    /// Appends in flight per partition.
    pub in_flight: usize,
}

impl PointKey {
    /// A short label: `direct dsync-writes pa=no zf=auto 8x8`.
    pub fn label(&self) -> String {
        format!(
            "{} {} pa={} zf={} {}x{}",
            self.mode,
            self.sync_method,
            yes_no(self.preallocate),
            self.zero_fill,
            self.partitions,
            self.in_flight
        )
    }
}

fn yes_no(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

/// One point, ready to run.
#[derive(Clone, Debug)]
pub struct PointConfig {
    pub key: PointKey,
    pub mode: IoMode,
    pub sync_method: SyncMethod,
    pub zero_fill: ZeroFill,
    /// The lead the engine keeps with this setting in this mode (0: no zero fill).
    pub lead_bytes: u32,
    /// The engine's default zero fill, sync method and preallocation (the proof is for
    /// these, in direct mode).
    pub engine_defaults: bool,
}

impl PointConfig {
    /// The engine setup of this point: `base` (batches, shards, segments) with every-batch
    /// durability and the point's mode, partitions, preallocation, zero fill and sync method.
    pub fn setup(&self, base: &Setup) -> Setup {
        Setup {
            mode: self.mode,
            partitions: self.key.partitions,
            durability: Durability::EveryBatch,
            preallocate: self.key.preallocate,
            zero_fill: self.zero_fill,
            sync_method: self.sync_method,
            ..base.clone()
        }
    }

    /// fio's job beside seglog's run `r` of this point (see the module doc): one file per
    /// partition, the files sharing `r.bytes` (whole writes), each write as large as seglog's
    /// partition writes were on average (rounded to 4 KiB), at the queue depth `plan.fio_depth`
    /// says (by default partitions x in flight), in the layout `plan.fio_layout` says (with
    /// the point's `preallocate`).
    pub fn fio_job(&self, r: &RunReport, plan: &SweepPlan) -> FilesWrite {
        let bs = ((r.bytes_per_flush / 4096.0).round().max(1.0) as u64) * 4096;
        let files = self.key.partitions;
        let file_bytes = ((r.bytes / files as u64) / bs).max(1) * bs;
        let per_file = match plan.fio_depth {
            FioDepth::Appends => self.key.in_flight,
            FioDepth::Bytes => ((self.key.in_flight * r.batch_bytes) as f64 / bs as f64).round().max(1.0) as usize,
        };
        let layout = match plan.fio_layout {
            LayoutChoice::Fixed(l) => l,
            LayoutChoice::Match if self.lead_bytes > 0 => FioLayout::Written,
            LayoutChoice::Fresh | LayoutChoice::Match if self.key.preallocate => FioLayout::Fallocate,
            // The engine keeps a direct-mode `.log`'s length ahead of its data: its writes
            // allocate blocks inside the file's size, as fio's do in a file given its length.
            LayoutChoice::Fresh | LayoutChoice::Match if r.mode == IoMode::Direct.name() => FioLayout::Sparse,
            LayoutChoice::Fresh | LayoutChoice::Match => FioLayout::Extend,
        };
        FilesWrite {
            files,
            bs,
            iodepth: (files * per_file) as u32,
            file_bytes,
            direct: r.mode == IoMode::Direct.name(),
            sync: match self.sync_method {
                SyncMethod::DsyncWrites => FioSync::Dsync,
                SyncMethod::Fdatasync => FioSync::Fdatasync(1),
                // fio has no syncfs: its baseline is a durable write per file, as the default.
                SyncMethod::Syncfs => FioSync::Dsync,
            },
            layout,
        }
    }

    /// The same job over blocks written beforehand, where fio's `job` is not and the point has
    /// zero fill on: what the disk does for the appends that land in zeros, with the zeros
    /// written for free (see [`LayoutChoice::Fresh`]).
    pub fn written_job(&self, job: &FilesWrite) -> Option<FilesWrite> {
        (self.lead_bytes > 0 && job.layout != FioLayout::Written)
            .then(|| FilesWrite { layout: FioLayout::Written, ..job.clone() })
    }

    /// The same job with one write in flight per file, where `job` has more: the engine keeps
    /// one durable write in flight per partition (the appends that arrive meanwhile go in its
    /// next write), so this is the disk's rate for the engine's own depth, against which
    /// `job`'s deeper queue measures what a second write in flight on one file is worth to the
    /// disk (docs/benchmarks.md, "What bounds 1 x 8 on this disk").
    pub fn serial_job(&self, job: &FilesWrite) -> Option<FilesWrite> {
        (job.iodepth as usize > job.files).then(|| FilesWrite { iodepth: job.files as u32, ..job.clone() })
    }
}

/// seglog's side of one point: a fresh engine on a new directory under `base`, durable appends
/// from one producer keeping `in_flight` appends in flight on every partition
/// ([`produce::run_per_partition`]), then a clean shutdown; the directory is removed.
pub fn run_seglog(
    base: &Path,
    setup: &Setup,
    point: &PointConfig,
    plan: &SweepPlan,
    pin_client: bool,
) -> Result<RunReport, Box<dyn std::error::Error>> {
    let setup = point.setup(setup);
    let dir = tempfile::tempdir_in(base)?;
    let (engine, tps): (Engine, _) = setup.open(dir.path())?;
    let pp = ProduceParams {
        total_bytes: plan.point_bytes(point.key.partitions, point.key.in_flight, setup.batch_bytes),
        window: point.key.in_flight,
        rate: 0.0,
        max_seconds: plan.max_seconds,
        pin_client,
    };
    let mut r = produce::run_per_partition(&engine, &tps, &setup, &pp, WORKLOAD)?;
    r.note = format!("{}; zero fill {} (lead {} B)", r.note, point.key.zero_fill, point.lead_bytes);
    engine.shutdown()?;
    drop(dir);
    Ok(r)
}

/// fio's side of one point, `job` ([`PointConfig::fio_job`] or [`PointConfig::written_job`]),
/// run in `base` after seglog's run (after a warm-up run of the same job, with
/// [`SweepPlan::warmup`]).
pub fn run_fio(base: &Path, job: &FilesWrite) -> Result<FioSide, String> {
    Ok(FioSide::new(job, job.run(base)?))
}

/// fio's figures at one point.
#[derive(Clone, Debug, serde::Serialize)]
pub struct FioSide {
    /// The job ([`FilesWrite::describe`]).
    pub job: String,
    pub bs: u64,
    pub iodepth: u32,
    /// Which of fio's latencies the percentiles are: a write's whole latency (submission to
    /// completion, O_DSYNC: the write and its flush) or its fdatasyncs' (`fdatasync=1`: fio
    /// reports the write and the sync apart; the sync is what makes it durable, as in the
    /// `durable` workload's target).
    pub latency: String,
    pub mb_per_s: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    /// Every figure fio gave (write completion and whole latency, sync latency).
    pub raw: FioResult,
}

impl FioSide {
    /// The side of `job`, whose result is `f`.
    pub fn new(job: &FilesWrite, f: FioResult) -> FioSide {
        let (latency, p50_us, p99_us, p999_us) = match job.sync {
            FioSync::Fdatasync(_) => ("fdatasync", f.sync_p50_us, f.sync_p99_us, f.sync_p999_us),
            FioSync::Dsync | FioSync::None => ("write (whole)", f.lat_p50_us, f.lat_p99_us, f.lat_p999_us),
        };
        FioSide {
            job: job.describe(),
            bs: job.bs,
            iodepth: job.iodepth,
            latency: latency.into(),
            mb_per_s: f.mb_per_s,
            p50_us,
            p99_us,
            p999_us,
            raw: f,
        }
    }
}

/// One repetition of one point: both sides.
#[derive(Clone, Debug, serde::Serialize)]
pub struct SweepRun {
    pub rep: usize,
    pub key: PointKey,
    pub lead_bytes: u32,
    pub engine_defaults: bool,
    pub seglog: RunReport,
    /// None without fio (or when its job failed: the driver notes why).
    pub fio: Option<FioSide>,
    /// fio's job over written blocks ([`PointConfig::written_job`]), where it ran.
    pub fio_written: Option<FioSide>,
    /// fio's job with one write in flight per file ([`PointConfig::serial_job`]), where it ran.
    pub fio_serial: Option<FioSide>,
}

impl SweepRun {
    /// seglog's throughput over fio's.
    pub fn throughput_ratio(&self) -> Option<f64> {
        self.fio.as_ref().filter(|f| f.mb_per_s > 0.0).map(|f| self.seglog.mb_per_s / f.mb_per_s)
    }

    /// seglog's p99 over fio's.
    pub fn p99_ratio(&self) -> Option<f64> {
        self.fio.as_ref().filter(|f| f.p99_us > 0.0).map(|f| self.seglog.latency.p99_us / f.p99_us)
    }

    /// seglog's throughput over fio's with one write in flight per file.
    pub fn serial_throughput_ratio(&self) -> Option<f64> {
        self.fio_serial.as_ref().filter(|f| f.mb_per_s > 0.0).map(|f| self.seglog.mb_per_s / f.mb_per_s)
    }
}

/// One point over its repetitions: medians, and the medians of the per-repetition ratios.
#[derive(Clone, Debug, serde::Serialize)]
pub struct SweepPoint {
    pub key: PointKey,
    pub reps: usize,
    /// The I/O mode the engine really ran in.
    pub mode_used: String,
    pub lead_bytes: u32,
    pub engine_defaults: bool,
    pub mb_per_s: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    /// The engine's partition writes (submission to seen complete, sync included), p99.
    pub write_p99_us: f64,
    /// Bytes appended per partition write (fio's block size, rounded to 4 KiB).
    pub bytes_per_flush: f64,
    /// Zero-fill refills per run.
    pub zero_fills: f64,
    pub fio_job: String,
    pub fio_latency: String,
    pub fio_mb_per_s: f64,
    pub fio_p50_us: f64,
    pub fio_p99_us: f64,
    pub fio_p999_us: f64,
    /// fio over written blocks, where it ran ([`PointConfig::written_job`]).
    pub fio_written_mb_per_s: Option<f64>,
    pub fio_written_p99_us: Option<f64>,
    /// fio with one write in flight per file, where it ran ([`PointConfig::serial_job`]).
    pub fio_serial_mb_per_s: Option<f64>,
    /// seglog / fio with one write in flight per file, MB/s.
    pub serial_throughput_ratio: Option<f64>,
    /// seglog / fio, MB/s (higher is better for seglog).
    pub throughput_ratio: Option<f64>,
    /// seglog / fio, p99 (lower is better for seglog).
    pub p99_ratio: Option<f64>,
    /// The proof, for the points in direct mode with the engine's defaults: throughput
    /// ratio >= [`MIN_THROUGHPUT_RATIO`] and p99 ratio <= [`MAX_P99_RATIO`] (None elsewhere or
    /// without fio).
    pub proof_met: Option<bool>,
}

/// The points of `runs` in the order they first ran, each over its repetitions.
pub fn summarize(runs: &[SweepRun]) -> Vec<SweepPoint> {
    let mut keys: Vec<&PointKey> = Vec::new();
    for r in runs {
        if !keys.contains(&&r.key) {
            keys.push(&r.key);
        }
    }
    keys.into_iter()
        .map(|key| {
            let g: Vec<&SweepRun> = runs.iter().filter(|r| &r.key == key).collect();
            let m = |f: &dyn Fn(&SweepRun) -> f64| median(&g.iter().map(|r| f(r)).collect::<Vec<_>>());
            let fio = |f: &dyn Fn(&FioSide) -> f64| {
                median(&g.iter().filter_map(|r| r.fio.as_ref().map(f)).collect::<Vec<_>>())
            };
            let median_some = |f: &dyn Fn(&SweepRun) -> Option<f64>| {
                let v: Vec<f64> = g.iter().filter_map(|r| f(r)).collect();
                (!v.is_empty()).then(|| median(&v))
            };
            let first_fio = g.iter().find_map(|r| r.fio.as_ref());
            let (throughput_ratio, p99_ratio) =
                (median_some(&SweepRun::throughput_ratio), median_some(&SweepRun::p99_ratio));
            let mode_used = g[0].seglog.mode.clone();
            let proof_met = match (throughput_ratio, p99_ratio) {
                (Some(t), Some(p)) if g[0].engine_defaults && mode_used == IoMode::Direct.name() => {
                    Some(t >= MIN_THROUGHPUT_RATIO && p <= MAX_P99_RATIO)
                }
                _ => None,
            };
            SweepPoint {
                key: key.clone(),
                reps: g.len(),
                mode_used,
                lead_bytes: g[0].lead_bytes,
                engine_defaults: g[0].engine_defaults,
                mb_per_s: m(&|r| r.seglog.mb_per_s),
                p50_us: m(&|r| r.seglog.latency.p50_us),
                p99_us: m(&|r| r.seglog.latency.p99_us),
                p999_us: m(&|r| r.seglog.latency.p999_us),
                write_p99_us: m(&|r| r.seglog.write_p99_us),
                bytes_per_flush: m(&|r| r.seglog.bytes_per_flush),
                zero_fills: m(&|r| r.seglog.zero_fills as f64),
                fio_job: first_fio.map_or_else(String::new, |f| f.job.clone()),
                fio_latency: first_fio.map_or_else(String::new, |f| f.latency.clone()),
                fio_mb_per_s: fio(&|f| f.mb_per_s),
                fio_p50_us: fio(&|f| f.p50_us),
                fio_p99_us: fio(&|f| f.p99_us),
                fio_p999_us: fio(&|f| f.p999_us),
                fio_written_mb_per_s: median_some(&|r| r.fio_written.as_ref().map(|f| f.mb_per_s)),
                fio_written_p99_us: median_some(&|r| r.fio_written.as_ref().map(|f| f.p99_us)),
                fio_serial_mb_per_s: median_some(&|r| r.fio_serial.as_ref().map(|f| f.mb_per_s)),
                serial_throughput_ratio: median_some(&SweepRun::serial_throughput_ratio),
                throughput_ratio,
                p99_ratio,
                proof_met,
            }
        })
        .collect()
}

fn ratio(r: Option<f64>) -> String {
    r.map_or("-".into(), |r| format!("{r:.2}x"))
}

/// The sweep's table and the proof lines (empty when the sweep did not run). `setup` is the
/// run's base setup (batch size, shards).
pub fn render(points: &[SweepPoint], plan: &SweepPlan, setup: &Setup) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    if points.is_empty() {
        return s;
    }
    let reps = points.iter().map(|p| p.reps).max().unwrap_or(0);
    let _ = writeln!(
        s,
        "\ndurable sweep (every-batch, {} B batches, {} shard(s), {} MiB per point{}; medians of {} rep(s)):",
        setup.batch_bytes,
        setup.shards,
        plan.bytes >> 20,
        if plan.min_windows > 0 {
            format!(", or {} times its appends in flight when more", plan.min_windows)
        } else {
            String::new()
        },
        reps
    );
    let _ = writeln!(
        s,
        "  fio beside each point (each side measured right after a warm-up run of its own unless --sweep-warmup false; wr'n has none): one job, one file per partition, bs = seglog's bytes per partition write, qd = {}, layout {}; its latency is a write's whole latency for O_DSYNC, the fdatasync's for fdatasync=1; wr'n: the same job over blocks written beforehand, at points with zero fill on (the disk's speed for the appends that land in zeros, the zeros written for free); 1/f: the same job with one write in flight per file, at points where it has more (the engine's own depth: one durable write in flight per partition), and seglog's MB/s over it",
        match plan.fio_depth {
            FioDepth::Appends => "partitions x in flight (writes in flight = appends in flight)",
            FioDepth::Bytes => "partitions x (in flight x batch bytes / bs) (bytes in flight = seglog's)",
        },
        plan.fio_layout
    );
    let _ = writeln!(
        s,
        "  {:<8} {:<12} {:<3} {:<8} {:>5} {:>5} | {:>7} {:>8} {:>8} {:>9} {:>8} {:>7} | {:>7} {:>8} {:>8} {:>9} {:>7} {:<13} | {:>6} {:>6} | {:>10} {:>10} | {:>8} {:>6}",
        "mode",
        "sync",
        "pa",
        "zf",
        "parts",
        "in-fl",
        "MB/s",
        "p50 us",
        "p99 us",
        "p99.9 us",
        "wr p99",
        "refills",
        "fio MB/s",
        "p50 us",
        "p99 us",
        "p99.9 us",
        "bs KiB",
        "fio lat",
        "MB/s x",
        "p99 x",
        "wr'n MB/s",
        "wr'n p99",
        "1/f MB/s",
        "MB/s x"
    );
    for p in points {
        let mode =
            if p.mode_used == p.key.mode { p.key.mode.clone() } else { format!("{}->{}", p.key.mode, p.mode_used) };
        let _ = writeln!(
            s,
            "  {:<8} {:<12} {:<3} {:<8} {:>5} {:>5} | {:>7} {:>8} {:>8} {:>9} {:>8} {:>7} | {:>7} {:>8} {:>8} {:>9} {:>7} {:<13} | {:>6} {:>6} | {:>10} {:>10} | {:>8} {:>6}",
            mode,
            p.key.sync_method,
            yes_no(p.key.preallocate),
            p.key.zero_fill,
            p.key.partitions,
            p.key.in_flight,
            num(p.mb_per_s),
            num(p.p50_us),
            num(p.p99_us),
            num(p.p999_us),
            num(p.write_p99_us),
            num(p.zero_fills),
            num(p.fio_mb_per_s),
            num(p.fio_p50_us),
            num(p.fio_p99_us),
            num(p.fio_p999_us),
            num(p.bytes_per_flush / 1024.0),
            p.fio_latency,
            ratio(p.throughput_ratio),
            ratio(p.p99_ratio),
            p.fio_written_mb_per_s.map_or("-".into(), num),
            p.fio_written_p99_us.map_or("-".into(), num),
            p.fio_serial_mb_per_s.map_or("-".into(), num),
            ratio(p.serial_throughput_ratio),
        );
    }
    let proof: Vec<&SweepPoint> = points.iter().filter(|p| p.proof_met.is_some()).collect();
    if !proof.is_empty() {
        let _ = writeln!(
            s,
            "\n  issue 16 proof, direct mode with the engine's defaults (zero fill {}, {}; preallocate {}): throughput >= {MIN_THROUGHPUT_RATIO}x and p99 <= {MAX_P99_RATIO}x fio's",
            ZeroFill::default(),
            SyncMethod::default().name(),
            seglog::LogConfig::default().preallocate
        );
        for p in proof {
            let t = p.throughput_ratio.unwrap_or(0.0);
            let q = p.p99_ratio.unwrap_or(0.0);
            let _ = writeln!(
                s,
                "  [{:<6}] {:>2} partition(s) x {} in flight: throughput {:.2}x fio ({}), p99 {:.2}x fio ({}; {} vs {} us)",
                if p.proof_met == Some(true) { "MET" } else { "MISSED" },
                p.key.partitions,
                p.key.in_flight,
                t,
                if t >= MIN_THROUGHPUT_RATIO { "ok" } else { "short" },
                q,
                if q <= MAX_P99_RATIO { "ok" } else { "over" },
                num(p.p99_us),
                num(p.fio_p99_us)
            );
        }
    }
    s
}

/// One line of the sweep's charts: a mode, sync method, zero fill and appends in flight, its
/// ratios against partitions.
struct Line {
    name: String,
    throughput: Vec<(f64, f64)>,
    p99: Vec<(f64, f64)>,
}

/// The sweep's charts, `(file name, chart)`: seglog over fio for throughput and for p99 against
/// partitions, a line per mode, sync method, zero fill and appends in flight per partition (`w`),
/// with the proof's bounds marked. None when no point has fio's figures.
pub fn charts(points: &[SweepPoint]) -> Vec<(&'static str, plot::Chart)> {
    let mut lines: Vec<Line> = Vec::new();
    for p in points {
        // Short enough for the legend: `buffered fdatasync pa zf=auto=off w=8` (pa: preallocated;
        // w: in flight).
        let sync = p.key.sync_method.trim_end_matches("-writes");
        let pa = if p.key.preallocate { " pa" } else { "" };
        let name = format!("{} {sync}{pa} zf={} w={}", p.key.mode, p.key.zero_fill, p.key.in_flight);
        let i = match lines.iter().position(|l| l.name == name) {
            Some(i) => i,
            None => {
                lines.push(Line { name, throughput: Vec::new(), p99: Vec::new() });
                lines.len() - 1
            }
        };
        let x = p.key.partitions as f64;
        if let Some(t) = p.throughput_ratio {
            lines[i].throughput.push((x, t));
        }
        if let Some(q) = p.p99_ratio {
            lines[i].p99.push((x, q));
        }
    }
    let chart = |title: &str, y_label: &str, mark: f64, pick: fn(&Line) -> &Vec<(f64, f64)>| plot::Chart {
        title: title.into(),
        x_label: "partitions (one shard, log scale)".into(),
        y_label: y_label.into(),
        x_log: true,
        y_log: true,
        y_marks: vec![(mark, format!("{mark}x"))],
        series: lines.iter().map(|l| plot::Series::line(l.name.clone(), pick(l).clone())).collect(),
        ..Default::default()
    };
    let out = vec![
        (
            "durable-sweep-throughput.svg",
            chart(
                "Durable appends against fio: throughput, seglog / fio",
                "seglog MB/s / fio MB/s (log scale)",
                MIN_THROUGHPUT_RATIO,
                |l| &l.throughput,
            ),
        ),
        (
            "durable-sweep-p99.svg",
            chart(
                "Durable appends against fio: p99, seglog / fio",
                "seglog p99 / fio p99 (log scale)",
                MAX_P99_RATIO,
                |l| &l.p99,
            ),
        ),
    ];
    out.into_iter().filter(|(_, c)| !c.is_empty()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base_setup() -> Setup {
        Setup {
            mode: IoMode::Direct,
            shards: 1,
            partitions: 1,
            batch_bytes: 16_384,
            records_per_batch: 16,
            durability: Durability::None,
            segment_bytes: 32 << 20,
            index_interval_bytes: 4096,
            preallocate: true,
            zero_fill: ZeroFill::Auto,
            sync_method: SyncMethod::default(),
        }
    }

    /// A point appends at least 400 windows by default (64 x 8 x 16 KiB: 3.125 GiB), the plan's
    /// bytes when more, and exactly the bytes given when `--sweep-bytes` named them.
    #[test]
    fn a_point_appends_at_least_its_windows() {
        let plan = SweepPlan::default_plan();
        assert_eq!(plan.point_bytes(1, 1, 16_384), 256 << 20);
        assert_eq!(plan.point_bytes(8, 8, 16_384), 400 * 64 * 16_384);
        assert_eq!(plan.point_bytes(64, 8, 16_384), 400 * 512 * 16_384);
        let given = SweepPlan { min_windows: 0, bytes: 64 << 20, ..plan };
        assert_eq!(given.point_bytes(64, 8, 16_384), 64 << 20);
    }

    /// Direct mode runs every combination; buffered mode, where auto and off both mean no zero
    /// fill, runs them as one point; the engine's defaults are marked.
    #[test]
    fn points_cover_the_grid_and_share_identical_settings() {
        let plan = SweepPlan::default_plan();
        let direct = plan.points(IoMode::Direct);
        assert_eq!(direct.len(), 2 * 2 * 2 * 3 * 2);
        let first = &direct[0];
        assert_eq!(
            (
                first.key.sync_method.as_str(),
                first.key.preallocate,
                first.key.zero_fill.as_str(),
                first.key.partitions,
                first.key.in_flight
            ),
            ("dsync-writes", false, "auto", 1, 1)
        );
        assert!(first.lead_bytes > 0 && first.engine_defaults);
        let defaults = direct.iter().filter(|p| p.engine_defaults).count();
        assert_eq!(defaults, 6, "dsync-writes, zero fill auto, no preallocation, at every partitions x in flight");
        assert!(direct.iter().any(|p| p.key.zero_fill == "off" && p.lead_bytes == 0 && !p.engine_defaults));
        assert!(direct.iter().any(|p| p.key.preallocate && p.key.zero_fill == "auto" && !p.engine_defaults));
        assert!(direct.iter().all(|p| p.setup(&base_setup()).preallocate == p.key.preallocate));
        let buffered = plan.points(IoMode::Buffered);
        assert_eq!(buffered.len(), 2 * 2 * 3 * 2);
        assert!(buffered.iter().all(|p| p.key.zero_fill == "auto=off" && p.lead_bytes == 0));
        let s = buffered[0].setup(&base_setup());
        assert_eq!((s.mode, s.durability, s.partitions), (IoMode::Buffered, Durability::EveryBatch, 1));
    }

    /// fio's job follows seglog's run: the bytes per partition write (rounded to 4 KiB), one
    /// file per partition sharing the bytes, queue depth partitions x in flight, the sync method's
    /// counterpart and the matched layout.
    #[test]
    fn the_fio_job_matches_the_point() {
        let plan = SweepPlan::default_plan();
        let point = plan
            .points(IoMode::Direct)
            .into_iter()
            .find(|p| p.key.partitions == 8 && p.key.in_flight == 8 && p.key.zero_fill == "auto" && p.key.preallocate)
            .unwrap();
        let r = RunReport {
            mode: "direct".into(),
            bytes: 64 << 20,
            batch_bytes: 16_384,
            bytes_per_flush: 90_000.0,
            ..Default::default()
        };
        let job = point.fio_job(&r, &plan);
        assert_eq!((job.files, job.bs, job.iodepth), (8, 90_112, 8), "8 x 16 KiB / 88 KiB = 1.45: one write per file");
        let r64 = RunReport { bytes_per_flush: 65_536.0, ..r.clone() };
        let deeper = point.fio_job(&r64, &plan);
        assert_eq!(deeper.iodepth, 16, "8 x 16 KiB / 64 KiB: two writes per file");
        assert_eq!(point.serial_job(&deeper), Some(FilesWrite { iodepth: 8, ..deeper.clone() }));
        assert_eq!(point.serial_job(&job), None, "one write per file already");
        let appends = SweepPlan { fio_depth: FioDepth::Appends, ..plan.clone() };
        assert_eq!(point.fio_job(&r, &appends).iodepth, 64, "one write per append in flight");
        assert_eq!(job.file_bytes % job.bs, 0);
        assert!(job.file_bytes <= 8 << 20 && job.file_bytes > (8 << 20) - job.bs);
        assert_eq!((job.direct, job.sync, job.layout), (true, FioSync::Dsync, FioLayout::Fallocate));
        let ceiling = point.written_job(&job).expect("zero fill is on: fio runs over written blocks too");
        assert_eq!(ceiling, FilesWrite { layout: FioLayout::Written, ..job.clone() });
        let matched = SweepPlan { fio_layout: LayoutChoice::Match, ..plan.clone() };
        let job = point.fio_job(&r, &matched);
        assert_eq!(job.layout, FioLayout::Written);
        assert_eq!(point.written_job(&job), None, "fio's job is over written blocks already");
        let off = |preallocate: bool| {
            plan.points(IoMode::Direct)
                .into_iter()
                .find(|p| {
                    p.sync_method == SyncMethod::Fdatasync
                        && p.key.zero_fill == "off"
                        && p.key.preallocate == preallocate
                })
                .unwrap()
        };
        let job = off(true).fio_job(&r, &plan);
        assert_eq!((job.sync, job.layout), (FioSync::Fdatasync(1), FioLayout::Fallocate));
        assert_eq!(off(true).written_job(&job), None, "no zero fill: no written-blocks run");
        assert_eq!(off(false).fio_job(&r, &plan).layout, FioLayout::Sparse);
        assert_eq!(off(false).fio_job(&r, &matched).layout, FioLayout::Sparse);
        let through_cache = RunReport { mode: "buffered".into(), ..r.clone() };
        assert_eq!(off(false).fio_job(&through_cache, &plan).layout, FioLayout::Extend);
        let written = SweepPlan { fio_layout: LayoutChoice::Fixed(FioLayout::Written), ..plan.clone() };
        let fixed = off(false).fio_job(&r, &written);
        assert_eq!(fixed.layout, FioLayout::Written);
        assert_eq!("match".parse::<LayoutChoice>().unwrap(), LayoutChoice::Match);
        assert_eq!("fresh".parse::<LayoutChoice>().unwrap(), LayoutChoice::Fresh);
        assert!("nope".parse::<LayoutChoice>().is_err());
    }

    fn run(
        point: &PointConfig,
        rep: usize,
        mb_per_s: f64,
        p99_us: f64,
        fio_mb_per_s: f64,
        fio_p99_us: f64,
    ) -> SweepRun {
        let mut seglog = RunReport { mode: point.key.mode.clone(), mb_per_s, ..Default::default() };
        seglog.latency.p99_us = p99_us;
        SweepRun {
            rep,
            key: point.key.clone(),
            lead_bytes: point.lead_bytes,
            engine_defaults: point.engine_defaults,
            seglog,
            fio: Some(fio_side(fio_mb_per_s, fio_p99_us)),
            fio_written: None,
            fio_serial: None,
        }
    }

    fn fio_side(mb_per_s: f64, p99_us: f64) -> FioSide {
        FioSide {
            job: "job".into(),
            bs: 16_384,
            iodepth: 1,
            latency: "write (whole)".into(),
            mb_per_s,
            p50_us: 0.0,
            p99_us,
            p999_us: 0.0,
            raw: FioResult::default(),
        }
    }

    /// A point's ratios are the medians of its repetitions' ratios; the proof holds only for
    /// the engine's defaults in direct mode, at both bounds; the table and the charts show it.
    #[test]
    fn summaries_ratios_proof_table_and_charts() {
        let plan = SweepPlan::default_plan();
        let direct = plan.points(IoMode::Direct);
        let (def, off) = (&direct[0], direct.iter().find(|p| !p.engine_defaults).unwrap());
        let def8 = direct.iter().find(|p| p.engine_defaults && p.key.partitions == 8).unwrap();
        let with_written = |mut r: SweepRun, mb_per_s: f64| {
            r.fio_written = Some(fio_side(mb_per_s, 50.0));
            r
        };
        let with_serial = |mut r: SweepRun, mb_per_s: f64| {
            r.fio_serial = Some(fio_side(mb_per_s, 80.0));
            r
        };
        let runs = vec![
            with_serial(with_written(run(def, 0, 100.0, 150.0, 100.0, 100.0), 300.0), 125.0),
            with_serial(with_written(run(def, 1, 96.0, 140.0, 100.0, 100.0), 200.0), 80.0),
            run(def, 2, 50.0, 900.0, 100.0, 100.0),
            run(def8, 0, 90.0, 100.0, 100.0, 100.0),
            run(off, 0, 200.0, 100.0, 100.0, 100.0),
        ];
        let points = summarize(&runs);
        assert_eq!(points.len(), 3);
        let p = &points[0];
        assert_eq!(p.reps, 3);
        assert_eq!((p.throughput_ratio, p.p99_ratio), (Some(0.96), Some(1.5)));
        assert_eq!(p.proof_met, Some(true), "0.96x and 1.5x are within the bounds");
        assert_eq!((p.fio_written_mb_per_s, p.fio_written_p99_us), (Some(250.0), Some(50.0)));
        assert_eq!(points[1].fio_written_mb_per_s, None);
        // The ratio is the median of the repetitions' (0.8x and 1.2x), not of the medians.
        assert_eq!((p.fio_serial_mb_per_s, p.serial_throughput_ratio), (Some(102.5), Some(1.0)));
        assert_eq!((points[1].fio_serial_mb_per_s, points[1].serial_throughput_ratio), (None, None));
        assert_eq!(points[1].proof_met, Some(false), "0.9x throughput");
        assert_eq!(points[2].proof_met, None, "not the engine's defaults");
        let text = render(&points, &plan, &base_setup());
        assert!(text.contains("[MET   ]  1 partition(s) x 1 in flight: throughput 0.96x"), "{text}");
        assert!(text.contains("[MISSED]  8 partition(s) x 1 in flight: throughput 0.90x fio (short)"), "{text}");
        assert!(text.contains("direct   dsync-writes no  off "), "{text}");
        assert!(text.contains("1/f MB/s") && text.contains("|      102  1.00x"), "{text}");
        let charts = charts(&points);
        assert_eq!(
            charts.iter().map(|c| c.0).collect::<Vec<_>>(),
            ["durable-sweep-throughput.svg", "durable-sweep-p99.svg"]
        );
        assert!(charts[0].1.series.iter().any(|s| s.name == "direct dsync zf=auto w=1"));
        assert!(render(&[], &plan, &base_setup()).is_empty());
    }
}
