//! The engine: one shard thread per core, each pinned, each owning one io_uring (through the io
//! layer's per-thread ring), its partitions' logs and their tail buffers. Calls are routed by a
//! stable hash of (topic, partition) to the owning shard through a bounded queue; each returns a
//! [`Completion`] to wait on or await.
//!
//! A shard's loop turn drains every queued request, runs them against its logs (appends go to the
//! active segments' in-memory tails), then hands the new bytes of every partition without a write
//! in flight to the kernel in one submission (with linked fdatasyncs when the durability policy
//! says so) and goes on without waiting; a partition's appends are completed when its write
//! completes. With nothing queued it sleeps in one io_uring_enter that a request (a POLL_ADD on
//! its eventfd doorbell) or a write completion ends (poll(2) on the doorbell in sync mode).

mod busy_refills;
mod checkpoints;
mod config;
mod epoch_writer;
mod flush;
mod request;
mod shard;
mod topology;

pub use busy_refills::BusyRefillChoice;
pub use config::{Backpressure, Durability, EngineConfig, SyncMethod, ZeroFill};
pub use shard::ShardStats;
pub use topology::{allowed_cores, Topology};

pub(crate) use request::{Doorbell, Request};

use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_channel::bounded;

use checkpoints::{write_checkpoints, Startup};
use request::{AppendFrom, FetchUpper, Inner, ShardLink};

use crate::completion::{pair, Completion};
use crate::config::LogConfig;
use crate::error::{Error, Result};
use crate::format::filename;
use crate::io::eventfd::EventFd;
use crate::io::{IoMode, Storage};
use crate::log::{AppendInfo, FetchData, FetchIsolation, ListOffset};
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
    pub(crate) fn stable_hash(&self) -> u64 {
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

/// The housekeeping thread's stop flag.
type StopSignal = Arc<(std::sync::Mutex<bool>, std::sync::Condvar)>;

/// A running engine. Dropping it shuts the shards down cleanly (as [`Engine::shutdown`] does,
/// ignoring errors).
#[derive(Debug)]
pub struct Engine {
    inner: Arc<Inner>,
    threads: Vec<JoinHandle<()>>,
    housekeeper: Option<(JoinHandle<()>, StopSignal)>,
    mode: IoMode,
    fallback: Option<String>,
    config: EngineConfig,
    storage: Arc<dyn Storage>,
    startup: Startup,
    load_reports: Vec<(TopicPartition, crate::log::LoadReport)>,
    /// Partitions deleted in this run ([`Engine::delete_partition`]).
    forgotten: std::sync::Mutex<std::collections::BTreeSet<(String, i32)>>,
    resources: Vec<crate::segment::SegmentResources>,
    /// Kafka's `.lock` of the data directory, held from before anything in it is read until the
    /// engine is dropped (each open log holds a clone too).
    _dir_lock: Arc<crate::io::lock::LockGuard>,
}

impl Engine {
    /// Starts the shards and opens every partition directory found in the data directory. After
    /// a clean shutdown (`.kafka_cleanshutdown` present) indexes are only sanity-checked; after a
    /// crash every segment from each partition's recovery point (from
    /// `recovery-point-offset-checkpoint`) is revalidated. The marker is removed once every
    /// partition is open, so a crash during startup is not mistaken for a clean shutdown.
    pub fn open(config: EngineConfig) -> Result<Engine> {
        config.validate()?;
        let selected = crate::io::select::open_storage_with_permissions(
            config.io_mode,
            config.simulate_uring_refusal,
            crate::io::select::Permissions { file_mode: config.file_mode, dir_mode: config.dir_mode },
        );
        Engine::start(config, selected)
    }

    /// [`Engine::open`] on a storage of the caller's (the engine's own tests: the simulated
    /// disk).
    #[cfg(test)]
    pub(crate) fn open_on(config: EngineConfig, storage: Arc<dyn Storage>) -> Result<Engine> {
        config.validate()?;
        let mode = storage.mode();
        Engine::start(config, crate::io::select::OpenedStorage { storage, mode, fallback: None })
    }

    /// The rest of [`Engine::open`], on the storage selected.
    fn start(config: EngineConfig, selected: crate::io::select::OpenedStorage) -> Result<Engine> {
        let storage = selected.storage;
        if !storage.exists(&config.data_dir) {
            storage.create_dir_all(&config.data_dir)?;
            // As Kafka's LogManager does for a log directory it creates: its entry in its parent
            // made durable, or a power cut could take every partition with it.
            if let Some(parent) = config.data_dir.parent() {
                let parent = if parent.as_os_str().is_empty() { std::path::Path::new(".") } else { parent };
                storage.sync_dir(parent)?;
            }
        }
        // One owner per data directory, as Kafka: a second engine, a writing command or a broker
        // is refused here, before anything in the directory is read or changed.
        let dir_lock = storage
            .lock(&config.data_dir, crate::io::lock::LockKind::LogDir)?
            .map(Arc::new)
            .expect("an exclusive lock always yields a guard");
        let startup = Startup::read(&*storage, &config.data_dir)?;
        let cores = match &config.cores {
            Some(c) if !c.is_empty() => c.clone(),
            _ => allowed_cores(),
        };
        let n = config.shards.unwrap_or(cores.len()).max(1);
        let resources = shard_resources(&config, n);
        let (links, threads) = spawn_shards(&config, &storage, &dir_lock, &resources, &cores)?;
        let inner =
            Arc::new(Inner { shards: links, backpressure: config.backpressure, queue_capacity: config.queue_capacity });
        let mut engine = Engine {
            inner,
            threads,
            housekeeper: None,
            mode: selected.mode,
            fallback: selected.fallback,
            config,
            storage,
            startup,
            load_reports: Vec::new(),
            forgotten: Default::default(),
            resources,
            _dir_lock: dir_lock,
        };
        // The clean-shutdown marker goes before any partition is opened (Kafka's LogManager,
        // KAFKA-10471): opening changes files (a recovery, a rebuilt index), and a crash on the
        // way must make the next start recover rather than trust them.
        let marker = engine.config.data_dir.join(crate::format::checkpoint::CLEAN_SHUTDOWN_FILE);
        if engine.storage.exists(&marker) {
            engine.storage.remove_file(&marker)?;
            engine.storage.sync_dir(&engine.config.data_dir)?;
        }
        if let Err(e) = engine.open_existing_partitions() {
            // Partitions that failed to open were not recovered: stop without checkpoints or a
            // clean-shutdown marker, which would tell the next start to trust them.
            engine.abandon();
            return Err(e);
        }
        engine.checkpoint()?;
        engine.start_housekeeper();
        Ok(engine)
    }

    /// Opens the partitions already on disk, in parallel across shards. A partition that fails to
    /// open fails the whole start (after every open has answered).
    fn open_existing_partitions(&mut self) -> Result<()> {
        let mut pending = Vec::new();
        let mut names = self.storage.list_dir(&self.config.data_dir)?;
        names.sort();
        for name in names {
            if filename::is_deleted_partition_dir(&name) {
                // A deletion a crash interrupted (Kafka's LogManager removes these at start too);
                // anything but a real directory under that name is left alone.
                let path = self.config.data_dir.join(&name);
                // One that cannot be removed is left for the next start (Kafka logs it and goes on).
                if crate::io::check_real_dir(&path).is_ok() {
                    let _ = remove_partition_dir(&*self.storage, &path);
                }
                continue;
            }
            let Some((topic, partition)) = filename::parse_partition_dir(&name) else { continue };
            if !self.storage.is_dir(&self.config.data_dir.join(&name)) {
                continue;
            }
            let tp = TopicPartition::new(topic, partition);
            pending.push((tp.clone(), self.open_partition(&tp, None)));
        }
        let mut first_err = None;
        for (tp, p) in pending {
            match p.wait() {
                Ok(r) => self.load_reports.push((tp, r)),
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// Stops the shards (each closes what it opened) without writing checkpoints or the
    /// clean-shutdown marker: for a start that failed half way.
    fn abandon(&mut self) {
        for s in 0..self.shard_count() {
            let _ = self.call(s, |done| Request::Shutdown { done }).wait();
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }

    fn start_housekeeper(&mut self) {
        let stop = Arc::new((std::sync::Mutex::new(false), std::sync::Condvar::new()));
        let (inner, storage, dir) = (self.inner.clone(), self.storage.clone(), self.config.data_dir.clone());
        let every = std::time::Duration::from_millis(self.config.checkpoint_interval_ms.max(1));
        let stop2 = stop.clone();
        let t = std::thread::Builder::new().name("seglog-checkpoints".into()).spawn(move || loop {
            let (lock, cv) = &*stop2;
            let g = lock.lock().unwrap_or_else(|p| p.into_inner());
            let (g, _) = cv.wait_timeout_while(g, every, |stopped| !*stopped).unwrap_or_else(|p| p.into_inner());
            if *g {
                return;
            }
            drop(g);
            if let Ok(offsets) = inner.gather(|done| Request::Offsets { done }) {
                if let Err(e) = write_checkpoints(&*storage, &dir, &offsets) {
                    eprintln!("seglog: writing checkpoints in {}: {e}", dir.display());
                }
            }
        });
        if let Ok(t) = t {
            self.housekeeper = Some((t, stop));
        }
    }

    /// Writes `recovery-point-offset-checkpoint` and `log-start-offset-checkpoint` now (the
    /// housekeeping thread does it every `checkpoint_interval_ms`).
    pub fn checkpoint(&self) -> Result<()> {
        let offsets = self.inner.gather(|done| Request::Offsets { done })?;
        write_checkpoints(&*self.storage, &self.config.data_dir, &offsets)
    }

    /// The I/O mode the engine really runs in.
    pub fn io_mode(&self) -> IoMode {
        self.mode
    }
    /// Why the engine runs in another mode than asked, if it does.
    pub fn io_fallback_reason(&self) -> Option<&str> {
        self.fallback.as_deref()
    }
    /// Each shard's index memory and descriptors: the pages its index arena got (explicit huge
    /// pages, transparent, or normal, and why), sealed indexes resident against the budget, files
    /// open against the limit.
    pub fn index_memory(&self) -> Vec<crate::segment::ResourceReport> {
        self.resources.iter().map(|r| r.report()).collect()
    }
    /// What opening each partition found on disk at startup (segments recovered, truncations
    /// with file and position, indexes rebuilt, leftovers removed).
    pub fn load_reports(&self) -> &[(TopicPartition, crate::log::LoadReport)] {
        &self.load_reports
    }

    /// Whether the previous shutdown was clean (indexes were trusted, not rebuilt).
    pub fn started_clean(&self) -> bool {
        self.startup.clean
    }
    pub fn shard_count(&self) -> usize {
        self.inner.shards.len()
    }
    pub fn data_dir(&self) -> &Path {
        &self.config.data_dir
    }
    /// The shard that owns `tp`.
    pub fn shard_of(&self, tp: &TopicPartition) -> usize {
        (tp.stable_hash() % self.inner.shards.len() as u64) as usize
    }

    fn call<T>(&self, shard: usize, make: impl FnOnce(crate::completion::Completer<T>) -> Request) -> Completion<T> {
        self.inner.call(shard, make)
    }

    /// Opens (creating if needed) a partition with `config` (default: the engine's), and says
    /// what loading it did. Opening an open partition does nothing (an empty report), unless it
    /// is failed ([`Error::Failed`]): then it is closed and opened again, recovered from its
    /// recovery point, so that once the cause is gone (space freed, a disk remounted) it takes
    /// appends again without a restart of the engine.
    pub fn open_partition(&self, tp: &TopicPartition, config: Option<LogConfig>) -> Completion<crate::log::LoadReport> {
        if let Err(detail) = filename::validate_topic_name(&tp.topic) {
            return Completion::ready(Err(Error::InvalidTopicName { name: tp.topic.clone(), detail }));
        }
        if tp.partition < 0 {
            return Completion::ready(Err(Error::InvalidConfig(format!("negative partition {}", tp.partition))));
        }
        let key = (tp.topic.clone(), tp.partition);
        // A partition deleted in this run is new: what the files said at startup is not its.
        let deleted = self.forgotten.lock().unwrap_or_else(|p| p.into_inner()).contains(&key);
        let recovery = if self.startup.clean || deleted {
            crate::log::Recovery::Clean
        } else {
            crate::log::Recovery::FromRecoveryPoint(self.startup.recovery_points.get(&key).copied().unwrap_or(0))
        };
        let log_start_offset = if deleted { None } else { self.startup.log_starts.get(&key).copied() };
        let tp = tp.clone();
        self.call(self.shard_of(&tp), |done| {
            Request::Open(request::OpenRequest { tp, config, recovery, log_start_offset }, done)
        })
    }

    /// Closes a partition: cleanly (final index entries, trims, fsyncs) when it can, otherwise (a
    /// failed log) it is dropped as it is, and the next [`Engine::open_partition`] recovers it.
    /// Appends waiting for its write are failed. Closing a partition that is not open is
    /// [`Error::UnknownPartition`].
    pub fn close_partition(&self, tp: &TopicPartition) -> Completion<()> {
        let tp = tp.clone();
        self.call(self.shard_of(&tp), |done| Request::Close { tp, done })
    }

    /// Deletes a partition, as Kafka deletes a topic's, and waits for it: closes it if open (its
    /// waiting appends settled first), renames its directory to
    /// `<topic>-<partition>.<unique>-delete` durably, removes it, then forgets it: the
    /// checkpoints are written again at once without it (as Kafka's `asyncDelete` does), and a
    /// partition of the same name opened later starts empty from offset 0. A crash in between
    /// leaves the renamed directory, which the next [`Engine::open`] removes. Deleting a
    /// partition that is neither open nor on disk is [`Error::UnknownPartition`].
    pub fn delete_partition(&self, tp: &TopicPartition) -> Result<()> {
        // Forgotten first: whatever happens below, the startup checkpoints' values for it are
        // stale (a failed deletion leaves a partition that reopens from its own files).
        self.forgotten.lock().unwrap_or_else(|p| p.into_inner()).insert((tp.topic.clone(), tp.partition));
        let name = tp.clone();
        self.call(self.shard_of(tp), |done| Request::Delete { tp: name, done }).wait()?;
        self.checkpoint()
    }

    /// Every partition in the failed state (a write or fsync failed: it refuses appends until it
    /// is closed or opened again), with the error that failed it.
    pub fn failed_partitions(&self) -> Result<Vec<(TopicPartition, String)>> {
        let mut out = self.inner.gather(|done| Request::Failed { done })?;
        out.sort();
        Ok(out)
    }

    /// Leader append: offsets assigned by the partition. `records` holds whole v2 batches.
    pub fn append(&self, tp: &TopicPartition, records: Vec<u8>, leader_epoch: i32) -> Completion<AppendInfo> {
        let tp = tp.clone();
        let from = AppendFrom::Leader(leader_epoch);
        self.call(self.shard_of(&tp), |done| Request::Append { tp, records, from, done })
    }

    /// Appends a transaction marker as the transaction coordinator does (see
    /// [`crate::log::Log::append_txn_marker`]): acknowledged as any append is, under the
    /// engine's durability.
    pub fn append_txn_marker(
        &self,
        tp: &TopicPartition,
        marker: &crate::log::TxnMarker,
        leader_epoch: i32,
    ) -> Completion<AppendInfo> {
        let tp = tp.clone();
        let from = AppendFrom::Coordinator(*marker, leader_epoch);
        self.call(self.shard_of(&tp), |done| Request::Append { tp, records: Vec::new(), from, done })
    }

    /// Follower append: batches keep their offsets, which must continue the log.
    pub fn append_as_follower(&self, tp: &TopicPartition, records: Vec<u8>) -> Completion<AppendInfo> {
        let tp = tp.clone();
        self.call(self.shard_of(&tp), |done| Request::Append { tp, records, from: AppendFrom::Follower, done })
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
        let upper = FetchUpper::Offset(upper_bound);
        self.call(self.shard_of(&tp), |done| Request::Fetch { tp, offset, max_bytes, upper, min_one: true, done })
    }

    /// Reads whole batches from `offset` as a consumer or follower under `isolation` sees them,
    /// with the aborted transactions under [`FetchIsolation::TxnCommitted`] (see
    /// [`crate::log::Log::fetch`]).
    pub fn fetch_isolated(
        &self,
        tp: &TopicPartition,
        offset: i64,
        max_bytes: u32,
        isolation: FetchIsolation,
    ) -> Completion<FetchData> {
        self.fetch_isolated_bounded(tp, offset, max_bytes, isolation, true)
    }

    /// [`Engine::fetch_isolated`], with Kafka's `minOneMessage` as `min_one`: when false, a first
    /// batch larger than `max_bytes` is not returned (no records, the offsets still answered), as
    /// Kafka reads the partitions after the first of a fetch whose budget is spent.
    pub fn fetch_isolated_bounded(
        &self,
        tp: &TopicPartition,
        offset: i64,
        max_bytes: u32,
        isolation: FetchIsolation,
        min_one: bool,
    ) -> Completion<FetchData> {
        let tp = tp.clone();
        let upper = FetchUpper::Isolation(isolation);
        self.call(self.shard_of(&tp), |done| Request::Fetch { tp, offset, max_bytes, upper, min_one, done })
    }

    /// Offset lookup by timestamp or special value (see [`crate::log::Log::offset_for_time`]).
    pub fn list_offset(&self, tp: &TopicPartition, target: ListOffset) -> Completion<Option<TimestampAndOffset>> {
        let tp = tp.clone();
        self.call(self.shard_of(&tp), |done| Request::ListOffset { tp, target, isolation: None, done })
    }

    /// Offset lookup as a consumer under `isolation` sees it (see
    /// [`crate::log::Log::offset_for_time_isolated`]): latest is the high watermark or the last
    /// stable offset.
    pub fn list_offset_isolated(
        &self,
        tp: &TopicPartition,
        target: ListOffset,
        isolation: FetchIsolation,
    ) -> Completion<Option<TimestampAndOffset>> {
        let tp = tp.clone();
        self.call(self.shard_of(&tp), |done| Request::ListOffset { tp, target, isolation: Some(isolation), done })
    }

    /// Runs `f` on the partition's [`crate::log::Log`] inside its shard: truncation, DeleteRecords,
    /// high-watermark updates, retention, or anything else the log offers.
    pub fn with_log<T: Send + 'static>(
        &self,
        tp: &TopicPartition,
        f: impl FnOnce(&mut crate::log::Log) -> Result<T> + Send + 'static,
    ) -> Completion<T> {
        let (c, r) = pair();
        let name = tp.clone();
        let f = move |log: Option<&mut crate::log::Log>| {
            c.complete(match log {
                Some(log) => f(log),
                None => Err(Error::UnknownPartition { topic: name.topic, partition: name.partition }),
            })
        };
        let req = Request::WithLog { tp: tp.clone(), f: Box::new(f) };
        match self.inner.send(self.shard_of(tp), req) {
            Ok(()) => r,
            Err(e) => Completion::ready(Err(e)),
        }
    }

    /// Makes every acknowledged append of every partition durable and writes the checkpoints.
    pub fn flush_all(&self) -> Result<()> {
        let pending: Vec<_> = (0..self.shard_count()).map(|s| self.call(s, |done| Request::Flush { done })).collect();
        pending.into_iter().try_for_each(|p| p.wait())?;
        self.checkpoint()
    }

    /// Every open partition with its log start and log end offsets.
    pub fn partitions(&self) -> Result<Vec<(TopicPartition, i64, i64)>> {
        let mut out = self.inner.gather(|done| Request::Partitions { done })?;
        out.sort();
        Ok(out)
    }

    /// Per-shard counters.
    pub fn stats(&self) -> Result<Vec<ShardStats>> {
        let pending: Vec<_> = (0..self.shard_count()).map(|s| self.call(s, |done| Request::Stats { done })).collect();
        pending.into_iter().map(|p| p.wait()).collect()
    }

    /// Closes every partition cleanly (final index entries, trims, fsyncs), writes the
    /// checkpoints with every recovery point at its log end, then the `.kafka_cleanshutdown`
    /// marker, and stops the shards. The marker is written only if every partition closed.
    pub fn shutdown(mut self) -> Result<()> {
        self.stop()
    }

    fn stop(&mut self) -> Result<()> {
        if let Some((t, stop)) = self.housekeeper.take() {
            *stop.0.lock().unwrap_or_else(|p| p.into_inner()) = true;
            stop.1.notify_all();
            let _ = t.join();
        }
        let mut first_err = None;
        let pending: Vec<_> =
            (0..self.shard_count()).map(|s| self.call(s, |done| Request::Shutdown { done })).collect();
        let mut closed = Vec::new();
        for p in pending {
            match p.wait() {
                Ok(v) => closed.extend(v),
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        if let Some(e) = first_err {
            return Err(e);
        }
        // Every partition closed cleanly: its recovery point is its log end.
        write_checkpoints(&*self.storage, &self.config.data_dir, &closed)?;
        let marker = self.config.data_dir.join(crate::format::checkpoint::CLEAN_SHUTDOWN_FILE);
        let text = crate::format::checkpoint::CleanShutdown { broker_epoch: Some(-1) }.serialize();
        self.storage.write_file_atomic(&marker, text.as_bytes())
    }
}

/// Removes a deleted partition's directory and the files in it. Nothing is followed: a
/// symbolic link in the directory's place is refused, one inside it is unlinked (not what it
/// points to), and a subdirectory (a partition has none) stops the removal with an error naming it.
pub(crate) fn remove_partition_dir(storage: &dyn Storage, dir: &Path) -> Result<()> {
    crate::io::check_real_dir(dir)?;
    for name in storage.list_dir(dir)? {
        storage.remove_file(&dir.join(name))?;
    }
    storage.remove_dir(dir)
}

/// Each shard's index memory and descriptors: its share of the index budget and of the open
/// files, and its own index arena.
fn shard_resources(config: &EngineConfig, shards: usize) -> Vec<crate::segment::SegmentResources> {
    crate::segment::SegmentResources::for_shards(
        crate::segment::ResourceConfig {
            arena: crate::io::ArenaConfig {
                huge_pages: config.huge_pages,
                lock_memory: config.lock_index_memory,
                ..Default::default()
            },
            index_memory_budget_bytes: config.index_memory_budget_bytes,
            max_open_files: config.max_open_files,
        },
        shards,
    )
}

/// Starts one shard thread per entry of `resources`, shard i on `cores[i % cores.len()]` when
/// threads are pinned, each with its queue and doorbell; returns the links to them and their
/// threads.
fn spawn_shards(
    config: &EngineConfig,
    storage: &Arc<dyn Storage>,
    dir_lock: &Arc<crate::io::lock::LockGuard>,
    resources: &[crate::segment::SegmentResources],
    cores: &[usize],
) -> Result<(Vec<ShardLink>, Vec<JoinHandle<()>>)> {
    let mut links = Vec::with_capacity(resources.len());
    let mut threads = Vec::with_capacity(resources.len());
    for (id, res) in resources.iter().cloned().enumerate() {
        let started = (|| {
            let (tx, rx) = bounded(config.queue_capacity.max(1));
            let bell = Arc::new(Doorbell { fd: EventFd::new()?, sleeping: AtomicBool::new(false) });
            let core = if config.pin_threads { cores.get(id % cores.len().max(1)).copied() } else { None };
            // The shard's segments share its index arena, index budget and file limit.
            let io = shard::ShardIo { storage: storage.clone(), resources: res, dir_lock: dir_lock.clone() };
            let shard = shard::Shard::new(id, core, rx, bell.clone(), io, config)?;
            let thread = std::thread::Builder::new()
                .name(format!("seglog-shard-{id}"))
                .spawn(move || shard.run())
                .map_err(|e| Error::io("spawn", format!("shard {id}"), e))?;
            Ok((ShardLink { tx, bell }, thread))
        })();
        match started {
            Ok((link, thread)) => {
                links.push(link);
                threads.push(thread);
            }
            Err(e) => {
                // The shards started already see their queue gone and stop. They hold the
                // directory's lock until then: wait for them, so that a retry finds it free.
                let bells: Vec<Arc<Doorbell>> = links.iter().map(|l| l.bell.clone()).collect();
                drop(links);
                for bell in bells {
                    bell.ring_if_sleeping();
                }
                for t in threads {
                    let _ = t.join();
                }
                return Err(e);
            }
        }
    }
    Ok((links, threads))
}

impl Drop for Engine {
    fn drop(&mut self) {
        if !self.threads.is_empty() {
            let _ = self.stop();
        }
    }
}
