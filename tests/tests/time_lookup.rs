//! Offset lookup by timestamp (Kafka's `fetchOffsetByTimestamp`): the special values, and for a
//! timestamp t: the first segment whose largest timestamp is >= t, its time-index floor, then the
//! first record with timestamp >= t and offset >= the log start offset, with the leader epoch of
//! its batch. Checked against a linear reference over the segment files, with out-of-order
//! timestamps, compressed batches and LogAppendTime logs.

mod common;

use common::*;
use seglog::config::{LogConfig, TimestampType};
use seglog::format::builder::BatchBuilder;
use seglog::format::Compression;
use seglog::log::{ListOffset, Log, Recovery};
use seglog::segment::TimestampAndOffset;

/// A batch as the reference sees it: its segment, max timestamp and records (offset, timestamp),
/// its partitionLeaderEpoch.
struct RefBatch {
    segment: i64,
    max_timestamp: i64,
    epoch: i32,
    records: Vec<(i64, i64)>,
}

/// Every batch of every segment, read from the `.log` files.
fn model(log: &Log) -> Vec<RefBatch> {
    let mut out = Vec::new();
    for base in segment_bases(log) {
        let bytes = segment_bytes(log, base);
        for (pos, h) in batches_in(&bytes) {
            let b = &bytes[pos..pos + h.size_in_bytes() as usize];
            out.push(RefBatch {
                segment: base,
                max_timestamp: h.max_timestamp,
                epoch: h.partition_leader_epoch,
                records: decode(b).iter().map(|r| (r.offset, r.timestamp)).collect(),
            });
        }
    }
    out
}

fn epoch_of(e: i32) -> Option<i32> {
    (e != -1).then_some(e)
}

/// Kafka's algorithm, linearly: the first segment whose largest timestamp is >= t; in it, the
/// first batch with maxTimestamp >= t holding a record with timestamp >= t and offset >= start.
fn reference(model: &[RefBatch], log_start: i64, t: i64) -> Option<TimestampAndOffset> {
    let mut segments: Vec<i64> = model.iter().map(|b| b.segment).collect();
    segments.dedup();
    let largest = |s: i64| model.iter().filter(|b| b.segment == s).map(|b| b.max_timestamp).max().unwrap();
    let seg = segments.into_iter().find(|&s| largest(s) >= t)?;
    for b in model.iter().filter(|b| b.segment == seg && b.max_timestamp >= t) {
        if let Some(&(offset, timestamp)) = b.records.iter().find(|&&(o, ts)| ts >= t && o >= log_start) {
            return Some(TimestampAndOffset { timestamp, offset, leader_epoch: epoch_of(b.epoch) });
        }
    }
    None
}

/// Kafka's MAX_TIMESTAMP: the first segment with the largest max timestamp, the first batch in it
/// whose maxTimestamp equals it, the first record of that batch holding it.
fn reference_max(model: &[RefBatch]) -> Option<TimestampAndOffset> {
    let max = model.iter().map(|b| b.max_timestamp).max()?;
    if max < 0 {
        return None;
    }
    let b = model.iter().find(|b| b.max_timestamp == max)?;
    let &(offset, timestamp) = b.records.iter().find(|&&(_, ts)| ts == max)?;
    Some(TimestampAndOffset { timestamp, offset, leader_epoch: (b.epoch >= 0).then_some(b.epoch) })
}

fn lookup(log: &Log, t: i64) -> Option<TimestampAndOffset> {
    log.offset_for_time(ListOffset::Timestamp(t)).unwrap()
}

/// Every target worth asking for: each record timestamp and its neighbours, and the extremes.
fn targets(model: &[RefBatch]) -> Vec<i64> {
    let mut ts: Vec<i64> = model.iter().flat_map(|b| b.records.iter().map(|r| r.1)).collect();
    ts.sort_unstable();
    ts.dedup();
    let mut out = vec![0, T0 - 1_000_000, i64::MAX];
    for t in ts {
        out.extend([t - 1, t, t + 1]);
    }
    out
}

fn assert_agrees_with_reference(log: &Log, what: &str) {
    let m = model(log);
    for t in targets(&m) {
        assert_eq!(lookup(log, t), reference(&m, log.log_start_offset(), t), "{what}: target {t}");
    }
    assert_eq!(log.offset_for_time(ListOffset::MaxTimestamp).unwrap(), reference_max(&m), "{what}: max timestamp");
}

/// Time index entries only grow: timestamps strictly, offsets never go back.
fn assert_time_indexes_grow(log: &Log) {
    for s in log.segments() {
        let ti = s.time_index();
        for i in 1..ti.entries() {
            let (a, b) = (ti.entry(i - 1), ti.entry(i));
            assert!(b.timestamp > a.timestamp && b.offset >= a.offset, "segment {}: {a:?} then {b:?}", s.base_offset());
        }
    }
}

/// A log with out-of-order timestamps inside and across batches, over several segments.
fn out_of_order_log(seed: u64, compression: Compression) -> TestLog {
    let mut t = new_log(LogConfig { segment_bytes: 4_000, index_interval_bytes: 150, ..small_config() });
    let mut rng = Rng::new(seed);
    for i in 0..120 {
        let n = rng.range(1, 7) as usize;
        // A drifting clock with jitter: later batches tend to be newer, not always.
        let ts: Vec<i64> = (0..n).map(|_| T0 + 10 * i + rng.range(-300, 300)).collect();
        let mut b = build(BatchBuilder::new().compression(compression), &ts, rng.range(0, 60) as usize);
        t.log.append_as_leader(&mut b, (i / 25) as i32).unwrap();
    }
    assert!(segment_bases(&t.log).len() >= 3, "{:?}", segment_bases(&t.log));
    t
}

#[test]
fn special_values() {
    let mut t = new_log(small_config());
    let empty = |t: &TestLog, l: ListOffset| t.log.offset_for_time(l).unwrap();
    assert_eq!(empty(&t, ListOffset::Earliest).map(|r| r.offset), Some(0));
    assert_eq!(empty(&t, ListOffset::Latest).map(|r| r.offset), Some(0));
    assert_eq!(empty(&t, ListOffset::MaxTimestamp), None);
    assert_eq!(empty(&t, ListOffset::Timestamp(T0)), None);

    t.log.append_as_leader(&mut batch(&[T0 + 5, T0 + 9, T0 + 1], 4), 2).unwrap();
    t.log.append_as_leader(&mut batch(&[T0 + 3], 4), 2).unwrap();
    let earliest = t.log.offset_for_time(ListOffset::Earliest).unwrap().unwrap();
    assert_eq!((earliest.timestamp, earliest.offset), (-1, 0));
    let latest = t.log.offset_for_time(ListOffset::Latest).unwrap().unwrap();
    assert_eq!((latest.timestamp, latest.offset), (-1, 4));
    let max = t.log.offset_for_time(ListOffset::MaxTimestamp).unwrap().unwrap();
    assert_eq!(max, TimestampAndOffset { timestamp: T0 + 9, offset: 1, leader_epoch: Some(2) });

    assert_eq!(ListOffset::from_kafka(-1), ListOffset::Latest);
    assert_eq!(ListOffset::from_kafka(-2), ListOffset::Earliest);
    assert_eq!(ListOffset::from_kafka(-3), ListOffset::MaxTimestamp);
    assert_eq!(ListOffset::from_kafka(-4), ListOffset::EarliestLocal);
    assert_eq!(ListOffset::from_kafka(0), ListOffset::Timestamp(0));
    assert_eq!(ListOffset::from_kafka(T0), ListOffset::Timestamp(T0));
    for (k, l) in [(-1, ListOffset::Latest), (-2, ListOffset::Earliest), (-3, ListOffset::MaxTimestamp)] {
        assert_eq!(t.log.offset_for_time(ListOffset::from_kafka(k)).unwrap(), t.log.offset_for_time(l).unwrap());
    }
    assert_eq!(
        t.log.offset_for_time(ListOffset::EarliestLocal).unwrap().map(|r| r.offset),
        Some(t.log.log_start_offset())
    );
}

#[test]
fn out_of_order_timestamps_agree_with_the_linear_reference() {
    for seed in [1, 2, 3] {
        let t = out_of_order_log(seed, Compression::None);
        assert_time_indexes_grow(&t.log);
        assert!(t.log.segments().any(|s| s.time_index().entries() > 2), "the time index is exercised");
        assert_agrees_with_reference(&t.log, &format!("seed {seed}"));
    }
}

#[test]
fn compressed_batches_are_searched_record_by_record() {
    for c in [Compression::Gzip, Compression::Snappy, Compression::Lz4, Compression::Zstd] {
        let t = out_of_order_log(7, c);
        assert_time_indexes_grow(&t.log);
        assert_agrees_with_reference(&t.log, c.name());
    }
    // Inside one compressed batch, the first record at or after the target.
    let mut t = new_log(small_config());
    let ts = [T0 + 50, T0 + 10, T0 + 30, T0 + 70, T0 + 20, T0 + 70];
    t.log.append_as_leader(&mut build(BatchBuilder::new().compression(Compression::Zstd), &ts, 10), 0).unwrap();
    for (target, offset) in [(T0, 0), (T0 + 50, 0), (T0 + 51, 3), (T0 + 70, 3)] {
        assert_eq!(lookup(&t.log, target).map(|r| r.offset), Some(offset), "target {target}");
    }
    assert_eq!(lookup(&t.log, T0 + 71), None);
}

#[test]
fn the_log_start_offset_bounds_the_answer() {
    let t = out_of_order_log(11, Compression::None);
    let dir = t.dir();
    let clock = t.clock.clone();
    let config = t.log.config().clone();
    let leo = t.log.log_end_offset();
    t.log.close().unwrap();
    for start in [1, leo / 3, leo / 2 + 1] {
        let mut opts = options(config.clone(), &clock, Recovery::Clean);
        opts.log_start_offset = Some(start);
        let log = Log::open(&dir, opts).unwrap();
        assert_eq!(log.log_start_offset(), start);
        assert_eq!(log.offset_for_time(ListOffset::Earliest).unwrap().map(|r| r.offset), Some(start));
        let m = model(&log);
        for target in targets(&m) {
            let got = lookup(&log, target);
            assert_eq!(got, reference(&m, start, target), "start {start} target {target}");
            assert!(got.is_none_or(|r| r.offset >= start));
        }
        log.close().unwrap();
    }
}

#[test]
fn log_append_time_records_carry_their_batch_time() {
    let mut t = new_log(LogConfig {
        message_timestamp_type: TimestampType::LogAppendTime,
        segment_bytes: 1_000,
        index_interval_bytes: 100,
        ..small_config()
    });
    let mut bases = Vec::new();
    for i in 0..30 {
        t.clock.set(T0 + 100 * i);
        // Producer timestamps are irrelevant (and out of order).
        let mut b = batch(&[T0 - i, T0 + 5_000 - 7 * i, T0], 20);
        bases.push(t.log.append_as_leader(&mut b, 1).unwrap().first_offset);
    }
    assert!(segment_bases(&t.log).len() > 2);
    for (i, &base) in bases.iter().enumerate() {
        let at = T0 + 100 * i as i64;
        let want = Some(TimestampAndOffset { timestamp: at, offset: base, leader_epoch: Some(1) });
        assert_eq!(lookup(&t.log, at), want, "batch {i}");
        assert_eq!(lookup(&t.log, at - 99), want, "batch {i}");
    }
    assert_eq!(lookup(&t.log, T0 + 2_901), None);
    let max = t.log.offset_for_time(ListOffset::MaxTimestamp).unwrap().unwrap();
    assert_eq!((max.timestamp, max.offset), (T0 + 2_900, *bases.last().unwrap()));
    assert_agrees_with_reference(&t.log, "log append time");
}

#[test]
fn a_target_newer_than_every_record_finds_nothing() {
    let t = out_of_order_log(5, Compression::None);
    let newest = model(&t.log).iter().map(|b| b.max_timestamp).max().unwrap();
    assert!(lookup(&t.log, newest).is_some());
    for target in [newest + 1, newest + 1_000_000, i64::MAX] {
        assert_eq!(lookup(&t.log, target), None);
    }
}

#[test]
fn equal_timestamps_pick_the_first_offset() {
    let mut t = new_log(LogConfig { segment_bytes: 300, index_interval_bytes: 0, ..small_config() });
    for _ in 0..6 {
        t.log.append_as_leader(&mut batch(&[T0, T0, T0], 4), 0).unwrap();
    }
    t.log.append_as_leader(&mut batch(&[T0 + 1, T0 + 2, T0 + 1], 4), 0).unwrap();
    t.log.append_as_leader(&mut batch(&[T0 + 2, T0 + 2], 4), 0).unwrap();
    assert!(segment_bases(&t.log).len() > 2);
    assert_eq!(lookup(&t.log, T0).map(|r| r.offset), Some(0));
    assert_eq!(lookup(&t.log, T0 - 5).map(|r| r.offset), Some(0));
    assert_eq!(lookup(&t.log, T0 + 1).map(|r| r.offset), Some(18));
    assert_eq!(lookup(&t.log, T0 + 2).map(|r| r.offset), Some(19));
    let max = t.log.offset_for_time(ListOffset::MaxTimestamp).unwrap().unwrap();
    assert_eq!((max.timestamp, max.offset), (T0 + 2, 19));
    assert_agrees_with_reference(&t.log, "equal timestamps");
}

#[test]
fn the_answer_carries_the_batch_leader_epoch() {
    let mut t = new_log(LogConfig { segment_bytes: 400, ..small_config() });
    for (i, epoch) in [3, 3, 5, -1, 8, 8].into_iter().enumerate() {
        let ts = T0 + 10 * i as i64;
        t.log.append_as_leader(&mut batch(&[ts, ts + 1], 40), epoch).unwrap();
    }
    for (i, epoch) in [3, 3, 5, -1, 8, 8].into_iter().enumerate() {
        let ts = T0 + 10 * i as i64;
        let r = lookup(&t.log, ts + 1).unwrap();
        assert_eq!((r.offset, r.leader_epoch), (2 * i as i64 + 1, epoch_of(epoch)), "batch {i}");
    }
    let max = t.log.offset_for_time(ListOffset::MaxTimestamp).unwrap().unwrap();
    assert_eq!((max.offset, max.leader_epoch), (11, Some(8)));
}

#[test]
fn lookups_agree_after_a_reopen() {
    let t = out_of_order_log(9, Compression::Lz4);
    let dir = t.dir();
    let clock = t.clock.clone();
    let config = t.log.config().clone();
    let m = model(&t.log);
    let before: Vec<_> = targets(&m).into_iter().map(|x| lookup(&t.log, x)).collect();
    t.log.close().unwrap();
    for recovery in [Recovery::Clean, Recovery::default()] {
        let log = open_dir(&dir, config.clone(), &clock, recovery);
        let after: Vec<_> = targets(&m).into_iter().map(|x| lookup(&log, x)).collect();
        assert_eq!(after, before, "{recovery:?}");
        assert_agrees_with_reference(&log, &format!("{recovery:?}"));
        log.close().unwrap();
    }
}

/// Kafka's ListOffsets: -5 is LATEST_TIERED_TIMESTAMP, which without tiered storage answers
/// offset -1 (`TimestampAndOffset(NO_TIMESTAMP, -1, Optional.of(-1))`); it is not a timestamp to
/// search for.
#[test]
fn latest_tiered_is_not_a_timestamp() {
    let mut t = new_log(small_config());
    t.log.append_as_leader(&mut batch(&[T0, T0 + 1], 4), 0).unwrap();
    let r = t.log.offset_for_time(ListOffset::from_kafka(-5)).unwrap();
    assert!(r.is_none_or(|r| r.offset == -1), "got {r:?}");
}

/// Kafka's MAX_TIMESTAMP on a log whose records carry no timestamp (-1): every segment's max is
/// -1, so the first segment is picked, its first batch has maxTimestamp == -1, and
/// `offsetOfMaxTimestamp` returns its first record: `TimestampAndOffset(-1, first offset, epoch)`.
#[test]
fn max_timestamp_of_records_without_timestamps_is_the_first_record() {
    let mut t = new_log(small_config());
    t.log.append_as_leader(&mut batch(&[-1, -1], 4), 3).unwrap();
    t.log.append_as_leader(&mut batch(&[-1], 4), 3).unwrap();
    let r = t.log.offset_for_time(ListOffset::MaxTimestamp).unwrap();
    assert_eq!(r, Some(TimestampAndOffset { timestamp: -1, offset: 0, leader_epoch: Some(3) }));
}
