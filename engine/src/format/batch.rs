//! The v2 record batch header: 61 big-endian bytes, CRC-32C over `[21, end)`.
//!
//! ```text
//! 0  baseOffset i64          (outside the CRC: the broker stamps it in place)
//! 8  batchLength i32         (bytes after this field: total size - 12)
//! 12 partitionLeaderEpoch i32(outside the CRC)
//! 16 magic i8 = 2            (at byte 16 in v0/v1 too, so 17 bytes decide the format)
//! 17 crc u32                 (CRC-32C of bytes 21..end)
//! 21 attributes i16   23 lastOffsetDelta i32   27 baseTimestamp i64   35 maxTimestamp i64
//! 43 producerId i64   51 producerEpoch i16     53 baseSequence i32    57 recordsCount i32
//! 61 records (one compressed stream when the codec is not none)
//! ```

use super::{be_i16, be_i32, be_i64, be_u32, Compression, FormatError};

pub const BASE_OFFSET_OFFSET: usize = 0;
pub const LENGTH_OFFSET: usize = 8;
pub const PARTITION_LEADER_EPOCH_OFFSET: usize = 12;
pub const MAGIC_OFFSET: usize = 16;
pub const CRC_OFFSET: usize = 17;
pub const ATTRIBUTES_OFFSET: usize = 21;
pub const LAST_OFFSET_DELTA_OFFSET: usize = 23;
pub const BASE_TIMESTAMP_OFFSET: usize = 27;
pub const MAX_TIMESTAMP_OFFSET: usize = 35;
pub const PRODUCER_ID_OFFSET: usize = 43;
pub const PRODUCER_EPOCH_OFFSET: usize = 51;
pub const BASE_SEQUENCE_OFFSET: usize = 53;
pub const RECORDS_COUNT_OFFSET: usize = 57;
pub const RECORDS_OFFSET: usize = 61;

/// baseOffset + batchLength: the framing every log entry shares (Kafka's `LOG_OVERHEAD`).
pub const LOG_OVERHEAD: usize = 12;
/// Bytes needed to tell the magic of an entry (Kafka's `HEADER_SIZE_UP_TO_MAGIC`).
pub const HEADER_SIZE_UP_TO_MAGIC: usize = 17;
/// The fixed v2 batch header; also the smallest valid v2 batch (no records).
pub const BATCH_HEADER_SIZE: usize = 61;
/// Kafka refuses an entry whose size field is below the v0 record overhead.
pub const RECORD_OVERHEAD_V0: i32 = 14;
pub const MAGIC_V2: i8 = 2;
pub const NO_PARTITION_LEADER_EPOCH: i32 = -1;
pub const NO_PRODUCER_ID: i64 = -1;
pub const NO_SEQUENCE: i32 = -1;
pub const NO_TIMESTAMP: i64 = -1;

/// Where a record's timestamp comes from (`message.timestamp.type`, attribute bit 3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum TimestampType {
    /// The producer's clock, kept as sent.
    #[default]
    CreateTime,
    /// The leader's clock at append: the leader writes maxTimestamp and sets bit 3.
    LogAppendTime,
}

impl TimestampType {
    pub fn name(self) -> &'static str {
        match self {
            TimestampType::CreateTime => "CreateTime",
            TimestampType::LogAppendTime => "LogAppendTime",
        }
    }
}

/// The batch attributes (i16). Bits 7..15 are unused and must be zero only by convention.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Attributes(pub i16);

impl Attributes {
    pub const COMPRESSION_MASK: i16 = 0x07;
    pub const TIMESTAMP_TYPE_MASK: i16 = 0x08;
    pub const TRANSACTIONAL_MASK: i16 = 0x10;
    pub const CONTROL_MASK: i16 = 0x20;
    pub const DELETE_HORIZON_MASK: i16 = 0x40;

    pub fn compression(self) -> Result<Compression, FormatError> {
        Compression::from_id((self.0 & Self::COMPRESSION_MASK) as u8)
    }
    pub fn timestamp_type(self) -> TimestampType {
        if self.0 & Self::TIMESTAMP_TYPE_MASK != 0 {
            TimestampType::LogAppendTime
        } else {
            TimestampType::CreateTime
        }
    }
    pub fn is_transactional(self) -> bool {
        self.0 & Self::TRANSACTIONAL_MASK != 0
    }
    pub fn is_control(self) -> bool {
        self.0 & Self::CONTROL_MASK != 0
    }
    pub fn has_delete_horizon(self) -> bool {
        self.0 & Self::DELETE_HORIZON_MASK != 0
    }
    /// Kafka's `computeAttributes`.
    pub fn new(
        compression: Compression,
        timestamp_type: TimestampType,
        transactional: bool,
        control: bool,
        delete_horizon: bool,
    ) -> Attributes {
        let mut a = compression.id() as i16;
        if timestamp_type == TimestampType::LogAppendTime {
            a |= Self::TIMESTAMP_TYPE_MASK;
        }
        if transactional {
            a |= Self::TRANSACTIONAL_MASK;
        }
        if control {
            a |= Self::CONTROL_MASK;
        }
        if delete_horizon {
            a |= Self::DELETE_HORIZON_MASK;
        }
        Attributes(a)
    }
}

/// The first 17 bytes of any log entry: enough to frame it and to tell its format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EntryFrame {
    pub base_offset: i64,
    /// Total bytes of the entry, framing included (`batchLength + 12`), as i64 so that a hostile
    /// length cannot overflow.
    pub size: i64,
    pub magic: i8,
}

impl EntryFrame {
    /// Reads the framing from at least 17 bytes. Does not judge the values.
    pub fn parse(b: &[u8]) -> Result<EntryFrame, FormatError> {
        if b.len() < HEADER_SIZE_UP_TO_MAGIC {
            return Err(FormatError::Truncated { needed: HEADER_SIZE_UP_TO_MAGIC as u64, available: b.len() as u64 });
        }
        Ok(EntryFrame {
            base_offset: be_i64(b, BASE_OFFSET_OFFSET),
            size: be_i32(b, LENGTH_OFFSET) as i64 + LOG_OVERHEAD as i64,
            magic: b[MAGIC_OFFSET] as i8,
        })
    }

    /// True when the 17 bytes are all zero: what a torn tail looks like after a crash on a
    /// preallocated or extended file.
    pub fn is_zeroed(b: &[u8]) -> bool {
        b.len() >= HEADER_SIZE_UP_TO_MAGIC && b[..HEADER_SIZE_UP_TO_MAGIC].iter().all(|&x| x == 0)
    }
}

/// What Kafka's framing rules make of an entry, from its size and magic alone
/// ([`check_frame`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameCheck {
    /// A whole v2 batch inside the data.
    Whole,
    /// A batch running past the end of the data: the end of valid data (a torn tail), not an
    /// error.
    Partial,
    /// A size below the smallest entry Kafka accepts (`LOG_OVERHEAD + RECORD_OVERHEAD_V0`, 26
    /// bytes): corrupt.
    TooSmall,
    /// Inside the data, but a magic other than 2: corrupt (v0/v1 were removed in Kafka 4.0).
    BadMagic,
}

/// Kafka's framing rules (`FileLogInputStream.nextBatch`) for the entry `frame` at byte `pos` of
/// data ending at byte `end`: a size field below 14 (`RECORD_OVERHEAD_V0`) is corrupt, an entry
/// running past `end` is a partial batch (where valid data ends, not an error), a magic other
/// than 2 is corrupt. The size is checked before the bounds and the bounds before the magic, in
/// Kafka's order, so a torn tail is a partial batch whatever its magic byte holds.
///
/// Kafka checks one more thing first: with 17 bytes or fewer left (`pos >= end - 17`) it stops
/// before reading a frame at all. Callers apply that themselves, since [`EntryFrame::parse`]
/// needs those 17 bytes. The one place these rules live: the engine's header walk, its
/// one-read fetch and the `seglog` command's `.log` walker all use it.
#[inline]
pub fn check_frame(frame: &EntryFrame, pos: u64, end: u64) -> FrameCheck {
    if frame.size < RECORD_OVERHEAD_V0 as i64 + LOG_OVERHEAD as i64 {
        FrameCheck::TooSmall
    } else if pos as i64 > end as i64 - frame.size {
        FrameCheck::Partial
    } else if frame.magic != MAGIC_V2 {
        FrameCheck::BadMagic
    } else {
        FrameCheck::Whole
    }
}

/// The decoded 61-byte header of a v2 batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchHeader {
    pub base_offset: i64,
    pub batch_length: i32,
    pub partition_leader_epoch: i32,
    pub magic: i8,
    pub crc: u32,
    pub attributes: Attributes,
    pub last_offset_delta: i32,
    pub base_timestamp: i64,
    pub max_timestamp: i64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub records_count: i32,
}

impl BatchHeader {
    /// Decodes the header from the first 61 bytes of `b`. Refuses other magics (detected at byte
    /// 16) and a batchLength that cannot hold the header (Kafka's `DefaultRecordBatch` refuses a
    /// v2 batch smaller than its 61-byte overhead), in that order and before asking for 61 bytes:
    /// given the first `min(size, 61)` bytes of an entry, it says what is wrong with it without
    /// reading past the entry. Does not check the CRC.
    pub fn parse(b: &[u8]) -> Result<BatchHeader, FormatError> {
        let frame = EntryFrame::parse(b)?;
        if frame.magic != MAGIC_V2 {
            return Err(FormatError::UnsupportedMagic { magic: frame.magic });
        }
        if frame.size < BATCH_HEADER_SIZE as i64 {
            return Err(FormatError::BatchTooSmall { size: frame.size, min: BATCH_HEADER_SIZE as i64 });
        }
        if b.len() < BATCH_HEADER_SIZE {
            return Err(FormatError::Truncated { needed: BATCH_HEADER_SIZE as u64, available: b.len() as u64 });
        }
        Ok(BatchHeader {
            base_offset: frame.base_offset,
            batch_length: be_i32(b, LENGTH_OFFSET),
            partition_leader_epoch: be_i32(b, PARTITION_LEADER_EPOCH_OFFSET),
            magic: frame.magic,
            crc: be_u32(b, CRC_OFFSET),
            attributes: Attributes(be_i16(b, ATTRIBUTES_OFFSET)),
            last_offset_delta: be_i32(b, LAST_OFFSET_DELTA_OFFSET),
            base_timestamp: be_i64(b, BASE_TIMESTAMP_OFFSET),
            max_timestamp: be_i64(b, MAX_TIMESTAMP_OFFSET),
            producer_id: be_i64(b, PRODUCER_ID_OFFSET),
            producer_epoch: be_i16(b, PRODUCER_EPOCH_OFFSET),
            base_sequence: be_i32(b, BASE_SEQUENCE_OFFSET),
            records_count: be_i32(b, RECORDS_COUNT_OFFSET),
        })
    }

    /// Writes the 61 header bytes (the CRC field as stored in `self.crc`).
    pub fn write(&self, b: &mut [u8]) {
        b[0..8].copy_from_slice(&self.base_offset.to_be_bytes());
        b[8..12].copy_from_slice(&self.batch_length.to_be_bytes());
        b[12..16].copy_from_slice(&self.partition_leader_epoch.to_be_bytes());
        b[16] = self.magic as u8;
        b[17..21].copy_from_slice(&self.crc.to_be_bytes());
        b[21..23].copy_from_slice(&self.attributes.0.to_be_bytes());
        b[23..27].copy_from_slice(&self.last_offset_delta.to_be_bytes());
        b[27..35].copy_from_slice(&self.base_timestamp.to_be_bytes());
        b[35..43].copy_from_slice(&self.max_timestamp.to_be_bytes());
        b[43..51].copy_from_slice(&self.producer_id.to_be_bytes());
        b[51..53].copy_from_slice(&self.producer_epoch.to_be_bytes());
        b[53..57].copy_from_slice(&self.base_sequence.to_be_bytes());
        b[57..61].copy_from_slice(&self.records_count.to_be_bytes());
    }

    /// Total bytes of the batch on disk.
    pub fn size_in_bytes(&self) -> i64 {
        self.batch_length as i64 + LOG_OVERHEAD as i64
    }
    pub fn last_offset(&self) -> i64 {
        self.base_offset.wrapping_add(self.last_offset_delta as i64)
    }
    pub fn next_offset(&self) -> i64 {
        self.last_offset().wrapping_add(1)
    }
    pub fn compression(&self) -> Result<Compression, FormatError> {
        self.attributes.compression()
    }
    pub fn timestamp_type(&self) -> TimestampType {
        self.attributes.timestamp_type()
    }
    pub fn is_control(&self) -> bool {
        self.attributes.is_control()
    }
    pub fn is_transactional(&self) -> bool {
        self.attributes.is_transactional()
    }
    pub fn has_producer_id(&self) -> bool {
        self.producer_id > NO_PRODUCER_ID
    }
    /// The last sequence number (Kafka's `lastSequence`, wrapping at i32::MAX).
    pub fn last_sequence(&self) -> i32 {
        if self.base_sequence == NO_SEQUENCE {
            return NO_SEQUENCE;
        }
        let s = self.base_sequence as i64 + self.last_offset_delta as i64;
        if s > i32::MAX as i64 {
            (s - i32::MAX as i64 - 1) as i32
        } else {
            s as i32
        }
    }
}

/// CRC-32C (Castagnoli) of bytes `[21, end)` of a batch: what the header's CRC field must hold
/// (Kafka's `DefaultRecordBatch.computeChecksum`). [`BatchCrc`] computes the same over a batch
/// handed in pieces.
pub fn compute_crc(batch: &[u8]) -> u32 {
    let mut crc = BatchCrc::new();
    crc.update(batch);
    crc.finish()
}

/// The CRC-32C of a v2 batch computed over its bytes handed in consecutive pieces, from the
/// batch's first byte: the checksum Kafka stores at byte 17 covers bytes `[21, end)`
/// (`ATTRIBUTES_OFFSET` on), and this skips the first 21 bytes itself, wherever the pieces are
/// cut. For a batch too large to hold whole; [`compute_crc`] is this over one piece.
#[derive(Clone, Copy, Debug, Default)]
pub struct BatchCrc {
    /// Bytes of the batch seen so far.
    seen: u64,
    crc: u32,
}

impl BatchCrc {
    pub fn new() -> BatchCrc {
        BatchCrc::default()
    }

    /// Adds the batch's next bytes (the bytes right after those of the previous call).
    pub fn update(&mut self, piece: &[u8]) {
        let skip = (ATTRIBUTES_OFFSET as u64).saturating_sub(self.seen).min(piece.len() as u64) as usize;
        self.crc = crc32c::crc32c_append(self.crc, &piece[skip..]);
        self.seen += piece.len() as u64;
    }

    /// The CRC of the bytes handed so far.
    pub fn finish(&self) -> u32 {
        self.crc
    }
}

/// Checks that `batch` is exactly one whole v2 batch with a matching CRC, a non-negative offset
/// range and, when `strict_count`, a record count equal to the offset range (what a leader
/// demands of a producer; compacted logs legitimately have fewer records than offsets).
pub fn validate_batch(batch: &[u8], strict_count: bool) -> Result<BatchHeader, FormatError> {
    let h = BatchHeader::parse(batch)?;
    if h.size_in_bytes() != batch.len() as i64 {
        return Err(if h.size_in_bytes() > batch.len() as i64 {
            FormatError::Truncated { needed: h.size_in_bytes().max(0) as u64, available: batch.len() as u64 }
        } else {
            FormatError::TrailingBytes {
                count: h.records_count,
                remaining: (batch.len() as i64 - h.size_in_bytes()) as u64,
            }
        });
    }
    let computed = compute_crc(batch);
    if computed != h.crc {
        return Err(FormatError::CrcMismatch { stored: h.crc, computed });
    }
    if h.last_offset_delta < 0 {
        return Err(FormatError::InvalidOffsetRange { last_offset_delta: h.last_offset_delta });
    }
    h.compression()?;
    if h.records_count < 0 {
        return Err(FormatError::RecordCountMismatch {
            count: h.records_count,
            expected: h.last_offset_delta as i64 + 1,
        });
    }
    if strict_count && h.records_count as i64 != h.last_offset_delta as i64 + 1 {
        return Err(FormatError::RecordCountMismatch {
            count: h.records_count,
            expected: h.last_offset_delta as i64 + 1,
        });
    }
    Ok(h)
}

/// Stamps baseOffset in place. Outside the CRC, so the CRC stays valid.
pub fn set_base_offset(batch: &mut [u8], base_offset: i64) {
    batch[BASE_OFFSET_OFFSET..BASE_OFFSET_OFFSET + 8].copy_from_slice(&base_offset.to_be_bytes());
}

/// Stamps partitionLeaderEpoch in place. Outside the CRC.
pub fn set_partition_leader_epoch(batch: &mut [u8], epoch: i32) {
    batch[PARTITION_LEADER_EPOCH_OFFSET..PARTITION_LEADER_EPOCH_OFFSET + 4].copy_from_slice(&epoch.to_be_bytes());
}

/// Kafka's `setMaxTimestamp`: writes maxTimestamp and the timestamp-type bit, and recomputes the
/// CRC, but only when either changes.
pub fn set_max_timestamp(batch: &mut [u8], ts_type: TimestampType, max_timestamp: i64) {
    let current_ts = be_i64(batch, MAX_TIMESTAMP_OFFSET);
    let attrs = Attributes(be_i16(batch, ATTRIBUTES_OFFSET));
    if current_ts == max_timestamp && attrs.timestamp_type() == ts_type {
        return;
    }
    let mut a = attrs.0 & !Attributes::TIMESTAMP_TYPE_MASK;
    if ts_type == TimestampType::LogAppendTime {
        a |= Attributes::TIMESTAMP_TYPE_MASK;
    }
    batch[ATTRIBUTES_OFFSET..ATTRIBUTES_OFFSET + 2].copy_from_slice(&a.to_be_bytes());
    batch[MAX_TIMESTAMP_OFFSET..MAX_TIMESTAMP_OFFSET + 8].copy_from_slice(&max_timestamp.to_be_bytes());
    let crc = compute_crc(batch);
    batch[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
}

/// Splits a buffer holding whole batches back to back into (position, header) pairs, validating
/// each (CRC included). Refuses a partial trailing batch.
pub fn split_batches(buf: &[u8], strict_count: bool) -> Result<Vec<(usize, BatchHeader)>, (usize, FormatError)> {
    let mut out = Vec::new();
    let mut pos = 0usize;
    while pos < buf.len() {
        let rest = &buf[pos..];
        let frame = EntryFrame::parse(rest).map_err(|e| (pos, e))?;
        if frame.size < BATCH_HEADER_SIZE as i64 {
            let err = if frame.magic != MAGIC_V2 {
                FormatError::UnsupportedMagic { magic: frame.magic }
            } else {
                FormatError::BatchTooSmall { size: frame.size, min: BATCH_HEADER_SIZE as i64 }
            };
            return Err((pos, err));
        }
        if frame.size > rest.len() as i64 {
            if frame.magic != MAGIC_V2 {
                return Err((pos, FormatError::UnsupportedMagic { magic: frame.magic }));
            }
            return Err((pos, FormatError::Truncated { needed: frame.size as u64, available: rest.len() as u64 }));
        }
        let end = frame.size as usize;
        let h = validate_batch(&rest[..end], strict_count).map_err(|e| (pos, e))?;
        out.push((pos, h));
        pos += end;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> BatchHeader {
        BatchHeader {
            base_offset: 0,
            batch_length: (BATCH_HEADER_SIZE - LOG_OVERHEAD) as i32,
            partition_leader_epoch: -1,
            magic: 2,
            crc: 0,
            attributes: Attributes(0),
            last_offset_delta: 0,
            base_timestamp: -1,
            max_timestamp: -1,
            producer_id: -1,
            producer_epoch: -1,
            base_sequence: -1,
            records_count: 0,
        }
    }

    fn encode(h: &BatchHeader) -> Vec<u8> {
        let mut b = vec![0u8; BATCH_HEADER_SIZE];
        h.write(&mut b);
        let crc = compute_crc(&b);
        b[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
        b
    }

    #[test]
    fn header_round_trips() {
        let mut h = header();
        h.base_offset = 1234;
        h.last_offset_delta = 4;
        h.records_count = 5;
        h.producer_id = 77;
        let b = encode(&h);
        let p = validate_batch(&b, true).unwrap();
        assert_eq!(p.base_offset, 1234);
        assert_eq!(p.last_offset(), 1238);
        assert_eq!(p.producer_id, 77);
    }

    #[test]
    fn stamping_offset_and_epoch_keeps_crc() {
        let mut b = encode(&header());
        set_base_offset(&mut b, 99);
        set_partition_leader_epoch(&mut b, 7);
        let h = validate_batch(&b, false).unwrap();
        assert_eq!((h.base_offset, h.partition_leader_epoch), (99, 7));
    }

    #[test]
    fn set_max_timestamp_recomputes_crc() {
        let mut b = encode(&header());
        let before = BatchHeader::parse(&b).unwrap().crc;
        set_max_timestamp(&mut b, TimestampType::LogAppendTime, 42);
        let h = validate_batch(&b, false).unwrap();
        assert_ne!(h.crc, before);
        assert_eq!(h.max_timestamp, 42);
        assert_eq!(h.timestamp_type(), TimestampType::LogAppendTime);
    }

    #[test]
    fn legacy_magic_refused_at_byte_16() {
        let mut b = encode(&header());
        b[MAGIC_OFFSET] = 1;
        assert_eq!(BatchHeader::parse(&b), Err(FormatError::UnsupportedMagic { magic: 1 }));
    }

    #[test]
    fn flipped_bit_fails_crc() {
        let mut b = encode(&header());
        b[40] ^= 1;
        assert!(matches!(validate_batch(&b, false), Err(FormatError::CrcMismatch { .. })));
    }

    #[test]
    fn framing_rules_come_in_kafkas_order() {
        let min = RECORD_OVERHEAD_V0 as i64 + LOG_OVERHEAD as i64;
        let f = |size: i64, magic: i8| EntryFrame { base_offset: 0, size, magic };
        // Too small is corrupt even where it would also run past the end.
        assert_eq!(check_frame(&f(min - 1, 2), 990, 1000), FrameCheck::TooSmall);
        // Past the end is the end of valid data, whatever the magic byte holds (a torn tail).
        assert_eq!(check_frame(&f(100, 0), 950, 1000), FrameCheck::Partial);
        assert_eq!(check_frame(&f(100, 2), 901, 1000), FrameCheck::Partial);
        // Inside the data, only magic 2 frames a batch.
        assert_eq!(check_frame(&f(100, 1), 900, 1000), FrameCheck::BadMagic);
        assert_eq!(check_frame(&f(100, 2), 900, 1000), FrameCheck::Whole);
        assert_eq!(check_frame(&f(min, 2), 0, min as u64), FrameCheck::Whole);
    }

    #[test]
    fn batch_crc_in_pieces_is_the_whole_batch_crc() {
        let mut h = header();
        h.batch_length += 40;
        let mut b = encode(&h);
        b.extend((0..40u8).map(|i| i.wrapping_mul(37)));
        let whole = crc32c::crc32c(&b[ATTRIBUTES_OFFSET..]);
        assert_eq!(compute_crc(&b), whole);
        for cut in 0..=b.len() {
            for cut2 in cut..=b.len() {
                let mut c = BatchCrc::new();
                c.update(&b[..cut]);
                c.update(&b[cut..cut2]);
                c.update(&b[cut2..]);
                assert_eq!(c.finish(), whole, "pieces cut at {cut} and {cut2}");
            }
        }
        assert_eq!(compute_crc(&b[..10]), crc32c::crc32c(&[]));
    }

    #[test]
    fn a_batch_smaller_than_its_header_is_named_before_its_missing_bytes() {
        let mut b = encode(&header());
        b[LENGTH_OFFSET..LENGTH_OFFSET + 4].copy_from_slice(&30i32.to_be_bytes());
        // The first min(size, 61) bytes of the entry are enough to say what is wrong.
        assert_eq!(BatchHeader::parse(&b[..42]), Err(FormatError::BatchTooSmall { size: 42, min: 61 }));
        assert_eq!(BatchHeader::parse(&b), Err(FormatError::BatchTooSmall { size: 42, min: 61 }));
        let b = encode(&header());
        assert_eq!(BatchHeader::parse(&b[..42]), Err(FormatError::Truncated { needed: 61, available: 42 }));
    }

    #[test]
    fn hostile_lengths_do_not_panic() {
        let mut b = encode(&header());
        for len in [i32::MIN, -12, -1, 0, 13, 48, i32::MAX] {
            b[8..12].copy_from_slice(&len.to_be_bytes());
            assert!(validate_batch(&b, false).is_err());
            assert!(split_batches(&b, false).is_err());
        }
    }
}
