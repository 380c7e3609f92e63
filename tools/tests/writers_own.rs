//! Commands that write take the directory's lock (docs/cli.md, "Commands that write"): `recover`
//! and `rebuild-index --write` run while an engine owns the directory (in this test process, so
//! the command is a second process) are refused naming the engine's process and change nothing;
//! `recover` of a directory with no partition writes nothing into it; symlinked segment files and
//! partition directories are refused, and the files they point at stay as they were.

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use common::seglog;
use seglog::format::builder::BatchBuilder;
use seglog::{Engine, EngineConfig, IoMode, TopicPartition};

/// Every file under `dir` and its bytes.
fn snapshot(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if e.file_type().unwrap().is_dir() {
                todo.push(p);
            } else {
                let bytes = if e.file_type().unwrap().is_symlink() {
                    std::fs::read_link(&p).unwrap().display().to_string().into_bytes()
                } else {
                    std::fs::read(&p).unwrap()
                };
                out.insert(p.strip_prefix(dir).unwrap().display().to_string(), bytes);
            }
        }
    }
    out
}

fn live_engine(dir: &Path) -> Engine {
    let mut c = EngineConfig::new(dir);
    c.io_mode = IoMode::Sync;
    c.shards = Some(1);
    c.pin_threads = false;
    c.checkpoint_interval_ms = 3_600_000;
    c.retention_check_interval_ms = 3_600_000;
    let engine = Engine::open(c).unwrap();
    let tp = TopicPartition::new("orders", 0);
    engine.open_partition(&tp, None).wait().unwrap();
    for i in 0..50 {
        let mut b = BatchBuilder::new();
        b.push(1_700_000_000_000 + i, None, Some(&[b'x'; 300]), &[]);
        engine.append(&tp, b.build().unwrap(), 0).wait().unwrap();
    }
    engine.flush_all().unwrap();
    engine
}

#[test]
fn writing_commands_are_refused_while_an_engine_owns_the_directory() {
    let dir = tempfile::tempdir().unwrap();
    let engine = live_engine(dir.path());
    let before = snapshot(dir.path());
    let me = format!("locked by process {}", std::process::id());
    let part = dir.path().join("orders-0");
    for args in [
        vec!["recover".to_string(), dir.path().display().to_string(), "--io-mode".into(), "sync".into()],
        vec!["recover".to_string(), part.display().to_string(), "--io-mode".into(), "sync".into()],
        vec!["rebuild-index".to_string(), dir.path().display().to_string(), "--write".into()],
        vec!["rebuild-index".to_string(), part.display().to_string(), "--write".into()],
    ] {
        let r = seglog(&args);
        assert_ne!(r.code, 0, "{args:?} ran on a live directory:\n{}", r.stdout);
        assert!(r.stderr.contains(&me), "{args:?} does not name the owner: {}", r.stderr);
        assert!(snapshot(dir.path()) == before, "{args:?} changed a live directory");
    }
    // The same with a relative partition directory (its log directory is then `.`).
    for args in [["recover", "orders-0", "--io-mode", "sync"], ["rebuild-index", "orders-0", "--write", "--json"]] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_seglog"))
            .args(args)
            .current_dir(dir.path())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_ne!(out.status.code(), Some(0), "{args:?} from inside the live directory ran");
        assert!(stderr.contains(&me), "{args:?}: {stderr}");
        assert!(snapshot(dir.path()) == before, "{args:?} changed a live directory");
    }
    engine.shutdown().unwrap();
    // With the engine gone both run.
    let r = seglog(["recover", &dir.path().display().to_string(), "--io-mode", "sync"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
}

/// Read-only commands run on a live directory, take no lock, change nothing, and say it is live.
#[test]
fn read_only_commands_say_the_directory_is_live() {
    let dir = tempfile::tempdir().unwrap();
    let engine = live_engine(dir.path());
    let before = snapshot(dir.path());
    let me = format!("locked by process {}", std::process::id());
    let d = dir.path().display().to_string();
    let seg = dir.path().join("orders-0/00000000000000000000.log").display().to_string();
    for args in [vec!["verify", &d], vec!["index-report", &d], vec!["rebuild-index", &d], vec!["dump", &seg]] {
        let r = seglog(&args);
        assert!(r.stderr.contains("is live") && r.stderr.contains(&me), "{args:?}: {}", r.stderr);
        assert!(snapshot(dir.path()) == before, "{args:?} changed a live directory");
    }
    engine.shutdown().unwrap();
    let r = seglog(["verify", &d]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(!r.stderr.contains("is live"), "{}", r.stderr);
}

#[test]
fn recover_leaves_a_directory_without_partitions_as_it_is() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.txt"), b"not a log directory").unwrap();
    let before = snapshot(dir.path());
    let r = seglog(["recover", &dir.path().display().to_string()]);
    assert_ne!(r.code, 0);
    assert!(r.stderr.contains("nothing to recover"), "{}", r.stderr);
    assert!(snapshot(dir.path()) == before, "recover wrote into a directory with no partition");
}

#[test]
fn recover_never_writes_through_symlinks() {
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let engine = live_engine(dir.path());
    engine.shutdown().unwrap();
    let part = dir.path().join("orders-0");
    // The segment moved outside, a symlink left in its place; and a whole partition directory
    // that is a symlink to one outside.
    let seg = "00000000000000000000.log";
    std::fs::rename(part.join(seg), outside.path().join(seg)).unwrap();
    std::os::unix::fs::symlink(outside.path().join(seg), part.join(seg)).unwrap();
    let other = outside.path().join("payments-0");
    std::fs::create_dir(&other).unwrap();
    std::fs::copy(outside.path().join(seg), other.join(seg)).unwrap();
    std::os::unix::fs::symlink(&other, dir.path().join("payments-0")).unwrap();
    let outside_before = snapshot(outside.path());
    for target in [dir.path().to_path_buf(), part.clone()] {
        let r = seglog(["recover", &target.display().to_string(), "--io-mode", "sync"]);
        assert_ne!(r.code, 0, "recover of {} followed a symlink:\n{}", target.display(), r.stdout);
        assert!(r.stderr.contains("symbolic link"), "{}", r.stderr);
        assert!(snapshot(outside.path()) == outside_before, "recover changed files outside {}", target.display());
    }
}
