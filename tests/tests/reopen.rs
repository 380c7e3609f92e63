//! Reopening a partition directory (Kafka's `LogLoader`): after a clean close, with or without
//! recovery, the log is the same (offsets, segments, index bytes, fetches); after a crash
//! (the Log dropped without close, its active index files still preallocated and unwritten)
//! recovery rebuilds the indexes; a torn tail is cut at the last valid batch and later segments
//! are removed; missing indexes are rebuilt; leftover `.deleted` / `.cleaned` / orphan index files
//! are removed; and every index file equals what Kafka's per-batch rule produces.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::*;
use seglog::config::{LogConfig, ManualClock};
use seglog::log::{ListOffset, LoadReport, Log, Recovery};

fn config(interval: u32) -> LogConfig {
    LogConfig {
        segment_bytes: 6_000,
        index_interval_bytes: interval,
        segment_index_bytes: 4_096,
        ..LogConfig::default()
    }
}

/// Appends `appends` random leader batches (1-5 records, out-of-order timestamps, 0-300 byte
/// values) and returns the bytes appended.
fn fill(log: &mut Log, seed: u64, appends: usize) -> Vec<u8> {
    let mut rng = Rng::new(seed);
    let mut stored = Vec::new();
    for i in 0..appends {
        let n = rng.range(1, 6) as usize;
        let ts: Vec<i64> = (0..n).map(|_| T0 + 20 * i as i64 + rng.range(-500, 500)).collect();
        let mut b = batch(&ts, rng.range(0, 300) as usize);
        log.append_as_leader(&mut b, 1 + (i / 40) as i32).unwrap();
        stored.extend_from_slice(&b);
    }
    stored
}

fn open_report(dir: &Path, config: LogConfig, clock: &Arc<ManualClock>, recovery: Recovery) -> (Log, LoadReport) {
    Log::open_with_report(dir, options(config, clock, recovery)).unwrap()
}

/// (log start, log end, segments, per-segment (offset index, time index) bytes, a fetch from
/// every offset).
type Observable = (i64, i64, Vec<seglog::log::SegmentInfo>, Vec<(Vec<u8>, Vec<u8>)>, Vec<Vec<u8>>);

/// What a reader sees: offsets, segments, in-memory indexes and a fetch from every offset.
fn observable(log: &Log) -> Observable {
    let indexes =
        log.segments().map(|s| (s.offset_index().as_bytes().to_vec(), s.time_index().as_bytes().to_vec())).collect();
    let fetches = (log.log_start_offset()..log.log_end_offset())
        .map(|o| log.read(o, 1_000, None, true).unwrap().records.into_vec())
        .collect();
    (log.log_start_offset(), log.log_end_offset(), log.segment_infos(), indexes, fetches)
}

/// Every segment's on-disk indexes equal Kafka's rule over its `.log` (one writing session).
fn assert_indexes_on_disk_match_kafka(dir: &Path, bases: &[i64], interval: u32, what: &str) {
    for &base in bases {
        let log_bytes = std::fs::read(log_path(dir, base)).unwrap();
        let (idx, tidx) = kafka_indexes(base, &batch_metas(&log_bytes), interval, true);
        assert_eq!(std::fs::read(index_path(dir, base)).unwrap(), idx, "{what}: {base}.index");
        assert_eq!(std::fs::read(time_index_path(dir, base)).unwrap(), tidx, "{what}: {base}.timeindex");
    }
}

/// Every segment's in-memory indexes equal Kafka's rule over its `.log` (one writing session;
/// the final time-index entry written by roll, close or recovery is in every sealed segment, and
/// in the active one when `active_final`).
fn assert_indexes_in_memory_match_kafka(log: &Log, interval: u32, active_final: bool, what: &str) {
    let active = log.active_segment().base_offset();
    for s in log.segments() {
        let log_bytes = segment_bytes(log, s.base_offset());
        let final_entry = s.base_offset() != active || active_final;
        let (idx, tidx) = kafka_indexes(s.base_offset(), &batch_metas(&log_bytes), interval, final_entry);
        assert_eq!(s.offset_index().as_bytes(), &idx[..], "{what}: segment {}", s.base_offset());
        assert_eq!(s.time_index().as_bytes(), &tidx[..], "{what}: segment {}", s.base_offset());
    }
}

#[test]
fn clean_and_recovering_reopens_give_the_same_log() {
    let mut t = new_log(config(300));
    let stored = fill(&mut t.log, 1, 120);
    let dir = t.dir();
    let clock = t.clock.clone();
    let bases = segment_bases(&t.log);
    assert!(bases.len() >= 4, "{bases:?}");
    let expected = observable(&t.log);
    t.log.close().unwrap();
    let closed = snapshot(&dir);
    assert_indexes_on_disk_match_kafka(&dir, &bases, 300, "after close");

    // Reopen and close again without appending: nothing changes on disk.
    let log = open_dir(&dir, config(300), &clock, Recovery::Clean);
    assert_eq!(observable(&log), expected);
    log.close().unwrap();
    assert_eq!(snapshot(&dir), closed);

    let dir_b = t.tmp.path().join("copy-0");
    copy_dir(&dir, &dir_b);
    let (mut a, report_a) = open_report(&dir, config(300), &clock, Recovery::Clean);
    let (mut b, report_b) = open_report(&dir_b, config(300), &clock, Recovery::default());
    assert_eq!(report_a.segments_recovered, 0);
    assert_eq!(report_b.segments_recovered, bases.len());
    assert!(report_b.truncations.is_empty());
    assert_eq!(observable(&a), expected);
    assert_eq!(observable(&b), expected);
    assert_eq!(read_all(&a), stored);
    assert_eq!(a.recovery_point(), a.log_end_offset());
    assert_eq!(b.recovery_point(), 0);
    // Same files too (the active segment's indexes preallocated again in both).
    assert_eq!(snapshot_digest(&dir), snapshot_digest(&dir_b));
    assert_eq!(file_len(&index_path(&dir, *bases.last().unwrap())), 4_096);
    assert_eq!(file_len(&time_index_path(&dir, *bases.last().unwrap())), 4_092);

    // The same appends after either reopen give the same files.
    let leo = a.log_end_offset();
    let more_a = fill(&mut a, 2, 60);
    let more_b = fill(&mut b, 2, 60);
    assert_eq!(more_a, more_b);
    assert_eq!(decode(&more_a)[0].offset, leo);
    a.close().unwrap();
    b.close().unwrap();
    assert_eq!(snapshot_digest(&dir), snapshot_digest(&dir_b));
}

#[test]
fn appends_after_a_reopen_restart_the_index_byte_counter() {
    // Kafka's LogSegment starts bytesSinceLastIndexEntry at 0 when it opens a segment, and a
    // close leaves the final time-index entry: the active segment's indexes reflect both.
    let interval = 500;
    let cfg = LogConfig { segment_bytes: 1_000_000, ..config(interval) };
    let mut t = new_log(cfg.clone());
    let dir = t.dir();
    let clock = t.clock.clone();
    fill(&mut t.log, 3, 30);
    t.log.close().unwrap();
    let reopened_at = file_len(&log_path(&dir, 0)) as u32;
    let mut log = open_dir(&dir, cfg.clone(), &clock, Recovery::Clean);
    fill(&mut log, 4, 30);
    log.close().unwrap();
    let log_bytes = std::fs::read(log_path(&dir, 0)).unwrap();
    let (idx, tidx) = kafka_indexes_sessions(0, &batch_metas(&log_bytes), interval, &[reopened_at], true);
    assert_eq!(std::fs::read(index_path(&dir, 0)).unwrap(), idx);
    assert_eq!(std::fs::read(time_index_path(&dir, 0)).unwrap(), tidx);
}

#[test]
fn a_crash_without_close_is_recovered() {
    let cfg = LogConfig { segment_bytes: 40_000, ..LogConfig::default() };
    let mut t = new_log(cfg.clone());
    let stored = fill(&mut t.log, 5, 300);
    let dir = t.dir();
    let clock = t.clock.clone();
    let leo = t.log.log_end_offset();
    let bases = segment_bases(&t.log);
    let active = *bases.last().unwrap();
    let active_size = t.log.active_segment().size() as u64;
    assert!(bases.len() >= 3, "{bases:?}");
    drop(t.log);
    // The active segment's indexes were never trimmed: still 10 MiB, preallocated.
    assert_eq!(file_len(&index_path(&dir, active)), 10 * 1024 * 1024);
    assert_eq!(file_len(&time_index_path(&dir, active)), 10 * 1024 * 1024 - 4);
    let crashed = tempfile::tempdir().unwrap();
    copy_dir(&dir, crashed.path());

    let (mut log, report) = open_report(&dir, cfg.clone(), &clock, Recovery::default());
    assert_eq!(report.segments_recovered, bases.len());
    // Nothing valid is cut. (In direct I/O mode the active file is padded with zeros to the
    // alignment until close: recovery cuts exactly that padding.)
    for (path, valid, _, _) in &report.truncations {
        assert_eq!((path, *valid), (&log_path(&dir, active), active_size), "{:?}", report.truncations);
    }
    assert_eq!(log.log_end_offset(), leo);
    assert_eq!(segment_bases(&log), bases);
    assert_eq!(read_all(&log), stored);
    assert_indexes_in_memory_match_kafka(&log, 4_096, true, "recovered");
    let more = fill(&mut log, 6, 20);
    assert_eq!(decode(&more)[0].offset, leo);
    assert_eq!(read_all(&log), [stored.clone(), more].concat());
    log.close().unwrap();
    let sealed = &bases[..bases.len() - 1];
    assert_indexes_on_disk_match_kafka(&dir, sealed, 4_096, "sealed after recovery");

    // Recovering from a recovery point revalidates only the segments holding offsets at or
    // above it.
    let (log, report) = open_report(crashed.path(), cfg, &clock, Recovery::FromRecoveryPoint(active));
    assert_eq!(report.segments_recovered, 1);
    assert_eq!(log.log_end_offset(), leo);
    assert_eq!(log.recovery_point(), active);
    assert_eq!(read_all(&log), stored);
}

/// A filled, closed log: (temporary directory holder, log dir, clock, bytes appended, segment
/// base offsets).
fn closed_log(
    interval: u32,
    seed: u64,
    appends: usize,
) -> (tempfile::TempDir, PathBuf, Arc<ManualClock>, Vec<u8>, Vec<i64>) {
    let mut t = new_log(config(interval));
    let stored = fill(&mut t.log, seed, appends);
    let dir = t.dir();
    let bases = segment_bases(&t.log);
    let TestLog { tmp, clock, log } = t;
    log.close().unwrap();
    (tmp, dir, clock, stored, bases)
}

/// The stored batches of `stored` whose end is at or below `keep_bytes` of the last segment.
fn cut_tail_expectation(stored: &[u8], last_segment_start: usize, valid_in_last: usize) -> Vec<u8> {
    stored[..last_segment_start + valid_in_last].to_vec()
}

fn torn_tail_case(what: &str, damage: impl Fn(&Path, &[u8])) {
    let (_tmp, dir, clock, stored, bases) = closed_log(200, 7, 100);
    let last = *bases.last().unwrap();
    let last_bytes = std::fs::read(log_path(&dir, last)).unwrap();
    let last_start = stored.len() - last_bytes.len();
    damage(&log_path(&dir, last), &last_bytes);
    let damaged_len = file_len(&log_path(&dir, last)) as usize;

    let (mut log, report) = open_report(&dir, config(200), &clock, Recovery::default());
    // The valid prefix: whole batches of the original file that are still intact.
    let damaged = std::fs::read(log_path(&dir, last)).unwrap();
    let mut valid = 0;
    for (pos, h) in batches_in(&last_bytes) {
        let end = pos + h.size_in_bytes() as usize;
        if end <= damaged.len() && damaged[pos..end] == last_bytes[pos..end] {
            valid = end;
        } else {
            break;
        }
    }
    let kept = cut_tail_expectation(&stored, last_start, valid);
    assert_eq!(report.truncations.len(), 1, "{what}: {:?}", report.truncations);
    let (path, valid_bytes, cut, _) = &report.truncations[0];
    assert_eq!(path, &log_path(&dir, last), "{what}");
    assert_eq!((*valid_bytes as usize, *cut as usize), (valid, damaged_len - valid), "{what}");
    assert_eq!(file_len(&log_path(&dir, last)) as usize, valid, "{what}");
    let expected_leo = batches_in(&kept).last().unwrap().1.next_offset();
    assert_eq!(log.log_end_offset(), expected_leo, "{what}");
    assert_eq!(read_all(&log), kept, "{what}");
    // Appends continue right after the last valid batch, with contiguous offsets.
    let more = fill(&mut log, 8, 10);
    let offsets: Vec<i64> = decode(&more).iter().map(|r| r.offset).collect();
    assert_eq!(offsets, (expected_leo..expected_leo + offsets.len() as i64).collect::<Vec<_>>(), "{what}");
    assert_eq!(read_all(&log), [kept, more].concat(), "{what}");
    log.close().unwrap();
    // And the result reopens cleanly, without recovery work.
    let (log, report) = open_report(&dir, config(200), &clock, Recovery::default());
    assert!(report.truncations.is_empty(), "{what}");
    assert_indexes_in_memory_match_kafka(&log, 200, true, what);
}

#[test]
fn a_log_cut_mid_batch_is_truncated_to_the_last_whole_batch() {
    for cut in [1usize, 10, 60, 61, 100] {
        torn_tail_case(&format!("cut {cut}"), |p, bytes| {
            let f = std::fs::OpenOptions::new().write(true).open(p).unwrap();
            f.set_len((bytes.len() - cut) as u64).unwrap();
        });
    }
}

#[test]
fn zeros_after_the_last_batch_are_cut() {
    for zeros in [5usize, 16, 17, 61, 4_096] {
        torn_tail_case(&format!("{zeros} zeros"), |p, bytes| {
            let f = std::fs::OpenOptions::new().write(true).open(p).unwrap();
            f.set_len((bytes.len() + zeros) as u64).unwrap();
        });
    }
    // Zeros in place of the last batch (a preallocated file after a crash).
    torn_tail_case("zeroed last batch", |p, bytes| {
        let last = batches_in(bytes).last().unwrap().0;
        let mut b = bytes.to_vec();
        b[last..].fill(0);
        std::fs::write(p, b).unwrap();
    });
}

#[test]
fn garbage_after_the_last_batch_is_cut() {
    let mut rng = Rng::new(99);
    let random: Vec<u8> = (0..1_000).map(|_| rng.next() as u8).collect();
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("random", random),
        ("0xff", vec![0xff; 300]),
        ("huge length", {
            let mut g = vec![0u8; 80];
            g[8..12].copy_from_slice(&i32::MAX.to_be_bytes());
            g[16] = 2;
            g
        }),
        ("plausible header, bad crc", {
            let mut g = batch_n(2, T0, 10);
            let n = g.len();
            g[n - 1] ^= 1;
            g
        }),
    ];
    for (what, garbage) in cases {
        torn_tail_case(what, |p, bytes| {
            std::fs::write(p, [bytes, &garbage[..]].concat()).unwrap();
        });
    }
}

#[test]
fn zeros_after_a_crash_are_cut() {
    let cfg = config(100);
    let mut t = new_log(cfg.clone());
    let stored = fill(&mut t.log, 12, 50);
    let dir = t.dir();
    let clock = t.clock.clone();
    let leo = t.log.log_end_offset();
    let active = *segment_bases(&t.log).last().unwrap();
    drop(t.log);
    let f = std::fs::OpenOptions::new().write(true).open(log_path(&dir, active)).unwrap();
    let len = f.metadata().unwrap().len();
    f.set_len(len + 8_192).unwrap();
    let (mut log, report) = open_report(&dir, cfg, &clock, Recovery::default());
    assert_eq!(report.truncations.len(), 1);
    assert_eq!(log.log_end_offset(), leo);
    assert_eq!(read_all(&log), stored);
    assert_indexes_in_memory_match_kafka(&log, 100, true, "after crash");
    let mut b = batch(&[T0], 3);
    assert_eq!(log.append_as_leader(&mut b, 1).unwrap().first_offset, leo);
}

#[test]
fn segments_after_a_truncated_one_are_removed() {
    let (_tmp, dir, clock, stored, bases) = closed_log(200, 13, 150);
    assert!(bases.len() >= 4, "{bases:?}");
    // Corrupt the second batch of the second segment.
    let victim = bases[1];
    let bytes = std::fs::read(log_path(&dir, victim)).unwrap();
    let batches = batches_in(&bytes);
    let (pos, h) = batches[1];
    let mut damaged = bytes.clone();
    damaged[pos + h.size_in_bytes() as usize - 1] ^= 0x40;
    std::fs::write(log_path(&dir, victim), &damaged).unwrap();

    let (mut log, report) = open_report(&dir, config(200), &clock, Recovery::default());
    assert_eq!(segment_bases(&log), vec![bases[0], victim]);
    assert_eq!(report.segments_removed, bases[2..].to_vec());
    assert_eq!(report.truncations.len(), 1);
    for &gone in &bases[2..] {
        assert!(!log_path(&dir, gone).exists());
        assert!(!index_path(&dir, gone).exists());
        assert!(!time_index_path(&dir, gone).exists());
    }
    let first_len = file_len(&log_path(&dir, bases[0])) as usize;
    let kept = stored[..first_len + pos].to_vec();
    assert_eq!(log.log_end_offset(), h.base_offset);
    assert_eq!(read_all(&log), kept);
    let mut b = batch(&[T0], 3);
    assert_eq!(log.append_as_leader(&mut b, 1).unwrap().first_offset, h.base_offset);
}

#[test]
fn missing_index_files_are_rebuilt_as_they_were_written() {
    let (tmp, dir, clock, _stored, bases) = closed_log(250, 17, 120);
    let closed = snapshot(&dir);
    let sealed = bases[1];
    let active = *bases.last().unwrap();
    let cases: Vec<(&str, Vec<std::path::PathBuf>, Recovery)> = vec![
        ("both indexes, recovery", vec![index_path(&dir, sealed), time_index_path(&dir, sealed)], Recovery::default()),
        ("offset index, recovery", vec![index_path(&dir, sealed)], Recovery::default()),
        ("time index, recovery", vec![time_index_path(&dir, sealed)], Recovery::default()),
        (
            "active indexes, recovery",
            vec![index_path(&dir, active), time_index_path(&dir, active)],
            Recovery::default(),
        ),
        ("both indexes, clean", vec![index_path(&dir, sealed), time_index_path(&dir, sealed)], Recovery::Clean),
        ("offset index, clean", vec![index_path(&dir, sealed)], Recovery::Clean),
        ("active offset index, clean", vec![index_path(&dir, active)], Recovery::Clean),
    ];
    for (i, (what, remove, recovery)) in cases.into_iter().enumerate() {
        let copy = tmp.path().join(format!("case-{i}"));
        copy_dir(&dir, &copy);
        for p in &remove {
            std::fs::remove_file(copy.join(p.file_name().unwrap())).unwrap();
        }
        let (log, report) = open_report(&copy, config(250), &clock, recovery);
        assert!(report.indexes_rebuilt >= 1, "{what}");
        assert!(report.truncations.is_empty(), "{what}");
        assert_indexes_in_memory_match_kafka(&log, 250, true, what);
        log.close().unwrap();
        let after = snapshot(&copy);
        assert_eq!(after.keys().collect::<Vec<_>>(), closed.keys().collect::<Vec<_>>(), "{what}");
        for (name, bytes) in &closed {
            assert!(after[name] == *bytes, "{what}: {name} differs");
        }
    }
}

#[test]
fn with_a_clean_shutdown_a_missing_time_index_is_rebuilt() {
    // Kafka recreates a missing time index empty (LogSegment.sanityCheck with
    // timeIndexFileNewlyCreated) and falls back to scans and file times. seglog's stronger sanity
    // check sees an empty time index over timestamped batches and rebuilds it, so lookups keep
    // their answers everywhere (not only up to the segment's largest timestamp).
    let (_tmp, dir, clock, _stored, bases) = closed_log(250, 19, 120);
    let sealed = bases[1];
    let original = std::fs::read(time_index_path(&dir, sealed)).unwrap();
    let targets: Vec<i64> = (T0 - 1_000..=T0 + 10_000).step_by(37).collect();
    let lookups = |log: &Log| -> Vec<_> {
        targets.iter().map(|&x| log.offset_for_time(ListOffset::Timestamp(x)).unwrap()).collect()
    };
    let log = open_dir(&dir, config(250), &clock, Recovery::Clean);
    let before = lookups(&log);
    log.close().unwrap();
    std::fs::remove_file(time_index_path(&dir, sealed)).unwrap();
    let log = open_dir(&dir, config(250), &clock, Recovery::Clean);
    assert_eq!(lookups(&log), before);
    log.close().unwrap();
    assert_eq!(std::fs::read(time_index_path(&dir, sealed)).unwrap(), original);
}

#[test]
fn leftover_and_orphan_files_are_removed() {
    let (_tmp, dir, clock, stored, bases) = closed_log(300, 23, 80);
    let closed = snapshot(&dir);
    let s = |b: i64, ext: &str| format!("{b:020}.{ext}");
    let removed = vec![
        s(bases[0], "log.deleted"),
        s(bases[1], "index.deleted"),
        s(bases[1], "timeindex.deleted"),
        s(bases[1], "txnindex.deleted"),
        s(7, "log.cleaned"),
        s(7, "index.cleaned"),
        s(7, "timeindex.cleaned"),
        s(999_999, "index"),
        s(999_999, "timeindex"),
        s(999_999, "txnindex"),
        s(1, "index"),
    ];
    let kept = vec![
        "partition.metadata".to_string(),
        // A stray producer snapshot older than the newest: not read, so left alone.
        s(bases[1] + 1, "snapshot"),
        "00000000000000000000-0000000000.checkpoint.deleted".to_string(),
    ];
    for recovery in [Recovery::Clean, Recovery::default()] {
        for name in removed.iter().chain(&kept) {
            std::fs::write(dir.join(name), b"leftover").unwrap();
        }
        let (log, report) = open_report(&dir, config(300), &clock, recovery);
        let mut reported = report.files_removed.clone();
        reported.sort();
        let mut want = removed.clone();
        want.sort();
        assert_eq!(reported, want, "{recovery:?}");
        for name in &removed {
            assert!(!dir.join(name).exists(), "{recovery:?}: {name} still there");
        }
        for name in &kept {
            assert!(dir.join(name).exists(), "{recovery:?}: {name} was removed");
        }
        assert_eq!(segment_bases(&log), bases);
        assert_eq!(read_all(&log), stored);
        log.close().unwrap();
        for name in &kept {
            std::fs::remove_file(dir.join(name)).unwrap();
        }
        assert_eq!(snapshot(&dir), closed, "{recovery:?}");
    }
    // A damaged leader-epoch checkpoint is rebuilt from the batches' leader epochs.
    let good = std::fs::read(dir.join("leader-epoch-checkpoint")).unwrap();
    std::fs::write(dir.join("leader-epoch-checkpoint"), b"leftover").unwrap();
    let (log, report) = open_report(&dir, config(300), &clock, Recovery::Clean);
    assert!(report.epoch_cache_rebuilt.is_some());
    drop(log);
    assert_eq!(std::fs::read(dir.join("leader-epoch-checkpoint")).unwrap(), good);
}

#[test]
fn index_files_are_byte_identical_to_kafkas_rule() {
    for (seed, interval) in [(31u64, 0u32), (32, 1), (33, 150), (34, 1_000), (35, 4_096)] {
        let mut t = new_log(config(interval));
        fill(&mut t.log, seed, 150);
        // Some follower batches too (compressed, with a gap).
        let leo = t.log.log_end_offset();
        let z = build(
            seglog::format::builder::BatchBuilder::new()
                .compression(seglog::format::Compression::Zstd)
                .base_offset(leo + 5)
                .partition_leader_epoch(9),
            &[T0 + 10_000, T0 + 9_000],
            400,
        );
        t.log.append_as_follower(&z).unwrap();
        let dir = t.dir();
        let bases = segment_bases(&t.log);
        assert_indexes_in_memory_match_kafka(&t.log, interval, false, &format!("seed {seed} live"));
        t.log.close().unwrap();
        assert_indexes_on_disk_match_kafka(&dir, &bases, interval, &format!("seed {seed} closed"));
    }
}

#[test]
fn the_log_start_offset_checkpoint_is_honoured() {
    let (_tmp, dir, clock, _stored, bases) = closed_log(300, 41, 60);
    let log = open_dir(&dir, config(300), &clock, Recovery::Clean);
    let leo = log.log_end_offset();
    log.close().unwrap();
    // Inside the log: the log start moves up (reads below it are out of range).
    let mut opts = options(config(300), &clock, Recovery::Clean);
    opts.log_start_offset = Some(leo / 2);
    let log = Log::open(&dir, opts).unwrap();
    assert_eq!((log.log_start_offset(), log.log_end_offset()), (leo / 2, leo));
    assert_eq!(segment_bases(&log), bases);
    log.close().unwrap();
    // Below the first segment: the first segment's base offset.
    let mut opts = options(config(300), &clock, Recovery::Clean);
    opts.log_start_offset = Some(-5);
    let log = Log::open(&dir, opts).unwrap();
    assert_eq!(log.log_start_offset(), 0);
    log.close().unwrap();
    // A new, empty directory starts at the checkpointed log start offset.
    let fresh = dir.with_file_name("topic-1");
    let mut opts = options(config(300), &clock, Recovery::default());
    opts.log_start_offset = Some(1_234);
    let mut log = Log::open(&fresh, opts).unwrap();
    assert_eq!((log.log_start_offset(), log.log_end_offset()), (1_234, 1_234));
    assert_eq!(segment_bases(&log), vec![1_234]);
    assert_eq!(log.append_as_leader(&mut batch(&[T0], 3), 0).unwrap().first_offset, 1_234);
}

/// Kafka's `LogLoader.recoverLog`: when the log end offset is below the log-start-offset
/// checkpoint (segment files were deleted behind Kafka's back), every segment is deleted and the
/// log restarts empty at the checkpointed log start offset.
#[test]
fn a_log_start_offset_above_the_log_end_restarts_the_log_there() {
    let (_tmp, dir, clock, _stored, bases) = closed_log(300, 43, 60);
    let log = open_dir(&dir, config(300), &clock, Recovery::Clean);
    let leo = log.log_end_offset();
    log.close().unwrap();
    let start = leo + 100;
    let mut opts = options(config(300), &clock, Recovery::default());
    opts.log_start_offset = Some(start);
    let mut log = Log::open(&dir, opts).unwrap();
    assert_eq!((log.log_start_offset(), log.log_end_offset()), (start, start));
    assert_eq!(segment_bases(&log), vec![start]);
    for b in bases {
        assert!(!log_path(&dir, b).exists(), "segment {b} kept");
    }
    assert_eq!(log.append_as_leader(&mut batch(&[T0], 3), 0).unwrap().first_offset, start);
}
