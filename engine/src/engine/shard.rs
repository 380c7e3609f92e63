//! One shard: a thread pinned to a core, owning its partitions' logs. See the engine module docs
//! for the loop.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::{Receiver, TryRecvError};

use super::{Doorbell, Durability, EngineConfig, Request, SyncMethod, TopicPartition};
use crate::config::LogConfig;
use crate::error::{Error, Result};
use crate::io::{IoMode, Storage};
use crate::log::{AppendInfo, Log, LogOptions};

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
    pub fsyncs: u64,
    /// Write operations handed to the kernel.
    pub writes: u64,
    /// The shard's write buffers: registered with its ring (fixed buffers) or not, and why.
    pub write_buffers: crate::io::PoolStats,
}

pub(crate) struct Shard {
    core: Option<usize>,
    rx: Receiver<Request>,
    bell: Arc<Doorbell>,
    storage: Arc<dyn Storage>,
    data_dir: std::path::PathBuf,
    default_config: LogConfig,
    durability: Durability,
    sync_method: SyncMethod,
    tail_cache_bytes: u64,
    idle_spin: Duration,
    recovery_threads: usize,
    retention_check_interval_ms: i64,
    next_retention_ms: i64,
    last_periodic: std::time::Instant,
    logs: HashMap<TopicPartition, Log>,
    stats: ShardStats,
}

impl Shard {
    pub(crate) fn new(
        id: usize,
        core: Option<usize>,
        rx: Receiver<Request>,
        bell: Arc<Doorbell>,
        storage: Arc<dyn Storage>,
        config: &EngineConfig,
    ) -> Shard {
        Shard {
            core,
            rx,
            bell,
            data_dir: config.data_dir.clone(),
            default_config: config.log_config.clone(),
            durability: config.durability,
            sync_method: config.sync_method,
            tail_cache_bytes: config.tail_cache_bytes,
            idle_spin: Duration::from_micros(config.idle_spin_us),
            recovery_threads: config.recovery_threads_per_partition.max(1),
            retention_check_interval_ms: config.retention_check_interval_ms.min(i64::MAX as u64) as i64,
            next_retention_ms: 0,
            last_periodic: std::time::Instant::now(),
            stats: ShardStats { shard: id, core, io_mode: Some(storage.mode()), ..Default::default() },
            storage,
            logs: HashMap::new(),
        }
    }

    pub(crate) fn run(mut self) {
        if let Some(core) = self.core {
            if !super::topology::pin_current_thread(core) {
                self.core = None;
                self.stats.core = None;
            }
        }
        let mut batch = Vec::new();
        loop {
            batch.clear();
            let mut disconnected = false;
            loop {
                match self.rx.try_recv() {
                    Ok(r) => batch.push(r),
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => {
                        disconnected = true;
                        break;
                    }
                }
            }
            if batch.is_empty() {
                if disconnected {
                    // The engine is gone without a shutdown request: close cleanly anyway.
                    let _ = self.close_all();
                    return;
                }
                // Spin briefly first: a request arriving within the spin window costs no
                // doorbell write, no wake-up and no io_uring_enter.
                if self.idle_spin.as_nanos() > 0 {
                    let until = std::time::Instant::now() + self.idle_spin;
                    while self.rx.is_empty() && std::time::Instant::now() < until {
                        std::hint::spin_loop();
                    }
                    if !self.rx.is_empty() {
                        continue;
                    }
                }
                self.bell.sleeping.store(true, Ordering::SeqCst);
                if self.rx.is_empty() {
                    crate::io::wait_doorbell(&self.bell.fd, self.storage.mode(), Some(Duration::from_millis(100)));
                }
                self.bell.sleeping.store(false, Ordering::SeqCst);
                self.periodic();
                continue;
            }
            self.stats.turns += 1;
            self.stats.requests += batch.len() as u64;
            if self.turn(&mut batch) {
                return;
            }
            // Under constant load the idle path never runs: do the timed work here too.
            if self.last_periodic.elapsed() >= Duration::from_millis(10) {
                self.periodic();
            }
        }
    }

    /// Closes every log; returns (partition, log end, log start) of each.
    fn close_all(&mut self) -> Result<Vec<(TopicPartition, i64, i64)>> {
        let mut first = None;
        let mut closed = Vec::new();
        for (tp, log) in self.logs.drain() {
            let (leo, start) = (log.log_end_offset(), log.log_start_offset());
            match log.close() {
                Ok(()) => closed.push((tp, leo, start)),
                Err(e) => {
                    first.get_or_insert(e);
                }
            }
        }
        match first {
            Some(e) => Err(e),
            None => Ok(closed),
        }
    }

    /// Timed work: group-commit fsyncs that are due, retention, expired `.deleted` files.
    fn periodic(&mut self) {
        self.last_periodic = std::time::Instant::now();
        let now = crate::config::Clock::now_ms(&crate::config::SystemClock);
        let interval = match self.durability {
            Durability::Interval { flush_ms, flush_messages } => Some((flush_ms, flush_messages)),
            _ => None,
        };
        for log in self.logs.values_mut() {
            if log.flush_due(now, interval) {
                let _ = log.flush();
            }
        }
        if now >= self.next_retention_ms {
            self.next_retention_ms = now.saturating_add(self.retention_check_interval_ms);
            for log in self.logs.values_mut() {
                let _ = log.apply_retention();
            }
        }
        for log in self.logs.values_mut() {
            if log.pending_deletions() > 0 {
                let _ = log.delete_expired_files();
            }
        }
    }

    /// Runs one turn's requests; true when the shard must stop.
    fn turn(&mut self, batch: &mut Vec<Request>) -> bool {
        let mut acks: Vec<(TopicPartition, crate::completion::Completer<AppendInfo>, AppendInfo)> = Vec::new();
        let mut dirty: BTreeMap<TopicPartition, ()> = BTreeMap::new();
        let mut stop = None;
        for req in batch.drain(..) {
            match req {
                Request::Open { tp, config, recovery, log_start_offset, done } => {
                    done.complete(self.open(&tp, config, recovery, log_start_offset))
                }
                Request::Offsets { done } => {
                    let v = self
                        .logs
                        .iter()
                        .map(|(tp, l)| (tp.clone(), l.recovery_point(), l.log_start_offset()))
                        .collect();
                    done.complete(Ok(v));
                }
                Request::WithLog { tp, f } => {
                    let before = self.logs.get(&tp).map(|l| l.log_end_offset());
                    f(self.logs.get_mut(&tp));
                    // An append done through the log directly must still reach the file.
                    if let (Some(log), Some(_)) = (self.logs.get(&tp), before) {
                        if log.unwritten_bytes() > 0 {
                            dirty.insert(tp.clone(), ());
                        }
                    }
                }
                Request::Append { tp, mut records, leader_epoch, done } => {
                    let Some(log) = self.logs.get_mut(&tp) else {
                        done.complete(Err(unknown(&tp)));
                        continue;
                    };
                    let r = match leader_epoch {
                        Some(epoch) => log.append_as_leader(&mut records, epoch),
                        None => log.append_as_follower(&records),
                    };
                    match r {
                        Ok(info) => {
                            self.stats.appended_batches += info.batches as u64;
                            self.stats.appended_bytes += info.bytes;
                            dirty.insert(tp.clone(), ());
                            acks.push((tp, done, info));
                        }
                        Err(e) => done.complete(Err(e)),
                    }
                }
                Request::Fetch { tp, offset, max_bytes, upper_bound, min_one, done } => {
                    self.stats.fetches += 1;
                    let r = match self.logs.get(&tp) {
                        Some(log) => {
                            let before = crate::io::thread_stats().ops;
                            let r = log.read(offset, max_bytes, upper_bound, min_one);
                            if crate::io::thread_stats().ops == before {
                                self.stats.tail_cache_hits += 1;
                            }
                            r
                        }
                        None => Err(unknown(&tp)),
                    };
                    done.complete(r);
                }
                Request::ListOffset { tp, target, done } => {
                    done.complete(match self.logs.get(&tp) {
                        Some(log) => log.offset_for_time(target),
                        None => Err(unknown(&tp)),
                    });
                }
                Request::Flush { done } => {
                    let mut r = Ok(());
                    for log in self.logs.values_mut() {
                        if let Err(e) = log.flush() {
                            r = Err(e);
                        }
                    }
                    done.complete(r);
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
        self.flush_step(dirty, acks);
        if let Some(done) = stop {
            done.complete(self.close_all());
            return true;
        }
        false
    }

    /// Hands every dirty partition's appended bytes to the kernel in one submission (linked to an
    /// fdatasync per partition under `Durability::EveryBatch`), then completes the appends.
    fn flush_step(
        &mut self,
        dirty: BTreeMap<TopicPartition, ()>,
        acks: Vec<(TopicPartition, crate::completion::Completer<AppendInfo>, AppendInfo)>,
    ) {
        if dirty.is_empty() {
            return;
        }
        // The `negative-control` feature is TEST ONLY: EveryBatch then acknowledges without the
        // fdatasync, so the power-cut tests can show that they catch a missing fsync.
        let every_batch = self.durability == Durability::EveryBatch && !cfg!(feature = "negative-control");
        let interval = match self.durability {
            Durability::Interval { flush_ms, flush_messages } => Some((flush_ms, flush_messages)),
            _ => None,
        };
        let now = crate::config::Clock::now_ms(&crate::config::SystemClock);
        let tps: Vec<TopicPartition> = dirty.into_keys().collect();
        let mut failed: HashMap<TopicPartition, String> = HashMap::new();
        let mut ops = Vec::new();
        let mut syncs = Vec::with_capacity(tps.len());
        for (i, tp) in tps.iter().enumerate() {
            let log = self.logs.get_mut(tp).expect("dirty partitions are open");
            // Group commit: one fdatasync covers every batch of this log appended so far.
            let sync = every_batch || log.flush_due(now, interval);
            syncs.push(sync);
            // RWF_DSYNC writes replace the fdatasync only when everything written before them is
            // already durable (after a reopen or an unsynced write, one fdatasync first).
            let dsync = sync && self.sync_method == SyncMethod::DsyncWrites && log.active_segment().written_is_synced();
            match log.take_writes(i as u64, sync) {
                Ok(o) if dsync => ops.extend(dsync_writes(o)),
                Ok(o) => ops.extend(o),
                Err(e) => {
                    failed.insert(tp.clone(), e.to_string());
                }
            }
        }
        let mut by_log: Vec<Vec<crate::io::IoCompletion>> = (0..tps.len()).map(|_| Vec::new()).collect();
        for c in self.storage.submit(ops) {
            by_log[c.op.tag as usize].push(c);
        }
        for (i, done) in by_log.into_iter().enumerate() {
            let tp = &tps[i];
            let log = self.logs.get_mut(tp).expect("open");
            let leo = log.log_end_offset();
            if done.is_empty() {
                continue;
            }
            if let Err(e) = log.complete_writes(done, syncs[i].then_some(leo)) {
                failed.insert(tp.clone(), e.to_string());
            }
        }
        for (tp, done, info) in acks {
            match failed.get(&tp) {
                Some(reason) => {
                    done.complete(Err(Error::Failed { dir: self.data_dir.join(tp.dir_name()), reason: reason.clone() }))
                }
                None => done.complete(Ok(info)),
            }
        }
    }

    fn open(
        &mut self,
        tp: &TopicPartition,
        config: Option<LogConfig>,
        recovery: crate::log::Recovery,
        log_start_offset: Option<i64>,
    ) -> Result<crate::log::LoadReport> {
        if self.logs.contains_key(tp) {
            return Ok(crate::log::LoadReport::default());
        }
        let options = LogOptions {
            config: config.unwrap_or_else(|| self.default_config.clone()),
            storage: self.storage.clone(),
            tail_cache_bytes: self.tail_cache_bytes,
            write_through: false,
            recovery,
            log_start_offset,
            recovery_threads: self.recovery_threads,
            ..LogOptions::default()
        };
        let (log, report) = Log::open_with_report(self.data_dir.join(tp.dir_name()), options)?;
        self.logs.insert(tp.clone(), log);
        Ok(report)
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
        s
    }
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

fn unknown(tp: &TopicPartition) -> Error {
    Error::UnknownPartition { topic: tp.topic.clone(), partition: tp.partition }
}
