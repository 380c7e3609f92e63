//! Index entries as Kafka lays them out: `.index` entries are 8 bytes (relative offset i32,
//! position i32), `.timeindex` entries are 12 bytes (timestamp i64, relative offset i32). All
//! big-endian. Offsets are relative to the segment's base offset (the file name).

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

impl OffsetEntry {
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
    fn round_down_matches_kafka_preallocation() {
        assert_eq!(round_down(10 * 1024 * 1024, 8), 10_485_760);
        assert_eq!(round_down(10 * 1024 * 1024, 12), 10_485_756);
    }
}
