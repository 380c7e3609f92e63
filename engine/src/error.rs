//! The engine's error type. Every error says where: which operation, which file, which byte
//! position, which offsets. Bugs are assertions, not errors.

use std::path::PathBuf;

use crate::format::FormatError;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An operating-system I/O call failed.
    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// An append was refused because a batch is malformed (Kafka's CorruptRecordException /
    /// InvalidRecordException). `at` is the byte position of the batch inside the request. The log
    /// is unchanged.
    #[error("invalid batch at byte {at} of the append: {source}")]
    InvalidBatch {
        at: usize,
        #[source]
        source: FormatError,
    },
    /// A batch is larger than `max.message.bytes` (Kafka's RecordTooLargeException), or the whole
    /// append is larger than `segment.bytes` (RecordBatchTooLargeException).
    #[error("batch of {size} bytes at byte {at} of the append exceeds {limit_name} = {limit}")]
    RecordTooLarge { at: usize, size: u64, limit: u64, limit_name: &'static str },
    /// A record timestamp is outside message.timestamp.before/after.max.ms of the broker clock.
    #[error("record timestamp {timestamp} in the batch at byte {at} is out of range: now {now_ms}, {detail}")]
    InvalidTimestamp { at: usize, timestamp: i64, now_ms: i64, detail: &'static str },
    /// The batch breaks a leader rule that is not about bytes (control batch from a client,
    /// non-zero base offset from a client, producer id without sequence).
    #[error("invalid batch at byte {at} of the append: {detail}")]
    InvalidRecord { at: usize, detail: String },
    /// A follower append whose offsets do not continue the log (Kafka's
    /// UnexpectedAppendOffsetException / OffsetsOutOfOrderException). The log is unchanged.
    #[error("offsets do not continue the log: batch at byte {at} starts at {first_offset}, expected at least {expected_at_least}")]
    NonMonotonicOffset { at: usize, first_offset: i64, expected_at_least: i64 },
    /// A read below the log start offset or beyond the log end offset.
    #[error("offset {offset} is out of range [{log_start_offset}, {log_end_offset}]")]
    OffsetOutOfRange { offset: i64, log_start_offset: i64, log_end_offset: i64 },
    /// Bytes on disk are not what Kafka's format allows, at a known file position.
    #[error("corrupt {path} at byte {pos}: {source}")]
    Corrupt {
        path: PathBuf,
        pos: u64,
        #[source]
        source: FormatError,
    },
    /// An index file fails Kafka's sanity check or cannot be used.
    #[error("corrupt index {path}: {detail}")]
    CorruptIndex { path: PathBuf, detail: String },
    /// A setting is out of the range Kafka allows.
    #[error("invalid configuration: {0}")]
    InvalidConfig(String),
    /// A topic name breaks Kafka's rules.
    #[error("invalid topic name {name:?}: {detail}")]
    InvalidTopicName { name: String, detail: String },
    /// The engine (or the shard owning the partition) stopped before answering.
    #[error("the engine stopped before completing the request")]
    EngineStopped,
    /// A shard's request queue is full and the engine is configured to refuse rather than wait.
    #[error("shard {shard} request queue is full ({capacity} requests)")]
    QueueFull { shard: usize, capacity: usize },
    /// The partition is not open in this engine.
    #[error("unknown partition {topic}-{partition}")]
    UnknownPartition { topic: String, partition: i32 },
    /// A segment file could not be opened: every descriptor the shard may keep open
    /// (`max_open_files`, active segments' `.log`s included) is in use, or the process is out of
    /// descriptors (EMFILE/ENFILE) and no idle file is left to close. Nothing changed; retry once
    /// reads finish, or raise the limit.
    #[error("cannot open {path}: {open} files open under a limit of {limit}, none idle")]
    TooManyOpenFiles { path: PathBuf, limit: usize, open: usize },
    /// A producer check refused the batch at byte `at` of the append (Kafka's error is
    /// `source.kafka_name()`): the log is unchanged.
    #[error("batch at byte {at} of the append: {source} ({})", source.kafka_name())]
    Producer { at: usize, source: crate::log::producer_state::ProducerError },
    /// Another owner holds the directory: a second engine or `Log`, a writing `seglog` command, or
    /// a Kafka broker (Kafka's "Failed to acquire lock on file .lock"). `path` is the lock file or
    /// the directory locked; `holder` is the process holding it, where the kernel says (0 when it
    /// holds but does not say which process).
    #[error("{path} is locked by {}: one owner per directory (an engine, a Log, a writing seglog command or a Kafka broker); stop it first", holder_text(*.holder))]
    Locked { path: PathBuf, holder: Option<u32> },
    /// A file or directory inside a data directory is not what seglog may use there: a symbolic
    /// link (never followed, so nothing outside the directory is written), a FIFO, a device, a
    /// socket, or a directory where a file belongs.
    #[error("{path} is {what}: seglog uses only regular files and directories inside a data directory")]
    NotRegular { path: PathBuf, what: &'static str },
    /// A previous write or fsync failed: the partition refuses appends until it is reopened.
    #[error("log {dir} is in a failed state after an I/O error: {reason}")]
    Failed { dir: PathBuf, reason: String },
}

fn holder_text(holder: Option<u32>) -> String {
    match holder {
        Some(pid) if pid == std::process::id() => format!("this process (pid {pid}), through another engine or Log"),
        Some(0) | None => "another process".to_string(),
        Some(pid) => format!("process {pid}"),
    }
}

impl Error {
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Error {
        Error::Io { op, path: path.into(), source }
    }
}
