//! Changes to a log other than appends: truncation (a follower whose log diverged), moving the
//! log start offset (DeleteRecords), retention by time and size, and Kafka's two-phase segment
//! deletion: rename the files to `.deleted`, unlink them after `file.delete.delay.ms`.

use std::path::PathBuf;

use super::Log;
use crate::error::{Error, Result};
use crate::format::filename;
use crate::segment::{ActiveSegment, Segment};

/// Files renamed `.deleted`, to unlink once `due_ms` has passed.
#[derive(Debug)]
pub(crate) struct PendingDelete {
    pub(crate) due_ms: i64,
    pub(crate) paths: Vec<PathBuf>,
}

/// What a retention pass removed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RetentionReport {
    /// Base offsets of the segments removed, with the rule that removed them.
    pub deleted: Vec<(i64, &'static str)>,
    pub log_start_offset: i64,
}

impl Log {
    /// Kafka's `truncateTo`: removes every offset `>= target` (a batch straddling it goes whole).
    /// Later segments are deleted (two-phase), the segment holding `target` becomes the active
    /// one, the leader-epoch cache is truncated, and the high watermark and recovery point drop
    /// to the new end. Returns false (and changes nothing) when `target >= log end`.
    pub fn truncate_to(&mut self, target: i64) -> Result<bool> {
        self.settle_writes();
        self.check_not_failed()?;
        if target < 0 {
            return Err(Error::InvalidConfig(format!("cannot truncate to a negative offset {target}")));
        }
        if target >= self.log_end_offset {
            return Ok(false);
        }
        let first_base = self.segments().next().map(|s| s.base_offset()).unwrap_or(0);
        if target < first_base {
            self.truncate_fully_and_start_at(target)?;
            return Ok(true);
        }
        let now = self.clock.now_ms();
        // Segments wholly past the target go.
        let active_base = self.active_segment().base_offset();
        let floor_base = self.floor_segment(target).map(|s| s.base_offset()).unwrap_or(first_base);
        if active_base > floor_base {
            let r = self.active_mut().write_out();
            self.guard(r)?;
            // Newest first, so that whatever prefix of these renames survives a crash removes a
            // suffix of the log, never a segment in the middle. The old active segment stays the
            // active one (its open files still read, renamed or not) until the floor segment
            // replaces it: a failure on the way leaves the log failed, never without one.
            self.schedule_delete_files(active_base, now)?;
            let later: Vec<i64> = self.sealed.range(floor_base + 1..).rev().map(|(b, _)| *b).collect();
            for b in later {
                let seg = self.sealed.remove(&b).expect("listed").into_segment();
                self.schedule_delete(seg, now)?;
            }
            // The later segments are durably gone before the floor segment is cut, so a crash in
            // between cannot leave a hole (cut data below, old data above).
            let r = self.storage.sync_dir(&self.dir);
            self.guard(r)?;
            let settings = self.settings();
            let jitter = self.next_jitter();
            let floor = self.sealed.remove(&floor_base).expect("floor segment").into_segment();
            match floor.into_active(self.storage.clone(), settings, now, jitter) {
                Ok(a) => drop(self.active.replace(a)),
                Err(e) => {
                    // The floor's files are as they were: load it again, as at open.
                    if let Ok((seg, _)) =
                        Segment::open_lazy(self.storage.clone(), &self.dir, floor_base, settings, &self.resources)
                    {
                        self.sealed.insert(floor_base, seg.into_sealed());
                    }
                    self.failed.get_or_insert_with(|| e.to_string());
                    return Err(e);
                }
            }
        }
        let r = self.active_mut().truncate_to(target, now);
        let (_, new_end) = self.guard(r)?;
        // The cut is durable when truncate_to returns: nothing truncated comes back.
        let r = self.active_mut().flush();
        self.guard(r)?;
        self.log_end_offset = new_end;
        self.all_written(new_end);
        self.high_watermark = self.high_watermark.min(new_end);
        self.recovery_point = self.recovery_point.min(new_end);
        self.log_start_offset = self.log_start_offset.min(new_end);
        let r = self.epochs.truncate_from_end(new_end);
        self.guard(r)?;
        // The producers as of the new end: from the newest snapshot at or below it (later ones
        // deleted) and the batches after it, so nothing cut is taken for a duplicate.
        let r = self.truncate_txn_indexes(new_end);
        self.guard(r)?;
        let r = self.rebuild_producer_state(false, &Default::default());
        self.guard(r)?;
        let r = self.storage.sync_dir(&self.dir);
        self.guard(r)?;
        Ok(true)
    }

    /// Deletes every segment and starts an empty log at `offset` (Kafka's
    /// `truncateFullyAndStartAt`).
    pub fn truncate_fully_and_start_at(&mut self, offset: i64) -> Result<()> {
        self.settle_writes();
        self.check_not_failed()?;
        // The producer snapshots go first, so that the directory fsync below makes their removal
        // durable: none may come back over the new log's offsets.
        let r = self.delete_producer_snapshots(..);
        self.guard(r)?;
        let now = self.clock.now_ms();
        let r = self.active_mut().write_out();
        self.guard(r)?;
        let sealed: Vec<i64> = self.sealed.keys().copied().collect();
        for b in sealed {
            let seg = self.sealed.remove(&b).expect("listed").into_segment();
            self.schedule_delete(seg, now)?;
        }
        // The old active segment stays the active one (its open files still read, renamed or
        // not) until the new one exists: a failure leaves the log failed, never without one.
        let old_base = self.active_segment().base_offset();
        self.schedule_delete_files(old_base, now)?;
        let settings = self.settings();
        let jitter = self.next_jitter();
        let r = ActiveSegment::create(self.storage.clone(), &self.dir, offset, settings, &self.resources, now, jitter);
        let new_active = self.guard(r)?;
        drop(self.active.replace(new_active));
        let r = self.storage.sync_dir(&self.dir);
        self.guard(r)?;
        self.log_start_offset = offset;
        self.log_end_offset = offset;
        self.all_written(offset);
        self.high_watermark = offset;
        self.recovery_point = offset;
        self.producers.truncate_fully_and_start_at(offset);
        self.txn.clear();
        self.txn_cache.clear();
        let r = self.epochs.truncate_from_end(i64::MIN);
        self.guard(r)?;
        Ok(())
    }

    /// Kafka's DeleteRecords: moves the log start offset up to `offset` (which must not pass the
    /// high watermark) and deletes segments wholly below it. Returns the new log start offset.
    pub fn delete_records(&mut self, offset: i64) -> Result<i64> {
        self.check_not_failed()?;
        if offset > self.high_watermark || offset < 0 {
            return Err(Error::OffsetOutOfRange {
                offset,
                log_start_offset: self.log_start_offset,
                log_end_offset: self.high_watermark,
            });
        }
        if offset > self.log_start_offset {
            self.log_start_offset = offset;
            let r = self.epochs.truncate_from_start(offset);
            self.guard(r)?;
        }
        let now = self.clock.now_ms();
        self.delete_segments_while(now, "log start offset", |_, next, _| next.is_some_and(|n| n <= offset))?;
        Ok(self.log_start_offset)
    }

    /// One retention pass (Kafka's `deleteOldSegments`), which also forgets producers idle for
    /// `producer_id_expiration_ms`: segments whose largest timestamp is
    /// older than `retention.ms` (file modification time when a segment has no timestamps), then
    /// the oldest segments while the log is over `retention.bytes`, then segments wholly below
    /// the log start offset. Never past the high watermark; if every segment would go, the log
    /// rolls first so that an empty active segment remains.
    pub fn apply_retention(&mut self) -> Result<RetentionReport> {
        self.check_not_failed()?;
        let now = self.clock.now_ms();
        self.expire_producers(now);
        let mut report = RetentionReport::default();
        let retention_ms = self.config.retention_ms;
        if retention_ms >= 0 {
            let d = self.delete_segments_while(now, "retention.ms", move |seg, _, _| {
                seg.largest_timestamp().map(|ts| now.saturating_sub(ts) > retention_ms).unwrap_or(false)
            })?;
            report.deleted.extend(d.into_iter().map(|b| (b, "retention.ms")));
        }
        let retention_bytes = self.config.retention_bytes;
        if retention_bytes >= 0 {
            let size = self.size_in_bytes() as i64;
            if size >= retention_bytes {
                let mut diff = size - retention_bytes;
                let d = self.delete_segments_while(now, "retention.bytes", move |seg, _, _| {
                    if diff - seg.size() as i64 >= 0 {
                        diff -= seg.size() as i64;
                        true
                    } else {
                        false
                    }
                })?;
                report.deleted.extend(d.into_iter().map(|b| (b, "retention.bytes")));
            }
        }
        let start = self.log_start_offset;
        let d =
            self.delete_segments_while(now, "log start offset", move |_, next, _| next.is_some_and(|n| n <= start))?;
        report.deleted.extend(d.into_iter().map(|b| (b, "log start offset")));
        self.delete_expired_files()?;
        report.log_start_offset = self.log_start_offset;
        Ok(report)
    }

    /// Deletes the oldest segments while `pred(segment, next segment's base, log end)` holds,
    /// stopping at the first that does not, at one whose offsets reach the high watermark, and at
    /// an empty last segment (Kafka's `deletableSegments` + `deleteSegments`).
    fn delete_segments_while(
        &mut self,
        now: i64,
        _reason: &'static str,
        mut pred: impl FnMut(&Segment, Option<i64>, i64) -> bool,
    ) -> Result<Vec<i64>> {
        let bases: Vec<i64> = self.segments().map(|s| s.base_offset()).collect();
        let mut deletable = Vec::new();
        for (i, &b) in bases.iter().enumerate() {
            let next = bases.get(i + 1).copied();
            let seg = self.segments().nth(i).expect("listed");
            let upper = next.unwrap_or(self.log_end_offset);
            let last_and_empty = next.is_none() && seg.size() == 0;
            if pred(seg, next, self.log_end_offset) && self.high_watermark >= upper && !last_and_empty {
                deletable.push(b);
            } else {
                break;
            }
        }
        if deletable.is_empty() {
            return Ok(deletable);
        }
        if deletable.len() == bases.len() {
            // Never delete the active segment: roll so that an empty one takes its place.
            let end = self.log_end_offset;
            self.roll(Some(end))?;
        }
        for b in &deletable {
            let seg = self.sealed.remove(b).expect("sealed after the roll").into_segment();
            self.schedule_delete(seg, now)?;
        }
        let r = self.storage.sync_dir(&self.dir);
        self.guard(r)?;
        let first = self.segments().next().map(|s| s.base_offset()).unwrap_or(self.log_end_offset);
        if first > self.log_start_offset {
            self.log_start_offset = first;
            let r = self.epochs.truncate_from_start(first);
            self.guard(r)?;
        }
        // Producer snapshots below the first segment left can never be replayed from: they go
        // with the segments (the producers stay, as in Kafka, until they expire).
        self.forget_txn_indexes_below(first);
        let r = self.delete_producer_snapshots(..first);
        self.guard(r)?;
        Ok(deletable)
    }

    /// First phase of deletion: renames the segment's files to `.deleted` and schedules their
    /// unlinking after `file.delete.delay.ms` (unlinked at once when the delay is 0).
    fn schedule_delete(&mut self, seg: Segment, now: i64) -> Result<()> {
        let base = seg.base_offset();
        drop(seg);
        self.schedule_delete_files(base, now)
    }

    /// Renames segment `base`'s files to `.deleted` (see [`Log::schedule_delete`]) whether or
    /// not a segment object still holds them open.
    fn schedule_delete_files(&mut self, base: i64, now: i64) -> Result<()> {
        let dir = self.dir.clone();
        let mut paths = Vec::new();
        for name in [
            filename::log_file_name(base),
            filename::index_file_name(base),
            filename::time_index_file_name(base),
            filename::txn_index_file_name(base),
        ] {
            let from = dir.join(&name);
            if self.storage.exists(&from) {
                let to = dir.join(format!("{name}{}", filename::DELETED_FILE_SUFFIX));
                let r = self.storage.rename(&from, &to);
                self.guard(r)?;
                paths.push(to);
            }
        }
        self.pending_deletes
            .push(PendingDelete { due_ms: now.saturating_add(self.config.file_delete_delay_ms), paths });
        if self.config.file_delete_delay_ms == 0 {
            self.delete_expired_files()?;
        }
        Ok(())
    }

    /// Second phase: unlinks `.deleted` files whose delay has passed. Returns how many went.
    pub fn delete_expired_files(&mut self) -> Result<usize> {
        let now = self.clock.now_ms();
        let mut n = 0;
        let mut keep = Vec::new();
        for p in std::mem::take(&mut self.pending_deletes) {
            if p.due_ms <= now {
                for path in &p.paths {
                    if self.storage.exists(path) {
                        self.storage.remove_file(path)?;
                        n += 1;
                    }
                }
            } else {
                keep.push(p);
            }
        }
        self.pending_deletes = keep;
        if n > 0 {
            self.storage.sync_dir(&self.dir)?;
        }
        Ok(n)
    }

    /// Files waiting for their deletion delay.
    pub fn pending_deletions(&self) -> usize {
        self.pending_deletes.iter().map(|p| p.paths.len()).sum()
    }

    /// Leaves the writes of `leader-epoch-checkpoint` to the caller, who brings the file up to
    /// date off the append path ([`Log::epoch_checkpoint_write`], then
    /// [`Log::epoch_checkpoint_written`]) and records [`Log::checkpointed_recovery_point`] as
    /// the recovery point (see `log::epoch`). The engine's shards do.
    pub(crate) fn defer_epoch_checkpoint(&mut self) {
        self.epochs.defer();
    }

    /// True when `leader-epoch-checkpoint` lacks a change (only while deferred).
    pub(crate) fn epoch_checkpoint_behind(&self) -> bool {
        self.epochs.behind()
    }

    /// The write that brings `leader-epoch-checkpoint` up to date, if it is not.
    pub(crate) fn epoch_checkpoint_write(&self) -> Option<crate::log::epoch::EpochCheckpointWrite> {
        self.epochs.pending()
    }

    /// The write of `version` ([`Log::epoch_checkpoint_write`]) is in the file, made durable.
    pub(crate) fn epoch_checkpoint_written(&mut self, version: u64) {
        self.epochs.written(version);
    }

    /// A deferred write of `leader-epoch-checkpoint` failed: the log fails, as it does when a
    /// write of its own fails, and the appends not yet written go (their callers are told they
    /// failed); what is written stays. Its recovery point for the checkpoint stays below where
    /// the file may differ, so recovery sets the file right from the batches.
    pub(crate) fn epoch_checkpoint_failed(&mut self, reason: String) {
        self.settle_writes();
        self.failed.get_or_insert(reason);
        self.roll_back_unwritten();
    }

    /// The recovery point to record in `recovery-point-offset-checkpoint`: [`Log::recovery_point`],
    /// but never past the start of a leader epoch that `leader-epoch-checkpoint` lacks (only
    /// while its writes are deferred), so that recovery after a crash meets that epoch's batches
    /// again.
    pub(crate) fn checkpointed_recovery_point(&self) -> i64 {
        self.epochs.unpersisted_from().map_or(self.recovery_point, |o| o.min(self.recovery_point))
    }

    /// The leader-epoch cache's entries, `(epoch, start offset)`.
    pub fn leader_epochs(&self) -> &[(i32, i64)] {
        self.epochs.entries()
    }

    /// Kafka's `endOffsetForEpoch`: see `super::epoch::LeaderEpochCache::end_offset_for`.
    pub fn end_offset_for_epoch(&self, epoch: i32) -> Option<(i32, i64)> {
        self.epochs.end_offset_for(epoch, self.log_end_offset)
    }
}
