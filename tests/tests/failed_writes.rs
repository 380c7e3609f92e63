//! A failed write is never visible (docs/durability.md, "Visibility"): when a write or fsync
//! fails, the log goes back to the end of the last write that succeeded (its log end offset, tail
//! cache, indexes, leader epochs and file), so no fetch, no offset lookup and no reopen shows an
//! append whose caller was told it failed. The partition is failed, reported, and can be opened
//! again without restarting the engine once the cause is gone. Checked on the simulated disk
//! (injected write and fsync errors, written through and written by a group commit) and on a real
//! full ext4 filesystem in each I/O mode.

use std::path::Path;
use std::sync::Arc;

use seglog::format::builder::BatchBuilder;
use seglog::io::sim::{Fault, SimStorage};
use seglog::io::Storage;
use seglog::log::{Log, LogOptions, Recovery, Writes};
use seglog::{Durability, Engine, EngineConfig, Error, IoMode, LogConfig, TopicPartition};
use seglog_tests::loopfs::{FsKind, LoopFs};

const DIR: &str = "/data/t-0";

fn batch(i: i64, value_len: usize) -> Vec<u8> {
    let mut b = BatchBuilder::new();
    b.push(1_700_000_000_000 + i, None, Some(&vec![b'a' + (i % 26) as u8; value_len]), &[]);
    b.build().unwrap()
}

fn sim_log(sim: &SimStorage, write_through: bool, flush_messages: i64) -> Log {
    let options = LogOptions {
        storage: Arc::new(sim.clone()),
        writes: if write_through { Writes::Through } else { Writes::Caller },
        config: LogConfig {
            segment_bytes: 64 * 1024,
            index_interval_bytes: 256,
            flush_messages,
            ..LogConfig::default()
        },
        ..seglog_tests::log_options()
    };
    Log::open(DIR, options).unwrap()
}

/// What a reader sees of the log: its end, and every batch from the start.
fn visible(log: &Log) -> (i64, Vec<u8>) {
    let mut out = Vec::new();
    let mut at = log.log_start_offset();
    loop {
        let r = log.read(at, 1 << 20, None, true).unwrap();
        if r.records.is_empty() {
            break;
        }
        let mut pos = 0;
        while pos < r.records.len() {
            let h = seglog::format::batch::BatchHeader::parse(&r.records[pos..]).unwrap();
            at = h.next_offset();
            pos += h.size_in_bytes() as usize;
        }
        out.extend_from_slice(&r.records);
    }
    (log.log_end_offset(), out)
}

#[test]
fn a_failed_write_through_append_leaves_no_trace_in_memory_or_after_reopen() {
    for fault in ["write", "sync"] {
        let sim = SimStorage::new();
        // With flush.messages = 1 every append fsyncs (and the fsync is what fails).
        let mut log = sim_log(&sim, true, if fault == "sync" { 1 } else { i64::MAX });
        for i in 0..20 {
            log.append_as_leader(&mut batch(i, 100), 0).unwrap();
        }
        log.flush().unwrap();
        let before = visible(&log);
        let rp = log.recovery_point();
        match fault {
            "write" => sim.inject(Fault::Write(sim.counters().writes + 1)),
            _ => sim.inject(Fault::Sync(sim.counters().syncs + 1)),
        }
        let r = log.append_as_leader(&mut batch(20, 100), 0);
        assert!(r.is_err(), "{fault}: the append did not fail");
        assert!(log.failure().is_some(), "{fault}: the log is not failed");
        assert_eq!(visible(&log), before, "{fault}: the failed append is visible");
        assert!(matches!(log.append_as_leader(&mut batch(21, 100), 0), Err(Error::Failed { .. })));
        // Reopened (the cause gone), the failed append does not come back. This bites for the
        // failed fsync, whose write did put the batch in the file (the rollback cuts it); a write
        // the simulated disk failed left nothing there to come back.
        drop(log);
        let options = LogOptions { recovery: Recovery::FromRecoveryPoint(rp), ..seglog_tests::log_options() };
        let log = Log::open(DIR, LogOptions { storage: Arc::new(sim.clone()), ..options }).unwrap();
        assert_eq!(visible(&log), before, "{fault}: the failed append came back after a reopen");
    }
}

#[test]
fn a_failed_group_commit_rolls_back_every_append_it_carried() {
    let sim = SimStorage::new();
    let mut log = sim_log(&sim, false, i64::MAX);
    let storage: Arc<dyn Storage> = Arc::new(sim.clone());
    for i in 0..10 {
        log.append_as_leader(&mut batch(i, 50), 0).unwrap();
    }
    let ops = log.take_writes(0, true).unwrap();
    let io = storage.submit_async(vec![ops]).pop().unwrap();
    log.writes_started(io, Some(log.log_end_offset()));
    assert!(log.poll_writes(true).unwrap().is_ok());
    let before = visible(&log);
    assert_eq!(before.0, 10);
    // Appends not yet written are not visible either.
    log.append_as_leader(&mut batch(10, 50), 0).unwrap();
    log.append_as_leader(&mut batch(11, 50), 0).unwrap();
    assert_eq!(visible(&log).1, before.1, "an append whose write has not completed is visible");
    sim.inject(Fault::Write(sim.counters().writes + 1));
    let ops = log.take_writes(0, true).unwrap();
    let io = storage.submit_async(vec![ops]).pop().unwrap();
    log.writes_started(io, Some(log.log_end_offset()));
    // Appended while the write is in flight: goes with it.
    log.append_as_leader(&mut batch(12, 50), 0).unwrap();
    assert!(log.poll_writes(true).unwrap().is_err());
    assert_eq!(visible(&log), before, "appends of a failed write are visible");
    assert!(log.failure().is_some());
    drop(log);
    let log = Log::open(DIR, LogOptions { storage: Arc::new(sim.clone()), ..seglog_tests::log_options() }).unwrap();
    assert_eq!(visible(&log), before, "appends of a failed write came back after a reopen");
}

/// A partition closed and opened again while the engine runs keeps its log start (DeleteRecords),
/// its settings and its place in the checkpoints; the restart after a clean shutdown agrees.
#[test]
fn a_closed_partition_keeps_its_log_start_settings_and_checkpoints() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = EngineConfig::new(dir.path());
    config.io_mode = seglog_tests::test_io_mode().unwrap_or(IoMode::Sync);
    config.shards = Some(1);
    config.pin_threads = false;
    config.checkpoint_interval_ms = 3_600_000;
    let engine = Engine::open(config.clone()).unwrap();
    let tp = TopicPartition::new("t", 0);
    let own = LogConfig { segment_bytes: 4096, ..LogConfig::default() };
    engine.open_partition(&tp, Some(own)).wait().unwrap();
    for i in 0..10 {
        engine.append(&tp, batch(i, 100), 0).wait().unwrap();
    }
    engine
        .with_log(&tp, |l| {
            l.set_high_watermark(10);
            l.delete_records(5).map(|_| ())
        })
        .wait()
        .unwrap();
    engine.close_partition(&tp).wait().unwrap();
    assert!(matches!(engine.close_partition(&tp).wait(), Err(Error::UnknownPartition { .. })));
    engine.checkpoint().unwrap();
    let starts = std::fs::read_to_string(dir.path().join("log-start-offset-checkpoint")).unwrap();
    assert!(starts.contains("t 0 5"), "a closed partition left the checkpoint: {starts:?}");
    engine.open_partition(&tp, None).wait().unwrap();
    assert_eq!(engine.partitions().unwrap(), vec![(tp.clone(), 5, 10)]);
    let segment_bytes = engine.with_log(&tp, |l| Ok(l.config().segment_bytes)).wait().unwrap();
    assert_eq!(segment_bytes, 4096, "reopened with other settings");
    engine.close_partition(&tp).wait().unwrap();
    engine.shutdown().unwrap();
    let engine = Engine::open(config).unwrap();
    assert!(engine.started_clean());
    assert_eq!(engine.partitions().unwrap(), vec![(tp, 5, 10)]);
    engine.shutdown().unwrap();
}

/// A follower batch whose offsets overflow, an append spanning more than one segment's relative
/// offsets, and more index entries than a new segment holds: each refused before anything changes
/// (no roll), the directory byte-identical, and the log takes appends afterwards.
#[test]
fn refused_appends_leave_the_directory_byte_identical() {
    let sim = SimStorage::new();
    let config = LogConfig { segment_index_bytes: 8 * 4, index_interval_bytes: 1, ..LogConfig::default() };
    let options =
        || LogOptions { storage: Arc::new(sim.clone()), config: config.clone(), ..seglog_tests::log_options() };
    let mut log = Log::open(DIR, options()).unwrap();
    for i in 0..3 {
        log.append_as_leader(&mut batch(i, 10), 0).unwrap();
    }
    log.flush().unwrap();
    let files = sim.files(DIR);
    let follower = |base: i64, records: usize| {
        let mut b = BatchBuilder::new();
        for r in 0..records {
            b.push(1_700_000_000_000, None, Some(format!("r{r}").as_bytes()), &[]);
        }
        let mut bytes = b.build().unwrap();
        seglog::format::batch::set_base_offset(&mut bytes, base);
        bytes
    };
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("offsets overflowing i64", follower(i64::MAX - 1, 3)),
        ("offsets spanning more than 2^31", {
            let mut v = follower(10, 1);
            v.extend(follower(10 + (1i64 << 31) + 5, 1));
            v
        }),
        ("more index entries than a new segment holds", {
            let mut v = Vec::new();
            for k in 0..8 {
                v.extend(follower(3 + k, 1));
            }
            v
        }),
    ];
    for (what, records) in cases {
        let r = log.append_as_follower(&records);
        assert!(matches!(r, Err(Error::InvalidRecord { .. })), "{what}: {r:?}");
        assert!(sim.files(DIR) == files, "{what}: the refused append changed the directory");
        assert_eq!(log.log_end_offset(), 3, "{what}");
        assert!(log.failure().is_none(), "{what}: a refusal failed the log");
    }
    // The partition is not wedged: leader appends go on, and survive a reopen.
    log.append_as_leader(&mut batch(3, 10), 0).unwrap();
    log.close().unwrap();
    let log = Log::open(DIR, options()).unwrap();
    assert_eq!(log.log_end_offset(), 4);
    // No segment from a refused roll (the first case's would start at i64::MAX - 1).
    assert!(log.segment_infos().iter().all(|s| s.base_offset < 4), "{:?}", log.segment_infos());
}

/// A real full filesystem: the append that hits ENOSPC fails and is not visible (log end, fetch),
/// the partition is reported failed, flush_all reports it, and once space is freed opening the
/// partition again recovers it and appends go on; after a restart exactly the acknowledged
/// batches are there.
#[test]
fn a_full_disk_fails_the_partition_until_it_is_opened_again() {
    let modes: Vec<IoMode> = match seglog_tests::test_io_mode() {
        Some(m) => vec![m],
        None => vec![IoMode::Direct, IoMode::Buffered, IoMode::Sync],
    };
    for mode in modes {
        let fs = match LoopFs::new(FsKind::Ext4, 4096, 32) {
            Ok(fs) => fs,
            Err(why) => {
                println!("SKIPPED: no loop filesystem here ({why})");
                return;
            }
        };
        full_disk(fs.path(), mode);
    }
}

fn full_disk(root: &Path, mode: IoMode) {
    let data = root.join("data");
    let mut config = EngineConfig::new(&data);
    config.io_mode = mode;
    config.shards = Some(1);
    config.pin_threads = false;
    config.durability = Durability::EveryBatch;
    config.log_config.segment_bytes = 1 << 20;
    config.checkpoint_interval_ms = 3_600_000;
    let engine = Engine::open(config.clone()).unwrap();
    let tp = TopicPartition::new("t", 0);
    let own = LogConfig { segment_bytes: 1 << 20, index_interval_bytes: 8192, ..LogConfig::default() };
    engine.open_partition(&tp, Some(own)).wait().unwrap();
    // Fill the filesystem but for about a megabyte.
    let filler = root.join("filler");
    let free = free_bytes(root).saturating_sub(1 << 20);
    std::fs::write(&filler, vec![0x5a; free as usize]).unwrap();
    let mut acked = Vec::new();
    let mut failed_at = None;
    for i in 0..10_000 {
        match engine.append(&tp, batch(i, 16 * 1024), 0).wait() {
            Ok(info) => acked.push(info.first_offset),
            Err(e) => {
                failed_at = Some((i, e.to_string()));
                break;
            }
        }
    }
    let (i, why) = failed_at.unwrap_or_else(|| panic!("{mode}: the disk never filled"));
    let end = acked.len() as i64;
    let parts = engine.partitions().unwrap();
    assert_eq!(parts[0].2, end, "{mode}: the log end includes the failed append ({why})");
    let fetched = engine.fetch(&tp, end.saturating_sub(1).max(0), 1 << 20, None).wait().unwrap();
    if end > 0 {
        let h = seglog::format::batch::BatchHeader::parse(&fetched.records).unwrap();
        assert_eq!(h.next_offset(), end, "{mode}");
        assert_eq!(fetched.records.len(), h.size_in_bytes() as usize, "{mode}: the failed append is fetched");
    }
    let failed = engine.failed_partitions().unwrap();
    assert_eq!(failed.len(), 1, "{mode}: {failed:?}");
    assert!(engine.flush_all().is_err(), "{mode}: flush_all hides the failed partition");
    assert!(matches!(engine.append(&tp, batch(i, 10), 0).wait(), Err(Error::Failed { .. })));
    // Space back: the partition opens again and takes appends.
    std::fs::remove_file(&filler).unwrap();
    engine.open_partition(&tp, None).wait().unwrap();
    assert!(engine.failed_partitions().unwrap().is_empty(), "{mode}");
    let interval = engine.with_log(&tp, |l| Ok(l.config().index_interval_bytes)).wait().unwrap();
    assert_eq!(interval, 8192, "{mode}: opened again with other settings");
    assert_eq!(engine.partitions().unwrap()[0].2, end, "{mode}: reopened at another end");
    let info = engine.append(&tp, batch(i, 10), 0).wait().unwrap();
    assert_eq!(info.first_offset, end, "{mode}");
    engine.flush_all().unwrap();
    engine.shutdown().unwrap();
    let engine = Engine::open(config).unwrap();
    assert_eq!(engine.partitions().unwrap()[0].2, end + 1, "{mode}: after a restart");
    engine.shutdown().unwrap();
    println!("{mode}: disk full at append {i} ({why}); {end} acknowledged appends kept, the failed one gone");
}

/// Free bytes of the filesystem holding `path`.
fn free_bytes(path: &Path) -> u64 {
    let out = std::process::Command::new("df").args(["-B1", "--output=avail"]).arg(path).output().unwrap();
    String::from_utf8_lossy(&out.stdout).lines().nth(1).unwrap().trim().parse().unwrap()
}

/// An I/O error at any step of a truncation (below the active segment, or of everything) fails
/// the log and never leaves it without an active segment: reads, offsets and a close after it
/// answer (with errors where they must), and nothing panics.
#[test]
fn a_truncation_failing_at_any_step_never_panics() {
    for target in [1i64, 0] {
        let mut failed = 0;
        for k in 1..40 {
            let sim = SimStorage::new();
            let options = || LogOptions {
                storage: Arc::new(sim.clone()),
                config: LogConfig { segment_bytes: 300, ..LogConfig::default() },
                ..seglog_tests::log_options()
            };
            let mut log = Log::open(DIR, options()).unwrap();
            for i in 0..6 {
                log.append_as_leader(&mut batch(i, 100), 0).unwrap();
            }
            assert!(log.segment_infos().len() >= 3);
            sim.inject(Fault::Op(sim.counters().ops + k));
            let r =
                if target == 0 { log.truncate_fully_and_start_at(0).map(|()| true) } else { log.truncate_to(target) };
            // Whatever happened, the log answers.
            let _ = log.read(log.log_start_offset(), 1 << 20, None, true);
            let _ = log.segment_infos();
            let _ = log.offset_for_time(seglog::log::ListOffset::Latest);
            let _ = log.unwritten_bytes();
            if r.is_err() {
                failed += 1;
                assert!(log.failure().is_some(), "target {target}, fault at op {k}: failed without the failed state");
            }
            let _ = log.close();
        }
        assert!(failed > 5, "target {target}: only {failed} injected faults reached the truncation");
    }
}
