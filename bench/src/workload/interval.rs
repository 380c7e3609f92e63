//! Lookup cost against `index.interval.bytes`: the same batches written into in-memory logs (the
//! engine's simulated disk, so nothing but the lookup is timed) that differ only in the interval,
//! then random offsets translated to positions (offset-index search plus header walk). For each
//! interval: index entries, nanoseconds per lookup (p50, p99) and bytes the walk stepped over.

use std::sync::Arc;
use std::time::Instant;

use seglog::io::sim::SimStorage;
use seglog::log::{Log, LogOptions};
use seglog::LogConfig;

use super::{first_timestamp_ms, make_batch, stamp, Rng};
use crate::pct::Hist;

/// One interval's figures.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct IntervalPoint {
    pub index_interval_bytes: u32,
    pub index_entries: usize,
    pub lookup_p50_ns: f64,
    pub lookup_p99_ns: f64,
    pub mean_bytes_scanned: f64,
    pub mean_hops: f64,
}

/// Writes `log_bytes` of `batch_bytes` batches once per interval and times `lookups` lookups.
pub fn run(
    intervals: &[u32],
    batch_bytes: usize,
    log_bytes: u64,
    lookups: u64,
    seed: u64,
) -> seglog::Result<Vec<IntervalPoint>> {
    let template = make_batch(batch_bytes, 1, 0);
    let n = (log_bytes / template.len() as u64).max(2);
    let ts0 = first_timestamp_ms();
    let mut out = Vec::new();
    for &interval in intervals {
        let config = LogConfig { index_interval_bytes: interval, segment_bytes: 1 << 30, ..LogConfig::default() };
        let options = LogOptions { storage: Arc::new(SimStorage::new()), ..LogOptions::with_config(config) };
        let mut log = Log::open("/sim/interval-0", options)?;
        for i in 0..n {
            let mut b = template.clone();
            stamp(&mut b, ts0 + i as i64);
            log.append_as_leader(&mut b, 0)?;
        }
        let seg = log.floor_segment(0).expect("one segment");
        let entries = seg.index_entries().0;
        let mut rng = Rng::new(seed);
        let mut hist = Hist::new();
        let (mut scanned, mut hops) = (0u64, 0u64);
        for k in 0..lookups + 1000 {
            let off = rng.range(0, n as i64);
            let s = Instant::now();
            let (hit, cost) = seg.translate_offset_with_cost(off, 0)?;
            let took = s.elapsed();
            std::hint::black_box(hit);
            if k >= 1000 {
                hist.record(took);
                scanned += cost.bytes_scanned as u64;
                hops += cost.hops as u64;
            }
        }
        let l = hist.latency();
        out.push(IntervalPoint {
            index_interval_bytes: interval,
            index_entries: entries,
            lookup_p50_ns: l.p50_us * 1000.0,
            lookup_p99_ns: l.p99_us * 1000.0,
            mean_bytes_scanned: scanned as f64 / lookups.max(1) as f64,
            mean_hops: hops as f64 / lookups.max(1) as f64,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wider_interval_means_fewer_entries_and_longer_walks() {
        let pts = run(&[1, 65_536], 1024, 2 << 20, 2000, 7).unwrap();
        assert!(pts[0].index_entries > pts[1].index_entries * 10, "{pts:?}");
        assert!(pts[0].mean_bytes_scanned < pts[1].mean_bytes_scanned, "{pts:?}");
    }
}
