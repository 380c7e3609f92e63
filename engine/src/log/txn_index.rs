//! The `.txnindex` of each segment (Kafka's `TransactionIndex`): one 34-byte entry per aborted
//! transaction whose ABORT marker is in the segment, in marker order, so that a read-committed
//! fetch can hand the consumer the aborted transactions its range overlaps (Kafka's
//! `collectAbortedTxns`). The file exists only once a segment holds an abort.
//!
//! The entries live in the files, not in memory: the log keeps, per segment with a file, how many
//! entries it has and the last offset of the last one. A file is written (buffered) as markers are
//! appended and fsynced when its segment is sealed, flushed or closed; after a crash every segment
//! from the recovery point on is recovered, and its `.txnindex` with it, so an entry a power cut
//! lost is written again. A damaged file (a partial entry, an unknown version, last offsets that do
//! not increase, an offset outside its segment) is rebuilt from the log at open.

use std::collections::BTreeMap;

use super::Log;
use crate::error::{Error, Result};
use crate::format::filename;
use crate::io::{IoFile, OpenMode};

/// Bytes of one `.txnindex` entry: version i16, producer id i64, first offset i64, last offset
/// i64, last stable offset i64, big-endian.
pub const TXN_ENTRY_BYTES: usize = 34;
/// The one entry version Kafka writes.
pub const TXN_ENTRY_VERSION: i16 = 0;
/// Entries read at a time.
const READ_ENTRIES: usize = 1024;

/// One aborted transaction (Kafka's `AbortedTxn`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AbortedTxn {
    pub producer_id: i64,
    /// The offset of the transaction's first batch in this partition.
    pub first_offset: i64,
    /// The offset of its ABORT marker.
    pub last_offset: i64,
    /// The last stable offset when it was aborted: the first offset of the oldest transaction of
    /// another producer still open then, else just past the marker.
    pub last_stable_offset: i64,
}

impl AbortedTxn {
    pub fn encode(&self) -> [u8; TXN_ENTRY_BYTES] {
        let mut e = [0u8; TXN_ENTRY_BYTES];
        e[0..2].copy_from_slice(&TXN_ENTRY_VERSION.to_be_bytes());
        e[2..10].copy_from_slice(&self.producer_id.to_be_bytes());
        e[10..18].copy_from_slice(&self.first_offset.to_be_bytes());
        e[18..26].copy_from_slice(&self.last_offset.to_be_bytes());
        e[26..34].copy_from_slice(&self.last_stable_offset.to_be_bytes());
        e
    }

    /// One entry (`e` holds at least [`TXN_ENTRY_BYTES`]); an unknown version is an error.
    pub fn decode(e: &[u8]) -> std::result::Result<AbortedTxn, String> {
        let i64_at = |at: usize| i64::from_be_bytes(e[at..at + 8].try_into().expect("8 bytes"));
        let version = i16::from_be_bytes([e[0], e[1]]);
        if version != TXN_ENTRY_VERSION {
            return Err(format!("unknown entry version {version}"));
        }
        Ok(AbortedTxn {
            producer_id: i64_at(2),
            first_offset: i64_at(10),
            last_offset: i64_at(18),
            last_stable_offset: i64_at(26),
        })
    }
}

/// An aborted transaction as a fetch answers it (Kafka's `FetchResponse.AbortedTransaction`): a
/// read-committed consumer drops that producer's batches from `first_offset` up to its marker.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AbortedTransaction {
    pub producer_id: i64,
    pub first_offset: i64,
}

/// The rules of a `.txnindex` of the segment at `base` (whose offsets end before `next_base`),
/// entry by entry: every entry whole and of version 0, last offsets increasing and inside the
/// segment, each first offset at or below its last.
#[derive(Clone, Copy, Debug)]
pub struct TxnIndexRules {
    base: i64,
    next_base: Option<i64>,
    prev: Option<i64>,
    at: u64,
}

impl TxnIndexRules {
    pub fn new(base: i64, next_base: Option<i64>) -> TxnIndexRules {
        TxnIndexRules { base, next_base, prev: None, at: 0 }
    }

    /// The next entry of the file (a shorter slice is a partial one); the problem names its byte.
    pub fn check(&mut self, e: &[u8]) -> std::result::Result<AbortedTxn, String> {
        let at = self.at;
        if e.len() < TXN_ENTRY_BYTES {
            return Err(format!("partial entry of {} bytes at byte {at}", e.len()));
        }
        let t = AbortedTxn::decode(e).map_err(|p| format!("{p} at byte {at}"))?;
        if let Some(p) = self.prev.filter(|&p| t.last_offset <= p) {
            return Err(format!("entry at byte {at}: last offset {} does not increase (previous {p})", t.last_offset));
        }
        if t.last_offset < self.base
            || self.next_base.is_some_and(|n| t.last_offset >= n)
            || t.first_offset > t.last_offset
        {
            return Err(format!(
                "entry at byte {at}: offsets {}..={} do not end in the segment at {}",
                t.first_offset, t.last_offset, self.base
            ));
        }
        self.prev = Some(t.last_offset);
        self.at += TXN_ENTRY_BYTES as u64;
        Ok(t)
    }
}

/// Checks a whole `.txnindex` held in memory ([`TxnIndexRules`]).
pub fn check_txn_index(b: &[u8], base: i64, next_base: Option<i64>) -> std::result::Result<Vec<AbortedTxn>, String> {
    let mut rules = TxnIndexRules::new(base, next_base);
    b.chunks(TXN_ENTRY_BYTES).map(|e| rules.check(e)).collect()
}

/// What the log keeps of one segment's `.txnindex`.
#[derive(Clone, Copy, Debug)]
pub(super) struct TxnIndexFile {
    entries: u64,
    last_offset: Option<i64>,
    /// Written since its last fsync.
    dirty: bool,
}

/// The `.txnindex` files of a log's segments, by segment base offset.
pub(super) type TxnIndexes = BTreeMap<i64, TxnIndexFile>;

/// Files of up to this many entries are kept in memory once read (the last one read only).
const CACHED_ENTRIES: u64 = 16 * 1024;

/// The entries of the `.txnindex` read last, for the read-committed fetches that read the same
/// one again and again while a consumer catches up through its segment: valid while the file
/// has the same entry count and last offset (an append or a truncation changes them).
#[derive(Debug, Default)]
pub(super) struct TxnCache(std::sync::Mutex<Option<Cached>>);

/// A file's base offset, entry count and last offset when it was read, and its entries.
type Cached = (i64, u64, Option<i64>, std::sync::Arc<[AbortedTxn]>);

impl TxnCache {
    fn get(&self, base: i64, meta: &TxnIndexFile) -> Option<std::sync::Arc<[AbortedTxn]>> {
        let g = self.0.lock().unwrap_or_else(|p| p.into_inner());
        g.as_ref().filter(|c| (c.0, c.1, c.2) == (base, meta.entries, meta.last_offset)).map(|c| c.3.clone())
    }
    fn put(&self, base: i64, meta: &TxnIndexFile, entries: std::sync::Arc<[AbortedTxn]>) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some((base, meta.entries, meta.last_offset, entries));
    }
    /// Forgets what it holds (the files were emptied or the log started again).
    pub(super) fn clear(&mut self) {
        *self.0.get_mut().unwrap_or_else(|p| p.into_inner()) = None;
    }
}

impl Log {
    fn txn_index_path(&self, base: i64) -> std::path::PathBuf {
        self.dir.join(filename::txn_index_file_name(base))
    }

    fn read_txn_file(&self, f: &dyn IoFile, from_entry: u64, mut each: impl FnMut(AbortedTxn) -> bool) -> Result<()> {
        let len = f.len()?;
        let mut buf = vec![0u8; READ_ENTRIES * TXN_ENTRY_BYTES];
        let mut at = from_entry * TXN_ENTRY_BYTES as u64;
        while at + TXN_ENTRY_BYTES as u64 <= len {
            let n = ((len - at) as usize).min(buf.len()) / TXN_ENTRY_BYTES * TXN_ENTRY_BYTES;
            f.read_exact_at(&mut buf[..n], at)?;
            for e in buf[..n].chunks_exact(TXN_ENTRY_BYTES) {
                let t = AbortedTxn::decode(e)
                    .map_err(|detail| Error::CorruptIndex { path: f.path().to_path_buf(), detail })?;
                if !each(t) {
                    return Ok(());
                }
            }
            at += n as u64;
        }
        Ok(())
    }

    /// Reads the `.txnindex` files the directory holds (`bases`), checking each (the active
    /// segment's entries must lie below the log end): the base offsets of the damaged ones, with
    /// the problem, left out (the caller rebuilds them).
    pub(super) fn load_txn_indexes(&mut self, bases: &std::collections::BTreeSet<i64>) -> Result<Vec<(i64, String)>> {
        let mut damaged = Vec::new();
        for &base in bases {
            if !self.has_segment(base) {
                continue;
            }
            let next = self.sealed.range(base + 1..).next().map(|(b, _)| *b).or_else(|| {
                let a = self.active_segment().base_offset();
                Some(if a > base { a } else { self.log_end_offset })
            });
            let path = self.txn_index_path(base);
            let f = self.storage.open(&path, OpenMode::Read)?;
            let len = f.len()?;
            let mut rules = TxnIndexRules::new(base, next);
            let (mut entries, mut last_offset, mut problem) = (0u64, None, None);
            let mut buf = vec![0u8; READ_ENTRIES * TXN_ENTRY_BYTES];
            let mut at = 0u64;
            while at < len && problem.is_none() {
                let n = ((len - at) as usize).min(buf.len());
                f.read_exact_at(&mut buf[..n], at)?;
                for e in buf[..n].chunks(TXN_ENTRY_BYTES) {
                    match rules.check(e) {
                        Ok(t) => {
                            entries += 1;
                            last_offset = Some(t.last_offset);
                        }
                        Err(p) => {
                            problem = Some(p);
                            break;
                        }
                    }
                }
                at += n as u64;
            }
            let problem = match problem {
                None => Ok(()),
                Some(p) => Err(p),
            };
            match problem {
                Ok(()) => {
                    self.txn.insert(base, TxnIndexFile { entries, last_offset, dirty: false });
                }
                Err(p) => damaged.push((base, format!("{}: {p}", path.display()))),
            }
        }
        Ok(damaged)
    }

    /// Appends an aborted transaction to the `.txnindex` of the segment at `base` (created on its
    /// first entry, as Kafka's). Its last offset must follow the file's last (a caller bug
    /// otherwise).
    pub(super) fn append_aborted_txn(&mut self, base: i64, t: AbortedTxn) -> Result<()> {
        let path = self.txn_index_path(base);
        let meta = self.txn.get(&base).copied();
        if let Some(last) = meta.and_then(|m| m.last_offset) {
            assert!(
                t.last_offset > last,
                "aborted transaction at {} after one at {last} in {}",
                t.last_offset,
                path.display()
            );
        }
        let mode = if meta.is_some() || self.storage.exists(&path) { OpenMode::ReadWrite } else { OpenMode::CreateNew };
        let f = self.storage.open(&path, mode)?;
        let entries = meta.map_or(0, |m| m.entries);
        f.write_all_at(&t.encode(), entries * TXN_ENTRY_BYTES as u64)?;
        if meta.is_none() {
            // A file left from before (emptied) ends at the entry.
            f.set_len(TXN_ENTRY_BYTES as u64)?;
        }
        self.txn.insert(base, TxnIndexFile { entries: entries + 1, last_offset: Some(t.last_offset), dirty: true });
        Ok(())
    }

    /// Fsyncs the `.txnindex` of the segment at `base` if it was written since its last fsync.
    pub(super) fn sync_txn_index(&mut self, base: i64) -> Result<()> {
        if let Some(m) = self.txn.get_mut(&base).filter(|m| m.dirty) {
            let f = self.storage.open(&self.dir.join(filename::txn_index_file_name(base)), OpenMode::ReadWrite)?;
            f.sync_data()?;
            m.dirty = false;
        }
        Ok(())
    }

    /// The log was cut at `end`: the `.txnindex` files of segments at or past it are forgotten
    /// (their files went with them) and the entries of markers at or past `end` are cut from the
    /// one of the segment holding it (Kafka's `TransactionIndex.truncateTo`).
    pub(super) fn truncate_txn_indexes(&mut self, end: i64) -> Result<()> {
        self.txn_cache.clear();
        let active = self.active_segment().base_offset();
        self.txn.retain(|&b, _| b <= active);
        let Some(meta) = self.txn.get(&active).copied() else { return Ok(()) };
        if meta.last_offset.is_none_or(|l| l < end) {
            return Ok(());
        }
        let f = self.storage.open(&self.txn_index_path(active), OpenMode::ReadWrite)?;
        let (mut kept, mut last) = (0u64, None);
        self.read_txn_file(&*f, 0, |t| {
            if t.last_offset >= end {
                return false;
            }
            kept += 1;
            last = Some(t.last_offset);
            true
        })?;
        f.set_len(kept * TXN_ENTRY_BYTES as u64)?;
        self.txn.insert(active, TxnIndexFile { entries: kept, last_offset: last, dirty: true });
        Ok(())
    }

    /// Forgets the `.txnindex` files of segments below `base` (deleted by retention or
    /// DeleteRecords, their files with them).
    pub(super) fn forget_txn_indexes_below(&mut self, base: i64) {
        self.txn = self.txn.split_off(&base);
    }

    /// Makes `entries` the `.txnindex` of the segment at `base` (no file when there are none):
    /// written whole to a temporary file, fsynced and renamed over the old one, so that a crash
    /// leaves the old file or the new one. False when the directory did not change (no entries
    /// and no file); the caller fsyncs it otherwise.
    pub(super) fn replace_txn_index(&mut self, base: i64, entries: &[AbortedTxn]) -> Result<bool> {
        self.txn_cache.clear();
        let path = self.txn_index_path(base);
        self.txn.remove(&base);
        if entries.is_empty() {
            if self.storage.exists(&path) {
                self.storage.remove_file(&path)?;
                return Ok(true);
            }
            return Ok(false);
        }
        let bytes: Vec<u8> = entries.iter().flat_map(|t| t.encode()).collect();
        let last_offset = entries.last().map(|t| t.last_offset);
        let meta = TxnIndexFile { entries: entries.len() as u64, last_offset, dirty: false };
        if self.storage.exists(&path) {
            // The same bytes there already (a recovery that found the file right): left alone.
            let f = self.storage.open(&path, OpenMode::Read)?;
            let mut have = vec![0u8; bytes.len()];
            if f.len()? == bytes.len() as u64 && f.read_exact_at(&mut have, 0).is_ok() && have == bytes {
                self.txn.insert(base, meta);
                return Ok(false);
            }
        }
        let tmp = self.dir.join(format!("{}.tmp", filename::txn_index_file_name(base)));
        if self.storage.exists(&tmp) {
            self.storage.remove_file(&tmp)?;
        }
        let f = self.storage.open(&tmp, OpenMode::CreateNew)?;
        f.write_all_at(&bytes, 0)?;
        f.sync_data()?;
        drop(f);
        self.storage.rename(&tmp, &path)?;
        self.txn.insert(base, meta);
        Ok(true)
    }

    /// Kafka's `collectAbortedTransactions`: the aborted transactions whose range overlaps
    /// `[start, upper)`, from the `.txnindex` of the segment holding `start` and the later ones,
    /// stopping at the first whose last stable offset reaches `upper` (no later entry can then
    /// overlap the range).
    pub fn aborted_transactions(&self, start: i64, upper: i64) -> Result<Vec<AbortedTransaction>> {
        let mut out = Vec::new();
        if start >= upper {
            return Ok(out);
        }
        let from = self.floor_segment(start).map_or(i64::MIN, |s| s.base_offset());
        for (&base, meta) in self.txn.range(from..) {
            if meta.entries == 0 {
                continue;
            }
            let mut complete = false;
            let mut each = |t: AbortedTxn| {
                if t.last_offset >= start && t.first_offset < upper {
                    out.push(AbortedTransaction { producer_id: t.producer_id, first_offset: t.first_offset });
                }
                complete = t.last_stable_offset >= upper;
                !complete
            };
            let cached = match self.txn_cache.get(base, meta) {
                Some(entries) => Some(entries),
                None if meta.entries <= CACHED_ENTRIES => {
                    let entries: std::sync::Arc<[AbortedTxn]> = self.txn_index_entries(base)?.into();
                    self.txn_cache.put(base, meta, entries.clone());
                    Some(entries)
                }
                None => None,
            };
            if let Some(entries) = cached {
                // Last offsets increase: the entries ending below `start` can neither overlap
                // the range nor end the search (a last stable offset is at most its marker + 1).
                let from = entries.partition_point(|t| t.last_offset < start);
                for t in &entries[from..] {
                    if !each(*t) {
                        break;
                    }
                }
            } else {
                let f = self.storage.open(&self.txn_index_path(base), OpenMode::Read)?;
                self.read_txn_file(&*f, 0, each)?;
            }
            if complete {
                break;
            }
        }
        Ok(out)
    }

    /// Every aborted transaction in the `.txnindex` of the segment at `base`, in file order (for
    /// tools and tests).
    pub fn txn_index_entries(&self, base: i64) -> Result<Vec<AbortedTxn>> {
        let mut out = Vec::new();
        if self.txn.contains_key(&base) {
            let f = self.storage.open(&self.txn_index_path(base), OpenMode::Read)?;
            self.read_txn_file(&*f, 0, |t| {
                out.push(t);
                true
            })?;
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(pid: i64, first: i64, last: i64, lso: i64) -> AbortedTxn {
        AbortedTxn { producer_id: pid, first_offset: first, last_offset: last, last_stable_offset: lso }
    }

    #[test]
    fn entries_round_trip_and_damage_is_named() {
        let entries = [t(7, 10, 20, 21), t(9, 15, 30, 31), t(7, 40, 41, 42)];
        let mut b = Vec::new();
        for e in &entries {
            b.extend_from_slice(&e.encode());
        }
        assert_eq!(b.len(), 3 * TXN_ENTRY_BYTES);
        // Kafka's layout: version 0 first, then the four longs.
        assert_eq!(&b[0..2], &[0, 0]);
        assert_eq!(&b[2..10], &7i64.to_be_bytes());
        assert_eq!(&b[26..34], &21i64.to_be_bytes());
        assert_eq!(check_txn_index(&b, 0, None).unwrap(), entries);
        assert_eq!(check_txn_index(&b[..40], 0, None).unwrap_err(), "partial entry of 6 bytes at byte 34");
        let mut v = b.clone();
        v[34] = 1;
        assert_eq!(check_txn_index(&v, 0, None).unwrap_err(), "unknown entry version 256 at byte 34");
        let mut swapped = entries[1].encode().to_vec();
        swapped.extend_from_slice(&entries[0].encode());
        assert!(check_txn_index(&swapped, 0, None).unwrap_err().contains("does not increase"));
        assert!(check_txn_index(&b, 25, None).unwrap_err().contains("at byte 0"));
        assert!(check_txn_index(&b, 0, Some(41)).unwrap_err().contains("at byte 68"));
        assert_eq!(check_txn_index(&[], 0, None).unwrap(), vec![]);
    }
}
