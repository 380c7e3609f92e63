//! The engine's settings: [`EngineConfig`] and the choices it is made of (durability, sync
//! method, zero fill, backpressure).

use std::path::PathBuf;

use crate::config::LogConfig;
use crate::error::{Error, Result};
use crate::io::IoMode;

#[cfg(doc)]
use super::Engine;

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
    /// Group commit across the shard: each partition's write is a plain write, and one
    /// `syncfs(2)` of the data directory's filesystem, run by a flusher thread of the shard,
    /// makes every write that completed before it durable at once; an append is acknowledged
    /// when the first syncfs started after its write completed succeeds. The shard does not wait
    /// for it: writes go on while a syncfs runs, and the next one starts when it is done and
    /// more writes have completed.
    ///
    /// syncfs makes all of the filesystem's data and metadata durable, not only seglog's: it
    /// also writes back every other dirty file on that filesystem, other processes' too, and
    /// its cost depends on them. Each syncfs is followed by an fdatasync of the data directory's
    /// `.lock`, for the device cache flush XFS's syncfs may skip. In the durable sweep it paid
    /// only with many partitions of one append in flight each and no zero fill (1.37x
    /// `DsyncWrites`' throughput at 64 partitions; 0.62-0.88x at 1 and 8, docs/benchmarks.md,
    /// "Durable appends at scale"). Errors of the writeback it does are reported through syncfs
    /// from Linux 5.8 on (older kernels return success even when writeback failed); a failed
    /// syncfs fails the acknowledgements waiting for it and puts the partitions of the shard
    /// that had bytes written and not yet durable in the failed state. Under
    /// [`Durability::Interval`] (and a partition's own flush.ms / flush.messages) it acts as
    /// `Fdatasync`: the shared flush is for `EveryBatch`. Not the default.
    Syncfs,
}

impl SyncMethod {
    /// Every sync method.
    pub const ALL: [SyncMethod; 3] = [SyncMethod::DsyncWrites, SyncMethod::Fdatasync, SyncMethod::Syncfs];

    /// Its name: `dsync-writes`, `fdatasync` or `syncfs` (what it parses from).
    pub fn name(self) -> &'static str {
        match self {
            SyncMethod::DsyncWrites => "dsync-writes",
            SyncMethod::Fdatasync => "fdatasync",
            SyncMethod::Syncfs => "syncfs",
        }
    }
}

impl std::fmt::Display for SyncMethod {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for SyncMethod {
    type Err = String;
    /// `dsync-writes` (or `dsync`), `fdatasync` or `syncfs`.
    fn from_str(s: &str) -> std::result::Result<SyncMethod, String> {
        match s.trim() {
            "dsync" => Ok(SyncMethod::DsyncWrites),
            t => SyncMethod::ALL
                .into_iter()
                .find(|m| m.name() == t)
                .ok_or_else(|| format!("unknown sync method {t:?} (dsync-writes, fdatasync, syncfs)")),
        }
    }
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
    /// A lead of up to [`ZeroFill::DEFAULT_LEAD_BYTES`] per shard (shared as with
    /// [`ZeroFill::Lead`]) under [`Durability::EveryBatch`] in direct mode, off otherwise:
    /// without an fsync per append the doubled writes buy less than they cost. With one
    /// partition a durable append's p50 fell from 194-211 to 84-133 us and its p99 from 322-441
    /// to 154-357 us on the machine measured (docs/benchmarks.md, "What limits the missed
    /// targets"). Across 1 to 64 partitions (the durable sweep, docs/benchmarks.md, "Durable
    /// appends at scale"), with one append in flight per partition it gave 1.2-1.9x `Off`'s
    /// throughput in two runs. With 8 in flight a partition's appends queue: beside other
    /// writers it takes no refills (there the two settings differ by the runs' noise); as its
    /// shard's only writer, refills of a lead of at most 1 MiB if the shard measures its writes
    /// faster with them than without. The shard times both, taking turns of 6 MiB of its
    /// writes (at least three a side, 36 MiB), and asks again every minute
    /// ([`super::BusyRefillChoice`], `ShardStats::busy_refills`): at 1 partition x 8 in flight
    /// one disk made 0.98-1.18x fio's throughput with them against 0.80-0.93x without, another
    /// 0.71x against 0.76x (docs/benchmarks.md, "Refills for a busy partition, chosen by
    /// measurement"). [`ZeroFill::Lead`] always takes them.
    #[default]
    Auto,
    /// No zero fill (Kafka's behaviour).
    Off,
    /// Keep up to this many bytes zeroed past the data, per shard: each partition keeps at most
    /// this over the shard's open partitions (never under 256 KiB), and one partition's refill
    /// is in flight at a time. A partition's lead starts at 256 KiB (or its share, if smaller)
    /// and doubles at each refill, a batch of writes once less than half is left (issued
    /// together while the partition writes alone; beside other partitions' writes one after
    /// another, of a lead of at most 256 KiB, and none while 32 or more data writes are in flight
    /// on the shard, nor for a second after: there the device's bandwidth is what the appends
    /// wait for).
    /// Direct mode only: through the page cache the zeros reach the disk only at writeback,
    /// after the appends that overwrite them, and buy nothing.
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
    /// How durable writes sync: RWF_DSYNC writes (the default), write + linked fdatasync, or
    /// plain writes and one shared syncfs per shard.
    pub sync_method: SyncMethod,
    /// Zeros written ahead of each active segment's data. Default `Auto`: on under
    /// `Durability::EveryBatch` in direct mode.
    pub zero_fill: ZeroFill,
    /// The configuration of partitions opened without one.
    pub log_config: LogConfig,
    /// Bytes of each active segment's tail kept in memory for tail fetches, at most: the
    /// partitions of a shard share `tail_cache_budget_bytes`. Default 1 MiB.
    pub tail_cache_bytes: u64,
    /// Memory for the tail caches of one shard's partitions, shared: each keeps at most
    /// `tail_cache_bytes`, and at most this divided by the shard's open partitions (rounded
    /// down to a power of two; none when that is under a 256 KiB chunk, and then an idle
    /// partition's tail holds no chunk, only its partial last block in direct mode, under
    /// 4 KiB). Default 64 MiB: 1 MiB each up to 64 partitions, none past 256. Its chunks count
    /// toward `write_buffer_budget_bytes`, which must be at least twice it.
    pub tail_cache_budget_bytes: u64,
    /// Write buffers (the tails' chunks of 256 KiB, which appends land in and writes go out
    /// from) a shard holds before it takes more appends: past it, with writes in flight or to
    /// start, the shard leaves the requests it took until writes complete and their chunks come
    /// back, and takes no more from its queue meanwhile (its senders wait, as for a full queue).
    /// Bounds a shard's write memory with thousands of partitions appended to at once (each
    /// takes a chunk while its bytes are unwritten). Default 256 MiB.
    pub write_buffer_budget_bytes: u64,
    /// How long an idle shard polls its queue before sleeping on its doorbell (microseconds).
    /// Polling trades CPU for latency: a request that arrives within it needs no wake-up.
    /// Default 50; 0 sleeps at once.
    pub idle_spin_us: u64,
    /// How long a shard with writes in flight and no requests polls its queue and its ring
    /// before sleeping (microseconds). A write completing within it is acknowledged without a
    /// wake-up of the shard (on a virtual machine, waking an idle vCPU costs tens of
    /// microseconds). Default 200: longer than one 16-128 KiB O_DIRECT write took on the machine
    /// measured (fio p50 59-181 us, docs/benchmarks.md); 0 sleeps at once. It applies only while
    /// at most one partition has a write in flight: with more, the shard sleeps at once and
    /// leaves its core to the kernel workers that run the writes which block (docs/benchmarks.md,
    /// "The shard's spin by load").
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
    /// Threads per shard loading partitions' logs opened together (at startup, every existing
    /// partition; later, opens queued together) and closing them at shutdown: each load or close
    /// is file I/O one call at a time, so several side by side keep the device busy (Kafka's
    /// `num.recovery.threads.per.data.dir` does this for a whole data directory). Default 8.
    pub open_threads_per_shard: usize,
    /// Behave as if io_uring were refused (as under a container's seccomp profile): the engine
    /// falls back to sync mode and says why. For tests and for comparing modes.
    pub simulate_uring_refusal: bool,
    /// Permission bits of every file the engine creates (segments, indexes, checkpoints), before
    /// the process umask. Default 0o600: owner-only, as log data is users' data.
    pub file_mode: u32,
    /// Permission bits of the directories it creates (the data directory if missing, partition
    /// directories). Default 0o700.
    pub dir_mode: u32,
    /// Pages behind each shard's index arena; [`Engine::index_memory`] says what it got.
    /// Default `Auto`: explicit huge pages if reserved, else transparent, else normal.
    pub huge_pages: crate::io::HugePages,
    /// Memory for sealed segments' indexes, split evenly across shards; past it the least
    /// recently used are evicted and load again on next use. Default 1 GiB.
    pub index_memory_budget_bytes: u64,
    /// Segment files a shard keeps open, split evenly across shards: its active `.log`s (always
    /// open) and the files opened on use (sealed `.log`s, index files), which get what the active
    /// ones leave but never less than a quarter of the shard's limit; idle ones are closed first.
    /// Default half the process's soft descriptor limit ([`crate::io::max_open_files_for`]).
    pub max_open_files: usize,
    /// Lock index memory (`mlock2` with `MLOCK_ONFAULT`), so no index page is ever swapped out.
    /// Default false.
    pub lock_index_memory: bool,
    /// The partitions have no followers (a single-node broker, Kafka's leader whose in-sync
    /// replicas are itself): each partition's high watermark is its log end when it opens, and
    /// every acknowledged append moves it to the append's end, before the append's completion
    /// resolves. So fetches bounded by the high watermark see exactly the acknowledged records
    /// (Kafka moves it at the append, before any fsync; here it waits for the durability the
    /// engine was asked for). Default false: the embedder moves it ([`crate::log::Log::set_high_watermark`]
    /// through [`super::Engine::with_log`]) as its followers catch up.
    pub single_replica: bool,
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
            tail_cache_budget_bytes: 64 << 20,
            write_buffer_budget_bytes: 256 << 20,
            simulate_uring_refusal: false,
            file_mode: crate::io::select::DEFAULT_FILE_MODE,
            dir_mode: crate::io::select::DEFAULT_DIR_MODE,
            idle_spin_us: 50,
            io_spin_us: 200,
            checkpoint_interval_ms: 60_000,
            retention_check_interval_ms: 300_000,
            recovery_threads_per_partition: 1,
            open_threads_per_shard: 8,
            huge_pages: crate::io::HugePages::Auto,
            index_memory_budget_bytes: 1 << 30,
            max_open_files: crate::io::FileCache::default_limit(),
            lock_index_memory: false,
            single_replica: false,
        }
    }
}

impl EngineConfig {
    /// Checks every setting (and `log_config`) together; [`Engine::open`] calls it first. An
    /// error names the setting and the range it must be in; nothing was created or opened.
    pub(crate) fn validate(&self) -> Result<()> {
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
        if self.write_buffer_budget_bytes < self.tail_cache_budget_bytes.saturating_mul(2) {
            // A tail cache of share S holds up to S plus a chunk: the caches alone can take
            // twice their budget of the write buffers, and appends would wait at every turn.
            return bad(
                "write_buffer_budget_bytes",
                format!(
                    "{}: at least twice tail_cache_budget_bytes ({}), whose chunks count toward it",
                    self.write_buffer_budget_bytes, self.tail_cache_budget_bytes
                ),
            );
        }
        if self.open_threads_per_shard == 0 {
            return bad("open_threads_per_shard", "= 0: at least 1".into());
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
