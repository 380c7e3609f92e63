//! [`UringStorage`]: the `Storage` of the io_uring modes, with the shard's batched and
//! asynchronous submissions.

#![allow(unsafe_code)]

use nix::errno::Errno;
use nix::fcntl::{OFlag, AT_FDCWD};

use super::*;

/// The status flag a file of this backend is opened with: O_DIRECT in direct mode, none else.
fn direct_flag(direct: bool) -> OFlag {
    if direct {
        OFlag::O_DIRECT
    } else {
        OFlag::empty()
    }
}

/// Optional opcodes, probed once per process.
#[derive(Clone, Copy, Debug)]
pub(super) struct Caps {
    pub(super) ftruncate: bool,
    pub(super) renameat: bool,
    pub(super) unlinkat: bool,
}

pub(super) fn caps() -> Caps {
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

pub(super) fn cpath(op: &'static str, path: &Path) -> Result<CString> {
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
        let mut o = crate::io::std_backend::open_options(mode, self.file_mode);
        o.custom_flags((crate::io::std_backend::SAFE_OPEN_FLAGS | direct_flag(direct)).bits());
        let file = match o.open(path) {
            Ok(f) => f,
            Err(e) if direct && e.raw_os_error() == Some(Errno::EINVAL as i32) => {
                // A FIFO or a device refuses O_DIRECT too: say what it is, not blame the filesystem.
                if let Some(what) = std::fs::symlink_metadata(path)
                    .ok()
                    .and_then(|m| crate::io::std_backend::not_regular(m.file_type()))
                {
                    return Err(Error::NotRegular { path: path.to_path_buf(), what });
                }
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
            Err(e) => return Err(crate::io::std_backend::open_error(path, e)),
        };
        crate::io::std_backend::check_regular(&file, path)?;
        crate::io::std_backend::set_status_flags(&file, path, direct_flag(direct))?;
        let direct = direct.then(|| crate::io::probe::dio_alignment_fd(file.as_raw_fd()));
        Ok(Arc::new(UringFile { file, path: path.to_path_buf(), direct }))
    }
}

pub(super) fn canceled(path: &Path) -> Error {
    Error::io("submit", path, errno_err(Errno::ECANCELED as i32))
}

/// Runs one operation of a batch on its own (after a short write fixed up its predecessor).
pub(super) fn run_op_alone(ring: &mut Ring, op: &IoOp, fd: RawFd) -> Result<usize> {
    match &op.kind {
        IoOpKind::Write { buf, pos, dsync } => write_full(ring, fd, buf, *pos, rw_flags(*dsync))
            .map(|_| buf.len())
            .map_err(|e| Error::io("write", op.file.path(), e)),
        IoOpKind::SyncData => {
            fsync_on(ring, fd, true).map(|_| 0).map_err(|e| Error::io("fdatasync", op.file.path(), e))
        }
    }
}

/// The RWF_* flags of a write entry. libc's constant: nix has no RWF_* flags (nor pwritev2).
pub(super) fn rw_flags(dsync: bool) -> i32 {
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
pub(super) fn build_round(
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
pub(super) fn submit_on_ring(ring: &mut Ring, ops: &[IoOp], fds: &[RawFd]) -> Vec<Result<usize>> {
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
pub(super) fn finish_batch(
    ops: &[IoOp],
    results: Vec<Option<Result<usize>>>,
    (written, fsyncs): (u64, u64),
) -> Vec<Result<usize>> {
    record_io(0, 0, 0, written, fsyncs);
    crate::io::record_writes(ops.iter().filter(|o| matches!(o.kind, IoOpKind::Write { .. })).count() as u64);
    results
        .into_iter()
        .zip(ops)
        .map(|(r, op)| r.unwrap_or_else(|| Err(Error::io("submit", op.file.path(), errno_err(Errno::EIO as i32)))))
        .collect()
}

/// Each op paired with its result.
pub(super) fn completions(ops: Vec<IoOp>, results: Vec<Result<usize>>) -> Vec<IoCompletion> {
    ops.into_iter().zip(results).map(|(op, result)| IoCompletion { op, result }).collect()
}

/// Whether any op writes from the thread's pool (whose chunks may need registering first).
pub(super) fn uses_pool(ops: &[IoOp]) -> bool {
    ops.iter().any(|o| matches!(&o.kind, IoOpKind::Write { buf, .. } if buf.pool_slot().is_some()))
}

/// Queues each batch on the ring without waiting and submits them all with one io_uring_enter.
/// A batch that does not fit one round, or that the ring cannot take, runs synchronously
/// instead (and comes back [`AsyncIo::Ready`]).
pub(super) fn start_async_on_ring(ring: &mut Ring, batches: Vec<(Vec<IoOp>, Vec<RawFd>)>) -> Vec<AsyncIo> {
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
                out.push(AsyncIo::Ring(crate::io::RingTicket::new(id)))
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

/// Drops the claim on asynchronous batch `id` of this thread's ring (see [`crate::io::RingTicket`]).
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

/// See [`Storage::take_finished_async`]: the ids of this thread's ring (made here if the thread
/// has none yet, so that its batches are counted from the start); false if no ring can be had.
pub(crate) fn take_finished_async(out: &mut Vec<u64>) -> bool {
    with_thread_ring(|ring| ring.thread_ring.then(|| ring.take_finished(out)).is_some()).unwrap_or(false)
}

/// See [`Storage::completions_waiting`].
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
pub(super) fn settle_round(
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
        let r = raw.get(k).copied().unwrap_or(-(Errno::EIO as i32));
        let linked = k > 0 && idx[k - 1] + 1 == i && ops[i - 1].link_next;
        let mut fixed = false;
        let res = if linked && matches!(results[i - 1], Some(Err(_))) {
            Err(canceled(op.file.path()))
        } else if linked && fixed_prev && r == -(Errno::ECANCELED as i32) {
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
            return crate::io::submit_one_by_one(ops);
        };
        // `ops` (and so every buffer) stays owned here until the ring has reaped everything.
        match with_thread_ring(|ring| submit_on_ring(ring, &ops, &fds)) {
            Ok(results) => completions(ops, results),
            Err(_) => crate::io::submit_one_by_one(ops),
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
                batches.into_iter().map(|(ops, _)| AsyncIo::Ready(crate::io::submit_one_by_one(ops))).collect()
            }
        }
    }

    fn claim_async(&self, io: AsyncIo, wait: bool) -> std::result::Result<AsyncOutcome, AsyncIo> {
        let AsyncIo::Ring(t) = io else { return Ok(crate::io::claim_ready(io)) };
        if !t.on_this_thread() {
            return Err(AsyncIo::Ring(t));
        }
        match complete_async(t.id(), wait) {
            Some(outcome) => {
                // Claimed (or unknown to the ring): either way there is nothing to abandon.
                t.claimed();
                Ok(outcome)
            }
            None => Err(AsyncIo::Ring(t)),
        }
    }

    fn poll_async(&self) {
        poll_async();
    }

    fn take_finished_async(&self, out: &mut Vec<u64>) -> bool {
        take_finished_async(out)
    }

    fn completions_waiting(&self) -> bool {
        completions_waiting()
    }

    fn completion_fd(&self) -> Option<std::os::fd::OwnedFd> {
        with_thread_ring(|ring| ring.completion_fd().ok()).ok().flatten()
    }

    fn clear_completion_fd(&self) {
        let _ = THREAD_RING.try_with(|cell| {
            if let Ok(mut slot) = cell.try_borrow_mut() {
                if let Some(ring) = slot.as_mut() {
                    ring.clear_completion_fd();
                }
            }
        });
    }

    fn create_dir_all(&self, path: &Path) -> Result<()> {
        crate::io::std_backend::create_dir_all(path, self.dir_mode)
    }

    fn lock(&self, path: &Path, kind: crate::io::lock::LockKind) -> Result<Option<crate::io::lock::LockGuard>> {
        crate::io::lock::lock_path(path, kind, self.file_mode)
    }

    fn list_dir(&self, path: &Path) -> Result<Vec<String>> {
        crate::io::std_backend::list_dir(path)
    }

    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        if !caps().renameat {
            return std::fs::rename(from, to).map_err(|e| Error::io("rename", from, e));
        }
        let (f, t) = (cpath("rename", from)?, cpath("rename", to)?);
        let r = with_thread_ring(|ring| {
            let e = opcode::RenameAt::new(
                types::Fd(AT_FDCWD.as_raw_fd()),
                f.as_ptr(),
                types::Fd(AT_FDCWD.as_raw_fd()),
                t.as_ptr(),
            )
            .build();
            // SAFETY: both C strings live until this closure returns, after the completion.
            unsafe { run_one(ring, e) }
        });
        r.and_then(|r| r).map(|_| ()).map_err(|e| Error::io("rename", from, e))
    }

    fn remove_dir(&self, path: &Path) -> Result<()> {
        std::fs::remove_dir(path).map_err(|e| Error::io("rmdir", path, e))
    }
    fn remove_file(&self, path: &Path) -> Result<()> {
        if !caps().unlinkat {
            return std::fs::remove_file(path).map_err(|e| Error::io("unlink", path, e));
        }
        let p = cpath("unlink", path)?;
        let r = with_thread_ring(|ring| {
            let e = opcode::UnlinkAt::new(types::Fd(AT_FDCWD.as_raw_fd()), p.as_ptr()).build();
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
