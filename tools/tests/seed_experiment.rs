//! The seed's experiment, as `seglog demo` runs it: what the seed reports must hold.
//! - at 1 and 4096 the index files are byte-identical with three entries per full segment;
//! - at 20000 one entry, at byte 32,700; at 1048576 none;
//! - phase-2 maxima 16,350 / 16,350 / 32,700 / 49,050, each under min(interval + batch, segment).

use std::process::Command;

fn run_demo(dir: &std::path::Path) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_seglog"))
        .args(["demo", "--json", "--dir"])
        .arg(dir)
        .output()
        .expect("run seglog demo");
    assert!(out.status.success(), "demo failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("demo --json prints one JSON document")
}

#[test]
fn demo_reproduces_the_seed() {
    let tmp = tempfile::tempdir().unwrap();
    let v = run_demo(tmp.path());
    let topics = v["topics"].as_array().unwrap();
    assert_eq!(topics.len(), 4);
    let expect = [(1u64, 3u64, 16_350u64), (4096, 3, 16_350), (20_000, 1, 32_700), (1_048_576, 0, 49_050)];
    for (t, (interval, entries, max)) in topics.iter().zip(expect) {
        assert_eq!(t["index_interval_bytes"], interval);
        // 5000 records, 316 per full segment: 15 full segments and the last one (4740-4999).
        assert_eq!(t["segments"], 16, "interval {interval}");
        assert_eq!(t["full_segments"], 15, "interval {interval}");
        for e in t["entries_per_full_segment"].as_array().unwrap() {
            assert_eq!(e.as_u64().unwrap(), entries, "interval {interval}");
        }
        assert_eq!(t["lookups"], 15 * 316);
        assert_eq!(t["bytes_scanned"]["max"], max, "interval {interval}");
        assert!(t["bytes_scanned"]["max"].as_u64().unwrap() <= t["bound_bytes"].as_u64().unwrap());
    }
    assert_eq!(topics[2]["entry_positions"], serde_json::json!([32_700]));
    assert_eq!(topics[0]["entry_positions"], serde_json::json!([16_350, 32_700, 49_050]));
    assert_eq!(v["index_files_identical_1_vs_4096"], true);

    // Byte-level: every index file at 1 equals the one at 4096; the seed's xxd of segment 316.
    let d1 = tmp.path().join("interval-1-0");
    let d4 = tmp.path().join("interval-4096-0");
    let mut compared = 0;
    for entry in std::fs::read_dir(&d1).unwrap() {
        let name = entry.unwrap().file_name();
        let name = name.to_str().unwrap();
        if name.ends_with(".index") || name.ends_with(".timeindex") {
            assert_eq!(std::fs::read(d1.join(name)).unwrap(), std::fs::read(d4.join(name)).unwrap(), "{name}");
            compared += 1;
        }
    }
    assert_eq!(compared, 32);
    let idx = std::fs::read(d1.join("00000000000000000316.index")).unwrap();
    assert_eq!(
        idx,
        [0, 0, 0, 0x9d, 0, 0, 0x3f, 0xde, 0, 0, 0, 0xec, 0, 0, 0x7f, 0xbc, 0, 0, 0x01, 0x3b, 0, 0, 0xbf, 0x9a]
    );
    let seg = std::fs::read(d1.join("00000000000000000316.log")).unwrap();
    assert_eq!(seg.len(), 4 * 16_350);
    assert!(std::fs::read(tmp.path().join("interval-1048576-0/00000000000000000316.index")).unwrap().is_empty());
}

#[test]
fn demo_text_output_names_the_mode_and_the_identity() {
    let tmp = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_seglog")).args(["demo", "--dir"]).arg(tmp.path()).output().unwrap();
    assert!(out.status.success());
    let s = String::from_utf8(out.stdout).unwrap();
    assert!(s.contains("I/O mode:"), "{s}");
    assert!(s.contains("byte-identical"), "{s}");
}
