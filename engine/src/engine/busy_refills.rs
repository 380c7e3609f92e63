//! Whether a busy partition writing alone takes zero-fill refills, under [`super::ZeroFill::Auto`]:
//! chosen on the shard's own device by taking turns with and without them and keeping the side
//! whose writes were faster, then asking again every [`HOLD`].
//!
//! The refills make a busy partition's writes overwrite zeros instead of allocating blocks, and
//! put up to 1 MiB of zeros in the device's queue beside its next writes. Which costs more
//! depends on the device: at 1 partition x 8 appends in flight the durable sweep made 0.98-1.18x
//! fio's throughput with them against 0.80-0.93x without on one virtio disk, and 0.71x against
//! 0.76x (p99 3.4x fio's against 2.7x) on another (docs/benchmarks.md, "Refills for a busy
//! partition, chosen by measurement"). A fixed rule fits one of the two.
//!
//! A trial alternates turns of [`TURN_BYTES`] of the busy partitions' writes, starting with
//! refills, and times the writes of each turn past its first [`SETTLE_BYTES`] (those still land
//! on the other side's zeros, or beside a refill of the turn before). Turns are counted in bytes,
//! not time, so that each side writes as much whatever the device's speed, and a pause in the
//! writes pauses the trial. Once each side had [`TURNS_EACH`] turns and [`MIN_SAMPLES`] timed
//! writes, the side that took less time per byte written (its slowest [`TRIM`] of writes left
//! out: one stall of the filesystem's journal would otherwise decide) is kept for [`HOLD`]. A
//! partition writing alone has the shard's only write in flight, so the time its writes take per
//! byte is what its throughput is inverse to, and a refill's cost shows in it as the slower
//! writes beside the refill.
//!
//! The trial is the shard's: when several partitions take turns writing alone (each busy in its
//! own moments), their writes feed the same two sides.

use std::time::{Duration, Instant};

/// The busy partitions' bytes written in each side's turn.
const TURN_BYTES: u64 = 6 << 20;

/// The bytes at the start of each turn whose writes are not timed: a busy partition's lead
/// (1 MiB, `BUSY_ZERO_FILL_LEAD` in shard.rs), which a turn without refills first overwrites,
/// and a write of up to a quarter of it (`small_write_bytes`), beside which a turn with refills
/// takes its first.
const SETTLE_BYTES: u64 = (1 << 20) + (256 << 10);

/// Turns each side takes before a choice: turns alternate, so that a drift of the device's
/// speed weighs on both sides alike.
const TURNS_EACH: u32 = 3;

/// Timed writes each side needs before a choice; more turns are taken until both have them.
const MIN_SAMPLES: usize = 100;

/// Timed writes kept per side: a trial's memory stays bounded however long it runs.
const MAX_SAMPLES: usize = 4096;

/// The share of each side's slowest writes left out.
const TRIM: f64 = 0.01;

/// How long a choice holds before the next trial: the device's state drifts (the same disk has
/// measured fio's throughput at 150 and at 300 MB/s on different days).
const HOLD: Duration = Duration::from_secs(60);

/// The last choice of a shard's trial ([`super::ShardStats::busy_refills`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BusyRefillChoice {
    /// Whether a busy partition writing alone takes refills until the next trial.
    pub refills: bool,
    /// Microseconds per MiB written by the writes timed with refills and without (their
    /// slowest 1 % left out).
    pub with_us_per_mib: u64,
    pub without_us_per_mib: u64,
    /// The writes timed on each side.
    pub with_writes: u64,
    pub without_writes: u64,
    /// Refills the busy partitions took in the trial's turns with refills, and in its turns
    /// without (none: the shard takes none there).
    pub with_refills: u64,
    pub without_refills: u64,
    /// Trials completed since the shard started.
    pub trials: u64,
}

/// A timed write: its latency in microseconds and its bytes.
type Sample = (u32, u32);

/// A write to time for the trial, once complete ([`BusyRefillTrial::record`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct TimedWrite {
    /// Issued in a turn with refills.
    pub with_refills: bool,
    pub bytes: u64,
}

/// A shard's trial of refills for its busy partitions writing alone (see the module docs).
#[derive(Debug, Default)]
pub(super) struct BusyRefillTrial {
    /// While a choice holds: until when. `None`: a trial runs.
    chosen_until: Option<Instant>,
    /// Turns completed in this trial (even: the turn with refills runs), and the bytes written
    /// in the current one.
    turns: u32,
    turn_bytes: u64,
    /// The writes timed this trial, with refills and without.
    samples: [Vec<Sample>; 2],
    /// Refills taken this trial, in turns with refills and without.
    refills: [u64; 2],
    choice: Option<BusyRefillChoice>,
}

impl BusyRefillTrial {
    /// For a busy partition's write of `bytes` about to be issued (`now` reads the clock, only
    /// while a choice holds and when one is made): whether it may take a refill, and whether
    /// its latency goes to [`BusyRefillTrial::record`] on that side (`Some`).
    pub(super) fn side(&mut self, bytes: u64, now: impl Fn() -> Instant) -> (bool, Option<TimedWrite>) {
        if let Some(until) = self.chosen_until {
            if now() < until {
                return (self.choice.is_some_and(|c| c.refills), None);
            }
            self.chosen_until = None;
            (self.turns, self.turn_bytes) = (0, 0);
        }
        if self.turn_bytes >= TURN_BYTES {
            self.turns += 1;
            self.turn_bytes = 0;
            if self.turns >= 2 * TURNS_EACH && self.samples.iter().all(|s| s.len() >= MIN_SAMPLES) {
                return (self.choose(now()), None);
            }
        }
        let with_refills = self.turns.is_multiple_of(2);
        let timed = (self.turn_bytes >= SETTLE_BYTES).then_some(TimedWrite { with_refills, bytes });
        self.turn_bytes += bytes;
        (with_refills, timed)
    }

    /// The latency of a write [`BusyRefillTrial::side`] said to time.
    pub(super) fn record(&mut self, write: TimedWrite, latency: Duration) {
        let samples = &mut self.samples[usize::from(!write.with_refills)];
        if samples.len() < MAX_SAMPLES && self.chosen_until.is_none() {
            let us = u32::try_from(latency.as_micros()).unwrap_or(u32::MAX);
            samples.push((us, u32::try_from(write.bytes).unwrap_or(u32::MAX)));
        }
    }

    /// A busy partition's write issued on `side` took a refill.
    pub(super) fn refilled(&mut self, side: bool) {
        if self.chosen_until.is_none() {
            self.refills[usize::from(!side)] += 1;
        }
    }

    /// The last choice, if any.
    pub(super) fn choice(&self) -> Option<BusyRefillChoice> {
        self.choice
    }

    /// Ends the trial: keeps the side with less time per byte until [`HOLD`] from `now`.
    fn choose(&mut self, now: Instant) -> bool {
        let [with, without] = self.samples.each_mut().map(|s| {
            let per_mib = us_per_mib(s);
            let n = s.len() as u64;
            s.clear();
            (per_mib, n)
        });
        let [with_refills, without_refills] = std::mem::take(&mut self.refills);
        let choice = BusyRefillChoice {
            refills: with.0 <= without.0,
            with_us_per_mib: with.0,
            without_us_per_mib: without.0,
            with_writes: with.1,
            without_writes: without.1,
            with_refills,
            without_refills,
            trials: self.choice.map_or(0, |c| c.trials) + 1,
        };
        self.choice = Some(choice);
        self.chosen_until = Some(now + HOLD);
        choice.refills
    }
}

/// Microseconds per MiB over `samples` without their slowest [`TRIM`] (sorts them).
fn us_per_mib(samples: &mut [Sample]) -> u64 {
    samples.sort_unstable();
    let kept = &samples[..samples.len() - (samples.len() as f64 * TRIM) as usize];
    let us: u64 = kept.iter().map(|&(us, _)| u64::from(us)).sum();
    let bytes: u64 = kept.iter().map(|&(_, b)| u64::from(b)).sum();
    // At most MAX_SAMPLES (2^12) latencies under 2^32 us: shifted by 20, still under 2^64.
    (us << 20) / bytes.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes of `bytes` each from `t0`, one a millisecond, each taking `with` or `without` by
    /// its side, until a choice is made; returns it and the instant after.
    fn run(trial: &mut BusyRefillTrial, t0: Instant, bytes: u64, with: Duration, without: Duration) -> Instant {
        let mut now = t0;
        let before = trial.choice().map_or(0, |c| c.trials);
        loop {
            let (refills, timed) = trial.side(bytes, || now);
            if trial.choice().is_some_and(|c| c.trials > before) {
                return now;
            }
            if let Some(w) = timed {
                assert_eq!(w, TimedWrite { with_refills: refills, bytes });
                trial.record(w, if refills { with } else { without });
            }
            now += Duration::from_millis(1);
            assert!(now - t0 < Duration::from_secs(100), "no choice after 100,000 writes");
        }
    }

    #[test]
    fn turns_alternate_by_bytes_and_settle_before_timing() {
        let mut trial = BusyRefillTrial::default();
        let clock = || -> Instant { unreachable!("no clock read while a trial runs") };
        let kib = 128 << 10;
        let settle = SETTLE_BYTES.div_ceil(kib);
        let turn = TURN_BYTES.div_ceil(kib);
        let sides: Vec<_> = (0..2 * turn).map(|_| trial.side(kib, clock)).collect();
        for (i, &(refills, timed)) in sides.iter().enumerate() {
            let at = i as u64 % turn;
            assert_eq!(refills, (i as u64) < turn, "write {i}: refills first, then a turn without");
            assert_eq!(timed.is_some(), at >= settle, "write {i}: timed only past the settle");
        }
        // A pause does not end a turn: the next write is the third turn's first.
        assert_eq!(trial.side(kib, clock), (true, None));
    }

    #[test]
    fn the_side_with_less_time_per_byte_is_kept_until_the_next_trial() {
        let mut trial = BusyRefillTrial::default();
        let t0 = Instant::now();
        // Refills slower: none are taken once chosen.
        let at = run(&mut trial, t0, 128 << 10, Duration::from_micros(1300), Duration::from_micros(1000));
        let c = trial.choice().expect("chosen");
        assert!(!c.refills, "{c:?}");
        // 128 KiB writes: 8 to the MiB.
        assert_eq!((c.with_us_per_mib, c.without_us_per_mib, c.trials), (10_400, 8000, 1));
        assert!(c.with_writes >= MIN_SAMPLES as u64 && c.without_writes >= MIN_SAMPLES as u64, "{c:?}");
        assert_eq!(trial.side(128 << 10, || at + HOLD / 2), (false, None), "held");
        // Then the next trial; the device changed, and refills are kept.
        run(&mut trial, at + HOLD, 128 << 10, Duration::from_micros(700), Duration::from_micros(1000));
        let c = trial.choice().expect("chosen");
        assert!(c.refills, "{c:?}");
        assert_eq!(c.trials, 2);
    }

    #[test]
    fn time_per_byte_not_per_write_decides() {
        // Without refills the writes are slower but twice as large (a slower side's writes carry
        // more appends): per byte it is the faster side (8,000 against 9,600 us a MiB).
        let mut trial = BusyRefillTrial::default();
        let mut now = Instant::now();
        // A write's size follows the side of the write before (the turn it is in).
        let mut bytes = 64 << 10;
        while trial.choice().is_none() {
            let (refills, timed) = trial.side(bytes, || now);
            if let Some(w) = timed {
                trial.record(w, Duration::from_micros(if refills { 600 } else { 1000 }));
            }
            bytes = if refills { 64 << 10 } else { 128 << 10 };
            now += Duration::from_millis(1);
        }
        let c = trial.choice().expect("chosen");
        assert!(!c.refills, "{c:?}");
    }

    #[test]
    fn the_longest_latencies_do_not_overflow_the_sum() {
        let mut samples = vec![(u32::MAX, 1); MAX_SAMPLES];
        let kept = MAX_SAMPLES as u64 - (MAX_SAMPLES as f64 * TRIM) as u64;
        assert_eq!(us_per_mib(&mut samples), ((u64::from(u32::MAX) * kept) << 20) / kept);
    }

    #[test]
    fn a_few_stalls_do_not_decide() {
        let mut trial = BusyRefillTrial::default();
        let mut now = Instant::now();
        // Refills faster, but one write with them stalled for a second (a journal commit).
        let mut stalled = false;
        while trial.choice().is_none() {
            let (refills, timed) = trial.side(128 << 10, || now);
            if let Some(w) = timed {
                let us = match (refills, stalled) {
                    (true, false) => {
                        stalled = true;
                        1_000_000
                    }
                    (true, true) => 900,
                    (false, _) => 1000,
                };
                trial.record(w, Duration::from_micros(us));
            }
            now += Duration::from_millis(1);
        }
        assert!(trial.choice().expect("chosen").refills, "{:?}", trial.choice());
    }

    #[test]
    fn large_writes_take_more_turns() {
        // 256 KiB writes: 19 timed a turn, so more than three turns a side for 100.
        let mut trial = BusyRefillTrial::default();
        let mut turns_seen = 0;
        let mut last = None;
        let mut now = Instant::now();
        while trial.choice().is_none() {
            let (refills, timed) = trial.side(256 << 10, || now);
            if last != Some(refills) {
                turns_seen += 1;
                last = Some(refills);
            }
            if let Some(w) = timed {
                trial.record(w, Duration::from_micros(500));
            }
            now += Duration::from_millis(1);
        }
        assert!(turns_seen > 2 * TURNS_EACH, "chosen after {turns_seen} turns");
        let c = trial.choice().expect("chosen");
        assert!(c.with_writes >= MIN_SAMPLES as u64 && c.without_writes >= MIN_SAMPLES as u64, "{c:?}");
        assert!(c.refills, "a tie keeps the refills: {c:?}");
    }
}
