//! Group commit across files (issue 16): what one loop turn of a shard with N partitions costs
//! when each partition has one durable append in flight, by how the turn is made durable.
//!
//! ```sh
//! cargo run --release -p seglog-bench --example group_commit -- [--files 1,8,64]
//!     [--total-mb 64 | --bytes-per-file BYTES] [--min-rounds 256] [--block 16384]
//!     [--methods dsync,fdatasync,syncfs,one-fdatasync] [--reps 3] [--dir /var/tmp]
//!     [--overwrite true]
//! ```
//!
//! Every round writes one block (`--block` bytes of non-zero pseudo-random data, O_DIRECT,
//! through seglog's io_uring storage, one `Storage::submit` batch) at the end of each of N files,
//! which the writes extend (no preallocation, as Kafka's default layout; over zeros written before
//! with `--overwrite`, below), then makes the round durable, and only then starts the next. The
//! methods:
//! - `dsync`: every write carries RWF_DSYNC (seglog's `SyncMethod::DsyncWrites`);
//! - `fdatasync`: every write linked (IOSQE_IO_LINK) to an fdatasync of its file
//!   (`SyncMethod::Fdatasync`);
//! - `syncfs`: plain writes, then one syncfs(2) once they all completed (a flush shared by the
//!   turn: syncfs makes all of the filesystem's data and metadata durable, every file's writes);
//! - `one-fdatasync`: plain writes, then one fdatasync of the first file only. Without
//!   `--overwrite` NOT durable for the other files: informational, what one shared flush alone
//!   costs here.
//!
//! With `--overwrite true` the files are written whole with zeros and fsynced before the rounds
//! (as zero fill leaves a log's next bytes), so the rounds overwrite allocated blocks and change
//! no metadata an fdatasync must write (timestamps aside): `one-fdatasync`, issued once every
//! write of the round completed, is then the device cache flush that makes every file's round
//! durable (a flush shared by the turn). That rests on Linux's ext4 and XFS issuing a device cache
//! flush on fdatasync (with barriers on, their default), not on POSIX.
//!
//! Rounds per point: `--total-mb` over N blocks (or `--bytes-per-file` over one block), at least
//! `--min-rounds`. Each rep runs every files count and method on fresh files in a fresh temp dir
//! under `--dir`, deleted after. Per (files, method): MB/s (data bytes over the summed round
//! times: filling the buffers is outside them), round latency p50/p99/p99.9/max (one round = all
//! files' writes and the durability step), io_uring_enter calls per round; medians over the reps,
//! MB/s with its min–max; and each method's MB/s and p99 over `dsync`'s at the same files count.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use seglog::io::{storage_for_mode, AlignedBuf, IoCompletion, IoFile, IoOp, IoOpKind, OpenMode, Storage, WriteBuf};
use seglog::IoMode;
use seglog_bench::pct::median;
use seglog_bench::workload::Rng;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Method {
    Dsync,
    Fdatasync,
    Syncfs,
    OneFdatasync,
}

impl Method {
    fn name(self) -> &'static str {
        match self {
            Method::Dsync => "dsync",
            Method::Fdatasync => "fdatasync",
            Method::Syncfs => "syncfs",
            Method::OneFdatasync => "one-fdatasync*",
        }
    }
    fn parse(s: &str) -> Method {
        match s {
            "dsync" => Method::Dsync,
            "fdatasync" => Method::Fdatasync,
            "syncfs" => Method::Syncfs,
            "one-fdatasync" => Method::OneFdatasync,
            other => panic!("unknown method {other}: dsync, fdatasync, syncfs or one-fdatasync"),
        }
    }
}

struct Args {
    files: Vec<usize>,
    total_mb: u64,
    bytes_per_file: Option<u64>,
    min_rounds: u64,
    block: usize,
    methods: Vec<Method>,
    reps: usize,
    dir: PathBuf,
    overwrite: bool,
}

fn args() -> Args {
    let mut a = Args {
        files: vec![1, 8, 64],
        total_mb: 64,
        bytes_per_file: None,
        min_rounds: 256,
        block: 16384,
        methods: vec![Method::Dsync, Method::Fdatasync, Method::Syncfs, Method::OneFdatasync],
        reps: 3,
        dir: "/var/tmp".into(),
        overwrite: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let v = it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--files" => a.files = v.split(',').map(|s| s.parse().expect("--files")).collect(),
            "--total-mb" => a.total_mb = v.parse().expect("--total-mb"),
            "--bytes-per-file" => a.bytes_per_file = Some(v.parse().expect("--bytes-per-file")),
            "--min-rounds" => a.min_rounds = v.parse().expect("--min-rounds"),
            "--block" => a.block = v.parse().expect("--block"),
            "--methods" => a.methods = v.split(',').map(Method::parse).collect(),
            "--reps" => a.reps = v.parse().expect("--reps"),
            "--dir" => a.dir = v.into(),
            "--overwrite" => a.overwrite = v.parse().expect("--overwrite true|false"),
            other => panic!("unknown flag {other}"),
        }
    }
    assert!(a.files.iter().all(|&n| n > 0) && a.reps > 0 && a.block > 0, "files, reps and block must be positive");
    a
}

fn rounds_for(a: &Args, files: usize) -> u64 {
    let from_bytes = match a.bytes_per_file {
        Some(b) => b / a.block as u64,
        None => (a.total_mb << 20) / (files * a.block) as u64,
    };
    from_bytes.max(a.min_rounds).max(1)
}

/// One rep of one (files, method): MB/s, round latencies in µs (p50, p99, p99.9, max), and
/// io_uring_enter calls per round.
struct Point {
    mbps: f64,
    p50: f64,
    p99: f64,
    p999: f64,
    max: f64,
    enters: f64,
}

/// `len` pseudo-random bytes, none of them zero, in a buffer aligned to `align`.
fn random_block(rng: &mut Rng, len: usize, align: usize) -> WriteBuf {
    let mut bytes = Vec::with_capacity(len + 8);
    while bytes.len() < len {
        bytes.extend(rng.next_u64().to_le_bytes().map(|b| b.max(1)));
    }
    let mut buf = AlignedBuf::new(len, align);
    buf.extend_from_slice(&bytes[..len]);
    WriteBuf::from(buf)
}

/// Fails loudly on any failed operation or short write.
fn check(done: Vec<IoCompletion>, expected_ops: usize, block: usize) {
    assert_eq!(done.len(), expected_ops, "completions missing");
    for c in done {
        match (&c.op.kind, c.result) {
            (_, Err(e)) => panic!("{:?} of file {} failed: {e}", c.op.kind, c.op.tag),
            (IoOpKind::Write { .. }, Ok(n)) => assert_eq!(n, block, "short write to file {}", c.op.tag),
            (IoOpKind::SyncData, Ok(_)) => {}
        }
    }
}

fn run_point(storage: &Arc<dyn Storage>, a: &Args, files: usize, method: Method, rng: &mut Rng) -> Point {
    let (rounds, block, overwrite) = (rounds_for(a, files), a.block, a.overwrite);
    let tmp = tempfile::Builder::new().prefix("group-commit-").tempdir_in(&a.dir).expect("temp dir");
    let paths: Vec<PathBuf> = (0..files).map(|i| tmp.path().join(format!("p{i}.log"))).collect();
    if overwrite {
        for p in &paths {
            let mut f = std::fs::File::create(p).expect("create");
            let mut zeros = std::io::Read::take(std::io::repeat(0), rounds * block as u64);
            std::io::copy(&mut zeros, &mut f).expect("zero fill");
            f.sync_all().expect("fsync");
            // The rounds' O_DIRECT writes find no cached pages to invalidate.
            nix::fcntl::posix_fadvise(&f, 0, 0, nix::fcntl::PosixFadviseAdvice::POSIX_FADV_DONTNEED).expect("fadvise");
        }
    }
    let mode = if overwrite { OpenMode::ReadWrite } else { OpenMode::CreateTruncate };
    let logs: Vec<Arc<dyn IoFile>> = paths.iter().map(|p| storage.open_log(p, mode).expect("open")).collect();
    let align = logs[0].direct_alignment().expect("the files are not O_DIRECT");
    assert_eq!(block % align.offset, 0, "--block must be a multiple of {} (O_DIRECT)", align.offset);
    let mem_align = align.mem.max(4096);
    // syncfs flushes the whole filesystem, whichever of its files the descriptor names: a second
    // (plain) descriptor of the first file will do.
    let fs_fd = std::fs::File::open(&paths[0]).expect("open for syncfs");
    storage.sync_dir(tmp.path()).expect("sync dir"); // the creates are not charged to round 0
    let mut ns = Vec::with_capacity(rounds as usize);
    let enters0 = seglog::io::thread_stats().enters;
    for r in 0..rounds {
        let pos = r * block as u64;
        let link = method == Method::Fdatasync;
        let mut ops = Vec::with_capacity(files * 2);
        for (i, f) in logs.iter().enumerate() {
            let buf = random_block(rng, block, mem_align);
            let kind = IoOpKind::Write { buf, pos, dsync: method == Method::Dsync };
            ops.push(IoOp { file: f.clone(), kind, tag: i as u64, link_next: link });
            if link {
                ops.push(IoOp { file: f.clone(), kind: IoOpKind::SyncData, tag: i as u64, link_next: false });
            }
        }
        let n_ops = ops.len();
        let t = Instant::now();
        check(storage.submit(ops), n_ops, block);
        match method {
            Method::Syncfs => nix::unistd::syncfs(&fs_fd).expect("syncfs"),
            Method::OneFdatasync => {
                let op = IoOp { file: logs[0].clone(), kind: IoOpKind::SyncData, tag: 0, link_next: false };
                check(storage.submit(vec![op]), 1, block);
            }
            Method::Dsync | Method::Fdatasync => {}
        }
        ns.push(t.elapsed().as_nanos() as u64);
    }
    let enters = (seglog::io::thread_stats().enters - enters0) as f64 / rounds as f64;
    for f in &logs {
        assert_eq!(f.len().expect("len"), rounds * block as u64, "file length");
    }
    drop((logs, fs_fd));
    tmp.close().expect("remove temp dir");
    let total_s = ns.iter().sum::<u64>() as f64 / 1e9;
    ns.sort_unstable();
    let at = |q: f64| ns[((ns.len() - 1) as f64 * q) as usize] as f64 / 1000.0;
    let bytes = (rounds * (files * block) as u64) as f64;
    Point { mbps: bytes / 1e6 / total_s, p50: at(0.5), p99: at(0.99), p999: at(0.999), max: at(1.0), enters }
}

fn main() {
    let a = args();
    let opened = storage_for_mode(IoMode::Direct);
    if opened.mode != IoMode::Direct || opened.fallback.is_some() {
        eprintln!(
            "direct I/O through io_uring refused here (got {}: {:?}); nothing measured",
            opened.mode, opened.fallback
        );
        std::process::exit(2);
    }
    let storage = opened.storage;
    println!(
        "group commit: O_DIRECT io_uring writes of {} B per file per round, {}; {} reps, interleaved; dir {}",
        a.block,
        if a.overwrite { "overwriting zeros written and fsynced before" } else { "appending" },
        a.reps,
        a.dir.display()
    );
    // results[files index][method index] = one Point per rep
    let mut results: Vec<Vec<Vec<Point>>> =
        a.files.iter().map(|_| a.methods.iter().map(|_| Vec::new()).collect()).collect();
    let started = Instant::now();
    for rep in 0..a.reps {
        let mut rng = Rng::new(0x5eed + rep as u64);
        for (fi, &files) in a.files.iter().enumerate() {
            for (mi, &m) in a.methods.iter().enumerate() {
                let p = run_point(&storage, &a, files, m, &mut rng);
                eprintln!(
                    "rep {rep} files {files:>3} {:<15} {:>8.1} MB/s  p99 {:>9.0} us  ({:.0} s)",
                    m.name(),
                    p.mbps,
                    p.p99,
                    started.elapsed().as_secs_f64()
                );
                results[fi][mi].push(p);
            }
        }
    }
    println!("medians over {} reps; MB/s [min-max over reps]; round latency in us", a.reps);
    println!(
        "{:>5} {:>6}  {:<15} {:>22} {:>9} {:>9} {:>9} {:>9} {:>7}  {:>10} {:>9}",
        "files",
        "rounds",
        "method",
        "MB/s [min-max]",
        "p50",
        "p99",
        "p99.9",
        "max",
        "enters",
        "MB/s÷dsync",
        "p99÷dsync"
    );
    let med = |pts: &[Point], f: fn(&Point) -> f64| median(&pts.iter().map(f).collect::<Vec<_>>());
    for (fi, &files) in a.files.iter().enumerate() {
        let dsync = a.methods.iter().position(|&m| m == Method::Dsync).map(|i| &results[fi][i]);
        for (mi, &m) in a.methods.iter().enumerate() {
            let pts = &results[fi][mi];
            let mbps = med(pts, |p| p.mbps);
            let (lo, hi) = pts.iter().fold((f64::MAX, 0.0f64), |(lo, hi), p| (lo.min(p.mbps), hi.max(p.mbps)));
            let p99 = med(pts, |p| p.p99);
            let ratio = |x: f64, f: fn(&Point) -> f64| match dsync {
                Some(d) => format!("{:.2}", x / med(d, f)),
                None => "-".into(),
            };
            println!(
                "{files:>5} {:>6}  {:<15} {:>22} {:>9.0} {:>9.0} {:>9.0} {:>9.0} {:>7.1}  {:>10} {:>9}",
                rounds_for(&a, files),
                m.name(),
                format!("{mbps:.1} [{lo:.1}-{hi:.1}]"),
                med(pts, |p| p.p50),
                p99,
                med(pts, |p| p.p999),
                med(pts, |p| p.max),
                med(pts, |p| p.enters),
                ratio(mbps, |p| p.mbps),
                ratio(p99, |p| p.p99),
            );
        }
    }
    if a.methods.contains(&Method::OneFdatasync) {
        println!(
            "{}",
            if a.overwrite {
                "* one-fdatasync: with --overwrite, the device cache flush that makes every file's overwrites durable"
            } else {
                "* one-fdatasync: one fdatasync of the first file only; NOT a durability guarantee for the other files (informational: the cost of one shared flush)"
            }
        );
    }
    println!("enters: io_uring_enter calls per round (syncfs is a plain system call, not counted)");
    if a.methods.contains(&Method::Syncfs) {
        println!("syncfs writes back every dirty file of the filesystem (other processes' too): its cost depends on what else is on it");
    }
    println!("p99.9 is a nearest-rank percentile: with fewer than 1000 rounds it is one of the largest few rounds");
}
