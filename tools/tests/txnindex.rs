//! `.txnindex` files against the log's ABORT markers: `verify` finds an entry that is wrong, one
//! that is missing and a file that is gone, naming file and byte; `rebuild-index --write` writes
//! them back byte for byte as the engine wrote them; a log whose first segment's producer state
//! is unknown is not called damaged for it.

mod common;

use common::*;
use seglog::config::LogConfig;
use seglog::format::builder::BatchBuilder;
use seglog::format::filename::{snapshot_file_name, txn_index_file_name};
use seglog::log::{Log, LogOptions, MarkerType, TxnMarker};

fn txn_batch(pid: i64, seq: i32) -> Vec<u8> {
    let mut b = BatchBuilder::new().producer(pid, 0, seq).transactional(true);
    b.push(1_700_000_000_000, Some(&b"k"[..]), Some(&[7u8; 40][..]), &[]);
    b.build().unwrap()
}

/// A partition of small segments holding transactions of three producers, one in three aborted,
/// some spanning rolls, closed cleanly: the `.txnindex` files are the engine's.
fn transactional_partition(dir: &std::path::Path) -> Vec<i64> {
    let config = LogConfig { segment_bytes: 1200, segment_index_bytes: 4096, ..LogConfig::default() };
    let mut log = Log::open(dir, LogOptions { config, ..LogOptions::default() }).unwrap();
    let mut seq = [0i32; 3];
    for i in 0..60 {
        let pid = (i % 3) as i64;
        log.append_as_leader(&mut txn_batch(pid, seq[pid as usize]), 0).unwrap();
        seq[pid as usize] += 1;
        if i % 2 == 1 {
            let kind = if i % 3 == 0 { MarkerType::Abort } else { MarkerType::Commit };
            let m = TxnMarker { producer_id: (i % 3) as i64, producer_epoch: 0, coordinator_epoch: 0, kind };
            log.append_txn_marker(&m, 0).unwrap();
        }
    }
    let bases: Vec<i64> = log.segments().map(|s| s.base_offset()).collect();
    log.close().unwrap();
    bases
}

fn txn_files(dir: &std::path::Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".txnindex"))
        .map(|e| (e.file_name().to_string_lossy().into_owned(), std::fs::read(e.path()).unwrap()))
        .collect();
    v.sort();
    v
}

#[test]
fn verify_and_rebuild_index_check_txnindex_against_the_markers() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("txn-0");
    let bases = transactional_partition(&d);
    let written = txn_files(&d);
    assert!(written.len() >= 3, "aborts in several segments: {written:?}");
    let r = seglog(["verify".as_ref(), d.as_os_str()]);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let r = seglog(["rebuild-index".as_ref(), d.as_os_str()]);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert!(r.stdout.contains(".txnindex same (1 entries)") || r.stdout.contains(".txnindex same (2 entries)"));

    // A wrong first offset in the second entry of one file, and another file gone.
    let (name, bytes) = written.iter().find(|(_, b)| b.len() >= 68).expect("a file with two entries");
    let mut bad = bytes.clone();
    bad[34 + 17] ^= 1;
    std::fs::write(d.join(name), &bad).unwrap();
    let (gone, _) = written.iter().find(|(n, _)| n != name).unwrap();
    std::fs::remove_file(d.join(gone)).unwrap();
    let r = seglog(["verify".as_ref(), "--json".as_ref(), d.as_os_str()]);
    assert_eq!(r.code, 1, "{}", r.stdout);
    let problems = r.json()["partitions"][0]["problems"].as_array().unwrap().clone();
    let txn: Vec<_> = problems.iter().filter(|p| p["kind"] == "txnindex").collect();
    assert_eq!(txn.len(), 2, "{problems:?}");
    assert!(txn.iter().any(|p| p["file"].as_str().unwrap().ends_with(name.as_str()) && p["position"] == 34), "{txn:?}");
    assert!(
        txn.iter().any(|p| p["file"].as_str().unwrap().ends_with(gone.as_str())
            && p["detail"].as_str().unwrap().starts_with("no entry for producer")),
        "{txn:?}"
    );
    let r = seglog(["rebuild-index".as_ref(), d.as_os_str()]);
    assert_eq!(r.code, 1);
    assert_eq!(lines_with(&r.stdout, ".txnindex differs").len(), 2, "{}", r.stdout);
    let r = seglog(["rebuild-index".as_ref(), "--write".as_ref(), d.as_os_str()]);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert_eq!(txn_files(&d), written, "rewritten byte for byte");
    let r = seglog(["verify".as_ref(), d.as_os_str()]);
    assert_eq!(r.code, 0, "{}", r.stdout);

    // The first segment gone (as retention removes it) and no snapshot at the next one: the
    // transactions begun before it are unknown, which is no damage.
    std::fs::remove_file(d.join(format!("{:020}.log", bases[0]))).unwrap();
    for f in ["index", "timeindex", "txnindex"] {
        let _ = std::fs::remove_file(d.join(format!("{:020}.{f}", bases[0])));
    }
    let _ = std::fs::remove_file(d.join(snapshot_file_name(bases[1])));
    let r = seglog(["verify".as_ref(), d.as_os_str()]);
    assert_eq!(r.code, 0, "{}", r.stdout);
    assert!(r.stdout.contains("entries not checked (the log starts at"), "{}", r.stdout);
    let r = seglog(["rebuild-index".as_ref(), "--write".as_ref(), d.as_os_str()]);
    assert_eq!(r.code, 0, "{}", r.stdout);
    assert!(r.stdout.contains(".txnindex not checked: the log starts at"), "{}", r.stdout);
    let left: Vec<_> = written.into_iter().filter(|(n, _)| *n != txn_index_file_name(bases[0])).collect();
    assert_eq!(txn_files(&d), left, "nothing rewritten from a partial replay");
}
