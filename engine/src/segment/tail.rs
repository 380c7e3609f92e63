//! The active segment's tail: appended bytes live in memory until a flush hands them to the
//! kernel, and the most recent bytes stay there after it (the tail cache), so that fetches near
//! the end of the log are served with no I/O at all. With O_DIRECT there is no page cache to hit;
//! this is the engine's own.
//!
//! [`TailFile`] wraps the segment's `.log` file and implements [`IoFile`]: reads of positions in
//! the in-memory window come from memory, others go to the file. Writes to the file happen only
//! through [`TailFile::prepare_write`] / [`TailFile::complete_write`]: for an O_DIRECT file the
//! write covers whole aligned blocks from the block holding the first unwritten byte to the block
//! holding the last, the partial last block padded with zeros and rewritten by the next flush
//! (several writes may be in flight when each but the newest ends on a block boundary:
//! [`WriteSpan`]); the file is truncated back to its logical length when the segment is sealed or closed, so `.log`
//! stays byte-exact Kafka format.
//!
//! The window is a chain of [`CHUNK_BYTES`] chunks from the thread's write-buffer pool
//! ([`crate::io::pool`]): chunk `k` holds the bytes at `start + k * CHUNK_BYTES ..`, with `start`
//! a multiple of the block size, so no block straddles two chunks. A flush writes straight from
//! the chunks (one write per chunk it touches; WRITE_FIXED when the pool is registered with the
//! ring): no copy into a write buffer and no allocation per write. A write borrows its bytes of
//! each chunk ([`ChunkRef::lend`]), and bytes the kernel may be reading never change under it:
//! appends made while it is in flight go into the chunk past them, and those that fall in the
//! partial last block it pads wait beside the chunk (one block, [`TailState::side_from`]) until the
//! next write is prepared. Where a write holds more than that block (a truncation cut back over
//! a block into its bytes; the log truncates with no write in flight) or its buffers outlive its
//! completion, the tail goes on in a copy of the chunk. The tail cache is
//! trimmed in whole chunks, which go back to the pool. A tail with everything written, nothing in
//! flight and a cache under a chunk holds no chunk at all: its partial last block (in direct
//! mode; nothing otherwise) is *parked* in a buffer of its own, which reads are served from and
//! the next append moves back into a chunk. A tail opened over an existing file starts parked.

use std::collections::VecDeque;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::error::{Error, Result};
use crate::io::pool::{self, ChunkRef, CHUNK_BYTES};
use crate::io::{IoFile, IoOp, IoOpKind};

const CHUNK: u64 = CHUNK_BYTES as u64;

#[derive(Debug)]
struct TailState {
    /// File offset/length alignment for writes (1 when the file is not O_DIRECT).
    align: u64,
    /// Bytes of the log from `start` to `end`: chunk `k` holds `start + k * CHUNK ..`. Bytes of
    /// the last chunk past `end` are undefined (zeroed before any write covers them).
    chunks: VecDeque<ChunkRef>,
    start: u64,
    end: u64,
    /// Bytes known to be in the file (written and completed).
    written: u64,
    /// Bytes known to be durable (an fdatasync or RWF_DSYNC writes covered them since this tail
    /// was made; 0 at first, since what a reopened file holds may not be).
    synced: u64,
    /// Ends of the writes in flight, oldest first: each covers the bytes from the end of the one
    /// before it (or `written`).
    in_flight: VecDeque<u64>,
    /// A write in flight failed: the writes after it complete without moving `written` (their
    /// bytes follow a hole), and the owner cuts the tail back to `written` once they are all
    /// in.
    broken: bool,
    /// How many bytes before `written` to keep in memory as the tail cache.
    cache_bytes: u64,
    /// The bytes from `start` to `end` (less than a block) when no chunk is held: a tail with
    /// everything written, nothing in flight and a cache smaller than a chunk keeps only its
    /// partial last block (which the next write rewrites), in a buffer of its own, not in a
    /// chunk of [`CHUNK_BYTES`]. The next append moves it back into a chunk.
    parked: Option<Box<[u8]>>,
    /// Appended bytes kept aside, from this position: those that fell in the partial last block
    /// a write in flight pads (the write holds the chunk's bytes of that block). They go into
    /// the chunk before the next write ([`TailState::settle_side`]); appends past the block go
    /// into the chunk itself.
    side_from: Option<u64>,
    /// The bytes kept aside (`side_from..side_from + side.len()`; its allocation is reused).
    side: Vec<u8>,
    hits: u64,
    /// Chunks copied because a write still held bytes the tail had to change (rare: see
    /// [`TailState::chunk_bytes_mut`]).
    copies: u64,
}

/// A segment's `.log` file with its in-memory tail. See the module docs.
#[derive(Debug)]
pub(crate) struct TailFile {
    inner: Arc<dyn IoFile>,
    state: Mutex<TailState>,
}

/// Counters of a tail (the tests read them).
#[cfg(test)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct TailStats {
    /// Reads served entirely from memory.
    pub cache_hits: u64,
    /// Chunks copied because a write still held bytes the tail had to change.
    pub chunk_copies: u64,
    pub buffered_bytes: u64,
    pub unwritten_bytes: u64,
    /// Chunks held (none when idle with its partial block parked).
    pub chunks: usize,
    /// Appended bytes kept aside, in the block a write in flight pads.
    pub aside: usize,
}

/// The bytes of `file` from `start` (a block boundary) to `end`, the partial block a tail keeps
/// parked; `None` when there are none.
fn read_partial_block(file: &dyn IoFile, start: u64, end: u64) -> Result<Option<Box<[u8]>>> {
    if end <= start {
        return Ok(None);
    }
    let mut bytes = vec![0u8; (end - start) as usize].into_boxed_slice();
    file.read_exact_at(&mut bytes, start)?;
    Ok(Some(bytes))
}

/// What a direct file's writes are aligned to: the kernel's requirement, raised to the
/// filesystem's block (a write starting or ending inside one takes its slow sub-block path; see
/// [`crate::io::DirectAlignment::fs_block`]), or to 4096 where that block is not a power of two
/// or is larger than a chunk. With batches that do not end on a block boundary nearly every
/// write would otherwise start inside one.
fn write_alignment(a: crate::io::DirectAlignment) -> u64 {
    let required = a.offset.max(a.mem).max(1) as u64;
    let fs_block = a.fs_block as u64;
    let block = if fs_block.is_power_of_two() && fs_block <= CHUNK {
        fs_block
    } else {
        crate::io::probe::FALLBACK_ALIGNMENT as u64
    };
    required.max(block)
}

fn align_down(x: u64, a: u64) -> u64 {
    x - x % a
}
pub(crate) fn align_up(x: u64, a: u64) -> u64 {
    x.div_ceil(a) * a
}

impl TailState {
    /// Chunk `k` and the offset in it of position `pos`.
    fn locate(&self, pos: u64) -> (usize, usize) {
        let rel = pos - self.start;
        ((rel / CHUNK) as usize, (rel % CHUNK) as usize)
    }

    /// Chunk `k` replaced by a copy of its meaningful bytes: a write holds bytes the tail has to
    /// change, and keeps them.
    fn copy_chunk(&mut self, k: usize) {
        self.copies += 1;
        let used = (self.end.saturating_sub(self.start + k as u64 * CHUNK)).min(CHUNK) as usize;
        let mut fresh = pool::thread_pool().alloc();
        fresh.bytes_mut()[..used].copy_from_slice(self.chunks[k].bytes(0, used));
        self.chunks[k] = ChunkRef::new(fresh);
    }

    /// `len` bytes of chunk `k` from `off`, writable, off the append path: a write's padding, the
    /// bytes kept aside going back. A write still holding some of them keeps them, and the tail
    /// goes on in a copy of the chunk: when a write's buffers outlive its completion.
    fn chunk_bytes_mut(&mut self, k: usize, off: usize, len: usize) -> &mut [u8] {
        if !self.chunks[k].can_write(off) {
            self.copy_chunk(k);
        }
        self.chunks[k].writable(off, len).expect("a chunk no write holds")
    }

    /// Puts the first bytes of `data` at `end`: as many as fit in its chunk, or, when they fall
    /// in the block a write in flight pads, in that block, aside ([`TailState::side_from`]).
    /// Returns how many.
    fn put(&mut self, data: &[u8]) -> usize {
        if let Some(from) = self.side_from {
            let block_end = align_down(from, self.align) + self.align;
            if self.end < block_end {
                let n = ((block_end - self.end) as usize).min(data.len());
                self.side.extend_from_slice(&data[..n]);
                return n;
            }
        }
        let (k, off) = self.locate(self.end);
        if k == self.chunks.len() {
            // From the pool of the thread appending (the shard's, registered with its ring),
            // whichever thread opened the segment.
            self.chunks.push_back(ChunkRef::new(pool::thread_pool().alloc()));
        }
        let n = (CHUNK_BYTES - off).min(data.len());
        if let Some(bytes) = self.chunks[k].writable(off, n) {
            bytes.copy_from_slice(&data[..n]);
            return n;
        }
        // A write in flight holds these bytes. If it holds nothing past this block (the partial
        // last one it pads), the bytes for the block wait aside; otherwise (a truncation cut back
        // over a block into its bytes) the tail goes on in a copy of the chunk.
        let in_block = (align_down(self.end, self.align) + self.align - self.end) as usize;
        if self.side_from.is_none() && self.chunks[k].can_write(off + in_block) {
            self.side_from = Some(self.end);
            let n = in_block.min(data.len());
            self.side.extend_from_slice(&data[..n]);
            return n;
        }
        self.copy_chunk(k);
        self.chunks[k].writable(off, n).expect("a fresh chunk").copy_from_slice(&data[..n]);
        n
    }

    /// Puts the bytes kept aside ([`TailState::side_from`]) into their chunk: the write that
    /// padded their block is done (or, if its buffers are still out, into a copy of the chunk).
    fn settle_side(&mut self) {
        let Some(from) = self.side_from.take() else { return };
        let (k, off) = self.locate(from);
        let n = self.side.len();
        let mut side = std::mem::take(&mut self.side);
        self.chunk_bytes_mut(k, off, n).copy_from_slice(&side);
        side.clear();
        self.side = side;
    }

    /// Where the writes prepared so far end: `written`, or the end of the newest in flight.
    fn submitted(&self) -> u64 {
        self.in_flight.back().copied().unwrap_or(self.written)
    }

    /// Moves parked bytes back into a chunk, before anything that changes the window.
    fn unpark(&mut self) {
        if let Some(bytes) = self.parked.take() {
            debug_assert!(self.chunks.is_empty());
            let mut c = pool::thread_pool().alloc();
            c.bytes_mut()[..bytes.len()].copy_from_slice(&bytes);
            self.chunks.push_back(ChunkRef::new(c));
        }
    }

    /// After a write completed or the cache shrank: gives back, in whole chunks, what lies
    /// before the tail cache (never the partial last block, which the next write rewrites);
    /// with everything written, nothing in flight and a cache smaller than a chunk, holds no
    /// chunk at all (the partial block parked: an idle partition costs under a block).
    fn trim(&mut self) {
        let keep_from = self.written.saturating_sub(self.cache_bytes).min(align_down(self.written, self.align));
        while !self.chunks.is_empty() && self.start + CHUNK <= keep_from {
            self.chunks.pop_front();
            self.start += CHUNK;
        }
        if self.written == self.end && self.in_flight.is_empty() && self.cache_bytes < CHUNK && !self.chunks.is_empty()
        {
            let from = align_down(self.end, self.align);
            let mut bytes = vec![0u8; (self.end - from) as usize].into_boxed_slice();
            self.copy_out(from, &mut bytes);
            self.chunks.clear();
            self.start = from;
            self.parked = (!bytes.is_empty()).then_some(bytes);
        }
    }

    /// Copies `[pos, pos + out.len())`, which lies in `[start, end)`, out of the chunks (or the
    /// parked bytes).
    fn copy_out(&self, mut pos: u64, out: &mut [u8]) {
        if let Some(bytes) = &self.parked {
            let from = (pos - self.start) as usize;
            out.copy_from_slice(&bytes[from..from + out.len()]);
            return;
        }
        let first = pos;
        let mut done = 0;
        while done < out.len() {
            let (k, off) = self.locate(pos);
            let n = (CHUNK_BYTES - off).min(out.len() - done);
            out[done..done + n].copy_from_slice(self.chunks[k].bytes(off, n));
            done += n;
            pos += n as u64;
        }
        // Bytes kept aside are newer than the chunk's.
        if let Some(from) = self.side_from {
            let lo = first.max(from);
            let hi = (first + out.len() as u64).min(from + self.side.len() as u64);
            if lo < hi {
                out[(lo - first) as usize..(hi - first) as usize]
                    .copy_from_slice(&self.side[(lo - from) as usize..(hi - from) as usize]);
            }
        }
    }
}

impl TailFile {
    /// Wraps `inner`, whose first `size` bytes are the segment's valid data. The partial last
    /// block (for O_DIRECT files) is read back into memory so the next flush can rewrite it whole.
    pub(crate) fn new(inner: Arc<dyn IoFile>, size: u64, cache_bytes: u64) -> Result<TailFile> {
        let align = inner.direct_alignment().map_or(1, write_alignment);
        if align > CHUNK || !CHUNK.is_multiple_of(align) {
            return Err(Error::io(
                "open",
                inner.path(),
                std::io::Error::new(
                    std::io::ErrorKind::Unsupported,
                    format!("O_DIRECT alignment {align} does not divide the {CHUNK_BYTES}-byte tail chunks"),
                ),
            ));
        }
        let start = align_down(size, align);
        // Parked: a reopened partition holds a chunk only once it is appended to.
        let parked = read_partial_block(&*inner, start, size)?;
        Ok(TailFile {
            inner,
            state: Mutex::new(TailState {
                align,
                chunks: VecDeque::new(),
                start,
                end: size,
                written: size,
                synced: 0,
                in_flight: VecDeque::new(),
                broken: false,
                cache_bytes,
                parked,
                side_from: None,
                side: Vec::new(),
                hits: 0,
                copies: 0,
            }),
        })
    }

    fn lock(&self) -> MutexGuard<'_, TailState> {
        // A panic while holding this lock is a bug in this module; the state stays consistent
        // between statements, so recovering the guard is safe.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Appends bytes at the logical end (memory only).
    pub(crate) fn append(&self, data: &[u8]) {
        let mut s = self.lock();
        s.unpark();
        let mut rest = data;
        while !rest.is_empty() {
            let n = s.put(rest);
            s.end += n as u64;
            rest = &rest[n..];
        }
    }

    /// Logical length: every appended byte.
    pub(crate) fn logical_len(&self) -> u64 {
        self.lock().end
    }

    /// Bytes appended but not yet in the file.
    pub(crate) fn unwritten(&self) -> u64 {
        let s = self.lock();
        s.end - s.written
    }

    #[cfg(test)]
    pub(crate) fn stats(&self) -> TailStats {
        let s = self.lock();
        TailStats {
            cache_hits: s.hits,
            chunk_copies: s.copies,
            buffered_bytes: s.end - s.start,
            unwritten_bytes: s.end - s.written,
            chunks: s.chunks.len(),
            aside: s.side.len(),
        }
    }
}

/// Which unwritten bytes [`TailFile::prepare_write`] covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WriteSpan {
    /// Every unwritten byte; for an O_DIRECT file the last block is zero-padded and the next
    /// write rewrites it, so no write can follow this one until it completes. Appends made
    /// while it is in flight go into the chunk past it, those in the padded block aside.
    All,
    /// Whole chunks only (none when the unwritten bytes fill none): appends go on in the last
    /// chunk, which no write holds, and the next write may start (and be in flight together
    /// with this one) where this one ends, chunks being whole blocks.
    WholeChunks,
}

impl TailFile {
    /// The writes that put the unwritten bytes `span` names in the file, straight from the
    /// tail's chunks: one per chunk the range touches, in file order; empty when there is
    /// nothing to write, or when the newest write in flight ends inside a block (the next
    /// write would rewrite that block, and two writes of one block in flight could land in
    /// either order). For an O_DIRECT file they cover whole aligned blocks, the last one
    /// zero-padded. Several may be in flight; [`TailFile::complete_write`] takes their outcomes
    /// in the order they were prepared.
    pub(crate) fn prepare_write(&self, file: Arc<dyn IoFile>, tag: u64, span: WriteSpan) -> Vec<IoOp> {
        let mut s = self.lock();
        let submitted = s.submitted();
        if s.broken || (!s.in_flight.is_empty() && !submitted.is_multiple_of(s.align)) {
            return Vec::new();
        }
        let data_to = match span {
            WriteSpan::WholeChunks => s.start + align_down(s.end - s.start, CHUNK),
            WriteSpan::All => s.end,
        };
        if data_to <= submitted {
            return Vec::new();
        }
        // Parked bytes are all written: there is something to write only after an append,
        // which moved them back into a chunk.
        debug_assert!(s.parked.is_none());
        // The write that padded a block is done (the check above): what was appended in the
        // block goes into the chunk, which this write then covers.
        s.settle_side();
        let from = align_down(submitted, s.align);
        let to = align_up(data_to, s.align);
        if to > data_to {
            // The padding lies in the chunk holding `data_to` (a block never straddles chunks),
            // and whatever it held before (a truncated tail, a chunk's previous owner) must not
            // reach the file: zeros only.
            let (k, off) = s.locate(data_to);
            let pad = (to - data_to) as usize;
            s.chunk_bytes_mut(k, off, pad).fill(0);
        }
        let mut ops = Vec::with_capacity(((to - from) / CHUNK + 1) as usize);
        let mut pos = from;
        while pos < to {
            let (k, off) = s.locate(pos);
            let n = (CHUNK_BYTES - off).min((to - pos) as usize);
            let buf = s.chunks[k].lend(off, n);
            ops.push(IoOp {
                file: file.clone(),
                kind: IoOpKind::Write { buf, pos, dsync: false },
                tag,
                link_next: false,
            });
            pos += n as u64;
        }
        s.in_flight.push_back(data_to);
        ops
    }

    /// How many prepared writes have not been completed.
    pub(crate) fn writes_in_flight(&self) -> usize {
        self.lock().in_flight.len()
    }

    /// Records the outcome of the oldest prepared write (`ok` when every one of its operations
    /// succeeded). On success, unless one before it failed, its bytes count as in the file and
    /// the in-memory window is trimmed, in whole chunks, to the tail-cache budget (never past
    /// the partial last block, which the next write rewrites).
    pub(crate) fn complete_write(&self, ok: bool) {
        let mut s = self.lock();
        let Some(end) = s.in_flight.pop_front() else { return };
        let failed = !ok || s.broken;
        // The writes after a failed one stay failed until none is left in flight.
        s.broken = failed && !s.in_flight.is_empty();
        if failed || s.written >= end {
            return;
        }
        s.written = end;
        s.trim();
    }

    /// Sets how many written bytes the tail keeps in memory (an engine shard shares one budget
    /// among its partitions) and gives back what lies before that now.
    pub(crate) fn set_cache_bytes(&self, bytes: u64) {
        let mut s = self.lock();
        s.cache_bytes = bytes;
        if !s.broken {
            s.trim();
        }
    }

    /// Records that every byte written so far is durable (an fdatasync of the file completed
    /// after the writes, or they were RWF_DSYNC writes).
    pub(crate) fn mark_synced(&self) {
        let mut s = self.lock();
        s.synced = s.written;
    }

    /// True when every byte written to the file is known to be durable.
    pub(crate) fn written_is_synced(&self) -> bool {
        let s = self.lock();
        s.synced >= s.written
    }

    /// The block size writes are aligned to (1 for a file without O_DIRECT).
    pub(crate) fn align(&self) -> u64 {
        self.lock().align
    }

    /// Forgets everything past `len` (truncation), in memory and in the file.
    pub(crate) fn truncate(&self, len: u64) -> Result<()> {
        let mut s = self.lock();
        if len >= s.end {
            return Ok(());
        }
        // Bytes kept aside past the cut go; those before it stay aside (appends after the cut
        // go on there while the block's write is out).
        if let Some(from) = s.side_from {
            if len <= from {
                s.side_from = None;
                s.side.clear();
            } else {
                s.side.truncate((len - from) as usize);
            }
        }
        self.inner.set_len(len)?;
        if len < s.start {
            // Below the window: the partial block comes back from the file, parked.
            s.chunks.clear();
            s.start = align_down(len, s.align);
            s.parked = read_partial_block(&*self.inner, s.start, len)?;
        } else if let Some(bytes) = s.parked.take() {
            let keep = (len - s.start) as usize;
            s.parked = (keep > 0).then(|| bytes[..keep].into());
        } else {
            let keep = (len - s.start).div_ceil(CHUNK) as usize;
            s.chunks.truncate(keep);
        }
        s.end = len;
        s.written = s.written.min(len);
        s.synced = s.synced.min(len);
        // A write in flight still counts only for what is left of it.
        for e in s.in_flight.iter_mut() {
            *e = (*e).min(len);
        }
        if !s.broken {
            s.trim();
        }
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
                s.copy_out(pos, &mut buf[..n]);
                s.hits += 1;
                return Ok(n);
            }
            (s.start, s.end)
        };
        // Below the window: from the file, up to the window's start, then from memory. A file
        // ending early (shorter than the window's start) ends the read there.
        let first = ((start - pos) as usize).min(buf.len());
        let mut got = crate::io::read_up_to(&*self.inner, pos, &mut buf[..first], first, |_| {})?;
        if got < first {
            return Ok(got);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::pool::{thread_pool_stats, BufferMode};
    use crate::io::uring::tests::test_dir;
    use crate::io::{DirectAlignment, IoMode, OpenMode, Storage, UringStorage};

    fn pattern(len: usize, seed: u64) -> Vec<u8> {
        let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 24) as u8
            })
            .collect()
    }

    fn flush(storage: &dyn Storage, tail: &TailFile, file: &Arc<dyn IoFile>) {
        let ops = tail.prepare_write(file.clone(), 0, WriteSpan::All);
        let done = storage.submit(ops);
        let ok = done.iter().all(|c| c.result.is_ok());
        for c in &done {
            if let Err(e) = &c.result {
                panic!("{e}");
            }
        }
        drop(done);
        tail.complete_write(ok);
    }

    fn storages() -> Vec<(IoMode, Arc<dyn Storage>)> {
        vec![
            (IoMode::Direct, Arc::new(UringStorage::new(IoMode::Direct).unwrap())),
            (IoMode::Buffered, Arc::new(UringStorage::new(IoMode::Buffered).unwrap())),
            (IoMode::Sync, Arc::new(crate::io::std_backend::StdStorage::default())),
        ]
    }

    #[test]
    fn appends_across_chunks_round_trip_and_the_cache_is_trimmed_in_chunks() {
        for (mode, s) in storages() {
            let dir = test_dir();
            let path = dir.path().join("0.log");
            let f = s.open_log(&path, OpenMode::CreateNew).unwrap();
            let tail = TailFile::new(f.clone(), 0, 300 * 1024).unwrap();
            let data = pattern(3 * CHUNK_BYTES + 12_345, 1);
            let mut at = 0;
            for (i, step) in [1usize, 4095, 70_000, 1, CHUNK_BYTES, 333, 200_000].iter().cycle().enumerate() {
                if at == data.len() {
                    break;
                }
                let n = (*step).min(data.len() - at);
                tail.append(&data[at..at + n]);
                at += n;
                if i % 2 == 1 {
                    flush(&*s, &tail, &f);
                }
                // Reads anywhere, below and inside the window, across chunk boundaries.
                for (pos, len) in [
                    (0u64, 10usize),
                    (at as u64 / 2, 5000),
                    (at.saturating_sub(CHUNK_BYTES + 7) as u64, CHUNK_BYTES + 50),
                ] {
                    let mut b = vec![0u8; len];
                    let got = tail.read_at(&mut b, pos).unwrap();
                    let want = (at.saturating_sub(pos as usize)).min(len);
                    assert_eq!(got, want, "{mode}");
                    assert_eq!(&b[..got], &data[pos as usize..pos as usize + got], "{mode} read {len} at {pos}");
                }
            }
            flush(&*s, &tail, &f);
            assert_eq!(tail.unwritten(), 0);
            let st = tail.stats();
            assert!(st.buffered_bytes >= 300 * 1024 && st.buffered_bytes <= 300 * 1024 + 2 * CHUNK, "{st:?}");
            {
                let s = tail.lock();
                assert!(s.chunks.len() <= 3, "{mode}: trimmed to the cache in whole chunks: {}", s.chunks.len());
            }
            // On disk: the data, then (O_DIRECT) zeros to the block boundary.
            let back = std::fs::read(&path).unwrap();
            assert_eq!(&back[..data.len()], &data[..], "{mode}");
            assert!(back[data.len()..].iter().all(|&b| b == 0), "{mode}: padding is zero");
            if mode == IoMode::Direct {
                assert_eq!(back.len() as u64 % tail.lock().align, 0);
            } else {
                assert_eq!(back.len(), data.len());
            }
        }
    }

    #[test]
    fn padding_is_zero_after_truncation_reopen_and_chunk_reuse() {
        let s = UringStorage::new(IoMode::Direct).unwrap();
        let dir = test_dir();
        let path = dir.path().join("0.log");
        let f = s.open_log(&path, OpenMode::CreateNew).unwrap();
        let align = write_alignment(f.direct_alignment().unwrap()) as usize;
        // Garbage in recycled pool memory: fill chunks of this thread's pool with 0xEE and give
        // them back, so the tail below gets them.
        let pool = pool::thread_pool();
        let dirty: Vec<pool::Chunk> = (0..4)
            .map(|_| {
                let mut c = pool.alloc();
                c.bytes_mut().fill(0xEE);
                c
            })
            .collect();
        drop(dirty);
        let tail = TailFile::new(f.clone(), 0, 1 << 20).unwrap();
        let data = vec![0xABu8; 3 * align + 100];
        tail.append(&data);
        flush(&s, &tail, &f);
        let back = std::fs::read(&path).unwrap();
        assert_eq!(back.len(), 4 * align);
        assert_eq!(&back[..data.len()], &data[..]);
        assert!(back[data.len()..].iter().all(|&b| b == 0), "no recycled bytes in the padding");

        // Truncate into the middle of a block: the bytes past the cut in memory are stale 0xAB.
        tail.truncate(align as u64 + 10).unwrap();
        tail.append(b"xyz");
        flush(&s, &tail, &f);
        let back = std::fs::read(&path).unwrap();
        assert_eq!(back.len(), 2 * align);
        assert_eq!(&back[..align + 10], &data[..align + 10]);
        assert_eq!(&back[align + 10..align + 13], b"xyz");
        assert!(back[align + 13..].iter().all(|&b| b == 0), "no stale bytes after a truncation");

        // Truncate below the window (the tail reloads the partial block from the file), then
        // reopen: the partial block comes back from the file and the next write pads with zeros.
        tail.truncate(5).unwrap();
        tail.append(&[7u8; 20]);
        flush(&s, &tail, &f);
        drop(tail);
        let len = 25u64;
        f.set_len(2 * align as u64).unwrap(); // as after a crash: garbage-free but longer
        let tail = TailFile::new(f.clone(), len, 1 << 20).unwrap();
        tail.append(b"!");
        flush(&s, &tail, &f);
        let back = std::fs::read(&path).unwrap();
        assert_eq!(&back[..5], &data[..5]);
        assert_eq!(&back[5..25], &[7u8; 20]);
        assert_eq!(back[25], b'!');
        assert!(back[26..align].iter().all(|&b| b == 0), "padding after reopen");
    }

    /// A tail with everything written and a cache under a chunk holds no chunk: in direct mode
    /// only its partial last block, parked in a buffer of its own, which reads are served from
    /// and the next append's write rewrites, so the file stays exact. Reopened, a tail parks its
    /// partial block at once. A cache of a chunk or more keeps the chunk.
    #[test]
    fn an_idle_tail_with_a_small_cache_holds_no_chunk_but_its_partial_block() {
        for (mode, s) in storages() {
            let dir = test_dir();
            let path = dir.path().join("0.log");
            let f = s.open_log(&path, OpenMode::CreateNew).unwrap();
            let tail = TailFile::new(f.clone(), 0, 0).unwrap();
            let mut want = pattern(CHUNK_BYTES + 100, 3);
            tail.append(&want);
            flush(&*s, &tail, &f);
            let align = tail.lock().align as usize;
            let parked = |t: &TailFile| t.lock().parked.as_ref().map_or(0, |b| b.len());
            assert_eq!(tail.stats().chunks, 0, "{mode}");
            assert_eq!(parked(&tail), (CHUNK_BYTES + 100) % align, "{mode}: the partial block is parked");
            let mut b = vec![0u8; 50];
            assert_eq!(tail.read_at(&mut b, CHUNK_BYTES as u64 + 20).unwrap(), 50);
            assert_eq!(b, want[CHUNK_BYTES + 20..CHUNK_BYTES + 70], "{mode}: read from the parked bytes");
            let next = pattern(align - 100 % align, 4);
            tail.append(&next);
            want.extend_from_slice(&next);
            assert_eq!((tail.stats().chunks, parked(&tail)), (1, 0), "{mode}: an append takes a chunk again");
            flush(&*s, &tail, &f);
            assert_eq!((tail.stats().chunks, parked(&tail)), (0, 0), "{mode}: a block boundary: nothing held");
            tail.append(b"more");
            want.extend_from_slice(b"more");
            flush(&*s, &tail, &f);
            let mut b = [0u8; 4];
            assert_eq!(tail.read_at(&mut b, tail.logical_len() - 4).unwrap(), 4);
            assert_eq!(&b, b"more");
            let mut all = vec![0u8; want.len()];
            f.read_exact_at(&mut all, 0).unwrap();
            assert!(all == want, "{mode}: the file holds exactly what was appended");

            // Reopened: the partial block is parked, and the next append rewrites it whole.
            drop(tail);
            let tail = TailFile::new(f.clone(), want.len() as u64, CHUNK).unwrap();
            assert_eq!((tail.stats().chunks, parked(&tail)), (0, 4 % align), "{mode}: reopened");
            tail.append(b"again");
            want.extend_from_slice(b"again");
            flush(&*s, &tail, &f);
            assert_eq!(tail.stats().chunks, 1, "{mode}: a cache of a chunk keeps its chunk");
            let mut all = vec![0u8; want.len()];
            f.read_exact_at(&mut all, 0).unwrap();
            assert!(all == want, "{mode}: exact after the reopen");
            tail.set_cache_bytes(0);
            assert_eq!(tail.stats().chunks, 0, "{mode}: a smaller cache gives the chunk back at once");

            // Truncated while parked, inside the parked block and then below it: still no chunk,
            // and the next append rewrites the block the cut ends in, so the file holds exactly
            // what is left and what came after.
            for cut in [want.len() - 3, want.len() - 3 - align - 10] {
                tail.truncate(cut as u64).unwrap();
                want.truncate(cut);
                assert_eq!(tail.stats().chunks, 0, "{mode}: truncated to {cut}");
                let mut b = [0u8; 2];
                assert_eq!(tail.read_at(&mut b, cut as u64 - 2).unwrap(), 2);
                assert_eq!(b, want[cut - 2..cut], "{mode}: read after the cut to {cut}");
            }
            tail.append(b"tail");
            want.extend_from_slice(b"tail");
            flush(&*s, &tail, &f);
            let mut all = vec![0u8; want.len()];
            f.read_exact_at(&mut all, 0).unwrap();
            assert!(all == want, "{mode}: exact after truncations of a parked tail");
        }
    }

    /// A file in memory whose reads return at most `step` bytes: the short reads a read below
    /// the window must retry.
    #[derive(Debug)]
    struct ShortReads {
        data: std::sync::Mutex<Vec<u8>>,
        step: usize,
    }

    impl IoFile for ShortReads {
        fn path(&self) -> &Path {
            Path::new("short-reads.log")
        }
        fn read_at(&self, buf: &mut [u8], pos: u64) -> Result<usize> {
            let data = self.data.lock().unwrap();
            let from = (pos as usize).min(data.len());
            let n = (data.len() - from).min(buf.len()).min(self.step);
            buf[..n].copy_from_slice(&data[from..from + n]);
            Ok(n)
        }
        fn write_all_at(&self, _buf: &[u8], _pos: u64) -> Result<()> {
            Err(Error::io("write", self.path(), std::io::Error::other("the test file only reads")))
        }
        fn sync_data(&self) -> Result<()> {
            Ok(())
        }
        fn set_len(&self, len: u64) -> Result<()> {
            self.data.lock().unwrap().truncate(len as usize);
            Ok(())
        }
        fn allocate(&self, _len: u64) -> Result<()> {
            Ok(())
        }
        fn len(&self) -> Result<u64> {
            Ok(self.data.lock().unwrap().len() as u64)
        }
        fn modified_ms(&self) -> Result<i64> {
            Ok(0)
        }
    }

    #[test]
    fn reads_below_the_window_retry_short_reads_and_stop_where_the_file_ends() {
        let data = pattern(10_000, 9);
        let file = Arc::new(ShortReads { data: std::sync::Mutex::new(data.clone()), step: 777 });
        // No cache: after this append the window starts at the logical end.
        let tail = TailFile::new(file.clone(), data.len() as u64, 0).unwrap();
        tail.append(b"in memory");
        let end = data.len() + 9;
        let mut b = vec![0u8; end];
        assert_eq!(tail.read_at(&mut b, 0).unwrap(), end, "the file part in short reads, then memory");
        assert_eq!(&b[..data.len()], &data[..]);
        assert_eq!(&b[data.len()..], b"in memory");
        let mut b = vec![0u8; 3000];
        assert_eq!(tail.read_at(&mut b, 5000).unwrap(), 3000);
        assert_eq!(&b[..], &data[5000..8000]);
        // The file ends below the window (cut behind the tail's back): the read ends there too,
        // without the bytes in memory past the gap.
        file.set_len(4000).unwrap();
        let mut b = vec![0u8; end];
        assert_eq!(tail.read_at(&mut b, 1000).unwrap(), 3000);
        assert_eq!(&b[..3000], &data[1000..4000]);
    }

    /// A tail with a 1 MiB cache over a new `0.log` opened O_DIRECT: the storage, the directory
    /// (removed when dropped), the file's path, the file and the tail.
    fn direct_tail() -> (UringStorage, tempfile::TempDir, std::path::PathBuf, Arc<dyn IoFile>, TailFile) {
        let s = UringStorage::new(IoMode::Direct).unwrap();
        let dir = test_dir();
        let path = dir.path().join("0.log");
        let f = s.open_log(&path, OpenMode::CreateNew).unwrap();
        let tail = TailFile::new(f.clone(), 0, 1 << 20).unwrap();
        (s, dir, path, f, tail)
    }

    /// The file at `path` holds `data`, then zeros only.
    fn assert_file(path: &Path, data: &[u8]) {
        let file = std::fs::read(path).unwrap();
        assert_eq!(&file[..data.len()], data);
        assert!(file[data.len()..].iter().all(|&b| b == 0), "zeros past the data");
    }

    /// The bytes a write covers, copied.
    fn write_bytes(ops: &[IoOp]) -> Vec<u8> {
        ops.iter()
            .flat_map(|op| match &op.kind {
                IoOpKind::Write { buf, .. } => buf.to_vec(),
                IoOpKind::SyncData => unreachable!(),
            })
            .collect()
    }

    #[test]
    fn appends_beside_a_write_in_flight_copy_no_chunk() {
        let (s, _dir, path, f, tail) = direct_tail();
        let align = tail.align() as usize;
        let data = pattern(5 * align + 300, 7);
        let read_back = |len: usize| {
            let mut b = vec![0u8; len];
            assert_eq!(tail.read_at(&mut b, 0).unwrap(), len);
            b
        };
        // A write ending on a block boundary: the appends after it land past its bytes, in the
        // same chunk.
        tail.append(&data[..2 * align]);
        let first = tail.prepare_write(f.clone(), 0, WriteSpan::All);
        let first_bytes = write_bytes(&first);
        tail.append(&data[2 * align..3 * align + 100]);
        // The next write may go out beside it; it ends inside a block, which it pads.
        let second = tail.prepare_write(f.clone(), 0, WriteSpan::All);
        let second_bytes = write_bytes(&second);
        assert_eq!(second_bytes.len(), 2 * align);
        // Appends into that block and past it, while both writes are out.
        tail.append(&data[3 * align + 100..3 * align + 200]);
        tail.append(&data[3 * align + 200..5 * align + 300]);
        assert_eq!(tail.stats().chunk_copies, 0, "no chunk copied");
        assert_eq!(tail.stats().aside, align - 100, "only the padded block's bytes wait aside");
        assert_eq!(write_bytes(&first), first_bytes, "the writes' bytes did not change");
        assert_eq!(write_bytes(&second), second_bytes);
        assert_eq!(read_back(data.len()), data, "reads see every append");
        let mut inside = vec![0u8; align];
        assert_eq!(tail.read_at(&mut inside, (3 * align + 150) as u64).unwrap(), align);
        assert_eq!(inside, data[3 * align + 150..4 * align + 150], "a read from inside the padded block");
        assert!(tail.prepare_write(f.clone(), 0, WriteSpan::All).is_empty(), "the padded block is still out");
        for ops in [first, second] {
            assert!(s.submit(ops).iter().all(|c| c.result.is_ok()));
            tail.complete_write(true);
        }
        // The next write takes the block's newer bytes into the chunk, in place.
        flush(&s, &tail, &f);
        assert_eq!(tail.stats().chunk_copies, 0);
        assert_eq!(read_back(data.len()), data);
        assert_file(&path, &data);
    }

    #[test]
    fn a_padded_block_at_a_chunks_end_and_buffers_kept_past_their_write() {
        let (s, _dir, path, f, tail) = direct_tail();
        let data = pattern(CHUNK_BYTES + 5000, 11);
        // A write padding the chunk's last block; appends fill that block (aside) and go on
        // into the next chunk.
        tail.append(&data[..CHUNK_BYTES - 100]);
        let ops = tail.prepare_write(f.clone(), 0, WriteSpan::All);
        let before = write_bytes(&ops);
        tail.append(&data[CHUNK_BYTES - 100..]);
        assert_eq!(tail.stats().chunk_copies, 0);
        assert_eq!(tail.stats().chunks, 2);
        assert_eq!(tail.stats().aside, 100);
        assert_eq!(write_bytes(&ops), before);
        let mut b = vec![0u8; data.len()];
        assert_eq!(tail.read_at(&mut b, 0).unwrap(), data.len());
        assert_eq!(b, data);
        // The write completes, but its buffers are still held (here by its completions) when
        // the next write comes: the block goes into a copy of the chunk, and the first write's
        // bytes stay as they were.
        let done = s.submit(ops);
        assert!(done.iter().all(|c| c.result.is_ok()));
        tail.complete_write(true);
        let next = tail.prepare_write(f.clone(), 0, WriteSpan::All);
        assert_eq!(tail.stats().chunk_copies, 1);
        drop(done);
        assert!(s.submit(next).iter().all(|c| c.result.is_ok()));
        tail.complete_write(true);
        assert_file(&path, &data);
    }

    #[test]
    fn a_truncation_beside_a_padded_write_keeps_the_bytes_before_it() {
        let (s, _dir, path, f, tail) = direct_tail();
        let align = tail.align() as usize;
        let data = pattern(2 * align, 9);
        tail.append(&data[..100]);
        let ops = tail.prepare_write(f.clone(), 0, WriteSpan::All);
        let before = write_bytes(&ops);
        tail.append(&data[100..2 * align]);
        // Cut inside the padded block, then inside the block past it: the bytes kept are the
        // appended ones, and the write in flight still has its own.
        tail.truncate(align as u64 + 50).unwrap();
        tail.truncate(300).unwrap();
        tail.append(&[5u8; 20]);
        assert_eq!(write_bytes(&ops), before);
        assert_eq!(
            tail.stats().aside,
            220,
            "the bytes kept aside were cut too, and the appends after the cut went aside"
        );
        assert_eq!(tail.stats().chunk_copies, 0);
        assert!(s.submit(ops).iter().all(|c| c.result.is_ok()));
        tail.complete_write(true);
        flush(&s, &tail, &f);
        let mut want = data[..300].to_vec();
        want.extend([5u8; 20]);
        let mut b = vec![0u8; want.len()];
        assert_eq!(tail.read_at(&mut b, 0).unwrap(), want.len());
        assert_eq!(b, want);
        assert_file(&path, &want);
    }

    #[test]
    fn a_write_in_flight_keeps_its_bytes_while_the_tail_moves_on() {
        let (s, _dir, path, f, tail) = direct_tail();
        tail.append(&[1u8; 1000]);
        let ops = tail.prepare_write(f.clone(), 0, WriteSpan::All);
        assert_eq!(ops.len(), 1);
        let before: Vec<u8> = match &ops[0].kind {
            IoOpKind::Write { buf, .. } => buf.to_vec(),
            IoOpKind::SyncData => unreachable!(),
        };
        // Appends while the write exists go aside (its padded block), and a truncation into its
        // bytes makes a copy of the chunk.
        tail.append(&[2u8; 5000]);
        tail.truncate(900).unwrap();
        tail.append(&[3u8; 10]);
        match &ops[0].kind {
            IoOpKind::Write { buf, .. } => assert_eq!(&buf[..], &before[..], "the write's bytes did not change"),
            IoOpKind::SyncData => unreachable!(),
        }
        assert_eq!(tail.writes_in_flight(), 1);
        assert!(
            tail.prepare_write(f.clone(), 0, WriteSpan::All).is_empty(),
            "the write in flight ends inside a block: the next one waits for it"
        );
        let done = s.submit(ops);
        assert!(done.iter().all(|c| c.result.is_ok()));
        drop(done);
        tail.complete_write(true);
        assert_eq!(tail.unwritten(), 910 - 900);
        flush(&s, &tail, &f);
        let mut b = vec![0u8; 910];
        assert_eq!(tail.read_at(&mut b, 0).unwrap(), 910);
        assert!(b[..900].iter().all(|&x| x == 1) && b[900..].iter().all(|&x| x == 3));
        let back = std::fs::read(&path).unwrap();
        assert_eq!(&back[..910], &b[..]);
        assert!(back[910..].iter().all(|&x| x == 0));
    }

    #[test]
    fn registered_and_refused_registration_write_the_same_bytes() {
        let run = |refuse: bool| {
            std::thread::spawn(move || {
                pool::refuse_registration_on_this_thread(refuse);
                let s = UringStorage::new(IoMode::Direct).unwrap();
                let dir = test_dir();
                let path = dir.path().join("0.log");
                let f = s.open_log(&path, OpenMode::CreateNew).unwrap();
                let tail = TailFile::new(f.clone(), 0, 0).unwrap();
                let data = pattern(CHUNK_BYTES * 2 + 777, 9);
                for piece in data.chunks(50_000) {
                    tail.append(piece);
                    flush(&s, &tail, &f);
                }
                let back = std::fs::read(&path).unwrap();
                assert_eq!(&back[..data.len()], &data[..]);
                assert!(back[data.len()..].iter().all(|&b| b == 0));
                thread_pool_stats(false)
            })
            .join()
            .unwrap()
        };
        let reg = run(false);
        assert_eq!(reg.mode, BufferMode::Registered { partial: None }, "{reg:?}");
        assert!(reg.registered_bytes >= CHUNK, "{reg:?}");
        assert!(reg.fixed_writes > 0 && reg.unregistered_writes == 0, "{reg:?}");
        let refused = run(true);
        assert!(matches!(&refused.mode, BufferMode::Unregistered(why) if why.contains("refused")), "{refused:?}");
        assert_eq!(refused.registered_bytes, 0);
        assert!(refused.fixed_writes == 0 && refused.unregistered_writes > 0, "{refused:?}");
        let sync = std::thread::spawn(|| thread_pool_stats(true)).join().unwrap();
        assert!(matches!(sync.mode, BufferMode::Unregistered(ref why) if why.contains("sync")), "{sync:?}");
    }

    #[test]
    fn writes_in_flight_together_complete_in_order_and_one_failing_fails_those_after_it() {
        let s = UringStorage::new(IoMode::Direct).unwrap();
        let dir = test_dir();
        let f = s.open_log(&dir.path().join("0.log"), OpenMode::CreateNew).unwrap();
        let tail = TailFile::new(f.clone(), 0, 0).unwrap();
        let chunk = CHUNK_BYTES;
        tail.append(&pattern(chunk * 2 + 100, 1));
        // Whole chunks only: two writes of one chunk each would be one write of two; here the
        // second chunk is written by a write of its own after more is appended.
        let first = tail.prepare_write(f.clone(), 0, WriteSpan::WholeChunks);
        assert_eq!(first.len(), 2, "one op per whole chunk");
        assert!(tail.prepare_write(f.clone(), 0, WriteSpan::WholeChunks).is_empty(), "no whole chunk left");
        let second = tail.prepare_write(f.clone(), 0, WriteSpan::All);
        assert_eq!(second.len(), 1, "the partial chunk");
        assert_eq!(tail.writes_in_flight(), 2);
        assert!(
            tail.prepare_write(f.clone(), 0, WriteSpan::All).is_empty(),
            "the newest write ends inside a block: nothing may follow it yet"
        );
        drop((first, second));
        tail.complete_write(false);
        tail.complete_write(true);
        assert_eq!(tail.unwritten(), (chunk * 2 + 100) as u64, "a write after a failed one counts as failed too");
        assert_eq!(tail.writes_in_flight(), 0);
        // Once none is in flight the next writes start afresh from what is in the file.
        let again = tail.prepare_write(f.clone(), 0, WriteSpan::All);
        let done = s.submit(again);
        assert!(done.iter().all(|c| c.result.is_ok()));
        drop(done);
        tail.complete_write(true);
        assert_eq!(tail.unwritten(), 0);
    }

    #[test]
    fn write_alignment_takes_the_filesystem_block_where_it_divides_the_chunks() {
        let a = |mem, offset, fs_block| write_alignment(DirectAlignment { mem, offset, fs_block });
        assert_eq!(a(512, 512, 512), 512);
        assert_eq!(a(512, 512, 4096), 4096, "ext4's 4 KiB blocks on a 512-byte device");
        assert_eq!(a(4096, 512, 512), 4096, "memory alignment counts too");
        assert_eq!(a(512, 512, 64 << 10), 64 << 10);
        assert_eq!(a(512, 512, 1024), 1024, "ext4 with 1 KiB blocks");
        assert_eq!(a(512, 512, 1 << 20), 4096, "a block larger than a chunk is not taken");
        assert_eq!(a(512, 512, 3 * 4096), 4096, "nor one that is not a power of two");
        assert_eq!(a(4096, 4096, 1024), 4096, "never below what the kernel requires");
    }

    /// Batches that do not end on a block boundary (16,000 bytes), each written as it comes:
    /// every write starts and ends on the filesystem's block, not just the kernel's 512 bytes.
    #[test]
    fn unaligned_batches_are_written_in_whole_filesystem_blocks() {
        let uring = UringStorage::new(IoMode::Direct).unwrap();
        let sim = crate::io::sim::SimStorage::with_alignment(DirectAlignment { mem: 512, offset: 512, fs_block: 4096 });
        // The simulated disk's block is known: 4096 over 512-byte sectors.
        let storages: [(&dyn Storage, Option<u64>); 2] = [(&uring, None), (&sim, Some(4096))];
        for (s, known) in storages {
            let dir = test_dir();
            s.create_dir_all(dir.path()).unwrap(); // for the simulated disk
            let f = s.open_log(&dir.path().join("0.log"), OpenMode::CreateNew).unwrap();
            let a = f.direct_alignment().unwrap();
            let block = known.unwrap_or_else(|| write_alignment(a));
            let tail = TailFile::new(f.clone(), 0, 1 << 20).unwrap();
            assert_eq!(tail.align(), block, "{a:?}");
            let data = pattern(40 * 16_000, 3);
            for batch in data.chunks(16_000) {
                tail.append(batch);
                let ops = tail.prepare_write(f.clone(), 0, WriteSpan::All);
                for op in &ops {
                    let IoOpKind::Write { buf, pos, .. } = &op.kind else { unreachable!() };
                    assert!(
                        pos.is_multiple_of(block) && (buf.len() as u64).is_multiple_of(block),
                        "a write of {} at {pos}",
                        buf.len()
                    );
                }
                assert!(s.submit(ops).iter().all(|c| c.result.is_ok()));
                tail.complete_write(true);
            }
            let mut back = vec![0u8; data.len() + 2 * block as usize];
            let n = f.read_at(&mut back, 0).unwrap();
            assert_eq!(n, align_up(data.len() as u64, block) as usize, "the file ends on a block");
            assert_eq!(&back[..data.len()], &data[..]);
            assert!(back[data.len()..n].iter().all(|&b| b == 0), "zeros past the data");
        }
    }
}
