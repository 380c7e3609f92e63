//! The shard's shared flush for [`super::SyncMethod::Syncfs`]: the appends whose plain write
//! completed and that wait for a syncfs, and the flusher thread that runs one syncfs at a time
//! for the shard so that the shard never blocks on it. It owns no log and acknowledges nothing:
//! the shard moves appends in and completes or fails them with the outcome (shard.rs).

use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use crossbeam_channel::{Receiver, Sender, TryRecvError};

use super::{Doorbell, TopicPartition};
use crate::error::{Error, Result};
use crate::io::Storage;

/// Appends of one partition whose write completed, with the partition's written offset then:
/// a syncfs started after that makes every append below it durable.
pub(super) type Unflushed = (TopicPartition, Vec<super::shard::Ack>, i64);

/// A shard's group commit: what waits for the next syncfs, what the one in flight covers.
pub(super) struct SharedFlush {
    /// Written, waiting for a syncfs to start.
    pub(super) unflushed: Vec<Unflushed>,
    /// Covered by the syncfs in flight.
    pub(super) flushing: Vec<Unflushed>,
    /// When the syncfs in flight started; `None` when none is.
    pub(super) started: Option<Instant>,
    flusher: Flusher,
}

impl SharedFlush {
    pub(super) fn new(flusher: Flusher) -> SharedFlush {
        SharedFlush { unflushed: Vec::new(), flushing: Vec::new(), started: None, flusher }
    }

    /// Starts a syncfs covering everything unflushed, unless one is in flight or nothing waits;
    /// true when it started one.
    pub(super) fn start(&mut self) -> bool {
        if self.started.is_some() || self.unflushed.is_empty() {
            return false;
        }
        self.flushing = std::mem::take(&mut self.unflushed);
        self.started = Some(Instant::now());
        self.flusher.request();
        true
    }

    /// True when the syncfs in flight is done (its outcome waits for [`SharedFlush::finish`]).
    pub(super) fn done(&self) -> bool {
        self.started.is_some() && self.flusher.done()
    }

    /// The outcome of the syncfs in flight with what it covered and when it started, once it is
    /// done (with `wait`, blocking until then); `None` while it runs or when none is in flight.
    pub(super) fn finish(&mut self, wait: bool) -> Option<(Result<()>, Vec<Unflushed>, Instant)> {
        let started = self.started?;
        let outcome = self.flusher.outcome(wait)?;
        self.started = None;
        Some((outcome, std::mem::take(&mut self.flushing), started))
    }

    /// Takes `tp`'s appends out of both lists (the partition closes).
    pub(super) fn take(&mut self, tp: &TopicPartition) -> Vec<super::shard::Ack> {
        let mut out = Vec::new();
        for list in [&mut self.flushing, &mut self.unflushed] {
            list.retain_mut(|(t, acks, _)| {
                if t != tp {
                    return true;
                }
                out.append(acks);
                false
            });
        }
        out
    }

    /// `tp` was truncated to `end`: none of its entries covers an offset past it.
    pub(super) fn truncated(&mut self, tp: &TopicPartition, end: i64) {
        for (t, _, offset) in self.flushing.iter_mut().chain(self.unflushed.iter_mut()) {
            if t == tp {
                *offset = (*offset).min(end);
            }
        }
    }

    /// True while appends of `tp` wait for a syncfs or are covered by the one in flight.
    pub(super) fn holds(&self, tp: &TopicPartition) -> bool {
        self.flushing.iter().chain(&self.unflushed).any(|(t, ..)| t == tp)
    }

    /// True while appends wait for a syncfs or one is in flight.
    pub(super) fn pending(&self) -> bool {
        self.started.is_some() || !self.unflushed.is_empty()
    }
}

/// The flusher thread of one shard (`seglog-flush-<shard>`): runs a syncfs of the data
/// directory's filesystem on each request, one at a time, through one descriptor kept open for
/// its life ([`Storage::filesystem_syncer`]: no writeback error escapes it), hands the result
/// back and rings the shard's doorbell, so that a shard asleep wakes for it. Dropped, it stops
/// and is joined.
pub(super) struct Flusher {
    /// `None` once dropped, which stops the thread.
    requests: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
    results: Receiver<Result<()>>,
    dir: PathBuf,
}

impl Flusher {
    /// Opens the syncfs descriptor and starts the thread; either failing fails the engine's
    /// open.
    pub(super) fn spawn(shard: usize, storage: &dyn Storage, dir: PathBuf, bell: Arc<Doorbell>) -> Result<Flusher> {
        let (req_tx, req_rx) = crossbeam_channel::bounded::<()>(1);
        let (res_tx, res_rx) = crossbeam_channel::bounded::<Result<()>>(1);
        // Opened here, as the shard starts: errors from now on are reported to it.
        let mut sync = storage.filesystem_syncer(&dir)?;
        let thread = std::thread::Builder::new()
            .name(format!("seglog-flush-{shard}"))
            .spawn(move || {
                while req_rx.recv().is_ok() {
                    if res_tx.send(sync()).is_err() {
                        return;
                    }
                    // After the result is in the channel: a shard that saw no result before it
                    // said it sleeps is woken (the same order as a request's, request.rs).
                    bell.ring_if_sleeping();
                }
            })
            .map_err(|e| Error::io("spawn", format!("shard {shard}'s flusher"), e))?;
        Ok(Flusher { requests: Some(req_tx), thread: Some(thread), results: res_rx, dir })
    }

    /// Asks for one syncfs (the caller has none in flight).
    fn request(&mut self) {
        if let Some(tx) = &self.requests {
            // The thread is gone only if it panicked: `outcome` reports that.
            let _ = tx.send(());
        }
    }

    fn done(&self) -> bool {
        !self.results.is_empty()
    }

    /// The result of the syncfs requested, once it is there (with `wait`, blocking until then).
    fn outcome(&self, wait: bool) -> Option<Result<()>> {
        let r =
            if wait { self.results.recv().map_err(|_| TryRecvError::Disconnected) } else { self.results.try_recv() };
        match r {
            Ok(r) => Some(r),
            Err(TryRecvError::Empty) => None,
            Err(TryRecvError::Disconnected) => Some(Err(Error::io(
                "syncfs",
                self.dir.clone(),
                std::io::Error::other("the shard's flusher thread stopped"),
            ))),
        }
    }
}

impl Drop for Flusher {
    fn drop(&mut self) {
        self.requests.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The shard's shared flush on the simulated disk (the engine runs on it only here: it opens
/// its own storage otherwise): what an acknowledgement promises survives a power cut that keeps
/// only what was made durable, and a failed syncfs fails the appends waiting for it and their
/// partitions, which take appends again once opened again.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::builder::BatchBuilder;
    use crate::io::sim::{CrashConfig, Fault, SimRng, SimStorage};
    use crate::{Durability, Engine, EngineConfig, SyncMethod};

    const DIR: &str = "/data";

    fn batch(i: usize) -> Vec<u8> {
        let mut b = BatchBuilder::new();
        let now = crate::config::Clock::now_ms(&crate::config::SystemClock);
        b.push(now, None, Some(&vec![(i % 251) as u8; 100 + i * 7 % 3000]), &[]);
        b.build().unwrap()
    }

    fn engine(sim: &SimStorage) -> Engine {
        let mut cfg = EngineConfig::new(DIR);
        cfg.shards = Some(1);
        cfg.pin_threads = false;
        cfg.durability = Durability::EveryBatch;
        cfg.sync_method = SyncMethod::Syncfs;
        Engine::open_on(cfg, Arc::new(sim.clone())).unwrap()
    }

    /// Appends `n` batches to each partition, four at a time per partition; returns the
    /// outcomes.
    fn append_all(e: &Engine, tps: &[TopicPartition], from: usize, n: usize) -> Vec<Result<crate::log::AppendInfo>> {
        let mut out = Vec::new();
        for round in (from..from + n).step_by(4) {
            let pending: Vec<_> = (round..(round + 4).min(from + n))
                .flat_map(|i| tps.iter().map(move |tp| (tp, i)))
                .map(|(tp, i)| e.append(tp, batch(i), 0))
                .collect();
            out.extend(pending.into_iter().map(|p| p.wait()));
        }
        out
    }

    fn end_of(e: &Engine, tp: &TopicPartition) -> (i64, i64) {
        e.with_log(tp, |l| Ok((l.recovery_point(), l.log_end_offset()))).wait().unwrap()
    }

    /// Lets every syncfs through when dropped (declared after the engine, it drops first, so a
    /// failing test does not leave the engine's shutdown waiting at the gate).
    struct OpenGate(SimStorage);

    impl Drop for OpenGate {
        fn drop(&mut self) {
            self.0.allow_syncfs(None);
        }
    }

    /// Waits until `done`, failing the test (`what` never happened) after 20 seconds.
    fn until(what: &str, mut done: impl FnMut() -> bool) {
        let deadline = Instant::now() + std::time::Duration::from_secs(20);
        while !done() {
            assert!(Instant::now() < deadline, "{what}");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    /// Waits until a syncfs waits at the simulated disk's gate.
    fn until_syncfs_waits(sim: &SimStorage) {
        until("no syncfs came to the gate", || sim.syncfs_waiting() > 0);
    }

    /// A truncation while a syncfs is in flight for appends it cuts: the syncfs, once done,
    /// moves the recovery point to the cut and no further, although the appends it covered
    /// reached past it. The appends that replace them after the cut were written after the
    /// syncfs started, so it does not cover them: a recovery point past the cut would claim
    /// them durable.
    #[test]
    fn a_truncation_under_a_syncfs_in_flight_keeps_the_recovery_point_at_the_cut() {
        let sim = SimStorage::new();
        let e = engine(&sim);
        let _gate = OpenGate(sim.clone());
        let tp = TopicPartition::new("t", 0);
        e.open_partition(&tp, None).wait().unwrap();
        sim.allow_syncfs(Some(0));
        // One append of 8 batches: one write, and the syncfs started after it covers all 8.
        let eight: Vec<u8> = (0..8).flat_map(batch).collect();
        let first = e.append(&tp, eight, 0);
        until_syncfs_waits(&sim);
        let cut = e.with_log(&tp, |l| l.truncate_to(4)).wait().unwrap();
        assert!(cut, "the truncation cut the unsynced appends");
        let after: Vec<_> = (8..12).map(|i| e.append(&tp, batch(i), 0)).collect();
        // The appends after the cut are written and wait for the next syncfs; then the first
        // one may finish, and the next one starts (and waits) once its outcome is applied.
        until("the appends after the cut were not written", || {
            e.with_log(&tp, |l| Ok(l.written_offset())).wait().unwrap() >= 8
        });
        sim.allow_syncfs(Some(1));
        assert_eq!(first.wait().unwrap().first_offset, 0);
        until_syncfs_waits(&sim);
        assert_eq!(end_of(&e, &tp), (4, 8), "the first syncfs made durable up to the cut, no further");
        sim.allow_syncfs(None);
        for (i, a) in after.into_iter().enumerate() {
            assert_eq!(a.wait().unwrap().first_offset, 4 + i as i64);
        }
        assert_eq!(end_of(&e, &tp), (8, 8));
        e.shutdown().unwrap();
    }

    #[test]
    fn acknowledged_appends_survive_a_cut_and_a_failed_syncfs_fails_them() {
        let sim = SimStorage::new();
        sim.set_async_completions(7, 100);
        let e = engine(&sim);
        let tps: Vec<TopicPartition> = (0..3).map(|p| TopicPartition::new("g", p)).collect();
        for tp in &tps {
            e.open_partition(tp, None).wait().unwrap();
        }
        assert!(append_all(&e, &tps, 0, 40).iter().all(|r| r.is_ok()));
        let stats = e.stats().unwrap().remove(0);
        assert!(stats.shared_flushes > 0 && stats.shared_flushes <= 40, "{} shared flushes", stats.shared_flushes);
        assert_eq!(stats.flush_latency.count(), stats.shared_flushes);
        let ends: Vec<(i64, i64)> = tps.iter().map(|tp| end_of(&e, tp)).collect();
        for (tp, (rp, leo)) in tps.iter().zip(&ends) {
            assert_eq!(rp, leo, "{tp}: every acknowledged append is below the recovery point");
        }

        // A cut now keeps every acknowledged append: no shutdown, only the syncfs made it durable.
        let cut = sim.crash_with(&mut SimRng::new(3), &CrashConfig::DURABLE_ONLY);
        let e2 = engine(&cut);
        let reopened: Vec<(TopicPartition, i64, i64)> = e2.partitions().unwrap();
        assert_eq!(reopened.len(), ends.len(), "every partition is back after the cut");
        for ((tp, _, leo), (_, want)) in reopened.iter().zip(&ends) {
            assert_eq!(leo, want, "{tp} after the cut");
        }
        e2.shutdown().unwrap();

        // The next sync fails: it is the syncfs covering the next appends. Each partition's
        // appends fail together (those arriving after the failure find the partition failed),
        // unless all of them came after it was handled.
        sim.inject(Fault::Sync(sim.counters().syncs + 1));
        let outcomes = append_all(&e, &tps, 40, 4);
        let listed: Vec<TopicPartition> = e.failed_partitions().unwrap().into_iter().map(|(tp, _)| tp).collect();
        assert!(!listed.is_empty(), "{outcomes:?}");
        for (i, (tp, (_, leo))) in tps.iter().zip(&ends).enumerate() {
            let mine: Vec<_> = outcomes.iter().skip(i).step_by(tps.len()).collect();
            if listed.contains(tp) {
                assert!(mine.iter().all(|r| matches!(r, Err(Error::Failed { .. }))), "{tp}: {mine:?}");
                assert_eq!(end_of(&e, tp), (*leo, *leo), "{tp}: the failed appends are rolled back");
            } else {
                assert!(mine.iter().all(|r| r.is_ok()), "{tp}: {mine:?}");
            }
        }

        // Opened again, the partitions take appends, acknowledged by the next syncfs.
        for tp in &tps {
            e.open_partition(tp, None).wait().unwrap();
        }
        assert!(append_all(&e, &tps, 44, 8).iter().all(|r| r.is_ok()));
        for tp in &tps {
            let (rp, leo) = end_of(&e, tp);
            assert_eq!(rp, leo, "{tp}");
        }
        e.shutdown().unwrap();
    }
}
