//! What a shard's segments share, and sealed segments' indexes under a memory budget.
//!
//! [`SegmentResources`] bundles the index arena (io layer), the [`IndexCache`] (the budget for
//! sealed segments' indexes) and the [`FileCache`] (the limit on lazily opened descriptors). A
//! segment is given its resources when it is created or opened, by its log
//! ([`crate::log::LogOptions::resources`]): each engine shard gives its logs its own, so its
//! segments share one arena and one budget; a log opened on its own gets the process-wide set
//! unless its caller gives it others.
//!
//! A sealed segment's two indexes are one unit, an [`IndexPair`] in exact-size arena slots. They
//! load on first use (a read of both files), stay resident while the budget allows, and are
//! evicted least recently used first when a load would pass `index_memory_budget_bytes`; an
//! evicted pair loads again on next use. A reader holds the pair through an [`IndexRef`], so an
//! eviction never frees memory under it. Active segments' indexes are not counted: there is one
//! per partition, in growth slots.

use std::collections::HashMap;
use std::ops::Deref;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};

use crate::error::Result;
use crate::index::{OffsetIndex, TimeIndex};
use crate::io::file_cache::FileCacheStats;
use crate::io::{ArenaConfig, ArenaReport, FileCache, IndexArena, IoFile};

/// Settings of a [`SegmentResources`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceConfig {
    pub arena: ArenaConfig,
    /// Bytes of sealed segments' indexes kept in memory; past it the least recently used are
    /// evicted (they load again on next use). Default 1 GiB (Kafka's default for its remote
    /// index cache).
    pub index_memory_budget_bytes: u64,
    /// Segment files open at once: active `.log`s (held, always open) and lazily opened files
    /// (sealed `.log`s, all index files), which get what those leave, at least a quarter of it.
    /// Default half the process's soft descriptor limit.
    pub max_open_files: usize,
}

impl Default for ResourceConfig {
    fn default() -> Self {
        ResourceConfig {
            arena: ArenaConfig::default(),
            index_memory_budget_bytes: 1 << 30,
            max_open_files: FileCache::default_limit(),
        }
    }
}

/// The arena, index budget and file limit that segments share (cheap to clone).
#[derive(Clone, Debug)]
pub struct SegmentResources {
    pub arena: IndexArena,
    pub indexes: Arc<IndexCache>,
    pub files: Arc<FileCache>,
}

/// What a [`SegmentResources`] holds now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceReport {
    pub arena: ArenaReport,
    pub indexes: IndexCacheStats,
    pub files: FileCacheStats,
}

impl SegmentResources {
    pub fn new(config: ResourceConfig) -> SegmentResources {
        SegmentResources {
            arena: IndexArena::new(config.arena),
            indexes: IndexCache::new(config.index_memory_budget_bytes),
            files: FileCache::new(config.max_open_files),
        }
    }

    /// One set per engine shard: the budget and the descriptor limit split evenly, each arena's
    /// first packed region mapped at once so that its report says what the machine gave.
    pub(crate) fn for_shards(config: ResourceConfig, shards: usize) -> Vec<SegmentResources> {
        let n = shards.max(1);
        (0..n)
            .map(|_| {
                let r = SegmentResources::new(ResourceConfig {
                    arena: config.arena.clone(),
                    index_memory_budget_bytes: config.index_memory_budget_bytes / n as u64,
                    max_open_files: (config.max_open_files / n).max(1),
                });
                // A failed map is reported by the arena; the engine still starts (indexes fall
                // back to the heap).
                let _ = r.arena.probe();
                r
            })
            .collect()
    }

    /// The process-wide resources ([`ResourceConfig::default`]): what
    /// [`crate::log::LogOptions::default`] gives a log, shared by every log given them.
    pub fn process_default() -> SegmentResources {
        static DEFAULT: OnceLock<SegmentResources> = OnceLock::new();
        DEFAULT.get_or_init(|| SegmentResources::new(ResourceConfig::default())).clone()
    }

    pub fn report(&self) -> ResourceReport {
        ResourceReport { arena: self.arena.report(), indexes: self.indexes.stats(), files: self.files.stats() }
    }
}

/// A sealed segment's two indexes, loaded together.
#[derive(Debug)]
pub(crate) struct IndexPair {
    pub offset: OffsetIndex,
    pub time: TimeIndex,
}

impl IndexPair {
    fn memory_bytes(&self) -> u64 {
        (self.offset.memory_bytes() + self.time.memory_bytes()) as u64
    }
}

/// A borrowed index: either the segment's own (active) or a resident sealed pair, which stays
/// in memory while this is held.
pub struct IndexRef<'a, T> {
    inner: RefInner<'a, T>,
}

enum RefInner<'a, T> {
    Borrowed(&'a T),
    Shared(Arc<IndexPair>, fn(&IndexPair) -> &T),
}

impl<'a, T> IndexRef<'a, T> {
    pub(crate) fn borrowed(r: &'a T) -> Self {
        IndexRef { inner: RefInner::Borrowed(r) }
    }
    pub(crate) fn shared(pair: Arc<IndexPair>, pick: fn(&IndexPair) -> &T) -> Self {
        IndexRef { inner: RefInner::Shared(pair, pick) }
    }
}

impl<T> Deref for IndexRef<'_, T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        match &self.inner {
            RefInner::Borrowed(r) => r,
            RefInner::Shared(p, pick) => pick(p),
        }
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for IndexRef<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        (**self).fmt(f)
    }
}

/// Counters of an [`IndexCache`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IndexCacheStats {
    pub budget_bytes: u64,
    /// Bytes of sealed indexes in memory now, and how many segments' pairs.
    pub resident_bytes: u64,
    pub resident_segments: usize,
    pub peak_resident_bytes: u64,
    /// Pairs read from their files (first use or after an eviction), and pairs evicted.
    pub loads: u64,
    pub evictions: u64,
}

#[derive(Debug, Default)]
struct CacheState {
    resident: HashMap<u64, (Weak<SealedIndexes>, u64)>,
    bytes: u64,
    peak: u64,
    loads: u64,
    evictions: u64,
}

/// Sealed segments' resident indexes under a byte budget, evicted least recently used first.
#[derive(Debug)]
pub struct IndexCache {
    budget: u64,
    state: Mutex<CacheState>,
    tick: AtomicU64,
    next_id: AtomicU64,
}

impl IndexCache {
    pub(crate) fn new(budget_bytes: u64) -> Arc<IndexCache> {
        Arc::new(IndexCache {
            budget: budget_bytes,
            state: Mutex::new(CacheState::default()),
            tick: AtomicU64::new(1),
            next_id: AtomicU64::new(1),
        })
    }

    pub fn stats(&self) -> IndexCacheStats {
        let st = self.lock();
        IndexCacheStats {
            budget_bytes: self.budget,
            resident_bytes: st.bytes,
            resident_segments: st.resident.len(),
            peak_resident_bytes: st.peak,
            loads: st.loads,
            evictions: st.evictions,
        }
    }

    fn lock(&self) -> MutexGuard<'_, CacheState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts `bytes` of `id` as resident, first evicting least recently used pairs (never `id`)
    /// until they fit the budget. A pair larger than the whole budget is still admitted, alone.
    fn admit(&self, id: u64, me: Weak<SealedIndexes>, bytes: u64, loaded: bool) {
        let mut dropped = Vec::new();
        {
            let mut st = self.lock();
            if let Some((_, old)) = st.resident.remove(&id) {
                st.bytes -= old;
            }
            if st.bytes + bytes > self.budget {
                let need = st.bytes + bytes - self.budget;
                self.evict(&mut st, id, need, &mut dropped);
            }
            st.resident.insert(id, (me, bytes));
            st.bytes += bytes;
            st.peak = st.peak.max(st.bytes);
            if loaded {
                st.loads += 1;
            }
        }
        drop(dropped);
    }

    /// Evicts least recently used pairs other than `except` until `need` bytes are freed. What
    /// must be dropped is pushed to `dropped`, to be dropped after the lock is released.
    fn evict(&self, st: &mut CacheState, except: u64, need: u64, dropped: &mut Vec<Dropped>) {
        let mut lru: Vec<(u64, u64, Arc<SealedIndexes>)> = st
            .resident
            .iter()
            .filter(|(&id, _)| id != except)
            .filter_map(|(&id, (w, _))| w.upgrade().map(|s| (s.last_used.load(Ordering::Relaxed), id, s)))
            .collect();
        lru.sort_unstable_by_key(|(t, id, _)| (*t, *id));
        let mut freed = 0;
        for (_, id, s) in lru {
            if freed < need {
                // A pair being loaded or taken right now is skipped (its lock is held).
                if let Ok(mut slot) = s.loaded.try_lock() {
                    if let Some(pair) = slot.take() {
                        dropped.push(Dropped::Pair(pair));
                    }
                    if let Some((_, b)) = st.resident.remove(&id) {
                        st.bytes -= b;
                        freed += b;
                        st.evictions += 1;
                    }
                }
            }
            dropped.push(Dropped::Owner(s));
        }
    }

    fn forget(&self, id: u64) {
        let mut st = self.lock();
        if let Some((_, b)) = st.resident.remove(&id) {
            st.bytes -= b;
        }
    }
}

/// Handles released after the cache lock (dropping the last handle of a segment's indexes calls
/// back into the cache).
#[allow(dead_code)]
enum Dropped {
    Pair(Arc<IndexPair>),
    Owner(Arc<SealedIndexes>),
}

/// A sealed segment's indexes: resident or not, loaded from their files on demand.
pub(crate) struct SealedIndexes {
    id: u64,
    base_offset: i64,
    index_file: Arc<dyn IoFile>,
    time_index_file: Arc<dyn IoFile>,
    max_index_bytes: u32,
    /// Index files longer than this are refused as corrupt.
    limit: u64,
    /// Entries of each index (fixed once sealed), known without loading.
    entries: (usize, usize),
    arena: IndexArena,
    cache: Arc<IndexCache>,
    me: Weak<SealedIndexes>,
    loaded: Mutex<Option<Arc<IndexPair>>>,
    last_used: AtomicU64,
}

impl std::fmt::Debug for SealedIndexes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SealedIndexes")
            .field("base_offset", &self.base_offset)
            .field("entries", &self.entries)
            .field("resident", &self.is_resident())
            .finish()
    }
}

impl SealedIndexes {
    /// Indexes of a sealed segment, not loaded. `entries` are the entry counts of the two files.
    pub(crate) fn unloaded(
        res: &SegmentResources,
        base_offset: i64,
        index_file: Arc<dyn IoFile>,
        time_index_file: Arc<dyn IoFile>,
        max_index_bytes: u32,
        limit: u64,
        entries: (usize, usize),
    ) -> Arc<SealedIndexes> {
        Arc::new_cyclic(|me| SealedIndexes {
            id: res.indexes.next_id.fetch_add(1, Ordering::Relaxed),
            base_offset,
            index_file,
            time_index_file,
            max_index_bytes,
            limit,
            entries,
            arena: res.arena.clone(),
            cache: res.indexes.clone(),
            me: me.clone(),
            loaded: Mutex::new(None),
            last_used: AtomicU64::new(0),
        })
    }

    /// Indexes of a segment being sealed, resident at once: packed into exact-size slots, warm
    /// sections pre-faulted, counted against the budget (which may evict others).
    pub(crate) fn resident(
        res: &SegmentResources,
        mut offset: OffsetIndex,
        mut time: TimeIndex,
        max_index_bytes: u32,
        limit: u64,
    ) -> Arc<SealedIndexes> {
        offset.pack(&res.arena);
        time.pack(&res.arena);
        offset.prefault_warm();
        time.prefault_warm();
        let files = (offset.file().cloned(), time.file().cloned());
        let (Some(fi), Some(ft)) = files else { unreachable!("a segment's indexes always have files") };
        let s = SealedIndexes::unloaded(
            res,
            offset.base_offset(),
            fi,
            ft,
            max_index_bytes,
            limit,
            (offset.entries(), time.entries()),
        );
        let pair = Arc::new(IndexPair { offset, time });
        let bytes = pair.memory_bytes();
        let mut slot = s.lock_loaded();
        *slot = Some(pair);
        s.touch();
        s.cache.admit(s.id, s.me.clone(), bytes, false);
        drop(slot);
        s
    }

    fn lock_loaded(&self) -> MutexGuard<'_, Option<Arc<IndexPair>>> {
        self.loaded.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn touch(&self) {
        self.last_used.store(self.cache.tick.fetch_add(1, Ordering::Relaxed), Ordering::Relaxed);
    }

    pub(crate) fn entries(&self) -> (usize, usize) {
        self.entries
    }

    pub(crate) fn is_resident(&self) -> bool {
        self.lock_loaded().is_some()
    }

    /// The pair, loading it from the files if it is not resident.
    pub(crate) fn get(&self) -> Result<Arc<IndexPair>> {
        let mut slot = self.lock_loaded();
        self.touch();
        if let Some(p) = slot.as_ref() {
            return Ok(p.clone());
        }
        let pair = Arc::new(self.read()?);
        pair.offset.prefault_warm();
        pair.time.prefault_warm();
        self.cache.admit(self.id, self.me.clone(), pair.memory_bytes(), true);
        *slot = Some(pair.clone());
        Ok(pair)
    }

    fn read(&self) -> Result<IndexPair> {
        let arena = Some(&self.arena);
        let offset =
            OffsetIndex::load(arena, self.base_offset, self.index_file.clone(), self.max_index_bytes, self.limit)?;
        let time =
            TimeIndex::load(arena, self.base_offset, self.time_index_file.clone(), self.max_index_bytes, self.limit)?;
        Ok(IndexPair { offset, time })
    }

    /// Takes the pair out of the budget for a segment that becomes writable again: the resident
    /// pair if no reader holds it, else a fresh read of the files.
    pub(crate) fn take(&self) -> Result<IndexPair> {
        let taken = self.lock_loaded().take();
        self.cache.forget(self.id);
        match taken.map(Arc::try_unwrap) {
            Some(Ok(pair)) => Ok(pair),
            _ => self.read(),
        }
    }

    pub(crate) fn files(&self) -> (&Arc<dyn IoFile>, &Arc<dyn IoFile>) {
        (&self.index_file, &self.time_index_file)
    }
}

impl Drop for SealedIndexes {
    fn drop(&mut self) {
        self.cache.forget(self.id);
    }
}
