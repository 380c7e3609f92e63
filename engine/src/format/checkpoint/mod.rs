//! Kafka's small text sidecar files, as text: the generic versioned checkpoint format
//! (`CheckpointFile`) and its two users, offset checkpoints (`recovery-point-offset-checkpoint`,
//! `log-start-offset-checkpoint`, `replication-offset-checkpoint`, `cleaner-offset-checkpoint`) and
//! `leader-epoch-checkpoint`; the `.kafka_cleanshutdown` marker (a one-line JSON object); and
//! `partition.metadata`. This module only converts between `&str` and values; writing
//! `<name>.tmp`, fsync, rename and fsync of the directory belong to the I/O layer.
//!
//! Reading is stricter than Kafka, never looser, except where noted on each function. Every error
//! is [`FormatError::InvalidCheckpoint`] with the 1-based line it was found on. No allocation is
//! sized from a count read from the input, and no input makes these functions panic. Sources:
//! `server-common/.../CheckpointFile.java`, `Kk/OffsetCheckpointFile.java`,
//! `Kk/LeaderEpochCheckpointFile.java`, `Kk/CleanShutdownFileHandler.java`,
//! `Kk/PartitionMetadataFile.java`, `Kk/PartitionMetadataReadBuffer.java`.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::FormatError;

mod clean_shutdown;
mod partition_metadata;
#[cfg(test)]
mod tests;

pub use clean_shutdown::CleanShutdown;
pub use partition_metadata::PartitionMetadata;

/// Log-dir root: per-partition recovery points.
pub const RECOVERY_POINT_OFFSET_CHECKPOINT_FILE: &str = "recovery-point-offset-checkpoint";
/// Log-dir root: per-partition log start offsets.
pub const LOG_START_OFFSET_CHECKPOINT_FILE: &str = "log-start-offset-checkpoint";
/// Log-dir root: per-partition high watermarks.
pub const REPLICATION_OFFSET_CHECKPOINT_FILE: &str = "replication-offset-checkpoint";
/// Log-dir root: the log cleaner's first dirty offsets.
pub const CLEANER_OFFSET_CHECKPOINT_FILE: &str = "cleaner-offset-checkpoint";
/// Partition directory: the leader-epoch cache.
pub const LEADER_EPOCH_CHECKPOINT_FILE: &str = "leader-epoch-checkpoint";
/// Log-dir root: present after a clean shutdown.
pub const CLEAN_SHUTDOWN_FILE: &str = ".kafka_cleanshutdown";
/// Partition directory: the topic id.
pub const PARTITION_METADATA_FILE: &str = "partition.metadata";
/// Kafka writes `<name>.tmp` first and renames it over `<name>`.
pub const TMP_FILE_SUFFIX: &str = ".tmp";

/// Longest piece of an offending line quoted in an error message.
const MAX_QUOTE: usize = 64;

fn invalid(line: u32, detail: impl Into<String>) -> FormatError {
    FormatError::InvalidCheckpoint { line, detail: detail.into() }
}

/// `s` for an error message, cut to [`MAX_QUOTE`] characters.
fn quote(s: &str) -> String {
    match s.char_indices().nth(MAX_QUOTE) {
        Some((cut, _)) => format!("{:?}...", &s[..cut]),
        None => format!("{s:?}"),
    }
}

/// Splits text into lines exactly as `java.io.BufferedReader::readLine` does: a line ends at
/// `\n`, `\r` or `\r\n`; the last line may lack a terminator; empty input has no lines.
#[derive(Debug)]
struct JavaLines<'a> {
    rest: &'a str,
}

impl<'a> Iterator for JavaLines<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        if self.rest.is_empty() {
            return None;
        }
        let bytes = self.rest.as_bytes();
        match bytes.iter().position(|&b| b == b'\n' || b == b'\r') {
            Some(i) => {
                let line = &self.rest[..i];
                let skip = if bytes[i] == b'\r' && bytes.get(i + 1) == Some(&b'\n') { 2 } else { 1 };
                self.rest = &self.rest[i + skip..];
                Some(line)
            }
            None => {
                let line = self.rest;
                self.rest = "";
                Some(line)
            }
        }
    }
}

/// Java's `\s`: space, `\t`, `\n`, `\x0B`, `\f`, `\r`.
fn is_java_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\u{0B}' | '\u{0C}' | '\r')
}

/// Splits an entry line into exactly `N` fields the way Kafka's `Pattern.compile("\\s+").split`
/// does: runs of whitespace separate fields, trailing whitespace is ignored, and leading
/// whitespace yields an empty first field (so such a line is malformed).
fn split_fields<const N: usize>(line: &str) -> Result<[&str; N], String> {
    if line.starts_with(is_java_space) {
        return Err(format!("malformed entry {} (leading whitespace)", quote(line)));
    }
    let mut out = [""; N];
    let mut n = 0;
    for field in line.split(is_java_space).filter(|f| !f.is_empty()) {
        if n == N {
            n += 1;
            break;
        }
        out[n] = field;
        n += 1;
    }
    if n != N {
        return Err(format!("malformed entry {} (expected {N} fields)", quote(line)));
    }
    Ok(out)
}

fn parse_num<T: std::str::FromStr>(what: &str, s: &str) -> Result<T, String> {
    s.parse::<T>().map_err(|_| format!("{what} {} is not a valid number", quote(s)))
}

/// Parses Kafka's generic checkpoint format: line 1 the version, line 2 the entry count, then one
/// entry per line, each handed to `parse_entry` (whose error text is wrapped with the line
/// number).
///
/// Lines end at `\n`, `\r` or `\r\n` and the final terminator may be missing, as with Kafka's
/// `BufferedReader`. Rejected: a version other than `version`, a count that is not a
/// non-negative `i32`, fewer or more entry lines than the count (a blank line is an entry line,
/// and a malformed one, as in Kafka), and any entry `parse_entry` rejects.
///
/// Stricter than Kafka: an empty file, or one with only a version line, is an error here, while
/// Kafka's `CheckpointReadBuffer` returns no entries for both. Kafka's `CheckpointFile`
/// constructor creates the file empty if it is missing, so an empty checkpoint is a normal state
/// of a Kafka log dir that crashed before its first checkpoint write; callers that want Kafka's
/// behaviour should treat `text.is_empty()` as "no entries" before calling this.
pub fn parse_checkpoint<T>(
    text: &str,
    version: i32,
    mut parse_entry: impl FnMut(&str) -> Result<T, String>,
) -> Result<Vec<T>, FormatError> {
    let mut lines = JavaLines { rest: text };
    let first = lines.next().ok_or_else(|| invalid(1, "empty file (expected a version line)"))?;
    let found: i32 = parse_num("version", first).map_err(|d| invalid(1, d))?;
    if found != version {
        return Err(invalid(1, format!("unrecognised version {found}, expected {version}")));
    }
    let second = lines.next().ok_or_else(|| invalid(2, "missing entry count line"))?;
    let count: i32 = parse_num("entry count", second).map_err(|d| invalid(2, d))?;
    let count = usize::try_from(count).map_err(|_| invalid(2, format!("negative entry count {count}")))?;

    // Grows with the lines actually present, never with the declared count.
    let mut entries = Vec::new();
    let mut line_no: u32 = 3;
    for line in lines {
        if entries.len() == count {
            return Err(invalid(line_no, format!("more entries than the declared {count}")));
        }
        entries.push(parse_entry(line).map_err(|d| invalid(line_no, d))?);
        line_no = line_no.saturating_add(1);
    }
    if entries.len() != count {
        return Err(invalid(line_no, format!("expected {count} entries, found only {}", entries.len())));
    }
    Ok(entries)
}

/// Writes Kafka's generic checkpoint format: version, entry count, then one line per entry from
/// `write_entry`; every line, the last included, ends with `\n`.
pub fn serialize_checkpoint<T>(version: i32, entries: &[T], mut write_entry: impl FnMut(&T, &mut String)) -> String {
    let mut out = format!("{version}\n{}\n", entries.len());
    for e in entries {
        write_entry(e, &mut out);
        out.push('\n');
    }
    out
}

/// One of the four log-dir offset checkpoints: entries `"<topic> <partition> <offset>"`.
///
/// Entries keep file order. Kafka reads them into a `HashMap`, so a repeated partition keeps its
/// last offset; [`OffsetCheckpoint::to_map`] does the same.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OffsetCheckpoint {
    /// `(topic, partition, offset)` in file order.
    pub entries: Vec<(String, i32, i64)>,
}

impl OffsetCheckpoint {
    /// The only version Kafka writes and reads.
    pub const VERSION: i32 = 0;

    /// Parses the file text (see [`parse_checkpoint`] for the framing rules). Each entry is three
    /// whitespace-separated fields: a topic (any run of non-whitespace; not checked against
    /// topic-name rules, as in Kafka), a partition that must be a non-negative `i32` (Kafka
    /// accepts negative ones), and an `i64` offset.
    pub fn parse(text: &str) -> Result<Self, FormatError> {
        let entries = parse_checkpoint(text, Self::VERSION, |line| {
            let [topic, partition, offset] = split_fields::<3>(line)?;
            let partition: i32 = parse_num("partition", partition)?;
            if partition < 0 {
                return Err(format!("negative partition {partition}"));
            }
            let offset: i64 = parse_num("offset", offset)?;
            Ok((topic.to_owned(), partition, offset))
        })?;
        Ok(OffsetCheckpoint { entries })
    }

    /// The file text, byte for byte what Kafka writes for the same entries in the same order.
    ///
    /// Does not check the entries: one whose topic is empty or contains whitespace, or whose
    /// partition is negative, is written but does not parse back. Call
    /// [`OffsetCheckpoint::validate`] first when the entries are not known to be good.
    pub fn serialize(&self) -> String {
        serialize_checkpoint(Self::VERSION, &self.entries, |(t, p, o), out| {
            let _ = write!(out, "{t} {p} {o}");
        })
    }

    /// Checks that [`OffsetCheckpoint::serialize`] would produce text that parses back to
    /// `self`; the error's line is the line the bad entry would be written on.
    pub fn validate(&self) -> Result<(), FormatError> {
        let mut line: u32 = 3;
        for (topic, partition, _) in &self.entries {
            if topic.is_empty() || topic.contains(is_java_space) {
                return Err(invalid(line, format!("topic {} is empty or contains whitespace", quote(topic))));
            }
            if *partition < 0 {
                return Err(invalid(line, format!("negative partition {partition}")));
            }
            line = line.saturating_add(1);
        }
        if i32::try_from(self.entries.len()).is_err() {
            return Err(invalid(2, "more than i32::MAX entries"));
        }
        Ok(())
    }

    /// The entries as a map; a repeated `(topic, partition)` keeps its last offset, as in Kafka.
    pub fn to_map(&self) -> BTreeMap<(String, i32), i64> {
        self.entries.iter().map(|(t, p, o)| ((t.clone(), *p), *o)).collect()
    }

    /// Entries from a map, in the map's (sorted) order.
    pub fn from_map(map: &BTreeMap<(String, i32), i64>) -> Self {
        OffsetCheckpoint { entries: map.iter().map(|((t, p), o)| (t.clone(), *p, *o)).collect() }
    }
}

/// `leader-epoch-checkpoint`: entries `"<epoch> <startOffset>"` in file order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LeaderEpochCheckpoint {
    /// `(leader epoch, start offset)` in file order (Kafka writes them ascending).
    pub entries: Vec<(i32, i64)>,
}

impl LeaderEpochCheckpoint {
    /// The only version Kafka writes and reads.
    pub const VERSION: i32 = 0;

    /// Parses the file text (see [`parse_checkpoint`]). Each entry is an `i32` epoch and an
    /// `i64` start offset separated by whitespace. Ordering is not checked here, as in Kafka's
    /// reader; the epoch cache owns that rule.
    pub fn parse(text: &str) -> Result<Self, FormatError> {
        let entries = parse_checkpoint(text, Self::VERSION, |line| {
            let [epoch, start] = split_fields::<2>(line)?;
            Ok((parse_num("epoch", epoch)?, parse_num("start offset", start)?))
        })?;
        Ok(LeaderEpochCheckpoint { entries })
    }

    /// The file text, byte for byte what Kafka writes.
    pub fn serialize(&self) -> String {
        serialize_checkpoint(Self::VERSION, &self.entries, |(e, o), out| {
            let _ = write!(out, "{e} {o}");
        })
    }
}
