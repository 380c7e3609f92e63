//! seglog: a storage engine for Kafka-style partitioned logs that reads and writes Kafka's own
//! on-disk format, byte for byte.
//!
//! Layers, dependencies pointing down only:
//! - [`log`]: a partition directory (ordered segments, offsets, roll, fetch, time lookup);
//! - [`segment`]: one segment (`.log` + `.index` + `.timeindex`), active or sealed;
//! - [`index`]: Kafka's sparse offset and time indexes and their two-zone search;
//! - [`io`]: the only module allowed `unsafe`; every file operation goes through it;
//! - [`format`](mod@format): pure bytes <-> values (batches, records, index entries, names, checkpoints).
#![deny(unsafe_code)]
#![warn(missing_debug_implementations)]

pub mod completion;
pub mod config;
pub mod engine;
pub mod error;
pub mod format;
pub mod histogram;
pub mod index;
pub mod io;
pub mod log;
pub mod segment;

pub use completion::Completion;
pub use config::{LogConfig, TimestampType};
pub use engine::{Backpressure, Durability, Engine, EngineConfig, SyncMethod, TopicPartition, ZeroFill};
pub use error::{Error, Result};
pub use histogram::LatencyHistogram;
pub use io::IoMode;
