//! Percentiles (nearest rank) and medians.

/// Nearest-rank percentile of a sorted slice; 0 for an empty one.
pub fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    // The epsilon keeps float error (99.9 / 100 * 1000 = 999.0000000000001) from moving a rank.
    let r = (p * sorted.len() as f64 / 100.0 - 1e-9).ceil() as usize;
    sorted[r.clamp(1, sorted.len()) - 1]
}

/// Median of floats (mean of the middle two for an even count).
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
    pub fn from_ns(mut ns: Vec<u64>) -> Latency {
        ns.sort_unstable();
        let us = |v: u64| v as f64 / 1000.0;
        Latency {
            p50_us: us(percentile(&ns, 50.0)),
            p99_us: us(percentile(&ns, 99.0)),
            p999_us: us(percentile(&ns, 99.9)),
            max_us: us(ns.last().copied().unwrap_or(0)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn ranks() {
        let v: Vec<u64> = (1..=1000).collect();
        assert_eq!(percentile(&v, 50.0), 500);
        assert_eq!(percentile(&v, 99.9), 999);
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
    }
}
