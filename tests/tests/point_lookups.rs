//! Point lookups and small fetches read a segment once: a fetch of every offset with
//! `max_bytes` 1 returns the batch holding it, whole (Kafka's `minOneMessage`), exactly as a
//! linear scan of the batches as appended says, and costs one read of a sealed segment (the
//! active segment's tail cache may serve it with none). Also for fetches starting inside a
//! batch, small `max_bytes` with and without `min_one`, and upper bounds below the log end (a
//! high watermark), in every I/O mode on a real ext4 directory (tmpfs accepts unaligned
//! O_DIRECT), for batches larger than `index.interval.bytes` (every batch indexed), smaller
//! (several batches per entry) and mixed, as written, reopened without a rebuild, reopened with
//! one, and after a truncation. Reopened without a rebuild, a segment learns whether its index
//! is dense from its fetches, and a wrong guess may cost one fetch per segment a second read.

mod common;

use common::*;
use seglog::config::LogConfig;
use seglog::io::thread_stats;
use seglog::log::{Log, LogOptions, Recovery};
use seglog::IoMode;

const INTERVAL: u32 = 4096;

/// Batch sizes, in bytes, of one kind of log.
#[derive(Clone, Copy, Debug)]
struct Sizes {
    name: &'static str,
    min: i64,
    max: i64,
    batches: usize,
}

/// Every batch larger than the interval (each but a segment's first indexed), every batch
/// smaller (several per entry), and both.
const KINDS: [Sizes; 3] = [
    Sizes { name: "dense", min: INTERVAL as i64 + 200, max: 20_000, batches: 70 },
    Sizes { name: "sparse", min: 100, max: 3_000, batches: 300 },
    Sizes { name: "mixed", min: 200, max: 12_000, batches: 150 },
];

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 128 * 1024,
        index_interval_bytes: INTERVAL,
        segment_index_bytes: 64 * 1024,
        ..LogConfig::default()
    }
}

fn options(mode: IoMode, recovery: Recovery) -> Option<LogOptions> {
    mode_options(mode, config()).map(|o| LogOptions { recovery, ..o })
}

/// Appends batches of 1 to 16 records with sizes in `sizes`.
fn fill(log: &mut Log, sizes: Sizes, seed: u64, stored: &mut Vec<Stored>) {
    let mut rng = Rng::new(seed);
    for i in 0..sizes.batches {
        let records = rng.range(1, 17) as usize;
        let target = rng.range(sizes.min, sizes.max + 1) as usize;
        // A record costs its value plus about 14 bytes (key, varints, attributes).
        let value_len = (target.saturating_sub(61) / records).saturating_sub(14).max(1);
        stored.push(append_stored(log, batch_n(records, T0 + i as i64, value_len), 1));
    }
}

/// What a pass of fetches cost: fetches served by the active segment with no read, with one;
/// fetches of sealed segments that took a second read (`learning` passes only).
#[derive(Debug, Default)]
struct Reads {
    active_none: usize,
    active_one: usize,
    second_reads: usize,
    /// Whether a fetch may take a second read: a segment opened without a rebuild learns its
    /// index's density from its fetches, and a learned guess that turns out wrong costs one.
    learning: bool,
}

/// A fetch's arguments ([`Log::read`]'s).
#[derive(Clone, Copy, Debug)]
struct Fetch {
    offset: i64,
    max_bytes: u32,
    upper: Option<i64>,
    min_one: bool,
}

/// One fetch, checked against the reference; its reads counted: one for a sealed segment, at
/// most one for the active segment (none when its tail cache holds the bytes).
fn fetch(log: &Log, stored: &[Stored], f: Fetch, reads: &mut Reads, ctx: &str) {
    let Fetch { offset, max_bytes, upper, min_one } = f;
    let ctx = format!("{ctx}: offset {offset} max_bytes {max_bytes} upper {upper:?} min_one {min_one}");
    let before = thread_stats().ops;
    let got = log.read(offset, max_bytes, upper, min_one).unwrap_or_else(|e| panic!("{ctx}: {e}"));
    let ops = thread_stats().ops - before;
    let upper = upper.unwrap_or(log.log_end_offset());
    let (seg, pos, want) = kafka_fetch(stored, offset, max_bytes, upper, min_one).expect("below the log end");
    assert!(got.records == want, "{ctx}: {} bytes, want {}", got.records.len(), want.len());
    if !want.is_empty() {
        assert_eq!((got.segment_base_offset, got.position), (seg, pos), "{ctx}");
    }
    let ops = if reads.learning && ops == 2 {
        reads.second_reads += 1;
        1
    } else {
        ops
    };
    if seg == log.active_segment().base_offset() {
        assert!(ops <= 1, "{ctx}: {ops} reads of the active segment");
        if ops == 0 {
            reads.active_none += 1;
        } else {
            reads.active_one += 1;
        }
    } else {
        assert_eq!(ops, 1, "{ctx}: reads of sealed segment {seg}");
    }
}

/// Every offset with `max_bytes` 1 (the batch holding it, whole; with `one_batch`, an index known
/// to have an entry for every batch but a segment's first, reading that batch only, from a
/// segment's third batch on); then from each batch's first, a middle and last offset, small
/// fetches with and without `min_one`, and upper bounds inside sealed and active segments.
fn check(log: &Log, stored: &[Stored], what: &str, one_batch: bool, learning: bool) -> Reads {
    let mut reads = Reads { learning, ..Reads::default() };
    let live: Vec<&Stored> = stored.iter().filter(|s| s.base >= log.log_start_offset()).collect();
    for offset in log.log_start_offset()..log.log_end_offset() {
        let before = thread_stats().bytes_read;
        fetch(log, stored, Fetch { offset, max_bytes: 1, upper: None, min_one: true }, &mut reads, what);
        let read = thread_stats().bytes_read - before;
        let i = stored.iter().position(|s| s.last >= offset).unwrap();
        let third_or_later = i >= 2 && stored[i - 2].segment == stored[i].segment;
        if one_batch && third_or_later {
            // Up to a block more on each side for O_DIRECT's alignment.
            let most = stored[i].bytes.len() as u64 + 2 * 4096;
            assert!(
                read <= most,
                "{what}: offset {offset}: {read} bytes read for a batch of {}",
                stored[i].bytes.len()
            );
        }
    }
    let active = log.active_segment().base_offset();
    let sealed_batch = live.iter().rev().find(|s| s.segment < active).expect("a sealed batch");
    let active_batch = live.iter().rev().find(|s| s.segment == active && s.base > active).expect("an active batch");
    let uppers = [
        None,
        Some(sealed_batch.base),
        Some(sealed_batch.last),
        Some(active_batch.base + (active_batch.last - active_batch.base) / 2),
    ];
    for s in &live {
        for offset in [s.base, (s.base + s.last) / 2, s.last] {
            for max_bytes in [1, 100, 5_000, 20_000] {
                for upper in uppers {
                    if upper.is_some_and(|u| offset >= u) {
                        continue;
                    }
                    for min_one in [true, false] {
                        fetch(log, stored, Fetch { offset, max_bytes, upper, min_one }, &mut reads, what);
                    }
                }
            }
        }
    }
    reads
}

/// Loads every sealed segment's index and opens its file (a reopened log does both on first
/// use, which costs reads of its own).
fn warm(log: &Log) {
    for s in log.segments() {
        if s.size() > 0 {
            log.read(s.base_offset(), 1, None, true).unwrap();
        }
    }
}

fn run(mode: IoMode, sizes: Sizes) {
    let what = format!("{mode} {}", sizes.name);
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let dir = tmp.path().join("topic-0");
    let Some(opts) = options(mode, Recovery::default()) else { return };
    let mut log = Log::open(&dir, opts).unwrap();
    let mut stored = Vec::new();
    fill(&mut log, sizes, 7, &mut stored);
    assert!(log.segments().count() >= 4, "{what}: several segments");
    let dense = sizes.name == "dense";
    let reads = check(&log, &stored, &format!("{what}, as written"), dense, false);
    // The tail cache (1 MiB by default) holds the whole small active segment.
    assert_eq!(reads.active_one, 0, "{what}: the active segment in memory ({reads:?})");

    // Reopened without a rebuild: the indexes as written, their density learned from the
    // fetches' walks (a wrong guess costs one fetch per segment a second read), the active
    // segment's bytes in its file only. Learned, a dense index reads one batch per lookup.
    log.close().unwrap();
    let log = Log::open(&dir, options(mode, Recovery::Clean).unwrap()).unwrap();
    warm(&log);
    let segments = log.segments().count();
    let mut second_reads = 0;
    for pass in 0..2 {
        let reads = check(&log, &stored, &format!("{what}, reopened clean, pass {pass}"), dense && pass == 1, true);
        assert!(reads.active_one > 0, "{what}: the active segment's file was read ({reads:?})");
        second_reads += reads.second_reads;
    }
    assert!(second_reads <= segments, "{what}: {second_reads} second reads, {segments} segments");

    // Reopened with every segment rebuilt.
    log.close().unwrap();
    let mut log = Log::open(&dir, options(mode, Recovery::FromRecoveryPoint(0)).unwrap()).unwrap();
    warm(&log);
    check(&log, &stored, &format!("{what}, rebuilt"), dense, false);

    // A follower's truncation inside the active segment, then more appends: the entries after
    // the cut follow a restarted byte counter.
    let active = log.active_segment().base_offset();
    let cut = stored.iter().rev().find(|s| s.segment == active && s.position > 0).unwrap().base;
    assert!(log.truncate_to(cut).unwrap());
    stored.retain(|s| s.base < cut);
    fill(&mut log, Sizes { batches: sizes.batches / 3, ..sizes }, 11, &mut stored);
    check(&log, &stored, &format!("{what}, truncated and appended"), false, false);
}

#[test]
fn point_lookups_read_once_in_every_mode() {
    for mode in [IoMode::Direct, IoMode::Buffered, IoMode::Sync] {
        for sizes in KINDS {
            run(mode, sizes);
        }
    }
}

/// A segment opened without a rebuild takes its index as dense once its fetches' walks saw
/// enough different gaps between entries that were (the floor entry's batch ending where the
/// next entry's starts). Where a later part of it is not (small batches, several to an entry),
/// the first fetch of an unindexed batch there finds the next entry's batch starting above the
/// offset sought: that fetch reads a second time (from the floor entry) and still returns the
/// right batch, and the segment is taken as sparse from then on (one read per fetch again).
#[test]
fn a_wrong_guess_that_an_index_is_dense_costs_one_fetch_a_second_read() {
    for mode in [IoMode::Direct, IoMode::Buffered, IoMode::Sync] {
        let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
        let dir = tmp.path().join("topic-0");
        let Some(opts) = options(mode, Recovery::default()) else { continue };
        let config = LogConfig { segment_bytes: 1 << 20, ..config() };
        let mut log = Log::open(&dir, LogOptions { config: config.clone(), ..opts }).unwrap();
        let big: Vec<Stored> = (0..24).map(|i| append_stored(&mut log, batch_n(4, T0 + i, 4000), 1)).collect();
        let small: Vec<Stored> = (0..40).map(|i| append_stored(&mut log, batch_n(1, T0 + 100 + i, 300), 1)).collect();
        assert!(big.iter().chain(&small).all(|s| s.segment == 0), "{mode}: one segment");
        log.roll(None).unwrap();
        let mut stored: Vec<Stored> = big.iter().chain(&small).cloned().collect();
        stored.push(append_stored(&mut log, batch_n(1, T0 + 200, 300), 1));
        log.close().unwrap();
        let opts = options(mode, Recovery::Clean).unwrap();
        let log = Log::open(&dir, LogOptions { config, ..opts }).unwrap();
        warm(&log);
        let mut reads = Reads::default();
        let one = |offset| Fetch { offset, max_bytes: 1, upper: None, min_one: true };
        // Learning: a lookup in each large batch from the third on walks over the one before.
        for s in &big[2..] {
            fetch(&log, &stored, one(s.base), &mut reads, &format!("{mode}, learning"));
        }
        // The third small batch has no entry; the next entry is ~13 batches on.
        let y = &small[2];
        let before = thread_stats().ops;
        let got = log.read(y.base, 1, None, true).unwrap();
        assert_eq!(thread_stats().ops - before, 2, "{mode}: the wrong guess read twice");
        assert!(got.records == y.bytes, "{mode}: still the batch holding offset {}", y.base);
        // Taken as sparse now: one read per fetch, from the floor entry.
        for s in &small[3..] {
            fetch(&log, &stored, one(s.base), &mut reads, &format!("{mode}, sparse"));
        }
    }
}
