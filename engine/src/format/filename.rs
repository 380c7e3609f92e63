//! Kafka's file and directory names: segment files (`%020d.log`, `.index`, `.timeindex`,
//! `.txnindex`, `.snapshot`), their transient suffixes (`.deleted`, `.cleaned`, `.swap`), and
//! partition directories (`<topic>-<partition>`) with Kafka's topic-name rules.
//!
//! Kafka writes a base offset as a 20-digit zero-padded decimal (`NumberFormat` with
//! `minimumIntegerDigits = 20`, no grouping) and reads it back with
//! `Long.parseLong(name.substring(0, name.indexOf('.')))`. The parser here is stricter: the part
//! before the first `.` must be exactly 20 ASCII digits whose value fits in a non-negative `i64`.
//! Names that are not segment files at all (`leader-epoch-checkpoint`, `partition.metadata`,
//! KRaft `*.checkpoint.deleted`, `*.tmp`, …) parse as `Ok(None)`, so a directory listing can be
//! fed through [`SegmentFileName::parse`] without pre-filtering. Sources: `Ks/LogFileUtils.java`,
//! `Kc/LocalLog.scala`, `clients/.../common/internals/Topic.java`.

use std::fmt;

use super::FormatError;

/// Number of digits in a segment file name's base-offset stem.
pub const STEM_DIGITS: usize = 20;

/// Suffix of a segment's record data file.
pub const LOG_FILE_SUFFIX: &str = ".log";
/// Suffix of a segment's offset index.
pub const INDEX_FILE_SUFFIX: &str = ".index";
/// Suffix of a segment's time index.
pub const TIME_INDEX_FILE_SUFFIX: &str = ".timeindex";
/// Suffix of a segment's aborted-transaction index.
pub const TXN_INDEX_FILE_SUFFIX: &str = ".txnindex";
/// Suffix of a producer-state snapshot.
pub const SNAPSHOT_FILE_SUFFIX: &str = ".snapshot";
/// Appended to a file scheduled for asynchronous deletion.
pub const DELETED_FILE_SUFFIX: &str = ".deleted";
/// Appended to the log cleaner's in-progress output.
pub const CLEANED_FILE_SUFFIX: &str = ".cleaned";
/// Appended to a file that is complete and waiting to replace the live one.
pub const SWAP_FILE_SUFFIX: &str = ".swap";

/// Suffix of a partition directory whose topic is being deleted (`<tp>.<uuid32hex>-delete`).
pub const DELETE_DIR_SUFFIX: &str = "-delete";
/// Suffix of a future replica's directory (moving between log directories).
pub const FUTURE_DIR_SUFFIX: &str = "-future";
/// Suffix of a stray partition directory.
pub const STRAY_DIR_SUFFIX: &str = "-stray";

/// Kafka's maximum topic-name length (`Topic.MAX_NAME_LENGTH`).
pub const MAX_TOPIC_NAME_LENGTH: usize = 249;

/// The 20-digit zero-padded decimal stem Kafka uses for every file of a segment (`%020d`).
///
/// Negative offsets never name a segment; for completeness they format as Java's `NumberFormat`
/// does (`-` followed by 20 digits), which [`SegmentFileName::parse`] rejects.
pub fn segment_stem(base_offset: i64) -> String {
    if base_offset >= 0 {
        format!("{base_offset:020}")
    } else {
        format!("-{:020}", base_offset.unsigned_abs())
    }
}

/// `<stem>.log`.
pub fn log_file_name(base_offset: i64) -> String {
    SegmentFileName::new(base_offset, FileKind::Log).to_name()
}

/// `<stem>.index`.
pub fn index_file_name(base_offset: i64) -> String {
    SegmentFileName::new(base_offset, FileKind::Index).to_name()
}

/// `<stem>.timeindex`.
pub fn time_index_file_name(base_offset: i64) -> String {
    SegmentFileName::new(base_offset, FileKind::TimeIndex).to_name()
}

/// `<stem>.txnindex`.
pub fn txn_index_file_name(base_offset: i64) -> String {
    SegmentFileName::new(base_offset, FileKind::TxnIndex).to_name()
}

/// `<stem>.snapshot` (producer-state snapshot; its offset is the log end offset at the time).
pub fn snapshot_file_name(base_offset: i64) -> String {
    SegmentFileName::new(base_offset, FileKind::Snapshot).to_name()
}

/// What a segment-named file holds, from its extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FileKind {
    /// `.log`: record batches.
    Log,
    /// `.index`: sparse offset index.
    Index,
    /// `.timeindex`: sparse time index.
    TimeIndex,
    /// `.txnindex`: aborted-transaction index.
    TxnIndex,
    /// `.snapshot`: producer-state snapshot.
    Snapshot,
}

impl FileKind {
    /// Every kind, in a fixed order.
    pub const ALL: [FileKind; 5] =
        [FileKind::Log, FileKind::Index, FileKind::TimeIndex, FileKind::TxnIndex, FileKind::Snapshot];

    /// The extension including its leading dot, e.g. `".timeindex"`.
    pub const fn suffix(self) -> &'static str {
        match self {
            FileKind::Log => LOG_FILE_SUFFIX,
            FileKind::Index => INDEX_FILE_SUFFIX,
            FileKind::TimeIndex => TIME_INDEX_FILE_SUFFIX,
            FileKind::TxnIndex => TXN_INDEX_FILE_SUFFIX,
            FileKind::Snapshot => SNAPSHOT_FILE_SUFFIX,
        }
    }

    /// The kind whose extension, without the leading dot, is exactly `ext` (case-sensitive).
    pub fn from_extension(ext: &str) -> Option<FileKind> {
        FileKind::ALL.into_iter().find(|k| &k.suffix()[1..] == ext)
    }
}

/// A transient state suffix appended after the whole file name
/// (e.g. `00000000000000000000.log.deleted`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum FileSuffix {
    /// A live file: no suffix.
    #[default]
    None,
    /// `.deleted`: scheduled for asynchronous deletion; the loader deletes it.
    Deleted,
    /// `.cleaned`: log cleaner output still being written; the loader deletes it.
    Cleaned,
    /// `.swap`: complete replacement waiting to be renamed over the live file.
    Swap,
}

impl FileSuffix {
    /// The suffix including its leading dot, or `""` for [`FileSuffix::None`].
    pub const fn as_str(self) -> &'static str {
        match self {
            FileSuffix::None => "",
            FileSuffix::Deleted => DELETED_FILE_SUFFIX,
            FileSuffix::Cleaned => CLEANED_FILE_SUFFIX,
            FileSuffix::Swap => SWAP_FILE_SUFFIX,
        }
    }

    /// The state whose suffix, without the leading dot, is exactly `s`; `None` for anything else
    /// (including the empty string, which is not a suffix).
    fn from_extension(s: &str) -> Option<FileSuffix> {
        [FileSuffix::Deleted, FileSuffix::Cleaned, FileSuffix::Swap].into_iter().find(|f| &f.as_str()[1..] == s)
    }
}

/// The parsed name of one segment-related file: `<20 digits><kind suffix>[<state suffix>]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SegmentFileName {
    /// The offset in the name (the segment's base offset; for `.snapshot`, the snapshot offset).
    pub base_offset: i64,
    /// Which file of the segment this is.
    pub kind: FileKind,
    /// Transient state suffix, if any.
    pub suffix: FileSuffix,
}

impl SegmentFileName {
    /// A live (unsuffixed) file name.
    pub const fn new(base_offset: i64, kind: FileKind) -> Self {
        SegmentFileName { base_offset, kind, suffix: FileSuffix::None }
    }

    /// The same file with a different state suffix (e.g. the `.deleted` name to rename to).
    pub const fn with_suffix(self, suffix: FileSuffix) -> Self {
        SegmentFileName { suffix, ..self }
    }

    /// Parses a bare file name (no directory part).
    ///
    /// - `Ok(Some(_))`: `<stem>.<kind>` or `<stem>.<kind>.<deleted|cleaned|swap>` where the stem
    ///   (everything before the first `.`) is exactly 20 ASCII digits with a value in
    ///   `0..=i64::MAX`.
    /// - `Ok(None)`: the text after the first `.` is not one of those shapes, so this is not a
    ///   segment file: `leader-epoch-checkpoint`, `partition.metadata`, `.kafka_cleanshutdown`,
    ///   KRaft `*.checkpoint.deleted` (which Kafka's loader skips), `*.tmp`, names with unknown
    ///   or upper-case extensions, doubled state suffixes.
    /// - `Err(InvalidFileName)`: it has a segment-file extension but the stem is not a valid
    ///   offset (`abc.log`, `.log`, `123.index`, `99999999999999999999.log`). Kafka would throw
    ///   `NumberFormatException` for most of these, or silently accept a short stem.
    pub fn parse(name: &str) -> Result<Option<SegmentFileName>, FormatError> {
        let Some((stem, rest)) = name.split_once('.') else {
            return Ok(None);
        };
        let (kind_ext, suffix) = match rest.split_once('.') {
            None => (rest, FileSuffix::None),
            Some((kind_ext, state)) => match FileSuffix::from_extension(state) {
                Some(suffix) => (kind_ext, suffix),
                None => return Ok(None),
            },
        };
        let Some(kind) = FileKind::from_extension(kind_ext) else {
            return Ok(None);
        };
        match parse_stem(stem) {
            Some(base_offset) => Ok(Some(SegmentFileName { base_offset, kind, suffix })),
            None => Err(FormatError::InvalidFileName { name: name.to_owned() }),
        }
    }

    /// The file name: stem, kind suffix, then state suffix.
    pub fn to_name(&self) -> String {
        let mut s = segment_stem(self.base_offset);
        s.push_str(self.kind.suffix());
        s.push_str(self.suffix.as_str());
        s
    }
}

impl fmt::Display for SegmentFileName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_name())
    }
}

/// Exactly 20 ASCII digits, value within `i64` (so the first digit is always `0`).
fn parse_stem(stem: &str) -> Option<i64> {
    if stem.len() != STEM_DIGITS || !stem.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // All-digit input: the only possible failure is overflow.
    stem.parse::<i64>().ok()
}

/// Splits a partition directory name `<topic>-<partition>` at its last `-`.
///
/// Returns `None` for directories ending in `-delete`, `-future` or `-stray` (deleted, moving or
/// stray replicas, which are not live partitions), when the topic is not a valid Kafka topic name
/// (see [`validate_topic_name`]), or when the partition is not a canonical non-negative `i32`
/// (ASCII digits, no sign, no leading zeros except `0` itself, so that
/// [`partition_dir_name`] reproduces the input exactly).
pub fn parse_partition_dir(name: &str) -> Option<(String, i32)> {
    if [DELETE_DIR_SUFFIX, FUTURE_DIR_SUFFIX, STRAY_DIR_SUFFIX].iter().any(|s| name.ends_with(s)) {
        return None;
    }
    let (topic, part) = name.rsplit_once('-')?;
    let canonical =
        !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit()) && (part == "0" || !part.starts_with('0'));
    if !canonical {
        return None;
    }
    let partition = part.parse::<i32>().ok()?;
    validate_topic_name(topic).ok()?;
    Some((topic.to_owned(), partition))
}

/// `<partition dir>.<unique>-delete`: what a deleted partition's directory is renamed to before
/// it is removed (Kafka puts a UUID's 32 hex digits in `<unique>`).
pub fn deleted_partition_dir_name(partition_dir: &str, unique: &str) -> String {
    format!("{partition_dir}.{unique}{DELETE_DIR_SUFFIX}")
}

/// Whether `name` is a deleted partition's directory, `<topic>-<partition>.<32 hex>-delete`
/// (Kafka's `DeleteDirPattern`), which a start removes.
pub fn is_deleted_partition_dir(name: &str) -> bool {
    let Some((tp, unique)) = name.strip_suffix(DELETE_DIR_SUFFIX).and_then(|stem| stem.rsplit_once('.')) else {
        return false;
    };
    unique.len() == 32 && unique.bytes().all(|b| b.is_ascii_hexdigit()) && parse_partition_dir(tp).is_some()
}

/// `<topic>-<partition>`, the directory Kafka keeps a partition's segments in.
pub fn partition_dir_name(topic: &str, partition: i32) -> String {
    format!("{topic}-{partition}")
}

/// Kafka's topic-name rules (`Topic.validate`): non-empty, not `.` or `..`, at most 249
/// characters, and only ASCII letters, digits, `.`, `_` and `-`. The error text is Kafka's.
pub fn validate_topic_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("Topic name is illegal, it can't be empty".to_owned());
    }
    if name == "." || name == ".." {
        return Err("Topic name cannot be \".\" or \"..\"".to_owned());
    }
    // Java's String.length() counts UTF-16 units; only matters for which message is returned.
    if name.encode_utf16().count() > MAX_TOPIC_NAME_LENGTH {
        return Err(format!(
            "Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME_LENGTH} characters, \
             topic name: {name}"
        ));
    }
    if !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-') {
        return Err(format!(
            "Topic name \"{name}\" is illegal, it contains a character other than ASCII \
             alphanumerics, '.', '_' and '-'"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn invalid(name: &str) -> FormatError {
        FormatError::InvalidFileName { name: name.to_owned() }
    }

    #[test]
    fn stem_is_twenty_digit_zero_pad() {
        assert_eq!(segment_stem(0), "00000000000000000000");
        assert_eq!(segment_stem(7729), "00000000000000007729");
        assert_eq!(segment_stem(1_234_567_890_123), "00000001234567890123");
        assert_eq!(segment_stem(i64::MAX), "09223372036854775807");
        assert_eq!(segment_stem(-1), "-00000000000000000001");
        assert_eq!(segment_stem(i64::MIN), "-09223372036854775808");
    }

    #[test]
    fn file_name_helpers() {
        assert_eq!(log_file_name(0), "00000000000000000000.log");
        assert_eq!(index_file_name(15363), "00000000000000015363.index");
        assert_eq!(time_index_file_name(22964), "00000000000000022964.timeindex");
        assert_eq!(txn_index_file_name(1), "00000000000000000001.txnindex");
        assert_eq!(snapshot_file_name(7729), "00000000000000007729.snapshot");
        let deleted = SegmentFileName::new(0, FileKind::Log).with_suffix(FileSuffix::Deleted);
        assert_eq!(deleted.to_name(), "00000000000000000000.log.deleted");
        assert_eq!(deleted.to_string(), "00000000000000000000.log.deleted");
    }

    #[test]
    fn round_trips_every_kind_and_suffix() {
        let suffixes = [FileSuffix::None, FileSuffix::Deleted, FileSuffix::Cleaned, FileSuffix::Swap];
        for base in [0, 1, 7729, 1 << 40, i64::MAX] {
            for kind in FileKind::ALL {
                for suffix in suffixes {
                    let n = SegmentFileName { base_offset: base, kind, suffix };
                    let name = n.to_name();
                    assert_eq!(SegmentFileName::parse(&name), Ok(Some(n)), "{name}");
                }
            }
        }
    }

    #[test]
    fn parses_real_names() {
        let p = |s| SegmentFileName::parse(s).unwrap().unwrap();
        assert_eq!(p("00000000000000007729.timeindex"), SegmentFileName::new(7729, FileKind::TimeIndex));
        assert_eq!(
            p("00000000000000000100.index.swap"),
            SegmentFileName::new(100, FileKind::Index).with_suffix(FileSuffix::Swap)
        );
        assert_eq!(
            p("00000000000000000100.log.cleaned"),
            SegmentFileName::new(100, FileKind::Log).with_suffix(FileSuffix::Cleaned)
        );
    }

    #[test]
    fn non_segment_names_are_none() {
        for name in [
            "",
            ".",
            "leader-epoch-checkpoint",
            "partition.metadata",
            ".kafka_cleanshutdown",
            ".lock",
            "meta.properties",
            "recovery-point-offset-checkpoint",
            "00000000000000000000.wm",
            "00000000000000000000-0000000001.checkpoint.deleted",
            "00000000000000000000-0000000001.checkpoint",
            "00000000000000000000.log.tmp",
            "00000000000000000000.snapshot.tmp",
            "00000000000000000000.LOG",
            "00000000000000000000.log.deleted.deleted",
            "00000000000000000000.log.",
            "00000000000000000000..log",
            "00000000000000000000.deleted",
            "foo.bar.log",
        ] {
            assert_eq!(SegmentFileName::parse(name), Ok(None), "{name:?}");
        }
    }

    #[test]
    fn bad_offsets_are_errors() {
        for name in [
            ".log",
            "abc.log",
            "0.log",
            "1234.index",
            "0000000000000000000.log",   // 19 digits
            "000000000000000000000.log", // 21 digits
            "99999999999999999999.log",  // > i64::MAX
            "09223372036854775808.log",  // i64::MAX + 1
            "-0000000000000000001.log",
            "+0000000000000000001.log",
            " 0000000000000000001.log",
            "0000000000000000000a.timeindex.deleted",
            "０0000000000000000000.log", // full-width digit
        ] {
            assert_eq!(SegmentFileName::parse(name), Err(invalid(name)), "{name:?}");
        }
        // Negative offsets format but do not parse back.
        let neg = SegmentFileName::new(-1, FileKind::Log).to_name();
        assert_eq!(SegmentFileName::parse(&neg), Err(invalid(&neg)));
    }

    #[test]
    fn fixture_directory_names_parse() {
        let dir =
            concat!(env!("CARGO_MANIFEST_DIR"), "/../fixtures/kafka-pinterest/ts-common/log-files/timeindex_test");
        let entries = std::fs::read_dir(dir).expect("fixture directory");
        let mut segments = 0;
        for e in entries {
            let name = e.unwrap().file_name().into_string().unwrap();
            match SegmentFileName::parse(&name).unwrap() {
                Some(n) => {
                    segments += 1;
                    assert_eq!(n.to_name(), name);
                }
                None => assert!(name == "leader-epoch-checkpoint" || name == "partition.metadata", "{name}"),
            }
        }
        assert_eq!(segments, 15);
    }

    #[test]
    fn partition_dirs() {
        assert_eq!(parse_partition_dir("t-0"), Some(("t".to_owned(), 0)));
        assert_eq!(parse_partition_dir("my-topic-12"), Some(("my-topic".to_owned(), 12)));
        assert_eq!(parse_partition_dir("a.b_c-2147483647"), Some(("a.b_c".to_owned(), i32::MAX)));
        assert_eq!(parse_partition_dir("__consumer_offsets-49"), Some(("__consumer_offsets".to_owned(), 49)));
        for bad in [
            "",
            "-",
            "t",
            "t-",
            "-0",
            "t-+1",
            "t-1-",
            "t-01",
            "t-2147483648",
            "t-1a",
            "t- 1",
            "t-0.0123456789abcdef0123456789abcdef-delete",
            "t-0-delete",
            "t-0.0123456789abcdef0123456789abcdef-future",
            "t-0.0123456789abcdef0123456789abcdef-stray",
            ".-0",
            "..-0",
            "bad topic-0",
            "t/x-0",
            "tö-0",
        ] {
            assert_eq!(parse_partition_dir(bad), None, "{bad:?}");
        }
        // The split is at the last '-': a topic may end in '-'.
        assert_eq!(parse_partition_dir("t--1"), Some(("t-".to_owned(), 1)));
        for (t, p) in [("t", 0), ("my-topic", 12), ("x.y", i32::MAX), ("-", 5)] {
            let name = partition_dir_name(t, p);
            assert_eq!(parse_partition_dir(&name), Some((t.to_owned(), p)));
        }
        assert_eq!(partition_dir_name("orders", 3), "orders-3");
        let long = "a".repeat(MAX_TOPIC_NAME_LENGTH + 1);
        assert_eq!(parse_partition_dir(&format!("{long}-0")), None);
    }

    #[test]
    fn topic_names() {
        for ok in ["a", "A-z_0.9", "...", ".a", "-", "_"] {
            assert_eq!(validate_topic_name(ok), Ok(()), "{ok:?}");
        }
        assert_eq!(validate_topic_name(&"x".repeat(249)), Ok(()));
        for bad in ["", ".", "..", "a b", "a/b", "a:b", "é", "a\n", "a\0"] {
            assert!(validate_topic_name(bad).is_err(), "{bad:?}");
        }
        let long = validate_topic_name(&"x".repeat(250)).unwrap_err();
        assert!(long.contains("longer than 249"), "{long}");
    }
}
