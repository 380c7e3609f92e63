//! The mixed run: on a log that already holds data, for a fixed time, a paced producer, a consumer
//! following the tail, a lagging consumer reading the sealed segments from the start (and again
//! from the start when it reaches them), and a seek-heavy consumer, all at once against the same
//! shards. One row per role; the I/O counters and CPU of the whole run go on the producer's row.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use seglog::{Engine, TopicPartition};

use super::consume::{next_offset, offsets};
use super::produce::{self, ProduceParams};
use super::{Counters, RunReport, Setup};
use crate::pct::Hist;

/// What to run.
#[derive(Clone, Debug)]
pub struct MixedParams {
    pub seconds: f64,
    /// Producer pace, batches per second over all partitions.
    pub rate: f64,
    pub window: usize,
    pub seed: u64,
}

#[derive(Default)]
struct Role {
    hist: Hist,
    bytes: u64,
    ops: u64,
}

fn role_report(name: &str, setup: &Setup, engine: &Engine, role: Role, seconds: f64, note: &str) -> RunReport {
    let mut r = RunReport::for_engine(name, setup, engine);
    r.ops = role.ops;
    r.bytes = role.bytes;
    r.records = role.bytes / setup.batch_bytes.max(1) as u64 * setup.records_per_batch as u64;
    r.note = note.into();
    r.finish(role.hist, seconds, &Counters::default())
}

pub fn run(engine: &Engine, tps: &[TopicPartition], setup: &Setup, p: &MixedParams) -> seglog::Result<Vec<RunReport>> {
    let offs = offsets(engine, tps)?;
    let stop = AtomicBool::new(false);
    let c0 = Counters::of(engine);
    let t0 = Instant::now();
    let (prod, tail, lag, seek) = std::thread::scope(|s| {
        let stop = &stop;
        let offs = &offs;
        let tail = s.spawn(move || -> seglog::Result<Role> {
            let mut role = Role::default();
            let tp = &tps[0];
            let mut pos = offs[0].1;
            while !stop.load(Ordering::Relaxed) {
                let st = Instant::now();
                let d = engine.fetch(tp, pos, 1 << 20, None).wait()?;
                if d.records.is_empty() {
                    std::thread::sleep(Duration::from_micros(50));
                    continue;
                }
                role.hist.record(st.elapsed());
                role.ops += 1;
                role.bytes += d.records.len() as u64;
                pos = next_offset(&d.records).unwrap_or(pos);
            }
            Ok(role)
        });
        let lag = s.spawn(move || -> seglog::Result<Role> {
            let mut role = Role::default();
            let tp = &tps[tps.len() - 1];
            let (start, end) = (offs[tps.len() - 1].0, offs[tps.len() - 1].2);
            let mut pos = start;
            while !stop.load(Ordering::Relaxed) && end > start {
                let st = Instant::now();
                let d = engine.fetch(tp, pos, 1 << 20, Some(end)).wait()?;
                role.hist.record(st.elapsed());
                role.ops += 1;
                role.bytes += d.records.len() as u64;
                pos = match next_offset(&d.records) {
                    Some(n) if n < end => n,
                    _ => start,
                };
            }
            Ok(role)
        });
        let seek = s.spawn(move || -> seglog::Result<Role> {
            let mut role = Role::default();
            let mut rng = super::Rng::new(p.seed);
            while !stop.load(Ordering::Relaxed) {
                let i = rng.range(0, tps.len() as i64) as usize;
                let off = rng.range(offs[i].0, offs[i].1);
                let st = Instant::now();
                let d = engine.fetch(&tps[i], off, setup.batch_bytes as u32, None).wait()?;
                role.hist.record(st.elapsed());
                role.ops += 1;
                role.bytes += d.records.len() as u64;
            }
            Ok(role)
        });
        let pp = ProduceParams {
            total_bytes: u64::MAX / 2,
            window: p.window,
            rate: p.rate,
            max_seconds: p.seconds,
            pin_client: false,
        };
        let prod = produce::run(engine, tps, setup, &pp, "mixed/produce", &|_| {});
        stop.store(true, Ordering::Relaxed);
        let join = |h: std::thread::ScopedJoinHandle<'_, seglog::Result<Role>>| {
            h.join().unwrap_or_else(|_| Err(seglog::Error::InvalidConfig("a mixed-run thread panicked".into())))
        };
        (prod, join(tail), join(lag), join(seek))
    });
    let seconds = t0.elapsed().as_secs_f64();
    let delta = Counters::of(engine).since(&c0);
    let (mut prod, _) = prod?;
    // The producer's row carries the whole run's counters.
    let hist = std::mem::take(&mut prod.hist);
    let secs = prod.seconds;
    let mut prod = prod.finish(hist, secs, &delta);
    prod.note = format!("{}; I/O counters and CPU are the whole mixed run's", prod.note);
    Ok(vec![
        prod,
        role_report("mixed/tail", setup, engine, tail?, seconds, "follows the log end of the first partition"),
        role_report("mixed/lag", setup, engine, lag?, seconds, "sealed segments from the start, 1 MiB fetches"),
        role_report("mixed/seek", setup, engine, seek?, seconds, "one batch at random offsets"),
    ])
}
