//! Pure bytes <-> values for everything Kafka puts on disk: record batches (v2), records,
//! compression codecs, index entries, segment file names and checkpoint files.
//!
//! This module does no I/O and trusts no length: every length read from bytes is checked against
//! what is left before it is used, and no allocation is sized by an unchecked field. Kafka's
//! formats are big-endian throughout. Nothing here panics on any input, which is what the fuzz
//! targets check.

pub mod batch;
pub mod builder;
pub mod checkpoint;
pub mod compression;
pub mod filename;
pub mod index_entry;
pub mod record;

pub use batch::{Attributes, BatchHeader};
pub use compression::Compression;

use thiserror::Error;

/// Why a sequence of bytes is not a valid Kafka structure. Positions are relative to the start of
/// the structure being decoded; callers add file names and file positions.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum FormatError {
    #[error("truncated: needed {needed} bytes, {available} available")]
    Truncated { needed: u64, available: u64 },
    #[error("batch size {size} is smaller than the minimum {min}")]
    BatchTooSmall { size: i64, min: i64 },
    #[error("batch size {size} is larger than the limit {limit}")]
    BatchTooLarge { size: i64, limit: i64 },
    #[error("unsupported record batch magic {magic} (only v2 is supported; v0/v1 were removed in Kafka 4.0)")]
    UnsupportedMagic { magic: i8 },
    #[error("CRC-32C mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    CrcMismatch { stored: u32, computed: u32 },
    #[error("invalid offset range: lastOffsetDelta {last_offset_delta}")]
    InvalidOffsetRange { last_offset_delta: i32 },
    #[error("record count {count} does not match the offset range ({expected} offsets)")]
    RecordCountMismatch { count: i32, expected: i64 },
    #[error("unknown compression codec {codec}")]
    UnknownCompression { codec: u8 },
    #[error("{codec} decompression failed: {detail}")]
    Decompression { codec: &'static str, detail: String },
    #[error("{codec} compression failed: {detail}")]
    Compression { codec: &'static str, detail: String },
    #[error("malformed varint at byte {at}")]
    BadVarint { at: u64 },
    #[error("invalid record at byte {at}: {detail}")]
    InvalidRecord { at: u64, detail: String },
    #[error("{remaining} bytes remain after the declared {count} records")]
    TrailingBytes { count: i32, remaining: u64 },
    #[error("invalid index file: {detail}")]
    InvalidIndex { detail: String },
    #[error("invalid file name {name:?}")]
    InvalidFileName { name: String },
    #[error("invalid checkpoint file at line {line}: {detail}")]
    InvalidCheckpoint { line: u32, detail: String },
}

/// Kafka's formats are big-endian throughout (Java's `ByteBuffer` default): these read a field at
/// a known-valid position of `b`. They are for decoders that have already checked the length, as
/// every decoder here does before it reads a field.
///
/// # Panics
/// When `b` holds fewer than `at + 8` bytes (a caller that did not check the length first).
#[inline]
pub fn be_i64(b: &[u8], at: usize) -> i64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    i64::from_be_bytes(a)
}
/// The big-endian `i32` at `at` (see [`be_i64`]).
///
/// # Panics
/// When `b` holds fewer than `at + 4` bytes.
#[inline]
pub fn be_i32(b: &[u8], at: usize) -> i32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    i32::from_be_bytes(a)
}
/// The big-endian `u32` at `at` (see [`be_i64`]): Kafka's CRC fields.
///
/// # Panics
/// When `b` holds fewer than `at + 4` bytes.
#[inline]
pub fn be_u32(b: &[u8], at: usize) -> u32 {
    be_i32(b, at) as u32
}
/// The big-endian `i16` at `at` (see [`be_i64`]).
///
/// # Panics
/// When `b` holds fewer than `at + 2` bytes.
#[inline]
pub fn be_i16(b: &[u8], at: usize) -> i16 {
    i16::from_be_bytes([b[at], b[at + 1]])
}
