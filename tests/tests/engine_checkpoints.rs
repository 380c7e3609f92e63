//! The engine's log-directory files in Kafka's formats: recovery-point-offset-checkpoint and
//! log-start-offset-checkpoint written with Kafka's sequence, `.kafka_cleanshutdown` after a clean
//! shutdown (then indexes are trusted on the next start, not rebuilt), and recovery from the
//! recovery point after a crash. Also group commit under Durability::Interval, and log
//! operations run inside the owning shard.

use seglog::format::builder::BatchBuilder;
use seglog::format::checkpoint::OffsetCheckpoint;
use seglog::{Durability, Engine, EngineConfig, IoMode, TopicPartition};

fn batch(i: i64) -> Vec<u8> {
    let mut b = BatchBuilder::new();
    for r in 0..3 {
        b.push(1_700_000_000_000 + i, None, Some(format!("v{i}-{r}").as_bytes()), &[]);
    }
    b.build().unwrap()
}

fn config(dir: &std::path::Path) -> EngineConfig {
    let mut c = EngineConfig::new(dir);
    c.io_mode = IoMode::Sync;
    c.shards = Some(2);
    c.log_config.segment_bytes = 2048;
    c
}

fn read_checkpoint(dir: &std::path::Path, name: &str) -> Vec<(String, i32, i64)> {
    let text = std::fs::read_to_string(dir.join(name)).unwrap();
    OffsetCheckpoint::parse(&text).unwrap().entries
}

#[test]
fn clean_shutdown_writes_checkpoints_and_the_marker() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(config(dir.path())).unwrap();
    assert!(!engine.started_clean());
    let tps: Vec<_> = (0..3).map(|p| TopicPartition::new("orders", p)).collect();
    for tp in &tps {
        engine.open_partition(tp, None).wait().unwrap();
    }
    for i in 0..60 {
        engine.append(&tps[(i % 3) as usize], batch(i), 0).wait().unwrap();
    }
    engine.shutdown().unwrap();
    let rp = read_checkpoint(dir.path(), "recovery-point-offset-checkpoint");
    assert_eq!(rp, vec![("orders".into(), 0, 60), ("orders".into(), 1, 60), ("orders".into(), 2, 60)]);
    let ls = read_checkpoint(dir.path(), "log-start-offset-checkpoint");
    assert!(ls.iter().all(|e| e.2 == 0));
    let marker = std::fs::read_to_string(dir.path().join(".kafka_cleanshutdown")).unwrap();
    assert_eq!(marker, r#"{"version":0,"brokerEpoch":-1}"#);
    // No temp files left behind.
    assert!(std::fs::read_dir(dir.path()).unwrap().all(|e| !e
        .unwrap()
        .file_name()
        .to_string_lossy()
        .ends_with(".tmp")));

    // Next start: clean, marker removed once every partition is open.
    let engine = Engine::open(config(dir.path())).unwrap();
    assert!(engine.started_clean());
    assert!(!dir.path().join(".kafka_cleanshutdown").exists());
    let parts = engine.partitions().unwrap();
    assert_eq!(parts.iter().map(|p| p.2).collect::<Vec<_>>(), vec![60, 60, 60]);
    drop(engine); // Drop shuts down cleanly too
    assert!(dir.path().join(".kafka_cleanshutdown").exists());
}

#[test]
fn a_crash_recovers_from_the_recovery_point() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(dir.path());
    c.durability = Durability::EveryBatch;
    let engine = Engine::open(c.clone()).unwrap();
    let tp = TopicPartition::new("t", 0);
    engine.open_partition(&tp, None).wait().unwrap();
    for i in 0..100 {
        engine.append(&tp, batch(i), 0).wait().unwrap();
    }
    engine.checkpoint().unwrap();
    let rp = read_checkpoint(dir.path(), "recovery-point-offset-checkpoint");
    assert_eq!(rp, vec![("t".into(), 0, 300)], "every batch was fsynced, so the recovery point is the end");
    // Crash: what a crash leaves is the directory as it stands now (no shutdown, no marker).
    // Copy it while the engine runs (it holds the directory's lock until it stops).
    let crashed = tempfile::tempdir().unwrap();
    std::fs::create_dir(crashed.path().join("t-0")).unwrap();
    seglog_tests::copy_files(dir.path(), crashed.path(), |_| true);
    seglog_tests::copy_files(&dir.path().join("t-0"), &crashed.path().join("t-0"), |_| true);
    engine.shutdown().unwrap();
    assert!(!crashed.path().join(".kafka_cleanshutdown").exists());
    let engine = Engine::open(config(crashed.path())).unwrap();
    assert!(!engine.started_clean());
    let parts = engine.partitions().unwrap();
    assert_eq!(parts[0].2, 300);
    engine.shutdown().unwrap();
}

#[test]
fn interval_durability_advances_the_recovery_point_by_group_commit() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(dir.path());
    c.durability = Durability::Interval { flush_ms: 50, flush_messages: i64::MAX };
    c.log_config.segment_bytes = 1 << 20; // one segment: only fsyncs move the recovery point
    let engine = Engine::open(c).unwrap();
    let tp = TopicPartition::new("t", 0);
    engine.open_partition(&tp, None).wait().unwrap();
    for i in 0..10 {
        engine.append(&tp, batch(i), 0).wait().unwrap();
    }
    let rp = || engine.with_log(&tp, |log| Ok(log.recovery_point())).wait().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while rp() < 30 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(rp(), 30, "a group commit within flush_ms covered every batch");
    let fsyncs: u64 = engine.stats().unwrap().iter().map(|s| s.fsyncs).sum();
    assert!(fsyncs >= 1);
    assert!(fsyncs < 10, "one fdatasync covers many batches, got {fsyncs}");
    engine.shutdown().unwrap();
}

#[test]
fn log_operations_run_in_the_owning_shard() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(config(dir.path())).unwrap();
    let tp = TopicPartition::new("t", 0);
    engine.open_partition(&tp, None).wait().unwrap();
    for i in 0..30 {
        engine.append(&tp, batch(i), 0).wait().unwrap();
    }
    let end = engine.with_log(&tp, |log| log.truncate_to(45).map(|_| log.log_end_offset())).wait().unwrap();
    assert_eq!(end, 45);
    let info = engine.append(&tp, batch(99), 1).wait().unwrap();
    assert_eq!(info.first_offset, 45);
    let unknown = engine.with_log(&TopicPartition::new("nope", 0), |_| Ok(())).wait();
    assert!(matches!(unknown, Err(seglog::Error::UnknownPartition { .. })));
    engine.shutdown().unwrap();
}

/// Engine settings are checked together at open: each bad one is refused with its name, and
/// nothing is created (not even the data directory).
#[test]
fn bad_settings_are_refused_by_name_before_anything_is_created() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    type Change = fn(&mut EngineConfig);
    let cases: [(&str, Change); 9] = [
        ("shards", |c| c.shards = Some(0)),
        ("cores", |c| c.cores = Some(Vec::new())),
        ("queue_capacity", |c| c.queue_capacity = 0),
        ("durability", |c| c.durability = Durability::Interval { flush_ms: 10, flush_messages: 0 }),
        ("zero_fill", |c| c.zero_fill = seglog::ZeroFill::Lead(0)),
        ("checkpoint_interval_ms", |c| c.checkpoint_interval_ms = 0),
        ("file_mode", |c| c.file_mode = 0o400),
        ("max_open_files", |c| c.max_open_files = 3),
        ("segment.bytes", |c| c.log_config.segment_bytes = 1),
    ];
    for (setting, change) in cases {
        let mut c = config(&data);
        change(&mut c);
        match Engine::open(c) {
            Err(seglog::Error::InvalidConfig(m)) => assert!(m.contains(setting), "{setting}: {m}"),
            other => panic!("{setting}: not refused: {:?}", other.map(|_| ())),
        }
        assert!(!data.exists(), "{setting}: a refused config created the data directory");
    }
}

/// Kafka's topic deletion: the partition's directory goes, no checkpoint names it again, and a
/// partition of the same name made later starts empty at offset 0, even one whose old log start
/// the startup checkpoint still held. A deletion a crash interrupted (the renamed `-delete`
/// directory) is finished at the next start; a symbolic link under that name is left alone.
#[test]
fn deleted_partitions_are_gone_from_disk_and_checkpoints_and_come_back_empty() {
    let dir = tempfile::tempdir().unwrap();
    let (keep, gone) = (TopicPartition::new("keep", 0), TopicPartition::new("gone", 0));
    let engine = Engine::open(config(dir.path())).unwrap();
    for tp in [&keep, &gone] {
        engine.open_partition(tp, None).wait().unwrap();
        for i in 0..30 {
            engine.append(tp, batch(i), 0).wait().unwrap();
        }
    }
    // A log start above 0, which the startup checkpoint of the next run will hold.
    engine
        .with_log(&gone, |l| {
            l.set_high_watermark(30);
            l.delete_records(12).map(|_| ())
        })
        .wait()
        .unwrap();
    engine.shutdown().unwrap();
    assert!(read_checkpoint(dir.path(), "log-start-offset-checkpoint").iter().any(|e| e.0 == "gone" && e.2 == 12));

    let engine = Engine::open(config(dir.path())).unwrap();
    engine.delete_partition(&gone).unwrap();
    assert!(!dir.path().join("gone-0").exists());
    let names: Vec<String> =
        std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert!(!names.iter().any(|n| n.starts_with("gone")), "{names:?}");
    assert!(matches!(engine.delete_partition(&gone), Err(seglog::Error::UnknownPartition { .. })));
    // Written again at the deletion, without it.
    for file in ["recovery-point-offset-checkpoint", "log-start-offset-checkpoint"] {
        assert!(read_checkpoint(dir.path(), file).iter().all(|e| e.0 != "gone"), "{file}");
    }
    // Made again in the same run: empty, from offset 0 (not the old log start of 12).
    engine.open_partition(&gone, None).wait().unwrap();
    assert_eq!(engine.append(&gone, batch(0), 0).wait().unwrap().first_offset, 0);
    assert_eq!(engine.partitions().unwrap().iter().find(|p| p.0 == gone).map(|p| (p.1, p.2)), Some((0, 3)));
    engine.shutdown().unwrap();

    // A deletion cut short after its rename: finished by the next start. A symbolic link with
    // such a name is not followed (the directory it points to keeps its files).
    let leftover = dir.path().join(format!("keep-0.{}-delete", "ab".repeat(16)));
    std::fs::rename(dir.path().join("keep-0"), &leftover).unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("precious"), b"x").unwrap();
    let link = dir.path().join(format!("other-0.{}-delete", "cd".repeat(16)));
    std::os::unix::fs::symlink(outside.path(), &link).unwrap();
    let engine = Engine::open(config(dir.path())).unwrap();
    assert!(!leftover.exists());
    assert!(outside.path().join("precious").exists());
    assert!(link.symlink_metadata().is_ok(), "the link itself is left where it was");
    assert!(engine.partitions().unwrap().iter().all(|p| p.0 != keep));
    engine.shutdown().unwrap();
}
