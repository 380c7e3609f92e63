//! `seglog recover DIR` runs what opening the engine runs and says what it did: after a crash
//! (no clean-shutdown marker) a torn tail is cut at its byte position, a missing index is
//! rebuilt, and the directory then verifies clean.

use std::process::Command;

fn seglog(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_seglog")).args(args).output().expect("run seglog")
}

#[test]
fn recover_cuts_a_torn_tail_and_rebuilds_a_missing_index() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_str().unwrap();
    assert!(seglog(&["demo", "--io-mode", "sync", "--dir", dir]).status.success());
    // The demo's engine shut down cleanly.
    assert!(tmp.path().join(".kafka_cleanshutdown").exists());
    assert!(tmp.path().join("recovery-point-offset-checkpoint").exists());
    // Simulate a crash: no marker, garbage after the last batch of one partition, and a lost
    // index in another.
    std::fs::remove_file(tmp.path().join(".kafka_cleanshutdown")).unwrap();
    let part = tmp.path().join("interval-4096-0");
    let mut logs: Vec<_> = std::fs::read_dir(&part)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    logs.sort();
    let last = logs.last().unwrap().clone();
    let good_len = std::fs::metadata(&last).unwrap().len();
    let mut bytes = std::fs::read(&last).unwrap();
    bytes.extend_from_slice(&[0xab; 100]);
    std::fs::write(&last, &bytes).unwrap();
    // Rewind the recovery point so that the damaged segment is revalidated.
    let rp = tmp.path().join("recovery-point-offset-checkpoint");
    let text = std::fs::read_to_string(&rp).unwrap();
    std::fs::write(&rp, text.replace("interval-4096 0 5000", "interval-4096 0 4000")).unwrap();
    let other = tmp.path().join("interval-20000-0").join("00000000000000000316.index");
    std::fs::remove_file(&other).unwrap();

    let out = seglog(&["recover", dir, "--io-mode", "sync", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["clean_shutdown"], false);
    let parts = v["partitions"].as_array().unwrap();
    let p4096 = parts.iter().find(|p| p["partition"] == "interval-4096-0").unwrap();
    let cut = &p4096["truncations"][0];
    assert_eq!(cut["at_byte"].as_u64().unwrap(), good_len, "{v}");
    assert_eq!(cut["bytes_cut"].as_u64().unwrap(), 100);
    assert!(cut["file"].as_str().unwrap().ends_with(last.file_name().unwrap().to_str().unwrap()));
    let p20000 = parts.iter().find(|p| p["partition"] == "interval-20000-0").unwrap();
    assert!(p20000["indexes_rebuilt"].as_u64().unwrap() >= 1);
    assert!(other.exists(), "the missing index was rebuilt");
    assert_eq!(std::fs::metadata(&last).unwrap().len(), good_len);
    // Recovery ends with a clean shutdown, and the directory verifies clean.
    assert!(tmp.path().join(".kafka_cleanshutdown").exists());
    let verify = seglog(&["verify", dir]);
    assert_eq!(verify.status.code(), Some(0), "{}", String::from_utf8_lossy(&verify.stdout));

    // A second recovery finds a clean shutdown and changes nothing.
    let before: Vec<_> = logs.iter().map(|p| std::fs::read(p).unwrap()).collect();
    let out = seglog(&["recover", dir, "--io-mode", "sync"]);
    assert!(out.status.success());
    let s = String::from_utf8(out.stdout).unwrap();
    assert!(s.contains("previous shutdown clean"), "{s}");
    let after: Vec<_> = logs.iter().map(|p| std::fs::read(p).unwrap()).collect();
    assert_eq!(before, after);
}
