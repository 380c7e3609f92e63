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

/// The `.kafka_cleanshutdown` marker. Its presence is what says "clean shutdown"; its content
/// only carries the broker epoch (KIP-966).
///
/// Kafka 3.7+ writes `{"version":0,"brokerEpoch":<long>}`. Older Kafka created the marker as an
/// empty file, so an empty (or all-whitespace) file parses as present with no epoch, and
/// `broker_epoch: None` serializes back to an empty file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CleanShutdown {
    /// The epoch of the broker that shut down cleanly, when the marker records one.
    pub broker_epoch: Option<i64>,
}

impl CleanShutdown {
    /// The only content version Kafka writes.
    pub const VERSION: i64 = 0;

    /// Parses the marker's content with a small JSON reader: whitespace anywhere JSON allows it,
    /// fields in any order, unknown fields skipped (Kafka's class is
    /// `@JsonIgnoreProperties(ignoreUnknown = true)`). `version` must be present and `0`;
    /// `brokerEpoch` must be an integer in `i64`, `null`, or absent (both `None`). Duplicate known
    /// fields, non-integer numbers and trailing non-whitespace are errors. Kafka itself never
    /// fails here (it logs and treats the epoch as unknown); callers may choose to do the same.
    pub fn parse(text: &str) -> Result<Self, FormatError> {
        if text.bytes().all(is_json_space) {
            return Ok(CleanShutdown { broker_epoch: None });
        }
        let mut p = JsonReader { s: text.as_bytes(), pos: 0 };
        p.parse_clean_shutdown().map_err(|detail| invalid(p.line(), detail))
    }

    /// `{"version":0,"brokerEpoch":<epoch>}` exactly as Kafka writes it (no whitespace, no
    /// trailing newline), or the empty legacy marker for `None`.
    pub fn serialize(&self) -> String {
        match self.broker_epoch {
            Some(epoch) => format!("{{\"version\":{},\"brokerEpoch\":{epoch}}}", Self::VERSION),
            None => String::new(),
        }
    }
}

fn is_json_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

/// Deepest nesting skipped inside an unknown field's value.
const MAX_JSON_DEPTH: u32 = 32;

/// A cursor over JSON text, just enough for the clean-shutdown object.
#[derive(Debug)]
struct JsonReader<'a> {
    s: &'a [u8],
    pos: usize,
}

impl<'a> JsonReader<'a> {
    /// 1-based line of the current position.
    fn line(&self) -> u32 {
        let end = self.pos.min(self.s.len());
        let newlines = self.s[..end].iter().filter(|&&b| b == b'\n').count();
        u32::try_from(newlines).unwrap_or(u32::MAX).saturating_add(1)
    }

    fn peek(&self) -> Option<u8> {
        self.s.get(self.pos).copied()
    }

    fn skip_space(&mut self) {
        while self.peek().is_some_and(is_json_space) {
            self.pos += 1;
        }
    }

    fn describe(&self) -> String {
        match self.peek() {
            None => "end of input".to_owned(),
            Some(b) => format!("byte {:?} at offset {}", char::from(b), self.pos),
        }
    }

    fn expect(&mut self, b: u8) -> Result<(), String> {
        if self.peek() == Some(b) {
            self.pos += 1;
            Ok(())
        } else {
            Err(format!("expected '{}', found {}", char::from(b), self.describe()))
        }
    }

    fn parse_clean_shutdown(&mut self) -> Result<CleanShutdown, String> {
        let mut version: Option<i64> = None;
        let mut epoch: Option<Option<i64>> = None;
        self.skip_space();
        self.expect(b'{')?;
        self.skip_space();
        if self.peek() == Some(b'}') {
            self.pos += 1;
        } else {
            loop {
                self.skip_space();
                let key = self.string()?;
                self.skip_space();
                self.expect(b':')?;
                self.skip_space();
                match key {
                    "version" => {
                        if version.is_some() {
                            return Err("duplicate field \"version\"".to_owned());
                        }
                        version = Some(self.integer()?);
                    }
                    "brokerEpoch" => {
                        if epoch.is_some() {
                            return Err("duplicate field \"brokerEpoch\"".to_owned());
                        }
                        epoch = Some(if self.literal("null") { None } else { Some(self.integer()?) });
                    }
                    _ => self.skip_value(0)?,
                }
                self.skip_space();
                match self.peek() {
                    Some(b',') => self.pos += 1,
                    Some(b'}') => {
                        self.pos += 1;
                        break;
                    }
                    _ => return Err(format!("expected ',' or '}}', found {}", self.describe())),
                }
            }
        }
        self.skip_space();
        if self.pos != self.s.len() {
            return Err(format!("trailing content: {}", self.describe()));
        }
        match version {
            None => Err("missing field \"version\"".to_owned()),
            Some(v) if v != CleanShutdown::VERSION => Err(format!("unsupported version {v}")),
            Some(_) => Ok(CleanShutdown { broker_epoch: epoch.flatten() }),
        }
    }

    /// Consumes `word` if it is next.
    fn literal(&mut self, word: &str) -> bool {
        if self.s[self.pos..].starts_with(word.as_bytes()) {
            self.pos += word.len();
            true
        } else {
            false
        }
    }

    /// A string's raw content (escapes validated, not decoded; a key spelled with escapes is
    /// therefore an unknown key).
    fn string(&mut self) -> Result<&'a str, String> {
        self.expect(b'"')?;
        let start = self.pos;
        loop {
            match self.peek() {
                None => return Err("unterminated string".to_owned()),
                Some(b'"') => break,
                Some(b'\\') => {
                    self.pos += 1;
                    match self.peek() {
                        Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => self.pos += 1,
                        Some(b'u') => {
                            self.pos += 1;
                            for _ in 0..4 {
                                if !self.peek().is_some_and(|b| b.is_ascii_hexdigit()) {
                                    return Err(format!("bad \\u escape: {}", self.describe()));
                                }
                                self.pos += 1;
                            }
                        }
                        _ => return Err(format!("bad escape: {}", self.describe())),
                    }
                }
                Some(b) if b < 0x20 => return Err(format!("control character in string: {}", self.describe())),
                Some(_) => self.pos += 1,
            }
        }
        let raw = &self.s[start..self.pos];
        self.pos += 1; // closing quote
                       // The input is a &str and both ends are ASCII quotes, so this cannot fail.
        std::str::from_utf8(raw).map_err(|_| "invalid UTF-8 in string".to_owned())
    }

    /// Consumes the digits of a JSON number and returns its extent; `integer_only` rejects a
    /// fraction or exponent.
    fn number(&mut self, integer_only: bool) -> Result<&'a str, String> {
        let start = self.pos;
        if self.peek() == Some(b'-') {
            self.pos += 1;
        }
        let digits = |r: &mut Self| {
            let s = r.pos;
            while r.peek().is_some_and(|b| b.is_ascii_digit()) {
                r.pos += 1;
            }
            r.pos - s
        };
        match self.peek() {
            Some(b'0') => self.pos += 1,
            Some(b'1'..=b'9') => {
                digits(self);
            }
            _ => return Err(format!("expected a number, found {}", self.describe())),
        }
        let int_end = self.pos;
        if self.peek() == Some(b'.') {
            self.pos += 1;
            if digits(self) == 0 {
                return Err(format!("bad number fraction: {}", self.describe()));
            }
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.pos += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.pos += 1;
            }
            if digits(self) == 0 {
                return Err(format!("bad number exponent: {}", self.describe()));
            }
        }
        if integer_only && self.pos != int_end {
            self.pos = start;
            return Err(format!("expected an integer, found {}", self.describe()));
        }
        // Only ASCII bytes were consumed.
        std::str::from_utf8(&self.s[start..self.pos]).map_err(|_| "invalid number".to_owned())
    }

    fn integer(&mut self) -> Result<i64, String> {
        let start = self.pos;
        let text = self.number(true)?;
        text.parse::<i64>().map_err(|_| {
            self.pos = start;
            format!("integer {} out of range", quote(text))
        })
    }

    fn skip_value(&mut self, depth: u32) -> Result<(), String> {
        if depth > MAX_JSON_DEPTH {
            return Err("nesting too deep".to_owned());
        }
        self.skip_space();
        match self.peek() {
            Some(b'"') => self.string().map(|_| ()),
            Some(b'{') => self.skip_container(b'}', depth, true),
            Some(b'[') => self.skip_container(b']', depth, false),
            Some(b't') if self.literal("true") => Ok(()),
            Some(b'f') if self.literal("false") => Ok(()),
            Some(b'n') if self.literal("null") => Ok(()),
            Some(b'-' | b'0'..=b'9') => self.number(false).map(|_| ()),
            _ => Err(format!("expected a value, found {}", self.describe())),
        }
    }

    fn skip_container(&mut self, close: u8, depth: u32, object: bool) -> Result<(), String> {
        self.pos += 1; // opening bracket
        self.skip_space();
        if self.peek() == Some(close) {
            self.pos += 1;
            return Ok(());
        }
        loop {
            self.skip_space();
            if object {
                self.string()?;
                self.skip_space();
                self.expect(b':')?;
            }
            self.skip_value(depth + 1)?;
            self.skip_space();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b) if b == close => {
                    self.pos += 1;
                    return Ok(());
                }
                _ => return Err(format!("expected ',' or '{}', found {}", char::from(close), self.describe())),
            }
        }
    }
}

/// `partition.metadata`: `version: <int>\ntopic_id: <base64url uuid>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionMetadata {
    /// Format version; Kafka writes 0.
    pub version: i32,
    /// The topic id exactly as written in the file (normally 22 base64url characters).
    pub topic_id: String,
}

impl PartitionMetadata {
    /// The version Kafka writes.
    pub const VERSION: i32 = 0;

    /// Current-version metadata for a topic id.
    pub fn new(topic_id: impl Into<String>) -> Self {
        PartitionMetadata { version: Self::VERSION, topic_id: topic_id.into() }
    }

    /// Parses the file text as Kafka's `PartitionMetadataReadBuffer` does: line 1 `version`,
    /// line 2 `topic_id`, each `<key>:<one or more whitespace><value>`; the version must be
    /// `>= 0` (Kafka accepts newer versions for downgrade compatibility); the topic id must be
    /// what Kafka's `Uuid.fromString` accepts (at most 24 characters of base64url decoding to 16
    /// bytes) and not the all-zero UUID. Lines end at `\n`, `\r` or `\r\n`; the final newline is
    /// optional (Kafka writes none).
    ///
    /// Stricter than Kafka: for version 0, anything after the topic id line is an error (Kafka
    /// ignores it); for later versions further lines are ignored, as Kafka does.
    pub fn parse(text: &str) -> Result<Self, FormatError> {
        let mut lines = JavaLines { rest: text };
        let first = lines.next().ok_or_else(|| invalid(1, "empty file (expected a version line)"))?;
        let version_text = key_value(first, "version").map_err(|d| invalid(1, d))?;
        let version: i32 = parse_num("version", version_text).map_err(|d| invalid(1, d))?;
        if version < Self::VERSION {
            return Err(invalid(1, format!("unrecognised version {version}")));
        }
        let second = lines.next().ok_or_else(|| invalid(2, "missing topic_id line"))?;
        let topic_id = key_value(second, "topic_id").map_err(|d| invalid(2, d))?;
        decode_topic_id(topic_id).map_err(|d| invalid(2, d))?;
        if version == Self::VERSION && lines.next().is_some() {
            return Err(invalid(3, "unexpected content after the topic_id line"));
        }
        Ok(PartitionMetadata { version, topic_id: topic_id.to_owned() })
    }

    /// `version: <v>\ntopic_id: <id>` exactly as Kafka's `PartitionMetadata.encode()` writes it:
    /// no trailing newline. Does not check the topic id; see [`PartitionMetadata::validate`].
    pub fn serialize(&self) -> String {
        format!("version: {}\ntopic_id: {}", self.version, self.topic_id)
    }

    /// Checks that [`PartitionMetadata::serialize`] would produce text that parses back to
    /// `self`.
    pub fn validate(&self) -> Result<(), FormatError> {
        if self.version < Self::VERSION {
            return Err(invalid(1, format!("unrecognised version {}", self.version)));
        }
        decode_topic_id(&self.topic_id).map(|_| ()).map_err(|d| invalid(2, d))
    }
}

/// The value of a `<key>:\s+<value>` line, as Kafka splits it with `Pattern(":\\s+").split(line,
/// 2)` and then requires the key to match.
fn key_value<'a>(line: &'a str, key: &str) -> Result<&'a str, String> {
    let sep = line.char_indices().find(|&(i, c)| c == ':' && line[i + 1..].starts_with(is_java_space)).map(|(i, _)| i);
    match sep {
        Some(i) if &line[..i] == key => Ok(line[i + 1..].trim_start_matches(is_java_space)),
        _ => Err(format!("malformed line {} (expected \"{key}: <value>\")", quote(line))),
    }
}

/// Decodes a topic id as Kafka's `Uuid.fromString` does (base64url via `java.util.Base64`,
/// which accepts `==` padding and ignores the unused low bits of the last character) and
/// rejects the zero UUID as `PartitionMetadataReadBuffer` does.
fn decode_topic_id(s: &str) -> Result<[u8; 16], String> {
    if s.chars().count() > 24 {
        return Err(format!("topic id {} is too long to be a base64 UUID", quote(s)));
    }
    let body = s.strip_suffix("==").unwrap_or(s);
    if body.len() != 22 {
        return Err(format!("topic id {} does not decode to 16 bytes", quote(s)));
    }
    let mut bits: u32 = 0;
    let mut nbits = 0;
    let mut out = [0u8; 16];
    let mut n = 0;
    for b in body.bytes() {
        let v = match b {
            b'A'..=b'Z' => b - b'A',
            b'a'..=b'z' => b - b'a' + 26,
            b'0'..=b'9' => b - b'0' + 52,
            b'-' => 62,
            b'_' => 63,
            _ => return Err(format!("topic id {} is not base64url", quote(s))),
        };
        bits = (bits << 6) | u32::from(v);
        nbits += 6;
        if nbits >= 8 {
            nbits -= 8;
            if n < out.len() {
                out[n] = (bits >> nbits) as u8;
                n += 1;
            }
            bits &= (1 << nbits) - 1;
        }
    }
    if out == [0u8; 16] {
        return Err("topic id is the zero UUID".to_owned());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> String {
        let path = format!(
            "{}/../fixtures/kafka-pinterest/ts-common/log-files/timeindex_test/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    fn line_of(e: FormatError) -> u32 {
        match e {
            FormatError::InvalidCheckpoint { line, .. } => line,
            other => panic!("unexpected error {other:?}"),
        }
    }

    fn oc(entries: &[(&str, i32, i64)]) -> OffsetCheckpoint {
        OffsetCheckpoint { entries: entries.iter().map(|&(t, p, o)| (t.to_owned(), p, o)).collect() }
    }

    #[test]
    fn java_lines_match_buffered_reader() {
        let l = |s| JavaLines { rest: s }.collect::<Vec<_>>();
        assert_eq!(l(""), Vec::<&str>::new());
        assert_eq!(l("a"), ["a"]);
        assert_eq!(l("a\n"), ["a"]);
        assert_eq!(l("a\n\n"), ["a", ""]);
        assert_eq!(l("a\r\nb\rc\n"), ["a", "b", "c"]);
        assert_eq!(l("\n"), [""]);
        assert_eq!(l("a\r\r\n"), ["a", ""]);
    }

    #[test]
    fn offset_checkpoint_exact_bytes_and_round_trip() {
        let c = oc(&[("t", 0, 5), ("t", 1, 7)]);
        assert_eq!(c.serialize(), "0\n2\nt 0 5\nt 1 7\n");
        assert_eq!(OffsetCheckpoint::parse("0\n2\nt 0 5\nt 1 7\n"), Ok(c.clone()));
        assert_eq!(OffsetCheckpoint::default().serialize(), "0\n0\n");
        assert_eq!(OffsetCheckpoint::parse("0\n0\n"), Ok(OffsetCheckpoint::default()));
        let big = oc(&[("__consumer_offsets", 49, i64::MAX), ("a.b_c-d", i32::MAX, -1), ("x", 0, 0)]);
        assert_eq!(big.validate(), Ok(()));
        assert_eq!(OffsetCheckpoint::parse(&big.serialize()), Ok(big.clone()));
        assert_eq!(OffsetCheckpoint::from_map(&big.to_map()).to_map(), big.to_map());
    }

    #[test]
    fn offset_checkpoint_tolerances() {
        let want = oc(&[("t", 0, 5), ("t", 1, 7)]);
        // Missing final newline, CRLF, tabs and runs of spaces, trailing whitespace.
        for text in [
            "0\n2\nt 0 5\nt 1 7",
            "0\r\n2\r\nt 0 5\r\nt 1 7\r\n",
            "0\n2\nt\t0  5\nt \t 1\x0b7 \n",
            "+0\n02\nt +0 5\nt 1 +7\n",
        ] {
            assert_eq!(OffsetCheckpoint::parse(text), Ok(want.clone()), "{text:?}");
        }
        // Duplicates: kept in order, last wins in the map, as in Kafka's HashMap.
        let dup = OffsetCheckpoint::parse("0\n2\nt 0 5\nt 0 9\n").unwrap();
        assert_eq!(dup.entries.len(), 2);
        assert_eq!(dup.to_map()[&("t".to_owned(), 0)], 9);
    }

    #[test]
    fn offset_checkpoint_rejects() {
        for (text, line) in [
            ("", 1),
            ("\n", 1),
            ("1\n0\n", 1),
            ("-1\n0\n", 1),
            ("x\n0\n", 1),
            ("0 \n0\n", 1),
            ("0", 2),
            ("0\n", 2),
            ("0\n\n", 2),
            ("0\nx\n", 2),
            ("0\n-1\n", 2),
            ("0\n99999999999\n", 2),
            ("0\n2147483648\n", 2),
            ("0\n99999999\nt 0 1\n", 4),
            ("0\n1\n", 3),
            ("0\n2\nt 0 5\n", 4),
            ("0\n0\nt 0 5\n", 3),
            ("0\n1\nt 0 5\nt 1 7\n", 4),
            ("0\n1\nt 0 5\n\n", 4),
            ("0\n1\nt 0 5\n \n", 4),
            ("0\n1\n\n", 3),
            ("0\n1\nt 0\n", 3),
            ("0\n1\nt 0 5 6\n", 3),
            ("0\n1\n t 0 5\n", 3),
            ("0\n1\nt x 5\n", 3),
            ("0\n1\nt 0 x\n", 3),
            ("0\n1\nt -1 5\n", 3),
            ("0\n1\nt 2147483648 5\n", 3),
            ("0\n1\nt 0 9223372036854775808\n", 3),
            ("0\n1\nt 0 5.0\n", 3),
            ("0\n1\nt 0 ５\n", 3),
        ] {
            let r = OffsetCheckpoint::parse(text);
            assert_eq!(r.clone().map_err(line_of), Err(line), "{text:?} -> {r:?}");
        }
        assert_eq!(line_of(oc(&[("t", 0, 1), ("a b", 0, 1)]).validate().unwrap_err()), 4);
        assert_eq!(line_of(oc(&[("", 0, 1)]).validate().unwrap_err()), 3);
        assert_eq!(line_of(oc(&[("t", -1, 1)]).validate().unwrap_err()), 3);
    }

    #[test]
    fn leader_epoch_checkpoint() {
        let c = LeaderEpochCheckpoint { entries: vec![(0, 0), (3, 7729), (i32::MAX, i64::MAX)] };
        assert_eq!(c.serialize(), "0\n3\n0 0\n3 7729\n2147483647 9223372036854775807\n");
        assert_eq!(LeaderEpochCheckpoint::parse(&c.serialize()), Ok(c));
        let fx = LeaderEpochCheckpoint::parse(&fixture(LEADER_EPOCH_CHECKPOINT_FILE)).unwrap();
        assert_eq!(fx.entries, vec![(0, 0)]);
        assert_eq!(fx.serialize(), fixture(LEADER_EPOCH_CHECKPOINT_FILE));
        for (text, line) in [
            ("", 1),
            ("1\n1\n0 0\n", 1),
            ("0\n2\n0 0\n", 4),
            ("0\n1\n0\n", 3),
            ("0\n1\n0 0 0\n", 3),
            ("0\n1\nx 0\n", 3),
            ("0\n1\n2147483648 0\n", 3),
            ("0\n99999999999\n0 0\n", 2),
            ("0\n1\n0 0\nextra\n", 4),
        ] {
            let r = LeaderEpochCheckpoint::parse(text);
            assert_eq!(r.clone().map_err(line_of), Err(line), "{text:?} -> {r:?}");
        }
    }

    #[test]
    fn generic_checkpoint_with_other_version() {
        let text = serialize_checkpoint(3, &["a", "b"], |s, out| out.push_str(s));
        assert_eq!(text, "3\n2\na\nb\n");
        assert_eq!(parse_checkpoint(&text, 3, |l| Ok(l.to_owned())), Ok(vec!["a".to_owned(), "b".to_owned()]));
        assert_eq!(parse_checkpoint(&text, 0, |l| Ok(l.to_owned())).map_err(line_of), Err(1));
        let e = parse_checkpoint(&text, 3, |_| Err::<(), _>("nope".to_owned())).unwrap_err();
        assert_eq!(e, FormatError::InvalidCheckpoint { line: 3, detail: "nope".to_owned() });
    }

    #[test]
    fn clean_shutdown() {
        let c = CleanShutdown { broker_epoch: Some(42) };
        assert_eq!(c.serialize(), r#"{"version":0,"brokerEpoch":42}"#);
        assert_eq!(CleanShutdown::parse(&c.serialize()), Ok(c));
        for epoch in [0, -1, i64::MAX, i64::MIN] {
            let c = CleanShutdown { broker_epoch: Some(epoch) };
            assert_eq!(CleanShutdown::parse(&c.serialize()), Ok(c));
        }
        let none = CleanShutdown { broker_epoch: None };
        assert_eq!(none.serialize(), "");
        for text in ["", " \n", "{\"version\":0}", "{\"version\":0,\"brokerEpoch\":null}"] {
            assert_eq!(CleanShutdown::parse(text), Ok(none), "{text:?}");
        }
        for text in [
            " {\n  \"brokerEpoch\" : 7 ,\n\t\"version\": 0\n}\n",
            r#"{"version":0,"brokerEpoch":7,"extra":{"a":[1,2.5e3,true,null,"x\"\u00e9"]}}"#,
            r#"{"future":"field","version":0,"brokerEpoch":7}"#,
        ] {
            assert_eq!(CleanShutdown::parse(text), Ok(CleanShutdown { broker_epoch: Some(7) }), "{text:?}");
        }
        for (text, line) in [
            ("{}", 1),
            ("{\"brokerEpoch\":1}", 1),
            ("{\"version\":1,\"brokerEpoch\":1}", 1),
            ("{\"version\":0,\"brokerEpoch\":1.5}", 1),
            ("{\"version\":0,\"brokerEpoch\":1e3}", 1),
            ("{\"version\":0,\"brokerEpoch\":\"1\"}", 1),
            ("{\"version\":0,\"brokerEpoch\":9223372036854775808}", 1),
            ("{\"version\":0,\"brokerEpoch\":01}", 1),
            ("{\"version\":0,\"brokerEpoch\":-}", 1),
            ("{\"version\":0,\"version\":0}", 1),
            ("{\"version\":0,\"brokerEpoch\":1,\"brokerEpoch\":2}", 1),
            ("{\"version\":0,\"brokerEpoch\":1}x", 1),
            ("{\"version\":0,\"brokerEpoch\":1}{}", 1),
            ("{\"version\":0,\"brokerEpoch\":1,}", 1),
            ("{\"version\":0 \"brokerEpoch\":1}", 1),
            ("{\"version\":0,\"brokerEpoch\":1", 1),
            ("{\"version\":0,\n\"brokerEpoch\":x}", 2),
            ("{\"version\"", 1),
            ("{\"vers", 1),
            ("[]", 1),
            ("null", 1),
            ("{\"version\":0,\"x\":\"\\q\"}", 1),
            ("{\"version\":0,\"x\":\"\\u12\"}", 1),
            ("{\"version\":0,\"x\":\"a\nb\"}", 1),
            ("{\"version\":0,\"x\":tru}", 1),
        ] {
            let r = CleanShutdown::parse(text);
            assert_eq!(r.map_err(line_of), Err(line), "{text:?}");
        }
        let deep = format!("{{\"version\":0,\"x\":{}{}}}", "[".repeat(10_000), "]".repeat(10_000));
        assert!(CleanShutdown::parse(&deep).is_err());
        let ok_deep = format!("{{\"version\":0,\"x\":{}{}}}", "[".repeat(20), "]".repeat(20));
        assert_eq!(CleanShutdown::parse(&ok_deep), Ok(none));
    }

    #[test]
    fn partition_metadata() {
        let text = fixture(PARTITION_METADATA_FILE);
        let m = PartitionMetadata::parse(&text).unwrap();
        assert_eq!(m, PartitionMetadata::new("p59PN4qkR8y176nhuDDPPA"));
        assert_eq!(m.validate(), Ok(()));
        assert_eq!(m.serialize(), text, "byte-identical to the Kafka-written fixture");
        assert_eq!(m.serialize(), "version: 0\ntopic_id: p59PN4qkR8y176nhuDDPPA");
        for ok in [
            "version: 0\ntopic_id: p59PN4qkR8y176nhuDDPPA\n",
            "version: 0\r\ntopic_id: p59PN4qkR8y176nhuDDPPA\r\n",
            "version:\t 0\ntopic_id:  p59PN4qkR8y176nhuDDPPA",
            "version: 0\ntopic_id: p59PN4qkR8y176nhuDDPPA==",
            "version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ",
            "version: 0\ntopic_id: -_-_-_-_-_-_-_-_-_-_-_",
        ] {
            let m = PartitionMetadata::parse(ok).unwrap_or_else(|e| panic!("{ok:?}: {e}"));
            assert_eq!(PartitionMetadata::parse(&m.serialize()), Ok(m.clone()));
        }
        let v1 = PartitionMetadata::parse("version: 1\ntopic_id: p59PN4qkR8y176nhuDDPPA\nnew_key: x\n").unwrap();
        assert_eq!(v1.version, 1);
        assert_eq!(PartitionMetadata::parse(&v1.serialize()), Ok(v1));
        for (text, line) in [
            ("", 1),
            ("\n", 1),
            ("version: 0", 2),
            ("version: 0\n", 2),
            ("version:0\ntopic_id: p59PN4qkR8y176nhuDDPPA", 1),
            ("Version: 0\ntopic_id: p59PN4qkR8y176nhuDDPPA", 1),
            ("version: -1\ntopic_id: p59PN4qkR8y176nhuDDPPA", 1),
            ("version: x\ntopic_id: p59PN4qkR8y176nhuDDPPA", 1),
            ("version: 99999999999\ntopic_id: p59PN4qkR8y176nhuDDPPA", 1),
            ("version: 0\ntopic: p59PN4qkR8y176nhuDDPPA", 2),
            ("version: 0\ntopic_id: ", 2),
            ("version: 0\ntopic_id: p59PN4qkR8y176nhuDDPP", 2),
            ("version: 0\ntopic_id: p59PN4qkR8y176nhuDDPPAA", 2),
            ("version: 0\ntopic_id: p59PN4qkR8y176nhuDDPPA=", 2),
            ("version: 0\ntopic_id: p59PN4qkR8y176nhuDDPP+", 2),
            ("version: 0\ntopic_id: p59PN4qkR8y176nhuDDPPA ", 2),
            ("version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA", 2),
            ("version: 0\ntopic_id: 7f1c9b6e-8e1a-4b1e-9a6f-2d3c4b5a6e7f", 2),
            ("version: 0\ntopic_id: p59PN4qkR8y176nhuDDPPA\nmore", 3),
            ("version: 0\ntopic_id: p59PN4qkR8y176nhuDDPPA\n\n", 3),
        ] {
            let r = PartitionMetadata::parse(text);
            assert_eq!(r.clone().map_err(line_of), Err(line), "{text:?} -> {r:?}");
        }
        assert!(PartitionMetadata::new("nope").validate().is_err());
    }

    #[test]
    fn topic_id_decodes_like_java() {
        // 0xa7 0x9f 0x4f 0x37 ... from "p59PN4qkR8y176nhuDDPPA".
        let b = decode_topic_id("p59PN4qkR8y176nhuDDPPA").unwrap();
        assert_eq!(&b[..4], &[0xa7, 0x9f, 0x4f, 0x37]);
        let one = decode_topic_id("AAAAAAAAAAAAAAAAAAAAAQ").unwrap();
        assert_eq!(one, [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        // Java ignores the unused low bits of the last character.
        assert_eq!(decode_topic_id("AAAAAAAAAAAAAAAAAAAAAR"), Ok(one));
    }

    /// Deterministic xorshift so the no-panic sweep needs no extra dependency.
    fn xorshift(state: &mut u64) -> u64 {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        *state
    }

    fn parse_all(text: &str) {
        let _ = OffsetCheckpoint::parse(text);
        let _ = LeaderEpochCheckpoint::parse(text);
        let _ = CleanShutdown::parse(text);
        let _ = PartitionMetadata::parse(text);
    }

    #[test]
    fn no_panics_on_truncations_and_mutations() {
        let seeds = [
            oc(&[("t", 0, 5), ("t", 1, 7)]).serialize(),
            LeaderEpochCheckpoint { entries: vec![(0, 0), (1, 100)] }.serialize(),
            CleanShutdown { broker_epoch: Some(-12345) }.serialize(),
            r#"{"version":0,"x":[{"a":"\u00e9\n"},1.5e-3,true],"brokerEpoch":1}"#.to_owned(),
            PartitionMetadata::new("p59PN4qkR8y176nhuDDPPA").serialize(),
            "é€ 😀\r\n\u{0b}".to_owned(),
        ];
        let alphabet: &[u8] = b"0123456789 \t\r\n-+.:,{}[]\"\\eEnultrfaAQ_=xv";
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        for seed in &seeds {
            for cut in 0..=seed.len() {
                if let Some(prefix) = seed.get(..cut) {
                    parse_all(prefix);
                }
            }
            let bytes = seed.as_bytes();
            for _ in 0..2_000 {
                let mut m = bytes.to_vec();
                for _ in 0..1 + xorshift(&mut rng) % 3 {
                    if m.is_empty() {
                        break;
                    }
                    let i = (xorshift(&mut rng) % m.len() as u64) as usize;
                    let c = alphabet[(xorshift(&mut rng) % alphabet.len() as u64) as usize];
                    match xorshift(&mut rng) % 3 {
                        0 => m[i] = c,
                        1 => m.insert(i, c),
                        _ => {
                            m.remove(i);
                        }
                    }
                }
                if let Ok(s) = std::str::from_utf8(&m) {
                    parse_all(s);
                }
            }
        }
    }
}
