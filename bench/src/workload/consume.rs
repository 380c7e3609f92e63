//! The read workloads, on a log a produce run left: consumers at the tail (through the engine, and
//! the same read timed inside the shard), a lagging consumer catching up over the sealed segments,
//! seek-heavy consumers (random offsets across every segment, the seeds' replay case), warm
//! offset lookups (index search plus the header walk, in the shard, over the in-memory tail), and
//! time lookups (ListOffsets by timestamp).

use std::time::Instant;

use seglog::format::batch::{BatchHeader, BATCH_HEADER_SIZE};
use seglog::log::ListOffset;
use seglog::{Engine, TopicPartition};

use super::produce::Produced;
use super::{Counters, RunReport, Setup, Timeline};
use crate::pct::Hist;

/// The next offset after the whole batches in `records` (`None` when it holds none).
pub fn next_offset(records: &[u8]) -> Option<i64> {
    let mut pos = 0usize;
    let mut next = None;
    while pos + BATCH_HEADER_SIZE <= records.len() {
        let h = BatchHeader::parse(&records[pos..]).ok()?;
        next = Some(h.next_offset());
        pos += h.size_in_bytes() as usize;
    }
    next
}

/// (log start, log end, active segment base) of each partition, in `tps` order.
pub fn offsets(engine: &Engine, tps: &[TopicPartition]) -> seglog::Result<Vec<(i64, i64, i64)>> {
    tps.iter()
        .map(|tp| {
            engine
                .with_log(tp, |log| {
                    Ok((log.log_start_offset(), log.log_end_offset(), log.active_segment().base_offset()))
                })
                .wait()
        })
        .collect()
}

/// Fetches of the newest batches (each within the tail cache), one at a time through the engine.
pub fn tail(engine: &Engine, tps: &[TopicPartition], setup: &Setup, fetches: u64) -> seglog::Result<RunReport> {
    let offs = offsets(engine, tps)?;
    let per = setup.records_per_batch as i64;
    let batch = setup.batch_bytes as u32;
    // Warm up: the first fetches of a partition fill caches and wake the shard.
    for (i, tp) in tps.iter().enumerate() {
        engine.fetch(tp, (offs[i].1 - 1).max(offs[i].0), batch, None).wait()?;
    }
    let mut hist = Hist::new();
    let c0 = Counters::of(engine);
    let t0 = Instant::now();
    let mut bytes = 0u64;
    for k in 0..fetches {
        let i = (k as usize) % tps.len();
        let back = ((k / tps.len() as u64) % 32) as i64 * per;
        let off = (offs[i].1 - 1 - back).max(offs[i].0);
        let s = Instant::now();
        let d = engine.fetch(&tps[i], off, batch, None).wait()?;
        hist.record(s.elapsed());
        bytes += d.records.len() as u64;
    }
    let seconds = t0.elapsed().as_secs_f64();
    let delta = Counters::of(engine).since(&c0);
    let mut r = RunReport::for_engine("tail", setup, engine);
    r.ops = fetches;
    r.bytes = bytes;
    r.records = fetches * setup.records_per_batch as u64;
    r.note = format!("engine round trip; {} of {} fetches from the tail cache", delta.tail_cache_hits, fetches);
    Ok(r.finish(hist, seconds, &delta))
}

/// The same tail reads timed inside the owning shard (`Log::read` alone: no queue, no wake-up).
pub fn tail_in_shard(engine: &Engine, tps: &[TopicPartition], setup: &Setup, reads: u64) -> seglog::Result<RunReport> {
    let tp = tps[0].clone();
    let per = setup.records_per_batch as i64;
    let batch = setup.batch_bytes as u32;
    let c0 = Counters::of(engine);
    let t0 = Instant::now();
    let (hist, bytes) = engine
        .with_log(&tp, move |log| {
            let (start, end) = (log.log_start_offset(), log.log_end_offset());
            let mut hist = Hist::new();
            let mut bytes = 0u64;
            for k in 0..reads + 100 {
                let off = (end - 1 - (k as i64 % 32) * per).max(start);
                let s = Instant::now();
                let d = log.read(off, batch, None, true)?;
                let took = s.elapsed();
                if k >= 100 {
                    hist.record(took);
                    bytes += d.records.len() as u64;
                }
            }
            Ok((hist, bytes))
        })
        .wait()?;
    let seconds = t0.elapsed().as_secs_f64();
    let delta = Counters::of(engine).since(&c0);
    let mut r = RunReport::for_engine("tail-in-shard", setup, engine);
    r.ops = reads;
    r.bytes = bytes;
    r.records = reads * setup.records_per_batch as u64;
    r.note = "Log::read timed inside the shard thread".into();
    Ok(r.finish(hist, seconds, &delta))
}

/// A lagging consumer: every sealed segment of every partition read in order, `max_bytes` per
/// fetch. Returns the report and the bytes read.
pub fn catch_up(
    engine: &Engine,
    tps: &[TopicPartition],
    setup: &Setup,
    max_bytes: u32,
    workload: &str,
    progress: &dyn Fn(u64),
) -> seglog::Result<RunReport> {
    let offs = offsets(engine, tps)?;
    let mut hist = Hist::new();
    let c0 = Counters::of(engine);
    let t0 = Instant::now();
    let mut timeline = Timeline::new(t0);
    let (mut bytes, mut fetches) = (0u64, 0u64);
    for (i, tp) in tps.iter().enumerate() {
        let (mut pos, end) = (offs[i].0, offs[i].2);
        while pos < end {
            let s = Instant::now();
            let d = engine.fetch(tp, pos, max_bytes, Some(end)).wait()?;
            let now = Instant::now();
            hist.record(now - s);
            fetches += 1;
            bytes += d.records.len() as u64;
            timeline.add(now, d.records.len() as u64);
            match next_offset(&d.records) {
                Some(n) if n > pos => pos = n,
                _ => break,
            }
            if fetches.is_multiple_of(16) {
                progress(bytes);
            }
        }
    }
    let seconds = t0.elapsed().as_secs_f64();
    let delta = Counters::of(engine).since(&c0);
    let mut r = RunReport::for_engine(workload, setup, engine);
    r.ops = fetches;
    r.bytes = bytes;
    r.records = bytes / setup.batch_bytes.max(1) as u64 * setup.records_per_batch as u64;
    r.timeline = timeline.points();
    r.note = format!("sealed segments only, {} KiB per fetch", max_bytes / 1024);
    Ok(r.finish(hist, seconds, &delta))
}

/// Seek-heavy consumers: `fetches` fetches of one batch at random offsets across all segments of
/// all partitions.
pub fn seek(
    engine: &Engine,
    tps: &[TopicPartition],
    setup: &Setup,
    fetches: u64,
    seed: u64,
) -> seglog::Result<RunReport> {
    let offs = offsets(engine, tps)?;
    let mut rng = super::Rng::new(seed);
    let mut hist = Hist::new();
    let c0 = Counters::of(engine);
    let t0 = Instant::now();
    let mut bytes = 0u64;
    for _ in 0..fetches {
        let i = rng.range(0, tps.len() as i64) as usize;
        let off = rng.range(offs[i].0, offs[i].1);
        let s = Instant::now();
        let d = engine.fetch(&tps[i], off, setup.batch_bytes as u32, None).wait()?;
        hist.record(s.elapsed());
        bytes += d.records.len() as u64;
    }
    let seconds = t0.elapsed().as_secs_f64();
    let delta = Counters::of(engine).since(&c0);
    let mut r = RunReport::for_engine("seek", setup, engine);
    r.ops = fetches;
    r.bytes = bytes;
    r.records = fetches * setup.records_per_batch as u64;
    r.note = "one batch per fetch, random offsets over every segment".into();
    Ok(r.finish(hist, seconds, &delta))
}

/// Warm offset lookups timed inside the shard: `Segment::translate_offset` (offset-index search,
/// then the header walk) for random offsets of the newest batches, whose bytes are in the tail
/// cache, so the walk reads memory.
pub fn lookup_warm(
    engine: &Engine,
    tps: &[TopicPartition],
    setup: &Setup,
    lookups: u64,
    seed: u64,
) -> seglog::Result<RunReport> {
    let tp = tps[0].clone();
    let span = 48 * setup.records_per_batch as i64;
    let c0 = Counters::of(engine);
    let t0 = Instant::now();
    let hist = engine
        .with_log(&tp, move |log| {
            let mut rng = super::Rng::new(seed);
            let end = log.log_end_offset();
            let lo = (end - span).max(log.active_segment().base_offset());
            let mut hist = Hist::new();
            for k in 0..lookups + 1000 {
                let off = rng.range(lo, end);
                let seg = log.floor_segment(off).expect("offset in the log");
                let s = Instant::now();
                let hit = seg.translate_offset(off, 0)?;
                let took = s.elapsed();
                std::hint::black_box(hit);
                if k >= 1000 {
                    hist.record(took);
                }
            }
            Ok(hist)
        })
        .wait()?;
    let seconds = t0.elapsed().as_secs_f64();
    let delta = Counters::of(engine).since(&c0);
    let mut r = RunReport::for_engine("lookup-warm", setup, engine);
    r.ops = lookups;
    r.note = "translate_offset in the shard, offsets of the last 48 batches (tail cache)".into();
    Ok(r.finish(hist, seconds, &delta))
}

/// Time lookups: ListOffsets by random timestamps across the whole log.
pub fn time_lookups(
    engine: &Engine,
    tps: &[TopicPartition],
    setup: &Setup,
    produced: &Produced,
    lookups: u64,
    seed: u64,
) -> seglog::Result<RunReport> {
    let mut rng = super::Rng::new(seed);
    let mut hist = Hist::new();
    let c0 = Counters::of(engine);
    let t0 = Instant::now();
    let mut found = 0u64;
    for _ in 0..lookups {
        let i = rng.range(0, tps.len() as i64) as usize;
        let ts = rng.range(produced.first_ts, produced.first_ts + produced.batches.max(1) as i64);
        let s = Instant::now();
        let hit = engine.list_offset(&tps[i], ListOffset::Timestamp(ts)).wait()?;
        hist.record(s.elapsed());
        found += hit.is_some() as u64;
    }
    let seconds = t0.elapsed().as_secs_f64();
    let delta = Counters::of(engine).since(&c0);
    let mut r = RunReport::for_engine("time", setup, engine);
    r.ops = lookups;
    r.note = format!("ListOffsets(timestamp) over the whole log; {found} of {lookups} found");
    Ok(r.finish(hist, seconds, &delta))
}
