//! The reference designs run on the same workload as seglog in the same repetition: Kafka's design
//! ([`crate::kafka_ref`]) and the `commitlog` crate (page-cache segments of length-prefixed
//! messages with a dense memory-mapped index, one message per batch here). Both run on the calling
//! thread, one log per partition, round-robin, and report like seglog's runs ([`RunReport`]).
//! The read loops ([`kafka_reads`], [`commitlog_reads`]) take their targets and two untimed
//! hooks, one before each read (dropping the page cache, say) and a check after it: the seek
//! workload and the `log` workload's point lookups ([`crate::workload::log`]) share them.

use std::path::Path;
use std::time::Instant;

use crate::kafka_ref::KafkaRefLog;
use crate::pct::Hist;
use crate::rusage::Usage;
use crate::workload::{first_timestamp_ms, make_batch, stamp, Counters, Rng, RunReport, Setup, Timeline};

/// A reference's row (mode "page cache") for `setup`'s batches and durability.
pub(crate) fn report(system: &str, workload: &str, setup: &Setup) -> RunReport {
    RunReport {
        workload: workload.into(),
        system: system.into(),
        mode_requested: "page cache".into(),
        mode: "page cache".into(),
        huge_pages: "n/a".into(),
        durability: crate::workload::durability_name(setup.durability),
        batch_bytes: setup.batch_bytes,
        ..RunReport::default()
    }
}

fn usage_delta(u0: &Usage) -> Counters {
    Counters { usage: Usage::now().since(u0), ..Counters::default() }
}

fn io_err(e: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::other(e.to_string())
}

/// Kafka's design: the logs it wrote, for the read workloads.
#[derive(Debug)]
pub struct KafkaRun {
    pub logs: Vec<KafkaRefLog>,
    pub first_ts: i64,
    pub batches: u64,
}

/// Produces `total_bytes` into `setup.partitions` Kafka-design logs under `dir`.
pub fn kafka_produce(dir: &Path, setup: &Setup, total_bytes: u64) -> std::io::Result<(RunReport, KafkaRun)> {
    let durable = setup.durability == seglog::Durability::EveryBatch;
    let mut logs = (0..setup.partitions.max(1))
        .map(|i| {
            KafkaRefLog::create(
                &dir.join(format!("bench-{i}")),
                setup.segment_bytes as u64,
                setup.index_interval_bytes as u64,
                durable,
            )
        })
        .collect::<std::io::Result<Vec<_>>>()?;
    let template = make_batch(setup.batch_bytes, setup.records_per_batch, 0);
    let n = (total_bytes / template.len() as u64).max(1);
    let first_ts = first_timestamp_ms();
    let mut hist = Hist::new();
    let u0 = Usage::now();
    let t0 = Instant::now();
    let mut timeline = Timeline::new(t0);
    for i in 0..n {
        let mut b = template.clone();
        stamp(&mut b, first_ts + i as i64);
        let s = Instant::now();
        let p = (i as usize) % logs.len();
        logs[p].append(&mut b)?;
        let now = Instant::now();
        hist.record(now - s);
        timeline.add(now, b.len() as u64);
    }
    let seconds = t0.elapsed().as_secs_f64();
    let mut r = report("kafka-ref", if durable { "durable" } else { "produce" }, setup);
    r.ops = n;
    r.bytes = n * template.len() as u64;
    r.records = n * setup.records_per_batch as u64;
    r.timeline = timeline.points();
    r.note = if durable { "write(2) + fdatasync per append".into() } else { "write(2) per append, page cache".into() };
    Ok((r.finish(hist, seconds, &usage_delta(&u0)), KafkaRun { logs, first_ts, batches: n }))
}

/// Catch-up read of every sealed segment, `max_bytes` per read; `cold` writes back and drops the
/// page cache first (Kafka's reads then come from the disk through read-ahead).
pub fn kafka_catch_up(
    dir: &Path,
    run: &KafkaRun,
    setup: &Setup,
    max_bytes: u64,
    cold: bool,
) -> std::io::Result<RunReport> {
    if cold {
        for l in &run.logs {
            l.sync_all()?;
        }
        crate::workload::drop_cache(dir);
    }
    let mut hist = Hist::new();
    let mut out = Vec::new();
    let u0 = Usage::now();
    let t0 = Instant::now();
    let mut timeline = Timeline::new(t0);
    let (mut bytes, mut reads) = (0u64, 0u64);
    for l in &run.logs {
        let end = l.active_base();
        let mut pos = 0i64;
        while pos < end {
            let s = Instant::now();
            let n = l.read(pos, max_bytes, &mut out)?;
            let now = Instant::now();
            hist.record(now - s);
            reads += 1;
            bytes += n as u64;
            timeline.add(now, n as u64);
            match crate::workload::consume::next_offset(&out) {
                Some(next) if next > pos => pos = next,
                _ => break,
            }
        }
    }
    let seconds = t0.elapsed().as_secs_f64();
    let mut r = report("kafka-ref", if cold { "lag-cold" } else { "lag" }, setup);
    r.ops = reads;
    r.bytes = bytes;
    r.records = bytes / setup.batch_bytes.max(1) as u64 * setup.records_per_batch as u64;
    r.timeline = timeline.points();
    r.note = format!(
        "sealed segments, {} KiB preads after an mmap index lookup, {} page cache",
        max_bytes / 1024,
        if cold { "cold" } else { "warm" }
    );
    Ok(r.finish(hist, seconds, &usage_delta(&u0)))
}

/// What a read loop of a reference measured: each read timed on its own (the hooks around it
/// are not), the bytes returned, and the process's usage over the whole loop.
#[derive(Debug)]
pub struct Reads {
    pub hist: Hist,
    /// Reads made.
    pub ops: u64,
    pub bytes: u64,
    /// The reads' own time, summed (not the hooks').
    pub seconds: f64,
    pub delta: Counters,
}

impl Reads {
    fn new() -> Reads {
        Reads { hist: Hist::new(), ops: 0, bytes: 0, seconds: 0.0, delta: Counters::default() }
    }
    fn add(&mut self, took: std::time::Duration, bytes: u64) {
        self.hist.record(took);
        self.ops += 1;
        self.bytes += bytes;
        self.seconds += took.as_secs_f64();
    }
    /// `r` with the reads' figures filled in (records: `records_per_read` per read).
    pub fn report(self, mut r: RunReport, records_per_read: u64) -> RunReport {
        r.ops = self.ops;
        r.bytes = self.bytes;
        r.records = self.ops * records_per_read;
        r.finish(self.hist, self.seconds, &self.delta)
    }
}

/// One read of at least one whole batch per target `(log, offset)` of Kafka's design, at most
/// `max_bytes` each (1: just the batch holding the offset). `before` runs untimed before each
/// read (to drop the page cache, say) and `check` untimed after it, with the offset asked for
/// and the batches returned.
pub fn kafka_reads(
    run: &KafkaRun,
    targets: impl IntoIterator<Item = (usize, i64)>,
    max_bytes: u64,
    mut before: impl FnMut() -> std::io::Result<()>,
    mut check: impl FnMut(i64, &[u8]) -> std::io::Result<()>,
) -> std::io::Result<Reads> {
    let mut reads = Reads::new();
    let mut out = Vec::new();
    let u0 = Usage::now();
    for (log, offset) in targets {
        before()?;
        let s = Instant::now();
        let n = run.logs[log].read(offset, max_bytes, &mut out)?;
        reads.add(s.elapsed(), n as u64);
        check(offset, &out)?;
    }
    reads.delta = usage_delta(&u0);
    Ok(reads)
}

/// Random one-batch reads across all segments.
pub fn kafka_seek(run: &KafkaRun, setup: &Setup, reads: u64, seed: u64) -> std::io::Result<RunReport> {
    let mut rng = Rng::new(seed);
    let targets = (0..reads).map(|_| {
        let l = rng.range(0, run.logs.len() as i64) as usize;
        (l, rng.range(0, run.logs[l].log_end_offset()))
    });
    let done = kafka_reads(run, targets, setup.batch_bytes as u64, || Ok(()), |_, _| Ok(()))?;
    let mut r = report("kafka-ref", "seek", setup);
    r.note = "one batch at random offsets; page cache as the produce run left it".into();
    Ok(done.report(r, setup.records_per_batch as u64))
}

/// Time lookups at random timestamps.
pub fn kafka_time(run: &KafkaRun, setup: &Setup, lookups: u64, seed: u64) -> std::io::Result<RunReport> {
    let mut rng = Rng::new(seed);
    let mut hist = Hist::new();
    let u0 = Usage::now();
    let t0 = Instant::now();
    for _ in 0..lookups {
        let l = &run.logs[rng.range(0, run.logs.len() as i64) as usize];
        let ts = rng.range(run.first_ts, run.first_ts + run.batches as i64);
        let s = Instant::now();
        std::hint::black_box(l.offset_for_time(ts)?);
        hist.record(s.elapsed());
    }
    let seconds = t0.elapsed().as_secs_f64();
    let mut r = report("kafka-ref", "time", setup);
    r.ops = lookups;
    r.note = "mapped time index, offset index, header walk".into();
    Ok(r.finish(hist, seconds, &usage_delta(&u0)))
}

/// A `commitlog` log for the bench's batches under `dir` (`commitlog-0`): `setup`'s segment
/// size, messages up to twice a batch, an index with room for every message of a segment.
pub fn commitlog_open(dir: &Path, setup: &Setup) -> std::io::Result<commitlog::CommitLog> {
    let mut opts = commitlog::LogOptions::new(dir.join("commitlog-0"));
    opts.segment_max_bytes(setup.segment_bytes as usize);
    opts.message_max_bytes(setup.batch_bytes * 2 + 1024);
    opts.index_max_items((setup.segment_bytes as usize / setup.batch_bytes.max(1)).max(1024) + 16);
    commitlog::CommitLog::new(opts)
}

/// Appends `n` batches to `log`, one `append_msg` each (one message per batch, its payload the
/// whole v2 batch, checked first as a broker would), each batch stamped with its own timestamp
/// from the returned first one on. With `flush`, [`commitlog::CommitLog::flush`] ends the timed
/// part (an msync of the active index's new pages; the data gets no fdatasync).
pub fn commitlog_produce(
    log: &mut commitlog::CommitLog,
    setup: &Setup,
    n: u64,
    flush: bool,
) -> std::io::Result<(RunReport, i64)> {
    let template = make_batch(setup.batch_bytes, setup.records_per_batch, 0);
    let first_ts = first_timestamp_ms();
    let mut hist = Hist::new();
    let u0 = Usage::now();
    let t0 = Instant::now();
    let mut timeline = Timeline::new(t0);
    for i in 0..n {
        let mut b = template.clone();
        stamp(&mut b, first_ts + i as i64);
        let s = Instant::now();
        // As a broker would: check the batch before storing it.
        seglog::format::batch::validate_batch(&b, true).map_err(io_err)?;
        log.append_msg(&b).map_err(io_err)?;
        let now = Instant::now();
        hist.record(now - s);
        timeline.add(now, b.len() as u64);
    }
    if flush {
        log.flush()?;
    }
    let seconds = t0.elapsed().as_secs_f64();
    let mut r = report("commitlog", "produce", setup);
    r.ops = n;
    r.bytes = n * template.len() as u64;
    r.records = n * setup.records_per_batch as u64;
    r.timeline = timeline.points();
    r.note = "commitlog 0.2 append_msg, one message per batch".into();
    Ok((r.finish(hist, seconds, &usage_delta(&u0)), first_ts))
}

/// One read per target offset of `log` (commitlog's own offsets: one per message), at most
/// `max_bytes` each; `before` runs untimed before each read and `check` untimed after it, with
/// the offset asked for and the messages returned.
pub fn commitlog_reads(
    log: &commitlog::CommitLog,
    targets: impl IntoIterator<Item = u64>,
    max_bytes: usize,
    mut before: impl FnMut() -> std::io::Result<()>,
    mut check: impl FnMut(u64, &commitlog::message::MessageBuf) -> std::io::Result<()>,
) -> std::io::Result<Reads> {
    use commitlog::message::MessageSet;
    let limit = commitlog::ReadLimit::max_bytes(max_bytes);
    let mut reads = Reads::new();
    let u0 = Usage::now();
    for offset in targets {
        before()?;
        let s = Instant::now();
        let buf = log.read(offset, limit).map_err(io_err)?;
        reads.add(s.elapsed(), buf.bytes().len() as u64);
        check(offset, &buf)?;
    }
    reads.delta = usage_delta(&u0);
    Ok(reads)
}

/// The `commitlog` crate: produce, catch-up and seek. Its `flush` does not fdatasync the data
/// (only msyncs its index), so it has no durable run here.
pub fn commitlog_runs(
    dir: &Path,
    setup: &Setup,
    total_bytes: u64,
    catch_up_bytes: u64,
    seeks: u64,
    seed: u64,
) -> std::io::Result<Vec<RunReport>> {
    use commitlog::message::MessageSet;
    use commitlog::ReadLimit;
    let mut log = commitlog_open(dir, setup)?;
    let batch_len = setup.batch_bytes.max(1) as u64;
    let n = (total_bytes / make_batch(setup.batch_bytes, setup.records_per_batch, 0).len() as u64).max(1);
    let mut out = Vec::new();
    let (r, _) = commitlog_produce(&mut log, setup, n, true)?;
    let batch_total = r.bytes;
    out.push(r);

    // Catch-up: sequential reads of up to 1 MiB from the first message.
    let limit = ReadLimit::max_bytes(1 << 20);
    let want = catch_up_bytes.min(batch_total);
    let mut hist = Hist::new();
    let u0 = Usage::now();
    let t0 = Instant::now();
    let (mut bytes, mut reads, mut pos) = (0u64, 0u64, 0u64);
    while bytes < want && pos < n {
        let s = Instant::now();
        let buf = log.read(pos, limit).map_err(io_err)?;
        hist.record(s.elapsed());
        reads += 1;
        let (mut count, mut last) = (0u64, pos);
        for m in buf.iter() {
            bytes += m.payload().len() as u64;
            last = m.offset();
            count += 1;
        }
        if count == 0 {
            break;
        }
        pos = last + 1;
    }
    let seconds = t0.elapsed().as_secs_f64();
    let mut r = report("commitlog", "lag", setup);
    r.ops = reads;
    r.bytes = bytes;
    r.records = bytes / batch_len * setup.records_per_batch as u64;
    r.note = "read(offset, 1 MiB) from the start; page cache as the produce run left it".into();
    out.push(r.finish(hist, seconds, &usage_delta(&u0)));

    // Seek: one message at random offsets.
    let mut rng = Rng::new(seed);
    let targets = (0..seeks).map(|_| rng.range(0, n as i64) as u64);
    let done = commitlog_reads(&log, targets, setup.batch_bytes + 64, || Ok(()), |_, _| Ok(()))?;
    let mut r = report("commitlog", "seek", setup);
    r.note = "read(random offset, one message)".into();
    out.push(done.report(r, setup.records_per_batch as u64));
    Ok(out)
}
