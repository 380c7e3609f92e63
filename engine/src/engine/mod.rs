//! The engine: one shard thread per core, each pinned, each owning one io_uring (through the io
//! layer's per-thread ring), its partitions' logs and their tail buffers. Calls are routed by a
//! stable hash of (topic, partition) to the owning shard through a bounded queue; each returns a
//! [`Completion`] to wait on or await.
//!
//! A shard's loop turn drains every queued request, runs them against its logs (appends go to the
//! active segments' in-memory tails), then hands all partitions' new bytes to the kernel in one
//! submission (with linked fdatasyncs when the durability policy says so), and only then completes
//! the appends. With nothing queued it sleeps on an eventfd doorbell (in io_uring_enter in the
//! io_uring modes).

mod shard;
mod topology;

pub use shard::ShardStats;
pub use topology::{allowed_cores, Topology};

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_channel::{bounded, Sender, TrySendError};

use crate::completion::{pair, Completion};
use crate::config::LogConfig;
use crate::error::{Error, Result};
use crate::format::filename;
use crate::io::eventfd::EventFd;
use crate::io::{IoMode, Storage};
use crate::log::{AppendInfo, FetchData, ListOffset};
use crate::segment::TimestampAndOffset;

/// A partition's name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicPartition {
    pub topic: String,
    pub partition: i32,
}

impl TopicPartition {
    pub fn new(topic: impl Into<String>, partition: i32) -> Self {
        TopicPartition { topic: topic.into(), partition }
    }
    /// The directory name, `<topic>-<partition>`.
    pub fn dir_name(&self) -> String {
        filename::partition_dir_name(&self.topic, self.partition)
    }
    /// FNV-1a over the topic bytes and the partition: stable across runs and machines.
    pub fn stable_hash(&self) -> u64 {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in self.topic.bytes().chain(self.partition.to_be_bytes()) {
            h ^= b as u64;
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        h
    }
}

impl std::fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

/// When an append is acknowledged.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Durability {
    /// Kafka's default: acknowledged once the bytes are handed to the kernel; fsync only on roll,
    /// explicit flush and close (and per `flush.messages` / `flush.ms`).
    #[default]
    None,
    /// Acknowledged after an fdatasync covering it; one fdatasync per partition per loop turn
    /// covers every append of that turn (group commit).
    EveryBatch,
}

/// What a full queue does to the caller.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Backpressure {
    /// Wait for room (the default): nothing is dropped, the caller slows down.
    #[default]
    Block,
    /// Return [`Error::QueueFull`] at once.
    Error,
}

/// Engine settings.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// The log directory: partition directories `<topic>-<partition>` live in it.
    pub data_dir: PathBuf,
    /// The I/O mode asked for; [`Engine::io_mode`] says what runs.
    pub io_mode: IoMode,
    /// Number of shards; default: one per core the process may run on.
    pub shards: Option<usize>,
    /// Cores to pin shards to (shard i on cores[i % len]); default: the allowed cores.
    pub cores: Option<Vec<usize>>,
    /// Pin each shard thread to its core.
    pub pin_threads: bool,
    /// Capacity of each shard's request queue.
    pub queue_capacity: usize,
    pub backpressure: Backpressure,
    pub durability: Durability,
    /// The configuration of partitions opened without one.
    pub log_config: LogConfig,
    /// Bytes of each active segment's tail kept in memory for tail fetches.
    pub tail_cache_bytes: u64,
    /// How long an idle shard polls its queue before sleeping on its doorbell (microseconds).
    /// Polling trades CPU for latency: a request that arrives within it needs no wake-up.
    /// Default 50; 0 sleeps at once.
    pub idle_spin_us: u64,
    /// Behave as if io_uring were refused (as under a container's seccomp profile): the engine
    /// falls back to sync mode and says why. For tests and for comparing modes.
    pub simulate_uring_refusal: bool,
}

impl EngineConfig {
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        EngineConfig {
            data_dir: data_dir.into(),
            io_mode: IoMode::Direct,
            shards: None,
            cores: None,
            pin_threads: true,
            queue_capacity: 4096,
            backpressure: Backpressure::Block,
            durability: Durability::None,
            log_config: LogConfig::default(),
            tail_cache_bytes: 1024 * 1024,
            simulate_uring_refusal: false,
            idle_spin_us: 50,
        }
    }
}

pub(crate) enum Request {
    Open {
        tp: TopicPartition,
        config: Option<LogConfig>,
        done: crate::completion::Completer<()>,
    },
    Append {
        tp: TopicPartition,
        records: Vec<u8>,
        leader_epoch: Option<i32>,
        done: crate::completion::Completer<AppendInfo>,
    },
    Fetch {
        tp: TopicPartition,
        offset: i64,
        max_bytes: u32,
        upper_bound: Option<i64>,
        min_one: bool,
        done: crate::completion::Completer<FetchData>,
    },
    ListOffset {
        tp: TopicPartition,
        target: ListOffset,
        done: crate::completion::Completer<Option<TimestampAndOffset>>,
    },
    Flush {
        done: crate::completion::Completer<()>,
    },
    Partitions {
        done: crate::completion::Completer<Vec<(TopicPartition, i64, i64)>>,
    },
    Stats {
        done: crate::completion::Completer<ShardStats>,
    },
    Shutdown {
        done: crate::completion::Completer<()>,
    },
}

/// The producer side of a shard: its queue and its doorbell.
#[derive(Debug)]
pub(crate) struct Doorbell {
    pub(crate) fd: EventFd,
    pub(crate) sleeping: AtomicBool,
}

impl Doorbell {
    fn ring_if_sleeping(&self) {
        if self.sleeping.swap(false, Ordering::SeqCst) {
            self.fd.notify();
        }
    }
}

#[derive(Debug)]
struct ShardHandle {
    tx: Sender<Request>,
    bell: Arc<Doorbell>,
    thread: Option<JoinHandle<()>>,
}

/// A running engine. Dropping it shuts the shards down cleanly (as [`Engine::shutdown`] does,
/// ignoring errors).
#[derive(Debug)]
pub struct Engine {
    shards: Vec<ShardHandle>,
    mode: IoMode,
    fallback: Option<String>,
    config: EngineConfig,
    storage: Arc<dyn Storage>,
}

impl Engine {
    /// Starts the shards and opens every partition directory found in the data directory.
    pub fn open(config: EngineConfig) -> Result<Engine> {
        config.log_config.validate()?;
        let selected = crate::io::select::open_storage_with(config.io_mode, config.simulate_uring_refusal);
        let storage = selected.storage;
        if !storage.exists(&config.data_dir) {
            storage.create_dir_all(&config.data_dir)?;
        }
        let cores = match &config.cores {
            Some(c) if !c.is_empty() => c.clone(),
            _ => allowed_cores(),
        };
        let n = config.shards.unwrap_or(cores.len()).max(1);
        let mut shards = Vec::with_capacity(n);
        for id in 0..n {
            let (tx, rx) = bounded(config.queue_capacity.max(1));
            let bell = Arc::new(Doorbell { fd: EventFd::new()?, sleeping: AtomicBool::new(false) });
            let core = if config.pin_threads { cores.get(id % cores.len().max(1)).copied() } else { None };
            let shard = shard::Shard::new(id, core, rx, bell.clone(), storage.clone(), &config);
            let thread = std::thread::Builder::new()
                .name(format!("seglog-shard-{id}"))
                .spawn(move || shard.run())
                .map_err(|e| Error::io("spawn", format!("shard {id}"), e))?;
            shards.push(ShardHandle { tx, bell, thread: Some(thread) });
        }
        let engine = Engine { shards, mode: selected.mode, fallback: selected.fallback, config, storage };
        // Open the partitions already on disk, in parallel across shards.
        let mut pending = Vec::new();
        let mut names = engine.storage.list_dir(&engine.config.data_dir)?;
        names.sort();
        for name in names {
            let Some((topic, partition)) = filename::parse_partition_dir(&name) else { continue };
            if !engine.storage.is_dir(&engine.config.data_dir.join(&name)) {
                continue;
            }
            pending.push(engine.open_partition(&TopicPartition::new(topic, partition), None));
        }
        for p in pending {
            p.wait()?;
        }
        Ok(engine)
    }

    /// The I/O mode the engine really runs in.
    pub fn io_mode(&self) -> IoMode {
        self.mode
    }
    /// Why the engine runs in another mode than asked, if it does.
    pub fn io_fallback_reason(&self) -> Option<&str> {
        self.fallback.as_deref()
    }
    pub fn shard_count(&self) -> usize {
        self.shards.len()
    }
    pub fn data_dir(&self) -> &Path {
        &self.config.data_dir
    }
    /// The shard that owns `tp`.
    pub fn shard_of(&self, tp: &TopicPartition) -> usize {
        (tp.stable_hash() % self.shards.len() as u64) as usize
    }

    fn send(&self, shard: usize, req: Request) -> Result<()> {
        let h = &self.shards[shard];
        match self.config.backpressure {
            Backpressure::Block => h.tx.send(req).map_err(|_| Error::EngineStopped)?,
            Backpressure::Error => match h.tx.try_send(req) {
                Ok(()) => {}
                Err(TrySendError::Full(_)) => {
                    return Err(Error::QueueFull { shard, capacity: self.config.queue_capacity })
                }
                Err(TrySendError::Disconnected(_)) => return Err(Error::EngineStopped),
            },
        }
        h.bell.ring_if_sleeping();
        Ok(())
    }

    fn call<T>(&self, shard: usize, make: impl FnOnce(crate::completion::Completer<T>) -> Request) -> Completion<T> {
        let (c, r) = pair();
        match self.send(shard, make(c)) {
            Ok(()) => r,
            Err(e) => Completion::ready(Err(e)),
        }
    }

    /// Opens (creating if needed) a partition with `config` (default: the engine's).
    pub fn open_partition(&self, tp: &TopicPartition, config: Option<LogConfig>) -> Completion<()> {
        if let Err(detail) = filename::validate_topic_name(&tp.topic) {
            return Completion::ready(Err(Error::InvalidTopicName { name: tp.topic.clone(), detail }));
        }
        if tp.partition < 0 {
            return Completion::ready(Err(Error::InvalidConfig(format!("negative partition {}", tp.partition))));
        }
        let tp = tp.clone();
        self.call(self.shard_of(&tp), |done| Request::Open { tp, config, done })
    }

    /// Leader append: offsets assigned by the partition. `records` holds whole v2 batches.
    pub fn append(&self, tp: &TopicPartition, records: Vec<u8>, leader_epoch: i32) -> Completion<AppendInfo> {
        let tp = tp.clone();
        self.call(self.shard_of(&tp), |done| Request::Append { tp, records, leader_epoch: Some(leader_epoch), done })
    }

    /// Follower append: batches keep their offsets, which must continue the log.
    pub fn append_as_follower(&self, tp: &TopicPartition, records: Vec<u8>) -> Completion<AppendInfo> {
        let tp = tp.clone();
        self.call(self.shard_of(&tp), |done| Request::Append { tp, records, leader_epoch: None, done })
    }

    /// Reads whole batches from `offset` (see [`crate::log::Log::read`]).
    pub fn fetch(
        &self,
        tp: &TopicPartition,
        offset: i64,
        max_bytes: u32,
        upper_bound: Option<i64>,
    ) -> Completion<FetchData> {
        let tp = tp.clone();
        self.call(self.shard_of(&tp), |done| Request::Fetch { tp, offset, max_bytes, upper_bound, min_one: true, done })
    }

    /// Offset lookup by timestamp or special value (see [`crate::log::Log::offset_for_time`]).
    pub fn list_offset(&self, tp: &TopicPartition, target: ListOffset) -> Completion<Option<TimestampAndOffset>> {
        let tp = tp.clone();
        self.call(self.shard_of(&tp), |done| Request::ListOffset { tp, target, done })
    }

    /// Makes every acknowledged append of every partition durable.
    pub fn flush_all(&self) -> Result<()> {
        let pending: Vec<_> = (0..self.shards.len()).map(|s| self.call(s, |done| Request::Flush { done })).collect();
        pending.into_iter().try_for_each(|p| p.wait())
    }

    /// Every open partition with its log start and log end offsets.
    pub fn partitions(&self) -> Result<Vec<(TopicPartition, i64, i64)>> {
        let pending: Vec<_> =
            (0..self.shards.len()).map(|s| self.call(s, |done| Request::Partitions { done })).collect();
        let mut out = Vec::new();
        for p in pending {
            out.extend(p.wait()?);
        }
        out.sort();
        Ok(out)
    }

    /// Per-shard counters.
    pub fn stats(&self) -> Result<Vec<ShardStats>> {
        let pending: Vec<_> = (0..self.shards.len()).map(|s| self.call(s, |done| Request::Stats { done })).collect();
        pending.into_iter().map(|p| p.wait()).collect()
    }

    /// Closes every partition cleanly (final index entries, trims, fsyncs) and stops the shards.
    pub fn shutdown(mut self) -> Result<()> {
        self.stop()
    }

    fn stop(&mut self) -> Result<()> {
        let mut first_err = None;
        let pending: Vec<_> = (0..self.shards.len()).map(|s| self.call(s, |done| Request::Shutdown { done })).collect();
        for p in pending {
            if let Err(e) = p.wait() {
                if !matches!(e, Error::EngineStopped) {
                    first_err.get_or_insert(e);
                }
            }
        }
        for h in &mut self.shards {
            if let Some(t) = h.thread.take() {
                let _ = t.join();
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        if self.shards.iter().any(|h| h.thread.is_some()) {
            let _ = self.stop();
        }
    }
}
