//! Latency histograms (HDR, the `hdrhistogram` crate: 3 significant digits from 1 ns to 100 s, so
//! a run of millions of operations costs a few kilobytes, not a sorted vector) and their
//! summaries, and the exact median of the few figures that repetitions give.

/// Median of floats (mean of the middle two for an even count): exact, for the handful of
/// per-repetition figures a summary takes the median of (not for latencies: see [`Hist`]).
pub fn median(v: &[f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

/// Latency summary in microseconds.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct Latency {
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub max_us: f64,
}

impl Latency {
    /// The summary of an HDR histogram of nanoseconds.
    pub fn from_hist(h: &Hist) -> Latency {
        let us = |v: u64| v as f64 / 1000.0;
        if h.0.is_empty() {
            return Latency::default();
        }
        Latency {
            p50_us: us(h.0.value_at_quantile(0.50)),
            p99_us: us(h.0.value_at_quantile(0.99)),
            p999_us: us(h.0.value_at_quantile(0.999)),
            max_us: us(h.0.max()),
        }
    }

    /// The summary of the engine's own histogram (`ShardStats::write_latency`): an HDR histogram
    /// at two significant digits, each quantile at most 1 % above the true value.
    pub fn from_engine(h: &seglog::LatencyHistogram) -> Latency {
        let us = |d: std::time::Duration| d.as_nanos() as f64 / 1000.0;
        Latency {
            p50_us: us(h.quantile(0.50)),
            p99_us: us(h.quantile(0.99)),
            p999_us: us(h.quantile(0.999)),
            max_us: us(h.max()),
        }
    }
}

/// A latency histogram in nanoseconds.
#[derive(Clone, Debug)]
pub struct Hist(pub hdrhistogram::Histogram<u64>);

impl Default for Hist {
    fn default() -> Self {
        Hist::new()
    }
}

impl Hist {
    pub fn new() -> Hist {
        Hist(hdrhistogram::Histogram::new_with_bounds(1, 100_000_000_000, 3).expect("valid HDR bounds"))
    }
    /// Records one latency (clamped into the histogram's range).
    pub fn record_ns(&mut self, ns: u64) {
        self.0.saturating_record(ns.max(1));
    }
    pub fn record(&mut self, d: std::time::Duration) {
        self.record_ns(d.as_nanos().min(u64::MAX as u128) as u64);
    }
    pub fn merge(&mut self, other: &Hist) {
        let _ = self.0.add(&other.0);
    }
    pub fn count(&self) -> u64 {
        self.0.len()
    }
    pub fn latency(&self) -> Latency {
        Latency::from_hist(self)
    }
    /// The latency at quantile `q` (0.5 for the median), in nanoseconds; 0 when empty.
    pub fn quantile_ns(&self, q: f64) -> u64 {
        if self.0.is_empty() {
            0
        } else {
            self.0.value_at_quantile(q)
        }
    }
    /// Points of the cumulative distribution, `(latency us, fraction at or below)`, spaced evenly
    /// in "nines" (0.5, 0.9, 0.99, ...) up to the maximum: what a latency CDF plot draws.
    pub fn cdf(&self) -> Vec<(f64, f64)> {
        if self.0.is_empty() {
            return Vec::new();
        }
        let mut out = Vec::new();
        let n = self.0.len() as f64;
        let mut nines = 0.0f64;
        while nines <= 6.0 {
            let q = 1.0 - 10f64.powf(-nines);
            out.push((self.0.value_at_quantile(q) as f64 / 1000.0, q));
            if q * n >= n - 1.0 {
                break;
            }
            nines += 0.05;
        }
        out.push((self.0.max() as f64 / 1000.0, 1.0));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn medians() {
        assert_eq!(median(&[]), 0.0);
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
    }

    #[test]
    fn hist_quantiles() {
        let mut h = Hist::new();
        for v in 1..=1000u64 {
            h.record_ns(v * 1000);
        }
        let l = h.latency();
        assert!((l.p50_us - 500.0).abs() < 1.0, "{l:?}");
        assert!((l.p99_us - 990.0).abs() < 2.0, "{l:?}");
        assert!((l.max_us - 1000.0).abs() < 1.0, "{l:?}");
        // Three significant digits: within 0.1 % of the exact value.
        let p999 = h.quantile_ns(0.999);
        assert!(p999 >= 999_000 && p999 - 999_000 <= 999, "{p999}");
        assert_eq!(Hist::new().quantile_ns(0.5), 0);
        let cdf = h.cdf();
        assert!(cdf.windows(2).all(|w| w[0].1 <= w[1].1 && w[0].0 <= w[1].0));
        assert_eq!(cdf.last().unwrap().1, 1.0);
    }
}
