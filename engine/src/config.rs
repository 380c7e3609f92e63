//! Per-log settings, named and defaulted as Kafka names and defaults them, so that a Kafka operator
//! recognises every knob. Units are last in every name.

use crate::error::{Error, Result};
pub use crate::format::batch::TimestampType;

/// Kafka's `LogConfig`, restricted to what a segment store needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogConfig {
    /// `segment.bytes`: roll when the active segment cannot take the next append. Default 1 GiB.
    pub segment_bytes: u32,
    /// `segment.ms`: roll when the first batch is this much older than the incoming one. 7 days.
    pub segment_ms: i64,
    /// `segment.jitter.ms`: a random amount (per segment) subtracted from `segment.ms`. Default 0.
    pub segment_jitter_ms: i64,
    /// `segment.index.bytes`: the size both index files are preallocated to while active; also the
    /// cap on entries (roll when full). Default 10 MiB.
    pub segment_index_bytes: u32,
    /// `index.interval.bytes`: an index entry is added at the next append once more than this many
    /// bytes went by since the last entry. Default 4096.
    pub index_interval_bytes: u32,
    /// `max.message.bytes`: the largest batch accepted (size including the 12-byte framing).
    /// Default 1048588 (1 MiB + 12).
    pub max_message_bytes: u32,
    /// `message.timestamp.type`.
    pub message_timestamp_type: TimestampType,
    /// `message.timestamp.before.max.ms`: refuse CreateTime records older than now minus this.
    /// Default `i64::MAX` (no limit).
    pub message_timestamp_before_max_ms: i64,
    /// `message.timestamp.after.max.ms`: refuse CreateTime records newer than now plus this.
    /// Default 3,600,000 (one hour, Kafka 4.0's default).
    pub message_timestamp_after_max_ms: i64,
    /// `retention.ms`: delete sealed segments whose largest timestamp is older. 7 days; -1 = never.
    pub retention_ms: i64,
    /// `retention.bytes`: delete the oldest sealed segments while the log is larger. -1 = no limit.
    pub retention_bytes: i64,
    /// `file.delete.delay.ms`: how long a segment stays renamed `.deleted` before unlink. 60 s.
    pub file_delete_delay_ms: i64,
    /// `flush.messages`: fsync after this many messages. Default `i64::MAX` (leave it to the OS).
    pub flush_messages: i64,
    /// `flush.ms`: fsync at least this often. Default `i64::MAX`.
    pub flush_ms: i64,
    /// `preallocate`: reserve `segment.bytes` on disk when a segment is created. Default false.
    pub preallocate: bool,
    /// `producer.id.expiration.ms` (a broker setting in Kafka): a producer whose last batch is
    /// this much older than the clock is forgotten (at each retention pass, and not loaded at
    /// open), unless its transaction is open. Default 86,400,000 (one day).
    pub producer_id_expiration_ms: i64,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            segment_bytes: 1024 * 1024 * 1024,
            segment_ms: 7 * 24 * 60 * 60 * 1000,
            segment_jitter_ms: 0,
            segment_index_bytes: 10 * 1024 * 1024,
            index_interval_bytes: 4096,
            max_message_bytes: 1024 * 1024 + 12,
            message_timestamp_type: TimestampType::CreateTime,
            message_timestamp_before_max_ms: i64::MAX,
            message_timestamp_after_max_ms: 60 * 60 * 1000,
            retention_ms: 7 * 24 * 60 * 60 * 1000,
            retention_bytes: -1,
            file_delete_delay_ms: 60_000,
            flush_messages: i64::MAX,
            producer_id_expiration_ms: 24 * 60 * 60 * 1000,
            flush_ms: i64::MAX,
            preallocate: false,
        }
    }
}

/// The smallest `segment.bytes` Kafka accepts (`LegacyRecord.RECORD_OVERHEAD_V0`).
pub(crate) const MIN_SEGMENT_BYTES: u32 = 14;

impl LogConfig {
    /// Checks the ranges Kafka's `LogConfig` enforces.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::InvalidConfig(m));
        if self.segment_bytes < MIN_SEGMENT_BYTES || self.segment_bytes > i32::MAX as u32 {
            return bad(format!("segment.bytes {} must be in [14, {}]", self.segment_bytes, i32::MAX));
        }
        if self.segment_ms < 1 {
            return bad(format!("segment.ms {} must be >= 1", self.segment_ms));
        }
        if self.segment_jitter_ms < 0 {
            return bad(format!("segment.jitter.ms {} must be >= 0", self.segment_jitter_ms));
        }
        if self.segment_index_bytes < 8 || self.segment_index_bytes > i32::MAX as u32 {
            return bad(format!("segment.index.bytes {} must be in [8, {}]", self.segment_index_bytes, i32::MAX));
        }
        if self.index_interval_bytes > i32::MAX as u32 {
            return bad(format!("index.interval.bytes {} must be <= {}", self.index_interval_bytes, i32::MAX));
        }
        if self.max_message_bytes > i32::MAX as u32 {
            return bad(format!("max.message.bytes {} must be <= {}", self.max_message_bytes, i32::MAX));
        }
        if self.message_timestamp_before_max_ms < 0 || self.message_timestamp_after_max_ms < 0 {
            return bad("message.timestamp.before/after.max.ms must be >= 0".into());
        }
        if self.producer_id_expiration_ms < 0 {
            return bad(format!("producer.id.expiration.ms {} must be >= 0", self.producer_id_expiration_ms));
        }
        if self.file_delete_delay_ms < 0 {
            return bad(format!("file.delete.delay.ms {} must be >= 0", self.file_delete_delay_ms));
        }
        if self.flush_messages < 1 || self.flush_ms < 0 {
            return bad("flush.messages must be >= 1 and flush.ms >= 0".into());
        }
        Ok(())
    }

    /// Kafka's `randomSegmentJitter`: 0 without jitter, else a value in `[0, min(jitter, segment.ms))`.
    pub(crate) fn random_segment_jitter_ms(&self, random: u64) -> i64 {
        if self.segment_jitter_ms == 0 {
            0
        } else {
            (random % self.segment_jitter_ms.min(self.segment_ms) as u64) as i64
        }
    }
}

/// A source of wall-clock milliseconds, injectable so that tests can drive time-based rolling and
/// LogAppendTime deterministically.
pub trait Clock: Send + Sync + std::fmt::Debug {
    fn now_ms(&self) -> i64;
}

/// The system clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
    }
}

/// A clock that only moves when told to.
#[derive(Debug, Default)]
pub struct ManualClock(std::sync::atomic::AtomicI64);

impl ManualClock {
    pub fn new(now_ms: i64) -> Self {
        ManualClock(std::sync::atomic::AtomicI64::new(now_ms))
    }
    pub fn set(&self, now_ms: i64) {
        self.0.store(now_ms, std::sync::atomic::Ordering::SeqCst)
    }
    pub fn advance(&self, ms: i64) {
        self.0.fetch_add(ms, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.0.load(std::sync::atomic::Ordering::SeqCst)
    }
}
