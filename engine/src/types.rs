//! Newtypes for values that are easy to swap by mistake: a log offset, an offset relative to a
//! segment's base, a byte position inside a segment file, and a timestamp in milliseconds.

use std::fmt;

/// An absolute log offset (Kafka's `long` offset).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Offset(pub i64);

/// An offset relative to a segment's base offset, as stored in index files (`0..=i32::MAX`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct RelOffset(pub u32);

/// A byte position inside a segment's `.log` file (segments are at most `i32::MAX` bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct FilePos(pub u32);

/// Milliseconds since the Unix epoch; Kafka's `-1` means "no timestamp".
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct TimestampMs(pub i64);

impl Offset {
    pub const fn get(self) -> i64 {
        self.0
    }
}
impl FilePos {
    pub const fn get(self) -> u32 {
        self.0
    }
    pub const fn as_u64(self) -> u64 {
        self.0 as u64
    }
}
impl RelOffset {
    pub const fn get(self) -> u32 {
        self.0
    }
}
impl TimestampMs {
    /// Kafka's `RecordBatch.NO_TIMESTAMP`.
    pub const NONE: TimestampMs = TimestampMs(-1);
    pub const fn get(self) -> i64 {
        self.0
    }
}

impl From<i64> for Offset {
    fn from(v: i64) -> Self {
        Offset(v)
    }
}

macro_rules! display {
    ($($t:ty),*) => {$(
        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(&self.0, f)
            }
        }
    )*};
}
display!(Offset, RelOffset, FilePos, TimestampMs);
