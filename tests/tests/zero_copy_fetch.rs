//! A fetch can be handed to a socket with sendfile: the file range of whole batches, with no copy
//! through user space; and it carries exactly the bytes `read` returns.

use std::io::Read;
use std::os::unix::io::AsRawFd;

use seglog::format::builder::BatchBuilder;
use seglog::io::send_file_range;
use seglog::log::{Log, LogOptions, Writes};
use seglog::LogConfig;

fn batch(i: i64) -> Vec<u8> {
    let mut b = BatchBuilder::new();
    for r in 0..10 {
        b.push(1_700_000_000_000 + i, None, Some(format!("v{i}-{r}").as_bytes()), &[]);
    }
    b.build().unwrap()
}

#[test]
fn file_range_matches_read_and_sends_over_a_socket() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig { segment_bytes: 4096, ..LogConfig::default() };
    let mut log = Log::open(dir.path(), LogOptions { config, ..seglog_tests::log_options() }).unwrap();
    for i in 0..50 {
        log.append_as_leader(&mut batch(i), 0).unwrap();
    }
    // A file range is for bytes in the file: the last appends may still be in memory only.
    log.finish_writes().unwrap();
    assert!(log.segments().count() > 2, "several segments");
    if seglog_tests::test_storage().mode() == seglog::IoMode::Direct {
        // O_DIRECT files bypass the page cache: there is nothing for sendfile to send from.
        assert!(log.read_file_range(0, 1000, None, true).unwrap().is_none());
        return;
    }
    for start in [0i64, 5, 10, 123, 300, 499] {
        let read = log.read(start, 1000, None, true).unwrap();
        let range = log.read_file_range(start, 1000, None, true).unwrap().expect("written bytes have a file range");
        assert_eq!(range.position, read.position);
        assert_eq!(range.len as usize, read.records.len(), "start {start}");
        let (mut a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        let sent = send_file_range(b.as_raw_fd(), &*range.file, range.position as u64, range.len as u64).unwrap();
        drop(b);
        let mut got = Vec::new();
        a.read_to_end(&mut got).unwrap();
        assert_eq!(sent as usize, got.len());
        assert_eq!(got, read.records, "start {start}");
    }
    // At the log end there is nothing to send.
    assert!(log.read_file_range(log.log_end_offset(), 1000, None, true).unwrap().is_none());
}

#[test]
fn unwritten_tail_has_no_file_range() {
    let dir = tempfile::tempdir().unwrap();
    let options = LogOptions { writes: Writes::Caller, ..seglog_tests::log_options() };
    let mut log = Log::open(dir.path(), options).unwrap();
    log.append_as_leader(&mut batch(0), 0).unwrap();
    assert!(log.unwritten_bytes() > 0);
    assert!(log.read_file_range(0, 1 << 20, None, true).unwrap().is_none());
    // Nor does a read see it: its write may still fail (docs/durability.md, "Visibility").
    assert!(log.read(0, 1 << 20, None, true).unwrap().records.is_empty());
    log.flush().unwrap();
    // Once written, the tail cache serves it.
    assert!(!log.read(0, 1 << 20, None, true).unwrap().records.is_empty());
    let direct = seglog_tests::test_storage().mode() == seglog::IoMode::Direct;
    assert_eq!(log.read_file_range(0, 1 << 20, None, true).unwrap().is_some(), !direct);
}
