//! io_uring backends: [`UringStorage`] in [`IoMode::Direct`] (O_DIRECT `.log` files) and
//! [`IoMode::Buffered`] (page cache), both doing every file read, write, fdatasync, fallocate and
//! truncate through io_uring.
//!
//! One ring per thread ([`with_thread_ring`]): created lazily on a thread's first use, so each
//! shard thread gets its own and no ring is shared between threads. Every operation submits its
//! entries on the calling thread's ring and waits for all of them before returning
//! ([`Ring::run`]), so a buffer handed to the kernel is always borrowed (or owned by the batch)
//! until its completion has been reaped: nothing returns with an entry in flight.
//!
//! The one exception is the shard's write path ([`UringStorage::submit_async`]): a batch of
//! writes and fdatasyncs goes to the kernel and the call returns at once, the ring taking
//! ownership of the operations (and so of their buffers and files) until every entry of the
//! batch has completed; `claim_async` hands them back with their results. Completions of
//! such batches that a synchronous [`Ring::run`] happens to reap are kept for them, and a ring
//! is never dropped (or replaced) while one of their entries is still in the kernel. The shard's
//! doorbell poll (`wait_doorbell_or_io`) also stays in the kernel across calls; it uses no
//! memory of ours, so it simply dies with its ring.
//!
//! Directory operations: `rename`, `remove_file` and `sync_dir`'s fsync use io_uring
//! (RENAMEAT, UNLINKAT, FSYNC on a directory fd, when the kernel has them); `create_dir_all`,
//! `list_dir`, opening files and directories, `len` and `modified_ms` (fstat) stay plain system
//! calls: they are rare and have no useful asynchronous form here.
#![allow(unsafe_code)]

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::io;
use std::marker::PhantomData;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::{AsRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use io_uring::{opcode, squeue, types, IoUring};

/// The io_uring crate, re-exported so callers can build their own entries for [`Ring::run`].
pub use io_uring as sys;

use super::pool::{self, Pool, Registration, WriteBuf};
use super::select::{DEFAULT_DIR_MODE, DEFAULT_FILE_MODE};
use super::{
    record_io, AlignedBuf, AsyncIo, AsyncOutcome, DirectAlignment, IoCompletion, IoFile, IoMode, IoOp, IoOpKind,
    OpenMode, Storage,
};
use crate::error::{Error, Result};

/// Submission-queue entries of each thread's ring (the completion queue has twice as many).
pub const RING_ENTRIES: u32 = 256;
/// Entries of a one-off ring used when the thread's ring is already borrowed (nested use).
const TEMP_RING_ENTRIES: u32 = 16;
/// Largest read or write put in one entry (the kernel caps a single transfer near 2 GiB anyway).
const MAX_RW_CHUNK: usize = 1 << 30;
/// Largest bounce buffer for unaligned O_DIRECT reads; longer reads go through it in pieces.
const BOUNCE_MAX: usize = 4 << 20;
/// Retries of an operation that completed with EINTR or EAGAIN before giving up.
pub(crate) const MAX_RETRIES: u32 = 64;
/// user_data bit of entries submitted without waiting: `ASYNC_BIT | batch << 16 | entry`.
const ASYNC_BIT: u64 = 1 << 63;
// An asynchronous batch is at most one ring's worth of entries, and the entry index has 16 bits
// of user_data.
const _: () = assert!(RING_ENTRIES <= 1 << 16);
/// user_data of the doorbell POLL_ADD ([`Doorbell`]): asynchronous (so synchronous reaping keeps
/// it), with a bit above the 32-bit batch id that no batch entry can have.
const DOORBELL_UD: u64 = ASYNC_BIT | 1 << 48;
const _: () = assert!(DOORBELL_UD > ASYNC_BIT | (u32::MAX as u64) << 16 | 0xffff);

fn errno_err(errno: i32) -> io::Error {
    io::Error::from_raw_os_error(errno)
}

/// A completion result (`>= 0`, or `-errno`) as an `io::Result`.
fn cqe_result(res: i32) -> io::Result<usize> {
    if res < 0 {
        Err(errno_err(-res))
    } else {
        Ok(res as usize)
    }
}

// ---------------------------------------------------------------------------------------------
// The ring
// ---------------------------------------------------------------------------------------------

/// One io_uring instance, owned by one thread (it is neither `Send` nor `Sync`: the ring is
/// created with IORING_SETUP_SINGLE_ISSUER when the kernel has it).
pub struct Ring {
    ring: IoUring,
    /// Set when the ring failed in a way that left it unusable (the errno): no entry is ever
    /// submitted on it again, and [`with_thread_ring`] replaces it.
    dead: Option<i32>,
    /// Bumped per [`Ring::run`]; the high half of each entry's user_data, so a completion can
    /// never be matched to the wrong batch.
    generation: u32,
    /// The thread's write-buffer pool as registered on this ring (thread rings only).
    fixed: Option<FixedBuffers>,
    /// The thread's long-lived ring (not a one-off nested or teardown ring): only it registers
    /// the thread's pool.
    thread_ring: bool,
    /// Batches submitted without waiting, by id (see the module docs).
    async_batches: HashMap<u32, AsyncBatch>,
    next_async: u32,
    /// The POLL_ADD on the shard's doorbell.
    doorbell: Doorbell,
    /// The kernel takes a timeout with io_uring_enter (IORING_FEAT_EXT_ARG, 5.11+). Without it
    /// nothing is submitted asynchronously (writes wait as before, the doorbell is a READ).
    ext_arg: bool,
    _not_send: PhantomData<*const ()>,
}

/// A batch submitted without waiting: each entry's result as it arrives, and what the kernel may
/// use until then.
struct AsyncBatch {
    raw: Vec<Option<i32>>,
    left: usize,
    keep: AsyncOps,
    /// Its ticket was dropped unclaimed: the batch goes as soon as it has completed.
    abandoned: bool,
}

/// Writes and fdatasyncs: the operations (holding their buffers and files), their fds, the op
/// each entry runs, and the results settled before submission (misaligned writes, links cut).
struct AsyncOps {
    ops: Vec<IoOp>,
    fds: Vec<RawFd>,
    idx: Vec<usize>,
    results: Vec<Option<Result<usize>>>,
}

impl AsyncBatch {
    /// Entries still in the kernel may be using the operations' buffers and files.
    fn holds_memory(&self) -> bool {
        self.left > 0
    }
}

/// The shard's doorbell poll (`wait_doorbell_or_io`): one POLL_ADD on its eventfd, kept armed
/// across waits so a ring doorbell and a completed write wake the same io_uring_enter. It points
/// to no memory of ours, so nothing waits for it before a ring goes: it dies with the ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Doorbell {
    /// No poll on the ring.
    Idle,
    /// The poll on eventfd `fd` is queued or in the kernel. `queued_after` counts the
    /// asynchronous entries queued behind it: [`Ring::fail_unsubmitted`] needs to know whether the
    /// poll is among the last entries, the ones the kernel never took.
    Armed { fd: RawFd, queued_after: usize },
    /// The poll on `fd` completed (the eventfd is readable): the next wait returns at once and
    /// clears the eventfd.
    Fired { fd: RawFd },
    /// The kernel refused the poll: this ring's waits are not for the doorbell, which callers
    /// then wait for plainly (re-arming would fail the same way, in a busy loop).
    Failed,
}

/// A pool registered on a ring: chunk `i` at registered-buffer index `i`. Holding the pool keeps
/// every registered chunk mapped for as long as the ring (and so the registration) lives.
struct FixedBuffers {
    pool: Pool,
    /// Chunks `0..registered` are registered.
    registered: u32,
    /// Why registration stopped (refused outright, or a later chunk refused), if it did: no more
    /// attempts on this ring.
    stopped: Option<String>,
}

impl std::fmt::Debug for Ring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ring").field("fd", &self.ring.as_raw_fd()).field("sq_entries", &self.sq_entries()).finish()
    }
}

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
            .or_else(|e| match e.raw_os_error() {
                Some(libc::EINVAL) => IoUring::builder().setup_submit_all().build(entries),
                _ => Err(e),
            })
            .or_else(|e| match e.raw_os_error() {
                Some(libc::EINVAL) => IoUring::new(entries),
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
            doorbell: Doorbell::Idle,
            _not_send: PhantomData,
        })
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
                    let why = match e.raw_os_error() {
                        Some(libc::ENOMEM) | Some(libc::EPERM) => " (RLIMIT_MEMLOCK?)",
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
    fn fixed_index(&self, buf: &WriteBuf) -> Option<u16> {
        let (pool_id, chunk) = buf.pool_slot()?;
        let f = self.fixed.as_ref()?;
        (f.pool.id() == pool_id && chunk < f.registered).then_some(chunk as u16)
    }

    /// Submission-queue size: the most entries in flight at once.
    pub fn sq_entries(&self) -> usize {
        self.ring.params().sq_entries() as usize
    }

    /// The ring's file descriptor.
    pub fn raw_fd(&self) -> RawFd {
        self.ring.as_raw_fd()
    }

    /// Whether the kernel supports an opcode (`io_uring::opcode::X::CODE`), by
    /// IORING_REGISTER_PROBE; false when the probe itself fails.
    pub fn supports(&self, code: u8) -> bool {
        let mut probe = io_uring::Probe::new();
        self.ring.submitter().register_probe(&mut probe).is_ok() && probe.is_supported(code)
    }

    /// Waits for at least `want` completions without submitting anything (one io_uring_enter).
    fn wait_only(&self, want: usize) -> io::Result<usize> {
        record_io(0, 1, 0, 0, 0);
        // SAFETY: no argument pointer is passed (None), and GETEVENTS with to_submit = 0 only
        // waits; the kernel reads no memory of ours.
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
                }
            }
            if b.left == 0 && b.abandoned {
                self.async_batches.remove(&id);
            }
        }
    }

    /// Forgets batch `id` (its ticket was dropped): at once if it has completed, else when it
    /// does; its operations (buffers, files) are kept until then.
    fn abandon_async(&mut self, id: u32) {
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
            Err(e) if matches!(e.raw_os_error(), Some(libc::EINTR) | Some(libc::EBUSY) | Some(libc::EAGAIN)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// True when completions are waiting to be reaped, or deferred completion work is waiting
    /// for an io_uring_enter (IORING_SQ_TASKRUN, or completions overflowed the CQ), without a
    /// system call.
    fn completions_waiting(&mut self) -> bool {
        let sq = self.ring.submission();
        let waiting = sq.taskrun() || sq.cq_overflow();
        drop(sq);
        waiting || !self.ring.completion().is_empty()
    }

    /// One io_uring_enter that waits for at least `want` completions, then reaps; with a
    /// `timeout` (at most that long) it also submits what is queued, without one it submits
    /// nothing ([`Ring::wait_only`]). Timeouts and interruptions are not errors.
    fn get_events(&mut self, want: usize, timeout: Option<Duration>) -> io::Result<()> {
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
            Err(e) if matches!(e.raw_os_error(), Some(libc::ETIME) | Some(libc::EINTR) | Some(libc::EBUSY)) => Ok(()),
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
    unsafe fn queue_async(&mut self, entries: &[squeue::Entry], keep: AsyncOps) -> std::result::Result<u32, AsyncOps> {
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
    fn arm_doorbell(&mut self, fd: RawFd) -> bool {
        match self.doorbell {
            Doorbell::Idle => {}
            Doorbell::Armed { fd: armed, .. } | Doorbell::Fired { fd: armed } => return armed == fd,
            Doorbell::Failed => return false,
        }
        if !self.sq_room(1) {
            return false;
        }
        let e = opcode::PollAdd::new(types::Fd(fd), libc::POLLIN as u32).build().user_data(DOORBELL_UD);
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
    fn submit_queued(&mut self) -> io::Result<()> {
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
                    if matches!(e.raw_os_error(), Some(libc::EINTR) | Some(libc::EAGAIN) | Some(libc::EBUSY))
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
                    let errno = e.raw_os_error().unwrap_or(libc::EIO);
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
    fn fail_unsubmitted(&mut self, left: usize, errno: i32) {
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
    fn complete_async(&mut self, id: u32, wait: bool) -> Option<AsyncOutcome> {
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
        let raw: Vec<i32> = b.raw.into_iter().map(|r| r.unwrap_or(-libc::EIO)).collect();
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
    pub unsafe fn run(&mut self, entries: &[squeue::Entry]) -> Vec<i32> {
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
            let errno = e.raw_os_error().unwrap_or(libc::EIO);
            if errno == libc::EINTR {
                continue;
            }
            if (errno == libc::EAGAIN || errno == libc::EBUSY) && busy < 10_000 {
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
                    Err(w) if w.raw_os_error() == Some(libc::EINTR) => {}
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
        let fail = -hard_errno.unwrap_or(libc::EIO);
        res.into_iter().map(|r| r.unwrap_or(fail)).collect()
    }

    /// Replaces a ring that failed (`errno`) by a fresh one; if none can be made, marks this one
    /// dead so nothing is submitted on it again.
    fn retire(&mut self, errno: i32) {
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
                fresh.async_batches = std::mem::take(&mut self.async_batches);
                fresh.next_async = self.next_async;
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

thread_local! {
    static THREAD_RING: RefCell<Option<Ring>> = const { RefCell::new(None) };
}

/// Runs `f` with this thread's ring, creating it on the thread's first use ([`RING_ENTRIES`]
/// entries). Fails only if no ring can be created (io_uring refused). A nested call (from inside
/// `f`) or a call during thread teardown gets a one-off ring instead of panicking.
pub fn with_thread_ring<R>(f: impl FnOnce(&mut Ring) -> R) -> io::Result<R> {
    let mut f = Some(f);
    let outcome = THREAD_RING.try_with(|cell| -> Option<io::Result<R>> {
        let mut slot = cell.try_borrow_mut().ok()?;
        if slot.as_ref().is_none_or(|r| r.dead.is_some()) {
            match Ring::new(RING_ENTRIES) {
                Ok(mut r) => {
                    r.thread_ring = true;
                    // A dead ring's asynchronous batches (all drained when it died) keep their
                    // results and ids for whoever still holds their tickets.
                    if let Some(old) = slot.as_mut() {
                        r.async_batches = std::mem::take(&mut old.async_batches);
                        r.next_async = old.next_async;
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
unsafe fn run_one(ring: &mut Ring, e: squeue::Entry) -> io::Result<usize> {
    // SAFETY: forwarded to the caller.
    let r = unsafe { ring.run(std::slice::from_ref(&e)) };
    cqe_result(r.first().copied().unwrap_or(-libc::EIO))
}

/// Whether an errno is worth retrying the same operation for.
fn transient(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EINTR) | Some(libc::EAGAIN))
}

/// One READ at `pos` into `buf` (at most [`MAX_RW_CHUNK`] bytes), retried on EINTR/EAGAIN.
fn read_once(ring: &mut Ring, fd: RawFd, buf: &mut [u8], pos: u64) -> io::Result<usize> {
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
fn write_once(ring: &mut Ring, fd: RawFd, buf: &[u8], pos: u64, rw_flags: i32) -> io::Result<usize> {
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
fn read_full(ring: &mut Ring, fd: RawFd, buf: &mut [u8], pos: u64, align: Option<u64>) -> io::Result<usize> {
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
fn write_full(ring: &mut Ring, fd: RawFd, buf: &[u8], pos: u64, rw_flags: i32) -> io::Result<()> {
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
    super::record_writes(1);
    Ok(())
}

fn fsync_op(fd: RawFd, datasync: bool) -> squeue::Entry {
    let flags = if datasync { types::FsyncFlags::DATASYNC } else { types::FsyncFlags::empty() };
    opcode::Fsync::new(types::Fd(fd)).flags(flags).build()
}

fn fsync_on(ring: &mut Ring, fd: RawFd, datasync: bool) -> io::Result<()> {
    let mut tries = 0;
    loop {
        // SAFETY: an fsync entry points to no memory of ours.
        match unsafe { run_one(ring, fsync_op(fd, datasync)) } {
            Err(e) if e.raw_os_error() == Some(libc::EINTR) && tries < MAX_RETRIES => tries += 1,
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

/// Why an O_DIRECT write was refused before reaching the kernel: `what` ("offset", "length" or
/// "memory address") is `value`, not a multiple of `align`. Carried inside the `io::Error`
/// (kind `InvalidInput`, what EINVAL maps to) of an [`Error::Io`]; find it with
/// `source.get_ref().and_then(|e| e.downcast_ref::<Misaligned>())`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Misaligned {
    pub what: &'static str,
    pub value: u64,
    pub align: usize,
}

impl std::fmt::Display for Misaligned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "EINVAL: O_DIRECT write {} {} (0x{:x}) is not a multiple of the {}-byte alignment",
            self.what, self.value, self.value, self.align
        )
    }
}

impl std::error::Error for Misaligned {}

/// The errno an error carries: the OS one, or EINVAL for a [`Misaligned`] refusal.
pub fn error_errno(e: &Error) -> Option<i32> {
    match e {
        Error::Io { source, .. } => source
            .raw_os_error()
            .or_else(|| source.get_ref().and_then(|inner| inner.downcast_ref::<Misaligned>()).map(|_| libc::EINVAL)),
        _ => None,
    }
}

/// Checks an O_DIRECT write's offset, length and buffer address.
fn check_direct_write(a: DirectAlignment, pos: u64, len: usize, addr: usize) -> io::Result<()> {
    let bad = if !pos.is_multiple_of(a.offset as u64) {
        Some(Misaligned { what: "offset", value: pos, align: a.offset })
    } else if !len.is_multiple_of(a.offset) {
        Some(Misaligned { what: "length", value: len as u64, align: a.offset })
    } else if !addr.is_multiple_of(a.mem) {
        Some(Misaligned { what: "memory address", value: addr as u64, align: a.mem })
    } else {
        None
    };
    match bad {
        Some(m) => Err(io::Error::new(io::ErrorKind::InvalidInput, m)),
        None => Ok(()),
    }
}

// ---------------------------------------------------------------------------------------------
// Files
// ---------------------------------------------------------------------------------------------

/// A file whose I/O goes through the calling thread's ring. `direct` is set when it was opened
/// O_DIRECT.
#[derive(Debug)]
pub struct UringFile {
    file: File,
    path: PathBuf,
    direct: Option<DirectAlignment>,
}

impl UringFile {
    /// Writes all of `buf` at `pos` with `rw_flags` (0 or RWF_DSYNC); for an O_DIRECT file the
    /// offset, length and address must be aligned.
    fn write_with_flags(&self, buf: &[u8], pos: u64, rw_flags: i32, op: &'static str) -> Result<()> {
        if buf.is_empty() {
            return Ok(());
        }
        if let Some(a) = self.direct {
            check_direct_write(a, pos, buf.len(), buf.as_ptr() as usize)
                .map_err(|e| Error::io("write", &self.path, e))?;
        }
        let fd = self.fd();
        self.ring(op, |ring| write_full(ring, fd, buf, pos, rw_flags))
    }

    fn ring<R>(&self, op: &'static str, f: impl FnOnce(&mut Ring) -> io::Result<R>) -> Result<R> {
        match with_thread_ring(f) {
            Ok(r) => r.map_err(|e| Error::io(op, &self.path, e)),
            Err(e) => Err(Error::io(op, &self.path, e)),
        }
    }

    fn fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }

    /// O_DIRECT read of any range: aligned requests go straight into `buf`; others read the
    /// aligned superset into a bounce buffer (pieces of at most [`BOUNCE_MAX`]) and copy out.
    fn read_direct(ring: &mut Ring, fd: RawFd, a: DirectAlignment, buf: &mut [u8], pos: u64) -> io::Result<usize> {
        let al = a.mem.max(a.offset);
        let al64 = al as u64;
        if pos.is_multiple_of(a.offset as u64)
            && buf.len().is_multiple_of(a.offset)
            && (buf.as_ptr() as usize).is_multiple_of(a.mem)
        {
            return read_full(ring, fd, buf, pos, Some(a.offset as u64));
        }
        let end = pos
            .checked_add(buf.len() as u64)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "read range overflows"))?;
        super::record_bounced_read();
        let start = pos / al64 * al64;
        let aligned_end = end.div_ceil(al64) * al64;
        let chunk = ((aligned_end - start) as usize).min(BOUNCE_MAX.max(al));
        let mut bounce = AlignedBuf::new(chunk, al);
        let mut cur = start;
        let mut copied = 0usize;
        let mut read = 0u64;
        while cur < aligned_end {
            let want = ((aligned_end - cur) as usize).min(chunk);
            let n = read_once(ring, fd, &mut bounce.full_mut()[..want], cur)?;
            read += n as u64;
            let from = cur.max(pos);
            let to = (cur + n as u64).min(end);
            if to > from {
                let src = &bounce.full()[(from - cur) as usize..(to - cur) as usize];
                buf[(from - pos) as usize..(to - pos) as usize].copy_from_slice(src);
                copied = (to - pos) as usize;
            }
            if n == 0 || (n < want && !(cur + n as u64).is_multiple_of(al64)) {
                break; // end of file
            }
            cur += n as u64;
        }
        record_io(0, 0, read, 0, 0);
        Ok(copied)
    }
}

impl IoFile for UringFile {
    fn path(&self) -> &Path {
        &self.path
    }

    fn read_at(&self, buf: &mut [u8], pos: u64) -> Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let fd = self.fd();
        match self.direct {
            Some(a) => self.ring("read", |ring| UringFile::read_direct(ring, fd, a, buf, pos)),
            None => self.ring("read", |ring| read_full(ring, fd, buf, pos, None)),
        }
    }

    fn write_all_at(&self, buf: &[u8], pos: u64) -> Result<()> {
        self.write_with_flags(buf, pos, 0, "write")
    }

    fn write_all_at_dsync(&self, buf: &[u8], pos: u64) -> Result<()> {
        self.write_with_flags(buf, pos, libc::RWF_DSYNC, "write RWF_DSYNC")
    }

    fn sync_data(&self) -> Result<()> {
        let fd = self.fd();
        self.ring("fdatasync", |ring| fsync_on(ring, fd, true))
    }

    fn set_len(&self, len: u64) -> Result<()> {
        let fd = self.fd();
        if caps().ftruncate {
            return self.ring("truncate", |ring| {
                // SAFETY: an ftruncate entry points to no memory of ours.
                unsafe { run_one(ring, opcode::Ftruncate::new(types::Fd(fd), len).build()) }.map(|_| ())
            });
        }
        record_io(1, 1, 0, 0, 0);
        // SAFETY: ftruncate takes an fd this file owns and an integer; no memory is passed.
        let rc = unsafe { libc::ftruncate(fd, len as libc::off_t) };
        if rc != 0 {
            return Err(Error::io("truncate", &self.path, io::Error::last_os_error()));
        }
        Ok(())
    }

    fn allocate(&self, len: u64) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        let fd = self.fd();
        self.ring("fallocate", |ring| {
            let e = opcode::Fallocate::new(types::Fd(fd), len).offset(0).mode(libc::FALLOC_FL_KEEP_SIZE).build();
            // SAFETY: a fallocate entry points to no memory of ours.
            unsafe { run_one(ring, e) }.map(|_| ())
        })
    }

    fn len(&self) -> Result<u64> {
        self.file.metadata().map(|m| m.len()).map_err(|e| Error::io("stat", &self.path, e))
    }

    fn modified_ms(&self) -> Result<i64> {
        let m = self.file.metadata().and_then(|m| m.modified()).map_err(|e| Error::io("stat", &self.path, e))?;
        Ok(m.duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0))
    }

    fn raw_fd(&self) -> Option<RawFd> {
        Some(self.fd())
    }

    fn direct_alignment(&self) -> Option<DirectAlignment> {
        self.direct
    }
}

// ---------------------------------------------------------------------------------------------
// Kernel capabilities
// ---------------------------------------------------------------------------------------------

/// Optional opcodes, probed once per process.
#[derive(Clone, Copy, Debug)]
struct Caps {
    ftruncate: bool,
    renameat: bool,
    unlinkat: bool,
}

fn caps() -> Caps {
    static CAPS: OnceLock<Caps> = OnceLock::new();
    *CAPS.get_or_init(|| {
        with_thread_ring(|r| Caps {
            ftruncate: r.supports(opcode::Ftruncate::CODE),
            renameat: r.supports(opcode::RenameAt::CODE),
            unlinkat: r.supports(opcode::UnlinkAt::CODE),
        })
        .unwrap_or(Caps { ftruncate: false, renameat: false, unlinkat: false })
    })
}

fn cpath(op: &'static str, path: &Path) -> Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| Error::io(op, path, io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte")))
}

// ---------------------------------------------------------------------------------------------
// Storage
// ---------------------------------------------------------------------------------------------

/// io_uring storage in [`IoMode::Direct`] or [`IoMode::Buffered`]. `file_mode`/`dir_mode` are
/// the permissions of created files and directories (owner-only by default).
#[derive(Debug, Clone)]
pub struct UringStorage {
    mode: IoMode,
    pub file_mode: u32,
    pub dir_mode: u32,
}

impl UringStorage {
    /// Storage in `mode` (Direct or Buffered; Sync is refused with InvalidInput). Creates the
    /// calling thread's ring, so a refusal of io_uring shows here.
    pub fn new(mode: IoMode) -> Result<UringStorage> {
        if mode == IoMode::Sync {
            return Err(Error::io(
                "io_uring",
                "",
                io::Error::new(io::ErrorKind::InvalidInput, "UringStorage runs in direct or buffered mode, not sync"),
            ));
        }
        with_thread_ring(|_| ()).map_err(|e| Error::io("io_uring_setup", "", e))?;
        Ok(UringStorage { mode, file_mode: DEFAULT_FILE_MODE, dir_mode: DEFAULT_DIR_MODE })
    }

    fn open_file(&self, path: &Path, mode: OpenMode, direct: bool) -> Result<Arc<dyn IoFile>> {
        let mut o = OpenOptions::new();
        o.read(true).mode(self.file_mode);
        match mode {
            OpenMode::Read => {}
            OpenMode::ReadWrite => {
                o.write(true);
            }
            OpenMode::CreateNew => {
                o.write(true).create_new(true);
            }
            OpenMode::CreateTruncate => {
                o.write(true).create(true).truncate(true);
            }
        }
        o.custom_flags(super::std_backend::SAFE_OPEN_FLAGS | if direct { libc::O_DIRECT } else { 0 });
        let file = match o.open(path) {
            Ok(f) => f,
            Err(e) if direct && e.raw_os_error() == Some(libc::EINVAL) => {
                // The filesystem refuses O_DIRECT. With O_CREAT the kernel creates the file
                // before refusing; a file we created new is ours to remove.
                if mode == OpenMode::CreateNew {
                    let _ = std::fs::remove_file(path);
                }
                return Err(Error::io(
                    "open O_DIRECT",
                    path,
                    io::Error::new(
                        io::ErrorKind::InvalidInput,
                        "the filesystem refuses O_DIRECT (EINVAL); use the buffered I/O mode for this directory",
                    ),
                ));
            }
            Err(e) => return Err(super::std_backend::open_error(path, e)),
        };
        super::std_backend::check_regular(&file, path)?;
        super::std_backend::set_status_flags(&file, path, if direct { libc::O_DIRECT } else { 0 })?;
        let direct = direct.then(|| super::probe::dio_alignment_fd(file.as_raw_fd()));
        Ok(Arc::new(UringFile { file, path: path.to_path_buf(), direct }))
    }
}

fn canceled(path: &Path) -> Error {
    Error::io("submit", path, errno_err(libc::ECANCELED))
}

/// Runs one operation of a batch on its own (after a short write fixed up its predecessor).
fn run_op_alone(ring: &mut Ring, op: &IoOp, fd: RawFd) -> Result<usize> {
    match &op.kind {
        IoOpKind::Write { buf, pos, dsync } => write_full(ring, fd, buf, *pos, rw_flags(*dsync))
            .map(|_| buf.len())
            .map_err(|e| Error::io("write", op.file.path(), e)),
        IoOpKind::SyncData => {
            fsync_on(ring, fd, true).map(|_| 0).map_err(|e| Error::io("fdatasync", op.file.path(), e))
        }
    }
}

fn rw_flags(dsync: bool) -> i32 {
    if dsync {
        libc::RWF_DSYNC
    } else {
        0
    }
}

/// Entries for `ops[start..]`, at most one SQ's worth: ops whose result is known beforehand (a
/// misaligned write, a successor of a failed link) are settled in `results` and never submitted.
/// Returns the op index of each entry, the entries (linked only to the very next op when it is in
/// the same round), where the next round starts, and how many of the writes are from the pool
/// (WRITE_FIXED from registered chunks, plain otherwise), to count once the round is submitted.
fn build_round(
    ring: &Ring,
    ops: &[IoOp],
    fds: &[RawFd],
    start: usize,
    results: &mut [Option<Result<usize>>],
) -> (Vec<usize>, Vec<squeue::Entry>, usize, (u64, u64)) {
    let (mut fixed_writes, mut plain_pool_writes) = (0u64, 0u64);
    let n = ops.len();
    let cap = ring.sq_entries().max(1);
    let failed = |results: &[Option<Result<usize>>], i: usize| matches!(results.get(i), Some(Some(Err(_))));
    let mut idx: Vec<usize> = Vec::new();
    let mut sqes: Vec<squeue::Entry> = Vec::new();
    let mut j = start;
    while j < n && idx.len() < cap {
        let op = &ops[j];
        if j > 0 && ops[j - 1].link_next && failed(results, j - 1) {
            results[j] = Some(Err(canceled(op.file.path())));
            j += 1;
            continue;
        }
        let sqe = match &op.kind {
            IoOpKind::Write { buf, pos, dsync } => {
                if let Some(a) = op.file.direct_alignment() {
                    if let Err(e) = check_direct_write(a, *pos, buf.len(), buf.as_ptr() as usize) {
                        results[j] = Some(Err(Error::io("write", op.file.path(), e)));
                        j += 1;
                        continue;
                    }
                }
                let len = buf.len().min(MAX_RW_CHUNK) as u32;
                let fd = types::Fd(fds[j]);
                match ring.fixed_index(buf) {
                    Some(index) => {
                        fixed_writes += 1;
                        // The whole range [ptr, ptr + len) lies in chunk `index` (a WriteBuf
                        // never spans chunks), which is registered at that index on this ring.
                        opcode::WriteFixed::new(fd, buf.as_ptr(), len, index)
                            .offset(*pos)
                            .rw_flags(rw_flags(*dsync))
                            .build()
                    }
                    None => {
                        plain_pool_writes += u64::from(buf.pool_slot().is_some());
                        opcode::Write::new(fd, buf.as_ptr(), len).offset(*pos).rw_flags(rw_flags(*dsync)).build()
                    }
                }
            }
            IoOpKind::SyncData => fsync_op(fds[j], true),
        };
        idx.push(j);
        sqes.push(sqe);
        j += 1;
    }
    for k in 0..idx.len() {
        let i = idx[k];
        if ops[i].link_next && idx.get(k + 1) == Some(&(i + 1)) {
            sqes[k] = sqes[k].clone().flags(squeue::Flags::IO_LINK);
        }
    }
    (idx, sqes, j, (fixed_writes, plain_pool_writes))
}

/// The batch on the ring: rounds of at most one SQ's worth of entries, each with one
/// `submit_and_wait`; short writes finished by follow-up submissions.
fn submit_on_ring(ring: &mut Ring, ops: &[IoOp], fds: &[RawFd]) -> Vec<Result<usize>> {
    if uses_pool(ops) {
        ring.refresh_fixed();
    }
    let n = ops.len();
    let mut results: Vec<Option<Result<usize>>> = (0..n).map(|_| None).collect();
    let mut next = 0;
    let (mut written, mut fsyncs) = (0u64, 0u64);
    while next < n {
        let (idx, sqes, j, (fixed, plain)) = build_round(ring, ops, fds, next, &mut results);
        pool::count_pool_writes(fixed, plain);
        // SAFETY: every buffer pointed to is owned by `ops` (an AlignedBuf, or a pool chunk the
        // op holds a reference to, so neither freed nor handed to anyone else), borrowed for this
        // whole call; run returns only after every submitted entry completed. A WRITE_FIXED
        // names the registered chunk holding its whole range, and the ring holds that chunk's pool.
        let raw = unsafe { ring.run(&sqes) };
        let (w, f) = settle_round(ring, ops, fds, &idx, &raw, &mut results);
        written += w;
        fsyncs += f;
        next = j;
    }
    finish_batch(ops, results, (written, fsyncs))
}

/// The end of a batch, synchronous or not: counts the bytes written, fsyncs and writes, and gives
/// each op its result (one with none, which cannot happen, fails with EIO).
fn finish_batch(
    ops: &[IoOp],
    results: Vec<Option<Result<usize>>>,
    (written, fsyncs): (u64, u64),
) -> Vec<Result<usize>> {
    record_io(0, 0, 0, written, fsyncs);
    super::record_writes(ops.iter().filter(|o| matches!(o.kind, IoOpKind::Write { .. })).count() as u64);
    results
        .into_iter()
        .zip(ops)
        .map(|(r, op)| r.unwrap_or_else(|| Err(Error::io("submit", op.file.path(), errno_err(libc::EIO)))))
        .collect()
}

/// Each op paired with its result.
fn completions(ops: Vec<IoOp>, results: Vec<Result<usize>>) -> Vec<IoCompletion> {
    ops.into_iter().zip(results).map(|(op, result)| IoCompletion { op, result }).collect()
}

/// Whether any op writes from the thread's pool (whose chunks may need registering first).
fn uses_pool(ops: &[IoOp]) -> bool {
    ops.iter().any(|o| matches!(&o.kind, IoOpKind::Write { buf, .. } if buf.pool_slot().is_some()))
}

/// Queues each batch on the ring without waiting and submits them all with one io_uring_enter.
/// A batch that does not fit one round, or that the ring cannot take, runs synchronously
/// instead (and comes back [`AsyncIo::Ready`]).
fn start_async_on_ring(ring: &mut Ring, batches: Vec<(Vec<IoOp>, Vec<RawFd>)>) -> Vec<AsyncIo> {
    if batches.iter().any(|(ops, _)| uses_pool(ops)) {
        ring.refresh_fixed();
    }
    let mut out = Vec::with_capacity(batches.len());
    for (ops, fds) in batches {
        if ops.is_empty() {
            out.push(AsyncIo::Ready(Vec::new()));
            continue;
        }
        let mut results: Vec<Option<Result<usize>>> = (0..ops.len()).map(|_| None).collect();
        let (idx, sqes, next, pool_writes) = build_round(ring, &ops, &fds, 0, &mut results);
        if next < ops.len() || sqes.is_empty() || !ring.thread_ring || !ring.ext_arg {
            // Too long for one round, or nothing to submit: the synchronous path settles it.
            let r = submit_on_ring(ring, &ops, &fds);
            out.push(AsyncIo::Ready(completions(ops, r)));
            continue;
        }
        let keep = AsyncOps { ops, fds, idx, results };
        // SAFETY: every entry points into a buffer owned by `keep`'s ops (an AlignedBuf or a pool
        // chunk the op holds a reference to: heap memory that does not move with the Vec), into
        // the process-wide zero buffer of zero-fill writes (allocated once, never freed or
        // written), or names a registered chunk whose pool the ring holds; each produces one
        // completion.
        match unsafe { ring.queue_async(&sqes, keep) } {
            Ok(id) => {
                pool::count_pool_writes(pool_writes.0, pool_writes.1);
                out.push(AsyncIo::Ring(super::RingTicket::new(id)))
            }
            Err(AsyncOps { ops, fds, .. }) => {
                let r = submit_on_ring(ring, &ops, &fds);
                out.push(AsyncIo::Ready(completions(ops, r)));
            }
        }
    }
    let _ = ring.submit_queued();
    out
}

/// The results of an asynchronous batch of this thread's ring ([`UringStorage::submit_async`]),
/// or `None` while it is in flight (after `wait`, it blocks until the batch is done). The ring
/// that holds the batch is used as it is (a dead one still holds the results of its drained
/// batches), never a new one: a one-off ring would not know the id and would call a batch that is
/// still in the kernel lost. While the thread's ring is in use further up the stack nothing can
/// be claimed (`None`, also with `wait`); without a thread ring (never made, or the thread is
/// ending) the batch is [`AsyncOutcome::Lost`].
pub(crate) fn complete_async(id: u32, wait: bool) -> Option<AsyncOutcome> {
    THREAD_RING
        .try_with(|cell| match cell.try_borrow_mut() {
            Ok(mut slot) => match slot.as_mut() {
                Some(ring) => ring.complete_async(id, wait),
                None => Some(AsyncOutcome::Lost),
            },
            Err(_) => None,
        })
        .unwrap_or(Some(AsyncOutcome::Lost))
}

/// Drops the claim on asynchronous batch `id` of this thread's ring (see [`super::RingTicket`]).
pub(crate) fn abandon_async(id: u32) {
    let _ = THREAD_RING.try_with(|cell| {
        if let Ok(mut slot) = cell.try_borrow_mut() {
            if let Some(ring) = slot.as_mut() {
                ring.abandon_async(id);
            }
        }
    });
}

/// Runs the deferred completion work of this thread's ring, if it has one and work is waiting
/// (no system call otherwise).
pub(crate) fn poll_async() {
    let _ = THREAD_RING.try_with(|cell| {
        if let Ok(mut slot) = cell.try_borrow_mut() {
            if let Some(ring) = slot.as_mut() {
                let anything_async = !ring.async_batches.is_empty() || matches!(ring.doorbell, Doorbell::Armed { .. });
                if anything_async && ring.completions_waiting() {
                    let _ = ring.get_events(0, None);
                }
            }
        }
    });
}

/// See [`super::completions_waiting`].
pub(crate) fn completions_waiting() -> bool {
    THREAD_RING
        .try_with(|cell| {
            cell.try_borrow_mut()
                .ok()
                .and_then(|mut slot| slot.as_mut().map(|r| r.completions_waiting()))
                .unwrap_or(false)
        })
        .unwrap_or(false)
}

/// Sleeps on this thread's ring until the doorbell eventfd `fd` is readable (a POLL_ADD kept
/// armed across calls), an asynchronous batch completes, or `timeout` passes; clears the
/// doorbell when it rang. False when this thread has no usable ring (the caller waits plainly).
pub(crate) fn wait_doorbell_or_io(fd: RawFd, timeout: Duration) -> bool {
    let r = with_thread_ring(|ring| {
        if !ring.thread_ring || ring.dead.is_some() || !ring.ext_arg {
            return false;
        }
        if !ring.arm_doorbell(fd) {
            return false;
        }
        // A completed batch nobody has claimed yet is work for the caller; an abandoned one is not
        // (it only waits to be dropped).
        let fired = matches!(ring.doorbell, Doorbell::Fired { .. });
        let done_waiting = fired || ring.async_batches.values().any(|b| b.left == 0 && !b.abandoned);
        if !done_waiting {
            if ring.get_events(1, Some(timeout)).is_err() {
                return false;
            }
        } else {
            let _ = ring.submit_queued();
        }
        match ring.doorbell {
            Doorbell::Fired { .. } => {
                ring.doorbell = Doorbell::Idle;
                let _ = read_eventfd_raw(fd);
            }
            // Refused while this wait slept: it may have slept through a ring; say so, and the
            // caller's plain wait takes over.
            Doorbell::Failed => return false,
            _ => {}
        }
        true
    });
    r.unwrap_or(false)
}

/// Turns one round's completion results (`raw[k]` for `ops[idx[k]]`) into final results:
/// finishes short writes with follow-up submissions, re-runs the ops the kernel cancelled only
/// because their predecessor was short, and cancels successors of failures. Returns the bytes
/// written and fsyncs done that the follow-ups did not already count.
fn settle_round(
    ring: &mut Ring,
    ops: &[IoOp],
    fds: &[RawFd],
    idx: &[usize],
    raw: &[i32],
    results: &mut [Option<Result<usize>>],
) -> (u64, u64) {
    let (mut written, mut fsyncs) = (0u64, 0u64);
    let mut fixed_prev = false;
    for (k, &i) in idx.iter().enumerate() {
        let op = &ops[i];
        let r = raw.get(k).copied().unwrap_or(-libc::EIO);
        let linked = k > 0 && idx[k - 1] + 1 == i && ops[i - 1].link_next;
        let mut fixed = false;
        let res = if linked && matches!(results[i - 1], Some(Err(_))) {
            Err(canceled(op.file.path()))
        } else if linked && fixed_prev && r == -libc::ECANCELED {
            // The kernel cancelled this op because its predecessor was short; that one has
            // been finished, so run this one now (it counts its own bytes and fsyncs).
            fixed = true;
            run_op_alone(ring, op, fds[i])
        } else {
            match &op.kind {
                IoOpKind::Write { buf, pos, dsync } => match cqe_result(r) {
                    Ok(w) if w >= buf.len() => {
                        written += buf.len() as u64;
                        Ok(buf.len())
                    }
                    Ok(w) => {
                        // Short: the kernel failed the link; write the remainder.
                        fixed = true;
                        written += w as u64;
                        write_full(ring, fds[i], &buf[w..], *pos + w as u64, rw_flags(*dsync))
                            .map(|_| buf.len())
                            .map_err(|e| Error::io("write", op.file.path(), e))
                    }
                    Err(e) => Err(Error::io("write", op.file.path(), e)),
                },
                IoOpKind::SyncData => {
                    let res = cqe_result(r).map(|_| 0).map_err(|e| Error::io("fdatasync", op.file.path(), e));
                    fsyncs += u64::from(res.is_ok());
                    res
                }
            }
        };
        fixed_prev = fixed;
        results[i] = Some(res);
    }
    (written, fsyncs)
}

impl Storage for UringStorage {
    fn open(&self, path: &Path, mode: OpenMode) -> Result<Arc<dyn IoFile>> {
        self.open_file(path, mode, false)
    }

    fn open_log(&self, path: &Path, mode: OpenMode) -> Result<Arc<dyn IoFile>> {
        self.open_file(path, mode, self.mode == IoMode::Direct)
    }

    fn mode(&self) -> IoMode {
        self.mode
    }

    fn submit(&self, ops: Vec<IoOp>) -> Vec<IoCompletion> {
        if ops.is_empty() {
            return Vec::new();
        }
        let fds: Option<Vec<RawFd>> = ops.iter().map(|o| o.file.raw_fd()).collect();
        let Some(fds) = fds else {
            return super::submit_one_by_one(ops);
        };
        // `ops` (and so every buffer) stays owned here until the ring has reaped everything.
        match with_thread_ring(|ring| submit_on_ring(ring, &ops, &fds)) {
            Ok(results) => completions(ops, results),
            Err(_) => super::submit_one_by_one(ops),
        }
    }

    fn submit_async(&self, batches: Vec<Vec<IoOp>>) -> Vec<AsyncIo> {
        let mut with_fds = Vec::with_capacity(batches.len());
        for ops in batches {
            let fds: Option<Vec<RawFd>> = ops.iter().map(|o| o.file.raw_fd()).collect();
            with_fds.push((ops, fds));
        }
        if with_fds.iter().any(|(_, fds)| fds.is_none()) {
            return with_fds.into_iter().map(|(ops, _)| AsyncIo::Ready(self.submit(ops))).collect();
        }
        let batches: Vec<(Vec<IoOp>, Vec<RawFd>)> =
            with_fds.into_iter().map(|(ops, fds)| (ops, fds.unwrap_or_default())).collect();
        // Ownership goes into the closure through a cell, so it comes back if no ring can be had.
        let cell = RefCell::new(Some(batches));
        match with_thread_ring(|ring| cell.borrow_mut().take().map(|b| start_async_on_ring(ring, b))) {
            Ok(Some(r)) => r,
            _ => {
                let batches = cell.borrow_mut().take().unwrap_or_default();
                batches.into_iter().map(|(ops, _)| AsyncIo::Ready(super::submit_one_by_one(ops))).collect()
            }
        }
    }

    fn create_dir_all(&self, path: &Path) -> Result<()> {
        super::std_backend::create_dir_all(path, self.dir_mode)
    }

    fn lock(&self, path: &Path, kind: super::lock::LockKind) -> Result<Option<super::lock::LockGuard>> {
        super::lock::lock_path(path, kind, self.file_mode)
    }

    fn list_dir(&self, path: &Path) -> Result<Vec<String>> {
        super::std_backend::list_dir(path)
    }

    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        if !caps().renameat {
            return std::fs::rename(from, to).map_err(|e| Error::io("rename", from, e));
        }
        let (f, t) = (cpath("rename", from)?, cpath("rename", to)?);
        let r = with_thread_ring(|ring| {
            let e = opcode::RenameAt::new(types::Fd(libc::AT_FDCWD), f.as_ptr(), types::Fd(libc::AT_FDCWD), t.as_ptr())
                .build();
            // SAFETY: both C strings live until this closure returns, after the completion.
            unsafe { run_one(ring, e) }
        });
        r.and_then(|r| r).map(|_| ()).map_err(|e| Error::io("rename", from, e))
    }

    fn remove_file(&self, path: &Path) -> Result<()> {
        if !caps().unlinkat {
            return std::fs::remove_file(path).map_err(|e| Error::io("unlink", path, e));
        }
        let p = cpath("unlink", path)?;
        let r = with_thread_ring(|ring| {
            let e = opcode::UnlinkAt::new(types::Fd(libc::AT_FDCWD), p.as_ptr()).build();
            // SAFETY: the C string lives until this closure returns, after the completion.
            unsafe { run_one(ring, e) }
        });
        r.and_then(|r| r).map(|_| ()).map_err(|e| Error::io("unlink", path, e))
    }

    fn sync_dir(&self, path: &Path) -> Result<()> {
        let d = File::open(path).map_err(|e| Error::io("open", path, e))?;
        let fd = d.as_raw_fd();
        let r = with_thread_ring(|ring| fsync_on(ring, fd, false));
        r.and_then(|r| r).map_err(|e| Error::io("fsync", path, e))
    }

    /// A symbolic link exists here even when dangling: opening it is then refused, not created.
    fn exists(&self, path: &Path) -> bool {
        std::fs::symlink_metadata(path).is_ok()
    }

    fn is_dir(&self, path: &Path) -> bool {
        path.is_dir()
    }
}

// ---------------------------------------------------------------------------------------------
// Sleeping on an eventfd
// ---------------------------------------------------------------------------------------------

fn eventfd_err(fd: RawFd, e: io::Error) -> Error {
    Error::io("eventfd wait", format!("<eventfd {fd}>"), e)
}

/// Sleeps on the thread's ring until `fd` (an eventfd) is readable, then reads it: an
/// IORING_OP_READ of 8 bytes (linked to a LINK_TIMEOUT when `timeout` is set) and one
/// io_uring_enter that waits for it. Returns `Some(counter)` when woken, `None` on timeout.
/// A non-blocking (EFD_NONBLOCK) eventfd works too: on this kernel (6.18) the READ still waits
/// in one enter; where a kernel answers it with EAGAIN, the wait is retried as a POLL_ADD (plus
/// the timeout) and a non-blocking read(2). Falls back to [`wait_eventfd_plain`] if this
/// thread cannot have a ring.
pub fn wait_eventfd(fd: RawFd, timeout: Option<Duration>) -> Result<Option<u64>> {
    match with_thread_ring(|ring| wait_eventfd_on(ring, fd, timeout)) {
        Ok(r) => r,
        Err(_) => wait_eventfd_plain(fd, timeout),
    }
}

fn wait_eventfd_on(ring: &mut Ring, fd: RawFd, timeout: Option<Duration>) -> Result<Option<u64>> {
    let deadline = timeout.map(|t| Instant::now() + t);
    let mut use_poll = false;
    let mut first_round = true;
    loop {
        let left = match deadline {
            Some(d) => {
                let now = Instant::now();
                if now >= d && !first_round {
                    return Ok(None);
                }
                Some(d.saturating_duration_since(now))
            }
            None => None,
        };
        let ts = left.map(|d| types::Timespec::new().sec(d.as_secs()).nsec(d.subsec_nanos()));
        let mut val = 0u64;
        let first = if use_poll {
            opcode::PollAdd::new(types::Fd(fd), libc::POLLIN as u32).build()
        } else {
            opcode::Read::new(types::Fd(fd), (&mut val as *mut u64).cast::<u8>(), 8).offset(0).build()
        };
        let mut entries = vec![first];
        if let Some(ts) = ts.as_ref() {
            entries[0] = entries[0].clone().flags(squeue::Flags::IO_LINK);
            entries.push(opcode::LinkTimeout::new(ts).build());
        }
        // SAFETY: `val` and `ts` live on this stack frame until run returns, after both the
        // read (or poll) and its timeout have completed.
        let r = unsafe { ring.run(&entries) };
        first_round = false;
        let first = r.first().copied().unwrap_or(-libc::EIO);
        match first {
            8 if !use_poll => {
                record_io(0, 0, 8, 0, 0);
                return Ok(Some(val));
            }
            n if n > 0 && use_poll => {
                // Readable: take the counter without blocking.
                match read_eventfd_nonblocking(fd) {
                    Ok(Some(v)) => return Ok(Some(v)),
                    Ok(None) => continue, // another reader took it
                    Err(e) => return Err(eventfd_err(fd, e)),
                }
            }
            e if e == -libc::ECANCELED && deadline.is_some() => return Ok(None),
            e if e == -libc::EAGAIN && !use_poll => use_poll = true,
            e if e == -libc::EINTR => {}
            e if e < 0 => return Err(eventfd_err(fd, errno_err(-e))),
            n => {
                return Err(eventfd_err(
                    fd,
                    io::Error::new(io::ErrorKind::InvalidData, format!("eventfd read gave {n} bytes")),
                ))
            }
        }
    }
}

/// Reads an eventfd that poll reported readable; `None` if it was empty (EAGAIN).
fn read_eventfd_nonblocking(fd: RawFd) -> io::Result<Option<u64>> {
    let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    // SAFETY: pfd is a valid pollfd on our stack for the duration of the call.
    let rc = unsafe { libc::poll(&mut pfd, 1, 0) };
    if rc <= 0 {
        return Ok(None);
    }
    read_eventfd_raw(fd)
}

fn read_eventfd_raw(fd: RawFd) -> io::Result<Option<u64>> {
    let mut val = 0u64;
    record_io(0, 1, 0, 0, 0);
    // SAFETY: `val` is 8 writable bytes on our stack, alive for the duration of the call.
    let n = unsafe { libc::read(fd, (&mut val as *mut u64).cast::<libc::c_void>(), 8) };
    if n == 8 {
        record_io(0, 0, 8, 0, 0);
        return Ok(Some(val));
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EAGAIN) | Some(libc::EINTR) if n < 0 => Ok(None),
        _ if n < 0 => Err(e),
        _ => Err(io::Error::new(io::ErrorKind::InvalidData, format!("eventfd read gave {n} bytes"))),
    }
}

/// The plain fallback for sync mode: poll(2) for readability (with the timeout), then read(2).
/// Returns `Some(counter)` when woken, `None` on timeout.
pub fn wait_eventfd_plain(fd: RawFd, timeout: Option<Duration>) -> Result<Option<u64>> {
    let deadline = timeout.map(|t| Instant::now() + t);
    loop {
        let ms: libc::c_int = match deadline {
            None => -1,
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                left.as_nanos().div_ceil(1_000_000).min(libc::c_int::MAX as u128) as libc::c_int
            }
        };
        let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
        record_io(0, 1, 0, 0, 0);
        // SAFETY: pfd is a valid pollfd on our stack for the duration of the call.
        let rc = unsafe { libc::poll(&mut pfd, 1, ms) };
        if rc < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(eventfd_err(fd, e));
        }
        if rc == 0 {
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(None);
            }
            continue;
        }
        if pfd.revents & (libc::POLLERR | libc::POLLNVAL) != 0 && pfd.revents & libc::POLLIN == 0 {
            return Err(eventfd_err(fd, errno_err(libc::EBADF)));
        }
        match read_eventfd_raw(fd) {
            Ok(Some(v)) => return Ok(Some(v)),
            Ok(None) => continue,
            Err(e) => return Err(eventfd_err(fd, e)),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::io::{thread_stats, IoStats};

    /// A temporary directory on a real disk: `SEGLOG_TEST_DIR`, else /var/tmp (not /tmp, which
    /// may be tmpfs, where unaligned O_DIRECT is accepted and alignment bugs go unseen).
    pub(crate) fn test_dir() -> tempfile::TempDir {
        let base = std::env::var_os("SEGLOG_TEST_DIR").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/var/tmp"));
        tempfile::Builder::new().prefix("seglog-io-").tempdir_in(base).expect("temp dir")
    }

    fn pattern(len: usize, seed: u8) -> Vec<u8> {
        (0..len).map(|i| (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[1] ^ seed).collect()
    }

    fn aligned(data: &[u8], align: usize) -> AlignedBuf {
        let mut b = AlignedBuf::new(data.len(), align);
        b.extend_from_slice(data);
        b
    }

    fn delta(before: IoStats) -> IoStats {
        let now = thread_stats();
        IoStats {
            ops: now.ops - before.ops,
            enters: now.enters - before.enters,
            bytes_read: now.bytes_read - before.bytes_read,
            bytes_written: now.bytes_written - before.bytes_written,
            fsyncs: now.fsyncs - before.fsyncs,
            writes: now.writes - before.writes,
            bounced_reads: now.bounced_reads - before.bounced_reads,
        }
    }

    fn misaligned_of(e: &Error) -> Option<Misaligned> {
        match e {
            Error::Io { source, .. } => source.get_ref().and_then(|i| i.downcast_ref::<Misaligned>()).cloned(),
            _ => None,
        }
    }

    fn on_tmpfs(path: &Path) -> bool {
        let c = CString::new(path.as_os_str().as_bytes()).unwrap();
        // SAFETY: statfs is plain integers; zeroed is a valid value.
        let mut st: libc::statfs = unsafe { std::mem::zeroed() };
        // SAFETY: c is NUL-terminated and st writable, both alive for the call.
        let rc = unsafe { libc::statfs(c.as_ptr(), &mut st) };
        rc == 0 && st.f_type == libc::TMPFS_MAGIC
    }

    #[test]
    fn round_trip_direct_and_buffered() {
        for mode in [IoMode::Direct, IoMode::Buffered] {
            let dir = test_dir();
            let s = UringStorage::new(mode).unwrap();
            assert_eq!(s.mode(), mode);
            let sub = dir.path().join("topic-0");
            s.create_dir_all(&sub).unwrap();
            let log = sub.join("00000000000000000000.log");
            let f = s.open_log(&log, OpenMode::CreateNew).unwrap();
            let a = f.direct_alignment();
            assert_eq!(a.is_some(), mode == IoMode::Direct, "{mode}");
            let data = pattern(3 * 4096, 7);
            let buf = aligned(&data, 4096);
            let before = thread_stats();
            f.write_all_at(&buf, 0).unwrap();
            f.write_all_at(&buf, 3 * 4096).unwrap();
            f.sync_data().unwrap();
            let d = delta(before);
            assert_eq!(d.bytes_written, 6 * 4096);
            assert_eq!(d.fsyncs, 1);
            assert_eq!(d.enters, 3, "{d:?}");
            f.allocate(1 << 20).unwrap();
            assert_eq!(f.len().unwrap(), 6 * 4096, "allocate keeps the size");
            let mut back = AlignedBuf::new(6 * 4096, 4096);
            back.set_len(6 * 4096);
            assert_eq!(f.read_at(&mut back, 0).unwrap(), 6 * 4096);
            assert_eq!(&back[..3 * 4096], &data[..]);
            assert_eq!(&back[3 * 4096..], &data[..]);
            // Past the end: short, then nothing.
            let mut v = vec![0u8; 10_000];
            assert_eq!(f.read_at(&mut v, 5 * 4096 + 100).unwrap(), 4096 - 100);
            assert_eq!(&v[..4096 - 100], &data[2 * 4096 + 100..]);
            assert_eq!(f.read_at(&mut v, 6 * 4096).unwrap(), 0);
            assert_eq!(f.read_at(&mut v, 1 << 30).unwrap(), 0);
            f.set_len(4096 + 17).unwrap();
            assert_eq!(f.len().unwrap(), 4096 + 17);
            let mut tail = vec![0u8; 100];
            assert_eq!(f.read_at(&mut tail, 4096).unwrap(), 17);
            assert_eq!(&tail[..17], &data[4096..4096 + 17]);
            assert!(f.modified_ms().unwrap() > 1_600_000_000_000);
            assert_eq!(std::fs::read(&log).unwrap(), &data[..4096 + 17]);
            drop(f);

            // Index files are never O_DIRECT: unaligned writes are fine.
            let idx = s.open(&sub.join("00000000000000000000.index"), OpenMode::CreateTruncate).unwrap();
            assert!(idx.direct_alignment().is_none());
            idx.write_all_at(b"hello index", 3).unwrap();
            idx.sync_data().unwrap();
            let mut h = [0u8; 14];
            idx.read_exact_at(&mut h, 0).unwrap();
            assert_eq!(&h, b"\0\0\0hello index");
            drop(idx);

            // Directory operations.
            s.write_file_atomic(&sub.join("leader-epoch-checkpoint"), b"0\n1\n0 0\n").unwrap();
            assert_eq!(s.read_small_file(&sub.join("leader-epoch-checkpoint"), 100).unwrap(), b"0\n1\n0 0\n");
            s.rename(&log, &sub.join("00000000000000000000.log.deleted")).unwrap();
            s.sync_dir(&sub).unwrap();
            let mut names = s.list_dir(&sub).unwrap();
            names.sort();
            assert_eq!(
                names,
                ["00000000000000000000.index", "00000000000000000000.log.deleted", "leader-epoch-checkpoint"]
            );
            s.remove_file(&sub.join("00000000000000000000.log.deleted")).unwrap();
            assert!(!s.exists(&sub.join("00000000000000000000.log.deleted")));
            let e = s.remove_file(&sub.join("nope")).unwrap_err();
            assert_eq!(error_errno(&e), Some(libc::ENOENT), "{e}");
            assert!(e.to_string().contains("nope"), "{e}");
            assert!(s.is_dir(&sub));
            let e = s.open_log(&sub.join("missing.log"), OpenMode::Read).unwrap_err();
            assert_eq!(error_errno(&e), Some(libc::ENOENT));
        }
    }

    #[test]
    fn unaligned_direct_writes_are_refused_with_einval() {
        let dir = test_dir();
        let s = UringStorage::new(IoMode::Direct).unwrap();
        let path = dir.path().join("0.log");
        let f = s.open_log(&path, OpenMode::CreateNew).unwrap();
        let a = f.direct_alignment().unwrap();
        assert!(a.offset >= 512 && a.offset.is_power_of_two() && a.mem.is_power_of_two(), "{a:?}");
        let buf = aligned(&pattern(8192, 1), 4096);
        let cases: [(&[u8], u64, &str); 3] =
            [(&buf[..4096], 100, "offset"), (&buf[..100], 0, "length"), (&buf[1..1 + a.offset], 0, "memory address")];
        for (b, pos, what) in cases {
            let before = thread_stats();
            let e = f.write_all_at(b, pos).unwrap_err();
            assert_eq!(delta(before).enters, 0, "refused before reaching the kernel");
            assert_eq!(error_errno(&e), Some(libc::EINVAL), "{e}");
            let m = misaligned_of(&e).unwrap_or_else(|| panic!("not a Misaligned: {e}"));
            assert_eq!(m.what, what);
            let msg = e.to_string();
            assert!(msg.contains("EINVAL") && msg.contains(what) && msg.contains("0.log"), "{msg}");
            match &e {
                Error::Io { source, .. } => assert_eq!(source.kind(), io::ErrorKind::InvalidInput),
                other => panic!("{other}"),
            }
        }
        assert_eq!(f.len().unwrap(), 0);
        // The kernel would refuse it too on this filesystem (tmpfs would not: skip there).
        if !on_tmpfs(dir.path()) {
            // SAFETY: writes 4096 bytes from a live buffer to an fd we own.
            let rc = unsafe { libc::pwrite(f.raw_fd().unwrap(), buf.as_ptr().cast(), 4096, 100) };
            assert_eq!(rc, -1);
            assert_eq!(io::Error::last_os_error().raw_os_error(), Some(libc::EINVAL));
        }
        f.write_all_at(&buf[..a.offset], a.offset as u64).unwrap();
        assert_eq!(f.len().unwrap(), 2 * a.offset as u64);
    }

    #[test]
    fn unaligned_reads_on_a_direct_file() {
        let dir = test_dir();
        let s = UringStorage::new(IoMode::Direct).unwrap();
        let path = dir.path().join("0.log");
        let f = s.open_log(&path, OpenMode::CreateNew).unwrap();
        let size = 5 * 1024 * 1024 + 3 * 4096; // more than one bounce buffer
        let data = pattern(size, 42);
        f.write_all_at(&aligned(&data, 4096), 0).unwrap();
        let end = size as u64 - 1234;
        f.set_len(end).unwrap(); // an unaligned end of file
        let data = &data[..end as usize];
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move |m: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % m
        };
        let mut cases: Vec<(u64, usize)> =
            vec![(0, 1), (1, 1), (511, 2), (4095, 4098), (end - 1, 10), (end - 100, 100)];
        cases.push((3, 4 * 1024 * 1024 + 1000)); // crosses the bounce size
        cases.push((end - 5_000_000, 6_000_000)); // long, past the end
        for _ in 0..200 {
            cases.push((next(end + 100), next(70_000) as usize + 1));
        }
        for (pos, len) in cases {
            let mut v = vec![0xAAu8; len + 1];
            let slice = &mut v[1..]; // an unaligned address
            let before = thread_stats().bounced_reads;
            let n = f.read_at(slice, pos).unwrap();
            assert_eq!(thread_stats().bounced_reads, before + 1, "read of {len} at {pos}: counted as bounced");
            let expect = (end.saturating_sub(pos) as usize).min(len);
            assert_eq!(n, expect, "read of {len} at {pos}");
            assert_eq!(&slice[..n], &data[pos as usize..pos as usize + n], "read of {len} at {pos}");
        }
        let mut exact = vec![0u8; 777];
        f.read_exact_at(&mut exact, 12_345).unwrap();
        assert_eq!(&exact[..], &data[12_345..12_345 + 777]);
        assert!(f.read_exact_at(&mut exact, end - 10).is_err());
    }

    fn write_op(file: &Arc<dyn IoFile>, data: &[u8], pos: u64, tag: u64, link_next: bool) -> IoOp {
        IoOp {
            file: file.clone(),
            kind: IoOpKind::Write { buf: aligned(data, 4096).into(), pos, dsync: false },
            tag,
            link_next,
        }
    }

    #[test]
    fn async_batches_complete_later_and_survive_synchronous_io() {
        use crate::io::{claim_async, AsyncIo, AsyncOutcome};
        for mode in [IoMode::Direct, IoMode::Buffered] {
            let dir = test_dir();
            let s = UringStorage::new(mode).unwrap();
            let a = s.open_log(&dir.path().join("a.log"), OpenMode::CreateNew).unwrap();
            let b = s.open_log(&dir.path().join("b.log"), OpenMode::CreateNew).unwrap();
            let (ca, cb) = (pattern(3 * 4096, 1), pattern(4096, 2));
            let batch_a = vec![
                write_op(&a, &ca, 0, 1, true),
                IoOp { file: a.clone(), kind: IoOpKind::SyncData, tag: 2, link_next: false },
            ];
            let batch_b = vec![write_op(&b, &cb, 0, 3, false)];
            let before = thread_stats();
            let mut pending: Vec<AsyncIo> = s.submit_async(vec![batch_a, batch_b]);
            assert_eq!(delta(before).enters, 1, "{mode}: both batches go in one io_uring_enter");
            assert!(pending.iter().all(|p| matches!(p, AsyncIo::Ring(_))), "{mode}: {pending:?}");
            // Synchronous I/O on the same ring meanwhile: its reaping must keep the other
            // batches' completions for them.
            let c = s.open(&dir.path().join("c"), OpenMode::CreateNew).unwrap();
            c.write_all_at(b"sync", 0).unwrap();
            let mut got = Vec::new();
            let deadline = Instant::now() + Duration::from_secs(10);
            while !pending.is_empty() {
                assert!(Instant::now() < deadline, "{mode}: async batches never completed");
                crate::io::poll_async();
                let mut still = Vec::new();
                for p in pending {
                    match claim_async(p, false) {
                        Ok(AsyncOutcome::Done(done)) => got.push(done),
                        Ok(AsyncOutcome::Lost) => panic!("{mode}: the ring lost a batch"),
                        Err(p) => still.push(p),
                    }
                }
                pending = still;
            }
            got.sort_by_key(|d| d[0].op.tag);
            assert_eq!(got.len(), 2);
            assert_eq!(got[0].len(), 2);
            assert_eq!(*got[0][0].result.as_ref().unwrap(), ca.len());
            assert_eq!(*got[0][1].result.as_ref().unwrap(), 0);
            assert_eq!(*got[1][0].result.as_ref().unwrap(), cb.len());
            assert_eq!(std::fs::read(dir.path().join("a.log")).unwrap(), ca);
            assert_eq!(std::fs::read(dir.path().join("b.log")).unwrap(), cb);
            assert_eq!(std::fs::read(dir.path().join("c")).unwrap(), b"sync");
        }
    }

    #[test]
    fn a_finished_async_write_is_seen_without_a_system_call() {
        let dir = test_dir();
        let s = UringStorage::new(IoMode::Direct).unwrap();
        let f = s.open_log(&dir.path().join("0.log"), OpenMode::CreateNew).unwrap();
        let data = pattern(16384, 5);
        for _ in 0..3 {
            let io = s.submit_async(vec![vec![write_op(&f, &data, 0, 1, false)]]).pop().unwrap();
            let before = thread_stats();
            let t = Instant::now();
            while !super::completions_waiting() && t.elapsed() < Duration::from_secs(2) {
                std::hint::spin_loop();
            }
            assert!(super::completions_waiting(), "the ring never showed the completion waiting");
            assert_eq!(delta(before).enters, 0, "seeing the completion took no io_uring_enter");
            crate::io::poll_async();
            assert!(crate::io::claim_async(io, false).is_ok(), "the write completed");
        }
    }

    #[test]
    fn async_batch_waited_for_and_failures_reported() {
        use crate::io::{claim_async, AsyncOutcome};
        let dir = test_dir();
        let s = UringStorage::new(IoMode::Direct).unwrap();
        let log = s.open_log(&dir.path().join("0.log"), OpenMode::CreateNew).unwrap();
        let good = pattern(4096, 7);
        // A misaligned O_DIRECT write fails before submission; its linked fdatasync is cancelled;
        // the batch still completes as a whole.
        let bad = pattern(100, 8);
        let ops = vec![
            write_op(&log, &good, 0, 1, false),
            write_op(&log, &bad, 4096 + 3, 2, true),
            IoOp { file: log.clone(), kind: IoOpKind::SyncData, tag: 3, link_next: false },
        ];
        let io = s.submit_async(vec![ops]).pop().unwrap();
        let Ok(AsyncOutcome::Done(done)) = claim_async(io, true) else { panic!("waited, and not lost") };
        assert_eq!(done.len(), 3);
        assert!(done[0].result.is_ok());
        assert!(done[1].result.is_err());
        assert!(done[2].result.is_err(), "the fdatasync linked after a failed write is cancelled");
        assert_eq!(std::fs::read(dir.path().join("0.log")).unwrap(), good);
    }

    #[test]
    fn a_batch_the_ring_does_not_know_is_lost_not_empty() {
        use crate::io::{claim_async, AsyncIo, AsyncOutcome, RingTicket};
        // Make sure the thread ring exists, so the id is looked up on it.
        with_thread_ring(|_| ()).unwrap();
        let unknown = || AsyncIo::Ring(RingTicket::new(u32::MAX - 3));
        assert!(matches!(claim_async(unknown(), false), Ok(AsyncOutcome::Lost)));
        assert!(matches!(claim_async(unknown(), true), Ok(AsyncOutcome::Lost)));
        // A batch that is done already is never lost, even with no operations.
        assert!(matches!(claim_async(AsyncIo::Ready(Vec::new()), false), Ok(AsyncOutcome::Done(v)) if v.is_empty()));
    }

    #[test]
    fn a_second_doorbell_or_a_refused_poll_falls_back_to_the_plain_wait() {
        let (a, b) = (crate::io::eventfd::EventFd::new().unwrap(), crate::io::eventfd::EventFd::new().unwrap());
        let mut ring = Ring::new(16).unwrap();
        assert!(ring.arm_doorbell(a.raw()));
        assert!(ring.arm_doorbell(a.raw()), "the same doorbell again keeps its poll");
        assert!(!ring.arm_doorbell(b.raw()), "another eventfd must not be taken for the armed one");
        // A poll the kernel refuses (a file descriptor that is not open) fails the doorbell for
        // good: no re-arming in a loop.
        let mut ring = Ring::new(16).unwrap();
        assert!(ring.arm_doorbell(1 << 20));
        ring.submit_queued().unwrap();
        let t = Instant::now();
        while ring.doorbell != Doorbell::Failed {
            assert!(t.elapsed() < Duration::from_secs(5), "the refused poll never completed: {:?}", ring.doorbell);
            let _ = ring.get_events(1, Some(Duration::from_millis(10)));
        }
        assert!(!ring.arm_doorbell(a.raw()));
    }

    fn thread_doorbell() -> Doorbell {
        with_thread_ring(|r| r.doorbell).unwrap()
    }

    #[test]
    fn doorbell_poll_is_armed_once_and_cleared_when_it_fires() {
        let bell = crate::io::eventfd::EventFd::new().unwrap();
        if !with_thread_ring(|r| r.ext_arg).unwrap() {
            eprintln!("no IORING_FEAT_EXT_ARG: the doorbell poll is not used");
            return;
        }
        assert_eq!(thread_doorbell(), Doorbell::Idle);
        assert!(wait_doorbell_or_io(bell.raw(), Duration::from_millis(5)));
        assert!(matches!(thread_doorbell(), Doorbell::Armed { .. }), "{:?}", thread_doorbell());
        // Timed-out waits keep the same poll (arming again would queue a second one).
        assert!(wait_doorbell_or_io(bell.raw(), Duration::from_millis(5)));
        assert!(matches!(thread_doorbell(), Doorbell::Armed { .. }));
        let queued = with_thread_ring(|r| {
            let before = r.ring.submission().len();
            assert!(r.arm_doorbell(bell.raw()));
            r.ring.submission().len() - before
        })
        .unwrap();
        assert_eq!(queued, 0, "arming an armed doorbell queued another poll");
        // Fired while a synchronous operation reaps the ring: the completion is kept for the
        // doorbell, and the next wait returns at once and clears the eventfd.
        bell.notify();
        let t = Instant::now();
        while !matches!(thread_doorbell(), Doorbell::Fired { .. }) {
            assert!(t.elapsed() < Duration::from_secs(5), "the doorbell poll never completed");
            // SAFETY: a NOP points to no memory.
            let r = with_thread_ring(|ring| unsafe { ring.run(&[opcode::Nop::new().build()]) }).unwrap();
            assert_eq!(r, vec![0]);
        }
        let t = Instant::now();
        assert!(wait_doorbell_or_io(bell.raw(), Duration::from_secs(5)));
        assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
        assert_eq!(thread_doorbell(), Doorbell::Idle);
        assert_eq!(bell.drain(), 0, "the wait cleared the doorbell");
        // Re-armed by the next wait.
        assert!(wait_doorbell_or_io(bell.raw(), Duration::from_millis(5)));
        assert!(matches!(thread_doorbell(), Doorbell::Armed { .. }));
    }

    #[test]
    fn a_doorbell_poll_never_submitted_is_counted_among_the_failed_entries() {
        let bell = crate::io::eventfd::EventFd::new().unwrap();
        let nops = || AsyncOps { ops: Vec::new(), fds: Vec::new(), idx: Vec::new(), results: Vec::new() };
        let nop = opcode::Nop::new().build();
        // Poll, then a two-entry batch, all still queued: failing the last three takes the poll;
        // failing the last two leaves it armed.
        for (left, poll_failed) in [(3, true), (2, false)] {
            let mut ring = Ring::new(16).unwrap();
            assert!(ring.arm_doorbell(bell.raw()));
            // SAFETY: NOPs point to no memory; nothing is submitted before the ring is dropped.
            let id = unsafe { ring.queue_async(&[nop.clone(), nop.clone()], nops()) }.ok().unwrap();
            assert_eq!(ring.doorbell, Doorbell::Armed { fd: bell.raw(), queued_after: 2 });
            ring.fail_unsubmitted(left, libc::EIO);
            let gone = ring.doorbell == Doorbell::Idle;
            assert_eq!(gone, poll_failed, "left {left}: {:?}", ring.doorbell);
            let b = &ring.async_batches[&id];
            assert_eq!(b.left, 0, "left {left}");
            assert!(b.raw.iter().all(|r| *r == Some(-libc::EIO)));
        }
        // Queued behind a batch, the poll is the last entry: failing one entry takes it alone.
        let mut ring = Ring::new(16).unwrap();
        // SAFETY: as above.
        let id = unsafe { ring.queue_async(std::slice::from_ref(&nop), nops()) }.ok().unwrap();
        assert!(ring.arm_doorbell(bell.raw()));
        ring.fail_unsubmitted(1, libc::EIO);
        assert_eq!(ring.doorbell, Doorbell::Idle);
        assert_eq!(ring.async_batches[&id].left, 1);
        // Retiring a ring drops its poll with it.
        assert!(ring.arm_doorbell(bell.raw()));
        ring.async_batches.clear();
        ring.retire(libc::EIO);
        assert_eq!(ring.doorbell, Doorbell::Idle);
    }

    #[test]
    fn doorbell_or_io_wakes_on_either() {
        let bell = crate::io::eventfd::EventFd::new().unwrap();
        // Times out with nothing happening.
        let t = Instant::now();
        assert!(wait_doorbell_or_io(bell.raw(), Duration::from_millis(30)));
        assert!(t.elapsed() >= Duration::from_millis(20), "{:?}", t.elapsed());
        // Rung before the wait: returns at once, and the counter is cleared.
        bell.notify();
        let t = Instant::now();
        assert!(wait_doorbell_or_io(bell.raw(), Duration::from_secs(5)));
        assert!(t.elapsed() < Duration::from_secs(1));
        assert_eq!(bell.drain(), 0, "the wait cleared the doorbell");
        // A write completing wakes it too.
        let dir = test_dir();
        let s = UringStorage::new(IoMode::Buffered).unwrap();
        let f = s.open_log(&dir.path().join("0.log"), OpenMode::CreateNew).unwrap();
        let data = pattern(4096, 3);
        let io = s.submit_async(vec![vec![write_op(&f, &data, 0, 1, false)]]).pop().unwrap();
        let t = Instant::now();
        let mut io = Some(io);
        while let Some(p) = io.take() {
            assert!(t.elapsed() < Duration::from_secs(5), "the write completion never woke the wait");
            assert!(wait_doorbell_or_io(bell.raw(), Duration::from_secs(5)));
            if let Err(p) = crate::io::claim_async(p, false) {
                io = Some(p);
            }
        }
        assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
    }

    #[test]
    fn submit_batch_is_one_enter_and_in_order() {
        for mode in [IoMode::Direct, IoMode::Buffered] {
            let dir = test_dir();
            let s = UringStorage::new(mode).unwrap();
            let log = s.open_log(&dir.path().join("0.log"), OpenMode::CreateNew).unwrap();
            let idx = s.open(&dir.path().join("0.index"), OpenMode::CreateNew).unwrap();
            let chunks: Vec<Vec<u8>> = (0..4).map(|i| pattern(8192, i as u8)).collect();
            let mut ops: Vec<IoOp> = chunks
                .iter()
                .enumerate()
                .map(|(i, c)| write_op(&log, c, i as u64 * 8192, 100 + i as u64, i == 3))
                .collect();
            ops.push(IoOp { file: log.clone(), kind: IoOpKind::SyncData, tag: 104, link_next: false });
            ops.push(write_op(&idx, b"entry", 5, 105, true));
            ops.push(IoOp { file: idx.clone(), kind: IoOpKind::SyncData, tag: 106, link_next: false });
            let before = thread_stats();
            let out = s.submit(ops);
            let d = delta(before);
            assert_eq!(d.enters, 1, "{mode}: {d:?}");
            assert_eq!(d.ops, 7);
            assert_eq!(d.fsyncs, 2);
            assert_eq!(d.bytes_written, 4 * 8192 + 5);
            assert_eq!(out.len(), 7);
            for (i, c) in out.iter().enumerate() {
                assert_eq!(c.op.tag, 100 + i as u64);
                let r = c.result.as_ref().unwrap_or_else(|e| panic!("op {i}: {e}"));
                match &c.op.kind {
                    IoOpKind::Write { buf, .. } => {
                        assert_eq!(*r, buf.len());
                        if i < 4 {
                            assert_eq!(&buf[..], &chunks[i][..], "the buffer comes back intact");
                        }
                    }
                    IoOpKind::SyncData => assert_eq!(*r, 0),
                }
            }
            assert_eq!(std::fs::read(dir.path().join("0.log")).unwrap(), chunks.concat());
            assert_eq!(std::fs::read(dir.path().join("0.index")).unwrap(), b"\0\0\0\0\0entry");
        }
    }

    #[test]
    fn pool_writes_go_out_fixed_and_dsync_writes_land() {
        // A thread of its own, so its pool and ring start fresh.
        std::thread::spawn(|| {
            for mode in [IoMode::Direct, IoMode::Buffered] {
                let dir = test_dir();
                let s = UringStorage::new(mode).unwrap();
                let f = s.open_log(&dir.path().join("0.log"), OpenMode::CreateNew).unwrap();
                let pool = pool::thread_pool();
                let mut chunks = Vec::new();
                let mut ops = Vec::new();
                for i in 0..3u8 {
                    let mut c = pool.alloc();
                    c.bytes_mut()[..8192].copy_from_slice(&pattern(8192, i));
                    let c = Arc::new(c);
                    let buf = WriteBuf::pooled(c.clone(), 4096, 4096);
                    ops.push(IoOp {
                        file: f.clone(),
                        kind: IoOpKind::Write { buf, pos: u64::from(i) * 4096, dsync: i == 1 },
                        tag: u64::from(i),
                        link_next: false,
                    });
                    chunks.push(c);
                }
                // And one owned buffer, with RWF_DSYNC.
                ops.push(IoOp {
                    file: f.clone(),
                    kind: IoOpKind::Write { buf: aligned(&pattern(4096, 9), 4096).into(), pos: 3 * 4096, dsync: true },
                    tag: 3,
                    link_next: false,
                });
                let before = crate::io::pool::thread_pool_stats(false);
                let t = thread_stats();
                let out = s.submit(ops);
                assert_eq!(delta(t).enters, 1);
                assert!(out.iter().all(|c| c.result.as_ref().ok() == Some(&4096)), "{out:?}");
                let after = crate::io::pool::thread_pool_stats(false);
                assert_eq!(after.fixed_writes - before.fixed_writes, 3, "{mode}: {after:?}");
                assert_eq!(after.mode, crate::io::pool::BufferMode::Registered { partial: None });
                drop(out);
                let back = std::fs::read(dir.path().join("0.log")).unwrap();
                for i in 0..3u8 {
                    assert_eq!(&back[i as usize * 4096..][..4096], &pattern(8192, i)[4096..], "{mode} {i}");
                }
                assert_eq!(&back[3 * 4096..], &pattern(4096, 9)[..]);
                // Plain file methods: RWF_DSYNC through the ring.
                f.write_all_at_dsync(&aligned(&pattern(4096, 5), 4096), 4 * 4096).unwrap();
                assert_eq!(&std::fs::read(dir.path().join("0.log")).unwrap()[4 * 4096..], &pattern(4096, 5)[..]);
            }
        })
        .join()
        .unwrap();
    }

    #[test]
    fn dsync_writes_through_the_plain_backend() {
        let dir = test_dir();
        let s = crate::io::std_backend::StdStorage::default();
        let f = s.open(&dir.path().join("x"), OpenMode::CreateNew).unwrap();
        f.write_all_at_dsync(b"hello", 3).unwrap();
        let out = s.submit(vec![IoOp {
            file: f.clone(),
            kind: IoOpKind::Write { buf: aligned(b"world", 512).into(), pos: 8, dsync: true },
            tag: 0,
            link_next: false,
        }]);
        assert!(out[0].result.is_ok());
        assert_eq!(std::fs::read(dir.path().join("x")).unwrap(), b"\0\0\0helloworld");
    }

    #[test]
    fn submit_failures_cancel_linked_ops() {
        let dir = test_dir();
        let s = UringStorage::new(IoMode::Direct).unwrap();
        let path = dir.path().join("0.log");
        let log = s.open_log(&path, OpenMode::CreateNew).unwrap();
        let ro = s.open_log(&path, OpenMode::Read).unwrap();
        let a = log.direct_alignment().unwrap().offset as u64;
        let block = pattern(4096, 9);
        let ops = vec![
            // A misaligned write (refused before the kernel) linked to an fsync.
            write_op(&log, &block, a / 2, 0, true),
            IoOp { file: log.clone(), kind: IoOpKind::SyncData, tag: 1, link_next: false },
            // A good one, unlinked.
            write_op(&log, &block, 0, 2, false),
            // A write to a read-only fd: the kernel fails it (EBADF) and cancels its link.
            write_op(&ro, &block, 4096, 3, true),
            IoOp { file: ro.clone(), kind: IoOpKind::SyncData, tag: 4, link_next: true },
            write_op(&log, &block, 8192, 5, false),
            // A chain that succeeds.
            write_op(&log, &block, 12288, 6, true),
            IoOp { file: log.clone(), kind: IoOpKind::SyncData, tag: 7, link_next: false },
        ];
        let before = thread_stats();
        let out = s.submit(ops);
        assert_eq!(delta(before).enters, 1);
        let errno: Vec<Option<i32>> = out.iter().map(|c| c.result.as_ref().err().and_then(error_errno)).collect();
        assert_eq!(
            errno,
            [
                Some(libc::EINVAL),
                Some(libc::ECANCELED),
                None,
                Some(libc::EBADF),
                Some(libc::ECANCELED),
                Some(libc::ECANCELED),
                None,
                None
            ]
        );
        assert!(misaligned_of(out[0].result.as_ref().unwrap_err()).is_some());
        assert_eq!(out.iter().map(|c| c.op.tag).collect::<Vec<_>>(), (0..8).collect::<Vec<_>>());
        let on_disk = std::fs::read(&path).unwrap();
        assert_eq!(on_disk.len(), 4 * 4096);
        assert_eq!(&on_disk[..4096], &block[..]);
        assert!(on_disk[4096..3 * 4096].iter().all(|&b| b == 0), "the cancelled writes did not run");
        assert_eq!(&on_disk[3 * 4096..], &block[..]);
    }

    #[test]
    fn short_writes_are_finished_and_cancelled_links_rerun() {
        // Feeds settle_round a short completion as the kernel would give it: op 0 wrote only
        // 100 bytes, so the kernel cancelled its linked fsync (op 1); op 2 completed.
        let dir = test_dir();
        let s = UringStorage::new(IoMode::Buffered).unwrap();
        let f = s.open_log(&dir.path().join("0.log"), OpenMode::CreateNew).unwrap();
        let data = pattern(4096, 3);
        let ops = vec![
            write_op(&f, &data, 0, 0, true),
            IoOp { file: f.clone(), kind: IoOpKind::SyncData, tag: 1, link_next: true },
            write_op(&f, &data, 4096, 2, false),
        ];
        let fds = vec![f.raw_fd().unwrap(); 3];
        let mut results: Vec<Option<Result<usize>>> = (0..3).map(|_| None).collect();
        let before = thread_stats();
        let (w, syncs) =
            with_thread_ring(|r| settle_round(r, &ops, &fds, &[0, 1, 2], &[100, -libc::ECANCELED, 4096], &mut results))
                .unwrap();
        let d = delta(before);
        assert_eq!(d.enters, 2, "one follow-up write, one re-run fsync");
        assert_eq!((w + d.bytes_written, syncs + d.fsyncs), (100 + (4096 - 100) + 4096, 1));
        let r: Vec<usize> = results.into_iter().map(|r| r.unwrap().unwrap()).collect();
        assert_eq!(r, [4096, 0, 4096]);
        let back = std::fs::read(dir.path().join("0.log")).unwrap();
        assert_eq!(back.len(), 4096, "op 2 was only pretended");
        assert!(back[..100].iter().all(|&b| b == 0), "the first 100 bytes were only pretended too");
        assert_eq!(&back[100..], &data[100..]);

        // A short write whose remainder fails: the link successor is cancelled.
        let ro = s.open_log(&dir.path().join("0.log"), OpenMode::Read).unwrap();
        let ops = vec![
            write_op(&ro, &data, 0, 0, true),
            IoOp { file: ro.clone(), kind: IoOpKind::SyncData, tag: 1, link_next: false },
        ];
        let fds = vec![ro.raw_fd().unwrap(); 2];
        let mut results: Vec<Option<Result<usize>>> = (0..2).map(|_| None).collect();
        with_thread_ring(|r| settle_round(r, &ops, &fds, &[0, 1], &[100, -libc::ECANCELED], &mut results)).unwrap();
        let errno: Vec<Option<i32>> =
            results.iter().map(|r| r.as_ref().unwrap().as_ref().err().and_then(error_errno)).collect();
        assert_eq!(errno, [Some(libc::EBADF), Some(libc::ECANCELED)]);
    }

    #[test]
    fn submit_batch_larger_than_the_ring() {
        let dir = test_dir();
        let s = UringStorage::new(IoMode::Buffered).unwrap();
        let f = s.open_log(&dir.path().join("0.log"), OpenMode::CreateNew).unwrap();
        let n = RING_ENTRIES as usize * 2 + 10;
        let ops: Vec<IoOp> =
            (0..n).map(|i| write_op(&f, &[(i % 251) as u8; 100], i as u64 * 100, i as u64, false)).collect();
        let before = thread_stats();
        let out = s.submit(ops);
        assert_eq!(delta(before).enters, 3);
        assert!(out.iter().enumerate().all(|(i, c)| c.op.tag == i as u64 && c.result.as_ref().ok() == Some(&100)));
        let back = std::fs::read(dir.path().join("0.log")).unwrap();
        assert!(back.chunks(100).enumerate().all(|(i, c)| c.iter().all(|&b| b == (i % 251) as u8)));
    }

    #[test]
    fn refuses_sync_mode_and_nests_rings() {
        assert!(UringStorage::new(IoMode::Sync).is_err());
        let inner = with_thread_ring(|outer| {
            let fd = outer.raw_fd();
            with_thread_ring(|inner| inner.raw_fd() != fd).unwrap()
        });
        assert!(inner.unwrap(), "a nested call gets its own ring");
        let a = with_thread_ring(|r| r.raw_fd()).unwrap();
        let b = with_thread_ring(|r| r.raw_fd()).unwrap();
        assert_eq!(a, b, "one ring per thread");
        let other = std::thread::spawn(|| with_thread_ring(|r| r.raw_fd()).unwrap()).join().unwrap();
        let _ = other; // a different thread has its own ring (its fd may be reused once it exits)
    }

    #[test]
    fn open_log_on_a_filesystem_refusing_o_direct_names_the_path() {
        let s = UringStorage::new(IoMode::Direct).unwrap();
        // procfs has no O_DIRECT.
        let e = s.open_log(Path::new("/proc/self/status"), OpenMode::Read).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("/proc/self/status") && msg.contains("O_DIRECT"), "{msg}");
        // Buffered mode opens it fine.
        let b = UringStorage::new(IoMode::Buffered).unwrap();
        let f = b.open_log(Path::new("/proc/self/status"), OpenMode::Read).unwrap();
        let mut v = vec![0u8; 64];
        assert!(f.read_at(&mut v, 0).unwrap() > 0);
    }

    fn eventfd(flags: libc::c_int) -> std::os::fd::OwnedFd {
        use std::os::fd::FromRawFd;
        // SAFETY: eventfd takes integers and returns a new fd or -1.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | flags) };
        assert!(fd >= 0);
        // SAFETY: a fresh fd nothing else owns.
        unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) }
    }

    fn ring_eventfd(fd: RawFd, v: u64) {
        // SAFETY: writes 8 bytes from a live u64 to a live eventfd.
        let n = unsafe { libc::write(fd, (&v as *const u64).cast(), 8) };
        assert_eq!(n, 8);
    }

    #[test]
    fn wait_eventfd_wakes_and_times_out() {
        use std::os::fd::AsRawFd as _;
        type Wait = fn(RawFd, Option<Duration>) -> Result<Option<u64>>;
        let waits: [(&str, Wait); 2] = [("uring", wait_eventfd), ("plain", wait_eventfd_plain)];
        for (name, wait) in waits {
            for flags in [0, libc::EFD_NONBLOCK] {
                let efd = eventfd(flags);
                let fd = efd.as_raw_fd();
                // Times out.
                let t = Instant::now();
                assert_eq!(wait(fd, Some(Duration::from_millis(30))).unwrap(), None, "{name} {flags}");
                assert!(t.elapsed() >= Duration::from_millis(29), "{name} {flags}: {:?}", t.elapsed());
                // Already rung: returns at once with the counter.
                ring_eventfd(fd, 3);
                assert_eq!(wait(fd, Some(Duration::from_secs(5))).unwrap(), Some(3));
                // Woken by another thread, with and without a timeout.
                for timeout in [Some(Duration::from_secs(10)), None] {
                    let t = Instant::now();
                    let waker = std::thread::spawn(move || {
                        std::thread::sleep(Duration::from_millis(40));
                        ring_eventfd(fd, 1);
                    });
                    let before = thread_stats();
                    assert_eq!(wait(fd, timeout).unwrap(), Some(1), "{name} {flags}");
                    let el = t.elapsed();
                    assert!(el >= Duration::from_millis(35) && el < Duration::from_secs(5), "{name} {flags}: {el:?}");
                    let d = delta(before);
                    if name == "uring" {
                        // A non-blocking eventfd may take a POLL_ADD round on older kernels.
                        let most = if flags == 0 { 1 } else { 2 };
                        assert!(d.enters >= 1 && d.enters <= most, "io_uring_enter per sleep: {d:?}");
                    }
                    waker.join().unwrap();
                }
            }
        }
    }
}
