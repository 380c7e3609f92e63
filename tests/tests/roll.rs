//! Rolling (Kafka's `shouldRoll` and `roll`): on segment.bytes with `size > segment.bytes -
//! incoming`, on segment.ms (minus the segment's jitter) measured from the first batch's max
//! timestamp to the incoming one (or by wall clock when there are no timestamps), on a full
//! offset index, on a full time index (last slot reserved), and when an offset no longer fits
//! the 32-bit relative offsets of the indexes. A rolled segment is trimmed (final time-index
//! entry, both indexes cut to their entries, .log exactly its batches); the new one is named by
//! its zero-padded base offset and its index files are preallocated.

mod common;

use common::*;
use seglog::config::LogConfig;

fn config(segment_bytes: u32) -> LogConfig {
    LogConfig { segment_bytes, ..small_config() }
}

fn append(t: &mut TestLog, b: &[u8]) -> seglog::log::AppendInfo {
    t.log.append_as_leader(&mut b.to_vec(), 0).unwrap()
}

#[test]
fn a_batch_that_exactly_fills_segment_bytes_does_not_roll_one_more_byte_does() {
    let mut t = new_log(config(300));
    for i in 0..3 {
        append(&mut t, &batch_of_size(100, T0 + i));
    }
    assert_eq!(segment_bases(&t.log), vec![0]);
    assert_eq!(t.log.segment_infos()[0].size, 300);
    let info = append(&mut t, &batch_of_size(100, T0 + 3));
    assert_eq!(segment_bases(&t.log), vec![0, 3]);
    assert_eq!((info.segment_base_offset, info.position), (3, 0));

    // 200 bytes in, 101 incoming: 200 > 300 - 101, so it rolls.
    let mut t = new_log(config(300));
    append(&mut t, &batch_of_size(100, T0));
    append(&mut t, &batch_of_size(100, T0));
    append(&mut t, &batch_of_size(101, T0));
    assert_eq!(segment_bases(&t.log), vec![0, 2]);

    // 200 bytes in, 99 incoming with segment.bytes 299: exactly full, no roll; then any roll.
    let mut t = new_log(config(299));
    append(&mut t, &batch_of_size(100, T0));
    append(&mut t, &batch_of_size(100, T0));
    append(&mut t, &batch_of_size(99, T0));
    assert_eq!(segment_bases(&t.log), vec![0]);
    assert_eq!(t.log.segment_infos()[0].size, 299);
    append(&mut t, &batch_of_size(72, T0));
    assert_eq!(segment_bases(&t.log), vec![0, 3]);
}

#[test]
fn a_multi_batch_append_is_measured_as_a_whole() {
    let mut t = new_log(config(300));
    append(&mut t, &batch_of_size(100, T0));
    let two = [batch_of_size(100, T0), batch_of_size(100, T0)].concat();
    append(&mut t, &two);
    assert_eq!(segment_bases(&t.log), vec![0]);
    let mut t = new_log(config(299));
    append(&mut t, &batch_of_size(100, T0));
    append(&mut t, &two);
    // The whole append goes to the new segment; it is never split.
    assert_eq!(segment_bases(&t.log), vec![0, 1]);
    assert_eq!(t.log.segment_infos()[1].size, 200);
}

#[test]
fn segment_ms_is_measured_from_the_first_batch_max_timestamp_to_the_incoming_one() {
    let mut t = new_log(LogConfig { segment_ms: 1_000, ..small_config() });
    // The first batch's max timestamp (T0 + 500) is the reference, not its first record's.
    append(&mut t, &batch(&[T0, T0 + 500], 8));
    append(&mut t, &batch(&[T0 + 1_400], 8));
    append(&mut t, &batch(&[T0 + 1_500], 8)); // waited exactly 1000: not more than segment.ms
    assert_eq!(segment_bases(&t.log), vec![0]);
    let info = append(&mut t, &batch(&[T0 + 1_501], 8));
    assert_eq!(segment_bases(&t.log), vec![0, 4]);
    assert_eq!(info.segment_base_offset, 4);
    // The new segment's reference is T0 + 1501; the wall clock does not matter when batches have
    // timestamps, and an older incoming timestamp never rolls.
    t.clock.advance(30 * 86_400_000);
    append(&mut t, &batch(&[T0], 8));
    append(&mut t, &batch(&[T0 + 2_501], 8));
    assert_eq!(segment_bases(&t.log), vec![0, 4]);
    append(&mut t, &batch(&[T0 + 2_502], 8));
    assert_eq!(segment_bases(&t.log), vec![0, 4, 7]);
}

#[test]
fn segment_ms_uses_the_wall_clock_when_batches_have_no_timestamp() {
    let mut t = new_log(LogConfig { segment_ms: 1_000, ..small_config() });
    // An empty segment never rolls on time.
    t.clock.advance(5_000);
    append(&mut t, &batch(&[-1], 8));
    assert_eq!(segment_bases(&t.log), vec![0]);
    // The segment was created at T0 (when the log was opened).
    t.clock.set(T0 + 1_000);
    append(&mut t, &batch(&[-1], 8));
    assert_eq!(segment_bases(&t.log), vec![0]);
    t.clock.set(T0 + 1_001);
    append(&mut t, &batch(&[-1], 8));
    assert_eq!(segment_bases(&t.log), vec![0, 2]);
    // The new segment was created at T0 + 1001.
    t.clock.set(T0 + 2_001);
    append(&mut t, &batch(&[-1], 8));
    assert_eq!(segment_bases(&t.log), vec![0, 2]);
    t.clock.set(T0 + 2_002);
    append(&mut t, &batch(&[-1], 8));
    assert_eq!(segment_bases(&t.log), vec![0, 2, 4]);
}

fn jitters(segment_ms: i64, segment_jitter_ms: i64, rolls: usize) -> Vec<i64> {
    let mut t = new_log(LogConfig { segment_ms, segment_jitter_ms, segment_index_bytes: 64, ..LogConfig::default() });
    let mut out = vec![t.log.active_segment().roll_jitter_ms()];
    for i in 0..rolls {
        append(&mut t, &batch(&[T0 + i as i64], 1));
        t.log.roll(None).unwrap();
        out.push(t.log.active_segment().roll_jitter_ms());
    }
    out
}

#[test]
fn segment_jitter_stays_within_zero_and_min_of_jitter_and_segment_ms() {
    for (segment_ms, jitter, bound) in [(1_000, 10_000, 1_000), (1_000, 100, 100), (1_000, 1, 1), (50, 50, 50)] {
        let js = jitters(segment_ms, jitter, 60);
        assert!(js.iter().all(|&j| (0..bound).contains(&j)), "ms {segment_ms} jitter {jitter}: {js:?}");
        if bound > 1 {
            let distinct: std::collections::BTreeSet<i64> = js.iter().copied().collect();
            assert!(distinct.len() > 1, "jitter never varies: {js:?}");
        }
    }
    assert!(jitters(1_000, 0, 10).iter().all(|&j| j == 0));
}

#[test]
fn segment_jitter_shortens_segment_ms() {
    let mut t = new_log(LogConfig { segment_ms: 1_000, segment_jitter_ms: 900, ..small_config() });
    for round in 0..20 {
        // Each round starts a fresh segment (the first roll replaces the empty one).
        t.log.roll(None).unwrap();
        let base = t.log.log_end_offset();
        let j = t.log.active_segment().roll_jitter_ms();
        assert!((0..900).contains(&j));
        let start = T0 + round * 10_000;
        append(&mut t, &batch(&[start], 1));
        append(&mut t, &batch(&[start + 1_000 - j], 1)); // waited segment.ms - jitter: no roll
        assert_eq!(*segment_bases(&t.log).last().unwrap(), base, "round {round}, jitter {j}");
        append(&mut t, &batch(&[start + 1_001 - j], 1));
        assert_eq!(*segment_bases(&t.log).last().unwrap(), base + 2, "round {round}, jitter {j}");
    }
}

#[test]
fn a_full_offset_index_rolls() {
    for interval in [0, 1] {
        // 48 bytes: 6 offset entries; 4 time slots, but constant timestamps add only one entry.
        let mut t =
            new_log(LogConfig { segment_index_bytes: 48, index_interval_bytes: interval, ..LogConfig::default() });
        assert_eq!(t.log.active_segment().offset_index().max_entries(), 6);
        for _ in 0..7 {
            append(&mut t, &batch(&[T0], 4));
        }
        // The first batch of a segment is never indexed: 7 batches, 6 entries, full.
        let seg = &t.log.segment_infos()[0];
        assert_eq!((seg.offset_index_entries, seg.time_index_entries), (6, 1));
        assert_eq!(segment_bases(&t.log), vec![0]);
        append(&mut t, &batch(&[T0], 4));
        assert_eq!(segment_bases(&t.log), vec![0, 7], "interval {interval}");
        assert_eq!(file_len(&index_path(&t.dir(), 0)), 48);
        assert_eq!(file_len(&time_index_path(&t.dir(), 0)), 12);
    }
}

#[test]
fn a_full_time_index_rolls_with_its_last_slot_reserved() {
    // 48 bytes: 4 time slots, full at 3 entries (the last is kept for the entry written at roll).
    let mut t = new_log(LogConfig { segment_index_bytes: 48, index_interval_bytes: 0, ..LogConfig::default() });
    assert_eq!(t.log.active_segment().time_index().max_entries(), 4);
    for i in 0..4 {
        append(&mut t, &batch(&[T0 + i], 4));
    }
    let seg = &t.log.segment_infos()[0];
    assert_eq!((seg.offset_index_entries, seg.time_index_entries), (3, 3));
    assert!(t.log.active_segment().time_index().is_full());
    assert!(!t.log.active_segment().offset_index().is_full());
    append(&mut t, &batch(&[T0 + 4], 4));
    assert_eq!(segment_bases(&t.log), vec![0, 4]);
}

#[test]
fn a_time_index_with_a_single_slot_rolls_at_every_append() {
    // 16 bytes: 2 offset entries but one time slot, which is reserved: the time index is always
    // full, so every append rolls, and the first one replaces the empty segment at the same base
    // offset (KAFKA-6388).
    let mut t = new_log(LogConfig { segment_index_bytes: 16, index_interval_bytes: 1, ..LogConfig::default() });
    for i in 0..4 {
        append(&mut t, &batch(&[T0 + i], 4));
    }
    assert_eq!(segment_bases(&t.log), vec![0, 1, 2, 3]);
    assert_eq!(read_all(&t.log).len(), 4 * batch(&[T0], 4).len());
    let names: Vec<String> = snapshot(&t.dir()).into_keys().filter(|n| n.ends_with(".log")).collect();
    assert_eq!(names.len(), 4);
}

#[test]
fn rolling_an_empty_active_segment_replaces_it() {
    let mut t = new_log(small_config());
    t.log.roll(None).unwrap();
    assert_eq!(segment_bases(&t.log), vec![0]);
    append(&mut t, &batch(&[T0], 4));
    t.log.roll(None).unwrap();
    t.log.roll(None).unwrap();
    assert_eq!(segment_bases(&t.log), vec![0, 1]);
    let logs: Vec<String> = snapshot(&t.dir()).into_keys().filter(|n| n.ends_with(".log")).collect();
    assert_eq!(logs, vec![format!("{:020}.log", 0), format!("{:020}.log", 1)]);
}

#[test]
fn an_offset_beyond_the_relative_offset_range_rolls_to_a_segment_at_that_offset() {
    let max = i32::MAX as i64;
    let mut t = new_log(small_config());
    t.log.append_as_follower(&follower_batch(0, 0, &[T0], 4)).unwrap();
    // base + i32::MAX still fits.
    t.log.append_as_follower(&follower_batch(max, 0, &[T0], 4)).unwrap();
    assert_eq!(segment_bases(&t.log), vec![0]);
    let info = t.log.append_as_follower(&follower_batch(max + 1, 0, &[T0, T0], 4)).unwrap();
    assert_eq!(segment_bases(&t.log), vec![0, max + 1]);
    assert_eq!((info.segment_base_offset, info.position), (max + 1, 0));
    assert!(log_path(&t.dir(), max + 1).exists());
    assert!(t.dir().join("00000000002147483648.log").exists());
    assert_eq!(t.log.log_end_offset(), max + 3);
    let f = t.log.read(max + 2, u32::MAX, None, false).unwrap();
    assert_eq!(f.segment_base_offset, max + 1);
    assert_eq!(decode(&f.records).iter().map(|r| r.offset).collect::<Vec<_>>(), vec![max + 1, max + 2]);

    // A batch whose base fits but whose last offset does not: the new segment starts at its base.
    let mut t = new_log(small_config());
    t.log.append_as_follower(&follower_batch(0, 0, &[T0], 4)).unwrap();
    t.log.append_as_follower(&follower_batch(max - 1, 0, &[T0; 3], 4)).unwrap();
    assert_eq!(segment_bases(&t.log), vec![0, max - 1]);
}

#[test]
fn new_segments_are_named_by_their_zero_padded_base_offset() {
    let mut t = new_log(config(200));
    for i in 0..5 {
        append(&mut t, &batch_of_size(100, T0 + i));
    }
    // A follower-style jump to a large offset.
    let big = 12_345_678_901_234;
    t.log.append_as_follower(&follower_batch(big, 0, &[T0], 4)).unwrap();
    let bases = segment_bases(&t.log);
    assert_eq!(bases, vec![0, 2, 4, big]);
    let names: Vec<String> = snapshot(&t.dir()).into_keys().filter(|n| n != "leader-epoch-checkpoint").collect();
    let mut expected = Vec::new();
    for b in [0, 2, 4, big] {
        for ext in ["index", "log", "timeindex"] {
            expected.push(format!("{b:020}.{ext}"));
        }
        // Each roll snapshots the producers at the new base, as Kafka's does.
        if b > 0 {
            expected.push(format!("{b:020}.snapshot"));
        }
    }
    expected.sort();
    assert_eq!(names, expected);
    assert!(names.contains(&"00000012345678901234.log".to_string()));
}

#[test]
fn roll_trims_the_old_segment_and_preallocates_the_new_one() {
    let config = LogConfig { segment_index_bytes: 1_000, index_interval_bytes: 150, ..LogConfig::default() };
    let mut t = new_log(config.clone());
    let dir = t.dir();
    // While active: index files preallocated, rounded down to 8 and 12.
    assert_eq!(file_len(&index_path(&dir, 0)), 1_000);
    assert_eq!(file_len(&time_index_path(&dir, 0)), 996);

    let mut stored0 = Vec::new();
    for i in 0..4 {
        let mut b = batch_of_size(100, T0 + 10 * i);
        t.log.append_as_leader(&mut b, 0).unwrap();
        stored0.extend_from_slice(&b);
    }
    t.log.roll(None).unwrap();
    // Batch 3 (position 200) was indexed; batch 4 (not indexed) holds the max timestamp, so the
    // final time-index entry records it.
    let mut index0 = Vec::new();
    index0.extend_from_slice(&2i32.to_be_bytes());
    index0.extend_from_slice(&200i32.to_be_bytes());
    let mut time0 = Vec::new();
    for (ts, rel) in [(T0 + 20, 2i32), (T0 + 30, 3)] {
        time0.extend_from_slice(&ts.to_be_bytes());
        time0.extend_from_slice(&rel.to_be_bytes());
    }
    assert_eq!(std::fs::read(log_path(&dir, 0)).unwrap(), stored0);
    assert_eq!(std::fs::read(index_path(&dir, 0)).unwrap(), index0);
    assert_eq!(std::fs::read(time_index_path(&dir, 0)).unwrap(), time0);
    assert_eq!(file_len(&log_path(&dir, 4)), 0);
    assert_eq!(file_len(&index_path(&dir, 4)), 1_000);
    assert_eq!(file_len(&time_index_path(&dir, 4)), 996);

    // Out-of-order timestamps: the max so far (and the first batch holding it) is what the time
    // index keeps, at index points and at roll.
    let mut stored1 = Vec::new();
    for ts in [T0 + 100, T0 + 50, T0 + 60, T0 + 70, T0 + 100, T0 + 90] {
        let mut b = batch_of_size(100, ts);
        t.log.append_as_leader(&mut b, 0).unwrap();
        stored1.extend_from_slice(&b);
    }
    t.log.roll(None).unwrap();
    assert_eq!(std::fs::read(log_path(&dir, 4)).unwrap(), stored1);
    let (index1, time1) = kafka_indexes(4, &batch_metas(&stored1), 150, true);
    assert_eq!(std::fs::read(index_path(&dir, 4)).unwrap(), index1);
    assert_eq!(std::fs::read(time_index_path(&dir, 4)).unwrap(), time1);
    let mut expected_time1 = (T0 + 100).to_be_bytes().to_vec();
    expected_time1.extend_from_slice(&0i32.to_be_bytes());
    assert_eq!(time1, expected_time1);
    assert_eq!(file_len(&index_path(&dir, 10)), 1_000);
    assert_eq!(file_len(&time_index_path(&dir, 10)), 996);
}

#[test]
fn rolled_segments_match_kafkas_index_rule_for_random_batches() {
    for (seed, interval) in [(1u64, 0u32), (2, 1), (3, 300), (4, 1_000), (5, 4_096)] {
        let mut rng = Rng::new(seed);
        let config = LogConfig {
            segment_bytes: 20_000,
            index_interval_bytes: interval,
            segment_index_bytes: 8_192,
            ..LogConfig::default()
        };
        let mut t = new_log(config);
        for _ in 0..300 {
            let n = rng.range(1, 6) as usize;
            let ts: Vec<i64> = (0..n).map(|_| T0 + rng.range(-1_000, 1_000)).collect();
            let mut b = batch(&ts, rng.range(0, 200) as usize);
            t.log.append_as_leader(&mut b, 0).unwrap();
        }
        let dir = t.dir();
        let infos = t.log.segment_infos();
        assert!(infos.len() > 3, "seed {seed}: {} segments", infos.len());
        for s in &infos[..infos.len() - 1] {
            let log_bytes = std::fs::read(log_path(&dir, s.base_offset)).unwrap();
            assert_eq!(log_bytes.len() as u32, s.size);
            let (idx, tidx) = kafka_indexes(s.base_offset, &batch_metas(&log_bytes), interval, true);
            assert_eq!(
                std::fs::read(index_path(&dir, s.base_offset)).unwrap(),
                idx,
                "seed {seed} segment {}",
                s.base_offset
            );
            assert_eq!(
                std::fs::read(time_index_path(&dir, s.base_offset)).unwrap(),
                tidx,
                "seed {seed} segment {}",
                s.base_offset
            );
        }
    }
}

#[test]
fn with_preallocate_a_rolled_log_file_is_exactly_its_batches() {
    let mut t = new_log(LogConfig { preallocate: true, ..config(1_000) });
    let dir = t.dir();
    let mut stored = Vec::new();
    for i in 0..12 {
        let mut b = batch_of_size(100, T0 + i);
        t.log.append_as_leader(&mut b, 0).unwrap();
        stored.extend_from_slice(&b);
    }
    let bases = segment_bases(&t.log);
    assert_eq!(bases, vec![0, 10]);
    assert_eq!(std::fs::read(log_path(&dir, 0)).unwrap(), stored[..1_000]);
    t.log.close().unwrap();
    assert_eq!(std::fs::read(log_path(&dir, 10)).unwrap(), stored[1_000..]);
}

/// Asserts that the log is self-consistent: every offset below the log end reads back, exactly
/// once, in order, and the segments hold exactly the bytes the log reports.
fn assert_consistent(log: &seglog::log::Log) {
    let all = read_all(log);
    let offsets: Vec<i64> = decode(&all).iter().map(|r| r.offset).collect();
    assert_eq!(offsets, (log.log_start_offset()..log.log_end_offset()).collect::<Vec<_>>());
    let total: u64 = log.segment_infos().iter().map(|s| s.size as u64).sum();
    assert_eq!(total, all.len() as u64, "segment sizes vs readable bytes");
}

/// One append of several batches can need several index entries (the index rule is per batch),
/// but the full-index check runs once per append, before it. Kafka's `maybeRoll` only looks at
/// `isFull()`, so an append must either fit (roll first) or be refused with the log unchanged;
/// it must never write the batches and then fail with the log end offset left behind them.
#[test]
fn a_multi_batch_append_never_overflows_the_indexes() {
    for (what, ts_step) in [("time index", 1), ("offset index", 0)] {
        // 48 bytes: 6 offset entries, 4 time slots (full at 3); interval 0: every batch but a
        // segment's first is indexed. Growing timestamps fill the time index first; constant
        // ones only ever add one time entry, so the offset index fills first.
        let mut t = new_log(LogConfig { segment_index_bytes: 48, index_interval_bytes: 0, ..LogConfig::default() });
        let singles = if ts_step == 1 { 3 } else { 5 };
        for i in 0..singles {
            t.log.append_as_follower(&follower_batch(i, 0, &[T0 + i * ts_step], 4)).unwrap();
        }
        assert!(!t.log.active_segment().time_index().is_full() && !t.log.active_segment().offset_index().is_full());
        let before = state(&t.log);
        let three: Vec<u8> =
            (singles..singles + 3).flat_map(|i| follower_batch(i, 0, &[T0 + i * ts_step], 4)).collect();
        match t.log.append_as_follower(&three) {
            Ok(info) => assert_eq!(info.last_offset, singles + 2, "{what}"),
            Err(e) => assert_eq!(state(&t.log), before, "{what}: refused ({e}) but the log changed"),
        }
        assert_consistent(&t.log);
        let leo = t.log.log_end_offset();
        t.log.append_as_follower(&follower_batch(leo, 0, &[T0 + 100], 4)).unwrap();
        assert_consistent(&t.log);
    }
}

/// The seal's fdatasync's go out together; a failed one still fails the roll, with an error that
/// names its file, and the old segment stays the active one. On the simulated disk each of the
/// three fails in turn: `.log`, `.index`, `.timeindex`.
#[test]
fn a_failed_fdatasync_of_any_sealed_file_fails_the_roll_naming_it() {
    use seglog::io::sim::{Fault, SimStorage};
    use seglog::log::{Log, LogOptions};
    use std::sync::Arc;

    for (k, suffix) in [(1, ".log"), (2, ".index"), (3, ".timeindex")] {
        let sim = SimStorage::new();
        let options =
            LogOptions { storage: Arc::new(sim.clone()), config: config(1 << 20), ..seglog_tests::log_options() };
        let mut log = Log::open("/data/t-0", options).unwrap();
        for i in 0..3 {
            log.append_as_leader(&mut batch_of_size(100, T0 + i), 0).unwrap();
        }
        sim.inject(Fault::Sync(sim.counters().syncs + k));
        let e = log.roll(None).unwrap_err().to_string();
        assert!(e.contains(&format!("00000000000000000000{suffix}")), "fault {k}: {e}");
        assert_eq!(segment_bases(&log), vec![0], "fault {k}");
    }
}
