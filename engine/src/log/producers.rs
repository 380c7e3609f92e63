//! A log's producer state (`producer_state.rs` holds the state and Kafka's rules): the checks of
//! a leader append, the updates of a follower append, the `.snapshot` files taken at each roll
//! and clean close, and the state rebuilt at open and after a truncation from the newest readable
//! snapshot and the batches after it.

use std::collections::{BTreeSet, HashMap};

use super::producer_state::{self, AppendOrigin, CompletedTxn, MarkerType, ProducerAppend, ProducerState};
use super::txn_index::AbortedTxn;
use super::{validate, AppendInfo, Log};

/// The largest producer snapshot read (22 million producers); a larger file is refused.
const MAX_SNAPSHOT_BYTES: u64 = 1 << 30;
use crate::config::TimestampType;
use crate::error::{Error, Result};
use crate::format::batch::BatchHeader;
use crate::format::filename;
use crate::io::OpenMode;

/// A transaction marker's kind, coordinator epoch and timestamp, from a control batch's first
/// record (key: version i16, type i16 with 0 ABORT and 1 COMMIT; value: version i16, coordinator
/// epoch i32: Kafka's `EndTransactionMarker`); `None` for any other control record or one that
/// does not decode.
fn control_marker(batch: &[u8], h: &BatchHeader, scratch: &mut Vec<u8>) -> Option<(MarkerType, i32, i64)> {
    // Markers are written uncompressed; a compressed control batch is not decompressed (its
    // records could be as large as the batch allows).
    if !matches!(h.compression(), Ok(crate::format::compression::Compression::None)) {
        return None;
    }
    let r = crate::format::record::batch_records(batch, scratch).ok()?.next()?.ok()?;
    let (key, value) = (r.key?, r.value?);
    if key.len() < 4 || value.len() < 6 {
        return None;
    }
    let kind = match i16::from_be_bytes([key[2], key[3]]) {
        0 => MarkerType::Abort,
        1 => MarkerType::Commit,
        _ => return None,
    };
    let coordinator_epoch = i32::from_be_bytes([value[2], value[3], value[4], value[5]]);
    // Kafka's `record.timestamp()`: the batch's max timestamp under LogAppendTime.
    let ts = match h.timestamp_type() {
        TimestampType::LogAppendTime => h.max_timestamp,
        TimestampType::CreateTime => h.base_timestamp.saturating_add(r.timestamp_delta),
    };
    Some((kind, coordinator_epoch, ts))
}

/// The appends of one request (or one replay) by producer, in the order first seen.
#[derive(Default)]
pub(super) struct Appends {
    appends: Vec<ProducerAppend>,
    /// Producer id -> index in `appends`, once there are many (a replay meets many producers; an
    /// append request has one or a few, found by a scan without allocating).
    index: HashMap<i64, usize>,
    completed: Vec<CompletedTxn>,
    scratch: Vec<u8>,
}

impl Appends {
    fn of(&mut self, state: &ProducerState, producer_id: i64, origin: AppendOrigin) -> &mut ProducerAppend {
        const SCAN: usize = 8;
        let found = if self.appends.len() <= SCAN {
            self.appends.iter().position(|a| a.producer_id() == producer_id)
        } else {
            self.index.get(&producer_id).copied()
        };
        let i = match found {
            Some(i) => i,
            None => {
                self.appends.push(state.prepare(producer_id, origin));
                if self.appends.len() > SCAN {
                    if self.index.is_empty() {
                        self.index.extend(self.appends.iter().enumerate().map(|(i, a)| (a.producer_id(), i)));
                    } else {
                        self.index.insert(producer_id, self.appends.len() - 1);
                    }
                }
                self.appends.len() - 1
            }
        };
        &mut self.appends[i]
    }

    /// Into the state, which then covers the log up to `end`; the transactions it aborted, each
    /// with the last stable offset its `.txnindex` entry records (Kafka's append path: every
    /// producer updated first, then each completed transaction in marker order).
    fn apply(self, state: &mut ProducerState, end: i64) -> Vec<AbortedTxn> {
        for a in self.appends {
            state.update(a);
        }
        let aborted = self.completed.iter().filter_map(|txn| complete(state, txn)).collect();
        state.update_map_end_offset(end);
        aborted
    }
}

/// Producer state taken from a log's batches as they were written, one batch at a time, without
/// checks (Kafka's `AppendOrigin.REPLICATION`, and its segment recovery): a follower's appends,
/// the replay after a snapshot at open, and the tools that check a `.txnindex` against the log.
/// Each ABORT marker that ends an open transaction gives the `.txnindex` entry Kafka writes for
/// it.
#[derive(Debug, Default)]
pub struct ProducerReplay {
    state: ProducerState,
    scratch: Vec<u8>,
    /// Completed transactions whose marker is below it are forgotten as the replay goes.
    high_watermark: Option<i64>,
    since_settled: u32,
}

/// Batches between two passes forgetting stable transactions ([`ProducerReplay::settling`]).
const SETTLE_EVERY: u32 = 1024;

impl ProducerReplay {
    /// A replay starting from `state` (a loaded snapshot, or an empty state at the first offset).
    pub fn new(state: ProducerState) -> ProducerReplay {
        ProducerReplay { state, ..ProducerReplay::default() }
    }

    /// A replay that forgets, as it goes, the completed transactions whose marker is below
    /// `high_watermark` ([`ProducerState::on_high_watermark`]), so that its memory follows the
    /// producers and their open transactions, not every transaction the log holds.
    pub fn settling(state: ProducerState, high_watermark: i64) -> ProducerReplay {
        ProducerReplay { state, high_watermark: Some(high_watermark), ..ProducerReplay::default() }
    }

    /// Takes the batch `h` as written (`bytes`, the whole batch, is read only for a control
    /// batch: a marker whose record does not decode changes nothing, as its leader refuses
    /// one), and returns the aborted transaction its marker ended, if any.
    pub fn batch(&mut self, h: &BatchHeader, bytes: &[u8]) -> Option<AbortedTxn> {
        let mut aborted = None;
        if h.has_producer_id() {
            let mut a = self.state.prepare(h.producer_id, AppendOrigin::Replication);
            let mut completed = None;
            if h.is_control() {
                if let Some((kind, coordinator_epoch, ts)) = control_marker(bytes, h, &mut self.scratch) {
                    completed =
                        a.append_marker(kind, coordinator_epoch, h.producer_epoch, h.base_offset, ts).ok().flatten();
                }
            } else {
                let _ = a.append_data_batch(
                    h.producer_epoch,
                    h.base_sequence,
                    h.last_sequence(),
                    h.max_timestamp,
                    h.base_offset,
                    h.last_offset(),
                    h.is_transactional(),
                );
            }
            self.state.update(a);
            aborted = completed.and_then(|txn| complete(&mut self.state, &txn));
        }
        self.state.update_map_end_offset(h.next_offset());
        if let Some(hw) = self.high_watermark {
            self.since_settled += 1;
            if self.since_settled >= SETTLE_EVERY {
                self.since_settled = 0;
                self.state.on_high_watermark(hw);
            }
        }
        aborted
    }

    pub fn state(&self) -> &ProducerState {
        &self.state
    }

    pub fn into_state(self) -> ProducerState {
        self.state
    }
}

/// Completes a transaction its marker ended, once its producer's append is in the state (Kafka:
/// `lastStableOffset(completedTxn)`, the `.txnindex` entry, `completeTxn`): the `.txnindex`
/// entry of an abort. A marker for a transaction the state never saw start (its start below a
/// snapshot that did not hold it) completes nothing.
fn complete(state: &mut ProducerState, txn: &CompletedTxn) -> Option<AbortedTxn> {
    let last_stable_offset = state.last_stable_offset(txn);
    (state.complete_txn(txn) && txn.aborted).then(|| aborted_txn(txn, last_stable_offset))
}

fn aborted_txn(txn: &CompletedTxn, last_stable_offset: i64) -> AbortedTxn {
    AbortedTxn {
        producer_id: txn.producer_id,
        first_offset: txn.first_offset,
        last_offset: txn.last_offset,
        last_stable_offset,
    }
}

impl Log {
    /// Kafka's producer checks of a leader append (`analyzeAndValidateProducerState`), before
    /// anything changes: `Err(info)` when a batch is a retry of one of its producer's last five
    /// (the first copy's offsets, nothing to append), else each producer's checked append and the
    /// transactions its markers end (markers only from [`AppendOrigin::Coordinator`]), for
    /// [`Log::producers_appended`] once the batches are in. A refusal is [`Error::Producer`]
    /// naming Kafka's error. `log_append_time` is the time LogAppendTime batches get.
    pub(super) fn check_producers(
        &self,
        records: &[u8],
        batches: &[validate::CheckedBatch],
        origin: AppendOrigin,
        log_append_time: Option<i64>,
    ) -> Result<std::result::Result<Appends, AppendInfo>> {
        let mut appends = Appends::default();
        let mut next = self.log_end_offset;
        for cb in batches {
            let h = cb.header;
            let first = next;
            next += h.last_offset_delta as i64 + 1;
            if !h.has_producer_id() {
                continue;
            }
            if h.is_control() {
                let bytes = &records[cb.at..cb.at + h.size_in_bytes() as usize];
                let Some((kind, coordinator_epoch, ts)) = control_marker(bytes, &h, &mut appends.scratch) else {
                    return Err(Error::InvalidRecord {
                        at: cb.at,
                        detail: "a control batch from the coordinator that is not a transaction marker".into(),
                    });
                };
                let ts = log_append_time.unwrap_or(ts);
                let done = appends
                    .of(&self.producers, h.producer_id, origin)
                    .append_marker(kind, coordinator_epoch, h.producer_epoch, first, ts)
                    .map_err(|source| Error::Producer { at: cb.at, source })?;
                appends.completed.extend(done);
                continue;
            }
            let last_seq = h.last_sequence();
            // Only a client retries (Kafka checks duplicates for `AppendOrigin.CLIENT` only).
            let entry = self.producers.last_entry(h.producer_id).filter(|_| origin == AppendOrigin::Client);
            if let Some(d) = entry.and_then(|e| e.find_duplicate(h.producer_epoch, h.base_sequence, last_seq)) {
                return Ok(Err(AppendInfo {
                    first_offset: d.first_offset(),
                    last_offset: d.last_offset,
                    max_timestamp: d.timestamp,
                    shallow_offset_of_max_timestamp: d.last_offset,
                    // Kafka's answer to a duplicate carries its timestamp as the append time.
                    log_append_time_ms: d.timestamp,
                    batches: 0,
                    records: 0,
                    bytes: 0,
                    segment_base_offset: -1,
                    position: 0,
                    // Set by the log, which knows it.
                    log_start_offset: -1,
                    duplicate: true,
                }));
            }
            let max_ts = log_append_time.unwrap_or(cb.max_timestamp);
            let last = first + h.last_offset_delta as i64;
            appends
                .of(&self.producers, h.producer_id, origin)
                .append_data_batch(
                    h.producer_epoch,
                    h.base_sequence,
                    last_seq,
                    max_ts,
                    first,
                    last,
                    h.is_transactional(),
                )
                .map_err(|source| Error::Producer { at: cb.at, source })?;
        }
        Ok(Ok(appends))
    }

    /// Takes a leader append's checked producers into the state, once its batches are in, and
    /// the transactions it aborted into the active segment's `.txnindex`.
    pub(super) fn producers_appended(&mut self, appends: Appends) -> Result<()> {
        let aborted = appends.apply(&mut self.producers, self.log_end_offset);
        self.index_aborted(aborted)
    }

    /// The producers' state of a follower append, taken as the leader wrote it: data batches and
    /// transaction markers update it without checks (Kafka's `AppendOrigin.REPLICATION`), one
    /// batch at a time, so that each `.txnindex` entry is the one its leader wrote.
    pub(super) fn follow_producers(&mut self, records: &[u8], headers: &[BatchHeader]) -> Result<()> {
        let mut replay = ProducerReplay::new(std::mem::take(&mut self.producers));
        let mut aborted = Vec::new();
        let mut at = 0usize;
        for h in headers {
            let size = h.size_in_bytes() as usize;
            aborted.extend(replay.batch(h, &records[at..at + size]));
            at += size;
        }
        self.producers = replay.into_state();
        self.producers.update_map_end_offset(self.log_end_offset);
        self.index_aborted(aborted)
    }

    /// Aborted transactions whose markers an append just put in the active segment, into its
    /// `.txnindex`; a failed write fails the log (a recovery writes the entries again).
    fn index_aborted(&mut self, aborted: Vec<AbortedTxn>) -> Result<()> {
        let base = self.active_segment().base_offset();
        for t in aborted {
            let r = self.append_aborted_txn(base, t);
            self.guard(r)?;
        }
        Ok(())
    }

    /// The producer state of this log: its producers, open transactions and first unstable
    /// offset.
    pub fn producer_state(&self) -> &producer_state::ProducerState {
        &self.producers
    }

    /// Writes `%020d.snapshot` at the offset the state covers, unless the newest snapshot is
    /// there already (Kafka's `takeSnapshot`, at each roll and clean close): written whole and
    /// fsynced. A crash mid-write leaves a file whose CRC fails; the next open deletes it and
    /// uses an older one or the log.
    pub(super) fn take_producer_snapshot(&mut self) -> Result<()> {
        let at = self.producers.map_end_offset();
        if self.producer_snapshots.last().is_some_and(|&last| last >= at) {
            return Ok(());
        }
        let path = self.dir.join(filename::snapshot_file_name(at));
        let bytes = self.producers.snapshot();
        let mode = if self.storage.exists(&path) { OpenMode::ReadWrite } else { OpenMode::CreateNew };
        let f = self.storage.open(&path, mode)?;
        f.set_len(0)?;
        f.write_all_at(&bytes, 0)?;
        f.sync_data()?;
        self.producer_snapshots.insert(at);
        Ok(())
    }

    /// Deletes the snapshots at offsets in `range` (Kafka: the ones past a truncation's new end,
    /// those below the log start); how many. The caller fsyncs the directory.
    pub(super) fn delete_producer_snapshots(&mut self, range: impl std::ops::RangeBounds<i64>) -> Result<usize> {
        let doomed: Vec<i64> = self.producer_snapshots.range(range).copied().collect();
        for &at in &doomed {
            let path = self.dir.join(filename::snapshot_file_name(at));
            if self.storage.exists(&path) {
                self.storage.remove_file(&path)?;
            }
            self.producer_snapshots.remove(&at);
        }
        Ok(doomed.len())
    }

    /// Forgets producers idle for `producer_id_expiration_ms`, never one with a transaction open
    /// (Kafka checks every `producer.id.expiration.check.interval.ms`; the log does it at each
    /// retention pass).
    pub(super) fn expire_producers(&mut self, now_ms: i64) {
        self.producers.remove_expired(now_ms, self.config.producer_id_expiration_ms);
    }

    /// The entries of the snapshot at `at`, `None` when it does not read (damaged).
    fn read_producer_snapshot(&self, at: i64) -> Result<Option<Vec<producer_state::ProducerStateEntry>>> {
        let path = self.dir.join(filename::snapshot_file_name(at));
        let f = self.storage.open(&path, OpenMode::Read)?;
        let len = f.len()?;
        if len > MAX_SNAPSHOT_BYTES {
            return Err(Error::CorruptIndex {
                path,
                detail: format!("producer snapshot of {len} bytes, more than the {MAX_SNAPSHOT_BYTES} read"),
            });
        }
        let mut b = vec![0u8; len as usize];
        f.read_exact_at(&mut b, 0)?;
        Ok(producer_state::read_snapshot(&b).ok())
    }

    /// Rebuilds the state at the log end (Kafka's `rebuildProducerState`): snapshots past the end
    /// deleted, then the newest one that reads (one that does not is deleted, never trusted)
    /// and the batches after it replayed; with none, the whole log replayed, except after a
    /// clean shutdown (`clean`), where a log that never had a snapshot starts with no producers
    /// and no read of its batches (Kafka's path for logs written before producer state).
    ///
    /// The `.txnindex` files of the segments in `rebuild` (recovered after a crash, or damaged)
    /// are rebuilt as well: written again, each whole ([`Log::replace_txn_index`]), from the ABORT
    /// markers of a replay that starts at a snapshot at or below the first of them (Kafka
    /// rebuilds each recovered segment's the same way); the later snapshots are kept, the
    /// damaged ones among them deleted.
    pub(super) fn rebuild_producer_state(&mut self, clean: bool, rebuild: &BTreeSet<i64>) -> Result<()> {
        let index_from = rebuild.first().copied();
        let (start, end) = (self.log_start_offset, self.log_end_offset);
        // Kafka's upgrade path is for a log with no snapshot file at all, decided before any
        // damaged one is deleted.
        let had_snapshots = !self.producer_snapshots.is_empty();
        let mut deleted =
            self.delete_producer_snapshots((std::ops::Bound::Excluded(end), std::ops::Bound::Unbounded))?;
        let now = self.clock.now_ms();
        let expiration = self.config.producer_id_expiration_ms;
        let newest = index_from.map_or(end, |b| b.min(end));
        // Past the one a rebuild of `.txnindex` files starts from, the snapshots are kept; the
        // newest of them is read as it would be without the rebuild: damaged, it is deleted and
        // the next one read.
        while let Some(&at) = self.producer_snapshots.last().filter(|&&at| at > newest) {
            if self.read_producer_snapshot(at)?.is_some() {
                break;
            }
            deleted += self.delete_producer_snapshots(at..=at)?;
        }
        let candidates: Vec<i64> = self.producer_snapshots.range(..=newest).rev().copied().collect();
        let mut state = None;
        for at in candidates {
            // Kafka keeps none at or below the log start.
            if at <= start && at < end {
                deleted += self.delete_producer_snapshots(..=at)?;
                break;
            }
            match self.read_producer_snapshot(at)? {
                Some(entries) => {
                    state = Some(ProducerState::load(entries, at, now, expiration));
                    break;
                }
                // Damaged (a crash tore it): deleted, never trusted; an older one or the log.
                None => deleted += self.delete_producer_snapshots(at..=at)?,
            }
        }
        if deleted > 0 {
            // Deletions made durable, so that an old snapshot cannot come back after a crash and
            // be taken for the state of different data.
            let r = self.storage.sync_dir(&self.dir);
            self.guard(r)?;
        }
        self.producers = match state {
            Some(s) => s,
            None if clean && !had_snapshots && index_from.is_none() => ProducerState::new(end),
            None => ProducerState::new(start),
        };
        let aborted = self.replay_producers(self.producers.map_end_offset(), end, index_from)?;
        // Each rebuilt file replaces the old one whole, durably, before the log goes on.
        let mut replaced = false;
        for &base in rebuild {
            let entries: Vec<AbortedTxn> = aborted.iter().filter(|(b, _)| *b == base).map(|(_, t)| *t).collect();
            replaced |= self.replace_txn_index(base, &entries)?;
        }
        if replaced {
            self.storage.sync_dir(&self.dir)?;
        }
        // The high watermark is the log end at open: replayed transactions whose marker is below
        // it are stable.
        self.producers.on_high_watermark(self.high_watermark);
        Ok(())
    }

    /// Replays the batches in `[from, to)` into the state, as a follower's ([`ProducerReplay`]);
    /// the transactions aborted by markers at or past `index_from`, with the base offset of the
    /// segment holding each marker.
    fn replay_producers(&mut self, from: i64, to: i64, index_from: Option<i64>) -> Result<Vec<(i64, AbortedTxn)>> {
        let hw = self.high_watermark;
        let mut replay = ProducerReplay::settling(std::mem::take(&mut self.producers), hw);
        let mut aborted: Vec<(i64, AbortedTxn)> = Vec::new();
        let r = self.replay_into(&mut replay, from, to, index_from, &mut aborted);
        self.producers = replay.into_state();
        self.producers.update_map_end_offset(to);
        r.map(|()| aborted)
    }

    fn replay_into(
        &self,
        replay: &mut ProducerReplay,
        from: i64,
        to: i64,
        index_from: Option<i64>,
        aborted: &mut Vec<(i64, AbortedTxn)>,
    ) -> Result<()> {
        if from >= to {
            return Ok(());
        }
        let mut batch = Vec::new();
        let floor = self.floor_segment(from).map_or(i64::MIN, |s| s.base_offset());
        for seg in self.segments().skip_while(|s| s.base_offset() < floor) {
            if seg.base_offset() >= to {
                break;
            }
            let start = match seg.translate_offset(from, 0)? {
                Some(p) => p.position,
                None => continue,
            };
            let mut scan = seg.scanner(start);
            while let Some(b) = scan.next_batch()? {
                let h = b.header;
                if h.base_offset >= to {
                    break;
                }
                if h.last_offset() < from || !h.has_producer_id() {
                    continue;
                }
                if h.is_control() {
                    scan.read_batch(&b, &mut batch)?;
                } else {
                    batch.clear();
                }
                if let Some(t) = replay.batch(&h, &batch) {
                    if index_from.is_some_and(|i| t.last_offset >= i) {
                        aborted.push((seg.base_offset(), t));
                    }
                }
            }
        }
        Ok(())
    }
}
