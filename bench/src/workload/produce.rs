//! The produce workload: batches of a fixed size appended through the engine, round-robin over
//! the partitions, with a window of appends in flight per partition (as a broker serving several
//! producers has), unthrottled or paced to a target rate. Paced runs time each append from its
//! scheduled send time, so a stall shows in the latency instead of silently lowering the rate
//! (no coordinated omission). [`run_per_partition`] keeps the window full on each partition on
//! its own, for the durable sweep.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use nix::sched::{sched_getaffinity, sched_setaffinity, CpuSet};
use nix::unistd::Pid;
use seglog::{Completion, Engine, TopicPartition};

use super::{first_timestamp_ms, make_batch, stamp, Counters, RunReport, Setup, Timeline};
use crate::pct::Hist;

/// What to produce.
#[derive(Clone, Debug)]
pub struct ProduceParams {
    pub total_bytes: u64,
    /// Appends in flight per partition.
    pub window: usize,
    /// Batches per second over all partitions; 0 = as fast as the engine takes them.
    pub rate: f64,
    /// Stop after this long even if `total_bytes` is not reached (0 = no limit).
    pub max_seconds: f64,
    /// Pin the producing thread to a core no shard is pinned to (when there is one), as an
    /// embedding broker would keep its request threads off the shards' cores.
    pub pin_client: bool,
}

/// Pins the calling thread to the first allowed core that no shard of `engine` is pinned to,
/// until the returned guard drops; `None` when there is no such core (or pinning failed).
pub fn pin_off_shards(engine: &Engine) -> seglog::Result<Option<AffinityGuard>> {
    let shard_cores: Vec<usize> = engine.stats()?.iter().filter_map(|s| s.core).collect();
    let Some(core) = seglog::engine::allowed_cores().into_iter().find(|c| !shard_cores.contains(c)) else {
        return Ok(None);
    };
    let saved = AffinityGuard::current();
    Ok(core_affinity::set_for_current(core_affinity::CoreId { id: core }).then_some(saved))
}

/// The calling thread's CPU affinity, put back on drop.
pub struct AffinityGuard {
    /// `None` if it could not be read (nothing is put back then).
    mask: Option<CpuSet>,
}

impl AffinityGuard {
    fn current() -> AffinityGuard {
        // Pid 0 is the calling thread.
        AffinityGuard { mask: sched_getaffinity(Pid::from_raw(0)).ok() }
    }
}

impl Drop for AffinityGuard {
    fn drop(&mut self) {
        if let Some(mask) = &self.mask {
            let _ = sched_setaffinity(Pid::from_raw(0), mask);
        }
    }
}

/// What a produce run left behind, for the read workloads that follow it.
#[derive(Clone, Debug, Default)]
pub struct Produced {
    /// Timestamp of the first batch; batch i carries `first_ts + i` (one millisecond apart).
    pub first_ts: i64,
    pub batches: u64,
}

/// Appends through `engine` and reports. `progress` is called with bytes acknowledged so far.
pub fn run(
    engine: &Engine,
    tps: &[TopicPartition],
    setup: &Setup,
    p: &ProduceParams,
    workload: &str,
    progress: &dyn Fn(u64),
) -> seglog::Result<(RunReport, Produced)> {
    // Restores the thread's affinity when the run ends (the caller's later workloads run free).
    let _pinned = if p.pin_client { pin_off_shards(engine)? } else { None };
    let template = make_batch(setup.batch_bytes, setup.records_per_batch, 0);
    let batch_len = template.len() as u64;
    let total = (p.total_bytes / batch_len).max(1);
    let first_ts = first_timestamp_ms();
    let window = p.window.max(1) * tps.len();
    let mut inflight: VecDeque<(Completion<seglog::log::AppendInfo>, Instant)> = VecDeque::with_capacity(window);
    let mut hist = Hist::new();
    let c0 = Counters::of(engine);
    let t0 = Instant::now();
    let mut timeline = Timeline::new(t0);
    let mut acked = 0u64;
    let deadline = (p.max_seconds > 0.0).then(|| t0 + Duration::from_secs_f64(p.max_seconds));
    let mut sent = 0u64;
    let mut reap = |c: Completion<seglog::log::AppendInfo>, at: Instant, hist: &mut Hist| -> seglog::Result<()> {
        c.wait()?;
        let now = Instant::now();
        hist.record(now.saturating_duration_since(at));
        timeline.add(now, batch_len);
        acked += 1;
        if acked.is_multiple_of(256) {
            progress(acked * batch_len);
        }
        Ok(())
    };
    while sent < total {
        if deadline.is_some_and(|d| Instant::now() >= d) {
            break;
        }
        let mut b = template.clone();
        stamp(&mut b, first_ts + sent as i64);
        let scheduled = if p.rate > 0.0 {
            let at = t0 + Duration::from_secs_f64(sent as f64 / p.rate);
            while Instant::now() < at {
                if let Some((c, at0)) = inflight.pop_front() {
                    reap(c, at0, &mut hist)?;
                } else if at - Instant::now() > Duration::from_micros(200) {
                    std::thread::sleep(Duration::from_micros(100));
                } else {
                    std::hint::spin_loop();
                }
            }
            at
        } else {
            Instant::now()
        };
        let tp = &tps[(sent as usize) % tps.len()];
        inflight.push_back((engine.append(tp, b, 0), scheduled));
        sent += 1;
        if inflight.len() >= window {
            let (c, at) = inflight.pop_front().expect("non-empty");
            reap(c, at, &mut hist)?;
        }
    }
    while let Some((c, at)) = inflight.pop_front() {
        reap(c, at, &mut hist)?;
    }
    let pace = if p.rate > 0.0 { format!("paced {:.0} batches/s", p.rate) } else { "unthrottled".into() };
    let done = Done { engine, setup, workload, t0, c0, acked, batch_len, timeline, hist };
    Ok((done.report(tps.len(), p.window, &pace), Produced { first_ts, batches: acked }))
}

/// How long [`run_per_partition`] polls for completions (yielding the core each round) before
/// it sleeps until one wakes it: as long as [`Completion::wait`] spins at most.
const POLL_SPIN: Duration = Duration::from_micros(500);

/// A yield that took longer than this gave the core away for a scheduler slice (the core is
/// wanted): [`run_per_partition`] stops polling and sleeps, as [`Completion::wait`] does.
const CONTENDED_YIELD: Duration = Duration::from_micros(200);

/// Wakes the producing thread when a completion it polled is delivered.
struct Unpark(std::thread::Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// Appends unthrottled as [`run`] does, but keeps `p.window` appends in flight on each partition
/// on its own: an append that completes is replaced at once, whichever partition it was on, and
/// is timed when it is seen complete. [`run`] waits for the oldest append first, so one slow
/// partition holds back the next appends of every other one (the queue depth drops below
/// partitions x window) and adds its wait to their latency. This is the durable sweep's producer:
/// its fio reference keeps its queue depth full the same way. `p.rate` is ignored; the progress
/// of the run is not reported.
pub fn run_per_partition(
    engine: &Engine,
    tps: &[TopicPartition],
    setup: &Setup,
    p: &ProduceParams,
    workload: &str,
) -> seglog::Result<RunReport> {
    let _pinned = if p.pin_client { pin_off_shards(engine)? } else { None };
    let template = make_batch(setup.batch_bytes, setup.records_per_batch, 0);
    let batch_len = template.len() as u64;
    let total = (p.total_bytes / batch_len).max(1);
    let first_ts = first_timestamp_ms();
    let window = p.window.max(1);
    type Pending = VecDeque<(Completion<seglog::log::AppendInfo>, Instant)>;
    let mut queues: Vec<Pending> = tps.iter().map(|_| VecDeque::with_capacity(window)).collect();
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut hist = Hist::new();
    let c0 = Counters::of(engine);
    let t0 = Instant::now();
    let mut timeline = Timeline::new(t0);
    let deadline = (p.max_seconds > 0.0).then(|| t0 + Duration::from_secs_f64(p.max_seconds));
    let (mut sent, mut acked) = (0u64, 0u64);
    let mut idle_since: Option<Instant> = None;
    loop {
        // Fill every partition's window, one append per partition per pass (round-robin).
        let sending = sent < total && deadline.is_none_or(|d| Instant::now() < d);
        while sending && sent < total {
            let before = sent;
            for (tp, q) in tps.iter().zip(queues.iter_mut()) {
                if q.len() < window && sent < total {
                    let mut b = template.clone();
                    stamp(&mut b, first_ts + sent as i64);
                    q.push_back((engine.append(tp, b, 0), Instant::now()));
                    sent += 1;
                }
            }
            if sent == before {
                break;
            }
        }
        if queues.iter().all(VecDeque::is_empty) {
            break;
        }
        // Take every completed append. A partition's appends complete in order, so only its
        // oldest is polled; a pending poll leaves the waker with it.
        let mut reaped = 0u64;
        let now = Instant::now();
        for q in &mut queues {
            while let Some((c, _)) = q.front_mut() {
                match Pin::new(c).poll(&mut cx) {
                    Poll::Ready(v) => {
                        v?;
                        let (_, at) = q.pop_front().expect("non-empty");
                        hist.record(now.saturating_duration_since(at));
                        timeline.add(now, batch_len);
                        reaped += 1;
                    }
                    Poll::Pending => break,
                }
            }
        }
        acked += reaped;
        if reaped > 0 {
            idle_since = None;
            continue;
        }
        // Nothing completed: poll again after a yield, or sleep once polling has gone on long
        // enough or the core is wanted (every oldest append holds the waker).
        let since = *idle_since.get_or_insert(now);
        let yielded = Instant::now();
        if now.duration_since(since) < POLL_SPIN {
            std::thread::yield_now();
            if yielded.elapsed() <= CONTENDED_YIELD {
                continue;
            }
        }
        std::thread::park_timeout(Duration::from_millis(10));
        idle_since = None;
    }
    let done = Done { engine, setup, workload, t0, c0, acked, batch_len, timeline, hist };
    Ok(done.report(tps.len(), window, "unthrottled, each partition refilled as its appends complete"))
}

/// Which partition each append of [`run_slots`] goes to.
#[derive(Clone, Debug)]
pub enum Pick {
    /// Each partition keeps `window` appends in flight: a completed append is replaced on its
    /// own partition.
    EachPartition,
    /// Each new append goes to a partition drawn from `zipf` (a few partitions hot, most quiet),
    /// the total in flight staying partitions x `window`.
    Skewed(Zipf),
}

/// A Zipf distribution over `0..n`: rank `k` (from 0) is drawn with probability proportional to
/// `1 / (k + 1)^s`, with its own xorshift generator (seeded: runs repeat).
#[derive(Clone, Debug)]
pub struct Zipf {
    cdf: Vec<f64>,
    rng: u64,
}

impl Zipf {
    pub fn new(n: usize, s: f64, seed: u64) -> Zipf {
        let mut cdf = Vec::with_capacity(n.max(1));
        let mut sum = 0.0;
        for k in 0..n.max(1) {
            sum += 1.0 / ((k + 1) as f64).powf(s);
            cdf.push(sum);
        }
        cdf.iter_mut().for_each(|c| *c /= sum);
        Zipf { cdf, rng: seed | 1 }
    }

    pub fn sample(&mut self) -> usize {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        let u = (self.rng >> 11) as f64 / (1u64 << 53) as f64;
        self.cdf.partition_point(|&c| c < u).min(self.cdf.len() - 1)
    }
}

/// Wakes the producer of [`run_slots`] for one slot: the slot goes on the ready list.
struct SlotWaker {
    slot: usize,
    ready: Arc<std::sync::Mutex<Vec<usize>>>,
    thread: std::thread::Thread,
}

impl Wake for SlotWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.ready.lock().expect("ready list").push(self.slot);
        self.thread.unpark();
    }
}

/// Appends unthrottled with partitions x `p.window` appends in flight, each in a slot that is
/// refilled as soon as its append completes, to the partition `pick` says; appends are timed
/// from their send to seen complete. Each slot has its own waker, so a completion costs the
/// producer work for that slot only: with ten thousand partitions, looking at every append in
/// flight after each completion (as [`run_per_partition`] does) would cost the producer more
/// than the engine spends on the append. `p.rate` is ignored; progress is not reported.
pub fn run_slots(
    engine: &Engine,
    tps: &[TopicPartition],
    setup: &Setup,
    p: &ProduceParams,
    mut pick: Pick,
    workload: &str,
) -> seglog::Result<RunReport> {
    let _pinned = if p.pin_client { pin_off_shards(engine)? } else { None };
    let template = make_batch(setup.batch_bytes, setup.records_per_batch, 0);
    let batch_len = template.len() as u64;
    let total = (p.total_bytes / batch_len).max(1);
    let first_ts = first_timestamp_ms();
    let slots = tps.len() * p.window.max(1);
    let ready = Arc::new(std::sync::Mutex::new(Vec::with_capacity(slots)));
    let wakers: Vec<Waker> = (0..slots)
        .map(|slot| Waker::from(Arc::new(SlotWaker { slot, ready: ready.clone(), thread: std::thread::current() })))
        .collect();
    let mut in_flight: Vec<Option<(Completion<seglog::log::AppendInfo>, Instant)>> = Vec::with_capacity(slots);
    let mut hist = Hist::new();
    let c0 = Counters::of(engine);
    let t0 = Instant::now();
    let mut timeline = Timeline::new(t0);
    let deadline = (p.max_seconds > 0.0).then(|| t0 + Duration::from_secs_f64(p.max_seconds));
    let (mut sent, mut acked, mut out) = (0u64, 0u64, 0usize);
    let mut send = |slot: usize, sent: &mut u64| {
        let tp = match &mut pick {
            Pick::EachPartition => &tps[slot % tps.len()],
            Pick::Skewed(z) => &tps[z.sample()],
        };
        let mut b = template.clone();
        stamp(&mut b, first_ts + *sent as i64);
        *sent += 1;
        (engine.append(tp, b, 0), Instant::now())
    };
    // Slots to poll: at first all of them, then those whose waker fired.
    let mut todo: Vec<usize> = Vec::with_capacity(slots);
    for slot in 0..slots {
        if sent < total {
            in_flight.push(Some(send(slot, &mut sent)));
            out += 1;
            todo.push(slot);
        } else {
            in_flight.push(None);
        }
    }
    while out > 0 {
        if todo.is_empty() {
            std::mem::swap(&mut todo, &mut *ready.lock().expect("ready list"));
            if todo.is_empty() {
                std::thread::park_timeout(Duration::from_millis(10));
                continue;
            }
        }
        let now = Instant::now();
        let sending = deadline.is_none_or(|d| now < d);
        while let Some(slot) = todo.pop() {
            let Some((c, at)) = &mut in_flight[slot] else { continue };
            let mut cx = Context::from_waker(&wakers[slot]);
            match Pin::new(c).poll(&mut cx) {
                Poll::Ready(v) => {
                    v?;
                    hist.record(now.saturating_duration_since(*at));
                    timeline.add(now, batch_len);
                    acked += 1;
                    in_flight[slot] = None;
                    out -= 1;
                    if sending && sent < total {
                        in_flight[slot] = Some(send(slot, &mut sent));
                        out += 1;
                        // Polled next round, which registers its waker.
                        ready.lock().expect("ready list").push(slot);
                    }
                }
                Poll::Pending => {}
            }
        }
    }
    let how = match pick {
        Pick::EachPartition => "unthrottled, each partition refilled as its appends complete".to_string(),
        Pick::Skewed(_) => "unthrottled, each append to a Zipf-drawn partition".to_string(),
    };
    let done = Done { engine, setup, workload, t0, c0, acked, batch_len, timeline, hist };
    Ok(done.report(tps.len(), p.window.max(1), &how))
}

/// What a produce run ends with, for its report.
struct Done<'a> {
    engine: &'a Engine,
    setup: &'a Setup,
    workload: &'a str,
    t0: Instant,
    c0: Counters,
    acked: u64,
    batch_len: u64,
    timeline: Timeline,
    hist: Hist,
}

impl Done<'_> {
    /// The run's report: `acked` batches over the time since `t0`, the engine's counters since
    /// `c0`, and a note naming the partitions, shards, window and `how` appends were sent.
    fn report(self, partitions: usize, window: usize, how: &str) -> RunReport {
        let seconds = self.t0.elapsed().as_secs_f64();
        let delta = Counters::of(self.engine).since(&self.c0);
        let mut r = RunReport::for_engine(self.workload, self.setup, self.engine);
        r.ops = self.acked;
        r.bytes = self.acked * self.batch_len;
        r.records = self.acked * self.setup.records_per_batch as u64;
        r.timeline = self.timeline.points();
        r.note =
            format!("{partitions} partitions, {} shards, window {window}/partition, {how}", self.engine.shard_count());
        r.finish(self.hist, seconds, &delta)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The per-partition producer appends every batch asked for, durably, across every
    /// partition, and times each one.
    #[test]
    fn run_per_partition_appends_everything_on_every_partition() {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let setup = Setup {
            mode: seglog::IoMode::Sync,
            shards: 1,
            partitions: 4,
            batch_bytes: 4096,
            records_per_batch: 4,
            durability: seglog::Durability::EveryBatch,
            segment_bytes: 1 << 20,
            index_interval_bytes: 4096,
            preallocate: false,
            zero_fill: seglog::ZeroFill::Off,
            sync_method: seglog::SyncMethod::Fdatasync,
        };
        let (engine, tps) = setup.open(dir.path()).unwrap();
        let p = ProduceParams { total_bytes: 100 * 4096, window: 3, rate: 0.0, max_seconds: 0.0, pin_client: false };
        let r = run_per_partition(&engine, &tps, &setup, &p, "durable-sweep").unwrap();
        assert_eq!((r.ops, r.bytes, r.hist.count()), (100, 100 * 4096, 100));
        assert!(r.fsyncs > 0 && r.bytes_per_flush >= 4096.0, "{r:?}");
        let ends: Vec<i64> = engine.partitions().unwrap().iter().map(|p| p.2).collect();
        assert_eq!(ends.iter().sum::<i64>(), 100 * 4, "{ends:?}");
        assert!(ends.iter().all(|&e| e > 0), "{ends:?}");
        engine.shutdown().unwrap();
    }
}
