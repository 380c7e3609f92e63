//! Warm random point lookups through the page cache: a standalone `Log` (`Log::read` of a random
//! offset with a small `max_bytes`, as a consumer seeking to one record does) against the
//! `commitlog` crate's read of the same batch (one message per batch, its dense index), in the
//! same process and the same run, rounds interleaved.
//!
//! ```sh
//! cargo run --release -p seglog-bench --example point_lookup -- [--mb 256] [--lookups 100000]
//!     [--rounds 3] [--max-bytes 1] [--segment-mb 1024] [--modes buffered,sync] [--dir /var/tmp]
//!     [--raw] [--reopen-clean] [--repeat-only MODE --seconds 10]
//! ```
//!
//! Records of 1 KiB in batches of 16 (about 16.5 KiB each), written once per system; every
//! lookup is checked (the batch returned holds the offset asked for). Prints p50 / p99 / mean per
//! system and round, the medians over the rounds, and each seglog mode's p50 over commitlog's.
//! With `--reopen-clean`, seglog's logs are closed and reopened without a rebuild before the
//! lookups (as after a clean shutdown: the index's density is not known). With `--raw`, also plain `read_at`s of one batch through each mode's file. With `--repeat-only MODE` it only runs seglog lookups in that mode for `--seconds` (for perf).

use std::path::Path;
use std::time::{Duration, Instant};

use seglog::format::batch::BatchHeader;
use seglog::io::storage_for_mode;
use seglog::log::{Log, LogOptions, Recovery};
use seglog::{IoMode, LogConfig};
use seglog_bench::workload::{make_batch, stamp, Rng};

const RECORDS_PER_BATCH: usize = 16;
const BATCH_BYTES: usize = 61 + RECORDS_PER_BATCH * (1024 + 8);

struct Args {
    mb: u64,
    lookups: usize,
    rounds: usize,
    max_bytes: u32,
    segment_mb: u32,
    modes: Vec<IoMode>,
    dir: String,
    repeat_only: Option<IoMode>,
    seconds: u64,
    raw: bool,
    reopen_clean: bool,
}

fn parse_mode(s: &str) -> IoMode {
    match s {
        "direct" => IoMode::Direct,
        "buffered" => IoMode::Buffered,
        "sync" => IoMode::Sync,
        other => panic!("unknown mode {other}: direct, buffered or sync"),
    }
}

fn args() -> Args {
    let mut a = Args {
        mb: 256,
        lookups: 100_000,
        rounds: 3,
        max_bytes: 1,
        segment_mb: 1024,
        modes: vec![IoMode::Buffered, IoMode::Sync],
        dir: "/var/tmp".into(),
        repeat_only: None,
        seconds: 10,
        raw: false,
        reopen_clean: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--raw" {
            a.raw = true;
            continue;
        }
        if flag == "--reopen-clean" {
            a.reopen_clean = true;
            continue;
        }
        let v = it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--mb" => a.mb = v.parse().expect("--mb"),
            "--lookups" => a.lookups = v.parse().expect("--lookups"),
            "--rounds" => a.rounds = v.parse().expect("--rounds"),
            "--max-bytes" => a.max_bytes = v.parse().expect("--max-bytes"),
            "--segment-mb" => a.segment_mb = v.parse().expect("--segment-mb"),
            "--modes" => a.modes = v.split(',').map(parse_mode).collect(),
            "--dir" => a.dir = v,
            "--repeat-only" => a.repeat_only = Some(parse_mode(&v)),
            "--seconds" => a.seconds = v.parse().expect("--seconds"),
            other => panic!("unknown flag {other}"),
        }
    }
    a
}

/// A seglog log of `mb` MiB of batches in `mode`, written with `write_through` (the bytes in the
/// page cache, as a writer leaves them).
fn seglog_log(dir: &Path, mode: IoMode, mb: u64, segment_mb: u32, reopen_clean: bool) -> (Log, i64) {
    let options = |recovery| {
        let opened = storage_for_mode(mode);
        assert_eq!(opened.mode, mode, "{mode} refused here: {:?}", opened.fallback);
        let config = LogConfig { segment_bytes: segment_mb << 20, ..LogConfig::default() };
        LogOptions { storage: opened.storage, recovery, ..LogOptions::with_config(config) }
    };
    let path = dir.join(format!("lookup-{mode}-0"));
    let mut log = Log::open(&path, options(Recovery::default())).expect("open");
    let template = make_batch(BATCH_BYTES, RECORDS_PER_BATCH, 0);
    let n = (mb << 20) / template.len() as u64;
    for i in 0..n {
        let mut b = template.clone();
        stamp(&mut b, 1_700_000_000_000 + i as i64);
        log.append_as_leader(&mut b, 0).expect("append");
    }
    log.flush().expect("flush");
    if reopen_clean {
        log.close().expect("close");
        log = Log::open(&path, options(Recovery::Clean)).expect("reopen");
    }
    let leo = log.log_end_offset();
    (log, leo)
}

fn commitlog_log(dir: &Path, mb: u64, segment_mb: u32) -> (commitlog::CommitLog, u64) {
    let mut opts = commitlog::LogOptions::new(dir.join("commitlog-0"));
    opts.segment_max_bytes((segment_mb as usize) << 20);
    opts.message_max_bytes(BATCH_BYTES * 2 + 1024);
    opts.index_max_items(((segment_mb as usize) << 20) / BATCH_BYTES + 16);
    let mut log = commitlog::CommitLog::new(opts).expect("commitlog");
    let template = make_batch(BATCH_BYTES, RECORDS_PER_BATCH, 0);
    let n = (mb << 20) / template.len() as u64;
    for i in 0..n {
        let mut b = template.clone();
        stamp(&mut b, 1_700_000_000_000 + i as i64);
        log.append_msg(&b).expect("append");
    }
    log.flush().expect("flush");
    (log, n)
}

#[derive(Clone, Copy)]
struct Figures {
    p50: Duration,
    p99: Duration,
    mean: Duration,
}

fn figures(mut ns: Vec<u64>) -> Figures {
    ns.sort_unstable();
    let at = |q: f64| Duration::from_nanos(ns[((ns.len() - 1) as f64 * q) as usize]);
    let mean = Duration::from_nanos(ns.iter().sum::<u64>() / ns.len() as u64);
    Figures { p50: at(0.5), p99: at(0.99), mean }
}

fn seglog_round(log: &Log, leo: i64, lookups: usize, max_bytes: u32, seed: u64) -> (Figures, f64) {
    let mut rng = Rng::new(seed);
    let mut ns = Vec::with_capacity(lookups);
    let ops0 = seglog::io::thread_stats().ops;
    for _ in 0..lookups {
        let off = rng.range(0, leo);
        let t = Instant::now();
        let f = log.read(off, max_bytes, None, true).expect("read");
        ns.push(t.elapsed().as_nanos() as u64);
        let h = BatchHeader::parse(&f.records).expect("a batch");
        assert!(h.base_offset <= off && off <= h.last_offset(), "offset {off}: batch {}", h.base_offset);
    }
    let reads = (seglog::io::thread_stats().ops - ops0) as f64 / lookups as f64;
    (figures(ns), reads)
}

/// Plain reads of one batch at a random batch position of the first segment, through the
/// segment's file (its storage's `read_at`): the floor of a lookup's cost in that mode.
fn raw_round(log: &Log, lookups: usize, seed: u64) -> Figures {
    let seg = log.floor_segment(0).expect("first segment");
    let file = seg.log_file();
    let batches = seg.size() as i64 / BATCH_BYTES as i64;
    let mut rng = Rng::new(seed);
    let mut buf = vec![0u8; BATCH_BYTES];
    let mut ns = Vec::with_capacity(lookups);
    for _ in 0..lookups {
        let pos = rng.range(0, batches) as u64 * BATCH_BYTES as u64;
        let t = Instant::now();
        let n = file.read_at(&mut buf, pos).expect("read");
        ns.push(t.elapsed().as_nanos() as u64);
        assert_eq!(n, BATCH_BYTES);
    }
    figures(ns)
}

fn commitlog_round(log: &commitlog::CommitLog, n: u64, lookups: usize, seed: u64) -> Figures {
    use commitlog::message::MessageSet;
    let mut rng = Rng::new(seed);
    let one = commitlog::ReadLimit::max_bytes(BATCH_BYTES + 64);
    let mut ns = Vec::with_capacity(lookups);
    for _ in 0..lookups {
        let off = rng.range(0, n as i64) as u64;
        let t = Instant::now();
        let buf = log.read(off, one).expect("read");
        ns.push(t.elapsed().as_nanos() as u64);
        assert_eq!(buf.iter().next().map(|m| m.offset()), Some(off));
    }
    figures(ns)
}

fn us(d: Duration) -> f64 {
    d.as_nanos() as f64 / 1000.0
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let a = args();
    let tmp = tempfile::tempdir_in(&a.dir).expect("temporary directory");
    if let Some(mode) = a.repeat_only {
        let (log, leo) = seglog_log(tmp.path(), mode, a.mb, a.segment_mb, a.reopen_clean);
        let until = Instant::now() + Duration::from_secs(a.seconds);
        let mut seed = 1;
        while Instant::now() < until {
            let (f, _) = seglog_round(&log, leo, a.lookups, a.max_bytes, seed);
            println!("{mode}: p50 {:.2} us p99 {:.2} us", us(f.p50), us(f.p99));
            seed += 1;
        }
        return;
    }
    println!(
        "{} MiB, batches of {RECORDS_PER_BATCH} x 1 KiB ({BATCH_BYTES} B), segments of {} MiB, {} lookups x {} rounds, max_bytes {}",
        a.mb, a.segment_mb, a.lookups, a.rounds, a.max_bytes
    );
    let logs: Vec<(IoMode, Log, i64)> = a
        .modes
        .iter()
        .map(|&m| {
            let (l, leo) = seglog_log(tmp.path(), m, a.mb, a.segment_mb, a.reopen_clean);
            (m, l, leo)
        })
        .collect();
    let (clog, n) = commitlog_log(tmp.path(), a.mb, a.segment_mb);
    // Warm: one pass of lookups each, not timed.
    for (_, l, leo) in &logs {
        seglog_round(l, *leo, a.lookups, a.max_bytes, 99);
    }
    commitlog_round(&clog, n, a.lookups, 99);
    let mut p50: Vec<Vec<f64>> = vec![Vec::new(); logs.len() + 1];
    let mut p99: Vec<Vec<f64>> = vec![Vec::new(); logs.len() + 1];
    for round in 0..a.rounds {
        let seed = round as u64 + 1;
        for (i, (m, l, leo)) in logs.iter().enumerate() {
            let (f, reads) = seglog_round(l, *leo, a.lookups, a.max_bytes, seed);
            println!(
                "round {round} seglog {:<8}: p50 {:6.2} us  p99 {:6.2} us  mean {:6.2} us  reads/lookup {reads:.2}",
                m.to_string(),
                us(f.p50),
                us(f.p99),
                us(f.mean)
            );
            p50[i].push(us(f.p50));
            p99[i].push(us(f.p99));
        }
        if a.raw {
            for (m, l, _) in &logs {
                let f = raw_round(l, a.lookups, seed);
                println!(
                    "round {round} read_at {:<8}: p50 {:6.2} us  p99 {:6.2} us  mean {:6.2} us",
                    m.to_string(),
                    us(f.p50),
                    us(f.p99),
                    us(f.mean)
                );
            }
        }
        let f = commitlog_round(&clog, n, a.lookups, seed);
        println!(
            "round {round} commitlog      : p50 {:6.2} us  p99 {:6.2} us  mean {:6.2} us",
            us(f.p50),
            us(f.p99),
            us(f.mean)
        );
        p50[logs.len()].push(us(f.p50));
        p99[logs.len()].push(us(f.p99));
    }
    let c50 = median(p50[logs.len()].clone());
    let c99 = median(p99[logs.len()].clone());
    println!("medians over {} rounds:", a.rounds);
    for (i, (m, _, _)) in logs.iter().enumerate() {
        let (s50, s99) = (median(p50[i].clone()), median(p99[i].clone()));
        println!("  seglog {:<8}: p50 {s50:6.2} us  p99 {s99:6.2} us  p50/commitlog {:.2}x", m.to_string(), s50 / c50);
    }
    println!("  commitlog      : p50 {c50:6.2} us  p99 {c99:6.2} us");
}
