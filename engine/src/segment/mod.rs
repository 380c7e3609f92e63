//! One segment: a `.log` file of v2 batches with its `.index` and `.timeindex`, named by its base
//! offset.
//!
//! [`ActiveSegment`] takes appends and applies Kafka's index rule; `ActiveSegment::seal` writes
//! the final time-index entry, trims both indexes and the log, and returns a `SealedSegment`,
//! which can only be read. Both dereference to [`Segment`], which holds the read paths: offset ->
//! position (phase 1: index floor, phase 2: header walk), reads bounded by a position, timestamp
//! -> offset, and recovery (revalidate every batch, rebuild both indexes, cut a torn tail).
//!
//! Memory and descriptors: an active segment's indexes live in growth slots of the shard's index
//! arena and its `.log` stays open. A sealed segment's indexes are packed into exact-size slots and
//! held by the shard's [`IndexCache`] under a memory budget: they load on first use and may be
//! evicted (see the `resident` module). Its files (and every index file) are `LazyFile`s, opened on use
//! and closed when idle under the shard's descriptor limit.
//!
//! A segment never decides policy (when to roll, what to fsync): the partition log does.

mod active;
mod fetch;
mod open;
mod recovery;
mod resident;
mod scan;
mod tail;
mod zero_fill;

pub use fetch::FetchBytes;
pub(crate) use fetch::{IndexDensity, ReadEnd};

pub(crate) use resident::IndexPair;
pub use resident::{IndexCache, IndexCacheStats, IndexRef, ResourceConfig, ResourceReport, SegmentResources};
pub use scan::{recovery_read_bytes, set_recovery_read_bytes, BatchScanner, ScannedBatch};
pub(crate) use scan::{SequentialBatchReader, SCAN_WINDOW_BYTES};
pub(crate) use tail::{TailFile, WriteSpan};
pub(crate) use zero_fill::RefillPace;
pub use zero_fill::ZeroFillStats;

use zero_fill::ZeroFillState;

use resident::SealedIndexes;

use std::ops::{Deref, DerefMut};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::format::batch::{self, NO_PARTITION_LEADER_EPOCH};
use crate::format::filename;
use crate::format::index_entry::{IndexInterval, TimeEntry, OFFSET_ENTRY_SIZE, TIME_ENTRY_SIZE};
use crate::format::record;
use crate::index::{OffsetIndex, TimeIndex, TimestampOffset};
use crate::io::{AsyncOutcome, HeldDescriptor, InFlight, IoFile, IoOp, IoOpKind, LazyFile, OpenMode, Reopen, Storage};

/// Where the first batch with `last_offset >= target` sits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogOffsetPosition {
    /// The last offset of the batch found.
    pub offset: i64,
    pub position: u32,
    pub size: u32,
}

/// A record found by a timestamp search.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimestampAndOffset {
    pub timestamp: i64,
    pub offset: i64,
    /// The partition leader epoch of the batch holding it, if it has one.
    pub leader_epoch: Option<i32>,
}

/// Bytes read from a segment: whole batches starting at `position`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SegmentRead {
    pub position: u32,
    pub bytes: FetchBytes,
}

/// What a phase-2 walk cost: bytes between the index entry and the hit, batches stepped over.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WalkCost {
    pub start_position: u32,
    pub bytes_scanned: u32,
    pub hops: u32,
}

/// What recovering one segment found.
#[derive(Debug, Default)]
pub struct RecoveryResult {
    pub valid_bytes: u32,
    pub truncated_bytes: u64,
    /// The error that ended the valid prefix, if the file had bytes after it.
    pub first_error: Option<Error>,
    pub batches: u64,
    /// `(epoch, start offset)` at each leader epoch change seen.
    pub epoch_starts: Vec<(i32, i64)>,
}

/// The state and read paths shared by active and sealed segments.
#[derive(Debug)]
pub struct Segment {
    base_offset: i64,
    dir: PathBuf,
    log: Arc<dyn IoFile>,
    size: u32,
    /// The indexes while the segment holds them itself (active, being recovered, opened by
    /// `open_existing`); empty placeholders while `sealed` holds them.
    offset_index: OffsetIndex,
    time_index: TimeIndex,
    /// Set for a sealed (or lazily opened) segment: its indexes, loaded on demand under the
    /// shard's memory budget.
    sealed: Option<Arc<SealedIndexes>>,
    /// `log` as a lazily opened file, when it is one (sealed segments).
    lazy_log: Option<Arc<LazyFile>>,
    /// The storage to reopen files with (absent for segments opened by `open_existing`).
    storage: Option<Arc<dyn Storage>>,
    res: SegmentResources,
    segment_index_bytes: u32,
    max_timestamp_so_far: TimestampOffset,
    index_interval_bytes: u32,
    /// Whether every batch but the first has an offset index entry (each batch larger than
    /// `index.interval.bytes`, e.g. Kafka's default 4 KiB with batches of 16 KiB): then the batch
    /// after an entry's is the next entry's, and a fetch from inside it reads that batch and
    /// nothing before it (`fetch.rs`). Known where this process built the index, learned from
    /// fetches otherwise ([`IndexDensity`]).
    dense_index: IndexDensity,
}

/// Both indexes of a segment, borrowed for one operation.
enum IndexView<'a> {
    Own(&'a OffsetIndex, &'a TimeIndex),
    Shared(Arc<IndexPair>),
}

impl IndexView<'_> {
    #[inline]
    fn offset(&self) -> &OffsetIndex {
        match self {
            IndexView::Own(o, _) => o,
            IndexView::Shared(p) => &p.offset,
        }
    }
    #[inline]
    fn time(&self) -> &TimeIndex {
        match self {
            IndexView::Own(_, t) => t,
            IndexView::Shared(p) => &p.time,
        }
    }
}

fn pick_offset(p: &IndexPair) -> &OffsetIndex {
    &p.offset
}
fn pick_time(p: &IndexPair) -> &TimeIndex {
    &p.time
}

/// Index files longer than this are refused as corrupt: `segment.index.bytes`, and in any case
/// up to `i32::MAX / 2`.
fn index_file_limit(segment_index_bytes: u32) -> u64 {
    (segment_index_bytes as u64).max(i32::MAX as u64 / 2)
}

impl Segment {
    pub fn base_offset(&self) -> i64 {
        self.base_offset
    }
    /// Bytes of valid data in the `.log` file.
    pub fn size(&self) -> u32 {
        self.size
    }
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }
    pub(crate) fn log_path(&self) -> PathBuf {
        self.dir.join(filename::log_file_name(self.base_offset))
    }
    pub(crate) fn index_path(&self) -> PathBuf {
        self.dir.join(filename::index_file_name(self.base_offset))
    }
    pub(crate) fn time_index_path(&self) -> PathBuf {
        self.dir.join(filename::time_index_file_name(self.base_offset))
    }
    /// The `.log` file. For a sealed segment it is opened on use and may be closed when idle, so
    /// it has no stable descriptor: use [`Segment::pinned_log_file`] for sendfile.
    pub fn log_file(&self) -> &Arc<dyn IoFile> {
        &self.log
    }
    /// The `.log` file, open, with a descriptor that stays valid while the handle is held.
    pub fn pinned_log_file(&self) -> Result<Arc<dyn IoFile>> {
        Ok(self.log.descriptor_handle()?.unwrap_or_else(|| self.log.clone()))
    }

    fn indexes(&self) -> Result<IndexView<'_>> {
        match &self.sealed {
            None => Ok(IndexView::Own(&self.offset_index, &self.time_index)),
            Some(s) => Ok(IndexView::Shared(s.get()?)),
        }
    }

    /// The offset index, loaded from its file first if it is not resident.
    ///
    /// # Panics
    /// If the index has to be loaded and cannot be (an I/O error, or no descriptor under the
    /// limit). Engine paths use [`Segment::try_offset_index`].
    pub fn offset_index(&self) -> IndexRef<'_, OffsetIndex> {
        self.try_offset_index()
            .unwrap_or_else(|e| panic!("loading the offset index of segment {}: {e}", self.base_offset))
    }
    /// The time index, loaded first if it is not resident (panics like [`Segment::offset_index`]).
    pub fn time_index(&self) -> IndexRef<'_, TimeIndex> {
        self.try_time_index().unwrap_or_else(|e| panic!("loading the time index of segment {}: {e}", self.base_offset))
    }
    /// The offset index, loaded from its file first if it is not resident.
    pub fn try_offset_index(&self) -> Result<IndexRef<'_, OffsetIndex>> {
        match &self.sealed {
            None => Ok(IndexRef::borrowed(&self.offset_index)),
            Some(s) => Ok(IndexRef::shared(s.get()?, pick_offset)),
        }
    }
    pub fn try_time_index(&self) -> Result<IndexRef<'_, TimeIndex>> {
        match &self.sealed {
            None => Ok(IndexRef::borrowed(&self.time_index)),
            Some(s) => Ok(IndexRef::shared(s.get()?, pick_time)),
        }
    }
    /// Entries of the offset and time indexes, without loading them.
    pub fn index_entries(&self) -> (usize, usize) {
        match &self.sealed {
            None => (self.offset_index.entries(), self.time_index.entries()),
            Some(s) => s.entries(),
        }
    }
    /// Whether the indexes are in memory now (always, for a segment that holds its own).
    pub fn indexes_resident(&self) -> bool {
        self.sealed.as_ref().is_none_or(|s| s.is_resident())
    }

    fn placeholder_indexes(base_offset: i64) -> (OffsetIndex, TimeIndex) {
        (
            OffsetIndex::from_bytes(base_offset, Vec::new(), 0, None),
            TimeIndex::from_bytes(base_offset, Vec::new(), 0, None),
        )
    }

    /// Hands the indexes to the index cache: packed into exact-size arena slots, warm sections
    /// pre-faulted, counted against the budget.
    fn seal_indexes(&mut self) {
        if self.sealed.is_some() {
            return;
        }
        let (po, pt) = Segment::placeholder_indexes(self.base_offset);
        let offset = std::mem::replace(&mut self.offset_index, po);
        let time = std::mem::replace(&mut self.time_index, pt);
        let limit = index_file_limit(self.segment_index_bytes);
        self.sealed = Some(SealedIndexes::resident(&self.res, offset, time, self.segment_index_bytes, limit));
    }

    /// Takes the indexes back from the index cache: loaded (`load`), or empty over their files
    /// (for a rebuild). Returns whether they were there.
    fn own_indexes(&mut self, load: bool) -> Result<bool> {
        let Some(s) = self.sealed.take() else { return Ok(false) };
        if load {
            match s.take() {
                Ok(pair) => {
                    self.offset_index = pair.offset;
                    self.time_index = pair.time;
                }
                Err(e) => {
                    self.sealed = Some(s);
                    return Err(e);
                }
            }
        } else {
            let (fi, ft) = s.files();
            let (mut o, mut t) = Segment::placeholder_indexes(self.base_offset);
            o.resize(self.segment_index_bytes)?;
            t.resize(self.segment_index_bytes)?;
            o.set_file(Some(fi.clone()));
            t.set_file(Some(ft.clone()));
            self.offset_index = o;
            self.time_index = t;
        }
        Ok(true)
    }
    /// The largest batch max-timestamp seen and the last offset of the (first) batch holding it;
    /// `(-1, base)` when no batch has a timestamp.
    pub fn max_timestamp_so_far(&self) -> TimestampOffset {
        self.max_timestamp_so_far
    }
    /// Kafka's `largestTimestamp`: the max timestamp if any, else the file's modification time.
    pub(crate) fn largest_timestamp(&self) -> Result<i64> {
        if self.max_timestamp_so_far.timestamp >= 0 {
            Ok(self.max_timestamp_so_far.timestamp)
        } else {
            self.log.modified_ms()
        }
    }

    /// A header walk over `[start, size)`.
    pub fn scanner(&self, start: u32) -> BatchScanner {
        BatchScanner::new(self.log.clone(), start, self.size)
    }

    /// Kafka's `translateOffset`: the first batch whose last offset is `>= offset`, searching from
    /// the index floor (or `starting_position` if larger). `None` when past the end.
    pub fn translate_offset(&self, offset: i64, starting_position: u32) -> Result<Option<LogOffsetPosition>> {
        Ok(self.translate_offset_with_cost(offset, starting_position)?.0)
    }

    /// [`Segment::translate_offset`] that also reports the phase-2 walk it did.
    pub fn translate_offset_with_cost(
        &self,
        offset: i64,
        starting_position: u32,
    ) -> Result<(Option<LogOffsetPosition>, WalkCost)> {
        let start = self.indexes()?.offset().lookup(offset).position.max(starting_position);
        let mut scan = self.scanner(start);
        while let Some(b) = scan.next_batch()? {
            if b.last_offset() >= offset {
                let cost =
                    WalkCost { start_position: start, bytes_scanned: b.position - start, hops: (scan.hops - 1) as u32 };
                return Ok((
                    Some(LogOffsetPosition { offset: b.last_offset(), position: b.position, size: b.size() }),
                    cost,
                ));
            }
        }
        let cost = WalkCost {
            start_position: start,
            bytes_scanned: scan.position().saturating_sub(start),
            hops: scan.hops as u32,
        };
        Ok((None, cost))
    }

    /// Kafka's `LogSegment.read`, returning whole batches only: from the first batch holding an
    /// offset `>= start_offset`, at most `max_size` bytes and nothing at or past `max_position`.
    /// With `min_one`, the first batch is returned even if larger than `max_size`. `None` when
    /// `start_offset` is past the segment's last offset.
    ///
    /// Usually one aligned read covers the header walk and the data, the whole first batch
    /// included, and the bytes returned are a view of it (see `fetch.rs`); otherwise the walk
    /// (`translate_offset`), then one aligned read of the data.
    pub fn read(
        &self,
        start_offset: i64,
        max_size: u32,
        max_position: u32,
        min_one: bool,
    ) -> Result<Option<SegmentRead>> {
        self.read_to(start_offset, max_size, ReadEnd::Position(max_position), min_one)
    }

    /// [`Segment::read`] stopping at `end`: a position, or the batch holding an offset (found in
    /// the same read where the one-read path serves the fetch).
    pub(crate) fn read_to(
        &self,
        start_offset: i64,
        max_size: u32,
        end: ReadEnd,
        min_one: bool,
    ) -> Result<Option<SegmentRead>> {
        if let Some(r) = self.read_in_one_window(start_offset, max_size, end, min_one)? {
            return Ok(Some(r));
        }
        let Some(start) = self.translate_offset(start_offset, 0)? else {
            return Ok(None);
        };
        let max_position = self.position_of(end)?;
        let adjusted = if min_one { max_size.max(start.size) } else { max_size };
        let limit = (max_position.saturating_sub(start.position)).min(adjusted);
        if limit == 0 {
            return Ok(Some(SegmentRead { position: start.position, bytes: FetchBytes::default() }));
        }
        Ok(Some(SegmentRead { position: start.position, bytes: self.read_found(start.position, limit)? }))
    }

    /// The byte position `end` stands for: the start of the batch holding its offset (the first
    /// batch whose last offset is `>=` it, by a header walk), or the segment's size past its last
    /// batch.
    pub(crate) fn position_of(&self, end: ReadEnd) -> Result<u32> {
        match end {
            ReadEnd::Position(p) => Ok(p),
            ReadEnd::BatchHolding(offset) => {
                Ok(self.translate_offset(offset, 0)?.map(|p| p.position).unwrap_or(self.size))
            }
        }
    }

    /// Like [`Segment::read`], but only finds the byte range of the whole batches it would
    /// return, walking batch headers instead of reading payloads: `(position, length)`. For
    /// handing a file range to `sendfile`/`splice` without copying through user space.
    pub(crate) fn read_range(
        &self,
        start_offset: i64,
        max_size: u32,
        max_position: u32,
        min_one: bool,
    ) -> Result<Option<(u32, u32)>> {
        let Some(start) = self.translate_offset(start_offset, 0)? else {
            return Ok(None);
        };
        let adjusted = if min_one { max_size.max(start.size) } else { max_size };
        let limit = start.position as u64 + max_position.saturating_sub(start.position).min(adjusted) as u64;
        let mut scan = BatchScanner::new(self.log.clone(), start.position, self.size.min(limit as u32));
        let mut end = start.position;
        while let Some(b) = scan.next_batch()? {
            if b.end() as u64 > limit {
                break;
            }
            end = b.end();
        }
        Ok(Some((start.position, end - start.position)))
    }

    /// Kafka's `findOffsetByTimestamp`: the first record with timestamp `>= timestamp_ms` and
    /// offset `>= starting_offset`, searching from the time index's floor entry.
    pub fn find_offset_by_timestamp(
        &self,
        timestamp_ms: i64,
        starting_offset: i64,
    ) -> Result<Option<TimestampAndOffset>> {
        let position = {
            let idx = self.indexes()?;
            let entry = idx.time().lookup(timestamp_ms);
            idx.offset().lookup(entry.offset.max(starting_offset)).position
        };
        let mut scan = self.scanner(position);
        let mut buf = Vec::new();
        let mut scratch = Vec::new();
        while let Some(b) = scan.next_batch()? {
            if b.header.max_timestamp < timestamp_ms {
                continue;
            }
            scan.read_batch(&b, &mut buf)?;
            if let Some(hit) = self.first_record_at_or_after(&b, &buf, &mut scratch, timestamp_ms, starting_offset)? {
                return Ok(Some(hit));
            }
        }
        Ok(None)
    }

    fn first_record_at_or_after(
        &self,
        b: &ScannedBatch,
        bytes: &[u8],
        scratch: &mut Vec<u8>,
        timestamp_ms: i64,
        starting_offset: i64,
    ) -> Result<Option<TimestampAndOffset>> {
        let h = &b.header;
        let corrupt = |source| Error::Corrupt { path: self.log.path().to_path_buf(), pos: b.position as u64, source };
        let iter = record::batch_records(bytes, scratch).map_err(corrupt)?;
        for r in iter {
            let r = r.map_err(corrupt)?;
            let ts = r.timestamp(h.base_timestamp, h.max_timestamp, h.timestamp_type());
            let off = r.offset(h.base_offset);
            if ts >= timestamp_ms && off >= starting_offset {
                let leader_epoch =
                    (h.partition_leader_epoch != NO_PARTITION_LEADER_EPOCH).then_some(h.partition_leader_epoch);
                return Ok(Some(TimestampAndOffset { timestamp: ts, offset: off, leader_epoch }));
            }
        }
        Ok(None)
    }

    /// For `MAX_TIMESTAMP` lookups: the offset of the first record holding the segment's max
    /// timestamp (Kafka: the batch found from the index, then `offsetOfMaxTimestamp`).
    pub fn offset_of_max_timestamp(&self) -> Result<Option<TimestampAndOffset>> {
        // Without timestamps (-1 everywhere) Kafka still answers: the first record of the first
        // batch whose max timestamp is -1.
        let max = self.max_timestamp_so_far;
        let position = self.indexes()?.offset().lookup(max.offset).position;
        let mut scan = self.scanner(position);
        let mut buf = Vec::new();
        let mut scratch = Vec::new();
        while let Some(b) = scan.next_batch()? {
            if b.header.max_timestamp != max.timestamp {
                continue;
            }
            scan.read_batch(&b, &mut buf)?;
            return self
                .first_record_at_or_after(&b, &buf, &mut scratch, max.timestamp, i64::MIN)
                .map(|hit| hit.filter(|h| h.timestamp == max.timestamp));
        }
        Ok(None)
    }

    /// The offset after the last batch (Kafka's `readNextOffset`), walking from the last index
    /// entry.
    pub(crate) fn read_next_offset(&self) -> Result<i64> {
        let last = self.indexes()?.offset().last_entry();
        let mut scan = self.scanner(last.position.min(self.size));
        let mut next = self.base_offset;
        while let Some(b) = scan.next_batch()? {
            next = b.header.next_offset();
        }
        Ok(next)
    }

    /// The `(position, header)` of every batch, in order.
    pub fn batches(&self) -> Result<Vec<ScannedBatch>> {
        let mut scan = self.scanner(0);
        let mut out = Vec::new();
        while let Some(b) = scan.next_batch()? {
            out.push(b);
        }
        Ok(out)
    }
}

/// Settings a segment needs from the log's configuration.
#[derive(Clone, Copy, Debug)]
pub struct SegmentSettings {
    pub index_interval_bytes: u32,
    pub segment_index_bytes: u32,
    /// Reserve this many bytes for the log file on creation (Kafka's `preallocate`), 0 for none.
    pub preallocate_bytes: u32,
    /// Bytes of the log's tail kept in memory after they are written (the tail cache).
    pub tail_cache_bytes: u64,
    /// Zero fill: keep about this many bytes past the active segment's data written with zeros
    /// (the lead ramps up from 256 KiB and is refilled once less than half of it is left), so
    /// that appends overwrite initialized blocks
    /// inside the file instead of extending it or converting unwritten extents. 0 for none;
    /// O_DIRECT files only (`ActiveSegment::take_zero_fill`).
    pub zero_fill_bytes: u32,
    /// How far past its data an O_DIRECT `.log`'s length is kept without `preallocate` or zeros
    /// ahead: moved once the data comes within half of it, at most to `segment.bytes`; 0 for
    /// never (`ActiveSegment::keep_length_ahead`, [`DEFAULT_LENGTH_LEAD`]).
    pub length_lead_bytes: u32,
    /// `segment.bytes`: zero fill and the length kept ahead stop there.
    pub segment_bytes: u32,
}

/// The length a standalone log keeps its active O_DIRECT `.log` ahead of its data
/// ([`SegmentSettings::length_lead_bytes`]); an engine shard shares a budget instead, down to
/// 1 MiB per partition. 16 MiB, not the 1 MiB it was: ext4 sizes the blocks it sets aside for a
/// file's next allocations by the file's length (8 MiB once the length is past 8 MiB, less for a
/// shorter file), so with the length 1 MiB ahead a new segment's first megabytes were allocated
/// in pieces of 1 to 4 MiB, each an extent of its own where other partitions wrote between them.
/// Past four extents ext4's extent tree needs a block of its own, and every durable write into
/// new blocks then writes that block as well as the inode: at 8 partitions x 1 append in flight
/// 27,676 synchronous metadata writes against 18,393 with the length 16 MiB ahead, for the same
/// 17,830 data writes (docs/benchmarks.md, "The length ahead sized for ext4's allocator").
pub const DEFAULT_LENGTH_LEAD: u32 = 16 << 20;

/// The segment that takes appends.
#[derive(Debug)]
pub struct ActiveSegment {
    /// The `.log`'s descriptor, counted against the shard's `max_open_files`.
    _held: HeldDescriptor,
    seg: Segment,
    /// The `.log` file itself (O_DIRECT in direct mode); `seg.log` is the tail wrapped around it.
    file: Arc<dyn IoFile>,
    tail: Arc<TailFile>,
    storage: Arc<dyn Storage>,
    /// Kafka's `bytesSinceLastIndexEntry`: the index rule's byte counter.
    index_rule: IndexInterval,
    rolling_based_timestamp: Option<i64>,
    created_ms: i64,
    roll_jitter_ms: i64,
    settings: SegmentSettings,
    /// Zero fill's state ([`ActiveSegment::take_zero_fill`]).
    zero: ZeroFillState,
    /// The length [`ActiveSegment::take_writes`] last gave the `.log` ahead of its data (0:
    /// none yet, or cut since), or `u64::MAX` once that failed (it is not tried again).
    length_ahead: u64,
}

/// A segment that can no longer be written.
#[derive(Debug)]
pub(crate) struct SealedSegment {
    seg: Segment,
}

impl Deref for ActiveSegment {
    type Target = Segment;
    fn deref(&self) -> &Segment {
        &self.seg
    }
}
impl DerefMut for ActiveSegment {
    fn deref_mut(&mut self) -> &mut Segment {
        &mut self.seg
    }
}
impl Deref for SealedSegment {
    type Target = Segment;
    fn deref(&self) -> &Segment {
        &self.seg
    }
}

/// Kafka's index rule replayed on a copy of the byte counter `rule`: how many entries appending
/// `batches` adds.
fn entries_needed(mut rule: IndexInterval, batches: &[batch::BatchHeader]) -> usize {
    batches.iter().filter(|b| rule.next_batch(b.size_in_bytes() as u64)).count()
}

impl SealedSegment {
    pub(crate) fn into_segment(self) -> Segment {
        self.seg
    }
}
