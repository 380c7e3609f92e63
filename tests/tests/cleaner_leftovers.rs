//! What a log cleaner leaves after a crash is resolved on open as Kafka's LogLoader does:
//! `.cleaned` files are removed, `.swap` files above the lowest `.cleaned` offset (an unfinished
//! split) are removed, and the other swaps replace the segments they cover.

mod common;

use common::*;
use seglog::config::LogConfig;
use seglog::log::Recovery;

fn cfg() -> LogConfig {
    LogConfig { segment_bytes: 700, ..small_config() }
}

fn closed_log() -> (TestLog, std::path::PathBuf, Vec<i64>, Vec<u8>) {
    let mut t = new_log(cfg());
    for i in 0..30 {
        let mut b = batch(&[T0 + i, T0 + i], 60);
        t.log.append_as_leader(&mut b, 0).unwrap();
    }
    let bases = segment_bases(&t.log);
    let all = read_all(&t.log);
    let dir = t.dir();
    (t, dir, bases, all)
}

#[test]
fn a_finished_swap_replaces_the_segments_it_covers() {
    let (t, dir, bases, all) = closed_log();
    assert!(bases.len() >= 4);
    let TestLog { log, clock, tmp } = t;
    log.close().unwrap();
    // The cleaner's output: segments 0 and 1 merged into one file at base 0 (no compaction needed
    // to test the mechanics: the bytes are the same batches).
    let merged =
        [std::fs::read(log_path(&dir, bases[0])).unwrap(), std::fs::read(log_path(&dir, bases[1])).unwrap()].concat();
    std::fs::write(dir.join(format!("{:020}.log.swap", bases[0])), &merged).unwrap();
    let (log, report) = seglog::log::Log::open_with_report(&dir, options(cfg(), &clock, Recovery::Clean)).unwrap();
    let segs = segment_bases(&log);
    assert_eq!(segs[0], bases[0]);
    assert!(!segs.contains(&bases[1]), "segment {} was replaced by the swap", bases[1]);
    assert_eq!(&segs[1..], &bases[2..]);
    assert_eq!(read_all(&log), all, "same batches, one segment fewer");
    assert!(report.files_removed.iter().any(|f| f.starts_with(&format!("{:020}", bases[1]))));
    assert!(snapshot(&dir).keys().all(|n| !n.ends_with(".swap")));
    // The merged segment's index was rebuilt and lookups work across it.
    for o in 0..log.log_end_offset() {
        assert!(!log.read(o, 1, None, true).unwrap().records.is_empty());
    }
    drop(tmp);
}

#[test]
fn cleaned_files_and_an_unfinished_split_are_dropped() {
    let (t, dir, bases, all) = closed_log();
    let TestLog { log, clock, tmp } = t;
    log.close().unwrap();
    let b1 = bases[1];
    std::fs::write(dir.join(format!("{b1:020}.log.cleaned")), b"half-written cleaner output").unwrap();
    std::fs::write(dir.join(format!("{b1:020}.index.cleaned")), b"").unwrap();
    // A swap at or above the lowest .cleaned offset belongs to an unfinished split.
    std::fs::copy(log_path(&dir, bases[2]), dir.join(format!("{:020}.log.swap", bases[2]))).unwrap();
    let (log, report) = seglog::log::Log::open_with_report(&dir, options(cfg(), &clock, Recovery::Clean)).unwrap();
    assert_eq!(segment_bases(&log), bases, "no live segment touched");
    assert_eq!(read_all(&log), all);
    assert_eq!(report.files_removed.len(), 3, "{:?}", report.files_removed);
    assert!(snapshot(&dir).keys().all(|n| !n.ends_with(".swap") && !n.ends_with(".cleaned")));
    drop(tmp);
}
