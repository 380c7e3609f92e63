//! `seglog recover DIR`: runs offline exactly what opening the engine runs on a log directory
//! (clean-shutdown marker, recovery-point and log-start checkpoints, leftovers, revalidation of
//! segments from each partition's recovery point, torn tails cut, indexes rebuilt), then shuts
//! down cleanly as the engine does (checkpoints, `.kafka_cleanshutdown`), and prints what it did.
//! DIR may also be a single partition directory, recovered from offset 0.
//!
//! It owns what it recovers for the whole run, as the engine does: the log directory's `.lock`,
//! or for a partition directory that directory's lock and a shared lock on its log directory's.
//! While an engine, a `Log`, another command or a Kafka broker holds them it refuses and changes
//! nothing.

use std::path::PathBuf;
use std::process::ExitCode;

use seglog::log::{LoadReport, Log, LogOptions, Recovery};
use seglog::{Engine, EngineConfig, IoMode};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// A log directory (holding `<topic>-<partition>` directories and checkpoint files), or one
    /// partition directory.
    dir: PathBuf,
    /// I/O mode, as the engine would use (direct, buffered, sync).
    #[arg(long, default_value = "direct")]
    io_mode: IoMode,
    /// Threads revalidating one partition's segments.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

fn report_json(name: &str, r: &LoadReport) -> serde_json::Value {
    serde_json::json!({
        "partition": name,
        "segments": r.segments,
        "segments_recovered": r.segments_recovered,
        "indexes_rebuilt": r.indexes_rebuilt,
        "truncations": r.truncations.iter().map(|(p, valid, cut, why)| serde_json::json!({
            "file": p, "valid_bytes": valid, "bytes_cut": cut, "at_byte": valid, "why": why
        })).collect::<Vec<_>>(),
        "segments_removed": r.segments_removed,
        "files_removed": r.files_removed,
        "epoch_cache_rebuilt": r.epoch_cache_rebuilt,
    })
}

fn print_report(name: &str, r: &LoadReport) {
    println!(
        "{name}: {} segments, {} revalidated, {} indexes rebuilt",
        r.segments, r.segments_recovered, r.indexes_rebuilt
    );
    for (p, valid, cut, why) in &r.truncations {
        println!("  cut {cut} bytes from {} at byte {valid}: {why}", p.display());
    }
    for b in &r.segments_removed {
        println!("  removed segment {b:020} (after a truncation)");
    }
    for f in &r.files_removed {
        println!("  removed leftover {f}");
    }
    if let Some(why) = &r.epoch_cache_rebuilt {
        println!("  rebuilt leader-epoch-checkpoint from the batches: {why}");
    }
}

pub fn run(args: Args) -> Result<ExitCode, Box<dyn std::error::Error>> {
    if !args.dir.is_dir() {
        return Err(format!("{}: not a directory", args.dir.display()).into());
    }
    let name = args.dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let is_partition = seglog::format::filename::parse_partition_dir(&name).is_some()
        && std::fs::read_dir(&args.dir)?.flatten().any(|e| e.file_name().to_string_lossy().ends_with(".log"));
    if is_partition {
        return recover_partition(&args, &name);
    }
    // A directory holding no partition is not a log directory: recovering it would only add
    // checkpoints, a lock and a clean-shutdown marker to it. Leave it as it is.
    let has_partition = std::fs::read_dir(&args.dir)?.flatten().any(|e| {
        let name = e.file_name().to_string_lossy().into_owned();
        seglog::format::filename::parse_partition_dir(&name).is_some()
            && e.file_type().is_ok_and(|t| t.is_dir() || t.is_symlink())
    });
    if !has_partition {
        return Err(format!(
            "{}: no partition directories (<topic>-<partition>) and no segments: not a log directory, nothing to recover (nothing was written)",
            args.dir.display()
        )
        .into());
    }
    recover_log_dir(&args)
}

/// Recovers the partition directory `args.dir` (named `name`) from offset 0 as a lone `Log`,
/// and closes it cleanly.
fn recover_partition(args: &Args, name: &str) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let options = LogOptions {
        storage: seglog::io::storage_for_mode(args.io_mode).storage,
        recovery: Recovery::FromRecoveryPoint(0),
        recovery_threads: args.threads.max(1),
        ..LogOptions::default()
    };
    let (log, r) = Log::open_with_report(&args.dir, options)?;
    let end = log.log_end_offset();
    log.close()?;
    if args.json {
        println!("{}", serde_json::json!({ "partitions": [report_json(name, &r)], "log_end_offsets": [end] }));
    } else {
        print_report(name, &r);
        println!("log end offset {end}; closed cleanly");
    }
    Ok(ExitCode::SUCCESS)
}

/// Recovers the log directory `args.dir` by opening an engine on it, and shuts it down cleanly.
fn recover_log_dir(args: &Args) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let mut cfg = EngineConfig::new(&args.dir);
    cfg.io_mode = args.io_mode;
    cfg.recovery_threads_per_partition = args.threads.max(1);
    let engine = Engine::open(cfg)?;
    let clean = engine.started_clean();
    let mode = engine.io_mode();
    let reports: Vec<(String, serde_json::Value)> =
        engine.load_reports().iter().map(|(tp, r)| (tp.to_string(), report_json(&tp.to_string(), r))).collect();
    if !args.json {
        println!(
            "{}: previous shutdown {}; I/O mode {mode}",
            args.dir.display(),
            if clean { "clean (indexes sanity-checked)" } else { "not clean (revalidating from the recovery points)" }
        );
        for (tp, r) in engine.load_reports() {
            print_report(&tp.to_string(), r);
        }
    }
    let totals = engine.load_reports().iter().fold((0usize, 0usize, 0u64), |acc, (_, r)| {
        (
            acc.0 + r.segments_recovered,
            acc.1 + r.indexes_rebuilt,
            acc.2 + r.truncations.iter().map(|t| t.2).sum::<u64>(),
        )
    });
    engine.shutdown()?;
    if args.json {
        println!(
            "{}",
            serde_json::json!({
                "dir": args.dir, "clean_shutdown": clean, "io_mode": mode.name(),
                "partitions": reports.into_iter().map(|r| r.1).collect::<Vec<_>>(),
                "segments_revalidated": totals.0, "indexes_rebuilt": totals.1, "bytes_cut": totals.2,
            })
        );
    } else {
        println!(
            "Summary: {} segments revalidated, {} indexes rebuilt, {} bytes cut; checkpoints and .kafka_cleanshutdown written",
            totals.0, totals.1, totals.2
        );
    }
    Ok(ExitCode::SUCCESS)
}
