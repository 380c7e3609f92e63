//! Indexes live in the shard's index arena: a lookup in the warm section of a resident index
//! never page-faults, and the process's memory maps and descriptors grow with shards, not with
//! segments (Kafka maps each index file: two maps per segment, and keeps every `.log` open).
//!
//! Run with `--nocapture` to see the measured faults, maps and descriptors.

use std::path::Path;
use std::sync::Arc;

use seglog::format::builder::BatchBuilder;
use seglog::index::IndexStorage;
use seglog::io::arena::{huge_page_status, map_count, open_fd_count, thp_mode, thread_page_faults};
use seglog::io::std_backend::StdStorage;
use seglog::io::{ArenaConfig, HugePages, PageBacking, Storage};
use seglog::log::{Log, LogOptions};
use seglog::segment::{ResourceConfig, SegmentResources};
use seglog::{Error, LogConfig};

const T0: i64 = 1_700_000_000_000;

fn batch(i: i64, records: usize, value_len: usize) -> Vec<u8> {
    let mut b = BatchBuilder::new();
    let value = vec![b'v'; value_len];
    for r in 0..records {
        b.push(T0 + i * 10 + r as i64, None, Some(&value), &[]);
    }
    b.build().unwrap()
}

fn resources(huge_pages: HugePages) -> SegmentResources {
    SegmentResources::new(ResourceConfig {
        arena: ArenaConfig { huge_pages, ..ArenaConfig::default() },
        ..ResourceConfig::default()
    })
}

/// 100,000 lookups in the warm sections (the last 8 KiB of entries) of three sealed segments and
/// the active one, after one warm-up pass: zero minor and zero major faults on this thread.
#[test]
fn warm_section_lookups_never_page_fault() {
    let mut settings = vec![HugePages::Off, HugePages::Transparent, HugePages::Auto];
    if huge_page_status().free >= 16 {
        settings.push(HugePages::Explicit);
    }
    for setting in settings {
        let res = resources(setting);
        let dir = tempfile::tempdir().unwrap();
        // An index entry per batch: each 1 MiB segment gets ~4,000 entries (32 KiB of offset
        // index), four times the warm section.
        let config = LogConfig {
            segment_bytes: 1 << 20,
            index_interval_bytes: 0,
            segment_index_bytes: 1 << 20,
            ..LogConfig::default()
        };
        let options = LogOptions {
            config,
            storage: Arc::new(StdStorage::default()),
            resources: res.clone(),
            ..seglog_tests::log_options()
        };
        let mut log = Log::open(dir.path().join("t-0"), options).unwrap();
        let mut i = 0;
        while log.segments().count() < 4 || log.active_segment().index_entries().0 < 2000 {
            log.append_as_leader(&mut batch(i, 2, 100), 0).unwrap();
            i += 1;
        }
        let segs: Vec<_> = log.segments().collect();
        let expect_backing = match res.arena.report().backing {
            Some(b) => b,
            None => panic!("no packed region mapped"),
        };
        for s in &segs[..segs.len() - 1] {
            assert!(s.indexes_resident(), "sealed indexes stay resident after the roll");
            assert_eq!(s.offset_index().storage(), IndexStorage::Arena(Some(expect_backing)));
        }
        assert_eq!(segs.last().unwrap().offset_index().storage(), IndexStorage::Arena(Some(PageBacking::Normal)));

        // Targets inside each segment's warm section, chosen before measuring (no allocation
        // while measuring).
        let mut targets: Vec<(usize, i64, i64)> = Vec::with_capacity(100_000);
        let warm: Vec<(i64, i64, i64, i64)> = segs
            .iter()
            .map(|s| {
                let o = s.offset_index();
                let n = o.entries();
                let t = s.time_index();
                let m = t.entries();
                let warm_o = n.saturating_sub(8192 / 8);
                let warm_t = m.saturating_sub(8192 / 12);
                (
                    o.entry(warm_o).offset + 1,
                    o.last_entry().offset + 5,
                    t.entry(warm_t).timestamp + 1,
                    t.last_entry().timestamp,
                )
            })
            .collect();
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for k in 0..100_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let s = k % segs.len();
            let (lo, hi, tlo, thi) = warm[s];
            targets.push((s, lo + (x % (hi - lo) as u64) as i64, tlo + (x % ((thi - tlo).max(1)) as u64) as i64));
        }
        let run = |targets: &[(usize, i64, i64)]| -> u64 {
            let mut sum = 0u64;
            for &(s, off, ts) in targets {
                let o = segs[s].try_offset_index().unwrap();
                sum = sum.wrapping_add(o.lookup(off).position as u64);
                let t = segs[s].try_time_index().unwrap();
                sum = sum.wrapping_add(t.lookup(ts).offset as u64);
            }
            sum
        };
        let warm_up = run(&targets);
        let before = thread_page_faults();
        let sum = run(&targets);
        let after = thread_page_faults();
        assert_eq!(sum, warm_up);
        let (minor, major) = (after.minor - before.minor, after.major - before.major);
        println!(
            "{setting} (packed regions: {}): {} warm-section lookups (offset + time index each) over {} segments: {minor} minor, {major} major faults",
            expect_backing.name(),
            targets.len(),
            segs.len()
        );
        assert_eq!((minor, major), (0, 0), "warm-section lookups page-faulted under {setting}");
    }
}

/// A partition takes one descriptor, its active `.log`: the index files of a new segment are
/// created and closed again (they are written when the segment is sealed or flushed), so
/// 10,000 partitions fit a descriptor limit of 20,000 beside the lazily opened files.
#[test]
fn a_partition_holds_one_descriptor_until_its_segment_is_sealed() {
    const PARTITIONS: usize = 200;
    let tmp = tempfile::tempdir().unwrap();
    let res = SegmentResources::new(ResourceConfig { max_open_files: 10_000, ..ResourceConfig::default() });
    let storage: Arc<dyn Storage> = Arc::new(StdStorage::default());
    let dir_lock = storage.lock(tmp.path(), seglog::io::lock::LockKind::LogDir).unwrap().map(Arc::new);
    let fds_before = open_fd_count();
    let mut logs = Vec::with_capacity(PARTITIONS);
    for p in 0..PARTITIONS {
        let options = LogOptions {
            storage: storage.clone(),
            log_dir_lock: dir_lock.clone(),
            resources: res.clone(),
            ..seglog_tests::log_options()
        };
        let mut log = Log::open(tmp.path().join(format!("topic-{p}")), options).unwrap();
        log.append_as_leader(&mut batch(0, 4, 100), 0).unwrap();
        logs.push(log);
    }
    // (The process's own count moves with the other tests of this file, run in parallel.)
    let fds = open_fd_count().saturating_sub(fds_before);
    let files = res.report().files;
    println!("{PARTITIONS} partitions: {fds} descriptors, lazily opened files {files:?}");
    assert_eq!(files.open, 0, "no index file of an active segment stays open: {files:?}");
    // The index files open again when needed: a flush writes them.
    for log in &mut logs {
        log.flush().unwrap();
    }
    for (p, log) in logs.iter().enumerate() {
        let r = log.read(0, 1 << 20, None, true).unwrap();
        assert_eq!(seglog::format::batch::BatchHeader::parse(&r.records).unwrap().base_offset, 0, "partition {p}");
    }
    drop(logs);
    for p in 0..PARTITIONS {
        let dir = tmp.path().join(format!("topic-{p}"));
        assert!(std::fs::metadata(dir.join("00000000000000000000.index")).unwrap().len() > 0, "partition {p}");
    }
}

/// 10,000 partitions of 10 segments each (100,000 segments), all open: under 1,000 memory maps
/// for the whole process (Kafka: two per segment, 200,000, past vm.max_map_count), and lazily
/// opened files within `max_open_files` (Kafka: three per segment).
#[test]
fn ten_thousand_partitions_need_few_maps_and_descriptors() {
    const PARTITIONS: usize = 10_000;
    const SEGMENTS: usize = 10;
    const MAX_OPEN_FILES: usize = 1000;
    // tmpfs keeps 90,000 rolls (each fsyncs four times) fast; any directory works.
    let tmp = if Path::new("/dev/shm").is_dir() {
        tempfile::tempdir_in("/dev/shm").unwrap()
    } else {
        tempfile::tempdir().unwrap()
    };
    let res = SegmentResources::new(ResourceConfig { max_open_files: MAX_OPEN_FILES, ..ResourceConfig::default() });
    let storage: Arc<dyn Storage> = Arc::new(StdStorage::default());
    let one = batch(0, 1, 10);
    // One batch per segment: every append after the first rolls. segment.index.bytes stays at
    // Kafka's 10 MiB, so every active index reserves 10 MiB (virtually) in the arena.
    let config = LogConfig { segment_bytes: one.len() as u32, ..LogConfig::default() };
    let maps_before = map_count();
    let fds_before = open_fd_count();
    let started = std::time::Instant::now();
    let mut logs = Vec::with_capacity(PARTITIONS);
    // One owner for the whole log directory, as the engine does: the logs then keep no
    // descriptor each for their own directory's lock.
    let dir_lock = storage.lock(tmp.path(), seglog::io::lock::LockKind::LogDir).unwrap().map(Arc::new);
    for p in 0..PARTITIONS {
        let options = LogOptions {
            config: config.clone(),
            storage: storage.clone(),
            tail_cache_bytes: 0,
            log_dir_lock: dir_lock.clone(),
            resources: res.clone(),
            ..seglog_tests::log_options()
        };
        let mut log = Log::open(tmp.path().join(format!("topic-{p}")), options).unwrap();
        for i in 0..SEGMENTS {
            log.append_as_leader(&mut batch(i as i64, 1, 10), 0).unwrap();
        }
        logs.push(log);
    }
    let built = started.elapsed();
    let segments: usize = logs.iter().map(|l| l.segments().count()).sum();
    assert_eq!(segments, PARTITIONS * SEGMENTS);
    let maps = map_count();
    let fds = open_fd_count();
    let report = res.report();
    println!(
        "{PARTITIONS} partitions x {SEGMENTS} segments built in {built:?}: {maps} memory maps (before: {maps_before}; Kafka's design: {} index maps), {fds} descriptors (before: {fds_before}; active .log files: {PARTITIONS}; lazily opened: {} open, peak {}, limit {MAX_OPEN_FILES}; Kafka: {} files open)",
        2 * segments,
        report.files.open,
        report.files.peak_open,
        3 * segments,
    );
    println!("arena: {}", report.arena.summary());
    println!("arena memory: {:?}; sealed indexes: {:?}", res.arena.memory(), report.indexes);
    assert!(maps < 1000, "{maps} memory maps");
    assert!(report.files.peak_open <= MAX_OPEN_FILES, "{:?}", report.files);
    assert!(fds <= fds_before + PARTITIONS + MAX_OPEN_FILES, "{fds} descriptors");

    // Every segment still reads back, through files reopened on demand.
    for (p, log) in logs.iter().enumerate().step_by(997) {
        for o in 0..SEGMENTS as i64 {
            let r = log.read(o, 1 << 20, None, true).unwrap();
            let b = seglog::format::batch::BatchHeader::parse(&r.records).unwrap();
            assert_eq!(b.base_offset, o, "partition {p}");
        }
        let t = log.offset_for_time(seglog::log::ListOffset::Timestamp(T0 + 50)).unwrap().unwrap();
        assert_eq!(t.offset, 5, "partition {p}");
    }
    assert!(res.files.stats().peak_open <= MAX_OPEN_FILES);
}

/// With every lazily opened file in use, opening another is a typed error, and the log keeps
/// working once a handle is released.
#[test]
fn descriptor_limit_is_a_typed_error() {
    let res = SegmentResources::new(ResourceConfig { max_open_files: 6, ..ResourceConfig::default() });
    let dir = tempfile::tempdir().unwrap();
    let one = batch(0, 1, 10);
    let config = LogConfig { segment_bytes: one.len() as u32, segment_index_bytes: 4096, ..LogConfig::default() };
    let options = LogOptions {
        config,
        storage: Arc::new(StdStorage::default()),
        resources: res.clone(),
        ..seglog_tests::log_options()
    };
    let mut log = Log::open(dir.path().join("t-0"), options).unwrap();
    for i in 0..10 {
        log.append_as_leader(&mut batch(i, 1, 10), 0).unwrap();
    }
    assert!(res.files.stats().peak_open <= 6);
    // The active .log counts against the limit: five sealed .log files pinned (as five
    // concurrent sendfile calls would) use the rest.
    let pinned: Vec<_> = log.segments().take(5).map(|s| s.pinned_log_file().unwrap()).collect();
    assert_eq!((res.files.stats().open, res.files.stats().held), (5, 1));
    let seg = log.segments().nth(7).unwrap();
    match seg.read(7, 1 << 20, seg.size(), true) {
        Err(Error::TooManyOpenFiles { limit: 6, .. }) => {}
        other => panic!("expected TooManyOpenFiles, got {other:?}"),
    }
    match log.read(7, 1 << 20, None, true) {
        Err(Error::TooManyOpenFiles { .. }) => {}
        other => panic!("expected TooManyOpenFiles, got {other:?}"),
    }
    drop(pinned);
    let r = log.read(7, 1 << 20, None, true).unwrap();
    assert_eq!(seglog::format::batch::BatchHeader::parse(&r.records).unwrap().base_offset, 7);
    assert!(res.files.stats().refusals >= 2);
    println!("refusals {:?}; THP mode {}", res.files.stats(), thp_mode());
}

/// The engine gives each shard its own arena, budget and descriptor limit (the totals split
/// evenly), and reports what each arena got.
#[test]
fn engine_reports_each_shards_index_memory() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = seglog::EngineConfig::new(dir.path());
    cfg.io_mode = seglog::IoMode::Sync;
    cfg.shards = Some(2);
    cfg.pin_threads = false;
    cfg.huge_pages = HugePages::Transparent;
    cfg.index_memory_budget_bytes = 64 << 20;
    cfg.max_open_files = 200;
    let engine = seglog::Engine::open(cfg).unwrap();
    let tp = seglog::TopicPartition::new("t", 0);
    let one = batch(0, 1, 10);
    let config = LogConfig { segment_bytes: one.len() as u32, segment_index_bytes: 4096, ..LogConfig::default() };
    engine.open_partition(&tp, Some(config)).wait().unwrap();
    for i in 0..5 {
        engine.append(&tp, batch(i, 1, 10), 0).wait().unwrap();
    }
    let reports = engine.index_memory();
    assert_eq!(reports.len(), 2);
    let expect = if thp_mode() == "never" { PageBacking::Normal } else { PageBacking::Transparent };
    for (shard, r) in reports.iter().enumerate() {
        println!("shard {shard}: {}; {:?}; {:?}", r.arena.summary(), r.indexes, r.files);
        assert_eq!(r.arena.requested, HugePages::Transparent);
        assert_eq!(r.arena.backing, Some(expect), "probed at start");
        assert_eq!(r.indexes.budget_bytes, 32 << 20);
        assert_eq!(r.files.limit, 100);
    }
    let owner = &reports[engine.shard_of(&tp)];
    assert_eq!(owner.indexes.resident_segments, 4, "the sealed segments' indexes, on the owning shard");
    assert!(owner.arena.growth_regions >= 1);
    engine.shutdown().unwrap();
}
