//! The ring: one per thread, synchronous runs, asynchronous write batches that outlive the call,
//! the doorbell poll, registered buffers; and the read/write helpers that loop over a ring.

#![allow(unsafe_code)]

use nix::errno::Errno;
use nix::poll::PollFlags;

use super::*;

impl Ring {
    /// A new ring with `entries` submission entries. Tries SINGLE_ISSUER + DEFER_TASKRUN +
    /// TASKRUN_FLAG + SUBMIT_ALL first (6.1+; every kernel with DEFER_TASKRUN takes
    /// TASKRUN_FLAG with it), then SUBMIT_ALL alone, then no flags.
    pub(crate) fn new(entries: u32) -> io::Result<Ring> {
        let ring = IoUring::builder()
            .setup_single_issuer()
            .setup_defer_taskrun()
            .setup_taskrun_flag()
            .setup_submit_all()
            .build(entries)
            .or_else(|e| match errno_of(&e) {
                Some(Errno::EINVAL) => IoUring::builder().setup_submit_all().build(entries),
                _ => Err(e),
            })
            .or_else(|e| match errno_of(&e) {
                Some(Errno::EINVAL) => IoUring::new(entries),
                _ => Err(e),
            })?;
        let ext_arg = ring.params().is_feature_ext_arg();
        Ok(Ring {
            ring,
            dead: None,
            generation: 0,
            fixed: None,
            thread_ring: false,
            ext_arg,
            async_batches: HashMap::new(),
            next_async: 0,
            finished: None,
            doorbell: Doorbell::Idle,
            completion_fd: None,
            _not_send: PhantomData,
        })
    }

    /// Lets this thread run up to `at_least` blocking reads and writes of regular files at once
    /// on its kernel workers, where the kernel's own limit is lower ([`MIN_IO_WORKERS`]). The
    /// limit is the thread's (its rings share one io-wq), so a ring that replaces the thread's
    /// ring keeps it. A kernel without the call (before 5.15) keeps its limit; the kernel also
    /// caps it at RLIMIT_NPROC.
    pub(super) fn allow_io_workers(&mut self, at_least: u32) {
        if self.io_workers().is_some_and(|now| now < at_least) {
            let _ = self.ring.submitter().register_iowq_max_workers(&mut [at_least, 0]);
        }
    }

    /// This thread's limit on kernel workers for blocking reads and writes of regular files
    /// (None where the kernel cannot tell).
    pub(super) fn io_workers(&mut self) -> Option<u32> {
        // Zeros change nothing and read back the limits in place.
        let mut limits = [0u32, 0];
        self.ring.submitter().register_iowq_max_workers(&mut limits).ok().map(|()| limits[0])
    }

    /// Registers the thread's write-buffer pool on this ring (the thread's own ring only): on
    /// first use a sparse table of [`pool::MAX_REGISTERED_CHUNKS`] buffers, then every chunk the
    /// pool has handed out and that is not yet registered, at its index. A refusal (old kernel,
    /// RLIMIT_MEMLOCK, switched off) leaves the rest unregistered: writes from them go out as
    /// plain WRITEs.
    pub(crate) fn refresh_fixed(&mut self) {
        if !self.thread_ring || self.dead.is_some() {
            return;
        }
        let Some(thread_pool) = pool::thread_pool_if_any() else { return };
        let mut changed = false;
        if self.fixed.is_none() {
            changed = true;
            let stopped = match pool::registration_disabled() {
                Some(why) => Some(why),
                None => self.ring.submitter().register_buffers_sparse(pool::MAX_REGISTERED_CHUNKS).err().map(|e| {
                    format!("IORING_REGISTER_BUFFERS2 (sparse table) refused: {e}; writing from unregistered buffers")
                }),
            };
            self.fixed = Some(FixedBuffers { pool: thread_pool.clone(), registered: 0, stopped });
        }
        let Some(f) = self.fixed.as_mut() else { return };
        if f.pool.id() != thread_pool.id() {
            return;
        }
        let want = f.pool.chunks_handed_out().min(pool::MAX_REGISTERED_CHUNKS);
        while f.stopped.is_none() && f.registered < want {
            let i = f.registered;
            let Some(iov) = f.pool.chunk_iovec(i) else { break };
            // One chunk per call: a partly applied multi-buffer update would not say how far it
            // got, and a WRITE_FIXED naming an empty slot fails.
            // SAFETY: the iovec is chunk `i` of `f.pool`: CHUNK_BYTES of mapped read-write memory
            // that stays mapped while the pool lives, and `f` holds the pool for as long as this
            // ring (and with it the registration) exists.
            match unsafe { self.ring.submitter().register_buffers_update(i, &[iov], None) } {
                Ok(()) => {
                    f.registered += 1;
                    changed = true;
                }
                Err(e) => {
                    let why = match errno_of(&e) {
                        Some(Errno::ENOMEM | Errno::EPERM) => " (RLIMIT_MEMLOCK?)",
                        _ => "",
                    };
                    f.stopped = Some(format!(
                        "registering chunk {i} refused: {e}{why}; writing from unregistered buffers past chunk {}",
                        f.registered
                    ));
                    changed = true;
                }
            }
        }
        if changed {
            pool::set_registration(match (&f.stopped, f.registered) {
                (Some(why), 0) => Registration::Refused(why.clone()),
                (stopped, n) => Registration::Registered { chunks: n, stopped: stopped.clone() },
            });
        }
    }

    /// The registered-buffer index to write `buf` with WRITE_FIXED, when `buf` lies in a chunk of
    /// the pool registered on this ring.
    pub(super) fn fixed_index(&self, buf: &WriteBuf) -> Option<u16> {
        let (pool_id, chunk) = buf.pool_slot()?;
        let f = self.fixed.as_ref()?;
        (f.pool.id() == pool_id && chunk < f.registered).then_some(chunk as u16)
    }

    /// Submission-queue size: the most entries in flight at once.
    pub(crate) fn sq_entries(&self) -> usize {
        self.ring.params().sq_entries() as usize
    }

    #[cfg(test)]
    /// The ring's file descriptor.
    pub(crate) fn raw_fd(&self) -> RawFd {
        self.ring.as_raw_fd()
    }

    /// Whether the kernel supports an opcode (`io_uring::opcode::X::CODE`), by
    /// IORING_REGISTER_PROBE; false when the probe itself fails.
    pub(crate) fn supports(&self, code: u8) -> bool {
        let mut probe = io_uring::Probe::new();
        self.ring.submitter().register_probe(&mut probe).is_ok() && probe.is_supported(code)
    }

    /// Waits for at least `want` completions without submitting anything (one io_uring_enter).
    fn wait_only(&self, want: usize) -> io::Result<usize> {
        record_io(0, 1, 0, 0, 0);
        // SAFETY: no argument pointer is passed (None), and GETEVENTS with to_submit = 0 only
        // waits; the kernel reads no memory of ours. (`libc::sigset_t` only names the type of the
        // absent signal mask, as io_uring's own `submit` does.)
        unsafe {
            self.ring.submitter().enter::<libc::sigset_t>(0, want as u32, io_uring::EnterFlags::GETEVENTS.bits(), None)
        }
    }

    /// Moves completions of this batch into `res`; returns how many were reaped.
    fn reap(&mut self, tag: u64, res: &mut [Option<i32>]) -> usize {
        let mut n = 0;
        let mut for_async = Vec::new();
        for cqe in self.ring.completion() {
            let ud = cqe.user_data();
            if ud & ASYNC_BIT != 0 {
                for_async.push((ud, cqe.result()));
                continue;
            }
            if ud & 0xffff_ffff_0000_0000 != tag {
                continue; // not ours (cannot happen: every batch is reaped in full)
            }
            if let Some(slot) = res.get_mut((ud & 0xffff_ffff) as usize) {
                if slot.is_none() {
                    *slot = Some(cqe.result());
                    n += 1;
                }
            }
        }
        for (ud, r) in for_async {
            self.async_arrived(ud, r);
        }
        n
    }

    /// Files the completion of an asynchronous entry with its batch (or the doorbell).
    fn async_arrived(&mut self, ud: u64, r: i32) {
        if ud == DOORBELL_UD {
            if let Doorbell::Armed { fd, .. } = self.doorbell {
                self.doorbell = if r < 0 { Doorbell::Failed } else { Doorbell::Fired { fd } };
            }
            return;
        }
        let id = ((ud >> 16) & 0xffff_ffff) as u32;
        let i = (ud & 0xffff) as usize;
        if let Some(b) = self.async_batches.get_mut(&id) {
            if let Some(slot) = b.raw.get_mut(i) {
                if slot.is_none() {
                    *slot = Some(r);
                    b.left -= 1;
                    if b.left == 0 {
                        name_finished(&mut self.finished, id);
                    }
                }
            }
            if b.left == 0 && b.abandoned {
                self.async_batches.remove(&id);
            }
        }
    }

    /// Takes over the asynchronous batches of the ring it replaces (all drained, so their results
    /// and ids stay good for whoever still holds their tickets), its next id and its list of
    /// completed batches.
    fn take_async_state(&mut self, old: &mut Ring) {
        self.async_batches = std::mem::take(&mut old.async_batches);
        self.next_async = old.next_async;
        self.finished = old.finished.take();
    }

    /// Moves into `out` the ids of the asynchronous batches that completed since the last call
    /// (each once, whoever claims it), and from this first call on keeps count of them.
    pub(super) fn take_finished(&mut self, out: &mut Vec<u64>) {
        match self.finished.as_mut() {
            Some(f) => out.extend(f.drain(..).map(u64::from)),
            None => self.finished = Some(Vec::new()),
        }
    }

    /// Forgets batch `id` (its ticket was dropped): at once if it has completed, else when it
    /// does; its operations (buffers, files) are kept until then.
    pub(super) fn abandon_async(&mut self, id: u32) {
        if let Some(b) = self.async_batches.get_mut(&id) {
            if b.left == 0 {
                self.async_batches.remove(&id);
            } else {
                b.abandoned = true;
            }
        }
    }

    /// Reaps whatever completions are there (asynchronous ones; a synchronous batch is always
    /// reaped in full by its own [`Ring::run`]).
    fn reap_async(&mut self) {
        self.reap(u64::MAX, &mut []);
    }

    /// Waits for at least one completion and reaps, submitting nothing: entries still queued
    /// (the leftovers of a failed submission, which the ring is about to be retired for) are
    /// never handed to the kernel here.
    fn wait_reaping(&mut self) -> io::Result<()> {
        let r = self.wait_only(1);
        self.reap_async();
        match r {
            Ok(_) => Ok(()),
            Err(e) if matches!(errno_of(&e), Some(Errno::EINTR | Errno::EBUSY | Errno::EAGAIN)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// The eventfd the kernel signals when this ring posts a completion (or, with
    /// DEFER_TASKRUN, queues completion work for an io_uring_enter): registered on first call.
    pub(super) fn completion_fd(&mut self) -> io::Result<std::os::fd::OwnedFd> {
        if self.completion_fd.is_none() {
            let fd = crate::io::eventfd::EventFd::new().map_err(|e| io::Error::other(e.to_string()))?;
            self.ring.submitter().register_eventfd(fd.raw())?;
            self.completion_fd = Some(fd);
        }
        self.completion_fd.as_ref().map(|fd| fd.try_clone()).unwrap_or_else(|| Err(io::Error::other("no eventfd")))
    }

    /// Resets the completion eventfd, if one is registered (before reaping, so that a
    /// completion posted after the reap rings it again).
    pub(super) fn clear_completion_fd(&mut self) {
        if let Some(fd) = &self.completion_fd {
            fd.drain();
        }
    }

    /// True when completions are waiting to be reaped, or deferred completion work is waiting
    /// for an io_uring_enter (IORING_SQ_TASKRUN, or completions overflowed the CQ), without a
    /// system call.
    pub(super) fn completions_waiting(&mut self) -> bool {
        let sq = self.ring.submission();
        let waiting = sq.taskrun() || sq.cq_overflow();
        drop(sq);
        waiting || !self.ring.completion().is_empty()
    }

    /// One io_uring_enter that waits for at least `want` completions, then reaps; with a
    /// `timeout` (at most that long) it also submits what is queued, without one it submits
    /// nothing ([`Ring::wait_only`]). Timeouts and interruptions are not errors.
    pub(super) fn get_events(&mut self, want: usize, timeout: Option<Duration>) -> io::Result<()> {
        let r = match timeout {
            None => self.wait_only(want),
            Some(t) => {
                record_io(0, 1, 0, 0, 0);
                let ts = types::Timespec::new().sec(t.as_secs()).nsec(t.subsec_nanos());
                let args = types::SubmitArgs::new().timespec(&ts);
                self.ring.submitter().submit_with_args(want, &args)
            }
        };
        self.reap_async();
        match r {
            Ok(_) => Ok(()),
            Err(e) if matches!(errno_of(&e), Some(Errno::ETIME | Errno::EINTR | Errno::EBUSY)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Whether `n` more entries fit the submission queue, submitting what is queued to make
    /// room if needed. False on a dead ring, and for more entries than the queue holds.
    fn sq_room(&mut self, n: usize) -> bool {
        if self.dead.is_some() || n == 0 || n > self.sq_entries() {
            return false;
        }
        if self.sq_entries() - self.ring.submission().len() < n && self.submit_queued().is_err() {
            return false;
        }
        self.sq_entries() - self.ring.submission().len() >= n
    }

    /// Queues `entries` as one asynchronous batch whose memory `keep` owns; they reach the
    /// kernel with the next io_uring_enter ([`Ring::submit_queued`]). Gives `keep` back when the
    /// batch cannot be queued whole (dead ring, too many entries, no room).
    ///
    /// # Safety
    ///
    /// Every pointer in `entries` must point into memory owned by `keep` (heap memory that does
    /// not move when `keep` does) or into memory that lives as long as the ring; each entry must
    /// produce exactly one completion.
    pub(super) unsafe fn queue_async(
        &mut self,
        entries: &[squeue::Entry],
        keep: AsyncOps,
    ) -> std::result::Result<u32, AsyncOps> {
        let n = entries.len();
        if !self.sq_room(n) {
            return Err(keep);
        }
        let mut id = self.next_async;
        while self.async_batches.contains_key(&id) {
            id = id.wrapping_add(1);
        }
        self.next_async = id.wrapping_add(1);
        let tagged: Vec<squeue::Entry> = entries
            .iter()
            .enumerate()
            .map(|(i, e)| e.clone().user_data(ASYNC_BIT | (u64::from(id) << 16) | i as u64))
            .collect();
        // SAFETY: the caller guarantees the entries' memory is owned by `keep`, which goes into
        // `async_batches` right here and stays there until every entry's completion has been
        // reaped: neither Drop nor retire lets the ring go with such an entry in the kernel.
        if unsafe { self.ring.submission().push_multiple(&tagged) }.is_err() {
            return Err(keep);
        }
        self.async_batches.insert(id, AsyncBatch { raw: vec![None; n], left: n, keep, abandoned: false });
        if let Doorbell::Armed { queued_after, .. } = &mut self.doorbell {
            *queued_after = queued_after.saturating_add(n);
        }
        Ok(id)
    }

    /// Queues a POLL_ADD on the doorbell eventfd `fd` unless one is already armed or has fired.
    /// False when the ring cannot take it, when the kernel refused the poll before, and when the
    /// poll in place is another eventfd's (one doorbell per thread: a second one waits plainly).
    pub(super) fn arm_doorbell(&mut self, fd: RawFd) -> bool {
        match self.doorbell {
            Doorbell::Idle => {}
            Doorbell::Armed { fd: armed, .. } | Doorbell::Fired { fd: armed } => return armed == fd,
            Doorbell::Failed => return false,
        }
        if !self.sq_room(1) {
            return false;
        }
        let e = opcode::PollAdd::new(types::Fd(fd), PollFlags::POLLIN.bits() as u32).build().user_data(DOORBELL_UD);
        // SAFETY: a POLL_ADD points to no memory of ours (the eventfd is named by number, and the
        // kernel holds its own reference to the file while the poll is armed); without a
        // multishot flag it produces exactly one completion, which `async_arrived` recognises by
        // DOORBELL_UD.
        if unsafe { self.ring.submission().push(&e) }.is_err() {
            return false;
        }
        self.doorbell = Doorbell::Armed { fd, queued_after: 0 };
        true
    }

    /// Submits every queued entry (one io_uring_enter, no waiting). On a hard failure the entries
    /// the kernel did not take are failed with the error and the ring is replaced.
    pub(super) fn submit_queued(&mut self) -> io::Result<()> {
        let mut tries = 0;
        while !self.ring.submission().is_empty() {
            record_io(0, 1, 0, 0, 0);
            let queued = self.ring.submission().len();
            let r = self.ring.submit();
            let left = self.ring.submission().len();
            record_io((queued - left) as u64, 0, 0, 0, 0);
            match r {
                Ok(_) => {}
                Err(e)
                    if matches!(errno_of(&e), Some(Errno::EINTR | Errno::EAGAIN | Errno::EBUSY))
                        && tries < MAX_RETRIES =>
                {
                    tries += 1;
                    if self.async_batches.values().any(AsyncBatch::holds_memory) {
                        let _ = self.wait_reaping();
                    } else {
                        std::thread::sleep(Duration::from_micros(100));
                    }
                }
                Err(e) => {
                    let errno = e.raw_os_error().unwrap_or(Errno::EIO as i32);
                    self.fail_unsubmitted(left, errno);
                    self.retire(errno);
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// The last `left` entries queued (never seen by the kernel) complete with `-errno`. Only
    /// asynchronous entries are queued outside [`Ring::run`].
    pub(super) fn fail_unsubmitted(&mut self, left: usize, errno: i32) {
        if left == 0 {
            return;
        }
        let mut todo = left;
        // The unsubmitted entries are the tail of the queue: the poll is one of them when fewer
        // than `left` were queued after it. The rest are the most recent batches' last entries.
        if let Doorbell::Armed { queued_after, .. } = self.doorbell {
            if queued_after < left {
                // Never in the kernel: no poll on the ring any more.
                self.doorbell = Doorbell::Idle;
                todo -= 1;
            }
        }
        let mut ids: Vec<u32> = self.async_batches.iter().filter(|(_, b)| b.left > 0).map(|(id, _)| *id).collect();
        ids.sort_by_key(|id| id.wrapping_sub(self.next_async));
        for id in ids.into_iter().rev() {
            let Some(b) = self.async_batches.get_mut(&id) else { continue };
            for slot in b.raw.iter_mut().rev() {
                if todo == 0 {
                    return;
                }
                if slot.is_none() {
                    *slot = Some(-errno);
                    b.left -= 1;
                    todo -= 1;
                    if b.left == 0 {
                        name_finished(&mut self.finished, id);
                    }
                }
            }
        }
    }

    /// Waits until no asynchronous entry that references our memory is in the kernel. If even
    /// waiting fails, aborts rather than free memory the kernel may still use.
    fn drain_async(&mut self) {
        let mut failures = 0;
        while self.async_batches.values().any(AsyncBatch::holds_memory) {
            self.wait_reaping_or_abort(&mut failures);
        }
    }

    /// [`Ring::wait_reaping`] for memory the kernel may still be writing from: after
    /// [`MAX_RETRIES`] failed waits the process aborts rather than let the buffers be freed.
    fn wait_reaping_or_abort(&mut self, failures: &mut u32) {
        if let Err(e) = self.wait_reaping() {
            *failures += 1;
            if *failures > MAX_RETRIES {
                eprintln!(
                    "seglog: waiting for in-flight io_uring writes failed ({e}); aborting rather than freeing \
                     buffers the kernel may still use"
                );
                std::process::abort();
            }
        }
    }

    /// The results of asynchronous batch `id`, when it has completed (after `wait`, blocking
    /// until it has); `None` while it is in flight. Short writes are finished and link
    /// cancellations settled here, as for a synchronous batch. An id this ring does not know
    /// is [`AsyncOutcome::Lost`].
    pub(super) fn complete_async(&mut self, id: u32, wait: bool) -> Option<AsyncOutcome> {
        let mut failures = 0;
        loop {
            match self.async_batches.get(&id) {
                None => return Some(AsyncOutcome::Lost),
                Some(b) if b.left == 0 => break,
                Some(_) if !wait => {
                    if !self.completions_waiting() {
                        return None;
                    }
                    let _ = self.get_events(0, None);
                    if self.async_batches.get(&id).is_some_and(|b| b.left > 0) {
                        return None;
                    }
                }
                Some(_) => self.wait_reaping_or_abort(&mut failures),
            }
        }
        let Some(b) = self.async_batches.remove(&id) else { return Some(AsyncOutcome::Lost) };
        let AsyncOps { ops, fds, idx, mut results } = b.keep;
        let raw: Vec<i32> = b.raw.into_iter().map(|r| r.unwrap_or(-(Errno::EIO as i32))).collect();
        let counts = settle_round(self, &ops, &fds, &idx, &raw, &mut results);
        let results = finish_batch(&ops, results, counts);
        Some(AsyncOutcome::Done(completions(ops, results)))
    }

    /// Runs `entries` on this ring and waits until every submitted one has completed. Returns
    /// each entry's completion result (bytes, or `-errno`) in input order. The user_data of the
    /// entries is overwritten; their flags (IOSQE_IO_LINK...) are kept. Batches longer than the
    /// submission queue go in several submissions (a link chain crossing such a boundary is cut
    /// there: callers that care keep chains within [`Ring::sq_entries`]). One
    /// `submit_and_wait` for a batch that fits.
    ///
    /// If io_uring_enter fails hard, what reached the kernel is still waited for and reaped;
    /// entries the kernel never took get that error (`-errno`) and the ring is replaced. If even
    /// waiting fails, the process aborts rather than free buffers the kernel may still write.
    ///
    /// # Safety
    ///
    /// Every buffer, path, timespec or other memory an entry points to must stay valid, and
    /// unaliased where the kernel writes, until this returns. Entries must each produce exactly
    /// one completion (no multishot, no IOSQE_CQE_SKIP_SUCCESS).
    pub(crate) unsafe fn run(&mut self, entries: &[squeue::Entry]) -> Vec<i32> {
        let n = entries.len();
        if n == 0 {
            return Vec::new();
        }
        // Asynchronous entries still queued (a batch that did not fit made its caller fall back
        // to this synchronous path) go to the kernel first, apart: should this run's own
        // submission then fail hard, the entries the kernel did not take are only this run's,
        // which it settles itself. Otherwise they would go out with it, and a hard failure would
        // leave them neither in the kernel nor failed, for `retire` to wait on for ever.
        if !self.ring.submission().is_empty() {
            let _ = self.submit_queued();
        }
        if let Some(errno) = self.dead {
            return vec![-errno; n];
        }
        // 31 bits: the top bit of user_data marks asynchronous entries.
        self.generation = self.generation.wrapping_add(1) & 0x7fff_ffff;
        let tag = u64::from(self.generation) << 32;
        let cap = self.sq_entries();
        let mut res: Vec<Option<i32>> = vec![None; n];
        let mut pushed = 0usize; // entries placed in the SQ so far
        let mut inflight = 0usize; // pushed and not reaped (in the SQ or in the kernel)
        let mut done = 0usize;
        let mut submitted = 0u64;
        let mut busy = 0u32;
        let mut hard_errno = None;
        while done < n {
            {
                let mut sq = self.ring.submission();
                while pushed < n && inflight < cap {
                    let e = entries[pushed].clone().user_data(tag | pushed as u64);
                    // SAFETY: the caller keeps every pointer in the entries valid until we
                    // return, and we return only once each pushed entry has been reaped or
                    // has been shown never to reach the kernel (then the ring is dropped).
                    if unsafe { sq.push(&e) }.is_err() {
                        break;
                    }
                    pushed += 1;
                    inflight += 1;
                }
            }
            let queued = self.ring.submission().len();
            record_io(0, 1, 0, 0, 0);
            let r = self.ring.submit_and_wait(inflight);
            let left = self.ring.submission().len();
            submitted += (queued - left) as u64;
            let got = self.reap(tag, &mut res);
            done += got;
            inflight -= got;
            let Err(e) = r else {
                busy = 0;
                continue;
            };
            let errno = e.raw_os_error().unwrap_or(Errno::EIO as i32);
            if Errno::from_raw(errno) == Errno::EINTR {
                continue;
            }
            if matches!(Errno::from_raw(errno), Errno::EAGAIN | Errno::EBUSY) && busy < 10_000 {
                busy += 1;
                if inflight > left {
                    // Let something finish before trying again.
                    let _ = self.wait_only(1);
                    let got = self.reap(tag, &mut res);
                    done += got;
                    inflight -= got;
                } else {
                    std::thread::sleep(Duration::from_micros(100));
                }
                continue;
            }
            // Hard failure: wait for what the kernel took, then give up on the rest.
            while inflight > left {
                match self.wait_only(inflight - left) {
                    Ok(_) => {}
                    Err(w) if errno_of(&w) == Some(Errno::EINTR) => {}
                    Err(w) => {
                        eprintln!(
                            "seglog: io_uring_enter failed ({e}) and waiting for {} in-flight operations failed \
                             too ({w}); aborting rather than freeing buffers the kernel may still use",
                            inflight - left
                        );
                        std::process::abort();
                    }
                }
                inflight -= self.reap(tag, &mut res);
            }
            // The entries still in the SQ were never seen by the kernel; retire the ring so they
            // never will be.
            hard_errno = Some(errno);
            self.retire(errno);
            break;
        }
        record_io(submitted, 0, 0, 0, 0);
        let fail = -hard_errno.unwrap_or(Errno::EIO as i32);
        res.into_iter().map(|r| r.unwrap_or(fail)).collect()
    }

    /// Replaces a ring that failed (`errno`) by a fresh one; if none can be made, marks this one
    /// dead so nothing is submitted on it again.
    pub(super) fn retire(&mut self, errno: i32) {
        // Asynchronous writes in the kernel finish on this ring first; their results move to the
        // new one. A doorbell poll holds no memory of ours and is dropped with the ring (the
        // next wait arms one on the new ring).
        self.drain_async();
        self.doorbell = Doorbell::Idle;
        let entries = self.ring.params().sq_entries();
        match Ring::new(entries) {
            Ok(mut fresh) => {
                // The new ring registers the pool afresh on its next submission.
                fresh.thread_ring = self.thread_ring;
                fresh.take_async_state(self);
                drop(std::mem::replace(self, fresh))
            }
            Err(_) => self.dead = Some(errno),
        }
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // Never unmap the ring (and free the operations' buffers) with a write in the kernel.
        self.drain_async();
    }
}

/// Books asynchronous batch `id` as completed, if the thread keeps count
/// ([`Ring::take_finished`]).
fn name_finished(finished: &mut Option<Vec<u32>>, id: u32) {
    if let Some(f) = finished {
        f.push(id);
    }
}

// Why the ring is per thread and not a value the shard holds and passes: files are shared
// handles (`Arc<dyn IoFile>`, `Sync`) whose reads and writes run on whichever thread calls them
// (a shard, an embedder's thread using a `Log`, a test), and a ring has one issuer
// (IORING_SETUP_SINGLE_ISSUER). A ring per thread gives every caller a ring of its own without a
// lock, and a shard thread's ring is the shard's. What needed the ring as a value (claiming,
// polling and counting asynchronous batches) is on `Storage` (`claim_async`, `poll_async`,
// `completions_waiting`), so a backend without a ring (the simulator) implements it too.
thread_local! {
    pub(super) static THREAD_RING: RefCell<Option<Ring>> = const { RefCell::new(None) };
}

/// Runs `f` with this thread's ring, creating it on the thread's first use ([`RING_ENTRIES`]
/// entries). Fails only if no ring can be created (io_uring refused). A nested call (from inside
/// `f`) or a call during thread teardown gets a one-off ring instead of panicking.
pub(crate) fn with_thread_ring<R>(f: impl FnOnce(&mut Ring) -> R) -> io::Result<R> {
    let mut f = Some(f);
    let outcome = THREAD_RING.try_with(|cell| -> Option<io::Result<R>> {
        let mut slot = cell.try_borrow_mut().ok()?;
        if slot.as_ref().is_none_or(|r| r.dead.is_some()) {
            match Ring::new(RING_ENTRIES) {
                Ok(mut r) => {
                    r.thread_ring = true;
                    r.allow_io_workers(MIN_IO_WORKERS);
                    // A dead ring's asynchronous batches (all drained when it died) keep their
                    // results and ids for whoever still holds their tickets.
                    if let Some(old) = slot.as_mut() {
                        r.take_async_state(old);
                    }
                    *slot = Some(r)
                }
                Err(e) => return Some(Err(e)),
            }
        }
        let ring = slot.as_mut()?;
        let f = f.take()?;
        Some(Ok(f(ring)))
    });
    if let Ok(Some(r)) = outcome {
        return r;
    }
    let mut ring = Ring::new(TEMP_RING_ENTRIES)?;
    let f = f.take().ok_or_else(|| io::Error::other("thread ring closure already consumed"))?;
    Ok(f(&mut ring))
}

/// Runs one entry and returns its result.
///
/// # Safety
///
/// As for [`Ring::run`].
pub(super) unsafe fn run_one(ring: &mut Ring, e: squeue::Entry) -> io::Result<usize> {
    // SAFETY: forwarded to the caller.
    let r = unsafe { ring.run(std::slice::from_ref(&e)) };
    cqe_result(r.first().copied().unwrap_or(-(Errno::EIO as i32)))
}

/// The errno of a failed system call, as nix's [`Errno`].
fn errno_of(e: &io::Error) -> Option<Errno> {
    e.raw_os_error().map(Errno::from_raw)
}

/// Whether an errno is worth retrying the same operation for.
pub(super) fn transient(e: &io::Error) -> bool {
    matches!(errno_of(e), Some(Errno::EINTR | Errno::EAGAIN))
}

/// One READ at `pos` into `buf` (at most [`MAX_RW_CHUNK`] bytes), retried on EINTR/EAGAIN.
pub(super) fn read_once(ring: &mut Ring, fd: RawFd, buf: &mut [u8], pos: u64) -> io::Result<usize> {
    let len = buf.len().min(MAX_RW_CHUNK) as u32;
    let mut tries = 0;
    loop {
        let e = opcode::Read::new(types::Fd(fd), buf.as_mut_ptr(), len).offset(pos).build();
        // SAFETY: `buf` is exclusively borrowed for this whole call and run_one returns only
        // after the read has completed.
        match unsafe { run_one(ring, e) } {
            Err(e) if transient(&e) && tries < MAX_RETRIES => tries += 1,
            r => return r,
        }
    }
}

/// One WRITE of (at most [`MAX_RW_CHUNK`] bytes of) `buf` at `pos` with `rw_flags` (0 or
/// RWF_DSYNC), retried on EINTR/EAGAIN.
pub(super) fn write_once(ring: &mut Ring, fd: RawFd, buf: &[u8], pos: u64, rw_flags: i32) -> io::Result<usize> {
    let len = buf.len().min(MAX_RW_CHUNK) as u32;
    let mut tries = 0;
    loop {
        let e = opcode::Write::new(types::Fd(fd), buf.as_ptr(), len).offset(pos).rw_flags(rw_flags).build();
        // SAFETY: `buf` is borrowed for this whole call and run_one returns only after the write
        // has completed.
        match unsafe { run_one(ring, e) } {
            Err(e) if transient(&e) && tries < MAX_RETRIES => tries += 1,
            r => return r,
        }
    }
}

/// Reads until `buf` is full or end of file; a short read is resubmitted for the remainder.
/// With `align` (O_DIRECT), a short read that ends off the alignment is end of file.
pub(super) fn read_full(ring: &mut Ring, fd: RawFd, buf: &mut [u8], pos: u64, align: Option<u64>) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        let want = (buf.len() - done).min(MAX_RW_CHUNK);
        let n = read_once(ring, fd, &mut buf[done..], pos + done as u64)?;
        done += n;
        if n == 0 || (n < want && align.is_some_and(|a| !(pos + done as u64).is_multiple_of(a))) {
            break;
        }
    }
    record_io(0, 0, done as u64, 0, 0);
    Ok(done)
}

/// Writes all of `buf` (with `rw_flags` on each write); a short write is resubmitted for the
/// remainder.
pub(super) fn write_full(ring: &mut Ring, fd: RawFd, buf: &[u8], pos: u64, rw_flags: i32) -> io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        let n = write_once(ring, fd, &buf[done..], pos + done as u64, rw_flags)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                format!("write returned 0 at byte {}", pos + done as u64),
            ));
        }
        done += n;
    }
    record_io(0, 0, 0, done as u64, 0);
    crate::io::record_writes(1);
    Ok(())
}

pub(super) fn fsync_op(fd: RawFd, datasync: bool) -> squeue::Entry {
    let flags = if datasync { types::FsyncFlags::DATASYNC } else { types::FsyncFlags::empty() };
    opcode::Fsync::new(types::Fd(fd)).flags(flags).build()
}

pub(super) fn fsync_on(ring: &mut Ring, fd: RawFd, datasync: bool) -> io::Result<()> {
    let mut tries = 0;
    loop {
        // SAFETY: an fsync entry points to no memory of ours.
        match unsafe { run_one(ring, fsync_op(fd, datasync)) } {
            Err(e) if errno_of(&e) == Some(Errno::EINTR) && tries < MAX_RETRIES => tries += 1,
            r => {
                record_io(0, 0, 0, 0, 1);
                return r.map(|_| ());
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Alignment errors
// ---------------------------------------------------------------------------------------------
