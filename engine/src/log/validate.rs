//! What a leader and a follower check before an append touches the log (Kafka's
//! `analyzeAndValidateRecords` and `LogValidator`, in-place path). Nothing here writes: a refusal
//! leaves the log exactly as it was.

use crate::config::LogConfig;
use crate::error::{Error, Result};
use crate::format::batch::{self, BatchHeader, TimestampType};
use crate::format::record;

/// One batch of an append request after validation.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CheckedBatch {
    pub(crate) at: usize,
    pub(crate) header: BatchHeader,
    /// The max record timestamp computed from the records (CreateTime), or the header's.
    pub(crate) max_timestamp: i64,
}

/// Framing, magic, CRC and size checks shared by leader and follower appends.
fn split(records: &[u8], config: &LogConfig, strict_count: bool, check_size: bool) -> Result<Vec<CheckedBatch>> {
    if records.is_empty() {
        return Err(Error::InvalidBatch {
            at: 0,
            source: crate::format::FormatError::Truncated { needed: batch::BATCH_HEADER_SIZE as u64, available: 0 },
        });
    }
    // Size limits are checked on the framing first, so a huge batch is refused as too large
    // rather than as truncated, and before its CRC is computed.
    let mut pos = 0usize;
    while pos + batch::HEADER_SIZE_UP_TO_MAGIC <= records.len() {
        let Ok(frame) = batch::EntryFrame::parse(&records[pos..]) else { break };
        if check_size && frame.size > config.max_message_bytes as i64 && frame.magic == batch::MAGIC_V2 {
            return Err(Error::RecordTooLarge {
                at: pos,
                size: frame.size as u64,
                limit: config.max_message_bytes as u64,
                limit_name: "max.message.bytes",
            });
        }
        if frame.size < batch::BATCH_HEADER_SIZE as i64 {
            break;
        }
        pos += frame.size as usize;
    }
    let parsed =
        batch::split_batches(records, strict_count).map_err(|(at, source)| Error::InvalidBatch { at, source })?;
    Ok(parsed
        .into_iter()
        .map(|(at, header)| CheckedBatch { at, header, max_timestamp: header.max_timestamp })
        .collect())
}

/// Leader checks: every follower check, base offset 0 and at least one record in each batch as
/// sent, every record decodable with sequential offset deltas, and, for CreateTime, every record
/// timestamp within `message.timestamp.before/after.max.ms` of `now_ms`; for a client's batches
/// (`client`; not the transaction coordinator's markers) also Kafka's client rules: no control
/// batches, a sequence when there is a producer id.
pub(crate) fn validate_leader(
    records: &[u8],
    config: &LogConfig,
    now_ms: i64,
    client: bool,
) -> Result<Vec<CheckedBatch>> {
    let mut batches = split(records, config, true, true)?;
    let mut scratch = Vec::new();
    for cb in &mut batches {
        let h = cb.header;
        let at = cb.at;
        let invalid = |detail: String| Error::InvalidRecord { at, detail };
        if h.base_offset != 0 {
            return Err(invalid(format!("the baseOffset of a produced batch must be 0, it is {}", h.base_offset)));
        }
        if h.is_control() && client {
            return Err(invalid("clients may not write control batches".into()));
        }
        if h.has_producer_id() && h.base_sequence < 0 && client {
            return Err(invalid(format!("producer id {} with invalid sequence {}", h.producer_id, h.base_sequence)));
        }
        if h.records_count == 0 {
            return Err(invalid("a produced batch must hold at least one record".into()));
        }
        let bytes = &records[at..at + h.size_in_bytes() as usize];
        let iter = record::batch_records(bytes, &mut scratch).map_err(|source| Error::InvalidBatch { at, source })?;
        let mut max_ts = batch::NO_TIMESTAMP;
        for (i, r) in iter.enumerate() {
            let r = r.map_err(|source| Error::InvalidBatch { at, source })?;
            if r.offset_delta as i64 != i as i64 {
                return Err(invalid(format!("record {i} has offset delta {}, expected {i}", r.offset_delta)));
            }
            let ts = h.base_timestamp.saturating_add(r.timestamp_delta);
            if config.message_timestamp_type == TimestampType::CreateTime && ts != batch::NO_TIMESTAMP {
                if now_ms.saturating_sub(ts) > config.message_timestamp_before_max_ms {
                    return Err(Error::InvalidTimestamp {
                        at,
                        timestamp: ts,
                        now_ms,
                        detail: "older than message.timestamp.before.max.ms allows",
                    });
                }
                if ts.saturating_sub(now_ms) > config.message_timestamp_after_max_ms {
                    return Err(Error::InvalidTimestamp {
                        at,
                        timestamp: ts,
                        now_ms,
                        detail: "newer than message.timestamp.after.max.ms allows",
                    });
                }
            } else if h.timestamp_type() == TimestampType::LogAppendTime {
                // Kafka's validateTimestamp: only the broker sets LogAppendTime.
                return Err(Error::InvalidTimestamp {
                    at,
                    timestamp: ts,
                    now_ms,
                    detail: "the producer must not set the timestamp type to LogAppendTime",
                });
            }
            max_ts = max_ts.max(ts);
        }
        cb.max_timestamp = max_ts;
    }
    Ok(batches)
}

/// Follower checks: framing, magic 2, CRC, size; offsets must continue the log from
/// `log_end_offset` and increase strictly from batch to batch.
pub(crate) fn validate_follower(records: &[u8], config: &LogConfig, log_end_offset: i64) -> Result<Vec<CheckedBatch>> {
    // Like Kafka's appendAsFollower (ignoreRecordSize): the leader already accepted the batch
    // size; only segment.bytes limits a follower.
    let batches = split(records, config, false, false)?;
    let mut expected = log_end_offset;
    for cb in &batches {
        if cb.header.base_offset < expected {
            return Err(Error::NonMonotonicOffset {
                at: cb.at,
                first_offset: cb.header.base_offset,
                expected_at_least: expected,
            });
        }
        expected = cb.header.next_offset();
    }
    Ok(batches)
}
