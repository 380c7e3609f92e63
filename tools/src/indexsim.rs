//! Kafka's offset-index rule over a segment's batch list, for "what if the interval were N"
//! questions, for inferring which intervals could have produced an existing index, and for the
//! walk cost every offset would pay with a given index.
//!
//! The rule is the engine's, [`IndexInterval`] (`LogSegment.append`, and `recover` with
//! positions): per batch, if more than `interval` bytes went by since the last entry's batch
//! started (the segment start when there is none), checked before the batch is counted, add
//! `(batch last offset, batch start position)`. So the first batch of a segment is never indexed,
//! there is at most one entry per batch, and entries are more than `interval` bytes apart. The
//! time index takes an entry at those moments when the max timestamp grew
//! ([`takes_time_entry`]). The batches are those of a walk from the start of the `.log`, so each
//! starts where the one before ends.

use seglog::format::batch::NO_TIMESTAMP;
use seglog::format::index_entry::{takes_time_entry, IndexInterval};
use serde::Serialize;

/// What the simulation needs of a batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SimBatch {
    pub position: u64,
    pub size: u64,
    pub last_offset: i64,
    pub max_timestamp: i64,
}

/// What Kafka's rule with one interval gives over a segment's batches.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SimResult {
    /// Offset-index entries.
    pub entries: usize,
    /// Entries the time index gets (including the final one written at roll).
    pub time_entries: usize,
    /// The largest walk any offset pays with this index.
    pub max_bytes_scanned: u64,
    /// Every batch after the first is indexed: the densest index Kafka can write, which no
    /// smaller interval can change.
    pub on_plateau: bool,
}

/// Kafka's rule with `interval` applied to a segment's batches one at a time, keeping only
/// counts: memory does not grow with the segment.
#[derive(Clone, Debug)]
pub struct Simulator {
    rule: IndexInterval,
    batches: u64,
    max_ts: i64,
    /// Kafka's maybeAppend: only when the max grew past the last entry's, (-1, base) when empty.
    last_time_ts: i64,
    entries: usize,
    time_entries: usize,
    walk: WalkMax,
    plateau: bool,
}

impl Simulator {
    pub fn new(interval: u64, segment_base: i64) -> Self {
        Simulator {
            rule: IndexInterval::new(interval),
            batches: 0,
            max_ts: NO_TIMESTAMP,
            last_time_ts: NO_TIMESTAMP,
            entries: 0,
            time_entries: 0,
            walk: WalkMax::new(segment_base),
            plateau: true,
        }
    }

    /// The segment's next batch (in file order); true when the rule indexes it.
    pub fn push(&mut self, b: &SimBatch) -> bool {
        self.max_ts = self.max_ts.max(b.max_timestamp);
        let indexed = self.rule.next_batch(b.size);
        if indexed {
            self.entries += 1;
            if takes_time_entry(self.last_time_ts, self.max_ts) {
                self.time_entries += 1;
                self.last_time_ts = self.max_ts;
            }
        }
        self.walk.push(b, indexed);
        self.plateau &= self.batches == 0 || indexed;
        self.batches += 1;
        indexed
    }

    pub fn finish(&self) -> SimResult {
        SimResult {
            entries: self.entries,
            // The entry appended at roll (or close, or at the end of recovery) when the max grew.
            time_entries: self.time_entries + usize::from(takes_time_entry(self.last_time_ts, self.max_ts)),
            max_bytes_scanned: self.walk.max,
            on_plateau: self.plateau,
        }
    }
}

/// The largest walk (bytes scanned in phase 2) any offset of a segment pays with a given index,
/// fed the segment's batches in order and whether each is indexed.
///
/// Offsets below a batch's last offset walk from the last indexed batch before it (the segment
/// start when there is none) to the batch; its last offset costs nothing when the batch is
/// indexed (the entry names it), the same walk otherwise.
#[derive(Clone, Copy, Debug)]
pub struct WalkMax {
    floor_position: u64,
    /// The lowest offset not yet covered by a batch.
    lower: i64,
    pub max: u64,
}

impl WalkMax {
    pub fn new(segment_base: i64) -> Self {
        WalkMax { floor_position: 0, lower: segment_base, max: 0 }
    }

    pub fn push(&mut self, b: &SimBatch, indexed: bool) {
        let cost = b.position.saturating_sub(self.floor_position);
        let below = b.last_offset.saturating_sub(self.lower) > 0;
        if below || !indexed {
            self.max = self.max.max(cost);
        }
        if indexed {
            self.floor_position = b.position;
        }
        self.lower = b.last_offset.saturating_add(1);
    }
}

/// The index a given interval produces, as a list (for tests).
#[cfg(test)]
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SimIndex {
    /// Indexes (into the batch list) of the indexed batches.
    pub indexed: Vec<usize>,
    /// Entries the time index gets (including the final one written at roll).
    pub time_entries: usize,
}

/// Applies Kafka's rule with `interval` to `batches` (through [`Simulator`]).
#[cfg(test)]
pub fn simulate(batches: &[SimBatch], interval: u64) -> SimIndex {
    let mut sim = Simulator::new(interval, 0);
    let indexed = batches.iter().enumerate().filter(|(_, b)| sim.push(b)).map(|(j, _)| j).collect();
    SimIndex { indexed, time_entries: sim.finish().time_entries }
}

/// True when every batch after the first is indexed.
#[cfg(test)]
pub fn on_plateau(batches: &[SimBatch], indexed: &[usize]) -> bool {
    indexed.len() + 1 == batches.len().max(1) && indexed.iter().enumerate().all(|(i, &j)| j == i + 1)
}

/// Walk costs of every offset in `[segment_base, last offset]` with `indexed` as the index:
/// `(offsets, bytes scanned, header hops)` groups, one or two per batch. The model [`WalkMax`]
/// follows, kept whole for the tests.
#[cfg(test)]
pub fn walk_costs(batches: &[SimBatch], indexed: &[usize], segment_base: i64) -> Vec<(u64, u64, u64)> {
    let mut out = Vec::new();
    let mut k = 0usize; // next position in `indexed`
    let mut floor: Option<usize> = None; // last indexed batch before the current one
    let mut lower = segment_base;
    for (j, b) in batches.iter().enumerate() {
        let start = floor.map_or(0, |f| batches[f].position);
        let hops = j - floor.unwrap_or(0);
        let cost = b.position - start;
        let is_indexed = indexed.get(k) == Some(&j);
        let below = (b.last_offset - lower).max(0) as u64;
        if below > 0 {
            out.push((below, cost, hops as u64));
        }
        if is_indexed {
            out.push((1, 0, 0));
            floor = Some(j);
            k += 1;
        } else {
            out.push((1, cost, hops as u64));
        }
        lower = b.last_offset + 1;
    }
    out
}

/// The largest walk any offset pays with `indexed` as the index (through [`WalkMax`]).
#[cfg(test)]
pub fn max_bytes_scanned(batches: &[SimBatch], indexed: &[usize], segment_base: i64) -> u64 {
    let mut w = WalkMax::new(segment_base);
    for (j, b) in batches.iter().enumerate() {
        w.push(b, indexed.contains(&j));
    }
    w.max
}

/// Which intervals reproduce an existing index.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Inference {
    /// Every interval in `[lo, hi)` gives exactly the existing entries (`hi` none: no upper
    /// limit, the index is empty beyond what any interval would write).
    Range { lo: u64, hi: Option<u64> },
    /// No interval does; `detail` says where the rule breaks.
    NoInterval { detail: String },
}

impl Inference {
    pub fn intersect(&self, other: &Inference) -> Inference {
        match (self, other) {
            (Inference::Range { lo: a, hi: ha }, Inference::Range { lo: b, hi: hb }) => {
                let lo = (*a).max(*b);
                let hi = match (ha, hb) {
                    (Some(x), Some(y)) => Some((*x).min(*y)),
                    (x, None) => *x,
                    (None, y) => *y,
                };
                if hi.is_some_and(|h| h <= lo) {
                    Inference::NoInterval {
                        detail: format!(
                            "segments disagree: no interval is in [{a}, {}) and [{b}, {})",
                            fmt_hi(*ha),
                            fmt_hi(*hb)
                        ),
                    }
                } else {
                    Inference::Range { lo, hi }
                }
            }
            (n @ Inference::NoInterval { .. }, _) | (_, n @ Inference::NoInterval { .. }) => n.clone(),
        }
    }

    pub fn describe(&self) -> String {
        match self {
            Inference::Range { lo, hi } => format!("consistent with index.interval.bytes in [{lo}, {})", fmt_hi(*hi)),
            Inference::NoInterval { detail } => format!("not reproducible by any single interval: {detail}"),
        }
    }
}

fn fmt_hi(hi: Option<u64>) -> String {
    hi.map_or_else(|| "infinity".to_owned(), |h| h.to_string())
}

/// Infers the intervals that turn a segment's batches into exactly its existing entries
/// (`(offset, position)` pairs), fed the batches in order beside the entries: memory does not grow
/// with the segment.
///
/// The engine's rule gives a batch an entry exactly when the bytes since the last entry
/// ([`IndexInterval::bytes_since_last_entry`]) are above the interval: an indexed batch bounds the
/// interval from above (`I < c`), a batch without an entry from below (`c <= I`).
#[derive(Clone, Debug)]
pub struct Inferrer {
    lo: u64,
    hi: Option<u64>,
    batches: u64,
    /// The rule's byte counter, restarted where the existing index has entries (the interval is
    /// what is inferred: only the counter is used).
    counter: IndexInterval,
    failed: Option<Inference>,
}

impl Default for Inferrer {
    fn default() -> Self {
        Self::new()
    }
}

impl Inferrer {
    pub fn new() -> Self {
        Inferrer { lo: 0, hi: None, batches: 0, counter: IndexInterval::new(0), failed: None }
    }

    /// The segment's next batch, with the first existing entry not matched yet (`None` when there
    /// is none left). True when the batch matched that entry (the caller moves to the next one).
    pub fn push(&mut self, b: &SimBatch, entry: Option<(i64, u64)>) -> bool {
        if self.failed.is_some() {
            return false;
        }
        let j = self.batches;
        self.batches += 1;
        let c = self.counter.bytes_since_last_entry();
        match entry {
            Some((off, pos)) if pos == b.position => {
                if off != b.last_offset {
                    self.failed = Some(Inference::NoInterval {
                        detail: format!(
                            "the entry for byte {pos} names offset {off}, not the batch's last offset {}",
                            b.last_offset
                        ),
                    });
                    return false;
                }
                if j == 0 {
                    self.failed = Some(Inference::NoInterval {
                        detail: "the first batch of the segment is indexed, which Kafka's rule never does".into(),
                    });
                    return false;
                }
                // Indexed: more than I bytes went by, so I < c.
                self.hi = Some(self.hi.map_or(c, |h| h.min(c)));
                self.counter.entry_written();
                self.counter.count(b.size);
                true
            }
            _ => {
                self.lo = self.lo.max(c); // not indexed: c <= I
                self.counter.count(b.size);
                false
            }
        }
    }

    /// The verdict, given the first entry left unmatched after the last batch (if any).
    pub fn finish(self, entry: Option<(i64, u64)>) -> Inference {
        if let Some(f) = self.failed {
            return f;
        }
        if let Some((off, pos)) = entry {
            return Inference::NoInterval {
                detail: format!("the entry (offset {off}, byte {pos}) is not at the start of a batch in order"),
            };
        }
        match self.hi {
            Some(h) if h <= self.lo => Inference::NoInterval {
                detail: format!(
                    "an entry was written after {h} bytes but another batch was skipped after {} (a broker restart resets Kafka's byte counter, or the interval changed)",
                    self.lo
                ),
            },
            _ => Inference::Range { lo: self.lo, hi: self.hi },
        }
    }
}

/// [`Inferrer`] over a batch list and an entry list.
#[cfg(test)]
pub fn infer_interval(batches: &[SimBatch], existing: &[(i64, u64)]) -> Inference {
    let mut inf = Inferrer::new();
    let mut k = 0;
    for b in batches {
        if inf.push(b, existing.get(k).copied()) {
            k += 1;
        }
    }
    inf.finish(existing.get(k).copied())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The seed's demo segment: four 16,350-byte batches of 79 records from offset 316.
    fn demo() -> Vec<SimBatch> {
        (0..4)
            .map(|i| SimBatch {
                position: i * 16_350,
                size: 16_350,
                last_offset: 316 + 79 * (i as i64 + 1) - 1,
                max_timestamp: 1000 + i as i64,
            })
            .collect()
    }

    #[test]
    fn seed_table() {
        let b = demo();
        for (interval, entries, max) in [(1, 3, 16_350), (4096, 3, 16_350), (20_000, 1, 32_700), (1_048_576, 0, 49_050)]
        {
            let s = simulate(&b, interval);
            assert_eq!(s.indexed.len(), entries, "{interval}");
            assert_eq!(max_bytes_scanned(&b, &s.indexed, 316), max, "{interval}");
        }
        assert_eq!(simulate(&b, 20_000).indexed, vec![2]);
        assert!(on_plateau(&b, &simulate(&b, 1).indexed));
        assert!(on_plateau(&b, &simulate(&b, 16_349).indexed));
        assert!(!on_plateau(&b, &simulate(&b, 16_350).indexed));
        // Time entries: one per offset entry while timestamps grow, plus the roll entry if the
        // last batch was not indexed.
        assert_eq!(simulate(&b, 4096).time_entries, 3);
        assert_eq!(simulate(&b, 20_000).time_entries, 2);
        assert_eq!(simulate(&b, 1_048_576).time_entries, 1);
    }

    #[test]
    fn walk_costs_count_every_offset() {
        let b = demo();
        let s = simulate(&b, 20_000);
        let costs = walk_costs(&b, &s.indexed, 316);
        assert_eq!(costs.iter().map(|c| c.0).sum::<u64>(), 316);
        // Offsets of batch 3 below its last offset walk from byte 0 past two batches.
        assert!(costs.contains(&(78, 32_700, 2)));
    }

    /// The streaming model agrees with the whole list: the walk maximum, the plateau.
    #[test]
    fn streaming_matches_the_lists() {
        let mut x = 7u64;
        let mut rng = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for round in 0..300 {
            let n = (rng() % 12) as usize;
            let (mut pos, mut off) = (0u64, 100 + (rng() % 3) as i64);
            let batches: Vec<SimBatch> = (0..n)
                .map(|_| {
                    let size = 61 + rng() % 5000;
                    let records = 1 + (rng() % 4) as i64;
                    let b = SimBatch { position: pos, size, last_offset: off + records - 1, max_timestamp: 0 };
                    pos += size;
                    off += records + (rng() % 2) as i64;
                    b
                })
                .collect();
            for interval in [0, 1, 100, 3000, 9000, 1 << 20] {
                let s = simulate(&batches, interval);
                let want = walk_costs(&batches, &s.indexed, 100).iter().map(|c| c.1).max().unwrap_or(0);
                let mut sim = Simulator::new(interval, 100);
                batches.iter().for_each(|b| {
                    sim.push(b);
                });
                let got = sim.finish();
                assert_eq!(got.max_bytes_scanned, want, "round {round}, interval {interval}");
                assert_eq!(got.on_plateau, on_plateau(&batches, &s.indexed), "round {round}, interval {interval}");
                assert_eq!(got.entries, s.indexed.len());
            }
        }
    }

    #[test]
    fn inference() {
        let b = demo();
        let entries = |idx: &[usize]| idx.iter().map(|&j| (b[j].last_offset, b[j].position)).collect::<Vec<_>>();
        let dense = entries(&[1, 2, 3]);
        assert_eq!(infer_interval(&b, &dense), Inference::Range { lo: 0, hi: Some(16_350) });
        assert_eq!(infer_interval(&b, &entries(&[2])), Inference::Range { lo: 16_350, hi: Some(32_700) });
        assert_eq!(infer_interval(&b, &[]), Inference::Range { lo: 49_050, hi: None });
        assert!(matches!(infer_interval(&b, &entries(&[1, 3])), Inference::NoInterval { .. }));
        let r = Inference::Range { lo: 0, hi: Some(100) }.intersect(&Inference::Range { lo: 50, hi: None });
        assert_eq!(r, Inference::Range { lo: 50, hi: Some(100) });
        for interval in [0, 1, 5000, 16_349, 16_350, 20_000, 32_699, 32_700, 49_050, 1 << 20] {
            let s = simulate(&b, interval);
            match infer_interval(&b, &entries(&s.indexed)) {
                Inference::Range { lo, hi } => {
                    assert!(lo <= interval && hi.is_none_or(|h| interval < h), "{interval}: [{lo}, {hi:?})")
                }
                other => panic!("{interval}: {other:?}"),
            }
        }
    }
}
