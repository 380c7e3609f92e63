//! Log changes other than appends: truncation (follower divergence), DeleteRecords (log start
//! offset), retention by time and by size, and two-phase deletion (`.deleted`, then unlinked
//! after file.delete.delay.ms), with the leader-epoch cache following along.

mod common;

use common::*;
use seglog::config::LogConfig;
use seglog::log::Recovery;

fn cfg() -> LogConfig {
    LogConfig { segment_bytes: 600, index_interval_bytes: 100, ..small_config() }
}

/// Appends `n` batches of 3 records (ts T0 + i*1000), epoch rising every 10 batches.
fn fill(t: &mut TestLog, n: usize) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for i in 0..n {
        let ts = T0 + i as i64 * 1000;
        let mut b = batch(&[ts, ts, ts], 40);
        t.log.append_as_leader(&mut b, (i / 10) as i32).unwrap();
        out.push(b);
    }
    out
}

fn files_with(dir: &std::path::Path, suffix: &str) -> Vec<String> {
    snapshot(dir).into_keys().filter(|n| n.ends_with(suffix)).collect()
}

#[test]
fn truncate_to_removes_offsets_and_later_segments() {
    let mut t = new_log(cfg());
    let batches = fill(&mut t, 40);
    let leo = t.log.log_end_offset();
    assert_eq!(leo, 120);
    assert!(t.log.segments().count() > 4);
    t.log.set_high_watermark(leo);
    // Truncate at a batch boundary in an early segment.
    assert!(t.log.truncate_to(33).unwrap());
    assert_eq!(t.log.log_end_offset(), 33);
    assert_eq!(t.log.high_watermark(), 33);
    assert_eq!(read_all(&t.log), batches[..11].concat());
    assert!(t.log.segments().all(|s| s.base_offset() <= 33));
    // Later segments were renamed .deleted (two-phase), not yet unlinked.
    assert!(!files_with(&t.dir(), ".log.deleted").is_empty());
    // The epoch cache lost the epochs starting at or after 33.
    assert!(t.log.leader_epochs().iter().all(|&(_, o)| o < 33), "{:?}", t.log.leader_epochs());
    // Appends continue from the new end; lookups agree with a scan.
    let mut b = batch(&[T0 + 99_000], 10);
    let info = t.log.append_as_leader(&mut b, 7).unwrap();
    assert_eq!(info.first_offset, 33);
    assert_eq!(t.log.leader_epochs().last(), Some(&(7, 33)));
    // After the delay the .deleted files go.
    t.clock.advance(t.log.config().file_delete_delay_ms);
    t.log.delete_expired_files().unwrap();
    assert!(files_with(&t.dir(), ".deleted").is_empty());
    // And everything survives a reopen.
    let dir = t.dir();
    let expect = read_all(&t.log);
    t.log.close().unwrap();
    let log = open_dir(&dir, cfg(), &t.clock, Recovery::Clean);
    assert_eq!(read_all(&log), expect);
    assert_eq!(log.leader_epochs().last(), Some(&(7, 33)));
}

#[test]
fn truncate_mid_batch_removes_the_whole_batch() {
    let mut t = new_log(cfg());
    let batches = fill(&mut t, 5);
    assert!(t.log.truncate_to(7).unwrap()); // batch 2 holds 6..=8
    assert_eq!(t.log.log_end_offset(), 6);
    assert_eq!(read_all(&t.log), batches[..2].concat());
    // Truncating at or past the end changes nothing.
    assert!(!t.log.truncate_to(6).unwrap());
    assert!(!t.log.truncate_to(100).unwrap());
}

#[test]
fn truncate_below_the_first_segment_starts_over() {
    let mut t = new_log(cfg());
    fill(&mut t, 30);
    t.log.set_high_watermark(90);
    t.log.delete_records(60).unwrap();
    t.log.apply_retention().unwrap();
    let first = t.log.segments().next().unwrap().base_offset();
    assert!(first > 0);
    assert!(t.log.truncate_to(first - 1).unwrap());
    assert_eq!(t.log.log_start_offset(), first - 1);
    assert_eq!(t.log.log_end_offset(), first - 1);
    assert_eq!(t.log.segments().count(), 1);
    assert!(read_all(&t.log).is_empty());
}

#[test]
fn delete_records_moves_the_log_start_and_drops_whole_segments_below_it() {
    let mut t = new_log(cfg());
    fill(&mut t, 40);
    // Not past the high watermark.
    t.log.set_high_watermark(50);
    assert!(matches!(t.log.delete_records(51), Err(seglog::Error::OffsetOutOfRange { .. })));
    let start = t.log.delete_records(45).unwrap();
    assert_eq!(start, 45);
    assert_eq!(t.log.log_start_offset(), 45);
    // Segments wholly below 45 are gone; the one holding 45 stays.
    let first = t.log.segments().next().unwrap().base_offset();
    assert!(first <= 45);
    assert!(t.log.floor_segment(45).is_some());
    // Reads below the start are out of range; from the start they work.
    assert!(matches!(t.log.read(44, 1000, None, true), Err(seglog::Error::OffsetOutOfRange { .. })));
    assert!(!t.log.read(45, 1000, None, true).unwrap().records.is_empty());
    // The epoch cache starts at the new log start.
    assert_eq!(t.log.leader_epochs()[0].1, 45);
    // An append reports the log start it was taken at (a Produce answer carries it).
    let mut b = batch(&[T0 + 40_000], 40);
    assert_eq!(t.log.append_as_leader(&mut b, 4).unwrap().log_start_offset, 45);
}

#[test]
fn retention_by_time_deletes_old_segments_but_never_past_the_high_watermark() {
    let mut t = new_log(LogConfig { retention_ms: 10_000, file_delete_delay_ms: 0, ..cfg() });
    fill(&mut t, 40); // timestamps T0 .. T0 + 39 s
    let before: Vec<i64> = t.log.segments().map(|s| s.base_offset()).collect();
    t.clock.set(T0 + 30_000); // segments whose largest timestamp is before T0 + 20 s are old
                              // High watermark 0: nothing may go.
    t.log.set_high_watermark(0);
    assert!(t.log.apply_retention().unwrap().deleted.is_empty());
    t.log.set_high_watermark(t.log.log_end_offset());
    let r = t.log.apply_retention().unwrap();
    assert!(!r.deleted.is_empty());
    for (b, why) in &r.deleted {
        assert_eq!(*why, "retention.ms");
        let next = before.iter().find(|&&x| x > *b).copied().unwrap();
        // Every record of a deleted segment is older than the retention limit.
        assert!((next - 1) / 3 * 1000 + T0 < T0 + 20_000, "segment {b} had recent records");
    }
    assert_eq!(t.log.log_start_offset(), t.log.segments().next().unwrap().base_offset());
    // file.delete.delay.ms = 0: the files are already unlinked.
    assert!(files_with(&t.dir(), ".deleted").is_empty());
    for (b, _) in &r.deleted {
        assert!(!log_path(&t.dir(), *b).exists());
    }
}

#[test]
fn retention_by_time_of_everything_keeps_an_empty_active_segment() {
    let mut t = new_log(LogConfig { retention_ms: 1_000, file_delete_delay_ms: 0, ..cfg() });
    fill(&mut t, 12);
    let leo = t.log.log_end_offset();
    t.log.set_high_watermark(leo);
    t.clock.set(T0 + 1_000_000);
    let r = t.log.apply_retention().unwrap();
    assert!(!r.deleted.is_empty());
    // Everything went; the log rolled first so an empty active segment remains at the end.
    assert_eq!(t.log.segments().count(), 1);
    assert_eq!(t.log.active_segment().base_offset(), leo);
    assert_eq!(t.log.log_start_offset(), leo);
    assert_eq!(t.log.log_end_offset(), leo);
    let mut b = batch(&[T0 + 1_000_000], 10);
    assert_eq!(t.log.append_as_leader(&mut b, 9).unwrap().first_offset, leo);
}

#[test]
fn retention_by_size_keeps_the_newest_bytes() {
    let mut t = new_log(LogConfig { retention_bytes: 2_000, ..cfg() });
    fill(&mut t, 40);
    t.log.set_high_watermark(t.log.log_end_offset());
    let r = t.log.apply_retention().unwrap();
    assert!(!r.deleted.is_empty());
    assert!(r.deleted.iter().all(|(_, why)| *why == "retention.bytes"));
    // Deleting one more segment would have brought the size under the limit by more than a
    // segment; the log is still over or at the limit minus less than one segment.
    let size = t.log.size_in_bytes() as i64;
    let first = t.log.segments().next().unwrap().size() as i64;
    assert!(size - first < 2_000, "one more segment could have gone: size {size}, first {first}");
    // Two-phase: renamed now, unlinked after the delay.
    assert!(!files_with(&t.dir(), ".log.deleted").is_empty());
    assert!(t.log.pending_deletions() > 0);
    t.clock.advance(60_000);
    t.log.delete_expired_files().unwrap();
    assert_eq!(t.log.pending_deletions(), 0);
    assert!(files_with(&t.dir(), ".deleted").is_empty(), "deleted segments are really gone from disk");
}

#[test]
fn deleted_files_left_by_a_crash_are_removed_on_open() {
    let mut t = new_log(LogConfig { retention_bytes: 2_000, ..cfg() });
    fill(&mut t, 40);
    t.log.set_high_watermark(t.log.log_end_offset());
    t.log.apply_retention().unwrap();
    let dir = t.dir();
    assert!(!files_with(&dir, ".deleted").is_empty());
    let expect = read_all(&t.log);
    drop(t.log); // crash before the delay passed
    let (log, report) =
        seglog::log::Log::open_with_report(&dir, options(cfg(), &t.clock, Recovery::default())).unwrap();
    assert!(!report.files_removed.is_empty());
    assert!(files_with(&dir, ".deleted").is_empty());
    assert_eq!(read_all(&log), expect);
}

#[test]
fn end_offset_for_epoch_answers_like_kafka() {
    let mut t = new_log(cfg());
    fill(&mut t, 25); // epochs 0 (offsets 0..30), 1 (30..60), 2 (60..75)
    assert_eq!(t.log.leader_epochs(), &[(0, 0), (1, 30), (2, 60)]);
    assert_eq!(t.log.end_offset_for_epoch(0), Some((0, 30)));
    assert_eq!(t.log.end_offset_for_epoch(1), Some((1, 60)));
    assert_eq!(t.log.end_offset_for_epoch(2), Some((2, 75)));
    assert_eq!(t.log.end_offset_for_epoch(5), Some((2, 75)));
    // The checkpoint is in Kafka's format.
    let text = std::fs::read_to_string(t.dir().join("leader-epoch-checkpoint")).unwrap();
    assert_eq!(text, "0\n3\n0 0\n1 30\n2 60\n");
}
