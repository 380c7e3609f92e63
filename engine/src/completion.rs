//! One-shot completions: every engine call returns a [`Completion`] that can be waited on from a
//! plain thread ([`Completion::wait`]) or awaited as a `Future` from any async runtime (it needs
//! none: the shard wakes the stored `Waker`). If the shard drops the request without answering
//! (it stopped), the completion resolves to [`Error::EngineStopped`].

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use crate::error::{Error, Result};

#[derive(Debug)]
struct Slot<T> {
    state: Mutex<State<T>>,
    cv: Condvar,
}

#[derive(Debug)]
struct State<T> {
    value: Option<Result<T>>,
    waker: Option<Waker>,
    /// Threads blocked on the condition variable: the shard signals it only when one is, so an
    /// answer to a spinning or not yet waiting caller costs no futex system call.
    sleepers: u32,
}

/// The receiving side of a one-shot result.
#[derive(Debug)]
pub struct Completion<T> {
    slot: Arc<Slot<T>>,
}

/// The sending side, held by the shard.
#[derive(Debug)]
pub(crate) struct Completer<T> {
    slot: Option<Arc<Slot<T>>>,
}

/// How long [`Completion::wait`] spins before it sleeps when it has nothing to adapt to (and the
/// least it adapts to).
pub(crate) const DEFAULT_SPIN: Duration = Duration::from_micros(20);

/// A yield that took longer than this gave the core to another thread for a scheduler slice:
/// the spin ends there. With nothing else runnable `sched_yield` took 0.65 us at p50 and 1.0 us
/// at p99.9 on the machine measured (200,000 timed `yield_now` calls in a loop, at load 0.9); a
/// CPU-bound thread takes the core for a scheduler slice (0.75 ms by default on Linux's EEVDF
/// scheduler; not measured here). Between the two run the kernel's short bursts, such as the
/// worker that completes a durable write on the core its interrupt came to, which may be the
/// waiter's. The likely effect at 30 us (inferred from the figures, the yields were not
/// counted): those bursts ended the spin of the very appends whose write was slow, which then
/// paid a sleeping thread's wake-up too. Measured: the append p99 stood 19-61 us above its
/// write's p99 at 30 us, and 4-24 us at 200 us (`append-vs-fio --total-bytes
/// $((32<<20)) --reps 6 --window 1 --modes direct --durable --sync-method dsync
/// --preallocate`, two runs of each, alternated). With four CPU hogs on the two cores both
/// measured the same (1.7-1.8 MB/s of durable appends): the hogs' slices still end the spin.
const CONTENDED_YIELD: Duration = Duration::from_micros(200);

/// The longest spin [`Completion::wait`] adapts to: a thread whose waits take longer than this
/// (typically) spins [`DEFAULT_SPIN`] only and sleeps.
const MAX_ADAPTIVE_SPIN: Duration = Duration::from_micros(500);

// Per thread by nature: it is the waiting thread's own history (any caller's thread, not a
// shard's), and it holds no I/O state.
thread_local! {
    /// How long this thread's recent [`Completion::wait`]s took (an exponential moving average of
    /// nanoseconds, each sample capped at twice [`MAX_ADAPTIVE_SPIN`]); 0 before the first.
    static TYPICAL_WAIT_NS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// The spin for a thread whose waits typically take `typical_ns`: twice that, when that is
/// within [`MAX_ADAPTIVE_SPIN`], so that a usual wait ends before the spin does; else the default.
fn adaptive_spin(typical_ns: u64) -> Duration {
    let max = MAX_ADAPTIVE_SPIN.as_nanos() as u64;
    if typical_ns == 0 || typical_ns > max {
        return DEFAULT_SPIN;
    }
    Duration::from_nanos(typical_ns.saturating_mul(2).min(max)).max(DEFAULT_SPIN)
}

/// The moving average after a wait of `took_ns` (weight 1/8 for the new sample).
fn next_typical(typical_ns: u64, took_ns: u64) -> u64 {
    let sample = took_ns.clamp(1, 2 * MAX_ADAPTIVE_SPIN.as_nanos() as u64);
    if typical_ns == 0 {
        return sample;
    }
    (typical_ns * 7 + sample) / 8
}

/// A connected completer and completion.
pub(crate) fn pair<T>() -> (Completer<T>, Completion<T>) {
    let slot =
        Arc::new(Slot { state: Mutex::new(State { value: None, waker: None, sleepers: 0 }), cv: Condvar::new() });
    (Completer { slot: Some(slot.clone()) }, Completion { slot })
}

impl<T> Completion<T> {
    /// A completion that is already resolved.
    pub(crate) fn ready(value: Result<T>) -> Completion<T> {
        let (c, r) = pair();
        c.complete(value);
        r
    }

    /// Blocks the calling thread until the result is there, spinning first (yielding the core
    /// each round) for twice as long as this thread's recent waits typically took (so that a
    /// usual wait ends inside the spin), at most 500 us, or for 20 us when they
    /// typically took longer than that. Answers served from memory come
    /// within microseconds; a durable append's within a device write and flush (100-200 us on
    /// the machine measured). Sleeping through such a wait costs a wake-up on top of it (tens
    /// of microseconds on a virtual machine; in the durable benchmark the p50 was 88-105 us with
    /// this spin against 137-138 us with a 20 us one, docs/benchmarks.md), so a thread that keeps
    /// waiting for writes spins
    /// through them, and one whose waits take milliseconds does not burn its core for nothing.
    /// The spin also ends at the first yield that gave the core to another thread for longer
    /// than a kernel worker's burst (a scheduler slice: the core is wanted).
    /// [`Completion::wait_spinning`] sets the spin explicitly.
    pub fn wait(self) -> Result<T> {
        let typical = TYPICAL_WAIT_NS.with(|t| t.get());
        let start = std::time::Instant::now();
        let r = self.wait_spinning(adaptive_spin(typical));
        let took = start.elapsed().as_nanos().min(u64::MAX as u128) as u64;
        TYPICAL_WAIT_NS.with(|t| t.set(next_typical(typical, took)));
        r
    }

    /// Blocks until the result is there, polling (and yielding the core) up to `spin` before
    /// sleeping. A caller that
    /// waits for a device write (tens to hundreds of microseconds) and has a core to spare can
    /// spin through it: waking a sleeping thread on another core costs a cross-CPU interrupt, and
    /// on a virtual machine the wake-up of an idle vCPU (tens of microseconds), on every append.
    pub fn wait_spinning(self, spin: Duration) -> Result<T> {
        let mut now = std::time::Instant::now();
        let until = now + spin;
        while now < until {
            if let Ok(mut st) = self.slot.state.try_lock() {
                if let Some(v) = st.value.take() {
                    return v;
                }
            }
            // Yield rather than spin: when the shard that owes the answer shares this core (more
            // threads than cores), spinning would keep it from running until the spin ends.
            std::thread::yield_now();
            let after = std::time::Instant::now();
            if after.duration_since(now) > CONTENDED_YIELD {
                // The yield ran someone else for a scheduler slice: this core is wanted (other
                // threads, perhaps the shard itself), and a spinning waiter would take turns from
                // them. Sleep.
                break;
            }
            now = after;
        }
        let mut st = self.slot.state.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(v) = st.value.take() {
                return v;
            }
            st.sleepers += 1;
            st = self.slot.cv.wait(st).unwrap_or_else(|p| p.into_inner());
            st.sleepers -= 1;
        }
    }

    /// Waits at most `timeout`; gives the completion back if it is not done.
    pub fn wait_timeout(self, timeout: Duration) -> std::result::Result<Result<T>, Completion<T>> {
        let deadline = std::time::Instant::now() + timeout;
        {
            let mut st = self.slot.state.lock().unwrap_or_else(|p| p.into_inner());
            loop {
                if let Some(v) = st.value.take() {
                    return Ok(v);
                }
                let now = std::time::Instant::now();
                if now >= deadline {
                    break;
                }
                st.sleepers += 1;
                st = self.slot.cv.wait_timeout(st, deadline - now).unwrap_or_else(|p| p.into_inner()).0;
                st.sleepers -= 1;
            }
        }
        Err(self)
    }

    /// True when the result is there.
    pub fn is_done(&self) -> bool {
        self.slot.state.lock().unwrap_or_else(|p| p.into_inner()).value.is_some()
    }
}

impl<T> Future for Completion<T> {
    type Output = Result<T>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<T>> {
        let mut st = self.slot.state.lock().unwrap_or_else(|p| p.into_inner());
        match st.value.take() {
            Some(v) => Poll::Ready(v),
            None => {
                st.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

impl<T> Completer<T> {
    /// Delivers the result and wakes the waiter.
    pub(crate) fn complete(mut self, value: Result<T>) {
        if let Some(slot) = self.slot.take() {
            deliver(&slot, value);
        }
    }
}

fn deliver<T>(slot: &Slot<T>, value: Result<T>) {
    let (waker, sleepers) = {
        let mut st = slot.state.lock().unwrap_or_else(|p| p.into_inner());
        st.value = Some(value);
        (st.waker.take(), st.sleepers)
    };
    if sleepers > 0 {
        slot.cv.notify_all();
    }
    if let Some(w) = waker {
        w.wake();
    }
}

impl<T> Drop for Completer<T> {
    fn drop(&mut self) {
        if let Some(slot) = self.slot.take() {
            deliver(&slot, Err(Error::EngineStopped));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::task::Wake;

    struct Flag(std::sync::atomic::AtomicBool);
    impl Wake for Flag {
        fn wake(self: Arc<Self>) {
            self.0.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }

    #[test]
    fn wait_from_another_thread() {
        let (c, r) = pair::<u32>();
        std::thread::spawn(move || c.complete(Ok(7)));
        assert_eq!(r.wait().unwrap(), 7);
    }

    #[test]
    fn future_is_woken() {
        let (c, mut r) = pair::<u32>();
        let flag = Arc::new(Flag(Default::default()));
        let waker = Waker::from(flag.clone());
        let mut cx = Context::from_waker(&waker);
        assert!(Pin::new(&mut r).poll(&mut cx).is_pending());
        c.complete(Ok(3));
        assert!(flag.0.load(std::sync::atomic::Ordering::SeqCst));
        assert!(matches!(Pin::new(&mut r).poll(&mut cx), Poll::Ready(Ok(3))));
    }

    #[test]
    fn the_spin_follows_the_typical_wait_within_its_bound() {
        // Nothing known yet, or waits of milliseconds: the default spin only.
        assert_eq!(adaptive_spin(0), DEFAULT_SPIN);
        assert_eq!(adaptive_spin(3_000_000), DEFAULT_SPIN);
        // Waits of a few microseconds: never below the default.
        assert_eq!(adaptive_spin(2_000), DEFAULT_SPIN);
        // Waits of ~120 us (a durable append): spin through twice that.
        assert_eq!(adaptive_spin(120_000), Duration::from_micros(240));
        // Near the bound: capped at it.
        assert_eq!(adaptive_spin(400_000), MAX_ADAPTIVE_SPIN);
    }

    #[test]
    fn one_slow_wait_does_not_end_the_spinning() {
        // A thread whose waits take 120 us meets one of 8 ms (a stall): the average moves by at
        // most an eighth of the capped sample, and spinning goes on.
        let mut t = 0;
        for _ in 0..50 {
            t = next_typical(t, 120_000);
        }
        assert_eq!(t, 120_000);
        t = next_typical(t, 8_000_000);
        assert!(t <= 120_000 + 1_000_000 / 8 + 1, "{t}");
        assert!(adaptive_spin(t) > DEFAULT_SPIN);
        // Waits that keep taking milliseconds end it.
        for _ in 0..30 {
            t = next_typical(t, 5_000_000);
        }
        assert_eq!(adaptive_spin(t), DEFAULT_SPIN);
    }

    #[test]
    fn wait_learns_from_its_waits() {
        TYPICAL_WAIT_NS.with(|t| t.set(0));
        let (c, r) = pair::<u32>();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(3));
            c.complete(Ok(1))
        });
        assert_eq!(r.wait().unwrap(), 1);
        let after = TYPICAL_WAIT_NS.with(|t| t.get());
        // The 3 ms wait was recorded, capped at twice the adaptive bound.
        assert_eq!(after, 2 * MAX_ADAPTIVE_SPIN.as_nanos() as u64);
    }

    #[test]
    fn dropped_completer_resolves_to_stopped() {
        let (c, r) = pair::<u32>();
        drop(c);
        assert!(matches!(r.wait(), Err(Error::EngineStopped)));
    }
}
