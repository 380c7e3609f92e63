//! The kernel side of the arena: mapping regions (normal pages, 2 MiB-aligned for transparent
//! huge pages, explicit huge pages), advice, locking and residency; and the machine's huge-page
//! settings. Through nix, except `mlock2` and `mincore`, which nix lacks (raw libc, said where).
#![allow(unsafe_code)]

use std::ffi::c_void;
use std::num::NonZeroUsize;
use std::ptr::NonNull;

use nix::errno::Errno;
use nix::sys::mman::{madvise, mmap_anonymous, munmap, MapFlags, MmapAdvise, ProtFlags};
use nix::unistd::{sysconf, SysconfVar};

use super::{round_up, HUGE_PAGE_BYTES};
use crate::error::{Error, Result};

pub(super) fn page_size() -> usize {
    match sysconf(SysconfVar::PAGE_SIZE) {
        Ok(Some(p)) if p > 0 => p as usize,
        _ => 4096,
    }
}

/// Anonymous private mapping, reserved without commit accounting (`MAP_NORESERVE`).
pub(super) fn map_anon(len: usize) -> Result<NonNull<u8>> {
    map(len, MapFlags::MAP_PRIVATE | MapFlags::MAP_NORESERVE, "mmap")
}

/// Explicit 2 MiB huge pages, reserved at map time (no `MAP_NORESERVE`: a reservation failure
/// is an mmap error here, not a SIGBUS at first touch).
pub(super) fn map_hugetlb(len: usize) -> Result<NonNull<u8>> {
    map(len, MapFlags::MAP_PRIVATE | MapFlags::MAP_HUGETLB | MapFlags::MAP_HUGE_2MB, "mmap(MAP_HUGETLB)")
}

fn map(len: usize, flags: MapFlags, op: &'static str) -> Result<NonNull<u8>> {
    let len = NonZeroUsize::new(len).ok_or_else(|| Error::io(op, "index arena", Errno::EINVAL.into()))?;
    // SAFETY: an anonymous mapping at an address of the kernel's choosing: no existing memory
    // is affected.
    let p = unsafe { mmap_anonymous(None, len, ProtFlags::PROT_READ | ProtFlags::PROT_WRITE, flags) };
    p.map(NonNull::cast).map_err(|e| Error::io(op, "index arena", e.into()))
}

/// A mapping of `len` bytes aligned to 2 MiB (so that transparent huge pages can back all of
/// it), with `MADV_HUGEPAGE` when `thp`.
pub(super) fn map_aligned(len: usize, thp: bool) -> Result<NonNull<u8>> {
    let raw = map_anon(len + HUGE_PAGE_BYTES)?;
    let start = raw.as_ptr() as usize;
    let head = round_up(start, HUGE_PAGE_BYTES) - start;
    let tail = HUGE_PAGE_BYTES - head;
    // SAFETY: the mapping just made is `head + len + tail` bytes, so both offsets stay inside
    // it; the head and the tail are its unused ends, which nothing refers to.
    let aligned = unsafe {
        if head > 0 {
            let _ = munmap(raw.cast(), head);
        }
        if tail > 0 {
            let _ = munmap(raw.add(head + len).cast(), tail);
        }
        raw.add(head)
    };
    if thp {
        let _ = advise_keep(aligned.as_ptr() as usize, len, MmapAdvise::MADV_HUGEPAGE);
    }
    Ok(aligned)
}

/// `madvise` with advice that changes no contents (`MADV_WILLNEED`, `MADV_POPULATE_READ`,
/// `MADV_HUGEPAGE`), over the pages of `addr..addr+len`.
pub(super) fn advise_keep(addr: usize, len: usize, advice: MmapAdvise) -> nix::Result<()> {
    debug_assert!(
        matches!(advice, MmapAdvise::MADV_WILLNEED | MmapAdvise::MADV_POPULATE_READ | MmapAdvise::MADV_HUGEPAGE),
        "{advice:?} may change contents"
    );
    let Some(p) = NonNull::new(addr as *mut c_void) else { return Err(Errno::EINVAL) };
    // SAFETY: these kinds of advice change no contents and touch no Rust object: at most they
    // fault pages in or change how they are backed (an unmapped range is refused with ENOMEM).
    unsafe { madvise(p, len, advice) }
}

/// `mlock2(MLOCK_ONFAULT)`: locks the pages of `addr..addr+len` as they are touched. Raw libc:
/// nix has `mlock` but no `mlock2`.
pub(super) fn lock_on_fault(addr: usize, len: usize) -> std::io::Result<()> {
    // SAFETY: locking changes no contents and touches no Rust object (an unmapped range is
    // refused with ENOMEM).
    let rc = unsafe { libc::mlock2(addr as *const c_void, len, libc::MLOCK_ONFAULT) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Resident bytes of `addr..addr+len` (page aligned), from `mincore`. Raw libc: nix has no
/// `mincore`.
pub(super) fn resident_bytes(addr: usize, len: usize, page: usize) -> Option<u64> {
    let mut vec = vec![0u8; len.div_ceil(page)];
    // SAFETY: mincore reads the page tables of `addr..addr+len` (an unmapped range is refused
    // with ENOMEM) and writes one byte per page into `vec`, which is that long.
    let rc = unsafe { libc::mincore(addr as *mut c_void, len, vec.as_mut_ptr()) };
    (rc == 0).then(|| vec.iter().filter(|&&v| v & 1 != 0).count() as u64 * page as u64)
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
