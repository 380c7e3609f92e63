// Throwaway probe (not committed): standalone Log append throughput per mode.
use seglog::config::LogConfig;
use seglog::io::storage_for_mode;
use seglog::log::{AsyncWrites, Log, LogOptions, Writes};
use seglog::IoMode;
use std::time::Instant;

fn batch(records: usize, value: usize) -> Vec<u8> {
    // Build a v2 batch with the crate's test helper equivalent: use seglog::format if available.
    seglog_bench::workload::make_batch(records * (value + 40), records, 1_700_000_000_000)
}

fn main() {
    let total: u64 = std::env::var("TOTAL_MB").ok().and_then(|v| v.parse().ok()).unwrap_or(256) << 20;
    let modes = [IoMode::Direct, IoMode::Buffered, IoMode::Sync];
    let only_mode = std::env::var("MODE").ok();
    let only_w = std::env::var("WRITES").ok();
    let rounds: usize = std::env::var("ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(2);
    let inflight: usize = std::env::var("INFLIGHT").ok().and_then(|v| v.parse().ok()).unwrap_or(4);
    for round in 0..rounds {
        for mode in modes {
            if only_mode.as_deref().is_some_and(|m| !format!("{mode:?}").eq_ignore_ascii_case(m)) {
                continue;
            }
            for (wname, writes) in [
                ("async", Writes::Async(AsyncWrites { max_in_flight: inflight, ..AsyncWrites::default() })),
                ("through", Writes::Through),
            ] {
                if only_w.as_deref().is_some_and(|w| w != wname) {
                    continue;
                }
                let dir = tempfile::tempdir_in("/var/tmp").unwrap();
                let opened = storage_for_mode(mode);
                let config = LogConfig::default();
                let opts = LogOptions { storage: opened.storage.clone(), writes, ..LogOptions::with_config(config) };
                let mut log = Log::open(dir.path().join("t-0"), opts).unwrap();
                let proto = batch(16, 1000);
                let n = total / proto.len() as u64;
                let t = Instant::now();
                for _ in 0..n {
                    let mut b = proto.clone();
                    log.append_as_leader(&mut b, 0).unwrap();
                }
                log.finish_writes().unwrap();
                let el = t.elapsed().as_secs_f64();
                println!("round {round} {mode:?} {wname}: {:.0} MB/s", (n * proto.len() as u64) as f64 / el / 1e6);
                drop(log);
            }
        }
    }
}
