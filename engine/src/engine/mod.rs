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
    /// Acknowledged once handed to the kernel, like `None`, and made durable by group commit:
    /// one fdatasync per partition covers every batch appended before it, at least every
    /// `flush_ms` milliseconds and every `flush_messages` messages (whichever comes first; the
    /// partition's own flush.ms / flush.messages apply too if stricter). The recovery point
    /// tells what is durable.
    Interval { flush_ms: i64, flush_messages: i64 },
    /// Acknowledged after an fdatasync covering it; one fdatasync per partition per loop turn
    /// covers every append of that turn (group commit).
    EveryBatch,
}

/// How [`Durability::EveryBatch`] makes a turn's appends durable.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SyncMethod {
    /// Each partition's write (or writes) linked to an fdatasync (IORING_OP_FSYNC with
    /// IORING_FSYNC_DATASYNC; `fdatasync(2)` in sync mode): two operations, the second starting
    /// once the first completed (io_uring runs the fdatasync on an io-wq worker).
    Fdatasync,
    /// Each write carries RWF_DSYNC (io_uring's rw_flags; `pwritev2` in sync mode): durable when
    /// it completes, as with O_DSYNC, and no separate fdatasync. On devices with a volatile write
    /// cache the kernel issues the write with FUA or follows it with a cache flush. The first
    /// flush after a reopen, or after bytes were written without a sync, still uses fdatasync.
    /// The default: one operation and one completion per durable write instead of two (on this
    /// machine kind a durable append's p50 fell from 271 to 194-211 us and its throughput rose
    /// from 76 % to 94-100 % of fio's write + fdatasync).
    #[default]
    DsyncWrites,
}

/// Zero fill: whether each active segment keeps a lead of zeros written past its data, so that
/// appends overwrite blocks that are allocated and initialized instead of extending the file.
/// On ext4 (and XFS) an append that extends the file, or lands in preallocated (unwritten)
/// space, changes metadata that a durable write must commit to the journal; an overwrite of
/// written blocks commits nothing, so an RWF_DSYNC append costs the write and a cache flush
/// only. The price is writing every byte of the log twice (zeros, then data), in large writes
/// off the acknowledgement path.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ZeroFill {
    /// A lead of up to [`ZeroFill::DEFAULT_LEAD_BYTES`] under [`Durability::EveryBatch`] in
    /// direct mode (where, with `Completion::wait`'s adaptive spin, a durable append's p50 fell
    /// from 194-211 to 84-133 us and its p99 from 322-441 to 154-357 us on the machine measured,
    /// docs/benchmarks.md, "What limits the missed targets"), off otherwise: without an fsync per append the doubled writes buy
    /// less than they cost.
    #[default]
    Auto,
    /// No zero fill (Kafka's behaviour).
    Off,
    /// Keep up to this many bytes zeroed past the data (the lead starts at 256 KiB, or this if
    /// smaller, and doubles at each refill), refilled in one batch of parallel writes once less
    /// than half is left. Direct mode only: through the page cache the zeros reach the disk
    /// only at writeback, after the appends that overwrite them, and buy nothing.
    Lead(u32),
}

impl ZeroFill {
    /// The lead [`ZeroFill::Auto`] keeps when it is on.
    pub const DEFAULT_LEAD_BYTES: u32 = 64 << 20;

    /// The lead in bytes (0 for none) for an engine with `durability` running in `mode`.
    pub fn lead_bytes(self, durability: Durability, mode: IoMode) -> u32 {
        match self {
            ZeroFill::Auto if durability == Durability::EveryBatch && mode == IoMode::Direct => {
                ZeroFill::DEFAULT_LEAD_BYTES
            }
            ZeroFill::Auto | ZeroFill::Off => 0,
            ZeroFill::Lead(n) if mode == IoMode::Direct => n,
            ZeroFill::Lead(_) => 0,
        }
    }
}

impl std::str::FromStr for ZeroFill {
    type Err = String;
    /// `auto`, `off`, or a lead in bytes (`8388608`, or with a suffix: `8MiB`, `512KiB`).
    fn from_str(s: &str) -> std::result::Result<ZeroFill, String> {
        let t = s.trim();
        match t.to_ascii_lowercase().as_str() {
            "auto" => return Ok(ZeroFill::Auto),
            "off" => return Ok(ZeroFill::Off),
            _ => {}
        }
        let (num, mult) = match t.find(|c: char| !c.is_ascii_digit()) {
            None => (t, 1u64),
            Some(i) => {
                let mult = match t[i..].trim().to_ascii_lowercase().as_str() {
                    "k" | "kib" => 1 << 10,
                    "m" | "mib" => 1 << 20,
                    "g" | "gib" => 1 << 30,
                    other => return Err(format!("zero fill {s:?}: unknown unit {other:?} (KiB, MiB, GiB)")),
                };
                (&t[..i], mult)
            }
        };
        let n: u64 = num.parse().map_err(|_| format!("zero fill {s:?}: auto, off, or a size in bytes"))?;
        match n.checked_mul(mult).and_then(|b| u32::try_from(b).ok()) {
            Some(0) => Ok(ZeroFill::Off),
            Some(b) => Ok(ZeroFill::Lead(b)),
            None => Err(format!("zero fill {s:?}: at most {} bytes", u32::MAX)),
        }
    }
}

impl std::fmt::Display for ZeroFill {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ZeroFill::Auto => f.write_str("auto"),
            ZeroFill::Off => f.write_str("off"),
            ZeroFill::Lead(n) => write!(f, "{n}"),
        }
    }
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
    /// How durable writes sync: RWF_DSYNC writes (the default) or write + linked fdatasync.
    pub sync_method: SyncMethod,
    /// Zeros written ahead of each active segment's data. Default `Auto`: on under
    /// `Durability::EveryBatch` in direct mode.
    pub zero_fill: ZeroFill,
    /// The configuration of partitions opened without one.
    pub log_config: LogConfig,
    /// Bytes of each active segment's tail kept in memory for tail fetches.
    pub tail_cache_bytes: u64,
    /// How long an idle shard polls its queue before sleeping on its doorbell (microseconds).
    /// Polling trades CPU for latency: a request that arrives within it needs no wake-up.
    /// Default 50; 0 sleeps at once.
    pub idle_spin_us: u64,
    /// How long a shard with writes in flight and no requests polls its queue and its ring
    /// before sleeping (microseconds). A write completing within it is acknowledged without a
    /// wake-up of the shard (on a virtual machine, waking an idle vCPU costs tens of
    /// microseconds). Default 200: longer than one 16-128 KiB O_DIRECT write took on the machine
    /// measured (fio p50 59-181 us, docs/benchmarks.md); 0 sleeps at once.
    pub io_spin_us: u64,
    /// How often the recovery-point and log-start-offset checkpoints are written (Kafka's
    /// log.flush.offset.checkpoint.interval.ms). Default 60,000.
    pub checkpoint_interval_ms: u64,
    /// How often each shard applies retention and unlinks expired `.deleted` files (Kafka's
    /// log.retention.check.interval.ms). Default 300,000. The first pass comes one interval
    /// after the engine opens (Kafka's first comes after its 30 s initial task delay).
    pub retention_check_interval_ms: u64,
    /// Threads revalidating one partition's segments after a crash (Kafka: one). Partitions on
    /// different shards recover in parallel in any case. Default 1.
    pub recovery_threads_per_partition: usize,
    /// Behave as if io_uring were refused (as under a container's seccomp profile): the engine
    /// falls back to sync mode and says why. For tests and for comparing modes.
    pub simulate_uring_refusal: bool,
    /// Permission bits of every file the engine creates (segments, indexes, checkpoints), before
    /// the process umask. Default [`DEFAULT_FILE_MODE`](crate::io::select::DEFAULT_FILE_MODE):
    /// owner-only, as log data is users' data.
    pub file_mode: u32,
    /// Permission bits of the directories it creates (the data directory if missing, partition
    /// directories). Default [`DEFAULT_DIR_MODE`](crate::io::select::DEFAULT_DIR_MODE).
    pub dir_mode: u32,
    /// Pages behind each shard's index arena; [`Engine::index_memory`] says what it got.
    /// Default `Auto`: explicit huge pages if reserved, else transparent, else normal.
    pub huge_pages: crate::io::HugePages,
    /// Memory for sealed segments' indexes, split evenly across shards; past it the least
    /// recently used are evicted and load again on next use. Default 1 GiB.
    pub index_memory_budget_bytes: u64,
    /// Segment files (sealed `.log`s and all index files) kept open at once, split evenly across
    /// shards; idle ones are closed first. Active `.log` files are not counted. Default half the
    /// process's soft descriptor limit.
    pub max_open_files: usize,
    /// Lock index memory (`mlock2` with `MLOCK_ONFAULT`), so no index page is ever swapped out.
    /// Default false.
    pub lock_index_memory: bool,
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
            sync_method: SyncMethod::DsyncWrites,
            zero_fill: ZeroFill::Auto,
            log_config: LogConfig::default(),
            tail_cache_bytes: 1024 * 1024,
            simulate_uring_refusal: false,
            file_mode: crate::io::select::DEFAULT_FILE_MODE,
            dir_mode: crate::io::select::DEFAULT_DIR_MODE,
            idle_spin_us: 50,
            io_spin_us: 200,
            checkpoint_interval_ms: 60_000,
            retention_check_interval_ms: 300_000,
            recovery_threads_per_partition: 1,
            huge_pages: crate::io::HugePages::Auto,
            index_memory_budget_bytes: 1 << 30,
            max_open_files: crate::io::FileCache::default_limit(),
            lock_index_memory: false,
        }
    }
}

impl EngineConfig {
    /// Checks every setting (and `log_config`) together; [`Engine::open`] calls it first. An
    /// error names the setting and the range it must be in; nothing was created or opened.
    pub fn validate(&self) -> Result<()> {
        let bad = |setting: &str, detail: String| Err(Error::InvalidConfig(format!("{setting} {detail}")));
        self.log_config.validate()?;
        if self.data_dir.as_os_str().is_empty() {
            return bad("data_dir", "is empty".into());
        }
        if self.shards == Some(0) {
            return bad("shards", "= 0: at least one shard".into());
        }
        if self.cores.as_ref().is_some_and(|c| c.is_empty()) {
            return bad("cores", "is an empty list: leave it None for the allowed cores".into());
        }
        if self.queue_capacity == 0 {
            return bad("queue_capacity", "= 0: at least 1".into());
        }
        if let Durability::Interval { flush_ms, flush_messages } = self.durability {
            if flush_ms < 0 || flush_messages < 1 {
                return bad(
                    "durability",
                    format!("Interval {{ flush_ms: {flush_ms}, flush_messages: {flush_messages} }}: flush_ms >= 0 and flush_messages >= 1"),
                );
            }
        }
        if let ZeroFill::Lead(n) = self.zero_fill {
            if n == 0 {
                return bad("zero_fill", "Lead(0): use ZeroFill::Off".into());
            }
        }
        for (setting, v) in [
            ("checkpoint_interval_ms", self.checkpoint_interval_ms),
            ("retention_check_interval_ms", self.retention_check_interval_ms),
        ] {
            if v == 0 {
                return bad(setting, "= 0: at least 1".into());
            }
        }
        if self.recovery_threads_per_partition == 0 {
            return bad("recovery_threads_per_partition", "= 0: at least 1".into());
        }
        if self.file_mode & !0o7777 != 0 || self.file_mode & 0o600 != 0o600 {
            return bad(
                "file_mode",
                format!("{:o}: permission bits (at most 7777) with owner read and write", self.file_mode),
            );
        }
        if self.dir_mode & !0o7777 != 0 || self.dir_mode & 0o700 != 0o700 {
            return bad(
                "dir_mode",
                format!("{:o}: permission bits (at most 7777) with owner read, write and search", self.dir_mode),
            );
        }
        if self.max_open_files < 16 {
            return bad("max_open_files", format!("{}: at least 16", self.max_open_files));
        }
        Ok(())
    }
}

/// A closure run on a partition's log inside its shard.
pub(crate) type LogFn = Box<dyn FnOnce(Option<&mut crate::log::Log>) + Send>;

/// The housekeeping thread's stop flag.
type StopSignal = Arc<(std::sync::Mutex<bool>, std::sync::Condvar)>;

pub(crate) enum Request {
    Open {
        tp: TopicPartition,
        config: Option<LogConfig>,
        recovery: crate::log::Recovery,
        log_start_offset: Option<i64>,
        done: crate::completion::Completer<crate::log::LoadReport>,
    },
    /// Closes one partition: cleanly when it can, else (a failed log) leaving it to recovery at
    /// its next open.
    Close {
        tp: TopicPartition,
        done: crate::completion::Completer<()>,
    },
    /// Every failed partition with the reason.
    Failed {
        done: crate::completion::Completer<Vec<(TopicPartition, String)>>,
    },
    /// (partition, recovery point, log start offset) of every open log.
    Offsets {
        done: crate::completion::Completer<Vec<(TopicPartition, i64, i64)>>,
    },
    /// Runs `f` on the partition's log in its shard (`None` if the partition is not open).
    WithLog {
        tp: TopicPartition,
        f: LogFn,
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
    /// Closes every log; answers (partition, log end, log start) of each closed cleanly.
    Shutdown {
        done: crate::completion::Completer<Vec<(TopicPartition, i64, i64)>>,
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
struct ShardLink {
    tx: Sender<Request>,
    bell: Arc<Doorbell>,
}

/// What producers and the housekeeping thread share: the shards' queues and doorbells.
#[derive(Debug)]
struct Inner {
    shards: Vec<ShardLink>,
    backpressure: Backpressure,
    queue_capacity: usize,
}

impl Inner {
    fn send(&self, shard: usize, req: Request) -> Result<()> {
        let h = &self.shards[shard];
        match self.backpressure {
            Backpressure::Block => h.tx.send(req).map_err(|_| Error::EngineStopped)?,
            Backpressure::Error => match h.tx.try_send(req) {
                Ok(()) => {}
                Err(TrySendError::Full(_)) => return Err(Error::QueueFull { shard, capacity: self.queue_capacity }),
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

    /// Asks every shard and gathers the answers.
    fn gather<T>(&self, make: impl Fn(crate::completion::Completer<Vec<T>>) -> Request) -> Result<Vec<T>> {
        let pending: Vec<_> = (0..self.shards.len()).map(|s| self.call(s, &make)).collect();
        let mut out = Vec::new();
        for p in pending {
            out.extend(p.wait()?);
        }
        Ok(out)
    }
}

/// What the engine found at startup: whether the last shutdown was clean, and the checkpoints.
#[derive(Debug, Default)]
struct Startup {
    clean: bool,
    recovery_points: std::collections::BTreeMap<(String, i32), i64>,
    log_starts: std::collections::BTreeMap<(String, i32), i64>,
}

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
    resources: Vec<crate::segment::SegmentResources>,
    /// Kafka's `.lock` of the data directory, held from before anything in it is read until the
    /// engine is dropped (each open log holds a clone too).
    _dir_lock: Arc<crate::io::lock::LockGuard>,
}

/// Writes the recovery-point and log-start-offset checkpoints of the data directory.
fn write_checkpoints(storage: &dyn Storage, dir: &Path, offsets: &[(TopicPartition, i64, i64)]) -> Result<()> {
    use crate::format::checkpoint::{
        OffsetCheckpoint, LOG_START_OFFSET_CHECKPOINT_FILE, RECOVERY_POINT_OFFSET_CHECKPOINT_FILE,
    };
    let mut sorted = offsets.to_vec();
    sorted.sort();
    let rp =
        OffsetCheckpoint { entries: sorted.iter().map(|(tp, r, _)| (tp.topic.clone(), tp.partition, *r)).collect() };
    let ls =
        OffsetCheckpoint { entries: sorted.iter().map(|(tp, _, l)| (tp.topic.clone(), tp.partition, *l)).collect() };
    storage.write_file_atomic(&dir.join(RECOVERY_POINT_OFFSET_CHECKPOINT_FILE), rp.serialize().as_bytes())?;
    storage.write_file_atomic(&dir.join(LOG_START_OFFSET_CHECKPOINT_FILE), ls.serialize().as_bytes())
}

/// Reads an offset checkpoint of the data directory; a missing or empty file is empty, a damaged
/// one is an error naming it.
fn read_offsets(storage: &dyn Storage, path: &Path) -> Result<std::collections::BTreeMap<(String, i32), i64>> {
    if !storage.exists(path) {
        return Ok(Default::default());
    }
    let bytes = storage.read_small_file(path, 256 << 20)?;
    let text = String::from_utf8_lossy(&bytes);
    if text.trim().is_empty() {
        return Ok(Default::default());
    }
    let cp = crate::format::checkpoint::OffsetCheckpoint::parse(&text).map_err(|source| Error::Corrupt {
        path: path.to_path_buf(),
        pos: 0,
        source,
    })?;
    Ok(cp.to_map())
}

impl Engine {
    /// Starts the shards and opens every partition directory found in the data directory. After
    /// a clean shutdown (`.kafka_cleanshutdown` present) indexes are only sanity-checked; after a
    /// crash every segment from each partition's recovery point (from
    /// `recovery-point-offset-checkpoint`) is revalidated. The marker is removed once every
    /// partition is open, so a crash during startup is not mistaken for a clean shutdown.
    pub fn open(config: EngineConfig) -> Result<Engine> {
        use crate::format::checkpoint::{
            CLEAN_SHUTDOWN_FILE, LOG_START_OFFSET_CHECKPOINT_FILE, RECOVERY_POINT_OFFSET_CHECKPOINT_FILE,
        };
        config.validate()?;
        let selected = crate::io::select::open_storage_with_permissions(
            config.io_mode,
            config.simulate_uring_refusal,
            crate::io::select::Permissions { file_mode: config.file_mode, dir_mode: config.dir_mode },
        );
        let storage = selected.storage;
        if !storage.exists(&config.data_dir) {
            storage.create_dir_all(&config.data_dir)?;
        }
        // One owner per data directory, as Kafka: a second engine, a writing command or a broker
        // is refused here, before anything in the directory is read or changed.
        let dir_lock = storage
            .lock(&config.data_dir, crate::io::lock::LockKind::LogDir)?
            .map(Arc::new)
            .expect("an exclusive lock always yields a guard");
        let marker = config.data_dir.join(CLEAN_SHUTDOWN_FILE);
        let startup = Startup {
            clean: storage.exists(&marker),
            recovery_points: read_offsets(&*storage, &config.data_dir.join(RECOVERY_POINT_OFFSET_CHECKPOINT_FILE))?,
            log_starts: read_offsets(&*storage, &config.data_dir.join(LOG_START_OFFSET_CHECKPOINT_FILE))?,
        };
        let cores = match &config.cores {
            Some(c) if !c.is_empty() => c.clone(),
            _ => allowed_cores(),
        };
        let n = config.shards.unwrap_or(cores.len()).max(1);
        let resources = crate::segment::SegmentResources::for_shards(
            crate::segment::ResourceConfig {
                arena: crate::io::ArenaConfig {
                    huge_pages: config.huge_pages,
                    lock_memory: config.lock_index_memory,
                    ..Default::default()
                },
                index_memory_budget_bytes: config.index_memory_budget_bytes,
                max_open_files: config.max_open_files,
            },
            n,
        );
        let mut links = Vec::with_capacity(n);
        let mut threads = Vec::with_capacity(n);
        for (id, res) in resources.iter().cloned().enumerate() {
            let (tx, rx) = bounded(config.queue_capacity.max(1));
            let bell = Arc::new(Doorbell { fd: EventFd::new()?, sleeping: AtomicBool::new(false) });
            let core = if config.pin_threads { cores.get(id % cores.len().max(1)).copied() } else { None };
            let shard = shard::Shard::new(id, core, rx, bell.clone(), storage.clone(), dir_lock.clone(), &config);
            let thread = std::thread::Builder::new()
                .name(format!("seglog-shard-{id}"))
                .spawn(move || {
                    // The shard's segments share its index arena, index budget and file limit.
                    let _entered = res.enter();
                    shard.run()
                })
                .map_err(|e| Error::io("spawn", format!("shard {id}"), e))?;
            links.push(ShardLink { tx, bell });
            threads.push(thread);
        }
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
            resources,
            _dir_lock: dir_lock,
        };
        if let Err(e) = engine.open_existing_partitions() {
            // Partitions that failed to open were not recovered: stop without checkpoints or a
            // clean-shutdown marker, which would tell the next start to trust them.
            engine.abandon();
            return Err(e);
        }
        if engine.storage.exists(&marker) {
            engine.storage.remove_file(&marker)?;
            engine.storage.sync_dir(&engine.config.data_dir)?;
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
        let recovery = if self.startup.clean {
            crate::log::Recovery::Clean
        } else {
            crate::log::Recovery::FromRecoveryPoint(self.startup.recovery_points.get(&key).copied().unwrap_or(0))
        };
        let log_start_offset = self.startup.log_starts.get(&key).copied();
        let tp = tp.clone();
        self.call(self.shard_of(&tp), |done| Request::Open { tp, config, recovery, log_start_offset, done })
    }

    /// Closes a partition: cleanly (final index entries, trims, fsyncs) when it can, otherwise (a
    /// failed log) it is dropped as it is, and the next [`Engine::open_partition`] recovers it.
    /// Appends waiting for its write are failed. Closing a partition that is not open is
    /// [`Error::UnknownPartition`].
    pub fn close_partition(&self, tp: &TopicPartition) -> Completion<()> {
        let tp = tp.clone();
        self.call(self.shard_of(&tp), |done| Request::Close { tp, done })
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

impl Drop for Engine {
    fn drop(&mut self) {
        if !self.threads.is_empty() {
            let _ = self.stop();
        }
    }
}
