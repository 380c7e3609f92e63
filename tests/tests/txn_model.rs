//! A model test of producer state and transactions: random interleavings of idempotent and
//! transactional producers (retries of earlier batches, sequence gaps, fenced epochs and
//! coordinators, plain batches inside a transaction, commits and aborts), with rolls, high
//! watermark moves, truncations and restarts (clean, and crashes recovered from an earlier
//! recovery point), against a small reference model of Kafka's rules. After every step the log
//! must agree with the model: each answer (offsets, duplicate, Kafka's error), the last stable
//! offset, the `.txnindex` entries of every segment, and the aborted transactions a
//! read-committed consumer is handed.
//!
//! `SEGLOG_MODEL_CASES` sets the number of cases (default 1500); a failure prints its seed, and
//! `SEGLOG_MODEL_TRACE` prints every step.

mod common;

use std::collections::BTreeMap;

use common::*;
use seglog::config::LogConfig;
use seglog::format::builder::BatchBuilder;
use seglog::log::{AbortedTransaction, AbortedTxn, FetchIsolation, Log, MarkerType, Recovery, TxnMarker};
use seglog::Error;

const PRODUCERS: i64 = 4;

/// One batch the log took, as the model keeps it.
#[derive(Clone, Copy, Debug)]
enum Item {
    Data { pid: i64, epoch: i16, first_seq: i32, last_seq: i32, first: i64, last: i64, txn: bool },
    Marker { pid: i64, epoch: i16, coordinator_epoch: i32, abort: bool, offset: i64 },
    Plain { first: i64, last: i64 },
}

impl Item {
    fn first(&self) -> i64 {
        match *self {
            Item::Data { first, .. } | Item::Plain { first, .. } => first,
            Item::Marker { offset, .. } => offset,
        }
    }
    fn next(&self) -> i64 {
        match *self {
            Item::Data { last, .. } | Item::Plain { last, .. } => last + 1,
            Item::Marker { offset, .. } => offset + 1,
        }
    }
}

/// A producer as the model's rules see it.
#[derive(Clone, Debug, Default)]
struct Producer {
    epoch: i16,
    last_seq: i32,
    coordinator_epoch: i32,
    open: Option<i64>,
    /// (first seq, last seq, first offset, last offset) of its last five batches, this epoch.
    batches: Vec<(i32, i32, i64, i64)>,
}

/// The state the model's items give (Kafka's rules, folded over the log in order).
#[derive(Default)]
struct Folded {
    producers: BTreeMap<i64, Producer>,
    aborted: Vec<AbortedTxn>,
    /// (first offset, marker offset) of every completed transaction.
    completed: Vec<(i64, i64)>,
}

fn fold(items: &[Item]) -> Folded {
    let mut f = Folded::default();
    for it in items {
        match *it {
            Item::Data { pid, epoch, first_seq, last_seq, first, last, txn } => {
                // Kafka's new entry: no coordinator epoch yet (-1).
                let p =
                    f.producers.entry(pid).or_insert(Producer { epoch, coordinator_epoch: -1, ..Producer::default() });
                if p.epoch != epoch {
                    p.batches.clear();
                    p.epoch = epoch;
                }
                p.batches.push((first_seq, last_seq, first, last));
                if p.batches.len() > 5 {
                    p.batches.remove(0);
                }
                p.last_seq = last_seq;
                if txn && p.open.is_none() {
                    p.open = Some(first);
                }
            }
            Item::Marker { pid, epoch, coordinator_epoch, abort, offset } => {
                let open = {
                    let p = f.producers.entry(pid).or_insert(Producer { epoch, last_seq: -1, ..Producer::default() });
                    if p.epoch != epoch {
                        p.batches.clear();
                        p.epoch = epoch;
                    }
                    p.coordinator_epoch = coordinator_epoch;
                    p.open.take()
                };
                if let Some(first) = open {
                    f.completed.push((first, offset));
                    if abort {
                        let lso = f
                            .producers
                            .iter()
                            .filter(|(q, _)| **q != pid)
                            .filter_map(|(_, p)| p.open)
                            .min()
                            .unwrap_or(offset + 1);
                        f.aborted.push(AbortedTxn {
                            producer_id: pid,
                            first_offset: first,
                            last_offset: offset,
                            last_stable_offset: lso,
                        });
                    }
                }
            }
            Item::Plain { .. } => {}
        }
    }
    f
}

/// What the model says an append must get.
#[derive(Debug, PartialEq)]
enum Expect {
    Appended,
    /// A retry of the batch at these offsets: answered with them (or, when the log may have
    /// forgotten it across a restart, refused as out of order), never written again.
    Duplicate {
        first: i64,
        last: i64,
        certain: bool,
    },
    Refused(&'static str),
}

/// What the cases exercised, summed (a model test that stopped reaching a rule would pass
/// vacuously: each kind must occur).
#[derive(Debug, Default)]
struct Seen {
    appended: u64,
    duplicates: u64,
    refused: BTreeMap<&'static str, u64>,
    markers: u64,
    aborts_indexed: u64,
    truncations: u64,
    clean_restarts: u64,
    crashes: u64,
}

struct Case {
    seen: Seen,
    rng: Rng,
    items: Vec<Item>,
    hw: i64,
    /// Per producer: the batches appended since the last restart or truncation (a retry of
    /// one of those among the last five is a certain duplicate).
    fresh: BTreeMap<i64, Vec<(i32, i32)>>,
}

fn data_batch(pid: i64, epoch: i16, seq: i32, n: usize, txn: bool) -> Vec<u8> {
    let mut b = BatchBuilder::new().producer(pid, epoch, seq).transactional(txn);
    for i in 0..n {
        b.push(T0 + i as i64, Some(&key_of(i)[..]), Some(&[pid as u8; 24][..]), &[]);
    }
    b.build().unwrap()
}

impl Case {
    fn end(&self) -> i64 {
        self.items.last().map_or(0, |i| i.next())
    }

    fn expect_data(&self, f: &Folded, pid: i64, epoch: i16, seq: i32, n: i32, txn: bool) -> Expect {
        let Some(p) = f.producers.get(&pid) else { return Expect::Appended };
        let last = seq + n - 1;
        if epoch == p.epoch {
            if let Some(&(_, _, first, lastoff)) = p.batches.iter().find(|b| b.0 == seq && b.1 == last) {
                let newest = p.batches.last().is_some_and(|b| b.0 == seq);
                let fresh = self.fresh.get(&pid).is_some_and(|v| v.contains(&(seq, last)));
                return Expect::Duplicate { first, last: lastoff, certain: newest || fresh };
            }
        }
        if epoch < p.epoch {
            return Expect::Refused("INVALID_PRODUCER_EPOCH");
        }
        // Kafka's checkSequence: a new epoch starts at 0, unless the producer had none (-1); in
        // the same epoch the sequence follows the last one, any sequence when that epoch is -1.
        let in_sequence = if epoch != p.epoch {
            seq == 0 || p.epoch == -1
        } else {
            p.epoch == -1 || seq == p.last_seq.wrapping_add(1)
        };
        if !in_sequence {
            return Expect::Refused("OUT_OF_ORDER_SEQUENCE_NUMBER");
        }
        if p.open.is_some() && !txn {
            return Expect::Refused("INVALID_TXN_STATE");
        }
        Expect::Appended
    }

    fn step(&mut self, log: &mut Log) {
        let f = fold(&self.items);
        let pid = self.rng.range(0, PRODUCERS);
        let p = f.producers.get(&pid).cloned();
        let roll = self.rng.range(0, 100);
        match self.rng.range(0, 100) {
            // A data batch: mostly the next in sequence; sometimes a retry, a gap, an old epoch,
            // a new epoch, or plain inside a transaction.
            0..=54 => {
                let n = self.rng.range(1, 4) as i32;
                let txn = pid % 2 == 0 || p.as_ref().is_some_and(|p| p.open.is_some());
                // No client sends a producer id without an epoch (-1): a producer a marker made at
                // -1 starts its data at 0.
                let (mut epoch, mut seq) = p.as_ref().map_or((0, 0), |p| (p.epoch.max(0), p.last_seq.wrapping_add(1)));
                let mut txn_flag = txn;
                match roll {
                    0..=14 => {
                        if let Some(b) = p.as_ref().and_then(|p| {
                            let k = p.batches.len();
                            (k > 0).then(|| p.batches[self.rng.range(0, k as i64) as usize])
                        }) {
                            seq = b.0;
                            let n = b.1 - b.0 + 1;
                            return self.append_data(log, &f, pid, epoch, seq, n, txn_flag);
                        }
                    }
                    15..=19 => seq += self.rng.range(1, 3) as i32,
                    20..=23 if epoch > 0 => epoch -= 1,
                    24..=27 if p.as_ref().is_some_and(|p| p.open.is_none()) => {
                        epoch += 1;
                        seq = 0;
                    }
                    28..=30 => txn_flag = false,
                    _ => {}
                }
                self.append_data(log, &f, pid, epoch, seq, n, txn_flag)
            }
            // A transaction marker: mostly for an open transaction at the producer's epochs.
            55..=74 => {
                let (epoch, coordinator_epoch) = p.as_ref().map_or((0, 0), |p| (p.epoch, p.coordinator_epoch));
                let (epoch, coordinator_epoch) = match roll {
                    0..=7 => (epoch, coordinator_epoch - 1),
                    8..=12 => (epoch - 1, coordinator_epoch),
                    13..=20 => (epoch, coordinator_epoch + 1),
                    _ => (epoch, coordinator_epoch),
                };
                let abort = self.rng.range(0, 2) == 0;
                self.append_marker(log, &f, pid, epoch, coordinator_epoch, abort);
            }
            75..=79 => {
                let n = self.rng.range(1, 3) as usize;
                let info = log.append_as_leader(&mut batch_n(n, T0, 16), 0).unwrap();
                assert_eq!(info.first_offset, self.end());
                self.items.push(Item::Plain { first: info.first_offset, last: info.last_offset });
            }
            80..=86 => {
                self.hw = self.end();
                log.set_high_watermark(self.hw);
            }
            87..=89 => {
                // Truncation at a batch boundary (the high watermark moves to the log end first,
                // as a follower truncates only what its leader did not commit past).
                if self.items.is_empty() {
                    return;
                }
                let i = self.rng.range(0, self.items.len() as i64) as usize;
                let at = self.items[i].first();
                // (A snapshot holds no transaction completed above the high watermark: a
                // rebuild from one takes them for stable, as Kafka's does.)
                self.hw = self.end();
                log.set_high_watermark(self.hw);
                log.truncate_to(at).unwrap();
                self.items.truncate(i);
                self.seen.truncations += 1;
                self.hw = self.hw.min(at);
                self.fresh.clear();
            }
            _ => {}
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn append_data(&mut self, log: &mut Log, f: &Folded, pid: i64, epoch: i16, seq: i32, n: i32, txn: bool) {
        let expect = self.expect_data(f, pid, epoch, seq, n, txn);
        let mut b = data_batch(pid, epoch, seq, n as usize, txn);
        let end = self.end();
        let r = log.append_as_leader(&mut b, 0);
        let ctx = format!("data pid {pid} epoch {epoch} seq {seq} n {n} txn {txn}: {expect:?}");
        match (expect, r) {
            (Expect::Appended, Ok(info)) => {
                assert!(!info.duplicate, "{ctx}");
                assert_eq!(info.first_offset, end, "{ctx}");
                self.seen.appended += 1;
                let last = seq + n - 1;
                self.items.push(Item::Data {
                    pid,
                    epoch,
                    first_seq: seq,
                    last_seq: last,
                    first: info.first_offset,
                    last: info.last_offset,
                    txn,
                });
                self.fresh.entry(pid).or_default().push((seq, last));
            }
            (Expect::Duplicate { first, last, .. }, Ok(info)) => {
                assert!(info.duplicate, "{ctx}: written again");
                assert_eq!((info.first_offset, info.last_offset), (first, last), "{ctx}");
                self.seen.duplicates += 1;
            }
            (Expect::Duplicate { certain: false, .. }, Err(Error::Producer { source, .. })) => {
                assert_eq!(source.kafka_name(), "OUT_OF_ORDER_SEQUENCE_NUMBER", "{ctx}");
            }
            (Expect::Refused(name), Err(Error::Producer { source, .. })) => {
                assert_eq!(source.kafka_name(), name, "{ctx}");
                *self.seen.refused.entry(name).or_default() += 1;
            }
            (_, r) => panic!("{ctx}: the log answered {r:?}"),
        }
        assert_eq!(log.log_end_offset(), self.end(), "{ctx}");
    }

    fn append_marker(&mut self, log: &mut Log, f: &Folded, pid: i64, epoch: i16, coordinator_epoch: i32, abort: bool) {
        let expect = match f.producers.get(&pid) {
            Some(p) if epoch < p.epoch => Err("INVALID_PRODUCER_EPOCH"),
            Some(p) if coordinator_epoch < p.coordinator_epoch => Err("TRANSACTION_COORDINATOR_FENCED"),
            _ => Ok(()),
        };
        let kind = if abort { MarkerType::Abort } else { MarkerType::Commit };
        let m = TxnMarker { producer_id: pid, producer_epoch: epoch, coordinator_epoch, kind };
        let end = self.end();
        let r = log.append_txn_marker(&m, 0);
        let ctx = format!("marker {m:?}: {expect:?}");
        match (expect, r) {
            (Ok(()), Ok(info)) => {
                assert_eq!(info.first_offset, end, "{ctx}");
                self.items.push(Item::Marker { pid, epoch, coordinator_epoch, abort, offset: end });
                self.seen.markers += 1;
                self.seen.aborts_indexed += (fold(&self.items).aborted.len() > f.aborted.len()) as u64;
            }
            (Err(name), Err(Error::Producer { source, .. })) => {
                assert_eq!(source.kafka_name(), name, "{ctx}");
                *self.seen.refused.entry(name).or_default() += 1;
            }
            (_, r) => panic!("{ctx}: the log answered {r:?}"),
        }
    }

    /// Everything the log must agree with the model on.
    fn check(&self, log: &Log, what: &str) {
        let f = fold(&self.items);
        let end = self.end();
        assert_eq!(log.log_end_offset(), end, "{what}");
        // The last stable offset: open transactions, and completed ones whose marker is not yet
        // below the high watermark.
        let unstable = f
            .producers
            .values()
            .filter_map(|p| p.open)
            .chain(f.completed.iter().filter(|(_, m)| *m >= self.hw).map(|(first, _)| *first))
            .min();
        let lso = unstable.map_or(self.hw, |u| u.min(self.hw));
        assert_eq!(log.high_watermark(), self.hw, "{what}");
        assert_eq!(log.last_stable_offset(), lso, "{what}: hw {}, items {:?}", self.hw, self.items);
        // The `.txnindex` files, segment after segment, hold the model's aborted transactions.
        let mut indexed = Vec::new();
        for s in log.segments() {
            indexed.extend(log.txn_index_entries(s.base_offset()).unwrap());
        }
        assert_eq!(indexed, f.aborted, "{what}");
        // A read-committed consumer from the start is handed, with each fetch, exactly the
        // aborted transactions overlapping the batches it returns; all of them below the LSO.
        let mut handed = std::collections::HashSet::new();
        let mut next = 0;
        while next < lso {
            let d = log.fetch(next, 400, FetchIsolation::TxnCommitted, true).unwrap();
            let batches = batches_in(&d.records);
            let Some(last) = batches.last() else { panic!("{what}: an empty fetch at {next} below the LSO {lso}") };
            let end = last.1.next_offset();
            let overlapping: Vec<AbortedTransaction> = f
                .aborted
                .iter()
                .filter(|t| t.last_offset >= next && t.first_offset < end)
                .map(|t| AbortedTransaction { producer_id: t.producer_id, first_offset: t.first_offset })
                .collect();
            assert_eq!(d.aborted_transactions, overlapping, "{what}: fetch {next}..{end}");
            handed.extend(d.aborted_transactions);
            next = end;
        }
        let want: std::collections::HashSet<AbortedTransaction> = f
            .aborted
            .iter()
            .filter(|t| t.first_offset < lso)
            .map(|t| AbortedTransaction { producer_id: t.producer_id, first_offset: t.first_offset })
            .collect();
        assert_eq!(handed, want, "{what}");
    }
}

fn run_case(seed: u64) -> Seen {
    let config = LogConfig { segment_bytes: 600, ..small_config() };
    let t = new_log(config.clone());
    let TestLog { tmp, clock, mut log } = t;
    let dir = tmp.path().join("topic-0");
    let mut c = Case { seen: Seen::default(), rng: Rng::new(seed), items: Vec::new(), hw: 0, fresh: BTreeMap::new() };
    let steps = 40;
    for i in 0..steps {
        match c.rng.range(0, 100) {
            0..=3 => {
                // A restart: clean, or a crash recovered from the last flush or from the start.
                let end = c.end();
                let recovery = if c.rng.range(0, 2) == 0 {
                    log.close().unwrap();
                    c.seen.clean_restarts += 1;
                    Recovery::Clean
                } else {
                    let rp = if c.rng.range(0, 2) == 0 { log.recovery_point() } else { 0 };
                    drop(log);
                    c.seen.crashes += 1;
                    Recovery::FromRecoveryPoint(rp)
                };
                log = open_dir(&dir, config.clone(), &clock, recovery);
                assert_eq!(log.log_end_offset(), end);
                c.hw = end;
                c.fresh.clear();
            }
            _ => c.step(&mut log),
        }
        if std::env::var("SEGLOG_MODEL_TRACE").is_ok() {
            eprintln!("step {i}: hw {} lso {} items {:?}", c.hw, log.last_stable_offset(), c.items.last());
        }
        c.check(&log, &format!("seed {seed}, step {i}"));
    }
    drop(log);
    drop(tmp);
    c.seen
}

#[test]
fn producers_and_transactions_follow_the_model() {
    let cases: u64 = std::env::var("SEGLOG_MODEL_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(1500);
    let mut seen = Seen::default();
    for seed in 0..cases {
        match std::panic::catch_unwind(|| run_case(seed)) {
            Ok(s) => {
                seen.appended += s.appended;
                seen.duplicates += s.duplicates;
                for (k, v) in s.refused {
                    *seen.refused.entry(k).or_default() += v;
                }
                seen.markers += s.markers;
                seen.aborts_indexed += s.aborts_indexed;
                seen.truncations += s.truncations;
                seen.clean_restarts += s.clean_restarts;
                seen.crashes += s.crashes;
            }
            Err(e) => {
                eprintln!("model case failed: seed {seed} (SEGLOG_MODEL_CASES={})", seed + 1);
                std::panic::resume_unwind(e);
            }
        }
    }
    println!("{cases} cases: {seen:?}");
    if cases >= 500 {
        let refusals = [
            "OUT_OF_ORDER_SEQUENCE_NUMBER",
            "INVALID_PRODUCER_EPOCH",
            "INVALID_TXN_STATE",
            "TRANSACTION_COORDINATOR_FENCED",
        ];
        assert!(refusals.iter().all(|r| seen.refused.get(r).is_some_and(|&n| n >= 20)), "{seen:?}");
        let kinds = [seen.duplicates, seen.aborts_indexed, seen.truncations, seen.clean_restarts, seen.crashes];
        assert!(kinds.iter().all(|&n| n >= 100), "{seen:?}");
    }
}
