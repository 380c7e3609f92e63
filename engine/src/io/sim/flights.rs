//! Asynchronous batches on the simulated disk ([`Storage::submit_async`]): nothing runs at
//! submission; each operation runs later, when its turn comes at a poll (by a seeded draw) or
//! when its batch is claimed with `wait`, so completions arrive late and out of order, across
//! batches and between the unlinked operations of one batch. A linked operation runs only after
//! the one before it, and is cancelled (ECANCELED) when that one failed, as io_uring does.
//!
//! An operation runs through its file's own methods, so it counts as an I/O when it runs (not
//! when it was submitted), can be refused by [`SimStorage::halt_after`] and can hit an injected
//! fault. A power cut ([`SimStorage::crash_with`]) finds the writes that have not run yet still
//! in flight: each may land whole, torn, or not at all.

use std::collections::BTreeMap;

use super::*;
use crate::io::{AsyncIo, AsyncOutcome, IoCompletion, IoOp, IoOpKind};

/// The batches in flight on one simulated disk (shared by its clones).
#[derive(Debug)]
pub(super) struct Flights {
    batches: BTreeMap<u64, Flight>,
    rng: SimRng,
    /// Chance (percent) that an operation whose turn has come runs at a poll.
    complete_percent: u32,
    /// Writes that were to run after the power was cut ([`SimStorage::halt_after`]): they
    /// failed, and a crash may still land them, as a device may finish what it had queued.
    cut: Vec<WriteInFlight>,
    /// Batches run whole, in order, at submission (as a backend without asynchronous I/O runs
    /// them): for tests whose point is elsewhere and that count on the order of the writes.
    at_once: bool,
}

impl Default for Flights {
    fn default() -> Self {
        Flights {
            batches: BTreeMap::new(),
            rng: SimRng::new(0xF11E),
            complete_percent: 50,
            cut: Vec::new(),
            at_once: false,
        }
    }
}

#[derive(Debug)]
struct Flight {
    ops: Vec<IoOp>,
    /// Each write's inode when it was submitted (for a crash with the write in flight).
    inos: Vec<Option<usize>>,
    results: Vec<Option<Result<usize>>>,
}

/// A write that had not run when the power was cut: its inode, position and bytes.
#[derive(Debug)]
pub(super) struct WriteInFlight {
    pub(super) ino: usize,
    pub(super) pos: u64,
    pub(super) bytes: Vec<u8>,
}

impl Flight {
    /// Operations whose turn has come: not run yet, and not waiting for a linked predecessor.
    fn ready(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.ops.len()).filter(|&i| {
            self.results[i].is_none() && (i == 0 || !self.ops[i - 1].link_next || self.results[i - 1].is_some())
        })
    }

    fn done(&self) -> bool {
        self.results.iter().all(Option::is_some)
    }

    /// Runs operation `i`; with the power cut (`halted`) it fails (as the storage refuses it) and
    /// a write goes to `cut`, still in flight for the crash.
    fn run(&mut self, i: usize, halted: &dyn Fn() -> bool, cut: &mut Vec<WriteInFlight>) {
        let cancelled = i > 0 && self.ops[i - 1].link_next && self.results[i - 1].as_ref().is_some_and(|r| r.is_err());
        let op = &self.ops[i];
        if !cancelled && halted() {
            if let (Some(ino), IoOpKind::Write { buf, pos, .. }) = (self.inos[i], &op.kind) {
                cut.push(WriteInFlight { ino, pos: *pos, bytes: buf.to_vec() });
            }
        }
        self.results[i] = Some(if cancelled { Err(op.cancelled()) } else { op.run() });
    }
}

impl Flights {
    pub(super) fn set_completions(&mut self, seed: u64, complete_percent: u32) {
        self.rng = SimRng::new(seed);
        self.complete_percent = complete_percent.min(100);
        self.at_once = false;
    }

    pub(super) fn set_at_once(&mut self) {
        self.at_once = true;
    }

    /// Queues `ops` (with each write's inode) as one batch. After the power cut (`halted`) the
    /// batch fails at once and never lands: no device takes a write issued after power loss.
    pub(super) fn submit(&mut self, ops: Vec<IoOp>, inos: Vec<Option<usize>>, halted: bool) -> AsyncIo {
        if ops.is_empty() || self.at_once || halted {
            return AsyncIo::Ready(crate::io::submit_one_by_one(ops));
        }
        // Unique in the process: a ticket claimed on another simulated disk is lost, not taken
        // for one of that disk's batches.
        static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let id = NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let results = ops.iter().map(|_| None).collect();
        self.batches.insert(id, Flight { ops, inos, results });
        AsyncIo::Queued(id)
    }

    /// One poll: every operation whose turn has come runs with [`Flights::complete_percent`]
    /// chance, in a random order.
    pub(super) fn step(&mut self, halted: &dyn Fn() -> bool) {
        let mut ready: Vec<(u64, usize)> =
            self.batches.iter().flat_map(|(&id, f)| f.ready().map(move |i| (id, i))).collect();
        // Fisher-Yates with the seeded draw: the order completions arrive in.
        for k in (1..ready.len()).rev() {
            let j = self.rng.below(k as u64 + 1) as usize;
            ready.swap(k, j);
        }
        for (id, i) in ready {
            if self.rng.percent(self.complete_percent) {
                if let Some(f) = self.batches.get_mut(&id) {
                    f.run(i, halted, &mut self.cut);
                }
            }
        }
    }

    /// Runs what is left of batch `id`, the unlinked operations in a random order.
    fn finish(&mut self, id: u64, halted: &dyn Fn() -> bool) {
        let Some(f) = self.batches.get_mut(&id) else { return };
        loop {
            let ready: Vec<usize> = f.ready().collect();
            if ready.is_empty() {
                return;
            }
            let i = ready[self.rng.below(ready.len() as u64) as usize];
            f.run(i, halted, &mut self.cut);
        }
    }

    /// See [`Storage::claim_async`].
    pub(super) fn claim(
        &mut self,
        id: u64,
        wait: bool,
        halted: &dyn Fn() -> bool,
    ) -> std::result::Result<AsyncOutcome, AsyncIo> {
        if !self.batches.contains_key(&id) {
            return Ok(AsyncOutcome::Lost);
        }
        if wait {
            self.finish(id, halted);
        } else {
            self.step(halted);
        }
        if !self.batches.get(&id).is_some_and(Flight::done) {
            return Err(AsyncIo::Queued(id));
        }
        let Some(f) = self.batches.remove(&id) else { return Ok(AsyncOutcome::Lost) };
        let done = f
            .ops
            .into_iter()
            .zip(f.results)
            .map(|(op, r)| IoCompletion { op, result: r.unwrap_or_else(|| Err(eio_error("never ran"))) })
            .collect();
        Ok(AsyncOutcome::Done(done))
    }

    pub(super) fn any(&self) -> bool {
        !self.batches.is_empty()
    }

    /// Operations submitted that have not run yet, and writes cut by the power loss.
    pub(super) fn not_run(&self) -> usize {
        self.cut.len() + self.batches.values().map(|f| f.results.iter().filter(|r| r.is_none()).count()).sum::<usize>()
    }

    /// The writes cut by the power loss, then those that have not run yet, in submission order.
    pub(super) fn writes_not_run(&self) -> Vec<WriteInFlight> {
        let mut out: Vec<WriteInFlight> =
            self.cut.iter().map(|w| WriteInFlight { ino: w.ino, pos: w.pos, bytes: w.bytes.clone() }).collect();
        for f in self.batches.values() {
            for (i, op) in f.ops.iter().enumerate() {
                if let (None, Some(ino), IoOpKind::Write { buf, pos, .. }) = (&f.results[i], f.inos[i], &op.kind) {
                    out.push(WriteInFlight { ino, pos: *pos, bytes: buf.to_vec() });
                }
            }
        }
        out
    }
}

fn eio_error(what: &str) -> Error {
    Error::io("write", Path::new("(simulated batch)"), eio(what))
}
