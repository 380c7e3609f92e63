//! `seglog verify`: the whole fixtures tree is clean; a flipped bit, a torn tail and a broken
//! index are damage named by file and byte position; a missing index and unknown files are
//! notes, not damage; a directory seglog wrote verifies clean.

mod common;

use common::*;

#[test]
fn whole_fixture_tree_is_clean() {
    let r = seglog(["verify".as_ref(), pinterest().as_os_str()]);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("Summary: 5 partitions, 148 segments, 39793 batches, 70928 records"), "{}", r.stdout);
    assert!(r.stdout.contains("; 0 problems,"));
    assert!(r.stdout.contains("00000000000000000000.wm: unknown file (not Kafka's), ignored"));
    assert!(r.stdout.contains("test_topic_a-1: 36 segments"), "{}", r.stdout);
    assert!(r.stdout.contains("time indexes: 36 exact-record-offset"));
    assert!(r.stderr.is_empty(), "no progress bar when stderr is not a terminal: {}", r.stderr);

    let j = seglog(["verify".as_ref(), "--json".as_ref(), pinterest().as_os_str()]).json();
    assert_eq!(j["ok"], true);
    assert_eq!(j["totals"]["segments"], 148);
    assert_eq!(j["totals"]["partitions"], 5);
    assert_eq!(j["totals"]["problems"], 0);
}

#[test]
fn flipped_bit_in_a_payload_is_named_by_file_and_batch_position() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("test_topic_a-1");
    copy_dir(&ts_consumer(1), &d);
    let log = d.join("00000000000000000000.log");
    let mut bytes = std::fs::read(&log).unwrap();
    // The second batch starts at byte 4065 (4003 bytes); flip a bit in its records.
    bytes[4065 + 1000] ^= 0x08;
    std::fs::write(&log, &bytes).unwrap();
    let r = seglog(["verify".as_ref(), d.as_os_str()]);
    assert_eq!(r.code, 1, "{}", r.stdout);
    let damage = lines_with(&r.stdout, "DAMAGE");
    assert_eq!(damage.len(), 1, "{}", r.stdout);
    assert!(damage[0].contains("00000000000000000000.log at byte 4065: CRC-32C mismatch"), "{}", damage[0]);
    assert!(damage[0].contains("offsets 73..=142"));
    assert!(r.stdout.contains("1 problems"));

    let j = seglog(["verify".as_ref(), "--json".as_ref(), d.as_os_str()]).json();
    let p = &j["partitions"][0]["problems"][0];
    assert_eq!(p["kind"], "crc");
    assert_eq!(p["position"], 4065);
    assert!(p["file"].as_str().unwrap().ends_with("00000000000000000000.log"));
}

#[test]
fn truncated_log_is_a_torn_tail_at_the_cut_batch() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("timeindex_test-0");
    copy_dir(&ts_common(), &d);
    // Single-record batches of 138 bytes: cut the 8th batch (at byte 966) in the middle.
    let log = d.join("00000000000000022964.log");
    let f = std::fs::OpenOptions::new().write(true).open(&log).unwrap();
    f.set_len(966 + 50).unwrap();
    drop(f);
    let r = seglog(["verify".as_ref(), "--quiet".as_ref(), d.as_os_str()]);
    assert_eq!(r.code, 1, "{}", r.stdout);
    assert!(
        r.stdout.contains("00000000000000022964.log at byte 966: torn tail at byte 966: partial batch of 50 bytes"),
        "{}",
        r.stdout
    );
    // The index entries past the cut point are damage too, summarised after five.
    assert!(r.stdout.contains("00000000000000022964.index: ... and "), "{}", r.stdout);
    let j = seglog(["verify".as_ref(), "--json".as_ref(), d.as_os_str()]).json();
    let torn: Vec<_> = j["partitions"][0]["problems"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["kind"] == "torn-tail")
        .cloned()
        .collect();
    assert_eq!(torn.len(), 1);
    assert_eq!(torn[0]["position"], 966);

    // Zeros after the last batch (a crash in preallocated space) are a torn tail as well.
    let d2 = tmp.path().join("zeros-0");
    copy_dir(&ts_common(), &d2);
    let log = d2.join("00000000000000022964.log");
    let mut bytes = std::fs::read(&log).unwrap();
    let len = bytes.len();
    bytes.resize(len + 4096, 0);
    std::fs::write(&log, &bytes).unwrap();
    let r = seglog(["verify".as_ref(), d2.as_os_str()]);
    assert_eq!(r.code, 1);
    assert!(r.stdout.contains(&format!("at byte {len}: torn tail at byte {len}: 4096 zero bytes")), "{}", r.stdout);
}

#[test]
fn missing_index_and_extra_files_are_notes_not_damage() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("test_topic_a-0");
    copy_dir(&uploader(), &d);
    std::fs::remove_file(d.join("00000000000000000294.index")).unwrap();
    std::fs::remove_file(d.join("00000000000000000588.timeindex")).unwrap();
    std::fs::write(d.join("quorum-state"), "{}").unwrap();
    std::fs::write(d.join("notes.txt"), "hello").unwrap();
    let r = seglog(["verify".as_ref(), d.as_os_str()]);
    assert_eq!(r.code, 0, "{}", r.stdout);
    assert!(r.stdout.contains("00000000000000000294.log: no .index beside it (not damage"), "{}", r.stdout);
    assert!(r.stdout.contains("00000000000000000588.log: no .timeindex beside it"));
    assert!(r.stdout.contains("notes.txt: unknown file (not Kafka's), ignored"));
    assert!(r.stdout.contains("00000000000000000000.wm: unknown file"));
    assert!(!r.stdout.contains("quorum-state"), "Kafka's own files are not noted");

    // An index entry pointing at the wrong batch is damage, at the entry's byte in the index.
    let idx = d.join("00000000000000000000.index");
    let mut bytes = std::fs::read(&idx).unwrap();
    bytes[8 + 7] ^= 0x01; // the position of entry 1
    std::fs::write(&idx, &bytes).unwrap();
    let r = seglog(["verify".as_ref(), d.as_os_str()]);
    assert_eq!(r.code, 1);
    assert!(r.stdout.contains("00000000000000000000.index at byte 8: entry 1"), "{}", r.stdout);
}

#[test]
fn seglog_written_directory_is_clean() {
    let r = seglog(["verify".as_ref(), demo_dir().as_os_str()]);
    assert_eq!(r.code, 0, "{}", r.stdout);
    assert!(r.stdout.contains("Summary: 4 partitions, 64 segments, 256 batches, 20000 records"), "{}", r.stdout);
    for i in [1, 4096, 20000, 1048576] {
        assert!(r.stdout.contains(&format!("interval-{i}-0: 16 segments")), "{}", r.stdout);
    }
}

#[test]
fn deep_verification_decodes_every_record() {
    let r = seglog(["verify".as_ref(), "--deep".as_ref(), "--quiet".as_ref(), ts_consumer(0).as_os_str()]);
    assert_eq!(r.code, 0, "{}", r.stdout);
    assert!(r.stdout.contains("40 segments, 45 batches, 10995 records"), "{}", r.stdout);
    assert!(!r.stdout.contains("note:"), "--quiet prints no notes");
}

#[test]
fn not_a_directory_is_a_usage_error() {
    let r = seglog(["verify", "/nonexistent/seglog-test"]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("/nonexistent/seglog-test"), "{}", r.stderr);
}
