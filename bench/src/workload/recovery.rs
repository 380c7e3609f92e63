//! Recovery: what reopening costs after a crash. The directory a produce run left (closed) is made
//! to look like a crash: the clean-shutdown marker and the recovery-point checkpoint are removed
//! (so every segment is revalidated and both its indexes rebuilt), 4 KiB of zeros are appended to
//! each partition's last `.log` (ext4 can come back with the size extended and zeros in place of
//! the data), and the page cache of the `.log` files is dropped, as after a power cut. Then the
//! engine is opened and timed. The recovery rate is the `.log` bytes revalidated over that time;
//! [`disk_read`] is the disk's own sequential read of the same files (fio), for the ratio.

use std::io::Write;
use std::path::Path;
use std::time::Instant;

use seglog::format::checkpoint::{CLEAN_SHUTDOWN_FILE, RECOVERY_POINT_OFFSET_CHECKPOINT_FILE};

use super::{drop_cache, log_files, Counters, RunReport, Setup};
use crate::pct::Hist;

/// Bytes of zeros appended to the last segment of each partition (the torn tail).
pub const TORN_TAIL_BYTES: usize = 4096;

/// Simulates the crash on `dir` (which no engine has open) and returns the `.log` bytes it holds.
pub fn crash(dir: &Path) -> std::io::Result<u64> {
    let _ = std::fs::remove_file(dir.join(CLEAN_SHUTDOWN_FILE));
    let _ = std::fs::remove_file(dir.join(RECOVERY_POINT_OFFSET_CHECKPOINT_FILE));
    let mut logs = log_files(dir);
    logs.sort();
    let mut by_dir: std::collections::BTreeMap<std::path::PathBuf, std::path::PathBuf> = Default::default();
    let mut bytes = 0u64;
    for l in &logs {
        bytes += std::fs::metadata(l)?.len();
        if let Some(parent) = l.parent() {
            by_dir.insert(parent.to_path_buf(), l.clone());
        }
    }
    for last in by_dir.values() {
        let mut f = std::fs::OpenOptions::new().append(true).open(last)?;
        f.write_all(&[0u8; TORN_TAIL_BYTES])?;
        f.sync_data()?;
    }
    drop_cache(dir);
    Ok(bytes)
}

/// Crashes `dir` and times the engine's reopen (recovery of every segment, torn tails cut).
pub fn run(dir: &Path, setup: &Setup) -> seglog::Result<RunReport> {
    let bytes =
        crash(dir).map_err(|source| seglog::Error::Io { op: "simulate crash", path: dir.to_path_buf(), source })?;
    let u0 = crate::rusage::Usage::now();
    let t0 = Instant::now();
    let (engine, _tps) = setup.open(dir)?;
    let seconds = t0.elapsed().as_secs_f64();
    let mut delta = Counters { usage: crate::rusage::Usage::now().since(&u0), ..Counters::default() };
    let stats = engine.stats()?;
    delta.io_enters = stats.iter().map(|s| s.io_enters).sum();
    delta.io_ops = stats.iter().map(|s| s.io_ops).sum();
    delta.bytes_read = stats.iter().map(|s| s.bytes_read).sum();
    let reports = engine.load_reports();
    let segments: usize = reports.iter().map(|(_, r)| r.segments).sum();
    let recovered: usize = reports.iter().map(|(_, r)| r.segments_recovered).sum();
    let cut: u64 = reports.iter().flat_map(|(_, r)| r.truncations.iter().map(|t| t.2)).sum();
    let mut hist = Hist::new();
    hist.record(t0.elapsed());
    let mut r = RunReport::for_engine("recovery", setup, &engine);
    r.ops = segments as u64;
    r.bytes = bytes;
    r.records = bytes / setup.batch_bytes.max(1) as u64 * setup.records_per_batch as u64;
    let mb = (bytes as f64 / 1e6).max(1e-9);
    r.note = format!(
        "{recovered} of {segments} segments revalidated, indexes rebuilt, {cut} torn bytes cut; cold page cache; \
         {:.1} I/O operations and {:.1} io_uring_enter per MB revalidated ({} KiB recovery reads)",
        delta.io_ops as f64 / mb,
        delta.io_enters as f64 / mb,
        seglog::segment::recovery_read_bytes() / 1024
    );
    let r = r.finish(hist, seconds, &delta);
    engine.shutdown()?;
    Ok(r)
}

/// The disk's sequential read of the `.log` files under `dir` (what recovery just revalidated),
/// measured by fio as recovery reads them: 1 MiB blocks, queue depth 1, O_DIRECT in direct mode,
/// through a dropped page cache otherwise.
pub fn disk_read(dir: &Path, mode: seglog::IoMode) -> Result<(crate::fio::FioResult, String), String> {
    let mut logs = log_files(dir);
    logs.sort();
    let direct = mode == seglog::IoMode::Direct;
    if !direct {
        drop_cache(dir);
    }
    let bs = 1u64 << 20;
    let f = crate::fio::seq_read_files(&logs, bs, direct)?;
    let job = format!(
        "seq read of the same {} .log files {} bs=1m qd=1",
        logs.len(),
        if direct { "O_DIRECT" } else { "buffered, cache dropped" }
    );
    Ok((f, job))
}

/// I/O operations per MB revalidated of a recovery run (from its per-segment figure).
pub fn ios_per_mb(r: &RunReport) -> f64 {
    if r.bytes == 0 {
        0.0
    } else {
        r.ios_per_op * r.ops as f64 / (r.bytes as f64 / 1e6)
    }
}
