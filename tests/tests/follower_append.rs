//! Follower appends (Kafka's `appendAsFollower`): batches keep their offsets, leader epochs and
//! timestamps byte for byte; the first batch must not start below the log end (Kafka's
//! UnexpectedAppendOffsetException), gaps are fine (compaction), and within one append offsets
//! must increase. Compressed batches are taken as they are and read back.

mod common;

use common::*;
use seglog::config::{LogConfig, TimestampType};
use seglog::format::batch::{LAST_OFFSET_DELTA_OFFSET, MAGIC_OFFSET};
use seglog::format::builder::BatchBuilder;
use seglog::format::{Compression, FormatError};
use seglog::Error;

fn assert_follower_refused(t: &mut TestLog, buf: &[u8], expected: impl Fn(&Error) -> bool) {
    let before = state(&t.log);
    let err = t.log.append_as_follower(buf).expect_err("the append must be refused");
    assert!(expected(&err), "unexpected error: {err:?}");
    assert_eq!(state(&t.log), before, "a refused append changed the log ({err})");
}

#[test]
fn batches_keep_their_offsets_epochs_and_bytes() {
    let config = LogConfig {
        // A follower never restamps, whatever the topic's timestamp type.
        message_timestamp_type: TimestampType::LogAppendTime,
        ..small_config()
    };
    let mut t = new_log(config);
    let a = follower_batch(0, 3, &[T0, T0 + 1, T0 + 2], 20);
    let b = build(BatchBuilder::new().base_offset(3).partition_leader_epoch(4).log_append_time(T0 - 99), &[T0 + 7], 20);
    let c = follower_batch(4, 4, &[T0 - 1_000_000_000], 20);
    let info = t.log.append_as_follower(&a).unwrap();
    assert_eq!((info.first_offset, info.last_offset, info.log_append_time_ms), (0, 2, -1));
    let info = t.log.append_as_follower(&[b.clone(), c.clone()].concat()).unwrap();
    assert_eq!((info.first_offset, info.last_offset, info.batches, info.records), (3, 4, 2, 2));
    assert_eq!(info.max_timestamp, T0 - 99);
    assert_eq!(t.log.log_end_offset(), 5);
    let all = [a, b, c].concat();
    assert_eq!(read_all(&t.log), all);
    t.log.finish_writes().unwrap();
    assert_eq!(segment_bytes(&t.log, 0), all);
    let recs = decode(&all);
    let got: Vec<(i64, i64, i32)> = recs.iter().map(|r| (r.offset, r.timestamp, r.leader_epoch)).collect();
    assert_eq!(got, vec![(0, T0, 3), (1, T0 + 1, 3), (2, T0 + 2, 3), (3, T0 - 99, 4), (4, T0 - 1_000_000_000, 4)]);
}

#[test]
fn first_batch_at_the_log_end_or_after_a_gap_is_accepted() {
    let mut t = new_log(small_config());
    t.log.append_as_follower(&follower_batch(0, 0, &[T0, T0], 8)).unwrap();
    // Equal to the log end.
    t.log.append_as_follower(&follower_batch(2, 0, &[T0], 8)).unwrap();
    assert_eq!(t.log.log_end_offset(), 3);
    // A gap (offsets 3..=9 were compacted away on the leader).
    let info = t.log.append_as_follower(&follower_batch(10, 1, &[T0, T0], 8)).unwrap();
    assert_eq!((info.first_offset, info.last_offset), (10, 11));
    assert_eq!(t.log.log_end_offset(), 12);
    // A gap does not roll a segment.
    assert_eq!(segment_bases(&t.log), vec![0]);
    // Reading inside the gap returns the next batch.
    let f = t.log.read(5, u32::MAX, None, false).unwrap();
    assert_eq!(batches_in(&f.records)[0].1.base_offset, 10);
    // Gaps inside one append are fine too.
    let buf = [follower_batch(20, 1, &[T0], 8), follower_batch(30, 1, &[T0], 8)].concat();
    t.log.append_as_follower(&buf).unwrap();
    assert_eq!(t.log.log_end_offset(), 31);
}

#[test]
fn first_batch_below_the_log_end_is_refused_and_the_log_is_unchanged() {
    let mut t = new_log(small_config());
    t.log.append_as_follower(&follower_batch(0, 0, &[T0; 5], 8)).unwrap();
    t.log.flush().unwrap();
    for (base, n) in [(0, 1), (4, 1), (4, 3), (3, 10), (-1, 1)] {
        let b = follower_batch(base, 0, &vec![T0; n], 8);
        assert_follower_refused(
            &mut t,
            &b,
            |e| matches!(e, Error::NonMonotonicOffset { at: 0, first_offset, expected_at_least: 5 } if *first_offset == base),
        );
    }
    assert_eq!(t.log.log_end_offset(), 5);
}

#[test]
fn offsets_must_increase_strictly_within_one_append() {
    let mut t = new_log(small_config());
    t.log.append_as_follower(&follower_batch(0, 0, &[T0; 2], 8)).unwrap();
    let first = follower_batch(2, 0, &[T0; 3], 8); // 2..=4
    for (base, n) in [(2, 3), (4, 1), (3, 1), (0, 1)] {
        let buf = [first.clone(), follower_batch(base, 0, &vec![T0; n], 8)].concat();
        assert_follower_refused(&mut t, &buf, |e| {
            matches!(e, Error::NonMonotonicOffset { at, first_offset, expected_at_least: 5 }
                if *at == first.len() && *first_offset == base)
        });
    }
    t.log.append_as_follower(&[first.clone(), follower_batch(5, 0, &[T0], 8)].concat()).unwrap();
    assert_eq!(t.log.log_end_offset(), 6);
}

#[test]
fn compressed_batches_are_accepted_as_they_are_and_readable() {
    let mut t = new_log(small_config());
    let mut stored = Vec::new();
    let mut next = 0;
    for c in [Compression::Gzip, Compression::Snappy, Compression::Lz4, Compression::Zstd, Compression::None] {
        let ts: Vec<i64> = (0..50).map(|i| T0 + i * 3).collect();
        let b = build(BatchBuilder::new().compression(c).base_offset(next).partition_leader_epoch(2), &ts, 100);
        assert_eq!(header(&b).compression(), Ok(c));
        let info = t.log.append_as_follower(&b).unwrap();
        assert_eq!((info.first_offset, info.last_offset), (next, next + 49), "{c}");
        stored.extend_from_slice(&b);
        // Read back this batch alone, from a mid-batch offset.
        let f = t.log.read(next + 17, u32::MAX, None, false).unwrap();
        assert_eq!(f.records, b, "{c}");
        let recs = decode(&f.records);
        assert_eq!(recs.len(), 50, "{c}");
        for (i, r) in recs.iter().enumerate() {
            assert_eq!(r.offset, next + i as i64);
            assert_eq!(r.timestamp, ts[i]);
            assert_eq!(r.key.as_deref(), Some(&key_of(i)[..]));
            assert_eq!(r.value.as_deref(), Some(&value_of(i, 100)[..]), "{c} record {i}");
        }
        next += 50;
    }
    assert_eq!(read_all(&t.log), stored);
}

#[test]
fn compacted_and_empty_batches_are_accepted() {
    let mut t = new_log(small_config());
    // Records 0..=2 kept, 3..=5 removed by the cleaner: lastOffsetDelta 5, recordsCount 3.
    let mut compacted = follower_batch(0, 0, &[T0, T0 + 1, T0 + 2], 8);
    put_i32(&mut compacted, LAST_OFFSET_DELTA_OFFSET, 5);
    fix_crc(&mut compacted);
    t.log.append_as_follower(&compacted).unwrap();
    assert_eq!(t.log.log_end_offset(), 6);
    // The cleaner's empty batch (no records, one offset).
    let empty = BatchBuilder::new().base_offset(6).build().unwrap();
    t.log.append_as_follower(&empty).unwrap();
    assert_eq!(t.log.log_end_offset(), 7);
    t.log.append_as_follower(&follower_batch(7, 0, &[T0], 8)).unwrap();
    let offsets: Vec<i64> = decode(&read_all(&t.log)).iter().map(|r| r.offset).collect();
    assert_eq!(offsets, vec![0, 1, 2, 7]);
}

#[test]
fn control_batches_and_unchecked_timestamps_are_accepted() {
    // Transaction markers come from the leader; timestamps were checked there.
    let mut t =
        new_log(LogConfig { message_timestamp_after_max_ms: 0, message_timestamp_before_max_ms: 0, ..small_config() });
    t.log.append_as_follower(&follower_batch(0, 0, &[T0 + 86_400_000, 5], 8)).unwrap();
    let mut marker = BatchBuilder::new().base_offset(2).producer(9, 0, 0).transactional(true).control(true);
    marker.push(T0, Some(&[0, 0, 0, 1]), Some(&[0, 0, 0, 0, 0, 0]), &[]);
    t.log.append_as_follower(&marker.build().unwrap()).unwrap();
    assert_eq!(t.log.log_end_offset(), 3);
}

#[test]
fn corrupt_follower_batches_are_refused_and_the_log_is_unchanged() {
    let mut t = new_log(small_config());
    t.log.append_as_follower(&follower_batch(0, 0, &[T0; 2], 8)).unwrap();
    let good = follower_batch(2, 0, &[T0; 2], 8);
    let mut bad_crc = good.clone();
    bad_crc[good.len() - 2] ^= 4;
    assert_follower_refused(&mut t, &bad_crc, |e| {
        matches!(e, Error::InvalidBatch { at: 0, source: FormatError::CrcMismatch { .. } })
    });
    let mut bad_magic = good.clone();
    bad_magic[MAGIC_OFFSET] = 1;
    assert_follower_refused(&mut t, &bad_magic, |e| matches!(e, Error::InvalidBatch { at: 0, .. }));
    assert_follower_refused(&mut t, &good[..good.len() - 1], |e| matches!(e, Error::InvalidBatch { at: 0, .. }));
    assert_follower_refused(&mut t, &[], |e| matches!(e, Error::InvalidBatch { at: 0, .. }));
    // The second batch bad: nothing of the first is appended.
    let two = [good.clone(), bad_crc].concat();
    assert_follower_refused(&mut t, &two, |e| matches!(e, Error::InvalidBatch { at, .. } if *at == good.len()));
    t.log.append_as_follower(&good).unwrap();
    assert_eq!(t.log.log_end_offset(), 4);
}

#[test]
fn an_append_larger_than_segment_bytes_is_refused() {
    let one = follower_batch(0, 0, &[T0; 3], 30);
    let mut t = new_log(LogConfig { segment_bytes: one.len() as u32 * 2 - 1, ..small_config() });
    let two = [one.clone(), follower_batch(3, 0, &[T0; 3], 30)].concat();
    assert_follower_refused(&mut t, &two, |e| matches!(e, Error::RecordTooLarge { limit_name: "segment.bytes", .. }));
    t.log.append_as_follower(&one).unwrap();
}

/// Kafka's `appendAsFollower` passes `ignoreRecordSize = true` ("the record is already accepted
/// by leader"): `max.message.bytes` does not apply to replicated batches (the leader may have had
/// a larger limit, or the topic's limit was lowered since).
#[test]
fn a_follower_batch_larger_than_max_message_bytes_is_accepted() {
    let big = follower_batch(0, 0, &[T0; 10], 100);
    let mut t = new_log(LogConfig { max_message_bytes: 200, ..small_config() });
    assert!(big.len() > 200);
    let info = t.log.append_as_follower(&big).expect("a follower ignores max.message.bytes");
    assert_eq!(info.last_offset, 9);
    assert_eq!(read_all(&t.log), big);
}
