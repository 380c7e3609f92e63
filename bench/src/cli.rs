//! `seglog bench`: the workload benchmark's command line and driver. For each repetition and I/O
//! mode it runs the workloads through the engine on a fresh directory, and right after each one
//! the fio job with the same pattern on the same disk (interleaved, so both see the same noise);
//! then the reference designs on the same batches. It reports medians over the repetitions: a
//! summary table, the targets with their ratios to fio, seglog against the reference designs,
//! `--json` for machines and `--plot DIR` for SVG charts.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::Instant;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use seglog::{Durability, Engine, IoMode, SyncMethod, TopicPartition, ZeroFill};

use crate::fio::{self, FioResult};
use crate::partitions::{self, ManyFilesWrite, PartitionsPlan, PartitionsPoint, PartitionsRun, Skew};
use crate::pct::{median, Hist};
use crate::sweep::{self, FioDepth, LayoutChoice, SweepPlan, SweepPoint, SweepRun};
use crate::workload::interval::IntervalPoint;
use crate::workload::log::{self, LogParams};
use crate::workload::mixed::MixedParams;
use crate::workload::open::OpenParams;
use crate::workload::produce::{ProduceParams, Produced};
use crate::workload::{consume, interval, mixed, open, produce, recovery, DiskRef, RunReport, Setup};
use crate::{plot, refs};

/// Every workload run by default, in the order they run.
pub const WORKLOADS: &[&str] = &[
    "produce", "tail", "lookup", "lag", "seek", "time", "mixed", "recovery", "open", "durable", "log", "refs",
    "interval",
];

/// Workloads that run only when `--workloads` names them: the durable sweep
/// ([`sweep::WORKLOAD`], minutes long), after `durable` in each mode; the many-partitions sweep
/// ([`partitions::WORKLOAD`], minutes long) after it.
pub const OPT_IN_WORKLOADS: &[&str] = &[sweep::WORKLOAD, partitions::WORKLOAD];

/// How much to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Profile {
    /// Under a minute on a 2-core machine: one repetition, small volumes, direct and buffered.
    Quick,
    /// A few minutes: three repetitions, larger volumes, every I/O mode.
    Full,
}

/// `seglog bench`: seglog's workloads against fio and reference designs on the same disk.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// quick (under a minute) or full (a few minutes); flags below override its settings.
    #[arg(long, value_enum, default_value = "quick")]
    pub profile: Profile,
    /// Directory on the disk to measure (not tmpfs); runs use fresh subdirectories, removed after.
    #[arg(long, default_value = "/var/tmp/seglog-bench")]
    pub dir: PathBuf,
    /// Workloads to run (default all but durable-sweep): produce, tail, lookup, lag, seek,
    /// time, mixed, recovery, open, durable, log, refs, interval; and durable-sweep (only when
    /// named: durable appends at partitions x appends in flight x zero fill x sync method, each
    /// point beside fio's equivalent job; see the --sweep-* flags) and partitions (only when
    /// named: one shard with 1 to 10,000 partitions beside fio's many-files job, with the memory
    /// per partition; see the --partitions-sweep-* flags).
    #[arg(long, value_delimiter = ',')]
    pub workloads: Option<Vec<String>>,
    /// I/O modes (default: direct,buffered for quick; direct,buffered,sync for full).
    #[arg(long, value_delimiter = ',')]
    pub modes: Option<Vec<IoMode>>,
    /// Partitions written and read (default 1), round-robin from one producer.
    #[arg(long)]
    pub partitions: Option<usize>,
    /// Engine shards (default 1): one pinned thread each; partitions are spread by hash.
    #[arg(long)]
    pub shards: Option<usize>,
    /// Size of each batch on disk (default 16384).
    #[arg(long)]
    pub batch_bytes: Option<usize>,
    /// Records in each batch (default 16); the record size follows from the batch size.
    #[arg(long)]
    pub records_per_batch: Option<usize>,
    /// Record size in bytes: sets the batch size to hold records-per-batch records of this size.
    #[arg(long)]
    pub record_bytes: Option<usize>,
    /// Produce rate in batches per second over all partitions; 0 = unthrottled (default).
    #[arg(long)]
    pub rate: Option<f64>,
    /// Durability of the produce workload: none (default), every-batch, interval:MS. The
    /// `durable` workload always runs every-batch with one append in flight.
    #[arg(long, value_parser = crate::workload::parse_durability)]
    pub durability: Option<Durability>,
    /// Appends in flight per partition in the produce workload (default 8).
    #[arg(long)]
    pub window: Option<usize>,
    /// Extra produce runs at these windows (appends in flight), each on a fresh log beside fio
    /// at the write size it reached (default: none for quick, 1,32 for full).
    #[arg(long, value_delimiter = ',')]
    pub sweep_windows: Option<Vec<usize>>,
    /// Bytes produced per run.
    #[arg(long)]
    pub bytes: Option<u64>,
    /// segment.bytes of the bench partitions.
    #[arg(long)]
    pub segment_bytes: Option<u32>,
    /// index.interval.bytes of the bench partitions (default 4096).
    #[arg(long)]
    pub index_interval_bytes: Option<u32>,
    /// Repetitions (medians reported).
    #[arg(long)]
    pub reps: Option<usize>,
    /// Segments of the clean-open workload (default 1,000 for quick, 10,000 for full), 100 per
    /// partition.
    #[arg(long)]
    pub open_segments: Option<usize>,
    /// Timed clean opens per repetition and mode (default 3 for quick, 2 for full).
    #[arg(long)]
    pub open_reps: Option<usize>,
    /// Records the log workload appends through the standalone `Log` and each reference
    /// (default 100,000 for quick, 1,000,000 for full).
    #[arg(long)]
    pub log_records: Option<u64>,
    /// Point lookups of the log workload, warm and again cold (default 5,000 for quick, 100,000
    /// for full).
    #[arg(long)]
    pub log_lookups: Option<u64>,
    /// Do not preallocate segments (fio preallocates its file, so the default does too). The
    /// durable sweep sets preallocation per point instead (--sweep-preallocate).
    #[arg(long)]
    pub no_preallocate: bool,
    /// The engine's zero fill: auto (the default: on for every-batch durability in direct
    /// mode), off, or a lead in bytes (8MiB).
    #[arg(long, default_value = "auto")]
    pub zero_fill: ZeroFill,
    /// How the engine makes a durable write durable: dsync-writes (RWF_DSYNC writes, the
    /// engine's default), fdatasync (each write linked to an fdatasync) or syncfs (plain writes
    /// and one shared syncfs per shard at a time). Durable runs only.
    #[arg(long)]
    pub sync_method: Option<SyncMethod>,
    /// durable-sweep: partitions of the one shard (default 1,8,64).
    #[arg(long, value_delimiter = ',')]
    pub sweep_partitions: Option<Vec<usize>>,
    /// durable-sweep: appends in flight per partition (default 1,8).
    #[arg(long, value_delimiter = ',')]
    pub sweep_in_flight: Option<Vec<usize>>,
    /// durable-sweep: zero-fill settings (default auto,off); those that mean the same in a mode
    /// (both, in buffered mode) run once there.
    #[arg(long, value_delimiter = ',')]
    pub sweep_zero_fill: Option<Vec<ZeroFill>>,
    /// durable-sweep: sync methods (default dsync-writes,fdatasync; syncfs too if named).
    #[arg(long, value_delimiter = ',')]
    pub sweep_sync_methods: Option<Vec<SyncMethod>>,
    /// durable-sweep: segment preallocation settings (default false,true).
    #[arg(long, value_delimiter = ',')]
    pub sweep_preallocate: Option<Vec<bool>>,
    /// durable-sweep: bytes appended per point, fio writing the same (default 268435456, 256 MiB,
    /// or 400 times the point's appends in flight when that is more; given, exactly this).
    #[arg(long)]
    pub sweep_bytes: Option<u64>,
    /// durable-sweep: a point's appends stop after this many seconds even short of
    /// --sweep-bytes (default 10; 0 = no limit).
    #[arg(long)]
    pub sweep_seconds: Option<f64>,
    /// durable-sweep: run seglog and fio's job once unmeasured right before each measured run,
    /// so that each meets the disk as its own files left it (at 64 partitions x 1 in flight the
    /// engine's run right after fio's job deleted its files made about half its rate here, with
    /// 10-17x the p99); fio's job over written blocks has none. About 1.5x the sweep's time;
    /// `--sweep-warmup false` to turn off.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub sweep_warmup: bool,
    /// partitions: partition counts of the one shard (default 1,100,1000,10000).
    #[arg(long, value_delimiter = ',')]
    pub partitions_sweep_counts: Option<Vec<usize>>,
    /// partitions: how appends spread (default uniform,zipf).
    #[arg(long, value_enum, value_delimiter = ',')]
    pub partitions_sweep_skew: Option<Vec<Skew>>,
    /// partitions: the Zipf exponent of the zipf points (default 1.1, fio's default).
    #[arg(long)]
    pub partitions_sweep_zipf: Option<f64>,
    /// partitions: bytes appended per point, fio writing the same (default 1073741824, 1 GiB).
    #[arg(long)]
    pub partitions_sweep_bytes: Option<u64>,
    /// partitions: a point's appends stop after this many seconds even short of the bytes
    /// (default 30; 0 = no limit).
    #[arg(long)]
    pub partitions_sweep_seconds: Option<f64>,
    /// durable-sweep: fio's file layout: fresh (the default: new files, fallocated with
    /// preallocation, else given their length first in direct mode (sparse) and extended
    /// through the page cache), match (written blocks where zero fill is on, else as fresh),
    /// extend, sparse, fallocate or written. Where zero fill is on and the layout is not
    /// written blocks, fio also runs over written blocks.
    #[arg(long, default_value = "fresh")]
    pub sweep_fio_layout: LayoutChoice,
    /// durable-sweep: fio's queue depth: bytes (the default: as many bytes in flight as
    /// seglog's appends: per file, in flight x batch bytes / fio's block size writes) or appends
    /// (partitions x in flight writes).
    #[arg(long, value_enum, default_value = "bytes")]
    pub sweep_fio_depth: FioDepth,
    /// Pin the producing thread of the produce and durable workloads to a core no shard is
    /// pinned to (when there is one), as a broker keeps its request threads off the shards'
    /// cores; by default it runs wherever the scheduler puts it.
    #[arg(long)]
    pub pin_client: bool,
    /// Skip fio (no ratios to the disk).
    #[arg(long)]
    pub no_fio: bool,
    /// Print the results as one JSON document on stdout (the table goes to stderr).
    #[arg(long)]
    pub json: bool,
    /// Write SVG charts into this directory.
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// Seed of the random offsets and timestamps (the same seed replays the same lookups).
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
}

/// The settings a run uses, after the profile and the flags.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Plan {
    pub profile: String,
    pub workloads: Vec<String>,
    pub modes: Vec<String>,
    pub reps: usize,
    pub produce_bytes: u64,
    pub window: usize,
    pub sweep_windows: Vec<usize>,
    pub rate: f64,
    pub durable_appends: u64,
    pub tail_fetches: u64,
    pub lookups: u64,
    pub seeks: u64,
    pub time_lookups: u64,
    pub mixed_seconds: f64,
    /// Runtime of fio's 4 KiB random-read job.
    pub random_read_seconds: u32,
    pub intervals: Vec<u32>,
    pub interval_batch_bytes: usize,
    pub interval_log_bytes: u64,
    pub interval_lookups: u64,
    /// The clean-open workload's directory and its timed opens per repetition and mode.
    pub open: OpenParams,
    pub open_reps: usize,
    /// The log workload: records appended and point lookups (warm, and again cold) per system.
    pub log_records: u64,
    pub log_lookups: u64,
    pub fio: bool,
    /// See `Args::pin_client`.
    pub pin_client: bool,
    pub setup: Setup,
    /// The durable sweep's points and volume (when `durable-sweep` runs).
    pub durable_sweep: SweepPlan,
    /// The many-partitions sweep's points and volume (when `partitions` runs).
    pub partitions_sweep: PartitionsPlan,
}

impl Plan {
    pub fn from_args(a: &Args) -> Plan {
        let quick = a.profile == Profile::Quick;
        let pick = |q: u64, f: u64| if quick { q } else { f };
        let records_per_batch = a.records_per_batch.unwrap_or(16).max(1);
        let batch_bytes = match (a.record_bytes, a.batch_bytes) {
            (Some(r), _) => 61 + records_per_batch * (r + 8),
            (None, Some(b)) => b,
            (None, None) => 16_384,
        }
        .max(128);
        let modes = a.modes.clone().unwrap_or_else(|| {
            if quick {
                vec![IoMode::Direct, IoMode::Buffered]
            } else {
                vec![IoMode::Direct, IoMode::Buffered, IoMode::Sync]
            }
        });
        Plan {
            profile: format!("{:?}", a.profile).to_lowercase(),
            workloads: a.workloads.clone().unwrap_or_else(|| WORKLOADS.iter().map(|s| s.to_string()).collect()),
            modes: modes.iter().map(|m| m.name().to_string()).collect(),
            reps: a.reps.unwrap_or(pick(1, 3) as usize).max(1),
            produce_bytes: a.bytes.unwrap_or(pick(128 << 20, 512 << 20)),
            window: a.window.unwrap_or(8).max(1),
            sweep_windows: a.sweep_windows.clone().unwrap_or_else(|| if quick { vec![] } else { vec![1, 32] }),
            rate: a.rate.unwrap_or(0.0),
            durable_appends: pick(1000, 2500),
            tail_fetches: pick(20_000, 50_000),
            lookups: pick(200_000, 500_000),
            seeks: pick(1500, 5000),
            time_lookups: pick(2000, 5000),
            mixed_seconds: if quick { 1.5 } else { 3.0 },
            random_read_seconds: pick(1, 3) as u32,
            intervals: vec![1, 4096, 16_384, 65_536, 262_144, 1_048_576],
            interval_batch_bytes: 1024,
            interval_log_bytes: pick(4 << 20, 32 << 20),
            interval_lookups: pick(10_000, 100_000),
            open: OpenParams::for_segments(a.open_segments.unwrap_or(pick(1000, 10_000) as usize), 1024),
            open_reps: a.open_reps.unwrap_or(pick(3, 2) as usize).max(1),
            log_records: a.log_records.unwrap_or(pick(100_000, 1_000_000)).max(1),
            log_lookups: a.log_lookups.unwrap_or(pick(5_000, 100_000)),
            fio: !a.no_fio,
            pin_client: a.pin_client,
            setup: Setup {
                mode: IoMode::Direct,
                shards: a.shards.unwrap_or(1).max(1),
                partitions: a.partitions.unwrap_or(1).max(1),
                batch_bytes,
                records_per_batch,
                durability: a.durability.unwrap_or(Durability::None),
                segment_bytes: a.segment_bytes.unwrap_or(pick(32 << 20, 128 << 20) as u32),
                index_interval_bytes: a.index_interval_bytes.unwrap_or(4096),
                preallocate: !a.no_preallocate,
                zero_fill: a.zero_fill,
                sync_method: a.sync_method.unwrap_or_default(),
            },
            durable_sweep: {
                let d = SweepPlan::default_plan();
                SweepPlan {
                    partitions: a.sweep_partitions.clone().unwrap_or(d.partitions),
                    in_flight: a.sweep_in_flight.clone().unwrap_or(d.in_flight),
                    zero_fill: a.sweep_zero_fill.clone().unwrap_or(d.zero_fill),
                    sync_methods: a.sweep_sync_methods.clone().unwrap_or(d.sync_methods),
                    preallocate: a.sweep_preallocate.clone().unwrap_or(d.preallocate),
                    bytes: a.sweep_bytes.unwrap_or(d.bytes).max(1),
                    min_windows: if a.sweep_bytes.is_some() { 0 } else { d.min_windows },
                    max_seconds: a.sweep_seconds.unwrap_or(d.max_seconds).max(0.0),
                    fio_layout: a.sweep_fio_layout,
                    fio_depth: a.sweep_fio_depth,
                    warmup: a.sweep_warmup,
                }
            },
            partitions_sweep: {
                let d = PartitionsPlan::default_plan();
                PartitionsPlan {
                    partitions: a.partitions_sweep_counts.clone().unwrap_or(d.partitions),
                    skews: a.partitions_sweep_skew.clone().unwrap_or(d.skews),
                    zipf_s: a.partitions_sweep_zipf.unwrap_or(d.zipf_s),
                    bytes: a.partitions_sweep_bytes.unwrap_or(d.bytes).max(1),
                    max_seconds: a.partitions_sweep_seconds.unwrap_or(d.max_seconds).max(0.0),
                }
            },
        }
    }
    fn runs(&self, w: &str) -> bool {
        self.workloads.iter().any(|x| x == w)
    }
    /// Steps of the progress bar: each workload of each mode and repetition, the references
    /// (and the log workload's), the interval sweep, the clean-open directory and fio's read file.
    fn steps(&self) -> u64 {
        let per_mode =
            ["produce", "tail", "lookup", "lag", "seek", "time", "mixed", "recovery", "open", "durable", "log"]
                .iter()
                .filter(|w| self.runs(w))
                .count() as u64;
        let per_mode = per_mode + if self.runs("produce") { self.sweep_windows.len() as u64 } else { 0 };
        let sweep: u64 = if self.runs(sweep::WORKLOAD) {
            self.modes().iter().map(|&m| self.durable_sweep.points(m).len() as u64).sum()
        } else {
            0
        };
        let many = if self.runs(partitions::WORKLOAD) {
            self.modes().len() as u64 * self.partitions_sweep.points().len() as u64
        } else {
            0
        };
        let refs = self.runs("refs") as u64 * 2 + self.runs("log") as u64;
        self.reps as u64 * (self.modes().len() as u64 * per_mode + sweep + many + refs)
            + self.runs("interval") as u64
            + self.runs("open") as u64
            + 1
    }
    fn modes(&self) -> Vec<IoMode> {
        self.modes.iter().filter_map(|m| m.parse().ok()).collect()
    }
}

/// The machine the run is on.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Machine {
    pub cpu: String,
    pub cores: usize,
    pub memory_gib: f64,
    pub kernel: String,
    pub filesystem: String,
    pub device: String,
    pub load_before: String,
    pub load_after: String,
    pub fio: String,
    pub thp: String,
}

fn sh(cmd: &str) -> String {
    std::process::Command::new("sh")
        .args(["-c", cmd])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

impl Machine {
    pub fn probe(dir: &Path) -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu = cpuinfo
            .lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split(':').nth(1))
            .unwrap_or("")
            .trim()
            .to_string();
        let mem = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|m| {
                m.lines().next().and_then(|l| l.split_whitespace().nth(1)).and_then(|v| v.parse::<f64>().ok())
            })
            .unwrap_or(0.0);
        let d = dir.display();
        Machine {
            cpu,
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            memory_gib: mem / (1024.0 * 1024.0),
            kernel: sh("uname -r"),
            filesystem: sh(&format!("findmnt -no FSTYPE --target {d} | tail -1")),
            device: sh(&format!("df --output=source {d} | tail -1")),
            load_before: load(),
            load_after: String::new(),
            fio: sh("fio --version"),
            thp: seglog::io::arena::thp_mode(),
        }
    }
}

/// Medians over the repetitions of one (system, workload, mode).
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Summary {
    pub workload: String,
    pub system: String,
    pub mode: String,
    pub huge_pages: String,
    pub reps: usize,
    pub mb_per_s: f64,
    pub records_per_s: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub max_us: f64,
    /// The engine's writes, from the start of their submission to seen complete (medians of per-repetition
    /// percentiles; zero for runs that wrote nothing).
    pub write_p50_us: f64,
    pub write_p99_us: f64,
    pub enters_per_op: f64,
    pub ios_per_op: f64,
    pub avg_write_bytes: f64,
    pub minor_faults: f64,
    pub major_faults: f64,
    pub cpu_s_per_gb: f64,
    pub disk_job: String,
    pub disk_mb_per_s: f64,
    pub disk_p50_us: f64,
    pub disk_p99_us: f64,
    /// Median over repetitions of seglog / fio (throughput), each pair from the same repetition.
    pub ratio_to_disk: Option<f64>,
    pub note: String,
}

fn summarize(runs: &[RunReport]) -> Vec<Summary> {
    let mut groups: BTreeMap<(String, String, String), Vec<&RunReport>> = BTreeMap::new();
    let mut order = Vec::new();
    for r in runs {
        let k = (r.workload.clone(), r.system.clone(), r.mode.clone());
        if !groups.contains_key(&k) {
            order.push(k.clone());
        }
        groups.entry(k).or_default().push(r);
    }
    order
        .into_iter()
        .map(|k| {
            let g = &groups[&k];
            let m = |f: &dyn Fn(&RunReport) -> f64| median(&g.iter().map(|r| f(r)).collect::<Vec<_>>());
            let ratios: Vec<f64> = g.iter().filter_map(|r| r.throughput_ratio()).collect();
            let disk = |f: &dyn Fn(&DiskRef) -> f64| {
                median(&g.iter().filter_map(|r| r.disk.as_ref().map(f)).collect::<Vec<_>>())
            };
            Summary {
                workload: k.0.clone(),
                system: k.1.clone(),
                mode: k.2.clone(),
                huge_pages: g[0].huge_pages.clone(),
                reps: g.len(),
                mb_per_s: m(&|r| r.mb_per_s),
                records_per_s: m(&|r| r.records_per_s),
                p50_us: m(&|r| r.latency.p50_us),
                p99_us: m(&|r| r.latency.p99_us),
                p999_us: m(&|r| r.latency.p999_us),
                max_us: m(&|r| r.latency.max_us),
                write_p50_us: m(&|r| r.write_p50_us),
                write_p99_us: m(&|r| r.write_p99_us),
                enters_per_op: m(&|r| r.enters_per_op),
                ios_per_op: m(&|r| r.ios_per_op),
                avg_write_bytes: m(&|r| r.avg_write_bytes),
                minor_faults: m(&|r| r.minor_faults as f64),
                major_faults: m(&|r| r.major_faults as f64),
                cpu_s_per_gb: m(&|r| r.cpu_s_per_gb),
                disk_job: g.iter().find_map(|r| r.disk.as_ref().map(|d| d.job.clone())).unwrap_or_default(),
                disk_mb_per_s: disk(&|d| d.mb_per_s),
                disk_p50_us: disk(&|d| d.p50_us),
                disk_p99_us: disk(&|d| d.p99_us),
                ratio_to_disk: (!ratios.is_empty()).then(|| median(&ratios)),
                note: g[0].note.clone(),
            }
        })
        .collect()
}

/// One target of the issue, measured.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Target {
    pub name: String,
    pub target: String,
    pub measured: String,
    pub disk: String,
    pub met: Option<bool>,
}

fn find<'a>(s: &'a [Summary], workload: &str, system: &str, mode: &str) -> Option<&'a Summary> {
    s.iter().find(|x| x.workload == workload && x.system == system && x.mode == mode)
}

fn targets(s: &[Summary], runs: &[RunReport], plan: &Plan) -> Vec<Target> {
    let mut out = Vec::new();
    if let Some(p) = find(s, "produce", "seglog", "direct") {
        let ok = p.ratio_to_disk.map(|r| r >= 0.9);
        out.push(Target {
            name: format!(
                "direct append, {} B batches, {} shard(s), {} partition(s), window {}",
                plan.setup.batch_bytes, plan.setup.shards, plan.setup.partitions, plan.window
            ),
            target: ">= 90% of fio seq O_DIRECT write (same bs, qd)".into(),
            measured: format!("{:.0} MB/s ({:.0}% of fio)", p.mb_per_s, 100.0 * p.ratio_to_disk.unwrap_or(0.0)),
            disk: format!("{:.0} MB/s [{}]", p.disk_mb_per_s, p.disk_job),
            met: ok,
        });
    }
    for p in s.iter().filter(|x| x.workload.starts_with("produce-w") && x.system == "seglog" && x.mode == "direct") {
        out.push(Target {
            name: format!(
                "direct append, {} B batches, window {}",
                plan.setup.batch_bytes,
                p.workload.trim_start_matches("produce-w")
            ),
            target: ">= 90% of fio seq O_DIRECT write (same bs, qd)".into(),
            measured: format!("{:.0} MB/s ({:.0}% of fio)", p.mb_per_s, 100.0 * p.ratio_to_disk.unwrap_or(0.0)),
            disk: format!("{:.0} MB/s [{}]", p.disk_mb_per_s, p.disk_job),
            met: p.ratio_to_disk.map(|r| r >= 0.9),
        });
    }
    if let Some(p) = find(s, "durable", "seglog", "direct") {
        // Per repetition: seglog p99 / fio fdatasync p99 of the same repetition, against fio's
        // default layout (`disk`) and against a file written beforehand (`alt_disk`, a cache
        // flush only), each with fio's p99.
        let per_rep = |disk: fn(&RunReport) -> Option<&DiskRef>| -> Vec<(f64, f64)> {
            runs.iter()
                .filter(|r| r.workload == "durable" && r.system == "seglog" && r.mode == "direct")
                .filter_map(|r| disk(r).filter(|d| d.p99_us > 0.0).map(|d| (r.latency.p99_us / d.p99_us, d.p99_us)))
                .collect()
        };
        let ratios: Vec<f64> = per_rep(|r| r.disk.as_ref()).iter().map(|a| a.0).collect();
        let ratio = (!ratios.is_empty()).then(|| median(&ratios));
        let also = |refs: Vec<(f64, f64)>, what: &str| {
            if refs.is_empty() {
                String::new()
            } else {
                format!(
                    "; {:.2}x {what} ({:.0} us)",
                    median(&refs.iter().map(|a| a.0).collect::<Vec<_>>()),
                    median(&refs.iter().map(|a| a.1).collect::<Vec<_>>())
                )
            }
        };
        let alt_note = also(per_rep(|r| r.alt_disk.as_ref()), "fio's fdatasync p99 over a written file")
            + &also(per_rep(|r| r.dsync_disk.as_ref()), "fio's O_DSYNC write p99 there, seglog's own operation")
            + &if p.write_p99_us > 0.0 {
                format!("; the write itself p50 {:.0} us, p99 {:.0} us", p.write_p50_us, p.write_p99_us)
            } else {
                String::new()
            };
        out.push(Target {
            name: format!(
                "durable append p99 (every-batch, {} B, one in flight, zero fill {})",
                plan.setup.batch_bytes, plan.setup.zero_fill
            ),
            target: "<= 1.5x fio's fdatasync p99".into(),
            measured: format!("p99 {:.0} us ({:.2}x fio fdatasync p99{alt_note})", p.p99_us, ratio.unwrap_or(0.0)),
            disk: format!("fdatasync p99 {:.0} us [{}]", p.disk_p99_us, p.disk_job),
            met: ratio.map(|r| r <= 1.5),
        });
    }
    if let Some(p) = find(s, "tail", "seglog", "direct") {
        let inner = find(s, "tail-in-shard", "seglog", "direct")
            .map_or(String::new(), |i| format!("; Log::read in the shard p99 {:.2} us", i.p99_us));
        out.push(Target {
            name: "tail fetch from memory (engine round trip)".into(),
            target: "p99 < 10 us".into(),
            measured: format!("p50 {:.1} us, p99 {:.1} us{inner}", p.p50_us, p.p99_us),
            disk: "n/a (no I/O)".into(),
            met: Some(p.p99_us < 10.0),
        });
    }
    if let Some(p) = find(s, "lookup-warm", "seglog", "direct") {
        out.push(Target {
            name: "warm offset lookup (index search + in-memory header walk, in the shard)".into(),
            target: "p50 < 200 ns".into(),
            measured: format!("p50 {:.0} ns, p99 {:.0} ns", p.p50_us * 1000.0, p.p99_us * 1000.0),
            disk: "n/a (no I/O)".into(),
            met: Some(p.p50_us * 1000.0 < 200.0),
        });
    }
    for p in s.iter().filter(|x| x.workload == "recovery" && x.system == "seglog") {
        out.push(Target {
            name: format!("crash recovery ({}, cold): .log MB revalidated per second", p.mode),
            target: ">= 80% of fio seq read of the same .log files (bs=1m qd=1)".into(),
            measured: format!("{:.0} MB/s ({:.0}% of fio)", p.mb_per_s, 100.0 * p.ratio_to_disk.unwrap_or(0.0)),
            disk: format!("{:.0} MB/s [{}]", p.disk_mb_per_s, p.disk_job),
            met: p.ratio_to_disk.map(|r| r >= 0.8),
        });
    }
    for p in s.iter().filter(|x| x.workload == "open" && x.system == "seglog") {
        out.push(Target {
            name: format!("clean open of {} segments ({})", plan.open.segments(), p.mode),
            target: "measured (no target set)".into(),
            measured: format!("{:.2} s median, {:.0} segments/s", p.p50_us / 1e6, p.records_per_s),
            disk: "page cache of every file dropped".into(),
            met: None,
        });
    }
    if let Some(p) = find(s, "lag", "seglog", "direct") {
        out.push(Target {
            name: "catch-up read of sealed segments (direct)".into(),
            target: ">= 80% of fio seq O_DIRECT read".into(),
            measured: format!("{:.0} MB/s ({:.0}% of fio)", p.mb_per_s, 100.0 * p.ratio_to_disk.unwrap_or(0.0)),
            disk: format!("{:.0} MB/s [{}]", p.disk_mb_per_s, p.disk_job),
            met: p.ratio_to_disk.map(|r| r >= 0.8),
        });
    }
    out.extend(log_targets(s, plan));
    out
}

/// The log workload's targets (issue 15), each against another row of the same run: direct
/// appends against the Kafka reference, buffered appends against sync ones, warm point lookups
/// against commitlog's, and the cold lookups reported against the references (no number: the
/// issue asks for no worse than before).
fn log_targets(s: &[Summary], plan: &Plan) -> Vec<Target> {
    use crate::workload::log::{APPEND, COLD, WARM};
    if !plan.runs("log") {
        return Vec::new();
    }
    let mut out = Vec::new();
    let seglog = |w: &str, mode: &str| find(s, w, "seglog", mode);
    let reference = |w: &str, system: &str| find(s, w, system, "page cache");
    let what = format!(
        "{} records, {} B batches of {}, one caller",
        plan.log_records, plan.setup.batch_bytes, plan.setup.records_per_batch
    );
    let against = "n/a (a row of the same run)".to_string();
    let not_run = |name: String, target: &str, why: &str| Target {
        name,
        target: target.into(),
        measured: format!("not measured: {why}"),
        disk: against.clone(),
        met: None,
    };
    // Appends: seglog direct over the Kafka reference, buffered over sync (MB/s).
    let target = ">= 1.0x the Kafka reference's MB/s";
    let name = format!("Log direct appends vs the Kafka reference ({what})");
    match (seglog(APPEND, "direct"), reference(APPEND, "kafka-ref")) {
        (Some(d), Some(k)) if k.mb_per_s > 0.0 => out.push(Target {
            name,
            target: target.into(),
            measured: format!("{:.0} MB/s vs {:.0} MB/s = {:.2}x", d.mb_per_s, k.mb_per_s, d.mb_per_s / k.mb_per_s),
            disk: against.clone(),
            met: Some(d.mb_per_s >= k.mb_per_s),
        }),
        _ => out.push(not_run(name, target, "needs direct mode (io_uring) and the Kafka reference")),
    }
    let target = ">= 0.95x sync's MB/s";
    let name = format!("Log buffered appends vs sync ({what})");
    match (seglog(APPEND, "buffered"), seglog(APPEND, "sync")) {
        (Some(b), Some(y)) if y.mb_per_s > 0.0 => out.push(Target {
            name,
            target: target.into(),
            measured: format!("{:.0} MB/s vs {:.0} MB/s = {:.2}x", b.mb_per_s, y.mb_per_s, b.mb_per_s / y.mb_per_s),
            disk: against.clone(),
            met: Some(b.mb_per_s >= 0.95 * y.mb_per_s),
        }),
        _ => out.push(not_run(name, target, "needs buffered and sync in --modes")),
    }
    // Warm point lookups through the page cache against commitlog's dense index (p50).
    for mode in ["buffered", "sync"] {
        let target = "p50 <= 1.5x commitlog's";
        let name = format!("Log warm point lookup, {mode}");
        match (seglog(WARM, mode), reference(WARM, "commitlog")) {
            (Some(x), Some(c)) if c.p50_us > 0.0 => out.push(Target {
                name,
                target: target.into(),
                measured: format!(
                    "p50 {:.1} us (p99 {:.1}) vs {:.1} us = {:.2}x",
                    x.p50_us,
                    x.p99_us,
                    c.p50_us,
                    x.p50_us / c.p50_us
                ),
                disk: against.clone(),
                met: Some(x.p50_us <= 1.5 * c.p50_us),
            }),
            _ => out.push(not_run(name, target, &format!("needs {mode} in --modes and commitlog"))),
        }
    }
    // Cold point lookups: reported against the references.
    for x in s.iter().filter(|x| x.workload == COLD && x.system == "seglog") {
        let vs: Vec<String> = ["kafka-ref", "commitlog"]
            .iter()
            .filter_map(|sys| reference(COLD, sys).filter(|r| r.p50_us > 0.0).map(|r| (sys, r)))
            .map(|(sys, r)| format!("{sys} {:.1} us = {:.2}x", r.p50_us, x.p50_us / r.p50_us))
            .collect();
        out.push(Target {
            name: format!("Log cold point lookup, {}", x.mode),
            target: "reported against the references (the issue: no worse than before)".into(),
            measured: format!("p50 {:.1} us (p99 {:.1}); {}", x.p50_us, x.p99_us, vs.join(", ")),
            disk: against.clone(),
            met: None,
        });
    }
    // Producer state (issue 18), each mode against a row of the same run: idempotent appends
    // against the plain pass run right before them, read-committed catch-up against
    // read-uncommitted, and the cost of the producers' snapshot at a roll.
    let seglog_modes: Vec<&Summary> = s.iter().filter(|x| x.system == "seglog" && x.workload == APPEND).collect();
    for m in seglog_modes {
        let mode = m.mode.as_str();
        let pairs = [
            (log::APPEND_IDEMPOTENT, log::APPEND_PLAIN, "idempotent appends vs plain", 0.95),
            (
                log::CATCHUP_COMMITTED,
                log::CATCHUP_UNCOMMITTED,
                "read-committed catch-up vs uncommitted (1 % aborted)",
                0.9,
            ),
        ];
        for (ours, theirs, what, min) in pairs {
            if let (Some(a), Some(b)) = (seglog(ours, mode), seglog(theirs, mode)) {
                let ratio = if b.mb_per_s > 0.0 { a.mb_per_s / b.mb_per_s } else { 0.0 };
                out.push(Target {
                    name: format!("Log {what}, {mode}"),
                    target: format!(">= {min}x MB/s"),
                    measured: format!(
                        "{:.0} MB/s vs {:.0} MB/s = {ratio:.2}x; p50 {:.1} us vs {:.1} us",
                        a.mb_per_s, b.mb_per_s, a.p50_us, b.p50_us
                    ),
                    disk: against.clone(),
                    met: Some(ratio >= min),
                });
            }
        }
        if let (Some(a), Some(b)) = (seglog(log::ROLL_WITH_PRODUCERS, mode), seglog(log::ROLL, mode)) {
            out.push(Target {
                name: format!("Log roll with producers' snapshot, {mode}"),
                target: "reported (the snapshot's cost at a roll)".into(),
                measured: format!(
                    "p50 {:.0} us (p99 {:.0}) vs {:.0} us (p99 {:.0}) without producers",
                    a.p50_us, a.p99_us, b.p50_us, b.p99_us
                ),
                disk: against.clone(),
                met: None,
            });
        }
    }
    out
}

/// seglog against a reference design on one workload.
#[derive(Clone, Debug, serde::Serialize)]
pub struct RefRatio {
    pub workload: String,
    pub seglog_mode: String,
    pub reference: String,
    /// "MB/s" (higher is better) or "p50 us" / "p99 us" (lower is better).
    pub figure: String,
    pub seglog: f64,
    pub other: f64,
    /// seglog / reference.
    pub ratio: f64,
}

fn ref_ratios(s: &[Summary]) -> Vec<RefRatio> {
    let mut out = Vec::new();
    let pairs: &[(&str, &str, &str)] = &[
        ("produce", "produce", "MB/s"),
        ("durable", "durable", "p99 us"),
        ("lag", "lag", "MB/s"),
        ("lag", "lag-cold", "MB/s"),
        ("seek", "seek", "p50 us"),
        ("time", "time", "p50 us"),
        (log::APPEND, log::APPEND, "MB/s"),
        (log::WARM, log::WARM, "p50 us"),
        (log::COLD, log::COLD, "p50 us"),
    ];
    for &(ours, theirs, figure) in pairs {
        for sg in s.iter().filter(|x| x.system == "seglog" && x.workload == ours) {
            for other in s.iter().filter(|x| x.system != "seglog" && x.workload == theirs) {
                let f = |x: &Summary| match figure {
                    "MB/s" => x.mb_per_s,
                    "p99 us" => x.p99_us,
                    _ => x.p50_us,
                };
                let (a, b) = (f(sg), f(other));
                if b > 0.0 {
                    out.push(RefRatio {
                        workload: if ours == theirs { ours.into() } else { format!("{ours} vs {theirs}") },
                        seglog_mode: sg.mode.clone(),
                        reference: other.system.clone(),
                        figure: figure.into(),
                        seglog: a,
                        other: b,
                        ratio: a / b,
                    });
                }
            }
        }
    }
    out
}

/// Crash recovery of one mode: medians over the repetitions.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct RecoverySummary {
    pub mode: String,
    pub reps: usize,
    /// `.log` bytes revalidated per run.
    pub log_bytes: u64,
    pub segments: u64,
    /// Engine open plus partition opens, every segment revalidated.
    pub seconds: f64,
    /// `.log` bytes revalidated / seconds.
    pub mb_per_s: f64,
    /// fio's sequential read of the same `.log` files, right after.
    pub disk_job: String,
    pub disk_mb_per_s: f64,
    /// Median of the per-repetition ratios.
    pub ratio_to_disk: Option<f64>,
    /// I/O operations (reads and the index writes) per MB revalidated.
    pub ios_per_mb: f64,
    /// Bytes per recovery read (`SEGLOG_RECOVERY_READ_BYTES` overrides it).
    pub read_window_bytes: usize,
}

fn recovery_summaries(runs: &[RunReport], summary: &[Summary]) -> Vec<RecoverySummary> {
    summary
        .iter()
        .filter(|x| x.workload == "recovery" && x.system == "seglog")
        .map(|x| {
            let g: Vec<&RunReport> =
                runs.iter().filter(|r| r.workload == "recovery" && r.system == "seglog" && r.mode == x.mode).collect();
            let m = |f: &dyn Fn(&RunReport) -> f64| median(&g.iter().map(|r| f(r)).collect::<Vec<_>>());
            RecoverySummary {
                mode: x.mode.clone(),
                reps: g.len(),
                log_bytes: m(&|r| r.bytes as f64) as u64,
                segments: m(&|r| r.ops as f64) as u64,
                seconds: m(&|r| r.seconds),
                mb_per_s: x.mb_per_s,
                disk_job: x.disk_job.clone(),
                disk_mb_per_s: x.disk_mb_per_s,
                ratio_to_disk: x.ratio_to_disk,
                ios_per_mb: m(&recovery::ios_per_mb),
                read_window_bytes: seglog::segment::recovery_read_bytes(),
            }
        })
        .collect()
}

/// Clean open of one mode: medians over every timed open.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct OpenSummary {
    pub mode: String,
    pub partitions: usize,
    pub segments: usize,
    /// Timed opens (repetitions x open reps).
    pub opens: usize,
    pub median_seconds: f64,
    pub min_seconds: f64,
    pub max_seconds: f64,
    /// Segments / median seconds.
    pub segments_per_s: f64,
    /// Writing the directory (once per benchmark, not timed against anything).
    pub write_seconds: f64,
}

fn open_summaries(runs: &[RunReport], plan: &Plan, write_seconds: f64) -> Vec<OpenSummary> {
    let mut modes: Vec<String> = Vec::new();
    for r in runs.iter().filter(|r| r.workload == "open" && r.system == "seglog") {
        if !modes.contains(&r.mode) {
            modes.push(r.mode.clone());
        }
    }
    modes
        .into_iter()
        .map(|mode| {
            let t: Vec<f64> = runs
                .iter()
                .filter(|r| r.workload == "open" && r.system == "seglog" && r.mode == mode)
                .map(|r| r.seconds)
                .collect();
            let med = median(&t);
            OpenSummary {
                mode,
                partitions: plan.open.partitions,
                segments: plan.open.segments(),
                opens: t.len(),
                median_seconds: med,
                min_seconds: t.iter().copied().fold(f64::INFINITY, f64::min),
                max_seconds: t.iter().copied().fold(0.0, f64::max),
                segments_per_s: plan.open.segments() as f64 / med.max(1e-9),
                write_seconds,
            }
        })
        .collect()
}

/// Everything a run produced (the `--json` document).
#[derive(Debug, serde::Serialize)]
pub struct Results {
    pub machine: Machine,
    pub plan: Plan,
    pub summary: Vec<Summary>,
    pub targets: Vec<Target>,
    pub references: Vec<RefRatio>,
    pub intervals: Vec<IntervalPoint>,
    /// Crash recovery against fio's sequential read of the same files, per mode (medians).
    pub recovery: Vec<RecoverySummary>,
    /// Clean open of many segments, per mode (medians).
    pub open: Vec<OpenSummary>,
    /// The durable sweep's points (medians over the repetitions) and each repetition of each.
    pub durable_sweep: Vec<SweepPoint>,
    pub durable_sweep_runs: Vec<SweepRun>,
    /// The many-partitions sweep's points (medians) and each repetition of each.
    pub partitions_sweep: Vec<PartitionsPoint>,
    pub partitions_sweep_runs: Vec<PartitionsRun>,
    pub runs: Vec<RunReport>,
    pub skipped: Vec<String>,
    /// Wall time of each step (seglog runs and the fio runs beside them), in order.
    pub steps: Vec<(String, f64)>,
    pub seconds: f64,
}

struct Bars {
    bar: ProgressBar,
    /// (step, seconds) of every step, in order.
    steps: std::cell::RefCell<Vec<(String, f64)>>,
    current: std::cell::RefCell<Option<(String, Instant)>>,
}

impl Bars {
    fn new(steps: u64) -> Bars {
        let bar = ProgressBar::new(steps);
        if std::io::stderr().is_terminal() {
            bar.set_draw_target(ProgressDrawTarget::stderr());
            if let Ok(st) = ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} {msg}") {
                bar.set_style(st.progress_chars("=> "));
            }
        } else {
            bar.set_draw_target(ProgressDrawTarget::hidden());
        }
        Bars { bar, steps: Default::default(), current: Default::default() }
    }
    fn step(&self, msg: String) {
        self.close_step();
        *self.current.borrow_mut() = Some((msg.clone(), Instant::now()));
        self.bar.set_message(msg);
    }
    fn close_step(&self) {
        if let Some((name, t)) = self.current.borrow_mut().take() {
            self.steps.borrow_mut().push((name, t.elapsed().as_secs_f64()));
        }
    }
    fn done(&self) {
        self.bar.inc(1);
    }
    fn bytes(&self, what: &str, n: u64) {
        self.bar.set_message(format!("{what} {} MB", n / 1_000_000));
    }
}

/// Which of a fio job's latencies a disk reference carries.
#[derive(Clone, Copy)]
enum FioLat {
    /// Completion latency of its reads or writes.
    Completion,
    /// Its fdatasyncs.
    Sync,
    /// Whole latency of its reads or writes, submission included (as seglog's figures are).
    Whole,
}

fn disk(job: String, f: &FioResult, which: FioLat) -> DiskRef {
    let (p50_us, p99_us, p999_us) = match which {
        FioLat::Completion => (f.clat_p50_us, f.clat_p99_us, f.clat_p999_us),
        FioLat::Sync => (f.sync_p50_us, f.sync_p99_us, f.sync_p999_us),
        FioLat::Whole => (f.lat_p50_us, f.lat_p99_us, f.lat_p999_us),
    };
    DiskRef { job, mb_per_s: f.mb_per_s, p50_us, p99_us, p999_us }
}

/// Runs fio's sequential write at the block size a produce run reached (its average write,
/// rounded to 4 KiB) and queue depth 1 (a shard waits for its write before the next turn), O_DIRECT
/// for direct mode and through the page cache otherwise, and attaches it to the run.
fn attach_write_fio(r: &mut RunReport, dir: &Path, mode: IoMode, skipped: &mut Vec<String>) {
    let bs = ((r.avg_write_bytes / 4096.0).round().max(1.0) as u64) * 4096;
    let direct = mode == IoMode::Direct;
    match fio::seq_write(dir, bs, 1, r.bytes, direct, 0) {
        Ok(f) => {
            r.disk = Some(disk(
                format!("seq write {} bs={bs} qd=1", if direct { "O_DIRECT" } else { "buffered" }),
                &f,
                FioLat::Completion,
            ))
        }
        Err(e) => warn(skipped, format!("fio seq write: {e}")),
    }
}

/// fio's references for the durable workload (see [`durable_fio`]).
#[derive(Default)]
struct DurableRefs {
    fdatasync: Option<DiskRef>,
    fdatasync_written: Option<DiskRef>,
    dsync_written: Option<DiskRef>,
}

/// fio's side of the durable workload, `appends` writes of `bs` bytes at queue depth 1 in
/// each job: the data write of each durable append is one batch (the index writes beside it are
/// small and go to other files).
fn durable_fio(dir: &Path, bs: u64, appends: u64, mode: IoMode, skipped: &mut Vec<String>) -> DurableRefs {
    use fio::{FioLayout, FioSync};
    let direct = mode == IoMode::Direct;
    let how = if direct { "O_DIRECT" } else { "buffered" };
    let mut job = |sync: FioSync, layout: FioLayout, what: &str, lat: FioLat| {
        let name = format!("seq write {how} bs={bs} qd=1 {what}");
        match fio::seq_write_as(dir, bs, 1, appends * bs, direct, sync, layout) {
            Ok(f) => Some(disk(name, &f, lat)),
            Err(e) => {
                warn(skipped, format!("fio {name}: {e}"));
                None
            }
        }
    };
    DurableRefs {
        // fio's default layout (a fallocated file): each fdatasync also commits the extents the
        // writes converted.
        fdatasync: job(FioSync::Fdatasync(1), FioLayout::Fallocate, "+ fdatasync each", FioLat::Sync),
        // Over a file written beforehand: no allocation to commit, the fdatasync is a cache
        // flush (what seglog's zero fill gives its appends).
        fdatasync_written: job(
            FioSync::Fdatasync(1),
            FioLayout::Written,
            "+ fdatasync each, over a written file",
            FioLat::Sync,
        ),
        // seglog's own operation: a write that is durable on completion (RWF_DSYNC; a device
        // write then a cache flush on a disk without FUA), over written blocks. fio's whole
        // latency, submission included, as seglog's is.
        dsync_written: job(FioSync::Dsync, FioLayout::Written, "O_DSYNC, over a written file", FioLat::Whole),
    }
}

/// [`fio::settle`], a failure noted among the skipped steps.
fn settle(dir: &Path, skipped: &mut Vec<String>) {
    if let Err(e) = fio::settle(dir) {
        warn(skipped, e);
    }
}

/// The fio read file: written once, read by every read job of the run.
struct ReadFile {
    path: PathBuf,
    size: u64,
}

impl Drop for ReadFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

fn warn(skipped: &mut Vec<String>, what: String) {
    eprintln!("seglog bench: {what}");
    skipped.push(what);
}

type BenchResult<T> = Result<T, Box<dyn std::error::Error>>;

/// A workload's error from another thread, as the driver's.
fn unsend(e: Box<dyn std::error::Error + Send + Sync>) -> Box<dyn std::error::Error> {
    e
}

impl ReadFile {
    /// The read file when the catch-up or seek workload runs beside fio: as large as the largest
    /// catch-up read (recovery reads its own files). One step of the progress bar either way.
    fn for_plan(base: &Path, plan: &Plan, use_fio: bool, bars: &Bars) -> BenchResult<Option<ReadFile>> {
        let rf = if use_fio && (plan.runs("lag") || plan.runs("seek")) {
            bars.step("fio: laying out the read file".into());
            Some(ReadFile::lay_out(base, plan.produce_bytes.max(64 << 20))?)
        } else {
            None
        };
        bars.done();
        Ok(rf)
    }

    /// Lays the file out with fio (through io_uring, or fio's default engine where io_uring is
    /// refused).
    fn lay_out(dir: &Path, size: u64) -> BenchResult<ReadFile> {
        let rf = ReadFile { path: dir.join("fio-read.dat"), size };
        let mut args = vec![
            "--name=layout".to_string(),
            format!("--filename={}", rf.path.display()),
            "--rw=write".into(),
            "--bs=1m".into(),
            format!("--size={}", rf.size),
            "--direct=1".into(),
            "--ioengine=io_uring".into(),
            "--iodepth=4".into(),
            "--output-format=json".into(),
        ];
        if let Err(e) = fio::run(&args) {
            args.retain(|x| !x.starts_with("--ioengine"));
            fio::run(&args).map_err(|e2| format!("fio layout: {e}; {e2}"))?;
        }
        Ok(rf)
    }
}

/// The clean-open directory, if the clean-open workload runs: written once, opened cleanly in
/// every repetition and mode.
fn write_open_dir(base: &Path, plan: &Plan, bars: &Bars) -> BenchResult<(Option<tempfile::TempDir>, open::Written)> {
    if !plan.runs("open") {
        return Ok((None, open::Written::default()));
    }
    bars.step(format!("open: writing {} segments", plan.open.segments()));
    let d = tempfile::tempdir_in(base)?;
    let written = open::write(d.path(), &plan.open, &plan.setup)?;
    bars.done();
    Ok((Some(d), written))
}

/// Whether fio can run; why not is noted among the skipped steps.
fn fio_available(skipped: &mut Vec<String>) -> bool {
    match fio::ensure_fio() {
        Ok(()) => true,
        Err(e) => {
            warn(skipped, format!("fio unavailable ({e}): no ratios to the disk"));
            false
        }
    }
}

/// Runs the benchmark: what every repetition shares (fio's read file, the clean-open
/// directory), then per repetition each I/O mode's workloads and the reference designs, then the
/// interval sweep; then the summaries and the output.
pub fn run(a: Args) -> Result<Results, Box<dyn std::error::Error>> {
    let plan = Plan::from_args(&a);
    let started = Instant::now();
    std::fs::create_dir_all(&a.dir)?;
    let mut machine = Machine::probe(&a.dir);
    if machine.filesystem == "tmpfs" {
        return Err(format!(
            "{} is on tmpfs: O_DIRECT and fio figures would be meaningless; use --dir on a disk",
            a.dir.display()
        )
        .into());
    }
    let mut skipped = Vec::new();
    let use_fio = plan.fio && fio_available(&mut skipped);
    let bars = Bars::new(plan.steps());
    let read_file = ReadFile::for_plan(&a.dir, &plan, use_fio, &bars)?;
    let (open_dir, open_written) = write_open_dir(&a.dir, &plan, &bars)?;
    let mut d = Driver {
        args: &a,
        plan: &plan,
        bars,
        use_fio,
        read_file: read_file.as_ref(),
        open_dir: open_dir.as_ref().map(|d| d.path()),
        skipped,
        runs: Vec::new(),
        sweep_runs: Vec::new(),
        partitions_runs: Vec::new(),
    };
    for rep in 0..plan.reps {
        for &mode in &plan.modes() {
            d.mode(rep, mode)?;
        }
        if plan.runs("refs") {
            d.kafka_reference(rep)?;
            d.commitlog_reference(rep)?;
        }
        if plan.runs("log") {
            d.log_references(rep)?;
        }
    }
    let intervals = if plan.runs("interval") { d.intervals()? } else { Vec::new() };
    let Driver { bars, skipped, runs, sweep_runs, partitions_runs, .. } = d;
    bars.close_step();
    bars.bar.finish_and_clear();

    machine.load_after = load();
    let summary = summarize(&runs);
    let targets = targets(&summary, &runs, &plan);
    let references = ref_ratios(&summary);
    let recovery = recovery_summaries(&runs, &summary);
    let open = open_summaries(&runs, &plan, open_written.seconds);
    let durable_sweep = sweep::summarize(&sweep_runs);
    let partitions_sweep = partitions::summarize(&partitions_runs);
    drop(open_dir);
    let results = Results {
        machine,
        plan,
        summary,
        targets,
        references,
        intervals,
        recovery,
        open,
        durable_sweep,
        durable_sweep_runs: sweep_runs,
        partitions_sweep,
        partitions_sweep_runs: partitions_runs,
        runs,
        skipped,
        steps: bars.steps.take(),
        seconds: started.elapsed().as_secs_f64(),
    };
    output(&a, &results)?;
    Ok(results)
}

/// Writes the charts (`--plot`), and the table and the JSON document (`--json`).
fn output(a: &Args, results: &Results) -> BenchResult<()> {
    if let Some(dir) = &a.plot {
        let written = plots(dir, results)?;
        eprintln!("charts: {}", written.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", "));
    }
    let table = render(results);
    if a.json {
        eprint!("{table}");
        println!("{}", serde_json::to_string_pretty(results)?);
    } else {
        print!("{table}");
    }
    Ok(())
}

/// What the phases of a run share: the plan, the progress bars, fio's read file and the
/// clean-open directory; and what they add up (the runs, the steps skipped).
struct Driver<'a> {
    args: &'a Args,
    plan: &'a Plan,
    bars: Bars,
    use_fio: bool,
    read_file: Option<&'a ReadFile>,
    open_dir: Option<&'a Path>,
    skipped: Vec<String>,
    runs: Vec<RunReport>,
    /// The durable sweep's runs (apart from `runs`: a point is a row of the sweep's own table).
    sweep_runs: Vec<SweepRun>,
    /// The many-partitions sweep's runs.
    partitions_runs: Vec<PartitionsRun>,
}

impl Driver<'_> {
    /// One repetition in one I/O mode: on one engine, the produce run and the workloads that
    /// read what it wrote; then crash recovery of that directory, the clean opens, the durable
    /// appends and the window sweep, each on its own.
    fn mode(&mut self, rep: usize, mode: IoMode) -> BenchResult<()> {
        let plan = self.plan;
        let tag = format!("rep {}/{} {}", rep + 1, plan.reps, mode.name());
        let setup = Setup { mode, ..plan.setup.clone() };
        let dir = tempfile::tempdir_in(&self.args.dir)?;
        let (engine, tps) = setup.open(dir.path())?;
        let produced = self.produce(&tag, &engine, &tps, &setup)?;
        if plan.runs("tail") {
            self.tail(&tag, &engine, &tps, &setup)?;
        }
        if plan.runs("lookup") {
            self.bars.step(format!("{tag}: warm lookups"));
            self.runs.push(consume::lookup_warm(&engine, &tps, &setup, plan.lookups, self.args.seed)?);
            self.bars.done();
        }
        if plan.runs("lag") {
            self.catch_up(&tag, &engine, &tps, &setup, dir.path())?;
        }
        if plan.runs("seek") {
            self.seeks(&tag, rep, &engine, &tps, &setup)?;
        }
        if plan.runs("time") {
            self.bars.step(format!("{tag}: time lookups"));
            self.runs.push(consume::time_lookups(&engine, &tps, &setup, &produced, plan.time_lookups, self.args.seed)?);
            self.bars.done();
        }
        if plan.runs("mixed") {
            self.mixed(&tag, &engine, &tps, &setup)?;
        }
        engine.shutdown()?;
        if plan.runs("recovery") {
            self.recovery(&tag, dir.path(), &setup)?;
        }
        drop(dir);
        if let Some(d) = self.open_dir {
            self.bars.step(format!("{tag}: clean open of {} segments", plan.open.segments()));
            for _ in 0..plan.open_reps {
                self.runs.push(open::run(d, &plan.open, &plan.setup, mode)?);
            }
            self.bars.done();
        }
        if plan.runs("durable") {
            self.durable(&tag, rep, &setup)?;
        }
        if plan.runs(sweep::WORKLOAD) {
            self.durable_sweep(&tag, rep, &setup)?;
        }
        if plan.runs(partitions::WORKLOAD) {
            self.partitions_sweep(&tag, rep, &setup)?;
        }
        if plan.runs("produce") {
            for &w in &plan.sweep_windows {
                self.produce_window(&tag, &setup, w)?;
            }
        }
        if plan.runs("log") {
            self.log(&tag, &setup)?;
        }
        Ok(())
    }

    /// The log workload's parameters.
    fn log_params(&self) -> LogParams {
        LogParams { records: self.plan.log_records, lookups: self.plan.log_lookups, seed: self.args.seed }
    }

    /// The log workload in one mode: the standalone `Log` on a fresh directory.
    fn log(&mut self, tag: &str, setup: &Setup) -> BenchResult<()> {
        self.bars.step(format!("{tag}: Log appends and point lookups"));
        let dir = tempfile::tempdir_in(&self.args.dir)?;
        self.runs.extend(log::run(dir.path(), setup, &self.log_params()).map_err(unsend)?);
        self.bars.done();
        Ok(())
    }

    /// The log workload's references on the same batches: Kafka's design and commitlog, each on
    /// a fresh directory.
    fn log_references(&mut self, rep: usize) -> BenchResult<()> {
        let plan = self.plan;
        self.bars.step(format!("rep {}/{}: log workload, Kafka reference and commitlog", rep + 1, plan.reps));
        let p = self.log_params();
        let dir = tempfile::tempdir_in(&self.args.dir)?;
        self.runs.extend(log::kafka_reference(dir.path(), &plan.setup, &p).map_err(unsend)?);
        drop(dir);
        let dir = tempfile::tempdir_in(&self.args.dir)?;
        match log::commitlog_reference(dir.path(), &plan.setup, &p) {
            Ok(v) => self.runs.extend(v),
            Err(e) => warn(&mut self.skipped, format!("commitlog (log workload): {e}")),
        }
        self.bars.done();
        Ok(())
    }

    /// fio's read of `size` bytes of the read file (none when there is no read file or fio
    /// fails).
    fn fio_read(&self, rw: &str, bs: u64, size: u64, runtime: u32) -> Option<FioResult> {
        let rf = self.read_file?;
        fio::read_file(&rf.path, rw, bs, 1, size.min(rf.size).max(bs), runtime).ok()
    }

    /// The produce run, with fio's write beside it: reported when produce is asked for, and run
    /// as well whenever a workload reads what it writes.
    fn produce(&mut self, tag: &str, engine: &Engine, tps: &[TopicPartition], setup: &Setup) -> BenchResult<Produced> {
        let plan = self.plan;
        let readers = ["tail", "lookup", "lag", "seek", "time", "mixed", "recovery"];
        if !plan.runs("produce") && !readers.iter().any(|w| plan.runs(w)) {
            return Ok(Produced::default());
        }
        self.bars.step(format!("{tag}: produce"));
        let pp = ProduceParams {
            total_bytes: plan.produce_bytes,
            window: plan.window,
            rate: plan.rate,
            max_seconds: 0.0,
            pin_client: plan.pin_client,
        };
        let msg = format!("{tag}: produce");
        let (mut r, produced) = produce::run(engine, tps, setup, &pp, "produce", &|n| self.bars.bytes(&msg, n))?;
        if plan.runs("produce") {
            if self.use_fio {
                self.bars.step(format!("{tag}: fio write"));
                attach_write_fio(&mut r, &self.args.dir, setup.mode, &mut self.skipped);
            }
            self.runs.push(r);
            self.bars.done();
        }
        Ok(produced)
    }

    /// Tail fetches, through the engine's API and inside the shard.
    fn tail(&mut self, tag: &str, engine: &Engine, tps: &[TopicPartition], setup: &Setup) -> BenchResult<()> {
        self.bars.step(format!("{tag}: tail fetches"));
        self.runs.push(consume::tail(engine, tps, setup, self.plan.tail_fetches)?);
        self.runs.push(consume::tail_in_shard(engine, tps, setup, self.plan.tail_fetches)?);
        self.bars.done();
        Ok(())
    }

    /// The catch-up read of the whole log (through the page cache: warm as the produce run left
    /// it, then cold), beside fio's sequential read.
    fn catch_up(
        &mut self,
        tag: &str,
        engine: &Engine,
        tps: &[TopicPartition],
        setup: &Setup,
        dir: &Path,
    ) -> BenchResult<()> {
        self.bars.step(format!("{tag}: catch-up read"));
        let msg = format!("{tag}: catch-up");
        let direct = setup.mode == IoMode::Direct;
        if !direct {
            let mut r = consume::catch_up(engine, tps, setup, 1 << 20, "lag", &|n| self.bars.bytes(&msg, n))?;
            r.note = format!("{}; warm page cache", r.note);
            self.runs.push(r);
            crate::workload::drop_cache(dir);
        }
        let name = if direct { "lag" } else { "lag-cold" };
        let mut r = consume::catch_up(engine, tps, setup, 1 << 20, name, &|n| self.bars.bytes(&msg, n))?;
        if self.use_fio {
            self.bars.step(format!("{tag}: fio seq read"));
            if let Some(f) = self.fio_read("read", 1 << 20, r.bytes, 0) {
                r.disk = Some(disk("seq read O_DIRECT bs=1m qd=1".into(), &f, FioLat::Completion));
            }
        }
        self.runs.push(r);
        self.bars.done();
        Ok(())
    }

    /// Seeks to random offsets, beside fio's 4 KiB random read.
    fn seeks(
        &mut self,
        tag: &str,
        rep: usize,
        engine: &Engine,
        tps: &[TopicPartition],
        setup: &Setup,
    ) -> BenchResult<()> {
        let plan = self.plan;
        self.bars.step(format!("{tag}: seeks"));
        let mut r = consume::seek(engine, tps, setup, plan.seeks, self.args.seed + rep as u64)?;
        if self.use_fio {
            self.bars.step(format!("{tag}: fio random read"));
            if let Some(f) = self.fio_read("randread", 4096, plan.produce_bytes, plan.random_read_seconds) {
                r.disk = Some(disk("rand read O_DIRECT bs=4k qd=1".into(), &f, FioLat::Completion));
            }
        }
        self.runs.push(r);
        self.bars.done();
        Ok(())
    }

    /// Producer and consumers at once.
    fn mixed(&mut self, tag: &str, engine: &Engine, tps: &[TopicPartition], setup: &Setup) -> BenchResult<()> {
        self.bars.step(format!("{tag}: mixed"));
        // Pace the producer at a quarter of the throughput the produce run reached, so that
        // the consumers have room; latency counts from each append's scheduled time.
        let base_rate = self
            .runs
            .iter()
            .rev()
            .find(|r| r.workload == "produce" && r.mode == engine.io_mode().name())
            .map_or(2000.0, |r| r.ops as f64 / r.seconds.max(1e-3));
        let mp = MixedParams {
            seconds: self.plan.mixed_seconds,
            rate: (base_rate / 4.0).max(100.0),
            window: self.plan.window,
            seed: self.args.seed,
        };
        self.runs.extend(mixed::run(engine, tps, setup, &mp)?);
        self.bars.done();
        Ok(())
    }

    /// Crash recovery of the directory the workloads wrote, beside fio's read of its `.log`
    /// files.
    fn recovery(&mut self, tag: &str, dir: &Path, setup: &Setup) -> BenchResult<()> {
        self.bars.step(format!("{tag}: crash and recovery"));
        let mut r = recovery::run(dir, setup)?;
        if self.use_fio {
            // The disk's sequential read of the very files just revalidated.
            self.bars.step(format!("{tag}: fio seq read of the recovered .log files"));
            match recovery::disk_read(dir, setup.mode) {
                Ok((f, job)) => r.disk = Some(disk(job, &f, FioLat::Completion)),
                Err(e) => warn(&mut self.skipped, format!("fio seq read of the .log files: {e}")),
            }
        }
        self.runs.push(r);
        self.bars.done();
        Ok(())
    }

    /// Durable appends (every batch, one in flight) on a fresh log, beside fio's write +
    /// fdatasync jobs; the two sides take turns at going first.
    fn durable(&mut self, tag: &str, rep: usize, setup: &Setup) -> BenchResult<()> {
        let plan = self.plan;
        let base = &self.args.dir;
        let (mode, use_fio) = (setup.mode, self.use_fio);
        let setup = Setup { durability: Durability::EveryBatch, ..setup.clone() };
        // Both sides start from a settled disk: the files deleted just before (the
        // workloads' directories) leave journal commits and, on a filesystem mounted
        // with `discard`, discards behind them, which the first flushes would wait for.
        // And they take turns at going first, so that neither always meets the disk
        // right after the other's writes.
        let fio_first = rep % 2 == 1;
        let mut refs = DurableRefs::default();
        if use_fio && fio_first {
            self.bars.step(format!("{tag}: fio write+fdatasync (before seglog in this repetition)"));
            settle(base, &mut self.skipped);
            refs = durable_fio(base, setup.batch_bytes as u64, plan.durable_appends, mode, &mut self.skipped);
        }
        self.bars.step(format!("{tag}: durable appends"));
        settle(base, &mut self.skipped);
        let dir = tempfile::tempdir_in(base)?;
        let (engine, tps) = setup.open(dir.path())?;
        let pp = ProduceParams {
            total_bytes: plan.durable_appends * setup.batch_bytes as u64,
            window: 1,
            rate: 0.0,
            max_seconds: 0.0,
            pin_client: plan.pin_client,
        };
        let (mut r, _) = produce::run(&engine, &tps[..1], &setup, &pp, "durable", &|_| {})?;
        // The summary row carries the first repetition's note: the order alternates.
        r.note = format!(
            "every-batch, one append in flight, {}; {}",
            if !use_fio {
                "no fio"
            } else if fio_first {
                "fio ran first in this repetition (the sides alternate)"
            } else {
                "seglog ran first in this repetition (the sides alternate)"
            },
            r.note
        );
        engine.shutdown()?;
        drop(dir);
        if use_fio && !fio_first {
            settle(base, &mut self.skipped);
            self.bars.step(format!("{tag}: fio write+fdatasync"));
            refs = durable_fio(base, setup.batch_bytes as u64, plan.durable_appends, mode, &mut self.skipped);
        }
        (r.disk, r.alt_disk, r.dsync_disk) = (refs.fdatasync, refs.fdatasync_written, refs.dsync_written);
        self.runs.push(r);
        self.bars.done();
        Ok(())
    }

    /// The durable sweep in one mode: each point on a fresh engine, then fio's equivalent job,
    /// each side after `sync -f` on the bench directory and, with `warmup`, right after an
    /// unmeasured run of its own (see [`sweep`]).
    fn durable_sweep(&mut self, tag: &str, rep: usize, setup: &Setup) -> BenchResult<()> {
        let plan = &self.plan.durable_sweep;
        let base = &self.args.dir;
        for point in plan.points(setup.mode) {
            let label = point.key.label();
            if plan.warmup {
                self.bars.step(format!("{tag}: durable sweep {label}, warm-up"));
                settle(base, &mut self.skipped);
                sweep::run_seglog(base, setup, &point, plan, self.plan.pin_client)?;
            }
            self.bars.step(format!("{tag}: durable sweep {label}"));
            settle(base, &mut self.skipped);
            let r = sweep::run_seglog(base, setup, &point, plan, self.plan.pin_client)?;
            let (mut fio, mut fio_written, mut fio_serial) = (None, None, None);
            if self.use_fio {
                let job = point.fio_job(&r, plan);
                let written = point.written_job(&job);
                let serial = point.serial_job(&job);
                // A warm-up that fails says why once; the point's fio jobs are then left out.
                let warmed = !plan.warmup || {
                    self.bars.step(format!("{tag}: durable sweep {label}, fio warm-up"));
                    settle(base, &mut self.skipped);
                    let r = sweep::run_fio(base, &job);
                    if let Err(e) = &r {
                        warn(&mut self.skipped, format!("fio, durable sweep {label}: {e}"));
                    }
                    r.is_ok()
                };
                if warmed {
                    let jobs = [
                        (Some(job), &mut fio, "fio"),
                        (written, &mut fio_written, "fio over written blocks"),
                        (serial, &mut fio_serial, "fio with one write in flight per file"),
                    ];
                    for (job, side, what) in jobs {
                        let Some(job) = job else { continue };
                        self.bars.step(format!("{tag}: durable sweep {label}, {what}"));
                        settle(base, &mut self.skipped);
                        match sweep::run_fio(base, &job) {
                            Ok(f) => *side = Some(f),
                            Err(e) => warn(&mut self.skipped, format!("{what}, durable sweep {label}: {e}")),
                        }
                    }
                }
            }
            self.sweep_runs.push(SweepRun {
                rep,
                key: point.key.clone(),
                lead_bytes: point.lead_bytes,
                engine_defaults: point.engine_defaults,
                seglog: r,
                fio,
                fio_written,
                fio_serial,
            });
            self.bars.done();
        }
        Ok(())
    }

    /// The many-partitions sweep in one mode: each point on a fresh engine, then fio's
    /// many-files job, each side after `sync -f` on the bench directory (see [`partitions`]).
    fn partitions_sweep(&mut self, tag: &str, rep: usize, setup: &Setup) -> BenchResult<()> {
        let plan = &self.plan.partitions_sweep;
        let base = &self.args.dir;
        for key in plan.points() {
            let label = format!("{} partitions, {}", key.partitions, key.skew.name());
            self.bars.step(format!("{tag}: partitions sweep {label}"));
            settle(base, &mut self.skipped);
            let side = partitions::run_seglog(base, setup, &key, plan, self.plan.pin_client)?;
            let (mut fio, mut fio_job, mut fio_same) = (None, None, None);
            if self.use_fio {
                let job = ManyFilesWrite::beside(&side.report, &key, plan);
                self.bars.step(format!("{tag}: partitions sweep {label}, fio"));
                settle(base, &mut self.skipped);
                match job.run(base) {
                    Ok(f) => fio = Some(f),
                    Err(e) => warn(&mut self.skipped, format!("fio, partitions sweep {label}: {e}")),
                }
                fio_job = Some(job.describe());
                if let Some(same) = job.same_pattern(&side.report, setup.segment_bytes as u64) {
                    self.bars.step(format!("{tag}: partitions sweep {label}, fio with seglog's writes"));
                    settle(base, &mut self.skipped);
                    match same.run(base) {
                        Ok(mut f) => {
                            f.mb_per_s *= same.useful_share();
                            fio_same = Some(f);
                        }
                        Err(e) => {
                            warn(&mut self.skipped, format!("fio, partitions sweep {label}, seglog's writes: {e}"))
                        }
                    }
                }
            }
            self.partitions_runs.push(PartitionsRun { rep, key, seglog: side, fio_job, fio, fio_same });
            self.bars.done();
        }
        Ok(())
    }

    /// An extra produce run at `window` appends in flight, on a fresh log, beside fio's write
    /// at the size it reached.
    fn produce_window(&mut self, tag: &str, setup: &Setup, window: usize) -> BenchResult<()> {
        let plan = self.plan;
        self.bars.step(format!("{tag}: produce, window {window}"));
        let dir = tempfile::tempdir_in(&self.args.dir)?;
        let (engine, tps) = setup.open(dir.path())?;
        let pp = ProduceParams {
            total_bytes: plan.produce_bytes / 2,
            window,
            rate: plan.rate,
            max_seconds: 0.0,
            pin_client: plan.pin_client,
        };
        let (mut r, _) = produce::run(&engine, &tps, setup, &pp, &format!("produce-w{window}"), &|_| {})?;
        engine.shutdown()?;
        drop(dir);
        if self.use_fio {
            self.bars.step(format!("{tag}: fio write, window {window}"));
            attach_write_fio(&mut r, &self.args.dir, setup.mode, &mut self.skipped);
        }
        self.runs.push(r);
        self.bars.done();
        Ok(())
    }

    /// Kafka's design (page cache, mmap'd index) on the same batches: produce, catch-up (warm
    /// and cold), seeks and time lookups, and durable appends when those run.
    fn kafka_reference(&mut self, rep: usize) -> BenchResult<()> {
        let plan = self.plan;
        let (base, seed) = (&self.args.dir, self.args.seed);
        self.bars.step(format!("rep {}/{}: Kafka reference design", rep + 1, plan.reps));
        let setup = plan.setup.clone();
        let dir = tempfile::tempdir_in(base)?;
        let (r, kr) = refs::kafka_produce(dir.path(), &setup, plan.produce_bytes)?;
        self.runs.push(r);
        self.runs.push(refs::kafka_catch_up(dir.path(), &kr, &setup, 1 << 20, false)?);
        self.runs.push(refs::kafka_seek(&kr, &setup, plan.seeks, seed + rep as u64)?);
        self.runs.push(refs::kafka_time(&kr, &setup, plan.time_lookups, seed)?);
        self.runs.push(refs::kafka_catch_up(dir.path(), &kr, &setup, 1 << 20, true)?);
        drop(kr);
        drop(dir);
        if plan.runs("durable") {
            // Settled as seglog's durable run is.
            settle(base, &mut self.skipped);
            let dsetup = Setup { durability: Durability::EveryBatch, partitions: 1, ..setup.clone() };
            let dir = tempfile::tempdir_in(base)?;
            let (r, _) = refs::kafka_produce(dir.path(), &dsetup, plan.durable_appends * setup.batch_bytes as u64)?;
            self.runs.push(r);
        }
        self.bars.done();
        Ok(())
    }

    /// The `commitlog` crate on the same batches.
    fn commitlog_reference(&mut self, rep: usize) -> BenchResult<()> {
        let plan = self.plan;
        self.bars.step(format!("rep {}/{}: commitlog crate", rep + 1, plan.reps));
        let dir = tempfile::tempdir_in(&self.args.dir)?;
        let bytes = plan.produce_bytes;
        match refs::commitlog_runs(dir.path(), &plan.setup, bytes, bytes, plan.seeks, self.args.seed) {
            Ok(v) => self.runs.extend(v),
            Err(e) => warn(&mut self.skipped, format!("commitlog: {e}")),
        }
        self.bars.done();
        Ok(())
    }

    /// Lookup cost against index.interval.bytes, in memory.
    fn intervals(&mut self) -> BenchResult<Vec<IntervalPoint>> {
        let plan = self.plan;
        self.bars.step("lookup cost vs index.interval.bytes".into());
        let points = interval::run(
            &plan.intervals,
            plan.interval_batch_bytes,
            plan.interval_log_bytes,
            plan.interval_lookups,
            self.args.seed,
        )?;
        self.bars.done();
        Ok(points)
    }
}

fn opt_pct(r: Option<f64>) -> String {
    r.map_or("-".into(), |r| format!("{:.0}%", 100.0 * r))
}

/// A figure for a table: `-` for none, fewer decimals as it grows.
pub(crate) fn num(v: f64) -> String {
    if v == 0.0 {
        "-".into()
    } else if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// The summary as text: machine, runs table, targets, references, intervals.
pub fn render(r: &Results) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let m = &r.machine;
    let _ = writeln!(
        s,
        "machine: {} ({} cores, {:.0} GiB), kernel {}, {} on {}, THP {}, {}; load {} -> {}",
        m.cpu, m.cores, m.memory_gib, m.kernel, m.filesystem, m.device, m.thp, m.fio, m.load_before, m.load_after
    );
    let p = &r.plan;
    let _ = writeln!(
        s,
        "profile {}: {} rep(s), {} B batches x {} records, {} partition(s), {} shard(s), window {} (sweep {:?}), {} MB produced, segment.bytes {}, preallocate {}, zero fill {}, sync method {}, client pinned {}, {:.0} s",
        p.profile,
        p.reps,
        p.setup.batch_bytes,
        p.setup.records_per_batch,
        p.setup.partitions,
        p.setup.shards,
        p.window,
        p.sweep_windows,
        p.produce_bytes / 1_000_000,
        p.setup.segment_bytes,
        p.setup.preallocate,
        p.setup.zero_fill,
        p.setup.sync_method.name(),
        p.pin_client,
        r.seconds
    );
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "{:<14} {:<9} {:<10} {:>8} {:>9} {:>8} {:>8} {:>9} {:>9} {:>9} {:>7} {:>6} {:>7} {:>5} {:>7} {:>8} {:>6}  disk job",
        "workload",
        "system",
        "mode",
        "MB/s",
        "rec/s",
        "p50 us",
        "p99 us",
        "p99.9 us",
        "max us",
        "wr p99 us",
        "enter/op",
        "io/op",
        "minflt",
        "majflt",
        "CPU s/GB",
        "disk",
        "vs disk",
    );
    for x in &r.summary {
        let _ = writeln!(
            s,
            "{:<14} {:<9} {:<10} {:>8} {:>9} {:>8} {:>8} {:>9} {:>9} {:>9} {:>7} {:>6} {:>7} {:>5} {:>7} {:>8} {:>6}  {}",
            x.workload,
            x.system,
            x.mode,
            num(x.mb_per_s),
            num(x.records_per_s),
            num(x.p50_us),
            num(x.p99_us),
            num(x.p999_us),
            num(x.max_us),
            if x.write_p99_us > 0.0 { num(x.write_p99_us) } else { "-".into() },
            num(x.enters_per_op),
            num(x.ios_per_op),
            num(x.minor_faults),
            num(x.major_faults),
            num(x.cpu_s_per_gb),
            if x.disk_job.contains("fdatasync") {
                format!("{}us", num(x.disk_p99_us))
            } else if x.disk_job.contains("rand") {
                format!("{}us", num(x.disk_p50_us))
            } else {
                num(x.disk_mb_per_s)
            },
            opt_pct(x.ratio_to_disk),
            x.disk_job
        );
    }
    let hp: Vec<String> = r
        .summary
        .iter()
        .filter(|x| x.system == "seglog")
        .map(|x| format!("{}: {}", x.mode, x.huge_pages))
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let _ = writeln!(s, "index memory (huge-page mode really used): {}", hp.join("; "));
    let _ =
        writeln!(s, "wr p99: the engine's writes from the start of their submission to seen complete (sync included)");
    let _ = writeln!(s, "disk column: MB/s, or fdatasync p99 for durable rows, or 4 KiB random-read p50 for seek rows");
    if !r.targets.is_empty() {
        let _ = writeln!(s, "\ntargets (medians over {} repetition(s)):", p.reps);
        for t in &r.targets {
            let verdict = match t.met {
                Some(true) => "MET",
                Some(false) => "MISSED",
                None => "n/a",
            };
            let _ = writeln!(s, "  [{verdict:<6}] {}: {} (target {}; disk {})", t.name, t.measured, t.target, t.disk);
        }
    }
    if !r.references.is_empty() {
        let _ = writeln!(s, "\nseglog against the reference designs (same batches, same run):");
        for x in &r.references {
            let _ = writeln!(
                s,
                "  {:<18} seglog {:<8} vs {:<9} {:<7} {:>9} vs {:>9}  ratio {:.2}",
                x.workload,
                x.seglog_mode,
                x.reference,
                x.figure,
                num(x.seglog),
                num(x.other),
                x.ratio
            );
        }
    }
    if !r.recovery.is_empty() || !r.open.is_empty() {
        let _ = writeln!(s, "\nrecovery and open (medians):");
        for x in &r.recovery {
            let _ = writeln!(
                s,
                "  recovery {:<9} {} MB in {} segments: {:.2} s, {:.0} MB/s vs fio {:.0} MB/s = {}; {:.1} I/Os per MB ({} KiB reads) [{}]",
                x.mode,
                x.log_bytes / 1_000_000,
                x.segments,
                x.seconds,
                x.mb_per_s,
                x.disk_mb_per_s,
                opt_pct(x.ratio_to_disk),
                x.ios_per_mb,
                x.read_window_bytes / 1024,
                x.disk_job
            );
        }
        for x in &r.open {
            let _ = writeln!(
                s,
                "  clean open {:<7} {} segments in {} partitions: {:.3} s (min {:.3}, max {:.3}, {} opens), {:.0} segments/s",
                x.mode, x.segments, x.partitions, x.median_seconds, x.min_seconds, x.max_seconds, x.opens, x.segments_per_s
            );
        }
    }
    if !r.intervals.is_empty() {
        let _ = writeln!(s, "\nlookup cost vs index.interval.bytes (in memory, {} B batches):", p.interval_batch_bytes);
        let _ = writeln!(
            s,
            "  {:>10} {:>9} {:>9} {:>9} {:>12} {:>7}",
            "interval", "entries", "p50 ns", "p99 ns", "bytes walked", "hops"
        );
        for x in &r.intervals {
            let _ = writeln!(
                s,
                "  {:>10} {:>9} {:>9.0} {:>9.0} {:>12.0} {:>7.1}",
                x.index_interval_bytes,
                x.index_entries,
                x.lookup_p50_ns,
                x.lookup_p99_ns,
                x.mean_bytes_scanned,
                x.mean_hops
            );
        }
    }
    s.push_str(&sweep::render(&r.durable_sweep, &p.durable_sweep, &p.setup));
    s.push_str(&partitions::render(&r.partitions_sweep, &p.partitions_sweep, &p.setup));
    for w in &r.skipped {
        let _ = writeln!(s, "skipped: {w}");
    }
    let slow: Vec<String> = r.steps.iter().filter(|x| x.1 >= 1.0).map(|(n, t)| format!("{n} {t:.1}s")).collect();
    let _ = writeln!(s, "\nwall time {:.1} s; steps of a second or more: {}", r.seconds, slow.join(", "));
    s
}

fn merged(runs: &[RunReport], workload: &str, system: &str, mode: &str) -> Option<Hist> {
    let mut h = Hist::new();
    let mut any = false;
    for r in runs.iter().filter(|r| r.workload == workload && r.system == system && r.mode == mode) {
        h.merge(&r.hist);
        any = true;
    }
    any.then_some(h)
}

/// Writes the charts; returns their paths.
pub fn plots(dir: &Path, r: &Results) -> std::io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let mut written = Vec::new();
    let mut put = |name: &str, c: &plot::Chart| -> std::io::Result<()> {
        if c.is_empty() {
            return Ok(());
        }
        let p = dir.join(name);
        plot::write(&p, c)?;
        written.push(p);
        Ok(())
    };
    let keys: Vec<(String, String, String)> =
        r.summary.iter().map(|s| (s.workload.clone(), s.system.clone(), s.mode.clone())).collect();
    let cdf_of = |workloads: &[&str]| -> Vec<plot::Series> {
        keys.iter()
            .filter(|k| workloads.contains(&k.0.as_str()))
            .filter_map(|k| {
                merged(&r.runs, &k.0, &k.1, &k.2).map(|h| {
                    let name = if k.1 == "seglog" { format!("{} {}", k.0, k.2) } else { format!("{} {}", k.0, k.1) };
                    plot::Series::line(name, h.cdf())
                })
            })
            .collect()
    };
    put("latency-cdf-produce.svg", &plot::latency_cdf("Append latency by I/O mode (produce)", cdf_of(&["produce"])))?;
    put(
        "latency-cdf-durable.svg",
        &plot::latency_cdf("Durable append latency (ack after fdatasync)", cdf_of(&["durable"])),
    )?;
    put(
        "latency-cdf-reads.svg",
        &plot::latency_cdf("Fetch latency: tail, seek, catch-up", cdf_of(&["tail", "seek", "lag", "lag-cold"])),
    )?;
    put(
        "latency-cdf-lookups.svg",
        &plot::latency_cdf("Lookups: warm offset (in shard), time", cdf_of(&["lookup-warm", "time"])),
    )?;
    put(
        "latency-cdf-log-append.svg",
        &plot::latency_cdf("Log appends, one caller, beside the references", cdf_of(&[log::APPEND])),
    )?;
    put(
        "latency-cdf-log-lookups.svg",
        &plot::latency_cdf("Log point lookups, warm and cold, beside the references", cdf_of(&[log::WARM, log::COLD])),
    )?;
    for (name, chart) in sweep::charts(&r.durable_sweep) {
        put(name, &chart)?;
    }
    // Throughput over time: the first repetition of each produce run.
    let mut seen = std::collections::BTreeSet::new();
    let mut tput = Vec::new();
    for run in r.runs.iter().filter(|x| x.workload == "produce" || x.workload == "lag" || x.workload == "lag-cold") {
        if seen.insert((run.workload.clone(), run.system.clone(), run.mode.clone())) && !run.timeline.is_empty() {
            let name = if run.system == "seglog" {
                format!("{} {}", run.workload, run.mode)
            } else {
                format!("{} {}", run.workload, run.system)
            };
            tput.push(plot::Series::line(name, run.timeline.clone()));
        }
    }
    put(
        "throughput-over-time.svg",
        &plot::Chart {
            title: "Throughput over time (first repetition, 100 ms buckets)".into(),
            x_label: "seconds".into(),
            y_label: "MB/s".into(),
            series: tput,
            ..Default::default()
        },
    )?;
    if !r.intervals.is_empty() {
        let pts = |f: fn(&IntervalPoint) -> f64| -> Vec<(f64, f64)> {
            r.intervals.iter().map(|p| (p.index_interval_bytes as f64, f(p))).collect()
        };
        put(
            "lookup-vs-interval.svg",
            &plot::Chart {
                title: format!(
                    "Offset lookup cost vs index.interval.bytes ({} B batches, in memory)",
                    r.plan.interval_batch_bytes
                ),
                x_label: "index.interval.bytes (log scale)".into(),
                y_label: "nanoseconds per lookup (log scale)".into(),
                x_log: true,
                y_log: true,
                series: vec![
                    plot::Series::line("p50 ns", pts(|p| p.lookup_p50_ns)),
                    plot::Series::line("p99 ns", pts(|p| p.lookup_p99_ns)),
                ],
                ..Default::default()
            },
        )?;
        put(
            "walk-vs-interval.svg",
            &plot::Chart {
                title: "Phase-2 walk vs index.interval.bytes".into(),
                x_label: "index.interval.bytes (log scale)".into(),
                y_label: "bytes walked per lookup (mean, log scale)".into(),
                x_log: true,
                y_log: true,
                series: vec![plot::Series::line("bytes walked", pts(|p| p.mean_bytes_scanned))],
                ..Default::default()
            },
        )?;
    }
    Ok(written)
}

/// For a binary of its own: `Args` at the top level.
#[derive(clap::Parser, Debug)]
#[command(name = "seglog-bench", about = "seglog's workload benchmark against fio and reference designs")]
pub struct Cli {
    #[command(flatten)]
    pub args: Args,
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;

    fn run(workload: &str, system: &str, mode: &str, latencies_us: &[u64]) -> RunReport {
        let mut hist = Hist::new();
        latencies_us.iter().for_each(|&us| hist.record_ns(us * 1000));
        RunReport {
            workload: workload.into(),
            system: system.into(),
            mode: mode.into(),
            timeline: vec![(0.1, 100.0), (0.2, 150.0), (0.3, 120.0)],
            hist,
            ..Default::default()
        }
    }

    /// `--plot DIR` writes the charts the docs show, each a well-formed SVG document with its
    /// title and one legend entry per (workload, system, mode); charts with no data are left out.
    #[test]
    fn plots_write_the_documented_charts() {
        let runs = vec![
            run("produce", "seglog", "direct", &[10, 20, 30, 400]),
            run("produce", "seglog", "buffered", &[5, 6, 7]),
            run("produce", "kafka-ref", "buffered", &[8, 9]),
            run("durable", "seglog", "direct", &[900, 1000]),
            run("tail", "seglog", "direct", &[2, 3]),
            run("seek", "seglog", "direct", &[50]),
            run(log::APPEND, "seglog", "direct", &[20, 30]),
            run(log::APPEND, "kafka-ref", "page cache", &[4, 5]),
            run(log::WARM, "seglog", "buffered", &[9, 10]),
            run(log::COLD, "commitlog", "page cache", &[30, 40]),
        ];
        let intervals = [1u32, 4096, 1 << 20]
            .iter()
            .map(|&i| IntervalPoint {
                index_interval_bytes: i,
                lookup_p50_ns: 100.0 + f64::from(i).sqrt(),
                lookup_p99_ns: 200.0 + f64::from(i).sqrt(),
                mean_bytes_scanned: f64::from(i) / 2.0 + 1.0,
                ..Default::default()
            })
            .collect();
        let plan = Plan::from_args(&Cli::parse_from(["seglog-bench"]).args);
        let results = Results {
            machine: Machine::default(),
            plan,
            summary: summarize(&runs),
            targets: vec![],
            references: vec![],
            intervals,
            recovery: vec![],
            open: vec![],
            durable_sweep: vec![],
            durable_sweep_runs: vec![],
            partitions_sweep: vec![],
            partitions_sweep_runs: vec![],
            runs,
            skipped: vec![],
            steps: vec![],
            seconds: 1.0,
        };
        let dir = tempfile::tempdir().unwrap();
        let written = plots(dir.path(), &results).unwrap();
        let names: Vec<String> =
            written.iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect();
        assert_eq!(
            names,
            [
                "latency-cdf-produce.svg",
                "latency-cdf-durable.svg",
                "latency-cdf-reads.svg",
                "latency-cdf-log-append.svg",
                "latency-cdf-log-lookups.svg",
                "throughput-over-time.svg",
                "lookup-vs-interval.svg",
                "walk-vs-interval.svg",
            ],
            "no lookups ran: no latency-cdf-lookups.svg"
        );
        let texts = |name: &str| -> Vec<String> {
            let s = std::fs::read_to_string(dir.path().join(name)).unwrap();
            let doc = roxmltree::Document::parse(&s).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(doc.root_element().tag_name().name(), "svg", "{name}");
            doc.descendants()
                .filter(|n| n.has_tag_name("text"))
                .filter_map(|n| n.text().map(|t| t.trim().to_string()))
                .collect()
        };
        for (name, want) in [
            (
                "latency-cdf-produce.svg",
                &["Append latency by I/O mode (produce)", "produce direct", "produce buffered", "produce kafka-ref"][..],
            ),
            ("latency-cdf-durable.svg", &["durable direct", "99.9%"]),
            ("latency-cdf-reads.svg", &["tail direct", "seek direct"]),
            ("latency-cdf-log-append.svg", &["log-append direct", "log-append kafka-ref"]),
            ("latency-cdf-log-lookups.svg", &["log-point-warm buffered", "log-point-cold commitlog"]),
            ("throughput-over-time.svg", &["MB/s", "produce direct", "produce kafka-ref"]),
            ("lookup-vs-interval.svg", &["p50 ns", "p99 ns", "index.interval.bytes (log scale)"]),
            ("walk-vs-interval.svg", &["bytes walked", "Phase-2 walk vs index.interval.bytes"]),
        ] {
            let t = texts(name);
            for w in want {
                assert!(t.iter().any(|x| x == w), "{name}: no {w:?} in {t:?}");
            }
        }
    }

    /// The log workload's targets compare rows of the same run: each verdict follows its ratio,
    /// a comparison whose rows did not run says so, and cold lookups carry no verdict.
    #[test]
    fn log_targets_compare_rows_of_the_same_run() {
        let row = |workload: &str, system: &str, mode: &str, mb_per_s: f64, p50_us: f64| Summary {
            workload: workload.into(),
            system: system.into(),
            mode: mode.into(),
            mb_per_s,
            p50_us,
            ..Default::default()
        };
        let s = vec![
            row(log::APPEND, "seglog", "direct", 300.0, 50.0),
            row(log::APPEND, "seglog", "buffered", 500.0, 5.0),
            row(log::APPEND, "seglog", "sync", 600.0, 4.0),
            row(log::APPEND, "kafka-ref", "page cache", 250.0, 4.0),
            row(log::WARM, "seglog", "buffered", 0.0, 3.0),
            row(log::WARM, "commitlog", "page cache", 0.0, 2.0),
            row(log::COLD, "seglog", "buffered", 0.0, 120.0),
            row(log::COLD, "kafka-ref", "page cache", 0.0, 100.0),
        ];
        let plan = Plan::from_args(&Cli::parse_from(["seglog-bench", "--workloads", "log"]).args);
        let t = log_targets(&s, &plan);
        let verdict = |start: &str| t.iter().find(|x| x.name.starts_with(start)).map(|x| x.met);
        assert_eq!(verdict("Log direct appends"), Some(Some(true)), "{t:?}");
        assert_eq!(verdict("Log buffered appends"), Some(Some(false)), "0.83x sync");
        assert_eq!(verdict("Log warm point lookup, buffered"), Some(Some(true)), "1.5x exactly");
        assert_eq!(verdict("Log warm point lookup, sync"), Some(None), "no sync lookups ran");
        let cold = t.iter().find(|x| x.name == "Log cold point lookup, buffered").unwrap();
        assert_eq!(cold.met, None);
        assert!(cold.measured.contains("kafka-ref 100.0 us = 1.20x"), "{}", cold.measured);
        let others = Plan::from_args(&Cli::parse_from(["seglog-bench", "--workloads", "produce"]).args);
        assert!(log_targets(&s, &others).is_empty(), "no log targets when the workload did not run");
    }

    #[test]
    fn the_durable_sweep_warms_each_side_up_unless_told_not_to() {
        let plan = Plan::from_args(&Cli::parse_from(["seglog-bench"]).args);
        assert!(plan.durable_sweep.warmup);
        let off = Plan::from_args(&Cli::parse_from(["seglog-bench", "--sweep-warmup", "false"]).args);
        assert!(!off.durable_sweep.warmup);
    }
}
