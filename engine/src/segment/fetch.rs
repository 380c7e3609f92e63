//! The fetch read: the bytes of [`Segment::read`] in one device read, handed back without a copy.
//!
//! A catching-up consumer's fetch used to cost two reads in series (the header walk of
//! `translate_offset`, then the data) into unaligned `Vec`s, which O_DIRECT had to bounce through
//! a zero-filled aligned buffer and copy out. Here the offset index bounds where the batch
//! holding the start offset can be, before anything is read. An entry's offset is its batch's
//! last offset, so that batch starts after the floor entry `(k, p)` and at or before the first
//! entry above the start offset, and ends at or before the entry after that one (or the
//! segment's end). One aligned read from the floor entry's position through the later of that
//! end and `max_size` bytes past the latest start holds the headers to walk and every byte the
//! fetch can return, the whole first batch included however small `max_size` is (Kafka returns
//! it whole with `minOneMessage`): the walk runs in memory and the result is a [`FetchBytes`]
//! view of that buffer. Where the segment's index is dense (every batch but the first has an
//! entry: batches larger than `index.interval.bytes`; [`IndexDensity`]), the batch after the
//! floor entry's is the next entry's, so the read starts there and holds the batch sought and
//! nothing before it: a point lookup reads one batch. A read that stops before an offset (a high watermark) finds the batch holding it in
//! the same window instead of walking to it first.
//!
//! The buffer comes from a small per-thread pool of aligned buffers ([`AlignedBuf`]) that a
//! fetch gets back once its consumer dropped the view, so a sequential consumer's fetches neither
//! allocate nor zero memory.
//!
//! Anything unexpected (a header that does not parse, a batch running past the segment or
//! outside what the index said, the start offset past the segment's last batch, a file shorter
//! than the segment) leaves the fast path: [`Segment::read`] then does the general walk, whose
//! errors name the file and position.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU32, AtomicU8, Ordering};
use std::sync::Arc;

use super::Segment;
use crate::error::Result;
use crate::format::batch::{BatchHeader, EntryFrame, BATCH_HEADER_SIZE, HEADER_SIZE_UP_TO_MAGIC};
use crate::index::OffsetPosition;
use crate::io::{readahead, AlignedBuf, IoFile};

// Pooled buffers are aligned to READ_ALIGN in memory, and window reads start and end on it in
// the file (or on the file's O_DIRECT alignment if larger): 4 KiB, like fio's reads.
use super::scan::READ_ALIGN;
/// Buffers kept per thread for reuse...
const POOL_SLOTS: usize = 8;
/// ...holding at most this many bytes in all...
const POOL_BYTES: usize = 16 << 20;
/// ...none larger than this (a fetch of a larger window allocates a buffer of its own).
const POOL_MAX_BUF: usize = 8 << 20;
/// Fetches of at least this many bytes from a sealed segment's O_DIRECT file read the next
/// fetch's window ahead (a consumer catching up; smaller fetches are seeks or tail reads).
const READ_AHEAD_MIN_FETCH: u32 = 256 * 1024;

/// The bytes of a fetch: whole batches exactly as stored. Either a view into the aligned buffer
/// the segment was read into (no copy) or an owned vector. Dereferences to `[u8]` and compares
/// equal to byte slices and vectors with the same contents.
#[derive(Clone, Default)]
pub struct FetchBytes {
    repr: Repr,
}

#[derive(Clone)]
enum Repr {
    Owned(Vec<u8>),
    Shared { buf: Arc<AlignedBuf>, start: usize, len: usize },
}

impl Default for Repr {
    fn default() -> Self {
        Repr::Owned(Vec::new())
    }
}

impl FetchBytes {
    /// A view of `len` bytes at `start` of `buf`.
    fn shared(buf: Arc<AlignedBuf>, start: usize, len: usize) -> FetchBytes {
        assert!(start + len <= buf.capacity(), "view past the buffer");
        if len == 0 {
            return FetchBytes::default();
        }
        FetchBytes { repr: Repr::Shared { buf, start, len } }
    }

    pub(crate) fn as_slice(&self) -> &[u8] {
        match &self.repr {
            Repr::Owned(v) => v,
            Repr::Shared { buf, start, len } => &buf.full()[*start..*start + *len],
        }
    }

    /// Whether these bytes are a view of the buffer the segment was read into (no copy was made).
    pub fn is_shared(&self) -> bool {
        matches!(self.repr, Repr::Shared { .. })
    }

    /// The bytes as a vector (a copy for a view).
    pub fn into_vec(self) -> Vec<u8> {
        match self.repr {
            Repr::Owned(v) => v,
            Repr::Shared { .. } => self.as_slice().to_vec(),
        }
    }
}

impl std::ops::Deref for FetchBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl AsRef<[u8]> for FetchBytes {
    fn as_ref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl std::borrow::Borrow<[u8]> for FetchBytes {
    fn borrow(&self) -> &[u8] {
        self.as_slice()
    }
}

impl std::fmt::Debug for FetchBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.as_slice().fmt(f)
    }
}

impl std::hash::Hash for FetchBytes {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_slice().hash(state)
    }
}

impl From<Vec<u8>> for FetchBytes {
    fn from(v: Vec<u8>) -> FetchBytes {
        FetchBytes { repr: Repr::Owned(v) }
    }
}

impl From<FetchBytes> for Vec<u8> {
    fn from(b: FetchBytes) -> Vec<u8> {
        b.into_vec()
    }
}

impl<'a> IntoIterator for &'a FetchBytes {
    type Item = &'a u8;
    type IntoIter = std::slice::Iter<'a, u8>;
    fn into_iter(self) -> Self::IntoIter {
        self.as_slice().iter()
    }
}

impl PartialEq for FetchBytes {
    fn eq(&self, other: &FetchBytes) -> bool {
        self.as_slice() == other.as_slice()
    }
}
impl Eq for FetchBytes {}

macro_rules! eq_with {
    ($($t:ty),*) => {$(
        impl PartialEq<$t> for FetchBytes {
            fn eq(&self, other: &$t) -> bool {
                self.as_slice() == &other[..]
            }
        }
        impl PartialEq<FetchBytes> for $t {
            fn eq(&self, other: &FetchBytes) -> bool {
                &self[..] == other.as_slice()
            }
        }
    )*};
}
eq_with!(Vec<u8>, [u8], &[u8]);

impl<const N: usize> PartialEq<[u8; N]> for FetchBytes {
    fn eq(&self, other: &[u8; N]) -> bool {
        self.as_slice() == &other[..]
    }
}

// Per thread: a cache of free read buffers, as an allocator keeps one per thread. It holds no
// I/O state, and a fetch on any thread (a shard, or an embedder's own) finds one without a lock.
thread_local! {
    /// This thread's reusable read buffers. A buffer is free when the pool holds its only
    /// reference (every view of it was dropped).
    static POOL: RefCell<Vec<Arc<AlignedBuf>>> = const { RefCell::new(Vec::new()) };
}

/// A free pooled buffer of at least `need` bytes aligned to `align` (the smallest that fits),
/// taken out of the pool, or a new one; either way its only reference.
fn take_buffer(need: usize, align: usize) -> Arc<AlignedBuf> {
    let pooled = POOL
        .try_with(|p| {
            let mut p = p.borrow_mut();
            let best = p
                .iter()
                .enumerate()
                .filter(|(_, b)| Arc::strong_count(b) == 1 && b.capacity() >= need && b.align() >= align)
                .min_by_key(|(_, b)| b.capacity())
                .map(|(i, _)| i)?;
            let mut b = p.swap_remove(best);
            if Arc::get_mut(&mut b).is_some() {
                Some(b)
            } else {
                p.push(b);
                None
            }
        })
        .ok()
        .flatten();
    pooled.unwrap_or_else(|| {
        // Some room above the request, so that the next window (a few KiB longer or shorter)
        // fits the same buffer.
        let cap = (need + need / 8).div_ceil(64 * 1024) * (64 * 1024);
        Arc::new(AlignedBuf::new(cap.max(READ_ALIGN), align.max(READ_ALIGN)))
    })
}

/// Keeps `buf` in the pool if there is room, making room by dropping free buffers.
fn give_back(buf: &Arc<AlignedBuf>) {
    if buf.capacity() > POOL_MAX_BUF {
        return;
    }
    let _ = POOL.try_with(|p| {
        let mut p = p.borrow_mut();
        loop {
            let total: usize = p.iter().map(|b| b.capacity()).sum();
            if p.len() < POOL_SLOTS && total + buf.capacity() <= POOL_BYTES {
                p.push(buf.clone());
                return;
            }
            let smallest_free = p
                .iter()
                .enumerate()
                .filter(|(_, b)| Arc::strong_count(b) == 1)
                .min_by_key(|(_, b)| b.capacity())
                .map(|(i, _)| i);
            match smallest_free {
                Some(i) => {
                    p.swap_remove(i);
                }
                None => return,
            }
        }
    });
}

/// How a planned read went.
enum Planned {
    /// The fetch's bytes.
    Read(super::SegmentRead),
    /// The dense index's batch started above the offset sought: read again from the floor entry.
    Missed,
    /// Anything else unexpected: the general path.
    Elsewhere,
}

/// The limits of one fetch, as the window is sized for them.
#[derive(Clone, Copy, Debug)]
struct WindowFetch {
    max_size: u32,
    max_position: u32,
    min_one: bool,
}

/// File bytes `[start, start + len)` in an aligned buffer.
struct Window {
    buf: Arc<AlignedBuf>,
    /// Index in `buf` of the byte at `start`.
    off: usize,
    start: u64,
    len: usize,
}

impl Window {
    fn end(&self) -> u64 {
        self.start + self.len as u64
    }
    fn covers(&self, pos: u64, len: usize) -> bool {
        pos >= self.start && pos + len as u64 <= self.end()
    }
    fn at(&self, pos: u64, len: usize) -> &[u8] {
        let i = self.off + (pos - self.start) as usize;
        &self.buf.full()[i..i + len]
    }
}

/// The longest prefix of `bytes` made of whole batches (the framing alone: size field and
/// bounds), Kafka's rule for the end of a fetch, stopping before the first batch whose last
/// offset is `>= upper` when given (the batch holding a read's upper bound); and where the last
/// of them starts.
fn whole_batches(bytes: &[u8], upper: Option<i64>) -> (usize, Option<usize>) {
    let (mut end, mut last) = (0usize, None);
    while end + HEADER_SIZE_UP_TO_MAGIC <= bytes.len() {
        let Ok(frame) = EntryFrame::parse(&bytes[end..]) else { break };
        if frame.size < BATCH_HEADER_SIZE as i64 || end as i64 + frame.size > bytes.len() as i64 {
            break;
        }
        if let Some(upper) = upper {
            match BatchHeader::parse(&bytes[end..]) {
                Ok(h) if h.last_offset() < upper => {}
                _ => break,
            }
        }
        last = Some(end);
        end += frame.size as usize;
    }
    (end, last)
}

/// Consecutive gaps between index entries a segment of unknown density must be seen to be
/// dense (the floor entry's batch ending where the next entry's starts) before its fetches
/// start at the next entry's batch without walking to it.
const DENSE_GAPS_TO_TRUST: u8 = 16;

/// Whether a segment's offset index is dense: every batch but the first has an entry, so the
/// batch after an entry's is the next entry's (`Segment::dense_index`).
///
/// Known where this process built the index: appends to a segment it created (dense while
/// every batch but the first got an entry), or a recovery rebuild. A segment opened from its
/// files without a rebuild (after a clean shutdown) starts unknown and learns from its fetches'
/// walks, which step over the floor entry's batch anyway: after [`DENSE_GAPS_TO_TRUST`] dense
/// gaps in a row, each a different one (and none that is not), it is taken as dense. A guess that turns out wrong (the
/// batch at the next entry starts above the offset sought) makes it sparse for good, and costs
/// that one fetch a second read (the general path).
#[derive(Debug)]
pub(crate) struct IndexDensity {
    state: AtomicU8,
    /// The position of the last gap counted (its next entry's), so that fetches walking over the
    /// same gap (a scan of the offsets of one batch) count it once.
    last_gap: AtomicU32,
}

impl IndexDensity {
    /// Taken as dense, learned.
    const LEARNED: u8 = u8::MAX - 2;
    /// Dense, as built here.
    const DENSE: u8 = u8::MAX - 1;
    /// Not dense (or not to be guessed so again).
    const SPARSE: u8 = u8::MAX;
    // Values below DENSE_GAPS_TO_TRUST: unknown, that many dense gaps seen in a row.

    fn with(state: u8) -> IndexDensity {
        IndexDensity { state: AtomicU8::new(state), last_gap: AtomicU32::new(0) }
    }
    /// A new segment's index: dense until a batch after the first gets no entry.
    pub(crate) fn dense() -> IndexDensity {
        Self::with(Self::DENSE)
    }
    /// An index as a rebuild found it.
    pub(crate) fn known(dense: bool) -> IndexDensity {
        Self::with(if dense { Self::DENSE } else { Self::SPARSE })
    }
    /// An index read from its file: to be learned.
    pub(crate) fn unknown() -> IndexDensity {
        Self::with(0)
    }
    /// A batch after the first was appended without an entry.
    pub(crate) fn set_sparse(&self) {
        self.state.store(Self::SPARSE, Ordering::Relaxed);
    }
    /// Whether fetches may start at the next entry's batch.
    fn trusted(&self) -> bool {
        matches!(self.state.load(Ordering::Relaxed), Self::DENSE | Self::LEARNED)
    }
    /// A walk saw whether the floor entry's batch ends where the next entry's (at `next`)
    /// starts, in an index of `gaps` gaps between entries (a segment with fewer than
    /// [`DENSE_GAPS_TO_TRUST`] is taken as dense once that many were seen dense).
    fn observe(&self, next: u32, dense_gap: bool, gaps: usize) {
        let v = self.state.load(Ordering::Relaxed);
        if v >= DENSE_GAPS_TO_TRUST {
            return;
        }
        if !dense_gap {
            self.state.store(Self::SPARSE, Ordering::Relaxed);
        } else if self.last_gap.swap(next, Ordering::Relaxed) != next {
            let seen = v + 1;
            let enough = seen as usize >= gaps.min(DENSE_GAPS_TO_TRUST as usize);
            self.state.store(if enough { Self::LEARNED } else { seen }, Ordering::Relaxed);
        }
    }
    /// The batch at the next entry started above the offset sought: a learned guess was wrong.
    /// (For an index built here it is an offset gap, and the index stays dense.)
    fn missed(&self) {
        if self.state.load(Ordering::Relaxed) == Self::LEARNED {
            self.state.store(Self::SPARSE, Ordering::Relaxed);
        }
    }
}

/// What the offset index says about a fetch from one start offset, before anything is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Plan {
    /// Where the read and the walk start: the floor entry's batch, or the batch sought itself.
    from: u32,
    /// The batch sought starts at or before this position...
    start_bound: u32,
    /// ...and ends at or before this one.
    end_bound: u32,
    /// `from` is the batch sought by the dense index alone (`Segment::dense_index`), with no walk
    /// to it: checked against the batch's own base offset once read.
    skipped_walk: bool,
    /// Where the next entry's batch starts, when the walk steps over the floor entry's batch and
    /// the index's density is still being learned: whether that batch ends there is a gap seen.
    learn_gap_to: Option<u32>,
    /// Gaps between the index's entries (its entries less one).
    gaps: usize,
}

/// Where a read stops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReadEnd {
    /// Before this byte position (Kafka's `maxPosition`).
    Position(u32),
    /// Before the batch holding this offset, found by the read itself: the position Kafka's
    /// `maxPosition` would be, without a walk to find it first.
    BatchHolding(i64),
}

impl Segment {
    /// The offset alignment of window reads: 4 KiB, or the file's O_DIRECT alignment if larger;
    /// and the memory alignment buffers need.
    fn fetch_alignment(&self) -> (u64, usize) {
        match self.log.direct_alignment() {
            Some(a) => ((a.offset.max(READ_ALIGN)) as u64, a.mem.max(READ_ALIGN)),
            None => (1, READ_ALIGN),
        }
    }

    /// Reads the file bytes `[start, end)` into a pooled aligned buffer with one aligned read of
    /// their superset (no bounce in direct mode, and no read past `end` but for the alignment).
    /// The window is short only where the file ends first.
    fn read_into_pool(&self, start: u64, end: u64) -> Result<Window> {
        let (al, mem_align) = self.fetch_alignment();
        let read_start = start / al * al;
        let read_end = end.div_ceil(al) * al;
        let want = (read_end - read_start) as usize;
        let must = (end - read_start) as usize;
        let mut buf = take_buffer(want, mem_align);
        let filled = {
            let b = Arc::get_mut(&mut buf).expect("take_buffer returns a buffer with no other reference");
            crate::io::read_up_to(&*self.log, read_start, &mut b.full_mut()[..want], must, |_| ())
        };
        // Pooled again before any error returns, so a failed read does not lose the buffer.
        give_back(&buf);
        let got = filled?.min(must);
        let off = (start - read_start) as usize;
        Ok(Window { buf, off, start, len: got.saturating_sub(off) })
    }

    /// [`Segment::read_into_pool`] of `[start, end)` (`end <= size`), `None` when the file holds
    /// fewer bytes than that (shorter than the segment says).
    fn read_window(&self, start: u64, end: u64) -> Result<Option<Window>> {
        let w = self.read_into_pool(start, end)?;
        Ok((w.end() == end).then_some(w))
    }

    /// The end of the window a fetch of `max_size` bytes (`min_one` as [`Segment::read`]) below
    /// `max_position` reads, for `plan`: the headers up to the latest start of the batch
    /// sought, `max_size` bytes after it and, with `min_one`, the latest end of that batch.
    fn window_end(&self, plan: &Plan, max_size: u32, max_position: u32, min_one: bool) -> u64 {
        let size = self.size as u64;
        let latest_start = plan.start_bound as u64;
        let headers_end = (plan.from.max(plan.start_bound) as u64 + BATCH_HEADER_SIZE as u64).min(size);
        let mut data_end = latest_start + max_size as u64;
        if min_one {
            data_end = data_end.max(plan.end_bound as u64);
        }
        headers_end.max(data_end.min(max_position as u64)).min(size)
    }

    /// What the offset index says about a fetch from `start_offset` ([`Plan`]). `None` when the
    /// floor is at the segment's end. Positions that do not fit between the floor and the
    /// segment's end (a damaged index) are replaced by the segment's end: a longer read, never a
    /// wrong answer.
    fn locate(&self, start_offset: i64, shortcut: bool) -> Result<Option<Plan>> {
        let size = self.size;
        let (floor, [next, after], gaps) = {
            let idx = self.indexes()?;
            let (floor, next) = idx.offset().lookup_with_next(start_offset);
            (floor, next, idx.offset().entries().saturating_sub(1))
        };
        if floor.position as u64 + BATCH_HEADER_SIZE as u64 > size as u64 {
            return Ok(None);
        }
        let at_or_after = |e: Option<OffsetPosition>, lo: u32| match e {
            Some(e) if e.position >= lo && e.position <= size => Some(e.position),
            _ => None,
        };
        // An entry at the start offset itself (or the base offset, with no entry at or below
        // it) points at the batch sought, which ends at or before the next entry.
        if floor.offset == start_offset {
            let end_bound = at_or_after(next, floor.position).unwrap_or(size);
            return Ok(Some(Plan {
                from: floor.position,
                start_bound: floor.position,
                end_bound,
                skipped_walk: false,
                learn_gap_to: None,
                gaps,
            }));
        }
        let next_position = at_or_after(next, floor.position);
        let after_position = next_position.and_then(|n| at_or_after(after, n));
        // A dense index: the batch after the floor entry's (a real entry: none is at position 0,
        // the first batch never gets one) is the next entry's. Until the density is known, the
        // walk over the floor entry's batch is a gap seen.
        let real_floor = floor.position > 0;
        if let (true, Some(n)) = (real_floor, next_position) {
            if shortcut && self.dense_index.trusted() {
                let end_bound = after_position.unwrap_or(size);
                return Ok(Some(Plan {
                    from: n,
                    start_bound: n,
                    end_bound,
                    skipped_walk: true,
                    learn_gap_to: None,
                    gaps,
                }));
            }
        }
        Ok(Some(Plan {
            from: floor.position,
            start_bound: next_position.unwrap_or(size),
            end_bound: after_position.unwrap_or(size),
            skipped_walk: false,
            learn_gap_to: next_position.filter(|_| real_floor),
            gaps,
        }))
    }

    /// The key of this segment's read-ahead, when a fetch of `max_size` bytes from it reads
    /// ahead: catch-up sized fetches of a sealed segment's O_DIRECT file.
    fn read_ahead_key(&self, max_size: u32) -> Option<&Arc<dyn IoFile>> {
        let direct = self.fetch_alignment().0 > 1;
        (direct && max_size >= READ_AHEAD_MIN_FETCH && self.lazy_log.is_some()).then_some(&self.log)
    }

    /// The window `[start, end)` out of this thread's read-ahead, if a read under way covers it.
    fn window_from_read_ahead(&self, key: &Arc<dyn IoFile>, start: u64, end: u64) -> Option<Window> {
        let (al, _) = self.fetch_alignment();
        let hit = readahead::take(key, start / al * al, end.div_ceil(al) * al)?;
        if hit.pos + (hit.got as u64) < end {
            return None; // short (the file is shorter than the segment says): read again
        }
        give_back(&hit.buf);
        Some(Window { buf: hit.buf, off: (start - hit.pos) as usize, start, len: (end - start) as usize })
    }

    /// Starts reading the window of the fetch that follows one ending at position `end` with
    /// `next_offset` (a sequential consumer's next fetch), if it lies in this segment.
    fn start_read_ahead(&self, key: &Arc<dyn IoFile>, next_offset: i64, end: u32, fetch: WindowFetch) {
        if end as u64 + BATCH_HEADER_SIZE as u64 > fetch.max_position.min(self.size) as u64 {
            return;
        }
        let Ok(Some(plan)) = self.locate(next_offset, true) else { return };
        let win_end = self.window_end(&plan, fetch.max_size, fetch.max_position, fetch.min_one);
        let (al, mem_align) = self.fetch_alignment();
        let read_start = plan.from as u64 / al * al;
        let want = (win_end.div_ceil(al) * al - read_start) as usize;
        let Ok(file) = self.pinned_log_file() else { return };
        readahead::start(key.clone(), file, read_start, want, take_buffer(want, mem_align));
    }

    /// [`Segment::read`] in one read when it can: `Ok(None)` sends the caller to the general path
    /// (which then decides, and reports errors, exactly as before).
    pub(super) fn read_in_one_window(
        &self,
        start_offset: i64,
        max_size: u32,
        read_end: ReadEnd,
        min_one: bool,
    ) -> Result<Option<super::SegmentRead>> {
        let Some(plan) = self.locate(start_offset, true)? else { return Ok(None) };
        match self.read_planned(plan, start_offset, max_size, read_end, min_one)? {
            Planned::Read(r) => Ok(Some(r)),
            Planned::Elsewhere => Ok(None),
            Planned::Missed => {
                // A learned guess that the index is dense was wrong: from the floor entry, once.
                let Some(plan) = self.locate(start_offset, false)? else { return Ok(None) };
                match self.read_planned(plan, start_offset, max_size, read_end, min_one)? {
                    Planned::Read(r) => Ok(Some(r)),
                    Planned::Elsewhere | Planned::Missed => Ok(None),
                }
            }
        }
    }

    /// The one read of `plan` and the walk in it.
    fn read_planned(
        &self,
        plan: Plan,
        start_offset: i64,
        max_size: u32,
        read_end: ReadEnd,
        min_one: bool,
    ) -> Result<Planned> {
        let size = self.size;
        // With the upper bound an offset, its batch is found in the window: until then the read
        // may go to the segment's end.
        let (max_position, upper) = match read_end {
            ReadEnd::Position(p) => (p, None),
            ReadEnd::BatchHolding(o) => (size, Some(o)),
        };
        let fetch = WindowFetch { max_size, max_position, min_one };
        let win_end = self.window_end(&plan, max_size, max_position, min_one);
        let ra_key = self.read_ahead_key(max_size);
        let first = match ra_key.and_then(|k| self.window_from_read_ahead(k, plan.from as u64, win_end)) {
            Some(w) => Some(w),
            None => self.read_window(plan.from as u64, win_end)?,
        };
        let Some(win) = first else { return Ok(Planned::Elsewhere) };
        // The walk, with Kafka's framing rules, inside the window (the index said the batch
        // sought starts in it); any departure leaves for the general path.
        let mut pos = plan.from as u64;
        let (target, target_size) = loop {
            if pos + BATCH_HEADER_SIZE as u64 > size as u64 || !win.covers(pos, BATCH_HEADER_SIZE) {
                return Ok(Planned::Elsewhere);
            }
            let head = win.at(pos, BATCH_HEADER_SIZE);
            let Ok(frame) = EntryFrame::parse(head) else { return Ok(Planned::Elsewhere) };
            if super::scan::check_frame(&frame, pos, size as u64) != super::scan::FrameCheck::Whole {
                return Ok(Planned::Elsewhere);
            }
            let Ok(header) = BatchHeader::parse(head) else { return Ok(Planned::Elsewhere) };
            if pos == plan.from as u64 {
                if let Some(next) = plan.learn_gap_to {
                    self.dense_index.observe(next, pos + frame.size as u64 == next as u64, plan.gaps);
                }
            }
            if header.last_offset() >= start_offset {
                if plan.skipped_walk && pos == plan.from as u64 && header.base_offset > start_offset {
                    // The dense index's batch starts above the offset (an offset gap, or an
                    // index that is not dense after all): an earlier batch may hold it.
                    self.dense_index.missed();
                    return Ok(Planned::Missed);
                }
                break (pos as u32, header.size_in_bytes() as u32);
            }
            pos += frame.size as u64;
        };
        let adjusted = if min_one { max_size.max(target_size) } else { max_size };
        let limit = max_position.saturating_sub(target).min(adjusted);
        if limit == 0 {
            return Ok(Planned::Read(super::SegmentRead { position: target, bytes: FetchBytes::default() }));
        }
        if !win.covers(target as u64, limit as usize) {
            // More data than the index said there could be: the general path.
            return Ok(Planned::Elsewhere);
        }
        let data = win.at(target as u64, limit as usize);
        let (len, last) = whole_batches(data, upper);
        if let (Some(key), Some(last)) = (ra_key, last) {
            if let Ok(h) = BatchHeader::parse(&data[last..]) {
                self.start_read_ahead(key, h.next_offset(), target + len as u32, fetch);
            }
        }
        let start = win.off + (target as u64 - win.start) as usize;
        Ok(Planned::Read(super::SegmentRead { position: target, bytes: FetchBytes::shared(win.buf, start, len) }))
    }

    /// The general path's data read: `[position, position + limit)` (found by the walk) in one
    /// aligned read, whole batches kept. Short where the file is.
    pub(super) fn read_found(&self, position: u32, limit: u32) -> Result<FetchBytes> {
        let w = self.read_into_pool(position as u64, position as u64 + limit as u64)?;
        let (len, _) = whole_batches(w.at(position as u64, w.len), None);
        Ok(FetchBytes::shared(w.buf, w.off, len))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buffer_is_reused_once_its_views_are_dropped() {
        let a = take_buffer(100_000, 512);
        assert!(a.capacity() >= 100_000 && a.align() >= READ_ALIGN);
        give_back(&a);
        let view = FetchBytes::shared(a, 10, 20);
        // Held by `view`: a new buffer.
        let b = take_buffer(100_000, 512);
        assert_ne!(b.as_ptr(), view.as_ptr().wrapping_sub(10));
        give_back(&b);
        let (a_ptr, b_ptr) = (view.as_ptr().wrapping_sub(10), b.as_ptr());
        drop(view);
        drop(b);
        // Both free now: one of them comes back, with no other reference.
        let c = take_buffer(50_000, 4096);
        assert!(c.as_ptr() == a_ptr || c.as_ptr() == b_ptr);
        assert_eq!(Arc::strong_count(&c), 1);
        // Too large to pool: not kept.
        let big = take_buffer(POOL_MAX_BUF + 1, 4096);
        give_back(&big);
        assert!(POOL.with(|p| p.borrow().iter().all(|b| !Arc::ptr_eq(b, &big))));
    }

    #[test]
    fn fetch_bytes_compare_as_bytes() {
        let mut buf = AlignedBuf::new(4096, 4096);
        buf.full_mut()[100..105].copy_from_slice(b"hello");
        let view = FetchBytes::shared(Arc::new(buf), 100, 5);
        let owned = FetchBytes::from(b"hello".to_vec());
        assert!(view.is_shared() && !owned.is_shared());
        assert_eq!(view, owned);
        assert_eq!(view, b"hello".to_vec());
        assert_eq!(b"hello".to_vec(), view);
        assert_eq!(view, &b"hello"[..]);
        assert_eq!(view, *b"hello");
        assert_eq!(format!("{view:?}"), format!("{:?}", b"hello".to_vec()));
        assert_eq!(view.clone().into_vec(), b"hello");
        assert!(FetchBytes::default().is_empty());
        assert_eq!(view.iter().count(), 5);
    }
}
