//! Leader appends (Kafka's `appendAsLeader` with `LogValidator`'s in-place path): offsets come from
//! the log end and are stamped into baseOffset, the leader epoch into partitionLeaderEpoch, both
//! outside the CRC; CreateTime keeps the producer's timestamps (maxTimestamp set to the largest
//! record timestamp); LogAppendTime writes the clock into maxTimestamp, sets attribute bit 3 and
//! recomputes the CRC. What a fetch returns is exactly the stamped bytes.

mod common;

use common::*;
use seglog::config::{LogConfig, TimestampType};
use seglog::format::batch::{
    compute_crc, validate_batch, Attributes, ATTRIBUTES_OFFSET, BASE_OFFSET_OFFSET, CRC_OFFSET, MAX_TIMESTAMP_OFFSET,
    PARTITION_LEADER_EPOCH_OFFSET,
};
use seglog::format::builder::BatchBuilder;
use seglog::format::Compression;

/// The bytes of `stamped` equal `original` except for baseOffset and partitionLeaderEpoch.
fn assert_only_offset_and_epoch_changed(original: &[u8], stamped: &[u8]) {
    assert_eq!(original.len(), stamped.len());
    for (i, (a, b)) in original.iter().zip(stamped).enumerate() {
        let outside_crc = (BASE_OFFSET_OFFSET..BASE_OFFSET_OFFSET + 8).contains(&i)
            || (PARTITION_LEADER_EPOCH_OFFSET..PARTITION_LEADER_EPOCH_OFFSET + 4).contains(&i);
        if !outside_crc {
            assert_eq!(a, b, "byte {i} changed");
        }
    }
}

#[test]
fn offsets_are_assigned_from_the_log_end_by_stamping_in_place() {
    let mut t = new_log(small_config());
    let producer = [batch_n(3, T0, 10), batch_n(5, T0 + 10, 10), batch_n(1, T0 + 20, 10)];
    let mut expected_first = 0;
    let mut stored = Vec::new();
    for (i, p) in producer.iter().enumerate() {
        let mut buf = p.clone();
        let info = t.log.append_as_leader(&mut buf, 7).unwrap();
        let n = header(p).records_count as i64;
        assert_eq!((info.first_offset, info.last_offset), (expected_first, expected_first + n - 1), "append {i}");
        let h = header(&buf);
        assert_eq!(h.base_offset, expected_first);
        assert_eq!(h.partition_leader_epoch, 7);
        // The CRC stays what the producer computed: both stamped fields are outside it.
        assert_eq!(h.crc, header(p).crc);
        assert_eq!(compute_crc(&buf), h.crc);
        validate_batch(&buf, true).unwrap();
        assert_only_offset_and_epoch_changed(p, &buf);
        expected_first += n;
        assert_eq!(t.log.log_end_offset(), expected_first);
        stored.extend_from_slice(&buf);
    }
    // The caller's stamped buffers are exactly what the log holds and what a fetch returns.
    assert_eq!(read_all(&t.log), stored);
    t.log.finish_writes().unwrap();
    assert_eq!(segment_bytes(&t.log, 0), stored);
    let offsets: Vec<i64> = decode(&stored).iter().map(|r| r.offset).collect();
    assert_eq!(offsets, (0..9).collect::<Vec<_>>());
}

#[test]
fn producer_partition_leader_epoch_is_overwritten_per_append() {
    let mut t = new_log(small_config());
    let mut a = build(BatchBuilder::new().partition_leader_epoch(99), &[T0, T0 + 1], 8);
    let mut b = build(BatchBuilder::new().partition_leader_epoch(-1), &[T0 + 2], 8);
    let mut c = batch(&[T0 + 3], 8);
    t.log.append_as_leader(&mut a, 3).unwrap();
    t.log.append_as_leader(&mut b, 5).unwrap();
    t.log.append_as_leader(&mut c, -1).unwrap();
    let all = read_all(&t.log);
    let epochs: Vec<(i64, i32)> =
        batches_in(&all).iter().map(|(_, h)| (h.base_offset, h.partition_leader_epoch)).collect();
    assert_eq!(epochs, vec![(0, 3), (2, 5), (3, -1)]);
}

#[test]
fn multi_batch_append_assigns_contiguous_offsets_to_every_batch() {
    let mut t = new_log(small_config());
    let mut first = batch_n(2, T0, 4);
    t.log.append_as_leader(&mut first, 1).unwrap();

    let parts = [batch_n(2, T0 + 5, 20), batch_n(1, T0 + 6, 20), batch_n(4, T0 + 7, 20)];
    let mut buf: Vec<u8> = parts.concat();
    let info = t.log.append_as_leader(&mut buf, 2).unwrap();
    assert_eq!((info.first_offset, info.last_offset), (2, 8));
    assert_eq!(info.batches, 3);
    assert_eq!(info.records, 7);
    assert_eq!(info.bytes, buf.len() as u64);
    let bases: Vec<(i64, i64)> = batches_in(&buf).iter().map(|(_, h)| (h.base_offset, h.last_offset())).collect();
    assert_eq!(bases, vec![(2, 3), (4, 4), (5, 8)]);
    let mut pos = 0;
    for p in &parts {
        assert_only_offset_and_epoch_changed(p, &buf[pos..pos + p.len()]);
        validate_batch(&buf[pos..pos + p.len()], true).unwrap();
        pos += p.len();
    }
    assert_eq!(t.log.log_end_offset(), 9);

    let mut next = batch_n(1, T0 + 9, 4);
    let info = t.log.append_as_leader(&mut next, 2).unwrap();
    assert_eq!((info.first_offset, info.last_offset), (9, 9));
    let all = read_all(&t.log);
    assert_eq!(all, [first, buf, next].concat());
    let offsets: Vec<i64> = decode(&all).iter().map(|r| r.offset).collect();
    assert_eq!(offsets, (0..10).collect::<Vec<_>>());
}

#[test]
fn append_info_reports_offsets_timestamps_sizes_and_position() {
    let mut t = new_log(small_config());
    let mut a = batch(&[T0 + 5, T0 + 1], 16);
    let info = t.log.append_as_leader(&mut a, 0).unwrap();
    assert_eq!(info.first_offset, 0);
    assert_eq!(info.last_offset, 1);
    assert_eq!(info.max_timestamp, T0 + 5);
    assert_eq!(info.shallow_offset_of_max_timestamp, 1);
    assert_eq!(info.log_append_time_ms, -1);
    assert_eq!((info.batches, info.records, info.bytes), (1, 2, a.len() as u64));
    assert_eq!((info.segment_base_offset, info.position), (0, 0));

    // Three batches; the largest timestamp appears in the second and the third: the first batch
    // holding it wins, and the shallow offset is that batch's last offset.
    let parts = [batch(&[T0 + 10, T0 + 11], 3), batch(&[T0 + 30, T0 + 12], 3), batch(&[T0 + 30], 3)];
    let mut buf = parts.concat();
    let info = t.log.append_as_leader(&mut buf, 0).unwrap();
    assert_eq!((info.first_offset, info.last_offset), (2, 6));
    assert_eq!(info.max_timestamp, T0 + 30);
    assert_eq!(info.shallow_offset_of_max_timestamp, 5);
    assert_eq!((info.batches, info.records, info.bytes), (3, 5, buf.len() as u64));
    assert_eq!((info.segment_base_offset, info.position), (0, a.len() as u32));

    // After a roll the position restarts in the new segment.
    t.log.roll(None).unwrap();
    let mut c = batch(&[T0 + 40], 3);
    let info = t.log.append_as_leader(&mut c, 0).unwrap();
    assert_eq!((info.segment_base_offset, info.position, info.first_offset), (7, 0, 7));
}

#[test]
fn create_time_keeps_producer_timestamps() {
    let mut t = new_log(small_config());
    let ts = [T0 + 300, T0 - 2000, T0 + 1000, T0 + 999, T0];
    let original = batch(&ts, 12);
    let mut buf = original.clone();
    t.log.append_as_leader(&mut buf, 0).unwrap();
    let h = header(&buf);
    assert_eq!(h.timestamp_type(), TimestampType::CreateTime);
    assert_eq!(h.attributes.0 & Attributes::TIMESTAMP_TYPE_MASK, 0);
    assert_eq!(h.base_timestamp, T0 + 300);
    assert_eq!(h.max_timestamp, T0 + 1000);
    assert_only_offset_and_epoch_changed(&original, &buf);
    let got: Vec<i64> = decode(&read_all(&t.log)).iter().map(|r| r.timestamp).collect();
    assert_eq!(got, ts);
}

#[test]
fn create_time_rewrites_a_wrong_producer_max_timestamp_with_a_valid_crc() {
    // Kafka's in-place path: setMaxTimestamp(CREATE_TIME, max record timestamp), which recomputes
    // the CRC when the value changes.
    let mut t = new_log(small_config());
    let mut buf = batch(&[T0, T0 + 50, T0 + 20], 5);
    put_i64(&mut buf, MAX_TIMESTAMP_OFFSET, T0 + 7);
    fix_crc(&mut buf);
    let info = t.log.append_as_leader(&mut buf, 0).unwrap();
    let h = validate_batch(&buf, true).unwrap();
    assert_eq!(h.max_timestamp, T0 + 50);
    assert_eq!(info.max_timestamp, T0 + 50);
    assert_eq!(read_all(&t.log), buf);
}

#[test]
fn log_append_time_stamps_the_clock_sets_bit_3_and_recomputes_the_crc() {
    let config = LogConfig { message_timestamp_type: TimestampType::LogAppendTime, ..small_config() };
    let mut t = new_log(config);
    let mut now = T0 + 12_345;
    for c in Compression::ALL {
        t.clock.set(now);
        let producer_ts = [T0 - 5_000, T0 - 4_000, T0 - 4_500];
        let original = build(BatchBuilder::new().compression(c), &producer_ts, 40);
        let mut buf = original.clone();
        let leo = t.log.log_end_offset();
        let info = t.log.append_as_leader(&mut buf, 4).unwrap();
        assert_eq!(info.log_append_time_ms, now, "{c}");
        assert_eq!(info.max_timestamp, now, "{c}");
        let h = validate_batch(&buf, true).unwrap();
        assert_eq!(h.base_offset, leo);
        assert_eq!(h.partition_leader_epoch, 4);
        assert_eq!(h.timestamp_type(), TimestampType::LogAppendTime, "{c}");
        assert_eq!(h.attributes.0 & Attributes::TIMESTAMP_TYPE_MASK, Attributes::TIMESTAMP_TYPE_MASK);
        // Only bit 3 of the attributes changes: the codec bits stay.
        assert_eq!(h.attributes.0 & !Attributes::TIMESTAMP_TYPE_MASK, header(&original).attributes.0);
        assert_eq!(h.max_timestamp, now);
        assert_eq!(h.base_timestamp, producer_ts[0], "baseTimestamp is kept");
        assert_ne!(h.crc, header(&original).crc, "{c}: the CRC covers maxTimestamp and attributes");
        assert_eq!(compute_crc(&buf), h.crc);
        // Everything but baseOffset, epoch, CRC, attributes and maxTimestamp is untouched,
        // including the (compressed) records.
        for (i, (a, b)) in original.iter().zip(&buf).enumerate() {
            let stamped = i < 8
                || (12..16).contains(&i)
                || (CRC_OFFSET..CRC_OFFSET + 4).contains(&i)
                || (ATTRIBUTES_OFFSET..ATTRIBUTES_OFFSET + 2).contains(&i)
                || (MAX_TIMESTAMP_OFFSET..MAX_TIMESTAMP_OFFSET + 8).contains(&i);
            if !stamped {
                assert_eq!(a, b, "{c}: byte {i} changed");
            }
        }
        // Every record now reads back with the log-append time.
        let fetched = t.log.read(leo, u32::MAX, None, false).unwrap();
        assert_eq!(fetched.records, buf, "{c}: fetch returns the stamped bytes");
        let recs = decode(&fetched.records);
        assert_eq!(recs.len(), 3);
        assert!(recs.iter().all(|r| r.timestamp == now), "{c}");
        now += 10;
    }
}

#[test]
fn log_append_time_skips_the_producer_timestamp_limits() {
    // Kafka checks message.timestamp.before/after.max.ms only for CreateTime topics.
    let config = LogConfig {
        message_timestamp_type: TimestampType::LogAppendTime,
        message_timestamp_after_max_ms: 1_000,
        message_timestamp_before_max_ms: 1_000,
        ..small_config()
    };
    let mut t = new_log(config);
    let mut future = batch(&[T0 + 10 * 86_400_000], 4);
    let mut past = batch(&[T0 - 10 * 86_400_000], 4);
    t.log.append_as_leader(&mut future, 0).unwrap();
    t.log.append_as_leader(&mut past, 0).unwrap();
    assert!(decode(&read_all(&t.log)).iter().all(|r| r.timestamp == T0));
}

#[test]
fn compressed_batches_are_stamped_in_place_and_readable() {
    let mut t = new_log(small_config());
    let mut expected = Vec::new();
    for (k, c) in Compression::ALL.into_iter().enumerate() {
        let ts: Vec<i64> = (0..20).map(|i| T0 + 100 * k as i64 + i).collect();
        let original = build(BatchBuilder::new().compression(c), &ts, 64);
        let mut buf = original.clone();
        let info = t.log.append_as_leader(&mut buf, 9).unwrap();
        assert_eq!((info.first_offset, info.last_offset), (20 * k as i64, 20 * k as i64 + 19), "{c}");
        assert_eq!(header(&buf).compression(), Ok(c));
        assert_only_offset_and_epoch_changed(&original, &buf);
        for (i, &ts) in ts.iter().enumerate() {
            expected.push((20 * k as i64 + i as i64, ts, key_of(i).to_vec(), value_of(i, 64)));
        }
    }
    let got: Vec<(i64, i64, Vec<u8>, Vec<u8>)> = decode(&read_all(&t.log))
        .into_iter()
        .map(|r| (r.offset, r.timestamp, r.key.unwrap(), r.value.unwrap()))
        .collect();
    assert_eq!(got, expected);
}

#[test]
fn fetched_bytes_equal_stamped_bytes_after_reopen() {
    let mut t = new_log(small_config());
    let mut stored = Vec::new();
    for i in 0..20 {
        let mut b = batch_n(1 + i % 4, T0 + i as i64 * 10, 30);
        t.log.append_as_leader(&mut b, i as i32).unwrap();
        stored.extend_from_slice(&b);
    }
    assert_eq!(read_all(&t.log), stored);
    let dir = t.dir();
    let clock = t.clock.clone();
    t.log.close().unwrap();
    let log = open_dir(&dir, small_config(), &clock, seglog::log::Recovery::Clean);
    assert_eq!(read_all(&log), stored);
    assert_eq!(log.log_end_offset(), batches_in(&stored).last().unwrap().1.next_offset());
    assert_eq!(log.log_end_offset(), 50);
}
