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

use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use seglog::format::index_entry::{OffsetEntry, TimeEntry, OFFSET_ENTRY_SIZE, TIME_ENTRY_SIZE};
use seglog::format::record;
use seglog::index::{OffsetIndex, TimeIndex};
use serde::Serialize;

use crate::logscan::{BatchInfo, LogSummary};

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

fn padding(bytes: &[u8], entry_size: usize, stop_at: Option<usize>) -> Padding {
    let slots = bytes.len() / entry_size;
    let entries = stop_at.unwrap_or(slots);
    let mut p = Padding { slots, entries, partial_bytes: (bytes.len() % entry_size) as u64, ..Default::default() };
    for s in entries..slots {
        if bytes[s * entry_size..(s + 1) * entry_size].iter().all(|&b| b == 0) {
            p.trailing_zero_entries += 1;
        } else {
            p.nonzero_after_stop += 1;
        }
    }
    p
}

/// An offset index entry made absolute.
#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq)]
pub struct OffsetEntryAbs {
    pub offset: i64,
    pub position: i64,
}

/// A decoded `.index` file.
#[derive(Clone, Debug, Serialize)]
pub struct OffsetIndexFile {
    pub path: PathBuf,
    pub base_offset: i64,
    pub file_len: u64,
    /// Entries up to Kafka's stop rule.
    pub entries: Vec<OffsetEntryAbs>,
    pub padding: Padding,
    /// Kafka's `sanityCheck` verdict.
    pub sanity: Result<(), String>,
}

impl OffsetIndexFile {
    pub fn read(path: &Path, base_offset: i64) -> std::io::Result<OffsetIndexFile> {
        let mut bytes = Vec::new();
        crate::files::open_regular(path)?.read_to_end(&mut bytes)?;
        Ok(Self::from_bytes(path, base_offset, bytes))
    }

    pub fn from_bytes(path: &Path, base_offset: i64, bytes: Vec<u8>) -> OffsetIndexFile {
        let slots = bytes.len() / OFFSET_ENTRY_SIZE;
        let mut entries = Vec::new();
        let mut stop = None;
        for i in 0..slots {
            let e = OffsetEntry::decode(&bytes, i);
            let offset = base_offset + e.relative_offset as i64;
            if offset == base_offset && i > 0 {
                stop = Some(i);
                break;
            }
            entries.push(OffsetEntryAbs { offset, position: e.position as i64 });
        }
        let padding = padding(&bytes, OFFSET_ENTRY_SIZE, stop);
        let file_len = bytes.len() as u64;
        let sanity = OffsetIndex::from_bytes(base_offset, bytes, i32::MAX as u32, None).sanity_check();
        OffsetIndexFile { path: path.to_path_buf(), base_offset, file_len, entries, padding, sanity }
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

/// kafka-dump-log's offset-index verification, plus order checks.
#[derive(Clone, Debug, Default, Serialize)]
pub struct OffsetIndexCheck {
    pub mismatches: Vec<OffsetMismatch>,
}

pub fn check_offset_index(idx: &OffsetIndexFile, log: &LogSummary) -> OffsetIndexCheck {
    let mut out = OffsetIndexCheck::default();
    let mut prev: Option<OffsetEntryAbs> = None;
    for (slot, e) in idx.entries.iter().enumerate() {
        let mut mismatch = |log_offset: Option<i64>, detail: String| {
            out.mismatches.push(OffsetMismatch {
                slot,
                index_offset: e.offset,
                position: e.position,
                log_offset,
                detail,
            })
        };
        match (e.position >= 0).then(|| log.batch_at(e.position as u64)).flatten() {
            None => mismatch(
                None,
                format!(
                    "entry {slot} (offset {}) points at byte {}, where no batch starts (log has {} valid bytes)",
                    e.offset,
                    e.position,
                    log.valid_bytes()
                ),
            ),
            Some(b) if b.last_offset() != e.offset => mismatch(
                Some(b.last_offset()),
                format!(
                    "entry {slot}: index offset {}, but the batch at byte {} ends at offset {}",
                    e.offset,
                    e.position,
                    b.last_offset()
                ),
            ),
            Some(_) => {}
        }
        if let Some(p) = prev {
            if e.offset <= p.offset || e.position <= p.position {
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
                );
            }
        }
        prev = Some(*e);
    }
    out
}

/// A time index entry made absolute.
#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq)]
pub struct TimeEntryAbs {
    pub timestamp: i64,
    pub offset: i64,
}

/// A decoded `.timeindex` file.
#[derive(Clone, Debug, Serialize)]
pub struct TimeIndexFile {
    pub path: PathBuf,
    pub base_offset: i64,
    pub file_len: u64,
    pub entries: Vec<TimeEntryAbs>,
    pub padding: Padding,
    pub sanity: Result<(), String>,
}

impl TimeIndexFile {
    pub fn read(path: &Path, base_offset: i64) -> std::io::Result<TimeIndexFile> {
        let mut bytes = Vec::new();
        crate::files::open_regular(path)?.read_to_end(&mut bytes)?;
        Ok(Self::from_bytes(path, base_offset, bytes))
    }

    pub fn from_bytes(path: &Path, base_offset: i64, bytes: Vec<u8>) -> TimeIndexFile {
        let slots = bytes.len() / TIME_ENTRY_SIZE;
        let mut entries = Vec::new();
        let mut stop = None;
        for i in 0..slots {
            let e = TimeEntry::decode(&bytes, i);
            let offset = base_offset + e.relative_offset as i64;
            if offset == base_offset && i > 0 {
                stop = Some(i);
                break;
            }
            entries.push(TimeEntryAbs { timestamp: e.timestamp, offset });
        }
        let padding = padding(&bytes, TIME_ENTRY_SIZE, stop);
        let file_len = bytes.len() as u64;
        let sanity = TimeIndex::from_bytes(base_offset, bytes, i32::MAX as u32, None).sanity_check();
        TimeIndexFile { path: path.to_path_buf(), base_offset, file_len, entries, padding, sanity }
    }
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

/// The result of checking a time index.
#[derive(Clone, Debug, Serialize)]
pub struct TimeIndexCheck {
    pub flavour: FileFlavour,
    /// Per entry, the convention it fits (`None` for entries in error).
    pub entry_flavours: Vec<Option<EntryFlavour>>,
    pub errors: Vec<TimeIndexError>,
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

pub fn check_time_index(idx: &TimeIndexFile, log: &LogSummary) -> std::io::Result<TimeIndexCheck> {
    let file = crate::files::open_regular(&log.path)?;
    let mut buf = Vec::new();
    let mut errors = Vec::new();
    let mut flavours = Vec::new();
    let mut prev_ts = seglog::format::batch::NO_TIMESTAMP;
    for (slot, e) in idx.entries.iter().enumerate() {
        let Some(bi) = log.first_batch_ending_at_or_after(e.offset) else {
            errors.push(TimeIndexError::ShallowOffsetNotFound {
                slot,
                index_offset: e.offset,
                found_log_offset: -1,
                position: None,
            });
            flavours.push(None);
            prev_ts = e.timestamp;
            continue;
        };
        let b = log.batches[bi];
        if !b.crc_ok() {
            errors.push(TimeIndexError::CorruptBatch { slot, position: b.position });
            flavours.push(None);
            prev_ts = e.timestamp;
            continue;
        }
        buf.resize(b.size() as usize, 0);
        file.read_exact_at(&mut buf, b.position)?;
        let (max_ts, at_ts) = match record_timestamps(&b, &buf, e.offset) {
            Ok(v) => v,
            Err(detail) => {
                errors.push(TimeIndexError::Records { slot, position: b.position, detail });
                flavours.push(None);
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
            errors.push(TimeIndexError::ShallowOffsetNotFound {
                slot,
                index_offset: e.offset,
                found_log_offset: b.last_offset(),
                position: Some(b.position),
            });
            None
        };
        if flavour.is_some() {
            if max_ts != e.timestamp {
                errors.push(TimeIndexError::Mismatch {
                    slot,
                    index_timestamp: e.timestamp,
                    log_timestamp: max_ts,
                    position: b.position,
                });
            }
            if prev_ts >= e.timestamp {
                errors.push(TimeIndexError::OutOfOrder {
                    slot,
                    index_timestamp: e.timestamp,
                    previous_timestamp: prev_ts,
                });
            }
        }
        flavours.push(flavour);
        prev_ts = e.timestamp;
    }
    let has = |f| flavours.contains(&Some(f));
    let flavour = match (has(EntryFlavour::BatchLastOffset), has(EntryFlavour::ExactRecordOffset)) {
        (true, true) => FileFlavour::Mixed,
        (true, false) => FileFlavour::BatchLastOffset,
        (false, true) => FileFlavour::ExactRecordOffset,
        (false, false) if has(EntryFlavour::Either) => FileFlavour::Indistinguishable,
        _ => FileFlavour::Unknown,
    };
    Ok(TimeIndexCheck { flavour, entry_flavours: flavours, errors })
}
