//! Index lookups: seglog's arena-held index against the in-memory limit (a binary search over a
//! `Vec<(u32, u32)>` of the same entries) and against Kafka's design (the `.index` file mapped
//! with mmap, searched in place), in the warm section (the last 8 KiB of entries, where tail
//! reads land) and the cold section (the rest), with the page faults each costs.
//!
//! Two parts:
//! 1. a percentile pass, printed first: every lookup timed on its own (`Instant`, whose own cost
//!    is printed as the "timer" row), p50 and p99 (HDR, 3 significant digits), and this thread's
//!    minor and major faults (`getrusage(RUSAGE_THREAD)`) over the pass;
//! 2. criterion's estimates of the mean (no per-lookup timer), the figure for the 1.5x target.
//!
//! `cargo bench -p seglog-bench --bench index` (add `-- --quick` for a short run; set
//! `SEGLOG_INDEX_BENCH_DIR` to put the index file on another disk; the default is the system
//! temporary directory).
//!
//! The mmap reference is built here with memmap2 (bench code may use `unsafe`; each block says
//! why it holds). Its cold case drops the file's pages from the page cache first
//! (`POSIX_FADV_DONTNEED`), as happens to a cold segment under memory pressure: the lookups then
//! fault the index in from disk, which is what a lagging consumer meets in Kafka.

use std::hint::black_box;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use criterion::Criterion;
use nix::fcntl::{posix_fadvise, PosixFadviseAdvice};
use seglog::index::{index_slot_range_for, OffsetIndex, OffsetPosition};
use seglog::io::arena::{thread_page_faults, PageFaults};
use seglog::io::std_backend::StdStorage;
use seglog::io::{ArenaConfig, HugePages, IndexArena, OpenMode, Storage};
use seglog_bench::pct::{median, Hist};

/// Entries in the index: 262,144 (2 MiB of `.index`, 8 GiB of log at one entry per 32 KiB), or
/// `SEGLOG_INDEX_BENCH_ENTRIES`.
fn entries() -> usize {
    static N: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *N.get_or_init(|| {
        std::env::var("SEGLOG_INDEX_BENCH_ENTRIES").ok().and_then(|v| v.parse().ok()).unwrap_or(262_144).max(4096)
    })
}
const BASE: i64 = 1_000_000;
const WARM_ENTRIES: usize = 8192 / 8;
const LOOKUPS: usize = 200_000;
/// Page-cache evictions for Kafka's cold case (each followed by one timed lookup).
const EVICTIONS: usize = 50;

fn entry(i: usize) -> (u32, u32) {
    ((i * 7) as u32, (i * 32_768) as u32)
}

/// Kafka's `.index` bytes for the entries.
fn index_bytes() -> Vec<u8> {
    let mut b = Vec::with_capacity(entries() * 8);
    for i in 0..entries() {
        let (rel, pos) = entry(i);
        b.extend_from_slice(&rel.to_be_bytes());
        b.extend_from_slice(&pos.to_be_bytes());
    }
    b
}

/// The in-memory limit: a plain binary search (largest entry with offset <= target).
fn vec_lookup(v: &[(u32, u32)], target: i64) -> OffsetPosition {
    let rel = target - BASE;
    if rel < 0 {
        return OffsetPosition { offset: BASE, position: 0 };
    }
    let i = v.partition_point(|e| (e.0 as i64) <= rel);
    if i == 0 {
        OffsetPosition { offset: BASE, position: 0 }
    } else {
        OffsetPosition { offset: BASE + v[i - 1].0 as i64, position: v[i - 1].1 }
    }
}

/// Kafka's design: the `.index` file mapped read-only and searched in place with Kafka's
/// two-zone search (the same search seglog runs, over the mapped bytes).
struct MappedIndex {
    map: memmap2::Mmap,
    file: std::fs::File,
}

impl MappedIndex {
    fn open(path: &std::path::Path) -> MappedIndex {
        let file = std::fs::File::open(path).unwrap();
        // SAFETY: a shared read-only map of a file we opened; the file is not truncated while
        // mapped (the bench owns it), so every page stays valid to read.
        let map = unsafe { memmap2::Mmap::map(&file) }.expect("mmap");
        MappedIndex { map, file }
    }

    fn bytes(&self) -> &[u8] {
        &self.map
    }

    /// Drops the map's pages and the file's page-cache pages: the next lookups read from disk.
    fn make_cold(&self) {
        // SAFETY: advice on our own read-only map of a file: a shared file map re-reads the file
        // after DONTNEED, so no content changes.
        let _ = unsafe { self.map.unchecked_advise(memmap2::UncheckedAdvice::DontNeed) };
        // The file is clean (written and fsynced): its cached pages can all go.
        let _ = posix_fadvise(&self.file, 0, 0, PosixFadviseAdvice::POSIX_FADV_DONTNEED);
    }

    fn lookup(&self, target: i64) -> OffsetPosition {
        let b = self.bytes();
        let entries = b.len() / 8;
        let key = |i: usize| BASE + i32::from_be_bytes(b[i * 8..i * 8 + 4].try_into().unwrap()) as i64;
        let r = index_slot_range_for(entries, WARM_ENTRIES, target, key);
        if r.lower < 0 {
            OffsetPosition { offset: BASE, position: 0 }
        } else {
            let i = r.lower as usize;
            OffsetPosition { offset: key(i), position: u32::from_be_bytes(b[i * 8 + 4..i * 8 + 8].try_into().unwrap()) }
        }
    }
}

struct Setup {
    _dir: tempfile::TempDir,
    path: PathBuf,
    vec: Vec<(u32, u32)>,
    arena_thp: OffsetIndex,
    arena_normal: OffsetIndex,
    heap: OffsetIndex,
    mapped: MappedIndex,
    warm: Vec<i64>,
    cold: Vec<i64>,
    _arenas: (IndexArena, IndexArena),
}

fn targets(range: std::ops::Range<usize>, n: usize, seed: u64) -> Vec<i64> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let i = range.start + (x % (range.end - range.start) as u64) as usize;
            BASE + entry(i).0 as i64 + (x >> 40) as i64 % 7
        })
        .collect()
}

fn setup() -> Setup {
    let dir = match std::env::var_os("SEGLOG_INDEX_BENCH_DIR") {
        Some(d) => tempfile::tempdir_in(d).unwrap(),
        None => tempfile::tempdir().unwrap(),
    };
    let path = dir.path().join("00000000000001000000.index");
    let bytes = index_bytes();
    std::fs::write(&path, &bytes).unwrap();
    std::fs::File::open(&path).unwrap().sync_all().unwrap();
    let storage = StdStorage::default();
    let load = |arena: &IndexArena| {
        let f = storage.open(&path, OpenMode::Read).unwrap();
        let idx = OffsetIndex::load(Some(arena), BASE, f, 10 << 20, 1 << 30).unwrap();
        idx.prefault_warm();
        idx
    };
    let thp = IndexArena::new(ArenaConfig { huge_pages: HugePages::Auto, ..ArenaConfig::default() });
    let normal = IndexArena::new(ArenaConfig { huge_pages: HugePages::Off, ..ArenaConfig::default() });
    let arena_thp = load(&thp);
    let arena_normal = load(&normal);
    let vec: Vec<(u32, u32)> = (0..entries()).map(entry).collect();
    let mapped = MappedIndex::open(&path);
    let first_hot = entries() - 1 - WARM_ENTRIES;
    Setup {
        warm: targets(first_hot + 1..entries(), LOOKUPS, 0x9E37_79B9),
        cold: targets(0..first_hot, LOOKUPS, 0x2545_F491),
        path,
        vec,
        arena_thp,
        arena_normal,
        heap: OffsetIndex::from_bytes(BASE, index_bytes(), 10 << 20, None),
        mapped,
        _arenas: (thp, normal),
        _dir: dir,
    }
}

struct Row {
    name: String,
    p50_ns: u64,
    p99_ns: u64,
    faults: PageFaults,
}

/// The p50 and p99 of latencies in ns, from an HDR histogram (3 significant digits), filled after
/// the timed pass so that the pass itself touches only its pre-touched array.
fn p50_p99(ns: &[u64]) -> (u64, u64) {
    let mut h = Hist::new();
    ns.iter().for_each(|&v| h.record_ns(v));
    (h.quantile_ns(0.50), h.quantile_ns(0.99))
}

/// Times every lookup of `targets` on its own, into `ns` (allocated and touched beforehand, so
/// that the only memory the pass touches is the index's); faults over the whole pass.
fn timed(name: &str, ns: &mut [u64], targets: &[i64], mut f: impl FnMut(i64) -> OffsetPosition) -> Row {
    let before = thread_page_faults();
    for (slot, &t) in ns.iter_mut().zip(targets) {
        let start = Instant::now();
        black_box(f(black_box(t)));
        *slot = start.elapsed().as_nanos() as u64;
    }
    let after = thread_page_faults();
    let (p50_ns, p99_ns) = p50_p99(ns);
    Row {
        name: name.to_string(),
        p50_ns,
        p99_ns,
        faults: PageFaults { minor: after.minor - before.minor, major: after.major - before.major },
    }
}

type Variant<'a> = (&'static str, Box<dyn Fn(i64) -> OffsetPosition + 'a>);

/// Mean ns per lookup without a per-lookup timer: `rounds` blocks of 20,000 lookups, the
/// variants taking turns within each round (so that noise from other processes hits them alike).
/// Returns each variant's (median, minimum) over the rounds: on a shared machine the minimum is
/// the better estimate of the uncontended cost.
fn interleaved(targets: &[i64], variants: &[Variant<'_>], rounds: usize) -> Vec<(f64, f64)> {
    const BLOCK: usize = 20_000;
    let mut per: Vec<Vec<f64>> = vec![Vec::with_capacity(rounds); variants.len()];
    for r in 0..rounds {
        let from = (r * BLOCK) % (targets.len() - BLOCK);
        let block = &targets[from..from + BLOCK];
        for (i, (_, f)) in variants.iter().enumerate() {
            let start = Instant::now();
            for &t in block {
                black_box(f(black_box(t)));
            }
            per[i].push(start.elapsed().as_nanos() as f64 / BLOCK as f64);
        }
    }
    per.into_iter().map(|v| (median(&v), v.iter().copied().fold(f64::INFINITY, f64::min))).collect()
}

fn percentile_pass(s: &Setup) {
    let mut ns = vec![1u64; LOOKUPS];
    let mut rows = Vec::new();
    let mut means = Vec::new();
    rows.push(timed("timer alone (Instant::now + elapsed)", &mut ns, &s.warm, |_| OffsetPosition {
        offset: 0,
        position: 0,
    }));
    for (section, targets) in [("warm", &s.warm), ("cold", &s.cold)] {
        let variants: Vec<Variant<'_>> = vec![
            ("Vec<(u32,u32)> binary search", Box::new(|t| vec_lookup(&s.vec, t))),
            ("seglog arena, huge pages (auto)", Box::new(|t| s.arena_thp.lookup(t))),
            ("seglog arena, normal pages", Box::new(|t| s.arena_normal.lookup(t))),
            ("seglog index on the heap (Vec<u8>, tools and tests)", Box::new(|t| s.heap.lookup(t))),
            ("Kafka mmap, page cache warm", Box::new(|t| s.mapped.lookup(t))),
        ];
        // One untimed pass first, so that every in-memory variant starts warm.
        for (_, f) in &variants {
            for &t in targets.iter() {
                black_box(f(t));
            }
        }
        let m = interleaved(targets, &variants, 200);
        for ((name, f), &(median, min)) in variants.iter().zip(&m) {
            rows.push(timed(&format!("{section}: {name}"), &mut ns, targets, f));
            means.push((format!("{section}: {name}"), median, median / m[0].0, min, min / m[0].1));
        }
        // Kafka's cold case: the index's pages were dropped from the page cache (as under memory
        // pressure), and a lookup lands on them: the first lookup after each eviction, timed.
        let mut first = Vec::with_capacity(EVICTIONS);
        let before = thread_page_faults();
        for k in 0..EVICTIONS {
            s.mapped.make_cold();
            let t = targets[(k * 7919) % targets.len()];
            let start = Instant::now();
            black_box(s.mapped.lookup(black_box(t)));
            first.push(start.elapsed().as_nanos() as u64);
        }
        let after = thread_page_faults();
        let (p50_ns, p99_ns) = p50_p99(&first);
        rows.push(Row {
            name: format!("{section}: Kafka mmap, first lookup after its pages left the page cache"),
            p50_ns,
            p99_ns,
            faults: PageFaults {
                minor: (after.minor - before.minor) / EVICTIONS as u64,
                major: (after.major - before.major) / EVICTIONS as u64,
            },
        });
    }
    // seglog's own cold case: an index evicted by the memory budget loads whole on next use,
    // with its file in the page cache or (like Kafka's cold case) not.
    let storage = StdStorage::default();
    let arena = IndexArena::new(ArenaConfig::default());
    for evict_file in [false, true] {
        let mut reload_ns = Vec::new();
        let before = thread_page_faults();
        for k in 0..EVICTIONS {
            if evict_file {
                s.mapped.make_cold();
            }
            let f: Arc<dyn seglog::io::IoFile> = storage.open(&s.path, OpenMode::Read).unwrap();
            let start = Instant::now();
            let idx = OffsetIndex::load(Some(&arena), BASE, f, 10 << 20, 1 << 30).unwrap();
            idx.prefault_warm();
            black_box(idx.lookup(s.cold[k]));
            reload_ns.push(start.elapsed().as_nanos() as u64);
        }
        let after = thread_page_faults();
        let (p50_ns, p99_ns) = p50_p99(&reload_ns);
        let whence = if evict_file { "file not in the page cache" } else { "file in the page cache" };
        rows.push(Row {
            name: format!("evicted by the budget: seglog reload of the whole index + 1 lookup, {whence}"),
            p50_ns,
            p99_ns,
            faults: PageFaults {
                minor: (after.minor - before.minor) / EVICTIONS as u64,
                major: (after.major - before.major) / EVICTIONS as u64,
            },
        });
    }
    println!();
    let n = entries();
    println!("Index lookups: {n} entries ({} KiB .index), {LOOKUPS} lookups per row, one thread", n * 8 / 1024);
    println!("Each lookup timed alone (includes the timer's own cost, first row):");
    println!("{:<92} {:>9} {:>9} {:>10} {:>10}", "", "p50 ns", "p99 ns", "minor flt", "major flt");
    for r in &rows {
        println!("{:<92} {:>9} {:>9} {:>10} {:>10}", r.name, r.p50_ns, r.p99_ns, r.faults.minor, r.faults.major);
    }
    println!("(the rows timing one lookup after an eviction or a reload: faults per lookup)");
    println!();
    println!("Mean ns per lookup, no per-lookup timer (200 interleaved rounds of 20,000 lookups):");
    println!("{:<70} {:>10} {:>8} {:>10} {:>8}", "", "median", "x Vec", "min", "x Vec");
    for (name, median, rmed, min, rmin) in &means {
        println!("{name:<70} {median:>10.1} {rmed:>8.2} {min:>10.1} {rmin:>8.2}");
    }
    println!();
}

fn benches(c: &mut Criterion, s: &Setup) {
    for (section, targets) in [("warm", &s.warm), ("cold", &s.cold)] {
        let mut g = c.benchmark_group(format!("index_lookup_{section}"));
        let mut run = |name: &str, f: &dyn Fn(i64) -> OffsetPosition| {
            g.bench_function(name, |b| {
                let mut i = 0;
                b.iter(|| {
                    i = (i + 1) % targets.len();
                    f(black_box(targets[i]))
                })
            });
        };
        run("vec_binary_search", &|t| vec_lookup(&s.vec, t));
        run("seglog_arena_auto", &|t| s.arena_thp.lookup(t));
        run("seglog_arena_normal", &|t| s.arena_normal.lookup(t));
        run("kafka_mmap_cached", &|t| s.mapped.lookup(t));
        g.finish();
    }
}

fn main() {
    let s = setup();
    if !std::env::args().any(|a| a == "--list") {
        percentile_pass(&s);
    }
    let mut c = Criterion::default().configure_from_args();
    benches(&mut c, &s);
    c.final_summary();
}
