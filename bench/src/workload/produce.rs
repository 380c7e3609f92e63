//! The produce workload: batches of a fixed size appended through the engine, round-robin over
//! the partitions, with a window of appends in flight per partition (as a broker serving several
//! producers has), unthrottled or paced to a target rate. Paced runs time each append from its
//! scheduled send time, so a stall shows in the latency instead of silently lowering the rate
//! (no coordinated omission).

use std::collections::VecDeque;
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
    let seconds = t0.elapsed().as_secs_f64();
    let delta = Counters::of(engine).since(&c0);
    let mut r = RunReport::for_engine(workload, setup, engine);
    r.ops = acked;
    r.bytes = acked * batch_len;
    r.records = acked * setup.records_per_batch as u64;
    r.timeline = timeline.points();
    r.note = format!(
        "{} partitions, {} shards, window {}/partition, {}",
        tps.len(),
        engine.shard_count(),
        p.window,
        if p.rate > 0.0 { format!("paced {:.0} batches/s", p.rate) } else { "unthrottled".into() }
    );
    Ok((r.finish(hist, seconds, &delta), Produced { first_ts, batches: acked }))
}
