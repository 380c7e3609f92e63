//! The Kafka reference design, for the same workload in the same run: what a Kafka broker does
//! with the same batches, reduced to its storage path.
//!
//! - Appends: offsets stamped in place, CRC checked, then `write(2)` of the batch to the segment's
//!   `.log` through the page cache (FileChannel.write); with `durable`, an `fdatasync` after each
//!   append (flush.messages=1).
//! - Indexes: a sparse `.index` (8-byte entries) and `.timeindex` (12-byte entries) per segment,
//!   preallocated to segment.index.bytes and **memory-mapped**, written through the map with
//!   Kafka's rule (an entry once more than index.interval.bytes went by since the last one); on
//!   roll both are trimmed and mapped again read-only.
//! - Reads: the floor segment, a binary search of the mapped index, then the header walk with one
//!   `pread` per batch header (FileLogInputStream), then one `pread` of the data.
//!
//! Not modelled: the broker's network threads, the producer-state and leader-epoch files, and
//! Kafka's asynchronous flush at roll. It runs on the calling thread.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use memmap2::{Mmap, MmapMut};
use seglog::format::batch::{self, BatchHeader, BATCH_HEADER_SIZE};

type Result<T> = std::io::Result<T>;

fn invalid(msg: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, msg)
}

/// A memory-mapped index file (offset or time), Kafka's `AbstractIndex`.
#[derive(Debug)]
struct MappedIndex {
    path: PathBuf,
    entry_bytes: usize,
    entries: usize,
    active: Option<MmapMut>,
    sealed: Option<Mmap>,
}

impl MappedIndex {
    fn create(path: PathBuf, entry_bytes: usize, max_bytes: u64) -> Result<MappedIndex> {
        let f = OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&path)?;
        f.set_len(max_bytes - max_bytes % entry_bytes as u64)?;
        // SAFETY: the file was just created by this process and is used by nothing else; it is
        // not truncated while this map exists (seal() drops the map before trimming the file).
        let map = unsafe { MmapMut::map_mut(&f)? };
        Ok(MappedIndex { path, entry_bytes, entries: 0, active: Some(map), sealed: None })
    }

    fn bytes(&self) -> &[u8] {
        match (&self.active, &self.sealed) {
            (Some(m), _) => &m[..],
            (None, Some(m)) => &m[..],
            (None, None) => &[],
        }
    }

    fn is_full(&self) -> bool {
        self.active.as_ref().is_none_or(|m| (self.entries + 1) * self.entry_bytes > m.len())
    }

    fn push(&mut self, entry: &[u8]) {
        let at = self.entries * self.entry_bytes;
        let m = self.active.as_mut().expect("appending to a sealed index");
        m[at..at + entry.len()].copy_from_slice(entry);
        self.entries += 1;
    }

    /// Largest slot whose key (`key(slot)`) is <= target, Kafka's lookup (None: below the first).
    fn floor_slot(&self, target: i64, key: impl Fn(&[u8]) -> i64) -> Option<usize> {
        let b = self.bytes();
        let e = self.entry_bytes;
        let (mut lo, mut hi) = (0usize, self.entries);
        while lo < hi {
            let mid = (lo + hi) / 2;
            if key(&b[mid * e..mid * e + e]) <= target {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo.checked_sub(1)
    }

    /// Trims the file to its entries and maps it again read-only (Kafka's trimToValidSize).
    fn seal(&mut self) -> Result<()> {
        if let Some(m) = self.active.take() {
            m.flush_async()?;
        }
        let f = OpenOptions::new().read(true).write(true).open(&self.path)?;
        f.set_len((self.entries * self.entry_bytes) as u64)?;
        if self.entries > 0 {
            // SAFETY: this process owns the file and never changes it again after sealing.
            self.sealed = Some(unsafe { Mmap::map(&f)? });
        }
        Ok(())
    }
}

fn be_i32(b: &[u8]) -> i64 {
    i32::from_be_bytes([b[0], b[1], b[2], b[3]]) as i64
}
fn be_i64(b: &[u8]) -> i64 {
    i64::from_be_bytes(b[..8].try_into().expect("8 bytes"))
}

#[derive(Debug)]
struct RefSegment {
    base: i64,
    file: File,
    size: u64,
    index: MappedIndex,
    time: MappedIndex,
    bytes_since_entry: u64,
    max_ts: i64,
    max_ts_offset: i64,
    last_time_entry_ts: i64,
}

impl RefSegment {
    fn create(dir: &Path, base: i64, index_bytes: u64) -> Result<RefSegment> {
        let name = |ext: &str| dir.join(format!("{base:020}.{ext}"));
        let file = OpenOptions::new().read(true).append(true).create(true).open(name("log"))?;
        Ok(RefSegment {
            base,
            file,
            size: 0,
            index: MappedIndex::create(name("index"), 8, index_bytes)?,
            time: MappedIndex::create(name("timeindex"), 12, index_bytes)?,
            bytes_since_entry: 0,
            max_ts: -1,
            max_ts_offset: base,
            last_time_entry_ts: -1,
        })
    }

    /// The position of the first batch with last offset >= `offset`, and its size.
    fn translate(&self, offset: i64) -> Result<Option<(u64, u64)>> {
        let slot = self.index.floor_slot(offset - self.base, be_i32);
        let mut pos = slot.map_or(0, |s| be_i32(&self.index.bytes()[s * 8 + 4..]) as u64);
        let mut hdr = [0u8; BATCH_HEADER_SIZE];
        while pos + BATCH_HEADER_SIZE as u64 <= self.size {
            self.file.read_exact_at(&mut hdr, pos)?;
            let h = BatchHeader::parse(&hdr).map_err(|e| invalid(format!("batch header at {pos}: {e}")))?;
            if h.last_offset() >= offset {
                return Ok(Some((pos, h.size_in_bytes() as u64)));
            }
            pos += h.size_in_bytes() as u64;
        }
        Ok(None)
    }
}

/// One partition in Kafka's design.
#[derive(Debug)]
pub struct KafkaRefLog {
    dir: PathBuf,
    segment_bytes: u64,
    index_interval_bytes: u64,
    index_bytes: u64,
    durable: bool,
    segments: Vec<RefSegment>,
    next_offset: i64,
}

impl KafkaRefLog {
    pub fn create(dir: &Path, segment_bytes: u64, index_interval_bytes: u64, durable: bool) -> Result<KafkaRefLog> {
        std::fs::create_dir_all(dir)?;
        let index_bytes = 10 << 20;
        Ok(KafkaRefLog {
            dir: dir.to_path_buf(),
            segment_bytes,
            index_interval_bytes,
            index_bytes,
            durable,
            segments: vec![RefSegment::create(dir, 0, index_bytes)?],
            next_offset: 0,
        })
    }

    pub fn log_end_offset(&self) -> i64 {
        self.next_offset
    }
    /// Base offset of the active segment: everything below it is sealed.
    pub fn active_base(&self) -> i64 {
        self.segments.last().map_or(0, |s| s.base)
    }

    fn roll(&mut self) -> Result<()> {
        let base = self.next_offset;
        if let Some(s) = self.segments.last_mut() {
            if s.max_ts >= 0 && s.max_ts > s.last_time_entry_ts {
                let mut e = [0u8; 12];
                e[..8].copy_from_slice(&s.max_ts.to_be_bytes());
                e[8..].copy_from_slice(&((s.max_ts_offset - s.base) as i32).to_be_bytes());
                s.time.push(&e);
            }
            s.file.sync_data()?;
            s.index.seal()?;
            s.time.seal()?;
        }
        let seg = RefSegment::create(&self.dir, base, self.index_bytes)?;
        self.segments.push(seg);
        Ok(())
    }

    /// Kafka's leader append of one batch: validate, stamp the offset, index rule, write(2).
    pub fn append(&mut self, b: &mut [u8]) -> Result<i64> {
        let h = batch::validate_batch(b, true).map_err(|e| invalid(format!("append: {e}")))?;
        let first = self.next_offset;
        batch::set_base_offset(b, first);
        let last = first + h.last_offset_delta as i64;
        let full = {
            let s = self.segments.last().expect("one segment");
            s.size > 0 && (s.size + b.len() as u64 > self.segment_bytes || s.index.is_full() || s.time.is_full())
        };
        if full {
            self.roll()?;
        }
        let interval = self.index_interval_bytes;
        let s = self.segments.last_mut().expect("one segment");
        if h.max_timestamp > s.max_ts {
            s.max_ts = h.max_timestamp;
            s.max_ts_offset = last;
        }
        if s.bytes_since_entry > interval {
            let mut e = [0u8; 8];
            e[..4].copy_from_slice(&((last - s.base) as i32).to_be_bytes());
            e[4..].copy_from_slice(&(s.size as i32).to_be_bytes());
            s.index.push(&e);
            if s.max_ts > s.last_time_entry_ts {
                let mut t = [0u8; 12];
                t[..8].copy_from_slice(&s.max_ts.to_be_bytes());
                t[8..].copy_from_slice(&((s.max_ts_offset - s.base) as i32).to_be_bytes());
                s.time.push(&t);
                s.last_time_entry_ts = s.max_ts;
            }
            s.bytes_since_entry = 0;
        }
        use std::io::Write;
        (&s.file).write_all(b)?;
        s.size += b.len() as u64;
        s.bytes_since_entry += b.len() as u64;
        if self.durable {
            s.file.sync_data()?;
        }
        self.next_offset = last + 1;
        Ok(first)
    }

    fn floor_segment(&self, offset: i64) -> Option<&RefSegment> {
        let i = self.segments.partition_point(|s| s.base <= offset);
        i.checked_sub(1).map(|i| &self.segments[i])
    }

    /// Whole batches from the one holding `offset`: at most `max_bytes` (at least one batch),
    /// read with pread after the mapped-index lookup and the header walk.
    pub fn read(&self, offset: i64, max_bytes: u64, out: &mut Vec<u8>) -> Result<usize> {
        out.clear();
        let Some(seg) = self.floor_segment(offset) else { return Ok(0) };
        let Some((pos, first)) = seg.translate(offset)? else { return Ok(0) };
        let len = max_bytes.max(first).min(seg.size - pos) as usize;
        out.resize(len, 0);
        seg.file.read_exact_at(out, pos)?;
        // Cut to whole batches, as seglog's fetch does.
        let mut end = 0usize;
        while end + BATCH_HEADER_SIZE <= out.len() {
            let size = 12 + be_i32(&out[end + 8..]) as usize;
            if end + size > out.len() {
                break;
            }
            end += size;
        }
        out.truncate(end);
        Ok(end)
    }

    /// Kafka's ListOffsets by timestamp: the first segment whose max timestamp reaches `ts`, its
    /// mapped time index, then the offset index and a walk to the first batch with max timestamp
    /// >= ts. Returns that batch's base offset (records carry the batch's timestamp here).
    pub fn offset_for_time(&self, ts: i64) -> Result<Option<i64>> {
        let Some(seg) = self.segments.iter().find(|s| s.max_ts >= ts) else { return Ok(None) };
        let start_offset = match seg.time.floor_slot(ts, be_i64) {
            Some(slot) => seg.base + be_i32(&seg.time.bytes()[slot * 12 + 8..]),
            None => seg.base,
        };
        let Some((mut pos, _)) = seg.translate(start_offset)? else { return Ok(None) };
        let mut hdr = [0u8; BATCH_HEADER_SIZE];
        while pos + BATCH_HEADER_SIZE as u64 <= seg.size {
            seg.file.read_exact_at(&mut hdr, pos)?;
            let h = BatchHeader::parse(&hdr).map_err(|e| invalid(format!("batch header at {pos}: {e}")))?;
            if h.max_timestamp >= ts {
                return Ok(Some(h.base_offset));
            }
            pos += h.size_in_bytes() as u64;
        }
        Ok(None)
    }

    /// Every `.log` file's bytes written back (for the cold-read variant).
    pub fn sync_all(&self) -> Result<()> {
        self.segments.iter().try_for_each(|s| s.file.sync_data())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::{make_batch, stamp};

    #[test]
    fn appends_roll_and_read_back_like_kafka() {
        let d = tempfile::tempdir_in(std::env::temp_dir()).unwrap();
        let mut log = KafkaRefLog::create(d.path(), 64 << 10, 4096, false).unwrap();
        let t = make_batch(4096, 4, 0);
        for i in 0..100 {
            let mut b = t.clone();
            stamp(&mut b, 1000 + i);
            log.append(&mut b).unwrap();
        }
        assert_eq!(log.log_end_offset(), 400);
        assert!(log.segments.len() > 5);
        let mut out = Vec::new();
        for off in [0i64, 1, 57, 203, 399] {
            let n = log.read(off, 4096, &mut out).unwrap();
            assert_eq!(n, 4096);
            let h = BatchHeader::parse(&out).unwrap();
            assert!(h.base_offset <= off && off <= h.last_offset(), "{off}: {h:?}");
        }
        assert_eq!(log.offset_for_time(1000 + 37).unwrap(), Some(37 * 4));
        assert_eq!(log.offset_for_time(5000).unwrap(), None);
    }
}
