//! The active segment: appends (Kafka's index rule), rolls, truncation, and the writes that
//! put its memory tail in its file (taken, in flight, completed), sealing and closing.

use super::*;

/// A new segment's index file as a [`LazyFile`]: created if missing, opened otherwise, and
/// emptied.
fn create_index_file(storage: &Arc<dyn Storage>, path: &Path, res: &SegmentResources) -> Result<Arc<LazyFile>> {
    let mode = if storage.exists(path) { OpenMode::ReadWrite } else { OpenMode::CreateNew };
    let file = LazyFile::create(storage.clone(), path, mode, Reopen::Plain, &res.files)?;
    file.set_len(0)?;
    Ok(file)
}

impl ActiveSegment {
    /// Creates a new, empty segment's three files. Index files are preallocated to
    /// `segment.index.bytes` (rounded down to the entry size); in memory each index gets a growth
    /// slot of that size in the arena of `res`. The `.log` stays
    /// open; the index files are lazily opened files under the descriptor limit.
    pub(crate) fn create(
        storage: Arc<dyn Storage>,
        dir: &Path,
        base_offset: i64,
        settings: SegmentSettings,
        res: &SegmentResources,
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
        let res = res.clone();
        let idx = create_index_file(&storage, &dir.join(filename::index_file_name(base_offset)), &res)?;
        let tidx = create_index_file(&storage, &dir.join(filename::time_index_file_name(base_offset)), &res)?;
        let offset_index =
            OffsetIndex::create_in(&res.arena, base_offset, settings.segment_index_bytes, Some(idx.clone()))?;
        let time_index =
            TimeIndex::create_in(&res.arena, base_offset, settings.segment_index_bytes, Some(tidx.clone()))?;
        Ok(ActiveSegment::assemble(
            Segment {
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
                dense_index: IndexDensity::dense(),
            },
            file,
            tail,
            storage,
            settings,
            now_ms,
            roll_jitter_ms,
        ))
    }

    /// An active segment over `seg`, its `.log` `file` and the `tail` around it, with a fresh
    /// byte counter (Kafka starts a reopened segment's counter at zero too, so that index files
    /// stay identical to Kafka's across restarts) and nothing in flight.
    pub(super) fn assemble(
        seg: Segment,
        file: Arc<dyn IoFile>,
        tail: Arc<TailFile>,
        storage: Arc<dyn Storage>,
        settings: SegmentSettings,
        now_ms: i64,
        roll_jitter_ms: i64,
    ) -> ActiveSegment {
        let index_rule = IndexInterval::new(seg.index_interval_bytes as u64);
        // The index files are written only when the segment is sealed or flushed: until then an
        // idle partition holds no descriptor for them (10,000 partitions would hold 20,000 more).
        for f in [seg.offset_index.file(), seg.time_index.file()].into_iter().flatten() {
            f.close_if_idle();
        }
        let held = seg.res.files.hold();
        ActiveSegment {
            _held: held,
            seg,
            file,
            tail,
            storage,
            index_rule,
            rolling_based_timestamp: None,
            created_ms: now_ms,
            roll_jitter_ms,
            settings,
            zero: ZeroFillState::default(),
            length_ahead: 0,
        }
    }

    /// Kafka's `LogSegment.append`: writes `records` (whole, already validated batches, whose
    /// headers are `batches`) at the end of the log, then applies the index rule per batch
    /// ([`IndexInterval`]): an entry `(batch last offset, batch start position)` when more than
    /// `index.interval.bytes` went by since the last entry, checked before the batch is counted.
    /// The time index gets
    /// `(max timestamp so far, last offset of the batch holding it)` at the same moments, if the
    /// timestamp grew.
    pub(crate) fn append(&mut self, records: &[u8], batches: &[batch::BatchHeader]) -> Result<()> {
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
            if self.index_rule.is_due() {
                self.seg.offset_index.append(b.last_offset(), physical_position);
                let m = self.seg.max_timestamp_so_far;
                self.seg.time_index.maybe_append(m.timestamp, m.offset, false);
                self.index_rule.entry_written();
            } else if physical_position > 0 {
                self.seg.dense_index.set_sparse();
            }
            let size = b.size_in_bytes() as u32;
            physical_position += size;
            self.index_rule.count(size as u64);
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
    pub(crate) fn should_roll(
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
    pub(crate) fn index_entries_needed(&self, batches: &[batch::BatchHeader]) -> usize {
        entries_needed(self.index_rule, batches)
    }

    /// True when a new, empty segment's indexes could take the entries appending `batches` to it
    /// would add (what a roll makes room for).
    pub(crate) fn fits_new_segment(&self, batches: &[batch::BatchHeader]) -> bool {
        let n = entries_needed(IndexInterval::new(self.index_rule.interval_bytes()), batches);
        n == 0 || (n <= self.seg.offset_index.max_entries() && n < self.seg.time_index.max_entries())
    }

    /// True when both indexes can take `entries` more entries (the time index keeps its last slot
    /// for the entry written at roll).
    pub(crate) fn has_index_room(&self, entries: usize) -> bool {
        entries == 0
            || (self.seg.offset_index.entries() + entries <= self.seg.offset_index.max_entries()
                && self.seg.time_index.entries() + entries < self.seg.time_index.max_entries())
    }

    /// Kafka's `LogSegment.truncateTo`: removes every batch holding an offset `>= offset` (a
    /// batch that straddles `offset` goes whole, as in Kafka), from the indexes, the memory tail
    /// and the file. Returns the bytes removed and the offset the segment now ends before.
    pub(crate) fn truncate_to(&mut self, offset: i64, now_ms: i64) -> Result<(u64, i64)> {
        assert_eq!(self.tail.writes_in_flight(), 0, "truncating a segment with a data write in flight");
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
        if self.length_ahead != u64::MAX {
            self.length_ahead = 0;
        }
        if self.seg.size == 0 {
            self.created_ms = now_ms;
            self.rolling_based_timestamp = None;
        }
        self.index_rule = IndexInterval::new(self.index_rule.interval_bytes());
        self.seg.max_timestamp_so_far =
            TimestampOffset { timestamp: batch::NO_TIMESTAMP, offset: self.seg.base_offset };
        self.seg.reload_max_timestamp()?;
        Ok((removed, cut_base.max(self.seg.base_offset)))
    }

    /// Kafka's `timeWaitedForRoll`: by the first batch's timestamp when it has one, else by wall
    /// clock since the segment was created.
    pub(crate) fn time_waited_for_roll(&mut self, now_ms: i64, message_timestamp: i64) -> Result<i64> {
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

    /// Sets the roll jitter (a log draws it once it exists, after loading its active segment).
    pub(crate) fn set_roll_jitter_ms(&mut self, jitter_ms: i64) {
        self.roll_jitter_ms = jitter_ms;
    }

    /// The writes (and, with `sync`, the fdatasync) that put the appended bytes `span` names in
    /// the file, straight from the tail's memory: one write per tail chunk they touch (usually
    /// one). With `sync` they are linked in a chain ending in the fdatasync, which so runs only
    /// after all of them succeeded; an fdatasync covers only writes already done, so `sync`
    /// takes none while others are in flight (a caller bug). Empty when there is nothing to do,
    /// or when the newest write in flight ends inside a block ([`TailFile::prepare_write`]).
    /// Complete each batch, in the order taken, with [`ActiveSegment::complete_writes`].
    pub(crate) fn take_writes(&mut self, tag: u64, sync: bool, span: WriteSpan) -> Vec<IoOp> {
        let none_in_flight = self.tail.writes_in_flight() == 0;
        assert!(!sync || none_in_flight, "an fdatasync taken with data writes in flight would not cover them");
        let mut ops = self.tail.prepare_write(self.file.clone(), tag, span);
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
        if self.zero.in_flight.as_ref().is_some_and(|z| z.meta().0 < data_end) {
            self.settle_zero_fill();
        }
        if none_in_flight && data_end > 0 {
            self.keep_length_ahead(data_end);
        }
        if sync {
            for w in &mut ops {
                w.link_next = true;
            }
            ops.push(IoOp { file: self.file.clone(), kind: IoOpKind::SyncData, tag, link_next: false });
        }
        ops
    }

    /// In direct mode without preallocation, keeps the `.log`'s length (sparse: no blocks
    /// reserved) between half of [`SegmentSettings::length_lead_bytes`] and all of it past `end`,
    /// where the data writes just taken end (on a block boundary), so that they land inside the
    /// file's size, once per half a lead of appends. ext4
    /// hands an O_DIRECT write that extends the file to an io-wq worker that waits for the
    /// device and then updates the size; a write inside the size skips both (one into a hole
    /// still allocates its blocks on a worker). Kafka's `preallocate` sets the length the same
    /// way, to `segment.bytes` (which for ten thousand partitions would show ten thousand files
    /// of that length); here it stops there too. Like preallocated space, the length past the
    /// data is cut at seal and close, and after a crash recovery cuts the zeros as a torn tail.
    ///
    /// With zero fill on, only while no zeros lie ahead of the data and no refill is taken or in
    /// flight: a partition whose appends queue takes no refill beside other partitions' writes
    /// (alone, a small one: `BUSY_ZERO_FILL_LEAD` in the shard), and its durable writes then
    /// land inside the size instead of extending the file (docs/benchmarks.md, "Busy
    /// partitions' writes inside the file's size"). A refill that failed leaves `zeroed_to`
    /// where it was, so a new length may cut what it wrote past the data: zeros only, and zero
    /// fill is off for the segment from then on.
    ///
    /// Called only when data writes were taken and none of the file's was in flight before: a
    /// size change waits for the file's O_DIRECT writes in flight (`inode_dio_wait`), which
    /// would stall the shard, and an idle flush or close has nothing to put inside the size.
    /// Best effort: a failed `ftruncate` leaves the appends extending the file, as without this.
    fn keep_length_ahead(&mut self, end: u64) {
        let lead = self.settings.length_lead_bytes as u64;
        // `u64::MAX` (off) passes this test too.
        if end + lead / 2 <= self.length_ahead
            || lead == 0
            || self.settings.preallocate_bytes > 0
            || self.zero.zeroed_to > end
            || self.zero.pending.is_some()
            || self.zero.in_flight.is_some()
            || self.file.direct_alignment().is_none()
        {
            return;
        }
        let target = (end + lead).min(self.settings.segment_bytes as u64);
        if target <= end || target <= self.length_ahead {
            // At `segment.bytes` already: the segment's last writes are inside it.
            return;
        }
        self.length_ahead = match self.file.set_len(target) {
            Ok(()) => target,
            Err(_) => u64::MAX,
        };
    }

    /// Sets how far past its data the `.log`'s length is kept from the next move on
    /// ([`SegmentSettings::length_lead_bytes`]).
    pub(crate) fn set_length_lead_bytes(&mut self, bytes: u32) {
        self.settings.length_lead_bytes = bytes;
    }

    /// Applies the outcome of the writes of [`ActiveSegment::take_writes`] (possibly turned into
    /// RWF_DSYNC writes without the fdatasync), however they were submitted; the first error is
    /// returned. The tail counts its bytes as written only when every write succeeded, and as
    /// durable after a successful fdatasync or when every write was an RWF_DSYNC one. A batch
    /// the storage lost ([`AsyncOutcome::Lost`]) is a failed write: its bytes are not known to
    /// be in the file.
    pub(crate) fn complete_writes(&mut self, outcome: AsyncOutcome) -> Result<()> {
        let completions = match outcome {
            AsyncOutcome::Done(done) => done,
            AsyncOutcome::Lost => {
                self.tail.complete_write(false);
                return Err(Error::io(
                    "write",
                    self.file.path(),
                    std::io::Error::other("asynchronous write batch lost by the storage"),
                ));
            }
        };
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
    pub(crate) fn written_is_synced(&self) -> bool {
        self.tail.written_is_synced()
    }

    /// Writes every appended byte to the file (one submission), with an fdatasync when `sync`.
    /// The caller has completed any write of [`ActiveSegment::take_writes`] first (the log
    /// settles its writes in flight before anything but an append touches the segment).
    pub(crate) fn write_pending(&mut self, sync: bool) -> Result<()> {
        let ops = self.take_writes(0, sync, WriteSpan::All);
        if ops.is_empty() {
            return Ok(());
        }
        let done = self.storage.submit(ops);
        self.complete_writes(AsyncOutcome::Done(done))
    }

    /// See [`TailFile::set_cache_bytes`].
    pub(crate) fn set_tail_cache_bytes(&mut self, bytes: u64) {
        self.settings.tail_cache_bytes = bytes;
        self.tail.set_cache_bytes(bytes);
    }

    /// The `.log` file under the in-memory tail.
    pub(crate) fn log_file_inner(&self) -> &Arc<dyn IoFile> {
        &self.file
    }

    /// The tail's counters.
    #[cfg(test)]
    pub(crate) fn tail_stats(&self) -> super::tail::TailStats {
        self.tail.stats()
    }

    /// Appended bytes not yet handed to the kernel.
    pub(crate) fn unwritten_bytes(&self) -> u64 {
        self.tail.unwritten()
    }

    /// Writes pending index entries and every appended byte, and makes the log's data durable.
    pub(crate) fn flush(&mut self) -> Result<()> {
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
    pub(crate) fn seal(&mut self) -> Result<()> {
        self.finish()
    }

    /// The sealed segment, after a successful [`ActiveSegment::seal`].
    pub(crate) fn into_sealed(mut self) -> SealedSegment {
        // The descriptor moves into the cache: counted there from now on, not twice.
        drop(self._held);
        let lf = LazyFile::adopt(self.storage.clone(), self.file, Reopen::Log, &self.seg.res.files);
        self.seg.log = lf.clone();
        self.seg.lazy_log = Some(lf);
        self.seg.storage = Some(self.storage);
        self.seg.seal_indexes();
        SealedSegment { seg: self.seg }
    }

    /// Everything [`ActiveSegment::seal`] and [`ActiveSegment::close`] write.
    fn finish(&mut self) -> Result<()> {
        // The file is about to be cut to its data: its last write needs no length ahead (and
        // after a failed seal the segment, failed too, takes none).
        self.length_ahead = u64::MAX;
        self.settle_zero_fill();
        self.write_pending(false)?;
        let m = self.seg.max_timestamp_so_far;
        self.seg.time_index.maybe_append(m.timestamp, m.offset, true);
        self.seg.offset_index.trim_to_valid_size()?;
        self.seg.time_index.trim_to_valid_size()?;
        if self.file.len()? != self.seg.size as u64 {
            self.file.set_len(self.seg.size as u64)?;
        }
        // The three fdatasync's at once: one after the other they were about a third of a roll,
        // which every partition of the shard waits for.
        let files: Vec<&Arc<dyn IoFile>> =
            std::iter::once(&self.file).chain(self.seg.offset_index.file()).chain(self.seg.time_index.file()).collect();
        crate::io::sync_data_together(self.storage.as_ref(), &files)
    }

    /// What a clean close leaves on disk: the same as sealing (Kafka's `close` appends the final
    /// time-index entry and trims), but the segment stays the active one on the next open.
    pub(crate) fn close(mut self) -> Result<()> {
        self.finish()
    }

    /// Turns this segment into a plain [`Segment`] after writing what is buffered (for
    /// truncation paths and reopening).
    pub(crate) fn into_segment(mut self) -> Result<Segment> {
        self.write_out()?;
        self.seg.log = self.file;
        Ok(self.seg)
    }

    /// What [`ActiveSegment::into_segment`] writes, on `&mut self`: a caller that must keep the
    /// segment when this fails calls it first, and `into_segment` then has nothing left to fail.
    pub(crate) fn write_out(&mut self) -> Result<()> {
        self.settle_zero_fill();
        self.write_pending(false)
    }
}

#[cfg(test)]
mod length_ahead_tests {
    use std::sync::Arc;

    use crate::config::LogConfig;
    use crate::format::builder::BatchBuilder;
    use crate::io::sim::SimStorage;
    use crate::log::{Log, LogOptions};

    const LOG: &str = "/data/t-0/00000000000000000000.log";

    fn open(sim: &SimStorage, segment_bytes: u32) -> Log {
        let config = LogConfig { segment_bytes, ..LogConfig::default() };
        Log::open("/data/t-0", LogOptions { storage: Arc::new(sim.clone()), config, ..LogOptions::default() }).unwrap()
    }

    /// Appends `n` batches of about 1 KB; returns their bytes.
    fn append(log: &mut Log, n: usize) -> u64 {
        let mut bytes = 0;
        for i in 0..n {
            let mut b = BatchBuilder::new();
            b.push(1_700_000_000_000 + i as i64, None, Some(&[7u8; 1000][..]), &[]);
            let mut b = b.build().unwrap();
            bytes += b.len() as u64;
            log.append_as_leader(&mut b, 0).unwrap();
        }
        bytes
    }

    /// Appends of about two leads: the length moves 3 to 5 times and ends between half a lead and
    /// a lead past the data.
    fn moves_per_two_leads(sim: &SimStorage, log: &mut Log, lead: u64) -> u64 {
        let mut data = log.active_segment().size() as u64;
        let before = sim.counters().set_lens;
        data += append(log, (2 * lead / 1_000) as usize);
        let calls = sim.counters().set_lens - before;
        assert!((3..=5).contains(&calls), "{calls} length changes for {data} bytes with a lead of {lead}");
        let len = sim.file_len(LOG).unwrap();
        let end = data.div_ceil(512) * 512;
        assert!(len >= end + lead / 2 && len <= end + lead, "{len} for {data} with a lead of {lead}");
        data
    }

    /// One `ftruncate` per half a lead of appended bytes (16 MiB by default, another once set),
    /// none for an idle flush or close, and none per write in a segment's last half lead (the
    /// length is at `segment.bytes` there).
    #[test]
    fn the_length_moves_ahead_once_per_half_lead() {
        let sim = SimStorage::with_direct_alignment(512);
        let mut log = open(&sim, 1 << 30);
        append(&mut log, 1);
        moves_per_two_leads(&sim, &mut log, crate::segment::DEFAULT_LENGTH_LEAD as u64);
        // A lead set smaller (a shard's share): the length already ahead stays, and moves by
        // the new lead once the data is within half of it.
        log.set_length_lead_bytes(1 << 20);
        let len = sim.file_len(LOG).unwrap();
        append(&mut log, 100);
        assert_eq!(sim.file_len(LOG), Some(len), "a length further ahead than the new lead stays");
        append(&mut log, (crate::segment::DEFAULT_LENGTH_LEAD / 1_000) as usize);
        let data = moves_per_two_leads(&sim, &mut log, 1 << 20);
        let before = sim.counters().set_lens;
        log.flush().unwrap();
        assert_eq!(sim.counters().set_lens - before, 0, "an idle flush changes no length");
        log.close().unwrap();
        let close = sim.counters().set_lens - before;
        assert_eq!(sim.file_len(LOG), Some(data));
        // The same close through the page cache (the index trims): one length change less.
        let buffered = SimStorage::new();
        let mut log = open(&buffered, 1 << 30);
        append(&mut log, 2_001);
        log.flush().unwrap();
        let before = buffered.counters().set_lens;
        log.close().unwrap();
        assert_eq!(close, buffered.counters().set_lens - before + 1, "a close cuts the length once");
        // Reopened, the segment has no length ahead yet: an idle flush and close still add none.
        let mut log = open(&sim, 1 << 30);
        let before = sim.counters().set_lens;
        log.flush().unwrap();
        assert_eq!(sim.counters().set_lens - before, 0, "an idle flush after a reopen changes no length");
        log.close().unwrap();
        assert_eq!(sim.file_len(LOG), Some(data));

        // 768 KiB segments: the length stops at segment.bytes and stays there.
        let sim = SimStorage::with_direct_alignment(512);
        let mut log = open(&sim, 768 << 10);
        append(&mut log, 1);
        let before = sim.counters().set_lens;
        append(&mut log, 2_000);
        let segments = log.segment_infos().len() as u64;
        let calls = sim.counters().set_lens - before;
        assert!(segments >= 3 && calls <= 8 * segments, "{calls} length changes over {segments} segments");
        assert!(sim.file_len(LOG).unwrap() <= 768 << 10);

        // A lead set on the log holds for the segments rolled after it: 128 KiB moves the length
        // once per 64 KiB of appends, where the default would move it once a segment.
        let sim = SimStorage::with_direct_alignment(512);
        let mut log = open(&sim, 768 << 10);
        log.set_length_lead_bytes(128 << 10);
        let before = sim.counters().set_lens;
        let data = append(&mut log, 2_000);
        let segments = log.segment_infos().len() as u64;
        let calls = sim.counters().set_lens - before;
        assert!(segments >= 3 && calls >= data / (96 << 10), "{calls} length changes over {segments} segments");
    }

    /// With zero fill, the length moves only while no zeros lie ahead of the data: a lead that
    /// refills as the data goes (here always: the simulated disk completes the zeros at once)
    /// leaves it to the zeros after the segment's first write.
    #[test]
    fn zeros_ahead_keep_the_length_where_they_end() {
        let sim = SimStorage::with_direct_alignment(512);
        let options = LogOptions {
            storage: Arc::new(sim.clone()),
            config: LogConfig { segment_bytes: 1 << 30, ..LogConfig::default() },
            zero_fill_bytes: 1 << 20,
            ..LogOptions::default()
        };
        let mut log = Log::open("/data/t-0", options).unwrap();
        let before = sim.counters().set_lens;
        let data = append(&mut log, 2_000);
        log.flush().unwrap();
        assert!(log.zero_fill_stats().fills >= 3, "{:?}", log.zero_fill_stats());
        let calls = sim.counters().set_lens - before;
        assert!(calls <= 1, "{calls} length changes for {data} bytes with zeros ahead");
    }

    /// Through the page cache the file's length is its data's.
    #[test]
    fn the_length_stays_with_the_data_when_not_direct() {
        let sim = SimStorage::new();
        let mut log = open(&sim, 1 << 30);
        let data = append(&mut log, 100);
        log.flush().unwrap();
        assert_eq!(sim.file_len(LOG), Some(data));
    }
}
