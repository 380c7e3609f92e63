//! Fetch (Kafka's `UnifiedLog.read` / `LogSegment.read`, whole batches only): the read starts at
//! the batch holding the start offset, stays within one segment, honours max_bytes with whole
//! batches, returns the first batch whatever its size with min_one, never returns a batch at or
//! past the upper bound (high watermark), is empty at the log end and refuses offsets outside
//! [log start, log end].

mod common;

use common::*;
use seglog::config::LogConfig;
use seglog::log::Log;
use seglog::Error;

/// A log of several segments with batches of varied sizes, one of them larger than the others.
fn fixture() -> (TestLog, Vec<Stored>) {
    let mut t = new_log(LogConfig { segment_bytes: 1_500, index_interval_bytes: 200, ..small_config() });
    let mut rng = Rng::new(42);
    let mut stored = Vec::new();
    for i in 0..40 {
        let n = if i == 17 { 1 } else { rng.range(1, 5) as usize };
        let value_len = if i == 17 { 900 } else { rng.range(0, 120) as usize };
        let b = batch_n(n, T0 + i, value_len);
        stored.push(append_stored(&mut t.log, b, 1));
    }
    assert!(segment_bases(&t.log).len() >= 4);
    (t, stored)
}

/// The batches a read from `offset` may return: from the one holding it to its segment's end.
fn from_offset(stored: &[Stored], offset: i64) -> Vec<&Stored> {
    let first = stored.iter().position(|s| s.last >= offset).expect("an offset below the log end");
    let seg = stored[first].segment;
    stored[first..].iter().take_while(|s| s.segment == seg).collect()
}

/// Kafka's size rule on whole batches: as many leading batches as fit in `max_bytes` (or in the
/// first batch's size with `min_one`).
fn expected_read(candidates: &[&Stored], max_bytes: u32, min_one: bool) -> Vec<u8> {
    let limit = if min_one { max_bytes.max(candidates[0].bytes.len() as u32) } else { max_bytes } as usize;
    let mut out = Vec::new();
    for s in candidates {
        if out.len() + s.bytes.len() > limit {
            break;
        }
        out.extend_from_slice(&s.bytes);
    }
    out
}

fn read(log: &Log, offset: i64, max_bytes: u32, upper: Option<i64>, min_one: bool) -> Vec<u8> {
    log.read(offset, max_bytes, upper, min_one).unwrap().records.into_vec()
}

#[test]
fn every_offset_reads_from_the_batch_holding_it_to_the_segment_end() {
    let (t, stored) = fixture();
    for o in 0..t.log.log_end_offset() {
        let f = t.log.read(o, u32::MAX, None, false).unwrap();
        let c = from_offset(&stored, o);
        assert!(c[0].base <= o && o <= c[0].last);
        assert_eq!(f.records, expected_read(&c, u32::MAX, false), "offset {o}");
        assert_eq!((f.segment_base_offset, f.position), (c[0].segment, c[0].position), "offset {o}");
        assert_eq!(f.log_end_offset, t.log.log_end_offset());
        assert_eq!(f.log_start_offset, 0);
        assert_eq!(f.high_watermark, t.log.high_watermark());
    }
}

#[test]
fn max_bytes_is_honoured_with_whole_batches_only() {
    let (t, stored) = fixture();
    for o in [0, 1, 5, 20, 33, 50, t.log.log_end_offset() - 1] {
        let c = from_offset(&stored, o);
        let mut sizes = vec![0u32, 1, 60, 61];
        let mut acc = 0u32;
        for s in &c {
            acc += s.bytes.len() as u32;
            sizes.extend([acc - 1, acc, acc + 1]);
        }
        for m in sizes {
            let got = read(&t.log, o, m, None, false);
            assert!(got.len() as u32 <= m, "offset {o} max {m}");
            assert_eq!(got, expected_read(&c, m, false), "offset {o} max {m}");
            // Whole batches.
            let whole: usize = batches_in(&got).iter().map(|(_, h)| h.size_in_bytes() as usize).sum();
            assert_eq!(whole, got.len());
            assert_eq!(read(&t.log, o, m, None, true), expected_read(&c, m, true), "offset {o} max {m} min_one");
        }
    }
}

#[test]
fn min_one_returns_the_first_batch_even_if_larger_than_max_bytes() {
    let (t, stored) = fixture();
    let big = stored.iter().find(|s| s.bytes.len() > 900).unwrap();
    for o in big.base..=big.last {
        for m in [0, 1, 100, big.bytes.len() as u32 - 1] {
            assert_eq!(read(&t.log, o, m, None, true), big.bytes, "offset {o} max {m}");
            assert!(read(&t.log, o, m, None, false).is_empty(), "offset {o} max {m}");
        }
    }
}

#[test]
fn the_upper_bound_excludes_the_batch_holding_it_and_everything_after() {
    let (mut t, stored) = fixture();
    let leo = t.log.log_end_offset();
    for o in (0..leo).step_by(3) {
        for hw in o..=leo {
            let c = from_offset(&stored, o);
            let below: Vec<&Stored> = c.iter().copied().filter(|s| s.last < hw).collect();
            let want: Vec<u8> = below.iter().flat_map(|s| s.bytes.clone()).collect();
            for min_one in [false, true] {
                assert_eq!(read(&t.log, o, u32::MAX, Some(hw), min_one), want, "start {o} hw {hw} min_one {min_one}");
            }
            if !below.is_empty() {
                // Both limits at once: the smaller wins.
                let m = below[0].bytes.len() as u32;
                assert_eq!(read(&t.log, o, m, Some(hw), false), below[0].bytes);
            }
        }
    }
    // Through the log's own high watermark.
    let hw = stored[10].base + 1;
    t.log.set_high_watermark(hw);
    assert_eq!(t.log.high_watermark(), hw);
    let f = t.log.read(0, u32::MAX, Some(t.log.high_watermark()), false).unwrap();
    assert_eq!(f.high_watermark, hw);
    let last = batches_in(&f.records).last().map(|(_, h)| h.last_offset());
    assert!(last.is_none_or(|l| l < hw));
    // The high watermark is clamped to the log end.
    t.log.set_high_watermark(leo + 100);
    assert_eq!(t.log.high_watermark(), leo);
}

#[test]
fn reading_at_the_log_end_is_empty() {
    let (t, _) = fixture();
    let leo = t.log.log_end_offset();
    for (m, upper, min_one) in
        [(u32::MAX, None, false), (0, None, true), (1_000, Some(leo), true), (1_000, Some(3), false)]
    {
        let f = t.log.read(leo, m, upper, min_one).unwrap();
        assert!(f.records.is_empty());
        assert_eq!(f.log_end_offset, leo);
    }
    // An empty log: offset 0 is its end.
    let empty = new_log(small_config());
    assert!(empty.log.read(0, u32::MAX, None, true).unwrap().records.is_empty());
}

#[test]
fn offsets_outside_the_log_are_out_of_range() {
    let (t, _) = fixture();
    let leo = t.log.log_end_offset();
    for o in [leo + 1, leo + 1_000, i64::MAX, -1, i64::MIN] {
        let err = t.log.read(o, u32::MAX, None, true).expect_err("out of range");
        assert!(
            matches!(err, Error::OffsetOutOfRange { offset, log_start_offset: 0, log_end_offset } if offset == o && log_end_offset == leo),
            "{err:?}"
        );
    }
    let empty = new_log(small_config());
    assert!(matches!(empty.log.read(1, 10, None, true), Err(Error::OffsetOutOfRange { .. })));
}

#[test]
fn offsets_below_the_log_start_offset_are_out_of_range() {
    let (t, stored) = fixture();
    let dir = t.dir();
    let clock = t.clock.clone();
    let config = t.log.config().clone();
    t.log.close().unwrap();
    // A log start offset inside a batch (as after DeleteRecords).
    let start = stored[12].base + 1;
    assert!(stored[12].last > stored[12].base);
    let mut opts = options(config, &clock, seglog::log::Recovery::Clean);
    opts.log_start_offset = Some(start);
    let log = Log::open(&dir, opts).unwrap();
    assert_eq!(log.log_start_offset(), start);
    for o in [0, start - 1] {
        assert!(
            matches!(log.read(o, u32::MAX, None, true), Err(Error::OffsetOutOfRange { offset, log_start_offset, .. }) if offset == o && log_start_offset == start)
        );
    }
    // At the log start offset: the whole batch holding it.
    let f = log.read(start, u32::MAX, None, false).unwrap();
    assert_eq!(&f.records[..stored[12].bytes.len()], &stored[12].bytes[..]);
    assert_eq!(f.log_start_offset, start);
}

#[test]
fn a_read_stays_in_one_segment_and_continues_in_the_next() {
    let (t, stored) = fixture();
    let bases = segment_bases(&t.log);
    for w in bases.windows(2) {
        let (this, next) = (w[0], w[1]);
        // From the first offset of a segment: only that segment's batches.
        let f = t.log.read(this, u32::MAX, None, false).unwrap();
        assert_eq!(f.segment_base_offset, this);
        let in_segment: Vec<u8> = stored.iter().filter(|s| s.segment == this).flat_map(|s| s.bytes.clone()).collect();
        assert_eq!(f.records, in_segment);
        // From the next segment's base offset (one past this segment's end): the next segment.
        let f = t.log.read(next, u32::MAX, None, false).unwrap();
        assert_eq!((f.segment_base_offset, f.position), (next, 0));
        assert_eq!(batches_in(&f.records)[0].1.base_offset, next);
    }
}

#[test]
fn an_offset_in_a_gap_at_a_segment_end_reads_from_the_next_segment() {
    let mut t = new_log(small_config());
    let a = follower_batch(0, 0, &[T0; 10], 8);
    t.log.append_as_follower(&a).unwrap();
    // Offsets 10..20 were compacted away; the next segment starts at 20.
    t.log.roll(Some(20)).unwrap();
    let b = follower_batch(20, 0, &[T0; 5], 8);
    t.log.append_as_follower(&b).unwrap();
    assert_eq!(segment_bases(&t.log), vec![0, 20]);
    for o in 10..20 {
        let f = t.log.read(o, u32::MAX, None, false).unwrap();
        assert_eq!(f.records, b, "offset {o}");
        assert_eq!(f.segment_base_offset, 20);
        // An upper bound inside the gap: nothing after it.
        assert!(t.log.read(o, u32::MAX, Some(19), true).unwrap().records.is_empty());
    }
    assert_eq!(t.log.read(9, u32::MAX, Some(15), false).unwrap().records, a);
}

#[test]
fn fetch_results_survive_a_reopen() {
    let (t, stored) = fixture();
    let leo = t.log.log_end_offset();
    let before: Vec<Vec<u8>> = (0..leo).map(|o| read(&t.log, o, 700, None, true)).collect();
    let dir = t.dir();
    let clock = t.clock.clone();
    let config = t.log.config().clone();
    t.log.close().unwrap();
    for recovery in [seglog::log::Recovery::Clean, seglog::log::Recovery::default()] {
        let log = open_dir(&dir, config.clone(), &clock, recovery);
        assert_eq!(log.log_end_offset(), leo);
        let after: Vec<Vec<u8>> = (0..leo).map(|o| read(&log, o, 700, None, true)).collect();
        assert_eq!(after, before, "{recovery:?}");
        assert_eq!(read_all(&log), stored.iter().flat_map(|s| s.bytes.clone()).collect::<Vec<u8>>());
        log.close().unwrap();
    }
}
