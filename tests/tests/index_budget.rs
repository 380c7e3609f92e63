//! Sealed segments' indexes live under a memory budget: past it the least recently used are
//! evicted, and an evicted index loads again from its files on next use, giving the same answers
//! (checked against a linear scan of the files' entries).

use std::path::Path;
use std::sync::Arc;

use seglog::format::builder::BatchBuilder;
use seglog::io::std_backend::StdStorage;
use seglog::log::{Log, LogOptions, Recovery};
use seglog::segment::{ResourceConfig, SegmentResources};
use seglog::LogConfig;

const T0: i64 = 1_700_000_000_000;
const SEGMENTS: usize = 20;

fn batch(i: i64) -> Vec<u8> {
    let mut b = BatchBuilder::new();
    for r in 0..3 {
        b.push(T0 + i * 10 + r, None, Some(&[b'x'; 50]), &[]);
    }
    b.build().unwrap()
}

fn config() -> LogConfig {
    // ~300 batches per segment, an index entry per batch.
    LogConfig {
        segment_bytes: 64 * 1024,
        index_interval_bytes: 0,
        segment_index_bytes: 64 * 1024,
        ..LogConfig::default()
    }
}

fn options(recovery: Recovery, resources: &SegmentResources) -> LogOptions {
    LogOptions {
        config: config(),
        storage: Arc::new(StdStorage::default()),
        recovery,
        resources: resources.clone(),
        ..seglog_tests::log_options()
    }
}

fn budget_resources(budget: u64) -> SegmentResources {
    SegmentResources::new(ResourceConfig { index_memory_budget_bytes: budget, ..ResourceConfig::default() })
}

/// The entries of an index file as (key, value) pairs: (offset, position) for `.index`,
/// (timestamp, offset) for `.timeindex`.
fn file_entries(path: &Path, base: i64, time: bool) -> Vec<(i64, i64)> {
    let b = std::fs::read(path).unwrap();
    if time {
        b.chunks_exact(12)
            .map(|e| {
                let ts = i64::from_be_bytes(e[..8].try_into().unwrap());
                (ts, base + i32::from_be_bytes(e[8..].try_into().unwrap()) as i64)
            })
            .collect()
    } else {
        b.chunks_exact(8)
            .map(|e| {
                let rel = i32::from_be_bytes(e[..4].try_into().unwrap()) as i64;
                (base + rel, i32::from_be_bytes(e[4..].try_into().unwrap()) as i64)
            })
            .collect()
    }
}

/// Kafka's lookup, the slow way: the last entry whose key is <= target.
fn scan(entries: &[(i64, i64)], target: i64) -> Option<(i64, i64)> {
    entries.iter().rev().find(|e| e.0 <= target).copied()
}

struct Reference {
    base: i64,
    offsets: Vec<(i64, i64)>,
    times: Vec<(i64, i64)>,
}

fn check_segment(log: &Log, i: usize, r: &Reference, probe: u64) {
    let seg = log.segments().nth(i).unwrap();
    assert_eq!(seg.base_offset(), r.base);
    let oi = seg.offset_index();
    let ti = seg.time_index();
    assert_eq!(oi.entries(), r.offsets.len());
    let last = r.offsets[r.offsets.len() - 1].0;
    for k in 0..64u64 {
        let t = r.base + ((probe.wrapping_mul(k + 1)) % (last - r.base + 10) as u64) as i64;
        let want = scan(&r.offsets, t).unwrap_or((r.base, 0));
        let got = oi.lookup(t);
        assert_eq!((got.offset, got.position as i64), want, "segment {} offset {t}", r.base);
        let ts = T0 + (probe.wrapping_mul(k + 7) % ((last + 10) as u64 * 10)) as i64;
        let want = scan(&r.times, ts).unwrap_or((-1, r.base));
        let got = ti.lookup(ts);
        assert_eq!((got.timestamp, got.offset), want, "segment {} timestamp {ts}", r.base);
    }
}

#[test]
fn cold_indexes_are_evicted_and_reloaded_correctly() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("t-0");
    // Build the log under a roomy budget and measure one segment's index pair.
    let pair_bytes = {
        let res = budget_resources(1 << 30);
        let mut log = Log::open(&dir, options(Recovery::default(), &res)).unwrap();
        let mut i = 0;
        while log.segments().count() <= SEGMENTS {
            log.append_as_leader(&mut batch(i), 0).unwrap();
            i += 1;
        }
        let s = res.indexes.stats();
        assert_eq!(s.resident_segments, SEGMENTS);
        assert_eq!(s.evictions, 0);
        log.close().unwrap();
        s.resident_bytes / SEGMENTS as u64
    };
    let references: Vec<Reference> = {
        let mut bases: Vec<i64> = std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| e.unwrap().file_name().into_string().ok())
            .filter_map(|n| n.strip_suffix(".log").map(|b| b.parse().unwrap()))
            .collect();
        bases.sort();
        bases
            .iter()
            .take(SEGMENTS)
            .map(|&base| Reference {
                base,
                offsets: file_entries(&dir.join(format!("{base:020}.index")), base, false),
                times: file_entries(&dir.join(format!("{base:020}.timeindex")), base, true),
            })
            .collect()
    };
    assert!(references.iter().all(|r| r.offsets.len() > 100 && r.times.len() > 100));

    // Reopen with room for four and a half pairs.
    let budget = pair_bytes * 9 / 2;
    let res = budget_resources(budget);
    let log = Log::open(&dir, options(Recovery::Clean, &res)).unwrap();
    let after_open = res.indexes.stats();
    println!("pair {pair_bytes} B, budget {budget} B; after a clean open: {after_open:?}");
    assert!(after_open.peak_resident_bytes <= budget, "{after_open:?}");
    assert!(after_open.resident_segments <= 4);

    // Every segment, in a scrambled order, several times: each answer equals the linear scan, the
    // budget holds throughout.
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    for round in 0..200 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let i = (x % SEGMENTS as u64) as usize;
        check_segment(&log, i, &references[i], x | 1);
        let s = res.indexes.stats();
        assert!(s.resident_bytes <= budget, "round {round}: {s:?}");
    }
    let s = res.indexes.stats();
    println!("after 200 scrambled segment visits: {s:?}");
    assert!(s.evictions > 50 && s.loads > 50, "{s:?}");
    assert!(s.peak_resident_bytes <= budget);

    // Least recently used goes first: touch segments 0..4, then 4 evicts 0 only.
    for i in 0..4 {
        log.segments().nth(i).unwrap().offset_index();
    }
    log.segments().nth(4).unwrap().offset_index();
    let resident: Vec<bool> = log.segments().take(5).map(|s| s.indexes_resident()).collect();
    assert_eq!(resident, vec![false, true, true, true, true]);
    let loads = res.indexes.stats().loads;
    log.segments().nth(1).unwrap().offset_index();
    assert_eq!(res.indexes.stats().loads, loads, "a resident index needs no load");

    // Fetches through the log agree with what was written, segment after segment.
    for r in references.iter().step_by(3) {
        for &(offset, position) in r.offsets.iter().step_by(37) {
            let f = log.read(offset, 1, None, true).unwrap();
            assert_eq!(f.segment_base_offset, r.base);
            assert_eq!(f.position as i64, position, "offset {offset}");
        }
    }
    assert!(res.indexes.stats().resident_bytes <= budget);

    // Recovery from scratch under the same budget: every segment is rebuilt and handed back to
    // the budget one by one.
    drop(log);
    let res2 = budget_resources(budget);
    let log = Log::open(&dir, options(Recovery::default(), &res2)).unwrap();
    let s = res2.indexes.stats();
    println!("after a full recovery: {s:?}");
    assert!(s.peak_resident_bytes <= budget, "{s:?}");
    for (i, r) in references.iter().enumerate() {
        check_segment(&log, i, r, 0x1234_5678 + i as u64);
    }
}

/// An evicted index loads again on use even while another segment's index is held by a reader.
#[test]
fn a_held_index_survives_eviction() {
    let tmp = tempfile::tempdir().unwrap();
    let res = budget_resources(1);
    let mut log = Log::open(tmp.path().join("t-0"), options(Recovery::default(), &res)).unwrap();
    let mut i = 0;
    while log.segments().count() < 4 {
        log.append_as_leader(&mut batch(i), 0).unwrap();
        i += 1;
    }
    let segs: Vec<_> = log.segments().collect();
    let held = segs[0].offset_index();
    let before = held.lookup(segs[0].base_offset() + 50);
    // Loading the others evicts segment 0's pair from the budget, but not from under `held`.
    for s in &segs[1..3] {
        s.offset_index();
    }
    assert!(!segs[0].indexes_resident());
    assert_eq!(held.lookup(segs[0].base_offset() + 50), before);
    assert_eq!(segs[0].offset_index().lookup(segs[0].base_offset() + 50), before);
    assert!(res.indexes.stats().resident_segments <= 1);
}
