//! Transactions against a log, by Kafka's rules: the coordinator's markers (fenced by producer and
//! coordinator epoch), the `.txnindex` entry of each aborted transaction in the segment its marker
//! lands in (Kafka's 34 bytes, its last stable offset included), the last stable offset a
//! read-committed consumer stops at, the aborted transactions a fetch answers, ListOffsets under
//! each isolation; truncation, a crash and a damaged file, each leaving the `.txnindex` files
//! Kafka's rules give; and the same through the engine.

mod common;

use common::*;
use seglog::config::LogConfig;
use seglog::format::builder::BatchBuilder;
use seglog::format::filename;
use seglog::log::{
    AbortedTransaction, AbortedTxn, FetchIsolation, ListOffset, MarkerType, Recovery, TxnMarker, TXN_ENTRY_BYTES,
};
use seglog::{Engine, EngineConfig, Error, TopicPartition};

/// A transactional batch of `n` records of producer `pid` at epoch 0, first sequence `seq`.
fn txn_batch(pid: i64, seq: i32, n: usize) -> Vec<u8> {
    let ts: Vec<i64> = (0..n as i64).map(|i| T0 + i).collect();
    build(BatchBuilder::new().producer(pid, 0, seq).transactional(true), &ts, 20)
}

fn abort(pid: i64, coordinator_epoch: i32) -> TxnMarker {
    TxnMarker { producer_id: pid, producer_epoch: 0, coordinator_epoch, kind: MarkerType::Abort }
}

fn commit(pid: i64, coordinator_epoch: i32) -> TxnMarker {
    TxnMarker { producer_id: pid, producer_epoch: 0, coordinator_epoch, kind: MarkerType::Commit }
}

fn txn_path(dir: &std::path::Path, base: i64) -> std::path::PathBuf {
    dir.join(filename::txn_index_file_name(base))
}

/// Kafka's bytes of one `.txnindex` entry, written out by hand.
fn kafka_entry(pid: i64, first: i64, last: i64, lso: i64) -> Vec<u8> {
    let mut e = 0i16.to_be_bytes().to_vec();
    for v in [pid, first, last, lso] {
        e.extend_from_slice(&v.to_be_bytes());
    }
    e
}

#[test]
fn an_abort_is_indexed_with_kafkas_bytes_and_a_commit_is_not() {
    let mut t = new_log(small_config());
    t.log.append_as_leader(&mut txn_batch(7, 0, 2), 0).unwrap(); // 0..=1
    t.log.append_as_leader(&mut txn_batch(9, 0, 1), 0).unwrap(); // 2
                                                                 // The marker is a control batch the coordinator writes: a client may not.
    let mut forged = abort(7, 0).to_batch(T0);
    let e = t.log.append_as_leader(&mut forged, 0).unwrap_err();
    assert!(matches!(e, Error::InvalidRecord { .. }), "{e}");
    let commit_info = t.log.append_txn_marker(&commit(9, 0), 0).unwrap(); // 3
    assert_eq!(commit_info.first_offset, 3);
    assert!(!txn_path(&t.dir(), 0).exists(), "a commit writes no .txnindex");
    let info = t.log.append_txn_marker(&abort(7, 0), 0).unwrap(); // 4
    assert_eq!((info.first_offset, info.last_offset), (4, 4));
    // Producer 9's transaction ended first: nothing else is open, so the entry's LSO is just
    // past the marker.
    assert_eq!(std::fs::read(txn_path(&t.dir(), 0)).unwrap(), kafka_entry(7, 0, 4, 5));
    assert_eq!(
        t.log.txn_index_entries(0).unwrap(),
        vec![AbortedTxn { producer_id: 7, first_offset: 0, last_offset: 4, last_stable_offset: 5 }]
    );
    // The stored marker is Kafka's: control and transactional, one record whose key is version 0
    // and type ABORT (0) and whose value is version 0 and the coordinator epoch.
    let f = t.log.read(4, u32::MAX, None, true).unwrap();
    let h = header(&f.records);
    assert!(h.is_control() && h.is_transactional());
    assert_eq!((h.producer_id, h.base_sequence, h.records_count), (7, -1, 1));
    let r = &decode(&f.records)[0];
    assert_eq!(r.key.as_deref(), Some(&[0u8, 0, 0, 0][..]));
    assert_eq!(r.value.as_deref(), Some(&[0u8, 0, 0, 0, 0, 0][..]));
}

#[test]
fn an_entrys_last_stable_offset_is_the_oldest_transaction_still_open() {
    let mut t = new_log(small_config());
    t.log.append_as_leader(&mut txn_batch(1, 0, 1), 0).unwrap(); // 0: producer 1 opens
    t.log.append_as_leader(&mut txn_batch(2, 0, 1), 0).unwrap(); // 1: producer 2 opens
    t.log.append_txn_marker(&abort(2, 0), 0).unwrap(); // 2
                                                       // Producer 1's transaction (from 0) is still open when 2 aborts.
    assert_eq!(t.log.txn_index_entries(0).unwrap()[0].last_stable_offset, 0);
    t.log.set_high_watermark(3);
    assert_eq!(t.log.last_stable_offset(), 0, "producer 1's transaction holds the LSO");
    t.log.append_txn_marker(&abort(1, 0), 0).unwrap(); // 3
    assert_eq!(
        t.log.txn_index_entries(0).unwrap()[1],
        AbortedTxn { producer_id: 1, first_offset: 0, last_offset: 3, last_stable_offset: 4 }
    );
    // Completed, but unstable until the high watermark passes the marker.
    assert_eq!(t.log.last_stable_offset(), 0);
    t.log.set_high_watermark(4);
    assert_eq!(t.log.last_stable_offset(), 4);
}

#[test]
fn markers_are_fenced_by_producer_and_coordinator_epoch() {
    let mut t = new_log(small_config());
    t.log.append_as_leader(&mut txn_batch(7, 0, 2), 0).unwrap();
    t.log.append_txn_marker(&commit(7, 5), 0).unwrap();
    t.log.append_as_leader(&mut txn_batch(7, 2, 1), 0).unwrap();
    let files = snapshot(&t.dir());
    let end = t.log.log_end_offset();
    let old_coordinator = t.log.append_txn_marker(&abort(7, 4), 0).unwrap_err();
    let old_epoch =
        t.log.append_txn_marker(&TxnMarker { producer_epoch: -1, ..abort(7, 5) }, 0).map(|_| ()).unwrap_err();
    for (e, name) in [(old_coordinator, "TRANSACTION_COORDINATOR_FENCED"), (old_epoch, "INVALID_PRODUCER_EPOCH")] {
        match &e {
            Error::Producer { source, .. } => assert_eq!(source.kafka_name(), name),
            other => panic!("{other}"),
        }
    }
    assert_eq!((t.log.log_end_offset(), snapshot(&t.dir())), (end, files), "a refused marker changes nothing");
    // A marker for a producer with nothing open (or never seen) is written and indexes nothing.
    t.log.append_txn_marker(&abort(99, 0), 0).unwrap();
    t.log.append_txn_marker(&abort(7, 5), 0).unwrap();
    assert_eq!(t.log.txn_index_entries(0).unwrap().len(), 1);
    t.log.append_txn_marker(&abort(7, 5), 0).unwrap();
    assert_eq!(t.log.txn_index_entries(0).unwrap().len(), 1, "a second marker ends nothing");
}

/// Appends `n` one-record transactions of producer `pid`, aborting those `abort(i)` picks; the
/// offsets of the aborted ones.
fn transactions(log: &mut seglog::log::Log, pid: i64, n: i32, aborted: impl Fn(i32) -> bool) -> Vec<(i64, i64)> {
    let mut out = Vec::new();
    for i in 0..n {
        let first = log.append_as_leader(&mut txn_batch(pid, i, 1), 0).unwrap().first_offset;
        let m = if aborted(i) { abort(pid, 0) } else { commit(pid, 0) };
        let last = log.append_txn_marker(&m, 0).unwrap().first_offset;
        if aborted(i) {
            out.push((first, last));
        }
    }
    out
}

#[test]
fn read_committed_stops_at_the_lso_and_answers_the_aborted_transactions_it_overlaps() {
    // Small segments: the transactions span rolls.
    let config = LogConfig { segment_bytes: 1024, ..small_config() };
    let mut t = new_log(config);
    let aborted = transactions(&mut t.log, 7, 40, |i| i % 3 == 1);
    // An open transaction of another producer holds the LSO.
    let open = t.log.append_as_leader(&mut txn_batch(8, 0, 1), 0).unwrap().first_offset;
    t.log.append_as_leader(&mut txn_batch(7, 40, 1), 0).unwrap();
    t.log.set_high_watermark(t.log.log_end_offset());
    assert!(t.log.segments().count() > 5, "the transactions span segments");
    assert_eq!(t.log.last_stable_offset(), open);
    // A read-committed consumer from the start, fetching a little at a time, sees every batch
    // below the LSO and, with them, exactly the aborted transactions they overlap.
    let mut next = 0;
    let mut seen = std::collections::BTreeSet::new();
    while next < open {
        let f = t.log.fetch(next, 300, FetchIsolation::TxnCommitted, true).unwrap();
        assert_eq!(f.last_stable_offset, open);
        let batches = batches_in(&f.records);
        assert!(!batches.is_empty());
        let end = batches.last().unwrap().1.next_offset();
        assert!(end <= open, "nothing at or past the LSO");
        let expected: Vec<AbortedTransaction> = aborted
            .iter()
            .filter(|(first, last)| *last >= next && *first < end)
            .map(|&(first, _)| AbortedTransaction { producer_id: 7, first_offset: first })
            .collect();
        assert_eq!(f.aborted_transactions, expected, "fetch from {next} to {end}");
        seen.extend(f.aborted_transactions.iter().map(|a| a.first_offset));
        next = end;
    }
    assert_eq!(seen.len(), aborted.len());
    assert!(t.log.fetch(open, 1 << 20, FetchIsolation::TxnCommitted, true).unwrap().records.is_empty());
    // Read uncommitted and a follower see past the LSO, and get no aborted transactions.
    let f = t.log.fetch(open, 1 << 20, FetchIsolation::HighWatermark, true).unwrap();
    assert_eq!(batches_in(&f.records).len(), 2);
    assert!(f.aborted_transactions.is_empty());
    // Each entry went to the segment its marker is in.
    for seg in t.log.segments() {
        let next_base = t.log.segments().map(|s| s.base_offset()).find(|&b| b > seg.base_offset());
        for e in t.log.txn_index_entries(seg.base_offset()).unwrap() {
            assert!(e.last_offset >= seg.base_offset() && next_base.is_none_or(|n| e.last_offset < n));
        }
    }
    let indexed: usize = t.log.segments().map(|s| t.log.txn_index_entries(s.base_offset()).unwrap().len()).sum();
    assert_eq!(indexed, aborted.len());
}

#[test]
fn list_offsets_under_each_isolation() {
    let mut t = new_log(small_config());
    t.log.append_as_leader(&mut batch_n(3, T0, 10), 0).unwrap(); // 0..=2
    t.log.append_as_leader(&mut txn_batch(7, 0, 1), 0).unwrap(); // 3, open
    t.log.append_as_leader(&mut batch_n(2, T0 + 100, 10), 0).unwrap(); // 4..=5
    t.log.set_high_watermark(5);
    let latest = |iso| t.log.offset_for_time_isolated(ListOffset::Latest, iso).unwrap().unwrap().offset;
    assert_eq!(latest(FetchIsolation::LogEnd), 6);
    assert_eq!(latest(FetchIsolation::HighWatermark), 5);
    assert_eq!(latest(FetchIsolation::TxnCommitted), 3);
    let earliest = t.log.offset_for_time_isolated(ListOffset::Earliest, FetchIsolation::TxnCommitted).unwrap();
    assert_eq!(earliest.unwrap().offset, 0);
    // A timestamp found at or past the bound finds nothing under that isolation.
    let by_time = |iso| t.log.offset_for_time_isolated(ListOffset::Timestamp(T0 + 100), iso).unwrap();
    assert_eq!(by_time(FetchIsolation::LogEnd).unwrap().offset, 4);
    assert_eq!(by_time(FetchIsolation::HighWatermark).unwrap().offset, 4);
    assert_eq!(by_time(FetchIsolation::TxnCommitted), None);
}

#[test]
fn truncation_below_an_abort_marker_cuts_its_entry() {
    let mut t = new_log(small_config());
    t.log.append_as_leader(&mut txn_batch(7, 0, 1), 0).unwrap(); // 0
    t.log.append_txn_marker(&abort(7, 0), 0).unwrap(); // 1
    t.log.append_as_leader(&mut txn_batch(7, 1, 1), 0).unwrap(); // 2
    t.log.append_txn_marker(&abort(7, 0), 0).unwrap(); // 3
    assert_eq!(t.log.txn_index_entries(0).unwrap().len(), 2);
    t.log.truncate_to(3).unwrap();
    assert_eq!(std::fs::read(txn_path(&t.dir(), 0)).unwrap(), kafka_entry(7, 0, 1, 2));
    // The transaction the cut marker ended is open again (the one before it stable once the
    // high watermark passes its marker), and aborts again.
    t.log.set_high_watermark(3);
    assert_eq!(t.log.producer_state().first_unstable_offset(), Some(2));
    t.log.append_txn_marker(&abort(7, 0), 0).unwrap();
    assert_eq!(t.log.txn_index_entries(0).unwrap()[1].last_offset, 3);
    t.log.truncate_to(1).unwrap();
    assert_eq!(std::fs::read(txn_path(&t.dir(), 0)).unwrap(), Vec::<u8>::new());
    assert_eq!(t.log.producer_state().first_unstable_offset(), Some(0));
}

/// Three producers' transactions interleaved, some aborted while another is open, replicated in
/// appends of several batches: the follower's `.txnindex` files are the leader's, byte for byte
/// (Kafka's follower, which completes a fetch's transactions after updating all its producers,
/// can record a later transaction's start as an entry's last stable offset).
#[test]
fn a_follower_indexes_the_leaders_aborts_byte_for_byte() {
    let config = LogConfig { segment_bytes: 1024, ..small_config() };
    let mut leader = new_log(config.clone());
    let mut follower = new_log(config);
    let mut seq = [0i32; 3];
    for i in 0..60usize {
        let pid = i % 3;
        leader.log.append_as_leader(&mut txn_batch(pid as i64, seq[pid], 1), 0).unwrap();
        seq[pid] += 1;
        // Markers end another producer's transaction while the others stay open.
        if i % 4 == 3 {
            let end = ((pid + 2) % 3) as i64;
            let m = if i % 8 == 3 { abort(end, 0) } else { commit(end, 0) };
            leader.log.append_txn_marker(&m, 0).unwrap();
        }
    }
    let entries: Vec<AbortedTxn> =
        leader.log.segments().flat_map(|s| leader.log.txn_index_entries(s.base_offset()).unwrap()).collect();
    assert!(entries.iter().any(|e| e.last_stable_offset <= e.last_offset), "an abort with another open: {entries:?}");
    let bytes = read_all(&leader.log);
    let batches = batches_in(&bytes);
    // Replicated four batches at a time (a fetch's worth) when they are in one segment.
    let seg = |o: i64| leader.log.floor_segment(o).unwrap().base_offset();
    for chunk in batches.chunks(4) {
        let (from, first) = chunk[0];
        let (at, last) = chunk[chunk.len() - 1];
        if seg(first.base_offset) == seg(last.base_offset) {
            follower.log.append_as_follower(&bytes[from..at + last.size_in_bytes() as usize]).unwrap();
        } else {
            for &(at, h) in chunk {
                follower.log.append_as_follower(&bytes[at..at + h.size_in_bytes() as usize]).unwrap();
            }
        }
    }
    let txn_files =
        |dir: &std::path::Path| snapshot(dir).into_iter().filter(|(n, _)| n.ends_with(".txnindex")).collect::<Vec<_>>();
    let l = txn_files(&leader.dir());
    assert!(l.len() > 3);
    assert_eq!(txn_files(&follower.dir()), l);
}

/// A crash (no close) after aborts in several segments, the `.txnindex` of the active segment
/// lost and one of a sealed segment damaged: the next open rebuilds both, byte for byte.
#[test]
fn after_a_crash_or_damage_the_txnindex_files_are_rebuilt() {
    let config = LogConfig { segment_bytes: 1024, ..small_config() };
    let mut t = new_log(config.clone());
    transactions(&mut t.log, 5, 40, |i| i % 9 == 1);
    t.log.append_as_leader(&mut txn_batch(5, 40, 1), 0).unwrap();
    t.log.append_txn_marker(&abort(5, 0), 0).unwrap();
    t.log.flush().unwrap();
    let dir = t.dir();
    let bases = segment_bases(&t.log);
    let active = *bases.last().unwrap();
    let sealed_with_entries = *bases.iter().find(|&&b| b != active && txn_path(&dir, b).exists()).unwrap();
    let before: Vec<(String, Vec<u8>)> = snapshot(&dir).into_iter().filter(|(n, _)| n.ends_with(".txnindex")).collect();
    assert!(txn_path(&dir, active).exists());
    let TestLog { tmp, clock, log } = t;
    drop(log);
    std::fs::remove_file(txn_path(&dir, active)).unwrap();
    // A torn last entry in a sealed segment, and a file of zeros (a torn first write) in a sealed
    // segment with no abort.
    let p = txn_path(&dir, sealed_with_entries);
    let len = std::fs::metadata(&p).unwrap().len();
    std::fs::OpenOptions::new().write(true).open(&p).unwrap().set_len(len - 5).unwrap();
    let no_abort = *bases.iter().find(|&&b| b != active && !txn_path(&dir, b).exists()).unwrap();
    std::fs::write(txn_path(&dir, no_abort), [0u8; TXN_ENTRY_BYTES]).unwrap();
    let txn_files =
        || -> Vec<(String, Vec<u8>)> { snapshot(&dir).into_iter().filter(|(n, _)| n.ends_with(".txnindex")).collect() };
    let recovering = Recovery::FromRecoveryPoint(active);
    let (log, report) = seglog::log::Log::open_with_report(&dir, options(config.clone(), &clock, recovering)).unwrap();
    assert_eq!(report.txn_indexes_rebuilt.len(), 2, "{report:?}");
    assert!(report.txn_indexes_rebuilt.iter().any(|p| p.contains("partial entry")), "{report:?}");
    assert_eq!(txn_files(), before);
    log.close().unwrap();
    // An entry of the active segment past the log end (as a crash between the file's write and
    // the marker's leaves it) is damage too, rebuilt even at a clean open.
    let mut bogus = std::fs::read(txn_path(&dir, active)).unwrap();
    bogus.extend_from_slice(&kafka_entry(5, 0, 1 << 40, (1 << 40) + 1));
    std::fs::write(txn_path(&dir, active), &bogus).unwrap();
    let (log, report) = seglog::log::Log::open_with_report(&dir, options(config, &clock, Recovery::Clean)).unwrap();
    assert_eq!(report.txn_indexes_rebuilt.len(), 1, "{report:?}");
    assert_eq!(txn_files(), before);
    drop(log);
    drop(tmp);
}

/// Through the engine: markers acknowledged as appends are, and fetches and offset lookups by
/// isolation.
#[test]
fn the_engine_writes_markers_and_fetches_by_isolation() {
    let tmp = tempfile::tempdir().unwrap();
    let config = || {
        let mut cfg = EngineConfig::new(tmp.path());
        cfg.shards = Some(1);
        cfg.pin_threads = false;
        cfg
    };
    let engine = Engine::open(config()).unwrap();
    let tp = TopicPartition::new("t", 0);
    engine.open_partition(&tp, None).wait().unwrap();
    engine.append(&tp, txn_batch(7, 0, 2), 0).wait().unwrap(); // 0..=1
    engine.append(&tp, txn_batch(8, 0, 1), 0).wait().unwrap(); // 2
    let m = engine.append_txn_marker(&tp, &abort(7, 0), 0).wait().unwrap(); // 3
    assert_eq!(m.first_offset, 3);
    let high_watermark_to_end = || {
        let set = |log: &mut seglog::log::Log| {
            log.set_high_watermark(log.log_end_offset());
            Ok(())
        };
        engine.with_log(&tp, set).wait().unwrap()
    };
    high_watermark_to_end();
    let lso = engine.list_offset_isolated(&tp, ListOffset::Latest, FetchIsolation::TxnCommitted).wait().unwrap();
    assert_eq!(lso.unwrap().offset, 2, "producer 8's open transaction holds the LSO");
    engine.append_txn_marker(&tp, &commit(8, 0), 0).wait().unwrap(); // 4
    high_watermark_to_end();
    // The markers' timestamps (now) are far past the data's (T0): the first marker rolled the
    // segment (segment.ms), so a fetch reads one segment at a time.
    let f = engine.fetch_isolated(&tp, 0, 1 << 20, FetchIsolation::TxnCommitted).wait().unwrap();
    assert_eq!((f.last_stable_offset, batches_in(&f.records).len()), (5, 2));
    let rest = engine.fetch_isolated(&tp, 3, 1 << 20, FetchIsolation::TxnCommitted).wait().unwrap();
    assert_eq!(batches_in(&rest.records).len(), 2);
    assert_eq!(rest.aborted_transactions, vec![AbortedTransaction { producer_id: 7, first_offset: 0 }]);
    assert_eq!(f.aborted_transactions, vec![AbortedTransaction { producer_id: 7, first_offset: 0 }]);
    let f = engine.fetch_isolated(&tp, 0, 1 << 20, FetchIsolation::HighWatermark).wait().unwrap();
    assert!(f.aborted_transactions.is_empty());
    engine.shutdown().unwrap();
    // Reopened cleanly: the index is the one written, the state is the same.
    let engine = Engine::open(config()).unwrap();
    engine.open_partition(&tp, None).wait().unwrap();
    let f = engine.fetch_isolated(&tp, 0, 1 << 20, FetchIsolation::TxnCommitted).wait().unwrap();
    assert_eq!(f.aborted_transactions, vec![AbortedTransaction { producer_id: 7, first_offset: 0 }]);
    assert_eq!(std::fs::read(txn_path(&tmp.path().join("t-0"), 3)).unwrap().len(), TXN_ENTRY_BYTES);
    engine.shutdown().unwrap();
}
