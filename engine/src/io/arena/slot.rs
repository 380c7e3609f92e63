//! The regions' bookkeeping: free ranges (best fit, neighbours merged), the regions themselves,
//! and [`ArenaSlice`], one slot's bytes.
#![allow(unsafe_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::c_void;
use std::ops::Range;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use nix::errno::Errno;
use nix::sys::mman::{madvise, munlock, munmap, MmapAdvise};

use super::map::{self, advise_keep, lock_on_fault, map_aligned, map_anon, map_hugetlb};
use super::{lock, round_up, ArenaConfig, HugePages, PageBacking, HUGE_PAGE_BYTES, PACKED_ALIGN};
use crate::error::Result;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum SlotKind {
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
pub(super) struct Region {
    /// Start of the mapping; stays mapped until the arena is dropped.
    pub(super) base: NonNull<u8>,
    pub(super) len: usize,
    pub(super) backing: PageBacking,
    pub(super) kind: SlotKind,
    locked: bool,
    free: FreeMap,
    pub(super) used: usize,
}

// SAFETY: a `Region` is the bookkeeping of a mapping the arena owns; its pointer is only
// dereferenced through slices handed out under the state lock, so moving the bookkeeping to
// another thread (inside the `Mutex`) is sound.
unsafe impl Send for Region {}

#[derive(Debug, Default)]
pub(super) struct State {
    pub(super) regions: Vec<Region>,
    pub(super) first_backing: Option<PageBacking>,
    pub(super) fallback: Option<String>,
    pub(super) lock_error: Option<String>,
    /// Explicit huge pages stopped working (pool exhausted): later regions skip them.
    pub(super) hugetlb_exhausted: bool,
    pub(super) live: usize,
}

pub(super) struct ArenaInner {
    pub(super) config: ArenaConfig,
    pub(super) page: usize,
    pub(super) state: Mutex<State>,
    pub(super) prefaults: AtomicU64,
    pub(super) populate_unsupported: AtomicBool,
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
            let _ = unsafe { munmap(r.base.cast(), r.len) };
        }
    }
}

/// Exclusive use of one slot of an [`IndexArena`](super::IndexArena): `capacity()` bytes, zero-filled when new.
/// Dropping it gives the slot back.
pub(crate) struct ArenaSlice {
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
    pub(crate) fn empty() -> ArenaSlice {
        ArenaSlice { ptr: NonNull::dangling(), len: 0, region: usize::MAX, offset: 0, gran: 4096, arena: None }
    }

    /// Bytes in the slot.
    #[inline]
    pub(crate) fn capacity(&self) -> usize {
        self.len
    }

    #[inline]
    pub(crate) fn as_slice(&self) -> &[u8] {
        // SAFETY: `ptr..ptr+len` lies inside a mapped region (or is dangling with len 0), is owned
        // by this slice alone and is initialised (anonymous memory starts zeroed and is only ever
        // written through byte slices).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    pub(crate) fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_slice`; `&mut self` makes this the only reference to the bytes.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    /// The backing of the region this slot is in (`None` for an empty slice).
    pub(crate) fn backing(&self) -> Option<PageBacking> {
        let arena = self.arena.as_ref()?;
        let st = lock(&arena.state);
        st.regions.get(self.region).map(|r| r.backing)
    }

    /// Pre-faults `range` (bytes of this slot) and asks the kernel to keep it: `MADV_WILLNEED`,
    /// then `MADV_POPULATE_READ`, or a read of one byte per page where the kernel lacks it. After
    /// this, reading the range does not page-fault (the arena's memory is anonymous: it leaves
    /// memory only through swap, which `lock_memory` rules out).
    pub(crate) fn prefault(&self, range: Range<usize>) {
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
        let _ = advise_keep(first, last - first, MmapAdvise::MADV_WILLNEED);
        if !arena.populate_unsupported.load(Ordering::Relaxed) {
            match advise_keep(first, last - first, MmapAdvise::MADV_POPULATE_READ) {
                Ok(()) => return,
                // Older kernels do not know MADV_POPULATE_READ.
                Err(Errno::EINVAL) => arena.populate_unsupported.store(true, Ordering::Relaxed),
                Err(_) => {}
            }
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

impl ArenaInner {
    pub(super) fn alloc(&self, me: &Arc<ArenaInner>, kind: SlotKind, len: usize) -> Result<ArenaSlice> {
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
        // `offset + size <= r.len`: the free map only holds ranges of the region.
        let ptr = r.base.map_addr(|a| a.saturating_add(offset));
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
        let (p, n) = (r.base.map_addr(|x| x.saturating_add(a)).cast::<c_void>(), b - a);
        // SAFETY: the range is inside the region and free: no slice points into it, so dropping
        // its contents (they read back as zeros) affects nothing live. Locked pages cannot be
        // dropped: a locked range is unlocked first and locked again below (the split maps
        // merge back once the flags agree again).
        unsafe {
            if r.locked {
                let _ = munlock(p, n);
            }
            let _ = madvise(p, n, MmapAdvise::MADV_DONTNEED);
        }
        if r.locked {
            let _ = lock_on_fault(p.as_ptr() as usize, n);
        }
    }

    /// Maps a new region of `kind` large enough for `min` bytes; returns its index.
    pub(super) fn add_region(&self, st: &mut State, kind: SlotKind, min: usize) -> Result<usize> {
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
            match lock_on_fault(base.as_ptr() as usize, len) {
                Ok(()) => locked = true,
                Err(e) if st.lock_error.is_none() => {
                    st.lock_error = Some(format!("mlock2 of {len} bytes: {e} (raise RLIMIT_MEMLOCK, `ulimit -l`)"));
                }
                Err(_) => {}
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
            let s = map::huge_page_status();
            why = Some(format!(
                "explicit huge pages unavailable ({} of {} reserved 2 MiB pages free; reserve with vm.nr_hugepages)",
                s.free, s.total
            ));
        }
        let mut backing = PageBacking::Normal;
        let base = if want_thp {
            let thp = map::thp_mode();
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
