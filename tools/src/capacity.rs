//! `seglog capacity`: the seed's capacity worksheet. From partition count, data volume (or
//! produce rate and retention), segment size, batch size and index interval: how many segments,
//! how many index bytes, how many memory maps and open files Kafka needs, against what seglog
//! needs, compared with this machine's `vm.max_map_count` and `RLIMIT_NOFILE`.
//!
//! Every figure comes from a stated model, printed with the result:
//! - Kafka rolls a segment when the next batch does not fit, so a full segment holds
//!   `floor(segment.bytes / batch)` batches;
//! - an index holds at most one entry per batch and at most one per interval: with constant
//!   batches of B bytes an entry every `floor(I / B) + 1` batches, never for the first batch;
//! - the time index gets an entry with each offset entry (timestamps growing) and one at roll
//!   unless the last batch was indexed;
//! - Kafka maps both index files of every segment (two maps per segment, the worst case: indexes
//!   are mapped lazily, on first use); it keeps each segment's `.log` open and closes an index
//!   file once it is mapped;
//! - seglog keeps indexes in per-shard arenas, so its maps grow with shards, not segments.

use std::process::ExitCode;

use serde::Serialize;

use crate::units::{human_bytes, human_ms, parse_bytes, parse_duration_ms};

#[derive(clap::Args, Debug)]
#[command(after_help = crate::EXIT_CODES)]
pub struct Args {
    /// Number of partitions (replicas hosted on this broker).
    #[arg(long, value_name = "N")]
    partitions: u64,
    /// Data kept per partition (suffixes allowed: 10GiB, 500GB). With --total, the total over all
    /// partitions. Without it, the data kept is produce rate × retention.ms.
    #[arg(long, value_name = "SIZE", value_parser = parse_bytes)]
    data_bytes: Option<u64>,
    /// --data-bytes is the total over all partitions, not per partition.
    #[arg(long)]
    total: bool,
    /// segment.bytes (default 1GiB, Kafka's default).
    #[arg(long, value_name = "SIZE", default_value = "1GiB", value_parser = parse_bytes)]
    segment_bytes: u64,
    /// retention.ms (plain milliseconds or 7d, 168h, 30m; -1 for none). Used with
    /// --produce-bytes-per-sec. Default 7d, Kafka's default.
    #[arg(long, value_name = "DURATION", default_value = "7d", value_parser = parse_duration_ms, allow_hyphen_values = true)]
    retention_ms: i64,
    /// retention.bytes per partition (suffixes allowed). Kafka keeps up to this plus one segment,
    /// as it deletes whole segments only. Default: no limit.
    #[arg(long, value_name = "SIZE", value_parser = parse_bytes)]
    retention_bytes: Option<u64>,
    /// Bytes produced per second over all partitions (spread evenly). Gives the data kept when
    /// --data-bytes is absent, and how long --data-bytes lasts when it is given.
    #[arg(long, value_name = "SIZE", value_parser = parse_bytes)]
    produce_bytes_per_sec: Option<u64>,
    /// Average record batch size on disk (producers' batch.size is 16 KiB by default; smaller when
    /// linger.ms is 0 or traffic is light).
    #[arg(long, value_name = "SIZE", default_value = "16KiB", value_parser = parse_bytes)]
    avg_batch_bytes: u64,
    /// index.interval.bytes (default 4096, Kafka's default).
    #[arg(long, value_name = "SIZE", default_value = "4096", value_parser = parse_bytes)]
    index_interval_bytes: u64,
    /// segment.index.bytes: what each index file of an active segment is preallocated to
    /// (default 10MiB, Kafka's default); also the most entries a segment's index holds.
    #[arg(long, value_name = "SIZE", default_value = "10MiB", value_parser = parse_bytes)]
    segment_index_bytes: u64,
    /// seglog shards (one per core; default: this machine's cores).
    #[arg(long, value_name = "N")]
    shards: Option<u64>,
    /// Memory maps seglog needs per shard (assumption: 2, one index arena for offset indexes and
    /// one for time indexes).
    #[arg(long, value_name = "N", default_value_t = 2)]
    seglog_maps_per_shard: u64,
    /// seglog: the tail cache a partition keeps at most (`EngineConfig::tail_cache_bytes`).
    #[arg(long, value_name = "SIZE", default_value = "1MiB", value_parser = parse_bytes)]
    tail_cache_bytes: u64,
    /// seglog: the tail cache a shard's partitions share (`EngineConfig::tail_cache_budget_bytes`).
    #[arg(long, value_name = "SIZE", default_value = "64MiB", value_parser = parse_bytes)]
    tail_cache_budget_bytes: u64,
    /// seglog: the write buffers a shard holds at most, its tail caches among them
    /// (`EngineConfig::write_buffer_budget_bytes`).
    #[arg(long, value_name = "SIZE", default_value = "256MiB", value_parser = parse_bytes)]
    write_buffer_budget_bytes: u64,
    /// seglog: the sealed segments' indexes kept in memory, per engine
    /// (`EngineConfig::index_memory_budget_bytes`).
    #[arg(long, value_name = "SIZE", default_value = "1GiB", value_parser = parse_bytes)]
    index_memory_budget_bytes: u64,
    /// Print one JSON document instead of text.
    #[arg(long)]
    json: bool,
}

/// What an idle partition costs the engine beyond its budgets, at most: its log, segment,
/// indexes' bookkeeping, tail and maps. Measured by `seglog bench --workloads partitions` (resident
/// memory per idle partition beyond the write-buffer pool): 1-3 KiB at 1,000 and 10,000
/// partitions, 13 KiB at 100 (docs/benchmarks.md, "Many partitions on one shard").
pub const IDLE_PARTITION_BYTES: u64 = 16 << 10;

/// The pool's chunk: a tail cache share under it is none (`seglog::io::pool::CHUNK_BYTES`).
const CHUNK_BYTES: u64 = seglog::io::pool::CHUNK_BYTES as u64;

/// seglog's memory for the partitions, each part with its model.
#[derive(Clone, Debug, Serialize)]
pub struct SeglogMemory {
    pub partitions_per_shard: u64,
    /// The tail cache each partition keeps: the largest power of two within its share of the
    /// shard's budget, at most `tail_cache_bytes`, none under a chunk.
    pub tail_cache_per_partition: u64,
    /// Write buffers, tail caches among them: the budget of every shard.
    pub write_buffers: u64,
    /// Idle partitions: [`IDLE_PARTITION_BYTES`] each.
    pub partitions: u64,
    /// The active segments' indexes, resident as written: a full segment's at most, each.
    pub active_indexes: u64,
    /// Sealed segments' indexes: what they total, at most the index memory budget.
    pub sealed_indexes: u64,
    pub total: u64,
}

/// One resource compared with this machine's limit.
#[derive(Clone, Debug, Serialize)]
pub struct Check {
    pub what: String,
    pub needed: u64,
    pub model: String,
    pub limit: Option<u64>,
    pub ok: Option<bool>,
}

/// The worksheet's results.
#[derive(Clone, Debug, Serialize)]
pub struct Worksheet {
    pub partitions: u64,
    pub retained_bytes_per_partition: u64,
    pub retained_rule: String,
    pub retention_covered_ms: Option<i64>,
    pub batches_per_segment: u64,
    pub segment_data_bytes: u64,
    pub segments_per_partition: u64,
    pub segments: u64,
    pub index_fills_first: bool,
    pub batches_per_index_entry: u64,
    pub offset_entries_per_segment: u64,
    pub time_entries_per_segment: u64,
    pub index_bytes_per_segment: u64,
    pub index_bytes_total: u64,
    pub active_preallocated_bytes: u64,
    pub segment_rolls_per_hour: Option<f64>,
    pub max_map_count: Option<u64>,
    pub nofile_soft: Option<u64>,
    pub nofile_hard: Option<u64>,
    pub seglog_memory: SeglogMemory,
    pub checks: Vec<Check>,
}

fn read_max_map_count() -> Option<u64> {
    std::fs::read_to_string("/proc/sys/vm/max_map_count").ok()?.trim().parse().ok()
}

fn nofile_limits() -> (Option<u64>, Option<u64>) {
    use nix::sys::resource::{getrlimit, Resource, RLIM_INFINITY};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else { return (None, None) };
    let conv = |v: u64| (v != RLIM_INFINITY).then_some(v);
    (conv(soft), conv(hard))
}

fn check(what: &str, needed: u64, model: String, limit: Option<u64>) -> Check {
    Check { what: what.to_owned(), needed, model, limit, ok: limit.map(|l| needed <= l) }
}

pub fn compute(a: &Args, limits: (Option<u64>, Option<u64>, Option<u64>)) -> Result<Worksheet, String> {
    if a.partitions == 0 {
        return Err("--partitions must be at least 1".into());
    }
    if a.avg_batch_bytes < 61 {
        return Err("--avg-batch-bytes must be at least 61 (the batch header)".into());
    }
    if a.segment_bytes < a.avg_batch_bytes {
        return Err("--segment-bytes must hold at least one batch".into());
    }
    let p = a.partitions;
    let rate_pp = a.produce_bytes_per_sec.map(|r| r as f64 / p as f64);
    let (retained, rule) = retained_per_partition(a, rate_pp)?;
    let FullSegment { batches: n, batches_per_entry: k, offset_entries, time_entries, index_fills_first } =
        full_segment(a);
    let segment_data = n * a.avg_batch_bytes;
    let segs_pp = retained.div_ceil(segment_data).max(1);
    let segments = segs_pp * p;
    let per_segment = offset_entries * 8 + time_entries * 12;
    let (max_map_count, nofile_soft, nofile_hard) = limits;
    let shards = a.shards.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get() as u64));
    let checks = checks(a, p, segments, shards, max_map_count, nofile_soft);
    let seglog_memory = seglog_memory(a, shards, segs_pp, per_segment);
    Ok(Worksheet {
        partitions: p,
        retained_bytes_per_partition: retained,
        retained_rule: rule,
        retention_covered_ms: match (a.data_bytes, rate_pp) {
            (Some(_), Some(r)) if r > 0.0 => Some((retained as f64 / r * 1000.0) as i64),
            _ => None,
        },
        batches_per_segment: n,
        segment_data_bytes: segment_data,
        segments_per_partition: segs_pp,
        segments,
        index_fills_first,
        batches_per_index_entry: k,
        offset_entries_per_segment: offset_entries,
        time_entries_per_segment: time_entries,
        index_bytes_per_segment: per_segment,
        index_bytes_total: per_segment * segments,
        active_preallocated_bytes: p * 2 * a.segment_index_bytes,
        segment_rolls_per_hour: rate_pp.map(|r| r * 3600.0 / segment_data as f64 * p as f64),
        max_map_count,
        nofile_soft,
        nofile_hard,
        seglog_memory,
        checks,
    })
}

/// seglog's memory for `a.partitions` partitions spread over `shards`, with `segs_pp` segments
/// each of `index_bytes` index bytes when full.
fn seglog_memory(a: &Args, shards: u64, segs_pp: u64, index_bytes: u64) -> SeglogMemory {
    let shards = shards.max(1);
    let per_shard = a.partitions.div_ceil(shards);
    let even = a.tail_cache_budget_bytes / per_shard.max(1);
    let pow2 = if even == 0 { 0 } else { 1u64 << (63 - even.leading_zeros()) };
    let tail = if pow2 < CHUNK_BYTES { 0 } else { pow2.min(a.tail_cache_bytes) };
    let write_buffers = shards * a.write_buffer_budget_bytes;
    let partitions = a.partitions * IDLE_PARTITION_BYTES;
    let active_indexes = a.partitions * index_bytes;
    let sealed_indexes = (a.partitions * segs_pp.saturating_sub(1) * index_bytes).min(a.index_memory_budget_bytes);
    SeglogMemory {
        partitions_per_shard: per_shard,
        tail_cache_per_partition: tail,
        write_buffers,
        partitions,
        active_indexes,
        sealed_indexes,
        total: write_buffers + partitions + active_indexes + sealed_indexes,
    }
}

/// Bytes kept per partition, and the rule that gave them: `--data-bytes`, or the produce rate
/// (`rate_pp`, per partition) times retention.ms; capped by retention.bytes (Kafka deletes whole
/// segments, so one segment more than either).
fn retained_per_partition(a: &Args, rate_pp: Option<f64>) -> Result<(u64, String), String> {
    let p = a.partitions;
    let (mut retained, mut rule) = match (a.data_bytes, rate_pp) {
        (Some(d), _) => {
            if a.total {
                (d.div_ceil(p), "--data-bytes over all partitions, spread evenly".to_owned())
            } else {
                (d, "--data-bytes per partition".to_owned())
            }
        }
        (None, Some(r)) if a.retention_ms >= 0 => (
            (r * a.retention_ms as f64 / 1000.0) as u64 + a.segment_bytes,
            format!(
                "produce rate × retention.ms ({}) + one segment (time retention deletes whole segments)",
                human_ms(a.retention_ms)
            ),
        ),
        _ => {
            return Err("give --data-bytes, or --produce-bytes-per-sec with a retention.ms other than -1".into());
        }
    };
    if let Some(rb) = a.retention_bytes {
        let cap = rb + a.segment_bytes;
        if retained > cap {
            retained = cap;
            rule = "capped by retention.bytes + one segment (Kafka deletes whole segments)".into();
        }
    }
    Ok((retained, rule))
}

/// A full segment of constant batches, as Kafka rolls and indexes it.
struct FullSegment {
    /// Batches in it: those that fit, fewer if an index fills first.
    batches: u64,
    /// One offset-index entry every this many batches.
    batches_per_entry: u64,
    offset_entries: u64,
    time_entries: u64,
    /// An index fills before the `.log`, and rolls the segment.
    index_fills_first: bool,
}

fn full_segment(a: &Args) -> FullSegment {
    let b = a.avg_batch_bytes;
    // A full segment: the batches that fit, fewer if an index fills first.
    let k = a.index_interval_bytes / b + 1;
    let mut n = a.segment_bytes / b;
    let max_offset_entries = a.segment_index_bytes / 8;
    let max_time_entries = (a.segment_index_bytes / 12).saturating_sub(1);
    let entries = |n: u64| n.saturating_sub(1) / k;
    let max_entries = max_offset_entries.min(max_time_entries);
    let index_fills_first = entries(n) > max_entries;
    if index_fills_first {
        n = max_entries * k + 1;
    }
    let offset_entries = entries(n);
    let last_indexed = n > k && (n - 1).is_multiple_of(k);
    let time_entries = offset_entries + u64::from(!last_indexed);
    FullSegment { batches: n, batches_per_entry: k, offset_entries, time_entries, index_fills_first }
}

/// The maps and open files Kafka and seglog need for `segments` segments on `shards` shards,
/// against this machine's limits.
fn checks(
    a: &Args,
    partitions: u64,
    segments: u64,
    shards: u64,
    max_map_count: Option<u64>,
    nofile_soft: Option<u64>,
) -> Vec<Check> {
    // The engine's default max_open_files, counting the active .log files; the other segment
    // files get what those leave, at least a quarter of it, and are closed beyond it (least
    // recently used first).
    let limit = nofile_soft.map_or(u64::MAX, |n| seglog::io::max_open_files_for(n as usize) as u64);
    let sealed_files = 3 * (segments - partitions);
    let seglog_files = (partitions + sealed_files).min(limit).max(partitions + sealed_files.min(limit / 4));
    vec![
        check(
            "memory maps, Kafka",
            2 * segments,
            "2 per segment: .index and .timeindex are each mmapped (worst case: every segment's indexes in use; \
             Kafka maps lazily on first use); the JVM's own maps come on top"
                .into(),
            max_map_count,
        ),
        check(
            "memory maps, seglog",
            shards * a.seglog_maps_per_shard,
            format!(
                "a fixed handful per shard, assumed {} per shard (offset-index and time-index arenas) × {shards} shards; \
                 grows with shards, not segments",
                a.seglog_maps_per_shard
            ),
            max_map_count,
        ),
        check(
            "open files, Kafka (model)",
            3 * segments,
            "1 .log + 2 index files per segment".into(),
            nofile_soft,
        ),
        check(
            "open files, Kafka (steady state)",
            segments,
            "1 per segment: the .log channel stays open, an index file is closed once mapped (.txnindex files \
             and sockets come on top)"
                .into(),
            nofile_soft,
        ),
        check(
            "open files, seglog",
            seglog_files,
            format!(
                "1 per partition (its active .log; the active indexes are opened to be written), plus sealed \
                 segments' files opened when read, all under max_open_files (half the soft limit: {}) as long as \
                 the partitions fit in three quarters of it; the sealed files get at least a quarter",
                if limit == u64::MAX { "none here".to_string() } else { limit.to_string() }
            ),
            nofile_soft,
        ),
    ]
}

fn verdict(c: &Check) -> String {
    match (c.ok, c.limit) {
        (Some(true), Some(l)) => format!("OK ({:.1}% of {l})", c.needed as f64 * 100.0 / l as f64),
        (Some(false), Some(l)) => format!("EXCEEDS {l} by {}", c.needed - l),
        _ => "limit unknown".into(),
    }
}

fn print(a: &Args, w: &Worksheet) {
    println!("seglog capacity worksheet");
    println!(
        "  inputs: {} partitions, segment.bytes {}, avg batch {} B, index.interval.bytes {}, retention.ms {}, retention.bytes {}{}",
        a.partitions,
        human_bytes(a.segment_bytes),
        a.avg_batch_bytes,
        a.index_interval_bytes,
        human_ms(a.retention_ms),
        a.retention_bytes.map_or_else(|| "unlimited".to_owned(), human_bytes),
        a.produce_bytes_per_sec.map_or_else(String::new, |r| format!(", produce {}/s", human_bytes(r)))
    );
    println!(
        "  data kept: {} per partition ({}), {} in all",
        human_bytes(w.retained_bytes_per_partition),
        w.retained_rule,
        human_bytes(w.retained_bytes_per_partition * w.partitions)
    );
    if let Some(ms) = w.retention_covered_ms {
        println!("  at the produce rate that is {} of data", human_ms(ms));
    }
    println!(
        "  segments: {} batches ({}) per full segment{}; {} per partition, {} in all (the active one counted whole)",
        w.batches_per_segment,
        human_bytes(w.segment_data_bytes),
        if w.index_fills_first { ", rolled early because the index fills (segment.index.bytes)" } else { "" },
        w.segments_per_partition,
        w.segments
    );
    if let Some(r) = w.segment_rolls_per_hour {
        println!("  segment rolls: {r:.1} per hour over all partitions");
    }
    println!(
        "  index entries per full segment: {} offset, {} time (one entry every {} batch(es): at most one per batch and one per interval, never the first batch)",
        w.offset_entries_per_segment, w.time_entries_per_segment, w.batches_per_index_entry
    );
    println!(
        "  index bytes: {} per full segment (.index {} + .timeindex {}), {} in all",
        w.index_bytes_per_segment,
        w.offset_entries_per_segment * 8,
        w.time_entries_per_segment * 12,
        human_bytes(w.index_bytes_total)
    );
    println!(
        "  active segments preallocate 2 × segment.index.bytes each (sparse until written): {} of mapped address space",
        human_bytes(w.active_preallocated_bytes)
    );
    println!(
        "  this machine: vm.max_map_count {}, RLIMIT_NOFILE {} (hard {})",
        w.max_map_count.map_or_else(|| "unknown".into(), |v| v.to_string()),
        w.nofile_soft.map_or_else(|| "unlimited".into(), |v| v.to_string()),
        w.nofile_hard.map_or_else(|| "unlimited".into(), |v| v.to_string())
    );
    for c in &w.checks {
        println!("  {:<38} {:>12}  {}", c.what, c.needed, verdict(c));
        println!("  {:<38} {:>12}  model: {}", "", "", c.model);
    }
    let m = &w.seglog_memory;
    println!(
        "  seglog memory, at most {} on {} shard(s) ({} partitions each):",
        human_bytes(m.total),
        m.write_buffers / a.write_buffer_budget_bytes.max(1),
        m.partitions_per_shard
    );
    println!(
        "    write buffers     {:>10}  the write-buffer budget per shard; tail caches within it: {}",
        human_bytes(m.write_buffers),
        if m.tail_cache_per_partition == 0 {
            "none at this count (an idle tail keeps only its partial block)".to_string()
        } else {
            format!("{} per partition", human_bytes(m.tail_cache_per_partition))
        }
    );
    println!(
        "    partitions        {:>10}  {} per partition (measured: 1-13 KiB per idle partition, seglog bench --workloads partitions)",
        human_bytes(m.partitions),
        human_bytes(IDLE_PARTITION_BYTES)
    );
    println!(
        "    active indexes    {:>10}  a full segment's index bytes per partition at most (resident as written)",
        human_bytes(m.active_indexes)
    );
    println!(
        "    sealed indexes    {:>10}  the sealed segments' index bytes, at most the index memory budget ({})",
        human_bytes(m.sealed_indexes),
        human_bytes(a.index_memory_budget_bytes)
    );
}

pub fn run(args: Args) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let (soft, hard) = nofile_limits();
    let w = compute(&args, (read_max_map_count(), soft, hard))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&serde_json::json!({ "worksheet": w }))?);
    } else {
        print(&args, &w);
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(clap::Parser)]
    struct T {
        #[command(flatten)]
        a: Args,
    }

    fn args(s: &[&str]) -> Args {
        T::parse_from(std::iter::once("capacity").chain(s.iter().copied())).a
    }

    #[test]
    fn by_hand_1000_partitions_of_10_gib() {
        let a = args(&["--partitions", "1000", "--data-bytes", "10GiB", "--shards", "2"]);
        let w = compute(&a, (Some(65_530), Some(20_000), Some(20_000))).unwrap();
        // 1 GiB / 16 KiB = 65,536 batches; 4096 < 16 KiB so every batch after the first is indexed.
        assert_eq!(w.batches_per_segment, 65_536);
        assert_eq!(w.offset_entries_per_segment, 65_535);
        assert_eq!(w.time_entries_per_segment, 65_535);
        assert_eq!(w.index_bytes_per_segment, 65_535 * 20);
        assert_eq!(w.segments_per_partition, 10);
        assert_eq!(w.segments, 10_000);
        assert_eq!(w.checks[0].needed, 20_000);
        assert_eq!(w.checks[0].ok, Some(true));
        assert_eq!(w.checks[1].needed, 4);
        assert_eq!(w.checks[2].needed, 30_000);
        assert_eq!(w.checks[2].ok, Some(false));
        // seglog: one descriptor per partition and the sealed segments' files, 10,000 in all
        // (max_open_files: half the soft limit).
        assert_eq!(w.checks[4].needed, 10_000);
        // 18,000 partitions: their active .log files pass the limit, the sealed files keep a
        // quarter of it (2,500), and 20,500 exceed the soft limit.
        let many = args(&["--partitions", "18000", "--data-bytes", "180GiB"]);
        let c = &compute(&many, (Some(65_530), Some(20_000), Some(20_000))).unwrap().checks[4];
        assert_eq!((c.needed, c.ok), (18_000 + 2_500, Some(false)));
        assert_eq!(w.checks[4].ok, Some(true));
        // 500 partitions per shard share 64 MiB of tail cache: 131,072 B each, under a chunk.
        let m = &w.seglog_memory;
        assert_eq!((m.partitions_per_shard, m.tail_cache_per_partition), (500, 0));
        assert_eq!(m.write_buffers, 2 * (256 << 20));
        assert_eq!(m.partitions, 1000 * IDLE_PARTITION_BYTES);
        assert_eq!(m.active_indexes, 1000 * 65_535 * 20);
        assert_eq!(m.sealed_indexes, 1 << 30, "9,000 sealed segments' indexes, capped by the budget");
        assert_eq!(m.total, m.write_buffers + m.partitions + m.active_indexes + (1 << 30));
        // 40 partitions on one shard: 1 MiB each (64 MiB / 40 rounds down to 1 MiB, the cap).
        let few = args(&["--partitions", "40", "--data-bytes", "1GiB", "--shards", "1"]);
        assert_eq!(compute(&few, (None, None, None)).unwrap().seglog_memory.tail_cache_per_partition, 1 << 20);
        let some = args(&["--partitions", "200", "--data-bytes", "1GiB", "--shards", "1"]);
        assert_eq!(compute(&some, (None, None, None)).unwrap().seglog_memory.tail_cache_per_partition, 256 << 10);
    }

    #[test]
    fn seed_demo_segment() {
        // The seed's demo: 16,350-byte batches in 64 KiB segments.
        for (interval, entries, time) in [(4096, 3, 3), (20_000, 1, 2), (1_048_576, 0, 1)] {
            let a = args(&[
                "--partitions",
                "1",
                "--data-bytes",
                "64KiB",
                "--segment-bytes",
                "65536",
                "--avg-batch-bytes",
                "16350",
                "--index-interval-bytes",
                &interval.to_string(),
            ]);
            let w = compute(&a, (None, None, None)).unwrap();
            assert_eq!(w.batches_per_segment, 4);
            assert_eq!((w.offset_entries_per_segment, w.time_entries_per_segment), (entries, time), "{interval}");
        }
    }

    #[test]
    fn rate_and_retention() {
        let a = args(&[
            "--partitions",
            "10",
            "--produce-bytes-per-sec",
            "10MiB",
            "--retention-ms",
            "1h",
            "--retention-bytes",
            "1GiB",
        ]);
        let w = compute(&a, (None, None, None)).unwrap();
        // 1 MiB/s per partition for an hour is 3.5 GiB, capped at retention.bytes + one segment.
        assert_eq!(w.retained_bytes_per_partition, 2 << 30);
        assert!(compute(&args(&["--partitions", "1"]), (None, None, None)).is_err());
    }
}
