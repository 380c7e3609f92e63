//! The producer side of the shards: the requests a caller sends, each shard's queue and
//! doorbell, and the routing of a call to its shard.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crossbeam_channel::{Sender, TrySendError};

use super::{Backpressure, ShardStats, TopicPartition};
use crate::completion::{pair, Completion};
use crate::config::LogConfig;
use crate::error::{Error, Result};
use crate::io::eventfd::EventFd;
use crate::log::{AppendInfo, FetchData, ListOffset};
use crate::segment::TimestampAndOffset;

/// A closure run on a partition's log inside its shard.
pub(crate) type LogFn = Box<dyn FnOnce(Option<&mut crate::log::Log>) + Send>;

/// What opening a partition takes ([`Request::Open`]).
pub(crate) struct OpenRequest {
    pub tp: TopicPartition,
    pub config: Option<LogConfig>,
    pub recovery: crate::log::Recovery,
    pub log_start_offset: Option<i64>,
}

pub(crate) enum Request {
    Open(OpenRequest, crate::completion::Completer<crate::log::LoadReport>),
    /// Closes one partition: cleanly when it can, else (a failed log) leaving it to recovery at
    /// its next open.
    Close {
        tp: TopicPartition,
        done: crate::completion::Completer<()>,
    },
    /// Closes one partition, forgets it, and removes its directory
    /// ([`super::Engine::delete_partition`]).
    Delete {
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
        from: AppendFrom,
        done: crate::completion::Completer<AppendInfo>,
    },
    Fetch {
        tp: TopicPartition,
        offset: i64,
        max_bytes: u32,
        upper: FetchUpper,
        min_one: bool,
        done: crate::completion::Completer<FetchData>,
    },
    ListOffset {
        tp: TopicPartition,
        target: ListOffset,
        isolation: Option<crate::log::FetchIsolation>,
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

/// Who an append comes from.
#[derive(Clone, Copy, Debug)]
pub(crate) enum AppendFrom {
    /// A client's batches, a leader append in this leader epoch.
    Leader(i32),
    /// The transaction coordinator's marker (the request's records are empty), a leader append
    /// in this leader epoch.
    Coordinator(crate::log::TxnMarker, i32),
    /// A follower append.
    Follower,
}

/// Where a fetch stops.
#[derive(Clone, Copy, Debug)]
pub(crate) enum FetchUpper {
    /// Before this offset (`None`: the log end).
    Offset(Option<i64>),
    /// Where this isolation lets a fetch see.
    Isolation(crate::log::FetchIsolation),
}

/// The producer side of a shard: its queue and its doorbell.
#[derive(Debug)]
pub(crate) struct Doorbell {
    pub(crate) fd: EventFd,
    pub(crate) sleeping: AtomicBool,
}

impl Doorbell {
    pub(crate) fn ring_if_sleeping(&self) {
        if self.sleeping.swap(false, Ordering::SeqCst) {
            self.fd.notify();
        }
    }
}

#[derive(Debug)]
pub(super) struct ShardLink {
    pub(super) tx: Sender<Request>,
    pub(super) bell: Arc<Doorbell>,
}

/// What producers and the housekeeping thread share: the shards' queues and doorbells.
#[derive(Debug)]
pub(super) struct Inner {
    pub(super) shards: Vec<ShardLink>,
    pub(super) backpressure: Backpressure,
    pub(super) queue_capacity: usize,
}

impl Inner {
    pub(super) fn send(&self, shard: usize, req: Request) -> Result<()> {
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

    pub(super) fn call<T>(
        &self,
        shard: usize,
        make: impl FnOnce(crate::completion::Completer<T>) -> Request,
    ) -> Completion<T> {
        let (c, r) = pair();
        match self.send(shard, make(c)) {
            Ok(()) => r,
            Err(e) => Completion::ready(Err(e)),
        }
    }

    /// Asks every shard and gathers the answers.
    pub(super) fn gather<T>(&self, make: impl Fn(crate::completion::Completer<Vec<T>>) -> Request) -> Result<Vec<T>> {
        let pending: Vec<_> = (0..self.shards.len()).map(|s| self.call(s, &make)).collect();
        let mut out = Vec::new();
        for p in pending {
            out.extend(p.wait()?);
        }
        Ok(out)
    }
}
