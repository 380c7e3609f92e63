//! Engine errors as Kafka's error codes, the way Kafka's broker answers the same conditions.

use kafka_protocol::error::ResponseError;
use seglog::Error;

/// The error code a partition's answer carries for `e`.
pub(crate) fn code(e: &Error) -> i16 {
    let kind = match e {
        // A batch that fails its CRC or framing (Kafka's CorruptRecordException).
        Error::InvalidBatch { .. } | Error::Corrupt { .. } => ResponseError::CorruptMessage,
        // A batch over max.message.bytes, or an append over segment.bytes
        // (RecordTooLargeException, RecordBatchTooLargeException).
        Error::RecordTooLarge { limit_name, .. } if *limit_name == "segment.bytes" => ResponseError::RecordListTooLarge,
        Error::RecordTooLarge { .. } => ResponseError::MessageTooLarge,
        Error::InvalidTimestamp { .. } => ResponseError::InvalidTimestamp,
        Error::InvalidRecord { .. } => ResponseError::InvalidRecord,
        Error::Producer { source, .. } => return source.kafka_code(),
        Error::OffsetOutOfRange { .. } => ResponseError::OffsetOutOfRange,
        Error::UnknownPartition { .. } => ResponseError::UnknownTopicOrPartition,
        Error::InvalidTopicName { .. } => ResponseError::InvalidTopicException,
        // The engine's shard queue is full under Backpressure::Error: retriable.
        Error::QueueFull { .. } => ResponseError::RequestTimedOut,
        Error::EngineStopped => ResponseError::NotLeaderOrFollower,
        // A failed write or fsync, an unreadable file, a full disk: the log directory is the
        // problem (Kafka marks it offline and answers KAFKA_STORAGE_ERROR).
        Error::Io { .. } | Error::Failed { .. } | Error::CorruptIndex { .. } | Error::TooManyOpenFiles { .. } => {
            ResponseError::KafkaStorageError
        }
        _ => ResponseError::UnknownServerError,
    };
    kind.code()
}
