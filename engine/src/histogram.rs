//! A latency histogram small enough to keep per shard and cheap enough to feed on every write:
//! log-linear buckets (32 per power of two), so a quantile is exact to within 1/32 (3.1 %) of
//! its value, from 1 ns to about 18 minutes (2^40 ns), in 1,152 counters. No allocation per
//! record.

use std::time::Duration;

/// Linear sub-buckets per power of two: 2^SUB_BITS.
const SUB_BITS: u32 = 5;
const SUB: u64 = 1 << SUB_BITS;
/// Values at or above 2^MAX_BITS ns (about 18 minutes) land in the last bucket.
const MAX_BITS: u32 = 40;
const BUCKETS: usize = (SUB as usize) + ((MAX_BITS - SUB_BITS) as usize) * (SUB as usize);

/// Counts of durations in log-linear buckets. [`LatencyHistogram::quantile`] answers with the
/// upper edge of the bucket holding the quantile, capped at the largest value recorded: never
/// below the true value, and at most 3.1 % above it (below 2^40 ns, where the last bucket starts).
#[derive(Clone, PartialEq, Eq)]
pub struct LatencyHistogram {
    counts: Box<[u64]>,
    total: u64,
    max_ns: u64,
}

impl Default for LatencyHistogram {
    fn default() -> LatencyHistogram {
        LatencyHistogram { counts: vec![0; BUCKETS].into_boxed_slice(), total: 0, max_ns: 0 }
    }
}

impl std::fmt::Debug for LatencyHistogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LatencyHistogram")
            .field("count", &self.total)
            .field("p50", &self.quantile(0.5))
            .field("p99", &self.quantile(0.99))
            .field("max", &self.max())
            .finish()
    }
}

fn bucket_of(ns: u64) -> usize {
    if ns < SUB {
        return ns as usize;
    }
    let msb = 63 - ns.leading_zeros();
    if msb >= MAX_BITS {
        return BUCKETS - 1;
    }
    let shift = msb - SUB_BITS;
    // The top SUB_BITS + 1 bits of the value: the leading one picks the power of two (through
    // `shift`), the SUB_BITS below it the linear step inside it.
    (SUB + u64::from(shift) * SUB + ((ns >> shift) & (SUB - 1))) as usize
}

/// The largest value that lands in bucket `b` (the last bucket also takes everything past
/// 2^MAX_BITS ns, so its edge is the largest value there is).
fn upper_edge(b: usize) -> u64 {
    if b == BUCKETS - 1 {
        return u64::MAX;
    }
    let b = b as u64;
    if b < SUB {
        return b;
    }
    let shift = (b - SUB) / SUB;
    let step = (b - SUB) % SUB;
    (((SUB + step) + 1) << shift) - 1
}

impl LatencyHistogram {
    pub fn new() -> LatencyHistogram {
        LatencyHistogram::default()
    }

    pub fn record(&mut self, d: Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.counts[bucket_of(ns)] += 1;
        self.total += 1;
        self.max_ns = self.max_ns.max(ns);
    }

    /// Values recorded.
    pub fn count(&self) -> u64 {
        self.total
    }

    /// The largest value recorded (zero when empty).
    pub fn max(&self) -> Duration {
        Duration::from_nanos(self.max_ns)
    }

    /// The value at quantile `q` (0.0 to 1.0): the upper edge of the bucket holding the
    /// `ceil(q * count)`-th smallest value, at most the largest value recorded. Zero when empty.
    pub fn quantile(&self, q: f64) -> Duration {
        if self.total == 0 {
            return Duration::ZERO;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (b, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Duration::from_nanos(upper_edge(b).min(self.max_ns));
            }
        }
        Duration::from_nanos(self.max_ns)
    }

    /// Adds every value of `other` (the maximum is the larger of the two).
    pub fn merge(&mut self, other: &LatencyHistogram) {
        for (a, b) in self.counts.iter_mut().zip(other.counts.iter()) {
            *a += b;
        }
        self.total += other.total;
        self.max_ns = self.max_ns.max(other.max_ns);
    }

    /// The values recorded since `earlier`, a snapshot of this histogram taken before: counts
    /// subtract exactly; the maximum is the overall one (a histogram keeps no history of it),
    /// capped at the upper edge of the highest bucket that gained a value.
    pub fn since(&self, earlier: &LatencyHistogram) -> LatencyHistogram {
        let mut out = LatencyHistogram::default();
        let mut top = None;
        for (b, (now, then)) in self.counts.iter().zip(earlier.counts.iter()).enumerate() {
            let c = now.saturating_sub(*then);
            out.counts[b] = c;
            if c > 0 {
                top = Some(b);
            }
        }
        out.total = out.counts.iter().sum();
        out.max_ns = top.map_or(0, |b| upper_edge(b).min(self.max_ns));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_ordered_and_tight() {
        let mut last = 0;
        for ns in (0..100_000u64).chain((1..2_000).map(|i| i * 7_919_993)) {
            let b = bucket_of(ns);
            assert!(b >= last, "bucket order at {ns}");
            last = b;
            let hi = upper_edge(b);
            assert!(hi >= ns, "{ns} above its bucket's edge {hi}");
            // The bucket's lower edge is the previous bucket's upper edge plus one.
            let lo = if b == 0 { 0 } else { upper_edge(b - 1) + 1 };
            assert!(lo <= ns, "{ns} below its bucket's start {lo}");
            assert!((hi - lo) as f64 <= (ns as f64 / 32.0).max(0.0) + 1.0, "bucket of {ns} too wide: {lo}..={hi}");
        }
        assert_eq!(bucket_of(u64::MAX), BUCKETS - 1);
        assert_eq!(upper_edge(BUCKETS - 2), (1u64 << MAX_BITS) - (1u64 << (MAX_BITS - 1 - SUB_BITS)) - 1);
        assert_eq!(upper_edge(BUCKETS - 1), u64::MAX);
        // A value past the last bucket's start is never reported below itself.
        let mut h = LatencyHistogram::new();
        h.record(Duration::from_secs(3600));
        assert_eq!(h.quantile(0.5), Duration::from_secs(3600));
    }

    #[test]
    fn quantiles_match_a_sorted_list_within_the_bucket_width() {
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
            assert!(got >= exact && got <= exact * (1.0 + 1.0 / 32.0) + 1.0, "q {q}: {got} vs {exact}");
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
        assert_eq!(delta.max(), Duration::from_micros(9_000));
        let mut merged = snapshot.clone();
        merged.merge(&delta);
        assert_eq!(merged.count(), a.count());
        assert_eq!(merged.quantile(0.9), a.quantile(0.9));
        assert_eq!(LatencyHistogram::new().quantile(0.99), Duration::ZERO);
    }
}
