//! Whether a busy partition writing alone takes zero-fill refills, under [`super::ZeroFill::Auto`]:
//! chosen on the shard's own device by taking turns with and without them and keeping the side
//! whose writes were faster, then asking again every [`HOLD`].
//!
//! The refills make a busy partition's writes overwrite zeros instead of allocating blocks, and
//! put up to 1 MiB of zeros in the device's queue beside its next writes. Which costs more
//! depends on the device: at 1 partition x 8 appends in flight the durable sweep made 0.98-1.18x
//! fio's throughput with them against 0.80-0.93x without on one virtio disk, and 0.71x against
//! 0.78x (p99 3.5x fio's against 2.6x) on another (docs/benchmarks.md, "Refills for a busy
//! partition, chosen by measurement"). A fixed rule fits one of the two.
//!
//! A trial alternates turns of [`SLOT`], starting with refills, and times the busy partition's
//! writes in each, except those issued in the first [`SETTLE`] of a turn (they still land on, or
//! queue beside, the other side's zeros). Once each side had [`SLOTS_EACH`] turns and
//! [`MIN_SAMPLES`] timed writes, the side with the lower mean write latency (leaving out the
//! slowest [`TRIM`] of each side's writes: one stall of the filesystem's journal would
//! otherwise decide) is kept for [`HOLD`]. With one write in flight, as for a partition writing
//! alone, the mean write latency is what its throughput is inverse to, and a refill's cost shows
//! in it as the slower writes beside it.

use std::time::{Duration, Instant};

/// How long each side's turn lasts.
const SLOT: Duration = Duration::from_millis(50);

/// The start of each turn whose writes are not timed: a busy partition's lead is 1 MiB, 10 ms
/// of appends at 100 MB/s, and a refill of the turn before may still be in flight.
const SETTLE: Duration = Duration::from_millis(10);

/// Turns each side takes before a choice: turns alternate, so that a drift of the device's
/// speed weighs on both sides alike.
const SLOTS_EACH: u128 = 3;

/// Timed writes each side needs before a choice; more turns are taken until both have them.
const MIN_SAMPLES: usize = 100;

/// Timed writes kept per side: a trial's memory stays bounded however long it runs.
const MAX_SAMPLES: usize = 4096;

/// The share of each side's slowest writes left out of its mean.
const TRIM: f64 = 0.01;

/// How long a choice holds before the next trial: the device's state drifts (the same disk has
/// measured fio's throughput at 150 and at 300 MB/s on different days).
pub(super) const HOLD: Duration = Duration::from_secs(60);

/// The last choice of a shard's trial ([`super::ShardStats::busy_refills`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BusyRefillChoice {
    /// Whether a busy partition writing alone takes refills until the next trial.
    pub refills: bool,
    /// The trimmed mean write latency, in microseconds, of the writes timed with refills and
    /// without.
    pub with_us: u64,
    pub without_us: u64,
    /// The writes timed on each side.
    pub with_writes: u64,
    pub without_writes: u64,
    /// Trials completed since the shard started.
    pub trials: u64,
}

#[derive(Debug)]
enum State {
    /// Taking turns since this instant (set by the first busy write).
    Trial(Option<Instant>),
    /// The choice holds until this instant.
    Chosen(Instant),
}

/// A shard's trial of refills for its busy partition writing alone (see the module docs).
#[derive(Debug)]
pub(super) struct BusyRefillTrial {
    state: State,
    /// Latencies in microseconds of the writes timed this trial: with refills, without.
    samples: [Vec<u32>; 2],
    choice: Option<BusyRefillChoice>,
}

impl Default for BusyRefillTrial {
    fn default() -> BusyRefillTrial {
        BusyRefillTrial { state: State::Trial(None), samples: [Vec::new(), Vec::new()], choice: None }
    }
}

impl BusyRefillTrial {
    /// For a busy partition's write issued at `now`: whether it may take a refill, and whether
    /// its latency is to be handed to [`BusyRefillTrial::record`] (`Some(side)`: the side it
    /// counts for, the same as the first answer).
    pub(super) fn side(&mut self, now: Instant) -> (bool, Option<bool>) {
        if let State::Chosen(until) = self.state {
            if now < until {
                return (self.choice.is_some_and(|c| c.refills), None);
            }
            self.state = State::Trial(None);
        }
        let State::Trial(started) = &mut self.state else { unreachable!("a choice that held returned above") };
        let elapsed = now.saturating_duration_since(*started.get_or_insert(now));
        let slot = elapsed.as_nanos() / SLOT.as_nanos();
        if slot >= 2 * SLOTS_EACH && self.samples.iter().all(|s| s.len() >= MIN_SAMPLES) {
            return (self.choose(now), None);
        }
        let with = slot.is_multiple_of(2);
        let settled = elapsed.as_nanos() - slot * SLOT.as_nanos() >= SETTLE.as_nanos();
        (with, settled.then_some(with))
    }

    /// The latency of a write [`BusyRefillTrial::side`] said to time, on `side`.
    pub(super) fn record(&mut self, side: bool, latency: Duration) {
        let samples = &mut self.samples[usize::from(!side)];
        if samples.len() < MAX_SAMPLES && matches!(self.state, State::Trial(_)) {
            samples.push(u32::try_from(latency.as_micros()).unwrap_or(u32::MAX));
        }
    }

    /// The last choice, if any.
    pub(super) fn choice(&self) -> Option<BusyRefillChoice> {
        self.choice
    }

    /// Ends the trial: keeps the faster side until [`HOLD`] from `now`.
    fn choose(&mut self, now: Instant) -> bool {
        let [with, without] = self.samples.each_mut().map(|s| (trimmed_mean(s), std::mem::take(s).len() as u64));
        let choice = BusyRefillChoice {
            refills: with.0 <= without.0,
            with_us: with.0,
            without_us: without.0,
            with_writes: with.1,
            without_writes: without.1,
            trials: self.choice.map_or(0, |c| c.trials) + 1,
        };
        self.choice = Some(choice);
        self.state = State::Chosen(now + HOLD);
        choice.refills
    }
}

/// The mean of `samples` without their slowest [`TRIM`] (sorts them).
fn trimmed_mean(samples: &mut [u32]) -> u64 {
    samples.sort_unstable();
    let kept = &samples[..samples.len() - (samples.len() as f64 * TRIM) as usize];
    kept.iter().map(|&us| u64::from(us)).sum::<u64>() / kept.len().max(1) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs a trial from `t0` with a busy write every millisecond, each taking `with` or
    /// `without` by its side, until a choice is made; returns the choice and the instant after.
    fn run(trial: &mut BusyRefillTrial, t0: Instant, with: Duration, without: Duration) -> (BusyRefillChoice, Instant) {
        let mut now = t0;
        let before = trial.choice().map_or(0, |c| c.trials);
        loop {
            let (refills, timed) = trial.side(now);
            if trial.choice().is_some_and(|c| c.trials > before) {
                return (trial.choice().expect("chosen"), now);
            }
            if let Some(side) = timed {
                assert_eq!(side, refills, "a timed write counts for the side it ran on");
                trial.record(side, if refills { with } else { without });
            }
            now += Duration::from_millis(1);
            assert!(now - t0 < Duration::from_secs(10), "no choice after 10 s of busy writes");
        }
    }

    #[test]
    fn turns_alternate_and_settle_before_timing() {
        let mut trial = BusyRefillTrial::default();
        let t0 = Instant::now();
        assert_eq!(trial.side(t0), (true, None), "refills first, not timed while settling");
        assert_eq!(trial.side(t0 + SETTLE), (true, Some(true)));
        assert_eq!(trial.side(t0 + SLOT), (false, None), "the other side's turn, settling");
        assert_eq!(trial.side(t0 + SLOT + SETTLE), (false, Some(false)));
        assert_eq!(trial.side(t0 + 2 * SLOT + SETTLE), (true, Some(true)));
    }

    #[test]
    fn the_faster_side_is_kept_until_the_next_trial() {
        let mut trial = BusyRefillTrial::default();
        let t0 = Instant::now();
        // Refills slower: none are taken once chosen.
        let (choice, at) = run(&mut trial, t0, Duration::from_micros(1300), Duration::from_micros(1000));
        assert!(!choice.refills, "{choice:?}");
        assert_eq!((choice.with_us, choice.without_us, choice.trials), (1300, 1000, 1));
        assert!(choice.with_writes >= MIN_SAMPLES as u64 && choice.without_writes >= MIN_SAMPLES as u64);
        assert!(at - t0 >= SLOT * 2 * SLOTS_EACH as u32, "every turn was taken");
        assert_eq!(trial.side(at + HOLD / 2), (false, None), "held");
        // Then the next trial; the device changed, and refills are kept.
        let (choice, _) = run(&mut trial, at + HOLD, Duration::from_micros(700), Duration::from_micros(1000));
        assert!(choice.refills, "{choice:?}");
        assert_eq!(choice.trials, 2);
    }

    #[test]
    fn a_few_stalls_do_not_decide() {
        let mut trial = BusyRefillTrial::default();
        let t0 = Instant::now();
        // Refills faster, but one write with them stalled for a second (a journal commit).
        let mut now = t0;
        let mut stalled = false;
        while trial.choice().is_none() {
            if let (_, Some(side)) = trial.side(now) {
                let us = match (side, stalled) {
                    (true, false) => {
                        stalled = true;
                        1_000_000
                    }
                    (true, true) => 900,
                    (false, _) => 1000,
                };
                trial.record(side, Duration::from_micros(us));
            }
            now += Duration::from_millis(1);
        }
        assert!(trial.choice().expect("chosen").refills, "{:?}", trial.choice());
    }

    #[test]
    fn too_few_writes_take_more_turns() {
        let mut trial = BusyRefillTrial::default();
        let t0 = Instant::now();
        // One busy write every 10 ms: 7-8 timed a turn, so more than four turns each.
        let mut now = t0;
        while trial.choice().is_none() {
            if let (side, Some(_)) = trial.side(now) {
                trial.record(side, Duration::from_micros(500));
            }
            now += Duration::from_millis(10);
        }
        assert!(now - t0 > SLOT * 2 * SLOTS_EACH as u32 * 2, "chosen after {:?}", now - t0);
        let c = trial.choice().expect("chosen");
        assert!(c.with_writes >= MIN_SAMPLES as u64 && c.without_writes >= MIN_SAMPLES as u64, "{c:?}");
    }
}
