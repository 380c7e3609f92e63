//! The shard's writer of `leader-epoch-checkpoint` files (`seglog-epochs-<shard>`): the shard
//! hands it a partition's file contents when a leader epoch starts or the cache is cut, and goes
//! on with its turn while the thread writes them with Kafka's sequence (temp file, fsync, rename,
//! fsync directory). Written inline, each new epoch stopped every partition of the shard for two
//! fsyncs and a file creation: after a leader election over ten thousand partitions, seconds.
//! What makes the deferral safe is in `log::epoch`: until a write is back, the partition's
//! recovery point in `recovery-point-offset-checkpoint` stays below the epoch the file lacks.
//!
//! At most one write per partition is out at a time (two would race on the temp file); the
//! shard waits for a partition's write before it closes the log, which then writes the file
//! itself if a change came meanwhile.

use std::collections::HashSet;
use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Sender, TryRecvError};

use super::{Doorbell, TopicPartition};
use crate::error::{Error, Result};
use crate::io::Storage;
use crate::log::epoch::EpochCheckpointWrite;
use crate::log::Log;

/// A write's outcome: the partition and the cache version the file now holds, or why not.
type Written = (TopicPartition, u64, Result<()>);

type Logs = std::collections::HashMap<TopicPartition, Log>;

pub(super) struct EpochWriter {
    /// `None` once dropped, which stops the thread.
    requests: Option<Sender<(TopicPartition, EpochCheckpointWrite)>>,
    results: Receiver<Written>,
    thread: Option<JoinHandle<()>>,
    /// Partitions with a write out.
    out: HashSet<TopicPartition>,
}

impl EpochWriter {
    pub(super) fn spawn(shard: usize, storage: Arc<dyn Storage>, bell: Arc<Doorbell>) -> Result<EpochWriter> {
        let (req_tx, req_rx) = crossbeam_channel::unbounded::<(TopicPartition, EpochCheckpointWrite)>();
        let (res_tx, res_rx) = crossbeam_channel::unbounded::<Written>();
        let thread = std::thread::Builder::new()
            .name(format!("seglog-epochs-{shard}"))
            .spawn(move || {
                while let Ok((tp, w)) = req_rx.recv() {
                    let r = storage.write_file_atomic(&w.path, &w.contents);
                    if res_tx.send((tp, w.version, r)).is_err() {
                        return;
                    }
                    // After the result is in the channel, as the flusher does (flush.rs).
                    bell.ring_if_sleeping();
                }
            })
            .map_err(|e| Error::io("spawn", format!("shard {shard}'s epoch checkpoint writer"), e))?;
        Ok(EpochWriter { requests: Some(req_tx), results: res_rx, thread: Some(thread), out: HashSet::new() })
    }

    /// Hands over the write that brings `tp`'s file up to date, unless the file is up to date
    /// (one look at a counter: called after every append) or a write is out (its result hands
    /// over the next).
    pub(super) fn submit(&mut self, tp: &TopicPartition, log: &Log) {
        if !log.epoch_checkpoint_behind() || self.out.contains(tp) {
            return;
        }
        if let (Some(w), Some(tx)) = (log.epoch_checkpoint_write(), &self.requests) {
            if tx.send((tp.clone(), w)).is_ok() {
                self.out.insert(tp.clone());
            }
        }
    }

    /// True while writes are out.
    pub(super) fn busy(&self) -> bool {
        !self.out.is_empty()
    }

    /// True when a result is in, not yet applied (the shard does not sleep then).
    pub(super) fn done(&self) -> bool {
        !self.results.is_empty()
    }

    /// Applies the results that are in, without waiting: the log's file is up to date to that
    /// version (a later change is handed over next), or the log fails.
    pub(super) fn poll(&mut self, logs: &mut Logs) {
        while let Some(w) = self.next(false) {
            // A failed write failed its log: its appends say so from now on.
            let _ = self.apply(w, logs);
        }
    }

    /// Waits until `tp` has no write out (`None`: none at all), applying every result that
    /// comes in meanwhile; the first write that failed, if one did.
    pub(super) fn settle(&mut self, tp: Option<&TopicPartition>, logs: &mut Logs) -> Result<()> {
        let mut first = Ok(());
        while tp.map_or(self.busy(), |tp| self.out.contains(tp)) {
            let Some(w) = self.next(true) else { break };
            if let Err(e) = self.apply(w, logs) {
                first = first.and(Err(e));
            }
        }
        first
    }

    fn next(&mut self, wait: bool) -> Option<Written> {
        let r =
            if wait { self.results.recv().map_err(|_| TryRecvError::Disconnected) } else { self.results.try_recv() };
        match r {
            Ok(w) => Some(w),
            Err(TryRecvError::Empty) => None,
            Err(TryRecvError::Disconnected) => {
                // The thread panicked: no write out will come back. Their logs keep the
                // recovery point below what their files lack, and write them at close.
                self.out.clear();
                None
            }
        }
    }

    fn apply(&mut self, (tp, version, r): Written, logs: &mut Logs) -> Result<()> {
        self.out.remove(&tp);
        let Some(log) = logs.get_mut(&tp) else { return Ok(()) };
        match r {
            Ok(()) => {
                log.epoch_checkpoint_written(version);
                self.submit(&tp, log);
                Ok(())
            }
            Err(e) => {
                log.epoch_checkpoint_failed(e.to_string());
                Err(e)
            }
        }
    }
}

impl Drop for EpochWriter {
    fn drop(&mut self) {
        self.requests.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The writer through the engine on the simulated disk, its writes held at their rename.
#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::time::{Duration, Instant};

    use super::*;
    use crate::format::builder::BatchBuilder;
    use crate::format::checkpoint::{LEADER_EPOCH_CHECKPOINT_FILE, RECOVERY_POINT_OFFSET_CHECKPOINT_FILE};
    use crate::io::sim::{Fault, SimRng, SimStorage};
    use crate::{Durability, Engine, EngineConfig};

    const DIR: &str = "/data";

    fn batch() -> Vec<u8> {
        let mut b = BatchBuilder::new();
        b.push(crate::config::Clock::now_ms(&crate::config::SystemClock), None, Some(&[9u8; 500][..]), &[]);
        b.build().unwrap()
    }

    fn engine(sim: &SimStorage) -> Engine {
        let mut cfg = EngineConfig::new(DIR);
        cfg.shards = Some(1);
        cfg.pin_threads = false;
        cfg.durability = Durability::EveryBatch;
        Engine::open_on(cfg, Arc::new(sim.clone())).unwrap()
    }

    /// The recovery point `e` records for `tp` in the checkpoint now.
    fn checkpointed(e: &Engine, sim: &SimStorage, tp: &TopicPartition) -> i64 {
        e.checkpoint().unwrap();
        let path = Path::new(DIR).join(RECOVERY_POINT_OFFSET_CHECKPOINT_FILE);
        super::super::checkpoints::read_offsets(sim, &path).unwrap()[&(tp.topic.clone(), tp.partition)]
    }

    fn until(what: &str, mut done: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !done() {
            assert!(Instant::now() < deadline, "{what}");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Lets every rename through when dropped (declared after the engine, it drops first).
    struct OpenGate(SimStorage);

    impl Drop for OpenGate {
        fn drop(&mut self) {
            self.0.allow_renames_to(LEADER_EPOCH_CHECKPOINT_FILE, None);
        }
    }

    /// While a new epoch's checkpoint write is held, appends go on and are acknowledged, and
    /// the recovery point recorded stays at that epoch's start; a power cut then recovers the
    /// epoch from the batches. Once the write is through, the recovery point recorded is the
    /// log's.
    #[test]
    fn a_held_epoch_write_holds_the_recorded_recovery_point_only() {
        let sim = SimStorage::new();
        let tp = TopicPartition::new("t", 0);
        let e = engine(&sim);
        let _gate = OpenGate(sim.clone());
        e.open_partition(&tp, None).wait().unwrap();
        e.append(&tp, batch(), 3).wait().unwrap();
        until("epoch 3's checkpoint was never written", || checkpointed(&e, &sim, &tp) == 1);

        sim.allow_renames_to(LEADER_EPOCH_CHECKPOINT_FILE, Some(0));
        for _ in 0..3 {
            e.append(&tp, batch(), 4).wait().unwrap();
        }
        until("epoch 4's checkpoint write never came to the gate", || sim.renames_waiting() == 1);
        assert_eq!(e.with_log(&tp, |l| Ok(l.recovery_point())).wait().unwrap(), 4);
        assert_eq!(checkpointed(&e, &sim, &tp), 1, "the file lacks epoch 4, which starts at 1");
        let crashed = sim.crash(&mut SimRng::new(5));
        sim.allow_renames_to(LEADER_EPOCH_CHECKPOINT_FILE, None);
        until("the held write never finished", || checkpointed(&e, &sim, &tp) == 4);
        e.shutdown().unwrap();

        let after = engine(&crashed);
        after.open_partition(&tp, None).wait().unwrap();
        let epochs = after.with_log(&tp, |l| Ok((l.leader_epochs().to_vec(), l.log_end_offset()))).wait().unwrap();
        assert_eq!(epochs, (vec![(3, 0), (4, 1)], 4));
        after.shutdown().unwrap();
    }

    /// A failed checkpoint write fails the partition, which then refuses appends; opened again,
    /// it has every acknowledged append and its epochs.
    #[test]
    fn a_failed_epoch_write_fails_the_partition() {
        let sim = SimStorage::new();
        let tp = TopicPartition::new("t", 0);
        let e = engine(&sim);
        let _gate = OpenGate(sim.clone());
        e.open_partition(&tp, None).wait().unwrap();
        e.append(&tp, batch(), 3).wait().unwrap();
        until("epoch 3's checkpoint was never written", || checkpointed(&e, &sim, &tp) == 1);
        sim.allow_renames_to(LEADER_EPOCH_CHECKPOINT_FILE, Some(0));
        e.append(&tp, batch(), 4).wait().unwrap();
        until("epoch 4's checkpoint write never came to the gate", || sim.renames_waiting() == 1);
        // The rename is the next state-changing operation (the shard is idle).
        sim.inject(Fault::Op(sim.counters().ops + 1));
        sim.allow_renames_to(LEADER_EPOCH_CHECKPOINT_FILE, None);
        until("the failed write never failed the partition", || !e.failed_partitions().unwrap().is_empty());
        assert!(e.append(&tp, batch(), 4).wait().is_err());
        e.open_partition(&tp, None).wait().unwrap();
        assert_eq!(e.with_log(&tp, |l| Ok(l.log_end_offset())).wait().unwrap(), 2);
        let epochs = e.with_log(&tp, |l| Ok(l.leader_epochs().to_vec())).wait().unwrap();
        assert_eq!(epochs, vec![(3, 0), (4, 1)]);
        e.shutdown().unwrap();
    }
}
