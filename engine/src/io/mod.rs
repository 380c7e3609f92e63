//! The I/O layer: the only way the rest of the engine touches files and directories, and the only
//! module where `unsafe` is allowed (each block carries a `// SAFETY:` comment).
//!
//! Everything above talks to two traits: [`Storage`] (directories, opening, renaming, removing,
//! atomic small-file replacement) and [`IoFile`] (positioned reads and writes, sync, truncate,
//! allocate). Backends: [`std_backend::StdStorage`] (plain `pread`/`pwrite` through std, the
//! portable fallback). io_uring, O_DIRECT and a simulated crash disk plug in behind the same
//! traits, so segment code never changes with the I/O mode.
//!
//! Errors from this layer already carry the operation and the path.

pub(crate) mod aligned;
pub mod arena;
pub mod eventfd;
pub mod file_cache;
mod in_flight;
pub mod lock;
pub mod pool;
pub mod probe;
pub mod readahead;
pub mod select;
pub(crate) mod sendfile;
pub mod shutdown;
#[cfg(any(test, feature = "sim"))]
pub mod sim;
pub mod std_backend;
pub(crate) mod uring;

pub use aligned::AlignedBuf;
pub(crate) use arena::ArenaSlice;
pub use arena::{ArenaConfig, ArenaReport, HugePages, IndexArena, PageBacking};
pub use file_cache::max_open_files_for;
pub(crate) use file_cache::{FileCache, HeldDescriptor, LazyFile, Reopen};
pub(crate) use in_flight::{poll_front, poll_slot, InFlight};
pub use pool::{PoolStats, WriteBuf};
pub use sendfile::send_file_range;
pub use uring::UringStorage;

use std::cell::Cell;
use std::fmt::Debug;
use std::os::unix::io::RawFd;
use std::path::Path;
use std::sync::Arc;

use crate::error::Result;

/// How file I/O is done. The engine reports the mode it really runs in (see
/// [`Storage::mode`]): asking for `Direct` where io_uring is refused gives `Sync`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum IoMode {
    /// O_DIRECT + io_uring: no page cache; aligned buffers; the default.
    #[default]
    Direct,
    /// Page cache + io_uring.
    Buffered,
    /// Plain pread/pwrite through the page cache: the fallback when io_uring is refused.
    Sync,
}

impl IoMode {
    pub fn name(self) -> &'static str {
        match self {
            IoMode::Direct => "direct",
            IoMode::Buffered => "buffered",
            IoMode::Sync => "sync",
        }
    }
}

impl std::str::FromStr for IoMode {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "direct" => Ok(IoMode::Direct),
            "buffered" => Ok(IoMode::Buffered),
            "sync" => Ok(IoMode::Sync),
            other => Err(format!("unknown I/O mode {other:?} (direct, buffered, sync)")),
        }
    }
}

impl std::fmt::Display for IoMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// O_DIRECT alignment of a file: of memory addresses, and of file offsets and lengths, which the
/// kernel requires; and the filesystem's block, which a write should also be aligned to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DirectAlignment {
    pub mem: usize,
    pub offset: usize,
    /// The filesystem's block size (statfs's `f_bsize`; 4096 where it cannot be had). The
    /// kernel takes writes aligned only to `offset`, but one that starts or ends inside a
    /// filesystem block takes the slow sub-block path: on ext4 and XFS the inode lock held
    /// exclusively and the file's other direct I/O waited for, on ext4 the block's rest zeroed
    /// and, with O_DSYNC, the inode written synchronously at completion.
    pub fs_block: usize,
}

impl DirectAlignment {
    /// The same alignment for memory, offsets and the filesystem's block.
    pub fn uniform(align: usize) -> DirectAlignment {
        DirectAlignment { mem: align, offset: align, fs_block: align }
    }
}

/// One operation of a batch submitted with [`Storage::submit`].
#[derive(Debug)]
pub enum IoOpKind {
    /// Write all of `buf` at `pos` (for a direct file: `pos`, `buf.len()` and the buffer aligned).
    /// With `dsync` the write is durable when it completes (RWF_DSYNC: the data and the metadata
    /// needed to read it, as an fdatasync would make them), so it needs no fdatasync after it.
    Write { buf: WriteBuf, pos: u64, dsync: bool },
    /// fdatasync.
    SyncData,
}

/// An operation on a file; `tag` is the caller's, returned with the completion. With `link_next`
/// the next operation runs only if this one succeeds (io_uring's IOSQE_IO_LINK): a write linked
/// to its fsync.
#[derive(Debug)]
pub struct IoOp {
    pub file: Arc<dyn IoFile>,
    pub kind: IoOpKind,
    pub tag: u64,
    pub link_next: bool,
}

/// A finished operation: the operation (its buffer given back) and its result (bytes written).
#[derive(Debug)]
pub struct IoCompletion {
    pub op: IoOp,
    pub result: Result<usize>,
}

/// Per-thread I/O counters (each shard thread reads its own).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IoStats {
    /// Operations issued to the kernel (reads, writes, fsyncs, truncates...).
    pub ops: u64,
    /// System calls that submit or wait for I/O (io_uring_enter, or one per plain syscall).
    pub enters: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub fsyncs: u64,
    /// Write operations (each a whole contiguous range handed to the kernel).
    pub writes: u64,
    /// O_DIRECT reads whose buffer, offset or length was not aligned, so that the backend read
    /// through a bounce buffer and copied (a fetch or walk path should cause none).
    pub bounced_reads: u64,
}

// Per thread: each shard reports the I/O its own thread issued (its ring's work), as
// getrusage(RUSAGE_THREAD) would; a backend on any thread counts without a lock.
thread_local! {
    static STATS: Cell<IoStats> = const {
        Cell::new(IoStats { ops: 0, enters: 0, bytes_read: 0, bytes_written: 0, fsyncs: 0, writes: 0, bounced_reads: 0 })
    };
}

/// Counts an O_DIRECT read made through a bounce buffer ([`IoStats::bounced_reads`]).
pub(crate) fn record_bounced_read() {
    STATS.with(|s| {
        let mut v = s.get();
        v.bounced_reads += 1;
        s.set(v);
    });
}

/// Counts write operations on this thread (backends call it once per write handed to the kernel).
pub(crate) fn record_writes(n: u64) {
    STATS.with(|s| {
        let mut v = s.get();
        v.writes += n;
        s.set(v);
    });
}

/// This thread's I/O counters.
pub fn thread_stats() -> IoStats {
    STATS.with(|s| s.get())
}

/// Adds another thread's counters to this thread's: the I/O of helper threads a shard starts
/// counts as the shard's.
pub(crate) fn add_thread_stats(o: IoStats) {
    STATS.with(|s| {
        let mut v = s.get();
        v.ops += o.ops;
        v.enters += o.enters;
        v.bytes_read += o.bytes_read;
        v.bytes_written += o.bytes_written;
        v.fsyncs += o.fsyncs;
        v.writes += o.writes;
        v.bounced_reads += o.bounced_reads;
        s.set(v);
    });
}

/// Adds to this thread's counters (backends call it).
pub(crate) fn record_io(ops: u64, enters: u64, read: u64, written: u64, fsyncs: u64) {
    STATS.with(|s| {
        let mut v = s.get();
        v.ops += ops;
        v.enters += enters;
        v.bytes_read += read;
        v.bytes_written += written;
        v.fsyncs += fsyncs;
        s.set(v);
    });
}

/// How to open a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpenMode {
    /// Existing file, read only.
    Read,
    /// Existing file, read and write.
    ReadWrite,
    /// Create the file (it must not exist) for read and write.
    CreateNew,
    /// Create or truncate to zero, read and write.
    CreateTruncate,
}

/// Reads the file's bytes from `pos` into `buf`, as many as it holds, retrying short reads until
/// at least `min` of them (at most `buf.len()`) are in or the file ends; returns how many are in.
/// Every read asks for the rest of `buf`, not just up to `min`: an O_DIRECT caller passes a whole
/// number of aligned blocks and gets them without a bounce, and its `min` need not be aligned.
/// `on_read` sees what each read returned (0 for the one that found the end); a failed read ends
/// the loop with its error, which names the file.
pub(crate) fn read_up_to<F: IoFile + ?Sized>(
    file: &F,
    pos: u64,
    buf: &mut [u8],
    min: usize,
    mut on_read: impl FnMut(usize),
) -> Result<usize> {
    let min = min.min(buf.len());
    let mut got = 0;
    while got < min {
        let n = file.read_at(&mut buf[got..], pos + got as u64)?;
        on_read(n);
        if n == 0 {
            break;
        }
        got += n;
    }
    Ok(got)
}

/// `Ok` when `path` is a directory itself, not a symbolic link to one: for removing a directory's
/// files without following a link out of the data directory.
pub(crate) fn check_real_dir(path: &Path) -> Result<()> {
    let m = std::fs::symlink_metadata(path).map_err(|e| crate::Error::io("lstat", path, e))?;
    if m.file_type().is_dir() {
        return Ok(());
    }
    Err(crate::Error::NotRegular { path: path.to_path_buf(), what: std_backend::file_type_name(m.file_type()) })
}

/// One open file. Positions are absolute; there is no cursor.
// `len` is a fallible syscall here, not a collection size, so an `is_empty` would mislead.
#[allow(clippy::len_without_is_empty)]
pub trait IoFile: Send + Sync + Debug {
    /// The path the file was opened at (renames through [`Storage::rename`] do not update it;
    /// callers that rename reopen).
    fn path(&self) -> &Path;
    /// Reads up to `buf.len()` bytes at `pos`; fewer only at end of file.
    fn read_at(&self, buf: &mut [u8], pos: u64) -> Result<usize>;
    /// Reads exactly `buf.len()` bytes at `pos`, or fails with `UnexpectedEof`.
    fn read_exact_at(&self, buf: &mut [u8], pos: u64) -> Result<()> {
        let done = read_up_to(self, pos, buf, buf.len(), |_| ())?;
        if done < buf.len() {
            return Err(crate::Error::io(
                "read",
                self.path(),
                std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    format!("{} bytes short at byte {}", buf.len() - done, pos + done as u64),
                ),
            ));
        }
        Ok(())
    }
    /// Writes all of `buf` at `pos`.
    fn write_all_at(&self, buf: &[u8], pos: u64) -> Result<()>;
    /// Writes all of `buf` at `pos` durably (as `write_all_at` then `sync_data` would): with
    /// RWF_DSYNC where the backend has it.
    fn write_all_at_dsync(&self, buf: &[u8], pos: u64) -> Result<()> {
        self.write_all_at(buf, pos)?;
        self.sync_data()
    }
    /// Makes the file's data durable (fdatasync).
    fn sync_data(&self) -> Result<()>;
    /// Sets the file's length (truncates or extends with zeros).
    fn set_len(&self, len: u64) -> Result<()>;
    /// Reserves disk blocks for `[0, len)` without changing the file's length.
    fn allocate(&self, len: u64) -> Result<()>;
    /// The file's current length.
    fn len(&self) -> Result<u64>;
    /// The file's modification time in ms since the epoch.
    fn modified_ms(&self) -> Result<i64>;
    /// The kernel file descriptor, for backends that submit their own operations.
    fn raw_fd(&self) -> Option<RawFd> {
        None
    }
    /// `Some` when the file was opened O_DIRECT: writes must then be aligned.
    fn direct_alignment(&self) -> Option<DirectAlignment> {
        None
    }
    /// For a lazily opened file: closes its descriptor now if nothing is using it (it opens
    /// again on next use). Other files stay open.
    fn close_if_idle(&self) {}
    /// For a file that may hold no descriptor (a lazily opened one): a handle that holds one,
    /// open, for as long as it lives, so that operations on it can go into a batch for
    /// [`Storage::submit`]. `None`: this handle is the one to use.
    fn descriptor_handle(&self) -> Result<Option<Arc<dyn IoFile>>> {
        Ok(None)
    }
}

/// fdatasync's of `files` in one submission, so that a backend with a ring runs them at once
/// (their device cache flushes merge) instead of one after the other; the first failure,
/// naming its file, once all have finished.
pub(crate) fn sync_data_together(storage: &dyn Storage, files: &[&Arc<dyn IoFile>]) -> Result<()> {
    let mut ops = Vec::with_capacity(files.len());
    for (i, f) in files.iter().enumerate() {
        let file = f.descriptor_handle()?.unwrap_or_else(|| (*f).clone());
        ops.push(IoOp { file, kind: IoOpKind::SyncData, tag: i as u64, link_next: false });
    }
    storage.submit(ops).into_iter().try_for_each(|c| c.result.map(drop))
}

/// A [`Storage::filesystem_syncer`]: each call makes the whole filesystem durable.
pub type FsSyncer = Box<dyn FnMut() -> Result<()> + Send>;

/// Directory-level operations and file opening.
pub trait Storage: Send + Sync + Debug {
    fn open(&self, path: &Path, mode: OpenMode) -> Result<Arc<dyn IoFile>>;
    /// Opens a segment's `.log` file: O_DIRECT in direct mode, like [`Storage::open`] otherwise.
    fn open_log(&self, path: &Path, mode: OpenMode) -> Result<Arc<dyn IoFile>> {
        self.open(path, mode)
    }
    /// The mode this storage really runs in.
    fn mode(&self) -> IoMode {
        IoMode::Sync
    }
    /// Runs a batch of operations and returns every one, in order, with its result. io_uring
    /// backends submit the whole batch with one system call; the default runs them one by one.
    /// A failed operation with `link_next` cancels the next one (ECANCELED), as io_uring does.
    fn submit(&self, ops: Vec<IoOp>) -> Vec<IoCompletion> {
        submit_one_by_one(ops)
    }
    /// Submits batches of operations without waiting for them (the shard's write path: one
    /// io_uring_enter for all of them); finish each with [`Storage::claim_async`]. Within a batch the
    /// rules of [`Storage::submit`] hold. Backends without asynchronous submission run each batch
    /// at once (the default), and so may io_uring for a batch that does not fit the ring.
    fn submit_async(&self, batches: Vec<Vec<IoOp>>) -> Vec<AsyncIo> {
        batches.into_iter().map(|b| AsyncIo::Ready(self.submit(b))).collect()
    }
    /// The outcome of a batch from [`Storage::submit_async`] once it is done, or the batch back
    /// while it is in flight. With `wait`, blocks until it is done. The io_uring backends must be
    /// called on the thread that submitted it (elsewhere the batch comes back as it is). A batch
    /// this storage cannot account for (another backend's, or one its ring lost) is
    /// [`AsyncOutcome::Lost`]: its writes count as failed, never as done.
    fn claim_async(&self, io: AsyncIo, wait: bool) -> std::result::Result<AsyncOutcome, AsyncIo> {
        let _ = wait;
        Ok(claim_ready(io))
    }
    /// Collects the completions of finished asynchronous batches (the io_uring backends: no
    /// system call when none finished). Nothing to do for backends that run batches at once.
    fn poll_async(&self) {}
    /// Moves into `out` the [`AsyncIo::key`] of every asynchronous batch submitted on this
    /// thread that completed since the last call, each once (whether or not it was claimed
    /// since), and returns true; from the first call on the backend keeps that list. False
    /// when the backend cannot tell (the default): the caller then polls each batch it has in
    /// flight. It lets a caller with thousands of batches in flight visit only those that are
    /// done.
    fn take_finished_async(&self, out: &mut Vec<u64>) -> bool {
        let _ = out;
        false
    }
    /// True when asynchronous batches have completions waiting to be collected by
    /// [`Storage::poll_async`] or [`Storage::claim_async`] (the io_uring backends: a look at
    /// shared memory, no system call).
    fn completions_waiting(&self) -> bool {
        false
    }
    /// A file descriptor that becomes readable when an asynchronous batch of this thread may
    /// have completed (the io_uring backends: a duplicate of an eventfd registered with the
    /// thread's ring, the caller's to keep); `None` for backends that run batches at once.
    /// Reset it with [`Storage::clear_completion_fd`] before collecting completions.
    fn completion_fd(&self) -> Option<std::os::fd::OwnedFd> {
        None
    }
    /// Resets [`Storage::completion_fd`] (reads its counter), if there is one.
    fn clear_completion_fd(&self) {}
    /// Creates a directory and its parents (owner-only permissions where the backend supports it).
    fn create_dir_all(&self, path: &Path) -> Result<()>;
    /// Names of the entries in a directory (files and directories), unsorted.
    fn list_dir(&self, path: &Path) -> Result<Vec<String>>;
    fn rename(&self, from: &Path, to: &Path) -> Result<()>;
    fn remove_file(&self, path: &Path) -> Result<()>;
    /// Removes an empty directory ([`crate::Engine::delete_partition`]). The default refuses:
    /// a backend without it cannot delete partitions.
    fn remove_dir(&self, path: &Path) -> Result<()> {
        Err(crate::Error::io("rmdir", path, std::io::Error::from(std::io::ErrorKind::Unsupported)))
    }
    /// Takes the lock `kind` on `path` (see [`lock`]): `Ok(None)` when there is nothing to lock
    /// (a shared lock on a log directory without `.lock`). A lock someone else holds is
    /// [`crate::Error::Locked`], naming the holder where the kernel says.
    fn lock(&self, path: &Path, kind: lock::LockKind) -> Result<Option<lock::LockGuard>> {
        lock::lock_path(path, kind, select::DEFAULT_FILE_MODE)
    }
    /// Makes a directory's entries durable (creates, renames, unlinks inside it).
    fn sync_dir(&self, path: &Path) -> Result<()>;
    /// Makes every file of the filesystem holding the data directory `path` durable: its data
    /// and metadata, and the directories' entries (`syncfs(2)`). Every other file on that
    /// filesystem is written back too, other processes' included. One call of a
    /// [`Storage::filesystem_syncer`].
    fn sync_filesystem(&self, path: &Path) -> Result<()> {
        (self.filesystem_syncer(path)?)()
    }
    /// What [`Storage::sync_filesystem`] does, as a function to call again and again, for a
    /// data directory `dir` (it holds the engine's `.lock`). `dir/.lock` is opened once, here
    /// (read only, not following a link), and each call is a `syncfs(2)` on that descriptor and
    /// then an `fdatasync(2)` of it. The syncfs writes back every file and commits the journal;
    /// the fdatasync makes sure of a device cache flush, which XFS's syncfs skips when its log
    /// has nothing to commit (O_DIRECT writes over written blocks change no metadata), and which
    /// ext4 and XFS issue on any fdatasync. Linux (5.8 on) reports a writeback error of the
    /// filesystem through syncfs to every descriptor opened before it happened, whichever
    /// syncfs reported it first: one kept open reports every error from its opening on, where a
    /// descriptor opened anew could miss one that another process's syncfs already reported.
    fn filesystem_syncer(&self, dir: &Path) -> Result<FsSyncer> {
        use std::os::unix::fs::OpenOptionsExt;
        let path = dir.join(lock::LOCK_FILE);
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
            .open(&path)
            .map_err(|e| crate::Error::io("open", &path, e))?;
        Ok(Box::new(move || {
            nix::unistd::syncfs(&file).map_err(|e| crate::Error::io("syncfs", &path, e.into()))?;
            file.sync_data().map_err(|e| crate::Error::io("fdatasync", &path, e))
        }))
    }
    fn exists(&self, path: &Path) -> bool;
    fn is_dir(&self, path: &Path) -> bool;
    /// Reads a whole small file (checkpoints). `limit` bounds the size accepted.
    fn read_small_file(&self, path: &Path, limit: u64) -> Result<Vec<u8>> {
        let f = self.open(path, OpenMode::Read)?;
        let len = f.len()?;
        if len > limit {
            return Err(crate::Error::io(
                "read",
                path,
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("file is {len} bytes, more than the {limit} accepted"),
                ),
            ));
        }
        let mut buf = vec![0u8; len as usize];
        f.read_exact_at(&mut buf, 0)?;
        Ok(buf)
    }
    /// Replaces a small file atomically with Kafka's sequence: write `<name>.tmp`, fsync it,
    /// rename over the target, fsync the directory.
    fn write_file_atomic(&self, path: &Path, contents: &[u8]) -> Result<()> {
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".tmp");
        let tmp = std::path::PathBuf::from(tmp);
        let f = self.open(&tmp, OpenMode::CreateTruncate)?;
        f.write_all_at(contents, 0)?;
        f.sync_data()?;
        drop(f);
        self.rename(&tmp, path)?;
        if let Some(parent) = path.parent() {
            self.sync_dir(parent)?;
        }
        Ok(())
    }
}

/// The storage for `requested`, falling back to plain syscalls (with a one-line reason) where
/// io_uring is refused. See [`select::open_storage`].
pub fn storage_for_mode(requested: IoMode) -> select::OpenedStorage {
    select::open_storage(requested)
}

/// Runs a batch one operation at a time through each file's own methods, with io_uring's link
/// rule: a failed operation with `link_next` cancels the next one (ECANCELED). The default of
/// [`Storage::submit`], and the io_uring backends' fallback when a file has no descriptor or the
/// thread has no ring.
pub(crate) fn submit_one_by_one(ops: Vec<IoOp>) -> Vec<IoCompletion> {
    let mut out = Vec::with_capacity(ops.len());
    let mut cancel = false;
    for op in ops {
        let result = if cancel { Err(op.cancelled()) } else { op.run() };
        cancel = op.link_next && result.is_err();
        out.push(IoCompletion { op, result });
    }
    out
}

impl IoOp {
    /// Runs the operation through its file's own methods: bytes written, or 0 for an fdatasync.
    pub(crate) fn run(&self) -> Result<usize> {
        match &self.kind {
            IoOpKind::Write { buf, pos, dsync: false } => self.file.write_all_at(buf, *pos).map(|_| buf.len()),
            IoOpKind::Write { buf, pos, dsync: true } => self.file.write_all_at_dsync(buf, *pos).map(|_| buf.len()),
            IoOpKind::SyncData => self.file.sync_data().map(|_| 0),
        }
    }

    /// The error of an operation cancelled because the one linked before it failed
    /// (ECANCELED, as io_uring reports it).
    pub(crate) fn cancelled(&self) -> crate::Error {
        crate::Error::io("submit", self.file.path(), nix::errno::Errno::ECANCELED.into())
    }
}

/// A batch from [`Storage::submit_async`], claimed with [`Storage::claim_async`] of the same
/// storage.
#[derive(Debug)]
pub enum AsyncIo {
    /// Done already, with every operation and its result.
    Ready(Vec<IoCompletion>),
    /// In flight on this thread's io_uring: only this thread can complete it.
    Ring(RingTicket),
    /// In flight in a backend that keeps its own table of batches, under this id (the
    /// simulator, or a [`Storage`] of your own).
    Queued(u64),
}

impl AsyncIo {
    /// What [`Storage::take_finished_async`] names this batch by once it completes; `None`
    /// for a batch that is done already.
    pub fn key(&self) -> Option<u64> {
        match self {
            AsyncIo::Ready(_) => None,
            AsyncIo::Ring(t) => Some(u64::from(t.id())),
            AsyncIo::Queued(id) => Some(*id),
        }
    }
}

/// [`Storage::claim_async`] for a backend that runs every batch at once: a ready batch is done,
/// anything else is not this backend's to account for.
pub(crate) fn claim_ready(io: AsyncIo) -> AsyncOutcome {
    match io {
        AsyncIo::Ready(v) => AsyncOutcome::Done(v),
        AsyncIo::Ring(_) | AsyncIo::Queued(_) => AsyncOutcome::Lost,
    }
}

/// The claim on a batch in flight on the submitting thread's ring. Dropping it unclaimed (on
/// that thread) lets the ring forget the batch once it completes; its memory is held until then
/// either way.
#[derive(Debug)]
pub struct RingTicket {
    id: u32,
    thread: std::thread::ThreadId,
}

impl RingTicket {
    pub(crate) fn new(id: u32) -> RingTicket {
        RingTicket { id, thread: std::thread::current().id() }
    }

    pub(crate) fn id(&self) -> u32 {
        self.id
    }

    pub(crate) fn on_this_thread(&self) -> bool {
        std::thread::current().id() == self.thread
    }

    /// The ring gave the batch back: nothing is left to abandon.
    pub(crate) fn claimed(self) {
        std::mem::forget(self);
    }
}

impl Drop for RingTicket {
    fn drop(&mut self) {
        // On another thread the id means nothing (that thread's ring keeps the batch).
        if std::thread::current().id() == self.thread {
            uring::abandon_async(self.id);
        }
    }
}

/// What became of a batch from [`Storage::submit_async`] once claimed ([`Storage::claim_async`]).
#[derive(Debug)]
pub enum AsyncOutcome {
    /// Every operation of the batch, in order, with its result.
    Done(Vec<IoCompletion>),
    /// The submitting thread's ring could not give the batch back (the ring is unreachable, as
    /// during thread teardown, or no ring can be made): whether its operations ran, and how, is
    /// not known, so none of them may be counted as done.
    Lost,
}

impl AsyncOutcome {
    /// True when every operation ran and succeeded.
    pub fn all_ok(&self) -> bool {
        match self {
            AsyncOutcome::Done(done) => done.iter().all(|c| c.result.is_ok()),
            AsyncOutcome::Lost => false,
        }
    }
}

/// Sleeps until the doorbell rings, one of this thread's asynchronous batches completes, or
/// `timeout` passes: in io_uring_enter in the io_uring modes (a POLL_ADD on the eventfd armed in
/// the same ring as the writes), in poll(2) in sync mode (which has no asynchronous batches).
pub fn wait_doorbell_or_io(bell: &eventfd::EventFd, mode: IoMode, timeout: std::time::Duration) {
    if mode != IoMode::Sync && uring::wait_doorbell_or_io(bell.raw(), timeout) {
        return;
    }
    // No asynchronous batches on this thread (sync mode, or a kernel without timed waits):
    // the doorbell alone.
    wait_doorbell(bell, mode, Some(timeout));
}

/// Sleeps until the doorbell rings or `timeout` passes: in io_uring_enter (a read of the eventfd
/// on this thread's ring) in the io_uring modes, in poll(2) in sync mode.
pub(crate) fn wait_doorbell(bell: &eventfd::EventFd, mode: IoMode, timeout: Option<std::time::Duration>) -> u64 {
    if mode != IoMode::Sync {
        if let Ok(v) = uring::wait_eventfd(bell.raw(), timeout) {
            return v.unwrap_or(0);
        }
    }
    bell.wait_plain(timeout)
}

/// The storage [`crate::log::LogOptions::default`] uses: plain positioned reads and writes
/// ([`IoMode::Sync`]). For another mode, [`storage_for_mode`].
pub fn default_storage() -> Arc<dyn Storage> {
    Arc::new(std_backend::StdStorage::default())
}
