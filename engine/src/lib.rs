//! seglog: a storage engine for Kafka-style partitioned logs that reads and writes Kafka's own
//! on-disk format, byte for byte.
//!
//! Layers, dependencies pointing down only:
//! - [`engine`]: shard threads, each owning its partitions' logs;
//! - [`log`]: a partition directory (ordered segments, offsets, roll, fetch, time lookup);
//! - [`segment`]: one segment (`.log` + `.index` + `.timeindex`), active or sealed;
//! - [`index`]: Kafka's sparse offset and time indexes and their two-zone search;
//! - [`io`]: the only module allowed `unsafe`; every file operation goes through it;
//! - [`format`](mod@format): pure bytes <-> values (batches, records, index entries, names, checkpoints).
//!
//! # Public API
//!
//! The embedding API, what a broker or an application built on seglog uses:
//! - through the engine: [`Engine`], its settings ([`EngineConfig`], [`Durability`],
//!   [`SyncMethod`], [`ZeroFill`], [`Backpressure`]), [`TopicPartition`], [`Completion`],
//!   [`engine::ShardStats`] and [`LatencyHistogram`];
//! - one partition without the engine: [`log::Log`] with [`log::LogOptions`],
//!   [`log::Recovery`], [`log::LoadReport`], [`log::AppendInfo`], [`log::FetchData`],
//!   [`log::ListOffset`] and the other types of [`log`];
//! - [`LogConfig`] (Kafka's topic settings) and the [`config::Clock`] a log reads time from;
//! - [`Error`] and [`Result`];
//! - [`format`](mod@format): Kafka's byte layouts and rules as pure functions (no I/O);
//! - bringing your own storage: [`io::Storage`], [`io::IoFile`], [`io::OpenMode`],
//!   [`io::IoOp`], [`io::AsyncIo`], [`io::AsyncOutcome`], [`IoMode`],
//!   [`io::storage_for_mode`], and `io::sim::SimStorage` (cargo feature `sim`), a simulated
//!   crash disk for testing code built on seglog.
//!
//! Public for the `seglog` command, the benchmarks, the fuzz targets and the tests, not a stable
//! embedding API: [`segment`], [`index`] and the rest of [`io`] (index arena, write-buffer pool,
//! locks, probes, counters). In these modules an item is public only where one of those uses
//! it, or where a public signature needs it ([`log::Log::segments`] hands out
//! [`segment::Segment`]s).
//!
//! Everything else is crate-private (`pub(crate)`); `unreachable_pub` and `unnameable_types`
//! keep `pub` meaning reachable from outside. See `docs/architecture.md`, "Public API".
#![deny(unsafe_code)]
#![warn(missing_debug_implementations)]
#![warn(unreachable_pub, unnameable_types)]

mod completion;
pub mod config;
pub mod engine;
mod error;
pub mod format;
mod histogram;
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
