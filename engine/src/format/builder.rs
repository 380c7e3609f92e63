//! Building whole v2 record batches the way Kafka's `MemoryRecordsBuilder` does, for tests, the
//! bench and the demo: records are encoded as they are pushed into one reusable buffer, and
//! [`BatchBuilder::build`] compresses them, writes the 61-byte header and the CRC-32C.
//!
//! Header fields follow Kafka: offsetDelta = the record's index, lastOffsetDelta = n - 1,
//! recordsCount = n, baseTimestamp = the first record's timestamp unless set, timestampDelta =
//! timestamp - baseTimestamp, maxTimestamp = the largest record timestamp (starting from -1, as
//! Kafka does) or the log-append time for LogAppendTime, batchLength = total - 12.
//!
//! An empty builder builds what Kafka's `DefaultRecordBatch.writeEmptyHeader` writes (the log
//! cleaner's empty batches): 61 bytes, recordsCount 0, lastOffsetDelta 0, baseTimestamp and
//! maxTimestamp -1, compression bits none whatever codec was configured. Such a batch passes
//! `validate_batch(.., false)` but not the strict count check (0 records for 1 offset).
//! The delete-horizon flag is never set.

use super::batch::{
    compute_crc, Attributes, BatchHeader, TimestampType, BATCH_HEADER_SIZE, CRC_OFFSET, LOG_OVERHEAD, MAGIC_V2,
    NO_PARTITION_LEADER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE, NO_TIMESTAMP,
};
use super::compression::{compress, Compression};
use super::record::{encode_record, encoded_record_size, RecordIter};
use super::FormatError;

/// Builds one v2 record batch. Configure with the by-value setters, then [`push`](Self::push)
/// records and [`build`](Self::build). [`clear`](Self::clear) drops the records but keeps the
/// configuration and the buffer, so one builder can build many batches.
#[derive(Clone, Debug)]
pub struct BatchBuilder {
    base_offset: i64,
    partition_leader_epoch: i32,
    compression: Compression,
    timestamp_type: TimestampType,
    log_append_time: Option<i64>,
    producer_id: i64,
    producer_epoch: i16,
    base_sequence: i32,
    transactional: bool,
    control: bool,
    /// Explicitly configured baseTimestamp.
    explicit_base_timestamp: Option<i64>,
    /// The baseTimestamp the encoded records are relative to (set at the first push).
    base_timestamp: Option<i64>,
    max_timestamp: i64,
    count: u32,
    records: Vec<u8>,
    error: Option<FormatError>,
}

impl Default for BatchBuilder {
    fn default() -> Self {
        BatchBuilder::new()
    }
}

impl BatchBuilder {
    /// A builder with Kafka's defaults: baseOffset 0, partitionLeaderEpoch -1, no compression,
    /// CreateTime, no producer (-1/-1/-1), neither transactional nor control.
    pub fn new() -> BatchBuilder {
        BatchBuilder {
            base_offset: 0,
            partition_leader_epoch: NO_PARTITION_LEADER_EPOCH,
            compression: Compression::None,
            timestamp_type: TimestampType::CreateTime,
            log_append_time: None,
            producer_id: NO_PRODUCER_ID,
            producer_epoch: -1,
            base_sequence: NO_SEQUENCE,
            transactional: false,
            control: false,
            explicit_base_timestamp: None,
            base_timestamp: None,
            max_timestamp: NO_TIMESTAMP,
            count: 0,
            records: Vec::new(),
            error: None,
        }
    }

    /// Sets baseOffset (default 0).
    pub fn base_offset(mut self, base_offset: i64) -> Self {
        self.base_offset = base_offset;
        self
    }

    /// Sets partitionLeaderEpoch (default -1).
    pub fn partition_leader_epoch(mut self, epoch: i32) -> Self {
        self.partition_leader_epoch = epoch;
        self
    }

    /// Sets the codec of the records section (default none).
    pub fn compression(mut self, compression: Compression) -> Self {
        self.compression = compression;
        self
    }

    /// Sets the timestamp type (default CreateTime). With LogAppendTime and no
    /// [`log_append_time`](Self::log_append_time), maxTimestamp is the largest record timestamp
    /// (Kafka would read the clock; a test builder should not).
    pub fn timestamp_type(mut self, timestamp_type: TimestampType) -> Self {
        self.timestamp_type = timestamp_type;
        self
    }

    /// Sets LogAppendTime with this broker time: it becomes maxTimestamp, which is every record's
    /// timestamp when read.
    pub fn log_append_time(mut self, time: i64) -> Self {
        self.timestamp_type = TimestampType::LogAppendTime;
        self.log_append_time = Some(time);
        self
    }

    /// Sets producerId, producerEpoch and baseSequence (default -1, -1, -1).
    pub fn producer(mut self, producer_id: i64, producer_epoch: i16, base_sequence: i32) -> Self {
        self.producer_id = producer_id;
        self.producer_epoch = producer_epoch;
        self.base_sequence = base_sequence;
        self
    }

    /// Sets the transactional attribute (bit 4).
    pub fn transactional(mut self, transactional: bool) -> Self {
        self.transactional = transactional;
        self
    }

    /// Sets the control attribute (bit 5). The control record keys and values are the caller's.
    pub fn control(mut self, control: bool) -> Self {
        self.control = control;
        self
    }

    /// Sets baseTimestamp instead of the first record's timestamp. Records already pushed are
    /// re-encoded against it.
    pub fn base_timestamp(mut self, base_timestamp: i64) -> Self {
        self.explicit_base_timestamp = Some(base_timestamp);
        if let Some(old) = self.base_timestamp {
            if old != base_timestamp && self.count > 0 {
                self.rebase(old, base_timestamp);
            }
        }
        if self.count > 0 {
            self.base_timestamp = Some(base_timestamp);
        }
        self
    }

    /// Re-encodes the pushed records with timestamp deltas against `new` instead of `old`.
    fn rebase(&mut self, old: i64, new: i64) {
        let mut out = Vec::with_capacity(self.records.len() + 16);
        for r in RecordIter::new(&self.records, self.count as i32) {
            let r = match r {
                Ok(r) => r,
                Err(e) => {
                    self.error.get_or_insert(e);
                    return;
                }
            };
            let ts = old.wrapping_add(r.timestamp_delta);
            let delta = ts.wrapping_sub(new);
            let hs: Vec<(&[u8], Option<&[u8]>)> = r.headers.iter().map(|h| (h.key, h.value)).collect();
            if encoded_record_size(r.offset_delta, delta, r.key, r.value, &hs).is_none() {
                self.error.get_or_insert(FormatError::InvalidRecord {
                    at: out.len() as u64,
                    detail: "record longer than i32::MAX bytes".into(),
                });
                return;
            }
            encode_record(&mut out, r.offset_delta, delta, r.key, r.value, &hs);
        }
        self.records = out;
    }

    /// Appends a record with offsetDelta = its index. A record that Kafka's format cannot hold
    /// (a field over `i32::MAX` bytes, more than `i32::MAX` records) makes [`build`](Self::build)
    /// fail; it never panics.
    pub fn push(
        &mut self,
        timestamp: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[(&[u8], Option<&[u8]>)],
    ) -> &mut Self {
        if self.error.is_some() {
            return self;
        }
        let Ok(offset_delta) = i32::try_from(self.count) else {
            self.error = Some(FormatError::InvalidRecord {
                at: self.records.len() as u64,
                detail: "more than i32::MAX records in one batch".into(),
            });
            return self;
        };
        let base = *self.base_timestamp.get_or_insert(self.explicit_base_timestamp.unwrap_or(timestamp));
        let delta = timestamp.wrapping_sub(base);
        if encoded_record_size(offset_delta, delta, key, value, headers).is_none() {
            self.error = Some(FormatError::InvalidRecord {
                at: self.records.len() as u64,
                detail: "record field longer than i32::MAX bytes".into(),
            });
            return self;
        }
        encode_record(&mut self.records, offset_delta, delta, key, value, headers);
        if timestamp > self.max_timestamp {
            self.max_timestamp = timestamp;
        }
        self.count += 1;
        self
    }

    /// Records pushed so far.
    pub fn len(&self) -> usize {
        self.count as usize
    }

    /// True when no record was pushed.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The batch size without compression: header plus encoded records. For
    /// [`Compression::None`] this is exactly the size [`build`](Self::build) produces.
    pub fn estimated_size(&self) -> usize {
        BATCH_HEADER_SIZE + self.records.len()
    }

    /// The encoded, uncompressed records section pushed so far.
    pub fn records_bytes(&self) -> &[u8] {
        &self.records
    }

    /// Drops the pushed records (and any push error), keeping the configuration and the buffer.
    pub fn clear(&mut self) {
        self.records.clear();
        self.count = 0;
        self.base_timestamp = None;
        self.max_timestamp = NO_TIMESTAMP;
        self.error = None;
    }

    /// Builds the batch into a new Vec.
    pub fn build(&self) -> Result<Vec<u8>, FormatError> {
        let mut out = Vec::with_capacity(self.estimated_size());
        self.build_into(&mut out)?;
        Ok(out)
    }

    /// Appends the batch to `out` (so batches can be laid back to back). On error `out` is left
    /// as it was.
    pub fn build_into(&self, out: &mut Vec<u8>) -> Result<(), FormatError> {
        if let Some(e) = &self.error {
            return Err(e.clone());
        }
        let start = out.len();
        let r = self.write_batch(out, start);
        if r.is_err() {
            out.truncate(start);
        }
        r
    }

    fn write_batch(&self, out: &mut Vec<u8>, start: usize) -> Result<(), FormatError> {
        out.resize(start + BATCH_HEADER_SIZE, 0);
        let empty = self.count == 0;
        let codec = if empty {
            Compression::None
        } else {
            compress(self.compression, &self.records, out)?;
            self.compression
        };
        let size = out.len() - start;
        let batch_length = i32::try_from(size - LOG_OVERHEAD).map_err(|_| FormatError::BatchTooLarge {
            size: size as i64,
            limit: i32::MAX as i64 + LOG_OVERHEAD as i64,
        })?;
        let (base_timestamp, max_timestamp) = if empty {
            (NO_TIMESTAMP, NO_TIMESTAMP)
        } else {
            let max = match self.timestamp_type {
                TimestampType::LogAppendTime => self.log_append_time.unwrap_or(self.max_timestamp),
                TimestampType::CreateTime => self.max_timestamp,
            };
            (self.base_timestamp.unwrap_or(NO_TIMESTAMP), max)
        };
        let header = BatchHeader {
            base_offset: self.base_offset,
            batch_length,
            partition_leader_epoch: self.partition_leader_epoch,
            magic: MAGIC_V2,
            crc: 0,
            attributes: Attributes::new(codec, self.timestamp_type, self.transactional, self.control, false),
            last_offset_delta: if empty { 0 } else { self.count as i32 - 1 },
            base_timestamp,
            max_timestamp,
            producer_id: self.producer_id,
            producer_epoch: self.producer_epoch,
            base_sequence: self.base_sequence,
            records_count: self.count as i32,
        };
        let batch = &mut out[start..];
        header.write(batch);
        let crc = compute_crc(batch);
        batch[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::batch::{split_batches, validate_batch, RECORDS_OFFSET};
    use crate::format::record::{batch_records, records_section, Record};

    type Rec = (i64, Option<Vec<u8>>, Option<Vec<u8>>, Vec<(Vec<u8>, Option<Vec<u8>>)>);

    fn xorshift(seed: u64) -> impl FnMut() -> u64 {
        let mut x = seed | 1;
        move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        }
    }

    fn sample_records(n: usize, seed: u64) -> Vec<Rec> {
        let mut rng = xorshift(seed);
        (0..n)
            .map(|i| {
                let ts = 1_700_000_000_000 + (rng() % 10_000) as i64 - 5_000;
                let key = if i % 4 == 0 { None } else { Some(format!("key-{i}").into_bytes()) };
                let vlen = (rng() % 300) as usize;
                let value =
                    if i % 9 == 5 { None } else { Some((0..vlen).map(|j| b'a' + ((i + j) % 26) as u8).collect()) };
                let headers = (0..(i % 3))
                    .map(|h| (format!("h{h}").into_bytes(), if h == 1 { None } else { Some(vec![h as u8; h + 1]) }))
                    .collect();
                (ts, key, value, headers)
            })
            .collect()
    }

    fn fill(b: &mut BatchBuilder, recs: &[Rec]) {
        for (ts, k, v, h) in recs {
            let hs: Vec<(&[u8], Option<&[u8]>)> = h.iter().map(|(k, v)| (k.as_slice(), v.as_deref())).collect();
            b.push(*ts, k.as_deref(), v.as_deref(), &hs);
        }
    }

    fn check_records(batch: &[u8], recs: &[Rec]) {
        let h = validate_batch(batch, true).unwrap();
        let mut scratch = Vec::new();
        let got: Vec<Record> = batch_records(batch, &mut scratch).unwrap().collect::<Result<_, _>>().unwrap();
        assert_eq!(got.len(), recs.len());
        for (i, (r, (ts, k, v, hs))) in got.iter().zip(recs).enumerate() {
            assert_eq!(r.offset(h.base_offset), h.base_offset + i as i64);
            assert_eq!(r.timestamp(h.base_timestamp, h.max_timestamp, h.timestamp_type()), *ts);
            assert_eq!(r.key, k.as_deref());
            assert_eq!(r.value, v.as_deref());
            let got_h: Vec<(&[u8], Option<&[u8]>)> = r.headers.iter().map(|x| (x.key, x.value)).collect();
            let want_h: Vec<(&[u8], Option<&[u8]>)> = hs.iter().map(|(k, v)| (k.as_slice(), v.as_deref())).collect();
            assert_eq!(got_h, want_h);
        }
    }

    #[test]
    fn known_answer_one_record() {
        let mut b = BatchBuilder::new();
        b.push(1000, None, Some(b"hello"), &[]);
        assert_eq!(b.estimated_size(), 73);
        let batch = b.build().unwrap();
        // length 11 -> zig-zag 22 = 0x16; attributes 0; timestampDelta 0; offsetDelta 0;
        // keyLen -1 -> 0x01; valueLen 5 -> 0x0a; "hello"; headerCount 0.
        let records = [0x16, 0x00, 0x00, 0x00, 0x01, 0x0a, b'h', b'e', b'l', b'l', b'o', 0x00];
        assert_eq!(&batch[RECORDS_OFFSET..], &records);
        assert_eq!(batch.len(), 61 + 12);
        let mut header = Vec::new();
        header.extend_from_slice(&0i64.to_be_bytes()); // baseOffset
        header.extend_from_slice(&61i32.to_be_bytes()); // batchLength = 73 - 12
        header.extend_from_slice(&(-1i32).to_be_bytes()); // partitionLeaderEpoch
        header.push(2); // magic
        header.extend_from_slice(&[0; 4]); // crc, checked below
        header.extend_from_slice(&0i16.to_be_bytes()); // attributes
        header.extend_from_slice(&0i32.to_be_bytes()); // lastOffsetDelta
        header.extend_from_slice(&1000i64.to_be_bytes()); // baseTimestamp
        header.extend_from_slice(&1000i64.to_be_bytes()); // maxTimestamp
        header.extend_from_slice(&(-1i64).to_be_bytes()); // producerId
        header.extend_from_slice(&(-1i16).to_be_bytes()); // producerEpoch
        header.extend_from_slice(&(-1i32).to_be_bytes()); // baseSequence
        header.extend_from_slice(&1i32.to_be_bytes()); // recordsCount
        assert_eq!(&batch[..17], &header[..17]);
        assert_eq!(&batch[21..61], &header[21..61]);
        // CRC-32C of bytes [21, 73), computed by an independent bitwise implementation.
        assert_eq!(&batch[17..21], &0x5d03_5a13u32.to_be_bytes());
        let h = validate_batch(&batch, true).unwrap();
        assert_eq!(h.size_in_bytes(), 73);
        check_records(&batch, &[(1000, None, Some(b"hello".to_vec()), vec![])]);
    }

    #[test]
    fn every_codec_round_trips() {
        for (n, seed) in [(1usize, 1u64), (3, 2), (50, 3), (700, 4)] {
            let recs = sample_records(n, seed);
            for c in Compression::ALL {
                let mut b = BatchBuilder::new().compression(c).base_offset(1234).partition_leader_epoch(7);
                fill(&mut b, &recs);
                let batch = b.build().unwrap();
                let h = validate_batch(&batch, true).unwrap();
                assert_eq!(h.compression(), Ok(c));
                assert_eq!(h.base_offset, 1234);
                assert_eq!(h.partition_leader_epoch, 7);
                assert_eq!(h.records_count, n as i32);
                assert_eq!(h.last_offset_delta, n as i32 - 1);
                assert_eq!(h.base_timestamp, recs[0].0);
                assert_eq!(h.max_timestamp, recs.iter().map(|r| r.0).max().unwrap());
                assert_eq!(h.timestamp_type(), TimestampType::CreateTime);
                if c == Compression::None {
                    assert_eq!(batch.len(), b.estimated_size());
                }
                // The uncompressed records section is what the builder encoded.
                let mut scratch = Vec::new();
                assert_eq!(records_section(&batch, &mut scratch, usize::MAX).unwrap(), b.records_bytes());
                check_records(&batch, &recs);
            }
        }
    }

    #[test]
    fn log_append_time() {
        let recs = sample_records(10, 9);
        for c in Compression::ALL {
            let mut b = BatchBuilder::new().compression(c).log_append_time(42_000);
            fill(&mut b, &recs);
            let batch = b.build().unwrap();
            let h = validate_batch(&batch, true).unwrap();
            assert_eq!(h.timestamp_type(), TimestampType::LogAppendTime);
            assert_eq!(h.attributes.0 & Attributes::TIMESTAMP_TYPE_MASK, Attributes::TIMESTAMP_TYPE_MASK);
            assert_eq!(h.max_timestamp, 42_000);
            assert_eq!(h.base_timestamp, recs[0].0);
            let mut scratch = Vec::new();
            for r in batch_records(&batch, &mut scratch).unwrap() {
                let r = r.unwrap();
                assert_eq!(r.timestamp(h.base_timestamp, h.max_timestamp, h.timestamp_type()), 42_000);
            }
        }
        // Without an explicit time: the largest record timestamp.
        let mut b = BatchBuilder::new().timestamp_type(TimestampType::LogAppendTime);
        b.push(5, None, None, &[]).push(9, None, None, &[]).push(7, None, None, &[]);
        let h = validate_batch(&b.build().unwrap(), true).unwrap();
        assert_eq!((h.base_timestamp, h.max_timestamp), (5, 9));
    }

    #[test]
    fn header_fields_and_flags() {
        let mut b = BatchBuilder::new()
            .producer(77, 3, 1000)
            .transactional(true)
            .control(true)
            .base_offset(i64::from(i32::MAX) + 5);
        b.push(10, Some(&[0, 0, 0, 1]), Some(&[0, 0, 0, 0, 0, 9]), &[]);
        let h = validate_batch(&b.build().unwrap(), true).unwrap();
        assert_eq!((h.producer_id, h.producer_epoch, h.base_sequence), (77, 3, 1000));
        assert!(h.is_transactional() && h.is_control());
        assert_eq!(h.base_offset, i64::from(i32::MAX) + 5);
    }

    #[test]
    fn base_timestamp_and_max_timestamp_rules() {
        // Explicit base timestamp, set before or after pushing, gives the same batch.
        let mut a = BatchBuilder::new().base_timestamp(500);
        a.push(1000, None, Some(b"x"), &[]).push(400, Some(b"k"), None, &[(b"h", Some(b"v"))]);
        let mut b = BatchBuilder::new();
        b.push(1000, None, Some(b"x"), &[]).push(400, Some(b"k"), None, &[(b"h", Some(b"v"))]);
        let b = b.base_timestamp(500);
        let (ba, bb) = (a.build().unwrap(), b.build().unwrap());
        assert_eq!(ba, bb);
        let h = validate_batch(&ba, true).unwrap();
        assert_eq!((h.base_timestamp, h.max_timestamp), (500, 1000));
        check_records(
            &ba,
            &[
                (1000, None, Some(b"x".to_vec()), vec![]),
                (400, Some(b"k".to_vec()), None, vec![(b"h".to_vec(), Some(b"v".to_vec()))]),
            ],
        );
        // Kafka's maxTimestamp starts at -1: all-negative timestamps leave it at -1.
        let mut c = BatchBuilder::new();
        c.push(-50, None, None, &[]);
        let h = validate_batch(&c.build().unwrap(), true).unwrap();
        assert_eq!((h.base_timestamp, h.max_timestamp), (-50, -1));
    }

    #[test]
    fn empty_batch() {
        let b = BatchBuilder::new().compression(Compression::Zstd).base_offset(10);
        assert!(b.is_empty());
        let batch = b.build().unwrap();
        assert_eq!(batch.len(), BATCH_HEADER_SIZE);
        let h = validate_batch(&batch, false).unwrap();
        assert!(validate_batch(&batch, true).is_err());
        assert_eq!((h.records_count, h.last_offset_delta), (0, 0));
        assert_eq!((h.base_timestamp, h.max_timestamp), (-1, -1));
        assert_eq!(h.compression(), Ok(Compression::None));
        let mut scratch = Vec::new();
        assert_eq!(batch_records(&batch, &mut scratch).unwrap().count(), 0);
    }

    #[test]
    fn reuse_and_back_to_back() {
        let mut b = BatchBuilder::new().compression(Compression::Lz4);
        let mut out = Vec::new();
        for i in 0..5i64 {
            b.clear();
            for j in 0..=i {
                b.push(100 * i + j, None, Some(format!("v{i}-{j}").as_bytes()), &[]);
            }
            b.build_into(&mut out).unwrap();
        }
        let batches = split_batches(&out, true).unwrap();
        assert_eq!(batches.len(), 5);
        for (i, (pos, h)) in batches.iter().enumerate() {
            assert_eq!(h.records_count, i as i32 + 1);
            assert_eq!(h.base_timestamp, 100 * i as i64);
            let batch = &out[*pos..*pos + h.size_in_bytes() as usize];
            let mut scratch = Vec::new();
            let vals: Vec<Vec<u8>> =
                batch_records(batch, &mut scratch).unwrap().map(|r| r.unwrap().value.unwrap().to_vec()).collect();
            assert_eq!(vals.len(), i + 1);
            assert_eq!(vals[i], format!("v{i}-{i}").into_bytes());
        }
    }

    #[test]
    fn truncated_and_garbage_records_are_errors_not_panics() {
        let recs = sample_records(30, 11);
        let mut rng = xorshift(0xdead_beef);
        for c in Compression::ALL {
            let mut b = BatchBuilder::new().compression(c);
            fill(&mut b, &recs);
            let batch = b.build().unwrap();
            let h = validate_batch(&batch, true).unwrap();
            let section = &batch[RECORDS_OFFSET..];
            let raw = b.records_bytes();

            // Every truncation of the uncompressed records section is an error.
            for cut in 0..raw.len() {
                let errs = RecordIter::new(&raw[..cut], h.records_count).filter(|r| r.is_err()).count();
                assert_eq!(errs, 1, "{c} cut {cut}");
            }
            // Every truncation of the stored (maybe compressed) section: never a panic, and never
            // the full record list (a decompression or a record error).
            for cut in 0..section.len() {
                let mut t = batch[..RECORDS_OFFSET + cut].to_vec();
                let mut scratch = Vec::new();
                if let Ok(sec) = records_section(&t, &mut scratch, 1 << 20) {
                    let res: Vec<_> = RecordIter::new(sec, h.records_count).collect();
                    let all_ok = res.len() == recs.len() && res.iter().all(|r| r.is_ok());
                    assert!(!all_ok, "{c} cut {cut}");
                }
                // Fix up the length and CRC so the batch validates, then read it.
                let len = (t.len() - LOG_OVERHEAD) as i32;
                t[8..12].copy_from_slice(&len.to_be_bytes());
                let crc = compute_crc(&t);
                t[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
                assert!(validate_batch(&t, true).is_ok());
                let mut scratch = Vec::new();
                if let Ok(it) = batch_records(&t, &mut scratch) {
                    let _ = it.count();
                }
            }
            // Random bit flips anywhere in the batch, CRC and all.
            for _ in 0..2000 {
                let mut t = batch.clone();
                for _ in 0..1 + rng() % 4 {
                    let i = rng() as usize % t.len();
                    t[i] ^= 1 << (rng() % 8);
                }
                let _ = validate_batch(&t, false);
                let mut scratch = Vec::new();
                if let Ok(it) = batch_records(&t, &mut scratch) {
                    assert!(it.take(1000).count() <= recs.len() + 1);
                }
            }
            // Random bytes as the records section.
            for n in 0..200 {
                let junk: Vec<u8> = (0..n).map(|_| rng() as u8).collect();
                let _ = RecordIter::new(&junk, (rng() % 40) as i32).count();
            }
        }
    }
}
