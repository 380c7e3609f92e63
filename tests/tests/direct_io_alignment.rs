//! O_DIRECT alignment on real filesystems with 4096-byte sectors, and on ext4 with 512-byte
//! sectors, where the kernel takes writes aligned to 512 bytes but the tail aligns them to the
//! filesystem's 4 KiB blocks (loop devices; tmpfs accepts unaligned O_DIRECT on this kernel, so
//! it could not catch an alignment bug). The engine in direct mode must store exactly the bytes
//! it stores in sync mode on the root disk, with batches of awkward sizes that never line up
//! with a sector.

use seglog::format::builder::BatchBuilder;
use seglog::{Engine, EngineConfig, IoMode, TopicPartition};
use seglog_tests::loopfs::{FsKind, LoopFs};

fn odd_batch(i: i64) -> Vec<u8> {
    let mut b = BatchBuilder::new();
    let n = 1 + (i % 7);
    for r in 0..n {
        // 1..=4999-byte values: batch sizes scatter across sector boundaries.
        let len = ((i * 7919 + r * 104_729) % 4999 + 1) as usize;
        b.push(1_700_000_000_000 + i, None, Some(&vec![(i % 251) as u8; len]), &[]);
    }
    b.build().unwrap()
}

/// Appends, fetches and closes through the engine in `mode` under `dir`; returns the fetched
/// bytes and every file of the partition directory.
/// Every file of a directory: name and bytes.
type Files = Vec<(String, Vec<u8>)>;

fn run(dir: &std::path::Path, mode: IoMode) -> (IoMode, Vec<u8>, Files) {
    let mut cfg = EngineConfig::new(dir);
    cfg.io_mode = mode;
    cfg.shards = Some(1);
    cfg.log_config.segment_bytes = 64 * 1024; // several rolls: seal cuts block padding
    let engine = Engine::open(cfg).unwrap();
    let used = engine.io_mode();
    let tp = TopicPartition::new("align", 0);
    engine.open_partition(&tp, None).wait().unwrap();
    for i in 0..300 {
        engine.append(&tp, odd_batch(i), 0).wait().unwrap();
    }
    let mut fetched = Vec::new();
    let mut off = 0;
    loop {
        let f = engine.fetch(&tp, off, 100_000, None).wait().unwrap();
        if f.records.is_empty() {
            break;
        }
        let mut pos = 0;
        while pos < f.records.len() {
            let h = seglog::format::BatchHeader::parse(&f.records[pos..]).unwrap();
            off = h.next_offset();
            pos += h.size_in_bytes() as usize;
        }
        fetched.extend_from_slice(&f.records);
    }
    engine.shutdown().unwrap();
    // Reopen after the clean shutdown and append more: the partial last block is read back
    // and rewritten whole.
    let mut cfg = EngineConfig::new(dir);
    cfg.io_mode = mode;
    cfg.shards = Some(1);
    cfg.log_config.segment_bytes = 64 * 1024;
    let engine = Engine::open(cfg).unwrap();
    for i in 300..350 {
        engine.append(&tp, odd_batch(i), 0).wait().unwrap();
    }
    engine.shutdown().unwrap();
    let pdir = dir.join("align-0");
    let mut names: Vec<String> =
        std::fs::read_dir(&pdir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    names.sort();
    let files = names.into_iter().map(|n| (n.clone(), std::fs::read(pdir.join(&n)).unwrap())).collect();
    (used, fetched, files)
}

/// A 320 MiB filesystem of `kind` on a loop device with `sector`-byte sectors, or `None` (said
/// on stdout) where loop devices cannot be had.
fn loop_fs(kind: FsKind, sector: u32) -> Option<LoopFs> {
    LoopFs::new(kind, sector, 320)
        .map_err(|why| println!("skipped ({kind:?} on a {sector}-byte-sector loop device): {why}"))
        .ok()
}

fn check_on(kind: FsKind, sector: u32) {
    let Some(fs) = loop_fs(kind, sector) else { return };
    let align = seglog::io::probe::dio_alignment(fs.path());
    assert_eq!(align.offset, sector as usize, "{kind:?}: {align:?}");
    assert_eq!(align.fs_block, 4096, "{kind:?}: the filesystem's block, whatever the sector: {align:?}");
    let (used, fetched, files) = run(fs.path(), IoMode::Direct);
    assert_eq!(used, IoMode::Direct);
    let reference = tempfile::tempdir().unwrap();
    let (_, want_fetched, want_files) = run(reference.path(), IoMode::Sync);
    assert_eq!(fetched, want_fetched, "{kind:?}: fetched bytes differ from sync mode");
    assert_eq!(files.len(), want_files.len());
    for ((n, a), (m, b)) in files.iter().zip(&want_files) {
        assert_eq!(n, m);
        assert_eq!(a.len(), b.len(), "{kind:?}: {n} length (block padding left behind?)");
        assert!(a == b, "{kind:?}: {n} differs from the sync-mode file");
    }
    assert!(files.iter().filter(|(n, _)| n.ends_with(".log")).count() > 3, "several segments");
}

#[test]
fn direct_mode_on_ext4_with_4096_byte_sectors() {
    check_on(FsKind::Ext4, 4096);
}

#[test]
fn direct_mode_on_ext4_with_512_byte_sectors() {
    check_on(FsKind::Ext4, 512);
}

#[test]
fn direct_mode_on_xfs_with_4096_byte_sectors() {
    check_on(FsKind::Xfs, 4096);
}

/// In direct mode the active segment's `.log` is kept longer than its data (sparse, at most its
/// shard's share of the length lead past the block the data ends in), so that the appends'
/// O_DIRECT writes land inside the file's size. With 33 partitions on the shard each keeps
/// 4 MiB (256 MiB shared, rounded down to a power of two), not the 16 MiB of a shard's first
/// partition. The length past the data is cut at close; a copy of the live directory (what a
/// crash leaves) reopens with every batch and the zeros cut as a torn tail.
fn length_ahead_on(kind: FsKind) {
    const LEAD: u64 = 4 << 20;
    const APPENDS: i64 = 500;
    let Some(fs) = loop_fs(kind, 4096) else { return };
    let open = |dir: &std::path::Path| {
        let mut cfg = EngineConfig::new(dir);
        cfg.io_mode = IoMode::Direct;
        cfg.shards = Some(1);
        Engine::open(cfg).unwrap()
    };
    let dir = fs.path().join("live");
    let engine = open(&dir);
    assert_eq!(engine.io_mode(), IoMode::Direct);
    let tp = TopicPartition::new("ahead", 0);
    engine.open_partition(&tp, None).wait().unwrap();
    for p in 1..33 {
        engine.open_partition(&TopicPartition::new("ahead", p), None).wait().unwrap();
    }
    let log = dir.join("ahead-0").join("00000000000000000000.log");
    let mut data = 0u64;
    let mut lengths = std::collections::BTreeSet::new();
    // About 5 MB: the length moves ahead twice more after the first.
    for i in 0..APPENDS {
        let b = odd_batch(i);
        data += b.len() as u64;
        engine.append(&tp, b, 0).wait().unwrap();
        let m = std::fs::metadata(&log).unwrap();
        let end = data.div_ceil(4096) * 4096;
        assert!(
            m.len() >= end + LEAD / 2 && m.len() <= end + LEAD,
            "{kind:?}: after append {i} the .log is {} bytes for {data} bytes of data",
            m.len()
        );
        lengths.insert(m.len());
        use std::os::unix::fs::MetadataExt;
        assert!(m.blocks() * 512 <= end + (64 << 10), "{kind:?}: {} bytes allocated for {data}", m.blocks() * 512);
    }
    assert!(lengths.len() >= 3, "{kind:?}: the length moved {} times", lengths.len());
    // A partition opened while the share stays 4 MiB (34 partitions) opens with it.
    let late = TopicPartition::new("ahead", 33);
    engine.open_partition(&late, None).wait().unwrap();
    let b = odd_batch(1);
    let late_data = b.len() as u64;
    engine.append(&late, b, 0).wait().unwrap();
    let len = std::fs::metadata(dir.join("ahead-33").join("00000000000000000000.log")).unwrap().len();
    assert_eq!(len, late_data.div_ceil(4096) * 4096 + LEAD, "{kind:?}: the late partition's .log");
    engine.flush_all().unwrap();
    // What a crash leaves: the files as they are, without the clean-shutdown marker.
    let crashed = fs.path().join("crashed");
    std::fs::create_dir_all(crashed.join("ahead-0")).unwrap();
    for e in std::fs::read_dir(dir.join("ahead-0")).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), crashed.join("ahead-0").join(e.file_name())).unwrap();
    }
    for f in ["recovery-point-offset-checkpoint", "log-start-offset-checkpoint"] {
        if dir.join(f).exists() {
            std::fs::copy(dir.join(f), crashed.join(f)).unwrap();
        }
    }
    assert!(std::fs::metadata(crashed.join("ahead-0").join("00000000000000000000.log")).unwrap().len() > data);
    engine.shutdown().unwrap();
    assert_eq!(std::fs::metadata(&log).unwrap().len(), data, "{kind:?}: a clean close cuts the length to the data");

    let engine = open(&crashed);
    engine.open_partition(&tp, None).wait().unwrap();
    let (_, start, end) = engine.partitions().unwrap().into_iter().find(|(t, ..)| *t == tp).unwrap();
    assert_eq!((start, end), (0, (0..APPENDS).map(|i| 1 + (i % 7)).sum::<i64>()), "{kind:?}: every batch recovered");
    engine.shutdown().unwrap();
    let recovered = crashed.join("ahead-0").join("00000000000000000000.log");
    assert_eq!(std::fs::read(&recovered).unwrap(), std::fs::read(&log).unwrap(), "{kind:?}: the recovered .log");
}

#[test]
fn direct_mode_keeps_the_log_length_ahead_of_its_data_on_ext4() {
    length_ahead_on(FsKind::Ext4);
}

#[test]
fn direct_mode_keeps_the_log_length_ahead_of_its_data_on_xfs() {
    length_ahead_on(FsKind::Xfs);
}
