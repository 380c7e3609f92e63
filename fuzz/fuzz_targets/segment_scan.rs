//! A `.log` blob: walked with `BatchScanner` over a simulated file, then recovered as the only
//! segment of a partition directory (`Log::open` with full recovery) and read back. Nothing may
//! panic; recovery must leave a log whose batches all validate and whose offsets increase.
#![no_main]

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use seglog::config::{LogConfig, ManualClock};
use seglog::format::batch::validate_batch;
use seglog::io::sim::SimStorage;
use seglog::io::{OpenMode, Storage};
use seglog::log::{Log, LogOptions, Recovery};
use seglog::segment::BatchScanner;

fuzz_target!(|data: &[u8]| {
    let sim = SimStorage::new();
    sim.put_file("/d/t-0/00000000000000000000.log", data);
    let f = sim.open(std::path::Path::new("/d/t-0/00000000000000000000.log"), OpenMode::Read).unwrap();
    let mut scan = BatchScanner::with_window(f, 0, data.len() as u32, 128);
    let mut buf = Vec::new();
    while let Ok(Some(b)) = scan.next_batch() {
        assert!(b.end() as usize <= data.len());
        if scan.read_batch(&b, &mut buf).is_err() {
            break;
        }
    }
    let options = LogOptions {
        config: LogConfig { segment_index_bytes: 1024, index_interval_bytes: 64, ..LogConfig::default() },
        storage: Arc::new(sim.clone()),
        clock: Arc::new(ManualClock::new(1_700_000_000_000)),
        recovery: Recovery::FromRecoveryPoint(0),
        ..LogOptions::default()
    };
    let Ok(log) = Log::open("/d/t-0", options) else { return };
    let mut next = log.log_start_offset();
    let mut last = None;
    for s in log.segments() {
        for b in s.batches().unwrap() {
            let mut bytes = vec![0u8; b.size() as usize];
            s.log_file().read_exact_at(&mut bytes, b.position as u64).unwrap();
            validate_batch(&bytes, false).expect("recovery kept an invalid batch");
            assert!(last.is_none_or(|l| b.header.base_offset > l), "offsets do not increase");
            last = Some(b.last_offset());
        }
    }
    while next < log.log_end_offset() {
        match log.read(next, 4096, None, true) {
            Ok(f) if !f.records.is_empty() => {
                let (_, h) = *seglog::format::batch::split_batches(&f.records, false).unwrap().last().unwrap();
                next = h.next_offset();
            }
            _ => break,
        }
    }
});
