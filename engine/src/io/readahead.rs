//! Read-ahead: reads started now and collected by a later call on the same thread, for
//! sequential O_DIRECT readers (a consumer catching up over sealed segments). The fetch path
//! starts the read of the window the consumer's next fetch will need before it returns, so the
//! device works while the result travels to the consumer, the consumer handles it and the next
//! request comes back, instead of idling between the fetches of a queue-depth-1 reader: catching
//! up runs at the pace of the slower of the device and the consumer, not of their sum.
//!
//! The reads go through a small io_uring of the thread's own, not the thread's main ring: that
//! one serves synchronous I/O and the shard's write batches, whose waits must not reap (or wait
//! behind) a read nobody asked for yet. At most [`SLOTS`] reads are in flight per thread; when all
//! are taken a new read replaces the oldest completed one nobody came for, or is not started
//! (starting never waits). A read's buffer and file stay owned by its slot until the
//! kernel has completed it (also when the thread exits), so the kernel never writes memory the
//! program has reused; if the ring fails in a way that leaves that unknown, the buffers are
//! leaked and read-ahead is off for the thread.
#![allow(unsafe_code)]

use std::cell::{Cell, RefCell};
use std::io;
use std::sync::Arc;

use io_uring::{opcode, types, IoUring};
use nix::errno::Errno;

use super::{record_io, AlignedBuf, IoFile};

/// Reads in flight (or completed and not taken) per thread: one each for this many consumers
/// catching up through the same thread at once.
pub const SLOTS: usize = 4;

/// A read in flight (or completed, not yet collected).
struct Slot {
    /// Whose read it is (compared by address; held so that the address is not reused meanwhile).
    key: Arc<dyn IoFile>,
    /// The file read: holds the descriptor open while the kernel uses it.
    _file: Arc<dyn IoFile>,
    pos: u64,
    len: usize,
    /// Written by the kernel until `result` is set.
    buf: Arc<AlignedBuf>,
    user_data: u64,
    /// The completion's result (bytes, or `-errno`).
    result: Option<i32>,
    /// Nobody will take it: dropped once completed.
    stale: bool,
}

struct ReadAhead {
    ring: IoUring,
    slots: Vec<Slot>,
    next_id: u64,
}

/// What a collected read-ahead holds: `got` bytes of the file at `pos`, in `buf`.
#[derive(Debug)]
pub(crate) struct ReadAheadHit {
    pub buf: Arc<AlignedBuf>,
    pub pos: u64,
    pub got: usize,
}

/// This thread's read-ahead counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReadAheadStats {
    /// Reads started.
    pub started: u64,
    /// Reads collected by `take` (the rest were evicted unused or failed).
    pub used: u64,
}

// Per thread, as the thread's main ring is (io/uring/ring.rs says why): read-aheads are started
// and collected by the fetches of one thread.
thread_local! {
    static STATS: Cell<ReadAheadStats> = const { Cell::new(ReadAheadStats { started: 0, used: 0 }) };
    /// This thread's read-ahead ring: `None` until first use, and after a failure (off for good:
    /// `Disabled`).
    static RA: RefCell<State> = const { RefCell::new(State::Unused) };
}

enum State {
    Unused,
    On(Box<ReadAhead>),
    Disabled,
}

fn same(a: &Arc<dyn IoFile>, b: &Arc<dyn IoFile>) -> bool {
    std::ptr::addr_eq(Arc::as_ptr(a), Arc::as_ptr(b))
}

impl ReadAhead {
    fn new() -> io::Result<ReadAhead> {
        Ok(ReadAhead { ring: IoUring::new((SLOTS * 2) as u32)?, slots: Vec::new(), next_id: 1 })
    }

    /// Records the completions the kernel has posted (no system call).
    fn reap(&mut self) {
        let done: Vec<(u64, i32)> = self.ring.completion().map(|c| (c.user_data(), c.result())).collect();
        for (ud, res) in done {
            if let Some(s) = self.slots.iter_mut().find(|s| s.user_data == ud) {
                s.result = Some(res);
                if res > 0 {
                    record_io(0, 0, res as u64, 0, 0);
                }
            }
        }
    }

    /// Waits until slot `i` has completed.
    fn wait(&mut self, i: usize) -> io::Result<()> {
        let mut tries = 0;
        loop {
            self.reap();
            if self.slots[i].result.is_some() {
                return Ok(());
            }
            record_io(0, 1, 0, 0, 0);
            match self.ring.submit_and_wait(1) {
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.raw_os_error().map(Errno::from_raw),
                        Some(Errno::EINTR | Errno::EAGAIN | Errno::EBUSY)
                    ) && tries < super::uring::MAX_RETRIES =>
                {
                    tries += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }

    fn start(
        &mut self,
        key: Arc<dyn IoFile>,
        file: Arc<dyn IoFile>,
        pos: u64,
        len: usize,
        mut buf: Arc<AlignedBuf>,
    ) -> io::Result<bool> {
        let Some(fd) = file.raw_fd() else { return Ok(false) };
        if len == 0 || len > buf.capacity() || len > u32::MAX as usize {
            return Ok(false);
        }
        self.prune(None, None);
        if self.slots.iter().any(|s| !s.stale && same(&s.key, &key) && s.pos == pos && s.len == len) {
            return Ok(false); // already under way
        }
        if self.slots.len() >= SLOTS {
            // Full: make room by dropping the oldest read that completed and was not taken (its
            // reader stopped or fell behind), never by waiting for one in flight; else start none.
            match self.slots.iter().position(|s| s.result.is_some()) {
                Some(i) => {
                    self.slots.remove(i);
                }
                None => return Ok(false),
            }
        }
        let Some(b) = Arc::get_mut(&mut buf) else { return Ok(false) };
        let ptr = b.as_mut_ptr();
        let user_data = self.next_id;
        self.next_id += 1;
        let entry = opcode::Read::new(types::Fd(fd), ptr, len as u32).offset(pos).build().user_data(user_data);
        // SAFETY: the entry points at `len <= capacity` bytes of `buf`'s allocation and at `fd`;
        // the slot pushed below owns both `buf` (its only reference now: `get_mut` succeeded) and
        // the file holding `fd` until the completion is reaped, and a slot is only dropped after
        // that (`wait`), or leaked when that cannot be known (`disable`).
        let pushed = unsafe { self.ring.submission().push(&entry) };
        if pushed.is_err() {
            return Ok(false); // queue full: cannot happen with SLOTS < entries, but harmless
        }
        self.slots.push(Slot { key, _file: file, pos, len, buf, user_data, result: None, stale: false });
        // One operation, however many io_uring_enter calls its submission takes.
        record_io(1, 0, 0, 0, 0);
        let mut tries = 0;
        loop {
            record_io(0, 1, 0, 0, 0);
            match self.ring.submit() {
                Ok(_) => {
                    let _ = STATS.try_with(|c| c.set(ReadAheadStats { started: c.get().started + 1, ..c.get() }));
                    return Ok(true);
                }
                Err(e)
                    if matches!(
                        e.raw_os_error().map(Errno::from_raw),
                        Some(Errno::EINTR | Errno::EAGAIN | Errno::EBUSY)
                    ) && tries < super::uring::MAX_RETRIES =>
                {
                    tries += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Marks the reads nobody will take, and drops those completed: reads of files whose owner
    /// dropped them (a deleted segment: the slot holds the last reference), and reads of `key`
    /// other than `keep` (its reader went elsewhere). So a slot keeps a file open only while its
    /// reader may come for it, or until the kernel is done with its buffer. Never waits.
    fn prune(&mut self, key: Option<&Arc<dyn IoFile>>, keep: Option<u64>) {
        self.reap();
        for s in &mut self.slots {
            if Arc::strong_count(&s.key) == 1 || (key.is_some_and(|k| same(&s.key, k)) && Some(s.user_data) != keep) {
                s.stale = true;
            }
        }
        self.slots.retain(|s| !(s.stale && s.result.is_some()));
    }

    /// The read of `key` covering `[start, end)`, completed, out of its slot; other reads of
    /// `key` are dropped.
    fn take(&mut self, key: &Arc<dyn IoFile>, start: u64, end: u64) -> io::Result<Option<ReadAheadHit>> {
        let hit = self
            .slots
            .iter()
            .find(|s| !s.stale && same(&s.key, key) && s.pos <= start && end <= s.pos + s.len as u64)
            .map(|s| s.user_data);
        self.prune(Some(key), hit);
        let Some(i) = self.slots.iter().position(|s| Some(s.user_data) == hit) else {
            return Ok(None);
        };
        self.wait(i)?;
        let s = self.slots.remove(i);
        let res = s.result.expect("waited for");
        if res >= 0 {
            let _ = STATS.try_with(|c| c.set(ReadAheadStats { used: c.get().used + 1, ..c.get() }));
        }
        Ok((res >= 0).then_some(ReadAheadHit { buf: s.buf, pos: s.pos, got: res as usize }))
    }
}

impl Drop for ReadAhead {
    fn drop(&mut self) {
        for i in 0..self.slots.len() {
            if self.wait(i).is_err() {
                // The kernel may still write into the buffers: never free them.
                for s in self.slots.drain(..) {
                    std::mem::forget(s);
                }
                return;
            }
        }
    }
}

/// Turns read-ahead off for this thread after `ra` failed: its in-flight buffers (and the ring,
/// whose entries point at them) are leaked, since whether the kernel is done with them is unknown.
fn disable(state: &mut State) {
    if let State::On(ra) = std::mem::replace(state, State::Disabled) {
        std::mem::forget(ra);
    }
}

fn with<R>(f: impl FnOnce(&mut ReadAhead) -> io::Result<R>) -> Option<R> {
    RA.try_with(|st| {
        let mut st = st.borrow_mut();
        if matches!(*st, State::Unused) {
            *st = match ReadAhead::new() {
                Ok(ra) => State::On(Box::new(ra)),
                Err(_) => State::Disabled,
            };
        }
        let State::On(ra) = &mut *st else { return None };
        match f(ra) {
            Ok(r) => Some(r),
            Err(_) => {
                disable(&mut st);
                None
            }
        }
    })
    .ok()
    .flatten()
}

/// Starts reading `len` bytes of `file` at `pos` into `buf` (which must be its only reference,
/// aligned as an O_DIRECT read needs), for a later [`take`] with the same `key` on this thread.
/// False when it was not started (no descriptor, read-ahead off, the same read already under
/// way); `buf` is dropped then.
pub(crate) fn start(key: Arc<dyn IoFile>, file: Arc<dyn IoFile>, pos: u64, len: usize, buf: Arc<AlignedBuf>) -> bool {
    with(|ra| ra.start(key, file, pos, len, buf)).unwrap_or(false)
}

/// The completed read-ahead of `key` covering `[start, end)`, waiting for it if it is still in
/// flight; `None` when there is none (or it failed: the caller reads again and sees the error).
pub(crate) fn take(key: &Arc<dyn IoFile>, start: u64, end: u64) -> Option<ReadAheadHit> {
    with(|ra| ra.take(key, start, end)).flatten()
}

/// This thread's counters.
pub fn thread_stats() -> ReadAheadStats {
    STATS.try_with(|c| c.get()).unwrap_or_default()
}

/// Reads of this thread in flight or not collected.
pub fn pending() -> usize {
    RA.try_with(|st| match &*st.borrow() {
        State::On(ra) => ra.slots.len(),
        _ => 0,
    })
    .unwrap_or(0)
}
