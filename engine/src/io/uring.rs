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
//! Directory operations: `rename`, `remove_file` and `sync_dir`'s fsync use io_uring
//! (RENAMEAT, UNLINKAT, FSYNC on a directory fd, when the kernel has them); `create_dir_all`,
//! `list_dir`, opening files and directories, `len` and `modified_ms` (fstat) stay plain system
//! calls: they are rare and have no useful asynchronous form here.
#![allow(unsafe_code)]

use std::cell::RefCell;
use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::io;
use std::marker::PhantomData;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::os::unix::io::{AsRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use io_uring::{opcode, squeue, types, IoUring};

/// The io_uring crate, re-exported so callers can build their own entries for [`Ring::run`].
pub use io_uring as sys;

use super::{record_io, AlignedBuf, DirectAlignment, IoCompletion, IoFile, IoMode, IoOp, IoOpKind, OpenMode, Storage};
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
const MAX_RETRIES: u32 = 64;

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
    _not_send: PhantomData<*const ()>,
}

impl std::fmt::Debug for Ring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ring").field("fd", &self.ring.as_raw_fd()).field("sq_entries", &self.sq_entries()).finish()
    }
}

impl Ring {
    /// A new ring with `entries` submission entries. Tries SINGLE_ISSUER + DEFER_TASKRUN +
    /// SUBMIT_ALL first (6.1+), then SUBMIT_ALL alone, then no flags.
    pub(crate) fn new(entries: u32) -> io::Result<Ring> {
        let ring = IoUring::builder()
            .setup_single_issuer()
            .setup_defer_taskrun()
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
        Ok(Ring { ring, dead: None, generation: 0, _not_send: PhantomData })
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
        for cqe in self.ring.completion() {
            let ud = cqe.user_data();
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
        n
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
        if let Some(errno) = self.dead {
            return vec![-errno; n];
        }
        self.generation = self.generation.wrapping_add(1);
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
                let got = self.reap(tag, &mut res);
                done += got;
                inflight -= got;
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
        let entries = self.ring.params().sq_entries();
        match Ring::new(entries) {
            Ok(fresh) => drop(std::mem::replace(self, fresh)),
            Err(_) => self.dead = Some(errno),
        }
    }
}
