//! Walking a `.log` file batch by batch, with Kafka's `FileLogInputStream` rules:
//! stop when fewer than 17 bytes remain; an entry whose size field is below 14 is corrupt; stop
//! (a partial batch, not an error) when the entry runs past the end; anything but magic 2 is
//! refused. Headers are read through a window buffer, so a walk costs one read per window, not
//! one per batch header (phase 2 of a lookup reads 61-byte headers and jumps `12 + batchLength`).

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::format::batch::{
    BatchHeader, EntryFrame, BATCH_HEADER_SIZE, HEADER_SIZE_UP_TO_MAGIC, LOG_OVERHEAD, MAGIC_V2, RECORD_OVERHEAD_V0,
};
use crate::format::FormatError;
use crate::io::IoFile;

/// Largest window for header walks: one read covers several batch headers of small batches.
pub const SCAN_WINDOW_BYTES: usize = 64 * 1024;
/// The first read of a walk: most lookups land on or next to their batch, so start small (a
/// few headers' worth) and double the window on each refill up to the maximum.
pub const FIRST_READ_BYTES: usize = 512;

/// A batch found by a walk: where it starts, its header, its size on disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScannedBatch {
    pub position: u32,
    pub header: BatchHeader,
}

impl ScannedBatch {
    pub fn size(&self) -> u32 {
        self.header.size_in_bytes() as u32
    }
    pub fn end(&self) -> u32 {
        self.position + self.size()
    }
    pub fn last_offset(&self) -> i64 {
        self.header.last_offset()
    }
}

/// Iterates batch headers of `file` in `[start, end)`.
#[derive(Debug)]
pub struct BatchScanner {
    file: Arc<dyn IoFile>,
    pos: u64,
    end: u64,
    buf: Vec<u8>,
    buf_start: u64,
    buf_len: usize,
    max_window: usize,
    next_window: usize,
    /// Header reads that went to the file (for index reports and benchmarks).
    pub reads: u64,
    /// Batches stepped over.
    pub hops: u64,
}

impl BatchScanner {
    pub fn new(file: Arc<dyn IoFile>, start: u32, end: u32) -> Self {
        BatchScanner::with_window(file, start, end, SCAN_WINDOW_BYTES)
    }

    pub fn with_window(file: Arc<dyn IoFile>, start: u32, end: u32, window: usize) -> Self {
        BatchScanner {
            file,
            pos: start as u64,
            end: end as u64,
            buf: Vec::new(),
            buf_start: 0,
            buf_len: 0,
            max_window: window.max(BATCH_HEADER_SIZE),
            next_window: FIRST_READ_BYTES.min(window).max(BATCH_HEADER_SIZE),
            reads: 0,
            hops: 0,
        }
    }

    /// The position of the next batch to be read.
    pub fn position(&self) -> u32 {
        self.pos as u32
    }

    /// Reads `len` bytes at `pos` through the window.
    fn window(&mut self, pos: u64, len: usize) -> Result<&[u8]> {
        let in_buf = pos >= self.buf_start && pos + len as u64 <= self.buf_start + self.buf_len as u64;
        if !in_buf {
            let want = ((self.end - pos) as usize).min(self.next_window).max(len);
            self.next_window = (self.next_window * 2).min(self.max_window);
            if self.buf.len() < want {
                self.buf.resize(want, 0);
            }
            let mut got = 0;
            while got < want {
                let n = self.file.read_at(&mut self.buf[got..want], pos + got as u64)?;
                if n == 0 {
                    break;
                }
                got += n;
            }
            self.reads += 1;
            self.buf_start = pos;
            self.buf_len = got;
            if got < len {
                return Err(Error::Corrupt {
                    path: self.file.path().to_path_buf(),
                    pos,
                    source: FormatError::Truncated { needed: len as u64, available: got as u64 },
                });
            }
        }
        let off = (pos - self.buf_start) as usize;
        Ok(&self.buf[off..off + len])
    }

    /// The next batch, `Ok(None)` at the end of valid data (including a partial trailing batch,
    /// as Kafka stops there), or an error naming the file and position of a corrupt entry.
    pub fn next_batch(&mut self) -> Result<Option<ScannedBatch>> {
        if self.end < HEADER_SIZE_UP_TO_MAGIC as u64 || self.pos >= self.end - HEADER_SIZE_UP_TO_MAGIC as u64 {
            return Ok(None);
        }
        let pos = self.pos;
        // The path is copied only when there is an error to report.
        let file = self.file.clone();
        let corrupt = move |source: FormatError| Error::Corrupt { path: file.path().to_path_buf(), pos, source };
        let frame = EntryFrame::parse(self.window(pos, HEADER_SIZE_UP_TO_MAGIC)?).map_err(&corrupt)?;
        if frame.size < RECORD_OVERHEAD_V0 as i64 + LOG_OVERHEAD as i64 {
            return Err(corrupt(FormatError::BatchTooSmall {
                size: frame.size - LOG_OVERHEAD as i64,
                min: RECORD_OVERHEAD_V0 as i64,
            }));
        }
        if pos as i64 > self.end as i64 - frame.size {
            return Ok(None); // partial batch at the end
        }
        if frame.magic != MAGIC_V2 {
            return Err(corrupt(FormatError::UnsupportedMagic { magic: frame.magic }));
        }
        let header = BatchHeader::parse(self.window(pos, BATCH_HEADER_SIZE)?).map_err(&corrupt)?;
        self.pos = pos + frame.size as u64;
        self.hops += 1;
        Ok(Some(ScannedBatch { position: pos as u32, header }))
    }

    /// Reads a whole batch's bytes (for CRC checks and record-level scans).
    pub fn read_batch(&self, b: &ScannedBatch, out: &mut Vec<u8>) -> Result<()> {
        out.clear();
        out.resize(b.size() as usize, 0);
        self.file.read_exact_at(out, b.position as u64)
    }
}
