//! `SyncMethod::Syncfs` under `Durability::EveryBatch`: a shard's partitions write plainly and
//! share one syncfs of the data directory's filesystem, run by the shard's flusher thread while
//! their next writes go on. Every append is acknowledged once a syncfs started after its write
//! succeeded, and its partition's recovery point is then past it; far fewer syncfs run than
//! appends; a partition closed with appends still waiting for a syncfs acknowledges them with
//! its close's fsync; a shutdown waits for the syncfs in flight; the files hold exactly what was
//! appended. In the I/O mode `SEGLOG_IO_MODE` names (direct by default). A failing syncfs is
//! checked on the simulated disk, in the engine's own tests (engine/src/engine/flush.rs): the
//! engine opens its own storage, so it cannot run on the simulated disk from here.

mod common;

use std::path::{Path, PathBuf};

use common::{batch, log_path, T0};
use seglog::engine::SyncMethod;
use seglog::{Durability, Engine, EngineConfig, IoMode, LogConfig, TopicPartition};

const PARTITIONS: i32 = 8;
/// Appends in flight per partition.
const IN_FLIGHT: usize = 4;
const ROUNDS: usize = 30;

fn disk_tempdir() -> tempfile::TempDir {
    let base = std::env::var_os("SEGLOG_TEST_DIR").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/var/tmp"));
    tempfile::tempdir_in(base).expect("tempdir on disk")
}

/// The batch as stored: the engine stamps the base offset and the leader epoch (outside the CRC).
fn stored(mut b: Vec<u8>, first_offset: i64) -> Vec<u8> {
    b[0..8].copy_from_slice(&first_offset.to_be_bytes());
    b[12..16].copy_from_slice(&0i32.to_be_bytes());
    b
}

/// Every `.log` of a partition directory, in offset order, end to end.
fn log_bytes(dir: &Path) -> Vec<u8> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("partition directory")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".log"))
        .collect();
    names.sort();
    names.iter().flat_map(|n| std::fs::read(dir.join(n)).expect("read .log")).collect()
}

#[test]
fn partitions_of_a_shard_share_one_syncfs() {
    let tmp = disk_tempdir();
    let mut cfg = EngineConfig::new(tmp.path());
    cfg.io_mode = common::env_io_mode().unwrap_or(IoMode::Direct);
    cfg.shards = Some(1);
    cfg.pin_threads = false;
    cfg.durability = Durability::EveryBatch;
    cfg.sync_method = SyncMethod::Syncfs;
    // Small segments, so that rolls (with their own fsyncs) happen between shared flushes.
    cfg.log_config = LogConfig { segment_bytes: 256 * 1024, ..LogConfig::default() };
    let engine = Engine::open(cfg).expect("engine");
    let mode = engine.io_mode();
    let tps: Vec<TopicPartition> = (0..PARTITIONS).map(|p| TopicPartition::new("gc", p)).collect();
    for tp in &tps {
        engine.open_partition(tp, None).wait().expect("open partition");
    }
    let mut appended = vec![Vec::new(); tps.len()];
    let mut appends = 0u64;
    for round in 0..ROUNDS {
        let pending: Vec<_> = (0..IN_FLIGHT)
            .flat_map(|k| tps.iter().enumerate().map(move |(p, tp)| (p, tp, k)))
            .map(|(p, tp, k)| {
                let b = batch(&[T0 + (round * IN_FLIGHT + k) as i64], 500 + (round * 131 + k * 977 + p * 61) % 6000);
                (p, b.clone(), engine.append(tp, b, 0))
            })
            .collect();
        for (p, b, c) in pending {
            let info = c.wait().expect("append");
            appended[p].extend(stored(b, info.first_offset));
            appends += 1;
        }
    }
    // Acknowledged means durable: every recovery point is at its log end.
    for tp in &tps {
        let (rp, leo) = engine.with_log(tp, |l| Ok((l.recovery_point(), l.log_end_offset()))).wait().expect("offsets");
        assert_eq!(rp, leo, "{mode}: {tp}'s recovery point after every append was acknowledged");
    }
    let stats = engine.stats().expect("stats").remove(0);
    println!(
        "{mode}: {appends} appends, {} partition writes, {} shared flushes (p50 {:?}), {} fsyncs of the shard",
        stats.flushes,
        stats.shared_flushes,
        stats.flush_latency.quantile(0.5),
        stats.fsyncs
    );
    assert!(stats.shared_flushes > 0, "{mode}: no shared flush");
    assert!(
        stats.shared_flushes * 4 <= appends,
        "{mode}: {} shared flushes for {appends} appends: they are not shared",
        stats.shared_flushes
    );
    assert!(stats.flushes <= appends, "{mode}: {} partition writes for {appends} appends", stats.flushes);
    assert_eq!(stats.flush_latency.count(), stats.shared_flushes, "{mode}: every shared flush timed once");

    // Close a partition with appends still in flight or waiting for a syncfs: they are
    // acknowledged (the close fsyncs the log).
    let closing = &tps[0];
    let pending: Vec<_> = (0..IN_FLIGHT)
        .map(|k| {
            let b = batch(&[T0 + k as i64], 3000 + k * 100);
            (b.clone(), engine.append(closing, b, 0))
        })
        .collect();
    let closed = engine.close_partition(closing);
    for (b, c) in pending {
        let info = c.wait().expect("an append before the close");
        appended[0].extend(stored(b, info.first_offset));
    }
    closed.wait().expect("close");
    // And the others with appends outstanding at shutdown: it waits for them.
    let pending: Vec<_> = tps[1..]
        .iter()
        .enumerate()
        .map(|(i, tp)| {
            let b = batch(&[T0], 2000 + i * 10);
            (i + 1, b.clone(), engine.append(tp, b, 0))
        })
        .collect();
    engine.shutdown().expect("shutdown");
    for (p, b, c) in pending {
        appended[p].extend(stored(b, c.wait().expect("an append before the shutdown").first_offset));
    }
    for (tp, want) in tps.iter().zip(&appended) {
        let dir = tmp.path().join(tp.dir_name());
        let got = log_bytes(&dir);
        assert!(got == *want, "{mode}: {tp}'s segments hold {} bytes, {} appended", got.len(), want.len());
        assert!(log_path(&dir, 0).exists());
    }
}
