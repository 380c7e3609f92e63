//! Records inside a v2 batch: Kafka's zig-zag varints, the record layout (`DefaultRecord`), a
//! zero-copy iterator over a batch's records section, the record encoder, and access to a batch's
//! (possibly compressed) records section.
//!
//! ```text
//! length varint (bytes after it)   attributes i8   timestampDelta varlong   offsetDelta varint
//! keyLen varint (-1 = null) key    valueLen varint (-1 = null) value
//! headerCount varint, then per header: keyLen varint (>= 0) key, valueLen varint (-1 = null) value
//! ```
//!
//! Decoding trusts no length: each is checked against the record's own declared length and what
//! is left, a record whose fields do not end exactly at its declared length is refused, and nothing
//! here panics on any input.

use super::batch::{
    Attributes, TimestampType, ATTRIBUTES_OFFSET, BATCH_HEADER_SIZE, RECORDS_COUNT_OFFSET, RECORDS_OFFSET,
};
use super::compression::{decompress, Compression};
use super::{be_i16, be_i32, FormatError};

/// The most bytes a batch's records section may decompress to (256 MiB). A fixed cap rather than
/// a ratio of the compressed size: zstd and gzip legitimately reach ratios above 1000:1 on
/// repetitive data, and Kafka's own limit (`max.message.bytes`, 1 MiB by default) applies to the
/// compressed batch, so any cap is a policy; 256 MiB stays far above what Kafka producers emit
/// while bounding the memory one hostile batch can claim.
pub const MAX_DECOMPRESSED_BATCH_BYTES: usize = 256 * 1024 * 1024;

/// Most bytes of a zig-zag varint (i32).
pub const MAX_VARINT_SIZE: usize = 5;
/// Most bytes of a zig-zag varlong (i64).
pub const MAX_VARLONG_SIZE: usize = 10;
/// Most bytes a record takes besides its key, value and headers: length varint 5, attributes 1,
/// timestampDelta 10, offsetDelta 5 (Kafka's `DefaultRecord.MAX_RECORD_OVERHEAD`).
pub const MAX_RECORD_OVERHEAD: usize = 21;

/// Appends `v` as a zig-zag varint (Kafka's `ByteUtils.writeVarint`).
#[inline]
pub fn write_varint(out: &mut Vec<u8>, v: i32) {
    write_unsigned_varint(out, ((v << 1) ^ (v >> 31)) as u32);
}

/// Appends `v` as a zig-zag varlong (Kafka's `ByteUtils.writeVarlong`).
#[inline]
pub fn write_varlong(out: &mut Vec<u8>, v: i64) {
    let mut u = ((v << 1) ^ (v >> 63)) as u64;
    while u >= 0x80 {
        out.push((u as u8) | 0x80);
        u >>= 7;
    }
    out.push(u as u8);
}

#[inline]
fn write_unsigned_varint(out: &mut Vec<u8>, mut u: u32) {
    while u >= 0x80 {
        out.push((u as u8) | 0x80);
        u >>= 7;
    }
    out.push(u as u8);
}

/// Bytes `v` takes as a zig-zag varint (1..=5), Kafka's `ByteUtils.sizeOfVarint`.
#[inline]
pub fn varint_size(v: i32) -> usize {
    let u = ((v << 1) ^ (v >> 31)) as u32;
    // bits used, at least 1; 7 bits per byte.
    let bits = 32 - (u | 1).leading_zeros() as usize;
    bits.div_ceil(7)
}

/// Bytes `v` takes as a zig-zag varlong (1..=10), Kafka's `ByteUtils.sizeOfVarlong`.
#[inline]
pub fn varlong_size(v: i64) -> usize {
    let u = ((v << 1) ^ (v >> 63)) as u64;
    let bits = 64 - (u | 1).leading_zeros() as usize;
    bits.div_ceil(7)
}

/// Reads a zig-zag varint at `*pos`, advancing `*pos` past it.
///
/// Accepts exactly what Kafka's `ByteUtils.readVarint` accepts: at most 5 bytes; a continuation
/// bit on the fifth byte is [`FormatError::BadVarint`]; the fifth byte's bits above bit 31 are
/// ignored, as Kafka ignores them. Running out of bytes is [`FormatError::Truncated`]. On error
/// `*pos` is unchanged.
#[inline]
pub fn read_varint(buf: &[u8], pos: &mut usize) -> Result<i32, FormatError> {
    let start = *pos;
    let mut p = start;
    let mut value: u32 = 0;
    let mut shift: u32 = 0;
    loop {
        let Some(&b) = buf.get(p) else {
            return Err(FormatError::Truncated { needed: p as u64 + 1, available: buf.len() as u64 });
        };
        p += 1;
        if b & 0x80 == 0 {
            value |= (b as u32) << shift;
            break;
        }
        value |= ((b & 0x7f) as u32) << shift;
        shift += 7;
        if shift > 28 {
            return Err(FormatError::BadVarint { at: start as u64 });
        }
    }
    *pos = p;
    Ok(((value >> 1) as i32) ^ -((value & 1) as i32))
}

/// Reads a zig-zag varlong at `*pos`, advancing `*pos` past it. At most 10 bytes, with the same
/// rules as [`read_varint`] (Kafka's `ByteUtils.readVarlong`).
#[inline]
pub fn read_varlong(buf: &[u8], pos: &mut usize) -> Result<i64, FormatError> {
    let start = *pos;
    let mut p = start;
    let mut value: u64 = 0;
    let mut shift: u32 = 0;
    loop {
        let Some(&b) = buf.get(p) else {
            return Err(FormatError::Truncated { needed: p as u64 + 1, available: buf.len() as u64 });
        };
        p += 1;
        if b & 0x80 == 0 {
            value |= (b as u64) << shift;
            break;
        }
        value |= ((b & 0x7f) as u64) << shift;
        shift += 7;
        if shift > 63 {
            return Err(FormatError::BadVarint { at: start as u64 });
        }
    }
    *pos = p;
    Ok(((value >> 1) as i64) ^ -((value & 1) as i64))
}

/// One record header: a non-null key (UTF-8 by Kafka's contract, not checked here) and a
/// nullable value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header<'a> {
    /// The header key.
    pub key: &'a [u8],
    /// The header value; `None` for null.
    pub value: Option<&'a [u8]>,
}

/// One decoded record, borrowing its key, value and headers from the records section.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record<'a> {
    /// The record attributes byte (unused by Kafka, written as 0).
    pub attributes: i8,
    /// Timestamp minus the batch's baseTimestamp.
    pub timestamp_delta: i64,
    /// Offset minus the batch's baseOffset.
    pub offset_delta: i32,
    /// The key; `None` for null.
    pub key: Option<&'a [u8]>,
    /// The value; `None` for null (a tombstone in compacted topics).
    pub value: Option<&'a [u8]>,
    /// The headers, in order.
    pub headers: Vec<Header<'a>>,
    /// Bytes the record takes in the records section, its length varint included.
    pub size_in_bytes: usize,
}

impl Record<'_> {
    /// The record's offset: `base_offset + offsetDelta` (wrapping, as Java's long arithmetic).
    #[inline]
    pub fn offset(&self, base_offset: i64) -> i64 {
        base_offset.wrapping_add(self.offset_delta as i64)
    }

    /// The record's timestamp as Kafka's `DefaultRecord` reports it: with LogAppendTime every
    /// record carries the batch's `max_timestamp`; with CreateTime it is
    /// `base_timestamp + timestampDelta` (wrapping).
    #[inline]
    pub fn timestamp(&self, base_timestamp: i64, max_timestamp: i64, timestamp_type: TimestampType) -> i64 {
        match timestamp_type {
            TimestampType::LogAppendTime => max_timestamp,
            TimestampType::CreateTime => base_timestamp.wrapping_add(self.timestamp_delta),
        }
    }
}

/// Iterates over the records of an uncompressed records section, yielding
/// `Result<Record, FormatError>`.
///
/// After the declared count, leftover bytes yield one [`FormatError::TrailingBytes`]; running out
/// of bytes before the count is an error; a negative count is an error. After the first error the
/// iterator ends. Error positions (`at`) are relative to the start of the records section.
#[derive(Clone, Debug)]
pub struct RecordIter<'a> {
    buf: &'a [u8],
    pos: usize,
    count: i32,
    left: i32,
    done: bool,
}

impl<'a> RecordIter<'a> {
    /// An iterator over `count` records in `records` (a batch's records section, uncompressed).
    pub fn new(records: &'a [u8], count: i32) -> RecordIter<'a> {
        RecordIter { buf: records, pos: 0, count, left: count, done: false }
    }

    /// Records still to be yielded by the declared count.
    pub fn remaining_count(&self) -> i32 {
        self.left.max(0)
    }

    /// Byte position of the next record in the records section.
    pub fn position(&self) -> usize {
        self.pos
    }
}

impl<'a> Iterator for RecordIter<'a> {
    type Item = Result<Record<'a>, FormatError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        if self.count < 0 {
            self.done = true;
            return Some(Err(FormatError::InvalidRecord {
                at: 0,
                detail: format!("negative record count {}", self.count),
            }));
        }
        if self.left == 0 {
            self.done = true;
            let rest = self.buf.len().saturating_sub(self.pos);
            if rest > 0 {
                return Some(Err(FormatError::TrailingBytes { count: self.count, remaining: rest as u64 }));
            }
            return None;
        }
        match decode_record(self.buf, self.pos) {
            Ok(r) => {
                self.pos += r.size_in_bytes;
                self.left -= 1;
                Some(Ok(r))
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        if self.done {
            (0, Some(0))
        } else {
            // Plus one for a possible trailing-bytes or count error.
            (0, Some(self.left.max(0) as usize + 1))
        }
    }
}

fn invalid(at: usize, detail: impl Into<String>) -> FormatError {
    FormatError::InvalidRecord { at: at as u64, detail: detail.into() }
}

/// Reads a varint inside a record body that ends at `end`: running past `end` is an invalid
/// record (the field overruns the record's declared length), not a truncation.
#[inline]
fn body_varint(buf: &[u8], pos: &mut usize, end: usize, what: &str) -> Result<i32, FormatError> {
    let at = *pos;
    let body = buf.get(..end).unwrap_or(buf);
    read_varint(body, pos).map_err(|e| match e {
        FormatError::Truncated { .. } => invalid(at, format!("{what} runs past the record's declared length")),
        other => other,
    })
}

#[inline]
fn body_varlong(buf: &[u8], pos: &mut usize, end: usize, what: &str) -> Result<i64, FormatError> {
    let at = *pos;
    let body = buf.get(..end).unwrap_or(buf);
    read_varlong(body, pos).map_err(|e| match e {
        FormatError::Truncated { .. } => invalid(at, format!("{what} runs past the record's declared length")),
        other => other,
    })
}

/// Reads a length-prefixed byte field (length -1 = null when `nullable`).
#[inline]
fn body_bytes<'a>(
    buf: &'a [u8],
    pos: &mut usize,
    end: usize,
    what: &str,
    nullable: bool,
) -> Result<Option<&'a [u8]>, FormatError> {
    let at = *pos;
    let len = body_varint(buf, pos, end, what)?;
    if len == -1 && nullable {
        return Ok(None);
    }
    if len < 0 {
        return Err(invalid(at, format!("negative {what} {len}")));
    }
    let len = len as usize;
    let left = end - *pos;
    if len > left {
        return Err(invalid(at, format!("{what} {len} exceeds the {left} bytes left in the record")));
    }
    let s = buf.get(*pos..*pos + len).ok_or_else(|| invalid(at, "field out of range"))?;
    *pos += len;
    Ok(Some(s))
}

/// Decodes the record starting at `start` in `buf` (Kafka's `DefaultRecord.readFrom`).
fn decode_record(buf: &[u8], start: usize) -> Result<Record<'_>, FormatError> {
    let mut pos = start;
    let body_len = read_varint(buf, &mut pos)?;
    if body_len < 0 {
        return Err(invalid(start, format!("negative record length {body_len}")));
    }
    let body_start = pos;
    let left = buf.len() - body_start;
    if body_len as usize > left {
        return Err(FormatError::Truncated {
            needed: body_start as u64 + body_len as u64,
            available: buf.len() as u64,
        });
    }
    let end = body_start + body_len as usize;

    let attributes = *buf
        .get(pos)
        .filter(|_| pos < end)
        .ok_or_else(|| invalid(pos, "attributes run past the record's declared length"))? as i8;
    pos += 1;
    let timestamp_delta = body_varlong(buf, &mut pos, end, "timestamp delta")?;
    let offset_delta = body_varint(buf, &mut pos, end, "offset delta")?;
    let key = body_bytes(buf, &mut pos, end, "key length", true)?;
    let value = body_bytes(buf, &mut pos, end, "value length", true)?;
    let hc_at = pos;
    let header_count = body_varint(buf, &mut pos, end, "header count")?;
    if header_count < 0 {
        return Err(invalid(hc_at, format!("negative header count {header_count}")));
    }
    // Each header takes at least two bytes (two one-byte length varints).
    let hc = header_count as usize;
    if hc > (end - pos) / 2 {
        return Err(invalid(
            hc_at,
            format!("header count {hc} cannot fit in the {} bytes left in the record", end - pos),
        ));
    }
    let mut headers = Vec::with_capacity(hc);
    for _ in 0..hc {
        let hk = body_bytes(buf, &mut pos, end, "header key length", false)?.unwrap_or_default();
        let hv = body_bytes(buf, &mut pos, end, "header value length", true)?;
        headers.push(Header { key: hk, value: hv });
    }
    if pos != end {
        return Err(invalid(
            start,
            format!("record declares {body_len} bytes but its fields end after {}", pos - body_start),
        ));
    }
    Ok(Record { attributes, timestamp_delta, offset_delta, key, value, headers, size_in_bytes: end - start })
}

fn opt_len_size(b: Option<&[u8]>) -> Option<usize> {
    match b {
        None => Some(1),
        Some(s) => {
            let n = i32::try_from(s.len()).ok()?;
            varint_size(n).checked_add(s.len())
        }
    }
}

/// Bytes the record takes once encoded by [`encode_record`], its length varint included (Kafka's
/// `DefaultRecord.sizeInBytes`); `None` when a length or the record body does not fit in an i32,
/// which Kafka cannot represent.
pub fn encoded_record_size(
    offset_delta: i32,
    timestamp_delta: i64,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    headers: &[(&[u8], Option<&[u8]>)],
) -> Option<usize> {
    let body = body_size(offset_delta, timestamp_delta, key, value, headers)?;
    Some(varint_size(body as i32) + body)
}

fn body_size(
    offset_delta: i32,
    timestamp_delta: i64,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    headers: &[(&[u8], Option<&[u8]>)],
) -> Option<usize> {
    let mut n = 1 + varlong_size(timestamp_delta) + varint_size(offset_delta);
    n = n.checked_add(opt_len_size(key)?)?;
    n = n.checked_add(opt_len_size(value)?)?;
    n = n.checked_add(varint_size(i32::try_from(headers.len()).ok()?))?;
    for (k, v) in headers {
        n = n.checked_add(opt_len_size(Some(k))?)?;
        n = n.checked_add(opt_len_size(*v)?)?;
    }
    i32::try_from(n).ok()?;
    Some(n)
}

fn write_opt_bytes(out: &mut Vec<u8>, b: Option<&[u8]>) {
    match b {
        None => write_varint(out, -1),
        Some(s) => {
            write_varint(out, s.len() as i32);
            out.extend_from_slice(s);
        }
    }
}

/// Appends one record as Kafka's `DefaultRecord.writeTo` writes it (attributes 0).
///
/// # Panics
/// When a key, value, header or the whole record body is longer than `i32::MAX` bytes, which
/// Kafka's format cannot represent: a caller bug, not an input condition. Check with
/// [`encoded_record_size`] first when sizes are not known to be small ([`super::builder`] does).
pub fn encode_record(
    out: &mut Vec<u8>,
    offset_delta: i32,
    timestamp_delta: i64,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    headers: &[(&[u8], Option<&[u8]>)],
) {
    let body =
        body_size(offset_delta, timestamp_delta, key, value, headers).expect("record field longer than i32::MAX bytes");
    out.reserve(MAX_VARINT_SIZE + body);
    write_varint(out, body as i32);
    out.push(0);
    write_varlong(out, timestamp_delta);
    write_varint(out, offset_delta);
    write_opt_bytes(out, key);
    write_opt_bytes(out, value);
    write_varint(out, headers.len() as i32);
    for (k, v) in headers {
        write_opt_bytes(out, Some(k));
        write_opt_bytes(out, *v);
    }
}

/// The records section of a whole v2 batch (bytes from 61 on), decompressed into `scratch` when
/// the attributes name a codec, with at most `limit` decompressed bytes.
///
/// Meant for a batch already checked with [`super::batch::validate_batch`], but safe on any
/// bytes: a batch shorter than the header is [`FormatError::Truncated`] and an unknown codec
/// [`FormatError::UnknownCompression`]. `scratch` is cleared first when used.
pub fn records_section<'a>(batch: &'a [u8], scratch: &'a mut Vec<u8>, limit: usize) -> Result<&'a [u8], FormatError> {
    let Some(records) = batch.get(RECORDS_OFFSET..) else {
        return Err(FormatError::Truncated { needed: BATCH_HEADER_SIZE as u64, available: batch.len() as u64 });
    };
    let codec = Attributes(be_i16(batch, ATTRIBUTES_OFFSET)).compression()?;
    if codec == Compression::None {
        return Ok(records);
    }
    scratch.clear();
    decompress(codec, records, scratch, limit)?;
    Ok(scratch.as_slice())
}

/// The records of a whole v2 batch: count from byte 57, records section decompressed into
/// `scratch` when needed (at most [`MAX_DECOMPRESSED_BATCH_BYTES`]).
///
/// Like Kafka's `DefaultRecordBatch.iterator`, a batch whose count is 0 yields no records and its
/// records bytes are not looked at (not decompressed, not checked for trailing bytes).
pub fn batch_records<'a>(batch: &'a [u8], scratch: &'a mut Vec<u8>) -> Result<RecordIter<'a>, FormatError> {
    if batch.len() < BATCH_HEADER_SIZE {
        return Err(FormatError::Truncated { needed: BATCH_HEADER_SIZE as u64, available: batch.len() as u64 });
    }
    let count = be_i32(batch, RECORDS_COUNT_OFFSET);
    if count == 0 {
        return Ok(RecordIter::new(&[], 0));
    }
    let records = records_section(batch, scratch, MAX_DECOMPRESSED_BATCH_BYTES)?;
    Ok(RecordIter::new(records, count))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (offsetDelta, timestampDelta, key, value, headers)
    type TestRec<'a> = (i32, i64, Option<&'a [u8]>, Option<&'a [u8]>, Vec<(&'a [u8], Option<&'a [u8]>)>);

    fn xorshift(seed: u64) -> impl FnMut() -> u64 {
        let mut x = seed | 1;
        move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        }
    }

    #[test]
    fn varint_round_trips() {
        let mut rng = xorshift(42);
        let mut vals: Vec<i32> =
            vec![0, 1, -1, 63, -64, 64, -65, 8191, 8192, i32::MIN, i32::MAX, i32::MIN + 1, i32::MAX - 1];
        vals.extend((0..2000).map(|_| rng() as i32 >> (rng() % 32)));
        for v in vals {
            let mut b = Vec::new();
            write_varint(&mut b, v);
            assert_eq!(b.len(), varint_size(v), "{v}");
            assert!(b.len() <= MAX_VARINT_SIZE);
            let mut pos = 0;
            assert_eq!(read_varint(&b, &mut pos), Ok(v));
            assert_eq!(pos, b.len());
            // Every strict prefix is truncated.
            for cut in 0..b.len() {
                let mut p = 0;
                assert!(matches!(read_varint(&b[..cut], &mut p), Err(FormatError::Truncated { .. })));
                assert_eq!(p, 0);
            }
        }
        let mut lvals: Vec<i64> = vec![0, 1, -1, i64::MIN, i64::MAX, i32::MIN as i64, i32::MAX as i64 + 1];
        lvals.extend((0..2000).map(|_| rng() as i64 >> (rng() % 64)));
        for v in lvals {
            let mut b = Vec::new();
            write_varlong(&mut b, v);
            assert_eq!(b.len(), varlong_size(v), "{v}");
            assert!(b.len() <= MAX_VARLONG_SIZE);
            let mut pos = 0;
            assert_eq!(read_varlong(&b, &mut pos), Ok(v));
            assert_eq!(pos, b.len());
        }
    }

    #[test]
    fn varint_known_bytes() {
        let enc = |v: i32| {
            let mut b = Vec::new();
            write_varint(&mut b, v);
            b
        };
        assert_eq!(enc(0), [0x00]);
        assert_eq!(enc(-1), [0x01]);
        assert_eq!(enc(1), [0x02]);
        assert_eq!(enc(5), [0x0a]);
        assert_eq!(enc(64), [0x80, 0x01]);
        assert_eq!(enc(i32::MAX), [0xfe, 0xff, 0xff, 0xff, 0x0f]);
        assert_eq!(enc(i32::MIN), [0xff, 0xff, 0xff, 0xff, 0x0f]);
        let mut b = Vec::new();
        write_varlong(&mut b, i64::MIN);
        assert_eq!(b, [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]);
    }

    #[test]
    fn malformed_varints() {
        // Continuation on the 5th (varint) / 10th (varlong) byte.
        let mut pos = 0;
        assert_eq!(read_varint(&[0x80, 0x80, 0x80, 0x80, 0x80, 0x00], &mut pos), Err(FormatError::BadVarint { at: 0 }));
        assert_eq!(pos, 0);
        let mut pos = 2;
        assert_eq!(
            read_varint(&[0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff], &mut pos),
            Err(FormatError::BadVarint { at: 2 })
        );
        let mut pos = 0;
        assert_eq!(read_varlong(&[0x80; 11], &mut pos), Err(FormatError::BadVarint { at: 0 }));
        let mut pos = 0;
        assert!(matches!(read_varint(&[], &mut pos), Err(FormatError::Truncated { .. })));
        // Kafka ignores the fifth byte's bits above bit 31.
        let mut pos = 0;
        assert_eq!(read_varint(&[0xfe, 0xff, 0xff, 0xff, 0x7f], &mut pos), Ok(i32::MAX));
    }

    fn encode_all(recs: &[TestRec]) -> Vec<u8> {
        let mut out = Vec::new();
        for (od, td, k, v, h) in recs {
            let before = out.len();
            encode_record(&mut out, *od, *td, *k, *v, h);
            assert_eq!(out.len() - before, encoded_record_size(*od, *td, *k, *v, h).unwrap());
        }
        out
    }

    #[test]
    fn records_round_trip() {
        let big = vec![7u8; 300];
        let recs: Vec<TestRec> = vec![
            (0, 0, None, Some(b"hello"), vec![]),
            (1, -5, Some(b"k"), None, vec![(b"h1", Some(b"v1")), (b"", None)]),
            (2, i64::MAX, Some(b""), Some(&big), vec![(b"x", Some(b""))]),
            (i32::MAX, i64::MIN, None, None, vec![]),
        ];
        let bytes = encode_all(&recs);
        let got: Vec<Record> = RecordIter::new(&bytes, recs.len() as i32).collect::<Result<_, _>>().unwrap();
        assert_eq!(got.len(), recs.len());
        let mut total = 0;
        for (r, (od, td, k, v, h)) in got.iter().zip(&recs) {
            assert_eq!(r.attributes, 0);
            assert_eq!(r.offset_delta, *od);
            assert_eq!(r.timestamp_delta, *td);
            assert_eq!(r.key, *k);
            assert_eq!(r.value, *v);
            let hs: Vec<(&[u8], Option<&[u8]>)> = r.headers.iter().map(|h| (h.key, h.value)).collect();
            assert_eq!(&hs, h);
            total += r.size_in_bytes;
        }
        assert_eq!(total, bytes.len());
        assert_eq!(got[1].offset(100), 101);
        assert_eq!(got[1].timestamp(1000, 2000, TimestampType::CreateTime), 995);
        assert_eq!(got[1].timestamp(1000, 2000, TimestampType::LogAppendTime), 2000);
    }

    #[test]
    fn count_mismatches() {
        let mut bytes = Vec::new();
        encode_record(&mut bytes, 0, 0, None, Some(b"a"), &[]);
        encode_record(&mut bytes, 1, 0, None, Some(b"b"), &[]);
        let r: Vec<_> = RecordIter::new(&bytes, 1).collect();
        assert_eq!(r.len(), 2);
        assert!(r[0].is_ok());
        assert_eq!(r[1], Err(FormatError::TrailingBytes { count: 1, remaining: 8 }));
        let r: Vec<_> = RecordIter::new(&bytes, 3).collect();
        assert_eq!(r.len(), 3);
        assert!(matches!(r[2], Err(FormatError::Truncated { .. })));
        let r: Vec<_> = RecordIter::new(&bytes, -1).collect();
        assert!(matches!(r[..], [Err(FormatError::InvalidRecord { .. })]));
        assert_eq!(RecordIter::new(&[], 0).count(), 0);
    }

    fn body(fields: &[u8]) -> Vec<u8> {
        let mut b = Vec::new();
        write_varint(&mut b, fields.len() as i32);
        b.extend_from_slice(fields);
        b
    }

    #[test]
    fn malformed_records_are_errors() {
        let bad: Vec<Vec<u8>> = vec![
            // negative record length
            vec![0x03],
            // key length -2
            body(&[0, 0, 0, 0x03, 0x01, 0x00]),
            // value length beyond the record
            body(&[0, 0, 0, 0x01, 0x0a, b'x', 0x00]),
            // header key length -1 (header keys are not nullable)
            body(&[0, 0, 0, 0x01, 0x01, 0x02, 0x01, 0x01]),
            // negative header count
            body(&[0, 0, 0, 0x01, 0x01, 0x01]),
            // header count far beyond the bytes left
            body(&[0, 0, 0, 0x01, 0x01, 0xfe, 0xff, 0xff, 0xff, 0x0f]),
            // one spare byte after the fields
            body(&[0, 0, 0, 0x01, 0x01, 0x00, 0x00]),
            // fields stop short: header count missing
            body(&[0, 0, 0, 0x01, 0x01]),
            // overlong varint inside the record
            body(&[0, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00, 0, 1, 1, 0]),
            // empty body
            body(&[]),
        ];
        for (i, b) in bad.iter().enumerate() {
            let r: Vec<_> = RecordIter::new(b, 1).collect();
            assert!(r.iter().any(|x| x.is_err()), "case {i}: {r:?}");
            assert!(
                matches!(r[0], Err(FormatError::InvalidRecord { .. }) | Err(FormatError::BadVarint { .. })),
                "case {i}: {r:?}"
            );
        }
        // Sanity: the minimal record parses.
        let ok = body(&[0, 0, 0, 0x01, 0x01, 0x00]);
        let r: Vec<_> = RecordIter::new(&ok, 1).collect();
        assert!(r[0].is_ok());
    }

    #[test]
    fn truncations_and_flips_never_panic() {
        let mut bytes = Vec::new();
        for i in 0..20i32 {
            let v = vec![i as u8; (i as usize * 37) % 200];
            let hs: Vec<(&[u8], Option<&[u8]>)> =
                (0..(i % 4)).map(|j| (&b"hdr"[..j as usize], Some(&v[..j as usize]))).collect();
            encode_record(
                &mut bytes,
                i,
                i as i64 * 1000 - 7,
                if i % 3 == 0 { None } else { Some(&v[..3.min(v.len())]) },
                Some(&v),
                &hs,
            );
        }
        assert_eq!(RecordIter::new(&bytes, 20).filter(|r| r.is_err()).count(), 0);
        for cut in 0..bytes.len() {
            let errs = RecordIter::new(&bytes[..cut], 20).filter(|r| r.is_err()).count();
            assert_eq!(errs, 1, "cut {cut}");
        }
        let mut rng = xorshift(7);
        for _ in 0..5000 {
            let mut b = bytes.clone();
            for _ in 0..1 + rng() % 3 {
                let i = rng() as usize % b.len();
                b[i] ^= 1 << (rng() % 8);
            }
            let n = RecordIter::new(&b, 20).count();
            assert!(n <= 21);
        }
    }
}
