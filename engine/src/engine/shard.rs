//! One shard: a thread pinned to a core, owning its partitions' logs. See the engine module docs
//! for the loop.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::{Receiver, TryRecvError};

use super::epoch_writer::EpochWriter;
use super::flush::{Flusher, SharedFlush, Unflushed};
use super::request::{AppendFrom, FetchUpper, OpenRequest};
use super::{Doorbell, Durability, EngineConfig, Request, SyncMethod, TopicPartition};
use crate::completion::Completer;
use crate::config::LogConfig;
use crate::error::{Error, Result};
use crate::io::{IoMode, Storage};
use crate::log::{AppendInfo, FetchData, Log, LogOptions};
use crate::segment::RefillPace;

use super::busy_refills::{BusyRefillChoice, BusyRefillTrial, TimedWrite};

/// Counters of one shard.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ShardStats {
    pub shard: usize,
    /// The core the shard is pinned to, if pinned.
    pub core: Option<usize>,
    pub io_mode: Option<IoMode>,
    pub partitions: usize,
    pub requests: u64,
    /// Loop turns that did work.
    pub turns: u64,
    pub appended_batches: u64,
    pub appended_bytes: u64,
    pub fetches: u64,
    /// Fetches answered entirely from the tail cache.
    pub tail_cache_hits: u64,
    /// I/O operations issued by this shard's thread.
    pub io_ops: u64,
    /// System calls that submit or wait for I/O (io_uring_enter in the io_uring modes).
    pub io_enters: u64,
    pub bytes_written: u64,
    pub bytes_read: u64,
    /// fsyncs and fdatasyncs issued by the shard's thread (a shared syncfs runs on its flusher
    /// thread and is counted in `shared_flushes` instead).
    pub fsyncs: u64,
    /// Write operations handed to the kernel.
    pub writes: u64,
    /// Partition flushes started: one per partition write (plus fsync) batch, however many
    /// write operations it took (a flush crossing a tail chunk boundary takes two). Under
    /// [`SyncMethod::Syncfs`] the batch has no fsync of its own: see `shared_flushes`.
    pub flushes: u64,
    /// Zero-fill refills started (each a batch of writes of zeros ahead of a partition's data;
    /// see [`crate::ZeroFill`]).
    pub zero_fills: u64,
    /// Shared flushes started ([`SyncMethod::Syncfs`]): one syncfs of the data directory's
    /// filesystem each, covering the appends of every partition of the shard whose write
    /// completed before it.
    pub shared_flushes: u64,
    /// The shard's write buffers: registered with its ring (fixed buffers) or not, and why.
    pub write_buffers: crate::io::PoolStats,
    /// How long each partition write took, from the shard handing it to the kernel (the start of
    /// the submission, which in sync mode performs it) to the shard seeing it complete (with its
    /// RWF_DSYNC or fdatasync when durable): the device's and the kernel's share of an append's
    /// latency. The rest of an append's time is the engine's (queueing, the hand-off to the shard
    /// and back) or waiting for the write before it. Zero-fill refills are not timed on their
    /// own, but a write submitted with one includes issuing it and, when durable, flushing it.
    /// Under [`SyncMethod::Syncfs`] the write alone: its syncfs is in `flush_latency`.
    pub write_latency: crate::LatencyHistogram,
    /// How long each shared flush ([`SyncMethod::Syncfs`]) took, from the shard asking its
    /// flusher thread for it to the shard seeing its outcome. An append's durability waits for
    /// its write and then for up to two of these (the one in flight when its write completed,
    /// then its own).
    pub flush_latency: crate::LatencyHistogram,
    /// Loop rounds that began with requests a turn left because the shard's write buffers were
    /// over `EngineConfig::write_buffer_budget_bytes` (each collects completed writes first,
    /// and waits for one if none had completed).
    pub budget_waits: u64,
    /// Partitions looked at for a completed write: one per write where the storage names the
    /// batches that completed (the io_uring modes), plus those of `completion_sweeps`.
    pub completion_checks: u64,
    /// Times every partition with a write in flight was looked at: at each loop turn where the
    /// storage cannot name the batches that completed; where it can, only as a backstop after
    /// a second of writes in flight with none found done (at most once a second).
    pub completion_sweeps: u64,
    /// Logs looked at by the shard's timed work (at most every 10 ms; an idle shard's each time
    /// its wait of up to 100 ms ends): only those that may have a flush due or deleted files
    /// waiting ([`Log::has_timed_work`]), so that idle partitions add nothing. A retention
    /// pass's walk over every log is not counted.
    pub timed_work_visits: u64,
    /// Under [`crate::ZeroFill::Auto`], whether a busy partition writing alone takes refills,
    /// as the shard's last trial of both on its device chose, with what it measured (`None`
    /// before the first choice, and under any other setting).
    pub busy_refills: Option<BusyRefillChoice>,
}

/// A partition's write in flight: when it was handed to the kernel, the appends it carries, and
/// its batch's [`AsyncIo::key`] (`None`: done at submission).
struct WriteInFlight {
    submitted: std::time::Instant,
    acks: Vec<Ack>,
    key: Option<u64>,
    /// A busy partition's write timed for the shard's [`BusyRefillTrial`].
    timed: Option<TimedWrite>,
}

pub(crate) struct Shard {
    core: Option<usize>,
    rx: Receiver<Request>,
    bell: Arc<Doorbell>,
    storage: Arc<dyn Storage>,
    /// The engine's lock of the data directory, handed to every log opened here.
    dir_lock: Arc<crate::io::lock::LockGuard>,
    /// The index arena, index budget and file limit its logs share.
    resources: crate::segment::SegmentResources,
    data_dir: std::path::PathBuf,
    default_config: LogConfig,
    durability: Durability,
    sync_method: SyncMethod,
    /// [`super::EngineConfig::single_replica`]: acknowledgements move the high watermark.
    single_replica: bool,
    /// The most of its tail each partition keeps in memory, and the budget its partitions share
    /// ([`tail_cache_share`]).
    tail_cache_bytes: u64,
    tail_cache_budget: u64,
    /// What each open log keeps now ([`tail_cache_share`]).
    tail_cache_share: u64,
    /// Write-buffer chunks in use past which the shard takes no more appends until writes
    /// complete, when it has writes in flight or appends of the turn to write
    /// ([`EngineConfig::write_buffer_budget_bytes`]).
    write_buffer_budget: usize,
    /// Appends taken since the budget was last looked at.
    appends_unchecked: usize,
    /// The zero-fill lead shared by the logs open here (0 for none): each keeps up to its share
    /// ([`zero_fill_share`]).
    zero_fill_bytes: u32,
    /// The partition whose zero-fill refill may still be in flight: one at a time per shard, so
    /// the zeros in the device's queue in front of an append are at most one partition's burst
    /// or one paced write; none paced while many writes share the device ([`RefillGate`]).
    refilling: Option<TopicPartition>,
    /// Whether paced refills may go out: not while the device is crowded with data writes.
    refill_gate: RefillGate,
    /// The share of `zero_fill_bytes` each open log keeps now ([`zero_fill_share`]).
    zero_fill_share: u32,
    /// How far past its data each open log keeps its O_DIRECT `.log`'s length now
    /// ([`length_lead_share`]).
    length_lead_share: u32,
    /// How many appends each partition's last write carried (zero fill gives a partition whose
    /// appends queue a small refill only while it writes alone, [`BUSY_ZERO_FILL_LEAD`]).
    last_write_appends: HashMap<TopicPartition, usize>,
    /// Under [`crate::ZeroFill::Auto`] with zero fill on, whether a busy partition writing
    /// alone takes refills, measured on the device (busy_refills.rs); `None` under any other
    /// setting (with zero fill on it then always does).
    busy_trial: Option<BusyRefillTrial>,
    idle_spin: Duration,
    io_spin: Duration,
    recovery_threads: usize,
    /// Threads loading a batch of partitions' logs at once ([`Shard::open_group`]), and
    /// closing them at shutdown.
    open_threads: usize,
    /// The affinity the shard had before it pinned itself, for the threads it starts to load and
    /// close logs (`None`: unpinned, they inherit it).
    helper_affinity: Option<nix::sched::CpuSet>,
    retention_check_interval_ms: i64,
    next_retention_ms: i64,
    last_periodic: std::time::Instant,
    logs: HashMap<TopicPartition, Log>,
    /// The open logs that may have timed work to do ([`Log::has_timed_work`]): a flush that
    /// `flush.ms` or `flush.messages` may call for, or deleted files waiting for their delay.
    /// Only these are looked at every tick of [`Shard::periodic`], so that idle partitions
    /// cost the shard nothing between retention passes.
    timed: HashSet<TopicPartition>,
    /// Partitions closed by [`super::Engine::close_partition`] (or to be opened again after a
    /// failure), until they are opened again.
    closed: HashMap<TopicPartition, Closed>,
    /// Appends done in memory whose write has not been started yet, per partition.
    waiting: HashMap<TopicPartition, Vec<Ack>>,
    /// Appends covered by the partition's write in flight (one per partition at a time), with
    /// the moment it was handed to the kernel.
    in_flight: HashMap<TopicPartition, WriteInFlight>,
    /// The storage names the batches that completed ([`Storage::take_finished_async`]): only
    /// their partitions are looked at for completions, not every one in flight.
    tracks_finished: bool,
    /// When a looked-at write was last found done, and when every partition in flight was last
    /// looked at: a backstop should a completion ever go unnamed (a ring that could not be
    /// replaced) is a look at all of them after a second without one, at most once a second.
    last_progress: std::time::Instant,
    last_sweep: std::time::Instant,
    /// The partition of each data batch in flight, by [`AsyncIo::key`] (when `tracks_finished`).
    batch_owner: HashMap<u64, TopicPartition>,
    /// Partitions whose write was done when it was submitted (no key), to acknowledge next.
    done_at_submit: Vec<TopicPartition>,
    /// Reused for the ids [`Storage::take_finished_async`] hands back.
    finished_ids: Vec<u64>,
    /// The shared flush of [`SyncMethod::Syncfs`] under [`Durability::EveryBatch`]: appends
    /// whose write completed wait in it for a syncfs. `None` under any other setting.
    shared: Option<SharedFlush>,
    /// Writes the logs' `leader-epoch-checkpoint` files off the shard (epoch_writer.rs).
    epochs: EpochWriter,
    stats: ShardStats,
}

/// A partition closed while the engine runs: what its next open needs, and what the checkpoints
/// keep saying about it meanwhile.
/// A log to load ([`Shard::open_options`]): where and how, and what its close in this run left
/// (put back if the load fails).
struct Load {
    tp: TopicPartition,
    options: LogOptions,
    before: Option<Closed>,
}

#[derive(Clone, Debug)]
struct Closed {
    recovery_point: i64,
    log_start_offset: i64,
    end: i64,
    config: LogConfig,
    /// Closed cleanly (everything fsynced, indexes final); a failed log is not.
    clean: bool,
}

/// What a shard's logs do their I/O through and hold their segments under: the storage (with
/// the shard thread's ring behind it in the io_uring modes), the index arena, index budget and
/// file limit its logs share, and the data directory's lock they open under.
pub(crate) struct ShardIo {
    pub storage: Arc<dyn Storage>,
    pub resources: crate::segment::SegmentResources,
    pub dir_lock: Arc<crate::io::lock::LockGuard>,
}

/// An append to acknowledge once the write (and, when durable, the fdatasync or syncfs) covering
/// it is done.
pub(super) type Ack = (crate::completion::Completer<AppendInfo>, AppendInfo);

impl Shard {
    pub(crate) fn new(
        id: usize,
        core: Option<usize>,
        rx: Receiver<Request>,
        bell: Arc<Doorbell>,
        io: ShardIo,
        config: &EngineConfig,
    ) -> Result<Shard> {
        let ShardIo { storage, resources, dir_lock } = io;
        let zero_fill_bytes = config.zero_fill.lead_bytes(config.durability, storage.mode());
        // The `negative-control` feature (TEST ONLY, see start_writes) syncs nothing.
        let shared = if config.durability == Durability::EveryBatch
            && config.sync_method == SyncMethod::Syncfs
            && !cfg!(feature = "negative-control")
        {
            Some(SharedFlush::new(Flusher::spawn(id, &*storage, config.data_dir.clone(), bell.clone())?))
        } else {
            None
        };
        let epochs = EpochWriter::spawn(id, storage.clone(), bell.clone())?;
        Ok(Shard {
            shared,
            epochs,
            resources,
            core,
            rx,
            bell,
            data_dir: config.data_dir.clone(),
            default_config: config.log_config.clone(),
            durability: config.durability,
            sync_method: config.sync_method,
            single_replica: config.single_replica,
            tail_cache_bytes: config.tail_cache_bytes,
            tail_cache_budget: config.tail_cache_budget_bytes,
            tail_cache_share: 0,
            write_buffer_budget: (config.write_buffer_budget_bytes / crate::io::pool::CHUNK_BYTES as u64).max(1)
                as usize,
            appends_unchecked: 0,
            zero_fill_bytes,
            busy_trial: (config.zero_fill == super::ZeroFill::Auto && zero_fill_bytes > 0)
                .then(BusyRefillTrial::default),
            idle_spin: Duration::from_micros(config.idle_spin_us),
            io_spin: Duration::from_micros(config.io_spin_us),
            recovery_threads: config.recovery_threads_per_partition.max(1),
            open_threads: config.open_threads_per_shard.max(1),
            helper_affinity: None,
            retention_check_interval_ms: config.retention_check_interval_ms.min(i64::MAX as u64) as i64,
            // The first pass comes one interval after the shard starts, not at once (Kafka waits
            // its initial task delay too): opening a directory never deletes data on the spot.
            next_retention_ms: crate::config::Clock::now_ms(&crate::config::SystemClock)
                .saturating_add(config.retention_check_interval_ms.min(i64::MAX as u64) as i64),
            last_periodic: std::time::Instant::now(),
            stats: ShardStats { shard: id, core, io_mode: Some(storage.mode()), ..Default::default() },
            storage,
            dir_lock,
            logs: HashMap::new(),
            timed: HashSet::new(),
            closed: HashMap::new(),
            waiting: HashMap::new(),
            in_flight: HashMap::new(),
            tracks_finished: false,
            last_progress: std::time::Instant::now(),
            last_sweep: std::time::Instant::now(),
            batch_owner: HashMap::new(),
            done_at_submit: Vec::new(),
            finished_ids: Vec::new(),
            refilling: None,
            last_write_appends: HashMap::new(),
            zero_fill_share: 0,
            length_lead_share: 0,
            refill_gate: RefillGate::default(),
        })
    }

    pub(crate) fn run(mut self) {
        if let Some(core) = self.core {
            self.helper_affinity = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)).ok();
            if !super::topology::pin_current_thread(core) {
                self.core = None;
                self.stats.core = None;
            }
        }
        // On this thread: its ring counts the batches that complete from here on.
        self.tracks_finished = self.storage.take_finished_async(&mut self.finished_ids);
        let mut batch = std::collections::VecDeque::new();
        loop {
            let mut disconnected = false;
            let left_over = !batch.is_empty();
            if left_over {
                // A turn stopped at the write-buffer budget: its requests wait for writes to
                // complete and give their chunks back (with none in flight, no wait). The
                // queue is left alone meanwhile: it is bounded, so the senders wait too
                // (`EngineConfig::queue_capacity`), and what they send is not held here.
                self.stats.budget_waits += 1;
                if !self.poll_writes() && !self.in_flight.is_empty() {
                    crate::io::wait_doorbell_or_io(&self.bell.fd, self.storage.mode(), Duration::from_millis(1));
                }
            }
            if !left_over {
                loop {
                    match self.rx.try_recv() {
                        Ok(r) => {
                            self.stats.requests += 1;
                            batch.push_back(r);
                        }
                        Err(TryRecvError::Empty) => break,
                        Err(TryRecvError::Disconnected) => {
                            disconnected = true;
                            break;
                        }
                    }
                }
            }
            if batch.is_empty() {
                if self.poll_writes() {
                    continue;
                }
                if disconnected {
                    // The engine is gone without a shutdown request: close cleanly anyway.
                    self.drain_writes();
                    let _ = self.close_all();
                    return;
                }
                // Spin briefly first: a request arriving within the spin window costs no
                // doorbell write and no wake-up, and a write completing within it no wake-up.
                let flushing = self.shared.as_ref().is_some_and(|f| f.started.is_some());
                let writing = !self.in_flight.is_empty() || flushing;
                let spin = if writing {
                    // Appends waiting for a partition's next write: they queue.
                    io_spin_for(self.io_spin, self.in_flight.len(), !self.waiting.is_empty())
                } else {
                    self.idle_spin
                };
                if spin.as_nanos() > 0 {
                    let until = std::time::Instant::now() + spin;
                    let work = |s: &Self| {
                        !s.rx.is_empty()
                            || (writing && s.storage.completions_waiting())
                            || (flushing && s.flush_done())
                            || s.epochs.done()
                    };
                    while !work(&self) && std::time::Instant::now() < until {
                        // Yield the core on each round rather than spin on it: a write the kernel
                        // could not issue without blocking (one that extends the file, on ext4)
                        // runs on an io-wq worker bound to this core, and on a machine with more
                        // threads than cores the caller may be waiting for this very core.
                        // Yielding with nothing else runnable returns at once (~1 us).
                        std::thread::yield_now();
                    }
                    if !self.rx.is_empty() || self.poll_writes() {
                        continue;
                    }
                }
                self.bell.sleeping.store(true, Ordering::SeqCst);
                // A flush completing after this look rings the doorbell (flush.rs).
                if self.rx.is_empty() && !self.flush_done() && !self.epochs.done() {
                    // One wait for both: a request (the doorbell) or a write completing.
                    crate::io::wait_doorbell_or_io(&self.bell.fd, self.storage.mode(), Duration::from_millis(100));
                }
                self.bell.sleeping.store(false, Ordering::SeqCst);
                self.poll_writes();
                if self.last_periodic.elapsed() >= Duration::from_millis(10) {
                    self.periodic();
                }
                continue;
            }
            self.stats.turns += 1;
            if self.turn(&mut batch) {
                return;
            }
            self.poll_writes();
            // Under constant load the idle path never runs: do the timed work here too.
            if self.last_periodic.elapsed() >= Duration::from_millis(10) {
                self.periodic();
            }
        }
    }

    /// Closes every log; returns (partition, log end, log start) of each.
    /// A partition closed earlier counts as closed cleanly only if it was; one that was failed
    /// fails the whole close, so no clean-shutdown marker tells the next start to trust it.
    fn close_all(&mut self) -> Result<Vec<(TopicPartition, i64, i64)>> {
        // Each log writes its epoch checkpoint itself at close: none of its writes may be out.
        let _ = self.epochs.settle(None, &mut self.logs);
        let mut first = None;
        let mut closed = Vec::new();
        for (tp, c) in self.closed.drain() {
            if c.clean {
                closed.push((tp, c.end, c.log_start_offset));
            } else {
                first.get_or_insert(Error::Failed {
                    dir: self.data_dir.join(tp.dir_name()),
                    reason: "closed after a failed write; not recovered since".into(),
                });
            }
        }
        // Each close writes and fsyncs its files: side by side, as the opens load. A refill in
        // flight can only be completed here, on the thread that submitted it (the writes were
        // drained before).
        for log in self.logs.values_mut() {
            log.settle_zero_fill();
        }
        self.refilling = None;
        let logs: Vec<_> = self.logs.drain().collect();
        let close = |(tp, log): (TopicPartition, Log)| {
            let (leo, start) = (log.log_end_offset(), log.log_start_offset());
            (tp, leo, start, log.close())
        };
        in_parallel(logs, self.open_threads, self.helper_affinity.as_ref(), close, |(tp, leo, start, r)| match r {
            Ok(()) => closed.push((tp, leo, start)),
            Err(e) => {
                first.get_or_insert(e);
            }
        });
        match first {
            Some(e) => Err(e),
            None => Ok(closed),
        }
    }

    /// Timed work: group-commit fsyncs that are due, retention, expired `.deleted` files. Every
    /// tick looks only at the logs in [`Shard::timed`]; a retention pass, every
    /// `retention_check_interval_ms`, looks at all of them.
    fn periodic(&mut self) {
        self.last_periodic = std::time::Instant::now();
        let now = crate::config::Clock::now_ms(&crate::config::SystemClock);
        let interval = self.flush_interval();
        if now >= self.next_retention_ms {
            self.next_retention_ms = now.saturating_add(self.retention_check_interval_ms);
            for (tp, log) in self.logs.iter_mut() {
                let _ = log.apply_retention();
                list_timed(&mut self.timed, tp, log, interval);
            }
        }
        let logs = &mut self.logs;
        let visits = &mut self.stats.timed_work_visits;
        self.timed.retain(|tp| {
            let Some(log) = logs.get_mut(tp) else { return false };
            *visits += 1;
            if log.flush_due(now, interval) {
                let _ = log.flush();
            }
            if log.pending_deletions() > 0 {
                let _ = log.delete_expired_files();
            }
            log.timed_listed = log.has_timed_work(interval);
            log.timed_listed
        });
    }

    /// The engine-wide flush interval `(flush_ms, flush_messages)` of [`Durability::Interval`].
    fn flush_interval(&self) -> Option<(i64, i64)> {
        match self.durability {
            Durability::Interval { flush_ms, flush_messages } => Some((flush_ms, flush_messages)),
            _ => None,
        }
    }

    /// Runs one turn's requests, in order; true when the shard must stop. An append that finds
    /// the shard's write buffers over budget, with writes in flight or appends of this turn to
    /// write, ends the turn: it and the requests after it stay in `batch` for the next one.
    fn turn(&mut self, batch: &mut std::collections::VecDeque<Request>) -> bool {
        let mut dirty: BTreeSet<TopicPartition> = BTreeSet::new();
        let mut stop = None;
        // The budget is looked at every few appends, counted across turns (a 64th of it, in
        // chunks: each append takes at most two, so the pool passes it by at most 1/32), so
        // that a large budget costs the hot path nothing.
        let check_every = (self.write_buffer_budget / 64).max(1);
        while let Some(req) = batch.pop_front() {
            // Over budget, the appends wait for chunks to come back: from the writes in flight,
            // or from this turn's, which end the turn to start. With neither, the budget is
            // held by tail caches, and appends go on. After a shutdown request nothing waits:
            // the turn runs to its end, as it always did.
            if matches!(req, Request::Append { .. }) && stop.is_none() {
                self.appends_unchecked += 1;
                if self.appends_unchecked >= check_every {
                    if (!dirty.is_empty() || !self.in_flight.is_empty())
                        && crate::io::pool::thread_chunks_in_use() >= self.write_buffer_budget
                    {
                        // Looked at again first thing next turn.
                        self.appends_unchecked = check_every - 1;
                        batch.push_front(req);
                        break;
                    }
                    self.appends_unchecked = 0;
                }
            }
            match req {
                Request::Open(req, done) => {
                    // The opens queued right behind this one, of other partitions, load with it.
                    let mut group = vec![(req, done)];
                    while group.len() < MAX_OPEN_GROUP {
                        match batch.pop_front() {
                            Some(Request::Open(r, done)) if group.iter().all(|(g, _)| g.tp != r.tp) => {
                                group.push((r, done))
                            }
                            Some(other) => {
                                batch.push_front(other);
                                break;
                            }
                            None => break,
                        }
                    }
                    self.open_group(group);
                }
                Request::Close { tp, done } => done.complete(self.close(&tp)),
                Request::Delete { tp, done } => done.complete(self.delete(&tp)),
                Request::Failed { done } => {
                    let v = self
                        .logs
                        .iter()
                        .filter_map(|(tp, l)| l.failure().map(|r| (tp.clone(), r.to_string())))
                        .collect();
                    done.complete(Ok(v));
                }
                Request::Offsets { done } => {
                    let open = self
                        .logs
                        .iter()
                        .map(|(tp, l)| (tp.clone(), l.checkpointed_recovery_point(), l.log_start_offset()));
                    let closed = self.closed.iter().map(|(tp, c)| (tp.clone(), c.recovery_point, c.log_start_offset));
                    done.complete(Ok(open.chain(closed).collect()));
                }
                Request::WithLog { tp, f } => self.with_log(tp, f, &mut dirty),
                Request::Append { tp, records, from, done } => self.append(tp, records, from, done, &mut dirty),
                Request::Fetch { tp, offset, max_bytes, upper, min_one, done } => {
                    done.complete(self.fetch(&tp, offset, max_bytes, upper, min_one))
                }
                Request::ListOffset { tp, target, isolation, done } => {
                    done.complete(match (self.logs.get(&tp), isolation) {
                        (Some(log), None) => log.offset_for_time(target),
                        (Some(log), Some(i)) => log.offset_for_time_isolated(target, i),
                        (None, _) => Err(unknown(&tp)),
                    });
                }
                Request::Flush { done } => {
                    let mut r = Ok(());
                    for (tp, log) in self.logs.iter_mut() {
                        if let Err(e) = log.flush() {
                            r = Err(e);
                        }
                        self.epochs.submit(tp, log);
                    }
                    // The epoch checkpoints too, so that the recovery points recorded next are
                    // the log ends.
                    let epochs = self.epochs.settle(None, &mut self.logs);
                    done.complete(r.and(epochs));
                }
                Request::Partitions { done } => {
                    let v = self
                        .logs
                        .iter()
                        .map(|(tp, l)| (tp.clone(), l.log_start_offset(), l.log_end_offset()))
                        .collect();
                    done.complete(Ok(v));
                }
                Request::Stats { done } => done.complete(Ok(self.snapshot_stats())),
                Request::Shutdown { done } => stop = Some(done),
            }
        }
        self.start_writes(dirty);
        if let Some(done) = stop {
            self.drain_writes();
            done.complete(self.close_all());
            return true;
        }
        false
    }

    /// Runs an embedder's closure on a log; an append it made still reaches the file.
    fn with_log(&mut self, tp: TopicPartition, f: super::request::LogFn, dirty: &mut BTreeSet<TopicPartition>) {
        let before = self.logs.get(&tp).map(|l| l.log_end_offset());
        f(self.logs.get_mut(&tp));
        let interval = self.flush_interval();
        if let (Some(log), Some(before)) = (self.logs.get_mut(&tp), before) {
            list_timed(&mut self.timed, &tp, log, interval);
            // A truncation: what waits for a shared flush covers no offset past the cut (the
            // offsets appended there after it are other bytes, written after that flush).
            if let Some(shared) = self.shared.as_mut().filter(|_| log.log_end_offset() < before) {
                shared.truncated(&tp, log.log_end_offset());
            }
            self.epochs.submit(&tp, log);
            if log.unwritten_bytes() > 0 {
                dirty.insert(tp);
            }
        }
    }

    /// Appends to the partition's memory tail; the append is acknowledged once the turn's write
    /// covering it completes ([`Shard::poll_writes`]).
    fn append(
        &mut self,
        tp: TopicPartition,
        mut records: Vec<u8>,
        from: AppendFrom,
        done: crate::completion::Completer<AppendInfo>,
        dirty: &mut BTreeSet<TopicPartition>,
    ) {
        let interval = self.flush_interval();
        let Some(log) = self.logs.get_mut(&tp) else {
            done.complete(Err(unknown(&tp)));
            return;
        };
        let r = match from {
            AppendFrom::Leader(epoch) => log.append_as_leader(&mut records, epoch),
            AppendFrom::Coordinator(marker, epoch) => log.append_txn_marker(&marker, epoch),
            AppendFrom::Follower => log.append_as_follower(&records),
        };
        match r {
            Ok(info) => {
                // A new leader epoch: its checkpoint is written off the shard.
                self.epochs.submit(&tp, log);
                self.stats.appended_batches += info.batches as u64;
                self.stats.appended_bytes += info.bytes;
                list_timed(&mut self.timed, &tp, log, interval);
                // One clone of the name per partition and turn, not per append.
                if !dirty.contains(&tp) {
                    dirty.insert(tp.clone());
                }
                self.waiting.entry(tp).or_default().push((done, info));
            }
            Err(e) => {
                // Refused after its batches went in (a producer-state step failing after the
                // append; an I/O error failed the log instead): they are in the log all the
                // same, so they are written and flushed as any others.
                list_timed(&mut self.timed, &tp, log, interval);
                if log.unwritten_bytes() > 0 && !dirty.contains(&tp) {
                    dirty.insert(tp);
                }
                done.complete(Err(e));
            }
        }
    }

    /// Reads from the partition, counting a read served with no I/O and no read-ahead (from the
    /// tail cache) by this thread's I/O counters.
    fn fetch(
        &mut self,
        tp: &TopicPartition,
        offset: i64,
        max_bytes: u32,
        upper: FetchUpper,
        min_one: bool,
    ) -> Result<FetchData> {
        self.stats.fetches += 1;
        let log = self.logs.get(tp).ok_or_else(|| unknown(tp))?;
        let before = crate::io::thread_stats().ops;
        let ra_before = crate::io::readahead::thread_stats().used;
        let r = match upper {
            FetchUpper::Offset(bound) => log.read(offset, max_bytes, bound, min_one),
            FetchUpper::Isolation(isolation) => log.fetch(offset, max_bytes, isolation, min_one),
        };
        if crate::io::thread_stats().ops == before && crate::io::readahead::thread_stats().used == ra_before {
            self.stats.tail_cache_hits += 1;
        }
        r
    }

    /// Hands the appended bytes of every dirty partition without a write in flight to the kernel
    /// in one submission, without waiting (linked to an fdatasync per partition under
    /// `Durability::EveryBatch` or when an interval flush is due). Their appends are acknowledged
    /// by [`Shard::poll_writes`] when the writes complete; a partition with a write in flight
    /// keeps its appends waiting for the next one (one write in flight per partition: each write
    /// rewrites the partial block the previous one ended in, so two must never race).
    fn start_writes(&mut self, dirty: BTreeSet<TopicPartition>) {
        if dirty.is_empty() {
            return;
        }
        // The `negative-control` feature is TEST ONLY: EveryBatch then acknowledges without the
        // fdatasync, so the power-cut tests can show that they catch a missing fsync.
        let every_batch = self.durability == Durability::EveryBatch && !cfg!(feature = "negative-control");
        let interval = self.flush_interval();
        let now = crate::config::Clock::now_ms(&crate::config::SystemClock);
        // Each write started: its partition, the offset its sync covers, whether the trial
        // times it.
        let mut started: Vec<(TopicPartition, Option<i64>, Option<TimedWrite>)> = Vec::new();
        let mut batches = Vec::new();
        // Other partitions' writes share the device when some are in flight or written this
        // turn: a refill is then paced, and a busy partition takes none.
        let shared = !self.in_flight.is_empty() || dirty.len() > 1;
        let pace = if shared { RefillPace::Paced } else { RefillPace::Burst };
        // At most one refill a turn, of the first partition written whose refill is due, and
        // one in flight per shard; a paced one only while the device is not crowded. It goes
        // after the data batches, as a batch of its own: no acknowledgement waits for it (the
        // flush of a durable write issued with it carries its zeros).
        let mut refill: Option<(TopicPartition, Vec<crate::io::IoOp>)> = None;
        let mut may_refill = self.zero_fill_bytes > 0
            && (!shared || {
                // Writes in flight plus those starting. The sum with every dirty partition counts
                // those in flight twice; only when it reaches the crowd is the exact count taken.
                let writes = match self.in_flight.len() + dirty.len() {
                    n if n < CROWDED_WRITES => n,
                    _ => self.in_flight.len() + dirty.iter().filter(|tp| !self.in_flight.contains_key(*tp)).count(),
                };
                self.refill_gate.paced(writes, std::time::Instant::now)
            })
            && !self.refill_in_flight();
        for tp in dirty {
            if self.in_flight.contains_key(&tp) {
                continue;
            }
            let Some(log) = self.logs.get_mut(&tp) else {
                let acks = self.waiting.remove(&tp).unwrap_or_default();
                fail_acks(acks, &self.data_dir, &tp, "the partition is not open".into());
                continue;
            };
            // Group commit: one fdatasync covers every batch of this log appended so far. Under
            // Syncfs the write is plain and the shared flush after it covers it (`acknowledge`).
            let sync = (every_batch && self.shared.is_none()) || log.flush_due(now, interval);
            // RWF_DSYNC writes replace the fdatasync only when everything written before them is
            // already durable (after a reopen or an unsynced write, one fdatasync first).
            let dsync = sync && self.sync_method == SyncMethod::DsyncWrites && log.active_segment().written_is_synced();
            match log.take_writes(0, sync) {
                Ok(ops) if ops.is_empty() => {
                    // Already in the file (a roll or flush wrote it) and nothing to sync; under
                    // Syncfs what is written past the recovery point waits for the shared flush.
                    let acks = self.waiting.remove(&tp).unwrap_or_default();
                    written(&mut self.shared, log, tp, acks, self.single_replica);
                }
                Ok(ops) => {
                    let ops = if dsync { dsync_writes(ops) } else { ops };
                    // A partition whose appends do not queue (this write and its last one carry at
                    // most one each) may take a refill of its whole share of the lead (paced, of
                    // a small lead: `PACED_REFILL_LEAD`); a busy one a small one, only while it
                    // writes alone (`BUSY_ZERO_FILL_LEAD`), and under zero fill auto only while
                    // the shard's trial finds its writes faster for it (`BusyRefillTrial`).
                    let queued = self.zero_fill_bytes > 0 && {
                        let carried = self.waiting.get(&tp).map_or(0, Vec::len);
                        let last = match self.last_write_appends.get_mut(&tp) {
                            Some(n) => std::mem::replace(n, carried),
                            None => {
                                self.last_write_appends.insert(tp.clone(), carried);
                                carried
                            }
                        };
                        carried.max(last) > 1
                    };
                    let busy_bytes = if queued && !shared { small_write_bytes(&ops) } else { None };
                    let (busy_refills, timed) = match (&mut self.busy_trial, busy_bytes) {
                        (Some(t), Some(bytes)) => t.side(bytes, std::time::Instant::now),
                        _ => (true, None),
                    };
                    let max_lead = if !may_refill {
                        None
                    } else if !queued {
                        Some(u64::MAX)
                    } else if busy_bytes.is_some() && busy_refills {
                        Some(BUSY_ZERO_FILL_LEAD)
                    } else {
                        None
                    };
                    if let Some(max_lead) = max_lead {
                        let zeros = log.take_zero_fill_within(0, max_lead, pace);
                        if !zeros.is_empty() {
                            may_refill = false;
                            refill = Some((tp.clone(), zeros));
                            if let (Some(t), Some(_)) = (&mut self.busy_trial, busy_bytes) {
                                t.refilled(busy_refills);
                            }
                        }
                    }
                    started.push((tp, sync.then_some(log.log_end_offset()), timed));
                    batches.push(ops);
                }
                Err(e) => {
                    let acks = self.waiting.remove(&tp).unwrap_or_default();
                    fail_acks(acks, &self.data_dir, &tp, e.to_string());
                }
            }
        }
        if batches.is_empty() {
            return;
        }
        self.stats.flushes += batches.len() as u64;
        let data = batches.len();
        let refill = refill.map(|(tp, zeros)| {
            self.stats.zero_fills += 1;
            self.refilling = Some(tp.clone());
            batches.push(zeros);
            tp
        });
        // Timed from before the submission: in the io_uring modes the kernel issues the writes
        // inside it, in sync mode it performs them there.
        let submitted = std::time::Instant::now();
        if self.in_flight.is_empty() {
            // The backstop's second counts from here, not from the last write before an idle
            // spell.
            self.last_progress = submitted;
        }
        let mut ios = self.storage.submit_async(batches).into_iter();
        for ((tp, synced_up_to, timed), io) in started.into_iter().zip(ios.by_ref().take(data)) {
            let key = io.key();
            if self.tracks_finished {
                match key {
                    Some(k) => {
                        let earlier = self.batch_owner.insert(k, tp.clone());
                        debug_assert!(earlier.is_none(), "batch key {k} of {tp} still names {earlier:?}");
                    }
                    None => self.done_at_submit.push(tp.clone()),
                }
            }
            let log = self.logs.get_mut(&tp).expect("checked above");
            log.writes_started(io, synced_up_to);
            let acks = self.waiting.remove(&tp).unwrap_or_default();
            self.in_flight.insert(tp, WriteInFlight { submitted, acks, key, timed });
        }
        if let Some(tp) = refill {
            let io = ios.next().expect("one outcome per batch");
            self.logs.get_mut(&tp).expect("checked above").zero_fill_started(io);
        }
    }

    /// Whether the refill started last ([`Shard::refilling`]) is still in flight.
    fn refill_in_flight(&mut self) -> bool {
        let logs = &mut self.logs;
        if self.refilling.as_ref().is_some_and(|tp| !logs.get_mut(tp).is_some_and(|log| log.zero_fill_busy())) {
            self.refilling = None;
        }
        self.refilling.is_some()
    }

    /// Gives every open log its share of the shard's zero-fill lead, tail-cache budget and
    /// length-lead budget, after the number of open logs changed.
    fn share_budgets(&mut self) {
        let tail = tail_cache_share(self.tail_cache_bytes, self.tail_cache_budget, self.logs.len());
        if tail != self.tail_cache_share {
            // Powers of two: the share changes a few times while thousands of partitions open.
            self.tail_cache_share = tail;
            for log in self.logs.values_mut() {
                log.set_tail_cache_bytes(tail);
            }
        }
        let lead = length_lead_share(self.logs.len());
        if lead != self.length_lead_share {
            self.length_lead_share = lead;
            for log in self.logs.values_mut() {
                log.set_length_lead_bytes(lead);
            }
        }
        if self.zero_fill_bytes == 0 {
            return;
        }
        let share = zero_fill_share(self.zero_fill_bytes, self.logs.len());
        if share == self.zero_fill_share {
            // Only the log just opened needs it (it was opened with it): past 256 partitions
            // the share is the floor, and opening thousands stays linear.
            return;
        }
        self.zero_fill_share = share;
        for log in self.logs.values_mut() {
            log.set_zero_fill_bytes(share);
        }
    }

    /// Acknowledges the appends of every partition whose write completed, and starts the next
    /// write of those with more appended since. True when any write completed.
    fn poll_writes(&mut self) -> bool {
        if self.epochs.busy() {
            self.epochs.poll(&mut self.logs);
        }
        let flushed = self.shared.is_some() && self.poll_flush();
        if self.in_flight.is_empty() {
            return flushed;
        }
        self.storage.poll_async();
        // This runs on every loop turn: with thousands of partitions writing, only those whose
        // batch completed are looked at; only partitions whose write is done are cloned out.
        let (logs, checks) = (&mut self.logs, &mut self.stats.completion_checks);
        let mut outcome = |tp: &TopicPartition| {
            *checks += 1;
            match logs.get_mut(tp) {
                None => Some(Err("the partition is not open".to_string())),
                Some(log) => match log.poll_writes(false) {
                    Some(r) => Some(r.map_err(|e| e.to_string())),
                    // Nothing outstanding any more (only this loop polls, so not expected).
                    None if !log.writes_outstanding() => Some(Ok(())),
                    None => None,
                },
            }
        };
        let mut done = Vec::new();
        let mut ids = std::mem::take(&mut self.finished_ids);
        let stalled = |t: std::time::Instant| t.elapsed() >= Duration::from_secs(1);
        // A sweep of every partition in flight where the storage cannot name completed batches,
        // and as the backstop; otherwise the names are taken (only then: a sweep leaves them for
        // the next turn, which skips those it already acknowledged).
        let sweep = !self.tracks_finished
            || (stalled(self.last_progress) && stalled(self.last_sweep))
            || !self.storage.take_finished_async(&mut ids);
        if !sweep {
            let named = ids.drain(..).filter_map(|id| self.batch_owner.remove_entry(&id));
            let at_submit = std::mem::take(&mut self.done_at_submit).into_iter().map(|tp| (None, tp));
            for (key, tp) in at_submit.chain(named.map(|(id, tp)| (Some(id), tp))) {
                // Only the write in flight now: not one acknowledged meanwhile (a close waited
                // for it), whose partition may have started another since.
                if self.in_flight.get(&tp).is_some_and(|w| w.key == key) {
                    if let Some(o) = outcome(&tp) {
                        done.push((tp, o));
                    }
                }
            }
        } else {
            self.last_sweep = std::time::Instant::now();
            self.stats.completion_sweeps += 1;
            // The sweep looks at these too (and a ring that cannot be had any more makes every
            // write one of them: kept, they would pile up).
            self.done_at_submit.clear();
            for tp in self.in_flight.keys() {
                if let Some(o) = outcome(tp) {
                    done.push((tp.clone(), o));
                }
            }
        }
        self.finished_ids = ids;
        let any = !done.is_empty();
        if any {
            self.last_progress = std::time::Instant::now();
        }
        let mut next = BTreeSet::new();
        for (tp, outcome) in done {
            self.acknowledge(&tp, outcome);
            if self.waiting.contains_key(&tp) || self.logs.get(&tp).is_some_and(|l| l.unwritten_bytes() > 0) {
                next.insert(tp);
            }
        }
        self.start_writes(next);
        self.start_flush();
        any || flushed
    }

    /// Completes the appends carried by `tp`'s finished write with its outcome.
    fn acknowledge(&mut self, tp: &TopicPartition, outcome: std::result::Result<(), String>) {
        let Some(WriteInFlight { submitted, acks, timed, .. }) = self.in_flight.remove(tp) else {
            return;
        };
        let took = submitted.elapsed();
        self.stats.write_latency.record(took);
        if let (Some(write), Some(t)) = (timed, &mut self.busy_trial) {
            t.record(write, took);
        }
        match (outcome, self.logs.get_mut(tp)) {
            (Ok(()), Some(log)) => written(&mut self.shared, log, tp.clone(), acks, self.single_replica),
            (Ok(()), None) => fail_acks(acks, &self.data_dir, tp, "the partition is not open".into()),
            (Err(reason), _) => fail_acks(acks, &self.data_dir, tp, reason),
        }
    }

    /// Writes (and acknowledges) everything appended: before a close. Under Syncfs the shared
    /// flushes those writes wait for too.
    fn drain_writes(&mut self) {
        loop {
            let waiting: BTreeSet<TopicPartition> =
                self.waiting.keys().filter(|tp| !self.in_flight.contains_key(*tp)).cloned().collect();
            self.start_writes(waiting);
            if self.in_flight.is_empty() && self.waiting.is_empty() {
                if !self.shared.as_ref().is_some_and(SharedFlush::pending) {
                    return;
                }
                self.wait_flush();
                continue;
            }
            self.settle_all_writes();
        }
    }

    /// Waits for `tp`'s write in flight, if any, and acknowledges (or fails) its appends.
    fn settle_write(&mut self, tp: &TopicPartition) {
        if self.in_flight.contains_key(tp) {
            // A log gone meanwhile: `acknowledge` fails the appends.
            let outcome = self.logs.get_mut(tp).and_then(|l| l.poll_writes(true)).unwrap_or(Ok(()));
            self.acknowledge(tp, outcome.map_err(|e| e.to_string()));
        }
    }

    /// [`Shard::settle_write`] of every partition with a write in flight.
    fn settle_all_writes(&mut self) {
        let writing: Vec<TopicPartition> = self.in_flight.keys().cloned().collect();
        for tp in writing {
            self.settle_write(&tp);
        }
    }

    /// Applies the outcome of the shared flush in flight if it is done, and starts the next one
    /// if appends wait for it; true when one ended.
    fn poll_flush(&mut self) -> bool {
        let ended = self.shared.as_mut().and_then(|s| s.finish(false));
        let any = ended.is_some();
        if let Some((outcome, covered, started)) = ended {
            self.finish_flush(outcome, covered, started);
        }
        self.start_flush();
        any
    }

    /// True when the shared flush in flight is done and its outcome waits for
    /// [`Shard::poll_flush`].
    fn flush_done(&self) -> bool {
        self.shared.as_ref().is_some_and(SharedFlush::done)
    }

    /// Starts a shared flush of every append written and not yet flushed, unless one is in
    /// flight (the next starts when it ends) or none waits.
    fn start_flush(&mut self) {
        if self.shared.as_mut().is_some_and(SharedFlush::start) {
            self.stats.shared_flushes += 1;
        }
    }

    /// Starts a shared flush if none is in flight and appends wait for one, then waits for the
    /// one in flight and applies its outcome (shutdown and close).
    fn wait_flush(&mut self) {
        self.start_flush();
        if let Some((outcome, covered, started)) = self.shared.as_mut().and_then(|s| s.finish(true)) {
            self.finish_flush(outcome, covered, started);
        }
    }

    /// Completes the appends a shared flush covered: on success each log's recovery point moves
    /// to what the flush covered of it; a failure is [`Shard::flush_failed`].
    fn finish_flush(&mut self, outcome: Result<()>, covered: Vec<Unflushed>, started: std::time::Instant) {
        self.stats.flush_latency.record(started.elapsed());
        match outcome {
            Ok(()) => {
                for (tp, acks, offset) in covered {
                    // A partition closed meanwhile took its appends out (`close`).
                    match self.logs.get_mut(&tp) {
                        Some(log) => {
                            log.synced_to(offset);
                            acknowledged(log, acks, self.single_replica);
                        }
                        None => acks.into_iter().for_each(|(done, info)| done.complete(Ok(info))),
                    }
                }
            }
            Err(e) => self.flush_failed(covered, e.to_string()),
        }
    }

    /// A shared flush failed. The writeback error it reports can be that of any partition whose
    /// bytes were written and not yet durable while it ran, and no later syncfs reports it
    /// again: every such partition of the shard (covered by it, written since, or with a write
    /// in flight) fails as a failed fsync fails it, rolled back to its recovery point
    /// ([`Log::sync_failed`]). The appends rolled back fail; those below (made durable
    /// meanwhile by a roll or a flush of their own) are acknowledged.
    fn flush_failed(&mut self, covered: Vec<Unflushed>, reason: String) {
        // Writes in flight end first: their appends join the unflushed ones.
        self.settle_all_writes();
        let mut entries = covered;
        if let Some(shared) = self.shared.as_mut() {
            entries.append(&mut shared.unflushed);
        }
        let tps: BTreeSet<TopicPartition> = entries.iter().map(|(tp, ..)| tp.clone()).collect();
        for tp in &tps {
            // A partition made durable meanwhile (a roll's or a flush's fsync) lost nothing.
            if let Some(log) = self.logs.get_mut(tp).filter(|l| l.recovery_point() < l.written_offset()) {
                log.sync_failed(reason.clone());
            }
        }
        for (tp, acks, _) in entries {
            let end = self.logs.get(&tp).map_or(i64::MIN, |l| l.log_end_offset());
            let (kept, lost): (Vec<Ack>, Vec<Ack>) = acks.into_iter().partition(|(_, info)| info.last_offset < end);
            if let Some(log) = self.logs.get_mut(&tp) {
                acknowledged(log, kept, self.single_replica);
            }
            fail_acks(lost, &self.data_dir, &tp, reason.clone());
        }
        // Their appends not yet written were rolled back too: take_writes fails them.
        let waiting = tps.into_iter().filter(|tp| self.waiting.contains_key(tp)).collect();
        self.start_writes(waiting);
    }

    /// Opens the partitions of `group` (distinct), loading their logs on up to `open_threads`
    /// threads at once (Kafka loads a data directory's logs on
    /// `num.recovery.threads.per.data.dir` threads): each load is file I/O one call at a time, so
    /// loads side by side keep the device busy. Each request is answered as its log is in.
    fn open_group(&mut self, group: Vec<(OpenRequest, Completer<crate::log::LoadReport>)>) {
        let mut loads = Vec::new();
        for (req, done) in group {
            match self.open_options(req) {
                Ok(Some(load)) => loads.push((load, done)),
                Ok(None) => done.complete(Ok(crate::log::LoadReport::default())),
                Err(e) => done.complete(Err(e)),
            }
        }
        // The logs open with the shares of the count after the group; share_budgets below gives
        // them to the logs open before if those changed, and the new ones get the shares of the
        // logs that did open (a load that failed counted above).
        let opening = self.logs.len() + loads.len();
        let tail = tail_cache_share(self.tail_cache_bytes, self.tail_cache_budget, opening);
        let zero_fill = zero_fill_share(self.zero_fill_bytes, opening);
        let length_lead = length_lead_share(opening);
        let data_dir = self.data_dir.clone();
        let single_replica = self.single_replica;
        let mut opened = Vec::new();
        let load = |(mut l, done): (Load, Completer<crate::log::LoadReport>)| {
            l.options.tail_cache_bytes = tail;
            l.options.zero_fill_bytes = zero_fill;
            l.options.length_lead_bytes = length_lead;
            let r = Log::open_with_report(data_dir.join(l.tp.dir_name()), l.options);
            (l.tp, l.before, r, done)
        };
        in_parallel(loads, self.open_threads, self.helper_affinity.as_ref(), load, |(tp, before, r, done)| match r {
            Ok((mut log, report)) => {
                log.defer_epoch_checkpoint();
                if single_replica {
                    // Kafka's leader with itself as the only in-sync replica moves its high
                    // watermark to its log end as it becomes leader.
                    log.set_high_watermark(log.log_end_offset());
                }
                // A loaded log has no timed work yet (nothing unflushed, no `.deleted` file
                // waiting: the load removes those), so it is not listed in `timed`.
                debug_assert!(!log.has_timed_work(Some((0, 1))), "{tp}: a loaded log with timed work");
                self.logs.insert(tp.clone(), log);
                opened.push(tp);
                done.complete(Ok(report));
            }
            Err(e) => {
                if let Some(c) = before {
                    self.closed.insert(tp, c);
                }
                done.complete(Err(e));
            }
        });
        self.share_budgets();
        if self.logs.len() < opening {
            for tp in &opened {
                let log = self.logs.get_mut(tp).expect("just opened");
                log.set_tail_cache_bytes(self.tail_cache_share);
                log.set_length_lead_bytes(self.length_lead_share);
                if self.zero_fill_bytes > 0 {
                    log.set_zero_fill_bytes(self.zero_fill_share);
                }
            }
        }
    }

    /// What opening `req` takes: `None` when its partition is open already. A failed log is
    /// closed first, to open again from where it stood.
    fn open_options(&mut self, req: OpenRequest) -> Result<Option<Load>> {
        let OpenRequest { tp, config, recovery, log_start_offset } = req;
        match self.logs.get(&tp) {
            Some(log) if log.failure().is_some() => self.close(&tp)?,
            Some(_) => return Ok(None),
            None => {}
        }
        // A partition closed in this run opens from where it stood, with its own settings, not
        // from what the data directory's files said at startup.
        let before = self.closed.remove(&tp);
        let (recovery, log_start_offset, config) = match &before {
            Some(c) => (
                crate::log::Recovery::FromRecoveryPoint(c.recovery_point),
                Some(c.log_start_offset),
                config.unwrap_or_else(|| c.config.clone()),
            ),
            None => (recovery, log_start_offset, config.unwrap_or_else(|| self.default_config.clone())),
        };
        let options = LogOptions {
            config,
            storage: self.storage.clone(),
            writes: crate::log::Writes::Caller,
            recovery,
            log_start_offset,
            recovery_threads: self.recovery_threads,
            log_dir_lock: Some(self.dir_lock.clone()),
            resources: self.resources.clone(),
            ..LogOptions::default()
        };
        Ok(Some(Load { tp, options, before }))
    }

    /// Closes `tp`'s log (see [`super::Engine::close_partition`]) after its writes: cleanly when
    /// it is not failed, else dropped as it is (the failed write was rolled back already).
    fn close(&mut self, tp: &TopicPartition) -> Result<()> {
        if !self.logs.contains_key(tp) {
            return Err(unknown(tp));
        }
        self.settle_write(tp);
        // The log writes its epoch checkpoint itself at close: none of its writes may be out.
        // (A failed write failed the log, which closes as failed.)
        let _ = self.epochs.settle(Some(tp), &mut self.logs);
        // Under Syncfs, a failed log is not fsynced at its close: its appends written before the
        // failure wait for the shared flushes instead (at most the one in flight and the next).
        while self.logs[tp].failure().is_some() && self.shared.as_ref().is_some_and(|s| s.holds(tp)) {
            self.wait_flush();
        }
        let log = self.logs.remove(tp).expect("checked above");
        self.timed.remove(tp);
        self.last_write_appends.remove(tp);
        self.share_budgets();
        // The appends written and waiting for a shared flush are settled by the close's fsync
        // (or fail with it), as those still waiting for their write.
        let mut acks = self.shared.as_mut().map(|s| s.take(tp)).unwrap_or_default();
        acks.extend(self.waiting.remove(tp).unwrap_or_default());
        let mut closed = Closed {
            recovery_point: log.checkpointed_recovery_point(),
            log_start_offset: log.log_start_offset(),
            end: log.log_end_offset(),
            config: log.config().clone(),
            clean: false,
        };
        let r = match log.failure().map(str::to_string) {
            Some(reason) => {
                // Appends not yet written were rolled back with the failed write.
                fail_acks(acks, &self.data_dir, tp, reason);
                Ok(())
            }
            // A clean close writes (and fsyncs) what the appends still waiting put in memory.
            None => match log.close() {
                Ok(()) => {
                    closed.clean = true;
                    closed.recovery_point = closed.end;
                    for (done, info) in acks {
                        done.complete(Ok(info));
                    }
                    Ok(())
                }
                Err(e) => {
                    fail_acks(acks, &self.data_dir, tp, e.to_string());
                    Err(e)
                }
            },
        };
        self.closed.insert(tp.clone(), closed);
        r
    }

    /// Deletes `tp` (see [`super::Engine::delete_partition`]): closed if open, forgotten (no
    /// checkpoint names it again), its directory renamed `<dir>.<unique>-delete` (durably, so a
    /// crash leaves a directory the next start removes, never a half-deleted partition), then
    /// removed.
    fn delete(&mut self, tp: &TopicPartition) -> Result<()> {
        let dir = self.data_dir.join(tp.dir_name());
        if self.logs.contains_key(tp) {
            // Its appends are settled (acknowledged or failed) by the close.
            self.close(tp)?;
        } else if !self.closed.contains_key(tp) && !self.storage.is_dir(&dir) {
            return Err(unknown(tp));
        }
        self.closed.remove(tp);
        if !self.storage.is_dir(&dir) {
            return Ok(());
        }
        // A symbolic link where the directory was is refused, not followed.
        crate::io::check_real_dir(&dir)?;
        let gone = self
            .data_dir
            .join(crate::format::filename::deleted_partition_dir_name(tp.dir_name().as_str(), &unique_id()));
        self.storage.rename(&dir, &gone)?;
        self.storage.sync_dir(&self.data_dir)?;
        // Deleted from here on: a directory that cannot be removed now is removed at the next
        // start (Kafka's deletion retries too).
        let _ = super::remove_partition_dir(&*self.storage, &gone);
        Ok(())
    }

    fn snapshot_stats(&self) -> ShardStats {
        let io = crate::io::thread_stats();
        let mut s = self.stats.clone();
        s.partitions = self.logs.len();
        s.io_ops = io.ops;
        s.io_enters = io.enters;
        s.bytes_written = io.bytes_written;
        s.bytes_read = io.bytes_read;
        s.fsyncs = io.fsyncs;
        s.writes = io.writes;
        s.write_buffers = crate::io::pool::thread_pool_stats(self.storage.mode() == IoMode::Sync);
        s.busy_refills = self.busy_trial.as_ref().and_then(BusyRefillTrial::choice);
        s
    }
}

/// A partition's appends whose bytes are in its file: acknowledged, or under
/// [`SyncMethod::Syncfs`] (`shared`), while the log holds bytes not yet durable, left for the next
/// shared flush (started by `Shard::poll_writes`). A write that carried its own fdatasync (a
/// roll's, or one `flush.ms` made due) moved the recovery point already: no syncfs to wait for.
fn written(shared: &mut Option<SharedFlush>, log: &mut Log, tp: TopicPartition, acks: Vec<Ack>, single_replica: bool) {
    match shared {
        Some(shared) if log.recovery_point() < log.written_offset() => {
            shared.unflushed.push((tp, acks, log.written_offset()));
        }
        _ => acknowledged(log, acks, single_replica),
    }
}

/// Lists `tp` in the shard's logs with timed work if it has some now and is not listed yet (the
/// log's own flag, so that an append hashes nothing here).
fn list_timed(timed: &mut HashSet<TopicPartition>, tp: &TopicPartition, log: &mut Log, interval: Option<(i64, i64)>) {
    if !log.timed_listed && log.has_timed_work(interval) {
        log.timed_listed = true;
        timed.insert(tp.clone());
    }
}

/// Completes `acks`, appends of `log` that are as durable as the engine was asked for; with
/// [`super::EngineConfig::single_replica`] the high watermark moves past them first, so a
/// producer that consumes right after its acknowledgement sees its records.
fn acknowledged(log: &mut Log, acks: Vec<Ack>, single_replica: bool) {
    if single_replica {
        if let Some(end) = acks.iter().map(|(_, info)| info.last_offset + 1).max() {
            if end > log.high_watermark() {
                log.set_high_watermark(end);
            }
        }
    }
    for (done, info) in acks {
        done.complete(Ok(info));
    }
}

/// The zero-fill lead each of `logs` open logs keeps when they share `total` bytes: an equal
/// share, but never under [`MIN_ZERO_FILL_SHARE`] (nor over `total`). Without the split every
/// partition's lead grew to the whole setting: at 8 partitions of one shard 64 MiB each, and the
/// zeros written ahead were several times the data (the durable sweep's 8 x 8 point ran at 0.36x
/// fio's throughput with a p99 4.3x fio's, against 0.96x and 0.57x with zero fill off).
fn zero_fill_share(total: u32, logs: usize) -> u32 {
    if total == 0 {
        return 0;
    }
    let share = total / (logs.max(1) as u32);
    share.max(MIN_ZERO_FILL_SHARE).min(total)
}

/// The length lead each of a shard's `logs` open logs keeps ahead of its O_DIRECT `.log`'s data
/// ([`crate::segment::SegmentSettings::length_lead_bytes`]): [`LENGTH_LEAD_BUDGET`] shared
/// equally, rounded down to a power of two (so it changes a few times while thousands of
/// partitions open), between 1 MiB and [`crate::segment::DEFAULT_LENGTH_LEAD`].
fn length_lead_share(logs: usize) -> u32 {
    pow2_share(LENGTH_LEAD_BUDGET, logs).clamp(MIN_LENGTH_LEAD as u64, crate::segment::DEFAULT_LENGTH_LEAD as u64)
        as u32
}

/// The largest power of two at most `budget / logs` (0 when that is 0): a share that changes
/// only a few times while partitions open one by one.
fn pow2_share(budget: u64, logs: usize) -> u64 {
    let even = budget / logs.max(1) as u64;
    if even == 0 {
        0
    } else {
        1 << even.ilog2()
    }
}

/// The length leads of a shard's partitions together: 16 MiB each up to 16 partitions, 8 up to
/// 32, 4 up to 64, 2 up to 128, the 1 MiB floor from 129. Per shard: the engine's shards each
/// have one (8 shards of 16 partitions keep 16 MiB each, 2 GiB of length in all). It bounds the
/// zeros past the data that a live directory's readers and a crash's recovery meet, and the
/// space ext4 sets aside for the files' next allocations (by their length, up to 8 MiB a file:
/// ten thousand files 16 MiB ahead would ask for 80 GB). A precaution, not a measured need: at
/// 10,000 partitions 16 MiB each measured no different from 1 MiB (docs/benchmarks.md, "The
/// length ahead sized for ext4's allocator"), so past 128 partitions the lead stays the 1 MiB
/// it was.
const LENGTH_LEAD_BUDGET: u64 = 256 << 20;

/// The least length lead of a shard's partitions: 1 MiB, the lead all had before the budget.
const MIN_LENGTH_LEAD: u32 = 1 << 20;

/// The tail cache each of `logs` open logs keeps when they share `budget`: at most `max`, and
/// the largest power of two at most `budget / logs` (so that the share changes only a few times
/// while partitions open one by one).
fn tail_cache_share(max: u64, budget: u64, logs: usize) -> u64 {
    let pow2 = pow2_share(budget, logs);
    // A share under a chunk would buy nothing: an idle tail with a cache under a chunk holds no
    // chunk (`TailFile`), so such a cache is gone once its write is done.
    if pow2 < crate::io::pool::CHUNK_BYTES as u64 {
        return 0;
    }
    pow2.min(max)
}

/// The least zero-fill lead a log of a shard keeps, however many share the shard's: the first
/// lead of a segment (256 KiB).
const MIN_ZERO_FILL_SHARE: u32 = 256 << 10;

/// The most zeros a partition whose appends queue (its writes carry several) keeps ahead of its
/// data. It takes refills only as its shard's one write, with no other partition's in flight:
/// beside other partitions' writes its zeros share the device with theirs (at 8 partitions x 8
/// in flight, refills for busy partitions while no other write was in flight before the turn
/// gave a p99 of 1.50-2.12x fio's against 0.99-1.12x without, 6 repetitions each); there its
/// appends land in the length kept ahead of its data (`keep_length_ahead`), as without zero
/// fill.
///
/// Its writes then overwrite zeros instead of allocating blocks: at 1 partition x 8 appends in
/// flight the durable sweep made 1.07-1.29x the throughput of fio's job with a p99 of 0.90-1.38x
/// fio's (12 repetitions), against 0.80-1.10x and 0.96-1.90x without refills for busy
/// partitions (6 repetitions, interleaved); in a later, slower state of the disk 0.98x and
/// 1.53x against 0.83x and 1.14x (medians). A small lead keeps each refill small: the zeros sit
/// in the device's queue beside the partition's next writes. 4 MiB gave a p99 of 3.0-3.9x fio's;
/// 512 and 256 KiB (refills half as large, twice as many) no more throughput than 1 MiB and a
/// wider p99; the whole lead (64 MiB) 2.5-2.9x the p99 of no zero fill (commit 381d152)
/// (docs/benchmarks.md, "Refills for a busy partition writing alone"). Under zero fill auto
/// the shard takes them only while its trial finds them faster on its device (busy_refills.rs):
/// on a later disk they were not (0.71x fio's throughput with them against 0.76x without).
const BUSY_ZERO_FILL_LEAD: u64 = 1 << 20;

/// How long a shard with writes in flight polls before sleeping, given how many partitions have
/// a write in flight and whether appends wait for a partition's next write (`queued`): the
/// configured `io_spin_us` while at most one partition writes and no append waits, none
/// otherwise.
///
/// The spin yields the core on each round, but the writes that block (those that allocate, on
/// ext4) run on io-wq workers bound to the shard's core, one per file written: with several
/// files in flight the spinning shard competes with the very workers whose completions it
/// waits for. Measured on one virtio disk (docs/benchmarks.md, "The shard's spin by load"):
/// with this rule 8 partitions with 8 appends in flight each had a p99 of 0.94x fio's against
/// 1.84x spinning, and 8 with one in flight 2.2x against 4.5x; one partition, which never
/// spinning cost a tenth of its throughput, keeps the spin. But not while its appends queue:
/// its next write then follows at once and the shard would spin through nearly all of it, and
/// on a virtual machine whose CPU is capped that spends the budget its disk needs (1 partition x
/// 8 appends in flight: the disk stalled 15-20 ms every 100 ms; with this rule an append p99.9
/// of 3.5 ms against 19.6 ms, p99 2.41x fio's against 2.94x; docs/benchmarks.md, "What bounds
/// 1 x 8 on this disk").
fn io_spin_for(configured: Duration, partitions_writing: usize, queued: bool) -> Duration {
    if partitions_writing <= 1 && !queued {
        configured
    } else {
        Duration::ZERO
    }
}

/// Data writes in flight or starting on a shard from which it takes no paced refill
/// ([`RefillGate`]).
const CROWDED_WRITES: usize = 32;

/// How long after a turn with [`CROWDED_WRITES`] a shard still takes no paced refill.
const CROWDED_HOLD: Duration = Duration::from_secs(1);

/// Whether a shard may take a paced refill (one beside other partitions' writes): not while
/// [`CROWDED_WRITES`] data writes or more are in flight or starting, nor for [`CROWDED_HOLD`]
/// after (a partition writing alone still takes its burst: nothing else is in the queue).
/// With that many writes the device's queue is deep and its bandwidth, not the cost of an
/// append's metadata, is what the appends wait for; zeros are a second write of every byte.
/// 64 partitions x 1 append in flight on a disk of about 300 MB/s made 0.65x fio's throughput
/// with a p99 of 2.1x fio's while refilling (780 refills a point), against 1.03x and 1.00x with
/// this gate (4-19 refills); without the hold, refills between crowded turns (85-125 a point)
/// left it at 0.94x and 1.21x. 8 partitions x 1 keep their refills (docs/benchmarks.md, "Zero
/// fill off while the device is crowded").
#[derive(Debug, Default)]
struct RefillGate {
    /// When a turn last had [`CROWDED_WRITES`] or more.
    crowded_at: Option<std::time::Instant>,
}

impl RefillGate {
    /// Whether a paced refill may go out now, with `writes` data writes in flight or starting.
    /// Reads the clock (`now`) only while crowded or held.
    fn paced(&mut self, writes: usize, now: impl FnOnce() -> std::time::Instant) -> bool {
        if writes >= CROWDED_WRITES {
            self.crowded_at = Some(now());
            return false;
        }
        match self.crowded_at {
            None => true,
            Some(at) if now().saturating_duration_since(at) >= CROWDED_HOLD => {
                self.crowded_at = None;
                true
            }
            Some(_) => false,
        }
    }
}

/// The bytes of the data writes `ops` when they cover at most a quarter of
/// [`BUSY_ZERO_FILL_LEAD`], else `None`: a busy partition with larger writes takes no refill.
/// Its next writes would use up such a lead at once and reach the refill still in flight, and
/// the shard waits for zeros a write reaches (100 appends of 300 KB, 8 in flight: 3-12 waits
/// and 19-30 refills in four runs without this limit, 0-1 and 0-2 with it).
fn small_write_bytes(ops: &[crate::io::IoOp]) -> Option<u64> {
    let bytes: usize = ops
        .iter()
        .map(|op| match &op.kind {
            crate::io::IoOpKind::Write { buf, .. } => buf.len(),
            crate::io::IoOpKind::SyncData => 0,
        })
        .sum();
    (bytes as u64 <= BUSY_ZERO_FILL_LEAD / 4).then_some(bytes as u64)
}

/// One log's writes for [`SyncMethod::DsyncWrites`]: each write carries RWF_DSYNC and the
/// fdatasync chained after them is dropped. The caller checked that every byte already in the
/// file is durable, so the new writes are all the fdatasync had to cover. With nothing to write
/// the fdatasync stays.
fn dsync_writes(ops: Vec<crate::io::IoOp>) -> Vec<crate::io::IoOp> {
    use crate::io::IoOpKind;
    if !ops.iter().any(|o| matches!(o.kind, IoOpKind::Write { .. })) {
        return ops;
    }
    ops.into_iter()
        .filter_map(|mut o| match &mut o.kind {
            IoOpKind::SyncData => None,
            IoOpKind::Write { dsync, .. } => {
                *dsync = true;
                o.link_next = false;
                Some(o)
            }
        })
        .collect()
}

/// Fails the appends of `acks`: the partition's write or fsync failed (it is in the failed state).
fn fail_acks(acks: Vec<Ack>, data_dir: &std::path::Path, tp: &TopicPartition, reason: String) {
    for (done, _) in acks {
        done.complete(Err(Error::Failed { dir: data_dir.join(tp.dir_name()), reason: reason.clone() }));
    }
}

/// At most this many opens load together: a group's requests are answered when all of it loaded.
const MAX_OPEN_GROUP: usize = 256;

/// `f` of every item on up to `threads` threads (scoped: none outlives the call), each result
/// handed to `each` on the caller's thread as it comes, in no set order. One item, or one
/// thread, runs on the caller's thread. The threads run on `affinity` when given (a pinned
/// shard's threads would otherwise share its core), and the I/O they did counts as the
/// caller's (`io::thread_stats`).
fn in_parallel<T: Send, R: Send>(
    items: Vec<T>,
    threads: usize,
    affinity: Option<&nix::sched::CpuSet>,
    f: impl Fn(T) -> R + Sync,
    mut each: impl FnMut(R),
) {
    let threads = threads.min(items.len());
    if threads <= 1 {
        items.into_iter().map(f).for_each(each);
        return;
    }
    let n = items.len();
    let work = std::sync::Mutex::new(items.into_iter());
    let next = || work.lock().unwrap_or_else(|p| p.into_inner()).next();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                let tx = tx.clone();
                let (f, next) = (&f, &next);
                scope.spawn(move || {
                    if let Some(set) = affinity {
                        let _ = nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), set);
                    }
                    while let Some(item) = next() {
                        if tx.send(f(item)).is_err() {
                            break;
                        }
                    }
                    crate::io::thread_stats()
                })
            })
            .collect();
        drop(tx);
        // Ends early only if a worker panicked (its sender gone with the work undone).
        for r in rx.iter().take(n) {
            each(r);
        }
        for w in workers {
            // A panic in `f` is a bug: it goes on to the caller.
            let io = w.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
            crate::io::add_thread_stats(io);
        }
    });
}

/// 32 hex digits, unique within this process and (by the clock and process id) across runs: the
/// `<unique>` of a deleted partition's directory name, where Kafka puts a UUID.
fn unique_id() -> String {
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("{nanos:016x}{:08x}{n:08x}", std::process::id())
}

fn unknown(tp: &TopicPartition) -> Error {
    Error::UnknownPartition { topic: tp.topic.clone(), partition: tp.partition }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every item runs once and its result reaches `each` on the caller's thread, whatever
    /// thread ran it; one thread (or one item) runs on the caller's; the helpers' I/O counts as
    /// the caller's.
    #[test]
    fn in_parallel_hands_every_result_to_the_caller() {
        let caller = std::thread::current().id();
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, [7u8; 4096]).unwrap();
        let storage = crate::io::std_backend::StdStorage::default();
        let f = storage.open(&file, crate::io::OpenMode::Read).unwrap();
        for threads in [1, 2, 8, 100] {
            let before = crate::io::thread_stats().bytes_read;
            let mut got = Vec::new();
            in_parallel(
                (0..500u64).collect(),
                threads,
                None,
                |i| {
                    // Uneven work, so that the threads finish out of order.
                    std::thread::sleep(Duration::from_micros((i * 7919) % 200));
                    let mut b = [0u8; 8];
                    f.read_exact_at(&mut b, i % 512).unwrap();
                    (i, b[0], std::thread::current().id() == caller)
                },
                |r| {
                    assert_eq!(std::thread::current().id(), caller);
                    got.push(r);
                },
            );
            got.sort_unstable();
            assert_eq!(
                got.iter().map(|(i, b, _)| (*i, *b)).collect::<Vec<_>>(),
                (0..500u64).map(|i| (i, 7)).collect::<Vec<_>>()
            );
            assert_eq!(got.iter().all(|(_, _, on_caller)| *on_caller), threads == 1, "{threads} threads");
            assert_eq!(crate::io::thread_stats().bytes_read - before, 500 * 8, "{threads} threads");
        }
        let mut one = Vec::new();
        in_parallel(vec![3], 8, None, |i| (i, std::thread::current().id() == caller), |r| one.push(r));
        assert_eq!(one, vec![(3, true)]);
    }

    #[test]
    fn the_io_spin_holds_only_while_one_partition_writes() {
        let spin = Duration::from_micros(200);
        assert_eq!(io_spin_for(spin, 0, false), spin, "a flush alone");
        assert_eq!(io_spin_for(spin, 1, false), spin);
        assert_eq!(io_spin_for(spin, 1, true), Duration::ZERO, "appends queue behind the write");
        assert_eq!(io_spin_for(spin, 2, false), Duration::ZERO);
        assert_eq!(io_spin_for(spin, 64, false), Duration::ZERO);
        assert_eq!(io_spin_for(Duration::ZERO, 1, false), Duration::ZERO);
    }

    #[test]
    fn paced_refills_stop_while_the_device_is_crowded_and_for_a_hold_after() {
        let t0 = std::time::Instant::now();
        let at = |t: std::time::Instant| move || t;
        let mut gate = RefillGate::default();
        assert!(gate.paced(0, || unreachable!("no clock read while never crowded")));
        assert!(gate.paced(CROWDED_WRITES - 1, at(t0)), "below the crowd");
        assert!(!gate.paced(CROWDED_WRITES, at(t0)));
        assert!(!gate.paced(10_000, at(t0)));
        // Fewer writes again: still held, until the hold has passed since the last crowded turn.
        assert!(!gate.paced(8, at(t0 + CROWDED_HOLD / 2)));
        assert!(!gate.paced(CROWDED_WRITES, at(t0 + CROWDED_HOLD / 2)), "crowded again: the hold restarts");
        assert!(!gate.paced(8, at(t0 + CROWDED_HOLD)), "held from the later crowd");
        assert!(gate.paced(8, at(t0 + CROWDED_HOLD / 2 + CROWDED_HOLD)));
        // Released: no clock read again until the next crowd.
        assert!(gate.paced(1, || unreachable!("no clock read once released")));
    }

    #[test]
    fn zero_fill_share_splits_the_lead_with_a_floor() {
        assert_eq!(zero_fill_share(0, 8), 0);
        assert_eq!(zero_fill_share(64 << 20, 0), 64 << 20);
        assert_eq!(zero_fill_share(64 << 20, 1), 64 << 20);
        assert_eq!(zero_fill_share(64 << 20, 8), 8 << 20);
        assert_eq!(zero_fill_share(64 << 20, 10_000), MIN_ZERO_FILL_SHARE);
        assert_eq!(zero_fill_share(64 << 10, 4), 64 << 10);
    }

    #[test]
    fn length_lead_share_splits_the_budget_between_1_and_16_mib() {
        let mib = 1 << 20;
        let steps =
            [(0, 16), (1, 16), (16, 16), (17, 8), (32, 8), (33, 4), (64, 4), (65, 2), (128, 2), (129, 1), (256, 1)];
        for (logs, want) in steps {
            assert_eq!(length_lead_share(logs), want * mib, "{logs} logs");
        }
        assert_eq!(length_lead_share(10_000), MIN_LENGTH_LEAD);
        assert_eq!(length_lead_share(usize::MAX), MIN_LENGTH_LEAD);
    }

    #[test]
    fn tail_cache_share_splits_the_budget_in_powers_of_two() {
        assert_eq!(tail_cache_share(1 << 20, 64 << 20, 0), 1 << 20);
        assert_eq!(tail_cache_share(1 << 20, 64 << 20, 64), 1 << 20);
        assert_eq!(tail_cache_share(1 << 20, 64 << 20, 65), 512 << 10);
        assert_eq!(tail_cache_share(1 << 20, 64 << 20, 256), 256 << 10);
        assert_eq!(tail_cache_share(1 << 20, 64 << 20, 257), 0, "under a chunk: none");
        assert_eq!(tail_cache_share(1 << 20, 64 << 20, 10_000), 0);
        assert_eq!(tail_cache_share(1 << 20, 0, 1), 0);
        assert_eq!(tail_cache_share(0, 64 << 20, 1), 0);
    }
}
