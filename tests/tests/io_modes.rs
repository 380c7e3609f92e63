//! The engine in each I/O mode: it reports the mode it really runs in, falls back to sync with a
//! reason when io_uring is refused, and stores the same bytes in every mode.

use seglog::format::builder::BatchBuilder;
use seglog::{Engine, EngineConfig, IoMode, TopicPartition};

fn batch(i: i64) -> Vec<u8> {
    let mut b = BatchBuilder::new();
    for r in 0..7 {
        b.push(
            1_700_000_000_000 + i * 10 + r,
            Some(b"k"),
            Some(format!("value {i} {r} {}", "x".repeat(i as usize % 300)).as_bytes()),
            &[],
        );
    }
    b.build().unwrap()
}

fn write_and_read(mode: IoMode, refuse: bool) -> (IoMode, Option<String>, Vec<Vec<u8>>) {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = EngineConfig::new(dir.path());
    cfg.io_mode = mode;
    cfg.shards = Some(1);
    cfg.simulate_uring_refusal = refuse;
    cfg.log_config.segment_bytes = 8192;
    let engine = Engine::open(cfg).unwrap();
    let used = (engine.io_mode(), engine.io_fallback_reason().map(str::to_string));
    let tp = TopicPartition::new("modes", 0);
    engine.open_partition(&tp, None).wait().unwrap();
    for i in 0..200 {
        engine.append(&tp, batch(i), 1).wait().unwrap();
    }
    // Fetch everything back through the engine (tail cache and sealed segments).
    let mut got = Vec::new();
    let mut off = 0;
    loop {
        let f = engine.fetch(&tp, off, 1 << 20, None).wait().unwrap();
        if f.records.is_empty() {
            break;
        }
        off = f.log_end_offset.min(off + 1_000_000);
        let mut pos = 0;
        while pos < f.records.len() {
            let h = seglog::format::BatchHeader::parse(&f.records[pos..]).unwrap();
            off = h.next_offset();
            pos += h.size_in_bytes() as usize;
        }
        got.push(f.records.into_vec());
    }
    engine.shutdown().unwrap();
    // The files on disk, byte for byte (sorted by name).
    let mut files = Vec::new();
    let pdir = dir.path().join("modes-0");
    let mut names: Vec<_> = std::fs::read_dir(&pdir).unwrap().map(|e| e.unwrap().file_name()).collect();
    names.sort();
    for n in names {
        files.push(std::fs::read(pdir.join(n)).unwrap());
    }
    got.extend(files);
    (used.0, used.1, got)
}

#[test]
fn every_mode_stores_the_same_bytes() {
    let (m_sync, _, sync) = write_and_read(IoMode::Sync, false);
    assert_eq!(m_sync, IoMode::Sync);
    for mode in [IoMode::Direct, IoMode::Buffered] {
        let (used, why, got) = write_and_read(mode, false);
        if used != mode {
            // Only acceptable when this machine refuses io_uring, and then with a reason.
            assert!(why.is_some(), "{mode} fell back to {used} without a reason");
            eprintln!("{mode} unavailable here: {why:?}");
        }
        assert_eq!(got.len(), sync.len(), "{mode}");
        for (i, (a, b)) in got.iter().zip(&sync).enumerate() {
            // Timestamps are the producer's, so every byte matches (LogAppendTime is not used).
            assert_eq!(a, b, "{mode}: item {i} differs");
        }
    }
}

#[test]
fn refused_io_uring_falls_back_to_sync_with_a_reason() {
    let (used, why, got) = write_and_read(IoMode::Direct, true);
    assert_eq!(used, IoMode::Sync);
    let why = why.expect("a fallback reason");
    assert!(why.to_lowercase().contains("io_uring"), "{why}");
    assert!(!got.is_empty());
}

#[test]
fn io_uring_modes_run_here() {
    // This machine kind has io_uring enabled: the engine must really run in the mode asked for.
    if std::env::var_os("SEGLOG_ALLOW_NO_URING").is_some() {
        return;
    }
    for mode in [IoMode::Direct, IoMode::Buffered] {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = EngineConfig::new(dir.path());
        cfg.io_mode = mode;
        cfg.shards = Some(1);
        let engine = Engine::open(cfg).unwrap();
        assert_eq!(engine.io_mode(), mode, "fallback: {:?}", engine.io_fallback_reason());
        let tp = TopicPartition::new("t", 0);
        engine.open_partition(&tp, None).wait().unwrap();
        engine.append(&tp, batch(1), 0).wait().unwrap();
        let st = engine.stats().unwrap();
        assert!(st[0].io_enters > 0);
        engine.shutdown().unwrap();
    }
}
