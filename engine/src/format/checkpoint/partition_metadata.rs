//! `partition.metadata`: the version and the topic id.

use super::{invalid, is_java_space, parse_num, quote, FormatError, JavaLines};

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
pub(super) fn decode_topic_id(s: &str) -> Result<[u8; 16], String> {
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
