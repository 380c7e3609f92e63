//! A simulated disk for crash testing: [`SimStorage`] implements [`Storage`] and [`IoFile`]
//! entirely in memory, deterministically, and remembers what a power cut would keep.
//!
//! For every file it keeps the **volatile** content (what reads see, the page cache) and the
//! **durable** content (what a completed `sync_data` of that file made stable), plus the ordered
//! list of data operations (writes, truncates) issued since that sync. For every directory it keeps
//! volatile and durable entries plus the ordered operations since the last `sync_dir` of that
//! directory: creates, renames and unlinks become durable only through `sync_dir`, so a file
//! whose directory entry never became durable disappears at a crash, and a rename that was not
//! made durable reverts.
//!
//! [`SimStorage::crash`] builds the state a power cut could leave, drawn from a seeded
//! [`SimRng`]:
//! - per file: the durable content, then a prefix of the unsynced operations applied in order;
//!   the first operation not applied may be torn at 512- or 4096-byte granularity (a prefix or a
//!   random subset of its sectors lands);
//! - optionally the unsynced appended region reads back as zeros (ext4 can come back with the
//!   size extended and zeros in place of the data, see FACTS.md);
//! - per directory: the durable entries, then optionally a prefix of the unsynced entry operations
//!   (a journaling file system commits metadata in order, at times of its own choosing).
//!
//! Every operation that changes state counts as one I/O ([`SimStorage::io_count`]), so a harness
//! can stop the world after I/O number `k` ([`SimStorage::halt_after`]: later operations fail and
//! change nothing) and crash there. Faults can be injected: the n-th `sync_data`, write or
//! operation fails with EIO and changes nothing.
//!
//! Asynchronous batches ([`Storage::submit_async`]) run nothing at submission: their operations
//! run later and out of order, at polls or when claimed with `wait` (see the `flights` module), and a
//! crash finds those that have not run yet in flight: each of their writes lands whole, torn or
//! not at all ([`SimStorage::ops_in_flight`] says how many there are).
//!
//! Reads never count and never fail. Directory renames are not supported (nothing in a partition
//! directory needs them). Files may be sparse: bytes past the stored data and below the length
//! read as zeros, so a "huge" file costs no memory.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use nix::errno::Errno;

use super::{AsyncIo, AsyncOutcome, DirectAlignment, IoFile, IoMode, IoOp, IoOpKind, OpenMode, Storage};
use crate::error::{Error, Result};

/// A small deterministic generator (xorshift64*) for crash choices.
#[derive(Clone, Debug)]
pub struct SimRng(u64);

impl SimRng {
    pub fn new(seed: u64) -> SimRng {
        SimRng((seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xD1B5_4A32_D192_ED03) | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in `[0, n)`; 0 when `n` is 0.
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }
    /// True with probability `percent`/100.
    pub fn percent(&mut self, percent: u32) -> bool {
        self.below(100) < percent as u64
    }
    /// How many of `n` pending operations land: none, all, or any count in between, each a
    /// third of the time (the extremes are the interesting cases).
    fn prefix_len(&mut self, n: usize) -> usize {
        match self.below(3) {
            0 => 0,
            1 => n,
            _ => self.below(n as u64 + 1) as usize,
        }
    }
}

/// What a crash may do beyond keeping the durable state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CrashConfig {
    /// Apply a random prefix of each file's unsynced operations (else none of them).
    pub unsynced_data: bool,
    /// Chance (percent) that the first unapplied write lands torn (some of its sectors).
    pub torn_write_percent: u32,
    /// Chance (percent) that a file's region past its durable length reads back as zeros.
    pub zero_tail_percent: u32,
    /// Apply a random prefix of each directory's unsynced entry operations (else none).
    pub unsynced_dir_ops: bool,
}

impl Default for CrashConfig {
    fn default() -> Self {
        CrashConfig { unsynced_data: true, torn_write_percent: 50, zero_tail_percent: 25, unsynced_dir_ops: true }
    }
}

impl CrashConfig {
    /// Only what was made durable survives.
    pub const DURABLE_ONLY: CrashConfig =
        CrashConfig { unsynced_data: false, torn_write_percent: 0, zero_tail_percent: 0, unsynced_dir_ops: false };
}

/// Counts of operations since the storage was created (or since the crash that made it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SimCounters {
    /// State-changing operations that took effect or were failed by an injected fault.
    pub ops: u64,
    pub writes: u64,
    pub syncs: u64,
    pub dir_syncs: u64,
    pub set_lens: u64,
    pub creates: u64,
    pub renames: u64,
    pub removes: u64,
    pub reads: u64,
    /// Reads that asked for bytes past the end of the file (they return fewer bytes).
    pub reads_past_eof: u64,
    pub bytes_written: u64,
    /// Operations refused because the storage is halted.
    pub refused: u64,
}

/// An injected fault: the n-th (1-based, counted from this storage's creation) operation of a
/// kind fails with EIO and changes nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The n-th `sync_data` (a `sync_filesystem` counts as one).
    Sync(u64),
    /// The n-th write.
    Write(u64),
    /// The n-th state-changing operation of any kind.
    Op(u64),
    /// Every `sync_data` (and `sync_filesystem`) succeeds without making anything durable (a disk that lies about its
    /// cache): for checking that a harness notices lost acknowledged data.
    LyingSync,
}

/// File content: `data`, then zeros up to `len` (sparse files cost nothing).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Content {
    data: Vec<u8>,
    len: u64,
}

impl Content {
    fn write(&mut self, pos: u64, bytes: &[u8]) {
        let end = pos + bytes.len() as u64;
        if end as usize > self.data.len() {
            self.data.resize(end as usize, 0);
        }
        self.data[pos as usize..end as usize].copy_from_slice(bytes);
        self.len = self.len.max(end);
    }
    fn set_len(&mut self, len: u64) {
        if (len as usize) < self.data.len() {
            self.data.truncate(len as usize);
        }
        self.len = len;
    }
    fn zero_from(&mut self, from: u64) {
        if (from as usize) < self.data.len() {
            self.data.truncate(from as usize);
        }
    }
    fn read(&self, buf: &mut [u8], pos: u64) -> usize {
        if pos >= self.len {
            return 0;
        }
        let n = ((self.len - pos) as usize).min(buf.len());
        let stored = self.data.len().saturating_sub(pos as usize).min(n);
        if stored > 0 {
            buf[..stored].copy_from_slice(&self.data[pos as usize..pos as usize + stored]);
        }
        buf[stored..n].fill(0);
        n
    }
    fn bytes(&self) -> Vec<u8> {
        let mut v = self.data.clone();
        v.resize(self.len as usize, 0);
        v
    }
}

#[derive(Clone, Debug)]
enum DataOp {
    Write { pos: u64, bytes: Vec<u8> },
    SetLen(u64),
}

impl DataOp {
    fn apply(&self, c: &mut Content) {
        match self {
            DataOp::Write { pos, bytes } => c.write(*pos, bytes),
            DataOp::SetLen(len) => c.set_len(*len),
        }
    }
}

#[derive(Clone, Debug, Default)]
struct Inode {
    volatile: Content,
    durable: Content,
    /// Data operations since the last completed `sync_data`, in order.
    pending: Vec<DataOp>,
    mtime_ms: i64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Entry {
    File(usize),
    Dir,
}

#[derive(Clone, Debug)]
enum DirOp {
    Set(String, Entry),
    Remove(String),
    Rename(String, String),
}

impl DirOp {
    fn apply(&self, entries: &mut BTreeMap<String, Entry>) {
        match self {
            DirOp::Set(name, e) => {
                entries.insert(name.clone(), *e);
            }
            DirOp::Remove(name) => {
                entries.remove(name);
            }
            DirOp::Rename(from, to) => {
                if let Some(e) = entries.remove(from) {
                    entries.insert(to.clone(), e);
                }
            }
        }
    }
}

#[derive(Clone, Debug, Default)]
struct DirState {
    volatile: BTreeMap<String, Entry>,
    durable: BTreeMap<String, Entry>,
    /// Entry operations since the last `sync_dir`, in order.
    pending: Vec<DirOp>,
}

#[derive(Debug, Default)]
struct SimState {
    inodes: Vec<Inode>,
    /// Every directory that exists (volatile view), by normalised path. "/" always exists.
    dirs: BTreeMap<PathBuf, DirState>,
    counters: SimCounters,
    halt_after: Option<u64>,
    faults: Vec<Fault>,
    direct_alignment: Option<DirectAlignment>,
    now_ms: i64,
    /// Directory locks held, by normalised path: -1 exclusive, n > 0 shared by n holders. A crash
    /// starts a new state, so a crashed process's locks are gone, as a dead process's are.
    locks: Arc<Mutex<BTreeMap<PathBuf, i32>>>,
}

/// A simulated lock, released when dropped.
#[derive(Debug)]
struct SimLock {
    table: Arc<Mutex<BTreeMap<PathBuf, i32>>>,
    path: PathBuf,
}

impl Drop for SimLock {
    fn drop(&mut self) {
        let mut t = self.table.lock().unwrap_or_else(|p| p.into_inner());
        match t.get_mut(&self.path) {
            Some(n) if *n > 1 => *n -= 1,
            _ => {
                t.remove(&self.path);
            }
        }
    }
}

/// What an operation is, for counting and fault injection.
#[derive(Clone, Copy, PartialEq, Eq)]
enum OpKind {
    Write,
    Sync,
    DirSync,
    SetLen,
    Allocate,
    Create,
    Rename,
    Remove,
    Mkdir,
}

fn eio(what: &str) -> std::io::Error {
    std::io::Error::other(format!("{what} (simulated EIO)"))
}

impl SimState {
    /// Counts an operation, or refuses it (halted storage, injected fault).
    fn begin(&mut self, kind: OpKind, op: &'static str, path: &Path) -> Result<()> {
        if self.halt_after.is_some_and(|k| self.counters.ops >= k) {
            self.counters.refused += 1;
            return Err(Error::io(op, path, eio("storage halted: simulated power loss")));
        }
        self.counters.ops += 1;
        let ops = self.counters.ops;
        let nth = match kind {
            OpKind::Write => {
                self.counters.writes += 1;
                Some(Fault::Write(self.counters.writes))
            }
            OpKind::Sync => {
                self.counters.syncs += 1;
                Some(Fault::Sync(self.counters.syncs))
            }
            OpKind::DirSync => {
                self.counters.dir_syncs += 1;
                None
            }
            OpKind::SetLen => {
                self.counters.set_lens += 1;
                None
            }
            OpKind::Create | OpKind::Mkdir => {
                self.counters.creates += 1;
                None
            }
            OpKind::Rename => {
                self.counters.renames += 1;
                None
            }
            OpKind::Remove => {
                self.counters.removes += 1;
                None
            }
            OpKind::Allocate => None,
        };
        if self.faults.contains(&Fault::Op(ops)) || nth.is_some_and(|f| self.faults.contains(&f)) {
            return Err(Error::io(op, path, Errno::EIO.into()));
        }
        Ok(())
    }

    fn dir(&self, path: &Path) -> Option<&DirState> {
        self.dirs.get(path)
    }

    /// The entry at `path` (volatile view).
    fn entry(&self, path: &Path) -> Option<Entry> {
        if self.dirs.contains_key(path) {
            return Some(Entry::Dir);
        }
        let (parent, name) = split(path)?;
        self.dir(&parent)?.volatile.get(&name).copied()
    }

    fn dir_op(&mut self, dir: &Path, op: DirOp) {
        let d = self.dirs.get_mut(dir).expect("directory checked by the caller");
        op.apply(&mut d.volatile);
        d.pending.push(op);
    }

    fn data_op(&mut self, ino: usize, op: DataOp) {
        let now = self.now_ms;
        let i = &mut self.inodes[ino];
        op.apply(&mut i.volatile);
        i.pending.push(op);
        i.mtime_ms = now;
    }

    fn new_inode(&mut self) -> usize {
        let now = self.now_ms;
        self.inodes.push(Inode { mtime_ms: now, ..Inode::default() });
        self.inodes.len() - 1
    }
}

/// Normalises a path: absolute (a relative path is taken from "/"), `.` and `..` resolved, no
/// trailing separator.
fn norm(p: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in p.components() {
        match c {
            Component::Normal(s) => out.push(s),
            Component::ParentDir => {
                out.pop();
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

/// `(parent, name)` of a normalised path; `None` for "/".
fn split(p: &Path) -> Option<(PathBuf, String)> {
    let parent = p.parent()?.to_path_buf();
    let name = p.file_name()?.to_string_lossy().into_owned();
    Some((parent, name))
}

fn not_found(op: &'static str, path: &Path) -> Error {
    Error::io(op, path, std::io::Error::from(std::io::ErrorKind::NotFound))
}

/// Holds calls of one kind until a test lets them through: how many more may run (`None`: no
/// limit) and how many wait.
#[derive(Debug, Default)]
struct GateState {
    permits: Option<u64>,
    waiting: usize,
}

#[derive(Debug, Default)]
struct Gate(Mutex<GateState>, std::sync::Condvar);

impl Gate {
    fn state(&self) -> MutexGuard<'_, GateState> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn allow(&self, permits: Option<u64>) {
        self.state().permits = permits;
        self.1.notify_all();
    }

    /// Waits for a permit and takes it.
    fn pass(&self) {
        let mut g = self.state();
        g.waiting += 1;
        while g.permits == Some(0) {
            g = self.1.wait(g).unwrap_or_else(|p| p.into_inner());
        }
        g.waiting -= 1;
        if let Some(n) = g.permits.as_mut() {
            *n -= 1;
        }
    }
}

/// The simulated disk. Clones share the same state (hand one to a `Log` as its storage and keep
/// one to crash it).
#[derive(Clone)]
pub struct SimStorage {
    state: Arc<Mutex<SimState>>,
    /// Asynchronous batches not yet claimed ([`flights`]). When both are held, `flights` is
    /// taken first (an operation runs under it and locks `state`); `state` is never held while
    /// `flights` is taken.
    flights: Arc<Mutex<flights::Flights>>,
    /// The syncfs calls through [`Storage::filesystem_syncer`] that may run
    /// ([`SimStorage::allow_syncfs`]).
    syncfs_gate: Arc<Gate>,
    /// The renames onto files of one name that may run ([`SimStorage::allow_renames_to`]).
    rename_gate: Arc<Gate>,
    rename_gate_name: Arc<Mutex<String>>,
}

impl fmt::Debug for SimStorage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.lock();
        f.debug_struct("SimStorage").field("counters", &s.counters).field("halt_after", &s.halt_after).finish()
    }
}

impl Default for SimStorage {
    fn default() -> Self {
        SimStorage::new()
    }
}

impl SimStorage {
    /// An empty disk holding only "/".
    pub fn new() -> SimStorage {
        let mut st = SimState::default();
        st.dirs.insert(PathBuf::from("/"), DirState::default());
        SimStorage::from_state(st)
    }

    /// A disk whose `open_log` files behave as O_DIRECT files with this alignment: writes must
    /// start and end on multiples of `align` (else EINVAL), as on ext4; its filesystem's block
    /// is `align` too.
    pub fn with_direct_alignment(align: usize) -> SimStorage {
        SimStorage::with_alignment(DirectAlignment::uniform(align))
    }

    /// A disk whose `open_log` files behave as O_DIRECT files with alignment `a`.
    pub fn with_alignment(a: DirectAlignment) -> SimStorage {
        let s = SimStorage::new();
        s.lock().direct_alignment = Some(a);
        s
    }

    fn from_state(state: SimState) -> SimStorage {
        SimStorage {
            state: Arc::new(Mutex::new(state)),
            flights: Arc::default(),
            syncfs_gate: Arc::default(),
            rename_gate: Arc::default(),
            rename_gate_name: Arc::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, SimState> {
        // The state is consistent between statements; a panic elsewhere must not hide it.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn flights(&self) -> MutexGuard<'_, flights::Flights> {
        self.flights.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How asynchronous batches complete: at each poll every operation whose turn has come runs
    /// with `percent` chance (100: all at the first poll), in an order drawn from `seed`. The
    /// default is 50 % with a fixed seed.
    pub fn set_async_completions(&self, seed: u64, percent: u32) {
        self.flights().set_completions(seed, percent);
    }

    /// Lets `permits` more syncfs calls through [`Storage::filesystem_syncer`] run, each later
    /// one waiting until it is let through (`None`: no limit, the default). A test holds a
    /// shard's group commit in flight this way.
    pub fn allow_syncfs(&self, permits: Option<u64>) {
        self.syncfs_gate.allow(permits);
    }

    /// How many syncfs calls wait for [`SimStorage::allow_syncfs`] now.
    pub fn syncfs_waiting(&self) -> usize {
        self.syncfs_gate.state().waiting
    }

    /// Lets `permits` more renames onto files named `name` run, each later one waiting until it
    /// is let through (`None`: no limit, the default; one name at a time). A small file
    /// replaced atomically (`Storage::write_file_atomic`) ends with a rename: a test holds such
    /// a write this way.
    pub fn allow_renames_to(&self, name: &str, permits: Option<u64>) {
        *self.rename_gate_name.lock().unwrap_or_else(|p| p.into_inner()) = name.to_string();
        self.rename_gate.allow(permits);
    }

    /// How many renames wait for [`SimStorage::allow_renames_to`] now.
    pub fn renames_waiting(&self) -> usize {
        self.rename_gate.state().waiting
    }

    /// Asynchronous batches run whole, in order, at submission, as a backend without
    /// asynchronous I/O runs them (until [`SimStorage::set_async_completions`]).
    pub fn set_async_at_once(&self) {
        self.flights().set_at_once();
    }

    /// Operations of asynchronous batches that have not run yet (in flight).
    pub fn ops_in_flight(&self) -> usize {
        self.flights().not_run()
    }

    /// State-changing operations so far (the `k` of "crash after I/O number k").
    pub fn io_count(&self) -> u64 {
        self.lock().counters.ops
    }

    pub fn counters(&self) -> SimCounters {
        self.lock().counters
    }

    /// After `k` operations in total, every further state-changing operation fails (EIO) and
    /// changes nothing: the moment of the power cut. `None` lifts it.
    pub fn halt_after(&self, k: Option<u64>) {
        self.lock().halt_after = k;
    }

    /// True when the next state-changing operation would be refused ([`SimStorage::halt_after`]).
    fn power_cut(&self) -> bool {
        let s = self.lock();
        s.halt_after.is_some_and(|k| s.counters.ops >= k)
    }

    /// True once an operation has been refused because of [`SimStorage::halt_after`].
    pub fn halted(&self) -> bool {
        self.lock().counters.refused > 0
    }

    /// Adds an injected fault.
    pub fn inject(&self, fault: Fault) {
        self.lock().faults.push(fault);
    }

    /// The modification time given to files written from now on.
    pub fn set_now_ms(&self, now_ms: i64) {
        self.lock().now_ms = now_ms;
    }

    /// The state a power cut now could leave, with the default [`CrashConfig`].
    pub fn crash(&self, rng: &mut SimRng) -> SimStorage {
        self.crash_with(rng, &CrashConfig::default())
    }

    fn open_file(&self, path: &Path, mode: OpenMode, log: bool) -> Result<Arc<dyn IoFile>> {
        let path = norm(path);
        let mut s = self.lock();
        let align = if log { s.direct_alignment } else { None };
        let existing = match s.entry(&path) {
            Some(Entry::Dir) => {
                return Err(Error::io("open", &path, Errno::EISDIR.into()));
            }
            Some(Entry::File(ino)) => Some(ino),
            None => None,
        };
        let ino = match (mode, existing) {
            (OpenMode::Read | OpenMode::ReadWrite, None) => return Err(not_found("open", &path)),
            (OpenMode::Read | OpenMode::ReadWrite, Some(ino)) => ino,
            (OpenMode::CreateNew, Some(_)) => {
                return Err(Error::io("open", &path, std::io::Error::from(std::io::ErrorKind::AlreadyExists)))
            }
            (OpenMode::CreateTruncate, Some(ino)) => {
                s.begin(OpKind::SetLen, "open", &path)?;
                s.data_op(ino, DataOp::SetLen(0));
                ino
            }
            (OpenMode::CreateNew | OpenMode::CreateTruncate, None) => {
                let (parent, name) = split(&path).ok_or_else(|| not_found("open", &path))?;
                if !s.dirs.contains_key(&parent) {
                    return Err(not_found("open", &path));
                }
                s.begin(OpKind::Create, "open", &path)?;
                let ino = s.new_inode();
                s.dir_op(&parent, DirOp::Set(name, Entry::File(ino)));
                ino
            }
        };
        Ok(Arc::new(SimFile { state: self.state.clone(), ino, path, writable: mode != OpenMode::Read, align }))
    }
}

impl Storage for SimStorage {
    fn open(&self, path: &Path, mode: OpenMode) -> Result<Arc<dyn IoFile>> {
        self.open_file(path, mode, false)
    }
    fn open_log(&self, path: &Path, mode: OpenMode) -> Result<Arc<dyn IoFile>> {
        self.open_file(path, mode, true)
    }
    fn mode(&self) -> IoMode {
        IoMode::Sync
    }
    /// Nothing runs at submission: each operation runs later, at a poll or when its batch is claimed (module docs).
    fn submit_async(&self, batches: Vec<Vec<IoOp>>) -> Vec<AsyncIo> {
        let inos: Vec<Vec<Option<usize>>> = {
            let s = self.lock();
            let ino = |op: &IoOp| match (&op.kind, s.entry(&norm(op.file.path()))) {
                (IoOpKind::Write { .. }, Some(Entry::File(ino))) => Some(ino),
                _ => None,
            };
            batches.iter().map(|ops| ops.iter().map(ino).collect()).collect()
        };
        let halted = self.power_cut();
        let mut f = self.flights();
        batches.into_iter().zip(inos).map(|(ops, inos)| f.submit(ops, inos, halted)).collect()
    }
    fn claim_async(&self, io: AsyncIo, wait: bool) -> std::result::Result<AsyncOutcome, AsyncIo> {
        match io {
            AsyncIo::Queued(id) => self.flights().claim(id, wait, &|| self.power_cut()),
            other => Ok(crate::io::claim_ready(other)),
        }
    }
    fn poll_async(&self) {
        self.flights().step(&|| self.power_cut());
    }
    /// True while any batch is in flight: its operations run at polls, so a caller that waits
    /// for completions must poll.
    fn completions_waiting(&self) -> bool {
        self.flights().any()
    }
    fn lock(&self, path: &Path, kind: crate::io::lock::LockKind) -> Result<Option<crate::io::lock::LockGuard>> {
        use crate::io::lock::{LockGuard, LockKind, LOCK_FILE};
        let (key, shared) = match kind {
            LockKind::LogDir => (norm(&path.join(LOCK_FILE)), false),
            LockKind::LogDirShared => {
                let key = norm(&path.join(LOCK_FILE));
                if !self.exists(&key) {
                    return Ok(None);
                }
                (key, true)
            }
            LockKind::Partition => (norm(path), false),
        };
        if kind == LockKind::LogDir && !self.exists(&key) {
            self.open(&key, OpenMode::CreateTruncate)?;
        }
        let table = self.lock().locks.clone();
        let mut t = table.lock().unwrap_or_else(|p| p.into_inner());
        match (t.get(&key).copied(), shared) {
            (None, false) => {
                t.insert(key.clone(), -1);
            }
            (None, true) => {
                t.insert(key.clone(), 1);
            }
            (Some(n), true) if n > 0 => {
                t.insert(key.clone(), n + 1);
            }
            _ => return Err(Error::Locked { path: key, holder: Some(std::process::id()) }),
        }
        drop(t);
        Ok(Some(LockGuard::new(path, kind, SimLock { table, path: key })))
    }
    fn create_dir_all(&self, path: &Path) -> Result<()> {
        let path = norm(path);
        let mut s = self.lock();
        let mut cur = PathBuf::from("/");
        for c in path.components() {
            let Component::Normal(name) = c else { continue };
            let child = cur.join(name);
            match s.entry(&child) {
                Some(Entry::Dir) => {}
                Some(Entry::File(_)) => {
                    return Err(Error::io("mkdir", &child, std::io::Error::from(std::io::ErrorKind::AlreadyExists)))
                }
                None => {
                    s.begin(OpKind::Mkdir, "mkdir", &child)?;
                    s.dirs.insert(child.clone(), DirState::default());
                    s.dir_op(&cur, DirOp::Set(name.to_string_lossy().into_owned(), Entry::Dir));
                }
            }
            cur = child;
        }
        Ok(())
    }
    fn list_dir(&self, path: &Path) -> Result<Vec<String>> {
        let path = norm(path);
        let s = self.lock();
        let d = s.dir(&path).ok_or_else(|| not_found("readdir", &path))?;
        Ok(d.volatile.keys().cloned().collect())
    }
    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        let gated = to
            .file_name()
            .is_some_and(|n| *n.to_string_lossy() == *self.rename_gate_name.lock().unwrap_or_else(|p| p.into_inner()));
        if gated {
            self.rename_gate.pass();
        }
        let (from, to) = (norm(from), norm(to));
        let mut s = self.lock();
        let ino = match s.entry(&from) {
            Some(Entry::File(ino)) => ino,
            Some(Entry::Dir) => {
                return Err(Error::io(
                    "rename",
                    &from,
                    std::io::Error::new(std::io::ErrorKind::Unsupported, "directory renames are not simulated"),
                ))
            }
            None => return Err(not_found("rename", &from)),
        };
        let (fp, fname) = split(&from).ok_or_else(|| not_found("rename", &from))?;
        let (tp, tname) = split(&to).ok_or_else(|| not_found("rename", &to))?;
        if !s.dirs.contains_key(&tp) || s.entry(&to) == Some(Entry::Dir) {
            return Err(not_found("rename", &to));
        }
        s.begin(OpKind::Rename, "rename", &from)?;
        if fp == tp {
            s.dir_op(&fp, DirOp::Rename(fname, tname));
        } else {
            s.dir_op(&tp, DirOp::Set(tname, Entry::File(ino)));
            s.dir_op(&fp, DirOp::Remove(fname));
        }
        Ok(())
    }
    fn remove_file(&self, path: &Path) -> Result<()> {
        let path = norm(path);
        let mut s = self.lock();
        match s.entry(&path) {
            Some(Entry::File(_)) => {}
            Some(Entry::Dir) => return Err(Error::io("unlink", &path, Errno::EISDIR.into())),
            None => return Err(not_found("unlink", &path)),
        }
        let (parent, name) = split(&path).ok_or_else(|| not_found("unlink", &path))?;
        s.begin(OpKind::Remove, "unlink", &path)?;
        s.dir_op(&parent, DirOp::Remove(name));
        Ok(())
    }
    fn sync_dir(&self, path: &Path) -> Result<()> {
        let path = norm(path);
        let mut s = self.lock();
        if !s.dirs.contains_key(&path) {
            return Err(not_found("open", &path));
        }
        s.begin(OpKind::DirSync, "fsync", &path)?;
        let d = s.dirs.get_mut(&path).expect("checked");
        d.durable = d.volatile.clone();
        d.pending.clear();
        Ok(())
    }
    /// Every file's data and every directory's entries become durable, as a `sync_data` of each
    /// file and a `sync_dir` of each directory would make them; one operation, counted (and
    /// failed by [`Fault::Sync`], and a no-op under [`Fault::LyingSync`]) as a `sync_data`.
    fn sync_filesystem(&self, path: &Path) -> Result<()> {
        let path = norm(path);
        let mut s = self.lock();
        if s.entry(&path).is_none() {
            return Err(not_found("open", &path));
        }
        s.begin(OpKind::Sync, "syncfs", &path)?;
        if s.faults.contains(&Fault::LyingSync) {
            return Ok(());
        }
        for i in &mut s.inodes {
            i.durable = i.volatile.clone();
            i.pending.clear();
        }
        for d in s.dirs.values_mut() {
            d.durable = d.volatile.clone();
            d.pending.clear();
        }
        Ok(())
    }
    fn filesystem_syncer(&self, path: &Path) -> Result<super::FsSyncer> {
        let (sim, path) = (self.clone(), norm(path));
        Ok(Box::new(move || {
            sim.syncfs_gate.pass();
            sim.sync_filesystem(&path)
        }))
    }
    fn exists(&self, path: &Path) -> bool {
        self.lock().entry(&norm(path)).is_some()
    }
    fn is_dir(&self, path: &Path) -> bool {
        self.lock().entry(&norm(path)) == Some(Entry::Dir)
    }
}

mod crash;
mod file;
pub use file::SimFile;
mod flights;
mod setup;
#[cfg(test)]
mod tests;
