//! Order statistics for reports (min, median, p99, max) over integer samples: over a slice
//! ([`summarize`]), or over a stream in bounded memory ([`Distribution`]: exact while the values
//! are few, then an HDR histogram from `hdrhistogram`). Nearest-rank percentiles throughout, so a
//! report's figures are exact wherever the values allow it (the demo, the fixtures, the tests).

use std::collections::BTreeMap;

/// Min, median, p99 and max of a sample; all zero for an empty sample.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Summary {
    pub count: usize,
    pub min: u64,
    pub median: u64,
    pub p99: u64,
    pub max: u64,
    /// The median and p99 come from a histogram (see [`Distribution`]): each is at most 1/1024
    /// (0.1 %) above the exact value, never below it. Min, max and count are always exact.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub approximate: bool,
}

/// The nearest rank of percentile `p` in a sample of `n` (1-based, in `[1, n]`).
fn nearest_rank(p: f64, n: u64) -> u64 {
    ((p * n as f64 / 100.0 - 1e-9).ceil() as u64).clamp(1, n)
}

/// Nearest-rank percentiles over a copy of `samples`.
pub fn summarize(samples: &[u64]) -> Summary {
    if samples.is_empty() {
        return Summary::default();
    }
    let mut v = samples.to_vec();
    v.sort_unstable();
    let rank = |p: f64| v[nearest_rank(p, v.len() as u64) as usize - 1];
    Summary { count: v.len(), min: v[0], median: rank(50.0), p99: rank(99.0), max: v[v.len() - 1], approximate: false }
}

/// Distinct values a [`Distribution`] counts exactly (about 3 MiB at most); past this it moves to
/// a histogram.
pub const EXACT_DISTINCT_VALUES: usize = 1 << 16;

/// Significant decimal digits the histogram keeps: a value is at most 1/1024 (0.1 %) below the
/// top of its bucket, and values under 2048 are exact.
const SIGNIFICANT_DIGITS: u8 = 3;

type Histogram = hdrhistogram::Histogram<u64>;

#[derive(Clone, Debug)]
enum Counts {
    /// Value -> count, while there are at most [`EXACT_DISTINCT_VALUES`] values.
    Exact(BTreeMap<u64, u64>),
    /// An HDR histogram (`hdrhistogram`, [`SIGNIFICANT_DIGITS`]), grown to the largest value
    /// recorded: 1,024 counters per power of two above 2048, 440 KiB for values up to `u64::MAX`.
    Histogram(Box<Histogram>),
}

/// Records `count` times `v`; the histogram grows to cover it.
fn record(h: &mut Histogram, v: u64, count: u64) {
    h.record_n(v, count).expect("a 64-bit usize indexes a histogram of every u64");
}

/// The distribution of a stream of values, in bounded memory: exact (every distinct value
/// counted) up to [`EXACT_DISTINCT_VALUES`] distinct values, then an HDR histogram whose median
/// and p99 are at most 1/1024 above the exact ones ([`Summary::approximate`]). Count, min and max
/// stay exact.
#[derive(Clone, Debug)]
pub struct Distribution {
    counts: Counts,
    n: u64,
    min: u64,
    max: u64,
}

impl Default for Distribution {
    fn default() -> Self {
        Distribution { counts: Counts::Exact(BTreeMap::new()), n: 0, min: u64::MAX, max: 0 }
    }
}

impl Distribution {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn add(&mut self, v: u64) {
        self.n += 1;
        self.min = self.min.min(v);
        self.max = self.max.max(v);
        match &mut self.counts {
            Counts::Exact(m) => {
                *m.entry(v).or_insert(0) += 1;
                if m.len() > EXACT_DISTINCT_VALUES {
                    let mut h = Histogram::new(SIGNIFICANT_DIGITS).expect("valid HDR precision");
                    for (&v, &c) in m.iter() {
                        record(&mut h, v, c);
                    }
                    self.counts = Counts::Histogram(Box::new(h));
                }
            }
            Counts::Histogram(h) => record(h, v, 1),
        }
    }

    pub fn count(&self) -> u64 {
        self.n
    }

    /// Nearest-rank min, median, p99 and max, as [`summarize`] gives them over every value while
    /// the values are counted exactly.
    pub fn summary(&self) -> Summary {
        if self.n == 0 {
            return Summary::default();
        }
        let ranks = [nearest_rank(50.0, self.n), nearest_rank(99.0, self.n)];
        let mut found = [self.max; 2];
        let mut seen = 0u64;
        let mut next = 0;
        let mut visit = |value: u64, count: u64| {
            seen += count;
            while next < ranks.len() && seen >= ranks[next] {
                found[next] = value;
                next += 1;
            }
        };
        let approximate = match &self.counts {
            Counts::Exact(m) => {
                for (&v, &c) in m {
                    visit(v, c);
                }
                false
            }
            Counts::Histogram(h) => {
                for b in h.iter_recorded() {
                    // The bucket's top, within what was seen.
                    visit(b.value_iterated_to().clamp(self.min, self.max), b.count_at_value());
                }
                true
            }
        };
        Summary {
            count: usize::try_from(self.n).unwrap_or(usize::MAX),
            min: self.min,
            median: found[0],
            p99: found[1],
            max: self.max,
            approximate,
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let s = summarize(&[5, 1, 3, 2, 4]);
        assert_eq!((s.min, s.median, s.p99, s.max), (1, 3, 5, 5));
        assert_eq!(summarize(&[]), Summary::default());
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(summarize(&v).p99, 99);
    }

    /// The histogram grows with the largest value, to 56,320 counters (440 KiB) for `u64::MAX`.
    #[test]
    fn the_histogram_is_bounded() {
        let mut d = Distribution::new();
        (0..=EXACT_DISTINCT_VALUES as u64).for_each(|v| d.add(v * 1000));
        let Counts::Histogram(h) = &d.counts else { panic!("a histogram past the exact values") };
        let small = h.distinct_values();
        d.add(u64::MAX);
        let Counts::Histogram(h) = &d.counts else { unreachable!() };
        assert!(small < h.distinct_values() && h.distinct_values() <= 56_320, "{small} {}", h.distinct_values());
        assert_eq!(d.summary().max, u64::MAX);
    }

    /// A seeded xorshift64 generator for the tests' random inputs.
    pub(crate) fn xorshift(seed: u64) -> impl FnMut() -> u64 {
        let mut x = seed | 1;
        move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        }
    }

    /// Exact while few distinct values; past that within 1/1024 above, never below.
    #[test]
    fn a_distribution_is_exact_then_close() {
        let mut rng = xorshift(3);
        for (n, range) in [(0usize, 1u64), (1, 1), (7, 3), (5000, 20_000), (200_000, 1 << 31), (100_000, u64::MAX)] {
            let v: Vec<u64> = (0..n).map(|_| rng() % range.max(1)).collect();
            let mut d = Distribution::new();
            v.iter().for_each(|&x| d.add(x));
            let exact = summarize(&v);
            let got = d.summary();
            assert_eq!((got.count, got.min, got.max), (exact.count, exact.min, exact.max), "{n}");
            let distinct = v.iter().collect::<std::collections::BTreeSet<_>>().len();
            if distinct <= EXACT_DISTINCT_VALUES {
                assert_eq!(got, exact, "{n} values in [0, {range})");
            } else {
                assert!(got.approximate);
                for (g, e) in [(got.median, exact.median), (got.p99, exact.p99)] {
                    assert!(g >= e && (g - e) as f64 <= e as f64 / 1024.0, "{g} against {e}");
                }
            }
        }
    }
}
