//! Append throughput of each I/O mode against fio doing the same pattern on the same disk, in the
//! same run: `cargo run --release -p seglog-bench --bin append-vs-fio -- --dir /var/tmp/b`.
//! Runs are interleaved (seglog mode, fio, next mode, ...) and repeated; medians are reported.

use std::path::PathBuf;

use clap::Parser;
use seglog::engine::SyncMethod;
use seglog::{Durability, IoMode, ZeroFill};
use seglog_bench::append::{run, AppendParams, AppendResult};
use seglog_bench::fio;
use seglog_bench::fio::FioLayout;
use seglog_bench::pct::median;

#[derive(Parser, Debug)]
struct Args {
    /// Directory on the disk to measure (not tmpfs).
    #[arg(long, default_value = "/var/tmp/seglog-bench")]
    dir: PathBuf,
    /// Batch size in bytes.
    #[arg(long, default_value_t = 16_384)]
    batch_bytes: usize,
    /// Bytes appended per run.
    #[arg(long, default_value_t = 512 << 20)]
    total_bytes: u64,
    /// Appends in flight.
    #[arg(long, default_value_t = 1)]
    window: usize,
    /// Repetitions (medians reported).
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Modes to run.
    #[arg(long, value_delimiter = ',', default_value = "direct,buffered,sync")]
    modes: Vec<IoMode>,
    /// Ack after fdatasync (group commit per loop turn).
    #[arg(long)]
    durable: bool,
    #[arg(long)]
    preallocate: bool,
    /// With --durable: `fdatasync` (write + linked fdatasync; fio --fdatasync=1), `dsync`
    /// (RWF_DSYNC writes; fio --sync=dsync) or `syncfs` (plain writes and a shared syncfs per
    /// shard; fio has none: compared with fio --sync=dsync).
    #[arg(long, default_value = "fdatasync")]
    sync_method: SyncMethod,
    /// Partitions appended to (fio runs one file, so compare with fio at 1 only).
    #[arg(long, default_value_t = 1)]
    partitions: usize,
    /// Producer threads, each appending to every partition in turn with `window` in flight per
    /// partition.
    #[arg(long, default_value_t = 1)]
    producers: usize,
    #[arg(long, default_value_t = 1)]
    shards: usize,
    /// Microseconds a producer spins on each completion before sleeping (default: the engine's
    /// `Completion::wait`, which spins as long as the thread's recent waits took, up to 500).
    #[arg(long)]
    wait_spin_us: Option<u64>,
    /// The engine's `io_spin_us`: how long the shard polls for write completions before
    /// sleeping, while at most one partition writes (default: the engine's).
    #[arg(long)]
    io_spin_us: Option<u64>,
    /// fio's file layout: `match` (what seglog's appends see: written when zero fill is on,
    /// fallocated with --preallocate, else given its length first in direct mode and extended
    /// through the page cache), `fallocate` (fio's default), `extend`, `sparse` (a length set
    /// first) or `written` (a file of zeros written beforehand).
    #[arg(long, default_value = "match")]
    fio_layout: String,
    /// The engine's zero fill: auto (on with --durable in direct mode), off, or a lead
    /// in bytes (8MiB).
    #[arg(long, default_value = "auto")]
    zero_fill: ZeroFill,
    /// Run seglog only.
    #[arg(long)]
    skip_fio: bool,
    /// Leave the shard threads unpinned (the engine pins them by default).
    #[arg(long)]
    no_pin: bool,
    /// Cores to pin the shards to, comma-separated (shard i on the i-th); default: the
    /// engine's (every allowed core in order). On a machine whose disk interrupts all land on
    /// one core, this shows what running the shard on that core, or away from it, costs.
    #[arg(long, value_delimiter = ',')]
    cores: Option<Vec<usize>>,
    #[arg(long)]
    json: bool,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    seglog_bench::apply_env_knobs();
    let a = Args::parse();
    if !a.skip_fio {
        fio::ensure_fio()?;
    }
    // `match`: the layout seglog's appends see, per mode; else the one named.
    let fixed_layout: Option<FioLayout> =
        if a.fio_layout == "match" { None } else { Some(a.fio_layout.parse::<FioLayout>()?) };
    let durability = if a.durable { Durability::EveryBatch } else { Durability::None };
    let fio_layout = |mode: IoMode| -> FioLayout {
        fixed_layout.unwrap_or(if a.zero_fill.lead_bytes(durability, mode) > 0 {
            FioLayout::Written
        } else if a.preallocate {
            FioLayout::Fallocate
        } else if mode == IoMode::Direct {
            // The engine keeps a direct-mode `.log`'s length ahead of its data.
            FioLayout::Sparse
        } else {
            FioLayout::Extend
        })
    };
    let sync = match (a.durable, a.sync_method) {
        (false, _) => fio::FioSync::None,
        (true, SyncMethod::Fdatasync) => fio::FioSync::Fdatasync(1),
        // fio has no syncfs: compare with a durable write per file, as the default.
        (true, SyncMethod::DsyncWrites | SyncMethod::Syncfs) => fio::FioSync::Dsync,
    };
    // fio's whole latency per write is the same operation as an append's write only when no
    // separate fdatasync follows it (fio reports that apart, in its sync latencies).
    let fio_lat = |f: &fio::FioResult, p99: bool| -> String {
        match sync {
            fio::FioSync::Fdatasync(_) => "-".into(),
            _ => format!("{:.0}", if p99 { f.lat_p99_us } else { f.lat_p50_us }),
        }
    };
    std::fs::create_dir_all(&a.dir)?;
    let mut rows: Vec<(IoMode, Vec<AppendResult>, Vec<fio::FioResult>)> =
        a.modes.iter().map(|m| (*m, vec![], vec![])).collect();
    for rep in 0..a.reps {
        for row in rows.iter_mut() {
            let d = tempfile::tempdir_in(&a.dir)?;
            let p = AppendParams {
                mode: row.0,
                durability,
                batch_bytes: a.batch_bytes,
                total_bytes: a.total_bytes,
                window: a.window,
                partitions: a.partitions,
                shards: a.shards,
                preallocate: a.preallocate,
                sync_method: a.sync_method,
                producers: a.producers,
                pin_threads: !a.no_pin,
                cores: a.cores.clone(),
                wait_spin_us: a.wait_spin_us,
                io_spin_us: a.io_spin_us,
                zero_fill: a.zero_fill,
            };
            // Each side starts from a settled filesystem (the previous run's files deleted,
            // their journal commits and discards done). A failure is reported, not fatal.
            let settle = || {
                if let Err(e) = fio::settle(&a.dir) {
                    eprintln!("append-vs-fio: {e}");
                }
            };
            settle();
            let r = run(d.path(), &p)?;
            drop(d);
            if !a.skip_fio {
                settle();
            }
            // fio: the same pattern as seglog's writes: sequential, the new bytes each of
            // seglog's flushes carried (rounded to 4 KiB), queue depth 1 (one write in flight per
            // partition). Not the average write size: that counts the partial block each write
            // rewrites, and a flush crossing a tail chunk boundary as two writes.
            let bs = ((r.bytes_per_flush / 4096.0).round().max(1.0) as u64) * 4096;
            let direct = row.0 == IoMode::Direct;
            let layout = fio_layout(row.0);
            let f = if a.skip_fio {
                fio::FioResult::default()
            } else {
                fio::seq_write_as(&a.dir, bs, 1, a.total_bytes, direct, sync, layout)?
            };
            eprintln!(
                "rep {rep} {:<8} seglog {:>8.1} MB/s  fio(bs={bs},qd=1,direct={direct},{}) {:>8.1} MB/s  \
                 ratio {:>4.0}%  p50 {:.0}/{} us  p99 {:.0}/{} us (seglog's write itself {:.0}/{:.0})  \
                 enters/batch {:.2}  buffers {} ({:.0}% fixed)",
                r.mode,
                r.mb_per_s,
                layout.name(),
                f.mb_per_s,
                100.0 * r.mb_per_s / f.mb_per_s,
                r.latency.p50_us,
                fio_lat(&f, false),
                r.latency.p99_us,
                fio_lat(&f, true),
                r.write_p50_us,
                r.write_p99_us,
                r.enters_per_batch,
                r.write_buffers,
                100.0 * r.fixed_write_share
            );
            row.1.push(r);
            row.2.push(f);
        }
    }
    let mut out = Vec::new();
    // `ratio`: of the medians; `pair ratio`: median of each repetition's seglog/fio ratio (the
    // two runs of a pair are seconds apart, so this one is less exposed to the disk's drift).
    println!(
        "{:<9} {:>12} {:>12} {:>7} {:>10} {:>9} {:>9} {:>9} {:>9} {:>13} {:>11} {:>11}",
        "mode",
        "seglog MB/s",
        "fio MB/s",
        "ratio",
        "pair ratio",
        "p50 us",
        "fio p50",
        "p99 us",
        "p99.9 us",
        "enters/batch",
        "write size",
        "flush size"
    );
    for (mode, rs, fs) in &rows {
        let s = median(&rs.iter().map(|r| r.mb_per_s).collect::<Vec<_>>());
        let f = median(&fs.iter().map(|r| r.mb_per_s).collect::<Vec<_>>());
        let pair = median(&rs.iter().zip(fs).map(|(r, f)| r.mb_per_s / f.mb_per_s).collect::<Vec<_>>());
        let m = |g: fn(&AppendResult) -> f64| median(&rs.iter().map(g).collect::<Vec<_>>());
        println!(
            "{:<9} {:>12.1} {:>12.1} {:>6.0}% {:>9.0}% {:>9.1} {:>9} {:>9.1} {:>9.1} {:>13.2} {:>11.0} {:>11.0}",
            format!("{mode}{}", if rs[0].mode != mode.name() { "*" } else { "" }),
            s,
            f,
            100.0 * s / f,
            100.0 * pair,
            m(|r| r.latency.p50_us),
            match sync {
                fio::FioSync::Fdatasync(_) => "-".to_string(),
                _ => format!("{:.1}", median(&fs.iter().map(|f| f.lat_p50_us).collect::<Vec<_>>())),
            },
            m(|r| r.latency.p99_us),
            m(|r| r.latency.p999_us),
            m(|r| r.enters_per_batch),
            m(|r| r.avg_write_bytes),
            m(|r| r.bytes_per_flush)
        );
        out.push(serde_json::json!({"mode": mode.name(), "seglog": rs, "fio": fs, "median_seglog_mb_s": s, "median_fio_mb_s": f}));
    }
    if a.json {
        println!("{}", serde_json::Value::Array(out));
    }
    Ok(())
}
