//! Walking a `.log` file batch by batch, with Kafka's `FileLogInputStream` rules:
//! stop when fewer than 17 bytes remain; an entry whose size field is below 14 is corrupt; stop
//! (a partial batch, not an error) when the entry runs past the end; anything but magic 2 is
//! refused. Headers are read through a window buffer, so a walk costs one read per window, not
//! one per batch header (phase 2 of a lookup reads 61-byte headers and jumps `12 + batchLength`).
//!
//! Recovery, which needs every byte of every batch, reads with [`SequentialBatchReader`] instead:
//! the file front to back in large aligned windows ([`RECOVERY_READ_BYTES`]), each batch handed
//! out as a slice of the window, so a 1 MiB window costs one device read however many batches it
//! holds. Both apply the same framing rules (one function, `frame_at`).

use std::sync::Arc;

use crate::error::{Error, Result};
// Kafka's framing rules live in `format::batch` (pure); the one-read fetch takes them from here.
pub(super) use crate::format::batch::{check_frame, FrameCheck};
use crate::format::batch::{
    BatchHeader, EntryFrame, BATCH_HEADER_SIZE, HEADER_SIZE_UP_TO_MAGIC, LOG_OVERHEAD, RECORD_OVERHEAD_V0,
};
use crate::format::FormatError;
use crate::io::{AlignedBuf, IoFile};

/// Largest window for header walks: one read covers several batch headers of small batches.
pub(crate) const SCAN_WINDOW_BYTES: usize = 64 * 1024;
/// The first read of a walk: most lookups land on or next to their batch, so start small (a
/// few headers' worth) and double the window on each refill up to the maximum.
pub(crate) const FIRST_READ_BYTES: usize = 512;

/// Bytes [`SequentialBatchReader`] reads per I/O (recovery): large enough that a device read at
/// queue depth 1 runs near the disk's sequential speed (fio's `bs=1m`); 4 MiB measured no faster
/// (docs/benchmarks.md, "Recovery and open"). [`set_recovery_read_bytes`] changes it.
pub(crate) const RECOVERY_READ_BYTES: usize = 1 << 20;
/// Window starts and lengths of [`SequentialBatchReader`] and of the one-read fetch are
/// multiples of this (or of the file's O_DIRECT alignment if larger), and their buffers are
/// aligned to it, so a direct read goes straight into the buffer, no bounce.
pub(super) const READ_ALIGN: usize = 4096;

/// The window of [`SequentialBatchReader::new`], when set ([`set_recovery_read_bytes`]).
static RECOVERY_READ_SET: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Sets the window recovery reads in, process-wide (bytes, at least 4 KiB, at most 1 GiB):
/// for benchmarks of the window size (the bench's `SEGLOG_RECOVERY_READ_BYTES`).
pub fn set_recovery_read_bytes(bytes: usize) {
    RECOVERY_READ_SET.store(bytes.clamp(READ_ALIGN, 1 << 30), std::sync::atomic::Ordering::Relaxed);
}

/// The window `SequentialBatchReader::new` uses: `RECOVERY_READ_BYTES` unless
/// [`set_recovery_read_bytes`] changed it.
pub fn recovery_read_bytes() -> usize {
    match RECOVERY_READ_SET.load(std::sync::atomic::Ordering::Relaxed) {
        0 => RECOVERY_READ_BYTES,
        n => n,
    }
}

/// Where the framing rules get their bytes from: a source of file ranges.
trait FrameSource {
    fn file(&self) -> &Arc<dyn IoFile>;
    /// `len` bytes at `pos`, or `Error::Corrupt` (`Truncated`) when the file holds fewer.
    fn bytes_at(&mut self, pos: u64, len: usize) -> Result<&[u8]>;
}

/// Kafka's `FileLogInputStream` framing of the entry at `pos` of a file whose data ends at `end`:
/// the batch and its size on disk, `Ok(None)` at the end of valid data (fewer than 17 bytes left,
/// or a partial batch running past `end`), or an error naming the file and `pos` (size field
/// below 14, magic other than 2, a header that does not parse). A returned batch lies wholly
/// inside `[pos, end)`.
fn frame_at(src: &mut impl FrameSource, pos: u64, end: u64) -> Result<Option<(ScannedBatch, u64)>> {
    if end < HEADER_SIZE_UP_TO_MAGIC as u64 || pos >= end - HEADER_SIZE_UP_TO_MAGIC as u64 {
        return Ok(None);
    }
    // The file's path is looked up (and copied) only when there is an error to report: this
    // runs once per batch of every walk (an Arc clone per batch cost a warm 16 KiB-batch lookup
    // 137 against 131 ns in criterion's translate_offset_tail_cache).
    fn corrupt(src: &impl FrameSource, pos: u64, source: FormatError) -> Error {
        Error::Corrupt { path: src.file().path().to_path_buf(), pos, source }
    }
    let frame = EntryFrame::parse(src.bytes_at(pos, HEADER_SIZE_UP_TO_MAGIC)?);
    let frame = frame.map_err(|e| corrupt(src, pos, e))?;
    match check_frame(&frame, pos, end) {
        FrameCheck::Whole => {}
        FrameCheck::Partial => return Ok(None),
        FrameCheck::TooSmall => {
            let (size, min) = (frame.size - LOG_OVERHEAD as i64, RECORD_OVERHEAD_V0 as i64);
            return Err(corrupt(src, pos, FormatError::BatchTooSmall { size, min }));
        }
        FrameCheck::BadMagic => {
            return Err(corrupt(src, pos, FormatError::UnsupportedMagic { magic: frame.magic }));
        }
    }
    let header = BatchHeader::parse(src.bytes_at(pos, BATCH_HEADER_SIZE)?);
    let header = header.map_err(|e| corrupt(src, pos, e))?;
    Ok(Some((ScannedBatch { position: pos as u32, header }, frame.size as u64)))
}

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

impl FrameSource for BatchScanner {
    fn file(&self) -> &Arc<dyn IoFile> {
        &self.file
    }
    fn bytes_at(&mut self, pos: u64, len: usize) -> Result<&[u8]> {
        self.window(pos, len)
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

// Per thread: a cache of free buffers (see the read-buffer pool in fetch.rs), no I/O state.
thread_local! {
    /// Window buffers of finished walks, reused by the next walk on this thread: a lookup then
    /// costs no allocation and no zero fill (most walks need one 512-byte window).
    static SCRATCH: std::cell::RefCell<Vec<Vec<u8>>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Largest window buffer kept for reuse, and how many are kept per thread.
const SCRATCH_KEEP_BYTES: usize = SCAN_WINDOW_BYTES;
const SCRATCH_KEEP: usize = 4;

fn take_scratch() -> Vec<u8> {
    SCRATCH.try_with(|s| s.try_borrow_mut().ok().and_then(|mut s| s.pop())).ok().flatten().unwrap_or_default()
}

impl Drop for BatchScanner {
    fn drop(&mut self) {
        let buf = std::mem::take(&mut self.buf);
        if buf.capacity() == 0 || buf.capacity() > SCRATCH_KEEP_BYTES {
            return;
        }
        let _ = SCRATCH.try_with(|s| {
            if let Ok(mut s) = s.try_borrow_mut() {
                if s.len() < SCRATCH_KEEP {
                    s.push(buf);
                }
            }
        });
    }
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
            buf: take_scratch(),
            buf_start: 0,
            buf_len: 0,
            max_window: window.max(BATCH_HEADER_SIZE),
            next_window: FIRST_READ_BYTES.min(window).max(BATCH_HEADER_SIZE),
            reads: 0,
            hops: 0,
        }
    }

    /// Makes the first read `bytes` long (within the window's bounds) instead of
    /// `FIRST_READ_BYTES`: for a walk known to cover about that many bytes, such as the tail
    /// of a segment after its last index entry, so it costs one read.
    pub(crate) fn with_first_read(mut self, bytes: usize) -> Self {
        self.next_window = bytes.clamp(BATCH_HEADER_SIZE, self.max_window);
        self
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
            let got = crate::io::read_up_to(&*self.file, pos, &mut self.buf[..want], want, |_| ())?;
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
        let Some((b, size)) = frame_at(self, self.pos, self.end)? else { return Ok(None) };
        self.pos += size;
        self.hops += 1;
        Ok(Some(b))
    }

    /// Reads a whole batch's bytes (for CRC checks and record-level scans).
    pub fn read_batch(&self, b: &ScannedBatch, out: &mut Vec<u8>) -> Result<()> {
        out.clear();
        out.resize(b.size() as usize, 0);
        self.file.read_exact_at(out, b.position as u64)
    }
}

/// Reads `file` in `[start, end)` front to back in large windows and hands out each batch with
/// its bytes: what recovery needs (every byte of every batch, in order). Same framing rules and
/// errors as [`BatchScanner::next_batch`]; the batch bytes are those
/// [`BatchScanner::read_batch`] would read, without an I/O per batch.
///
/// Each refill reads from the batch's position rounded down to the alignment, `window` bytes (or
/// up to the end of the data, or as much as a batch larger than the window needs, which the
/// framing check has already bounded by `end`), into one reused aligned buffer. Bytes of the
/// previous window that the next batch needs are moved to the front, not read again, so every
/// byte of the file is read once.
#[derive(Debug)]
pub(crate) struct SequentialBatchReader {
    file: Arc<dyn IoFile>,
    pos: u64,
    end: u64,
    /// The window: `buf[..buf.len()]` holds the file's bytes from `buf_start`.
    buf: AlignedBuf,
    buf_start: u64,
    window: usize,
    align: u64,
    /// The file is O_DIRECT: reads must cover whole aligned blocks, even past its end (the
    /// kernel stops at the end). Other files are never asked for a byte past `end`.
    direct: bool,
    /// Reads that went to the file.
    pub reads: u64,
    /// Bytes those reads returned.
    pub bytes_read: u64,
    /// Batches handed out.
    pub hops: u64,
}

impl SequentialBatchReader {
    /// A reader with the recovery window ([`recovery_read_bytes`]).
    pub(crate) fn new(file: Arc<dyn IoFile>, start: u32, end: u32) -> Self {
        SequentialBatchReader::with_window(file, start, end, recovery_read_bytes())
    }

    /// A reader whose refills read `window` bytes (rounded up to the alignment).
    pub(crate) fn with_window(file: Arc<dyn IoFile>, start: u32, end: u32, window: usize) -> Self {
        let align = file.direct_alignment().map_or(READ_ALIGN, |a| a.mem.max(a.offset).max(READ_ALIGN));
        let align = if align.is_power_of_two() { align } else { align.next_power_of_two() };
        let window = window.max(align).div_ceil(align) * align;
        let direct = file.direct_alignment().is_some();
        SequentialBatchReader {
            file,
            pos: start as u64,
            end: end as u64,
            buf: AlignedBuf::new(align, align),
            buf_start: 0,
            window,
            align: align as u64,
            direct,
            reads: 0,
            bytes_read: 0,
            hops: 0,
        }
    }

    #[cfg(test)]
    /// The position of the next batch to be read.
    pub(crate) fn position(&self) -> u32 {
        self.pos as u32
    }

    /// The next batch and its bytes (`size()` of them, from its position), `Ok(None)` at the end
    /// of valid data (including a partial trailing batch), or an error naming the file and
    /// position of a corrupt entry.
    pub(crate) fn next_batch(&mut self) -> Result<Option<(ScannedBatch, &[u8])>> {
        let Some((b, size)) = frame_at(self, self.pos, self.end)? else { return Ok(None) };
        // `frame_at` put the batch inside [pos, end): the refill reads at most what the file holds.
        let off = self.fill(self.pos, size as usize)?;
        self.pos += size;
        self.hops += 1;
        Ok(Some((b, &self.buf[off..off + size as usize])))
    }

    /// Makes `[pos, pos + len)` resident in the window and returns its offset in the buffer.
    fn fill(&mut self, pos: u64, len: usize) -> Result<usize> {
        let buf_end = self.buf_start + self.buf.len() as u64;
        let need_end = pos + len as u64;
        if pos >= self.buf_start && need_end <= buf_end {
            return Ok((pos - self.buf_start) as usize);
        }
        let al = self.align;
        let start = pos / al * al;
        // Keep what the buffer already holds from `start` on when it ends on an aligned boundary
        // (every full refill does): the next read then starts there, aligned.
        let keep = if start >= self.buf_start && start < buf_end && buf_end.is_multiple_of(al) {
            (buf_end - start) as usize
        } else {
            0
        };
        // Read a window's worth after the kept bytes, or at least to `need_end`, not past the
        // data's end (rounded up to the alignment).
        let target = (start + keep as u64 + self.window as u64).min(self.end).max(need_end);
        let total = (target.div_ceil(al) * al - start) as usize;
        if self.buf.capacity() < total {
            // Grow (the first refill, a kept partial batch plus a window, a batch larger than the
            // window): to two windows if the data reaches that far, else to what it needs. Bounded
            // by the file through `end` (a batch's length has been checked against it). The kept
            // bytes come along.
            let data_end = self.end.max(need_end).div_ceil(al) * al;
            let room = ((start + 2 * self.window as u64).min(data_end) - start) as usize;
            let mut grown = AlignedBuf::new(total.max(room), al as usize);
            if keep > 0 {
                let from = (start - self.buf_start) as usize;
                grown.full_mut()[..keep].copy_from_slice(&self.buf.full()[from..from + keep]);
            }
            self.buf = grown;
        } else if keep > 0 {
            let from = (start - self.buf_start) as usize;
            self.buf.full_mut().copy_within(from..from + keep, 0);
        }
        let stop = need_end.max(self.end);
        let limit = if self.direct { total } else { total.min((stop - start) as usize) };
        // The kept bytes end before `need_end` (else the window held the range), so before
        // `limit` and `stop`: there is always something left to read.
        let got = keep
            + crate::io::read_up_to(
                &*self.file,
                start + keep as u64,
                &mut self.buf.full_mut()[keep..limit],
                (stop - start) as usize - keep,
                |n| {
                    self.reads += 1;
                    self.bytes_read += n as u64;
                },
            )?;
        self.buf_start = start;
        self.buf.set_len(got);
        if (got as u64) < need_end - start {
            return Err(Error::Corrupt {
                path: self.file.path().to_path_buf(),
                pos,
                source: FormatError::Truncated {
                    needed: len as u64,
                    available: (start + got as u64).saturating_sub(pos),
                },
            });
        }
        Ok((pos - start) as usize)
    }
}

impl FrameSource for SequentialBatchReader {
    fn file(&self) -> &Arc<dyn IoFile> {
        &self.file
    }
    fn bytes_at(&mut self, pos: u64, len: usize) -> Result<&[u8]> {
        let off = self.fill(pos, len)?;
        Ok(&self.buf[off..off + len])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::builder::BatchBuilder;
    use crate::io::sim::SimStorage;
    use crate::io::{OpenMode, Storage};

    /// `n` batches with sizes cycling through `sizes` (value bytes per record), offsets following.
    fn batches(n: usize, sizes: &[usize]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut offset = 0i64;
        for i in 0..n {
            let len = sizes[i % sizes.len()];
            let records = 1 + i % 3;
            let mut b = BatchBuilder::new().base_offset(offset).partition_leader_epoch(i as i32 / 7);
            let value = vec![(i % 251) as u8; len];
            for r in 0..records {
                b.push(1_000 + (i * 3 + r) as i64, None, Some(&value), &[]);
            }
            out.extend_from_slice(&b.build().unwrap());
            offset += records as i64;
        }
        out
    }

    /// What a walk produced: (position, header, bytes) per batch, then how it ended.
    type Walk = (Vec<(u32, BatchHeader, Vec<u8>)>, String);

    fn ending<T>(r: Result<Option<T>>) -> Option<String> {
        match r {
            Ok(Some(_)) => None,
            Ok(None) => Some("end".into()),
            Err(e) => Some(format!("error: {e}")),
        }
    }

    /// The reference: header walk plus one read per batch (what recovery did before).
    fn walk_scanner(file: &Arc<dyn IoFile>, end: u32) -> Walk {
        let mut scan = BatchScanner::new(file.clone(), 0, end);
        let mut out = Vec::new();
        let mut buf = Vec::new();
        loop {
            let b = match scan.next_batch() {
                Ok(Some(b)) => b,
                r => return (out, ending(r).unwrap()),
            };
            if let Err(e) = scan.read_batch(&b, &mut buf) {
                return (out, format!("error: {e}"));
            }
            out.push((b.position, b.header, buf.clone()));
        }
    }

    fn walk_reader(file: &Arc<dyn IoFile>, end: u32, window: usize) -> (Walk, SequentialBatchReader) {
        let mut r = SequentialBatchReader::with_window(file.clone(), 0, end, window);
        let mut out = Vec::new();
        let end = loop {
            match r.next_batch() {
                Ok(Some((b, bytes))) => {
                    assert_eq!(bytes.len() as u32, b.size());
                    out.push((b.position, b.header, bytes.to_vec()));
                }
                Ok(None) => break "end".to_string(),
                Err(e) => break format!("error: {e}"),
            }
        };
        ((out, end), r)
    }

    fn sim_file(bytes: &[u8]) -> Arc<dyn IoFile> {
        let s = SimStorage::new();
        s.put_dir("/d");
        s.put_file("/d/0.log", bytes);
        s.open_log(std::path::Path::new("/d/0.log"), OpenMode::Read).unwrap()
    }

    const WINDOWS: &[usize] = &[1, 4096, 8192, 65_536, 1 << 20];

    /// The reader and the reference agree on `bytes` at every window size.
    fn same_walks(bytes: &[u8], what: &str) -> Walk {
        let file = sim_file(bytes);
        let want = walk_scanner(&file, bytes.len() as u32);
        for &w in WINDOWS {
            let (got, _) = walk_reader(&file, bytes.len() as u32, w);
            assert_eq!(got.0.len(), want.0.len(), "{what}, window {w}: batch count");
            for (i, (g, e)) in got.0.iter().zip(&want.0).enumerate() {
                assert!(g == e, "{what}, window {w}: batch {i} differs");
            }
            assert_eq!(got.1, want.1, "{what}, window {w}: ending");
        }
        want
    }

    #[test]
    fn valid_batches_are_the_same_and_read_in_few_reads() {
        let data = batches(300, &[10, 700, 5000, 16_000, 90, 33_000]);
        let want = same_walks(&data, "valid");
        assert_eq!(want.0.len(), 300);
        assert_eq!(want.1, "end");
        // One read per window, not one per batch.
        let file = sim_file(&data);
        let (_, r) = walk_reader(&file, data.len() as u32, 1 << 20);
        let windows = data.len().div_ceil(1 << 20) as u64;
        assert!(r.reads <= windows + 1, "{} reads for {} bytes", r.reads, data.len());
        assert_eq!(r.bytes_read, data.len() as u64, "every byte read once");
        assert_eq!(r.hops, 300);
        assert_eq!(r.position() as usize, data.len());
    }

    #[test]
    fn torn_tails_end_the_walk_where_the_scanner_does() {
        let data = batches(12, &[100, 3000, 40, 9000]);
        let step = 1 + data.len() / 400;
        for cut in (0..=data.len()).step_by(step).chain(data.len().saturating_sub(80)..data.len()) {
            let torn = &data[..cut];
            same_walks(torn, &format!("cut at {cut}"));
            // The same with zeros after the cut (ext4 after a crash: size extended, data not).
            let mut zeros = torn.to_vec();
            zeros.resize(cut + 4096, 0);
            let want = same_walks(&zeros, &format!("cut at {cut} + zeros"));
            assert!(want.1.starts_with("error") || want.1 == "end");
        }
    }

    #[test]
    fn garbage_and_bad_size_fields_fail_alike() {
        let data = batches(20, &[200, 2500]);
        let file = sim_file(&data);
        let positions: Vec<usize> =
            walk_scanner(&file, data.len() as u32).0.iter().map(|(p, _, _)| *p as usize).collect();
        fn size(d: &mut [u8], at: usize, v: i32) {
            d[at + 8..at + 12].copy_from_slice(&v.to_be_bytes());
        }
        type Damage = Box<dyn Fn(&mut Vec<u8>, usize)>;
        let cases: Vec<(&str, Damage)> = vec![
            ("size 0", Box::new(|d, at| size(d, at, 0))),
            ("size 13", Box::new(|d, at| size(d, at, 13))),
            ("size 14", Box::new(|d, at| size(d, at, 14))),
            ("size 40", Box::new(|d, at| size(d, at, 40))),
            ("size 49", Box::new(|d, at| size(d, at, 49))),
            ("size -1", Box::new(|d, at| size(d, at, -1))),
            ("size huge", Box::new(|d, at| size(d, at, i32::MAX))),
            (
                "size +1",
                Box::new(|d, at| {
                    let s = i32::from_be_bytes(d[at + 8..at + 12].try_into().unwrap());
                    size(d, at, s + 1)
                }),
            ),
            (
                "size -1 byte",
                Box::new(|d, at| {
                    let s = i32::from_be_bytes(d[at + 8..at + 12].try_into().unwrap());
                    size(d, at, s - 1)
                }),
            ),
            ("magic 1", Box::new(|d, at| d[at + 16] = 1)),
            ("magic 3", Box::new(|d, at| d[at + 16] = 3)),
            ("crc", Box::new(|d, at| d[at + 30] ^= 0xff)),
            ("zeros", Box::new(|d, at| d[at..].iter_mut().for_each(|b| *b = 0))),
            (
                "garbage",
                Box::new(|d, at| {
                    d.truncate(at);
                    d.extend((0..5000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8))
                }),
            ),
            (
                "ff",
                Box::new(|d, at| {
                    d.truncate(at);
                    d.extend(std::iter::repeat_n(0xffu8, 3000))
                }),
            ),
            (
                "short entry",
                Box::new(|d, at| {
                    d.truncate(at);
                    d.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 40, 0, 0, 0, 0, 2, 0, 0])
                }),
            ),
        ];
        for (name, damage) in &cases {
            for &at in &[positions[0], positions[7], *positions.last().unwrap()] {
                let mut d = data.clone();
                damage(&mut d, at);
                same_walks(&d, &format!("{name} at byte {at}"));
            }
        }
    }

    #[test]
    fn batches_larger_than_the_window_grow_the_buffer() {
        // Small, huge (300 KB), small, huge, small: windows of 4 KiB to 64 KiB.
        let data = batches(5, &[100, 300_000, 50, 150_000, 10]);
        let want = same_walks(&data, "large batches");
        assert_eq!(want.0.len(), 5);
        let file = sim_file(&data);
        let (_, r) = walk_reader(&file, data.len() as u32, 65_536);
        assert_eq!(r.bytes_read, data.len() as u64, "every byte read once");
        // Torn inside the large batch: a partial batch, the end of valid data.
        let cut = want.0[1].0 as usize + 200_000;
        let w = same_walks(&data[..cut], "torn large batch");
        assert_eq!((w.0.len(), w.1.as_str()), (1, "end"));
    }

    #[test]
    fn a_sub_range_and_a_start_inside_the_file_walk_alike() {
        let data = batches(40, &[1000, 7000, 20]);
        let file = sim_file(&data);
        let all = walk_scanner(&file, data.len() as u32).0;
        let (start, end) = (all[5].0, all[30].0 + 10);
        let mut scan = BatchScanner::new(file.clone(), start, end);
        let mut r = SequentialBatchReader::with_window(file.clone(), start, end, 8192);
        loop {
            match (scan.next_batch().unwrap(), r.next_batch().unwrap()) {
                (Some(a), Some((b, bytes))) => {
                    assert_eq!(a, b);
                    assert_eq!(bytes, &data[a.position as usize..a.end() as usize]);
                }
                (None, None) => break,
                (a, b) => panic!("{a:?} vs {:?}", b.map(|x| x.0)),
            }
        }
        assert_eq!(r.position(), all[30].0);
    }

    #[test]
    fn direct_files_are_read_aligned_without_a_bounce() {
        use crate::io::uring::tests::test_dir;
        use crate::io::{IoMode, UringStorage};
        let Ok(s) = UringStorage::new(IoMode::Direct) else { return };
        let dir = test_dir();
        let path = dir.path().join("0.log");
        let mut data = batches(200, &[16_000, 333, 70_000]);
        data.resize(data.len() + 4096 + 17, 0); // a torn tail of zeros, unaligned end
        std::fs::write(&path, &data).unwrap();
        let file = s.open_log(&path, OpenMode::Read).unwrap();
        let want = walk_scanner(&file, data.len() as u32);
        for &w in WINDOWS {
            let bounced = crate::io::thread_stats().bounced_reads;
            let (got, r) = walk_reader(&file, data.len() as u32, w);
            assert!(got == want, "window {w}");
            assert_eq!(crate::io::thread_stats().bounced_reads, bounced, "window {w}: reads through a bounce buffer");
            if w == 1 << 20 {
                assert!(
                    r.reads <= data.len().div_ceil(1 << 20) as u64 + 1,
                    "{} reads, {} bytes of {}",
                    r.reads,
                    r.bytes_read,
                    data.len()
                );
            }
        }
    }
}
