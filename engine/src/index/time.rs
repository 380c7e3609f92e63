//! The time index (`.timeindex`): `max timestamp so far -> offset` entries, Kafka's `TimeIndex`.
//! An entry is appended only when the timestamp grows, so the file stays sorted on both fields
//! even when record timestamps arrive out of order.

use std::sync::Arc;

use super::{index_slot_range_for, read_index_file, IndexFile, IndexStorage, WARM_SECTION_BYTES};
use crate::error::Result;
use crate::format::batch::NO_TIMESTAMP;
use crate::format::index_entry::{takes_time_entry, time_index_sanity, TimeEntry, TIME_ENTRY_SIZE};
use crate::io::{IndexArena, IoFile};

const WARM_ENTRIES: usize = WARM_SECTION_BYTES / TIME_ENTRY_SIZE;

/// The timestamp of entry `slot` (only the 8 bytes a search compares).
#[inline(always)]
fn timestamp_at(b: &[u8], slot: usize) -> i64 {
    let at = slot * TIME_ENTRY_SIZE;
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    i64::from_be_bytes(a)
}

/// A timestamp and the absolute offset a time index entry maps it to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimestampOffset {
    pub timestamp: i64,
    pub offset: i64,
}

/// A segment's time index.
#[derive(Debug)]
pub struct TimeIndex {
    base_offset: i64,
    inner: IndexFile,
}

index_common!(TimeIndex, TIME_ENTRY_SIZE);

impl TimeIndex {
    /// Kafka's `isFull`: the last slot is reserved for the entry written at roll.
    pub fn is_full(&self) -> bool {
        self.entries() + 1 >= self.inner.max_entries
    }

    #[inline]
    pub fn entry(&self, slot: usize) -> TimestampOffset {
        let e = TimeEntry::decode(self.inner.bytes.as_slice(), slot);
        TimestampOffset { timestamp: e.timestamp, offset: e.offset(self.base_offset) }
    }

    /// Entry `slot`, made absolute with checked arithmetic: `Err` says why the entry cannot be
    /// one of this segment's (a negative relative offset, or one that overflows `i64` added to a
    /// base near `i64::MAX`). [`TimeIndex::entry`] saturates instead.
    pub(crate) fn checked_entry(&self, slot: usize) -> std::result::Result<TimestampOffset, String> {
        let e = TimeEntry::decode(self.inner.bytes.as_slice(), slot);
        Ok(TimestampOffset { timestamp: e.timestamp, offset: e.checked_offset(self.base_offset, slot)? })
    }

    /// The last entry, or `(-1, base_offset)` when empty.
    pub fn last_entry(&self) -> TimestampOffset {
        match self.entries() {
            0 => TimestampOffset { timestamp: NO_TIMESTAMP, offset: self.base_offset },
            n => self.entry(n - 1),
        }
    }

    /// Kafka's `maybeAppend`: appends `(timestamp, offset)` only if the timestamp is larger than
    /// the last entry's. An equal pair is ignored (the roll/close case).
    ///
    /// # Panics
    /// Going backwards in offset or time, or appending to a full index (without
    /// `skip_full_check`, which only the final entry at roll uses: the last slot is kept for it),
    /// is a bug in the caller, which appends the running maximum timestamp of validated batches.
    pub fn maybe_append(&mut self, timestamp: i64, offset: i64, skip_full_check: bool) {
        assert!(
            skip_full_check || !self.is_full(),
            "append of ({timestamp}, {offset}) to a full time index {:?}",
            self.inner.path_buf()
        );
        let last = self.last_entry();
        if self.entries() > 0 {
            assert!(offset >= last.offset, "append of offset {offset} below the last entry's offset {}", last.offset);
            assert!(
                timestamp >= last.timestamp,
                "append of timestamp {timestamp} below the last entry's timestamp {}",
                last.timestamp
            );
        }
        if takes_time_entry(last.timestamp, timestamp) {
            assert!(self.entries() < self.inner.max_entries, "time index has no room for ({timestamp}, {offset})");
            let rel = offset
                .checked_sub(self.base_offset)
                .filter(|r| (0..=i32::MAX as i64).contains(r))
                .unwrap_or_else(|| panic!("offset {offset} does not fit relative to {}", self.base_offset));
            let e = TimeEntry { timestamp, relative_offset: rel as i32 };
            self.inner.bytes.extend(&e.encode());
        }
    }

    /// Kafka's `lookup`: the largest entry with timestamp `<= target`, or `(-1, base_offset)`.
    pub fn lookup(&self, target: i64) -> TimestampOffset {
        let b = self.inner.bytes.as_slice();
        let entries = b.len() / TIME_ENTRY_SIZE;
        let r = index_slot_range_for(entries, WARM_ENTRIES, target, |i| timestamp_at(b, i));
        if r.lower < 0 {
            TimestampOffset { timestamp: NO_TIMESTAMP, offset: self.base_offset }
        } else {
            self.entry(r.lower as usize)
        }
    }

    /// Kafka's `truncateTo`: removes entries whose offset is `>= offset`.
    pub fn truncate_to(&mut self, offset: i64) -> Result<()> {
        let b = self.inner.bytes.as_slice();
        let base = self.base_offset;
        let r = index_slot_range_for(self.entries(), WARM_ENTRIES, offset, |i| TimeEntry::decode(b, i).offset(base));
        let keep = if r.lower < 0 {
            0
        } else if self.entry(r.lower as usize).offset == offset {
            r.lower as usize
        } else {
            r.lower as usize + 1
        };
        self.inner.truncate_entries(keep)
    }

    /// Kafka's `sanityCheck`; besides, the first and last offsets must not overflow `i64`
    /// ([`time_index_sanity`], which needs only the file's length and first and last entries).
    pub fn sanity_check(&self) -> std::result::Result<(), String> {
        let b = self.inner.bytes.as_slice();
        let ends = self.entries().checked_sub(1).map(|n| (TimeEntry::decode(b, 0), n, TimeEntry::decode(b, n)));
        time_index_sanity(self.inner.file_len, self.base_offset, ends)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn appends_only_when_timestamp_grows() {
        let mut t = TimeIndex::create(100, 12 * 10, None).unwrap();
        t.maybe_append(1000, 110, false);
        t.maybe_append(1000, 120, false); // same ts: ignored
        t.maybe_append(1005, 130, false);
        assert_eq!(t.entries(), 2);
        for (ts, o) in [(999, 140), (2000, 105)] {
            let mut t = TimeIndex::create(100, 12 * 10, None).unwrap();
            t.maybe_append(1005, 130, false);
            let backwards = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| t.maybe_append(ts, o, false)));
            assert!(backwards.is_err(), "({ts}, {o}) after (1005, 130) was taken");
        }
        t.maybe_append(1005, 130, true); // the roll case: equal pair ignored
        assert_eq!(t.lookup(999), TimestampOffset { timestamp: -1, offset: 100 });
        assert_eq!(t.lookup(1004).offset, 110);
        assert_eq!(t.lookup(5000).offset, 130);
    }

    #[test]
    fn last_slot_reserved_for_roll() {
        let mut t = TimeIndex::create(0, 36, None).unwrap(); // 3 slots
        t.maybe_append(1, 1, false);
        t.maybe_append(2, 2, false);
        assert!(t.is_full());
        t.maybe_append(3, 3, true);
        assert_eq!(t.entries(), 3);
    }
}
