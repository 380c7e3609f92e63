//! One segment: a `.log` file of v2 batches with its `.index` and `.timeindex`, named by its base
//! offset.
//!
//! [`ActiveSegment`] takes appends and applies Kafka's index rule; [`ActiveSegment::seal`] writes
//! the final time-index entry, trims both indexes and the log, and returns a [`SealedSegment`],
//! which can only be read. Both dereference to [`Segment`], which holds the read paths: offset ->
//! position (phase 1: index floor, phase 2: header walk), reads bounded by a position, timestamp
//! -> offset, and recovery (revalidate every batch, rebuild both indexes, cut a torn tail).
//!
//! Memory and descriptors: an active segment's indexes live in growth slots of the shard's index
//! arena and its `.log` stays open. A sealed segment's indexes are packed into exact-size slots and
//! held by the shard's [`IndexCache`] under a memory budget: they load on first use and may be
//! evicted (see the `resident` module). Its files (and every index file) are [`LazyFile`]s, opened on use
//! and closed when idle under the shard's descriptor limit.
//!
//! A segment never decides policy (when to roll, what to fsync): the partition log does.

mod fetch;
mod resident;
mod scan;
mod tail;

pub use fetch::FetchBytes;

pub use resident::{
    EnterGuard, IndexCache, IndexCacheStats, IndexPair, IndexRef, ResourceConfig, ResourceReport, SegmentResources,
};
pub use scan::{
    recovery_read_bytes, BatchScanner, ScannedBatch, SequentialBatchReader, RECOVERY_READ_BYTES,
    RECOVERY_READ_BYTES_ENV, SCAN_WINDOW_BYTES,
};
pub use tail::{TailFile, TailStats};

use resident::SealedIndexes;

use std::ops::{Deref, DerefMut};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::format::batch::{self, NO_PARTITION_LEADER_EPOCH};
use crate::format::filename;
use crate::format::index_entry::{TimeEntry, OFFSET_ENTRY_SIZE, TIME_ENTRY_SIZE};
use crate::format::record;
use crate::index::{OffsetIndex, TimeIndex, TimestampOffset};
use crate::io::{IoCompletion, IoFile, IoOp, IoOpKind, LazyFile, OpenMode, Reopen, Storage};

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
    pub fn dir(&self) -> &Path {
        &self.dir
    }
    pub fn log_path(&self) -> PathBuf {
        self.dir.join(filename::log_file_name(self.base_offset))
    }
    pub fn index_path(&self) -> PathBuf {
        self.dir.join(filename::index_file_name(self.base_offset))
    }
    pub fn time_index_path(&self) -> PathBuf {
        self.dir.join(filename::time_index_file_name(self.base_offset))
    }
    /// The `.log` file. For a sealed segment it is opened on use and may be closed when idle, so
    /// it has no stable descriptor: use [`Segment::pinned_log_file`] for sendfile.
    pub fn log_file(&self) -> &Arc<dyn IoFile> {
        &self.log
    }
    /// The `.log` file, open, with a descriptor that stays valid while the handle is held.
    pub fn pinned_log_file(&self) -> Result<Arc<dyn IoFile>> {
        match &self.lazy_log {
            Some(lf) => lf.pin(),
            None => Ok(self.log.clone()),
        }
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
    /// Drops a sealed segment's resident indexes now (they load again on next use); false if
    /// the segment holds its own or they were not resident.
    pub fn evict_indexes(&self) -> bool {
        self.sealed.as_ref().is_some_and(|s| s.evict())
    }
    /// The arena, index budget and descriptor limit this segment uses.
    pub fn resources(&self) -> &SegmentResources {
        &self.res
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
    pub fn largest_timestamp(&self) -> Result<i64> {
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
    /// Usually one aligned read from the offset index's floor entry covers the header walk and
    /// the data, and the bytes returned are a view of it (see `fetch.rs`); otherwise the walk
    /// (`translate_offset`), then one aligned read of the data.
    pub fn read(
        &self,
        start_offset: i64,
        max_size: u32,
        max_position: u32,
        min_one: bool,
    ) -> Result<Option<SegmentRead>> {
        if let Some(r) = self.read_in_one_window(start_offset, max_size, max_position, min_one)? {
            return Ok(Some(r));
        }
        let Some(start) = self.translate_offset(start_offset, 0)? else {
            return Ok(None);
        };
        let adjusted = if min_one { max_size.max(start.size) } else { max_size };
        let limit = (max_position.saturating_sub(start.position)).min(adjusted);
        if limit == 0 {
            return Ok(Some(SegmentRead { position: start.position, bytes: FetchBytes::default() }));
        }
        Ok(Some(SegmentRead { position: start.position, bytes: self.read_found(start.position, limit)? }))
    }

    /// Like [`Segment::read`], but only finds the byte range of the whole batches it would
    /// return, walking batch headers instead of reading payloads: `(position, length)`. For
    /// handing a file range to `sendfile`/`splice` without copying through user space.
    pub fn read_range(
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
    pub fn read_next_offset(&self) -> Result<i64> {
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

    /// Kafka's `LogSegment.recover`: revalidates every batch (framing, magic, CRC, offsets fit),
    /// rebuilds both indexes with the append rule, and truncates the log at the first invalid
    /// byte. Returns what it found. For a segment followed by another, use
    /// [`Segment::recover_bounded`].
    pub fn recover(&mut self) -> Result<RecoveryResult> {
        self.recover_bounded(None)
    }

    /// [`Segment::recover`] of a segment followed by one at `next_base` (if any): a batch whose
    /// last offset is `>= next_base` is invalid too (baseOffset lies outside the CRC, so a
    /// damaged one can only be caught by where it points), and the log is cut there.
    pub fn recover_bounded(&mut self, next_base: Option<i64>) -> Result<RecoveryResult> {
        // A sealed segment's indexes are rebuilt from nothing, then handed back to the cache.
        let was_sealed = self.own_indexes(false)?;
        let r = self.rebuild(next_base);
        if was_sealed && r.is_ok() {
            self.seal_indexes();
        }
        r
    }

    fn rebuild(&mut self, next_base: Option<i64>) -> Result<RecoveryResult> {
        self.offset_index.reset()?;
        self.time_index.reset()?;
        self.max_timestamp_so_far = TimestampOffset { timestamp: batch::NO_TIMESTAMP, offset: self.base_offset };
        let file_len = self.log.len()?;
        let end = file_len.min(i32::MAX as u64) as u32;
        // Large sequential reads, each batch a slice of the window: not one read per batch.
        let mut scan = SequentialBatchReader::new(self.log.clone(), 0, end);
        let mut res = RecoveryResult::default();
        let mut valid: u32 = 0;
        let mut last_index_entry: u32 = 0;
        let mut last_epoch: Option<i32> = None;
        let mut prev_last: Option<i64> = None;
        loop {
            let (b, buf) = match scan.next_batch() {
                Ok(Some(x)) => x,
                Ok(None) => break,
                Err(e) => {
                    res.first_error = Some(e);
                    break;
                }
            };
            if let Err(source) = batch::validate_batch(buf, false) {
                res.first_error =
                    Some(Error::Corrupt { path: self.log.path().to_path_buf(), pos: b.position as u64, source });
                break;
            }
            // Offsets must also increase strictly from batch to batch and stay below the next
            // segment's base: baseOffset is outside the CRC, so a damaged one passes
            // validate_batch.
            if !self.offset_index.can_append_offset(b.last_offset())
                || b.header.base_offset < self.base_offset
                || prev_last.is_some_and(|p| b.header.base_offset <= p)
                || next_base.is_some_and(|n| b.last_offset() >= n)
            {
                res.first_error = Some(Error::Corrupt {
                    path: self.log.path().to_path_buf(),
                    pos: b.position as u64,
                    source: crate::format::FormatError::InvalidRecord {
                        at: 0,
                        detail: format!(
                            "batch offsets {}..={} do not fit segment base {} after offset {:?} \
                             (next segment at {next_base:?})",
                            b.header.base_offset,
                            b.last_offset(),
                            self.base_offset,
                            prev_last
                        ),
                    },
                });
                break;
            }
            prev_last = Some(b.last_offset());
            if b.header.max_timestamp > self.max_timestamp_so_far.timestamp {
                self.max_timestamp_so_far =
                    TimestampOffset { timestamp: b.header.max_timestamp, offset: b.last_offset() };
            }
            // A segment written over several sessions (the byte counter restarts at each open)
            // can need more entries than segment.index.bytes holds. The index is sparse, so the
            // rebuild stops adding entries once either index is full instead of failing the open.
            if valid - last_index_entry > self.index_interval_bytes
                && !self.offset_index.is_full()
                && !self.time_index.is_full()
            {
                self.offset_index.append(b.last_offset(), valid)?;
                let m = self.max_timestamp_so_far;
                self.time_index.maybe_append(m.timestamp, m.offset, false)?;
                last_index_entry = valid;
            }
            valid += b.size();
            res.batches += 1;
            let epoch = b.header.partition_leader_epoch;
            if epoch >= 0 && last_epoch.is_none_or(|l| epoch > l) {
                res.epoch_starts.push((epoch, b.header.base_offset));
                last_epoch = Some(epoch);
            }
        }
        res.valid_bytes = valid;
        res.truncated_bytes = file_len - valid as u64;
        if res.truncated_bytes > 0 {
            self.log.set_len(valid as u64)?;
        }
        if res.truncated_bytes == 0 {
            res.first_error = None;
        }
        self.size = valid;
        self.offset_index.trim_to_valid_size()?;
        let m = self.max_timestamp_so_far;
        self.time_index.maybe_append(m.timestamp, m.offset, true)?;
        self.time_index.trim_to_valid_size()?;
        Ok(res)
    }

    /// Writes pending index entries and makes the log's data durable.
    pub fn flush(&mut self) -> Result<()> {
        // A sealed segment's indexes are on disk already.
        if self.sealed.is_none() {
            self.offset_index.flush()?;
            self.time_index.flush()?;
        }
        self.log.sync_data()
    }

    /// Sanity-checks both indexes (Kafka's `sanityCheck`), naming the file on failure. A sealed
    /// segment's indexes are loaded for it (as Kafka's lazy indexes are). See
    /// [`Segment::sanity_check_bounded`], which this is without a following segment.
    pub fn sanity_check(&self) -> Result<()> {
        self.sanity_check_bounded(None)
    }

    /// [`Segment::sanity_check`] of a segment followed by one at `next_base` (if any).
    ///
    /// Stronger than Kafka's, at the cost of one small read of the log in the usual case:
    ///
    /// - every entry's offset must be one of this segment's (base + relative offset neither
    ///   negative nor overflowing `i64`); offset-index entries must increase strictly in offset
    ///   and position and point inside the log; time-index entries must not go backwards; an empty
    ///   segment has no entries;
    /// - the batches after the last offset-index entry are walked (Kafka's `readNextOffset` walk,
    ///   read in one go when they span at most [`SCAN_WINDOW_BYTES`]): the walk must end exactly
    ///   at the end of the log, the last entry must point at the batch holding its offset, and the
    ///   last batch must hold offsets of this segment, below `next_base`;
    /// - the time index's last entry is the segment's max timestamp (seal and close write it): it
    ///   must not point past the last batch, its timestamp must not be below any walked batch's max
    ///   timestamp, and when it points at a walked batch that batch must hold that timestamp. An
    ///   empty time index over timestamped batches fails too.
    pub fn sanity_check_bounded(&self, next_base: Option<i64>) -> Result<()> {
        let idx = self.indexes()?;
        let o = idx.offset();
        let t = idx.time();
        o.sanity_check().map_err(|detail| Error::CorruptIndex { path: self.index_path(), detail })?;
        t.sanity_check().map_err(|detail| Error::CorruptIndex { path: self.time_index_path(), detail })?;
        let bad_index = |detail: String| Error::CorruptIndex { path: self.index_path(), detail };
        let bad_time = |detail: String| Error::CorruptIndex { path: self.time_index_path(), detail };
        if self.size == 0 {
            if o.entries() > 0 {
                return Err(bad_index(format!("{} entries over an empty log", o.entries())));
            }
            if t.entries() > 0 {
                return Err(bad_time(format!("{} entries over an empty log", t.entries())));
            }
            return Ok(());
        }
        let mut prev: Option<crate::index::OffsetPosition> = None;
        for i in 0..o.entries() {
            let e = o.checked_entry(i).map_err(bad_index)?;
            if e.offset < self.base_offset || e.position >= self.size {
                return Err(bad_index(format!(
                    "entry {i} ({}, byte {}) lies outside the segment",
                    e.offset, e.position
                )));
            }
            if let Some(p) = prev {
                if e.offset <= p.offset || e.position <= p.position {
                    return Err(bad_index(format!("entry {i} ({}, byte {}) does not increase", e.offset, e.position)));
                }
            }
            prev = Some(e);
        }
        let last_offset_entry = prev;
        let mut prev: Option<TimestampOffset> = None;
        for i in 0..t.entries() {
            let e = t.checked_entry(i).map_err(bad_time)?;
            if e.offset < self.base_offset {
                return Err(bad_time(format!("entry {i} points below the base offset ({})", e.offset)));
            }
            if let Some(p) = prev {
                if e.timestamp <= p.timestamp || e.offset < p.offset {
                    return Err(bad_time(format!("entry {i} ({}, {}) goes backwards", e.timestamp, e.offset)));
                }
            }
            prev = Some(e);
        }
        let last_time_entry = prev;

        // The walk from the last offset-index entry to the end of the log.
        let from = last_offset_entry.map_or(0, |e| e.position);
        let mut scan = BatchScanner::with_window(self.log.clone(), from, self.size, SCAN_WINDOW_BYTES)
            .with_first_read((self.size - from) as usize);
        // A framing error here is the index's (its last entry is not a batch start) or the log's
        // (a torn sealed segment): either way the segment must be recovered, not trusted.
        let walk_err = |e: Error| match e {
            Error::Corrupt { pos, source, .. } => {
                bad_index(format!("the walk from byte {from} (the last entry) fails at byte {pos}: {source}"))
            }
            e => e,
        };
        let mut first: Option<ScannedBatch> = None;
        let mut last: Option<ScannedBatch> = None;
        let mut walked_max_ts = batch::NO_TIMESTAMP;
        // The walked batch holding the time index's last entry's offset, if one does.
        let mut time_entry_batch: Option<ScannedBatch> = None;
        while let Some(b) = scan.next_batch().map_err(walk_err)? {
            first.get_or_insert(b);
            walked_max_ts = walked_max_ts.max(b.header.max_timestamp);
            if last_time_entry.is_some_and(|te| b.header.base_offset <= te.offset && te.offset <= b.last_offset()) {
                time_entry_batch.get_or_insert(b);
            }
            last = Some(b);
        }
        let (Some(first), Some(last)) = (first, last) else {
            return Err(bad_index(format!("no batch at byte {from}, where the last entry points")));
        };
        if scan.position() != self.size {
            return Err(bad_index(format!(
                "the batches from byte {from} (the last entry) end at byte {}, not at the end of the log ({})",
                scan.position(),
                self.size
            )));
        }
        if let Some(e) = last_offset_entry {
            if e.offset < first.header.base_offset || e.offset > first.last_offset() {
                return Err(bad_index(format!(
                    "the last entry ({}, byte {}) points at a batch of offsets {}..={}",
                    e.offset,
                    e.position,
                    first.header.base_offset,
                    first.last_offset()
                )));
            }
        }
        // The last batch's offsets (baseOffset is outside the CRC): in this segment, and below
        // the next one. Wider than i64 so that a damaged baseOffset cannot wrap.
        let last_end = last.header.base_offset as i128 + last.header.last_offset_delta as i128;
        let past_next = next_base.is_some_and(|n| last_end >= n as i128);
        if last.header.base_offset < self.base_offset
            || last_end - self.base_offset as i128 > i32::MAX as i128
            || last.header.last_offset_delta < 0
            || past_next
        {
            return Err(Error::Corrupt {
                path: self.log_path(),
                pos: last.position as u64,
                source: crate::format::FormatError::InvalidRecord {
                    at: 0,
                    detail: format!(
                        "the last batch's offsets {}..={last_end} do not fit segment base {} (next segment at {next_base:?})",
                        last.header.base_offset, self.base_offset
                    ),
                },
            });
        }
        match last_time_entry {
            None if walked_max_ts >= 0 => {
                return Err(bad_time("empty, but the segment's batches have timestamps".into()));
            }
            None => {
                if from > 0 {
                    if let Some(b) = self.scanner(0).next_batch()? {
                        if b.header.max_timestamp >= 0 {
                            return Err(bad_time("empty, but the segment's batches have timestamps".into()));
                        }
                    }
                }
            }
            Some(te) => {
                if te.offset > last.last_offset() {
                    return Err(bad_time(format!(
                        "the last entry ({}, {}) points past the segment's last offset {}",
                        te.timestamp,
                        te.offset,
                        last.last_offset()
                    )));
                }
                if te.timestamp < walked_max_ts {
                    return Err(bad_time(format!(
                        "the last entry's timestamp {} is below a batch's max timestamp {walked_max_ts}: \
                         it is not the segment's max timestamp",
                        te.timestamp
                    )));
                }
                if let Some(b) = time_entry_batch.filter(|b| b.header.max_timestamp != te.timestamp) {
                    return Err(bad_time(format!(
                        "the last entry ({}, {}) points at a batch whose max timestamp is {}",
                        te.timestamp, te.offset, b.header.max_timestamp
                    )));
                }
            }
        }
        Ok(())
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
    /// O_DIRECT files only ([`ActiveSegment::take_zero_fill`]).
    pub zero_fill_bytes: u32,
    /// `segment.bytes`: zero fill stops there.
    pub segment_bytes: u32,
}

/// Zero fill starts and ends on this boundary (at least; the file's own write alignment when
/// larger), so that it never touches the block a data write ends in.
const ZERO_FILL_ALIGN: u64 = 4096;

/// The zero-fill lead of a new segment, doubled at each refill up to the setting.
///
/// Small, because the first refill starts an eighth of the lead past the data (see
/// [`ActiveSegment::take_zero_fill`]) and the appends into that gap land in unwritten (or not
/// yet allocated) blocks, so each of their RWF_DSYNC writes commits the journal. With an 8 MiB
/// first lead that gap was 1 MiB, 64 durable 16 KiB appends per segment at about the latency of
/// zero fill off: 2-3 % of a run of 2,048-3,072 appends, enough to set the p99. At 256 KiB the
/// gap is 32 KiB (two such appends) and the lead reaches 64 MiB at the ninth refill instead of
/// the fourth. Measured with `append-vs-fio --total-bytes $((32<<20)) --reps 8 --window 1 --modes
/// direct --durable --sync-method dsync --preallocate`: the append p99 133-168 us against fio's
/// O_DSYNC write p99 of 126-175 us in the same pairs (was 178-223 against 127-181 us with the
/// 8 MiB lead); 64 KiB measured no better (151-183 against 125-161 us).
const ZERO_FILL_FIRST_LEAD: u64 = 256 << 10;

/// What zero fill did in one active segment ([`ActiveSegment::zero_fill_stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ZeroFillStats {
    /// Refills taken (each one batch of zero writes).
    pub fills: u64,
    /// Zero bytes those covered.
    pub bytes: u64,
    /// Times something waited for zero writes not yet reported: a data write that reached
    /// them, or a seal, close or truncation.
    pub waits: u64,
    /// Refills that failed (zero fill is then off for the segment).
    pub failures: u64,
}

/// The most a refill without zeros ahead leaves between the data and its start.
const ZERO_FILL_MAX_SKIP: u64 = 1 << 20;

/// Zero writes in flight for a segment: the range they cover and their batch.
#[derive(Debug)]
struct Refill {
    io: crate::io::AsyncIo,
    start: u64,
    end: u64,
}

/// The segment that takes appends.
#[derive(Debug)]
pub struct ActiveSegment {
    seg: Segment,
    /// The `.log` file itself (O_DIRECT in direct mode); `seg.log` is the tail wrapped around it.
    file: Arc<dyn IoFile>,
    tail: Arc<TailFile>,
    storage: Arc<dyn Storage>,
    bytes_since_last_index_entry: u32,
    rolling_based_timestamp: Option<i64>,
    created_ms: i64,
    roll_jitter_ms: i64,
    settings: SegmentSettings,
    /// Writes submitted without waiting ([`ActiveSegment::writes_started`]), until polled.
    in_flight: Option<crate::io::AsyncIo>,
    /// The outcome of writes that another operation had to wait for before they were polled.
    settled: Option<Result<()>>,
    /// Zero fill's state ([`ActiveSegment::take_zero_fill`]).
    zero: ZeroFillState,
}

/// An active segment's zero fill.
#[derive(Debug, Default)]
struct ZeroFillState {
    /// Where the zeros written ahead of the data end (the file is at least this long). Between
    /// the data and the first refill's start there may be a hole, which appends fill as
    /// without zero fill.
    zeroed_to: u64,
    /// The zero writes taken by [`ActiveSegment::take_zero_fill`]: the range, until submitted;
    /// then in flight until they complete.
    pending: Option<(u64, u64)>,
    in_flight: Option<Refill>,
    /// The current lead (it doubles at each refill up to the setting).
    lead: u64,
    stats: ZeroFillStats,
    /// Zero fill failed once (a full disk, say): it stays off for this segment, appends extend
    /// the file as without it.
    failed: bool,
}

/// A segment that can no longer be written.
#[derive(Debug)]
pub struct SealedSegment {
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
impl DerefMut for SealedSegment {
    fn deref_mut(&mut self) -> &mut Segment {
        &mut self.seg
    }
}

/// Kafka's index rule replayed on the byte counter alone: how many entries appending `batches`
/// adds when `since` bytes went by since the last entry.
fn entries_needed(mut since: u32, interval: u32, batches: &[batch::BatchHeader]) -> usize {
    let mut n = 0;
    for b in batches {
        if since > interval {
            n += 1;
            since = 0;
        }
        since = since.saturating_add(b.size_in_bytes() as u32);
    }
    n
}

/// An index file as a [`LazyFile`]: created if missing, opened otherwise.
fn open_or_create(storage: &Arc<dyn Storage>, path: &Path, res: &SegmentResources) -> Result<Arc<dyn IoFile>> {
    let mode = if storage.exists(path) { OpenMode::ReadWrite } else { OpenMode::CreateNew };
    Ok(LazyFile::create(storage.clone(), path, mode, Reopen::Plain, &res.files)?)
}

/// The last entry of a time index file of `len` bytes (every whole entry counts, as in
/// `from_bytes`), `(-1, base)` when it has none: what a sealed segment needs without loading it.
fn last_time_entry(file: &dyn IoFile, base_offset: i64, len: u64) -> Result<TimestampOffset> {
    let n = len / TIME_ENTRY_SIZE as u64;
    if n == 0 {
        return Ok(TimestampOffset { timestamp: batch::NO_TIMESTAMP, offset: base_offset });
    }
    let mut b = [0u8; TIME_ENTRY_SIZE];
    file.read_exact_at(&mut b, (n - 1) * TIME_ENTRY_SIZE as u64)?;
    let e = TimeEntry::decode(&b, 0);
    // Saturating: a damaged entry of a segment whose base is near i64::MAX must not overflow
    // here; the sanity check (or the rebuild) refuses it.
    Ok(TimestampOffset { timestamp: e.timestamp, offset: base_offset.saturating_add(e.relative_offset as i64) })
}

impl Segment {
    fn check_log_len(log_path: &Path, len: u64) -> Result<()> {
        if len > i32::MAX as u64 {
            return Err(Error::Corrupt {
                path: log_path.to_path_buf(),
                pos: i32::MAX as u64,
                source: crate::format::FormatError::BatchTooLarge { size: len as i64, limit: i32::MAX as i64 },
            });
        }
        Ok(())
    }

    /// The segment's `.log`, opened read-write, and its length (checked to fit a segment).
    fn open_log_file(storage: &dyn Storage, dir: &Path, base_offset: i64) -> Result<(Arc<dyn IoFile>, u64)> {
        let log_path = dir.join(filename::log_file_name(base_offset));
        let log = storage.open_log(&log_path, OpenMode::ReadWrite)?;
        let len = log.len()?;
        Segment::check_log_len(&log_path, len)?;
        Ok((log, len))
    }

    /// Opens the files of an existing segment and reads both indexes into the current arena
    /// ([`SegmentResources::current`]); the files stay open. A missing `.timeindex` is created
    /// empty (as Kafka does); a missing `.index` is created empty and reported through the return
    /// flag so the caller rebuilds it (Kafka recovers such a segment). For tools and tests: a log
    /// opens its segments with [`Segment::open_lazy`].
    pub fn open_existing(
        storage: &dyn Storage,
        dir: &Path,
        base_offset: i64,
        settings: SegmentSettings,
    ) -> Result<(Segment, bool)> {
        let res = SegmentResources::current();
        let (log, len) = Segment::open_log_file(storage, dir, base_offset)?;
        let limit = index_file_limit(settings.segment_index_bytes);
        let idx_path = dir.join(filename::index_file_name(base_offset));
        let tidx_path = dir.join(filename::time_index_file_name(base_offset));
        let arena = Some(&res.arena);
        let mut needs_rebuild = false;
        let offset_index = if storage.exists(&idx_path) {
            let f = storage.open(&idx_path, OpenMode::ReadWrite)?;
            OffsetIndex::load(arena, base_offset, f, settings.segment_index_bytes, limit)?
        } else {
            needs_rebuild = true;
            let f = storage.open(&idx_path, OpenMode::CreateNew)?;
            OffsetIndex::from_bytes(base_offset, Vec::new(), settings.segment_index_bytes, Some(f))
        };
        let time_index = if storage.exists(&tidx_path) {
            let f = storage.open(&tidx_path, OpenMode::ReadWrite)?;
            TimeIndex::load(arena, base_offset, f, settings.segment_index_bytes, limit)?
        } else {
            let f = storage.open(&tidx_path, OpenMode::CreateNew)?;
            TimeIndex::from_bytes(base_offset, Vec::new(), settings.segment_index_bytes, Some(f))
        };
        let max_timestamp_so_far = time_index.last_entry();
        Ok((
            Segment {
                base_offset,
                dir: dir.to_path_buf(),
                log,
                size: len as u32,
                offset_index,
                time_index,
                sealed: None,
                lazy_log: None,
                storage: None,
                res,
                segment_index_bytes: settings.segment_index_bytes,
                max_timestamp_so_far,
                index_interval_bytes: settings.index_interval_bytes,
            },
            needs_rebuild,
        ))
    }

    /// Opens an existing segment without reading its indexes: they load on first use, under the
    /// current resources' memory budget, and its files are [`LazyFile`]s under their descriptor
    /// limit. Only the time index's last entry is read (for the segment's max timestamp). Missing
    /// index files are handled as in [`Segment::open_existing`].
    pub fn open_lazy(
        storage: Arc<dyn Storage>,
        dir: &Path,
        base_offset: i64,
        settings: SegmentSettings,
    ) -> Result<(Segment, bool)> {
        let res = SegmentResources::current();
        let (log, len) = Segment::open_log_file(&*storage, dir, base_offset)?;
        let lazy_log = LazyFile::adopt(storage.clone(), log, Reopen::Log, &res.files);
        let limit = index_file_limit(settings.segment_index_bytes);
        let open_index = |path: &Path| -> Result<(Arc<LazyFile>, u64, bool)> {
            if storage.exists(path) {
                let f = LazyFile::create(storage.clone(), path, OpenMode::ReadWrite, Reopen::Plain, &res.files)?;
                let len = f.len()?;
                if len > limit {
                    return Err(Error::CorruptIndex {
                        path: path.to_path_buf(),
                        detail: format!("index file is {len} bytes, more than segment.index.bytes allows ({limit})"),
                    });
                }
                Ok((f, len, false))
            } else {
                let f = LazyFile::create(storage.clone(), path, OpenMode::CreateNew, Reopen::Plain, &res.files)?;
                Ok((f, 0, true))
            }
        };
        let (fi, ilen, needs_rebuild) = open_index(&dir.join(filename::index_file_name(base_offset)))?;
        let (ft, tlen, _) = open_index(&dir.join(filename::time_index_file_name(base_offset)))?;
        let max_timestamp_so_far = last_time_entry(&*ft, base_offset, tlen)?;
        let entries = ((ilen / OFFSET_ENTRY_SIZE as u64) as usize, (tlen / TIME_ENTRY_SIZE as u64) as usize);
        let sealed = SealedIndexes::unloaded(&res, base_offset, fi, ft, settings.segment_index_bytes, limit, entries);
        let (offset_index, time_index) = Segment::placeholder_indexes(base_offset);
        Ok((
            Segment {
                base_offset,
                dir: dir.to_path_buf(),
                log: lazy_log.clone(),
                size: len as u32,
                offset_index,
                time_index,
                sealed: Some(sealed),
                lazy_log: Some(lazy_log),
                storage: Some(storage),
                res,
                segment_index_bytes: settings.segment_index_bytes,
                max_timestamp_so_far,
                index_interval_bytes: settings.index_interval_bytes,
            },
            needs_rebuild,
        ))
    }

    /// Recomputes the max timestamp so far from the time index plus a walk after its last entry
    /// (Kafka's `readLargestTimestamp`), for a segment whose time index may lag its log.
    pub fn reload_max_timestamp(&mut self) -> Result<()> {
        let (last, pos) = {
            let idx = self.indexes()?;
            let last = idx.time().last_entry();
            (last, idx.offset().lookup(last.offset).position.min(self.size))
        };
        let mut best = last;
        let mut scan = self.scanner(pos);
        while let Some(b) = scan.next_batch()? {
            if b.header.max_timestamp > best.timestamp {
                best = TimestampOffset { timestamp: b.header.max_timestamp, offset: b.last_offset() };
            }
        }
        self.max_timestamp_so_far = best;
        Ok(())
    }

    /// Makes the segment read-only: its indexes go to the index cache (packed, under the memory
    /// budget) and its `.log` becomes a lazily opened file (when the segment knows its storage).
    pub fn into_sealed(mut self) -> SealedSegment {
        self.seal_indexes();
        if let (None, Some(storage)) = (&self.lazy_log, &self.storage) {
            let lf = LazyFile::adopt(storage.clone(), self.log.clone(), Reopen::Log, &self.res.files);
            self.log = lf.clone();
            self.lazy_log = Some(lf);
        }
        SealedSegment { seg: self }
    }

    /// Makes this segment the active one again (after truncation removed later segments, or on
    /// open): indexes get room for `segment.index.bytes` again, in growth slots of the arena, and
    /// the `.log` stays open.
    pub fn into_active(
        mut self,
        storage: Arc<dyn Storage>,
        settings: SegmentSettings,
        now_ms: i64,
        roll_jitter_ms: i64,
    ) -> Result<ActiveSegment> {
        self.own_indexes(true)?;
        self.offset_index.resize(settings.segment_index_bytes)?;
        self.time_index.resize(settings.segment_index_bytes)?;
        self.offset_index.reserve(&self.res.arena);
        self.time_index.reserve(&self.res.arena);
        self.offset_index.prefault_warm();
        self.time_index.prefault_warm();
        self.segment_index_bytes = settings.segment_index_bytes;
        self.storage = Some(storage.clone());
        let file = match self.lazy_log.take() {
            Some(lf) => lf.detach()?,
            None => self.log.clone(),
        };
        let tail = Arc::new(TailFile::new(file.clone(), self.size as u64, settings.tail_cache_bytes)?);
        self.log = tail.clone();
        // Kafka starts a reopened segment's byte counter at zero, and so do we, so that index
        // files stay identical to Kafka's across restarts.
        Ok(ActiveSegment {
            seg: self,
            file,
            tail,
            storage,
            bytes_since_last_index_entry: 0,
            rolling_based_timestamp: None,
            created_ms: now_ms,
            roll_jitter_ms,
            settings,
            in_flight: None,
            settled: None,
            zero: ZeroFillState::default(),
        })
    }
}

impl ActiveSegment {
    /// Creates a new, empty segment's three files. Index files are preallocated to
    /// `segment.index.bytes` (rounded down to the entry size); in memory each index gets a growth
    /// slot of that size in the current arena ([`SegmentResources::current`]). The `.log` stays
    /// open; the index files are lazily opened files under the descriptor limit.
    pub fn create(
        storage: Arc<dyn Storage>,
        dir: &Path,
        base_offset: i64,
        settings: SegmentSettings,
        now_ms: i64,
        roll_jitter_ms: i64,
    ) -> Result<ActiveSegment> {
        let log_path = dir.join(filename::log_file_name(base_offset));
        let file = if storage.exists(&log_path) {
            storage.open_log(&log_path, OpenMode::ReadWrite)?
        } else {
            storage.open_log(&log_path, OpenMode::CreateNew)?
        };
        file.set_len(0)?;
        if settings.preallocate_bytes > 0 {
            // Kafka's preallocate sets the file's length to segment.bytes; seglog also reserves
            // the blocks. Appends then write inside the file's size, which O_DIRECT on ext4 does
            // about twice as fast as extending it. The logical size is tracked apart and the file
            // is cut back to it at seal and close; after a crash the zeros past the data are a
            // torn tail that recovery cuts.
            file.allocate(settings.preallocate_bytes as u64)?;
            file.set_len(settings.preallocate_bytes as u64)?;
        }
        let tail = Arc::new(TailFile::new(file.clone(), 0, settings.tail_cache_bytes)?);
        let log: Arc<dyn IoFile> = tail.clone();
        let res = SegmentResources::current();
        let idx = open_or_create(&storage, &dir.join(filename::index_file_name(base_offset)), &res)?;
        idx.set_len(0)?;
        let tidx = open_or_create(&storage, &dir.join(filename::time_index_file_name(base_offset)), &res)?;
        tidx.set_len(0)?;
        let offset_index = OffsetIndex::create_in(&res.arena, base_offset, settings.segment_index_bytes, Some(idx))?;
        let time_index = TimeIndex::create_in(&res.arena, base_offset, settings.segment_index_bytes, Some(tidx))?;
        Ok(ActiveSegment {
            seg: Segment {
                base_offset,
                dir: dir.to_path_buf(),
                log,
                size: 0,
                offset_index,
                time_index,
                sealed: None,
                lazy_log: None,
                storage: Some(storage.clone()),
                res,
                segment_index_bytes: settings.segment_index_bytes,
                max_timestamp_so_far: TimestampOffset { timestamp: batch::NO_TIMESTAMP, offset: base_offset },
                index_interval_bytes: settings.index_interval_bytes,
            },
            file,
            tail,
            storage,
            bytes_since_last_index_entry: 0,
            rolling_based_timestamp: None,
            created_ms: now_ms,
            roll_jitter_ms,
            settings,
            in_flight: None,
            settled: None,
            zero: ZeroFillState::default(),
        })
    }

    /// Kafka's `LogSegment.append`: writes `records` (whole, already validated batches, whose
    /// headers are `batches`) at the end of the log, then applies the index rule per batch: an
    /// entry `(batch last offset, batch start position)` when more than `index.interval.bytes`
    /// went by since the last entry, checked before the batch is counted. The time index gets
    /// `(max timestamp so far, last offset of the batch holding it)` at the same moments, if the
    /// timestamp grew.
    pub fn append(&mut self, records: &[u8], batches: &[batch::BatchHeader]) -> Result<()> {
        let (Some(first), Some(last)) = (batches.first(), batches.last()) else {
            return Ok(());
        };
        let largest_offset = last.last_offset();
        let mut physical_position = self.seg.size;
        if physical_position == 0 {
            self.rolling_based_timestamp = Some(first.max_timestamp);
        }
        if !self.seg.offset_index.can_append_offset(largest_offset) || first.base_offset < self.seg.base_offset {
            return Err(Error::InvalidRecord {
                at: 0,
                detail: format!(
                    "offsets {}..={largest_offset} do not fit segment {} (relative offsets are 32-bit)",
                    first.base_offset, self.seg.base_offset
                ),
            });
        }
        let needed = self.index_entries_needed(batches);
        if !self.has_index_room(needed) {
            return Err(Error::InvalidRecord {
                at: 0,
                detail: format!(
                    "{} batches need {needed} index entries, more than segment.index.bytes leaves ({} offset, {} time entries)",
                    batches.len(),
                    self.seg.offset_index.max_entries(),
                    self.seg.time_index.max_entries()
                ),
            });
        }
        let new_size = physical_position as u64 + records.len() as u64;
        if new_size > i32::MAX as u64 {
            return Err(Error::RecordTooLarge {
                at: 0,
                size: records.len() as u64,
                limit: i32::MAX as u64 - physical_position as u64,
                limit_name: "the 2 GiB segment limit",
            });
        }
        self.tail.append(records);
        self.seg.size = new_size as u32;
        for b in batches {
            if b.max_timestamp > self.seg.max_timestamp_so_far.timestamp {
                self.seg.max_timestamp_so_far = TimestampOffset { timestamp: b.max_timestamp, offset: b.last_offset() };
            }
            if self.bytes_since_last_index_entry > self.seg.index_interval_bytes {
                self.seg.offset_index.append(b.last_offset(), physical_position)?;
                let m = self.seg.max_timestamp_so_far;
                self.seg.time_index.maybe_append(m.timestamp, m.offset, false)?;
                self.bytes_since_last_index_entry = 0;
            }
            let size = b.size_in_bytes() as u32;
            physical_position += size;
            self.bytes_since_last_index_entry = self.bytes_since_last_index_entry.saturating_add(size);
        }
        debug_assert_eq!(physical_position, self.seg.size);
        Ok(())
    }

    /// Kafka's `shouldRoll`.
    ///
    /// `index_entries` is how many index entries the append would add
    /// ([`ActiveSegment::index_entries_needed`]): besides Kafka's `isFull` checks, the indexes must
    /// have room for all of them (only a multi-batch append can need more than one).
    #[allow(clippy::too_many_arguments)]
    pub fn should_roll(
        &mut self,
        segment_bytes: u32,
        segment_ms: i64,
        messages_size: u32,
        max_timestamp_in_messages: i64,
        max_offset_in_messages: i64,
        now_ms: i64,
        index_entries: usize,
    ) -> Result<bool> {
        let reached_roll_ms = self.time_waited_for_roll(now_ms, max_timestamp_in_messages)?
            > segment_ms.saturating_sub(self.roll_jitter_ms);
        let size = self.seg.size as i64;
        Ok(size > segment_bytes as i64 - messages_size as i64
            || (size > 0 && reached_roll_ms)
            || self.seg.offset_index.is_full()
            || self.seg.time_index.is_full()
            || !self.has_index_room(index_entries)
            || !self.seg.offset_index.can_append_offset(max_offset_in_messages))
    }

    /// How many index entries appending `batches` would add: the append rule replayed on the
    /// byte counter, without touching anything.
    pub fn index_entries_needed(&self, batches: &[batch::BatchHeader]) -> usize {
        entries_needed(self.bytes_since_last_index_entry, self.seg.index_interval_bytes, batches)
    }

    /// True when a new, empty segment's indexes could take the entries appending `batches` to it
    /// would add (what a roll makes room for).
    pub fn fits_new_segment(&self, batches: &[batch::BatchHeader]) -> bool {
        let n = entries_needed(0, self.seg.index_interval_bytes, batches);
        n == 0 || (n <= self.seg.offset_index.max_entries() && n < self.seg.time_index.max_entries())
    }

    /// True when both indexes can take `entries` more entries (the time index keeps its last slot
    /// for the entry written at roll).
    pub fn has_index_room(&self, entries: usize) -> bool {
        entries == 0
            || (self.seg.offset_index.entries() + entries <= self.seg.offset_index.max_entries()
                && self.seg.time_index.entries() + entries < self.seg.time_index.max_entries())
    }

    /// Kafka's `LogSegment.truncateTo`: removes every batch holding an offset `>= offset` (a
    /// batch that straddles `offset` goes whole, as in Kafka), from the indexes, the memory tail
    /// and the file. Returns the bytes removed and the offset the segment now ends before.
    pub fn truncate_to(&mut self, offset: i64, now_ms: i64) -> Result<(u64, i64)> {
        self.settle_in_flight();
        self.settle_zero_fill();
        let Some(m) = self.seg.translate_offset(offset, 0)? else {
            // Nothing at or past `offset` here.
            self.seg.offset_index.truncate_to(offset)?;
            self.seg.time_index.truncate_to(offset)?;
            return Ok((0, self.seg.read_next_offset()?));
        };
        // The batch at the cut point holds `offset`; everything from its base offset goes.
        let mut scan = BatchScanner::new(self.seg.log.clone(), m.position, self.seg.size);
        let cut_base = match scan.next_batch()? {
            Some(b) => b.header.base_offset.min(offset),
            None => offset,
        };
        self.seg.offset_index.truncate_to(cut_base)?;
        self.seg.time_index.truncate_to(cut_base)?;
        let removed = (self.seg.size - m.position) as u64;
        self.tail.truncate(m.position as u64)?;
        self.seg.size = m.position;
        // The file now ends at the cut: nothing past it is known to be zeros.
        self.zero.zeroed_to = 0;
        if self.seg.size == 0 {
            self.created_ms = now_ms;
            self.rolling_based_timestamp = None;
        }
        self.bytes_since_last_index_entry = 0;
        self.seg.max_timestamp_so_far =
            TimestampOffset { timestamp: batch::NO_TIMESTAMP, offset: self.seg.base_offset };
        self.seg.reload_max_timestamp()?;
        Ok((removed, cut_base.max(self.seg.base_offset)))
    }

    /// Kafka's `timeWaitedForRoll`: by the first batch's timestamp when it has one, else by wall
    /// clock since the segment was created.
    pub fn time_waited_for_roll(&mut self, now_ms: i64, message_timestamp: i64) -> Result<i64> {
        if self.rolling_based_timestamp.is_none() {
            let mut scan = self.seg.scanner(0);
            if let Some(b) = scan.next_batch()? {
                self.rolling_based_timestamp = Some(b.header.max_timestamp);
            }
        }
        match self.rolling_based_timestamp {
            Some(ts) if ts >= 0 => Ok(message_timestamp.saturating_sub(ts)),
            _ => Ok(now_ms.saturating_sub(self.created_ms)),
        }
    }

    pub fn roll_jitter_ms(&self) -> i64 {
        self.roll_jitter_ms
    }

    /// The writes (and, with `sync`, the fdatasync) that put every appended byte in the file,
    /// straight from the tail's memory: one write per tail chunk the unwritten bytes touch
    /// (usually one). With `sync` they are linked in a chain ending in the fdatasync, which so
    /// runs only after all of them succeeded. Empty when there is nothing to do. Complete them
    /// with [`ActiveSegment::complete_writes`].
    pub fn take_writes(&mut self, tag: u64, sync: bool) -> Vec<IoOp> {
        self.settle_in_flight();
        let mut ops = self.tail.prepare_write(self.file.clone(), tag);
        // A data write must never race a zero write over the same bytes: when the data has
        // caught up with zero writes still in flight (a lead too short for the rate), wait.
        let data_end = ops
            .iter()
            .map(|o| match &o.kind {
                IoOpKind::Write { buf, pos, .. } => pos + buf.len() as u64,
                IoOpKind::SyncData => 0,
            })
            .max()
            .unwrap_or(0);
        if self.zero.in_flight.as_ref().is_some_and(|z| z.start < data_end) {
            self.settle_zero_fill();
        }
        if sync {
            for w in &mut ops {
                w.link_next = true;
            }
            ops.push(IoOp { file: self.file.clone(), kind: IoOpKind::SyncData, tag, link_next: false });
        }
        ops
    }

    /// The zero writes that extend the zeroed lead past the data once less than half of the last
    /// lead is left (the lead starts at 256 KiB and doubles with each refill up
    /// to [`SegmentSettings::zero_fill_bytes`]); empty when zero fill is off, not due, or
    /// already in flight. Take them after the turn's data writes ([`ActiveSegment::take_writes`]:
    /// they start past the block those end in) and submit them as a batch of their own, so that
    /// no acknowledgement waits for their completion; hand the result to
    /// [`ActiveSegment::zero_fill_started`]. The durable append issued with a refill still pays
    /// for it: its cache flush carries the refill's zeros too (the p99.9 of docs/benchmarks.md).
    ///
    /// The writes are independent (the device takes them in parallel and the burst is over
    /// sooner: fewer appends queue behind it) and carry no fdatasync: the next durable append
    /// commits their allocation along with its own data, once per refill.
    ///
    /// O_DIRECT files only. Through the page cache the zeros would reach the disk (and their
    /// blocks be allocated) only at writeback, after the appends that overwrite them, so they
    /// would buy nothing unless fdatasynced; chained to an fdatasync they measured worse than
    /// none (a buffered durable p99 of 546 against 255 us, one run of the durable workload while
    /// zero fill was being built; that code is gone, so the figure cannot be re-run), and that fdatasync could consume
    /// the error of a failed writeback of appended data (Linux reports it once per file).
    pub fn take_zero_fill(&mut self, tag: u64) -> Vec<IoOp> {
        let max_lead = self.settings.zero_fill_bytes as u64;
        // Off (the common case) answers before the tail's lock is taken for the alignment.
        if max_lead == 0 || self.zero.failed || self.zero.pending.is_some() {
            return Vec::new();
        }
        let file_align = self.tail.align();
        if file_align <= 1 {
            return Vec::new();
        }
        self.poll_zero_fill(false);
        if self.zero.in_flight.is_some() {
            return Vec::new();
        }
        // The lead starts small and doubles with each refill up to the setting: a partition
        // that takes little data holds (and writes) few zeros, a busy one refills rarely. A
        // refill is due when half of the last one's lead is left (judged by the lead just
        // filled, not the doubled one, or each refill would make the next due at once).
        let last = self.zero.lead;
        let size = self.seg.size as u64;
        if last > 0 && self.zero.zeroed_to >= size + last / 2 {
            return Vec::new();
        }
        let lead = if last == 0 { ZERO_FILL_FIRST_LEAD } else { last.saturating_mul(2) }.min(max_lead);
        let align = ZERO_FILL_ALIGN.max(file_align);
        // With zeros still ahead, the refill starts where they end. Without (the segment's first
        // fill, or data that outran the zeros), it starts an eighth of the lead past the data:
        // the next appends' writes (which rewrite the block the data ends in) then do not reach
        // it before it is done, where starting at the data would make the very next write wait
        // for the whole refill.
        let start = if self.zero.zeroed_to > size {
            self.zero.zeroed_to
        } else {
            tail::align_up(size + (lead / 8).min(ZERO_FILL_MAX_SKIP), align)
        };
        let end = tail::align_up(size + lead, align).min(tail::align_up(self.settings.segment_bytes as u64, align));
        if end <= start {
            return Vec::new();
        }
        let chunk = crate::io::pool::ZERO_BUF_BYTES as u64;
        let writes = (end - start).div_ceil(chunk);
        let mut ops = Vec::with_capacity(writes as usize + 1);
        for i in 0..writes {
            let pos = start + i * chunk;
            let n = (end - pos).min(chunk);
            ops.push(IoOp {
                file: self.file.clone(),
                kind: IoOpKind::Write { buf: crate::io::WriteBuf::zeros(n as usize), pos, dsync: false },
                tag,
                link_next: false,
            });
        }
        self.zero.pending = Some((start, end));
        self.zero.lead = lead;
        self.zero.stats.fills += 1;
        self.zero.stats.bytes += end - start;
        ops
    }

    /// What zero fill did in this segment so far.
    pub fn zero_fill_stats(&self) -> ZeroFillStats {
        self.zero.stats
    }

    /// Takes the operations of [`ActiveSegment::take_zero_fill`] back as submitted without
    /// waiting; they are polled by the next [`ActiveSegment::take_zero_fill`] and waited for by
    /// anything that writes where they do.
    pub fn zero_fill_started(&mut self, io: crate::io::AsyncIo) {
        let Some((start, end)) = self.zero.pending.take() else {
            debug_assert!(false, "zero fill started without take_zero_fill");
            return;
        };
        self.zero.in_flight = Some(Refill { io, start, end });
        // A batch that is already done (sync mode, or a ring that ran it inline) is applied now.
        self.poll_zero_fill(false);
    }

    /// Runs zero fill to completion without the engine: the synchronous path (a log that writes
    /// each append through itself).
    pub fn zero_fill_now(&mut self) {
        let ops = self.take_zero_fill(0);
        if !ops.is_empty() {
            let done = self.storage.submit(ops);
            self.zero_fill_started(crate::io::AsyncIo::Ready(done));
        }
    }

    /// Applies the outcome of the zero writes in flight once done (waiting for them with `wait`).
    fn poll_zero_fill(&mut self, wait: bool) {
        let Some(z) = self.zero.in_flight.take() else { return };
        match crate::io::claim_async(z.io, wait) {
            Ok(outcome) => {
                let ok = match outcome {
                    crate::io::AsyncOutcome::Done(done) => done.iter().all(|c| c.result.is_ok()),
                    // Not known to be written: zero fill cannot count on those blocks.
                    crate::io::AsyncOutcome::Lost => false,
                };
                if ok {
                    self.zero.zeroed_to = self.zero.zeroed_to.max(z.end);
                } else {
                    // Whatever part was written is zeros past the data, which the cut at seal
                    // and close, or recovery after a crash, removes like any zero tail.
                    self.zero.failed = true;
                    self.zero.stats.failures += 1;
                }
            }
            Err(io) => self.zero.in_flight = Some(Refill { io, ..z }),
        }
    }

    /// Waits for zero writes in flight: before anything that changes the file's length or
    /// writes where they do.
    fn settle_zero_fill(&mut self) {
        if self.zero.in_flight.is_some() {
            self.zero.stats.waits += 1;
            self.poll_zero_fill(true);
            // Only the thread that submitted a ring batch can complete it (an active segment is
            // written from one thread).
            debug_assert!(self.zero.in_flight.is_none(), "zero writes submitted on another thread");
        }
    }

    /// Applies the completions of [`ActiveSegment::take_writes`] (possibly turned into RWF_DSYNC
    /// writes without the fdatasync); the first error is returned. The tail counts its bytes as
    /// written only when every write succeeded, and as durable after a successful fdatasync or
    /// when every write was an RWF_DSYNC one.
    pub fn complete_writes(&mut self, completions: Vec<IoCompletion>) -> Result<()> {
        let mut first_err = None;
        let mut writes_ok = None;
        let mut all_dsync = true;
        let mut synced = false;
        for c in completions {
            match c.op.kind {
                IoOpKind::Write { dsync, .. } => {
                    writes_ok = Some(writes_ok.unwrap_or(true) && c.result.is_ok());
                    all_dsync &= dsync;
                }
                IoOpKind::SyncData => synced |= c.result.is_ok(),
            }
            if let Err(e) = c.result {
                first_err.get_or_insert(e);
            }
        }
        // The completions (and their references to the tail's chunks) are gone by now.
        if let Some(ok) = writes_ok {
            self.tail.complete_write(ok);
        }
        if synced || (writes_ok == Some(true) && all_dsync) {
            self.tail.mark_synced();
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// True when every byte already in the file is known to be durable, so RWF_DSYNC writes of
    /// the unwritten bytes alone make the whole segment durable (no fdatasync needed).
    pub fn written_is_synced(&self) -> bool {
        self.tail.written_is_synced()
    }

    /// Takes the writes of [`ActiveSegment::take_writes`] back as submitted without waiting
    /// ([`crate::io::Storage::submit_async`]); poll them with [`ActiveSegment::poll_writes`].
    /// Appends may continue meanwhile (the tail copies a chunk a write still holds before
    /// changing it); anything else that writes this segment waits for them first.
    pub fn writes_started(&mut self, io: crate::io::AsyncIo) {
        debug_assert!(self.in_flight.is_none(), "one write in flight per segment");
        self.settle_in_flight();
        self.in_flight = Some(io);
    }

    /// True while writes handed to [`ActiveSegment::writes_started`] have not been reported.
    pub fn writes_outstanding(&self) -> bool {
        self.in_flight.is_some() || self.settled.is_some()
    }

    /// The outcome of the writes in flight once they are done (blocking until then with
    /// `wait`), applied to the tail as [`ActiveSegment::complete_writes`] does; `None` while they
    /// are in flight or when there are none.
    pub fn poll_writes(&mut self, wait: bool) -> Option<Result<()>> {
        if let Some(r) = self.settled.take() {
            return Some(r);
        }
        let io = self.in_flight.take()?;
        match crate::io::claim_async(io, wait) {
            Ok(crate::io::AsyncOutcome::Lost) => {
                // The thread's ring cannot account for the batch (it does not know the id, or the
                // thread is ending): the bytes are not known to be written; fail rather than guess.
                self.tail.complete_write(false);
                Some(Err(Error::io(
                    "write",
                    self.file.path(),
                    std::io::Error::other("asynchronous write batch lost by the ring"),
                )))
            }
            Ok(crate::io::AsyncOutcome::Done(done)) => Some(self.complete_writes(done)),
            Err(io) => {
                self.in_flight = Some(io);
                None
            }
        }
    }

    /// Waits for the writes in flight, if any, keeping their outcome for the next poll.
    fn settle_in_flight(&mut self) {
        if self.in_flight.is_some() {
            self.settled = self.poll_writes(true);
        }
    }

    /// Writes every appended byte to the file (one submission), with an fdatasync when `sync`.
    pub fn write_pending(&mut self, sync: bool) -> Result<()> {
        self.settle_in_flight();
        if let Some(Err(e)) = &self.settled {
            return Err(Error::io("write", self.file.path(), std::io::Error::other(e.to_string())));
        }
        let ops = self.take_writes(0, sync);
        if ops.is_empty() {
            return Ok(());
        }
        let done = self.storage.submit(ops);
        self.complete_writes(done)
    }

    /// The `.log` file under the in-memory tail.
    pub fn log_file_inner(&self) -> &Arc<dyn IoFile> {
        &self.file
    }

    /// Appended bytes not yet handed to the kernel.
    pub fn unwritten_bytes(&self) -> u64 {
        self.tail.unwritten()
    }

    pub fn tail_stats(&self) -> TailStats {
        self.tail.stats()
    }

    /// Writes pending index entries and every appended byte, and makes the log's data durable.
    pub fn flush(&mut self) -> Result<()> {
        self.seg.offset_index.flush()?;
        self.seg.time_index.flush()?;
        self.write_pending(true)
    }

    /// Kafka's `onBecomeInactiveSegment` plus making the result durable: every byte written, the
    /// final time-index entry, both indexes trimmed and written, the log cut to its logical size
    /// (dropping O_DIRECT block padding and preallocated space), everything fsynced. The indexes
    /// then move to exact-size packed slots under the memory budget, and the `.log` becomes a
    /// lazily opened file under the descriptor limit.
    ///
    /// It runs on `&mut self`: on an error the segment stays the caller's (and reads as before);
    /// [`ActiveSegment::into_sealed`] then consumes it once sealing succeeded.
    pub fn seal(&mut self) -> Result<()> {
        self.finish()
    }

    /// The sealed segment, after a successful [`ActiveSegment::seal`].
    pub fn into_sealed(mut self) -> SealedSegment {
        let lf = LazyFile::adopt(self.storage.clone(), self.file, Reopen::Log, &self.seg.res.files);
        self.seg.log = lf.clone();
        self.seg.lazy_log = Some(lf);
        self.seg.storage = Some(self.storage);
        self.seg.seal_indexes();
        SealedSegment { seg: self.seg }
    }

    /// Everything [`ActiveSegment::seal`] and [`ActiveSegment::close`] write.
    fn finish(&mut self) -> Result<()> {
        self.settle_zero_fill();
        self.write_pending(false)?;
        let m = self.seg.max_timestamp_so_far;
        self.seg.time_index.maybe_append(m.timestamp, m.offset, true)?;
        self.seg.offset_index.trim_to_valid_size()?;
        self.seg.time_index.trim_to_valid_size()?;
        if self.file.len()? != self.seg.size as u64 {
            self.file.set_len(self.seg.size as u64)?;
        }
        self.file.sync_data()?;
        if let Some(f) = self.seg.offset_index.file() {
            f.sync_data()?;
        }
        if let Some(f) = self.seg.time_index.file() {
            f.sync_data()?;
        }
        Ok(())
    }

    /// What a clean close leaves on disk: the same as sealing (Kafka's `close` appends the final
    /// time-index entry and trims), but the segment stays the active one on the next open.
    pub fn close(mut self) -> Result<()> {
        self.finish()
    }

    pub fn settings(&self) -> SegmentSettings {
        self.settings
    }

    /// Turns this segment into a plain [`Segment`] after writing what is buffered (for
    /// truncation paths and reopening).
    pub fn into_segment(mut self) -> Result<Segment> {
        self.write_out()?;
        self.seg.log = self.file;
        Ok(self.seg)
    }

    /// What [`ActiveSegment::into_segment`] writes, on `&mut self`: a caller that must keep the
    /// segment when this fails calls it first, and `into_segment` then has nothing left to fail.
    pub fn write_out(&mut self) -> Result<()> {
        self.settle_zero_fill();
        self.write_pending(false)
    }
}

impl SealedSegment {
    pub fn into_segment(self) -> Segment {
        self.seg
    }
}
