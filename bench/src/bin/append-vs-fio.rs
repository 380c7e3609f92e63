//! Append throughput of each I/O mode against fio doing the same pattern on the same disk, in the
//! same run: `cargo run --release -p seglog-bench --bin append-vs-fio -- --dir /var/tmp/b`.
//! Runs are interleaved (seglog mode, fio, next mode, ...) and repeated; medians are reported.

use std::path::PathBuf;

use clap::Parser;
use seglog::{Durability, IoMode};
use seglog_bench::append::{run, AppendParams, AppendResult};
use seglog_bench::fio;
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
    #[arg(long)]
    json: bool,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let a = Args::parse();
    fio::ensure_fio()?;
    std::fs::create_dir_all(&a.dir)?;
    let mut rows: Vec<(IoMode, Vec<AppendResult>, Vec<fio::FioResult>)> =
        a.modes.iter().map(|m| (*m, vec![], vec![])).collect();
    for rep in 0..a.reps {
        for row in rows.iter_mut() {
            let d = tempfile::tempdir_in(&a.dir)?;
            let p = AppendParams {
                mode: row.0,
                durability: if a.durable { Durability::EveryBatch } else { Durability::None },
                batch_bytes: a.batch_bytes,
                total_bytes: a.total_bytes,
                window: a.window,
                partitions: 1,
                shards: 1,
                preallocate: a.preallocate,
            };
            let r = run(d.path(), &p)?;
            drop(d);
            // fio: the same pattern as seglog's writes: sequential, the average write size seglog
            // issued (rounded to 4 KiB), queue depth 1 (one write per partition per loop turn).
            let bs = ((r.avg_write_bytes / 4096.0).round().max(1.0) as u64) * 4096;
            let direct = row.0 == IoMode::Direct;
            let f = fio::seq_write(&a.dir, bs, 1, a.total_bytes, direct, if a.durable { 1 } else { 0 })?;
            eprintln!(
                "rep {rep} {:<8} seglog {:>8.1} MB/s  fio(bs={bs},qd=1,direct={direct}) {:>8.1} MB/s  enters/batch {:.2}",
                r.mode, r.mb_per_s, f.mb_per_s, r.enters_per_batch
            );
            row.1.push(r);
            row.2.push(f);
        }
    }
    let mut out = Vec::new();
    println!(
        "{:<9} {:>12} {:>12} {:>7} {:>9} {:>9} {:>9} {:>13} {:>11}",
        "mode", "seglog MB/s", "fio MB/s", "ratio", "p50 us", "p99 us", "p99.9 us", "enters/batch", "write size"
    );
    for (mode, rs, fs) in &rows {
        let s = median(&rs.iter().map(|r| r.mb_per_s).collect::<Vec<_>>());
        let f = median(&fs.iter().map(|r| r.mb_per_s).collect::<Vec<_>>());
        let m = |g: fn(&AppendResult) -> f64| median(&rs.iter().map(g).collect::<Vec<_>>());
        println!(
            "{:<9} {:>12.1} {:>12.1} {:>6.0}% {:>9.1} {:>9.1} {:>9.1} {:>13.2} {:>11.0}",
            format!("{mode}{}", if rs[0].mode != mode.name() { "*" } else { "" }),
            s,
            f,
            100.0 * s / f,
            m(|r| r.latency.p50_us),
            m(|r| r.latency.p99_us),
            m(|r| r.latency.p999_us),
            m(|r| r.enters_per_batch),
            m(|r| r.avg_write_bytes)
        );
        out.push(serde_json::json!({"mode": mode.name(), "seglog": rs, "fio": fs, "median_seglog_mb_s": s, "median_fio_mb_s": f}));
    }
    if a.json {
        println!("{}", serde_json::Value::Array(out));
    }
    Ok(())
}
