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

    /// Hands over the write that brings `tp`'s file up to date, unless one is out (its result
    /// hands over the next) or the file is up to date.
    pub(super) fn submit(&mut self, tp: &TopicPartition, log: &Log) {
        if self.out.contains(tp) {
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

    /// Applies the results that are in, without waiting: the log's file is up to date to that
    /// version (a later change is handed over next), or the log fails.
    pub(super) fn poll(&mut self, logs: &mut std::collections::HashMap<TopicPartition, Log>) {
        while let Some(w) = self.next(false) {
            self.apply(w, logs);
        }
    }

    /// Waits until `tp` has no write out, applying every result that comes in meanwhile.
    pub(super) fn settle(&mut self, tp: &TopicPartition, logs: &mut std::collections::HashMap<TopicPartition, Log>) {
        while self.out.contains(tp) {
            match self.next(true) {
                Some(w) => self.apply(w, logs),
                None => break,
            }
        }
    }

    /// Waits until no write is out.
    pub(super) fn settle_all(&mut self, logs: &mut std::collections::HashMap<TopicPartition, Log>) {
        while self.busy() {
            match self.next(true) {
                Some(w) => self.apply(w, logs),
                None => break,
            }
        }
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

    fn apply(&mut self, (tp, version, r): Written, logs: &mut std::collections::HashMap<TopicPartition, Log>) {
        self.out.remove(&tp);
        let Some(log) = logs.get_mut(&tp) else { return };
        match r {
            Ok(()) => {
                log.epoch_checkpoint_written(version);
                if log.epoch_checkpoint_behind() {
                    self.submit(&tp, log);
                }
            }
            Err(e) => log.epoch_checkpoint_failed(e.to_string()),
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
