//! The active segment's tail: appended bytes live in memory until a flush hands them to the
//! kernel, and the most recent bytes stay there after it (the tail cache), so that fetches near
//! the end of the log are served with no I/O at all. With O_DIRECT there is no page cache to hit;
//! this is the engine's own.
//!
//! [`TailFile`] wraps the segment's `.log` file and implements [`IoFile`]: reads of positions in
//! the in-memory window come from memory, others go to the file. Writes to the file happen only
//! through [`TailFile::prepare_write`] / [`TailFile::complete_write`]: for an O_DIRECT file the
//! write covers whole aligned blocks from the block holding the first unwritten byte to the block
//! holding the last, the partial last block padded with zeros and rewritten by the next flush; the
//! file is truncated back to its logical length when the segment is sealed or closed, so `.log`
//! stays byte-exact Kafka format.

use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::error::{Error, Result};
use crate::io::{AlignedBuf, IoFile, IoOp, IoOpKind};

/// Memory alignment of tail buffers (enough for O_DIRECT on any device seen here).
const MEM_ALIGN: usize = 4096;

#[derive(Debug)]
struct TailState {
    /// File offset/length alignment for writes (1 when the file is not O_DIRECT).
    align: u64,
    /// Bytes of the log from `start` to `end`.
    buf: AlignedBuf,
    start: u64,
    end: u64,
    /// Bytes known to be in the file (written and completed).
    written: u64,
    /// End of the write in flight, if any.
    in_flight_end: Option<u64>,
    /// How many bytes before `written` to keep in memory as the tail cache.
    cache_bytes: u64,
    hits: u64,
}

/// A segment's `.log` file with its in-memory tail. See the module docs.
#[derive(Debug)]
pub struct TailFile {
    inner: Arc<dyn IoFile>,
    state: Mutex<TailState>,
}

/// Counters of a tail (for shard statistics).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TailStats {
    /// Reads served entirely from memory.
    pub cache_hits: u64,
    pub buffered_bytes: u64,
    pub unwritten_bytes: u64,
}

fn align_down(x: u64, a: u64) -> u64 {
    x - x % a
}
fn align_up(x: u64, a: u64) -> u64 {
    x.div_ceil(a) * a
}

impl TailFile {
    /// Wraps `inner`, whose first `size` bytes are the segment's valid data. The partial last
    /// block (for O_DIRECT files) is read back into memory so the next flush can rewrite it whole.
    pub fn new(inner: Arc<dyn IoFile>, size: u64, cache_bytes: u64) -> Result<TailFile> {
        let align = inner.direct_alignment().map(|a| a.offset.max(1) as u64).unwrap_or(1);
        let start = align_down(size, align);
        let mut buf = AlignedBuf::new((size - start) as usize + 64 * 1024, MEM_ALIGN);
        if size > start {
            buf.set_len((size - start) as usize);
            inner.read_exact_at(&mut buf, start)?;
        }
        Ok(TailFile {
            inner,
            state: Mutex::new(TailState {
                align,
                buf,
                start,
                end: size,
                written: size,
                in_flight_end: None,
                cache_bytes,
                hits: 0,
            }),
        })
    }

    fn lock(&self) -> MutexGuard<'_, TailState> {
        // A panic while holding this lock is a bug in this module; the state stays consistent
        // between statements, so recovering the guard is safe.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The underlying file.
    pub fn inner(&self) -> &Arc<dyn IoFile> {
        &self.inner
    }

    /// Appends bytes at the logical end (memory only).
    pub fn append(&self, data: &[u8]) {
        let mut s = self.lock();
        let need = s.buf.len() + data.len();
        if need > s.buf.capacity() {
            let cap = need.max(s.buf.capacity() * 2);
            s.buf = s.buf.grown(cap);
        }
        s.buf.extend_from_slice(data);
        s.end += data.len() as u64;
    }

    /// Logical length: every appended byte.
    pub fn logical_len(&self) -> u64 {
        self.lock().end
    }

    /// Bytes appended but not yet in the file.
    pub fn unwritten(&self) -> u64 {
        let s = self.lock();
        s.end - s.written
    }

    pub fn stats(&self) -> TailStats {
        let s = self.lock();
        TailStats { cache_hits: s.hits, buffered_bytes: s.buf.len() as u64, unwritten_bytes: s.end - s.written }
    }

    /// The write that puts every unwritten byte in the file, or `None` when there is nothing to
    /// write. For an O_DIRECT file it covers whole aligned blocks (zero-padded). Until
    /// [`TailFile::complete_write`] is called no other write may be prepared.
    pub fn prepare_write(&self, file: Arc<dyn IoFile>, tag: u64) -> Option<IoOp> {
        let mut s = self.lock();
        if s.end == s.written || s.in_flight_end.is_some() {
            return None;
        }
        let from = align_down(s.written, s.align);
        let to = if s.align > 1 { align_up(s.end, s.align) } else { s.end };
        let mut out = AlignedBuf::new((to - from) as usize, MEM_ALIGN);
        let lo = (from - s.start) as usize;
        let hi = (s.end - s.start) as usize;
        out.extend_from_slice(&s.buf[lo..hi]);
        out.set_len((to - from) as usize); // zero padding to the block boundary
        s.in_flight_end = Some(s.end);
        Some(IoOp { file, kind: IoOpKind::Write { buf: out, pos: from }, tag, link_next: false })
    }

    /// Records the outcome of the prepared write. On success the written bytes count as in the
    /// file and the in-memory window is trimmed to the tail-cache budget (never past the partial
    /// last block, which the next flush rewrites).
    pub fn complete_write(&self, ok: bool) {
        let mut s = self.lock();
        let Some(end) = s.in_flight_end.take() else { return };
        if !ok {
            return;
        }
        s.written = end;
        let keep_from = align_down(s.written.saturating_sub(s.cache_bytes), s.align).max(s.start);
        let keep_from = keep_from.min(align_down(s.written, s.align));
        // Trim in big steps only, so that appends do not pay a copy each time.
        if keep_from - s.start >= (s.cache_bytes.max(64 * 1024)) {
            let cut = (keep_from - s.start) as usize;
            let len = s.buf.len();
            let cap = (len - cut).max(64 * 1024) * 2;
            let mut nb = AlignedBuf::new(cap, MEM_ALIGN);
            nb.extend_from_slice(&s.buf[cut..len]);
            s.buf = nb;
            s.start = keep_from;
        }
    }

    /// Forgets everything past `len` (truncation), in memory and in the file.
    pub fn truncate(&self, len: u64) -> Result<()> {
        let mut s = self.lock();
        if len >= s.end {
            return Ok(());
        }
        self.inner.set_len(len)?;
        if len < s.start {
            let start = align_down(len, s.align);
            let mut buf = AlignedBuf::new(64 * 1024, MEM_ALIGN);
            if len > start {
                buf.set_len((len - start) as usize);
                self.inner.read_exact_at(&mut buf, start)?;
            }
            s.buf = buf;
            s.start = start;
        } else {
            let keep = (len - s.start) as usize;
            s.buf.set_len(keep);
        }
        s.end = len;
        s.written = s.written.min(len);
        Ok(())
    }
}

impl IoFile for TailFile {
    fn path(&self) -> &Path {
        self.inner.path()
    }

    fn read_at(&self, buf: &mut [u8], pos: u64) -> Result<usize> {
        let (start, end) = {
            let mut s = self.lock();
            if pos >= s.start {
                if pos >= s.end {
                    return Ok(0);
                }
                let n = ((s.end - pos) as usize).min(buf.len());
                let off = (pos - s.start) as usize;
                buf[..n].copy_from_slice(&s.buf[off..off + n]);
                s.hits += 1;
                return Ok(n);
            }
            (s.start, s.end)
        };
        // Below the window: from the file, up to the window's start, then from memory.
        let first = ((start - pos) as usize).min(buf.len());
        let mut got = 0;
        while got < first {
            let n = self.inner.read_at(&mut buf[got..first], pos + got as u64)?;
            if n == 0 {
                return Ok(got);
            }
            got += n;
        }
        if got < buf.len() && start < end {
            got += self.read_at(&mut buf[got..], start)?;
        }
        Ok(got)
    }

    fn write_all_at(&self, _buf: &[u8], pos: u64) -> Result<()> {
        Err(Error::io(
            "write",
            self.inner.path(),
            std::io::Error::new(
                std::io::ErrorKind::Unsupported,
                format!("direct write at byte {pos} to an active segment's log: appends go through its tail"),
            ),
        ))
    }

    fn sync_data(&self) -> Result<()> {
        self.inner.sync_data()
    }
    fn set_len(&self, len: u64) -> Result<()> {
        self.truncate(len)
    }
    fn allocate(&self, len: u64) -> Result<()> {
        self.inner.allocate(len)
    }
    /// The logical length (appended bytes), not the file's.
    fn len(&self) -> Result<u64> {
        Ok(self.logical_len())
    }
    fn modified_ms(&self) -> Result<i64> {
        self.inner.modified_ms()
    }
    fn raw_fd(&self) -> Option<std::os::unix::io::RawFd> {
        self.inner.raw_fd()
    }
    fn direct_alignment(&self) -> Option<crate::io::DirectAlignment> {
        self.inner.direct_alignment()
    }
}
