//! The write pipeline of a log that does not write through: the writes taken from the active
//! segment's tail, handed back submitted (`writes_started`), claimed and applied
//! (`poll_writes`), settled before anything but an append touches the segment, and the roll
//! back of a write that failed.

use super::*;
use crate::io::InFlight;

impl Log {
    /// The writes (and, with `sync`, fdatasync) that put this log's appended bytes in its file,
    /// for a caller that submits many logs' I/O at once. Hand them back, submitted, with
    /// [`Log::writes_started`] (or run them and pass their completions to
    /// [`Log::complete_writes`]) before the log is changed again: a flush, a roll (an append that
    /// rolls included), a truncation, a close or another `take_writes` in between is a caller
    /// bug and panics.
    pub fn take_writes(&mut self, tag: u64, sync: bool) -> Result<Vec<crate::io::IoOp>> {
        self.settle_writes();
        self.check_not_failed()?;
        // Index entries are not written here, not even for a durable turn: the active segment
        // holds the recovery point, so after a crash it is always revalidated and its indexes
        // rebuilt; they reach the files at seal, close and explicit flush. Writing them each turn
        // doubled the I/Os of Durability::EveryBatch (and drove its fdatasync latency).
        let ops = self.active_mut().take_writes(tag, sync);
        if ops.iter().any(|o| matches!(o.kind, crate::io::IoOpKind::Write { .. })) {
            self.taken = Some(self.log_end_offset);
        }
        Ok(ops)
    }

    /// The zero writes that keep the active segment's zeroed lead
    /// ([`LogOptions::zero_fill_bytes`]), to submit after the turn's data writes as a batch of
    /// their own; hand the result to [`Log::zero_fill_started`]. Empty when none are due.
    pub fn take_zero_fill(&mut self, tag: u64) -> Vec<crate::io::IoOp> {
        if self.failed.is_some() {
            return Vec::new();
        }
        self.active_mut().take_zero_fill(tag)
    }

    /// What zero fill did in the active segment so far.
    pub fn zero_fill_stats(&self) -> crate::segment::ZeroFillStats {
        self.active_segment().zero_fill_stats()
    }

    /// See `crate::segment::ActiveSegment::zero_fill_started`.
    pub fn zero_fill_started(&mut self, io: crate::io::AsyncIo) {
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
        self.writes_started(crate::io::AsyncIo::Ready(completions), synced_up_to);
        self.claim_write(true).unwrap_or(Ok(()))
    }

    /// Hands back the operations of [`Log::take_writes`] as submitted without waiting
    /// ([`crate::io::Storage::submit_async`] of this log's storage), to be reported by
    /// [`Log::poll_writes`]. With `synced_up_to` (the batch holds an fsync, or is all RWF_DSYNC
    /// writes), a successful batch advances the recovery point there. Appends may go on
    /// meanwhile; a roll, flush, truncation, close or the next `take_writes` waits for the
    /// writes first (their outcome is still reported by `poll_writes`, in order).
    pub fn writes_started(&mut self, io: crate::io::AsyncIo, synced_up_to: Option<i64>) {
        // The write taken covers the log end as it was then (appends since are not in it).
        let ends = self.taken.take().unwrap_or(self.log_end_offset);
        self.settle_writes();
        let counted = synced_up_to.map(|_| {
            let counted = (self.unflushed_messages, self.first_unflushed_ms);
            self.unflushed_messages = 0;
            self.first_unflushed_ms = None;
            counted
        });
        self.write = Some(InFlight::new(io, LogWrite { ends, synced_up_to, counted }));
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

    /// Claims the write in flight once it is done (waiting with `wait`) and applies its outcome:
    /// the tail, what is visible, the recovery point and the flush counters; a failure rolls the
    /// log back to the last write that succeeded.
    fn claim_write(&mut self, wait: bool) -> Option<Result<()>> {
        let (note, outcome) = crate::io::poll_slot(&mut self.write, &*self.storage, wait)?;
        let r = self.active_mut().complete_writes(outcome);
        let r = self.guard(r);
        match &r {
            Ok(()) => self.written = note.ends,
            Err(_) => self.roll_back_unwritten(),
        }
        match (&r, note.synced_up_to) {
            (Ok(()), Some(o)) => {
                // The counters already restarted when the write started: what was appended
                // since is still due.
                self.recovery_point = self.recovery_point.max(o);
                self.last_flush_ms = self.clock.now_ms();
            }
            (Err(_), Some(_)) => {
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
        Some(r)
    }

    /// True while writes of [`Log::writes_started`] have not been reported by
    /// [`Log::poll_writes`].
    pub fn writes_outstanding(&self) -> bool {
        self.write.is_some() || !self.write_settled.is_empty()
    }

    /// After a failed write or fsync: every append past the last write known to have succeeded
    /// goes, from memory (log end, tail, indexes, leader epochs) and from the file (cut there and
    /// fsynced), so that no fetch, no offset and no reopen shows an append whose caller was told
    /// it failed. If the cut itself fails (the device is gone), memory still forgets them, but
    /// whole batches left in the file can come back at the next open: the log is failed, and
    /// that is the one case docs/durability.md lists.
    pub(super) fn roll_back_unwritten(&mut self) {
        let to = self.written;
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

    /// Where the last write known to have succeeded ends in the active segment: every byte
    /// before it is in the file (the tail counts it written only on success).
    pub(crate) fn written_position(&self) -> u32 {
        let a = self.active_segment();
        (a.size() as u64 - a.unwritten_bytes()) as u32
    }

    /// Waits for the writes in flight, if any, keeping their outcome for the next poll: called
    /// by everything that changes the active segment other than an append.
    pub(crate) fn settle_writes(&mut self) {
        assert!(
            self.taken.is_none(),
            "writes taken by Log::take_writes were not handed back (writes_started or complete_writes)"
        );
        if let Some(r) = self.claim_write(true) {
            self.write_settled.push_back(r);
        }
        assert!(self.write.is_none(), "a write claimed on a thread other than the one that submitted it");
    }

    /// Bytes appended to the active segment and not yet handed to the kernel.
    pub fn unwritten_bytes(&self) -> u64 {
        self.active_segment().unwritten_bytes()
    }
}
