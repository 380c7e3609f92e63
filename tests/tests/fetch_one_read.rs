//! The fetch path that reads a segment once per fetch (the header walk and the data in one
//! aligned window read, handed back as a view of it): on a real ext4 directory in every I/O mode
//! (tmpfs accepts unaligned O_DIRECT, so it could not catch an alignment bug), fetches from every
//! batch boundary and from inside batches, with every size rule, equal a linear scan of the
//! batches as appended; and a sequential consumer of sealed segments costs one read per fetch,
//! whatever its `max_bytes` (a batch larger than it comes whole, in the same read).

mod common;

use common::*;
use seglog::config::LogConfig;
use seglog::io::thread_stats;
use seglog::log::{Log, LogOptions, Recovery};
use seglog::IoMode;

const LARGE: usize = 200 * 1024;

fn config(index_interval_bytes: u32) -> LogConfig {
    LogConfig {
        segment_bytes: 256 * 1024,
        index_interval_bytes,
        segment_index_bytes: 64 * 1024,
        ..LogConfig::default()
    }
}

/// Batches of scattered sizes (100 B to 40 KiB, never a multiple of a sector, one of 200 KiB),
/// over several segments.
fn fill(log: &mut Log) -> Vec<Stored> {
    let mut rng = Rng::new(7);
    let mut stored = Vec::new();
    for i in 0..160i64 {
        let (n, value_len) =
            if i == 37 { (1, LARGE - 100) } else { (rng.range(1, 6) as usize, rng.range(10, 8000) as usize) };
        let b = batch_n(n, T0 + i, value_len);
        stored.push(append_stored(log, b, 3));
    }
    stored
}

/// Every start offset worth trying: each batch's first and last offset and one inside it.
fn starts(stored: &[Stored]) -> Vec<i64> {
    let mut v: Vec<i64> = stored.iter().flat_map(|s| [s.base, (s.base + s.last) / 2, s.last]).collect();
    v.dedup();
    v
}

fn check_against_reference(log: &Log, stored: &[Stored], what: &str) {
    let leo = log.log_end_offset();
    let uppers = [leo, stored[40].last, stored[41].base, stored[120].base + 1];
    for &offset in &starts(stored) {
        for &max_bytes in &[1u32, 5_000, 40_000, 300_000, u32::MAX] {
            for &upper in &uppers {
                for min_one in [true, false] {
                    let got = log.read(offset, max_bytes, Some(upper), min_one).unwrap();
                    let ctx = format!("{what}: offset {offset} max_bytes {max_bytes} upper {upper} min_one {min_one}");
                    if offset >= upper {
                        assert!(got.records.is_empty(), "{ctx}");
                        continue;
                    }
                    let (seg, pos, want) =
                        kafka_fetch(stored, offset, max_bytes, upper, min_one).expect("below the log end");
                    assert!(got.records == want, "{ctx}: {} bytes, want {}", got.records.len(), want.len());
                    if !want.is_empty() {
                        assert_eq!((got.segment_base_offset, got.position), (seg, pos), "{ctx}");
                    }
                }
            }
        }
    }
}

/// A consumer catching up over the sealed segments (each fetch starting at the previous one's
/// end): the bytes of every sealed batch in order, one read per fetch (counted with
/// `count_reads`) whatever the first batch's size, the bytes a view of that read.
fn catch_up(log: &Log, stored: &[Stored], max_bytes: u32, count_reads: bool) {
    let active = log.active_segment().base_offset();
    let mut next = log.log_start_offset();
    let mut got = Vec::new();
    while next < active {
        let (before, bounced) = (thread_stats().ops, thread_stats().bounced_reads);
        let f = log.read(next, max_bytes, Some(active), true).unwrap();
        let ops = thread_stats().ops - before;
        assert_eq!(thread_stats().bounced_reads, bounced, "fetch at {next}: an aligned read, no bounce buffer");
        assert!(!f.records.is_empty(), "empty fetch at {next}");
        assert!(f.records.is_shared(), "fetch at {next}: a view of the read, not a copy");
        if count_reads {
            assert_eq!(ops, 1, "fetch at {next} (max_bytes {max_bytes}): one read");
        }
        next = batches_in(&f.records).last().unwrap().1.next_offset();
        got.extend_from_slice(&f.records);
    }
    let want: Vec<u8> = stored.iter().filter(|s| s.segment < active).flat_map(|s| s.bytes.clone()).collect();
    assert!(got == want, "caught-up bytes differ ({} vs {})", got.len(), want.len());
}

/// Writes the log with `index_interval_bytes`, reads it, reopens it with `reopen_interval_bytes`
/// (the walk's expected length comes from the configuration, the entries from the files) and
/// reads it again.
fn run(mode: IoMode, index_interval_bytes: u32, reopen_interval_bytes: u32) {
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let dir = tmp.path().join("topic-0");
    let Some(opts) = mode_options(mode, config(index_interval_bytes)) else { return };
    let mut log = Log::open(&dir, opts).unwrap();
    let stored = fill(&mut log);
    assert!(log.segments().count() >= 5, "several segments");
    check_against_reference(&log, &stored, &format!("{mode}, interval {index_interval_bytes}"));
    for max_bytes in [1, 64 * 1024, 1 << 20] {
        catch_up(&log, &stored, max_bytes, true);
    }
    // Reopened after the clean close: sealed segments open their files lazily and load their
    // indexes (as written) from disk.
    log.close().unwrap();
    let opts = mode_options(mode, config(reopen_interval_bytes)).unwrap();
    let log = Log::open(&dir, LogOptions { recovery: Recovery::Clean, ..opts }).unwrap();
    // The first fetch of each segment loads its index; count reads from the second pass.
    catch_up(&log, &stored, 1 << 20, false);
    catch_up(&log, &stored, 1 << 20, true);
    catch_up(&log, &stored, 1, true);
    check_against_reference(&log, &stored, &format!("{mode} reopened, interval {reopen_interval_bytes}"));
}

#[test]
fn fetches_equal_a_linear_scan_in_every_mode() {
    for mode in [IoMode::Direct, IoMode::Buffered, IoMode::Sync] {
        run(mode, 4096, 4096);
    }
}

/// Sparse indexes (one entry per 100 KiB): the walk from the floor entry is long; read back
/// under a 512-byte `index.interval.bytes`, the walk after a segment's last entry is longer than
/// the configuration says it can be and often leaves the first window.
#[test]
fn fetches_with_a_sparse_index_equal_a_linear_scan() {
    for mode in [IoMode::Direct, IoMode::Sync] {
        run(mode, 100 * 1024, 512);
    }
}

/// Results held by the caller keep their bytes while later fetches reuse the thread's buffers.
#[test]
fn held_results_keep_their_bytes() {
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let Some(opts) = mode_options(IoMode::Direct, config(4096)).or_else(|| mode_options(IoMode::Sync, config(4096)))
    else {
        return;
    };
    let mut log = Log::open(tmp.path().join("topic-0"), opts).unwrap();
    let stored = fill(&mut log);
    let held: Vec<_> = stored.iter().map(|s| (s, log.read(s.base, 1, None, true).unwrap())).collect();
    for _ in 0..3 {
        for s in &stored {
            drop(log.read(s.base, 100_000, None, false).unwrap());
        }
    }
    for (s, f) in &held {
        assert!(f.records == s.bytes, "batch at {} changed under its holder", s.base);
    }
}

/// A consumer catching up with catch-up sized fetches (at least 256 KiB) in direct mode: each
/// fetch starts reading the next one's window, and the next fetch takes it. Consumers that seek,
/// hold results or take turns (more of them than the read-ahead slots) get the same bytes as the
/// linear scan.
#[test]
fn read_ahead_serves_a_sequential_consumer() {
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let cfg = LogConfig { segment_bytes: 3 << 20, ..config(4096) };
    let Some(opts) = mode_options(IoMode::Direct, cfg) else { return };
    let mut log = Log::open(tmp.path().join("topic-0"), opts).unwrap();
    let mut stored = Vec::new();
    let mut rng = Rng::new(11);
    while stored.len() < 900 {
        let b = batch_n(rng.range(1, 8) as usize, T0, rng.range(500, 3000) as usize);
        stored.push(append_stored(&mut log, b, 0));
    }
    let active = log.active_segment().base_offset();
    let sealed = log.segments().filter(|s| s.base_offset() < active).count() as u64;
    assert!(sealed >= 2, "several sealed segments");
    let ra = seglog::io::readahead::thread_stats;
    for max_bytes in [256 * 1024, 1 << 20] {
        let (ra0, ops0) = (ra(), thread_stats().ops);
        let mut next = log.log_start_offset();
        let mut got = Vec::new();
        let mut fetches = 0u64;
        while next < active {
            let f = log.read(next, max_bytes, Some(active), true).unwrap();
            next = batches_in(&f.records).last().unwrap().1.next_offset();
            got.extend_from_slice(&f.records);
            fetches += 1;
        }
        let want: Vec<u8> = stored.iter().filter(|s| s.segment < active).flat_map(|s| s.bytes.clone()).collect();
        assert!(got == want, "max_bytes {max_bytes}: caught-up bytes differ");
        let (ra1, ops) = (ra(), thread_stats().ops - ops0);
        // Every fetch but each segment's first is served by the read started by the one before.
        assert_eq!(ra1.used - ra0.used, fetches - sealed, "max_bytes {max_bytes}: {fetches} fetches");
        assert_eq!(ra1.started - ra0.started, ra1.used - ra0.used, "no read-ahead wasted");
        // One device read per fetch: the first of a segment reads, the last starts nothing.
        assert_eq!(ops, fetches, "max_bytes {max_bytes}");
        assert_eq!(seglog::io::readahead::pending(), 0);
    }
    // Seeks, held results and six consumers taking turns (more than the thread's read-ahead
    // slots): the bytes of the linear scan.
    let starts: Vec<i64> = stored.iter().filter(|s| s.segment < active).map(|s| s.base).collect();
    let mut held = Vec::new();
    let mut cursors: Vec<i64> = (0..6).map(|k| starts[k * starts.len() / 6]).collect();
    for step in 0..400usize {
        let c = step % cursors.len();
        if step % 37 == 36 {
            cursors[c] = starts[(step * 7919) % starts.len()]; // a seek
        }
        let at = cursors[c];
        if at >= active {
            continue;
        }
        let f = log.read(at, 300_000, Some(active), true).unwrap();
        let (_, _, want) = kafka_fetch(&stored, at, 300_000, active, true).unwrap();
        assert!(f.records == want, "step {step}: fetch at {at}");
        cursors[c] = batches_in(&f.records).last().unwrap().1.next_offset();
        if step % 5 == 0 {
            held.push((f, want));
        }
    }
    assert!(seglog::io::readahead::pending() <= seglog::io::readahead::SLOTS);
    for (f, want) in &held {
        assert!(f.records == *want, "a held result changed");
    }
}
