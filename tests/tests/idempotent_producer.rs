//! Idempotent and transactional producers against a log, by Kafka's rules: a retried batch gets
//! its first copy's offsets and nothing is written; a sequence gap, an old epoch and a plain batch
//! inside an open transaction are refused with Kafka's error, the directory byte-identical; a
//! follower takes the leader's batches and markers as they are; truncation forgets what it cut;
//! the engine acknowledges a retry once its first copy is covered.

mod common;

use common::*;
use seglog::config::LogConfig;
use seglog::format::builder::BatchBuilder;
use seglog::log::producer_state::ProducerError;
use seglog::log::{MarkerType, Recovery, TxnMarker};
use seglog::{Durability, Engine, EngineConfig, Error, TopicPartition};

const PID: i64 = 4242;

/// A batch of `n` records of producer `PID` at `epoch`, first sequence `seq`.
fn idempotent(epoch: i16, seq: i32, n: usize) -> Vec<u8> {
    let ts: Vec<i64> = (0..n as i64).map(|i| T0 + i).collect();
    build(BatchBuilder::new().producer(PID, epoch, seq), &ts, 20)
}

fn transactional(epoch: i16, seq: i32, n: usize) -> Vec<u8> {
    let ts: Vec<i64> = (0..n as i64).map(|i| T0 + i).collect();
    build(BatchBuilder::new().producer(PID, epoch, seq).transactional(true), &ts, 20)
}

/// A transaction marker of `PID` (control batch, one record) at `offset`, as a leader wrote it.
fn marker(commit: bool, coordinator_epoch: i32, epoch: i16, offset: i64) -> Vec<u8> {
    let key = [0u8, 0, 0, commit as u8];
    let mut value = vec![0u8, 0];
    value.extend_from_slice(&coordinator_epoch.to_be_bytes());
    let mut b = BatchBuilder::new().base_offset(offset).producer(PID, epoch, -1).transactional(true).control(true);
    b.push(T0, Some(&key), Some(&value), &[]);
    b.build().unwrap()
}

#[test]
fn a_retried_batch_gets_its_first_offsets_and_nothing_is_written() {
    let mut t = new_log(small_config());
    t.log.append_as_leader(&mut batch_n(2, T0, 10), 0).unwrap();
    let first = t.log.append_as_leader(&mut idempotent(0, 0, 3), 0).unwrap();
    let second = t.log.append_as_leader(&mut idempotent(0, 3, 2), 0).unwrap();
    assert_eq!((first.first_offset, first.last_offset, second.first_offset), (2, 4, 5));
    let files = snapshot(&t.dir());
    // Both are among the last five: retried, each gets its own offsets back.
    for (b, info) in [(idempotent(0, 0, 3), first), (idempotent(0, 3, 2), second)] {
        let again = t.log.append_as_leader(&mut b.clone(), 0).unwrap();
        assert!(again.duplicate);
        assert_eq!((again.first_offset, again.last_offset), (info.first_offset, info.last_offset));
        assert_eq!((again.batches, again.bytes), (0, 0));
    }
    assert_eq!(t.log.log_end_offset(), 7);
    assert_eq!(snapshot(&t.dir()), files, "a duplicate writes nothing");
    // Past five batches the oldest is forgotten: its retry is out of order, not a duplicate.
    for i in 0..5 {
        t.log.append_as_leader(&mut idempotent(0, 5 + i, 1), 0).unwrap();
    }
    let e = t.log.append_as_leader(&mut idempotent(0, 0, 3), 0).unwrap_err();
    assert!(
        matches!(e, Error::Producer { source: ProducerError::OutOfOrderSequence { sequence: 0, last: 9, .. }, .. }),
        "{e}"
    );
}

#[test]
fn refusals_name_kafkas_error_and_leave_the_directory_as_it_was() {
    let mut t = new_log(small_config());
    t.log.append_as_leader(&mut idempotent(3, 0, 2), 0).unwrap();
    let files = snapshot(&t.dir());
    let end = t.log.log_end_offset();
    let cases: [(Vec<u8>, &str); 3] = [
        (idempotent(3, 5, 1), "OUT_OF_ORDER_SEQUENCE_NUMBER"),
        (idempotent(2, 2, 1), "INVALID_PRODUCER_EPOCH"),
        (idempotent(4, 1, 1), "OUT_OF_ORDER_SEQUENCE_NUMBER"),
    ];
    for (b, name) in cases {
        let e = t.log.append_as_leader(&mut b.clone(), 0).unwrap_err();
        match &e {
            Error::Producer { at: 0, source } => assert_eq!(source.kafka_name(), name, "{e}"),
            other => panic!("expected a producer error, got {other}"),
        }
        assert!(e.to_string().contains(name), "{e}");
        assert_eq!((t.log.log_end_offset(), snapshot(&t.dir())), (end, files.clone()));
    }
    // A two-batch request whose second batch is refused appends neither.
    let mut two = idempotent(3, 2, 1);
    two.extend(idempotent(3, 9, 1));
    assert!(t.log.append_as_leader(&mut two, 0).is_err());
    assert_eq!(t.log.log_end_offset(), end);
    // A new epoch starts at 0; the next sequence of the current one follows.
    t.log.append_as_leader(&mut idempotent(3, 2, 1), 0).unwrap();
    t.log.append_as_leader(&mut idempotent(4, 0, 1), 0).unwrap();
    // Inside an open transaction a plain batch is refused.
    t.log.append_as_leader(&mut transactional(4, 1, 1), 0).unwrap();
    assert_eq!(t.log.producer_state().first_unstable_offset(), Some(4));
    let e = t.log.append_as_leader(&mut idempotent(4, 2, 1), 0).unwrap_err();
    assert!(matches!(&e, Error::Producer { source, .. } if source.kafka_name() == "INVALID_TXN_STATE"), "{e}");
}

#[test]
fn a_follower_takes_the_leaders_batches_and_markers_as_they_are() {
    let mut leader = new_log(small_config());
    let mut follower = new_log(small_config());
    for b in [transactional(1, 0, 2), transactional(1, 2, 1)] {
        let mut b = b;
        leader.log.append_as_leader(&mut b, 0).unwrap();
        follower.log.append_as_follower(&b).unwrap();
    }
    assert_eq!(follower.log.producer_state().first_unstable_offset(), Some(0));
    let entry = follower.log.producer_state().last_entry(PID).unwrap().clone();
    assert_eq!((entry.epoch, entry.last_seq(), entry.current_txn_first_offset), (1, 2, Some(0)));
    // The coordinator's ABORT at 3: the transaction completes, unstable until the high
    // watermark passes the marker.
    follower.log.append_as_follower(&marker(false, 7, 1, 3)).unwrap();
    let s = follower.log.producer_state();
    assert_eq!(s.last_entry(PID).unwrap().current_txn_first_offset, None);
    assert_eq!(s.last_entry(PID).unwrap().coordinator_epoch, 7);
    assert_eq!(s.first_unstable_offset(), Some(0));
    follower.log.set_high_watermark(4);
    assert_eq!(follower.log.producer_state().first_unstable_offset(), None);
    // An old epoch from the leader is taken, not refused.
    let old = build(BatchBuilder::new().base_offset(4).producer(PID, 0, 0), &[T0], 5);
    follower.log.append_as_follower(&old).unwrap();
    assert_eq!(follower.log.log_end_offset(), 5);
}

#[test]
fn truncation_forgets_the_batches_it_cut() {
    let mut t = new_log(small_config());
    t.log.append_as_leader(&mut idempotent(0, 0, 2), 0).unwrap();
    let cut = t.log.append_as_leader(&mut idempotent(0, 2, 2), 0).unwrap();
    t.log.truncate_to(cut.first_offset).unwrap();
    // The cut batch, sent again, is appended again (not answered with offsets that are gone).
    let again = t.log.append_as_leader(&mut idempotent(0, 2, 2), 0).unwrap();
    assert!(!again.duplicate);
    assert_eq!((again.first_offset, t.log.log_end_offset()), (2, 4));
}

/// Through the engine a retry is acknowledged with its first copy's offsets once that copy is
/// written (and, under `EveryBatch`, durable), in either durability.
#[test]
fn the_engine_answers_a_retry_with_the_first_offsets() {
    for durability in [Durability::None, Durability::EveryBatch] {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = EngineConfig::new(dir.path());
        cfg.shards = Some(1);
        cfg.pin_threads = false;
        cfg.durability = durability;
        let e = Engine::open(cfg).unwrap();
        let tp = TopicPartition::new("idem", 0);
        e.open_partition(&tp, None).wait().unwrap();
        // The first copy and its retry sent together: the retry waits for the first's write.
        let a = e.append(&tp, idempotent(0, 0, 3), 0);
        let retry = e.append(&tp, idempotent(0, 0, 3), 0);
        let next = e.append(&tp, idempotent(0, 3, 1), 0);
        let (a, retry, next) = (a.wait().unwrap(), retry.wait().unwrap(), next.wait().unwrap());
        assert_eq!((a.first_offset, a.last_offset), (0, 2), "{durability:?}");
        assert!(retry.duplicate && (retry.first_offset, retry.last_offset) == (0, 2), "{durability:?}: {retry:?}");
        assert_eq!(next.first_offset, 3);
        // Long after: answered at once.
        let late = e.append(&tp, idempotent(0, 3, 1), 0).wait().unwrap();
        assert!(late.duplicate && late.first_offset == 3);
        let gap = e.append(&tp, idempotent(0, 9, 1), 0).wait().unwrap_err();
        assert!(matches!(gap, Error::Producer { .. }), "{gap}");
        e.shutdown().unwrap();
        let e = Engine::open({
            let mut c = EngineConfig::new(dir.path());
            c.shards = Some(1);
            c.pin_threads = false;
            c
        })
        .unwrap();
        assert_eq!(e.partitions().unwrap()[0].2, 4, "{durability:?}: the retry wrote nothing");
        e.shutdown().unwrap();
    }
}

fn snapshots_in(dir: &std::path::Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".snapshot"))
        .collect();
    v.sort();
    v
}

/// A clean close leaves a snapshot at the log end, a roll one at the new segment's base, and the
/// state they hold recognises a retry after the restart: of the producer's last batch, the one a
/// snapshot keeps (Kafka's layout has one batch per producer; an older retry is out of order, as
/// with Kafka).
#[test]
fn snapshots_at_roll_and_close_carry_the_state_across_a_restart() {
    let config = LogConfig { segment_bytes: 300, ..small_config() };
    let mut t = new_log(config.clone());
    let mut infos = Vec::new();
    for i in 0..4 {
        infos.push(t.log.append_as_leader(&mut idempotent(0, i * 2, 2), 0).unwrap());
    }
    let rolls: Vec<i64> = t.log.segments().skip(1).map(|s| s.base_offset()).collect();
    assert!(!rolls.is_empty(), "the segments rolled");
    let expected: Vec<String> = rolls.iter().map(|b| seglog::format::filename::snapshot_file_name(*b)).collect();
    assert_eq!(snapshots_in(&t.dir()), expected, "one per roll");
    let dir = t.dir();
    let TestLog { tmp, clock, log } = t;
    log.close().unwrap();
    let mut at_end = expected.clone();
    at_end.push(seglog::format::filename::snapshot_file_name(8));
    assert_eq!(snapshots_in(&dir), at_end, "and one at the log end");
    let mut log = open_dir(&dir, config, &clock, Recovery::Clean);
    let again = log.append_as_leader(&mut idempotent(0, 6, 2), 0).unwrap();
    assert!(again.duplicate, "the last batch after the restart");
    assert_eq!((again.first_offset, again.last_offset), (infos[3].first_offset, infos[3].last_offset));
    let e = log.append_as_leader(&mut idempotent(0, 4, 2), 0).unwrap_err();
    assert!(matches!(e, Error::Producer { source: ProducerError::OutOfOrderSequence { last: 7, .. }, .. }), "{e}");
    assert_eq!(log.log_end_offset(), 8);
    drop(tmp);
}

/// After a crash the state is rebuilt from the log (no snapshot at its end): a retry of a batch
/// acknowledged before it is still recognised. A damaged snapshot is deleted, never trusted.
#[test]
fn after_a_crash_the_state_is_replayed_and_a_damaged_snapshot_is_refused() {
    let config = small_config();
    let mut t = new_log(config.clone());
    t.log.append_as_leader(&mut idempotent(0, 0, 3), 0).unwrap();
    t.log.append_as_leader(&mut transactional(0, 3, 1), 0).unwrap();
    t.log.flush().unwrap();
    let dir = t.dir();
    let TestLog { tmp, clock, log } = t;
    drop(log); // a crash: no close, no snapshot
    assert!(snapshots_in(&dir).is_empty());
    // A damaged snapshot at the end, as a crash mid-write would leave.
    std::fs::write(dir.join(seglog::format::filename::snapshot_file_name(4)), [0u8, 1, 9, 9, 9, 9, 0, 0, 0, 0])
        .unwrap();
    let mut log = open_dir(&dir, config, &clock, Recovery::FromRecoveryPoint(0));
    assert!(snapshots_in(&dir).is_empty(), "the damaged snapshot was deleted");
    let again = log.append_as_leader(&mut idempotent(0, 0, 3), 0).unwrap();
    assert!(again.duplicate && again.first_offset == 0);
    // The transaction open before the crash is open after it.
    assert_eq!(log.producer_state().first_unstable_offset(), Some(3));
    assert_eq!(log.producer_state().last_entry(PID).unwrap().current_txn_first_offset, Some(3));
    drop(tmp);
}

/// A truncation deletes the snapshots past the new end and rebuilds the state below it: a batch
/// below the cut is still a duplicate, a cut one is appended anew.
#[test]
fn truncation_rebuilds_the_state_below_the_cut() {
    // One batch per segment: snapshots at 2, 4 and 6.
    let config = LogConfig { segment_bytes: 200, ..small_config() };
    let mut t = new_log(config);
    for i in 0..4 {
        t.log.append_as_leader(&mut idempotent(0, i * 2, 2), 0).unwrap();
    }
    let name = seglog::format::filename::snapshot_file_name;
    assert_eq!(snapshots_in(&t.dir()), vec![name(2), name(4), name(6)]);
    t.log.truncate_to(4).unwrap();
    assert_eq!(snapshots_in(&t.dir()), vec![name(2), name(4)], "the one past the new end is gone");
    let kept = t.log.append_as_leader(&mut idempotent(0, 2, 2), 0).unwrap();
    assert!(kept.duplicate && kept.first_offset == 2);
    let cut = t.log.append_as_leader(&mut idempotent(0, 4, 2), 0).unwrap();
    assert!(!cut.duplicate && cut.first_offset == 4);
}

/// Producers idle past `producer_id_expiration_ms` are not loaded; one with a transaction open
/// is.
#[test]
fn expired_producers_are_not_loaded() {
    let config = LogConfig { producer_id_expiration_ms: 60_000, ..small_config() };
    let mut t = new_log(config.clone());
    t.log.append_as_leader(&mut idempotent(0, 0, 1), 0).unwrap();
    let dir = t.dir();
    let TestLog { tmp, clock, log } = t;
    log.close().unwrap();
    clock.advance(61_000);
    let mut log = open_dir(&dir, config, &clock, Recovery::Clean);
    assert!(log.producer_state().last_entry(PID).is_none());
    // Forgotten: its next batch is taken at any sequence.
    assert!(!log.append_as_leader(&mut idempotent(0, 7, 1), 0).unwrap().duplicate);
    drop(tmp);
}

/// After a clean shutdown whose snapshot is damaged, the state comes from the log (Kafka's
/// upgrade path is only for a log with no snapshot at all), and the damaged file is gone.
#[test]
fn a_clean_open_with_a_damaged_snapshot_replays_the_log() {
    let config = small_config();
    let mut t = new_log(config.clone());
    t.log.append_as_leader(&mut idempotent(0, 0, 2), 0).unwrap();
    let dir = t.dir();
    let TestLog { tmp, clock, log } = t;
    log.close().unwrap();
    let name = seglog::format::filename::snapshot_file_name(2);
    let mut bytes = std::fs::read(dir.join(&name)).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    std::fs::write(dir.join(&name), bytes).unwrap();
    let mut log = open_dir(&dir, config, &clock, Recovery::Clean);
    assert!(snapshots_in(&dir).is_empty(), "the damaged snapshot was deleted");
    assert!(log.append_as_leader(&mut idempotent(0, 0, 2), 0).unwrap().duplicate);
    drop(tmp);
}

/// A retention pass forgets producers idle past `producer_id_expiration_ms`, as Kafka's
/// periodic check does.
#[test]
fn a_retention_pass_expires_idle_producers() {
    let config = LogConfig { producer_id_expiration_ms: 60_000, ..small_config() };
    let mut t = new_log(config);
    t.log.append_as_leader(&mut idempotent(0, 0, 1), 0).unwrap();
    t.clock.advance(30_000);
    t.log.apply_retention().unwrap();
    assert!(t.log.producer_state().last_entry(PID).is_some());
    t.clock.advance(31_000);
    t.log.apply_retention().unwrap();
    assert!(t.log.producer_state().last_entry(PID).is_none());
}

/// A power cut at every I/O of a small workload (two idempotent producers and a transactional
/// one, small segments so that rolls write snapshots, each append flushed before it is
/// acknowledged): after recovery, every acknowledged batch sent again is answered as a
/// duplicate with its first offsets or refused as out of order, and never written a second
/// time.
#[test]
fn after_a_power_cut_no_acknowledged_batch_is_written_twice() {
    use seglog::io::sim::{SimRng, SimStorage};
    use std::sync::Arc;
    let config = LogConfig { segment_bytes: 400, ..small_config() };
    let dir = std::path::PathBuf::from("/sim/topic-0");
    let open = |sim: &SimStorage, clock: &Arc<seglog::config::ManualClock>, recovery| {
        let options = seglog::log::LogOptions {
            config: config.clone(),
            storage: Arc::new(sim.clone()),
            clock: clock.clone(),
            recovery,
            writes: seglog::log::Writes::Through,
            ..seglog_tests::log_options()
        };
        seglog::log::Log::open(&dir, options)
    };
    const OTHER: i64 = 77;
    const TXN: i64 = 88;
    // (producer, first sequence, records, transactional): PID with two-record batches, OTHER
    // with one-record ones, TXN in transactions of one or two batches, ended alternately by an
    // ABORT and a COMMIT from its coordinator (records 0: a marker, aborting when `seq` is odd).
    let plan: Vec<(i64, i32, usize, bool)> = (0..18)
        .map(|i: i32| match i % 3 {
            0 => (PID, i / 3 * 2, 2, false),
            1 => (OTHER, i / 3, 1, false),
            _ if i % 9 == 8 => (TXN, i / 9, 0, true),
            _ => (TXN, i / 3 - i / 9, 1, true),
        })
        .collect();
    let batch_of = |&(pid, seq, n, txn): &(i64, i32, usize, bool)| {
        let ts: Vec<i64> = (0..n as i64).map(|i| T0 + i).collect();
        build(BatchBuilder::new().producer(pid, 0, seq).transactional(txn), &ts, 30)
    };
    let append = |log: &mut seglog::log::Log, p: &(i64, i32, usize, bool)| {
        if p.2 == 0 {
            let kind = if p.1 % 2 == 1 { MarkerType::Abort } else { MarkerType::Commit };
            log.append_txn_marker(&TxnMarker { producer_id: TXN, producer_epoch: 0, coordinator_epoch: 0, kind }, 0)
        } else {
            log.append_as_leader(&mut batch_of(p), 0)
        }
    };
    // The I/Os of the whole workload, to cut at each.
    let total = {
        let sim = SimStorage::new();
        sim.put_dir("/sim");
        sim.set_now_ms(T0);
        let clock = Arc::new(seglog::config::ManualClock::new(T0));
        let mut log = open(&sim, &clock, Recovery::default()).unwrap();
        for p in &plan {
            append(&mut log, p).unwrap();
            log.flush().unwrap();
        }
        assert!(log.segments().any(|s| !log.txn_index_entries(s.base_offset()).unwrap().is_empty()));
        sim.io_count()
    };
    let mut checked = 0;
    for k in 1..=total {
        let sim = SimStorage::new();
        sim.put_dir("/sim");
        sim.set_now_ms(T0);
        sim.halt_after(Some(k));
        let clock = Arc::new(seglog::config::ManualClock::new(T0));
        let mut acked = Vec::new();
        // The recovery point the last successful flush left, as a broker checkpoints it: the
        // segments below it are not recovered, so their `.txnindex` must have been durable.
        let mut recovery_point = 0;
        if let Ok(mut log) = open(&sim, &clock, Recovery::default()) {
            for p in &plan {
                let Ok(info) = append(&mut log, p) else { break };
                if log.flush().is_err() {
                    break;
                }
                recovery_point = log.recovery_point();
                acked.push((*p, info));
            }
        }
        let crashed = sim.crash(&mut SimRng::new(k));
        let Ok(mut log) = open(&crashed, &clock, Recovery::FromRecoveryPoint(recovery_point)) else {
            panic!("cut at I/O {k}: the log does not reopen");
        };
        let end = log.log_end_offset();
        assert!(end >= acked.last().map_or(0, |(_, i)| i.last_offset + 1), "cut at I/O {k}: acknowledged data lost");
        // The `.txnindex` files are what the recovered log's markers give, every acknowledged
        // ABORT among them.
        let mut replay = seglog::log::ProducerReplay::default();
        let mut want = Vec::new();
        let mut indexed = Vec::new();
        for seg in log.segments() {
            let bytes = log.read(seg.base_offset(), u32::MAX, None, true).unwrap();
            for (at, h) in batches_in(&bytes.records) {
                want.extend(replay.batch(&h, &bytes.records[at..at + h.size_in_bytes() as usize]));
            }
            indexed.extend(log.txn_index_entries(seg.base_offset()).unwrap());
        }
        assert_eq!(indexed, want, "cut at I/O {k}");
        let acked_aborts = acked.iter().filter(|(p, _)| p.2 == 0 && p.1 % 2 == 1).count();
        assert!(indexed.len() >= acked_aborts, "cut at I/O {k}: an acknowledged abort is not indexed");
        for (p, info) in acked.iter().filter(|(p, _)| p.2 > 0) {
            match log.append_as_leader(&mut batch_of(p), 0) {
                Ok(again) => {
                    assert!(
                        again.duplicate,
                        "cut at I/O {k}: {p:?} acknowledged at {} written again",
                        info.first_offset
                    );
                    assert_eq!(
                        (again.first_offset, again.last_offset),
                        (info.first_offset, info.last_offset),
                        "cut at I/O {k}"
                    );
                }
                Err(Error::Producer { source: ProducerError::OutOfOrderSequence { .. }, .. }) => {}
                Err(e) => panic!("cut at I/O {k}: retry of {p:?}: {e}"),
            }
            assert_eq!(log.log_end_offset(), end, "cut at I/O {k}: a retry was appended");
            checked += 1;
        }
    }
    println!("{checked} retries over {total} cuts");
    assert!(checked > total, "{checked} retries over {total} cuts");
}
