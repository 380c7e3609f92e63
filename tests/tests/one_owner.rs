//! One owner per directory (docs/durability.md, "One owner"): an engine holds Kafka's `.lock` of
//! its data directory, a `Log` holds its partition directory, and a `Log` opened on its own also
//! shares its log directory's `.lock`. A second engine, a second `Log`, a `Log` on an engine's
//! partition and an engine over a partition a `Log` holds are all refused with
//! `Error::Locked`, naming the holder, and change nothing. Two real writer processes on one
//! directory: the second is refused and every batch the first acknowledged survives.
//! Partition directories and segment files that are symbolic links are refused, never followed.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use seglog::format::builder::BatchBuilder;
use seglog::log::{Log, LogOptions};
use seglog::{Durability, Engine, EngineConfig, Error, IoMode, TopicPartition};
use seglog_tests::crash::{verify_engine_reopen, WriterArgs, WriterProcess};

mod common;

fn config(dir: &Path) -> EngineConfig {
    let mut c = EngineConfig::new(dir);
    c.io_mode = common::env_io_mode().unwrap_or(IoMode::Sync);
    c.shards = Some(1);
    c.pin_threads = false;
    c.checkpoint_interval_ms = 3_600_000;
    c
}

fn batch(i: i64) -> Vec<u8> {
    let mut b = BatchBuilder::new();
    b.push(1_700_000_000_000 + i, None, Some(format!("v{i}").as_bytes()), &[]);
    b.build().unwrap()
}

/// Every file under `dir` with its bytes (symlinks as their target), to show nothing changed.
/// `.lock` is left out: a refused engine may create the (empty) lock file Kafka would.
fn snapshot(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            let t = e.file_type().unwrap();
            let name = p.strip_prefix(dir).unwrap().display().to_string();
            if t.is_dir() {
                todo.push(p);
            } else if t.is_symlink() {
                out.insert(name, std::fs::read_link(&p).unwrap().display().to_string().into_bytes());
            } else if name != ".lock" {
                out.insert(name, std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

fn assert_locked<T: std::fmt::Debug>(r: Result<T, Error>, what: &str) -> Error {
    match r {
        Err(e @ Error::Locked { .. }) => {
            let text = e.to_string();
            assert!(text.contains("this process") || text.contains("process "), "{what}: {text}");
            e
        }
        other => panic!("{what}: not refused as locked: {other:?}"),
    }
}

#[test]
fn a_second_engine_on_the_directory_is_refused_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(config(dir.path())).unwrap();
    let tp = TopicPartition::new("t", 0);
    engine.open_partition(&tp, None).wait().unwrap();
    engine.append(&tp, batch(0), 0).wait().unwrap();
    engine.flush_all().unwrap();
    let before = snapshot(dir.path());
    let e = assert_locked(Engine::open(config(dir.path())), "second engine");
    assert!(e.to_string().contains(".lock"), "{e}");
    assert!(snapshot(dir.path()) == before, "a refused engine changed the directory");
    engine.shutdown().unwrap();
    // Once the owner is gone the directory opens again.
    let engine = Engine::open(config(dir.path())).unwrap();
    assert_eq!(engine.partitions().unwrap()[0].2, 1);
    engine.shutdown().unwrap();
}

#[test]
fn a_log_and_an_engine_exclude_each_other() {
    let dir = tempfile::tempdir().unwrap();
    let part = dir.path().join("t-0");
    let options = || LogOptions { storage: seglog_tests::test_storage(), ..seglog_tests::log_options() };

    // Two logs on one partition directory.
    let mut log = Log::open(&part, options()).unwrap();
    log.append_as_leader(&mut batch(0), 0).unwrap();
    // In the file before the snapshot: a write still in flight would change it under the test.
    log.finish_writes().unwrap();
    let before = snapshot(dir.path());
    assert_locked(Log::open(&part, options()), "second Log");
    // An engine over a partition a log holds.
    assert_locked(Engine::open(config(dir.path())), "engine over a held partition");
    assert!(snapshot(dir.path()) == before, "a refused open changed the directory");
    log.close().unwrap();

    // A log on a partition of a directory an engine owns.
    let engine = Engine::open(config(dir.path())).unwrap();
    let before = snapshot(dir.path());
    assert_locked(Log::open(&part, options()), "Log on an engine's partition");
    assert_locked(Log::open(dir.path().join("t-1"), options()), "Log on a new partition of an engine's directory");
    assert!(snapshot(dir.path()) == before, "a refused Log changed the directory");
    assert!(!dir.path().join("t-1").exists(), "a refused Log created its partition directory");
    // Logs sharing the engine's kind of lock still have one owner each.
    let shared = seglog_tests::test_storage();
    let other = tempfile::tempdir().unwrap();
    let held = shared.lock(other.path(), seglog::io::lock::LockKind::LogDir).unwrap().map(std::sync::Arc::new);
    let under = || LogOptions { storage: shared.clone(), log_dir_lock: held.clone(), ..seglog_tests::log_options() };
    let first = Log::open(other.path().join("t-0"), under()).unwrap();
    assert_locked(Log::open(other.path().join("t-0"), under()), "second Log under one shared lock");
    drop(first);
    Log::open(other.path().join("t-0"), under()).unwrap();
    engine.shutdown().unwrap();
    let log = Log::open(&part, options()).unwrap();
    assert_eq!(log.log_end_offset(), 1);
    log.close().unwrap();
}

#[test]
fn two_writer_processes_one_refused_nothing_acknowledged_lost() {
    let exe = Path::new(env!("CARGO_BIN_EXE_crash_writer"));
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("data");
    let mut args = WriterArgs::new(&dir, 0x51ce);
    args.io_mode = common::env_io_mode().unwrap_or(IoMode::Buffered);
    args.durability = Durability::EveryBatch;
    args.partitions = 2;
    let first = WriterProcess::spawn(exe, &args);
    let start = first.wait_for_start(Duration::from_secs(60)).expect("the first writer starts");
    assert!(start.starts_with("START"), "{start}");
    assert!(first.wait_for_acks(50, Duration::from_secs(60)), "the first writer acknowledges appends");
    let second = WriterProcess::spawn(exe, &args);
    let line = second.wait_for_start(Duration::from_secs(60)).expect("the second writer answers");
    let want = format!("locked by process {}", first.pid());
    assert!(line.starts_with("ERR -1 open") && line.contains(&want), "second writer: {line} (want '{want}')");
    // The first keeps writing meanwhile.
    let more = first.acks_so_far() + 50;
    assert!(first.wait_for_acks(more, Duration::from_secs(60)));
    let out2 = second.kill();
    assert!(out2.acks.is_empty(), "the refused writer acknowledged {} appends", out2.acks.len());
    let out1 = first.kill();
    let copy = root.path().join("check");
    seglog_tests::crash::copy_tree(&dir, &copy).unwrap();
    let check_args = WriterArgs { data_dir: copy.clone(), ..args.clone() };
    let v = verify_engine_reopen(&check_args, &copy, &out1.acks);
    assert!(v.violations.is_empty(), "{} acknowledged batches: {:?}", out1.acks.len(), v.violations);
}

#[test]
fn symlinked_partition_directories_and_segment_files_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let storage = seglog_tests::test_storage;
    // A partition directory that is a link to a directory elsewhere.
    let real = outside.path().join("t-0");
    let mut log = Log::open(&real, LogOptions { storage: storage(), ..seglog_tests::log_options() }).unwrap();
    log.append_as_leader(&mut batch(0), 0).unwrap();
    log.close().unwrap();
    std::os::unix::fs::symlink(&real, dir.path().join("t-0")).unwrap();
    let before = snapshot(outside.path());
    match Log::open(dir.path().join("t-0"), LogOptions { storage: storage(), ..seglog_tests::log_options() }) {
        Err(Error::NotRegular { what, .. }) => assert_eq!(what, "a symbolic link"),
        other => panic!("a symlinked partition directory was opened: {other:?}"),
    }
    match Engine::open(config(dir.path())) {
        Err(Error::NotRegular { path, .. }) => assert_eq!(path, dir.path().join("t-0")),
        other => panic!("an engine opened a symlinked partition directory: {other:?}"),
    }
    assert!(snapshot(outside.path()) == before, "data outside the directory changed");

    // A segment file that is a link to a file elsewhere.
    let part = dir.path().join("u-0");
    std::fs::create_dir(&part).unwrap();
    let victim = outside.path().join("victim");
    std::fs::write(&victim, b"not a segment, must survive").unwrap();
    std::os::unix::fs::symlink(&victim, part.join("00000000000000000000.log")).unwrap();
    let r = Log::open(&part, LogOptions { storage: storage(), ..seglog_tests::log_options() });
    match r {
        Err(Error::NotRegular { path, what }) => {
            assert_eq!(path, part.join("00000000000000000000.log"));
            assert_eq!(what, "a symbolic link");
        }
        other => panic!("a symlinked segment file was opened: {other:?}"),
    }
    assert_eq!(std::fs::read(&victim).unwrap(), b"not a segment, must survive");
}

#[test]
fn a_fifo_named_like_a_segment_is_refused_without_blocking() {
    let dir = tempfile::tempdir().unwrap();
    let part = dir.path().join("t-0");
    std::fs::create_dir(&part).unwrap();
    let fifo = part.join("00000000000000000000.log");
    let st = std::process::Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
    assert!(st.success());
    let (tx, rx) = std::sync::mpsc::channel();
    let p = part.clone();
    std::thread::spawn(move || {
        let r = Log::open(&p, LogOptions { storage: seglog_tests::test_storage(), ..seglog_tests::log_options() });
        let _ = tx.send(r.map(|_| ()));
    });
    match rx.recv_timeout(Duration::from_secs(20)) {
        Ok(Err(Error::NotRegular { path, what })) => {
            assert_eq!(path, fifo);
            assert_eq!(what, "a FIFO");
        }
        Ok(other) => panic!("a FIFO segment was not refused: {other:?}"),
        Err(_) => panic!("opening a log with a FIFO segment hung"),
    }
}
