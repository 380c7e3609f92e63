//! Walking a `.log` file batch by batch for the tools, read-only, with Kafka's framing rules as
//! the engine applies them (`seglog::format::batch`): [`EntryFrame::parse`] reads an entry's
//! frame, [`check_frame`] says whether it is a whole batch, a partial (torn) one or a corrupt one,
//! [`BatchHeader::parse`] refuses a v2 batch smaller than its header. Unlike the engine's
//! `BatchScanner`, which stops quietly at a partial batch as Kafka's reader does, this walker says
//! how the file ends, because the tools must report a torn tail with its position. Kafka stops
//! before reading a frame when 17 bytes or fewer are left (no batch fits); with exactly 17 left
//! the walker still reads the frame, to say what the tail is. What it reads is the engine's
//! framing over `std::fs::File` and `u64` positions, so it also walks files the engine refuses to
//! open (larger than 2 GiB).
//!
//! Every batch is read whole (up to [`MAX_BATCH_IN_MEMORY`]; a larger one in bounded chunks,
//! through the engine's [`BatchCrc`]) and its CRC-32C checked; a batch whose CRC fails is reported
//! and the walk goes on (the framing is still usable), as kafka-dump-log prints `isvalid: false`
//! and goes on. Nothing here writes.
//!
//! Memory is bounded whatever a file holds: a walk keeps a read-ahead window, and a summary of a
//! whole log ([`LogSummary`]) keeps a table of at most [`BATCH_TABLE_ENTRIES`] batch positions, not
//! a list of every batch.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use seglog::format::batch::{
    check_frame, compute_crc, BatchCrc, BatchHeader, EntryFrame, FrameCheck, BATCH_HEADER_SIZE,
    HEADER_SIZE_UP_TO_MAGIC, LOG_OVERHEAD, RECORD_OVERHEAD_V0,
};
use seglog::format::FormatError;

/// Bytes read ahead in one `pread`: many small batches per system call.
const WINDOW_BYTES: usize = 1 << 20;

/// One batch found by the walk.
#[derive(Clone, Copy, Debug)]
pub struct BatchInfo {
    /// Byte position of the batch in the file.
    pub position: u64,
    pub header: BatchHeader,
    /// The CRC-32C computed over bytes `[21, end)`.
    pub computed_crc: u32,
}

impl BatchInfo {
    pub fn size(&self) -> u64 {
        self.header.size_in_bytes() as u64
    }
    pub fn crc_ok(&self) -> bool {
        self.computed_crc == self.header.crc
    }
    pub fn last_offset(&self) -> i64 {
        self.header.last_offset()
    }
}

/// How the walk ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LogEnd {
    /// Every byte of the file (or of the `--max-bytes` slice) belongs to a whole batch.
    Clean,
    /// Fewer than 17 bytes remain after the last batch: not even a frame (torn tail).
    ShortTail { position: u64, bytes: u64 },
    /// The last entry's length runs past the end of the file (torn tail).
    PartialBatch { position: u64, needed: u64, available: u64 },
    /// Only zero bytes from `position` to the end: what a crash leaves in a preallocated or
    /// extended file (torn tail).
    ZeroTail { position: u64, bytes: u64 },
    /// An entry Kafka's reader refuses (length below 14, magic other than 2, a header that does
    /// not parse); nothing after it can be framed.
    Corrupt { position: u64, bytes: u64, detail: String },
    /// The walk was limited (`--max-bytes`): what follows was not looked at.
    Limited { position: u64 },
}

impl LogEnd {
    /// The byte position where valid data ends, if the file does not end cleanly.
    pub fn problem_position(&self) -> Option<u64> {
        match self {
            LogEnd::Clean | LogEnd::Limited { .. } => None,
            LogEnd::ShortTail { position, .. }
            | LogEnd::PartialBatch { position, .. }
            | LogEnd::ZeroTail { position, .. }
            | LogEnd::Corrupt { position, .. } => Some(*position),
        }
    }

    /// Bytes after the last whole batch that are not a batch.
    pub fn invalid_bytes(&self) -> u64 {
        match self {
            LogEnd::Clean | LogEnd::Limited { .. } => 0,
            LogEnd::ShortTail { bytes, .. } | LogEnd::ZeroTail { bytes, .. } | LogEnd::Corrupt { bytes, .. } => *bytes,
            LogEnd::PartialBatch { available, .. } => *available,
        }
    }

    /// One line for humans.
    pub fn describe(&self) -> String {
        match self {
            LogEnd::Clean => "clean end".into(),
            LogEnd::Limited { position } => format!("stopped at byte {position} (--max-bytes)"),
            LogEnd::ShortTail { position, bytes } => {
                format!("torn tail at byte {position}: {bytes} trailing bytes, fewer than a batch frame (17)")
            }
            LogEnd::PartialBatch { position, needed, available } => {
                format!("torn tail at byte {position}: partial batch of {available} bytes, its header says {needed}")
            }
            LogEnd::ZeroTail { position, bytes } => {
                format!("torn tail at byte {position}: {bytes} zero bytes (crash in preallocated or extended space)")
            }
            LogEnd::Corrupt { position, bytes, detail } => {
                format!("corrupt entry at byte {position} ({bytes} bytes to the end cannot be read): {detail}")
            }
        }
    }
}

/// Batches larger than this are checked (CRC-32C computed in bounded chunks) but not held in
/// memory whole: their records are not decoded. Kafka's default `max.message.bytes` is 1 MiB; a
/// batch this large in a segment file is almost certainly damage, and reading it whole would let
/// one hostile length field decide how much memory the tools take.
pub const MAX_BATCH_IN_MEMORY: u64 = 64 << 20;

/// Bytes read ahead by the lookups after a walk (see [`LogSummary`]): headers are small.
const LOOKUP_WINDOW_BYTES: usize = 64 << 10;

/// A batch and its bytes (`None` for a batch larger than [`MAX_BATCH_IN_MEMORY`]).
pub type Batch<'a> = (BatchInfo, Option<&'a [u8]>);

/// A read-only walk over one `.log` file. Memory is bounded whatever the file holds: a read-ahead
/// window, and one batch of at most [`MAX_BATCH_IN_MEMORY`] bytes.
#[derive(Debug)]
pub struct LogWalker {
    path: PathBuf,
    file: File,
    file_len: u64,
    end: u64,
    limited: bool,
    pos: u64,
    window: Vec<u8>,
    window_cap: usize,
    window_start: u64,
    window_len: usize,
    big: Vec<u8>,
    finished: Option<LogEnd>,
}

impl LogWalker {
    /// Opens `path` read-only (a regular file only: [`crate::files::open_regular`]);
    /// `max_bytes` limits the walk to batches wholly inside `[0, max_bytes)` (kafka-dump-log's
    /// `--max-bytes`).
    pub fn open(path: &Path, max_bytes: Option<u64>) -> std::io::Result<LogWalker> {
        let file = crate::files::open_regular(path)?;
        let file_len = file.metadata()?.len();
        let end = max_bytes.map_or(file_len, |m| m.min(file_len));
        Ok(LogWalker::over(path, file, file_len, 0, end, WINDOW_BYTES))
    }

    fn over(path: &Path, file: File, file_len: u64, start: u64, end: u64, window_cap: usize) -> LogWalker {
        LogWalker {
            path: path.to_path_buf(),
            file,
            file_len,
            end,
            limited: end < file_len,
            pos: start,
            window: Vec::new(),
            window_cap,
            window_start: 0,
            window_len: 0,
            big: Vec::new(),
            finished: None,
        }
    }

    pub fn file_len(&self) -> u64 {
        self.file_len
    }
    /// Where the next batch would start.
    pub fn position(&self) -> u64 {
        self.pos
    }

    /// Starts the walk again at `pos`, which must be where a batch starts.
    fn seek(&mut self, pos: u64) {
        self.pos = pos;
        self.finished = None;
    }

    fn shrank(&self, pos: u64) -> std::io::Error {
        std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            format!("{}: file shrank while reading at byte {pos}", self.path.display()),
        )
    }

    /// Reads `len` bytes at `pos` (which the caller checked lie before `end`); `len` is at most
    /// [`MAX_BATCH_IN_MEMORY`].
    fn bytes(&mut self, pos: u64, len: usize) -> std::io::Result<&[u8]> {
        let inside = pos >= self.window_start && pos + len as u64 <= self.window_start + self.window_len as u64;
        if !inside {
            if len > self.window_cap {
                self.big.resize(len, 0);
                self.file.read_exact_at(&mut self.big, pos).map_err(|e| match e.kind() {
                    std::io::ErrorKind::UnexpectedEof => self.shrank(pos),
                    _ => e,
                })?;
                return Ok(&self.big);
            }
            if self.window.len() < self.window_cap {
                self.window.resize(self.window_cap, 0);
            }
            let want = ((self.end - pos) as usize).min(self.window_cap);
            let mut got = 0;
            while got < want {
                let n = self.file.read_at(&mut self.window[got..want], pos + got as u64)?;
                if n == 0 {
                    break;
                }
                got += n;
            }
            self.window_start = pos;
            self.window_len = got;
            if got < len {
                return Err(self.shrank(pos));
            }
        }
        let off = (pos - self.window_start) as usize;
        Ok(&self.window[off..off + len])
    }

    /// True when every byte of `[pos, end)` is zero.
    fn all_zero_from(&mut self, pos: u64) -> std::io::Result<bool> {
        let mut p = pos;
        while p < self.end {
            let n = ((self.end - p) as usize).min(self.window_cap);
            if self.bytes(p, n)?.iter().any(|&b| b != 0) {
                return Ok(false);
            }
            p += n as u64;
        }
        Ok(true)
    }

    /// The CRC-32C of the batch of `size` bytes at `pos` ([`BatchCrc`]), read in window-sized
    /// chunks.
    fn chunked_crc(&mut self, pos: u64, size: u64) -> std::io::Result<u32> {
        let mut crc = BatchCrc::new();
        let mut p = pos;
        let end = pos + size;
        while p < end {
            let n = ((end - p) as usize).min(self.window_cap);
            crc.update(self.bytes(p, n)?);
            p += n as u64;
        }
        Ok(crc.finish())
    }

    /// Kafka's framing of the entry at the walk's position: its header, with the walk moved past
    /// it, or `None` at the end (then [`LogWalker::end_state`] says how the file ends).
    fn next_frame(&mut self) -> std::io::Result<Option<(u64, BatchHeader)>> {
        if self.finished.is_some() {
            return Ok(None);
        }
        let pos = self.pos;
        let rest = self.end - pos;
        if rest == 0 {
            self.finished = Some(if self.limited { LogEnd::Limited { position: pos } } else { LogEnd::Clean });
            return Ok(None);
        }
        let head = self.bytes(pos, rest.min(HEADER_SIZE_UP_TO_MAGIC as u64) as usize)?;
        let Ok(frame) = EntryFrame::parse(head) else {
            // Fewer bytes than a frame.
            self.finished = Some(if self.limited {
                LogEnd::Limited { position: pos }
            } else if self.all_zero_from(pos)? {
                LogEnd::ZeroTail { position: pos, bytes: rest }
            } else {
                LogEnd::ShortTail { position: pos, bytes: rest }
            });
            return Ok(None);
        };
        let corrupt = |detail: String| LogEnd::Corrupt { position: pos, bytes: rest, detail };
        match check_frame(&frame, pos, self.end) {
            FrameCheck::Whole => {}
            FrameCheck::TooSmall => {
                self.finished = Some(if self.all_zero_from(pos)? {
                    LogEnd::ZeroTail { position: pos, bytes: rest }
                } else {
                    corrupt(format!(
                        "batch length {} is below Kafka's minimum {RECORD_OVERHEAD_V0}",
                        frame.size - LOG_OVERHEAD as i64
                    ))
                });
                return Ok(None);
            }
            FrameCheck::Partial => {
                self.finished = Some(if self.limited {
                    LogEnd::Limited { position: pos }
                } else {
                    LogEnd::PartialBatch { position: pos, needed: frame.size as u64, available: rest }
                });
                return Ok(None);
            }
            FrameCheck::BadMagic => {
                self.finished = Some(corrupt(format!(
                    "record batch magic {} is not supported (only v2; v0/v1 were removed in Kafka 4.0)",
                    frame.magic
                )));
                return Ok(None);
            }
        }
        // A whole entry: its header, or (a batch smaller than the header) not past its end.
        let header_len = (frame.size as u64).min(BATCH_HEADER_SIZE as u64) as usize;
        let header = match BatchHeader::parse(self.bytes(pos, header_len)?) {
            Ok(h) => h,
            Err(e) => {
                self.finished = Some(corrupt(match e {
                    FormatError::BatchTooSmall { size, .. } => {
                        format!("batch of {size} bytes is smaller than the 61-byte v2 header")
                    }
                    e => e.to_string(),
                }));
                return Ok(None);
            }
        };
        self.pos = pos + frame.size as u64;
        Ok(Some((pos, header)))
    }

    /// The next batch's position and header, without reading its records or checking its CRC
    /// (a walk of the framing only), or `None` at the end (then [`LogWalker::end_state`] says how
    /// the file ends, as after [`LogWalker::next_batch`]).
    pub fn next_header(&mut self) -> std::io::Result<Option<(u64, BatchHeader)>> {
        self.next_frame()
    }

    /// The next batch and its bytes, or `None` at the end (then [`LogWalker::end_state`] says how
    /// the file ends). The bytes are `None` for a batch larger than [`MAX_BATCH_IN_MEMORY`],
    /// whose CRC is computed in chunks. I/O errors name the file.
    pub fn next_batch(&mut self) -> std::io::Result<Option<Batch<'_>>> {
        let Some((pos, header)) = self.next_frame()? else {
            return Ok(None);
        };
        let size = header.size_in_bytes() as u64;
        if size > MAX_BATCH_IN_MEMORY {
            let computed_crc = self.chunked_crc(pos, size)?;
            return Ok(Some((BatchInfo { position: pos, header, computed_crc }, None)));
        }
        let bytes = self.bytes(pos, size as usize)?;
        let computed_crc = compute_crc(bytes);
        Ok(Some((BatchInfo { position: pos, header, computed_crc }, Some(bytes))))
    }

    /// How the file ends; only meaningful after `next_batch` returned `None`.
    pub fn end_state(&self) -> LogEnd {
        self.finished.clone().unwrap_or(LogEnd::Clean)
    }
}

/// A batch found again after the walk: where it starts and its last offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchRef {
    pub position: u64,
    pub last_offset: i64,
}

/// Most entries [`BatchTable`] keeps (16 bytes each): every batch of a segment up to this many
/// batches, every 2nd, 4th, ... beyond.
const BATCH_TABLE_ENTRIES: usize = 1 << 20;

/// `(position, last offset)` of every `stride`-th batch of a walk, `stride` doubling whenever the
/// table is full, so the table stays within [`BATCH_TABLE_ENTRIES`] whatever the file holds.
#[derive(Debug, Default)]
struct BatchTable {
    entries: Vec<BatchRef>,
    stride: u64,
    count: u64,
    cap: usize,
}

impl BatchTable {
    fn new(cap: usize) -> BatchTable {
        BatchTable { entries: Vec::new(), stride: 1, count: 0, cap: cap.max(2) }
    }

    fn push(&mut self, b: BatchRef) {
        if self.count.is_multiple_of(self.stride) && self.entries.len() == self.cap {
            let mut i = 0;
            self.entries.retain(|_| {
                i += 1;
                i % 2 == 1
            });
            self.stride *= 2;
        }
        if self.count.is_multiple_of(self.stride) {
            self.entries.push(b);
        }
        self.count += 1;
    }
}

/// What a walk of a whole `.log` file found, kept in bounded memory: the batch count, how the file
/// ends, and a table of batch positions with which [`LogSummary::batch_at`] and
/// [`LogSummary::first_batch_ending_at_or_after`] find any batch again (walking at most a few
/// headers from the nearest table entry, through the file descriptor the walk used).
#[derive(Debug)]
pub struct LogSummary {
    pub path: PathBuf,
    pub file_len: u64,
    pub end: LogEnd,
    /// The last batch, when there is one.
    pub last: Option<BatchRef>,
    table: BatchTable,
    lookup: LogWalker,
}

impl LogSummary {
    /// Bytes of whole batches.
    pub fn valid_bytes(&self) -> u64 {
        self.lookup.end
    }

    /// Walking forward from the batch `from`, the first batch `f` accepts (`Some(true)`), looking
    /// at `limit` batches at most; `f` ends the search early with `None`.
    fn walk_from(
        &mut self,
        from: BatchRef,
        limit: u64,
        mut f: impl FnMut(u64, &BatchHeader) -> Option<bool>,
    ) -> std::io::Result<Option<BatchRef>> {
        self.lookup.seek(from.position);
        for _ in 0..limit {
            let Some((pos, h)) = self.lookup.next_frame()? else {
                return Ok(None);
            };
            match f(pos, &h) {
                Some(true) => return Ok(Some(BatchRef { position: pos, last_offset: h.last_offset() })),
                Some(false) => {}
                None => return Ok(None),
            }
        }
        Ok(None)
    }

    /// The batch starting exactly at `position`, if any.
    pub fn batch_at(&mut self, position: u64) -> std::io::Result<Option<BatchRef>> {
        if position >= self.valid_bytes() {
            return Ok(None);
        }
        let i = self.table.entries.partition_point(|b| b.position <= position);
        let Some(&from) = i.checked_sub(1).and_then(|i| self.table.entries.get(i)) else {
            return Ok(None);
        };
        if from.position == position {
            return Ok(Some(from));
        }
        if self.table.stride == 1 {
            return Ok(None);
        }
        let stride = self.table.stride;
        self.walk_from(from, stride, |pos, _| match pos.cmp(&position) {
            std::cmp::Ordering::Less => Some(false),
            std::cmp::Ordering::Equal => Some(true),
            std::cmp::Ordering::Greater => None,
        })
    }

    /// The first batch whose last offset is `>= offset` (batches in offset order, as a valid
    /// log's are).
    pub fn first_batch_ending_at_or_after(&mut self, offset: i64) -> std::io::Result<Option<BatchRef>> {
        let j = self.table.entries.partition_point(|b| b.last_offset < offset);
        if self.table.stride == 1 {
            return Ok(self.table.entries.get(j).copied());
        }
        let Some(&from) = j.checked_sub(1).and_then(|j| self.table.entries.get(j)) else {
            return Ok(self.table.entries.first().copied());
        };
        // Between `from` (below `offset`) and the next table entry (at or above it, if any).
        let stride = self.table.stride;
        self.walk_from(from, stride + 1, |_, h| Some(h.last_offset() >= offset))
    }

    /// The batch starting at `position` (found by [`Self::batch_at`] or
    /// [`Self::first_batch_ending_at_or_after`]), read again with its bytes (`None` when larger
    /// than [`MAX_BATCH_IN_MEMORY`]).
    pub fn read_batch(&mut self, position: u64) -> std::io::Result<Option<Batch<'_>>> {
        self.lookup.seek(position);
        self.lookup.next_batch()
    }
}

/// Walks a whole `.log` file, calling `each` with every batch and its bytes (`None` for a batch
/// larger than [`MAX_BATCH_IN_MEMORY`]). Memory stays bounded whatever the file holds.
pub fn summarize_log(path: &Path, each: impl FnMut(&BatchInfo, Option<&[u8]>)) -> std::io::Result<LogSummary> {
    summarize_with_table(path, BATCH_TABLE_ENTRIES, each)
}

fn summarize_with_table(
    path: &Path,
    table_cap: usize,
    mut each: impl FnMut(&BatchInfo, Option<&[u8]>),
) -> std::io::Result<LogSummary> {
    let mut w = LogWalker::open(path, None)?;
    let mut table = BatchTable::new(table_cap);
    let mut last = None;
    while let Some((b, bytes)) = w.next_batch()? {
        each(&b, bytes);
        let r = BatchRef { position: b.position, last_offset: b.last_offset() };
        table.push(r);
        last = Some(r);
    }
    let valid = w.position();
    let lookup = LogWalker::over(path, w.file.try_clone()?, w.file_len, 0, valid, LOOKUP_WINDOW_BYTES);
    Ok(LogSummary { path: path.to_path_buf(), file_len: w.file_len(), end: w.end_state(), last, table, lookup })
}

#[cfg(test)]
mod tests {
    use super::*;
    use seglog::format::builder::BatchBuilder;

    fn batch(base: i64, n: usize) -> Vec<u8> {
        let mut b = BatchBuilder::new().base_offset(base);
        for i in 0..n {
            b.push(1000 + i as i64, None, Some(b"value"), &[]);
        }
        b.build().unwrap()
    }

    fn walk(bytes: &[u8]) -> (Vec<BatchInfo>, LogEnd) {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("00000000000000000000.log");
        std::fs::write(&p, bytes).unwrap();
        let mut bs = Vec::new();
        let s = summarize_log(&p, |b, _| bs.push(*b)).unwrap();
        assert_eq!(s.table.count, bs.len() as u64);
        (bs, s.end)
    }

    #[test]
    fn clean_torn_zero_and_corrupt_ends() {
        let a = batch(0, 3);
        let b = batch(3, 2);
        let mut all = a.clone();
        all.extend_from_slice(&b);
        let (bs, end) = walk(&all);
        assert_eq!((bs.len(), end), (2, LogEnd::Clean));
        assert!(bs.iter().all(|b| b.crc_ok()));
        assert_eq!(bs[1].position, a.len() as u64);

        let cut = &all[..all.len() - 5];
        let (bs, end) = walk(cut);
        assert_eq!(bs.len(), 1);
        assert_eq!(
            end,
            LogEnd::PartialBatch { position: a.len() as u64, needed: b.len() as u64, available: b.len() as u64 - 5 }
        );

        let mut z = a.clone();
        z.extend_from_slice(&[0u8; 100]);
        assert_eq!(walk(&z).1, LogEnd::ZeroTail { position: a.len() as u64, bytes: 100 });

        let mut short = a.clone();
        short.extend_from_slice(&[1u8; 5]);
        assert_eq!(walk(&short).1, LogEnd::ShortTail { position: a.len() as u64, bytes: 5 });

        let mut flipped = all.clone();
        flipped[a.len() + 70] ^= 0x10;
        let (bs, end) = walk(&flipped);
        assert_eq!(end, LogEnd::Clean);
        assert!(bs[0].crc_ok() && !bs[1].crc_ok());

        // A batch larger than the read-ahead window.
        let mut big = BatchBuilder::new();
        big.push(1, None, Some(&vec![7u8; 3 << 20]), &[]);
        let mut with_big = a.clone();
        with_big.extend_from_slice(&big.build().unwrap());
        with_big.extend_from_slice(&b);
        let (bs, end) = walk(&with_big);
        assert_eq!((bs.len(), end), (3, LogEnd::Clean));
        assert!(bs.iter().all(|b| b.crc_ok()));

        let mut magic = all.clone();
        magic[a.len() + 16] = 1;
        assert!(matches!(walk(&magic).1, LogEnd::Corrupt { position, .. } if position == a.len() as u64));
    }

    #[test]
    fn lookups_through_a_thinned_table_match_the_full_list() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("00000000000000000100.log");
        let mut bytes = Vec::new();
        let mut next = 100;
        for i in 0..37 {
            let n = 1 + i % 4;
            bytes.extend_from_slice(&batch(next, n));
            next += n as i64;
        }
        std::fs::write(&p, &bytes).unwrap();
        let mut all = Vec::new();
        let full = summarize_with_table(&p, 1 << 20, |b, _| {
            all.push(BatchRef { position: b.position, last_offset: b.last_offset() })
        })
        .unwrap();
        assert_eq!(full.table.stride, 1);
        for cap in [2, 4, 6, 1 << 20] {
            let mut s = summarize_with_table(&p, cap, |_, _| {}).unwrap();
            assert!(s.table.entries.len() <= cap, "cap {cap}");
            assert_eq!(s.table.count, 37);
            for pos in 0..=bytes.len() as u64 + 1 {
                let want = all.iter().find(|b| b.position == pos).copied();
                assert_eq!(s.batch_at(pos).unwrap(), want, "cap {cap}, position {pos}");
            }
            for offset in 90..next + 2 {
                let want = all.iter().find(|b| b.last_offset >= offset).copied();
                assert_eq!(s.first_batch_ending_at_or_after(offset).unwrap(), want, "cap {cap}, offset {offset}");
            }
            let third = all[3];
            let (b, bytes) = s.read_batch(third.position).unwrap().unwrap();
            assert_eq!((b.position, b.last_offset(), b.crc_ok()), (third.position, third.last_offset, true));
            assert_eq!(bytes.map(<[u8]>::len), Some(b.size() as usize));
        }
    }

    #[test]
    fn chunked_crc_equals_the_whole_batch_crc() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("00000000000000000000.log");
        let mut b = BatchBuilder::new();
        b.push(1, None, Some(&vec![7u8; 100_000]), &[]);
        let bytes = b.build().unwrap();
        std::fs::write(&p, &bytes).unwrap();
        let f = crate::files::open_regular(&p).unwrap();
        let mut w = LogWalker::over(&p, f, bytes.len() as u64, 0, bytes.len() as u64, 4096);
        assert_eq!(w.chunked_crc(0, bytes.len() as u64).unwrap(), compute_crc(&bytes));
    }

    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("00000000000000000000.log");
        nix::unistd::mkfifo(&p, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let e = LogWalker::open(&p, None).unwrap_err();
        assert!(e.to_string().contains("a FIFO, not a regular file"), "{e}");
    }
}
