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
//! ([`OffsetIndex::pack`], [`OffsetIndex::load`]). [`OffsetIndex::prefault_warm`] keeps the warm
//! section (the last 8 KiB of entries, where tail lookups land) resident.

mod offset;
mod search;
mod time;

pub use offset::{OffsetIndex, OffsetPosition};
pub use search::{index_slot_range_for, SlotRange, WARM_SECTION_BYTES};
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
