//! The standalone `Log`'s default writes (`Writes::Async`): an append returns once its batches
//! are in memory, the log submits its own writes (several in flight, completing in any order on
//! the simulated disk), the written offset only ever covers bytes that are in the file, a failed
//! write takes back exactly what was not written, `finish_writes` and `flush` mean what they
//! say, `flush.messages` fsyncs without the caller waiting, the completion file descriptor wakes
//! a reactor, a dropped log keeps its appends, and memory waiting for the device is bounded.
//! (Crashes with writes in flight: `crash_sim`'s `crash_states_with_async_appends`.)

mod common;

use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{batch_n, small_config, T0};
use seglog::config::LogConfig;
use seglog::io::sim::{Fault, SimStorage};
use seglog::log::{AsyncWrites, Log, LogOptions, Recovery, Writes};

const DIR: &str = "/data/topic-0";

fn big_config() -> LogConfig {
    LogConfig { segment_bytes: 64 << 20, ..small_config() }
}

fn async_writes(max_in_flight: usize, max_unwritten_bytes: u64) -> Writes {
    Writes::Async(AsyncWrites { max_in_flight, max_unwritten_bytes })
}

/// A log on a simulated disk whose asynchronous writes run late (`percent` of them at each
/// poll) and out of order.
fn sim_log(seed: u64, percent: u32, writes: Writes, config: LogConfig) -> (SimStorage, Log) {
    let sim = SimStorage::new();
    sim.put_dir("/data");
    sim.set_now_ms(T0);
    sim.set_async_completions(seed, percent);
    let options = LogOptions { storage: Arc::new(sim.clone()), writes, config, ..LogOptions::default() };
    let log = Log::open(DIR, options).expect("open");
    (sim, log)
}

/// The bytes of the active segment's file (the only segment here).
fn file_bytes(sim: &SimStorage) -> Vec<u8> {
    sim.file(format!("{DIR}/00000000000000000000.log")).expect("the segment file")
}

/// Appends `n` batches of about 100 KB, returning each as stamped (the bytes the file must hold).
fn append_many(log: &mut Log, n: usize, mut each: impl FnMut(&Log)) -> Vec<Vec<u8>> {
    let mut appended = Vec::new();
    for i in 0..n {
        let mut b = batch_n(10, T0 + i as i64, 10_000);
        log.append_as_leader(&mut b, 0).expect("append");
        appended.push(b);
        each(log);
    }
    appended
}

/// Checks that the file holds exactly the appended batches below the written offset.
fn check_written_prefix(sim: &SimStorage, log: &Log, appended: &[Vec<u8>]) {
    let written = log.written_offset() as usize;
    let records_per_batch = 10;
    assert_eq!(written % records_per_batch, 0, "the written offset ends on a batch");
    let expect: Vec<u8> = appended[..written / records_per_batch].concat();
    let file = file_bytes(sim);
    assert!(file.len() >= expect.len(), "the file is shorter than the written offset says");
    assert!(file[..expect.len()] == expect[..], "the file differs from the appends below the written offset {written}");
}

#[test]
fn appends_return_before_their_writes_which_complete_out_of_order_and_are_claimed_in_order() {
    for seed in 1..=4u64 {
        let (sim, mut log) = sim_log(seed, 10, async_writes(4, 4 << 20), big_config());
        let mut most_in_flight = 0;
        let mut returned_before_written = 0;
        let mut last_written = 0;
        let appended = append_many(&mut log, 120, |log| {
            most_in_flight = most_in_flight.max(log.writes_in_flight());
            if log.written_offset() < log.log_end_offset() {
                returned_before_written += 1;
            }
            assert!(log.written_offset() >= last_written, "the written offset went back");
            last_written = log.written_offset();
            // A read sees the append at once, from memory.
            let last = log.log_end_offset() - 1;
            let got = log.read(last, 1, None, true).expect("read");
            assert!(!got.records.is_empty(), "the append just made is not readable");
        });
        check_written_prefix(&sim, &log, &appended);
        assert!(most_in_flight >= 2, "seed {seed}: never more than {most_in_flight} write in flight");
        assert!(returned_before_written > 60, "seed {seed}: only {returned_before_written} appends returned first");
        // Polling drains everything; the file then holds every append.
        for _ in 0..10_000 {
            log.poll().expect("poll");
            check_written_prefix(&sim, &log, &appended);
            if log.written_offset() == log.log_end_offset() {
                break;
            }
        }
        assert_eq!(log.written_offset(), log.log_end_offset(), "seed {seed}: polls never finished the writes");
        assert_eq!(log.writes_in_flight(), 0);
        check_written_prefix(&sim, &log, &appended);
        assert_eq!(log.recovery_point(), 0, "no fsync was asked for");
    }
}

#[test]
fn a_failed_write_among_several_in_flight_takes_back_what_was_not_written() {
    for nth in [3u64, 6, 10] {
        let (sim, mut log) = sim_log(nth, 10, async_writes(4, 4 << 20), big_config());
        sim.inject(Fault::Write(nth));
        let mut appended = Vec::new();
        let mut failed_at = None;
        for i in 0..80 {
            let mut b = batch_n(10, T0 + i, 10_000);
            match log.append_as_leader(&mut b, 0) {
                Ok(_) => appended.push(b),
                Err(e) => {
                    assert!(matches!(e, seglog::Error::Failed { .. }), "{e}");
                    failed_at = Some(i);
                    break;
                }
            }
        }
        let _ = log.poll();
        assert!(failed_at.is_some() || log.failure().is_some(), "write {nth} failing went unnoticed");
        assert!(log.failure().is_some());
        assert!(matches!(log.poll(), Err(seglog::Error::Failed { .. })));
        // Memory forgets what was not written; the file holds exactly what was.
        assert_eq!(log.log_end_offset(), log.written_offset());
        check_written_prefix(&sim, &log, &appended);
        let kept = log.written_offset();
        drop(log);
        let options = LogOptions { storage: Arc::new(sim.clone()), config: big_config(), ..LogOptions::default() };
        let log = Log::open(DIR, options).expect("reopen");
        assert_eq!(log.log_end_offset(), kept, "write {nth} failing: a reopen shows other appends");
    }
}

#[test]
fn finish_writes_puts_appends_in_the_file_and_flush_makes_them_durable() {
    let tmp = tempfile::tempdir().unwrap();
    let options = LogOptions { config: big_config(), ..seglog_tests::log_options() };
    let mut log = Log::open(tmp.path().join("topic-0"), options).unwrap();
    assert!(matches!(log.config().flush_messages, i64::MAX));
    for i in 0..20 {
        log.append_as_leader(&mut batch_n(10, T0 + i, 10_000), 0).unwrap();
    }
    log.finish_writes().unwrap();
    assert_eq!(log.written_offset(), log.log_end_offset());
    assert_eq!(log.writes_in_flight(), 0);
    assert_eq!(log.unwritten_bytes(), 0);
    assert_eq!(log.recovery_point(), 0, "finish_writes does not fsync");
    log.append_as_leader(&mut batch_n(10, T0, 100), 0).unwrap();
    log.flush().unwrap();
    assert_eq!(log.recovery_point(), log.log_end_offset());
    assert_eq!(log.written_offset(), log.log_end_offset());
    assert_eq!(log.writes_in_flight(), 0);
}

#[test]
fn flush_messages_fsyncs_without_the_appender_waiting() {
    let config = LogConfig { flush_messages: 4, ..big_config() };
    let (sim, mut log) = sim_log(7, 20, async_writes(4, 4 << 20), config);
    let syncs_before = sim.counters().syncs;
    let mut returned_before_durable = 0;
    for i in 0..10 {
        log.append_as_leader(&mut batch_n(1, T0 + i, 100), 0).unwrap();
        assert!(log.recovery_point() <= log.written_offset(), "durable before written");
        if log.log_end_offset() % 4 == 0 && log.recovery_point() < log.log_end_offset() {
            returned_before_durable += 1;
        }
    }
    assert!(returned_before_durable > 0, "every append that made an fsync due waited for it");
    for _ in 0..10_000 {
        log.poll().unwrap();
        if log.writes_in_flight() == 0 && log.recovery_point() >= 8 {
            break;
        }
    }
    assert!(log.recovery_point() >= 8, "recovery point {} after 10 messages, flush.messages 4", log.recovery_point());
    assert!(sim.counters().syncs - syncs_before >= 2, "fewer than two fsyncs");
}

#[test]
fn the_completion_fd_wakes_a_reactor_when_a_write_completes() {
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let options = LogOptions { config: big_config(), ..seglog_tests::log_options() };
    let mut log = Log::open(tmp.path().join("topic-0"), options).unwrap();
    let Some(fd) = log.completion_fd() else {
        println!("skipped: this storage completes writes at submission");
        return;
    };
    log.append_as_leader(&mut batch_n(10, T0, 10_000), 0).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while log.written_offset() < log.log_end_offset() {
        assert!(Instant::now() < deadline, "the write never completed");
        if log.writes_in_flight() > 0 {
            let mut fds = [nix::poll::PollFd::new(fd.as_fd(), nix::poll::PollFlags::POLLIN)];
            let n = nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(5_000u16)).expect("poll(2)");
            assert_eq!(n, 1, "the completion fd did not become readable with a write in flight");
        }
        log.poll().unwrap();
    }
    assert_eq!(log.writes_in_flight(), 0);
}

#[test]
fn a_dropped_log_keeps_the_appends_it_held_in_memory() {
    // On the simulated disk a write runs only when claimed: what the drop does not claim, and
    // what it does not write, never reaches the file.
    let (sim, mut log) = sim_log(5, 0, async_writes(4, 8 << 20), big_config());
    let appended = append_many(&mut log, 30, |_| {});
    assert!(log.writes_in_flight() > 0 && log.unwritten_bytes() > 0, "nothing left for the drop to do");
    let leo = log.log_end_offset();
    drop(log);
    assert!(file_bytes(&sim).starts_with(&appended.concat()), "a drop lost appends the log held");
    let options = LogOptions {
        storage: Arc::new(sim.clone()),
        config: big_config(),
        recovery: Recovery::FromRecoveryPoint(0),
        ..LogOptions::default()
    };
    let log = Log::open(DIR, options).unwrap();
    assert_eq!(log.log_end_offset(), leo, "a drop lost appends the log held");
}

#[test]
fn appends_wait_for_the_device_past_max_unwritten_bytes() {
    // Writes run only when claimed: without the limit the tail would grow without bound.
    let limit = 300_000;
    let (_sim, mut log) = sim_log(3, 0, async_writes(2, limit), big_config());
    let mut most = 0;
    append_many(&mut log, 60, |log| most = most.max(log.unwritten_bytes()));
    let one_append = batch_n(10, T0, 10_000).len() as u64;
    assert!(most <= limit + one_append, "{most} bytes unwritten, the limit {limit}");
}

#[test]
fn an_append_that_finds_an_earlier_write_failed_is_refused_not_kept() {
    // The writes run at submission (in order); the second append's write fails, which the third
    // append finds when it claims it: the log rolls back everything past the last good write,
    // the third append included, so that append must not be reported as made.
    let sim = SimStorage::new();
    sim.put_dir("/data");
    sim.set_now_ms(T0);
    sim.set_async_at_once();
    let options = LogOptions { storage: Arc::new(sim.clone()), config: big_config(), ..LogOptions::default() };
    let mut log = Log::open(DIR, options).expect("open");
    log.append_as_leader(&mut batch_n(10, T0, 100), 0).expect("append");
    log.poll().expect("its write done");
    assert_eq!(log.written_offset(), 10);
    sim.inject(Fault::Write(sim.counters().writes + 1));
    log.append_as_leader(&mut batch_n(10, T0, 100), 0).expect("in memory; its write fails later");
    let third = log.append_as_leader(&mut batch_n(10, T0, 100), 0);
    assert!(matches!(third, Err(seglog::Error::Failed { .. })), "{third:?}");
    assert_eq!(log.log_end_offset(), 10, "the failed write's append and the one after it are gone");
    assert!(log.failure().is_some());
}
