//! Walking a `.log` file batch by batch for the tools, read-only, with Kafka's framing rules
//! (`FileLogInputStream`): stop when fewer than 17 bytes remain, an entry whose length field is
//! below 14 is corrupt, an entry running past the end is a partial (torn) batch. Unlike the
//! engine's `BatchScanner`, which stops quietly at a partial batch as Kafka's reader does, this
//! walker says how the file ends, because the tools must report a torn tail with its position.
//!
//! Every batch is read whole and its CRC-32C checked; a batch whose CRC fails is reported and the
//! walk goes on (the framing is still usable), as kafka-dump-log prints `isvalid: false` and goes
//! on. Nothing here writes.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use seglog::format::batch::{
    compute_crc, BatchHeader, EntryFrame, BATCH_HEADER_SIZE, HEADER_SIZE_UP_TO_MAGIC, LOG_OVERHEAD, MAGIC_V2,
    RECORD_OVERHEAD_V0,
};

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
    pub fn end(&self) -> u64 {
        self.position + self.size()
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

/// A read-only walk over one `.log` file.
#[derive(Debug)]
pub struct LogWalker {
    path: PathBuf,
    file: File,
    file_len: u64,
    end: u64,
    limited: bool,
    pos: u64,
    window: Vec<u8>,
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
        Ok(LogWalker {
            path: path.to_path_buf(),
            file,
            file_len,
            end,
            limited: end < file_len,
            pos: 0,
            window: Vec::new(),
            window_start: 0,
            window_len: 0,
            big: Vec::new(),
            finished: None,
        })
    }

    pub fn file_len(&self) -> u64 {
        self.file_len
    }
    /// Where the next batch would start.
    pub fn position(&self) -> u64 {
        self.pos
    }

    /// Reads `len` bytes at `pos` (which the caller checked lie before `end`).
    fn bytes(&mut self, pos: u64, len: usize) -> std::io::Result<&[u8]> {
        let inside = pos >= self.window_start && pos + len as u64 <= self.window_start + self.window_len as u64;
        if !inside {
            if len > WINDOW_BYTES {
                self.big.resize(len, 0);
                self.file.read_exact_at(&mut self.big, pos)?;
                return Ok(&self.big);
            }
            if self.window.len() < WINDOW_BYTES {
                self.window.resize(WINDOW_BYTES, 0);
            }
            let want = ((self.end - pos) as usize).min(WINDOW_BYTES);
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
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    format!("{}: file shrank while reading at byte {pos}", self.path.display()),
                ));
            }
        }
        let off = (pos - self.window_start) as usize;
        Ok(&self.window[off..off + len])
    }

    /// True when every byte of `[pos, end)` is zero.
    fn all_zero_from(&mut self, pos: u64) -> std::io::Result<bool> {
        let mut p = pos;
        while p < self.end {
            let n = ((self.end - p) as usize).min(WINDOW_BYTES);
            if self.bytes(p, n)?.iter().any(|&b| b != 0) {
                return Ok(false);
            }
            p += n as u64;
        }
        Ok(true)
    }

    /// The next batch and its bytes, or `None` at the end (then [`LogWalker::end_state`] says how
    /// the file ends). I/O errors name the file.
    pub fn next_batch(&mut self) -> std::io::Result<Option<(BatchInfo, &[u8])>> {
        if self.finished.is_some() {
            return Ok(None);
        }
        let pos = self.pos;
        let rest = self.end - pos;
        if rest == 0 {
            self.finished = Some(if self.limited { LogEnd::Limited { position: pos } } else { LogEnd::Clean });
            return Ok(None);
        }
        if rest < HEADER_SIZE_UP_TO_MAGIC as u64 {
            self.finished = Some(if self.limited {
                LogEnd::Limited { position: pos }
            } else if self.all_zero_from(pos)? {
                LogEnd::ZeroTail { position: pos, bytes: rest }
            } else {
                LogEnd::ShortTail { position: pos, bytes: rest }
            });
            return Ok(None);
        }
        let frame =
            EntryFrame::parse(self.bytes(pos, HEADER_SIZE_UP_TO_MAGIC)?).expect("17 bytes are enough for a frame");
        let corrupt = |detail: String| LogEnd::Corrupt { position: pos, bytes: rest, detail };
        if frame.size < RECORD_OVERHEAD_V0 as i64 + LOG_OVERHEAD as i64 {
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
        if frame.size > rest as i64 {
            self.finished = Some(if self.limited {
                LogEnd::Limited { position: pos }
            } else {
                LogEnd::PartialBatch { position: pos, needed: frame.size as u64, available: rest }
            });
            return Ok(None);
        }
        if frame.magic != MAGIC_V2 {
            self.finished = Some(corrupt(format!(
                "record batch magic {} is not supported (only v2; v0/v1 were removed in Kafka 4.0)",
                frame.magic
            )));
            return Ok(None);
        }
        if frame.size < BATCH_HEADER_SIZE as i64 {
            self.finished =
                Some(corrupt(format!("batch of {} bytes is smaller than the 61-byte v2 header", frame.size)));
            return Ok(None);
        }
        let size = frame.size as usize;
        let header = match BatchHeader::parse(self.bytes(pos, BATCH_HEADER_SIZE)?) {
            Ok(h) => h,
            Err(e) => {
                self.finished = Some(corrupt(e.to_string()));
                return Ok(None);
            }
        };
        self.pos = pos + size as u64;
        let bytes = self.bytes(pos, size)?;
        let computed_crc = compute_crc(bytes);
        Ok(Some((BatchInfo { position: pos, header, computed_crc }, bytes)))
    }

    /// How the file ends; only meaningful after `next_batch` returned `None`.
    pub fn end_state(&self) -> LogEnd {
        self.finished.clone().unwrap_or(LogEnd::Clean)
    }
}

/// Headers of every batch of a `.log` file and how it ends.
#[derive(Debug, Clone)]
pub struct LogSummary {
    pub path: PathBuf,
    pub file_len: u64,
    pub batches: Vec<BatchInfo>,
    pub end: LogEnd,
}

impl LogSummary {
    /// Bytes of whole batches.
    pub fn valid_bytes(&self) -> u64 {
        self.batches.last().map_or(0, |b| b.end())
    }
    /// The batch starting exactly at `position`, if any.
    pub fn batch_at(&self, position: u64) -> Option<&BatchInfo> {
        self.batches.binary_search_by_key(&position, |b| b.position).ok().map(|i| &self.batches[i])
    }
    /// The index of the first batch whose last offset is `>= offset`.
    pub fn first_batch_ending_at_or_after(&self, offset: i64) -> Option<usize> {
        let i = self.batches.partition_point(|b| b.last_offset() < offset);
        (i < self.batches.len()).then_some(i)
    }
}

/// Walks a whole `.log` file, calling `each` with every batch's bytes.
pub fn summarize_log(path: &Path, mut each: impl FnMut(&BatchInfo, &[u8])) -> std::io::Result<LogSummary> {
    let mut w = LogWalker::open(path, None)?;
    let mut batches = Vec::new();
    while let Some((b, bytes)) = w.next_batch()? {
        each(&b, bytes);
        batches.push(b);
    }
    Ok(LogSummary { path: path.to_path_buf(), file_len: w.file_len(), batches, end: w.end_state() })
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
        let s = summarize_log(&p, |_, _| {}).unwrap();
        (s.batches, s.end)
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
    fn a_fifo_is_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("00000000000000000000.log");
        nix::unistd::mkfifo(&p, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let e = LogWalker::open(&p, None).unwrap_err();
        assert!(e.to_string().contains("a FIFO, not a regular file"), "{e}");
    }
}
