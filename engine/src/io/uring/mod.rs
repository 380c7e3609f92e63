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
use std::fs::File;
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
use super::pool::{self, Pool, Registration, WriteBuf};
use super::select::{DEFAULT_DIR_MODE, DEFAULT_FILE_MODE};
use super::{
    record_io, AlignedBuf, AsyncIo, AsyncOutcome, DirectAlignment, IoCompletion, IoFile, IoMode, IoOp, IoOpKind,
    OpenMode, Storage,
};
use crate::error::{Error, Result};

/// Submission-queue entries of each thread's ring (the completion queue has twice as many).
pub(crate) const RING_ENTRIES: u32 = 256;
/// Entries of a one-off ring used when the thread's ring is already borrowed (nested use).
const TEMP_RING_ENTRIES: u32 = 16;
/// The fewest kernel workers a thread with a ring may run its blocking operations on at once
/// (IORING_REGISTER_IOWQ_MAX_WORKERS, bounded work: reads and writes of regular files).
///
/// A write the kernel cannot issue without blocking (on ext4, an O_DIRECT write that extends
/// the file, and an O_DSYNC one that changes metadata) runs on one of the thread's io-wq workers
/// for its whole length. The kernel allows at most min(entries of the thread's first ring, 4 x
/// online CPUs) of them, 8 on a 2-core machine: a shard with 64 partitions writing had 8 writes
/// on the device, the rest queued behind them. Measured with the durable sweep at 64 partitions
/// (2 repetitions each, `--sweep-sync-methods dsync-writes --sweep-zero-fill auto
/// --sweep-preallocate false`): 191 MB/s and a p99 of 12.9 ms with one append in flight per
/// partition against 156 MB/s and 25.9 ms at 8 workers; 474 MB/s and 29.5 ms with 8 in flight
/// against 334 MB/s and 42.1 ms. At 1,000 partitions of the `partitions` workload, 1.15-1.23x
/// fio's many-files job with 32-128 workers against 0.79x and 0.97x with 8 (docs/benchmarks.md).
/// A worker is a kernel thread made when work waits and gone after a few idle seconds; a
/// machine with more CPUs already allows more, and is left as it is.
pub(crate) const MIN_IO_WORKERS: u32 = 64;
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

mod doorbell;
mod file;
mod ring;
mod storage;
#[cfg(test)]
pub(crate) mod tests;

pub(crate) use doorbell::*;
pub(crate) use file::*;
pub(crate) use ring::*;
pub use storage::*;

/// One io_uring instance, owned by one thread (it is neither `Send` nor `Sync`: the ring is
/// created with IORING_SETUP_SINGLE_ISSUER when the kernel has it).
pub(crate) struct Ring {
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
    /// Ids of the asynchronous batches that completed since [`Ring::take_finished`] last took
    /// them; `None` until it is first called (a thread that never asks keeps no list).
    finished: Option<Vec<u32>>,
    /// The POLL_ADD on the shard's doorbell.
    doorbell: Doorbell,
    /// The eventfd registered with this ring (io_uring_register_eventfd), made on first
    /// request by [`crate::io::Storage::completion_fd`]: it counts completions posted.
    completion_fd: Option<crate::io::eventfd::EventFd>,
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
