//! Checking `.index` and `.timeindex` files against their `.log`, with kafka-dump-log's
//! semantics (`--verify-index-only`, `--index-sanity-check`), shared by `dump` and `verify`.
//!
//! Offset index: for each entry, the batch starting at the entry's position must have
//! `lastOffset == entry offset`; the check stops at the first zero entry (`offset == base` at a
//! slot above 0), since an index that was not trimmed is zero-padded.
//!
//! Time index: the first batch with `lastOffset >= entry offset` is found; current brokers store
//! that batch's last offset ("batch last offset" flavour, KAFKA-16310), older ones stored the exact
//! offset of the record holding the max timestamp ("exact record offset" flavour). Both are
//! accepted and each entry says which one it fits. The max record timestamp of that batch must
//! equal the entry's timestamp, and timestamps must strictly increase. Errors come in Kafka's
//! three kinds: shallow offset not found, timestamp mismatch, out of order.
//!
//! Index files are read in bounded chunks ([`IndexStream`]) and checked entry by entry, the
//! problems handed to the caller as they are found: memory does not grow with the file.

use std::fs::File;
use std::marker::PhantomData;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use seglog::format::index_entry::{
    offset_entry_follows, offset_index_sanity, takes_time_entry, time_index_sanity, OffsetEntry, TimeEntry,
    OFFSET_ENTRY_SIZE, TIME_ENTRY_SIZE,
};
use seglog::format::record;
use serde::Serialize;

use crate::logscan::{BatchInfo, LogSummary, MAX_BATCH_IN_MEMORY};

/// The base offset from a segment file name (`<digits>.<ext>...`), as Kafka takes it.
pub fn base_offset_from_name(path: &Path) -> Option<i64> {
    let name = path.file_name()?.to_string_lossy().into_owned();
    let stem = name.split('.').next()?;
    if stem.is_empty() || !stem.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    stem.parse().ok()
}

/// The sibling file of a segment file with another extension.
pub fn sibling(path: &Path, ext: &str) -> PathBuf {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let stem = name.split('.').next().unwrap_or_default();
    path.with_file_name(format!("{stem}.{ext}"))
}

/// Where the entries of an index file end: Kafka's stop rule and what follows it.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Padding {
    /// Whole entries in the file (`length / entry size`).
    pub slots: usize,
    /// Entries before the first zero entry (Kafka's stop rule).
    pub entries: usize,
    /// All-zero entries from there to the end (preallocated space that was not trimmed).
    pub trailing_zero_entries: usize,
    /// Entries after the stop that are not all zero.
    pub nonzero_after_stop: usize,
    /// Bytes after the last whole entry (a length that is not a multiple of the entry size).
    pub partial_bytes: u64,
}

/// An offset index entry made absolute.
#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq)]
pub struct OffsetEntryAbs {
    pub offset: i64,
    pub position: i64,
}

/// A time index entry made absolute.
#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq)]
pub struct TimeEntryAbs {
    pub timestamp: i64,
    pub offset: i64,
}

/// What the two index kinds differ in: the entry layout and Kafka's sanity check, both the
/// engine's (`seglog::format::index_entry`).
pub trait IndexEntry: Copy + Serialize {
    const SIZE: usize;
    /// The entry in `slot` (exactly `SIZE` bytes) made absolute (saturating, as the engine's
    /// lookups take it), and its relative offset.
    fn decode(slot: &[u8], base: i64) -> (Self, i32);
    /// Kafka's `sanityCheck` of a file of `file_len` bytes (every whole slot an entry, as in
    /// Kafka) from its first and last slots (`None` without a whole slot): the engine's
    /// [`offset_index_sanity`] and [`time_index_sanity`], which need nothing else.
    fn sanity(file_len: u64, base: i64, first_and_last: Option<(&[u8], usize, &[u8])>) -> Result<(), String>;
}

impl IndexEntry for OffsetEntryAbs {
    const SIZE: usize = OFFSET_ENTRY_SIZE;
    fn decode(slot: &[u8], base: i64) -> (Self, i32) {
        let e = OffsetEntry::decode(slot, 0);
        (OffsetEntryAbs { offset: e.offset(base), position: e.position as i64 }, e.relative_offset)
    }
    fn sanity(file_len: u64, base: i64, first_and_last: Option<(&[u8], usize, &[u8])>) -> Result<(), String> {
        offset_index_sanity(file_len, base, first_and_last.map(|(_, n, last)| (n, OffsetEntry::decode(last, 0))))
    }
}

impl IndexEntry for TimeEntryAbs {
    const SIZE: usize = TIME_ENTRY_SIZE;
    fn decode(slot: &[u8], base: i64) -> (Self, i32) {
        let e = TimeEntry::decode(slot, 0);
        (TimeEntryAbs { timestamp: e.timestamp, offset: e.offset(base) }, e.relative_offset)
    }
    fn sanity(file_len: u64, base: i64, first_and_last: Option<(&[u8], usize, &[u8])>) -> Result<(), String> {
        let ends = first_and_last.map(|(first, n, last)| (TimeEntry::decode(first, 0), n, TimeEntry::decode(last, 0)));
        time_index_sanity(file_len, base, ends)
    }
}

/// kafka-dump-log's stop rule (`DumpLogSegments`): an index's entries end at the first slot above
/// 0 whose offset is the base offset (relative offset 0), since an index that was not trimmed is
/// zero-padded.
pub fn ends_entries(slot: usize, relative_offset: i32) -> bool {
    slot > 0 && relative_offset == 0
}

/// Bytes of an index file read at once.
const INDEX_CHUNK_BYTES: usize = 64 << 10;

/// Where index bytes come from: a file, read in chunks, or (in tests) bytes in memory.
#[derive(Debug)]
enum Source {
    File(File),
    #[cfg(test)]
    Memory(Vec<u8>),
}

/// An index file's entries, read in bounded chunks: [`IndexStream::next_entry`] up to Kafka's
/// stop rule (the first zero entry: `offset == base` at a slot above 0), [`IndexStream::padding`]
/// for what follows, [`IndexStream::sanity`] for Kafka's sanity check. Memory is one chunk
/// whatever the file's length.
#[derive(Debug)]
pub struct IndexStream<E> {
    pub path: PathBuf,
    pub base_offset: i64,
    pub file_len: u64,
    source: Source,
    chunk: Vec<u8>,
    chunk_start: u64,
    next: usize,
    done: bool,
    entry: PhantomData<E>,
}

pub type OffsetIndexStream = IndexStream<OffsetEntryAbs>;
pub type TimeIndexStream = IndexStream<TimeEntryAbs>;

impl<E: IndexEntry> IndexStream<E> {
    /// Opens `path` (a regular file only: [`crate::files::open_regular`]).
    pub fn open(path: &Path, base_offset: i64) -> std::io::Result<Self> {
        let file = crate::files::open_regular(path)?;
        let file_len = file.metadata()?.len();
        Ok(Self::with_source(path, base_offset, file_len, Source::File(file)))
    }

    /// An index held in memory.
    #[cfg(test)]
    pub fn from_bytes(path: &Path, base_offset: i64, bytes: Vec<u8>) -> Self {
        Self::with_source(path, base_offset, bytes.len() as u64, Source::Memory(bytes))
    }

    fn with_source(path: &Path, base_offset: i64, file_len: u64, source: Source) -> Self {
        IndexStream {
            path: path.to_path_buf(),
            base_offset,
            file_len,
            source,
            chunk: Vec::new(),
            chunk_start: 0,
            next: 0,
            done: false,
            entry: PhantomData,
        }
    }

    /// Whole entries in the file.
    pub fn slots(&self) -> usize {
        usize::try_from(self.file_len / E::SIZE as u64).unwrap_or(usize::MAX)
    }

    /// The bytes of slot `i` (`i < slots()`).
    fn slot(&mut self, i: usize) -> std::io::Result<&[u8]> {
        let at = i as u64 * E::SIZE as u64;
        let inside = at >= self.chunk_start && at + E::SIZE as u64 <= self.chunk_start + self.chunk.len() as u64;
        if !inside {
            let whole = self.slots() as u64 * E::SIZE as u64;
            let per_chunk = (INDEX_CHUNK_BYTES / E::SIZE * E::SIZE) as u64;
            let len = (whole - at).min(per_chunk) as usize;
            self.chunk.resize(len, 0);
            match &self.source {
                #[cfg(test)]
                Source::Memory(b) => self.chunk.copy_from_slice(&b[at as usize..at as usize + len]),
                Source::File(f) => f.read_exact_at(&mut self.chunk, at).map_err(|e| match e.kind() {
                    std::io::ErrorKind::UnexpectedEof => std::io::Error::new(
                        e.kind(),
                        format!("{}: file shrank while reading at byte {at}", self.path.display()),
                    ),
                    _ => e,
                })?,
            }
            self.chunk_start = at;
        }
        let off = (at - self.chunk_start) as usize;
        Ok(&self.chunk[off..off + E::SIZE])
    }

    /// Starts the entries again from the first.
    pub fn rewind(&mut self) {
        self.next = 0;
        self.done = false;
    }

    /// The next entry before Kafka's stop rule, with its slot, or `None`.
    pub fn next_entry(&mut self) -> std::io::Result<Option<(usize, E)>> {
        if self.done || self.next >= self.slots() {
            self.done = true;
            return Ok(None);
        }
        let i = self.next;
        let base = self.base_offset;
        let (e, rel) = E::decode(self.slot(i)?, base);
        if ends_entries(i, rel) {
            self.done = true;
            return Ok(None);
        }
        self.next += 1;
        Ok(Some((i, e)))
    }

    /// Where the entries end and what follows, from a pass over the whole file (the entries are
    /// rewound).
    pub fn padding(&mut self) -> std::io::Result<Padding> {
        self.rewind();
        while self.next_entry()?.is_some() {}
        let slots = self.slots();
        let entries = self.next;
        let mut p = Padding { slots, entries, partial_bytes: self.file_len % E::SIZE as u64, ..Default::default() };
        for s in entries..slots {
            if self.slot(s)?.iter().all(|&b| b == 0) {
                p.trailing_zero_entries += 1;
            } else {
                p.nonzero_after_stop += 1;
            }
        }
        self.rewind();
        Ok(p)
    }

    /// Kafka's `sanityCheck` verdict (every whole slot counts as an entry, as in Kafka), from the
    /// file's length and its first and last slots.
    pub fn sanity(&mut self) -> std::io::Result<Result<(), String>> {
        let (base, file_len) = (self.base_offset, self.file_len);
        let Some(n) = self.slots().checked_sub(1) else {
            return Ok(E::sanity(file_len, base, None));
        };
        let first = self.slot(0)?.to_vec();
        let last = self.slot(n)?;
        Ok(E::sanity(file_len, base, Some((&first, n, last))))
    }

    /// True when the file holds exactly `other`, compared chunk by chunk.
    pub fn bytes_equal(&mut self, other: &[u8]) -> std::io::Result<bool> {
        if self.file_len != other.len() as u64 {
            return Ok(false);
        }
        if !self.file_len.is_multiple_of(E::SIZE as u64) {
            return Ok(false); // `other` comes from an index, whole entries only
        }
        for (i, want) in other.chunks_exact(E::SIZE).enumerate() {
            if self.slot(i)? != want {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

/// A decoded index, whole in memory, for the tests (the commands stream index files through an
/// [`IndexStream`] and never hold their entries).
#[cfg(test)]
#[derive(Clone, Debug, Serialize)]
pub struct IndexFile<E> {
    pub path: PathBuf,
    pub base_offset: i64,
    pub file_len: u64,
    /// Entries up to Kafka's stop rule.
    pub entries: Vec<E>,
    pub padding: Padding,
    /// Kafka's `sanityCheck` verdict.
    pub sanity: Result<(), String>,
}

#[cfg(test)]
pub type OffsetIndexFile = IndexFile<OffsetEntryAbs>;
#[cfg(test)]
pub type TimeIndexFile = IndexFile<TimeEntryAbs>;

#[cfg(test)]
impl<E: IndexEntry> IndexFile<E> {
    pub fn from_bytes(path: &Path, base_offset: i64, bytes: Vec<u8>) -> Self {
        Self::collect(IndexStream::from_bytes(path, base_offset, bytes)).expect("reading memory does not fail")
    }

    fn collect(mut s: IndexStream<E>) -> std::io::Result<Self> {
        let padding = s.padding()?;
        let sanity = s.sanity()?;
        let mut entries = Vec::new();
        while let Some((_, e)) = s.next_entry()? {
            entries.push(e);
        }
        Ok(IndexFile { path: s.path, base_offset: s.base_offset, file_len: s.file_len, entries, padding, sanity })
    }
}

/// One offset-index entry that does not point where it says.
#[derive(Clone, Debug, Serialize)]
pub struct OffsetMismatch {
    pub slot: usize,
    pub index_offset: i64,
    pub position: i64,
    /// The last offset of the batch at `position`; `None` when no batch starts there.
    pub log_offset: Option<i64>,
    pub detail: String,
}

/// kafka-dump-log's offset-index verification, plus order checks, over every entry of `idx`
/// (from its first): each mismatch is handed to `on` as it is found. Returns how many there were.
pub fn check_offset_index(
    idx: &mut OffsetIndexStream,
    log: &mut LogSummary,
    mut on: impl FnMut(OffsetMismatch) -> std::io::Result<()>,
) -> std::io::Result<u64> {
    idx.rewind();
    let mut count = 0u64;
    let mut prev: Option<OffsetEntryAbs> = None;
    while let Some((slot, e)) = idx.next_entry()? {
        let mut mismatch = |log_offset: Option<i64>, detail: String| {
            count += 1;
            on(OffsetMismatch { slot, index_offset: e.offset, position: e.position, log_offset, detail })
        };
        let found = match u64::try_from(e.position) {
            Ok(p) => log.batch_at(p)?,
            Err(_) => None,
        };
        match found {
            None => mismatch(
                None,
                format!(
                    "entry {slot} (offset {}) points at byte {}, where no batch starts (log has {} valid bytes)",
                    e.offset,
                    e.position,
                    log.valid_bytes()
                ),
            )?,
            Some(b) if b.last_offset != e.offset => mismatch(
                Some(b.last_offset),
                format!(
                    "entry {slot}: index offset {}, but the batch at byte {} ends at offset {}",
                    e.offset, e.position, b.last_offset
                ),
            )?,
            Some(_) => {}
        }
        if let Some(p) = prev {
            if !offset_entry_follows(p.offset, p.position, e.offset, e.position) {
                mismatch(
                    None,
                    format!(
                        "entry {slot} (offset {}, byte {}) does not follow entry {} (offset {}, byte {}): entries must increase",
                        e.offset,
                        e.position,
                        slot - 1,
                        p.offset,
                        p.position
                    ),
                )?;
            }
        }
        prev = Some(e);
    }
    idx.rewind();
    Ok(count)
}

/// Which convention a time-index entry's offset follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum EntryFlavour {
    /// The last offset of the batch holding the max timestamp (current brokers).
    BatchLastOffset,
    /// The offset of the record holding the max timestamp, not the batch's last (older brokers).
    ExactRecordOffset,
    /// The batch's last record holds the max timestamp: both conventions give this entry.
    Either,
}

/// The convention a whole time-index file follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FileFlavour {
    BatchLastOffset,
    ExactRecordOffset,
    /// Every entry fits both conventions.
    Indistinguishable,
    /// Some entries fit only one convention, others only the other.
    Mixed,
    /// No entry could be classified (no entries, or every entry is in error).
    Unknown,
}

impl FileFlavour {
    pub fn describe(self) -> &'static str {
        match self {
            FileFlavour::BatchLastOffset => "batch last offset (current brokers)",
            FileFlavour::ExactRecordOffset => "exact record offset (older brokers)",
            FileFlavour::Indistinguishable => {
                "indistinguishable (each entry's batch ends with its max-timestamp record)"
            }
            FileFlavour::Mixed => "mixed (entries of both conventions)",
            FileFlavour::Unknown => "unknown (no entry could be matched)",
        }
    }
}

/// One time-index problem, in one of Kafka's three kinds.
#[derive(Clone, Debug, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum TimeIndexError {
    /// No batch ends at the entry's offset, and no record at it holds the batch's max timestamp.
    /// `found_log_offset` is the last offset of the batch found, -1 when none.
    ShallowOffsetNotFound { slot: usize, index_offset: i64, found_log_offset: i64, position: Option<u64> },
    /// The batch's max record timestamp is not the entry's.
    Mismatch { slot: usize, index_timestamp: i64, log_timestamp: i64, position: u64 },
    /// The entry's timestamp is not larger than the previous entry's.
    OutOfOrder { slot: usize, index_timestamp: i64, previous_timestamp: i64 },
    /// The batch's records could not be decoded.
    Records { slot: usize, position: u64, detail: String },
    /// The batch the entry names fails its CRC, so its records cannot be trusted to check against.
    CorruptBatch { slot: usize, position: u64 },
}

impl TimeIndexError {
    pub fn describe(&self) -> String {
        match self {
            TimeIndexError::ShallowOffsetNotFound {
                slot,
                index_offset,
                found_log_offset,
                position,
            } => match position {
                Some(p) => format!(
                    "shallow-offset-not-found: entry {slot} offset {index_offset}: the batch at byte {p} ends at {found_log_offset} and no record at {index_offset} holds its max timestamp"
                ),
                None => format!(
                    "shallow-offset-not-found: entry {slot} offset {index_offset} is past the last batch of the log"
                ),
            },
            TimeIndexError::Mismatch {
                slot,
                index_timestamp,
                log_timestamp,
                position,
            } => format!(
                "mismatch: entry {slot} timestamp {index_timestamp}, but the max record timestamp of the batch at byte {position} is {log_timestamp}"
            ),
            TimeIndexError::OutOfOrder {
                slot,
                index_timestamp,
                previous_timestamp,
            } => format!(
                "out-of-order: entry {slot} timestamp {index_timestamp} is not above the previous entry's {previous_timestamp}"
            ),
            TimeIndexError::Records { slot, position, detail } => {
                format!("entry {slot}: records of the batch at byte {position} cannot be decoded: {detail}")
            }
            TimeIndexError::CorruptBatch { slot, position } => {
                format!("entry {slot}: the batch at byte {position} fails its CRC, so the entry cannot be checked")
            }
        }
    }
}

/// What checking a time index hands its caller, entry by entry.
#[derive(Clone, Debug)]
pub enum TimeCheckEvent {
    /// The convention the next entry fits (`None` for an entry in error).
    Entry(Option<EntryFlavour>),
    Error(TimeIndexError),
}

/// The result of checking a time index (the entries and errors went to the caller).
#[derive(Clone, Copy, Debug, Serialize)]
pub struct TimeIndexCheck {
    pub flavour: FileFlavour,
    pub errors: u64,
}

/// Timestamps of a batch's records: (max, timestamp of the record at `offset`).
fn record_timestamps(b: &BatchInfo, bytes: &[u8], offset: i64) -> Result<(i64, Option<i64>), String> {
    let h = &b.header;
    let mut scratch = Vec::new();
    let iter = record::batch_records(bytes, &mut scratch).map_err(|e| e.to_string())?;
    let mut max = seglog::format::batch::NO_TIMESTAMP;
    let mut at = None;
    for r in iter {
        let r = r.map_err(|e| e.to_string())?;
        let ts = r.timestamp(h.base_timestamp, h.max_timestamp, h.timestamp_type());
        max = max.max(ts);
        if r.offset(h.base_offset) == offset {
            at = Some(ts);
        }
    }
    Ok((max, at))
}

/// Checks every entry of `idx` against `log`, handing `on` each entry's flavour and each error
/// as they are found (in slot order; an entry's errors follow its flavour).
pub fn check_time_index(
    idx: &mut TimeIndexStream,
    log: &mut LogSummary,
    mut on: impl FnMut(TimeCheckEvent) -> std::io::Result<()>,
) -> std::io::Result<TimeIndexCheck> {
    idx.rewind();
    let (mut batch_last, mut exact_only, mut either) = (false, false, false);
    let mut errors = 0u64;
    let mut prev_ts = seglog::format::batch::NO_TIMESTAMP;
    let mut error = |e: TimeIndexError, on: &mut dyn FnMut(TimeCheckEvent) -> std::io::Result<()>| {
        errors += 1;
        on(TimeCheckEvent::Error(e))
    };
    while let Some((slot, e)) = idx.next_entry()? {
        let Some(found) = log.first_batch_ending_at_or_after(e.offset)? else {
            on(TimeCheckEvent::Entry(None))?;
            let err = TimeIndexError::ShallowOffsetNotFound {
                slot,
                index_offset: e.offset,
                found_log_offset: -1,
                position: None,
            };
            error(err, &mut on)?;
            prev_ts = e.timestamp;
            continue;
        };
        let Some((b, bytes)) = log.read_batch(found.position)? else {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!(
                    "{}: the batch at byte {} is gone: the file changed while checking",
                    log.path.display(),
                    found.position
                ),
            ));
        };
        if !b.crc_ok() {
            on(TimeCheckEvent::Entry(None))?;
            error(TimeIndexError::CorruptBatch { slot, position: b.position }, &mut on)?;
            prev_ts = e.timestamp;
            continue;
        }
        let timestamps = match bytes {
            Some(bytes) => record_timestamps(&b, bytes, e.offset),
            None => Err(format!(
                "the batch is {} bytes, more than the tools decode ({MAX_BATCH_IN_MEMORY} bytes)",
                b.size()
            )),
        };
        let (max_ts, at_ts) = match timestamps {
            Ok(v) => v,
            Err(detail) => {
                on(TimeCheckEvent::Entry(None))?;
                error(TimeIndexError::Records { slot, position: b.position, detail }, &mut on)?;
                prev_ts = e.timestamp;
                continue;
            }
        };
        let exact = at_ts == Some(max_ts);
        let flavour = if b.last_offset() == e.offset {
            Some(if exact { EntryFlavour::Either } else { EntryFlavour::BatchLastOffset })
        } else if exact {
            Some(EntryFlavour::ExactRecordOffset)
        } else {
            None
        };
        on(TimeCheckEvent::Entry(flavour))?;
        match flavour {
            Some(EntryFlavour::Either) => either = true,
            Some(EntryFlavour::BatchLastOffset) => batch_last = true,
            Some(EntryFlavour::ExactRecordOffset) => exact_only = true,
            None => {
                let err = TimeIndexError::ShallowOffsetNotFound {
                    slot,
                    index_offset: e.offset,
                    found_log_offset: b.last_offset(),
                    position: Some(b.position),
                };
                error(err, &mut on)?;
            }
        }
        if flavour.is_some() {
            if max_ts != e.timestamp {
                let err = TimeIndexError::Mismatch {
                    slot,
                    index_timestamp: e.timestamp,
                    log_timestamp: max_ts,
                    position: b.position,
                };
                error(err, &mut on)?;
            }
            // Kafka's time index takes an entry only above the last one's timestamp.
            if !takes_time_entry(prev_ts, e.timestamp) {
                let err =
                    TimeIndexError::OutOfOrder { slot, index_timestamp: e.timestamp, previous_timestamp: prev_ts };
                error(err, &mut on)?;
            }
        }
        prev_ts = e.timestamp;
    }
    idx.rewind();
    let flavour = match (batch_last, exact_only) {
        (true, true) => FileFlavour::Mixed,
        (true, false) => FileFlavour::BatchLastOffset,
        (false, true) => FileFlavour::ExactRecordOffset,
        (false, false) if either => FileFlavour::Indistinguishable,
        _ => FileFlavour::Unknown,
    };
    Ok(TimeIndexCheck { flavour, errors })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::tests::xorshift;
    use seglog::index::{OffsetIndex, TimeIndex};

    /// The streamed sanity check says exactly what the engine's says, on files of every shape.
    #[test]
    fn sanity_check_matches_the_engine() {
        let mut rng = xorshift(7);
        for round in 0..4000 {
            let len = (rng() % 64) as usize;
            let mut bytes: Vec<u8> = (0..len).map(|_| rng() as u8).collect();
            if round % 3 == 0 {
                // Mostly small, non-negative relative offsets, so the other rules are reached.
                for b in bytes.iter_mut().step_by(4) {
                    *b &= 0x01;
                }
            }
            let base = match round % 4 {
                0 => 0,
                1 => 1000,
                2 => i64::MAX - 3,
                _ => (rng() >> 2) as i64,
            };
            let p = Path::new("x");
            let ours = OffsetIndexFile::from_bytes(p, base, bytes.clone()).sanity;
            let engine = OffsetIndex::from_bytes(base, bytes.clone(), i32::MAX as u32, None).sanity_check();
            assert_eq!(ours, engine, "offset index {bytes:?} base {base}");
            let ours = TimeIndexFile::from_bytes(p, base, bytes.clone()).sanity;
            let engine = TimeIndex::from_bytes(base, bytes.clone(), i32::MAX as u32, None).sanity_check();
            assert_eq!(ours, engine, "time index {bytes:?} base {base}");
        }
    }

    #[test]
    fn entries_stop_at_the_first_zero_entry_and_padding_is_counted() {
        let mut bytes = Vec::new();
        for (rel, pos) in [(5i32, 100i32), (9, 200), (0, 0), (0, 0), (3, 7), (0, 0)] {
            bytes.extend_from_slice(&rel.to_be_bytes());
            bytes.extend_from_slice(&pos.to_be_bytes());
        }
        bytes.extend_from_slice(&[1, 2, 3]);
        let f = OffsetIndexFile::from_bytes(Path::new("x"), 10, bytes.clone());
        assert_eq!(
            f.entries,
            [OffsetEntryAbs { offset: 15, position: 100 }, OffsetEntryAbs { offset: 19, position: 200 }]
        );
        let p = &f.padding;
        assert_eq!(
            (p.slots, p.entries, p.trailing_zero_entries, p.nonzero_after_stop, p.partial_bytes),
            (6, 2, 3, 1, 3)
        );

        // The same through a file, in chunks smaller than the file.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("00000000000000000010.index");
        let mut big = Vec::new();
        for i in 1..=20_000i32 {
            big.extend_from_slice(&i.to_be_bytes());
            big.extend_from_slice(&(i * 10).to_be_bytes());
        }
        big.extend_from_slice(&[0u8; 8 * 9000]);
        std::fs::write(&path, &big).unwrap();
        let mut s = OffsetIndexStream::open(&path, 10).unwrap();
        let p = s.padding().unwrap();
        assert_eq!((p.slots, p.entries, p.trailing_zero_entries), (29_000, 20_000, 9000));
        let mut n = 0;
        while let Some((slot, e)) = s.next_entry().unwrap() {
            assert_eq!(e, OffsetEntryAbs { offset: 10 + slot as i64 + 1, position: (slot as i64 + 1) * 10 });
            n += 1;
        }
        assert_eq!(n, 20_000);
        assert!(s.bytes_equal(&big).unwrap());
        assert!(!s.bytes_equal(&big[8..]).unwrap());
    }
}
