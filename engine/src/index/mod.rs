//! Kafka's two sparse indexes for a segment: the offset index (`.index`, offset -> position) and
//! the time index (`.timeindex`, max timestamp so far -> offset), with Kafka's exact append,
//! lookup, truncate and sanity-check rules, and its two-zone ("warm section first") binary search.
//!
//! Entries live in memory, in Kafka's on-disk byte layout, so the bytes written to the file are
//! exactly the bytes searched. The file is written at flush points and at seal/close (an index is
//! rebuildable from the log, which is why Kafka keeps no checksum on it); while a segment is active
//! its index files are preallocated to `segment.index.bytes`, rounded down to the entry size, and
//! they are trimmed to their entries at seal and close.
//!
//! The memory is either the heap (a `Vec`, for tools, tests and indexes being rebuilt) or a slot
//! of the io layer's [`IndexArena`]: a growth slot of `segment.index.bytes` for an active index
//! (appends never reallocate), an exact-size packed slot for a sealed one
//! (`OffsetIndex::pack`, [`OffsetIndex::load`]). [`OffsetIndex::prefault_warm`] keeps the warm
//! section (the last 8 KiB of entries, where tail lookups land) resident.

/// The methods the offset index and the time index share: construction (empty and
/// preallocated, from file bytes, in an arena, loaded from a file), placement in the arena, and
/// the file-facing operations, all of which only depend on the entry size.
macro_rules! index_common {
    ($ty:ident, $entry_size:expr) => {
        impl $ty {
            /// A new, empty index whose file (if any) is preallocated to `max_index_bytes`
            /// rounded down to the entry size, as Kafka does for an active segment.
            pub fn create(base_offset: i64, max_index_bytes: u32, file: Option<Arc<dyn IoFile>>) -> Result<Self> {
                Ok($ty { base_offset, inner: IndexFile::create($entry_size, max_index_bytes, file)? })
            }

            /// An index from an index file's contents. As in Kafka, every whole entry in the file
            /// counts (`entries = length / entry size`): only a trimmed file gives the true count,
            /// which is why indexes are trimmed at seal and close and rebuilt after a crash.
            pub fn from_bytes(
                base_offset: i64,
                bytes: Vec<u8>,
                max_index_bytes: u32,
                file: Option<Arc<dyn IoFile>>,
            ) -> Self {
                $ty { base_offset, inner: IndexFile::from_heap_bytes(bytes, $entry_size, max_index_bytes, file) }
            }

            /// [`Self::create`] with the entries in a growth slot of `arena` holding
            /// `max_index_bytes`: appends never reallocate.
            pub(crate) fn create_in(
                arena: &IndexArena,
                base_offset: i64,
                max_index_bytes: u32,
                file: Option<Arc<dyn IoFile>>,
            ) -> Result<Self> {
                let mut idx = $ty::create(base_offset, max_index_bytes, file)?;
                idx.inner.reserve(arena);
                Ok(idx)
            }

            /// Reads an index file whole into an exact-size packed slot of `arena` (the heap when
            /// `arena` is `None`), as [`Self::from_bytes`] of its contents. A file longer than
            /// `limit` is refused.
            pub fn load(
                arena: Option<&IndexArena>,
                base_offset: i64,
                file: Arc<dyn IoFile>,
                max_index_bytes: u32,
                limit: u64,
            ) -> Result<Self> {
                let (bytes, file_len) = read_index_file(arena, &*file, $entry_size, limit)?;
                let inner = IndexFile::loaded(bytes, $entry_size, max_index_bytes, file_len, Some(file));
                Ok($ty { base_offset, inner })
            }

            /// Moves the entries to an exact-size packed slot of `arena` (a sealed index).
            pub(crate) fn pack(&mut self, arena: &IndexArena) {
                self.inner.pack(arena)
            }
            /// Moves the entries to a growth slot of `arena` with room for
            /// [`Self::max_entries`].
            pub(crate) fn reserve(&mut self, arena: &IndexArena) {
                self.inner.reserve(arena)
            }
            /// Makes the warm section (the last 8 KiB of entries) resident: after this, a lookup
            /// that lands there does not page-fault.
            pub fn prefault_warm(&self) {
                self.inner.bytes.prefault_warm($entry_size)
            }
            /// Where the entries are held.
            pub fn storage(&self) -> IndexStorage {
                self.inner.bytes.storage()
            }
            /// Bytes of memory the entries hold (a slot's capacity, or the `Vec`'s).
            pub(crate) fn memory_bytes(&self) -> usize {
                self.inner.bytes.memory_bytes()
            }
            // The crate reads an offset index's base, not a time index's (one macro for both).
            #[allow(dead_code)]
            pub(crate) fn base_offset(&self) -> i64 {
                self.base_offset
            }
            pub fn entries(&self) -> usize {
                self.inner.entries()
            }
            pub fn max_entries(&self) -> usize {
                self.inner.max_entries
            }
            /// The raw bytes of the valid entries, in Kafka's file layout.
            pub fn as_bytes(&self) -> &[u8] {
                self.inner.bytes.as_slice()
            }
            /// Removes every entry (Kafka's `reset`, used before a rebuild).
            pub(crate) fn reset(&mut self) -> Result<()> {
                self.inner.truncate_entries(0)
            }
            /// Writes pending entries to the file.
            pub(crate) fn flush(&mut self) -> Result<()> {
                self.inner.flush()
            }
            /// Trims the file to its entries (at seal and close).
            pub(crate) fn trim_to_valid_size(&mut self) -> Result<()> {
                self.inner.trim()
            }
            /// Sets the file length to `max_index_bytes` rounded down (preallocation for an
            /// active segment) and the entry cap with it (Kafka's `resize`).
            pub(crate) fn resize(&mut self, max_index_bytes: u32) -> Result<()> {
                self.inner.set_capacity(max_index_bytes)
            }
            /// Replaces the backing file (after a rename).
            pub(crate) fn set_file(&mut self, file: Option<Arc<dyn IoFile>>) {
                self.inner.set_file(file)
            }
            pub(crate) fn file(&self) -> Option<&Arc<dyn IoFile>> {
                self.inner.file.as_ref()
            }
        }
    };
}

mod offset;
mod search;
mod time;

pub use offset::{OffsetIndex, OffsetPosition};
pub(crate) use search::WARM_SECTION_BYTES;
pub use search::{index_slot_range_for, SlotRange};
pub use time::{TimeIndex, TimestampOffset};

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::format::index_entry::round_down;
use crate::io::{ArenaSlice, IndexArena, IoFile, PageBacking};

/// Where an index's entries are held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IndexStorage {
    /// A `Vec` on the heap.
    Heap,
    /// A slot of an [`IndexArena`]; the backing of its region (`None` for an empty slot).
    Arena(Option<PageBacking>),
}

/// An index's entry bytes, on the heap or in an arena slot.
#[derive(Debug)]
pub(crate) enum IndexBytes {
    Heap(Vec<u8>),
    /// `len` valid bytes at the start of `slot`.
    Arena {
        slot: ArenaSlice,
        len: usize,
    },
}

impl IndexBytes {
    #[inline]
    pub(crate) fn as_slice(&self) -> &[u8] {
        match self {
            IndexBytes::Heap(v) => v,
            IndexBytes::Arena { slot, len } => &slot.as_slice()[..*len],
        }
    }
    pub(crate) fn len(&self) -> usize {
        match self {
            IndexBytes::Heap(v) => v.len(),
            IndexBytes::Arena { len, .. } => *len,
        }
    }
    /// Appends bytes. An arena slot that is too small (it never is for an active index, whose
    /// slot holds `segment.index.bytes`) moves the entries to the heap rather than fail.
    pub(crate) fn extend(&mut self, b: &[u8]) {
        match self {
            IndexBytes::Heap(v) => v.extend_from_slice(b),
            IndexBytes::Arena { slot, len } if *len + b.len() <= slot.capacity() => {
                slot.as_mut_slice()[*len..*len + b.len()].copy_from_slice(b);
                *len += b.len();
            }
            IndexBytes::Arena { .. } => {
                let mut v = Vec::with_capacity(self.len() + b.len());
                v.extend_from_slice(self.as_slice());
                v.extend_from_slice(b);
                *self = IndexBytes::Heap(v);
            }
        }
    }
    pub(crate) fn truncate(&mut self, n: usize) {
        match self {
            IndexBytes::Heap(v) => v.truncate(n),
            IndexBytes::Arena { len, .. } => *len = (*len).min(n),
        }
    }
    /// Bytes of memory held (a slot's whole capacity).
    pub(crate) fn memory_bytes(&self) -> usize {
        match self {
            IndexBytes::Heap(v) => v.capacity(),
            IndexBytes::Arena { slot, .. } => slot.capacity(),
        }
    }
    pub(crate) fn storage(&self) -> IndexStorage {
        match self {
            IndexBytes::Heap(_) => IndexStorage::Heap,
            IndexBytes::Arena { slot, .. } => IndexStorage::Arena(slot.backing()),
        }
    }
    /// Copies the entries into a slot of `capacity` bytes (packed: exact size; growth: room to
    /// append). If the arena cannot map memory the entries stay where they are.
    pub(crate) fn move_to_arena(&mut self, arena: &IndexArena, capacity: usize, packed: bool) {
        let len = self.len();
        let capacity = if packed { len } else { capacity.max(len) };
        if let IndexBytes::Arena { slot, .. } = self {
            let fits = if packed {
                slot.capacity() >= len && slot.capacity() < len + crate::io::arena::PACKED_ALIGN
            } else {
                slot.capacity() >= capacity
            };
            if fits {
                return;
            }
        }
        let slot = if packed { arena.alloc_packed(capacity) } else { arena.alloc_growth(capacity) };
        if let Ok(mut slot) = slot {
            slot.as_mut_slice()[..len].copy_from_slice(self.as_slice());
            *self = IndexBytes::Arena { slot, len };
        }
    }
    /// The warm section (the last `WARM_SECTION_BYTES` of entries, whole entries) made resident.
    pub(crate) fn prefault_warm(&self, entry_size: usize) {
        if let IndexBytes::Arena { slot, len } = self {
            let warm = WARM_SECTION_BYTES / entry_size * entry_size;
            slot.prefault(len.saturating_sub(warm)..*len);
        }
    }
}

/// Reads a whole index file into an exact-size slot of `arena` (the heap if `arena` is `None` or
/// cannot map memory). Returns the bytes (whole entries only) and the file's length.
pub(crate) fn read_index_file(
    arena: Option<&IndexArena>,
    file: &dyn IoFile,
    entry_size: usize,
    limit: u64,
) -> Result<(IndexBytes, u64)> {
    let file_len = file.len()?;
    if file_len > limit {
        return Err(Error::CorruptIndex {
            path: file.path().to_path_buf(),
            detail: format!("index file is {file_len} bytes, more than segment.index.bytes allows ({limit})"),
        });
    }
    let len = round_down(file_len, entry_size as u64) as usize;
    if let Some(Ok(mut slot)) = arena.map(|a| a.alloc_packed(len)) {
        file.read_exact_at(&mut slot.as_mut_slice()[..len], 0)?;
        return Ok((IndexBytes::Arena { slot, len }, file_len));
    }
    let mut v = vec![0u8; len];
    file.read_exact_at(&mut v, 0)?;
    Ok((IndexBytes::Heap(v), file_len))
}

/// Shared bookkeeping of an index buffer and its file.
#[derive(Debug)]
pub(crate) struct IndexFile {
    /// Valid entries, in file layout (`entries * entry_size` bytes).
    pub(crate) bytes: IndexBytes,
    pub(crate) entry_size: usize,
    /// Maximum entries (file size cap / entry size).
    pub(crate) max_entries: usize,
    /// The file, if this index is backed by one.
    pub(crate) file: Option<Arc<dyn IoFile>>,
    /// How many leading entries are known to be on disk.
    pub(crate) flushed_entries: usize,
    /// The length the file has now.
    pub(crate) file_len: u64,
}

impl IndexFile {
    /// The index file's path, for messages (`<memory>` for an index without a file).
    pub(crate) fn path_buf(&self) -> std::path::PathBuf {
        self.file.as_ref().map(|f| f.path().to_path_buf()).unwrap_or_else(|| "<memory>".into())
    }

    pub(crate) fn entries(&self) -> usize {
        self.bytes.len() / self.entry_size
    }

    /// An index of whole entries in `bytes` (already rounded down), read from a file of
    /// `file_len` bytes, capped at `max_index_bytes` rounded down (or the entries, if more).
    pub(crate) fn loaded(
        bytes: IndexBytes,
        entry_size: usize,
        max_index_bytes: u32,
        file_len: u64,
        file: Option<Arc<dyn IoFile>>,
    ) -> IndexFile {
        let cap = round_down(max_index_bytes as u64, entry_size as u64).max(bytes.len() as u64);
        let entries = bytes.len() / entry_size;
        IndexFile {
            bytes,
            entry_size,
            max_entries: (cap / entry_size as u64) as usize,
            file,
            flushed_entries: entries,
            file_len,
        }
    }

    /// Moves the entries to an exact-size packed slot of `arena` (a sealed index).
    /// An empty index file with room for `max_index_bytes` (rounded down to the entry size),
    /// its file (if any) preallocated to that length.
    pub(crate) fn create(entry_size: usize, max_index_bytes: u32, file: Option<Arc<dyn IoFile>>) -> Result<IndexFile> {
        let cap = round_down(max_index_bytes as u64, entry_size as u64);
        let mut inner = IndexFile {
            bytes: IndexBytes::Heap(Vec::new()),
            entry_size,
            max_entries: (cap / entry_size as u64) as usize,
            file,
            flushed_entries: 0,
            file_len: 0,
        };
        inner.resize_file(cap)?;
        Ok(inner)
    }

    /// An index file from its contents held on the heap (whole entries only).
    pub(crate) fn from_heap_bytes(
        mut bytes: Vec<u8>,
        entry_size: usize,
        max_index_bytes: u32,
        file: Option<Arc<dyn IoFile>>,
    ) -> IndexFile {
        let file_len = bytes.len() as u64;
        bytes.truncate(round_down(bytes.len() as u64, entry_size as u64) as usize);
        IndexFile::loaded(IndexBytes::Heap(bytes), entry_size, max_index_bytes, file_len, file)
    }

    /// Kafka's `resize`: the entry cap becomes `max_index_bytes` rounded down to the entry size,
    /// and the file that length (never shorter than its entries).
    pub(crate) fn set_capacity(&mut self, max_index_bytes: u32) -> Result<()> {
        let cap = round_down(max_index_bytes as u64, self.entry_size as u64);
        self.max_entries = (cap / self.entry_size as u64) as usize;
        self.resize_file(cap.max((self.entries() * self.entry_size) as u64))
    }

    /// Replaces the backing file (after a rename), taking its length.
    pub(crate) fn set_file(&mut self, file: Option<Arc<dyn IoFile>>) {
        if let Some(f) = &file {
            self.file_len = f.len().unwrap_or(self.file_len);
        }
        self.file = file;
    }

    pub(crate) fn pack(&mut self, arena: &IndexArena) {
        self.bytes.move_to_arena(arena, 0, true);
    }

    /// Moves the entries to a growth slot with room for `max_entries` (an active index).
    pub(crate) fn reserve(&mut self, arena: &IndexArena) {
        self.bytes.move_to_arena(arena, self.max_entries * self.entry_size, false);
    }

    /// Writes entries not yet in the file.
    pub(crate) fn flush(&mut self) -> Result<()> {
        let n = self.entries();
        if let Some(f) = &self.file {
            if self.flushed_entries < n {
                let from = self.flushed_entries * self.entry_size;
                f.write_all_at(&self.bytes.as_slice()[from..], from as u64)?;
                let end = (n * self.entry_size) as u64;
                if end > self.file_len {
                    self.file_len = end;
                }
            }
        }
        self.flushed_entries = n;
        Ok(())
    }

    /// Sets the file's length (Kafka's `resize`), writing pending entries first.
    pub(crate) fn resize_file(&mut self, len: u64) -> Result<()> {
        self.flush()?;
        if let Some(f) = &self.file {
            if self.file_len != len {
                f.set_len(len)?;
                self.file_len = len;
            }
        }
        Ok(())
    }

    /// Trims the file to its entries (Kafka's `trimToValidSize`).
    pub(crate) fn trim(&mut self) -> Result<()> {
        let len = (self.entries() * self.entry_size) as u64;
        self.resize_file(len)
    }

    /// Keeps the first `n` entries. On disk, bytes past them are zeroed (truncate, then restore
    /// the length), so a stale entry can never reappear.
    pub(crate) fn truncate_entries(&mut self, n: usize) -> Result<()> {
        if n >= self.entries() {
            return Ok(());
        }
        self.bytes.truncate(n * self.entry_size);
        if self.flushed_entries > n {
            self.flushed_entries = n;
            if let Some(f) = &self.file {
                let len = self.file_len;
                f.set_len((n * self.entry_size) as u64)?;
                f.set_len(len)?;
            }
        }
        Ok(())
    }
}
