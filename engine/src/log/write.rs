//! The write pipeline: the writes taken from the active segment's tail (by the log itself under
//! [`Writes::Async`], by the caller under [`Writes::Caller`], waited for under
//! [`Writes::Through`]), their completions claimed in order and applied, settled before anything
//! but an append touches the segment, and the roll back of a write that failed.

use super::*;
use crate::io::{AsyncIo, InFlight, IoOp, IoOpKind};
use crate::segment::{RefillPace, WriteSpan};

impl Log {
    /// The writes (and, with `sync`, fdatasync) that put this log's appended bytes in its file,
    /// for a caller that submits many logs' I/O at once ([`Writes::Caller`]). Hand them back,
    /// submitted, with [`Log::writes_started`] (or run them and pass their completions to
    /// [`Log::complete_writes`]) before the log is changed again: a flush, a roll (an append that
    /// rolls included), a truncation, a close or another `take_writes` in between is a caller
    /// bug and panics.
    pub fn take_writes(&mut self, tag: u64, sync: bool) -> Result<Vec<IoOp>> {
        self.settle_writes();
        self.check_not_failed()?;
        // Index entries are not written here, not even for a durable turn: the active segment
        // holds the recovery point, so after a crash it is always revalidated and its indexes
        // rebuilt; they reach the files at seal, close and explicit flush. Writing them each turn
        // doubled the I/Os of Durability::EveryBatch (and drove its fdatasync latency).
        let ops = self.active_mut().take_writes(tag, sync, WriteSpan::All);
        self.taken = ops.iter().any(|o| matches!(o.kind, IoOpKind::Write { .. }));
        Ok(ops)
    }

    /// The zero writes that keep the active segment's zeroed lead
    /// ([`LogOptions::zero_fill_bytes`]), to submit after the turn's data writes as a batch of
    /// their own; hand the result to [`Log::zero_fill_started`]. Empty when none are due. The
    /// writes are independent (up to 1 MiB each), for a log that has the device to itself; the
    /// engine's shard paces a refill beside other partitions' writes.
    pub fn take_zero_fill(&mut self, tag: u64) -> Vec<IoOp> {
        self.take_zero_fill_within(tag, u64::MAX, RefillPace::Burst)
    }

    /// [`Log::take_zero_fill`] with the lead capped at `max_lead` for this refill (a shard's busy
    /// partition), its writes issued as `pace` says (paced beside other partitions' writes, of a
    /// small lead whatever `max_lead`).
    pub(crate) fn take_zero_fill_within(&mut self, tag: u64, max_lead: u64, pace: RefillPace) -> Vec<IoOp> {
        if self.failed.is_some() {
            return Vec::new();
        }
        self.active_mut().take_zero_fill(tag, max_lead, pace)
    }

    /// What zero fill did in the active segment so far.
    pub fn zero_fill_stats(&self) -> crate::segment::ZeroFillStats {
        self.active_segment().zero_fill_stats()
    }

    /// Sets the zero-fill lead ([`LogOptions::zero_fill_bytes`]) of the active segment and of
    /// the segments rolled after it: an engine shard shares one lead among its partitions.
    pub fn set_zero_fill_bytes(&mut self, bytes: u32) {
        self.zero_fill_bytes = bytes;
        self.active_mut().set_zero_fill_bytes(bytes);
    }

    /// Sets how far past its data the active segment's O_DIRECT `.log` length is kept
    /// ([`LogOptions::length_lead_bytes`]), and the same for the segments rolled after it: an
    /// engine shard shares one budget among its partitions. A length already further ahead
    /// stays; the next move is judged by the new lead.
    pub fn set_length_lead_bytes(&mut self, bytes: u32) {
        self.length_lead_bytes = bytes;
        self.active_mut().set_length_lead_bytes(bytes);
    }

    /// Sets how many written bytes the active segment's tail keeps in memory
    /// ([`LogOptions::tail_cache_bytes`]), giving back what lies before that now, and the same
    /// for the segments rolled after it: an engine shard shares one budget among its partitions.
    pub fn set_tail_cache_bytes(&mut self, bytes: u64) {
        self.tail_cache_bytes = bytes;
        self.active_mut().set_tail_cache_bytes(bytes);
    }

    /// True while a zero-fill refill of the active segment is in flight.
    pub fn zero_fill_busy(&mut self) -> bool {
        self.active_mut().zero_fill_busy()
    }

    /// Waits for the active segment's zero-fill refill in flight, if any: only the thread that
    /// submitted it can (before the log goes to another thread, as a shard's closes do).
    pub(crate) fn settle_zero_fill(&mut self) {
        self.active_mut().settle_zero_fill();
    }

    /// See `crate::segment::ActiveSegment::zero_fill_started`.
    pub fn zero_fill_started(&mut self, io: AsyncIo) {
        self.active_mut().zero_fill_started(io);
    }

    /// Applies completions of [`Log::take_writes`] and returns their outcome. A failed write or
    /// fsync puts the log in the failed state. With `synced_up_to` (the batch held an fsync), the
    /// recovery point advances there.
    pub fn complete_writes(
        &mut self,
        completions: Vec<crate::io::IoCompletion>,
        synced_up_to: Option<i64>,
    ) -> Result<()> {
        // The same bookkeeping as a write submitted without waiting that is already done.
        self.writes_started(AsyncIo::Ready(completions), synced_up_to);
        self.claim_write(true).unwrap_or(Ok(()))
    }

    /// Hands back the operations of [`Log::take_writes`] as submitted without waiting
    /// ([`crate::io::Storage::submit_async`] of this log's storage), to be reported by
    /// [`Log::poll_writes`]. With `synced_up_to` (the batch holds an fsync, or is all RWF_DSYNC
    /// writes), a successful batch advances the recovery point there. Appends may go on
    /// meanwhile; a roll, flush, truncation, close or the next `take_writes` waits for the
    /// writes first (their outcome is still reported by `poll_writes`, in order).
    pub fn writes_started(&mut self, io: AsyncIo, synced_up_to: Option<i64>) {
        self.taken = false;
        // A no-op after `take_writes` (which settled); otherwise one batch at a time, as the
        // caller's next `poll_writes` / `complete_writes` expects.
        self.settle_writes();
        self.started(io, synced_up_to);
    }

    /// Books a batch of this log's writes as in flight.
    fn started(&mut self, io: AsyncIo, synced_up_to: Option<i64>) {
        let counted = synced_up_to.map(|_| {
            let counted = (self.unflushed_messages, self.first_unflushed_ms);
            self.unflushed_messages = 0;
            self.first_unflushed_ms = None;
            counted
        });
        self.write.push_back(InFlight::new(io, LogWrite { synced_up_to, counted }));
    }

    /// The outcome of the writes of [`Log::writes_started`], one call per write and in the order
    /// they were started, once they are done (after `wait`, blocking until then): `None` while
    /// the oldest is in flight or when none is outstanding. A failed write or fsync puts the log
    /// in the failed state, as [`Log::complete_writes`] does.
    pub fn poll_writes(&mut self, wait: bool) -> Option<Result<()>> {
        if let Some(r) = self.write_settled.pop_front() {
            return Some(r);
        }
        self.claim_write(wait)
    }

    /// Under [`Writes::Async`]: collects the writes that completed and starts the next ones,
    /// never waiting for the device; the unwritten partial last block of an O_DIRECT file, which
    /// appends leave for the next write, goes out here once nothing else is in flight, and so
    /// does an fsync that `flush.ms` made due. Call it when [`Log::completion_fd`] is readable,
    /// or from time to time; appends do the same on their way. A write that failed puts the log
    /// in the failed state (what it had not written rolled back): this returns [`Error::Failed`]
    /// from then on, as appends do. Under the other modes it only reports that state.
    pub fn poll(&mut self) -> Result<()> {
        if let Writes::Async(_) = self.writes {
            self.storage.clear_completion_fd();
            self.claim_completed_writes();
            if self.flush_due(self.clock.now_ms(), None) {
                self.sync_wanted = true;
            }
            self.pump(true);
        }
        self.check_not_failed()
    }

    /// Puts every append in the file and waits until it is there (no fsync: see
    /// [`Log::flush`]); after it [`Log::written_offset`] is the log end.
    pub fn finish_writes(&mut self) -> Result<()> {
        self.settle_writes();
        self.check_not_failed()?;
        self.write_now(false)
    }

    /// Every append below this offset is in the log's file (it survives the process being
    /// killed, though not a power cut: that is [`Log::recovery_point`]).
    pub fn written_offset(&self) -> i64 {
        self.written
    }

    /// Data writes of this log in flight.
    pub fn writes_in_flight(&self) -> usize {
        self.write.len()
    }

    /// A file descriptor that becomes readable when a write this thread submitted may have
    /// completed (a duplicate of an eventfd registered with the thread's ring; every log of
    /// the thread shares it), for an embedder's reactor to wait on before calling
    /// [`Log::poll`], which resets it: with several logs on the thread, poll each of them when
    /// it is readable (one log's poll clears it for all). Call it on the thread that appends. `None` when the
    /// log's storage completes every write at submission (sync mode).
    pub fn completion_fd(&self) -> Option<std::os::fd::OwnedFd> {
        self.storage.completion_fd()
    }

    /// Writes every unwritten byte and waits (one submission), moving `written` to the log end;
    /// with `sync` also fdatasyncs. A failure rolls the log back and fails it. Nothing is in
    /// flight.
    pub(super) fn write_now(&mut self, sync: bool) -> Result<()> {
        debug_assert!(self.write.is_empty());
        let r = self.active_mut().write_pending(sync);
        if let Err(e) = self.guard(r) {
            self.roll_back_unwritten();
            return Err(e);
        }
        self.all_written(self.log_end_offset);
        Ok(())
    }

    /// Under [`Writes::Async`], after the caller claimed what completed
    /// ([`Log::claim_completed_writes`]): submits writes while fewer than `max_in_flight` are
    /// out: the tail's whole chunks (appends go on in the last one, which no write then holds,
    /// so it is never copied), and everything else when nothing is in flight or when `idle`
    /// (the device never waits for an append to fill a chunk); an fsync that is due once
    /// nothing else is in flight. Nothing when the log is failed.
    pub(super) fn pump(&mut self, idle: bool) {
        let Writes::Async(limits) = self.writes else { return };
        if self.failed.is_some() {
            return;
        }
        while self.write.len() < limits.max_in_flight.max(1) {
            let sync = self.sync_wanted;
            if sync && !self.write.is_empty() {
                break; // an fdatasync covers only writes already done
            }
            let mut ops =
                if sync { Vec::new() } else { self.active_mut().take_writes(0, false, WriteSpan::WholeChunks) };
            if ops.is_empty() && (sync || idle || self.write.is_empty()) {
                ops = self.active_mut().take_writes(0, sync, WriteSpan::All);
            }
            if ops.is_empty() {
                break;
            }
            let io = self.storage.submit_async(vec![ops]).pop().expect("one batch submitted");
            self.started(io, sync.then_some(self.log_end_offset));
            if sync {
                self.sync_wanted = false;
                break;
            }
        }
        let zeros = self.take_zero_fill(0);
        if !zeros.is_empty() {
            let io = self.storage.submit_async(vec![zeros]).pop().expect("one batch submitted");
            self.zero_fill_started(io);
        }
    }

    /// Under [`Writes::Async`]: claims the writes that completed, without waiting (a failed one
    /// fails the log). Once per append, just before it touches the tail: a completed write's
    /// completions hold the tail chunks it wrote from until it is claimed, and the block a
    /// write padded goes back into its chunk only once nothing holds it. And before each
    /// [`Log::pump`] of [`Log::poll`].
    pub(super) fn claim_completed_writes(&mut self) {
        if let Writes::Async(_) = self.writes {
            while self.claim_write(false).is_some() {}
        }
    }

    /// Claims the oldest write in flight once it is done (waiting with `wait`) and applies its
    /// outcome: the tail, what is written, the recovery point and the flush counters. A failure
    /// waits for the writes after it and rolls the log back to the last write that succeeded.
    pub(super) fn claim_write(&mut self, wait: bool) -> Option<Result<()>> {
        let (note, outcome) = crate::io::poll_front(&mut self.write, &*self.storage, wait)?;
        let r = self.active_mut().complete_writes(outcome);
        let r = self.guard(r);
        self.applied(&note, r.is_ok());
        if r.is_err() {
            // The writes after a failed one are not known to follow it in the file: all of
            // them count as failed, and the file is cut back once none is in flight.
            while let Some((note, outcome)) = crate::io::poll_front(&mut self.write, &*self.storage, true) {
                let _ = self.active_mut().complete_writes(outcome);
                self.applied(&note, false);
            }
            self.roll_back_unwritten();
        }
        Some(r)
    }

    /// What a write's end changes in the log: on success `written` moves past every append it
    /// completed and the recovery point to what its fsync covered; a failed fsync's share of the
    /// flush counters is due again.
    fn applied(&mut self, note: &LogWrite, ok: bool) {
        if ok {
            let in_file = self.written_bytes();
            while let Some(a) = self.unwritten.front().filter(|a| u64::from(a.end) <= in_file) {
                self.written = a.next_offset;
                self.unwritten.pop_front();
            }
        }
        match (ok, note.synced_up_to) {
            (true, Some(o)) => {
                // The counters already restarted when the write started: what was appended
                // since is still due.
                self.recovery_point = self.recovery_point.max(o);
                self.last_flush_ms = self.clock.now_ms();
            }
            (false, Some(_)) => {
                if let Some((n, first)) = note.counted {
                    self.unflushed_messages += n;
                    self.first_unflushed_ms = match (first, self.first_unflushed_ms) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        (a, b) => a.or(b),
                    };
                }
            }
            _ => {}
        }
    }

    /// A sync done outside the log (the engine's shared syncfs, `SyncMethod::Syncfs`) made what
    /// was in its file when the sync started durable, up to `offset` (the log's
    /// [`Log::written_offset`] then): the recovery point advances there, never past what is
    /// written now (a truncation may have cut it since), as a write with its own fsync does.
    pub fn synced_to(&mut self, offset: i64) {
        let offset = offset.min(self.written);
        if offset <= self.recovery_point {
            return;
        }
        self.recovery_point = offset;
        self.last_flush_ms = self.clock.now_ms();
        if self.recovery_point >= self.log_end_offset {
            // Nothing appended is left to flush (else the counters keep counting: an extra
            // flush at worst).
            self.unflushed_messages = 0;
            self.first_unflushed_ms = None;
        }
    }

    /// A sync done outside the log that was to make its written appends durable failed
    /// (`reason`): the log fails as it does when its own fsync fails, and every append not known
    /// to be durable (past the recovery point, or the active segment's base if that is higher:
    /// the segments before it were fsynced when sealed) is rolled back, from memory and from the
    /// file, so none whose caller is told it failed shows. Writes in flight are waited for first
    /// (under [`Writes::Caller`] their outcome stays for [`Log::poll_writes`]).
    pub fn sync_failed(&mut self, reason: String) {
        self.settle_writes();
        self.failed.get_or_insert(reason);
        let durable = self.recovery_point.max(self.active_segment().base_offset());
        self.written = self.written.min(durable);
        self.roll_back_unwritten();
    }

    /// Every append below `offset` is in the file, and none at or past it is pending.
    pub(super) fn all_written(&mut self, offset: i64) {
        self.written = offset;
        self.unwritten.clear();
    }

    /// True while writes of [`Log::writes_started`] have not been reported by
    /// [`Log::poll_writes`].
    pub fn writes_outstanding(&self) -> bool {
        !self.write.is_empty() || !self.write_settled.is_empty()
    }

    /// After a failed write or fsync: every append past the last write known to have succeeded
    /// goes, from memory (log end, tail, indexes, leader epochs) and from the file (cut there and
    /// fsynced), so that no fetch, no offset and no reopen shows an append whose caller was told
    /// it failed. If the cut itself fails (the device is gone), memory still forgets them, but
    /// whole batches left in the file can come back at the next open: the log is failed, and
    /// that is the one case docs/durability.md lists. Nothing is in flight.
    pub(super) fn roll_back_unwritten(&mut self) {
        let to = self.written;
        self.unwritten.clear();
        if self.log_end_offset <= to {
            return;
        }
        let now = self.clock.now_ms();
        if let Some(active) = self.active.as_mut() {
            let cut = active.truncate_to(to, now).and_then(|r| active.log_file_inner().sync_data().map(|()| r));
            if let Ok((_, end)) = cut {
                self.written = end;
            }
        }
        self.log_end_offset = self.written.min(self.log_end_offset);
        self.high_watermark = self.high_watermark.min(self.log_end_offset);
        self.log_start_offset = self.log_start_offset.min(self.log_end_offset);
        let _ = self.epochs.truncate_from_end(self.log_end_offset);
    }

    /// The bytes of the active segment known to be in its file.
    fn written_bytes(&self) -> u64 {
        let a = self.active_segment();
        a.size() as u64 - a.unwritten_bytes()
    }

    /// Where `written` is in the active segment: every append before it is in the file.
    pub(crate) fn written_position(&self) -> u32 {
        self.unwritten.front().map(|a| a.start).unwrap_or(self.active_segment().size())
    }

    /// Waits for the writes in flight, if any (keeping their outcome for the next
    /// [`Log::poll_writes`] under [`Writes::Caller`]): called by everything that changes the
    /// active segment other than an append.
    pub(crate) fn settle_writes(&mut self) {
        assert!(
            !self.taken,
            "writes taken by Log::take_writes were not handed back (writes_started or complete_writes)"
        );
        while let Some(r) = self.claim_write(true) {
            if self.writes == Writes::Caller {
                self.write_settled.push_back(r);
            }
        }
        assert!(self.write.is_empty(), "a write claimed on a thread other than the one that submitted it");
    }

    /// Bytes appended to the active segment and not yet in its file.
    pub fn unwritten_bytes(&self) -> u64 {
        self.active_segment().unwritten_bytes()
    }
}

impl Drop for Log {
    /// Waits for the writes in flight (they hold the active segment's file, and must not land
    /// after the directory is opened again); under [`Writes::Async`] also writes what was
    /// appended and not yet written (no fsync), as [`Writes::Through`] would have by now.
    /// [`Log::close`] is the clean way: it also writes the indexes and fsyncs.
    fn drop(&mut self) {
        if self.active.is_none() || self.taken {
            return;
        }
        while self.claim_write(true).is_some() {}
        if matches!(self.writes, Writes::Async(_)) && self.failed.is_none() && self.write.is_empty() {
            let _ = self.write_now(false);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::builder::BatchBuilder;
    use crate::io::std_backend::StdStorage;

    #[test]
    fn an_append_claims_completed_writes_before_it_changes_the_tail() {
        // Sync mode runs every write at submission: a write is complete, though not yet
        // claimed, when the next append comes, and its completions hold the tail chunk it
        // wrote from. Claimed first, the log knows what is written as appends go on, and the
        // chunk is the tail's alone again (a block a write padded goes back into it in place).
        let dir = crate::io::uring::tests::test_dir();
        let options = LogOptions { storage: Arc::new(StdStorage::default()), ..LogOptions::default() };
        let mut log = Log::open(dir.path().join("topic-0"), options).unwrap();
        for i in 0..64 {
            let mut b = BatchBuilder::new();
            b.push(1_700_000_000_000 + i, None, Some(&[7u8; 1000][..]), &[]);
            log.append_as_leader(&mut b.build().unwrap(), 0).unwrap();
        }
        assert_eq!(log.active_segment().tail_stats().chunk_copies, 0);
        assert_eq!(log.written_offset(), 63, "every write but the last claimed by the append after it");
        log.finish_writes().unwrap();
        assert_eq!(log.written_offset(), 64);
    }
}
