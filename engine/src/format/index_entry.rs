//! Index entries as Kafka lays them out: `.index` entries are 8 bytes (relative offset i32,
//! position i32), `.timeindex` entries are 12 bytes (timestamp i64, relative offset i32). All
//! big-endian. Offsets are relative to the segment's base offset (the file name).
//!
//! Also Kafka's rules over index entries that need no I/O, so that the engine's indexes and
//! segments, and the `seglog` command reading index files in chunks, apply the same ones:
//!
//! - making an entry's offset absolute ([`OffsetEntry::offset`], [`OffsetEntry::checked_offset`]);
//! - the sanity check of an index file ([`offset_index_sanity`], [`time_index_sanity`]): it only
//!   looks at the file's length and its first and last entries;
//! - when a segment's batches get entries ([`IndexInterval`]: `index.interval.bytes`) and when the
//!   time index takes one ([`takes_time_entry`]);
//! - the order of an offset index's entries ([`offset_entry_follows`]).

use super::{be_i32, be_i64};

pub const OFFSET_ENTRY_SIZE: usize = 8;
pub const TIME_ENTRY_SIZE: usize = 12;

/// One `.index` entry, decoded but still relative.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OffsetEntry {
    pub relative_offset: i32,
    pub position: i32,
}

/// One `.timeindex` entry, decoded but still relative.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimeEntry {
    pub timestamp: i64,
    pub relative_offset: i32,
}

/// `base_offset + relative_offset`, or why it is not an offset of the segment: a negative
/// relative offset, or one that overflows `i64` added to a base near `i64::MAX`. `slot` names the
/// entry in the message.
fn checked_absolute(base_offset: i64, relative_offset: i32, slot: usize) -> Result<i64, String> {
    if relative_offset < 0 {
        return Err(format!("entry {slot} has a negative relative offset ({relative_offset})"));
    }
    base_offset.checked_add(relative_offset as i64).ok_or_else(|| {
        format!("entry {slot}: relative offset {relative_offset} overflows added to the base offset {base_offset}")
    })
}

impl OffsetEntry {
    /// The entry's absolute offset in a segment at `base_offset` (Kafka's `baseOffset +
    /// relativeOffset`), saturating instead of overflowing, as lookups take it.
    #[inline]
    pub fn offset(&self, base_offset: i64) -> i64 {
        base_offset.saturating_add(self.relative_offset as i64)
    }

    /// The entry's absolute offset with checked arithmetic, or why the entry in `slot` cannot be
    /// one of the segment's (a negative relative offset, or one that overflows `i64` added to a
    /// base near `i64::MAX`): what the sanity checks use, so that a damaged index is refused, never
    /// trusted with a saturated offset.
    pub fn checked_offset(&self, base_offset: i64, slot: usize) -> Result<i64, String> {
        checked_absolute(base_offset, self.relative_offset, slot)
    }

    /// Decodes entry `slot` of an index buffer. The caller guarantees `(slot + 1) * 8 <= b.len()`.
    #[inline]
    pub fn decode(b: &[u8], slot: usize) -> OffsetEntry {
        let at = slot * OFFSET_ENTRY_SIZE;
        OffsetEntry { relative_offset: be_i32(b, at), position: be_i32(b, at + 4) }
    }
    pub fn encode(&self) -> [u8; OFFSET_ENTRY_SIZE] {
        let mut out = [0u8; OFFSET_ENTRY_SIZE];
        out[..4].copy_from_slice(&self.relative_offset.to_be_bytes());
        out[4..].copy_from_slice(&self.position.to_be_bytes());
        out
    }
}

impl TimeEntry {
    /// The entry's absolute offset in a segment at `base_offset`, saturating (see
    /// [`OffsetEntry::offset`]).
    #[inline]
    pub fn offset(&self, base_offset: i64) -> i64 {
        base_offset.saturating_add(self.relative_offset as i64)
    }

    /// The entry's absolute offset with checked arithmetic (see [`OffsetEntry::checked_offset`]).
    pub fn checked_offset(&self, base_offset: i64, slot: usize) -> Result<i64, String> {
        checked_absolute(base_offset, self.relative_offset, slot)
    }

    /// Decodes entry `slot` of a time index buffer. The caller guarantees the bounds.
    #[inline]
    pub fn decode(b: &[u8], slot: usize) -> TimeEntry {
        let at = slot * TIME_ENTRY_SIZE;
        TimeEntry { timestamp: be_i64(b, at), relative_offset: be_i32(b, at + 8) }
    }
    pub fn encode(&self) -> [u8; TIME_ENTRY_SIZE] {
        let mut out = [0u8; TIME_ENTRY_SIZE];
        out[..8].copy_from_slice(&self.timestamp.to_be_bytes());
        out[8..].copy_from_slice(&self.relative_offset.to_be_bytes());
        out
    }
}

/// Kafka's `roundDownToExactMultiple`: the largest multiple of `factor` not above `n`.
pub fn round_down(n: u64, factor: u64) -> u64 {
    n - n % factor
}

/// Kafka's `OffsetIndex.sanityCheck` of an offset index file of `file_len` bytes in a segment at
/// `base_offset`, whose last entry is `last` (its slot and the entry; `None` without entries):
/// the file length must be a multiple of 8, and the last offset must not be below the base.
/// Besides, the last offset must not overflow `i64` ([`OffsetEntry::checked_offset`]).
///
/// Only the length and the last entry are looked at, so a caller reading the file in chunks
/// passes the same arguments as one holding it whole; `OffsetIndex::sanity_check` is this.
/// Kafka counts every whole 8 bytes of the file as an entry, so the last entry of a file read
/// from disk is its last whole slot.
pub fn offset_index_sanity(file_len: u64, base_offset: i64, last: Option<(usize, OffsetEntry)>) -> Result<(), String> {
    if !file_len.is_multiple_of(OFFSET_ENTRY_SIZE as u64) {
        return Err(format!("index file size {file_len} is not a multiple of {OFFSET_ENTRY_SIZE}"));
    }
    if let Some((slot, e)) = last {
        let last = e.checked_offset(base_offset, slot)?;
        if last < base_offset {
            return Err(format!("last offset {last} is below the base offset {base_offset}"));
        }
    }
    Ok(())
}

/// Kafka's `TimeIndex.sanityCheck` of a time index file of `file_len` bytes in a segment at
/// `base_offset`, whose first entry and last entry (with its slot) are `first_and_last` (`None`
/// without entries): the file length must be a multiple of 12, the last timestamp must not be
/// below the first, and the last offset must not be below the base. Besides, the first and last
/// offsets must not overflow `i64`. As [`offset_index_sanity`], it needs only the length and those
/// two entries; `TimeIndex::sanity_check` is this.
pub fn time_index_sanity(
    file_len: u64,
    base_offset: i64,
    first_and_last: Option<(TimeEntry, usize, TimeEntry)>,
) -> Result<(), String> {
    if !file_len.is_multiple_of(TIME_ENTRY_SIZE as u64) {
        return Err(format!("time index file size {file_len} is not a multiple of {TIME_ENTRY_SIZE}"));
    }
    if let Some((first, slot, last)) = first_and_last {
        first.checked_offset(base_offset, 0)?;
        let last_offset = last.checked_offset(base_offset, slot)?;
        if last.timestamp < first.timestamp {
            return Err(format!("last timestamp {} is below the first {}", last.timestamp, first.timestamp));
        }
        if last_offset < base_offset {
            return Err(format!("last offset {last_offset} is below the base offset {base_offset}"));
        }
    }
    Ok(())
}

/// Kafka's rule for when a segment's batches get index entries (`LogSegment.append`, and
/// `LogSegment.recover`, which replays it): a batch gets an offset-index entry (its last offset,
/// its start position) when more than `index.interval.bytes` bytes went by since the last entry
/// (since the start of the segment when there is none), checked **before** the batch is counted.
/// So the first batch of a segment is never indexed, a batch gets at most one entry whatever the
/// interval, and consecutive entries are more than the interval apart. The time index is offered
/// an entry at the same moments ([`takes_time_entry`]).
///
/// It is the byte counter alone (Kafka's `bytesSinceLastIndexEntry`), fed one batch at a time:
/// the active segment's appends, the index rebuild of recovery, and the `seglog` command's "what
/// if the interval were N" all run it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IndexInterval {
    interval: u64,
    bytes_since_last_entry: u64,
}

impl IndexInterval {
    /// The rule at the start of a segment (or after the counter restarts: at a segment's open,
    /// after a truncation), with `interval_bytes` as `index.interval.bytes`.
    pub fn new(interval_bytes: u64) -> IndexInterval {
        IndexInterval { interval: interval_bytes, bytes_since_last_entry: 0 }
    }

    /// True when the next batch gets an entry: `bytesSinceLastIndexEntry > indexIntervalBytes`.
    #[inline]
    pub fn is_due(&self) -> bool {
        self.bytes_since_last_entry > self.interval
    }

    /// An entry was written for the batch being appended: the counter restarts at 0.
    #[inline]
    pub fn entry_written(&mut self) {
        self.bytes_since_last_entry = 0;
    }

    /// Counts the bytes of the batch being appended, after [`IndexInterval::is_due`] was asked.
    #[inline]
    pub fn count(&mut self, batch_bytes: u64) {
        self.bytes_since_last_entry = self.bytes_since_last_entry.saturating_add(batch_bytes);
    }

    /// The whole rule for one batch of `batch_bytes`: true when it gets an entry (the counter then
    /// restarts), and the batch counted.
    #[inline]
    pub fn next_batch(&mut self, batch_bytes: u64) -> bool {
        let due = self.is_due();
        if due {
            self.entry_written();
        }
        self.count(batch_bytes);
        due
    }

    /// Bytes counted since the last entry (since the segment's start when there is none): the
    /// next batch gets an entry exactly when this is above the interval.
    pub fn bytes_since_last_entry(&self) -> u64 {
        self.bytes_since_last_entry
    }

    /// The `index.interval.bytes` the rule applies.
    pub fn interval_bytes(&self) -> u64 {
        self.interval
    }
}

/// Kafka's offset index is sorted: an entry at `(offset, position)` may follow one at
/// `(prev_offset, prev_position)` only when both are above the previous ones (`OffsetIndex.append`
/// refuses an offset not above the last entry's, and a later batch starts further into the log).
/// Positions are taken as `i64`, so a damaged (negative) one compares as what it is.
pub fn offset_entry_follows(prev_offset: i64, prev_position: i64, offset: i64, position: i64) -> bool {
    offset > prev_offset && position > prev_position
}

/// Kafka's `TimeIndex.maybeAppend` rule: the time index takes an entry offered with `timestamp`
/// (the segment's max timestamp so far) only when it is greater than its last entry's
/// (`last_timestamp`, `NO_TIMESTAMP` = -1 for an empty index). An equal timestamp is ignored, the
/// usual case for the entry offered at roll and close, so both columns only grow.
#[inline]
pub fn takes_time_entry(last_timestamp: i64, timestamp: i64) -> bool {
    timestamp > last_timestamp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_big_endian() {
        let e = OffsetEntry { relative_offset: 157, position: 16350 };
        let b = e.encode();
        assert_eq!(b, [0, 0, 0, 0x9d, 0, 0, 0x3f, 0xde]);
        assert_eq!(OffsetEntry::decode(&b, 0), e);
        let t = TimeEntry { timestamp: 1_700_000_000_000, relative_offset: 315 };
        assert_eq!(TimeEntry::decode(&t.encode(), 0), t);
    }

    #[test]
    fn the_interval_rule_checks_before_counting() {
        // The seed's segment: four 16,350-byte batches.
        for (interval, want) in [(1, [false, true, true, true]), (16_349, [false, true, true, true])] {
            let mut r = IndexInterval::new(interval);
            assert_eq!([16_350u64; 4].map(|s| r.next_batch(s)), want, "{interval}");
        }
        let mut r = IndexInterval::new(20_000);
        assert_eq!([16_350u64; 4].map(|s| r.next_batch(s)), [false, false, true, false]);
        let mut r = IndexInterval::new(16_350);
        assert_eq!([16_350u64; 4].map(|s| r.next_batch(s)), [false, false, true, false]);
        assert_eq!(r.bytes_since_last_entry(), 2 * 16_350);
        // Interval 0: every batch after the first, never the first.
        let mut r = IndexInterval::new(0);
        assert_eq!([61u64; 3].map(|s| r.next_batch(s)), [false, true, true]);
    }

    #[test]
    fn sanity_checks_name_what_is_wrong() {
        let e = |rel, position| OffsetEntry { relative_offset: rel, position };
        assert_eq!(offset_index_sanity(0, 0, None), Ok(()));
        assert!(offset_index_sanity(12, 0, None).unwrap_err().contains("not a multiple of 8"));
        assert!(offset_index_sanity(8, 10, Some((0, e(-1, 0)))).unwrap_err().contains("negative relative offset"));
        assert!(offset_index_sanity(8, i64::MAX, Some((0, e(1, 0)))).unwrap_err().contains("overflows"));
        assert_eq!(offset_index_sanity(16, 10, Some((1, e(0, 0)))), Ok(()));
        let t = |timestamp, rel| TimeEntry { timestamp, relative_offset: rel };
        assert!(time_index_sanity(13, 0, None).unwrap_err().contains("not a multiple of 12"));
        assert!(time_index_sanity(24, 0, Some((t(5, 1), 1, t(4, 2)))).unwrap_err().contains("below the first"));
        assert!(time_index_sanity(24, 0, Some((t(5, -1), 1, t(6, 2)))).unwrap_err().contains("entry 0"));
        assert_eq!(time_index_sanity(24, 0, Some((t(5, 1), 1, t(5, 2)))), Ok(()));
        assert!(!takes_time_entry(-1, -1) && takes_time_entry(-1, 0) && !takes_time_entry(5, 5));
        assert!(offset_entry_follows(10, 100, 11, 101));
        assert!(!offset_entry_follows(10, 100, 10, 101) && !offset_entry_follows(10, 100, 11, 100));
        assert!(!offset_entry_follows(10, 100, 11, -5));
    }

    #[test]
    fn round_down_matches_kafka_preallocation() {
        assert_eq!(round_down(10 * 1024 * 1024, 8), 10_485_760);
        assert_eq!(round_down(10 * 1024 * 1024, 12), 10_485_756);
    }
}
