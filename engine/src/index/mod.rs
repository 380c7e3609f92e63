//! Kafka's two sparse indexes for a segment: the offset index (`.index`, offset -> position) and
//! the time index (`.timeindex`, max timestamp so far -> offset), with Kafka's exact append,
//! lookup, truncate and sanity-check rules, and its two-zone ("warm section first") binary search.
//!
//! Entries live in memory, in Kafka's on-disk byte layout, so the bytes written to the file are
//! exactly the bytes searched. The file is written at flush points and at seal/close (an index is
//! rebuildable from the log, which is why Kafka keeps no checksum on it); while a segment is active
//! its index files are preallocated to `segment.index.bytes`, rounded down to the entry size, and
//! they are trimmed to their entries at seal and close.

mod offset;
mod search;
mod time;

pub use offset::{OffsetIndex, OffsetPosition};
pub use search::{index_slot_range_for, SlotRange, WARM_SECTION_BYTES};
pub use time::{TimeIndex, TimestampOffset};

use std::sync::Arc;

use crate::error::Result;
use crate::io::IoFile;

/// Shared bookkeeping of an index buffer and its file.
#[derive(Debug)]
pub(crate) struct IndexFile {
    /// Valid entries, in file layout (`entries * entry_size` bytes).
    pub(crate) bytes: Vec<u8>,
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

    /// Writes entries not yet in the file.
    pub(crate) fn flush(&mut self) -> Result<()> {
        let n = self.entries();
        if let Some(f) = &self.file {
            if self.flushed_entries < n {
                let from = self.flushed_entries * self.entry_size;
                f.write_all_at(&self.bytes[from..], from as u64)?;
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
