//! A segment's recovery: revalidating its batches and rebuilding its indexes (Kafka's
//! `LogSegment.recover`), and the sanity check of its indexes that decides whether a clean
//! shutdown's files can be trusted.

use super::*;
use crate::format::index_entry::offset_entry_follows;

impl Segment {
    /// Kafka's `LogSegment.recover`: revalidates every batch (framing, magic, CRC, offsets fit),
    /// rebuilds both indexes with the append rule, and truncates the log at the first invalid
    /// byte. Returns what it found. For a segment followed by another, use
    /// `Segment::recover_bounded`.
    pub fn recover(&mut self) -> Result<RecoveryResult> {
        self.recover_bounded(None)
    }

    /// [`Segment::recover`] of a segment followed by one at `next_base` (if any): a batch whose
    /// last offset is `>= next_base` is invalid too (baseOffset lies outside the CRC, so a
    /// damaged one can only be caught by where it points), and the log is cut there.
    pub(crate) fn recover_bounded(&mut self, next_base: Option<i64>) -> Result<RecoveryResult> {
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
        let mut index_rule = IndexInterval::new(self.index_interval_bytes as u64);
        let mut last_epoch: Option<i32> = None;
        let mut prev_last: Option<i64> = None;
        // Whether every batch but the first gets an entry (`Segment::dense_index`).
        let mut dense = true;
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
            if let Some(e) = self.misplaced_batch(&b, prev_last, next_base) {
                res.first_error = Some(e);
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
            if index_rule.is_due() && !self.offset_index.is_full() && !self.time_index.is_full() {
                self.offset_index.append(b.last_offset(), valid);
                let m = self.max_timestamp_so_far;
                self.time_index.maybe_append(m.timestamp, m.offset, false);
                index_rule.entry_written();
            } else if valid > 0 {
                dense = false;
            }
            index_rule.count(b.size() as u64);
            valid += b.size();
            res.batches += 1;
            let epoch = b.header.partition_leader_epoch;
            if epoch >= 0 && last_epoch.is_none_or(|l| epoch > l) {
                res.epoch_starts.push((epoch, b.header.base_offset));
                last_epoch = Some(epoch);
            }
        }
        self.dense_index = IndexDensity::known(dense);
        res.valid_bytes = valid;
        res.truncated_bytes = file_len - valid as u64;
        self.finish_rebuild(&mut res)?;
        Ok(res)
    }

    /// Whether batch `b` (read during a rebuild, after `prev_last`) has offsets that do not fit
    /// where it lies, and the error if so. Offsets must also increase strictly from batch to
    /// batch and stay below the next segment's base: baseOffset is outside the CRC, so a damaged
    /// one passes validate_batch.
    fn misplaced_batch(&self, b: &ScannedBatch, prev_last: Option<i64>, next_base: Option<i64>) -> Option<Error> {
        let misplaced = !self.offset_index.can_append_offset(b.last_offset())
            || b.header.base_offset < self.base_offset
            || prev_last.is_some_and(|p| b.header.base_offset <= p)
            || next_base.is_some_and(|n| b.last_offset() >= n);
        if !misplaced {
            return None;
        }
        Some(Error::Corrupt {
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
        })
    }

    /// The end of a rebuild: cuts the log after its valid bytes, and writes both indexes, the
    /// time index ending with the segment's max timestamp.
    fn finish_rebuild(&mut self, res: &mut RecoveryResult) -> Result<()> {
        let valid = res.valid_bytes;
        if res.truncated_bytes > 0 {
            self.log.set_len(valid as u64)?;
        }
        if res.truncated_bytes == 0 {
            res.first_error = None;
        }
        self.size = valid;
        self.offset_index.trim_to_valid_size()?;
        let m = self.max_timestamp_so_far;
        self.time_index.maybe_append(m.timestamp, m.offset, true);
        self.time_index.trim_to_valid_size()
    }

    /// Sanity-checks both indexes (Kafka's `sanityCheck`), naming the file on failure. A sealed
    /// segment's indexes are loaded for it (as Kafka's lazy indexes are). See
    /// `Segment::sanity_check_bounded`, which this is without a following segment.
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
    pub(crate) fn sanity_check_bounded(&self, next_base: Option<i64>) -> Result<()> {
        let idx = self.indexes()?;
        let o = idx.offset();
        let t = idx.time();
        o.sanity_check().map_err(|detail| self.bad_index(detail))?;
        t.sanity_check().map_err(|detail| self.bad_time(detail))?;
        if self.size == 0 {
            if o.entries() > 0 {
                return Err(self.bad_index(format!("{} entries over an empty log", o.entries())));
            }
            if t.entries() > 0 {
                return Err(self.bad_time(format!("{} entries over an empty log", t.entries())));
            }
            return Ok(());
        }
        let last_offset_entry = self.check_offset_entries(o)?;
        let last_time_entry = self.check_time_entries(t)?;
        let from = last_offset_entry.map_or(0, |e| e.position);
        let walk = self.walk_to_end(from, last_time_entry)?;
        if let Some(e) = last_offset_entry {
            let first = walk.first;
            if e.offset < first.header.base_offset || e.offset > first.last_offset() {
                return Err(self.bad_index(format!(
                    "the last entry ({}, byte {}) points at a batch of offsets {}..={}",
                    e.offset,
                    e.position,
                    first.header.base_offset,
                    first.last_offset()
                )));
            }
        }
        self.check_last_batch(&walk.last, next_base)?;
        self.check_last_time_entry(last_time_entry, &walk, from)
    }

    /// The sanity check's error for the offset index.
    fn bad_index(&self, detail: String) -> Error {
        Error::CorruptIndex { path: self.index_path(), detail }
    }

    /// The sanity check's error for the time index.
    fn bad_time(&self, detail: String) -> Error {
        Error::CorruptIndex { path: self.time_index_path(), detail }
    }

    /// Checks that every offset-index entry lies in the segment and that they increase; returns
    /// the last one.
    fn check_offset_entries(&self, o: &OffsetIndex) -> Result<Option<crate::index::OffsetPosition>> {
        let mut prev: Option<crate::index::OffsetPosition> = None;
        for i in 0..o.entries() {
            let e = o.checked_entry(i).map_err(|d| self.bad_index(d))?;
            if e.offset < self.base_offset || e.position >= self.size {
                return Err(
                    self.bad_index(format!("entry {i} ({}, byte {}) lies outside the segment", e.offset, e.position))
                );
            }
            if let Some(p) = prev {
                if !offset_entry_follows(p.offset, p.position as i64, e.offset, e.position as i64) {
                    return Err(
                        self.bad_index(format!("entry {i} ({}, byte {}) does not increase", e.offset, e.position))
                    );
                }
            }
            prev = Some(e);
        }
        Ok(prev)
    }

    /// Checks that no time-index entry points below the base offset or goes backwards; returns
    /// the last one.
    fn check_time_entries(&self, t: &TimeIndex) -> Result<Option<TimestampOffset>> {
        let mut prev: Option<TimestampOffset> = None;
        for i in 0..t.entries() {
            let e = t.checked_entry(i).map_err(|d| self.bad_time(d))?;
            if e.offset < self.base_offset {
                return Err(self.bad_time(format!("entry {i} points below the base offset ({})", e.offset)));
            }
            if let Some(p) = prev {
                if e.timestamp <= p.timestamp || e.offset < p.offset {
                    return Err(self.bad_time(format!("entry {i} ({}, {}) goes backwards", e.timestamp, e.offset)));
                }
            }
            prev = Some(e);
        }
        Ok(prev)
    }

    /// The walk from byte `from` (the last offset-index entry) to the end of the log, which must
    /// find at least one batch and end exactly at the end of the log.
    fn walk_to_end(&self, from: u32, last_time_entry: Option<TimestampOffset>) -> Result<TailWalk> {
        let mut scan = BatchScanner::with_window(self.log.clone(), from, self.size, SCAN_WINDOW_BYTES)
            .with_first_read((self.size - from) as usize);
        // A framing error here is the index's (its last entry is not a batch start) or the log's
        // (a torn sealed segment): either way the segment must be recovered, not trusted.
        let walk_err = |e: Error| match e {
            Error::Corrupt { pos, source, .. } => {
                self.bad_index(format!("the walk from byte {from} (the last entry) fails at byte {pos}: {source}"))
            }
            e => e,
        };
        let mut first: Option<ScannedBatch> = None;
        let mut last: Option<ScannedBatch> = None;
        let mut walked_max_ts = batch::NO_TIMESTAMP;
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
            return Err(self.bad_index(format!("no batch at byte {from}, where the last entry points")));
        };
        if scan.position() != self.size {
            return Err(self.bad_index(format!(
                "the batches from byte {from} (the last entry) end at byte {}, not at the end of the log ({})",
                scan.position(),
                self.size
            )));
        }
        Ok(TailWalk { first, last, max_timestamp: walked_max_ts, time_entry_batch })
    }

    /// Checks the last batch's offsets (baseOffset is outside the CRC): in this segment, and
    /// below the next one at `next_base`.
    fn check_last_batch(&self, last: &ScannedBatch, next_base: Option<i64>) -> Result<()> {
        // Wider than i64 so that a damaged baseOffset cannot wrap.
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
        Ok(())
    }

    /// Checks the time index's last entry `te` against the walk from byte `from`: it must be the
    /// segment's max timestamp, and be there when the batches have timestamps.
    fn check_last_time_entry(&self, te: Option<TimestampOffset>, walk: &TailWalk, from: u32) -> Result<()> {
        let Some(te) = te else {
            let timestamped = if walk.max_timestamp >= 0 {
                true
            } else if from > 0 {
                self.scanner(0).next_batch()?.is_some_and(|b| b.header.max_timestamp >= 0)
            } else {
                false
            };
            if timestamped {
                return Err(self.bad_time("empty, but the segment's batches have timestamps".into()));
            }
            return Ok(());
        };
        let last = walk.last;
        if te.offset > last.last_offset() {
            return Err(self.bad_time(format!(
                "the last entry ({}, {}) points past the segment's last offset {}",
                te.timestamp,
                te.offset,
                last.last_offset()
            )));
        }
        if te.timestamp < walk.max_timestamp {
            return Err(self.bad_time(format!(
                "the last entry's timestamp {} is below a batch's max timestamp {}: \
                 it is not the segment's max timestamp",
                te.timestamp, walk.max_timestamp
            )));
        }
        if let Some(b) = walk.time_entry_batch.filter(|b| b.header.max_timestamp != te.timestamp) {
            return Err(self.bad_time(format!(
                "the last entry ({}, {}) points at a batch whose max timestamp is {}",
                te.timestamp, te.offset, b.header.max_timestamp
            )));
        }
        Ok(())
    }
}

/// What the sanity check's walk from the last offset-index entry to the end of the log saw.
struct TailWalk {
    /// The first batch walked: the one the last offset-index entry points at.
    first: ScannedBatch,
    last: ScannedBatch,
    /// The largest max timestamp of the walked batches.
    max_timestamp: i64,
    /// The walked batch holding the time index's last entry's offset, if one does.
    time_entry_batch: Option<ScannedBatch>,
}
