//! Order statistics for reports (min, median, p99, max) over integer samples.

/// Min, median, p99 and max of a sample; all zero for an empty sample.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Summary {
    pub count: usize,
    pub min: u64,
    pub median: u64,
    pub p99: u64,
    pub max: u64,
}

/// Nearest-rank percentiles over a copy of `samples`.
pub fn summarize(samples: &[u64]) -> Summary {
    if samples.is_empty() {
        return Summary::default();
    }
    let mut v = samples.to_vec();
    v.sort_unstable();
    let rank = |p: f64| -> u64 {
        let r = (p * v.len() as f64 / 100.0 - 1e-9).ceil() as usize;
        v[r.clamp(1, v.len()) - 1]
    };
    Summary { count: v.len(), min: v[0], median: rank(50.0), p99: rank(99.0), max: v[v.len() - 1] }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank() {
        let s = summarize(&[5, 1, 3, 2, 4]);
        assert_eq!((s.min, s.median, s.p99, s.max), (1, 3, 5, 5));
        assert_eq!(summarize(&[]), Summary::default());
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(summarize(&v).p99, 99);
    }
}
