//! `seglog demo`: the seed's index.interval.bytes experiment, run through seglog.
//!
//! The same 5000 records go into four topics that differ only in index.interval.bytes (1, 4096,
//! 20000, 1048576): 79 records per batch, every full batch exactly 16,350 bytes, segment.bytes
//! 65536 so each segment holds four batches. Then every offset of every full segment is looked up
//! and the phase-2 walk (bytes scanned from the index entry to the hit, header hops) is reported
//! beside its bound, min(interval + one batch, segment size).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use seglog::format::builder::BatchBuilder;
use seglog::log::{Log, LogOptions, Recovery};
use seglog::{Engine, EngineConfig, IoMode, LogConfig, TopicPartition};

use crate::stats::{summarize, Summary};

pub const RECORDS: i64 = 5000;
pub const RECORDS_PER_BATCH: i64 = 79;
pub const VALUE_BYTES: usize = 197;
pub const BATCH_BYTES: u64 = 16_350;
pub const SEGMENT_BYTES: u32 = 65_536;
pub const INTERVALS: [u32; 4] = [1, 4096, 20_000, 1_048_576];

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Directory to write the four topics into (created; default: a new temporary directory).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Print the results as JSON.
    #[arg(long)]
    json: bool,
    /// Keep the temporary directory instead of deleting it.
    #[arg(long)]
    keep: bool,
    /// I/O mode: direct (O_DIRECT + io_uring), buffered (page cache + io_uring) or sync (plain
    /// pread/pwrite). The demo prints the mode it really ran in.
    #[arg(long, default_value = "direct")]
    io_mode: IoMode,
    /// Number of shards (threads); default one per core.
    #[arg(long)]
    shards: Option<usize>,
}

/// Results for one topic.
#[derive(Debug, serde::Serialize)]
pub struct TopicResult {
    pub index_interval_bytes: u32,
    pub dir: PathBuf,
    pub segments: usize,
    pub full_segments: usize,
    /// Offset-index entries of each full segment.
    pub entries_per_full_segment: Vec<usize>,
    /// Positions of the entries of the first full segment.
    pub entry_positions: Vec<u32>,
    pub lookups: usize,
    pub bytes_scanned: Summary,
    pub header_hops: Summary,
    /// min(interval + one batch, segment size).
    pub bound_bytes: u64,
}

/// Builds the 79-record batch number `n` (records `n*79 ..`), `count` records long.
pub fn demo_batch(count: i64, base_ts: i64) -> Vec<u8> {
    let mut b = BatchBuilder::new();
    let value = [b'x'; VALUE_BYTES];
    for i in 0..count {
        // Timestamp deltas under 64 keep every varint one byte, as in the seed's layout.
        b.push(base_ts + i / 2, None, Some(&value), &[]);
    }
    b.build().expect("demo batch")
}

fn topic_config(interval: u32) -> LogConfig {
    LogConfig { segment_bytes: SEGMENT_BYTES, index_interval_bytes: interval, ..LogConfig::default() }
}

/// What the engine really ran with.
#[derive(Debug)]
pub struct RunInfo {
    pub io_mode: IoMode,
    /// Why the I/O mode differs from the request, if it does.
    pub fallback: Option<String>,
    /// What each shard's index memory got (huge pages or not), one line per shard.
    pub index_memory: Vec<String>,
}

/// Produces the 5000 records into the four topics through the engine, then shuts it down.
pub fn produce_all(root: &Path, mode: IoMode, shards: Option<usize>, start_ts: i64) -> seglog::Result<RunInfo> {
    let mut cfg = EngineConfig::new(root);
    cfg.io_mode = mode;
    cfg.shards = shards;
    let engine = Engine::open(cfg)?;
    let topics: Vec<(TopicPartition, u32)> =
        INTERVALS.iter().map(|&i| (TopicPartition::new(format!("interval-{i}"), 0), i)).collect();
    for (tp, i) in &topics {
        engine.open_partition(tp, Some(topic_config(*i))).wait()?;
    }
    let mut written = 0i64;
    let mut n = 0i64;
    while written < RECORDS {
        let count = RECORDS_PER_BATCH.min(RECORDS - written);
        let batch = demo_batch(count, start_ts + n * 100);
        // The same batch goes to all four topics; wait for all four acknowledgements.
        let pending: Vec<_> = topics.iter().map(|(tp, _)| engine.append(tp, batch.clone(), 0)).collect();
        for p in pending {
            p.wait()?;
        }
        written += count;
        n += 1;
    }
    let used = RunInfo {
        io_mode: engine.io_mode(),
        fallback: engine.io_fallback_reason().map(str::to_string),
        index_memory: engine.index_memory().iter().map(|r| r.arena.summary()).collect(),
    };
    engine.shutdown()?;
    Ok(used)
}

/// Looks up every offset of every full segment of one demo topic (opened read-side after a clean
/// shutdown).
pub fn analyze_topic(dir: &Path, interval: u32, mode: IoMode) -> seglog::Result<TopicResult> {
    let options = LogOptions {
        config: topic_config(interval),
        storage: seglog::io::storage_for_mode(mode).storage,
        recovery: Recovery::Clean,
        ..LogOptions::default()
    };
    let log = Log::open(dir, options)?;
    let full_segment_bytes = BATCH_BYTES * 4;
    let mut bytes = Vec::new();
    let mut hops = Vec::new();
    let mut entries = Vec::new();
    let mut entry_positions = Vec::new();
    let mut segments = 0;
    for seg in log.segments() {
        segments += 1;
        if seg.size() as u64 != full_segment_bytes {
            continue;
        }
        entries.push(seg.offset_index().entries());
        if entry_positions.is_empty() {
            entry_positions = (0..seg.offset_index().entries()).map(|i| seg.offset_index().entry(i).position).collect();
        }
        let first = seg.base_offset();
        let next = first + 4 * RECORDS_PER_BATCH;
        for offset in first..next {
            let (hit, cost) = seg.translate_offset_with_cost(offset, 0)?;
            let hit = hit.expect("every offset of a full segment is found");
            debug_assert!(hit.offset >= offset);
            bytes.push(cost.bytes_scanned as u64);
            hops.push(cost.hops as u64);
        }
    }
    let result = TopicResult {
        index_interval_bytes: interval,
        dir: dir.to_path_buf(),
        segments,
        full_segments: entries.len(),
        entries_per_full_segment: entries,
        entry_positions,
        lookups: bytes.len(),
        bytes_scanned: summarize(&bytes),
        header_hops: summarize(&hops),
        bound_bytes: (interval as u64 + BATCH_BYTES).min(SEGMENT_BYTES as u64),
    };
    log.close()?;
    Ok(result)
}

/// Runs all four topics under `root`, with the same records (timestamps included) in each.
pub fn run_all(root: &Path, mode: IoMode, shards: Option<usize>) -> seglog::Result<(Vec<TopicResult>, RunInfo)> {
    let start_ts =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
            - 60_000;
    let info = produce_all(root, mode, shards, start_ts)?;
    let results = INTERVALS
        .iter()
        .map(|&i| analyze_topic(&root.join(format!("interval-{i}-0")), i, info.io_mode))
        .collect::<seglog::Result<Vec<_>>>()?;
    Ok((results, info))
}

/// One line per topic: its interval, segments, entries per full segment, the walks and their
/// bound.
fn print_table(results: &[TopicResult]) {
    println!(
        "{:>22} {:>9} {:>14} {:>28} {:>16} {:>8}",
        "index.interval.bytes", "segments", "entries/full", "bytes scanned min/med/max", "hops min/med/max", "bound"
    );
    for r in results {
        let e = match (r.entries_per_full_segment.iter().min(), r.entries_per_full_segment.iter().max()) {
            (Some(a), Some(b)) if a == b => format!("{a}"),
            (Some(a), Some(b)) => format!("{a}-{b}"),
            _ => "-".into(),
        };
        println!(
            "{:>22} {:>9} {:>14} {:>28} {:>16} {:>8}",
            r.index_interval_bytes,
            r.segments,
            e,
            format!("{} / {} / {}", r.bytes_scanned.min, r.bytes_scanned.median, r.bytes_scanned.max),
            format!("{} / {} / {}", r.header_hops.min, r.header_hops.median, r.header_hops.max),
            r.bound_bytes
        );
    }
}

pub fn run(args: Args) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let (root, _tmp) = match &args.dir {
        Some(d) => (d.clone(), None),
        None => {
            let t = tempfile::Builder::new().prefix("seglog-demo-").tempdir()?;
            (t.path().to_path_buf(), Some(t))
        }
    };
    let (results, info) = run_all(&root, args.io_mode, args.shards)?;
    let RunInfo { io_mode: used, fallback: why, index_memory: memory } = info;
    let identical = {
        let a = std::fs::read(root.join("interval-1-0").join("00000000000000000316.index"))?;
        let b = std::fs::read(root.join("interval-4096-0").join("00000000000000000316.index"))?;
        a == b
    };
    if args.json {
        println!(
            "{}",
            serde_json::json!({ "dir": root, "io_mode_requested": args.io_mode.name(), "io_mode": used.name(),
                "io_fallback": why, "index_memory": memory, "index_files_identical_1_vs_4096": identical,
                "topics": results })
        );
    } else {
        println!("seglog demo: {RECORDS} records, {RECORDS_PER_BATCH} per batch ({BATCH_BYTES} B), segment.bytes {SEGMENT_BYTES}");
        println!("I/O mode: {used} (asked for {})   data: {}", args.io_mode, root.display());
        if let Some(why) = &why {
            println!("  fallback: {why}");
        }
        for (shard, m) in memory.iter().enumerate() {
            println!("shard {shard} {m}");
        }
        println!();
        print_table(&results);
        println!();
        println!(
            "index files at 1 and 4096 are {} (segment 316: entries at bytes {:?})",
            if identical { "byte-identical" } else { "DIFFERENT" },
            results[0].entry_positions
        );
        println!("lookups per topic: {} (every offset of every full segment)", results[0].lookups);
    }
    if args.keep {
        if let Some(t) = _tmp {
            let p = t.keep();
            eprintln!("kept {}", p.display());
        }
    }
    Ok(ExitCode::SUCCESS)
}
