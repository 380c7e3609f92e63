//! The offset index (`.index`): sparse `offset -> position` entries, Kafka's `OffsetIndex`.

use std::path::Path;
use std::sync::Arc;

use super::{index_slot_range_for, read_index_file, IndexBytes, IndexFile, IndexStorage, WARM_SECTION_BYTES};
use crate::error::{Error, Result};
use crate::format::index_entry::{round_down, OffsetEntry, OFFSET_ENTRY_SIZE};
use crate::io::{IndexArena, IoFile};

const WARM_ENTRIES: usize = WARM_SECTION_BYTES / OFFSET_ENTRY_SIZE;

/// The relative offset of entry `slot` (only the 4 bytes a search compares).
#[inline(always)]
fn rel_offset_at(b: &[u8], slot: usize) -> i64 {
    let at = slot * OFFSET_ENTRY_SIZE;
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    i32::from_be_bytes(a) as i64
}

/// An absolute offset and the file position of the batch an index entry points at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OffsetPosition {
    pub offset: i64,
    pub position: u32,
}

/// A segment's offset index.
#[derive(Debug)]
pub struct OffsetIndex {
    base_offset: i64,
    inner: IndexFile,
}

impl OffsetIndex {
    /// A new, empty index whose file (if any) is preallocated to `max_index_bytes` rounded down
    /// to 8, as Kafka does for an active segment.
    pub fn create(base_offset: i64, max_index_bytes: u32, file: Option<Arc<dyn IoFile>>) -> Result<Self> {
        let cap = round_down(max_index_bytes as u64, OFFSET_ENTRY_SIZE as u64);
        let mut inner = IndexFile {
            bytes: IndexBytes::Heap(Vec::new()),
            entry_size: OFFSET_ENTRY_SIZE,
            max_entries: (cap / OFFSET_ENTRY_SIZE as u64) as usize,
            file,
            flushed_entries: 0,
            file_len: 0,
        };
        inner.resize_file(cap)?;
        Ok(OffsetIndex { base_offset, inner })
    }

    /// An index from existing bytes (an index file's contents). As in Kafka, every whole entry
    /// in the file counts (`entries = length / 8`): only a trimmed file gives the true count,
    /// which is why indexes are trimmed at seal and close and rebuilt after a crash.
    pub fn from_bytes(
        base_offset: i64,
        mut bytes: Vec<u8>,
        max_index_bytes: u32,
        file: Option<Arc<dyn IoFile>>,
    ) -> Self {
        let file_len = bytes.len() as u64;
        bytes.truncate(round_down(bytes.len() as u64, OFFSET_ENTRY_SIZE as u64) as usize);
        let inner = IndexFile::loaded(IndexBytes::Heap(bytes), OFFSET_ENTRY_SIZE, max_index_bytes, file_len, file);
        OffsetIndex { base_offset, inner }
    }

    /// [`OffsetIndex::create`] with the entries in a growth slot of `arena` holding
    /// `max_index_bytes`: appends never reallocate.
    pub fn create_in(
        arena: &IndexArena,
        base_offset: i64,
        max_index_bytes: u32,
        file: Option<Arc<dyn IoFile>>,
    ) -> Result<Self> {
        let mut idx = OffsetIndex::create(base_offset, max_index_bytes, file)?;
        idx.inner.reserve(arena);
        Ok(idx)
    }

    /// Reads an index file whole into an exact-size packed slot of `arena` (the heap when
    /// `arena` is `None`), as [`OffsetIndex::from_bytes`] of its contents. A file longer than
    /// `limit` is refused.
    pub fn load(
        arena: Option<&IndexArena>,
        base_offset: i64,
        file: Arc<dyn IoFile>,
        max_index_bytes: u32,
        limit: u64,
    ) -> Result<Self> {
        let (bytes, file_len) = read_index_file(arena, &*file, OFFSET_ENTRY_SIZE, limit)?;
        let inner = IndexFile::loaded(bytes, OFFSET_ENTRY_SIZE, max_index_bytes, file_len, Some(file));
        Ok(OffsetIndex { base_offset, inner })
    }

    /// Moves the entries to an exact-size packed slot of `arena` (a sealed index).
    pub fn pack(&mut self, arena: &IndexArena) {
        self.inner.pack(arena)
    }

    /// Moves the entries to a growth slot of `arena` with room for [`OffsetIndex::max_entries`].
    pub fn reserve(&mut self, arena: &IndexArena) {
        self.inner.reserve(arena)
    }

    /// Makes the warm section (the last 8 KiB of entries) resident: after this, a lookup that
    /// lands there does not page-fault.
    pub fn prefault_warm(&self) {
        self.inner.bytes.prefault_warm(OFFSET_ENTRY_SIZE)
    }

    /// Where the entries are held.
    pub fn storage(&self) -> IndexStorage {
        self.inner.bytes.storage()
    }

    /// Bytes of memory the entries hold (a slot's capacity, or the `Vec`'s).
    pub fn memory_bytes(&self) -> usize {
        self.inner.bytes.memory_bytes()
    }

    pub fn base_offset(&self) -> i64 {
        self.base_offset
    }
    pub fn entries(&self) -> usize {
        self.inner.entries()
    }
    pub fn max_entries(&self) -> usize {
        self.inner.max_entries
    }
    /// Kafka's `isFull`.
    pub fn is_full(&self) -> bool {
        self.entries() >= self.inner.max_entries
    }
    /// The raw bytes of the valid entries, in Kafka's file layout.
    pub fn as_bytes(&self) -> &[u8] {
        self.inner.bytes.as_slice()
    }

    /// Entry `slot`, made absolute.
    #[inline]
    pub fn entry(&self, slot: usize) -> OffsetPosition {
        let e = OffsetEntry::decode(self.inner.bytes.as_slice(), slot);
        OffsetPosition {
            offset: self.base_offset.saturating_add(e.relative_offset as i64),
            position: e.position as u32,
        }
    }

    /// The last entry, or `(base_offset, 0)` when empty.
    pub fn last_entry(&self) -> OffsetPosition {
        match self.entries() {
            0 => OffsetPosition { offset: self.base_offset, position: 0 },
            n => self.entry(n - 1),
        }
    }

    /// Kafka's `canAppendOffset`: the offset must fit in a relative i32.
    pub fn can_append_offset(&self, offset: i64) -> bool {
        let rel = offset - self.base_offset;
        (0..=i32::MAX as i64).contains(&rel)
    }

    /// Appends `(offset, position)`. Kafka's rule: the index must not be full and the offset must
    /// be larger than the last entry's; violations are bugs in the caller.
    pub fn append(&mut self, offset: i64, position: u32) -> Result<()> {
        if self.is_full() {
            return Err(Error::CorruptIndex {
                path: self.path_buf(),
                detail: format!("append of offset {offset} to a full index ({} entries)", self.entries()),
            });
        }
        if self.entries() > 0 && offset <= self.last_entry().offset {
            return Err(Error::CorruptIndex {
                path: self.path_buf(),
                detail: format!(
                    "append of offset {offset} at position {position} is not larger than the last entry {}",
                    self.last_entry().offset
                ),
            });
        }
        if !self.can_append_offset(offset) {
            return Err(Error::CorruptIndex {
                path: self.path_buf(),
                detail: format!("offset {offset} does not fit relative to base {}", self.base_offset),
            });
        }
        let e = OffsetEntry { relative_offset: (offset - self.base_offset) as i32, position: position as i32 };
        self.inner.bytes.extend(&e.encode());
        Ok(())
    }

    /// Kafka's `lookup`: the largest entry with offset `<= target`, or `(base_offset, 0)`.
    #[inline]
    pub fn lookup(&self, target: i64) -> OffsetPosition {
        let b = self.inner.bytes.as_slice();
        let base = self.base_offset;
        // Compared in relative terms (`base + rel <= target` is `rel <= target - base`, and a
        // saturated difference keeps the order), so a probe is a load and a compare; the entry
        // count comes from the constant entry size (a shift, not a division).
        let rel_target = target.saturating_sub(base);
        let r = index_slot_range_for(b.len() / OFFSET_ENTRY_SIZE, WARM_ENTRIES, rel_target, |i| rel_offset_at(b, i));
        if r.lower < 0 {
            OffsetPosition { offset: base, position: 0 }
        } else {
            self.entry(r.lower as usize)
        }
    }

    /// Kafka's `truncateTo`: removes entries with offset `>= offset`.
    pub fn truncate_to(&mut self, offset: i64) -> Result<()> {
        let b = self.inner.bytes.as_slice();
        let base = self.base_offset;
        let r = index_slot_range_for(self.entries(), WARM_ENTRIES, offset, |i| {
            base.saturating_add(OffsetEntry::decode(b, i).relative_offset as i64)
        });
        let keep = if r.lower < 0 {
            0
        } else if self.entry(r.lower as usize).offset == offset {
            r.lower as usize
        } else {
            r.lower as usize + 1
        };
        self.inner.truncate_entries(keep)
    }

    /// Removes every entry (Kafka's `reset`, used before a rebuild).
    pub fn reset(&mut self) -> Result<()> {
        self.inner.truncate_entries(0)
    }

    /// Kafka's `sanityCheck`: the last offset must not be below the base and the file length
    /// must be a multiple of 8.
    pub fn sanity_check(&self) -> std::result::Result<(), String> {
        if !self.inner.file_len.is_multiple_of(OFFSET_ENTRY_SIZE as u64) {
            return Err(format!("index file size {} is not a multiple of {OFFSET_ENTRY_SIZE}", self.inner.file_len));
        }
        if self.entries() > 0 && self.last_entry().offset < self.base_offset {
            return Err(format!(
                "last offset {} is below the base offset {}",
                self.last_entry().offset,
                self.base_offset
            ));
        }
        Ok(())
    }

    /// Writes pending entries to the file.
    pub fn flush(&mut self) -> Result<()> {
        self.inner.flush()
    }
    /// Trims the file to its entries (at seal and close).
    pub fn trim_to_valid_size(&mut self) -> Result<()> {
        self.inner.trim()
    }
    /// Sets the file length to `max_index_bytes` rounded down (preallocation for an active
    /// segment) and raises the entry cap accordingly.
    pub fn resize(&mut self, max_index_bytes: u32) -> Result<()> {
        let cap = round_down(max_index_bytes as u64, OFFSET_ENTRY_SIZE as u64);
        self.inner.max_entries = (cap / OFFSET_ENTRY_SIZE as u64) as usize;
        self.inner.resize_file(cap.max((self.entries() * OFFSET_ENTRY_SIZE) as u64))
    }
    /// Replaces the backing file (after a rename).
    pub fn set_file(&mut self, file: Option<Arc<dyn IoFile>>) {
        if let Some(f) = &file {
            self.inner.file_len = f.len().unwrap_or(self.inner.file_len);
        }
        self.inner.file = file;
    }
    pub fn file(&self) -> Option<&Arc<dyn IoFile>> {
        self.inner.file.as_ref()
    }

    fn path_buf(&self) -> std::path::PathBuf {
        self.inner.file.as_ref().map(|f| f.path().to_path_buf()).unwrap_or_else(|| Path::new("<memory>").to_path_buf())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kafka_lookup_and_truncate_rules() {
        let mut idx = OffsetIndex::create(316, 1024, None).unwrap();
        idx.append(473, 16350).unwrap();
        idx.append(552, 32700).unwrap();
        idx.append(631, 49050).unwrap();
        assert!(idx.append(631, 50000).is_err(), "offsets must grow");
        assert_eq!(idx.lookup(300), OffsetPosition { offset: 316, position: 0 });
        assert_eq!(idx.lookup(472), OffsetPosition { offset: 316, position: 0 });
        assert_eq!(idx.lookup(473).position, 16350);
        assert_eq!(idx.lookup(551).position, 16350);
        assert_eq!(idx.lookup(10_000).position, 49050);
        assert_eq!(&idx.as_bytes()[..8], &[0, 0, 0, 0x9d, 0, 0, 0x3f, 0xde]);
        idx.truncate_to(552).unwrap(); // exact match drops it and what follows
        assert_eq!(idx.entries(), 1);
        idx.truncate_to(500).unwrap(); // between entries keeps slot + 1
        assert_eq!(idx.entries(), 1);
        idx.truncate_to(400).unwrap(); // below every entry empties it
        assert_eq!(idx.entries(), 0);
    }

    #[test]
    fn full_index_refuses() {
        let mut idx = OffsetIndex::create(0, 16, None).unwrap();
        idx.append(1, 10).unwrap();
        idx.append(2, 20).unwrap();
        assert!(idx.is_full());
        assert!(idx.append(3, 30).is_err());
    }
}
