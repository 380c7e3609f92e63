//! `seglog dump`: kafka-dump-log's output for Kafka's own files, index verification with both
//! time-index flavours, zero padding, checkpoint files, and clear errors for unknown files.

mod common;

use common::*;

#[test]
fn log_lists_every_batch_with_valid_crcs() {
    let log = ts_consumer(1).join("00000000000000000000.log");
    let r = seglog([std::path::Path::new("dump").as_os_str(), log.as_os_str()]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("Log starting offset: 0"));
    let batches = lines_with(&r.stdout, "baseOffset: ");
    assert_eq!(batches.len(), 6, "{}", r.stdout);
    assert!(batches.iter().all(|l| l.ends_with("isvalid: true") && l.contains("magic: 2")));
    assert!(batches[0].starts_with("baseOffset: 0 lastOffset: 72 count: 73 "), "{}", batches[0]);
    assert!(batches[1].contains(" position: 4065 CreateTime: "), "{}", batches[1]);
    assert!(batches[5].contains("lastOffset: 446 count: 282"), "{}", batches[5]);
    assert!(batches[0]
        .contains("producerId: -1 producerEpoch: -1 partitionLeaderEpoch: 0 isTransactional: false isControl: false"));
    assert!(batches[0].contains("compresscodec: none crc: 2193079984 isvalid: true"));
    assert!(r.stdout.contains("Summary: 6 batches, 447 records, 0 invalid CRCs, 25858 of 25858 bytes"));

    let j = seglog(["dump".as_ref(), "--json".as_ref(), log.as_os_str()]).json();
    let b = j["files"][0]["batches"].as_array().unwrap();
    assert_eq!(b.len(), 6);
    assert!(b.iter().all(|b| b["crc_valid"] == true && b["codec"] == "none"));
    assert_eq!(b[5]["position"], 9505);
    assert_eq!(j["files"][0]["end"]["state"], "clean");
}

#[test]
fn deep_iteration_and_payloads() {
    let log = ts_consumer(1).join("00000000000000000447.log");
    let r = seglog(["dump".as_ref(), "--deep-iteration".as_ref(), log.as_os_str()]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let recs = lines_with(&r.stdout, "| offset: ");
    assert_eq!(recs.len(), 282);
    assert!(recs[0].starts_with("| offset: 447 CreateTime: "), "{}", recs[0]);
    assert!(recs[0].contains("keySize: ") && recs[0].contains("valueSize: ") && recs[0].contains("headerKeys: ["));
    assert!(recs[281].starts_with("| offset: 728 "));
    assert!(!r.stdout.contains("payload:"));

    let r = seglog(["dump".as_ref(), "--print-data-log".as_ref(), log.as_os_str()]);
    assert_eq!(lines_with(&r.stdout, "payload: ").len(), 282, "--print-data-log implies deep iteration");

    let j = seglog(["dump".as_ref(), "--print-data-log".as_ref(), "--json".as_ref(), log.as_os_str()]).json();
    let recs = j["files"][0]["batches"][0]["records"].as_array().unwrap();
    assert_eq!(recs.len(), 282);
    assert_eq!(recs[0]["offset"], 447);
    assert!(recs[0]["value"].is_string() && recs[0]["header_count"].is_u64());
}

#[test]
fn max_bytes_reads_only_whole_batches_inside_the_limit() {
    let log = ts_consumer(1).join("00000000000000000000.log");
    let r = seglog(["dump".as_ref(), "--max-bytes".as_ref(), "8068".as_ref(), log.as_os_str()]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(lines_with(&r.stdout, "baseOffset: ").len(), 2);
    assert!(!r.stdout.contains("invalid bytes"));
    let r = seglog(["dump".as_ref(), "--max-bytes".as_ref(), "8KiB".as_ref(), log.as_os_str()]);
    assert_eq!(lines_with(&r.stdout, "baseOffset: ").len(), 2);
}

#[test]
fn offset_index_entries_and_verification() {
    let idx = ts_common().join("00000000000000000000.index");
    let r = seglog(["dump".as_ref(), idx.as_os_str()]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let entries = lines_with(&r.stdout, "offset: ");
    assert_eq!(entries.iter().filter(|l| l.starts_with("offset: ")).count(), 1992 / 8);
    assert!(r.stdout.contains("249 entries checked against the log, 0 mismatches"));

    let r = seglog(["dump".as_ref(), "--verify-index-only".as_ref(), idx.as_os_str()]);
    assert_eq!(r.code, 0);
    assert!(lines_with(&r.stdout, "position: ").is_empty(), "--verify-index-only prints no entries");
    assert!(r.stdout.contains("0 mismatches"));

    let empty = ts_consumer(1).join("00000000000000000447.index");
    let r = seglog(["dump".as_ref(), empty.as_os_str()]);
    assert!(r.stdout.contains("00000000000000000447.index is empty."), "{}", r.stdout);
}

#[test]
fn time_index_flavours_are_told_apart() {
    // ts-consumer: written by an older broker, entries name the exact record.
    let dir = ts_consumer(1);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "timeindex"))
        .collect();
    files.sort();
    assert_eq!(files.len(), 36);
    let mut args = vec!["dump".into(), "--verify-index-only".into()];
    args.extend(files.iter().map(|p| p.clone().into_os_string()));
    let r = seglog(&args);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let verdicts = lines_with(&r.stdout, "time index: ");
    assert_eq!(verdicts.len(), 36);
    for v in &verdicts {
        assert!(v.contains("flavour: exact record offset (older brokers), 0 errors"), "{v}");
    }
    assert!(lines_with(&r.stdout, "timestamp: ").is_empty());
    assert!(r.stdout.contains("00000000000000000000.timeindex: time index: 3 entries checked"));

    // ts-common: single-record batches, where both conventions name the same offset.
    let t = ts_common().join("00000000000000000000.timeindex");
    let r = seglog(["dump".as_ref(), "--verify-index-only".as_ref(), t.as_os_str()]);
    assert_eq!(r.code, 0);
    assert!(r.stdout.contains("flavour: indistinguishable"), "{}", r.stdout);

    let j = seglog(["dump".as_ref(), "--json".as_ref(), files[0].as_os_str()]).json();
    assert_eq!(j["files"][0]["flavour"], "exact-record-offset");
    assert_eq!(j["files"][0]["entries"][0], serde_json::json!({"timestamp": 1746499840761i64, "offset": 74}));
    assert_eq!(j["files"][0]["errors"].as_array().unwrap().len(), 0);
}

#[test]
fn zero_padding_sanity_check_and_mismatches() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("t-0");
    copy_dir(&ts_common(), &d);
    let idx = d.join("00000000000000000000.index");
    let mut bytes = std::fs::read(&idx).unwrap();
    bytes.extend_from_slice(&[0u8; 80]);
    std::fs::write(&idx, &bytes).unwrap();
    let r = seglog(["dump".as_ref(), idx.as_os_str()]);
    assert_eq!(r.code, 0, "{}", r.stdout);
    assert!(r.stdout.contains("10 trailing zero entries (preallocated space)"), "{}", r.stdout);
    assert!(r.stdout.contains("249 entries checked against the log, 0 mismatches"));
    let r = seglog(["dump".as_ref(), "--index-sanity-check".as_ref(), idx.as_os_str()]);
    assert_eq!(r.code, 0);
    assert!(r.stdout.contains("passed sanity check."));

    // A length that is not a multiple of 8 fails Kafka's sanity check.
    bytes.truncate(bytes.len() - 3);
    std::fs::write(&idx, &bytes).unwrap();
    let r = seglog(["dump".as_ref(), "--index-sanity-check".as_ref(), idx.as_os_str()]);
    assert_eq!(r.code, 1, "{}", r.stdout);
    assert!(r.stdout.contains("failed sanity check: index file size 2069 is not a multiple of 8"), "{}", r.stdout);

    // An entry that names the wrong offset is a mismatch (Kafka's wording).
    let mut bytes = std::fs::read(ts_common().join("00000000000000000000.index")).unwrap();
    bytes[3] ^= 1;
    std::fs::write(&idx, &bytes).unwrap();
    let r = seglog(["dump".as_ref(), "--verify-index-only".as_ref(), idx.as_os_str()]);
    assert_eq!(r.code, 1);
    assert!(r.stdout.contains("Mismatches in :"), "{}", r.stdout);
    assert!(r.stdout.contains("1 mismatches"), "{}", r.stdout);
}

#[test]
fn checkpoints_snapshots_and_unknown_files() {
    let mut args = vec![std::ffi::OsString::from("dump")];
    for f in ["leader-epoch-checkpoint", "partition.metadata", "00000000000000007729.snapshot"] {
        args.push(ts_common().join(f).into_os_string());
    }
    let r = seglog(&args);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("epoch: 0 startOffset: 0"));
    assert!(r.stdout.contains("topicId: p59PN4qkR8y176nhuDDPPA"));
    assert!(r.stdout.contains("1 producers"), "{}", r.stdout);

    let tmp = tempfile::tempdir().unwrap();
    let rp = tmp.path().join("recovery-point-offset-checkpoint");
    std::fs::write(&rp, "0\n2\nt 0 5\nt 1 7\n").unwrap();
    let cs = tmp.path().join(".kafka_cleanshutdown");
    std::fs::write(&cs, r#"{"version":0,"brokerEpoch":42}"#).unwrap();
    let r = seglog(["dump".as_ref(), rp.as_os_str(), cs.as_os_str()]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("topic: t partition: 1 offset: 7"));
    assert!(r.stdout.contains("brokerEpoch: 42"));
    std::fs::write(&rp, "0\n3\nt 0 5\n").unwrap();
    let r = seglog(["dump".as_ref(), rp.as_os_str()]);
    assert_eq!(r.code, 1, "a checkpoint that does not parse is damage");

    let wm = uploader().join("00000000000000000000.wm");
    let r = seglog(["dump".as_ref(), wm.as_os_str()]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("00000000000000000000.wm: unknown file type"), "{}", r.stderr);
}

#[test]
fn seglog_written_files_dump_like_kafka_files() {
    let d = demo_dir().join("interval-4096-0");
    let idx = d.join("00000000000000000316.index");
    let r = seglog(["dump".as_ref(), idx.as_os_str()]);
    assert_eq!(r.code, 0, "{}", r.stdout);
    let entries: Vec<&str> = r.stdout.lines().filter(|l| l.starts_with("offset: ")).collect();
    assert_eq!(entries, ["offset: 473 position: 16350", "offset: 552 position: 32700", "offset: 631 position: 49050"]);
    assert!(r.stdout.contains("3 entries checked against the log, 0 mismatches"));

    let log = d.join("00000000000000000316.log");
    let r = seglog(["dump".as_ref(), "--deep-iteration".as_ref(), log.as_os_str()]);
    assert_eq!(r.code, 0);
    let batches = lines_with(&r.stdout, "baseOffset: ");
    assert_eq!(batches.len(), 4);
    assert!(batches.iter().all(|b| b.contains("size: 16350 magic: 2") && b.ends_with("isvalid: true")));
    assert_eq!(lines_with(&r.stdout, "| offset: ").len(), 316);

    let t = d.join("00000000000000000316.timeindex");
    let r = seglog(["dump".as_ref(), "--verify-index-only".as_ref(), t.as_os_str()]);
    assert_eq!(r.code, 0, "{}", r.stdout);
    assert!(r.stdout.contains("time index: 3 entries checked against the log"), "{}", r.stdout);
}
