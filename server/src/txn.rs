//! The transaction coordinator of a single node: InitProducerId with a transactional id,
//! AddPartitionsToTxn, EndTxn, and the COMMIT and ABORT markers written through
//! [`seglog::Engine::append_txn_marker`].
//!
//! Its state is kept as Kafka keeps it: records in the internal topic `__transaction_state`
//! (one partition here, `__transaction_state-0`), key `TransactionLogKey` v0 (the transactional
//! id), value `TransactionLogValue` v0 (producer id and epoch, timeout, status, partitions,
//! timestamps). At start the partition is replayed, the last record of each id wins, and a
//! transaction left half way through a commit or an abort is finished. Every change is appended
//! (and acknowledged under the engine's durability) before it is acted on or answered.
//!
//! One lock serializes the coordinator's work: transactions are a few requests each, and a
//! commit holds the lock while its markers are appended.

use std::collections::{BTreeSet, HashMap};
use std::time::{SystemTime, UNIX_EPOCH};

use kafka_protocol::error::ResponseError as E;
use seglog::format::batch::BatchHeader;
use seglog::format::builder::BatchBuilder;
use seglog::log::{MarkerType, TxnMarker};
use seglog::{Engine, TopicPartition};

use crate::State;

/// The internal topic holding the coordinator's state.
pub const TXN_TOPIC: &str = "__transaction_state";
/// The coordinator's epoch in every marker: one node, never a new coordinator.
const COORDINATOR_EPOCH: i32 = 0;
/// The leader epoch of the state partition (as every partition here).
const LEADER_EPOCH: i32 = 0;
/// Kafka's `transaction.max.timeout.ms` default: a longer timeout is refused.
pub(crate) const MAX_TIMEOUT_MS: i32 = 900_000;

/// Kafka's `TransactionState` ids, as `TransactionLogValue.TransactionStatus` stores them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Status {
    Empty = 0,
    Ongoing = 1,
    PrepareCommit = 2,
    PrepareAbort = 3,
    CompleteCommit = 4,
    CompleteAbort = 5,
    Dead = 6,
    PrepareEpochFence = 7,
}

impl Status {
    fn from_i8(v: i8) -> Option<Status> {
        use Status::*;
        [Empty, Ongoing, PrepareCommit, PrepareAbort, CompleteCommit, CompleteAbort, Dead, PrepareEpochFence]
            .into_iter()
            .find(|s| *s as i8 == v)
    }
}

/// One transactional id's state (Kafka's `TransactionMetadata`, as logged).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TxnMeta {
    pub(crate) producer_id: i64,
    pub(crate) producer_epoch: i16,
    pub(crate) timeout_ms: i32,
    pub(crate) status: Status,
    pub(crate) partitions: BTreeSet<(String, i32)>,
    pub(crate) last_update_ms: i64,
    pub(crate) start_ms: i64,
    /// The epoch a producer may still name besides the current one (Kafka's
    /// `lastProducerEpoch`, KIP-360/588): the one it asked to bump from, or the one a timeout
    /// fenced. Kept in memory only (TransactionLogValue v0 has no field for it): after a restart
    /// such a producer is fenced and starts again with InitProducerId.
    pub(crate) last_epoch: Option<i16>,
}

/// `TransactionLogKey` v0: version, then the transactional id as a Kafka string.
pub(crate) fn encode_key(id: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + id.len());
    out.extend_from_slice(&0i16.to_be_bytes());
    put_string(&mut out, id);
    out
}

/// `TransactionLogValue` v0. Kafka writes the partitions as null in the Empty state.
pub(crate) fn encode_value(m: &TxnMeta) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    out.extend_from_slice(&0i16.to_be_bytes());
    out.extend_from_slice(&m.producer_id.to_be_bytes());
    out.extend_from_slice(&m.producer_epoch.to_be_bytes());
    out.extend_from_slice(&m.timeout_ms.to_be_bytes());
    out.push(m.status as i8 as u8);
    if m.status == Status::Empty {
        out.extend_from_slice(&(-1i32).to_be_bytes());
    } else {
        let mut by_topic: Vec<(&str, Vec<i32>)> = Vec::new();
        for (t, p) in &m.partitions {
            match by_topic.last_mut() {
                Some((last, ps)) if *last == t.as_str() => ps.push(*p),
                _ => by_topic.push((t.as_str(), vec![*p])),
            }
        }
        out.extend_from_slice(&(by_topic.len() as i32).to_be_bytes());
        for (t, ps) in by_topic {
            put_string(&mut out, t);
            out.extend_from_slice(&(ps.len() as i32).to_be_bytes());
            for p in ps {
                out.extend_from_slice(&p.to_be_bytes());
            }
        }
    }
    out.extend_from_slice(&m.last_update_ms.to_be_bytes());
    out.extend_from_slice(&m.start_ms.to_be_bytes());
    out
}

fn put_string(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as i16).to_be_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// A reader over a record key or value that fails (never panics) on short input.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Some(a)
    }
    fn i8(&mut self) -> Option<i8> {
        Some(self.take(1)?[0] as i8)
    }
    fn i16(&mut self) -> Option<i16> {
        Some(i16::from_be_bytes(self.take(2)?.try_into().ok()?))
    }
    fn i32(&mut self) -> Option<i32> {
        Some(i32::from_be_bytes(self.take(4)?.try_into().ok()?))
    }
    fn i64(&mut self) -> Option<i64> {
        Some(i64::from_be_bytes(self.take(8)?.try_into().ok()?))
    }
    fn string(&mut self) -> Option<String> {
        let n = usize::try_from(self.i16()?).ok()?;
        String::from_utf8(self.take(n)?.to_vec()).ok()
    }
}

pub(crate) fn decode_key(b: &[u8]) -> Result<String, String> {
    let mut r = Reader(b);
    match r.i16() {
        Some(0) => r.string().filter(|_| r.0.is_empty()).ok_or_else(|| "a malformed TransactionLogKey".into()),
        v => Err(format!("TransactionLogKey version {v:?}, only 0 is known")),
    }
}

pub(crate) fn decode_value(b: &[u8]) -> Result<TxnMeta, String> {
    let mut r = Reader(b);
    match r.i16() {
        Some(0) => {}
        v => return Err(format!("TransactionLogValue version {v:?}, only 0 is read")),
    }
    let bad = || "a malformed TransactionLogValue v0".to_string();
    let producer_id = r.i64().ok_or_else(bad)?;
    let producer_epoch = r.i16().ok_or_else(bad)?;
    let timeout_ms = r.i32().ok_or_else(bad)?;
    let status = r.i8().and_then(Status::from_i8).ok_or_else(bad)?;
    let mut partitions = BTreeSet::new();
    let topics = r.i32().ok_or_else(bad)?;
    // Bounded by the bytes left, so a hostile count allocates nothing.
    for _ in 0..topics.max(0) {
        let t = r.string().ok_or_else(bad)?;
        let n = r.i32().ok_or_else(bad)?;
        for _ in 0..n.max(0) {
            partitions.insert((t.clone(), r.i32().ok_or_else(bad)?));
        }
    }
    let last_update_ms = r.i64().ok_or_else(bad)?;
    let start_ms = r.i64().ok_or_else(bad)?;
    if !r.0.is_empty() {
        return Err(bad());
    }
    Ok(TxnMeta {
        producer_id,
        producer_epoch,
        timeout_ms,
        status,
        partitions,
        last_update_ms,
        start_ms,
        last_epoch: None,
    })
}

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// The coordinator: every transactional id's state.
pub(crate) struct Coordinator {
    txns: tokio::sync::Mutex<HashMap<String, TxnMeta>>,
    tp: TopicPartition,
}

/// Kafka's answer to a coordinator request that failed.
type Code = i16;

impl Coordinator {
    /// Opens `__transaction_state-0` (created if missing) and replays it.
    pub(crate) fn load(engine: &Engine) -> crate::Result<Coordinator> {
        let tp = TopicPartition::new(TXN_TOPIC, 0);
        engine.open_partition(&tp, None).wait()?;
        let start = engine.list_offset(&tp, seglog::log::ListOffset::Earliest).wait()?.map_or(0, |t| t.offset);
        let mut txns = HashMap::new();
        let mut offset = start;
        let mut scratch = Vec::new();
        loop {
            let data = engine.fetch(&tp, offset, 1 << 20, None).wait()?;
            let Some(next) = data.next_offset() else { break };
            let mut at = 0usize;
            while at < data.records.len() {
                let bytes = &data.records[at..];
                let h = BatchHeader::parse(bytes).map_err(|e| corrupt(&tp, offset, e.to_string()))?;
                let size = h.size_in_bytes() as usize;
                let batch = &bytes[..size.min(bytes.len())];
                if !h.is_control() {
                    let records = seglog::format::record::batch_records(batch, &mut scratch)
                        .map_err(|e| corrupt(&tp, h.base_offset, e.to_string()))?;
                    for rec in records {
                        let rec = rec.map_err(|e| corrupt(&tp, h.base_offset, e.to_string()))?;
                        let at_offset = rec.offset(h.base_offset);
                        let key = rec.key.ok_or_else(|| corrupt(&tp, at_offset, "a record without a key".into()))?;
                        let id = decode_key(key).map_err(|e| corrupt(&tp, at_offset, e))?;
                        match rec.value {
                            // A tombstone: the id expired.
                            None => {
                                txns.remove(&id);
                            }
                            Some(v) => {
                                txns.insert(id, decode_value(v).map_err(|e| corrupt(&tp, at_offset, e))?);
                            }
                        }
                    }
                }
                at += size;
            }
            offset = next;
        }
        Ok(Coordinator { txns: tokio::sync::Mutex::new(txns), tp })
    }

    /// Finishes the transactions a stop left between their decision and their markers.
    pub(crate) async fn recover(&self, state: &State) {
        let mut txns = self.txns.lock().await;
        let unfinished: Vec<(String, TxnMeta)> = txns
            .iter()
            .filter(|(_, m)| matches!(m.status, Status::PrepareCommit | Status::PrepareAbort))
            .map(|(k, m)| (k.clone(), m.clone()))
            .collect();
        for (id, m) in unfinished {
            if let Err(code) = self.complete(state, &mut txns, &id, m).await {
                eprintln!("seglog serve: finishing transaction {id:?} after a restart: error {code}");
            }
        }
    }

    /// InitProducerId with a transactional id: a new producer id with epoch 0, or the id's
    /// producer with its epoch bumped (fencing the previous instance), after finishing or
    /// aborting what it had open.
    pub(crate) async fn init_producer_id(
        &self,
        state: &State,
        id: &str,
        timeout_ms: i32,
        expected: Option<(i64, i16)>,
    ) -> Result<(i64, i16), Code> {
        if timeout_ms <= 0 || timeout_ms > MAX_TIMEOUT_MS {
            return Err(E::InvalidTransactionTimeout.code());
        }
        // Kafka refuses an empty id; one longer than a TransactionLogKey string can hold could
        // not be read back.
        if id.is_empty() || id.len() > i16::MAX as usize {
            return Err(E::InvalidRequest.code());
        }
        let mut txns = self.txns.lock().await;
        let fresh = |producer_id, producer_epoch| TxnMeta {
            producer_id,
            producer_epoch,
            timeout_ms,
            status: Status::Empty,
            partitions: BTreeSet::new(),
            last_update_ms: now_ms(),
            start_ms: -1,
            // A bump asked from an epoch leaves that epoch nameable for a retry.
            last_epoch: expected.map(|(_, epoch)| epoch),
        };
        let next = match txns.get(id).cloned() {
            None => fresh(state.producer_ids.next().map_err(|_| E::CoordinatorNotAvailable.code())?, 0),
            Some(mut m) => {
                if let Some((pid, epoch)) = expected {
                    // KIP-360/588: the producer names the current epoch, or the last one it may
                    // still name (its own InitProducerId retried, or its transaction aborted on
                    // timeout); any other is a fenced instance.
                    let last = pid == m.producer_id && Some(epoch) == m.last_epoch;
                    if !last && (pid, epoch) != (m.producer_id, m.producer_epoch) {
                        return Err(E::ProducerFenced.code());
                    }
                    if last && m.status == Status::Empty {
                        // A retry of the InitProducerId that gave the current epoch.
                        return Ok((m.producer_id, m.producer_epoch));
                    }
                }
                if m.status == Status::Ongoing {
                    // The previous instance's transaction is aborted under a bumped epoch, which
                    // fences it (Kafka's PrepareEpochFence, then the abort).
                    m = self.fence_and_abort(state, &mut txns, id, m).await?;
                }
                if matches!(m.status, Status::PrepareCommit | Status::PrepareAbort) {
                    m = self.complete(state, &mut txns, id, m).await?;
                }
                if m.producer_epoch >= i16::MAX - 1 {
                    // Epochs ran out: a new producer id (Kafka does the same).
                    fresh(state.producer_ids.next().map_err(|_| E::CoordinatorNotAvailable.code())?, 0)
                } else {
                    fresh(m.producer_id, m.producer_epoch + 1)
                }
            }
        };
        let out = (next.producer_id, next.producer_epoch);
        self.write(state, &mut txns, id, next).await?;
        Ok(out)
    }

    /// AddPartitionsToTxn: the partitions join the transaction (which begins with the first).
    /// The answer's code for each partition.
    pub(crate) async fn add_partitions(
        &self,
        state: &State,
        id: &str,
        producer: (i64, i16),
        wanted: &[TopicPartition],
    ) -> Vec<Code> {
        let mut txns = self.txns.lock().await;
        let all = |code: Code| vec![code; wanted.len()];
        let m = match check(&txns, id, producer) {
            Ok(m) => m,
            Err(code) => return all(code),
        };
        if matches!(m.status, Status::PrepareCommit | Status::PrepareAbort | Status::PrepareEpochFence) {
            return all(E::ConcurrentTransactions.code());
        }
        let unknown: Vec<bool> = wanted.iter().map(|tp| !state.topics.has(tp) || tp.topic == TXN_TOPIC).collect();
        if unknown.iter().any(|u| *u) {
            // Kafka: the unknown ones UNKNOWN_TOPIC_OR_PARTITION, the rest not attempted.
            return unknown
                .iter()
                .map(|u| if *u { E::UnknownTopicOrPartition.code() } else { E::OperationNotAttempted.code() })
                .collect();
        }
        let mut next = m.clone();
        if m.status != Status::Ongoing {
            next.status = Status::Ongoing;
            next.partitions.clear();
            next.start_ms = now_ms();
        }
        next.partitions.extend(wanted.iter().map(|tp| (tp.topic.clone(), tp.partition)));
        if next == m {
            return all(0);
        }
        next.last_update_ms = now_ms();
        match self.write(state, &mut txns, id, next).await {
            Ok(()) => all(0),
            Err(code) => all(code),
        }
    }

    /// EndTxn: the decision is logged, the markers appended to every partition of the
    /// transaction, then the completion logged. A retry of a finished one succeeds; a decision
    /// logged but not carried out (markers failed) is carried out again.
    pub(crate) async fn end_txn(
        &self,
        state: &State,
        id: &str,
        producer: (i64, i16),
        commit: bool,
    ) -> Result<(), Code> {
        let mut txns = self.txns.lock().await;
        let m = check(&txns, id, producer)?;
        let (prepare, complete) = if commit {
            (Status::PrepareCommit, Status::CompleteCommit)
        } else {
            (Status::PrepareAbort, Status::CompleteAbort)
        };
        match m.status {
            Status::Ongoing => {
                let mut next = m;
                next.status = prepare;
                next.last_update_ms = now_ms();
                self.write(state, &mut txns, id, next.clone()).await?;
                self.complete(state, &mut txns, id, next).await.map(|_| ())
            }
            s if s == prepare => self.complete(state, &mut txns, id, m).await.map(|_| ()),
            s if s == complete => Ok(()),
            Status::PrepareEpochFence => Err(E::ConcurrentTransactions.code()),
            // Empty, or the other outcome decided or done.
            _ => Err(E::InvalidTxnState.code()),
        }
    }

    /// Aborts every transaction open longer than its timeout, under a bumped epoch that fences
    /// its producer (Kafka's `transaction.abort.timed.out.transaction.cleanup.interval.ms` task),
    /// and carries out again the decisions whose markers failed (Kafka retries its markers until
    /// they land).
    pub(crate) async fn abort_timed_out(&self, state: &State) {
        let mut txns = self.txns.lock().await;
        let now = now_ms();
        let due: Vec<(String, TxnMeta)> = txns
            .iter()
            .filter(|(_, m)| match m.status {
                Status::Ongoing => now > m.start_ms.saturating_add(m.timeout_ms as i64),
                Status::PrepareCommit | Status::PrepareAbort => true,
                _ => false,
            })
            .map(|(k, m)| (k.clone(), m.clone()))
            .collect();
        for (id, m) in due {
            let r = match m.status {
                Status::Ongoing => self.fence_and_abort(state, &mut txns, &id, m).await,
                _ => Ok(m),
            };
            let r = match r {
                Ok(m) => self.complete(state, &mut txns, &id, m).await.map(|_| ()),
                Err(code) => Err(code),
            };
            if let Err(code) = r {
                eprintln!("seglog serve: finishing transaction {id:?}: error {code}");
            }
        }
    }

    /// Logs `m` (Ongoing) as PrepareAbort under the next epoch, which fences the producer that
    /// holds the current one; returns that state, whose markers [`Coordinator::complete`] writes.
    async fn fence_and_abort(
        &self,
        state: &State,
        txns: &mut HashMap<String, TxnMeta>,
        id: &str,
        mut m: TxnMeta,
    ) -> Result<TxnMeta, Code> {
        m.last_epoch = Some(m.producer_epoch);
        m.producer_epoch = m.producer_epoch.saturating_add(1);
        m.status = Status::PrepareAbort;
        m.last_update_ms = now_ms();
        self.write(state, txns, id, m.clone()).await?;
        Ok(m)
    }

    /// Appends `m` as `id`'s state; on success it is the state in memory too.
    async fn write(
        &self,
        state: &State,
        txns: &mut HashMap<String, TxnMeta>,
        id: &str,
        m: TxnMeta,
    ) -> Result<(), Code> {
        let mut b = BatchBuilder::new();
        b.push(now_ms(), Some(&encode_key(id)), Some(&encode_value(&m)), &[]);
        let batch = b.build().map_err(|_| E::CoordinatorNotAvailable.code())?;
        match state.engine.append(&self.tp, batch, LEADER_EPOCH).await {
            Ok(_) => {
                txns.insert(id.to_string(), m);
                Ok(())
            }
            Err(e) => {
                eprintln!("seglog serve: writing the state of transaction {id:?}: {e}");
                Err(E::CoordinatorNotAvailable.code())
            }
        }
    }

    /// Appends the markers of `m` (PrepareCommit or PrepareAbort) to its partitions, then logs
    /// its completion; returns the completed state.
    async fn complete(
        &self,
        state: &State,
        txns: &mut HashMap<String, TxnMeta>,
        id: &str,
        m: TxnMeta,
    ) -> Result<TxnMeta, Code> {
        let (kind, done) = match m.status {
            Status::PrepareCommit => (MarkerType::Commit, Status::CompleteCommit),
            _ => (MarkerType::Abort, Status::CompleteAbort),
        };
        let marker = TxnMarker {
            producer_id: m.producer_id,
            producer_epoch: m.producer_epoch,
            coordinator_epoch: COORDINATOR_EPOCH,
            kind,
        };
        let pending: Vec<_> = m
            .partitions
            .iter()
            .map(|(t, p)| {
                let tp = TopicPartition::new(t.as_str(), *p);
                let marked = state.engine.append_txn_marker(&tp, &marker, LEADER_EPOCH);
                (tp, marked)
            })
            .collect();
        let mut failed = None;
        for (tp, marked) in pending {
            match marked.await {
                // The last stable offset moved: read-committed fetches waiting on it look again.
                Ok(_) => state.waiters.wake(&tp),
                // A partition no longer here has nothing left to mark.
                Err(seglog::Error::UnknownPartition { .. }) => {}
                Err(e) => failed = Some(e),
            }
        }
        if let Some(e) = failed {
            eprintln!("seglog serve: a marker of transaction {id:?}: {e}");
            return Err(E::CoordinatorNotAvailable.code());
        }
        let mut next = m;
        next.status = done;
        next.partitions.clear();
        next.last_update_ms = now_ms();
        self.write(state, txns, id, next.clone()).await?;
        Ok(next)
    }
}

/// The id's state if `producer` is its current producer id and epoch.
fn check(txns: &HashMap<String, TxnMeta>, id: &str, producer: (i64, i16)) -> Result<TxnMeta, Code> {
    let m = txns.get(id).ok_or(E::InvalidProducerIdMapping.code())?;
    if m.producer_id != producer.0 {
        return Err(E::InvalidProducerIdMapping.code());
    }
    if m.producer_epoch != producer.1 {
        return Err(E::ProducerFenced.code());
    }
    Ok(m.clone())
}

fn corrupt(tp: &TopicPartition, offset: i64, detail: String) -> crate::ServerError {
    crate::ServerError::Config(format!("the transaction state in {tp} at offset {offset}: {detail}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_records_round_trip_and_refuse_bad_bytes() {
        let mut m = TxnMeta {
            producer_id: 4000,
            producer_epoch: 3,
            timeout_ms: 60_000,
            status: Status::Ongoing,
            partitions: [("a".to_string(), 0), ("a".to_string(), 2), ("b".to_string(), 1)].into_iter().collect(),
            last_update_ms: 1_700_000_000_123,
            start_ms: 1_700_000_000_000,
            last_epoch: None,
        };
        let v = encode_value(&m);
        // version, pid, epoch, timeout, status, 2 topics: "a" [0, 2], "b" [1], two timestamps.
        assert_eq!(v.len(), 2 + 8 + 2 + 4 + 1 + 4 + (2 + 1 + 4 + 8) + (2 + 1 + 4 + 4) + 16);
        assert_eq!(decode_value(&v).unwrap(), m);
        assert_eq!(decode_key(&encode_key("tx-1")).unwrap(), "tx-1");
        assert_eq!(encode_key("tx-1"), [0, 0, 0, 4, b't', b'x', b'-', b'1']);
        // Kafka writes null partitions in the Empty state.
        m.status = Status::Empty;
        m.partitions.clear();
        let v = encode_value(&m);
        assert_eq!(&v[17..21], &(-1i32).to_be_bytes());
        assert_eq!(decode_value(&v).unwrap(), m);
        for cut in 0..v.len() {
            assert!(decode_value(&v[..cut]).is_err(), "cut at {cut}");
        }
        let mut huge = v.clone();
        huge[17..21].copy_from_slice(&i32::MAX.to_be_bytes());
        assert!(decode_value(&huge).is_err());
        assert!(decode_key(&[0, 1, 0, 1, b'x']).is_err());
    }
}
