//! Producer state, as Kafka keeps it (`ProducerStateManager`, `ProducerStateEntry`,
//! `ProducerAppendInfo`): per producer id its epoch, the metadata of its last five batches, the
//! coordinator epoch of the last transaction marker and the first offset of its open
//! transaction; the rules a leader append is checked by (epoch fencing, sequence order, duplicate
//! batches answered with their original offsets, transactional state); the open and completed
//! transactions behind the first unstable offset; and the `.snapshot` file it is saved in.
//!
//! This module is the state and its rules only: no I/O. The log feeds it every batch it appends
//! (and every batch recovery replays), takes snapshots through [`ProducerState::snapshot`] and
//! loads them with [`read_snapshot`].

use std::collections::{BTreeMap, HashMap};

use crate::format::batch::{NO_PRODUCER_ID, NO_SEQUENCE};
use crate::format::{be_i16, be_i32, be_i64};

/// Batches remembered per producer for duplicate detection (Kafka's `NUM_BATCHES_TO_RETAIN`,
/// the most a producer has in flight with idempotence).
pub const NUM_BATCHES_TO_RETAIN: usize = 5;
/// A producer epoch that is not set (`RecordBatch.NO_PRODUCER_EPOCH`).
pub const NO_PRODUCER_EPOCH: i16 = -1;
/// The `.snapshot` file version Kafka writes and reads.
pub const SNAPSHOT_VERSION: i16 = 1;
/// Where the CRC-covered bytes start in a snapshot: after the version (2 bytes) and the CRC (4).
const SNAPSHOT_ENTRIES_AT: usize = 6;
/// A snapshot's header: version i16, CRC u32, entry count i32.
pub const SNAPSHOT_HEADER_BYTES: usize = 10;
/// One snapshot entry ([`SnapshotEntry`]).
pub const SNAPSHOT_ENTRY_BYTES: usize = 8 + 2 + 4 + 8 + 4 + 8 + 4 + 8;

/// One entry of a `.snapshot` file as stored (Kafka's `ProducerSnapshot.json`, 46 bytes,
/// big-endian, in this order): -1 in `last_offset` for no batch, in `current_txn_first_offset`
/// for no open transaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SnapshotEntry {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub last_sequence: i32,
    pub last_offset: i64,
    pub offset_delta: i32,
    pub timestamp: i64,
    pub coordinator_epoch: i32,
    pub current_txn_first_offset: i64,
}

impl SnapshotEntry {
    /// The entry in the first [`SNAPSHOT_ENTRY_BYTES`] of `e` (which must hold them).
    pub fn decode(e: &[u8]) -> SnapshotEntry {
        SnapshotEntry {
            producer_id: be_i64(e, 0),
            producer_epoch: be_i16(e, 8),
            last_sequence: be_i32(e, 10),
            last_offset: be_i64(e, 14),
            offset_delta: be_i32(e, 22),
            timestamp: be_i64(e, 26),
            coordinator_epoch: be_i32(e, 34),
            current_txn_first_offset: be_i64(e, 38),
        }
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.producer_id.to_be_bytes());
        out.extend_from_slice(&self.producer_epoch.to_be_bytes());
        out.extend_from_slice(&self.last_sequence.to_be_bytes());
        out.extend_from_slice(&self.last_offset.to_be_bytes());
        out.extend_from_slice(&self.offset_delta.to_be_bytes());
        out.extend_from_slice(&self.timestamp.to_be_bytes());
        out.extend_from_slice(&self.coordinator_epoch.to_be_bytes());
        out.extend_from_slice(&self.current_txn_first_offset.to_be_bytes());
    }

    /// The producer's state this entry holds: its last batch, if any.
    pub fn to_producer(&self) -> ProducerStateEntry {
        let mut batches = BatchRing::default();
        if self.last_offset >= 0 {
            batches.push_back(BatchMetadata {
                last_seq: self.last_sequence,
                last_offset: self.last_offset,
                offset_delta: self.offset_delta,
                timestamp: self.timestamp,
            });
        }
        ProducerStateEntry {
            producer_id: self.producer_id,
            epoch: self.producer_epoch,
            batches,
            coordinator_epoch: self.coordinator_epoch,
            last_timestamp: self.timestamp,
            current_txn_first_offset: (self.current_txn_first_offset >= 0).then_some(self.current_txn_first_offset),
        }
    }

    /// A producer's entry as Kafka writes it: its last batch only.
    pub fn of(e: &ProducerStateEntry) -> SnapshotEntry {
        SnapshotEntry {
            producer_id: e.producer_id,
            producer_epoch: e.epoch,
            last_sequence: e.last_seq(),
            last_offset: e.last_data_offset(),
            offset_delta: e.last_offset_delta(),
            timestamp: e.last_timestamp,
            coordinator_epoch: e.coordinator_epoch,
            current_txn_first_offset: e.current_txn_first_offset.unwrap_or(-1),
        }
    }
}

/// `sequence - decrement`, wrapping below 0 to `i32::MAX` as Kafka's sequences do
/// (`DefaultRecordBatch.decrementSequence`).
pub fn decrement_sequence(sequence: i32, decrement: i32) -> i32 {
    if sequence < decrement {
        (i32::MAX as i64 - (decrement as i64 - sequence as i64) + 1) as i32
    } else {
        sequence - decrement
    }
}

/// Where an append comes from (Kafka's `AppendOrigin`), which decides what is checked: a client's
/// batches fully, the coordinator's markers by epoch, a replica's not at all (the leader did).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AppendOrigin {
    Client,
    Coordinator,
    Replication,
}

/// Kafka's errors of a refused producer append, each with its protocol name and code.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProducerError {
    /// The batch's first sequence does not follow the producer's last (or a new epoch does not
    /// start at 0).
    #[error(
        "out of order sequence number for producer {producer_id} at offset {offset}: {sequence} (incoming), {last} (last written, epoch {epoch})"
    )]
    OutOfOrderSequence { producer_id: i64, epoch: i16, offset: i64, sequence: i32, last: i32 },
    /// The batch's epoch is older than the producer's (a zombie producer, fenced).
    #[error("epoch of producer {producer_id} at offset {offset} is {epoch}, older than the last seen epoch {current}")]
    InvalidProducerEpoch { producer_id: i64, offset: i64, epoch: i16, current: i16 },
    /// A non-transactional batch from a producer with a transaction open.
    #[error("expected a transactional write from producer {producer_id} at offset {offset}: its transaction is open")]
    InvalidTxnState { producer_id: i64, offset: i64 },
    /// A transaction marker from a coordinator epoch older than the last one seen.
    #[error(
        "coordinator epoch {coordinator_epoch} of the marker for producer {producer_id} at offset {offset} is older than {current}"
    )]
    TransactionCoordinatorFenced { producer_id: i64, offset: i64, coordinator_epoch: i32, current: i32 },
}

impl ProducerError {
    /// Kafka's name for the error (`Errors`).
    pub fn kafka_name(&self) -> &'static str {
        match self {
            ProducerError::OutOfOrderSequence { .. } => "OUT_OF_ORDER_SEQUENCE_NUMBER",
            ProducerError::InvalidProducerEpoch { .. } => "INVALID_PRODUCER_EPOCH",
            ProducerError::InvalidTxnState { .. } => "INVALID_TXN_STATE",
            ProducerError::TransactionCoordinatorFenced { .. } => "TRANSACTION_COORDINATOR_FENCED",
        }
    }
    /// Kafka's error code on the wire.
    pub fn kafka_code(&self) -> i16 {
        match self {
            ProducerError::OutOfOrderSequence { .. } => 45,
            ProducerError::InvalidProducerEpoch { .. } => 47,
            ProducerError::InvalidTxnState { .. } => 48,
            ProducerError::TransactionCoordinatorFenced { .. } => 52,
        }
    }
}

/// What is remembered of one batch (Kafka's `BatchMetadata`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BatchMetadata {
    pub last_seq: i32,
    pub last_offset: i64,
    /// `last_offset - first_offset` (and `last_seq - first_seq`, wrapping).
    pub offset_delta: i32,
    pub timestamp: i64,
}

impl BatchMetadata {
    pub fn first_seq(&self) -> i32 {
        decrement_sequence(self.last_seq, self.offset_delta)
    }
    pub fn first_offset(&self) -> i64 {
        self.last_offset - self.offset_delta as i64
    }
}

/// A producer's last batches, oldest first, at most [`NUM_BATCHES_TO_RETAIN`], held in place:
/// every idempotent append checks and updates one, without allocating.
#[derive(Clone, Copy, Default)]
pub struct BatchRing {
    slots: [BatchMetadata; NUM_BATCHES_TO_RETAIN],
    start: usize,
    len: usize,
}

impl BatchRing {
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// The `i`-th oldest.
    pub fn get(&self, i: usize) -> Option<&BatchMetadata> {
        (i < self.len).then(|| &self.slots[(self.start + i) % NUM_BATCHES_TO_RETAIN])
    }
    pub fn front(&self) -> Option<&BatchMetadata> {
        self.get(0)
    }
    pub fn back(&self) -> Option<&BatchMetadata> {
        self.len.checked_sub(1).and_then(|i| self.get(i))
    }
    pub fn iter(&self) -> impl Iterator<Item = &BatchMetadata> + '_ {
        (0..self.len).map(|i| &self.slots[(self.start + i) % NUM_BATCHES_TO_RETAIN])
    }
    /// Adds the newest, forgetting the oldest when full.
    pub fn push_back(&mut self, b: BatchMetadata) {
        if self.len == NUM_BATCHES_TO_RETAIN {
            self.start = (self.start + 1) % NUM_BATCHES_TO_RETAIN;
            self.len -= 1;
        }
        self.slots[(self.start + self.len) % NUM_BATCHES_TO_RETAIN] = b;
        self.len += 1;
    }
    pub fn clear(&mut self) {
        self.len = 0;
    }
}

impl std::ops::Index<usize> for BatchRing {
    type Output = BatchMetadata;
    fn index(&self, i: usize) -> &BatchMetadata {
        self.get(i).expect("batch index within the ring")
    }
}

impl PartialEq for BatchRing {
    fn eq(&self, other: &BatchRing) -> bool {
        self.iter().eq(other.iter())
    }
}
impl Eq for BatchRing {}

impl std::fmt::Debug for BatchRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// One producer's state (Kafka's `ProducerStateEntry`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProducerStateEntry {
    pub producer_id: i64,
    pub epoch: i16,
    /// The last batches, oldest first, at most [`NUM_BATCHES_TO_RETAIN`]; all of `epoch`.
    pub batches: BatchRing,
    /// The coordinator epoch of the last transaction marker (-1: none yet).
    pub coordinator_epoch: i32,
    pub last_timestamp: i64,
    /// The first offset of the producer's open transaction.
    pub current_txn_first_offset: Option<i64>,
}

impl ProducerStateEntry {
    /// A producer with no state yet (Kafka's `ProducerStateEntry.empty`).
    pub fn empty(producer_id: i64) -> ProducerStateEntry {
        ProducerStateEntry {
            producer_id,
            epoch: NO_PRODUCER_EPOCH,
            batches: BatchRing::default(),
            coordinator_epoch: -1,
            last_timestamp: crate::format::batch::NO_TIMESTAMP,
            current_txn_first_offset: None,
        }
    }
    pub fn is_empty(&self) -> bool {
        self.batches.is_empty()
    }
    pub fn first_seq(&self) -> i32 {
        self.batches.front().map_or(NO_SEQUENCE, BatchMetadata::first_seq)
    }
    pub fn last_seq(&self) -> i32 {
        self.batches.back().map_or(NO_SEQUENCE, |b| b.last_seq)
    }
    pub fn last_data_offset(&self) -> i64 {
        self.batches.back().map_or(-1, |b| b.last_offset)
    }
    pub fn last_offset_delta(&self) -> i32 {
        self.batches.back().map_or(0, |b| b.offset_delta)
    }

    /// The remembered batch with exactly this epoch and sequence range: the batch is a retry of
    /// one already in the log (Kafka's `findDuplicateBatch`).
    pub fn find_duplicate(&self, epoch: i16, first_seq: i32, last_seq: i32) -> Option<BatchMetadata> {
        if epoch != self.epoch {
            return None;
        }
        self.batches.iter().copied().find(|b| b.first_seq() == first_seq && b.last_seq == last_seq)
    }

    fn clone_without_batches(&self) -> ProducerStateEntry {
        ProducerStateEntry {
            producer_id: self.producer_id,
            epoch: self.epoch,
            batches: BatchRing::default(),
            coordinator_epoch: self.coordinator_epoch,
            last_timestamp: self.last_timestamp,
            current_txn_first_offset: self.current_txn_first_offset,
        }
    }

    /// A new epoch forgets the batches of the old one.
    fn set_epoch(&mut self, epoch: i16) {
        if self.epoch != epoch {
            self.batches.clear();
            self.epoch = epoch;
        }
    }

    fn add_batch(&mut self, epoch: i16, b: BatchMetadata) {
        self.set_epoch(epoch);
        self.batches.push_back(b);
        self.last_timestamp = b.timestamp;
    }

    /// Takes what an append made of this producer (Kafka's `ProducerStateEntry.update`).
    fn update(&mut self, next: ProducerStateEntry) {
        self.set_epoch(next.epoch);
        for b in next.batches.iter() {
            self.batches.push_back(*b);
        }
        self.coordinator_epoch = next.coordinator_epoch;
        self.current_txn_first_offset = next.current_txn_first_offset;
        self.last_timestamp = next.last_timestamp;
    }
}

/// A transaction a marker ended (Kafka's `CompletedTxn`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CompletedTxn {
    pub producer_id: i64,
    pub first_offset: i64,
    /// The marker's offset.
    pub last_offset: i64,
    pub aborted: bool,
}

/// A transaction marker's kind (the control record's type: 0 ABORT, 1 COMMIT).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MarkerType {
    Abort,
    Commit,
}

/// The checks and updates of one append for one producer (Kafka's `ProducerAppendInfo`), on a
/// copy of its entry: nothing changes in [`ProducerState`] until [`ProducerState::update`] takes
/// it, so a refused append leaves the state as it was.
#[derive(Clone, Debug)]
pub struct ProducerAppend {
    origin: AppendOrigin,
    /// The producer's epoch and last sequence before this append.
    current_epoch: i16,
    current_last_seq: i32,
    /// The entry with this append's batches: what `update` takes (its batches are only the new
    /// ones, as Kafka's).
    updated: ProducerStateEntry,
    /// First offsets of the transactions this append started.
    started: Vec<i64>,
}

impl ProducerAppend {
    pub fn producer_id(&self) -> i64 {
        self.updated.producer_id
    }

    fn check_epoch(&self, epoch: i16, offset: i64) -> Result<(), ProducerError> {
        let current = self.updated.epoch;
        if epoch < current && self.origin != AppendOrigin::Replication {
            return Err(ProducerError::InvalidProducerEpoch {
                producer_id: self.updated.producer_id,
                offset,
                epoch,
                current,
            });
        }
        Ok(())
    }

    fn check_sequence(&self, epoch: i16, first_seq: i32, offset: i64) -> Result<(), ProducerError> {
        let out_of_order = |last| ProducerError::OutOfOrderSequence {
            producer_id: self.updated.producer_id,
            epoch,
            offset,
            sequence: first_seq,
            last,
        };
        if epoch != self.updated.epoch {
            // A new epoch starts at sequence 0, unless the producer had no epoch at all.
            if first_seq != 0 && self.updated.epoch != NO_PRODUCER_EPOCH {
                return Err(out_of_order(self.updated.last_seq()));
            }
            return Ok(());
        }
        let last = if !self.updated.is_empty() {
            self.updated.last_seq()
        } else if epoch == self.current_epoch {
            self.current_last_seq
        } else {
            NO_SEQUENCE
        };
        // With no epoch known (every batch of the producer removed by retention or
        // DeleteRecords) any sequence is taken.
        let in_sequence = first_seq as i64 == last as i64 + 1 || (first_seq == 0 && last == i32::MAX);
        if self.current_epoch != NO_PRODUCER_EPOCH && !in_sequence {
            return Err(out_of_order(last));
        }
        Ok(())
    }

    /// A data batch of this producer: checked (epoch always, sequence for a client's append),
    /// then remembered; a transactional batch with no transaction open starts one.
    #[allow(clippy::too_many_arguments)]
    pub fn append_data_batch(
        &mut self,
        epoch: i16,
        first_seq: i32,
        last_seq: i32,
        max_timestamp: i64,
        first_offset: i64,
        last_offset: i64,
        transactional: bool,
    ) -> Result<(), ProducerError> {
        self.check_epoch(epoch, first_offset)?;
        if self.origin == AppendOrigin::Client {
            self.check_sequence(epoch, first_seq, first_offset)?;
        }
        let open = self.updated.current_txn_first_offset;
        if open.is_some() && !transactional {
            return Err(ProducerError::InvalidTxnState { producer_id: self.updated.producer_id, offset: first_offset });
        }
        let offset_delta = (last_offset - first_offset) as i32;
        self.updated.add_batch(epoch, BatchMetadata { last_seq, last_offset, offset_delta, timestamp: max_timestamp });
        if open.is_none() && transactional {
            self.updated.current_txn_first_offset = Some(first_offset);
            self.started.push(first_offset);
        }
        Ok(())
    }

    /// A transaction marker (COMMIT or ABORT) for this producer at `offset`: checked by epoch and
    /// coordinator epoch (not for a replica's), and the transaction it ends, if one was open (a
    /// marker with no data before it changes no stable offset and no `.txnindex`).
    pub fn append_marker(
        &mut self,
        kind: MarkerType,
        coordinator_epoch: i32,
        epoch: i16,
        offset: i64,
        timestamp: i64,
    ) -> Result<Option<CompletedTxn>, ProducerError> {
        self.check_epoch(epoch, offset)?;
        if self.updated.coordinator_epoch > coordinator_epoch && self.origin != AppendOrigin::Replication {
            return Err(ProducerError::TransactionCoordinatorFenced {
                producer_id: self.updated.producer_id,
                offset,
                coordinator_epoch,
                current: self.updated.coordinator_epoch,
            });
        }
        let completed = self.updated.current_txn_first_offset.map(|first_offset| CompletedTxn {
            producer_id: self.updated.producer_id,
            first_offset,
            last_offset: offset,
            aborted: kind == MarkerType::Abort,
        });
        self.updated.set_epoch(epoch);
        self.updated.coordinator_epoch = coordinator_epoch;
        self.updated.current_txn_first_offset = None;
        self.updated.last_timestamp = timestamp;
        Ok(completed)
    }
}

/// The producer state of one partition (Kafka's `ProducerStateManager`, without its files).
#[derive(Clone, Debug, Default)]
pub struct ProducerState {
    producers: HashMap<i64, ProducerStateEntry>,
    /// Open transactions: first offset -> producer id.
    ongoing: BTreeMap<i64, i64>,
    /// Transactions whose marker is not yet below the high watermark: first offset ->
    /// (producer id, marker offset).
    unreplicated: BTreeMap<i64, (i64, i64)>,
    /// The offset up to which the log's batches are in this state (exclusive).
    map_end_offset: i64,
}

impl ProducerState {
    /// An empty state for a log whose batches start at `offset`.
    pub fn new(offset: i64) -> ProducerState {
        ProducerState { map_end_offset: offset, ..ProducerState::default() }
    }

    pub fn producers(&self) -> impl Iterator<Item = &ProducerStateEntry> {
        self.producers.values()
    }
    pub fn len(&self) -> usize {
        self.producers.len()
    }
    pub fn is_empty(&self) -> bool {
        self.producers.is_empty() && self.unreplicated.is_empty()
    }
    pub fn last_entry(&self, producer_id: i64) -> Option<&ProducerStateEntry> {
        self.producers.get(&producer_id)
    }
    /// The offset up to which the log's batches are in this state (exclusive).
    pub fn map_end_offset(&self) -> i64 {
        self.map_end_offset
    }
    pub fn update_map_end_offset(&mut self, offset: i64) {
        self.map_end_offset = offset;
    }

    /// Starts checking an append of `producer_id`'s batches.
    pub fn prepare(&self, producer_id: i64, origin: AppendOrigin) -> ProducerAppend {
        assert_ne!(producer_id, NO_PRODUCER_ID, "a batch without a producer id has no producer state");
        // The entry without its batches: `update` adds only this append's.
        let (updated, current_epoch, current_last_seq) = match self.producers.get(&producer_id) {
            Some(e) => (e.clone_without_batches(), e.epoch, e.last_seq()),
            None => (ProducerStateEntry::empty(producer_id), NO_PRODUCER_EPOCH, NO_SEQUENCE),
        };
        ProducerAppend { origin, current_epoch, current_last_seq, updated, started: Vec::new() }
    }

    /// Takes a checked append into the state (Kafka's `ProducerStateManager.update`).
    pub fn update(&mut self, append: ProducerAppend) {
        let ProducerAppend { updated, started, .. } = append;
        let producer_id = updated.producer_id;
        match self.producers.get_mut(&producer_id) {
            Some(entry) => entry.update(updated),
            None => {
                self.producers.insert(producer_id, updated);
            }
        }
        for first in started {
            self.ongoing.insert(first, producer_id);
        }
    }

    /// The last stable offset a completed transaction leaves for the `.txnindex` entry: the first
    /// offset of the next transaction still open (of another producer), else just past the marker.
    pub fn last_stable_offset(&self, txn: &CompletedTxn) -> i64 {
        self.ongoing.iter().find(|(_, pid)| **pid != txn.producer_id).map_or(txn.last_offset + 1, |(first, _)| *first)
    }

    /// Marks a transaction completed: it stays unstable until the high watermark passes its
    /// marker ([`ProducerState::on_high_watermark`]). False (and nothing changed) for one that
    /// was not open (Kafka refuses it; a replica's or a replayed marker can meet one).
    pub fn complete_txn(&mut self, txn: &CompletedTxn) -> bool {
        if self.ongoing.get(&txn.first_offset) != Some(&txn.producer_id) {
            return false;
        }
        self.ongoing.remove(&txn.first_offset);
        self.unreplicated.insert(txn.first_offset, (txn.producer_id, txn.last_offset));
        true
    }

    /// Completed transactions whose marker is below `high_watermark` are stable now.
    pub fn on_high_watermark(&mut self, high_watermark: i64) {
        self.unreplicated.retain(|_, (_, marker)| *marker >= high_watermark);
    }

    /// The first offset of an open transaction, or of a completed one whose marker is not yet
    /// below the high watermark, whichever is lower (Kafka's `firstUnstableOffset`).
    pub fn first_unstable_offset(&self) -> Option<i64> {
        let undecided = self.ongoing.keys().next().copied();
        let unreplicated = self.unreplicated.keys().next().copied();
        match (undecided, unreplicated) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Forgets producers idle for `expiration_ms` (by the timestamp of their last batch), never
    /// one with a transaction open (Kafka's `removeExpiredProducers`).
    pub fn remove_expired(&mut self, now_ms: i64, expiration_ms: i64) {
        self.producers.retain(|_, e| !is_expired(e, now_ms, expiration_ms));
    }

    /// Everything forgotten; the log's batches start again at `offset` (Kafka's
    /// `truncateFullyAndStartAt`, without the files).
    pub fn truncate_fully_and_start_at(&mut self, offset: i64) {
        *self = ProducerState::new(offset);
    }

    /// Loads a snapshot's entries (unexpired ones) as the state at `offset` (the snapshot's).
    pub fn load(entries: Vec<ProducerStateEntry>, offset: i64, now_ms: i64, expiration_ms: i64) -> ProducerState {
        let mut s = ProducerState::new(offset);
        for e in entries.into_iter().filter(|e| !is_expired(e, now_ms, expiration_ms)) {
            if let Some(first) = e.current_txn_first_offset {
                s.ongoing.insert(first, e.producer_id);
            }
            s.producers.insert(e.producer_id, e);
        }
        s
    }

    /// The state in Kafka's `.snapshot` format (version 1), producers in id order: each with
    /// its last batch only, as Kafka writes it.
    pub fn snapshot(&self) -> Vec<u8> {
        let mut ids: Vec<&i64> = self.producers.keys().collect();
        ids.sort_unstable();
        let mut b = Vec::with_capacity(SNAPSHOT_HEADER_BYTES + ids.len() * SNAPSHOT_ENTRY_BYTES);
        b.extend_from_slice(&SNAPSHOT_VERSION.to_be_bytes());
        b.extend_from_slice(&[0; 4]);
        b.extend_from_slice(&(ids.len() as i32).to_be_bytes());
        for id in ids {
            SnapshotEntry::of(&self.producers[id]).encode(&mut b);
        }
        let crc = crc32c::crc32c(&b[SNAPSHOT_ENTRIES_AT..]);
        b[2..SNAPSHOT_ENTRIES_AT].copy_from_slice(&crc.to_be_bytes());
        b
    }
}

fn is_expired(e: &ProducerStateEntry, now_ms: i64, expiration_ms: i64) -> bool {
    e.current_txn_first_offset.is_none() && now_ms.saturating_sub(e.last_timestamp) >= expiration_ms
}

/// Why a `.snapshot` file's bytes were refused (Kafka's `CorruptSnapshotException`): the byte
/// where reading stopped and what was wrong there.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("byte {pos}: {detail}")]
pub struct SnapshotError {
    pub pos: usize,
    pub detail: String,
}

/// The entries of a `.snapshot` file's bytes, checked: version 1, the CRC-32C of everything
/// after it, an entry count that the bytes hold exactly. An entry with no last offset (-1) has no
/// batch; one with a current transaction offset of -1 has no transaction open.
pub fn read_snapshot(b: &[u8]) -> Result<Vec<ProducerStateEntry>, SnapshotError> {
    let bad = |pos: usize, detail: String| SnapshotError { pos, detail };
    if b.len() < SNAPSHOT_HEADER_BYTES {
        return Err(bad(b.len(), format!("{} bytes, shorter than the 10-byte header", b.len())));
    }
    let version = i16::from_be_bytes([b[0], b[1]]);
    if version != SNAPSHOT_VERSION {
        return Err(bad(0, format!("unknown snapshot version {version}")));
    }
    let stored = u32::from_be_bytes([b[2], b[3], b[4], b[5]]);
    let computed = crc32c::crc32c(&b[SNAPSHOT_ENTRIES_AT..]);
    if stored != computed {
        return Err(bad(2, format!("CRC {stored:#010x} stored, {computed:#010x} computed")));
    }
    let count = i32::from_be_bytes([b[6], b[7], b[8], b[9]]);
    let body = &b[SNAPSHOT_HEADER_BYTES..];
    if count < 0 || body.len() != count as usize * SNAPSHOT_ENTRY_BYTES {
        return Err(bad(6, format!("{count} entries announced, {} bytes of entries", body.len())));
    }
    let out = body.chunks_exact(SNAPSHOT_ENTRY_BYTES).map(|e| SnapshotEntry::decode(e).to_producer()).collect();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PID: i64 = 1000;

    /// Appends one data batch of `records` records for `PID` at `offset`, as a client would.
    fn append(
        s: &mut ProducerState,
        epoch: i16,
        first_seq: i32,
        records: i32,
        offset: i64,
        transactional: bool,
    ) -> Result<(), ProducerError> {
        let mut a = s.prepare(PID, AppendOrigin::Client);
        let last_seq = (first_seq as i64 + records as i64 - 1) as i32;
        a.append_data_batch(
            epoch,
            first_seq,
            last_seq,
            1_000 + offset,
            offset,
            offset + records as i64 - 1,
            transactional,
        )?;
        s.update(a);
        s.update_map_end_offset(offset + records as i64);
        Ok(())
    }

    #[test]
    fn sequences_follow_and_gaps_are_refused() {
        let mut s = ProducerState::new(0);
        // A new producer may start anywhere (its earlier batches may have been removed).
        append(&mut s, 0, 0, 3, 0, false).unwrap();
        append(&mut s, 0, 3, 2, 3, false).unwrap();
        let before = s.clone();
        let e = append(&mut s, 0, 6, 1, 5, false).unwrap_err();
        assert_eq!(
            e,
            ProducerError::OutOfOrderSequence { producer_id: PID, epoch: 0, offset: 5, sequence: 6, last: 4 }
        );
        assert_eq!((e.kafka_name(), e.kafka_code()), ("OUT_OF_ORDER_SEQUENCE_NUMBER", 45));
        assert_eq!(s.last_entry(PID), before.last_entry(PID), "a refused batch changes nothing");
        append(&mut s, 0, 5, 1, 5, false).unwrap();
        assert_eq!(s.last_entry(PID).unwrap().last_seq(), 5);
    }

    #[test]
    fn an_old_epoch_is_fenced_and_a_new_one_starts_at_zero() {
        let mut s = ProducerState::new(0);
        append(&mut s, 3, 0, 1, 0, false).unwrap();
        let e = append(&mut s, 2, 1, 1, 1, false).unwrap_err();
        assert_eq!(e, ProducerError::InvalidProducerEpoch { producer_id: PID, offset: 1, epoch: 2, current: 3 });
        assert_eq!(e.kafka_code(), 47);
        let e = append(&mut s, 4, 7, 1, 1, false).unwrap_err();
        assert!(matches!(e, ProducerError::OutOfOrderSequence { sequence: 7, .. }), "{e:?}");
        append(&mut s, 4, 0, 1, 1, false).unwrap();
        let entry = s.last_entry(PID).unwrap();
        assert_eq!((entry.epoch, entry.batches.len()), (4, 1), "a new epoch forgets the old one's batches");
        // A replica's batches are taken as the leader wrote them, even an old epoch.
        let mut a = s.prepare(PID, AppendOrigin::Replication);
        a.append_data_batch(3, 9, 9, 0, 2, 2, false).unwrap();
    }

    #[test]
    fn sequences_wrap_at_i32_max() {
        let mut s = ProducerState::new(0);
        append(&mut s, 0, i32::MAX - 1, 2, 0, false).unwrap();
        assert_eq!(s.last_entry(PID).unwrap().last_seq(), i32::MAX);
        append(&mut s, 0, 0, 1, 2, false).unwrap();
        // A batch spanning the wrap: first i32::MAX - 1, last 1.
        let mut t = ProducerState::new(0);
        let mut a = t.prepare(PID, AppendOrigin::Client);
        a.append_data_batch(0, i32::MAX - 1, 1, 0, 0, 3, false).unwrap();
        t.update(a);
        let b = *t.last_entry(PID).unwrap().batches.back().unwrap();
        assert_eq!((b.first_seq(), b.last_seq, b.first_offset()), (i32::MAX - 1, 1, 0));
        assert!(t.last_entry(PID).unwrap().find_duplicate(0, i32::MAX - 1, 1).is_some());
    }

    #[test]
    fn the_last_five_batches_are_recognised_as_duplicates() {
        let mut s = ProducerState::new(0);
        for i in 0..7 {
            append(&mut s, 0, i * 2, 2, i as i64 * 2, false).unwrap();
        }
        let e = s.last_entry(PID).unwrap();
        assert_eq!(e.batches.len(), NUM_BATCHES_TO_RETAIN);
        // Batches 2..7 (sequences 4..13) are remembered, with their offsets; 0 and 1 are not.
        for i in 2..7 {
            let d = e.find_duplicate(0, i * 2, i * 2 + 1).expect("remembered");
            assert_eq!((d.first_offset(), d.last_offset), (i as i64 * 2, i as i64 * 2 + 1));
        }
        assert_eq!(e.find_duplicate(0, 2, 3), None);
        assert_eq!(e.find_duplicate(0, 4, 4), None, "the range must match exactly");
        assert_eq!(e.find_duplicate(1, 4, 5), None, "another epoch is not a duplicate");
    }

    #[test]
    fn transactions_open_complete_and_bound_the_stable_offset() {
        let mut s = ProducerState::new(0);
        append(&mut s, 0, 0, 2, 10, true).unwrap();
        assert_eq!(s.last_entry(PID).unwrap().current_txn_first_offset, Some(10));
        assert_eq!(s.first_unstable_offset(), Some(10));
        let e = append(&mut s, 0, 2, 1, 12, false).unwrap_err();
        assert_eq!(e, ProducerError::InvalidTxnState { producer_id: PID, offset: 12 });
        append(&mut s, 0, 2, 1, 12, true).unwrap();
        // Another producer's transaction starts later.
        let mut other = s.prepare(7, AppendOrigin::Client);
        other.append_data_batch(0, 0, 0, 0, 13, 13, true).unwrap();
        s.update(other);
        // The coordinator aborts PID's transaction with its marker at 14.
        let mut m = s.prepare(PID, AppendOrigin::Coordinator);
        let done = m.append_marker(MarkerType::Abort, 5, 0, 14, 2_000).unwrap().expect("a transaction was open");
        assert_eq!(done, CompletedTxn { producer_id: PID, first_offset: 10, last_offset: 14, aborted: true });
        s.update(m);
        assert_eq!(s.last_stable_offset(&done), 13, "the other producer's transaction is still open");
        assert!(s.complete_txn(&done));
        assert!(!s.complete_txn(&done), "a transaction completes once; a second marker changes nothing");
        assert_eq!(s.first_unstable_offset(), Some(10), "unstable until the marker is below the high watermark");
        s.on_high_watermark(15);
        assert_eq!(s.first_unstable_offset(), Some(13));
        // An older coordinator is fenced; a marker with no transaction open completes nothing.
        let mut m = s.prepare(PID, AppendOrigin::Coordinator);
        let e = m.append_marker(MarkerType::Commit, 4, 0, 15, 0).unwrap_err();
        assert_eq!(e.kafka_code(), 52);
        assert_eq!(m.append_marker(MarkerType::Commit, 5, 0, 15, 0).unwrap(), None);
    }

    #[test]
    fn producers_expire_unless_a_transaction_is_open() {
        let mut s = ProducerState::new(0);
        append(&mut s, 0, 0, 1, 0, false).unwrap();
        let mut t = s.prepare(9, AppendOrigin::Client);
        t.append_data_batch(0, 0, 0, 1_000, 1, 1, true).unwrap();
        s.update(t);
        s.remove_expired(1_000 + 999, 1_000);
        assert_eq!(s.len(), 2);
        s.remove_expired(1_000 + 1_000, 1_000);
        assert!(s.last_entry(PID).is_none(), "idle for the expiration: gone");
        assert!(s.last_entry(9).is_some(), "a transaction is open: kept");
    }

    #[test]
    fn snapshots_round_trip_in_kafkas_layout_and_damage_is_refused() {
        let mut s = ProducerState::new(0);
        append(&mut s, 2, 0, 3, 0, false).unwrap();
        let mut t = s.prepare(77, AppendOrigin::Client);
        t.append_data_batch(1, 5, 5, 4_242, 3, 3, true).unwrap();
        s.update(t);
        let b = s.snapshot();
        assert_eq!(b.len(), 10 + 2 * 46);
        // Version 1, then the CRC-32C of everything after it, then the count.
        assert_eq!(&b[..2], &[0, 1]);
        assert_eq!(u32::from_be_bytes(b[2..6].try_into().unwrap()), crc32c::crc32c(&b[6..]));
        assert_eq!(&b[6..10], &[0, 0, 0, 2]);
        let entries = read_snapshot(&b).unwrap();
        let loaded = ProducerState::load(entries, 4, 0, i64::MAX);
        let e = loaded.last_entry(PID).unwrap();
        assert_eq!((e.epoch, e.last_seq(), e.last_data_offset(), e.last_offset_delta()), (2, 2, 2, 2));
        assert_eq!(e.batches[0].first_seq(), 0);
        let t = loaded.last_entry(77).unwrap();
        assert_eq!((t.current_txn_first_offset, t.last_timestamp), (Some(3), 4_242));
        assert_eq!(loaded.first_unstable_offset(), Some(3));
        // Every single-byte change and every cut is refused, never trusted.
        for i in 0..b.len() {
            let mut d = b.clone();
            d[i] ^= 0x40;
            assert!(read_snapshot(&d).is_err(), "byte {i} flipped was read");
        }
        for n in 0..b.len() {
            assert!(read_snapshot(&b[..n]).is_err(), "{n} bytes read");
        }
        // An empty state is a 10-byte file.
        assert_eq!(read_snapshot(&ProducerState::new(0).snapshot()).unwrap(), vec![]);
    }

    /// The ring keeps the newest five in order, and compares and indexes by content.
    #[test]
    fn the_batch_ring_keeps_the_newest_five_in_order() {
        let b = |i: i64| BatchMetadata { last_seq: i as i32, last_offset: i, offset_delta: 0, timestamp: i };
        let mut r = BatchRing::default();
        assert!(r.is_empty() && r.front().is_none() && r.back().is_none());
        for i in 0..12 {
            r.push_back(b(i));
            let want: Vec<i64> = ((i - 4).max(0)..=i).collect();
            assert_eq!(r.iter().map(|x| x.last_offset).collect::<Vec<_>>(), want, "after {i}");
            assert_eq!((r.front().unwrap().last_offset, r.back().unwrap().last_offset), (want[0], i));
            assert_eq!(r[r.len() - 1], b(i));
        }
        let mut other = BatchRing::default();
        for i in 7..12 {
            other.push_back(b(i));
        }
        assert_eq!(r, other, "equal by content, whatever the slots");
        r.clear();
        assert!(r.is_empty() && r.get(0).is_none());
    }

    #[test]
    fn decrement_sequence_wraps_as_kafka() {
        assert_eq!(decrement_sequence(5, 2), 3);
        assert_eq!(decrement_sequence(1, 3), i32::MAX - 1);
        assert_eq!(decrement_sequence(0, 1), i32::MAX);
    }
}
