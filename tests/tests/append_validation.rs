//! What a leader append refuses (Kafka's `analyzeAndValidateRecords` + `LogValidator`): every
//! refusal is a typed error, and it leaves the log exactly as it was: log end offset, segments,
//! in-memory indexes, and every file on disk (the active segment's index entries are flushed
//! first, so the index files on disk hold real entries to compare).

mod common;

use common::*;
use seglog::config::{LogConfig, TimestampType};
use seglog::format::batch::{
    ATTRIBUTES_OFFSET, LAST_OFFSET_DELTA_OFFSET, LENGTH_OFFSET, MAGIC_OFFSET, RECORDS_COUNT_OFFSET, RECORDS_OFFSET,
};
use seglog::format::builder::BatchBuilder;
use seglog::format::{Compression, FormatError};
use seglog::Error;

/// A log with a sealed segment and an active one, both holding index entries, all flushed.
fn prefilled(config: LogConfig) -> TestLog {
    let mut t = new_log(LogConfig { index_interval_bytes: 0, ..config });
    for i in 0..3 {
        t.log.append_as_leader(&mut batch_n(2, T0 + i, 30), 1).unwrap();
    }
    t.log.roll(None).unwrap();
    for i in 3..6 {
        t.log.append_as_leader(&mut batch_n(3, T0 + i, 30), 1).unwrap();
    }
    t.log.flush().unwrap();
    assert_eq!(segment_bases(&t.log), vec![0, 6]);
    assert_eq!(t.log.segment_infos()[1].offset_index_entries, 2);
    t
}

/// Appends `buf` as a leader, expects a refusal matching `expected`, and checks that nothing
/// changed and that the next valid append still lands at the same log end offset.
fn assert_refused(t: &mut TestLog, buf: &[u8], expected: impl Fn(&Error) -> bool) -> Error {
    let before = state(&t.log);
    let mut b = buf.to_vec();
    let err = t.log.append_as_leader(&mut b, 1).expect_err("the append must be refused");
    assert!(expected(&err), "unexpected error: {err:?}");
    assert_eq!(state(&t.log), before, "a refused append changed the log ({err})");
    err
}

fn assert_accepted(t: &mut TestLog, buf: &[u8]) {
    let leo = t.log.log_end_offset();
    let mut b = buf.to_vec();
    let info = t.log.append_as_leader(&mut b, 1).expect("the append must be accepted");
    assert_eq!(info.first_offset, leo);
}

fn invalid_batch(at: usize, source: impl Fn(&FormatError) -> bool) -> impl Fn(&Error) -> bool {
    move |e| matches!(e, Error::InvalidBatch { at: a, source: s } if *a == at && source(s))
}

fn invalid_record(at: usize) -> impl Fn(&Error) -> bool {
    move |e| matches!(e, Error::InvalidRecord { at: a, .. } if *a == at)
}

#[test]
fn a_flipped_bit_is_a_crc_mismatch() {
    let mut t = prefilled(small_config());
    let good = batch_n(3, T0, 20);
    // In a record value, in maxTimestamp, in the attributes: all inside the CRC.
    for at in [good.len() - 5, 40, ATTRIBUTES_OFFSET + 1, RECORDS_OFFSET] {
        let mut b = good.clone();
        b[at] ^= 0x10;
        assert_refused(&mut t, &b, invalid_batch(0, |s| matches!(s, FormatError::CrcMismatch { .. })));
    }
    assert_accepted(&mut t, &good);
}

#[test]
fn magic_other_than_2_at_byte_16_is_refused() {
    let mut t = prefilled(small_config());
    for magic in [0u8, 1, 3, 0xff] {
        let mut b = batch_n(2, T0, 20);
        b[MAGIC_OFFSET] = magic;
        assert_refused(
            &mut t,
            &b,
            invalid_batch(0, move |s| matches!(s, FormatError::UnsupportedMagic { magic: m } if *m == magic as i8)),
        );
    }
}

#[test]
fn negative_or_too_small_batch_length_is_refused() {
    let mut t = prefilled(small_config());
    for len in [i32::MIN, -12, -1, 0, 13, 14, 48] {
        let mut b = batch_n(2, T0, 20);
        put_i32(&mut b, LENGTH_OFFSET, len);
        assert_refused(&mut t, &b, invalid_batch(0, |s| matches!(s, FormatError::BatchTooSmall { .. })));
    }
}

#[test]
fn batch_length_past_the_buffer_is_refused_as_truncated() {
    let mut t = prefilled(small_config());
    let good = batch_n(2, T0, 20);
    for extra in [1, 2, 100] {
        let mut b = good.clone();
        put_i32(&mut b, LENGTH_OFFSET, (good.len() - 12 + extra) as i32);
        assert_refused(&mut t, &b, invalid_batch(0, |s| matches!(s, FormatError::Truncated { .. })));
    }
}

#[test]
fn huge_batch_length_is_record_too_large() {
    let mut t = prefilled(small_config());
    let limit = t.log.config().max_message_bytes as u64;
    for len in [i32::MAX, limit as i32 - 12 + 1] {
        let mut b = batch_n(2, T0, 20);
        put_i32(&mut b, LENGTH_OFFSET, len);
        assert_refused(&mut t, &b, |e| {
            matches!(e, Error::RecordTooLarge { at: 0, size, limit: l, limit_name: "max.message.bytes" }
                if *size == len as u64 + 12 && *l == limit)
        });
    }
}

#[test]
fn truncated_buffer_is_refused() {
    let mut t = prefilled(small_config());
    let good = batch_n(3, T0, 20);
    for keep in [good.len() - 1, good.len() - 10, 61, 60, 17, 16, 1] {
        assert_refused(&mut t, &good[..keep], invalid_batch(0, |s| matches!(s, FormatError::Truncated { .. })));
    }
    // A whole first batch, then a cut one: refused at the second batch.
    let two = [good.clone(), good.clone()].concat();
    assert_refused(
        &mut t,
        &two[..two.len() - 3],
        invalid_batch(good.len(), |s| matches!(s, FormatError::Truncated { .. })),
    );
}

#[test]
fn trailing_garbage_after_the_last_batch_is_refused() {
    let mut t = prefilled(small_config());
    let good = batch_n(3, T0, 20);
    let garbage: Vec<Vec<u8>> = vec![
        vec![0xab],
        vec![0xab; 16],
        vec![0xab; 17],
        vec![0; 30],
        vec![0; 200],
        (0..=255u8).collect(),
        good[..40].to_vec(),
    ];
    for g in garbage {
        let b = [good.clone(), g.clone()].concat();
        assert_refused(&mut t, &b, |e| matches!(e, Error::InvalidBatch { at, .. } if *at == good.len()));
    }
}

#[test]
fn record_count_other_than_last_offset_delta_plus_one_is_refused() {
    let mut t = prefilled(small_config());
    for (count, delta) in [(2, 2), (4, 2), (3, 3), (0, 2)] {
        let mut b = batch_n(3, T0, 20);
        put_i32(&mut b, RECORDS_COUNT_OFFSET, count);
        put_i32(&mut b, LAST_OFFSET_DELTA_OFFSET, delta);
        fix_crc(&mut b);
        assert_refused(&mut t, &b, |e| {
            matches!(e, Error::InvalidBatch { at: 0, source: FormatError::RecordCountMismatch { .. } })
                || matches!(e, Error::InvalidRecord { at: 0, .. })
        });
    }
}

#[test]
fn negative_last_offset_delta_is_refused() {
    let mut t = prefilled(small_config());
    for delta in [-1, i32::MIN] {
        let mut b = batch_n(1, T0, 20);
        put_i32(&mut b, LAST_OFFSET_DELTA_OFFSET, delta);
        fix_crc(&mut b);
        assert_refused(&mut t, &b, invalid_batch(0, |s| matches!(s, FormatError::InvalidOffsetRange { .. })));
    }
}

#[test]
fn batch_over_max_message_bytes_is_refused_and_exactly_max_is_accepted() {
    let b = batch_n(3, T0, 40);
    let size = b.len() as u32;
    let mut t = prefilled(LogConfig { max_message_bytes: size - 1, ..small_config() });
    assert_refused(&mut t, &b, |e| {
        matches!(e, Error::RecordTooLarge { at: 0, size: s, limit, limit_name: "max.message.bytes" }
            if *s == size as u64 && *limit == size as u64 - 1)
    });
    // The limit is per batch: two small batches over the limit together are fine.
    let small = batch_n(2, T0, 40);
    assert!(small.len() < size as usize - 1 && 2 * small.len() > size as usize - 1);
    assert_accepted(&mut t, &[small.clone(), small.clone()].concat());

    let mut t = prefilled(LogConfig { max_message_bytes: size, ..small_config() });
    assert_accepted(&mut t, &b);
    // The second batch of a request over the limit: refused at its position.
    let big = batch_n(4, T0, 40);
    assert_refused(
        &mut t,
        &[small.clone(), big].concat(),
        |e| matches!(e, Error::RecordTooLarge { at, limit_name: "max.message.bytes", .. } if *at == small.len()),
    );
}

#[test]
fn append_larger_than_segment_bytes_is_refused_and_exactly_segment_bytes_is_accepted() {
    let one = batch_n(2, T0, 30);
    let segment_bytes = 2 * one.len() as u32;
    let mut t = new_log(LogConfig { segment_bytes, ..small_config() });
    t.log.append_as_leader(&mut batch_n(1, T0, 10), 0).unwrap();
    t.log.flush().unwrap();
    let three = [one.clone(), one.clone(), one.clone()].concat();
    assert_refused(&mut t, &three, |e| {
        matches!(e, Error::RecordTooLarge { at: 0, size, limit, limit_name: "segment.bytes" }
            if *size == three.len() as u64 && *limit == segment_bytes as u64)
    });
    assert_accepted(&mut t, &[one.clone(), one.clone()].concat());
    // It went to a segment of its own, which it fills exactly.
    let last = t.log.segment_infos().pop().unwrap();
    assert_eq!(last.size, segment_bytes);
}

#[test]
fn non_zero_base_offset_from_a_producer_is_refused() {
    let mut t = prefilled(small_config());
    for base in [1, 5, -1, i64::MAX - 10] {
        let b = build(BatchBuilder::new().base_offset(base), &[T0, T0 + 1], 10);
        assert_refused(&mut t, &b, invalid_record(0));
    }
}

#[test]
fn control_batch_from_a_producer_is_refused() {
    let mut t = prefilled(small_config());
    let mut builder = BatchBuilder::new().producer(7, 0, 0).transactional(true).control(true);
    // An end-transaction marker: key = version 0 + type COMMIT (1), value = version 0 + epoch.
    builder.push(T0, Some(&[0, 0, 0, 1]), Some(&[0, 0, 0, 0, 0, 5]), &[]);
    let b = builder.build().unwrap();
    assert_refused(&mut t, &b, invalid_record(0));
}

#[test]
fn producer_id_with_sequence_minus_one_is_refused() {
    let mut t = prefilled(small_config());
    let b = build(BatchBuilder::new().producer(77, 0, -1), &[T0], 10);
    assert_refused(&mut t, &b, invalid_record(0));
    // With a sequence, or without a producer id, the same batch is fine.
    assert_accepted(&mut t, &build(BatchBuilder::new().producer(77, 0, 0), &[T0], 10));
    assert_accepted(&mut t, &build(BatchBuilder::new().producer(-1, -1, -1), &[T0], 10));
}

#[test]
fn malformed_records_inside_a_batch_with_a_valid_crc_are_refused() {
    let mut t = prefilled(small_config());
    let good = batch_n(3, T0, 20);
    type Corrupt = fn(&mut Vec<u8>);
    let corruptions: Vec<(&str, Corrupt)> = vec![
        // First record's length: 63, far past its real end.
        ("record length", |b| b[RECORDS_OFFSET] = 126),
        // A varint that never ends within 5 bytes.
        ("endless varint", |b| b[RECORDS_OFFSET..RECORDS_OFFSET + 5].fill(0xff)),
        // First record's key length (zig-zag 40 = 20 bytes): overruns the record.
        ("key length", |b| b[RECORDS_OFFSET + 4] = 40),
        // Negative record length (zig-zag 1 = -1).
        ("negative length", |b| b[RECORDS_OFFSET] = 1),
        // Bytes after the declared records.
        ("trailing bytes", |b| {
            b.extend_from_slice(&[0, 0, 0]);
            let len = (b.len() - 12) as i32;
            put_i32(b, LENGTH_OFFSET, len);
        }),
    ];
    for (what, corrupt) in corruptions {
        let mut b = good.clone();
        corrupt(&mut b);
        fix_crc(&mut b);
        let err = assert_refused(
            &mut t,
            &b,
            |e| matches!(e, Error::InvalidBatch { at: 0, source } if !matches!(source, FormatError::CrcMismatch { .. })),
        );
        eprintln!("{what}: {err}");
    }
    // A corrupt compressed stream with a valid batch CRC.
    let mut z = build(BatchBuilder::new().compression(Compression::Gzip), &[T0, T0 + 1, T0 + 2], 50);
    let mid = RECORDS_OFFSET + (z.len() - RECORDS_OFFSET) / 2;
    z[mid] ^= 0xff;
    fix_crc(&mut z);
    assert_refused(&mut t, &z, |e| matches!(e, Error::InvalidBatch { at: 0, .. }));
}

/// Byte position of record `i`'s offsetDelta in an uncompressed batch whose record fields
/// before it are one-byte varints.
fn offset_delta_position(b: &[u8], i: usize) -> usize {
    let mut pos = RECORDS_OFFSET;
    for _ in 0..i {
        assert!(b[pos] < 0x80);
        pos += 1 + (b[pos] >> 1) as usize;
    }
    assert!(b[pos + 2] < 0x80, "one-byte timestamp delta");
    pos + 3
}

#[test]
fn non_sequential_offset_deltas_are_refused() {
    let mut t = prefilled(small_config());
    let good = batch_n(3, T0, 20);
    for (record, delta) in [(1usize, 2u8), (1, 0), (0, 1), (2, 3)] {
        let mut b = good.clone();
        let at = offset_delta_position(&b, record);
        assert_eq!(b[at], 2 * record as u8, "zig-zag of the original delta");
        b[at] = 2 * delta;
        fix_crc(&mut b);
        assert_refused(&mut t, &b, |e| {
            matches!(e, Error::InvalidRecord { at: 0, .. }) || matches!(e, Error::InvalidBatch { at: 0, .. })
        });
    }
}

#[test]
fn timestamps_beyond_after_max_ms_are_refused_and_within_it_accepted() {
    let config = LogConfig { message_timestamp_after_max_ms: 1_000, ..small_config() };
    let mut t = prefilled(config);
    t.clock.set(T0);
    let too_new = |ts: i64| move |e: &Error| matches!(e, Error::InvalidTimestamp { at: 0, timestamp, now_ms: T0, .. } if *timestamp == ts);
    assert_refused(&mut t, &batch(&[T0 + 1_001], 5), too_new(T0 + 1_001));
    // One bad record in the middle is enough.
    assert_refused(&mut t, &batch(&[T0, T0 + 5_000, T0], 5), too_new(T0 + 5_000));
    assert_accepted(&mut t, &batch(&[T0 + 1_000], 5));
    // The limit moves with the clock.
    t.clock.set(T0 + 4_000);
    assert_accepted(&mut t, &batch(&[T0 + 5_000], 5));
}

#[test]
fn timestamps_beyond_before_max_ms_are_refused_and_within_it_accepted() {
    let config = LogConfig { message_timestamp_before_max_ms: 5_000, ..small_config() };
    let mut t = prefilled(config);
    t.clock.set(T0 + 10_000);
    assert_refused(
        &mut t,
        &batch(&[T0 + 4_999], 5),
        |e| matches!(e, Error::InvalidTimestamp { at: 0, timestamp, now_ms, .. } if *timestamp == T0 + 4_999 && *now_ms == T0 + 10_000),
    );
    assert_refused(&mut t, &batch(&[T0 + 9_000, 0], 5), |e| matches!(e, Error::InvalidTimestamp { timestamp: 0, .. }));
    assert_accepted(&mut t, &batch(&[T0 + 5_000], 5));
    // Records without a timestamp (-1) are not checked.
    assert_accepted(&mut t, &batch(&[-1, -1], 5));
}

#[test]
fn an_empty_buffer_is_refused() {
    let mut t = prefilled(small_config());
    assert_refused(&mut t, &[], |e| matches!(e, Error::InvalidBatch { at: 0, .. }));
}

#[test]
fn a_batch_without_records_is_refused() {
    let mut t = prefilled(small_config());
    let empty = BatchBuilder::new().build().unwrap();
    assert_refused(&mut t, &empty, |e| {
        matches!(e, Error::InvalidBatch { at: 0, .. }) || matches!(e, Error::InvalidRecord { at: 0, .. })
    });
}

#[test]
fn unknown_compression_codec_is_refused() {
    let mut t = prefilled(small_config());
    for codec in [5i16, 6, 7] {
        let mut b = batch_n(2, T0, 10);
        put_i16(&mut b, ATTRIBUTES_OFFSET, codec);
        fix_crc(&mut b);
        assert_refused(
            &mut t,
            &b,
            invalid_batch(0, move |s| matches!(s, FormatError::UnknownCompression { codec: c } if *c as i16 == codec)),
        );
    }
}

#[test]
fn when_only_the_second_batch_is_bad_nothing_of_the_first_is_appended() {
    let mut t = prefilled(LogConfig { message_timestamp_after_max_ms: 1_000, ..small_config() });
    let first = batch_n(3, T0, 25);
    let at = first.len();
    let mut bad_crc = batch_n(2, T0, 25);
    bad_crc[70] ^= 1;
    let mut bad_magic = batch_n(2, T0, 25);
    bad_magic[MAGIC_OFFSET] = 1;
    let mut bad_count = batch_n(2, T0, 25);
    put_i32(&mut bad_count, RECORDS_COUNT_OFFSET, 1);
    fix_crc(&mut bad_count);
    let cut = batch_n(2, T0, 25);
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("crc", bad_crc),
        ("magic", bad_magic),
        ("count", bad_count),
        ("truncated", cut[..cut.len() - 1].to_vec()),
        ("garbage", vec![0x55; 9]),
        ("control", build(BatchBuilder::new().producer(1, 0, 0).control(true), &[T0], 6)),
        ("base offset", build(BatchBuilder::new().base_offset(3), &[T0], 6)),
        ("timestamp", batch(&[T0 + 2_000], 6)),
    ];
    for (what, second) in cases {
        let buf = [first.clone(), second].concat();
        let err = assert_refused(&mut t, &buf, |e| match e {
            Error::InvalidBatch { at: a, .. }
            | Error::InvalidRecord { at: a, .. }
            | Error::InvalidTimestamp { at: a, .. } => *a == at,
            _ => false,
        });
        eprintln!("{what}: {err}");
    }
    // The first batch alone is fine and lands where it would have.
    assert_accepted(&mut t, &first);
}

#[test]
fn a_refusal_on_a_new_empty_log_leaves_only_its_empty_segment() {
    let mut t = new_log(small_config());
    let files_before = snapshot_digest(&t.dir());
    let mut b = batch_n(2, T0, 5);
    b[MAGIC_OFFSET] = 1;
    assert_refused(&mut t, &b, |e| matches!(e, Error::InvalidBatch { .. }));
    assert_eq!(snapshot_digest(&t.dir()), files_before);
    assert_eq!((t.log.log_end_offset(), t.log.size_in_bytes()), (0, 0));
}

/// Kafka's `LogValidator.validateTimestamp`: a producer batch with the LogAppendTime bit set is
/// refused with INVALID_TIMESTAMP ("Producer should not set timestamp type to LogAppendTime")
/// when the topic's `message.timestamp.type` is LogAppendTime.
#[test]
fn producer_log_append_time_batch_is_refused_on_a_log_append_time_topic() {
    let mut t = prefilled(LogConfig { message_timestamp_type: TimestampType::LogAppendTime, ..small_config() });
    let b = build(BatchBuilder::new().log_append_time(T0), &[T0, T0 + 1], 10);
    assert_refused(&mut t, &b, |e| matches!(e, Error::InvalidTimestamp { at: 0, .. }));
}
