//! A latency histogram small enough to keep per shard and cheap enough to feed on every write:
//! an HDR histogram (the `hdrhistogram` crate) with two significant digits, so a quantile is
//! within 1 % of its value, from 1 ns to about 18 minutes (2^40 ns; longer values count as
//! that), plus the exact largest value. No allocation per record.

use std::time::Duration;

/// Values at or above this many ns (about 18 minutes) count as it.
const MAX_NS: u64 = 1 << 40;

/// Durations recorded in an HDR histogram. [`LatencyHistogram::quantile`] answers with the
/// highest value equivalent to the quantile's (never below the true value, at most 1 % above
/// it), capped at the largest value recorded.
#[derive(Clone)]
pub struct LatencyHistogram {
    hdr: hdrhistogram::Histogram<u64>,
    max_ns: u64,
}

impl Default for LatencyHistogram {
    fn default() -> LatencyHistogram {
        // 1 ns to 2^40 ns at two significant digits: valid bounds, so this cannot fail.
        let hdr = hdrhistogram::Histogram::new_with_bounds(1, MAX_NS, 2).expect("valid histogram bounds");
        LatencyHistogram { hdr, max_ns: 0 }
    }
}

impl PartialEq for LatencyHistogram {
    fn eq(&self, other: &LatencyHistogram) -> bool {
        self.max_ns == other.max_ns && self.hdr == other.hdr
    }
}
impl Eq for LatencyHistogram {}

impl std::fmt::Debug for LatencyHistogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LatencyHistogram")
            .field("count", &self.count())
            .field("p50", &self.quantile(0.5))
            .field("p99", &self.quantile(0.99))
            .field("max", &self.max())
            .finish()
    }
}

impl LatencyHistogram {
    pub fn new() -> LatencyHistogram {
        LatencyHistogram::default()
    }

    pub(crate) fn record(&mut self, d: Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.hdr.saturating_record(ns.min(MAX_NS));
        self.max_ns = self.max_ns.max(ns);
    }

    /// Values recorded.
    pub fn count(&self) -> u64 {
        self.hdr.len()
    }

    /// The largest value recorded (zero when empty).
    pub fn max(&self) -> Duration {
        Duration::from_nanos(self.max_ns)
    }

    /// The value at quantile `q` (0.0 to 1.0), at most the largest value recorded. Zero when
    /// empty.
    pub fn quantile(&self, q: f64) -> Duration {
        if self.hdr.is_empty() {
            return Duration::ZERO;
        }
        let v = self.hdr.value_at_quantile(q.clamp(0.0, 1.0));
        // The top bucket also holds everything past MAX_NS: its edge is the largest value.
        let v = if v >= self.hdr.lowest_equivalent(MAX_NS) { u64::MAX } else { self.hdr.highest_equivalent(v) };
        Duration::from_nanos(v.min(self.max_ns))
    }

    /// Adds every value of `other` (the maximum is the larger of the two).
    pub fn merge(&mut self, other: &LatencyHistogram) {
        // Both have the same bounds, so adding cannot fail.
        let _ = self.hdr.add(&other.hdr);
        self.max_ns = self.max_ns.max(other.max_ns);
    }

    /// The values recorded since `earlier`, a snapshot of this histogram taken before: counts
    /// subtract exactly; the maximum is the overall one (a histogram keeps no history of it),
    /// capped at the highest value equivalent to the largest value gained.
    pub fn since(&self, earlier: &LatencyHistogram) -> LatencyHistogram {
        let mut out = self.clone();
        if out.hdr.subtract(&earlier.hdr).is_err() {
            // `earlier` was not a snapshot of this one: nothing is known to be recorded since.
            return LatencyHistogram::new();
        }
        out.max_ns = if out.hdr.is_empty() { 0 } else { out.hdr.highest_equivalent(out.hdr.max()).min(self.max_ns) };
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extremes_are_never_reported_below_themselves() {
        let mut h = LatencyHistogram::new();
        h.record(Duration::from_secs(3600));
        assert_eq!(h.quantile(0.5), Duration::from_secs(3600));
        h.record(Duration::ZERO);
        assert_eq!(h.quantile(0.0), Duration::ZERO);
        assert_eq!(h.count(), 2);
    }

    #[test]
    fn quantiles_match_a_sorted_list_within_one_percent() {
        // A skewed set: mostly ~80 us, a tail to ~20 ms, as device write times are.
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut values = Vec::new();
        let mut h = LatencyHistogram::new();
        for i in 0..20_000u64 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let ns = if i % 100 == 0 { 1_000_000 + state % 19_000_000 } else { 60_000 + state % 40_000 };
            values.push(ns);
            h.record(Duration::from_nanos(ns));
        }
        values.sort_unstable();
        for q in [0.0, 0.1, 0.5, 0.9, 0.99, 0.999, 1.0] {
            let rank = ((q * values.len() as f64).ceil() as usize).max(1);
            let exact = values[rank - 1] as f64;
            let got = h.quantile(q).as_nanos() as f64;
            assert!(got >= exact && got <= exact * 1.01 + 1.0, "q {q}: {got} vs {exact}");
        }
        assert_eq!(h.count(), 20_000);
        assert_eq!(h.max().as_nanos() as u64, *values.last().unwrap());
        assert_eq!(h.quantile(1.0), h.max());
    }

    #[test]
    fn since_and_merge_are_inverse() {
        let mut a = LatencyHistogram::new();
        for us in [5, 50, 500] {
            a.record(Duration::from_micros(us));
        }
        let snapshot = a.clone();
        let mut later = LatencyHistogram::new();
        for us in [70, 80, 9_000] {
            a.record(Duration::from_micros(us));
            later.record(Duration::from_micros(us));
        }
        let delta = a.since(&snapshot);
        assert_eq!(delta.count(), 3);
        assert_eq!(delta.quantile(0.5), later.quantile(0.5));
        assert!(delta.max() >= Duration::from_micros(9_000) && delta.max() <= Duration::from_micros(9_090));
        let mut merged = snapshot.clone();
        merged.merge(&delta);
        assert_eq!(merged.count(), a.count());
        assert_eq!(merged.quantile(0.9), a.quantile(0.9));
        assert_eq!(LatencyHistogram::new().quantile(0.99), Duration::ZERO);
    }
}
