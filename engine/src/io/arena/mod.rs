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
//! A slot is an `ArenaSlice`: exclusive access to its bytes, given back when dropped. Regions
//! are never unmapped while a slice points into them (each slice holds the arena). Freed memory
//! is returned to the kernel (`MADV_DONTNEED`) in whole pages, whole huge pages for huge-page
//! regions.
//!
//! `ArenaSlice::prefault` keeps a range resident: `MADV_WILLNEED`, then `MADV_POPULATE_READ`
//! (Linux 5.14+), or a read of each page where the kernel lacks it. With `lock_memory`, regions
//! are locked with `mlock2(MLOCK_ONFAULT)`, one call per region, so locking never splits a map.
//!
//! Also here: the counters the tests and the benchmark read (page faults of this thread, memory
//! maps and descriptors of the process, the machine's huge-page reservation).
//!
//! Parts: this file has the settings, the reports and [`IndexArena`]; `slot.rs` the regions'
//! bookkeeping (free ranges, best fit) and `ArenaSlice`; `map.rs` the kernel side (mapping,
//! huge pages, advice, locking, residency); `counters.rs` the process counters.

mod counters;
mod map;
mod slot;
#[cfg(test)]
mod tests;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::error::Result;

pub use counters::{map_count, open_fd_count, thread_page_faults, PageFaults};
pub use map::{huge_page_status, thp_mode, HugePageStatus};
pub(crate) use slot::ArenaSlice;
use slot::{ArenaInner, SlotKind, State};

/// Size of an x86-64 huge page (the size `MAP_HUGE_2MB` asks for).
pub(crate) const HUGE_PAGE_BYTES: usize = 2 << 20;
/// Alignment (and size granularity) of packed slots: one cache line.
pub(crate) const PACKED_ALIGN: usize = 64;

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
    pub(crate) fn name(self) -> &'static str {
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

/// Memory for index entries, shared by many segments (cheap to clone: one `Arc`).
#[derive(Clone, Debug)]
pub struct IndexArena {
    inner: Arc<ArenaInner>,
}

fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    // A panic while holding the lock leaves consistent maps (every update is one step).
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn round_up(v: usize, to: usize) -> usize {
    v.div_ceil(to) * to
}

impl IndexArena {
    /// An arena with `config`. Nothing is mapped until the first slot (or `IndexArena::probe`).
    pub fn new(config: ArenaConfig) -> IndexArena {
        let mut config = config;
        config.packed_region_bytes = round_up(config.packed_region_bytes.max(HUGE_PAGE_BYTES), HUGE_PAGE_BYTES);
        config.growth_region_bytes = round_up(config.growth_region_bytes.max(HUGE_PAGE_BYTES), HUGE_PAGE_BYTES);
        IndexArena {
            inner: Arc::new(ArenaInner {
                config,
                page: map::page_size(),
                state: Mutex::new(State::default()),
                prefaults: AtomicU64::new(0),
                populate_unsupported: AtomicBool::new(false),
            }),
        }
    }

    /// Maps the first packed region now (if none is mapped), so that [`IndexArena::report`] says
    /// what the machine gave. Engines call this at start.
    pub(crate) fn probe(&self) -> Result<ArenaReport> {
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
    pub(crate) fn alloc_packed(&self, len: usize) -> Result<ArenaSlice> {
        self.inner.alloc(&self.inner, SlotKind::Packed, len)
    }

    /// A slot of `capacity` bytes (rounded up to a page) in a growth region: for an active index,
    /// which fills it entry by entry. Only the pages written become memory.
    pub(crate) fn alloc_growth(&self, capacity: usize) -> Result<ArenaSlice> {
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
        for &(a, b) in &ranges {
            m.rss_bytes += map::resident_bytes(a, b - a, self.inner.page).unwrap_or(0);
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
