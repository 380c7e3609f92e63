//! Per-thread pools of aligned write buffers, registered with the thread's io_uring as fixed
//! buffers.
//!
//! A `Pool` owns its memory for its whole life: 32 MiB anonymous mappings ("slabs", aligned to
//! 2 MiB and advised for transparent huge pages), each cut into `CHUNK_BYTES` chunks. It hands
//! out a chunk as a `Chunk`, which gives the slot back when dropped; a slot is never handed out
//! twice while its `Chunk` lives, and a slab is unmapped only when the pool itself goes, which
//! happens after the last `Chunk` and the last ring that registered it have gone (each holds the
//! pool). So memory the kernel may read through a registered buffer is never freed or reused
//! under it. Chunks are numbered in the order the pool first hands them out, and a freed chunk is
//! reused before any new one, so the numbers in use stay low.
//!
//! Registration is the ring's business (`super::uring`): the first io_uring submission on a
//! thread reserves a sparse table of `MAX_REGISTERED_CHUNKS` buffers on that thread's ring
//! (IORING_REGISTER_BUFFERS2 with IORING_RSRC_REGISTER_SPARSE) and puts chunk `i` at index `i`
//! (IORING_REGISTER_BUFFERS_UPDATE) once the pool has handed it out, so only memory in use is
//! pinned. A write from pool memory goes out as WRITE_FIXED with its chunk's index when the
//! submitting ring has that chunk registered, and as a plain WRITE from the same memory
//! otherwise: on another thread's ring, past the table, when the kernel or RLIMIT_MEMLOCK refused
//! the registration, or after [`set_buffer_registration`]`(false)`. Sync mode never registers
//! anything.
//! `thread_pool_stats` says which happened on this thread.
//!
//! The segment tail (`crate::segment::TailFile`) keeps the active segment's last bytes in a
//! chain of chunks, each held as a `ChunkRef`, and writes straight from them
//! (`ChunkRef::lend`): no copy and no allocation per write. It goes on appending past the bytes
//! a write in flight has borrowed, in the same chunk.
#![allow(unsafe_code)]

use std::alloc::Layout;
use std::cell::{Cell, RefCell};
use std::num::NonZeroUsize;
use std::ops::Deref;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use nix::sys::mman::{madvise, mmap_anonymous, munmap, MapFlags, MmapAdvise, ProtFlags};

use super::AlignedBuf;

/// Bytes of one chunk: the unit a segment tail grows and shrinks by, and the most one write entry
/// covers. A multiple of every O_DIRECT block size.
pub const CHUNK_BYTES: usize = 256 * 1024;
/// Bytes of one slab: one mapping (so 10,000 partitions' tails need a few dozen maps, not
/// thousands). Only the pages of chunks handed out are ever touched or pinned.
pub(crate) const SLAB_BYTES: usize = 32 * 1024 * 1024;
/// Chunks per slab.
pub(crate) const CHUNKS_PER_SLAB: usize = SLAB_BYTES / CHUNK_BYTES;
/// Size of each ring's sparse registered-buffer table: chunks `0..MAX_REGISTERED_CHUNKS` (2 GiB)
/// can be registered; chunks numbered past it are written from unregistered.
pub(crate) const MAX_REGISTERED_CHUNKS: u32 = 8192;

/// Whether rings register pool memory (see [`set_buffer_registration`]).
static REGISTRATION_ON: AtomicBool = AtomicBool::new(true);

/// Whether rings made from now on register pool memory (on by default): `false` keeps it
/// unregistered, its writes plain WRITEs instead of WRITE_FIXED, for comparing the two (the
/// bench's `SEGLOG_FIXED_BUFFERS=0`). Process-wide; rings that registered already keep it.
pub fn set_buffer_registration(on: bool) {
    REGISTRATION_ON.store(on, Ordering::Relaxed);
}

static NEXT_POOL_ID: AtomicU64 = AtomicU64::new(1);

/// The shared part of a pool: its slabs and its free slots.
pub(crate) struct PoolInner {
    id: u64,
    state: Mutex<PoolState>,
}

struct PoolState {
    /// Base address of each slab (`SLAB_BYTES` mapped, read-write).
    slabs: Vec<NonNull<u8>>,
    /// Free chunk numbers (slab * CHUNKS_PER_SLAB + k) below `handed`, taken from the end.
    free: Vec<u32>,
    /// Chunks `0..handed` have been handed out at least once; the next new one is `handed`.
    handed: u32,
    in_use: usize,
}

// SAFETY: the slabs are anonymous mappings owned by the pool; their bytes are only reached
// through `Chunk`s, each the sole owner of its slot (see `Chunk`), and the bookkeeping is behind
// the mutex. Nothing in the pool is tied to the thread that made it.
unsafe impl Send for PoolInner {}
// SAFETY: as above: shared access only locks the mutex or reads the immutable id.
unsafe impl Sync for PoolInner {}

impl PoolInner {
    fn lock(&self) -> MutexGuard<'_, PoolState> {
        // The state is consistent between statements; a panic elsewhere cannot break it.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn release(&self, chunk: u32) {
        let mut s = self.lock();
        debug_assert!(!s.free.contains(&chunk), "chunk {chunk} released twice");
        s.free.push(chunk);
        s.in_use -= 1;
    }
}

impl Drop for PoolInner {
    fn drop(&mut self) {
        let s = self.state.get_mut().unwrap_or_else(|p| p.into_inner());
        for base in s.slabs.drain(..) {
            // SAFETY: `base` is a SLAB_BYTES mapping made by `map_slab` and unmapped once, here.
            // The pool is being dropped, so no Chunk (each holds the pool) and no ring
            // registration (each holds the pool) refers to it any more.
            let _ = unsafe { munmap(base.cast(), SLAB_BYTES) };
        }
    }
}

impl std::fmt::Debug for PoolInner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.lock();
        f.debug_struct("Pool").field("id", &self.id).field("slabs", &s.slabs.len()).field("in_use", &s.in_use).finish()
    }
}

/// Maps one slab: SLAB_BYTES of zeroed memory aligned to SLAB_BYTES (so transparent huge pages
/// can back it with one page), advised MADV_HUGEPAGE. Aborts like an allocator when the kernel
/// has no memory or mappings left.
fn map_slab() -> NonNull<u8> {
    let len = 2 * SLAB_BYTES;
    // SAFETY: an anonymous private mapping at an address of the kernel's choice touches no
    // existing memory.
    let mapped = unsafe {
        mmap_anonymous(
            None,
            NonZeroUsize::new(len).expect("2 * SLAB_BYTES > 0"),
            ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
            MapFlags::MAP_PRIVATE,
        )
    };
    let Ok(p) = mapped.map(NonNull::cast::<u8>) else {
        std::alloc::handle_alloc_error(Layout::from_size_align(SLAB_BYTES, SLAB_BYTES).expect("valid layout"));
    };
    let addr = p.as_ptr() as usize;
    let head = addr.next_multiple_of(SLAB_BYTES) - addr;
    let tail = len - head - SLAB_BYTES;
    let slab = NonNull::new(p.as_ptr().wrapping_add(head)).expect("inside the mapping, so never address 0");
    if head > 0 {
        // SAFETY: [p, slab) is the unaligned head of the mapping just made, used by nobody.
        let _ = unsafe { munmap(p.cast(), head) };
    }
    if tail > 0 {
        // SAFETY: the part past the aligned slab, also just mapped and unused (head + SLAB_BYTES
        // + tail is the mapping's length, so `slab + SLAB_BYTES` is still inside it).
        let _ = unsafe { munmap(slab.add(SLAB_BYTES).cast(), tail) };
    }
    // SAFETY: advice on our own fresh mapping that changes no contents; failure (no THP) is
    // harmless and ignored.
    let _ = unsafe { madvise(slab.cast(), SLAB_BYTES, MmapAdvise::MADV_HUGEPAGE) };
    slab
}

/// A pool of [`CHUNK_BYTES`] aligned chunks. Cloning gives another handle to the same pool.
#[derive(Clone, Debug)]
pub(crate) struct Pool {
    inner: Arc<PoolInner>,
}

impl Default for Pool {
    fn default() -> Self {
        Pool::new()
    }
}

impl Pool {
    /// An empty pool: slabs are mapped as chunks are needed.
    pub(crate) fn new() -> Pool {
        Pool {
            inner: Arc::new(PoolInner {
                id: NEXT_POOL_ID.fetch_add(1, Ordering::Relaxed),
                state: Mutex::new(PoolState { slabs: Vec::new(), free: Vec::new(), handed: 0, in_use: 0 }),
            }),
        }
    }

    /// This pool's identity (rings record which pool they registered).
    pub(crate) fn id(&self) -> u64 {
        self.inner.id
    }

    /// A free chunk: one given back before if any, else the next new one (mapping a new slab
    /// when the last is used up). Its bytes are whatever the previous holder left (zero in a new
    /// chunk): callers zero what they write and did not fill.
    pub(crate) fn alloc(&self) -> Chunk {
        let mut s = self.inner.lock();
        let index = match s.free.pop() {
            Some(i) => i,
            None => {
                let i = s.handed;
                if i as usize == s.slabs.len() * CHUNKS_PER_SLAB {
                    s.slabs.push(map_slab());
                }
                s.handed += 1;
                i
            }
        };
        s.in_use += 1;
        let slab = s.slabs[index as usize / CHUNKS_PER_SLAB];
        let off = (index as usize % CHUNKS_PER_SLAB) * CHUNK_BYTES;
        // SAFETY: `off + CHUNK_BYTES <= SLAB_BYTES`, so the pointer stays inside the slab.
        let ptr = unsafe { NonNull::new_unchecked(slab.as_ptr().add(off)) };
        drop(s);
        Chunk { pool: self.inner.clone(), index, ptr }
    }

    /// Slabs mapped so far (they are never unmapped while the pool lives).
    pub(crate) fn slab_count(&self) -> usize {
        self.inner.lock().slabs.len()
    }

    /// Chunks handed out and not yet given back.
    pub(crate) fn chunks_in_use(&self) -> usize {
        self.inner.lock().in_use
    }

    /// How many chunks have ever been handed out: chunks `0..n` exist.
    pub(crate) fn chunks_handed_out(&self) -> u32 {
        self.inner.lock().handed
    }

    /// Chunk `i`'s memory, for registration: `None` unless it has been handed out.
    pub(crate) fn chunk_iovec(&self, i: u32) -> Option<libc::iovec> {
        let s = self.inner.lock();
        if i >= s.handed {
            return None;
        }
        let base = s.slabs[i as usize / CHUNKS_PER_SLAB];
        let off = (i as usize % CHUNKS_PER_SLAB) * CHUNK_BYTES;
        // libc's iovec, not nix's IoSlice: io_uring's register_buffers_update takes this type.
        Some(libc::iovec { iov_base: base.as_ptr().wrapping_add(off).cast(), iov_len: CHUNK_BYTES })
    }
}

/// One chunk of a pool: [`CHUNK_BYTES`] bytes at a 4096-aligned (in fact 256 KiB-aligned)
/// address, owned exclusively until dropped, when the slot goes back to the pool.
pub(crate) struct Chunk {
    pool: Arc<PoolInner>,
    index: u32,
    ptr: NonNull<u8>,
}

// SAFETY: a Chunk is the only owner of its slot's bytes (the pool hands a slot to one Chunk at a
// time and takes it back only in Chunk::drop), like a Box<[u8]>; the pool it holds is Send+Sync.
unsafe impl Send for Chunk {}
// SAFETY: `&Chunk` only reads bytes (`range`); writes need `&mut Chunk`, or go through the
// chunk's one `ChunkRef`, which writes only past every range it lent (`ChunkRef::writable`).
unsafe impl Sync for Chunk {}

/// Panics unless `len` bytes from `off` lie inside a chunk.
fn check_range(off: usize, len: usize) {
    assert!(off.checked_add(len).is_some_and(|e| e <= CHUNK_BYTES), "range {off}+{len} outside the chunk");
}

impl Chunk {
    #[cfg(test)]
    /// All [`CHUNK_BYTES`] bytes.
    pub(crate) fn bytes(&self) -> &[u8] {
        self.range(0, CHUNK_BYTES)
    }

    /// `len` bytes from `off`.
    fn range(&self, off: usize, len: usize) -> &[u8] {
        check_range(off, len);
        // SAFETY: the slot is CHUNK_BYTES of mapped, initialised (zero-filled at mapping, written
        // only through slices like these since) memory inside a slab the held pool keeps mapped,
        // and the range lies in it. Nothing writes the range while the slice lives: a chunk is
        // written through `&mut Chunk`, which this borrow excludes, or through its `ChunkRef`
        // past every range lent, which covers each write buffer's own (the only readers besides
        // the `ChunkRef`, whose reads borrow it and so exclude its writes).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().add(off), len) }
    }

    /// All [`CHUNK_BYTES`] bytes, writable.
    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `range`, and `&mut self` makes the access exclusive (called only on a
        // chunk no `ChunkRef` shares: one just allocated, or owned outright).
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), CHUNK_BYTES) }
    }

    #[cfg(test)]
    /// The slab holding this chunk.
    pub(crate) fn slab(&self) -> u32 {
        self.index / CHUNKS_PER_SLAB as u32
    }

    /// The chunk's number in its pool (and its registered-buffer index).
    pub(crate) fn index(&self) -> u32 {
        self.index
    }

    /// The pool it came from.
    pub(crate) fn pool_id(&self) -> u64 {
        self.pool.id
    }

    #[cfg(test)]
    pub(crate) fn as_ptr(&self) -> *const u8 {
        self.ptr.as_ptr()
    }
}

impl Drop for Chunk {
    fn drop(&mut self) {
        self.pool.release(self.index);
    }
}

impl std::fmt::Debug for Chunk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Chunk").field("pool", &self.pool.id).field("index", &self.index).finish()
    }
}

/// A chunk as its one writer (a segment tail) holds it: it lends ranges of the bytes to writes
/// ([`ChunkRef::lend`]) and, while those are in flight, goes on writing in the same chunk past
/// every range lent ([`ChunkRef::writable`]). Not `Clone`: there is one writer per chunk.
#[derive(Debug)]
pub(crate) struct ChunkRef {
    chunk: Arc<Chunk>,
    /// The bytes `[0, lent)` may be read by the write buffers lent since the chunk was last
    /// held alone.
    lent: usize,
}

impl ChunkRef {
    pub(crate) fn new(chunk: Chunk) -> ChunkRef {
        ChunkRef { chunk: Arc::new(chunk), lent: 0 }
    }

    /// `len` bytes from `off`.
    pub(crate) fn bytes(&self, off: usize, len: usize) -> &[u8] {
        self.chunk.range(off, len)
    }

    /// A write buffer of `len` bytes from `off`. Until it is dropped, those bytes and every one
    /// before them in the chunk stay as they are ([`ChunkRef::writable`]).
    pub(crate) fn lend(&mut self, off: usize, len: usize) -> WriteBuf {
        let buf = WriteBuf::pooled(self.chunk.clone(), off, len);
        self.lent = self.lent.max(off + len);
        buf
    }

    /// Whether bytes from `off` on may be written: no write buffer holds the chunk, or none was
    /// lent bytes at or past `off`.
    pub(crate) fn can_write(&self, off: usize) -> bool {
        off >= self.lent || Arc::strong_count(&self.chunk) == 1
    }

    /// `len` bytes from `off`, writable; `None` while a write buffer holds any of them (or any
    /// byte past them).
    pub(crate) fn writable(&mut self, off: usize, len: usize) -> Option<&mut [u8]> {
        check_range(off, len);
        if off < self.lent {
            // `get_mut` sees the buffers' drops (their release of the count): alone again,
            // nothing is lent.
            Arc::get_mut(&mut self.chunk)?;
            self.lent = 0;
        }
        // SAFETY: the range lies inside the chunk's mapped, initialised slot (checked above). Its
        // other holders, if any, are write buffers, which read only their own ranges, all below
        // `lent` (`lend` raises it past each one; it is lowered only with the chunk held alone),
        // and the range starts at or past it. So no reference to these bytes exists but the one
        // returned, which borrows this, the chunk's only writer, mutably.
        Some(unsafe { std::slice::from_raw_parts_mut(self.chunk.ptr.as_ptr().add(off), len) })
    }
}

/// The bytes of a write ([`super::IoOpKind::Write`]): an owned [`AlignedBuf`], or a range of a
/// pool chunk lent by its owner (a segment tail, through `ChunkRef::lend`), which then cannot
/// change those bytes, or any before them in the chunk, while the write exists.
pub struct WriteBuf {
    repr: Repr,
}

enum Repr {
    Owned(AlignedBuf),
    Pooled {
        chunk: Arc<Chunk>,
        off: usize,
        len: usize,
    },
    /// `len` bytes of the process's shared zero buffer.
    Zeros(usize),
}

/// The largest [`WriteBuf::zeros`].
pub(crate) const ZERO_BUF_BYTES: usize = 1 << 20;

/// One aligned buffer of zeros for the whole process, never written after it is made.
fn zero_buf() -> &'static AlignedBuf {
    static ZEROS: std::sync::OnceLock<AlignedBuf> = std::sync::OnceLock::new();
    ZEROS.get_or_init(|| {
        // 4096 covers every O_DIRECT memory alignment seen (statx reports 512 or 4096).
        let mut b = AlignedBuf::new(ZERO_BUF_BYTES, 4096);
        b.set_len(ZERO_BUF_BYTES);
        b
    })
}

impl WriteBuf {
    /// `len` bytes of `chunk` from `off`.
    pub(in crate::io) fn pooled(chunk: Arc<Chunk>, off: usize, len: usize) -> WriteBuf {
        check_range(off, len);
        WriteBuf { repr: Repr::Pooled { chunk, off, len } }
    }

    /// `len` zero bytes (at most [`ZERO_BUF_BYTES`]), aligned for O_DIRECT, shared by every
    /// such buffer: writing zeros costs no allocation and no fill.
    pub(crate) fn zeros(len: usize) -> WriteBuf {
        assert!(len <= ZERO_BUF_BYTES, "{len} zero bytes asked, at most {ZERO_BUF_BYTES}");
        WriteBuf { repr: Repr::Zeros(len) }
    }

    /// For pool memory: the pool and the chunk (registered-buffer index) holding every byte.
    pub(crate) fn pool_slot(&self) -> Option<(u64, u32)> {
        match &self.repr {
            Repr::Owned(_) | Repr::Zeros(_) => None,
            Repr::Pooled { chunk, .. } => Some((chunk.pool_id(), chunk.index())),
        }
    }

    #[cfg(test)]
    /// The owned buffer, if this is one.
    pub(crate) fn as_aligned(&self) -> Option<&AlignedBuf> {
        match &self.repr {
            Repr::Owned(b) => Some(b),
            Repr::Pooled { .. } | Repr::Zeros(_) => None,
        }
    }
}

impl From<AlignedBuf> for WriteBuf {
    fn from(b: AlignedBuf) -> WriteBuf {
        WriteBuf { repr: Repr::Owned(b) }
    }
}

impl Deref for WriteBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match &self.repr {
            Repr::Owned(b) => b,
            Repr::Pooled { chunk, off, len } => chunk.range(*off, *len),
            Repr::Zeros(len) => &zero_buf()[..*len],
        }
    }
}

impl std::fmt::Debug for WriteBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.repr {
            Repr::Owned(b) => f.debug_tuple("WriteBuf").field(b).finish(),
            Repr::Pooled { chunk, off, len } => {
                f.debug_struct("WriteBuf").field("chunk", chunk).field("off", off).field("len", len).finish()
            }
            Repr::Zeros(len) => f.debug_struct("WriteBuf").field("zeros", len).finish(),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The thread's pool and its statistics
// ---------------------------------------------------------------------------------------------

// Per thread, because the pool is registered on the thread's ring (io/uring/ring.rs says why that
// is per thread): a write from it goes out as WRITE_FIXED only on the ring that registered it.
thread_local! {
    static THREAD_POOL: RefCell<Option<Pool>> = const { RefCell::new(None) };
    static COUNTERS: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
    static REGISTRATION: RefCell<Registration> = const { RefCell::new(Registration::NotTried) };
}

#[cfg(test)]
thread_local! {
    static REFUSE_FOR_TEST: Cell<bool> = const { Cell::new(false) };
}

/// This thread's pool, created on first use. During thread teardown a fresh private pool.
pub(crate) fn thread_pool() -> Pool {
    THREAD_POOL
        .try_with(|p| {
            p.try_borrow_mut().ok().map(|mut slot| slot.get_or_insert_with(Pool::new).clone()).unwrap_or_default()
        })
        .unwrap_or_default()
}

/// This thread's pool if it has one (rings register only that).
pub(crate) fn thread_pool_if_any() -> Option<Pool> {
    THREAD_POOL.try_with(|p| p.try_borrow().ok().and_then(|p| p.clone())).ok().flatten()
}

/// What registration did on this thread's ring (kept by the ring, read for statistics).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) enum Registration {
    #[default]
    NotTried,
    /// `chunks` chunks registered; `stopped` says why later ones were not, if they were not.
    Registered {
        chunks: u32,
        stopped: Option<String>,
    },
    Refused(String),
}

pub(crate) fn set_registration(r: Registration) {
    let _ = REGISTRATION.try_with(|c| *c.borrow_mut() = r);
}

/// Counts writes from pool memory submitted on this thread: as WRITE_FIXED or as plain writes.
pub(crate) fn count_pool_writes(fixed: u64, plain: u64) {
    let _ = COUNTERS.try_with(|c| {
        let (f, p) = c.get();
        c.set((f + fixed, p + plain));
    });
}

/// Whether registration is switched off ([`set_buffer_registration`], or a test on this thread).
pub(crate) fn registration_disabled() -> Option<String> {
    #[cfg(test)]
    if REFUSE_FOR_TEST.try_with(|c| c.get()).unwrap_or(false) {
        return Some("refused on purpose (test)".to_string());
    }
    (!REGISTRATION_ON.load(Ordering::Relaxed)).then(|| "switched off (set_buffer_registration(false))".to_string())
}

#[cfg(test)]
/// Makes registration on this thread's next new ring fail as a refusing kernel would (tests).
/// Takes effect for a ring that has not registered yet.
pub(crate) fn refuse_registration_on_this_thread(refuse: bool) {
    let _ = REFUSE_FOR_TEST.try_with(|c| c.set(refuse));
}

/// How this thread's writes use pool memory.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum BufferMode {
    /// No write from pool memory submitted through io_uring on this thread yet.
    #[default]
    NotYet,
    /// Fixed buffers: pool chunks registered with this thread's ring; writes go out as
    /// WRITE_FIXED. `partial` says why some chunks could not be registered, if some could not.
    Registered { partial: Option<String> },
    /// Unregistered aligned buffers (plain WRITE or pwrite from pool memory), and why.
    Unregistered(String),
}

/// Write-buffer counters of one thread (a shard's).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PoolStats {
    pub mode: BufferMode,
    /// Slabs (`SLAB_BYTES` each, mapped; only chunks handed out are touched) of this thread's
    /// pool.
    pub slabs: u64,
    /// Pool memory registered with this thread's ring (chunks handed out at least once).
    pub registered_bytes: u64,
    /// Chunks (`CHUNK_BYTES` each) in use.
    pub chunks_in_use: u64,
    /// The most chunks in use at once so far (chunks handed out: a freed chunk is reused before
    /// a new one).
    pub peak_chunks: u64,
    /// Writes from pool memory submitted as WRITE_FIXED.
    pub fixed_writes: u64,
    /// Writes from pool memory submitted unregistered.
    pub unregistered_writes: u64,
}

/// This thread's write-buffer counters. `sync_mode`: the storage does not use io_uring, so
/// nothing is registered and the mode says so.
pub(crate) fn thread_pool_stats(sync_mode: bool) -> PoolStats {
    let (fixed_writes, unregistered_writes) = COUNTERS.try_with(|c| c.get()).unwrap_or((0, 0));
    let reg = REGISTRATION.try_with(|c| c.borrow().clone()).unwrap_or_default();
    let (slabs, chunks_in_use, peak_chunks) = thread_pool_if_any()
        .map(|p| (p.slab_count() as u64, p.chunks_in_use() as u64, u64::from(p.chunks_handed_out())))
        .unwrap_or((0, 0, 0));
    let (mode, registered_chunks) = if sync_mode {
        (BufferMode::Unregistered("sync I/O mode: plain pwrite, no io_uring to register with".into()), 0)
    } else {
        match reg {
            Registration::NotTried => (BufferMode::NotYet, 0),
            Registration::Registered { chunks, stopped } => {
                (BufferMode::Registered { partial: stopped }, u64::from(chunks))
            }
            Registration::Refused(why) => (BufferMode::Unregistered(why), 0),
        }
    };
    PoolStats {
        mode,
        slabs,
        registered_bytes: registered_chunks * CHUNK_BYTES as u64,
        chunks_in_use,
        peak_chunks,
        fixed_writes,
        unregistered_writes,
    }
}

/// Chunks of this thread's pool in use now (0 without a pool).
pub(crate) fn thread_chunks_in_use() -> usize {
    thread_pool_if_any().map_or(0, |p| p.chunks_in_use())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn a_chunk_ref_writes_only_past_what_it_lent_until_the_buffers_are_gone() {
        let mut c = ChunkRef::new(Pool::new().alloc());
        c.writable(0, 8192).unwrap().fill(1);
        let low = c.lend(0, 1024);
        let high = c.lend(1024, 3072);
        assert!(!c.can_write(0) && !c.can_write(4095) && c.can_write(4096));
        c.writable(4096, 10).unwrap().fill(2);
        assert!(c.writable(4000, 10).is_none(), "bytes lent");
        drop(low);
        assert!(c.writable(0, 10).is_none(), "one buffer is still out");
        // Dropped on another thread: seen once it is gone.
        std::thread::spawn(move || assert!(high.iter().all(|&b| b == 1), "the lent bytes never changed"))
            .join()
            .unwrap();
        c.writable(0, 10).unwrap().fill(4);
        assert!(c.can_write(0), "nothing lent any more");
        assert_eq!(c.bytes(0, 11), &[4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 1]);
        assert_eq!(c.bytes(4095, 12), &[1, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 1]);
    }

    #[test]
    fn slots_are_never_handed_out_twice_and_come_back_on_drop() {
        let pool = Pool::new();
        let mut held: Vec<Chunk> = (0..CHUNKS_PER_SLAB + 3).map(|_| pool.alloc()).collect();
        assert_eq!(pool.slab_count(), 2);
        assert_eq!(pool.chunks_handed_out() as usize, held.len());
        assert_eq!(pool.chunks_in_use(), held.len());
        let idx: HashSet<u32> = held.iter().map(|c| c.index()).collect();
        assert_eq!(idx.len(), held.len(), "every live chunk has its own slot");
        let addrs: HashSet<usize> = held.iter().map(|c| c.as_ptr() as usize).collect();
        assert_eq!(addrs.len(), held.len(), "and its own memory");
        for c in &held {
            assert_eq!(c.as_ptr() as usize % 4096, 0);
            assert_eq!(c.pool_id(), pool.id());
            assert_eq!(c.slab() as usize, c.index() as usize / CHUNKS_PER_SLAB);
        }
        // Memory does not overlap: mark both ends of each with its index and read them back.
        for c in held.iter_mut() {
            let v = c.index() as u8;
            c.bytes_mut()[..64].fill(v);
            c.bytes_mut()[CHUNK_BYTES - 64..].fill(v);
        }
        for c in &held {
            let b = c.bytes();
            assert!(b[..64].iter().chain(&b[CHUNK_BYTES - 64..]).all(|&x| x == c.index() as u8));
        }
        assert!(pool.chunk_iovec(held.len() as u32).is_none(), "not handed out yet");
        let iov = pool.chunk_iovec(held[7].index()).unwrap();
        assert_eq!((iov.iov_base as usize, iov.iov_len), (held[7].as_ptr() as usize, CHUNK_BYTES));
        // Dropped chunks come back and are reused before any new slab is mapped.
        let gone: Vec<u32> = held.drain(..5).map(|c| c.index()).collect();
        assert_eq!(pool.chunks_in_use(), CHUNKS_PER_SLAB + 3 - 5);
        let again: Vec<Chunk> = (0..5).map(|_| pool.alloc()).collect();
        let mut a: Vec<u32> = again.iter().map(|c| c.index()).collect();
        let mut g = gone.clone();
        a.sort();
        g.sort();
        assert_eq!(a, g);
        assert_eq!(pool.slab_count(), 2);
        assert_eq!(pool.chunks_handed_out() as usize, CHUNKS_PER_SLAB + 3, "reuse before new chunks");
        let live: HashSet<u32> = held.iter().chain(again.iter()).map(|c| c.index()).collect();
        assert_eq!(live.len(), held.len() + again.len());
        drop(held);
        drop(again);
        assert_eq!(pool.chunks_in_use(), 0);
    }

    #[test]
    fn chunks_outlive_the_pool_handle_and_cross_threads() {
        let pool = Pool::new();
        let mut c = pool.alloc();
        c.bytes_mut()[..4].copy_from_slice(b"abcd");
        drop(pool);
        // The chunk keeps the memory alive; dropping it on another thread returns the slot.
        let back = std::thread::spawn(move || {
            assert_eq!(&c.bytes()[..4], b"abcd");
            drop(c);
        });
        back.join().unwrap();
    }

    #[test]
    fn write_buf_views() {
        let pool = Pool::new();
        let mut c = pool.alloc();
        c.bytes_mut()[100..110].copy_from_slice(b"0123456789");
        let c = Arc::new(c);
        let w = WriteBuf::pooled(c.clone(), 100, 10);
        assert_eq!(&w[..], b"0123456789");
        assert_eq!(w.pool_slot(), Some((pool.id(), c.index())));
        assert!(w.as_aligned().is_none());
        let mut b = AlignedBuf::new(10, 512);
        b.extend_from_slice(b"xyz");
        let o = WriteBuf::from(b);
        assert_eq!(&o[..], b"xyz");
        assert_eq!(o.pool_slot(), None);
        assert!(std::panic::catch_unwind(|| WriteBuf::pooled(c.clone(), CHUNK_BYTES - 1, 2)).is_err());
        // While the write exists the chunk is shared, so its owner cannot get &mut to it.
        let mut mine = c;
        assert!(Arc::get_mut(&mut mine).is_none());
        drop(w);
        assert!(Arc::get_mut(&mut mine).is_some());
    }

    #[test]
    fn thread_pool_is_per_thread() {
        let a = thread_pool().id();
        assert_eq!(a, thread_pool().id());
        let b = std::thread::spawn(|| thread_pool().id()).join().unwrap();
        assert_ne!(a, b);
    }
}
