//! Reads: fetch by offset (bounded by bytes and by an upper offset such as the high watermark),
//! and offset lookup by timestamp with Kafka's special values.

use super::{Log, Writes};
use crate::error::{Error, Result};
use crate::segment::{FetchBytes, ReadEnd, Segment, TimestampAndOffset};

/// Kafka's special `ListOffsets` timestamps, and a plain timestamp.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListOffset {
    /// -2: the log start offset.
    Earliest,
    /// -1: the log end offset.
    Latest,
    /// -3: the offset of the record with the largest timestamp.
    MaxTimestamp,
    /// -4: the earliest offset kept locally (the log start offset without tiered storage).
    EarliestLocal,
    /// -5: the latest offset in tiered storage; without tiered storage Kafka answers offset -1
    /// with leader epoch -1, and so does seglog.
    LatestTiered,
    /// A timestamp in ms: the first record with timestamp >= it.
    Timestamp(i64),
}

impl ListOffset {
    /// Kafka's wire values: -1, -2, -3 and -4 are special, anything else is a timestamp.
    pub fn from_kafka(ts: i64) -> ListOffset {
        match ts {
            -1 => ListOffset::Latest,
            -2 => ListOffset::Earliest,
            -3 => ListOffset::MaxTimestamp,
            -4 => ListOffset::EarliestLocal,
            -5 => ListOffset::LatestTiered,
            t => ListOffset::Timestamp(t),
        }
    }
}

/// How far a fetch or an offset lookup may see (Kafka's `FetchIsolation`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FetchIsolation {
    /// Up to the log end (a follower's fetch).
    LogEnd,
    /// Up to the high watermark (a consumer reading uncommitted).
    HighWatermark,
    /// Up to the last stable offset, with the aborted transactions the range overlaps (a
    /// consumer reading committed).
    TxnCommitted,
}

/// Whole batches inside one segment file, for zero-copy sending.
#[derive(Clone, Debug)]
pub struct FileRange {
    pub file: std::sync::Arc<dyn crate::io::IoFile>,
    pub segment_base_offset: i64,
    pub position: u32,
    pub len: u32,
}

/// The result of a fetch: whole batches, and the offsets a consumer needs beside them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FetchData {
    /// Whole batches, back to back, exactly as stored: usually a view of the aligned buffer
    /// they were read into (no copy); it dereferences to `[u8]`.
    pub records: FetchBytes,
    /// The base offset of the segment read and the byte position of the first batch returned.
    pub segment_base_offset: i64,
    pub position: u32,
    pub high_watermark: i64,
    /// [`Log::last_stable_offset`] at the read.
    pub last_stable_offset: i64,
    pub log_start_offset: i64,
    pub log_end_offset: i64,
    /// Under [`FetchIsolation::TxnCommitted`], the aborted transactions whose offsets overlap the
    /// batches returned (Kafka's `abortedTransactions`): a consumer drops each producer's batches
    /// from its first offset up to its ABORT marker. Empty otherwise.
    pub aborted_transactions: Vec<super::AbortedTransaction>,
}

impl FetchData {
    /// The offset after the last batch returned (where the next fetch starts), `None` when
    /// nothing was returned.
    pub fn next_offset(&self) -> Option<i64> {
        let (mut at, mut next) = (0usize, None);
        while at < self.records.len() {
            let Ok(h) = crate::format::batch::BatchHeader::parse(&self.records[at..]) else { break };
            next = Some(h.next_offset());
            at += h.size_in_bytes() as usize;
        }
        next
    }
}

impl Log {
    /// Reads whole batches starting with the one holding `start_offset`: at most `max_bytes`
    /// (but at least one whole batch when `min_one`), never reaching `upper_bound` (exclusive;
    /// `None` = the log end; a broker passes its high watermark). Kafka's `read`, except that the
    /// result never ends in a partial batch. `start_offset` outside `[log start, log end]` is
    /// [`Error::OffsetOutOfRange`]; at the log end the result is empty.
    pub fn read(
        &self,
        start_offset: i64,
        max_bytes: u32,
        upper_bound: Option<i64>,
        min_one: bool,
    ) -> Result<FetchData> {
        let mut out = FetchData {
            high_watermark: self.high_watermark,
            last_stable_offset: self.last_stable_offset(),
            log_start_offset: self.log_start_offset,
            log_end_offset: self.log_end_offset,
            ..Default::default()
        };
        if start_offset < self.log_start_offset || start_offset > self.log_end_offset {
            return Err(Error::OffsetOutOfRange {
                offset: start_offset,
                log_start_offset: self.log_start_offset,
                log_end_offset: self.log_end_offset,
            });
        }
        let upper = upper_bound.unwrap_or(self.log_end_offset).min(self.visible_end());
        if start_offset >= upper {
            out.segment_base_offset = self.active_segment().base_offset();
            out.position = self.active_segment().size();
            return Ok(out);
        }
        // Where the upper bound sits: the start of the batch holding it (found only when the
        // read reaches that segment; a consumer below it needs no lookup for it).
        let upper_base = self.segment_of(upper)?;
        for seg in self.segments_from(start_offset) {
            if seg.base_offset() > upper_base {
                break;
            }
            let end =
                if seg.base_offset() == upper_base { self.end_in(seg, upper) } else { ReadEnd::Position(seg.size()) };
            if let Some(r) = seg.read_to(start_offset, max_bytes, end, min_one)? {
                out.records = r.bytes;
                out.segment_base_offset = seg.base_offset();
                out.position = r.position;
                return Ok(out);
            }
        }
        Ok(out)
    }

    /// Kafka's fetch by isolation: [`Log::read`] bounded by the log end, the high watermark or the
    /// last stable offset, and under [`FetchIsolation::TxnCommitted`] the aborted transactions
    /// that overlap the batches returned.
    pub fn fetch(
        &self,
        start_offset: i64,
        max_bytes: u32,
        isolation: FetchIsolation,
        min_one: bool,
    ) -> Result<FetchData> {
        let mut out = self.read(start_offset, max_bytes, self.isolation_bound(isolation), min_one)?;
        if let (FetchIsolation::TxnCommitted, Some(end)) = (isolation, out.next_offset()) {
            out.aborted_transactions = self.aborted_transactions(start_offset, end)?;
        }
        Ok(out)
    }

    /// The offset a fetch under `isolation` stops before (`None`: the log end).
    fn isolation_bound(&self, isolation: FetchIsolation) -> Option<i64> {
        match isolation {
            FetchIsolation::LogEnd => None,
            FetchIsolation::HighWatermark => Some(self.high_watermark),
            FetchIsolation::TxnCommitted => Some(self.last_stable_offset()),
        }
    }

    /// Kafka's last stable offset: the first offset of a transaction still open or not yet
    /// replicated (never below the log start), or the high watermark when that is lower. A
    /// read-committed consumer reads up to it.
    pub fn last_stable_offset(&self) -> i64 {
        match self.producers.first_unstable_offset() {
            Some(first) => first.max(self.log_start_offset).min(self.high_watermark),
            None => self.high_watermark,
        }
    }

    /// The file range of the whole batches [`Log::read`] would return, without reading them: for
    /// handing to a socket with [`crate::io::send_file_range`] (sendfile), the way Kafka sends
    /// bytes from the page cache. `None` when the batches are not all in the file yet (they are
    /// still in the active segment's memory tail) or when the file is O_DIRECT (no page cache to
    /// send from): use [`Log::read`] then.
    pub fn read_file_range(
        &self,
        start_offset: i64,
        max_bytes: u32,
        upper_bound: Option<i64>,
        min_one: bool,
    ) -> Result<Option<FileRange>> {
        if start_offset < self.log_start_offset || start_offset > self.log_end_offset {
            return Err(Error::OffsetOutOfRange {
                offset: start_offset,
                log_start_offset: self.log_start_offset,
                log_end_offset: self.log_end_offset,
            });
        }
        let upper = upper_bound.unwrap_or(self.log_end_offset).min(self.visible_end());
        if start_offset >= upper {
            return Ok(None);
        }
        let upper_base = self.segment_of(upper)?;
        let active_base = self.active_segment().base_offset();
        let unwritten_from = self.active_segment().size() as u64 - self.active_segment().unwritten_bytes();
        for seg in self.segments_from(start_offset) {
            if seg.base_offset() > upper_base {
                break;
            }
            let max_position =
                if seg.base_offset() == upper_base { seg.position_of(self.end_in(seg, upper))? } else { seg.size() };
            if let Some((position, len)) = seg.read_range(start_offset, max_bytes, max_position, min_one)? {
                let file = if seg.base_offset() == active_base {
                    if position as u64 + len as u64 > unwritten_from {
                        return Ok(None);
                    }
                    self.active_segment().log_file_inner().clone()
                } else {
                    seg.pinned_log_file()?
                };
                if file.direct_alignment().is_some() {
                    return Ok(None);
                }
                return Ok(Some(FileRange { file, segment_base_offset: seg.base_offset(), position, len }));
            }
        }
        Ok(None)
    }

    /// Where reads stop. Under [`Writes::Caller`] only what was written without error is
    /// visible: an append whose write is still in flight may yet fail (then it is removed and
    /// its caller told so), so it is not served before it is written. Under the other modes the
    /// caller already has the append (a later failed write fails the log), and reads see it.
    fn visible_end(&self) -> i64 {
        match self.writes {
            Writes::Caller => self.written,
            Writes::Async(_) | Writes::Through => self.log_end_offset,
        }
    }

    /// The base offset of the segment holding `offset` (the log end maps to the active segment).
    fn segment_of(&self, offset: i64) -> Result<i64> {
        if offset >= self.log_end_offset {
            return Ok(self.active_segment().base_offset());
        }
        self.floor_segment(offset).map(|s| s.base_offset()).ok_or(Error::OffsetOutOfRange {
            offset,
            log_start_offset: self.log_start_offset,
            log_end_offset: self.log_end_offset,
        })
    }

    /// Where a read of `seg` (the segment [`Log::segment_of`] gives for `offset`) stops for an
    /// upper bound of `offset`: before the batch holding it. A position where it is known
    /// without a walk: the segment's size at the log end, the written position at the end of
    /// what was written, 0 at or below the segment's base offset (its first batch); otherwise the
    /// offset, whose batch the read finds in the bytes it reads anyway (Kafka keeps the high
    /// watermark's position beside it for the same reason: no lookup per fetch).
    fn end_in(&self, seg: &Segment, offset: i64) -> ReadEnd {
        if offset >= self.log_end_offset {
            return ReadEnd::Position(seg.size());
        }
        if offset == self.written && seg.base_offset() == self.active_segment().base_offset() {
            return ReadEnd::Position(self.written_position());
        }
        if offset <= seg.base_offset() {
            return ReadEnd::Position(0);
        }
        ReadEnd::BatchHolding(offset)
    }

    /// [`Log::offset_for_time`] as a consumer under `isolation` sees it (Kafka's
    /// `fetchOffsetForTimestamp` with an isolation level): latest is the high watermark or the
    /// last stable offset instead of the log end, and a lookup that finds an offset at or past it
    /// finds nothing. The earliest offsets are the same under every isolation.
    pub fn offset_for_time_isolated(
        &self,
        target: ListOffset,
        isolation: FetchIsolation,
    ) -> Result<Option<TimestampAndOffset>> {
        let Some(bound) = self.isolation_bound(isolation) else { return self.offset_for_time(target) };
        match target {
            ListOffset::Latest => Ok(Some(TimestampAndOffset { timestamp: -1, offset: bound, leader_epoch: None })),
            ListOffset::Earliest | ListOffset::EarliestLocal => self.offset_for_time(target),
            _ => Ok(self.offset_for_time(target)?.filter(|t| t.offset < bound)),
        }
    }

    /// Kafka's `fetchOffsetByTimestamp`. For a timestamp: the first segment whose largest
    /// timestamp is `>=` it, then its time index floor, then a record-level scan. `None` when no
    /// record is that recent.
    pub fn offset_for_time(&self, target: ListOffset) -> Result<Option<TimestampAndOffset>> {
        match target {
            ListOffset::Earliest | ListOffset::EarliestLocal => {
                Ok(Some(TimestampAndOffset { timestamp: -1, offset: self.log_start_offset, leader_epoch: None }))
            }
            ListOffset::Latest => {
                Ok(Some(TimestampAndOffset { timestamp: -1, offset: self.log_end_offset, leader_epoch: None }))
            }
            ListOffset::LatestTiered => {
                Ok(Some(TimestampAndOffset { timestamp: -1, offset: -1, leader_epoch: Some(-1) }))
            }
            ListOffset::MaxTimestamp => {
                // The first segment with the largest max timestamp.
                let mut best: Option<&crate::segment::Segment> = None;
                for s in self.segments() {
                    if best.is_none_or(|b| s.max_timestamp_so_far().timestamp > b.max_timestamp_so_far().timestamp) {
                        best = Some(s);
                    }
                }
                match best {
                    Some(s) => s.offset_of_max_timestamp(),
                    None => Ok(None),
                }
            }
            ListOffset::Timestamp(ts) => {
                for s in self.segments() {
                    if s.largest_timestamp()? >= ts {
                        return s.find_offset_by_timestamp(ts, self.log_start_offset);
                    }
                }
                Ok(None)
            }
        }
    }
}
