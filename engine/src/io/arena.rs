//! The index arena: memory for index entries, in a few large regions shared by every segment of a
//! shard, so that the number of memory maps grows with shards, not with segments (Kafka maps each
//! `.index` and `.timeindex` file on its own: two maps per segment, against `vm.max_map_count`).
//!
//! Two kinds of region:
//!
//! - **packed** regions hold sealed segments' indexes at their exact size (rounded up to 64 bytes).
//!   They are backed by explicit huge pages (`MAP_HUGETLB`) when the machine has reserved some,
//!   else transparent huge pages (`MADV_HUGEPAGE`), else normal pages, as [`HugePages`] asks.
//! - **growth** regions hold active segments' indexes, each slot `segment.index.bytes` long so an
//!   active index never reallocates. They are reserved virtually (`MAP_NORESERVE`) and use normal
//!   pages: a page only becomes memory when an entry is written to it. A huge page per active
//!   index would cost 2 MiB of memory per partition for a few entries.
//!
//! A slot is an [`ArenaSlice`]: exclusive access to its bytes, given back when dropped. Regions
//! are never unmapped while a slice points into them (each slice holds the arena). Freed memory
//! is returned to the kernel (`MADV_DONTNEED`) in whole pages, whole huge pages for huge-page
//! regions.
//!
//! [`ArenaSlice::prefault`] keeps a range resident: `MADV_WILLNEED`, then `MADV_POPULATE_READ`
//! (Linux 5.14+), or a read of each page where the kernel lacks it. With `lock_memory`, regions
//! are locked with `mlock2(MLOCK_ONFAULT)`, one call per region, so locking never splits a map.
//!
//! Also here: the counters the tests and the benchmark read (page faults of this thread, memory
//! maps and descriptors of the process, the machine's huge-page reservation).
#![allow(unsafe_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::error::{Error, Result};

/// Size of an x86-64 huge page (the size `MAP_HUGE_2MB` asks for).
pub const HUGE_PAGE_BYTES: usize = 2 << 20;
/// Alignment (and size granularity) of packed slots: one cache line.
pub const PACKED_ALIGN: usize = 64;

/// Which pages back the packed regions: the setting.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum HugePages {
    /// Explicit huge pages if the machine has reserved enough (`vm.nr_hugepages`), else
    /// transparent huge pages if THP is not `never`, else normal pages.
    #[default]
    Auto,
    /// Explicit huge pages only; without a reservation the arena uses normal pages and says why
    /// (transparent huge pages are skipped: their compaction stalls are what explicit pages avoid).
    Explicit,
    /// Transparent huge pages (`MADV_HUGEPAGE`), else normal pages.
    Transparent,
    /// Normal pages.
    Off,
}

impl HugePages {
    pub fn name(self) -> &'static str {
        match self {
            HugePages::Auto => "auto",
            HugePages::Explicit => "explicit",
            HugePages::Transparent => "transparent",
            HugePages::Off => "off",
        }
    }
}

impl std::str::FromStr for HugePages {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "auto" => Ok(HugePages::Auto),
            "explicit" => Ok(HugePages::Explicit),
            "transparent" => Ok(HugePages::Transparent),
            "off" => Ok(HugePages::Off),
            other => Err(format!("unknown huge-page setting {other:?} (auto, explicit, transparent, off)")),
        }
    }
}

impl std::fmt::Display for HugePages {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Which pages a region really got.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PageBacking {
    /// `MAP_HUGETLB` 2 MiB pages from the reserved pool: never split, never swapped, no faults
    /// after the first touch.
    Explicit,
    /// Normal mapping with `MADV_HUGEPAGE`: the kernel uses 2 MiB pages where it can find them.
    Transparent,
    /// 4 KiB pages.
    Normal,
}

impl PageBacking {
    pub fn name(self) -> &'static str {
        match self {
            PageBacking::Explicit => "explicit huge pages (hugetlb)",
            PageBacking::Transparent => "transparent huge pages",
            PageBacking::Normal => "normal pages",
        }
    }
}

/// Arena settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArenaConfig {
    pub huge_pages: HugePages,
    /// Bytes of each packed region (sealed indexes); a multiple of 2 MiB. Default 32 MiB. With
    /// explicit huge pages a region this large needs that many free reserved pages; the arena then
    /// tries a single 2 MiB page before falling back.
    pub packed_region_bytes: usize,
    /// Virtual bytes of each growth region (active indexes). Default 1 GiB: room for 102 active
    /// indexes of 10 MiB. Only written pages use memory.
    pub growth_region_bytes: usize,
    /// Lock the regions' pages in memory once touched (`mlock2` with `MLOCK_ONFAULT`), so that
    /// no index page can be swapped out. Needs `RLIMIT_MEMLOCK` (or CAP_IPC_LOCK) to cover the
    /// regions; a refusal is reported, not an error.
    pub lock_memory: bool,
}

impl Default for ArenaConfig {
    fn default() -> Self {
        ArenaConfig {
            huge_pages: HugePages::Auto,
            packed_region_bytes: 32 << 20,
            growth_region_bytes: 1 << 30,
            lock_memory: false,
        }
    }
}

/// Whether the regions are locked in memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LockState {
    NotRequested,
    Locked,
    /// `mlock2` refused (the reason); the regions stay unlocked.
    Failed(String),
}

/// What the arena holds and what it got from the kernel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArenaReport {
    pub requested: HugePages,
    /// What the first packed region got (`None` before any is mapped).
    pub backing: Option<PageBacking>,
    /// Why the backing is not what was asked for, when it is not.
    pub fallback: Option<String>,
    /// Packed regions by backing: explicit, transparent, normal.
    pub packed_regions: [usize; 3],
    pub growth_regions: usize,
    /// Virtual bytes mapped (all regions).
    pub mapped_bytes: usize,
    /// Bytes handed out in packed and in growth slots.
    pub packed_bytes_in_use: usize,
    pub growth_bytes_in_use: usize,
    pub live_slices: usize,
    pub lock: LockState,
    /// Ranges pre-faulted, and whether `MADV_POPULATE_READ` worked (else pages were read).
    pub prefaults: u64,
    pub populate_read_supported: bool,
}

impl ArenaReport {
    /// A one-line description for logs and the demo.
    pub fn summary(&self) -> String {
        let got = self.backing.map_or("nothing mapped yet", PageBacking::name);
        let mut s = format!(
            "index memory: asked {}, got {got}; {} packed + {} growth regions, {} KiB in packed slots",
            self.requested,
            self.packed_regions.iter().sum::<usize>(),
            self.growth_regions,
            self.packed_bytes_in_use / 1024
        );
        if let Some(f) = &self.fallback {
            s.push_str(&format!(" (fallback: {f})"));
        }
        match &self.lock {
            LockState::NotRequested => {}
            LockState::Locked => s.push_str("; locked"),
            LockState::Failed(e) => s.push_str(&format!("; mlock refused: {e}")),
        }
        s
    }
}

/// Resident memory of the arena's regions. `rss_bytes` is exact (`mincore` over the regions);
/// the other figures come from `/proc/self/smaps` for the maps holding the regions, which the
/// kernel may have merged with neighbouring anonymous maps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ArenaMemory {
    pub mapped_bytes: u64,
    /// Resident bytes of the regions.
    pub rss_bytes: u64,
    /// In transparent huge pages.
    pub anon_huge_bytes: u64,
    /// In explicit huge pages, touched.
    pub hugetlb_bytes: u64,
    pub locked_bytes: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SlotKind {
    Packed,
    Growth,
}

/// Free ranges of a region: by offset (to merge neighbours) and by size (best fit).
#[derive(Debug, Default)]
struct FreeMap {
    by_offset: BTreeMap<usize, usize>,
    by_size: BTreeSet<(usize, usize)>,
}

impl FreeMap {
    fn new(len: usize) -> FreeMap {
        let mut m = FreeMap::default();
        m.insert(0, len);
        m
    }
    fn insert(&mut self, off: usize, len: usize) {
        self.by_offset.insert(off, len);
        self.by_size.insert((len, off));
    }
    fn remove(&mut self, off: usize, len: usize) {
        self.by_offset.remove(&off);
        self.by_size.remove(&(len, off));
    }
    /// Best fit: the smallest free range that holds `len`.
    fn take(&mut self, len: usize) -> Option<usize> {
        let &(flen, off) = self.by_size.range((len, 0)..).next()?;
        self.remove(off, flen);
        if flen > len {
            self.insert(off + len, flen - len);
        }
        Some(off)
    }
    /// Gives `[off, off+len)` back, merged with free neighbours; returns the merged range.
    fn give(&mut self, off: usize, len: usize) -> (usize, usize) {
        let (mut start, mut end) = (off, off + len);
        if let Some((&p, &plen)) = self.by_offset.range(..off).next_back() {
            debug_assert!(p + plen <= off, "double free in the index arena");
            if p + plen == off {
                self.remove(p, plen);
                start = p;
            }
        }
        if let Some(&nlen) = self.by_offset.get(&end) {
            self.remove(end, nlen);
            end += nlen;
        }
        self.insert(start, end - start);
        (start, end - start)
    }
}

#[derive(Debug)]
struct Region {
    /// Start of the mapping; stays mapped until the arena is dropped.
    base: NonNull<u8>,
    len: usize,
    backing: PageBacking,
    kind: SlotKind,
    locked: bool,
    free: FreeMap,
    used: usize,
}

// SAFETY: a `Region` is the bookkeeping of a mapping the arena owns; its pointer is only
// dereferenced through slices handed out under the state lock, so moving the bookkeeping to
// another thread (inside the `Mutex`) is sound.
unsafe impl Send for Region {}

#[derive(Debug, Default)]
struct State {
    regions: Vec<Region>,
    first_backing: Option<PageBacking>,
    fallback: Option<String>,
    lock_error: Option<String>,
    /// Explicit huge pages stopped working (pool exhausted): later regions skip them.
    hugetlb_exhausted: bool,
    live: usize,
}

struct ArenaInner {
    config: ArenaConfig,
    page: usize,
    state: Mutex<State>,
    prefaults: AtomicU64,
    populate_unsupported: AtomicBool,
}

impl std::fmt::Debug for ArenaInner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IndexArena").field("config", &self.config).finish_non_exhaustive()
    }
}

impl Drop for ArenaInner {
    fn drop(&mut self) {
        let st = self.state.get_mut().unwrap_or_else(|p| p.into_inner());
        for r in &st.regions {
            // SAFETY: every slice holds an `Arc` of this arena, so none is alive now: nothing
            // points into the region, which was mapped by `map_region` with exactly `len` bytes.
            unsafe { libc::munmap(r.base.as_ptr().cast(), r.len) };
        }
    }
}

/// Memory for index entries, shared by many segments (cheap to clone: one `Arc`).
#[derive(Clone, Debug)]
pub struct IndexArena {
    inner: Arc<ArenaInner>,
}

/// Exclusive use of one slot of an [`IndexArena`]: `capacity()` bytes, zero-filled when new.
/// Dropping it gives the slot back.
pub struct ArenaSlice {
    ptr: NonNull<u8>,
    len: usize,
    /// Region index and offset in it; `arena` is `None` for an empty slice.
    region: usize,
    offset: usize,
    /// Page size of the region (2 MiB for explicit huge pages), for madvise ranges.
    gran: usize,
    arena: Option<Arc<ArenaInner>>,
}

// SAFETY: an `ArenaSlice` owns its byte range exclusively, like a `Box<[u8]>`: no other slice
// overlaps it, and the region stays mapped while the slice holds the arena. Moving it to another
// thread moves that ownership.
unsafe impl Send for ArenaSlice {}
// SAFETY: shared references only give `&[u8]` access; mutation needs `&mut self`.
unsafe impl Sync for ArenaSlice {}

impl std::fmt::Debug for ArenaSlice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArenaSlice").field("len", &self.len).field("region", &self.region).finish()
    }
}

impl ArenaSlice {
    /// A slice of no bytes, outside any region.
    pub fn empty() -> ArenaSlice {
        ArenaSlice { ptr: NonNull::dangling(), len: 0, region: usize::MAX, offset: 0, gran: 4096, arena: None }
    }

    /// Bytes in the slot.
    #[inline]
    pub fn capacity(&self) -> usize {
        self.len
    }

    #[inline]
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: `ptr..ptr+len` lies inside a mapped region (or is dangling with len 0), is owned
        // by this slice alone and is initialised (anonymous memory starts zeroed and is only ever
        // written through byte slices).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_slice`; `&mut self` makes this the only reference to the bytes.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    /// The backing of the region this slot is in (`None` for an empty slice).
    pub fn backing(&self) -> Option<PageBacking> {
        let arena = self.arena.as_ref()?;
        let st = lock(&arena.state);
        st.regions.get(self.region).map(|r| r.backing)
    }

    /// Pre-faults `range` (bytes of this slot) and asks the kernel to keep it: `MADV_WILLNEED`,
    /// then `MADV_POPULATE_READ`, or a read of one byte per page where the kernel lacks it. After
    /// this, reading the range does not page-fault (the arena's memory is anonymous: it leaves
    /// memory only through swap, which `lock_memory` rules out).
    pub fn prefault(&self, range: Range<usize>) {
        let Some(arena) = &self.arena else { return };
        let end = range.end.min(self.len);
        if range.start >= end {
            return;
        }
        arena.prefaults.fetch_add(1, Ordering::Relaxed);
        let page = self.gran;
        let addr = self.ptr.as_ptr() as usize;
        let first = (addr + range.start) & !(page - 1);
        let last = (addr + end + page - 1) & !(page - 1);
        let advise = |advice| {
            // SAFETY: `first..last` covers pages of a region this slice keeps mapped; madvise
            // with WILLNEED / POPULATE_READ changes no contents and touches no Rust object.
            unsafe { libc::madvise(first as *mut libc::c_void, last - first, advice) }
        };
        advise(libc::MADV_WILLNEED);
        if !arena.populate_unsupported.load(Ordering::Relaxed) && advise(libc::MADV_POPULATE_READ) == 0 {
            return;
        }
        let err = std::io::Error::last_os_error().raw_os_error();
        if err == Some(libc::EINVAL) {
            // Older kernels do not know MADV_POPULATE_READ.
            arena.populate_unsupported.store(true, Ordering::Relaxed);
        }
        let bytes = self.as_slice();
        let mut at = range.start;
        while at < end {
            // A volatile read so that the touch is not optimised away.
            // SAFETY: `at < end <= len`, so the pointer is inside this slice's bytes.
            unsafe { std::ptr::read_volatile(bytes.as_ptr().add(at)) };
            at = ((addr + at + page) & !(page - 1)) - addr;
        }
    }
}

impl Drop for ArenaSlice {
    fn drop(&mut self) {
        if let Some(arena) = self.arena.take() {
            arena.free(self.region, self.offset, self.len);
        }
    }
}

fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    // A panic while holding the lock leaves consistent maps (every update is one step).
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn round_up(v: usize, to: usize) -> usize {
    v.div_ceil(to) * to
}

fn page_size() -> usize {
    // SAFETY: sysconf only reads a system constant.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as usize
    } else {
        4096
    }
}

impl IndexArena {
    /// An arena with `config`. Nothing is mapped until the first slot (or [`IndexArena::probe`]).
    pub fn new(config: ArenaConfig) -> IndexArena {
        let mut config = config;
        config.packed_region_bytes = round_up(config.packed_region_bytes.max(HUGE_PAGE_BYTES), HUGE_PAGE_BYTES);
        config.growth_region_bytes = round_up(config.growth_region_bytes.max(HUGE_PAGE_BYTES), HUGE_PAGE_BYTES);
        IndexArena {
            inner: Arc::new(ArenaInner {
                config,
                page: page_size(),
                state: Mutex::new(State::default()),
                prefaults: AtomicU64::new(0),
                populate_unsupported: AtomicBool::new(false),
            }),
        }
    }

    pub fn config(&self) -> &ArenaConfig {
        &self.inner.config
    }

    /// Maps the first packed region now (if none is mapped), so that [`IndexArena::report`] says
    /// what the machine gave. Engines call this at start.
    pub fn probe(&self) -> Result<ArenaReport> {
        {
            let mut st = lock(&self.inner.state);
            if !st.regions.iter().any(|r| r.kind == SlotKind::Packed) {
                if let Err(e) = self.inner.add_region(&mut st, SlotKind::Packed, 0) {
                    st.fallback.get_or_insert_with(|| format!("no region mapped ({e}); indexes stay on the heap"));
                    return Err(e);
                }
            }
        }
        Ok(self.report())
    }

    /// A slot of exactly `len` bytes (rounded up to 64) in a packed region: for a sealed index.
    pub fn alloc_packed(&self, len: usize) -> Result<ArenaSlice> {
        self.inner.alloc(&self.inner, SlotKind::Packed, len)
    }

    /// A slot of `capacity` bytes (rounded up to a page) in a growth region: for an active index,
    /// which fills it entry by entry. Only the pages written become memory.
    pub fn alloc_growth(&self, capacity: usize) -> Result<ArenaSlice> {
        self.inner.alloc(&self.inner, SlotKind::Growth, capacity)
    }

    pub fn report(&self) -> ArenaReport {
        let st = lock(&self.inner.state);
        let mut packed_regions = [0usize; 3];
        let (mut growth_regions, mut mapped, mut packed_used, mut growth_used) = (0, 0, 0, 0);
        for r in &st.regions {
            mapped += r.len;
            match r.kind {
                SlotKind::Packed => {
                    packed_used += r.used;
                    packed_regions[match r.backing {
                        PageBacking::Explicit => 0,
                        PageBacking::Transparent => 1,
                        PageBacking::Normal => 2,
                    }] += 1;
                }
                SlotKind::Growth => {
                    growth_used += r.used;
                    growth_regions += 1;
                }
            }
        }
        let lock = match (&st.lock_error, self.inner.config.lock_memory) {
            (_, false) => LockState::NotRequested,
            (Some(e), true) => LockState::Failed(e.clone()),
            (None, true) => LockState::Locked,
        };
        ArenaReport {
            requested: self.inner.config.huge_pages,
            backing: st.first_backing,
            fallback: st.fallback.clone(),
            packed_regions,
            growth_regions,
            mapped_bytes: mapped,
            packed_bytes_in_use: packed_used,
            growth_bytes_in_use: growth_used,
            live_slices: st.live,
            lock,
            prefaults: self.inner.prefaults.load(Ordering::Relaxed),
            populate_read_supported: !self.inner.populate_unsupported.load(Ordering::Relaxed),
        }
    }

    /// Resident memory of the arena's regions, from `/proc/self/smaps` (a slow call: for
    /// reports and tests).
    pub fn memory(&self) -> ArenaMemory {
        let ranges: Vec<(usize, usize)> = {
            let st = lock(&self.inner.state);
            st.regions.iter().map(|r| (r.base.as_ptr() as usize, r.base.as_ptr() as usize + r.len)).collect()
        };
        let mut m =
            ArenaMemory { mapped_bytes: ranges.iter().map(|(a, b)| (b - a) as u64).sum(), ..Default::default() };
        let page = self.inner.page;
        for &(a, b) in &ranges {
            let mut vec = vec![0u8; (b - a).div_ceil(page)];
            // SAFETY: mincore reads the page tables of `a..b`, a region this arena keeps mapped,
            // and writes one byte per page into `vec`, which is that long.
            let rc = unsafe { libc::mincore(a as *mut libc::c_void, b - a, vec.as_mut_ptr()) };
            if rc == 0 {
                m.rss_bytes += vec.iter().filter(|&&v| v & 1 != 0).count() as u64 * page as u64;
            }
        }
        let Ok(smaps) = std::fs::read_to_string("/proc/self/smaps") else { return m };
        let mut inside = false;
        for line in smaps.lines() {
            if let Some((range, _)) = line.split_once(' ') {
                if let Some((a, b)) = range.split_once('-') {
                    if let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16)) {
                        inside = ranges.iter().any(|&(s, e)| a < e && s < b);
                        continue;
                    }
                }
            }
            if !inside {
                continue;
            }
            let mut it = line.split_whitespace();
            let (Some(key), Some(v)) = (it.next(), it.next()) else { continue };
            let Ok(kb) = v.parse::<u64>() else { continue };
            match key {
                "AnonHugePages:" => m.anon_huge_bytes += kb * 1024,
                "Private_Hugetlb:" | "Shared_Hugetlb:" => m.hugetlb_bytes += kb * 1024,
                "Locked:" => m.locked_bytes += kb * 1024,
                _ => {}
            }
        }
        m
    }
}

impl ArenaInner {
    fn alloc(&self, me: &Arc<ArenaInner>, kind: SlotKind, len: usize) -> Result<ArenaSlice> {
        if len == 0 {
            return Ok(ArenaSlice::empty());
        }
        let size = match kind {
            SlotKind::Packed => round_up(len, PACKED_ALIGN),
            SlotKind::Growth => round_up(len, self.page),
        };
        let mut st = lock(&self.state);
        let mut found = None;
        for (i, r) in st.regions.iter_mut().enumerate() {
            if r.kind == kind {
                if let Some(off) = r.free.take(size) {
                    found = Some((i, off));
                    break;
                }
            }
        }
        let (region, offset) = match found {
            Some(f) => f,
            None => {
                let i = self.add_region(&mut st, kind, size)?;
                let off = st.regions[i].free.take(size).expect("a new region holds the slot");
                (i, off)
            }
        };
        let page = self.page;
        let r = &mut st.regions[region];
        r.used += size;
        let gran = if r.backing == PageBacking::Explicit { HUGE_PAGE_BYTES } else { page };
        // SAFETY: `offset + size <= r.len` (the free map only holds ranges of the region), so
        // the pointer stays inside the mapping.
        let ptr = unsafe { NonNull::new_unchecked(r.base.as_ptr().add(offset)) };
        st.live += 1;
        Ok(ArenaSlice { ptr, len: size, region, offset, gran, arena: Some(me.clone()) })
    }

    fn free(&self, region: usize, offset: usize, len: usize) {
        let mut st = lock(&self.state);
        st.live -= 1;
        let page = self.page;
        let r = &mut st.regions[region];
        r.used -= len;
        let (start, flen) = r.free.give(offset, len);
        // Give whole pages inside the merged free range back to the kernel (whole huge pages in
        // huge-page regions, so that no huge page is split).
        let gran = if r.backing == PageBacking::Normal { page } else { HUGE_PAGE_BYTES };
        let (a, b) = (round_up(start, gran), (start + flen) / gran * gran);
        if b <= a {
            return;
        }
        let base = r.base.as_ptr() as usize;
        let (addr, n) = ((base + a) as *mut libc::c_void, b - a);
        if r.locked {
            // Locked pages cannot be dropped; unlock the range, drop it, lock it again (the
            // split maps merge back once the flags agree again).
            // SAFETY: the range is inside the region and free: no slice points into it.
            unsafe {
                libc::munlock(addr, n);
                libc::madvise(addr, n, libc::MADV_DONTNEED);
                libc::mlock2(addr, n, libc::MLOCK_ONFAULT);
            }
        } else {
            // SAFETY: the range is inside the region and free: no slice points into it, so
            // dropping its contents (they read back as zeros) affects nothing live.
            unsafe { libc::madvise(addr, n, libc::MADV_DONTNEED) };
        }
    }

    /// Maps a new region of `kind` large enough for `min` bytes; returns its index.
    fn add_region(&self, st: &mut State, kind: SlotKind, min: usize) -> Result<usize> {
        let cfg = &self.config;
        let (base, len, backing) = match kind {
            SlotKind::Growth => {
                let full = round_up(cfg.growth_region_bytes.max(min), HUGE_PAGE_BYTES);
                let exact = round_up(min, self.page);
                match map_anon(full) {
                    Ok(b) => (b, full, PageBacking::Normal),
                    // Strict overcommit (vm.overcommit_memory=2) can refuse a large reservation:
                    // try just this slot.
                    Err(_) if full > exact => (map_anon(exact)?, exact, PageBacking::Normal),
                    Err(e) => return Err(e),
                }
            }
            SlotKind::Packed => self.map_packed(st, min)?,
        };
        let mut locked = false;
        if cfg.lock_memory {
            // SAFETY: `base..base+len` is the mapping just made; MLOCK_ONFAULT locks pages as
            // they are touched and changes no contents.
            let rc = unsafe { libc::mlock2(base.as_ptr().cast(), len, libc::MLOCK_ONFAULT) };
            if rc == 0 {
                locked = true;
            } else if st.lock_error.is_none() {
                st.lock_error = Some(format!(
                    "mlock2 of {len} bytes: {} (raise RLIMIT_MEMLOCK, `ulimit -l`)",
                    std::io::Error::last_os_error()
                ));
            }
        }
        if kind == SlotKind::Packed && st.first_backing.is_none() {
            st.first_backing = Some(backing);
        }
        st.regions.push(Region { base, len, backing, kind, locked, free: FreeMap::new(len), used: 0 });
        Ok(st.regions.len() - 1)
    }

    fn map_packed(&self, st: &mut State, min: usize) -> Result<(NonNull<u8>, usize, PageBacking)> {
        let cfg = &self.config;
        let len = round_up(cfg.packed_region_bytes.max(min), HUGE_PAGE_BYTES);
        let want_explicit = matches!(cfg.huge_pages, HugePages::Auto | HugePages::Explicit);
        let want_thp = matches!(cfg.huge_pages, HugePages::Auto | HugePages::Transparent);
        let mut why: Option<String> = None;
        if want_explicit && !st.hugetlb_exhausted {
            // The whole region, else a single huge page (if the slot fits in one).
            for try_len in [len, round_up(min.max(1), HUGE_PAGE_BYTES)] {
                if try_len > len {
                    continue;
                }
                if let Ok(base) = map_hugetlb(try_len) {
                    return Ok((base, try_len, PageBacking::Explicit));
                }
            }
            st.hugetlb_exhausted = true;
            let s = huge_page_status();
            why = Some(format!(
                "explicit huge pages unavailable ({} of {} reserved 2 MiB pages free; reserve with vm.nr_hugepages)",
                s.free, s.total
            ));
        }
        let mut backing = PageBacking::Normal;
        let base = if want_thp {
            let thp = thp_mode();
            if thp == "never" {
                why.get_or_insert_with(|| "transparent huge pages are disabled (THP mode never)".into());
                map_aligned(len, false)?
            } else {
                backing = PageBacking::Transparent;
                map_aligned(len, true)?
            }
        } else {
            if cfg.huge_pages == HugePages::Explicit && why.is_none() {
                why = Some("explicit huge pages exhausted".into());
            }
            map_aligned(len, false)?
        };
        if st.fallback.is_none() {
            st.fallback = why;
        }
        Ok((base, len, backing))
    }
}

/// Anonymous private mapping, reserved without commit accounting (`MAP_NORESERVE`).
fn map_anon(len: usize) -> Result<NonNull<u8>> {
    // SAFETY: an anonymous mapping at an address of the kernel's choosing: no existing memory
    // is affected.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(Error::io("mmap", "index arena", std::io::Error::last_os_error()));
    }
    Ok(NonNull::new(p.cast()).expect("mmap returned a non-null address"))
}

/// A mapping of `len` bytes aligned to 2 MiB (so that transparent huge pages can back all of
/// it), with `MADV_HUGEPAGE` when `thp`.
fn map_aligned(len: usize, thp: bool) -> Result<NonNull<u8>> {
    let raw = map_anon(len + HUGE_PAGE_BYTES)?;
    let start = raw.as_ptr() as usize;
    let aligned = round_up(start, HUGE_PAGE_BYTES);
    let head = aligned - start;
    let tail = HUGE_PAGE_BYTES - head;
    // SAFETY: both ranges are the unused ends of the mapping just made; nothing refers to them.
    unsafe {
        if head > 0 {
            libc::munmap(start as *mut libc::c_void, head);
        }
        if tail > 0 {
            libc::munmap((aligned + len) as *mut libc::c_void, tail);
        }
    }
    if thp {
        // SAFETY: advice on the mapping just made; contents are unaffected.
        unsafe { libc::madvise(aligned as *mut libc::c_void, len, libc::MADV_HUGEPAGE) };
    }
    Ok(NonNull::new(aligned as *mut u8).expect("aligned mapping is non-null"))
}

/// Explicit 2 MiB huge pages, reserved at map time (no `MAP_NORESERVE`: a reservation failure
/// is an mmap error here, not a SIGBUS at first touch).
fn map_hugetlb(len: usize) -> Result<NonNull<u8>> {
    // SAFETY: an anonymous mapping at an address of the kernel's choosing.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_HUGETLB | libc::MAP_HUGE_2MB,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(Error::io("mmap(MAP_HUGETLB)", "index arena", std::io::Error::last_os_error()));
    }
    Ok(NonNull::new(p.cast()).expect("mmap returned a non-null address"))
}

/// The machine's explicit huge-page pool (`/proc/meminfo`), 2 MiB pages.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HugePageStatus {
    pub total: u64,
    pub free: u64,
    pub reserved: u64,
    pub size_kb: u64,
}

pub fn huge_page_status() -> HugePageStatus {
    let mut s = HugePageStatus::default();
    if let Ok(text) = std::fs::read_to_string("/proc/meminfo") {
        for line in text.lines() {
            let mut it = line.split_whitespace();
            let (Some(k), Some(v)) = (it.next(), it.next()) else { continue };
            let v: u64 = v.parse().unwrap_or(0);
            match k {
                "HugePages_Total:" => s.total = v,
                "HugePages_Free:" => s.free = v,
                "HugePages_Rsvd:" => s.reserved = v,
                "Hugepagesize:" => s.size_kb = v,
                _ => {}
            }
        }
    }
    s
}

/// The transparent-huge-page mode (`always`, `madvise` or `never`; `never` if unknown).
pub fn thp_mode() -> String {
    std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
        .ok()
        .and_then(|t| {
            let start = t.find('[')?;
            let end = t[start..].find(']')?;
            Some(t[start + 1..start + end].to_string())
        })
        .unwrap_or_else(|| "never".into())
}

/// Page faults counted by the kernel.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PageFaults {
    /// Served without I/O (a page in memory mapped in, a zero page, a copy on write).
    pub minor: u64,
    /// Needed I/O (a file page read from disk, a swapped page).
    pub major: u64,
}

fn rusage(who: libc::c_int) -> PageFaults {
    // SAFETY: an all-zero rusage is a valid value of this plain C struct.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes into the struct we pass, which lives for the call.
    let rc = unsafe { libc::getrusage(who, &mut u) };
    if rc != 0 {
        return PageFaults::default();
    }
    PageFaults { minor: u.ru_minflt as u64, major: u.ru_majflt as u64 }
}

/// Page faults of the calling thread so far (`getrusage(RUSAGE_THREAD)`).
pub fn thread_page_faults() -> PageFaults {
    rusage(libc::RUSAGE_THREAD)
}

/// Page faults of the whole process so far.
pub fn process_page_faults() -> PageFaults {
    rusage(libc::RUSAGE_SELF)
}

/// Memory maps of this process (lines of `/proc/self/maps`): what `vm.max_map_count` limits.
pub fn map_count() -> usize {
    std::fs::read_to_string("/proc/self/maps").map(|t| t.lines().count()).unwrap_or(0)
}

/// Open file descriptors of this process (entries of `/proc/self/fd`).
pub fn open_fd_count() -> usize {
    // The directory handle itself is one of the entries.
    std::fs::read_dir("/proc/self/fd").map(|d| d.count().saturating_sub(1)).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arena(h: HugePages) -> IndexArena {
        IndexArena::new(ArenaConfig { huge_pages: h, packed_region_bytes: 2 << 20, ..ArenaConfig::default() })
    }

    #[test]
    fn slots_are_disjoint_zeroed_and_reused() {
        let a = arena(HugePages::Off);
        let mut s1 = a.alloc_packed(100).unwrap();
        let mut s2 = a.alloc_packed(8).unwrap();
        assert_eq!(s1.capacity(), 128);
        assert_eq!(s2.capacity(), 64);
        assert!(s1.as_slice().iter().all(|&b| b == 0));
        s1.as_mut_slice().fill(1);
        s2.as_mut_slice().fill(2);
        assert!(s1.as_slice().iter().all(|&b| b == 1));
        let p1 = s1.as_slice().as_ptr();
        drop(s1);
        let s3 = a.alloc_packed(128).unwrap();
        assert_eq!(s3.as_slice().as_ptr(), p1, "best fit reuses the freed slot");
        assert_eq!(a.report().live_slices, 2);
        assert_eq!(a.report().packed_regions, [0, 0, 1]);
    }

    #[test]
    fn big_slots_get_their_own_region_and_free_ranges_merge() {
        let a = arena(HugePages::Off);
        let big = a.alloc_packed(3 << 20).unwrap();
        assert_eq!(big.capacity(), 3 << 20);
        let slots: Vec<_> = (0..100).map(|_| a.alloc_packed(1000).unwrap()).collect();
        drop(slots);
        let whole = a.alloc_packed(2 << 20).unwrap();
        assert_eq!(whole.capacity(), 2 << 20, "freed neighbours merged back into one range");
        assert_eq!(a.report().packed_regions[2], 2);
    }

    #[test]
    fn growth_slots_are_page_sized_and_virtual() {
        let a = IndexArena::new(ArenaConfig { growth_region_bytes: 64 << 20, ..ArenaConfig::default() });
        let mut s = a.alloc_growth(10 << 20).unwrap();
        assert_eq!(s.capacity(), 10 << 20);
        s.as_mut_slice()[..8].copy_from_slice(&[1; 8]);
        s.prefault(0..8);
        let m = a.memory();
        assert!(m.rss_bytes < 1 << 20, "only touched pages are resident: {m:?}");
        assert_eq!(a.report().growth_regions, 1);
    }

    #[test]
    fn transparent_regions_report_their_backing() {
        let a = arena(HugePages::Transparent);
        let r = a.probe().unwrap();
        let expect = if thp_mode() == "never" { PageBacking::Normal } else { PageBacking::Transparent };
        assert_eq!(r.backing, Some(expect));
        let off = arena(HugePages::Off).probe().unwrap();
        assert_eq!(off.backing, Some(PageBacking::Normal));
        assert!(off.fallback.is_none());
    }

    #[test]
    fn explicit_pages_when_reserved_else_normal_pages_and_a_reason() {
        let a = arena(HugePages::Explicit);
        let r = a.probe().unwrap();
        match r.backing {
            Some(PageBacking::Explicit) => {
                let mut s = a.alloc_packed(4096).unwrap();
                s.as_mut_slice().fill(7);
                assert_eq!(s.backing(), Some(PageBacking::Explicit));
            }
            Some(PageBacking::Normal) => assert!(r.fallback.is_some(), "{r:?}"),
            other => panic!("explicit never falls back to THP: {other:?}"),
        }
    }

    #[test]
    fn locked_regions_report_their_state() {
        let a = IndexArena::new(ArenaConfig {
            huge_pages: HugePages::Off,
            packed_region_bytes: 2 << 20,
            lock_memory: true,
            ..ArenaConfig::default()
        });
        let mut s = a.alloc_packed(8192).unwrap();
        s.as_mut_slice().fill(1);
        match a.report().lock {
            LockState::Locked => assert!(a.memory().locked_bytes >= 8192, "{:?}", a.memory()),
            LockState::Failed(why) => assert!(why.contains("mlock2"), "{why}"),
            LockState::NotRequested => panic!("locking was requested"),
        }
        drop(s);
        // Freed locked memory is unlocked, dropped and locked again (the region stays one map).
        let s2 = a.alloc_packed(8192).unwrap();
        assert!(s2.as_slice().iter().all(|&b| b == 0 || b == 1));
    }

    #[test]
    fn empty_slices_need_no_region() {
        let a = arena(HugePages::Off);
        let s = a.alloc_packed(0).unwrap();
        assert_eq!(s.capacity(), 0);
        assert!(s.as_slice().is_empty());
        s.prefault(0..10);
        assert_eq!(a.report().mapped_bytes, 0);
    }

    #[test]
    fn counters_read() {
        assert!(map_count() > 0);
        assert!(open_fd_count() > 0);
        let before = thread_page_faults();
        let v = vec![1u8; 1 << 22];
        assert!(v.iter().map(|&b| b as u64).sum::<u64>() > 0);
        assert!(thread_page_faults().minor > before.minor);
    }
}
