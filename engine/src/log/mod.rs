//! A partition log: one directory of segments named by base offset, with an in-memory floor map
//! from offset to segment, Kafka's leader and follower append paths, rolling, bounded fetches and
//! timestamp lookups, and reopening of a directory written by seglog or by Kafka.
//!
//! A `Log` is single-threaded (`&mut self` for writes); the shard layer gives each log one owner.

pub(crate) mod epoch;
mod load;
mod maintenance;
pub mod producer_state;
mod producers;
mod read;
pub mod txn_index;
mod validate;
mod write;

pub use crate::segment::{FetchBytes, ResourceConfig, SegmentResources, TimestampAndOffset};
pub use load::{LoadReport, Recovery, RecoveryProgress};
pub use maintenance::RetentionReport;
pub use producer_state::{AppendOrigin, MarkerType};
pub use producers::ProducerReplay;
pub use read::{FetchData, FetchIsolation, FileRange, ListOffset};
pub use txn_index::{check_txn_index, AbortedTransaction, AbortedTxn, TxnIndexRules, TXN_ENTRY_BYTES};

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::config::{Clock, LogConfig, SystemClock, TimestampType};
use crate::error::{Error, Result};
use crate::format::batch::{self, BatchHeader};
use crate::format::filename;
use crate::io::{InFlight, Storage};
use crate::segment::{ActiveSegment, SealedSegment, Segment, SegmentSettings};
use load::segment_settings;

/// How a log is opened.
#[derive(Clone, Debug)]
pub struct LogOptions {
    pub config: LogConfig,
    pub storage: Arc<dyn Storage>,
    pub clock: Arc<dyn Clock>,
    /// What the caller knows about the last shutdown (from `.kafka_cleanshutdown` and the
    /// recovery-point checkpoint). The default assumes nothing and revalidates every segment.
    pub recovery: Recovery,
    /// The log start offset from `log-start-offset-checkpoint`, if known.
    pub log_start_offset: Option<i64>,
    /// Bytes of the active segment's tail kept in memory after they are written, so that tail
    /// fetches need no I/O. Default 1 MiB.
    pub tail_cache_bytes: u64,
    /// When an append's bytes go to the file: submitted by the log itself without waiting
    /// (the default, [`Writes::Async`]), written before the append returns
    /// ([`Writes::Through`]), or taken by the caller ([`Writes::Caller`], the Engine's shard).
    /// docs/durability.md says what an append's return means in each.
    pub writes: Writes,
    /// Threads revalidating this log's segments after a crash (each segment's check and index
    /// rebuild is independent, unlike Kafka which recovers one segment at a time). Default 1.
    pub recovery_threads: usize,
    /// Called after each recovered segment.
    pub progress: Option<ProgressFn>,
    /// Zero fill ([`crate::segment::SegmentSettings::zero_fill_bytes`]): keep this many bytes past
    /// the active segment's data written with zeros. 0 (the default) for none.
    pub zero_fill_bytes: u32,
    /// How far past its data an O_DIRECT active segment's `.log` length is kept when neither
    /// `preallocate` nor zero fill's zeros put it there
    /// ([`crate::segment::SegmentSettings::length_lead_bytes`]; default
    /// [`crate::segment::DEFAULT_LENGTH_LEAD`], 0 for none). Sparse: nothing is reserved, and
    /// seal, close and recovery cut it back to the data.
    pub length_lead_bytes: u32,
    /// The lock of the log directory above this partition, when the caller holds it (the engine
    /// does). `None` (the default): the log takes a shared lock on that directory's `.lock` itself
    /// if it has one, so it cannot open a partition an engine or a Kafka broker owns, and locks
    /// its own directory: a second `Log` on it is refused ([`crate::io::lock`]).
    pub log_dir_lock: Option<Arc<crate::io::lock::LockGuard>>,
    /// The index arena, index memory budget and descriptor limit this log's segments share with
    /// the other logs given the same (an engine shard gives each of its logs its own). The
    /// default is the process-wide set ([`SegmentResources::process_default`]).
    pub resources: SegmentResources,
}

/// When an append's bytes go to the log's file ([`LogOptions::writes`]). Whatever the choice,
/// an append is durable (survives a power cut) only once [`Log::recovery_point`] passes it: at
/// a [`Log::flush`], when `flush.messages` / `flush.ms` call for an fsync, at a roll and at
/// [`Log::close`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Writes {
    /// An append returns once its batches are in the log's memory tail; the log submits the
    /// writes itself (through the ring, without waiting), several in flight, and collects their
    /// completions at the next append, [`Log::poll`] or [`Log::finish_writes`]. Reads see an
    /// append at once (from memory); [`Log::written_offset`] says what is in the file (survives
    /// the process being killed). For an embedder with its own event loop:
    /// [`Log::completion_fd`] becomes readable when a write may have completed.
    Async(AsyncWrites),
    /// An append returns once its bytes are in the file (one write, waited for: the page cache
    /// in buffered and sync modes, the device in direct mode), as Kafka writes each append.
    Through,
    /// The caller takes the writes ([`Log::take_writes`]) and submits them, with other logs'
    /// in one submission (the Engine's shard). Reads see an append once its write succeeded.
    Caller,
}

/// The limits of [`Writes::Async`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AsyncWrites {
    /// Data writes in flight at once (at least 1). Default 4.
    pub max_in_flight: usize,
    /// Appended bytes not yet in the file past which an append waits for the oldest write in
    /// flight (the memory the tail may hold beyond its cache). Default 8 MiB.
    pub max_unwritten_bytes: u64,
}

impl Default for AsyncWrites {
    fn default() -> Self {
        AsyncWrites { max_in_flight: 4, max_unwritten_bytes: 8 << 20 }
    }
}

/// A recovery progress callback.
#[derive(Clone)]
pub struct ProgressFn(pub Arc<dyn Fn(RecoveryProgress) + Send + Sync>);

impl std::fmt::Debug for ProgressFn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ProgressFn")
    }
}

impl Default for LogOptions {
    fn default() -> Self {
        LogOptions {
            config: LogConfig::default(),
            storage: crate::io::default_storage(),
            clock: Arc::new(SystemClock),
            recovery: Recovery::default(),
            log_start_offset: None,
            tail_cache_bytes: 1024 * 1024,
            writes: Writes::Async(AsyncWrites::default()),
            recovery_threads: 1,
            progress: None,
            zero_fill_bytes: 0,
            length_lead_bytes: crate::segment::DEFAULT_LENGTH_LEAD,
            log_dir_lock: None,
            resources: SegmentResources::process_default(),
        }
    }
}

impl LogOptions {
    pub fn with_config(config: LogConfig) -> Self {
        LogOptions { config, ..Default::default() }
    }
}

/// What an append did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AppendInfo {
    pub first_offset: i64,
    pub last_offset: i64,
    /// The largest timestamp appended (the broker time for LogAppendTime).
    pub max_timestamp: i64,
    /// The last offset of the first batch holding `max_timestamp`.
    pub shallow_offset_of_max_timestamp: i64,
    /// The broker time stamped on LogAppendTime batches, -1 for CreateTime.
    pub log_append_time_ms: i64,
    pub batches: u32,
    pub records: u64,
    pub bytes: u64,
    /// Base offset of the segment the batches went to, and their byte position in it.
    pub segment_base_offset: i64,
    pub position: u32,
    /// The log start offset when the append was taken (Kafka's `LogAppendInfo.logStartOffset`,
    /// which a Produce answer carries).
    pub log_start_offset: i64,
    /// Nothing was appended: a batch of the request is a retry of one of its producer's last
    /// five, already in the log; the offsets, `max_timestamp` and `log_append_time_ms` are the
    /// first copy's (its timestamp, as Kafka answers a duplicate), the counts 0,
    /// `segment_base_offset` -1 and `position` 0.
    pub duplicate: bool,
}

/// A transaction marker for [`Log::append_txn_marker`] (what Kafka's coordinator writes with
/// `WriteTxnMarkers`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TxnMarker {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub coordinator_epoch: i32,
    pub kind: MarkerType,
}

impl TxnMarker {
    /// The control batch of this marker as the coordinator sends it (base offset 0, CreateTime
    /// `timestamp`, transactional, no sequence): Kafka's `MemoryRecords.withEndTransactionMarker`.
    pub fn to_batch(&self, timestamp: i64) -> Vec<u8> {
        let kind: i16 = match self.kind {
            MarkerType::Abort => 0,
            MarkerType::Commit => 1,
        };
        let mut key = [0u8; 4];
        key[2..4].copy_from_slice(&kind.to_be_bytes());
        let mut value = [0u8; 6];
        value[2..6].copy_from_slice(&self.coordinator_epoch.to_be_bytes());
        let mut b = crate::format::builder::BatchBuilder::new()
            .producer(self.producer_id, self.producer_epoch, batch::NO_SEQUENCE)
            .transactional(true)
            .control(true);
        b.push(timestamp, Some(&key[..]), Some(&value[..]), &[]);
        b.build().expect("a one-record control batch always builds")
    }
}

/// A read-only description of one segment, for tools and tests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentInfo {
    pub base_offset: i64,
    pub size: u32,
    pub offset_index_entries: usize,
    pub time_index_entries: usize,
    pub max_timestamp: i64,
    pub active: bool,
}

/// What the log must know when a data write in flight ends.
#[derive(Clone, Copy, Debug)]
struct LogWrite {
    /// The recovery point a successful write advances to (it holds an fsync, or is all RWF_DSYNC
    /// writes).
    synced_up_to: Option<i64>,
    /// For a write that holds an fsync: the flush counters it satisfies (`unflushed_messages`,
    /// `first_unflushed_ms` when it started). The counters restart at its start, so appends
    /// made while it is in flight stay due for the next flush; a failed write gives its share
    /// back.
    counted: Option<(i64, Option<i64>)>,
}

/// An append of the active segment not yet known to be in the file.
#[derive(Clone, Copy, Debug)]
struct UnwrittenAppend {
    start: u32,
    end: u32,
    next_offset: i64,
}

/// A partition directory.
#[derive(Debug)]
pub struct Log {
    dir: PathBuf,
    config: LogConfig,
    storage: Arc<dyn Storage>,
    clock: Arc<dyn Clock>,
    sealed: BTreeMap<i64, SealedSegment>,
    active: Option<ActiveSegment>,
    log_start_offset: i64,
    log_end_offset: i64,
    high_watermark: i64,
    recovery_point: i64,
    unflushed_messages: i64,
    last_flush_ms: i64,
    /// The data writes in flight, oldest first (started by [`Log::writes_started`] or by the log
    /// itself under [`Writes::Async`]); claimed in this order.
    write: VecDeque<InFlight<LogWrite>>,
    /// Every append is in the file below this offset: the writes holding it succeeded (its
    /// byte position in the active segment is [`Log::written_position`]). A failed write rolls
    /// the log back to it; under [`Writes::Caller`] fetches see nothing past it.
    written: i64,
    /// The active segment's appends at or past `written`, oldest first: where each starts and
    /// ends in the segment and the log end after it. A completed write that reaches an append's
    /// end moves `written` past it.
    unwritten: VecDeque<UnwrittenAppend>,
    /// Under [`Writes::Async`], an fsync is due (`flush.messages` / `flush.ms`): it is
    /// submitted, with whatever is unwritten, once the writes in flight are done.
    sync_wanted: bool,
    /// Its outcome, when an operation that had to wait for it (a roll, a flush) got it first.
    write_settled: VecDeque<Result<()>>,
    /// Writes taken by [`Log::take_writes`] and not yet handed back.
    taken: bool,
    failed: Option<String>,
    rng: u64,
    tail_cache_bytes: u64,
    zero_fill_bytes: u32,
    length_lead_bytes: u32,
    writes: Writes,
    epochs: epoch::LeaderEpochCache,
    /// The idempotent and transactional producers' state (`producers.rs`).
    producers: producer_state::ProducerState,
    /// The offsets of the `.snapshot` files in the directory.
    producer_snapshots: std::collections::BTreeSet<i64>,
    /// The segments' `.txnindex` files (`txn_index.rs`), and the entries of the one read last.
    txn: txn_index::TxnIndexes,
    txn_cache: txn_index::TxnCache,
    pending_deletes: Vec<maintenance::PendingDelete>,
    /// Listed in its engine shard's set of logs with timed work (the shard's bookkeeping, so
    /// that an append checks it without hashing the partition's name).
    pub(crate) timed_listed: bool,
    /// When the oldest append not yet covered by an fsync was made.
    first_unflushed_ms: Option<i64>,
    /// What its segments' indexes and files are held under ([`LogOptions::resources`]).
    resources: SegmentResources,
    /// The locks that make this log the only owner of its directory: the partition directory's,
    /// and the log directory's (shared, or the engine's); released when the log is dropped.
    _locks: crate::io::lock::PartitionLocks,
}

impl Log {
    /// Opens (creating if needed) the partition directory `dir`.
    pub fn open(dir: impl AsRef<Path>, options: LogOptions) -> Result<Log> {
        Log::open_with_report(dir, options).map(|(log, _)| log)
    }

    /// [`Log::open`] that also says what loading did (segments recovered, bytes truncated).
    pub fn open_with_report(dir: impl AsRef<Path>, options: LogOptions) -> Result<(Log, LoadReport)> {
        load::open(dir.as_ref(), options)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
    pub fn config(&self) -> &LogConfig {
        &self.config
    }
    pub fn log_start_offset(&self) -> i64 {
        self.log_start_offset
    }
    /// The offset the next appended record will get (Kafka's LEO).
    pub fn log_end_offset(&self) -> i64 {
        self.log_end_offset
    }
    pub fn high_watermark(&self) -> i64 {
        self.high_watermark
    }
    /// Offsets below this are known to be on disk (fsynced).
    pub fn recovery_point(&self) -> i64 {
        self.recovery_point
    }
    /// Sets the high watermark (clamped to `[log_start_offset, log_end_offset]`); fetches bounded by
    /// it see nothing at or above it.
    pub fn set_high_watermark(&mut self, offset: i64) {
        self.high_watermark = offset.clamp(self.log_start_offset, self.log_end_offset);
        // Transactions whose marker is now below it are stable.
        self.producers.on_high_watermark(self.high_watermark);
    }

    pub fn active_segment(&self) -> &ActiveSegment {
        self.active.as_ref().expect("a log always has an active segment")
    }
    fn active_mut(&mut self) -> &mut ActiveSegment {
        self.active.as_mut().expect("a log always has an active segment")
    }

    /// All segments in offset order, the active one last.
    pub fn segments(&self) -> impl Iterator<Item = &Segment> {
        self.sealed.values().map(|s| &**s).chain(std::iter::once(&**self.active_segment()))
    }

    pub fn segment_infos(&self) -> Vec<SegmentInfo> {
        let active_base = self.active_segment().base_offset();
        self.segments()
            .map(|s| SegmentInfo {
                base_offset: s.base_offset(),
                size: s.size(),
                offset_index_entries: s.index_entries().0,
                time_index_entries: s.index_entries().1,
                max_timestamp: s.max_timestamp_so_far().timestamp,
                active: s.base_offset() == active_base,
            })
            .collect()
    }

    /// True when a segment starts at `base`.
    pub(crate) fn has_segment(&self, base: i64) -> bool {
        self.sealed.contains_key(&base) || self.active_segment().base_offset() == base
    }

    /// The segment holding `offset`: the one with the greatest base offset `<= offset`.
    pub fn floor_segment(&self, offset: i64) -> Option<&Segment> {
        let active = self.active_segment();
        if offset >= active.base_offset() {
            return Some(&**active);
        }
        self.sealed.range(..=offset).next_back().map(|(_, s)| &**s)
    }

    /// Segments from the one holding `offset` onwards.
    fn segments_from(&self, offset: i64) -> Vec<&Segment> {
        let start = self.floor_segment(offset).map(|s| s.base_offset()).unwrap_or(i64::MIN);
        self.segments().filter(|s| s.base_offset() >= start).collect()
    }

    /// Total bytes of all segments.
    pub fn size_in_bytes(&self) -> u64 {
        self.segments().map(|s| s.size() as u64).sum()
    }

    /// Why the log is failed (a write or fsync failed; it refuses appends until reopened), if it
    /// is.
    pub fn failure(&self) -> Option<&str> {
        self.failed.as_deref()
    }

    fn check_not_failed(&self) -> Result<()> {
        match &self.failed {
            Some(reason) => Err(Error::Failed { dir: self.dir.clone(), reason: reason.clone() }),
            None => Ok(()),
        }
    }

    /// Runs an I/O step that changes the log; on failure the log refuses further appends.
    fn guard<T>(&mut self, r: Result<T>) -> Result<T> {
        if let Err(e) = &r {
            if matches!(e, Error::Io { .. }) && self.failed.is_none() {
                self.failed = Some(e.to_string());
            }
        }
        r
    }

    fn settings(&self) -> SegmentSettings {
        segment_settings(&self.config, self.tail_cache_bytes, self.zero_fill_bytes, self.length_lead_bytes)
    }

    fn next_jitter(&mut self) -> i64 {
        // xorshift64*: jitter needs spread, not cryptographic quality.
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        let r = self.rng.wrapping_mul(0x2545_F491_4F6C_DD1D);
        self.config.random_segment_jitter_ms(r)
    }

    /// Leader append (Kafka's `appendAsLeader`) of a client's batches: validates every batch,
    /// checks its producer's state, assigns offsets from the log end by stamping baseOffset and
    /// partitionLeaderEpoch in place (both outside the CRC), stamps LogAppendTime when configured
    /// (which recomputes the CRC), rolls if needed, and appends. `records` holds one or more whole
    /// v2 batches as a producer sent them (base offset 0). On any refusal the log is unchanged.
    pub fn append_as_leader(&mut self, records: &mut [u8], leader_epoch: i32) -> Result<AppendInfo> {
        self.append_as_leader_from(records, leader_epoch, AppendOrigin::Client)
    }

    /// [`Log::append_as_leader`] from `origin`: [`AppendOrigin::Client`] for a producer's batches,
    /// [`AppendOrigin::Coordinator`] for the transaction coordinator's markers (control batches
    /// are then allowed, and checked by producer and coordinator epoch instead of sequence; see
    /// [`Log::append_txn_marker`]). A follower's batches go through [`Log::append_as_follower`].
    pub fn append_as_leader_from(
        &mut self,
        records: &mut [u8],
        leader_epoch: i32,
        origin: AppendOrigin,
    ) -> Result<AppendInfo> {
        assert_ne!(origin, AppendOrigin::Replication, "a replica's batches go through append_as_follower");
        self.check_not_failed()?;
        let now = self.clock.now_ms();
        let checked = validate::validate_leader(records, &self.config, now, origin == AppendOrigin::Client)?;
        if records.len() as u64 > self.config.segment_bytes as u64 {
            return Err(Error::RecordTooLarge {
                at: 0,
                size: records.len() as u64,
                limit: self.config.segment_bytes as u64,
                limit_name: "segment.bytes",
            });
        }
        let log_append = self.config.message_timestamp_type == TimestampType::LogAppendTime;
        let producers =
            match self.check_producers(records, &checked, origin, if log_append { Some(now) } else { None })? {
                Ok(appends) => appends,
                Err(duplicate) => return Ok(AppendInfo { log_start_offset: self.log_start_offset, ..duplicate }),
            };
        let mut next = self.log_end_offset;
        let mut headers = Vec::with_capacity(checked.len());
        for cb in &checked {
            let size = cb.header.size_in_bytes() as usize;
            let b = &mut records[cb.at..cb.at + size];
            batch::set_base_offset(b, next);
            batch::set_partition_leader_epoch(b, leader_epoch);
            if log_append {
                batch::set_max_timestamp(b, TimestampType::LogAppendTime, now);
            } else {
                batch::set_max_timestamp(b, TimestampType::CreateTime, cb.max_timestamp);
            }
            let h = BatchHeader::parse(b).map_err(|source| Error::InvalidBatch { at: cb.at, source })?;
            next = h.next_offset();
            headers.push(h);
        }
        let needed = self.check_append_fits(&headers)?;
        let r = self.epochs.assign(leader_epoch, self.log_end_offset);
        self.guard(r)?;
        let mut info = self.append_batches(records, &headers, needed, now)?;
        info.log_append_time_ms = if log_append { now } else { -1 };
        self.producers_appended(producers)?;
        Ok(info)
    }

    /// Appends a transaction marker (Kafka's `EndTransactionMarker` control batch: one record,
    /// key version 0 and the marker type, value version 0 and the coordinator epoch) as the
    /// transaction coordinator does at the end of a transaction: a leader append from
    /// [`AppendOrigin::Coordinator`], refused with [`Error::Producer`] when the producer epoch
    /// or the coordinator epoch is older than the partition has seen. An ABORT adds the
    /// transaction to the `.txnindex` of the segment it lands in; either marker ends the
    /// producer's transaction, which stays unstable until the high watermark passes the marker.
    pub fn append_txn_marker(&mut self, marker: &TxnMarker, leader_epoch: i32) -> Result<AppendInfo> {
        let mut records = marker.to_batch(self.clock.now_ms());
        self.append_as_leader_from(&mut records, leader_epoch, AppendOrigin::Coordinator)
    }

    /// Follower append (Kafka's `appendAsFollower`): batches keep their offsets, which must
    /// continue the log (gaps from compaction are allowed, going backwards is not). Refusals leave
    /// the log unchanged.
    pub fn append_as_follower(&mut self, records: &[u8]) -> Result<AppendInfo> {
        self.check_not_failed()?;
        let checked = validate::validate_follower(records, &self.config, self.log_end_offset)?;
        if records.len() as u64 > self.config.segment_bytes as u64 {
            return Err(Error::RecordTooLarge {
                at: 0,
                size: records.len() as u64,
                limit: self.config.segment_bytes as u64,
                limit_name: "segment.bytes",
            });
        }
        let headers: Vec<BatchHeader> = checked.iter().map(|c| c.header).collect();
        let needed = self.check_append_fits(&headers)?;
        for h in &headers {
            let r = self.epochs.assign(h.partition_leader_epoch, h.base_offset);
            self.guard(r)?;
        }
        let now = self.clock.now_ms();
        let mut info = self.append_batches(records, &headers, needed, now)?;
        info.log_append_time_ms = -1;
        self.follow_producers(records, &headers)?;
        Ok(info)
    }

    /// Appends checked batches (the leader epochs they start already assigned) at the clock's
    /// `now_ms`; on an error nothing of them stays, the epochs included.
    fn append_batches(
        &mut self,
        records: &[u8],
        headers: &[BatchHeader],
        needed: usize,
        now_ms: i64,
    ) -> Result<AppendInfo> {
        let r = self.append_checked(records, headers, needed, now_ms);
        if r.is_err() {
            let _ = self.epochs.truncate_from_end(self.log_end_offset);
        }
        r
    }

    fn append_checked(
        &mut self,
        records: &[u8],
        headers: &[BatchHeader],
        needed: usize,
        now_ms: i64,
    ) -> Result<AppendInfo> {
        let first = headers[0];
        let last = headers[headers.len() - 1];
        let mut max_ts = batch::NO_TIMESTAMP;
        let mut shallow = first.last_offset();
        let mut count: u64 = 0;
        for h in headers {
            if h.max_timestamp > max_ts {
                max_ts = h.max_timestamp;
                shallow = h.last_offset();
            }
            count += h.records_count.max(0) as u64;
        }
        self.maybe_roll(records.len() as u32, max_ts, last.last_offset(), first.base_offset, needed, now_ms)?;
        // The writes that completed are claimed before the tail changes (see
        // `claim_completed_writes`); one that failed fails this append, which has changed
        // nothing yet.
        self.claim_completed_writes();
        self.check_not_failed()?;
        let active = self.active.as_mut().expect("active segment");
        let position = active.size();
        let base = active.base_offset();
        let r = active.append(records, headers);
        self.guard(r)?;
        self.log_end_offset = last.next_offset();
        self.unwritten.push_back(UnwrittenAppend {
            start: position,
            end: position + records.len() as u32,
            next_offset: self.log_end_offset,
        });
        self.unflushed_messages += count as i64;
        if self.first_unflushed_ms.is_none() {
            self.first_unflushed_ms = Some(now_ms);
        }
        let info = AppendInfo {
            first_offset: first.base_offset,
            last_offset: last.last_offset(),
            max_timestamp: max_ts,
            shallow_offset_of_max_timestamp: shallow,
            log_append_time_ms: -1,
            batches: headers.len() as u32,
            records: count,
            bytes: records.len() as u64,
            segment_base_offset: base,
            position,
            log_start_offset: self.log_start_offset,
            duplicate: false,
        };
        match self.writes {
            Writes::Through => {
                // In the file before the append returns and, when flush.messages or flush.ms call
                // for it, fsynced: a failed write or fsync rolls this append back with the rest.
                if self.flush_due(now_ms, None) {
                    self.flush()?;
                } else {
                    self.write_now(false)?;
                }
                self.active_mut().zero_fill_now();
            }
            Writes::Async(limits) => {
                // The append is the caller's now; a write failing later fails the log (reported
                // by the next call) and rolls back what was not written.
                if self.flush_due(now_ms, None) {
                    self.sync_wanted = true;
                }
                self.pump(false);
                while self.unwritten_bytes() > limits.max_unwritten_bytes && !self.write.is_empty() {
                    let _ = self.claim_write(true);
                    self.claim_completed_writes();
                    self.pump(false);
                }
                // A write found failed on the way rolled the log back to the last append
                // wholly written before it: if that took this one too, it is not in the log
                // and must not be reported as made.
                if self.log_end_offset <= info.last_offset {
                    debug_assert!(self.failed.is_some(), "only a failed write takes an append back");
                    self.check_not_failed()?;
                }
            }
            Writes::Caller => {}
        }
        Ok(info)
    }

    /// The refusals that depend on offsets and segment limits rather than on the bytes alone,
    /// made before anything changes (a roll included), so that a refused append leaves the
    /// directory as it was: offsets that overflow, an append spanning more offsets than one
    /// segment's 32-bit relative offsets hold, and more index entries than even a new segment's
    /// indexes (`segment.index.bytes`) can take. Returns the index entries the append adds to the
    /// active segment as it stands.
    fn check_append_fits(&self, headers: &[BatchHeader]) -> Result<usize> {
        let mut at = 0usize;
        for h in headers {
            if h.base_offset.checked_add(h.last_offset_delta as i64).and_then(|l| l.checked_add(1)).is_none() {
                return Err(Error::InvalidRecord {
                    at,
                    detail: format!(
                        "offsets from {} with last offset delta {} overflow a 64-bit offset",
                        h.base_offset, h.last_offset_delta
                    ),
                });
            }
            at += h.size_in_bytes() as usize;
        }
        let (first, last) = (headers[0].base_offset, headers[headers.len() - 1].last_offset());
        if last - first > i32::MAX as i64 {
            return Err(Error::InvalidRecord {
                at: 0,
                detail: format!(
                    "offsets {first}..={last} span more than one segment's 32-bit relative offsets (Kafka's LogSegmentOffsetOverflowException)"
                ),
            });
        }
        let active = self.active_segment();
        let needed = active.index_entries_needed(headers);
        if !active.has_index_room(needed) && !active.fits_new_segment(headers) {
            return Err(Error::InvalidRecord {
                at: 0,
                detail: format!(
                    "{} batches need more index entries than segment.index.bytes = {} holds",
                    headers.len(),
                    self.config.segment_index_bytes
                ),
            });
        }
        Ok(needed)
    }

    /// True when `flush.messages` or `flush.ms` (or the stricter of them and an engine-wide
    /// interval `(ms, messages)`) call for an fsync now: the shard then links one fdatasync to
    /// this log's next write, covering every batch appended before it (group commit).
    pub fn flush_due(&self, now_ms: i64, interval: Option<(i64, i64)>) -> bool {
        if self.unflushed_messages == 0 {
            return false;
        }
        let (mut ms, mut msgs) = (self.config.flush_ms, self.config.flush_messages);
        if let Some((ims, imsgs)) = interval {
            ms = ms.min(ims);
            msgs = msgs.min(imsgs);
        }
        let since = self.first_unflushed_ms.unwrap_or(self.last_flush_ms);
        self.unflushed_messages >= msgs || (ms != i64::MAX && now_ms.saturating_sub(since) >= ms)
    }

    /// True while timed work may have something to do for this log: messages not yet flushed
    /// under a finite `flush.messages` or `flush.ms` (or an engine-wide `interval`, see
    /// [`Log::flush_due`]), or a deleted segment's files waiting for `file.delete.delay.ms`
    /// ([`Log::delete_expired_files`]). A log for which it is false stays so until it is
    /// appended to, truncated or has segments deleted.
    pub fn has_timed_work(&self, interval: Option<(i64, i64)>) -> bool {
        let flushes = interval.is_some() || self.config.flush_ms != i64::MAX || self.config.flush_messages != i64::MAX;
        (flushes && self.unflushed_messages > 0) || self.pending_deletions() > 0
    }

    /// Kafka's `maybeRoll`.
    fn maybe_roll(
        &mut self,
        messages_size: u32,
        max_ts: i64,
        max_offset: i64,
        first_offset: i64,
        index_entries: usize,
        now: i64,
    ) -> Result<()> {
        let (segment_bytes, segment_ms) = (self.config.segment_bytes, self.config.segment_ms);
        let r = self.active_mut().should_roll(
            segment_bytes,
            segment_ms,
            messages_size,
            max_ts,
            max_offset,
            now,
            index_entries,
        );
        if self.guard(r)? {
            self.roll(Some(first_offset))?;
        }
        Ok(())
    }

    /// Seals the active segment and starts a new one at `max(expected_next_offset, log end)`
    /// (Kafka's `roll`). An empty active segment at that offset is replaced (KAFKA-6388).
    pub fn roll(&mut self, expected_next_offset: Option<i64>) -> Result<()> {
        self.settle_writes();
        self.check_not_failed()?;
        let new_base = expected_next_offset.unwrap_or(0).max(self.log_end_offset);
        // The sealed segment's `.txnindex` is durable with it: a recovery starts past it.
        let base = self.active_segment().base_offset();
        let r = self.sync_txn_index(base);
        self.guard(r)?;
        let now = self.clock.now_ms();
        let jitter = self.next_jitter();
        let settings = self.settings();
        let storage = self.storage.clone();
        let active = self.active.take().expect("active segment");
        if active.base_offset() == new_base {
            if active.size() == 0 {
                // Replace the empty active segment in place; on an error it stays.
                let mut active = active;
                let r = active.write_out().and_then(|()| {
                    ActiveSegment::create(storage.clone(), &self.dir, new_base, settings, &self.resources, now, jitter)
                });
                match r {
                    Ok(seg) => {
                        drop(active);
                        self.active = Some(seg);
                        return Ok(());
                    }
                    Err(e) => {
                        self.active = Some(active);
                        return self.guard(Err(e));
                    }
                }
            }
            self.active = Some(active);
            return Err(Error::InvalidRecord {
                at: 0,
                detail: format!("cannot roll to {new_base}: the active segment already starts there"),
            });
        }
        // The old segment sealed (durable) first, then the new one created: no segment file
        // exists before every segment below it is durable. Whichever step fails, the old segment
        // stays the active one (a log always has one; sealing it changed nothing in memory that
        // reads depend on) and the log is failed.
        let mut active = active;
        let created = active.seal().and_then(|()| {
            [
                filename::log_file_name(new_base),
                filename::index_file_name(new_base),
                filename::time_index_file_name(new_base),
            ]
            .iter()
            .map(|n| self.dir.join(n))
            .filter(|p| storage.exists(p))
            .try_for_each(|p| storage.remove_file(&p))
            .and_then(|()| {
                ActiveSegment::create(storage.clone(), &self.dir, new_base, settings, &self.resources, now, jitter)
            })
        });
        let seg = match created {
            Ok(seg) => seg,
            Err(e) => {
                self.active = Some(active);
                self.failed.get_or_insert_with(|| e.to_string());
                self.roll_back_unwritten();
                return Err(e);
            }
        };
        let old_base = active.base_offset();
        self.sealed.insert(old_base, active.into_sealed());
        self.active = Some(seg);
        self.all_written(new_base);
        let r = storage.sync_dir(&self.dir);
        self.guard(r)?;
        // Everything below the new segment was fsynced by seal().
        self.recovery_point = self.recovery_point.max(new_base);
        // Kafka snapshots the producers at each roll, named by the new segment's base (which a
        // follower's jump may put past the log end): a recovery of that segment starts there.
        self.producers.update_map_end_offset(new_base);
        let r = self.take_producer_snapshot();
        self.guard(r)?;
        Ok(())
    }

    /// Writes pending index entries and fsyncs the active segment; advances the recovery point to
    /// the log end. (Not its `.txnindex`: the segment holding the recovery point is always
    /// recovered after a crash, and its `.txnindex` rebuilt.)
    pub fn flush(&mut self) -> Result<()> {
        self.settle_writes();
        self.check_not_failed()?;
        let r = self.active_mut().flush();
        if let Err(e) = self.guard(r) {
            self.roll_back_unwritten();
            return Err(e);
        }
        self.all_written(self.log_end_offset);
        self.sync_wanted = false;
        self.recovery_point = self.log_end_offset;
        self.unflushed_messages = 0;
        self.first_unflushed_ms = None;
        self.last_flush_ms = self.clock.now_ms();
        Ok(())
    }

    /// Clean close: final time-index entry, indexes trimmed, everything fsynced.
    pub fn close(mut self) -> Result<()> {
        self.settle_writes();
        self.check_not_failed()?;
        if self.epochs.behind() {
            // Deferred writes of the epoch checkpoint end here (the caller has none in flight).
            self.epochs.flush()?;
        }
        self.sync_txn_index(self.active_segment().base_offset())?;
        let active = self.active.take().expect("active segment");
        active.close()?;
        // The producers at the log end, once the data is durable (a snapshot above what a power
        // cut leaves is deleted at the next open), so that the next open reads no batch for them.
        self.take_producer_snapshot()?;
        self.storage.sync_dir(&self.dir)
    }
}
