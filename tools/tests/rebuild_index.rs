//! `seglog rebuild-index`: a dry run reproduces Kafka's indexes where the broker used the default
//! interval, names the segment written with another interval, and `--write` replaces only the
//! files that differ.

mod common;

use common::*;

#[test]
fn ts_common_rebuilds_identically() {
    let r = seglog(["rebuild-index".as_ref(), ts_common().as_os_str()]);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert_eq!(lines_with(&r.stdout, ": same: .index same; .timeindex same").len(), 4, "{}", r.stdout);
    assert!(r.stdout.contains("Summary: 4 segments, 0 differ, 4 same; dry run: nothing written"));
}

#[test]
fn ts_consumer_base_zero_segment_differs() {
    let d = ts_consumer(1);
    let r = seglog(["rebuild-index".as_ref(), d.as_os_str()]);
    assert_eq!(r.code, 1, "{}", r.stdout);
    let differs = lines_with(&r.stdout, "DIFFERS");
    assert_eq!(differs.len(), 1, "{}", r.stdout);
    assert!(differs[0].contains("00000000000000000000.log: DIFFERS: .index differs: 5 entries on disk, 1 rebuilt; first difference at entry 0: disk (offset 142, byte 4065), rebuilt (offset 152, byte 8068)"), "{}", differs[0]);
    // The other segments only differ in the older broker's time-index flavour: not counted.
    assert_eq!(lines_with(&r.stdout, ".timeindex equivalent (older broker's exact-record-offset flavour").len(), 35);
    assert!(
        r.stdout
            .contains("Summary: 36 segments, 1 differ, 35 same (35 time indexes differ only in flavour, not counted)"),
        "{}",
        r.stdout
    );

    let j = seglog(["rebuild-index".as_ref(), "--json".as_ref(), "--strict-flavour".as_ref(), d.as_os_str()]).json();
    assert_eq!(j["differ"], 36, "--strict-flavour counts the flavour differences");

    // The whole tree: 146 of 148 segments as the broker wrote them.
    let j = seglog(["rebuild-index".as_ref(), "--json".as_ref(), pinterest().as_os_str()]).json();
    assert_eq!(j["segments"], 148);
    assert_eq!(j["differ"], 2);
}

#[test]
fn write_replaces_only_what_differs() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("test_topic_a-1");
    copy_dir(&ts_consumer(1), &d);
    let untouched = std::fs::read(d.join("00000000000000000447.timeindex")).unwrap();
    let r = seglog(["rebuild-index".as_ref(), "--write".as_ref(), d.as_os_str()]);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("2 files written"), "{}", r.stdout);
    // 152 at byte 8068: the one entry Kafka's rule gives with 4096.
    assert_eq!(std::fs::read(d.join("00000000000000000000.index")).unwrap(), [0, 0, 0, 152, 0, 0, 0x1f, 0x84]);
    assert_eq!(std::fs::read(d.join("00000000000000000447.timeindex")).unwrap(), untouched);
    assert!(!std::fs::read_dir(&d).unwrap().any(|e| e.unwrap().file_name().to_string_lossy().ends_with(".tmp")));
    let r = seglog(["rebuild-index".as_ref(), d.as_os_str()]);
    assert_eq!(r.code, 0, "{}", r.stdout);
    let r = seglog(["verify".as_ref(), d.as_os_str()]);
    assert_eq!(r.code, 0, "{}", r.stdout);
}

#[test]
fn seglog_files_rebuild_with_their_interval() {
    let d = demo_dir().join("interval-20000-0");
    let r = seglog(["rebuild-index".as_ref(), "--index-interval-bytes".as_ref(), "20000".as_ref(), d.as_os_str()]);
    assert_eq!(r.code, 0, "{}", r.stdout);
    assert!(r.stdout.contains("16 segments, 0 differ"));
    let r = seglog(["rebuild-index".as_ref(), d.as_os_str()]);
    assert_eq!(r.code, 1, "rebuilt with 4096 the index is denser");
    assert!(r.stdout.contains(".index differs: 1 entries on disk, 3 rebuilt"), "{}", r.stdout);
}

#[test]
fn torn_log_is_reported_and_not_written() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("t-0");
    copy_dir(&ts_common(), &d);
    let log = d.join("00000000000000022964.log");
    std::fs::OpenOptions::new().write(true).open(&log).unwrap().set_len(1000).unwrap();
    let before = std::fs::read(d.join("00000000000000022964.index")).unwrap();
    let r = seglog(["rebuild-index".as_ref(), "--write".as_ref(), d.as_os_str()]);
    assert_eq!(r.code, 1, "{}", r.stdout);
    assert!(r.stdout.contains("log damaged: only the first 966 bytes are whole valid batches"), "{}", r.stdout);
    assert_eq!(std::fs::read(d.join("00000000000000022964.index")).unwrap(), before);
    assert_eq!(std::fs::metadata(&log).unwrap().len(), 1000, "the log is never changed");
}

#[test]
fn rebuilds_past_a_cap_are_refused() {
    // An index a rebuild would make longer than --segment-index-bytes: not rebuilt, not written.
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("t-0");
    copy_dir(&ts_common(), &d);
    let before = std::fs::read(d.join("00000000000000000000.index")).unwrap();
    let r = seglog([
        "rebuild-index".as_ref(),
        "--write".as_ref(),
        "--index-interval-bytes".as_ref(),
        "0".as_ref(),
        "--segment-index-bytes".as_ref(),
        "1KiB".as_ref(),
        d.as_os_str(),
    ]);
    assert_eq!(r.code, 1, "a segment not rebuilt fails --write: {}", r.stdout);
    let refused = lines_with(&r.stdout, "DIFFERS: not rebuilt: the rebuilt .timeindex needs more than 85 entries (12 bytes each), more than --segment-index-bytes (1024) holds");
    assert_eq!(refused.len(), 4, "{}", r.stdout);
    assert!(r.stdout.contains("Summary: 4 segments, 4 differ, 0 same, 4 not rebuilt; 0 files written"), "{}", r.stdout);
    assert_eq!(std::fs::read(d.join("00000000000000000000.index")).unwrap(), before);
    let j = seglog([
        "rebuild-index".as_ref(),
        "--json".as_ref(),
        "--segment-index-bytes".as_ref(),
        "1KiB".as_ref(),
        "--index-interval-bytes".as_ref(),
        "0".as_ref(),
        d.as_os_str(),
    ])
    .json();
    assert_eq!(j["not_rebuilt"], 4);
    assert_eq!(j["partitions"][0]["segments"][0]["offset_index"]["state"], "not-rebuilt");
    assert!(j["partitions"][0]["segments"][0]["refused"].as_str().unwrap().contains("--segment-index-bytes (1024)"));
    // The default holds what the broker wrote.
    let r = seglog(["rebuild-index".as_ref(), d.as_os_str()]);
    assert_eq!(r.code, 0, "{}", r.stdout);

    // A batch header claiming 100 MiB (a sparse file): the engine's recovery would read it whole.
    let d = tmp.path().join("big-0");
    std::fs::create_dir(&d).unwrap();
    let mut b = seglog::format::builder::BatchBuilder::new();
    b.push(1, None, Some(b"v"), &[]);
    let mut bytes = b.build().unwrap();
    let claimed: u32 = (100 << 20) - 12;
    bytes[8..12].copy_from_slice(&claimed.to_be_bytes());
    let log = d.join("00000000000000000000.log");
    std::fs::write(&log, &bytes).unwrap();
    std::fs::OpenOptions::new().write(true).open(&log).unwrap().set_len(100 << 20).unwrap();
    let r = seglog(["rebuild-index".as_ref(), d.as_os_str()]);
    assert_eq!(r.code, 1, "{}", r.stdout);
    assert!(
        r.stdout.contains("DIFFERS: not rebuilt: the batch at byte 0 is 104857600 bytes, more than the 67108864 a rebuild reads whole"),
        "{}",
        r.stdout
    );
}
