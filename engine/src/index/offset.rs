//! The offset index (`.index`): sparse `offset -> position` entries, Kafka's `OffsetIndex`.

use std::sync::Arc;

use super::{index_slot_range_for, read_index_file, IndexFile, IndexStorage, SlotRange, WARM_SECTION_BYTES};
use crate::error::Result;
use crate::format::index_entry::{offset_index_sanity, OffsetEntry, OFFSET_ENTRY_SIZE};
use crate::io::{IndexArena, IoFile};

const WARM_ENTRIES: usize = WARM_SECTION_BYTES / OFFSET_ENTRY_SIZE;

/// The relative offset of entry `slot` (only the 4 bytes a search compares).
#[inline(always)]
fn rel_offset_at(b: &[u8], slot: usize) -> i64 {
    let at = slot * OFFSET_ENTRY_SIZE;
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    i32::from_be_bytes(a) as i64
}

/// An absolute offset and the file position of the batch an index entry points at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OffsetPosition {
    pub offset: i64,
    pub position: u32,
}

/// A segment's offset index.
#[derive(Debug)]
pub struct OffsetIndex {
    base_offset: i64,
    inner: IndexFile,
}

index_common!(OffsetIndex, OFFSET_ENTRY_SIZE);

impl OffsetIndex {
    /// Kafka's `isFull`.
    pub fn is_full(&self) -> bool {
        self.entries() >= self.inner.max_entries
    }

    /// Entry `slot`, made absolute.
    #[inline]
    pub fn entry(&self, slot: usize) -> OffsetPosition {
        let e = OffsetEntry::decode(self.inner.bytes.as_slice(), slot);
        OffsetPosition { offset: e.offset(self.base_offset), position: e.position as u32 }
    }

    /// Entry `slot`, made absolute with checked arithmetic: `Err` says why the entry cannot be
    /// one of this segment's (a negative relative offset, or one that overflows `i64` added to a
    /// base near `i64::MAX`). [`OffsetIndex::entry`] saturates instead; the sanity checks use this
    /// so that a damaged index is refused, never trusted with a saturated offset.
    pub(crate) fn checked_entry(&self, slot: usize) -> std::result::Result<OffsetPosition, String> {
        let e = OffsetEntry::decode(self.inner.bytes.as_slice(), slot);
        Ok(OffsetPosition { offset: e.checked_offset(self.base_offset, slot)?, position: e.position as u32 })
    }

    /// The last entry, or `(base_offset, 0)` when empty.
    pub fn last_entry(&self) -> OffsetPosition {
        match self.entries() {
            0 => OffsetPosition { offset: self.base_offset, position: 0 },
            n => self.entry(n - 1),
        }
    }

    /// Kafka's `canAppendOffset`: the offset must fit in a relative i32.
    pub(crate) fn can_append_offset(&self, offset: i64) -> bool {
        offset.checked_sub(self.base_offset).is_some_and(|rel| (0..=i32::MAX as i64).contains(&rel))
    }

    /// Appends `(offset, position)`.
    ///
    /// # Panics
    /// When Kafka's rule is broken (a bug in the caller, which checks [`OffsetIndex::is_full`] and
    /// [`OffsetIndex::can_append_offset`] and appends growing offsets of validated batches): the
    /// index is full, the offset is not larger than the last entry's, or it does not fit.
    pub(crate) fn append(&mut self, offset: i64, position: u32) {
        assert!(!self.is_full(), "append of offset {offset} to a full index {:?}", self.inner.path_buf());
        assert!(
            self.entries() == 0 || offset > self.last_entry().offset,
            "append of offset {offset} at position {position} not above the last entry {} of {:?}",
            self.last_entry().offset,
            self.inner.path_buf()
        );
        assert!(self.can_append_offset(offset), "offset {offset} does not fit relative to base {}", self.base_offset);
        let e = OffsetEntry { relative_offset: (offset - self.base_offset) as i32, position: position as i32 };
        self.inner.bytes.extend(&e.encode());
    }

    /// The slots bracketing `target` (Kafka's `indexSlotRangeFor`).
    #[inline]
    fn slot_range(&self, target: i64) -> SlotRange {
        let b = self.inner.bytes.as_slice();
        // Compared in relative terms (`base + rel <= target` is `rel <= target - base`, and a
        // saturated difference keeps the order), so a probe is a load and a compare; the entry
        // count comes from the constant entry size (a shift, not a division).
        let rel_target = target.saturating_sub(self.base_offset);
        index_slot_range_for(b.len() / OFFSET_ENTRY_SIZE, WARM_ENTRIES, rel_target, |i| rel_offset_at(b, i))
    }

    /// Kafka's `lookup`: the largest entry with offset `<= target`, or `(base_offset, 0)`.
    #[inline]
    pub fn lookup(&self, target: i64) -> OffsetPosition {
        self.floor_entry(self.slot_range(target))
    }

    /// [`OffsetIndex::lookup`], and the first two entries with offset `> target` (those that
    /// exist), from the same search. An entry's offset is its batch's last offset, so the batch
    /// holding `target` starts at or before the first of them and ends at or before the second.
    pub(crate) fn lookup_with_next(&self, target: i64) -> (OffsetPosition, [Option<OffsetPosition>; 2]) {
        let r = self.slot_range(target);
        // `upper` is the smallest entry `>=` target (Kafka's bracket); on an exact hit the next
        // one is above it (offsets strictly increase).
        let first_above = match usize::try_from(r.upper) {
            Err(_) => None,
            Ok(u) if self.entry(u).offset > target => Some(u),
            Ok(u) => Some(u + 1),
        };
        let at = |i: usize| (i < self.entries()).then(|| self.entry(i));
        let next = first_above.map_or([None, None], |u| [at(u), at(u + 1)]);
        (self.floor_entry(r), next)
    }

    #[inline]
    fn floor_entry(&self, r: SlotRange) -> OffsetPosition {
        if r.lower < 0 {
            OffsetPosition { offset: self.base_offset, position: 0 }
        } else {
            self.entry(r.lower as usize)
        }
    }

    /// Kafka's `truncateTo`: removes entries with offset `>= offset`.
    pub fn truncate_to(&mut self, offset: i64) -> Result<()> {
        let b = self.inner.bytes.as_slice();
        let base = self.base_offset;
        let r = index_slot_range_for(self.entries(), WARM_ENTRIES, offset, |i| OffsetEntry::decode(b, i).offset(base));
        let keep = if r.lower < 0 {
            0
        } else if self.entry(r.lower as usize).offset == offset {
            r.lower as usize
        } else {
            r.lower as usize + 1
        };
        self.inner.truncate_entries(keep)
    }

    /// Kafka's `sanityCheck`: the last offset must not be below the base and the file length
    /// must be a multiple of 8; besides, the last offset must not overflow `i64`
    /// ([`offset_index_sanity`], which needs only the file's length and last entry).
    pub fn sanity_check(&self) -> std::result::Result<(), String> {
        let last = self.entries().checked_sub(1).map(|n| (n, OffsetEntry::decode(self.inner.bytes.as_slice(), n)));
        offset_index_sanity(self.inner.file_len, self.base_offset, last)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kafka_lookup_and_truncate_rules() {
        let mut idx = OffsetIndex::create(316, 1024, None).unwrap();
        idx.append(473, 16350);
        idx.append(552, 32700);
        idx.append(631, 49050);
        assert_eq!(idx.lookup(300), OffsetPosition { offset: 316, position: 0 });
        assert_eq!(idx.lookup(472), OffsetPosition { offset: 316, position: 0 });
        assert_eq!(idx.lookup(473).position, 16350);
        assert_eq!(idx.lookup(551).position, 16350);
        assert_eq!(idx.lookup(10_000).position, 49050);
        assert_eq!(&idx.as_bytes()[..8], &[0, 0, 0, 0x9d, 0, 0, 0x3f, 0xde]);
        idx.truncate_to(552).unwrap(); // exact match drops it and what follows
        assert_eq!(idx.entries(), 1);
        idx.truncate_to(500).unwrap(); // between entries keeps slot + 1
        assert_eq!(idx.entries(), 1);
        idx.truncate_to(400).unwrap(); // below every entry empties it
        assert_eq!(idx.entries(), 0);
    }

    #[test]
    fn lookup_with_next_brackets_the_target() {
        let mut idx = OffsetIndex::create(316, 1024, None).unwrap();
        let entries = [(473, 16350), (552, 32700), (631, 49050), (710, 65400)];
        for (o, p) in entries {
            idx.append(o, p);
        }
        let at = |i: usize| Some(OffsetPosition { offset: entries[i].0, position: entries[i].1 });
        for target in 300..800 {
            let (floor, next) = idx.lookup_with_next(target);
            assert_eq!(floor, idx.lookup(target), "floor of {target}");
            // The first two entries above the target, by a linear scan.
            let above = entries.iter().position(|&(o, _)| o > target);
            assert_eq!(next[0], above.and_then(at), "next of {target}");
            assert_eq!(
                next[1],
                above.and_then(|i| (i + 1 < entries.len()).then(|| at(i + 1)).flatten()),
                "after next of {target}"
            );
        }
        // Exact hits at the first slot (Kafka's bracket is (slot, slot + 1) there), in the
        // middle ((slot, slot)) and at the last ones.
        assert_eq!(idx.lookup_with_next(473).1, [at(1), at(2)]);
        assert_eq!(idx.lookup_with_next(552).1, [at(2), at(3)]);
        assert_eq!(idx.lookup_with_next(631).1, [at(3), None]);
        assert_eq!(idx.lookup_with_next(710).1, [None, None]);
        // An empty index: nothing above.
        let empty = OffsetIndex::create(316, 1024, None).unwrap();
        assert_eq!(empty.lookup_with_next(400), (OffsetPosition { offset: 316, position: 0 }, [None, None]));
    }

    #[test]
    #[should_panic(expected = "not above the last entry")]
    fn offsets_must_grow() {
        let mut idx = OffsetIndex::create(316, 1024, None).unwrap();
        idx.append(631, 49050);
        idx.append(631, 50000);
    }

    #[test]
    #[should_panic(expected = "to a full index")]
    fn append_to_a_full_index_is_a_caller_bug() {
        let mut idx = OffsetIndex::create(0, 16, None).unwrap();
        idx.append(1, 10);
        idx.append(2, 20);
        assert!(idx.is_full());
        idx.append(3, 30);
    }
}
