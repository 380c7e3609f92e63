//! Clean open: what reopening a directory of many segments costs after a clean shutdown. A
//! directory of `partitions` x `segments_per_partition` one-batch segments is written through the
//! engine (`segment.bytes` equal to the batch size, so every append rolls), closed cleanly, and
//! then, once per repetition and I/O mode, the page cache of every file in it is dropped and
//! `Engine::open` (which loads every partition directory it finds) plus the opening of every
//! partition (all requested at once) is timed. A clean open sanity-checks the indexes instead of
//! revalidating the segments.
//!
//! Only the page cache of the files is dropped (`posix_fadvise(DONTNEED)`); the kernel's dentry
//! and inode caches stay warm (dropping them takes `/proc/sys/vm/drop_caches`, machine-wide).

use std::path::Path;
use std::time::Instant;

use seglog::{Engine, EngineConfig, LogConfig, TopicPartition};

use super::{first_timestamp_ms, make_batch, stamp, Counters, RunReport, Setup};
use crate::pct::Hist;

/// The directory to write.
#[derive(Clone, Debug, serde::Serialize)]
pub struct OpenParams {
    pub partitions: usize,
    pub segments_per_partition: usize,
    /// Size of the one batch in each segment.
    pub batch_bytes: usize,
}

impl OpenParams {
    /// `segments` in all, 100 per partition (fewer partitions for small counts).
    pub fn for_segments(segments: usize, batch_bytes: usize) -> OpenParams {
        let per = segments.clamp(1, 100);
        OpenParams { partitions: segments.div_ceil(per).max(1), segments_per_partition: per, batch_bytes }
    }
    pub fn segments(&self) -> usize {
        self.partitions * self.segments_per_partition
    }
    fn log_config(&self) -> LogConfig {
        LogConfig { segment_bytes: self.batch_bytes as u32, preallocate: false, ..LogConfig::default() }
    }
    fn partitions(&self) -> Vec<TopicPartition> {
        (0..self.partitions).map(|i| TopicPartition::new("open", i as i32)).collect()
    }
}

/// What writing the directory did.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Written {
    pub segments: usize,
    /// Files in the directory (segments, indexes, checkpoints).
    pub files: usize,
    pub seconds: f64,
}

fn engine_config(dir: &Path, p: &OpenParams, setup: &Setup, mode: seglog::IoMode) -> EngineConfig {
    let mut cfg = EngineConfig::new(dir);
    cfg.io_mode = mode;
    cfg.shards = Some(setup.shards);
    cfg.log_config = p.log_config();
    cfg
}

/// Writes the directory (buffered I/O, no durability: only what is on disk at the clean
/// shutdown matters) and closes the engine cleanly.
pub fn write(dir: &Path, p: &OpenParams, setup: &Setup) -> seglog::Result<Written> {
    let t0 = Instant::now();
    let engine = Engine::open(engine_config(dir, p, setup, seglog::IoMode::Buffered))?;
    let tps = p.partitions();
    let opens: Vec<_> = tps.iter().map(|tp| engine.open_partition(tp, None)).collect();
    for o in opens {
        o.wait()?;
    }
    let mut batch = make_batch(p.batch_bytes, 1, 0);
    let ts = first_timestamp_ms();
    for round in 0..p.segments_per_partition {
        stamp(&mut batch, ts + round as i64);
        let acks: Vec<_> = tps.iter().map(|tp| engine.append(tp, batch.clone(), 0)).collect();
        for a in acks {
            a.wait()?;
        }
    }
    engine.shutdown()?;
    let mut w = Written { seconds: t0.elapsed().as_secs_f64(), ..Written::default() };
    for f in all_files(dir) {
        w.files += 1;
        if f.extension().is_some_and(|x| x == "log") {
            w.segments += 1;
        }
    }
    Ok(w)
}

/// Drops the page cache of every file under `dir` and times a clean open of it in `mode`:
/// `Engine::open`, then every partition's open requested at once and waited for.
pub fn run(dir: &Path, p: &OpenParams, setup: &Setup, mode: seglog::IoMode) -> seglog::Result<RunReport> {
    drop_all_cache(dir);
    let u0 = crate::rusage::Usage::now();
    let t0 = Instant::now();
    let engine = Engine::open(engine_config(dir, p, setup, mode))?;
    let tps = p.partitions();
    let opens: Vec<_> = tps.iter().map(|tp| engine.open_partition(tp, None)).collect();
    // `Engine::open` loads the partitions it finds (its load reports); opening them again then
    // does nothing and reports nothing.
    let mut segments: usize = engine.load_reports().iter().map(|(_, r)| r.segments).sum();
    let mut recovered: usize = engine.load_reports().iter().map(|(_, r)| r.segments_recovered).sum();
    for o in opens {
        let r = o.wait()?;
        segments += r.segments;
        recovered += r.segments_recovered;
    }
    let seconds = t0.elapsed().as_secs_f64();
    let mut delta = Counters::of(&engine);
    delta.usage = crate::rusage::Usage::now().since(&u0);
    let clean = engine.started_clean();
    let mut hist = Hist::new();
    hist.record(t0.elapsed());
    let s = Setup { mode, ..setup.clone() };
    let mut r = RunReport::for_engine("open", &s, &engine);
    r.batch_bytes = p.batch_bytes;
    r.ops = segments as u64;
    r.records = segments as u64;
    r.note = format!(
        "clean open of {segments} segments in {} partitions ({}; {recovered} revalidated): {seconds:.3} s, \
         {:.0} segments/s; rec/s column = segments/s, latency = the whole open; page cache of every file dropped",
        p.partitions,
        if clean { "clean shutdown marker found" } else { "NOT clean" },
        segments as f64 / seconds.max(1e-9)
    );
    let r = r.finish(hist, seconds, &delta);
    engine.shutdown()?;
    Ok(r)
}

/// Every regular file under `dir`, recursively.
fn all_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(dir) else { return out };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(all_files(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// Writes back and drops the page cache of every file under `dir` (indexes and checkpoints too,
/// not only `.log` files as [`super::drop_cache`] does). One `syncfs` writes everything back
/// (an fsync per file would cost a journal commit each: seconds for 30,000 files), then each
/// file's clean pages are dropped.
pub fn drop_all_cache(dir: &Path) {
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = nix::unistd::syncfs(&d);
    }
    for p in all_files(dir) {
        if let Ok(f) = std::fs::File::open(&p) {
            super::drop_clean_pages(&f);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_the_segments_asked_and_opens_them_clean() {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let p = OpenParams::for_segments(30, 1024);
        assert_eq!((p.partitions, p.segments_per_partition), (1, 30));
        let p = OpenParams { partitions: 3, segments_per_partition: 10, batch_bytes: 1024 };
        let setup = Setup {
            mode: seglog::IoMode::Sync,
            shards: 1,
            partitions: 1,
            batch_bytes: 1024,
            records_per_batch: 1,
            durability: seglog::Durability::None,
            segment_bytes: 1024,
            index_interval_bytes: 4096,
            preallocate: false,
            zero_fill: seglog::ZeroFill::Auto,
            sync_method: seglog::SyncMethod::default(),
        };
        let w = write(dir.path(), &p, &setup).unwrap();
        assert_eq!(w.segments, 30, "{:?}", all_files(dir.path()));
        let r = run(dir.path(), &p, &setup, seglog::IoMode::Sync).unwrap();
        assert_eq!(r.ops, 30);
        assert!(r.note.contains("clean shutdown marker found") && r.note.contains("0 revalidated"), "{}", r.note);
    }
}
