//! Zero fill: zeros written ahead of an O_DIRECT active segment's data, so that appends
//! overwrite initialized blocks inside the file instead of extending it.

use super::*;

/// Zero fill starts and ends on this boundary (at least; the file's own write alignment when
/// larger), so that it never touches the block a data write ends in.
const ZERO_FILL_ALIGN: u64 = 4096;

/// The zero-fill lead of a new segment, doubled at each refill up to the setting.
///
/// Small, because the first refill starts an eighth of the lead past the data (see
/// [`ActiveSegment::take_zero_fill`]) and the appends into that gap land in unwritten (or not
/// yet allocated) blocks, so each of their RWF_DSYNC writes commits the journal. With an 8 MiB
/// first lead that gap was 1 MiB, 64 durable 16 KiB appends per segment at about the latency of
/// zero fill off: 2-3 % of a run of 2,048-3,072 appends, enough to set the p99. At 256 KiB the
/// gap is 32 KiB (two such appends) and the lead reaches 64 MiB at the ninth refill instead of
/// the fourth. Measured with `append-vs-fio --total-bytes $((32<<20)) --reps 8 --window 1 --modes
/// direct --durable --sync-method dsync --preallocate`: the append p99 133-168 us against fio's
/// O_DSYNC write p99 of 126-175 us in the same pairs (was 178-223 against 127-181 us with the
/// 8 MiB lead); 64 KiB measured no better (151-183 against 125-161 us).
const ZERO_FILL_FIRST_LEAD: u64 = 256 << 10;

/// How a refill's zeros go to the device ([`ActiveSegment::take_zero_fill`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RefillPace {
    /// Independent writes of up to 1 MiB, all in the device's queue at once, so that the refill
    /// is over soonest: for a partition writing alone, whose own next writes are the only ones
    /// its zeros hold back.
    Burst,
    /// Writes of [`PACED_REFILL_CHUNK`], each linked to the next so that it starts once the one
    /// before completes: beside other partitions' writes, at most one such write sits in the
    /// device's queue in front of their appends, where a burst put the whole refill there.
    Paced,
}

/// The write size of a [`RefillPace::Paced`] refill. The durable sweep at 8 partitions x 1
/// append in flight (refills of at least 4 MiB, half an 8 MiB share, by the refill rule): an
/// append p99 of 0.94x fio's (0.74-1.07, 4 repetitions) with 128 KiB writes and 1.10x (1.01-1.18) with 256 KiB, against 1.87x
/// (1.75-2.23) for the burst of 1 MiB writes, in the same interleaved runs
/// (docs/benchmarks.md, "Paced refills beside other partitions' writes"). Measured with those
/// 4 MiB refills; with [`PACED_REFILL_LEAD`] a paced refill is one of these writes and a short
/// one.
pub(crate) const PACED_REFILL_CHUNK: u64 = 128 << 10;

/// The most zeros a [`RefillPace::Paced`] refill keeps ahead of the data (a shard's partition
/// beside other partitions' writes), whatever the lead: a refill is then a 128 KiB write and a
/// short one linked after it, where a lead of the whole share (8 MiB at 8 partitions) came in
/// refills of 4 MiB, 32 linked writes that kept one of them in the device's queue in front of the
/// other partitions' appends for the whole refill. At 8 partitions x 1 append in flight, 28-30 %
/// of the appends were issued during such a refill and waited about four times as long as the
/// rest at the median; they were most of the appends past the p99. With this lead the p99 there
/// fell by 12-32 % and the throughput by 2-15 % (medians, five sets of runs; 18 times as many
/// refills, each allocating its blocks), and 16 x 1 gained on both (docs/benchmarks.md, "Short
/// refills beside other partitions' writes").
pub(crate) const PACED_REFILL_LEAD: u64 = 256 << 10;

/// What zero fill did in one active segment (`ActiveSegment::zero_fill_stats`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ZeroFillStats {
    /// Refills taken (each one batch of zero writes).
    pub fills: u64,
    /// Zero bytes those covered.
    pub bytes: u64,
    /// Times something waited for zero writes not yet reported: a data write that reached
    /// them, or a seal, close or truncation.
    pub waits: u64,
    /// Refills that failed (zero fill is then off for the segment).
    pub failures: u64,
    /// Refills taken paced: in writes one after another, beside other partitions' writes (the
    /// rest went as a burst of independent writes; see `EngineConfig::zero_fill`).
    pub paced: u64,
}

/// The most a refill without zeros ahead leaves between the data and its start.
const ZERO_FILL_MAX_SKIP: u64 = 1 << 20;

/// An active segment's zero fill.
#[derive(Debug, Default)]
pub(super) struct ZeroFillState {
    /// Where the zeros written ahead of the data end (the file is at least this long). Between
    /// the data and the first refill's start there may be a hole, which appends fill as
    /// without zero fill.
    pub(super) zeroed_to: u64,
    /// The zero writes taken by [`ActiveSegment::take_zero_fill`]: the range, until submitted;
    /// then in flight until they complete.
    pub(super) pending: Option<(u64, u64)>,
    /// The zero writes in flight, with the range `(start, end)` they cover.
    pub(super) in_flight: Option<InFlight<(u64, u64)>>,
    /// The current lead (it doubles at each refill up to the setting).
    pub(super) lead: u64,
    pub(super) stats: ZeroFillStats,
    /// Zero fill failed once (a full disk, say): it stays off for this segment, appends extend
    /// the file as without it.
    pub(super) failed: bool,
}

impl ActiveSegment {
    /// The zero writes that extend the zeroed lead past the data once less than half of the last
    /// lead is left (the lead starts at 256 KiB and doubles with each refill up
    /// to [`SegmentSettings::zero_fill_bytes`]); empty when zero fill is off, not due, or
    /// already in flight. Take them after the turn's data writes ([`ActiveSegment::take_writes`]:
    /// they start past the block those end in) and submit them as a batch of their own, so that
    /// no acknowledgement waits for their completion; hand the result to
    /// [`ActiveSegment::zero_fill_started`]. The durable append issued with a refill still pays
    /// for it: its cache flush carries the refill's zeros too (the p99.9 of docs/benchmarks.md).
    ///
    /// The writes carry no fdatasync: the next durable append commits their allocation along
    /// with its own data (once per refill for a burst; a paced refill's writes complete one by
    /// one, so several appends may each commit part of it). A [`RefillPace::Burst`] issues them
    /// independently (the device takes them in parallel and the refill is over soonest); a
    /// [`RefillPace::Paced`] one in smaller writes, one after another, for a device shared with
    /// other partitions' appends, of a lead of at most [`PACED_REFILL_LEAD`].
    ///
    /// O_DIRECT files only. Through the page cache the zeros would reach the disk (and their
    /// blocks be allocated) only at writeback, after the appends that overwrite them, so they
    /// would buy nothing unless fdatasynced; chained to an fdatasync they measured worse than
    /// none (a buffered durable p99 of 546 against 255 us, one run of the durable workload while
    /// zero fill was being built; that code is gone, so the figure cannot be re-run), and that fdatasync could consume
    /// the error of a failed writeback of appended data (Linux reports it once per file).
    ///
    /// `max_lead` caps the lead below the setting for this refill (`u64::MAX`: the setting);
    /// `pace` says how its writes go to the device.
    pub(crate) fn take_zero_fill(&mut self, tag: u64, max_lead: u64, pace: RefillPace) -> Vec<IoOp> {
        let max_lead = (self.settings.zero_fill_bytes as u64).min(max_lead);
        let max_lead = if pace == RefillPace::Paced { max_lead.min(PACED_REFILL_LEAD) } else { max_lead };
        // Off (the common case) answers before the tail's lock is taken for the alignment.
        if max_lead == 0 || self.zero.failed || self.zero.pending.is_some() {
            return Vec::new();
        }
        let file_align = self.tail.align();
        if file_align <= 1 {
            return Vec::new();
        }
        self.poll_zero_fill(false);
        if self.zero.in_flight.is_some() {
            return Vec::new();
        }
        // The lead starts small and doubles with each refill up to the setting: a partition
        // that takes little data holds (and writes) few zeros, a busy one refills rarely. A
        // refill is due when half of the last one's lead is left (judged by the lead just
        // filled, not the doubled one, or each refill would make the next due at once).
        // Judged by the cap too: a lead grown past it (before the partition got busy) would
        // otherwise leave refills due only once under the cap, and then tiny.
        let last = self.zero.lead.min(max_lead);
        let size = self.seg.size as u64;
        if last > 0 && self.zero.zeroed_to >= size + last / 2 {
            return Vec::new();
        }
        let lead = if last == 0 { ZERO_FILL_FIRST_LEAD } else { last.saturating_mul(2) }.min(max_lead);
        let align = ZERO_FILL_ALIGN.max(file_align);
        // With zeros still ahead, the refill starts where they end. Without (the segment's first
        // fill, or data that outran the zeros), it starts an eighth of the lead past the data:
        // the next appends' writes (which rewrite the block the data ends in) then do not reach
        // it before it is done, where starting at the data would make the very next write wait
        // for the whole refill.
        let start = if self.zero.zeroed_to > size {
            self.zero.zeroed_to
        } else {
            tail::align_up(size + (lead / 8).min(ZERO_FILL_MAX_SKIP), align)
        };
        let end = tail::align_up(size + lead, align).min(tail::align_up(self.settings.segment_bytes as u64, align));
        let (chunk, linked) = match pace {
            RefillPace::Burst => (crate::io::pool::ZERO_BUF_BYTES as u64, false),
            RefillPace::Paced => (PACED_REFILL_CHUNK.max(align), true),
        };
        if end <= start {
            return Vec::new();
        }
        let writes = (end - start).div_ceil(chunk);
        let mut ops = Vec::with_capacity(writes as usize + 1);
        for i in 0..writes {
            let pos = start + i * chunk;
            let n = (end - pos).min(chunk);
            ops.push(IoOp {
                file: self.file.clone(),
                kind: IoOpKind::Write { buf: crate::io::WriteBuf::zeros(n as usize), pos, dsync: false },
                tag,
                // A failed write cancels those linked after it: the refill fails as a whole.
                link_next: linked && i + 1 < writes,
            });
        }
        self.zero.pending = Some((start, end));
        self.zero.lead = lead;
        self.zero.stats.fills += 1;
        self.zero.stats.paced += u64::from(pace == RefillPace::Paced);
        self.zero.stats.bytes += end - start;
        ops
    }

    /// What zero fill did in this segment so far.
    pub(crate) fn zero_fill_stats(&self) -> ZeroFillStats {
        self.zero.stats
    }

    /// Sets the most zeros this segment keeps ahead of its data (0 turns zero fill off). A lead
    /// already past it is not cut back; the next refill is judged by the new limit.
    pub(crate) fn set_zero_fill_bytes(&mut self, bytes: u32) {
        self.settings.zero_fill_bytes = bytes;
        self.zero.lead = self.zero.lead.min(bytes as u64);
    }

    /// True while a refill is taken or in flight (applying one that completed first).
    pub(crate) fn zero_fill_busy(&mut self) -> bool {
        self.poll_zero_fill(false);
        self.zero.pending.is_some() || self.zero.in_flight.is_some()
    }

    /// Takes the operations of [`ActiveSegment::take_zero_fill`] back as submitted without
    /// waiting; they are polled by the next [`ActiveSegment::take_zero_fill`] and waited for by
    /// anything that writes where they do.
    pub(crate) fn zero_fill_started(&mut self, io: crate::io::AsyncIo) {
        let Some(range) = self.zero.pending.take() else {
            debug_assert!(false, "zero fill started without take_zero_fill");
            return;
        };
        self.zero.in_flight = Some(InFlight::new(io, range));
        // A batch that is already done (sync mode, or a ring that ran it inline) is applied now.
        self.poll_zero_fill(false);
    }

    /// Runs zero fill to completion without the engine: the synchronous path (a log that writes
    /// each append through itself).
    pub(crate) fn zero_fill_now(&mut self) {
        let ops = self.take_zero_fill(0, u64::MAX, RefillPace::Burst);
        if !ops.is_empty() {
            let done = self.storage.submit(ops);
            self.zero_fill_started(crate::io::AsyncIo::Ready(done));
        }
    }

    /// Applies the outcome of the zero writes in flight once done (waiting for them with `wait`).
    fn poll_zero_fill(&mut self, wait: bool) {
        let Some(((_, end), outcome)) = crate::io::poll_slot(&mut self.zero.in_flight, &*self.storage, wait) else {
            return;
        };
        // A batch the storage lost is not known to be written: zero fill cannot count on it.
        if outcome.all_ok() {
            self.zero.zeroed_to = self.zero.zeroed_to.max(end);
        } else {
            // Whatever part was written is zeros past the data, which the cut at seal and close,
            // or recovery after a crash, removes like any zero tail.
            self.zero.failed = true;
            self.zero.stats.failures += 1;
        }
    }

    /// Waits for zero writes in flight: before anything that changes the file's length or
    /// writes where they do, and before the segment is handed to another thread.
    pub(crate) fn settle_zero_fill(&mut self) {
        if self.zero.in_flight.is_some() {
            self.zero.stats.waits += 1;
            self.poll_zero_fill(true);
            // Only the thread that submitted a ring batch can complete it (an active segment is
            // written from one thread).
            assert!(
                self.zero.in_flight.is_none(),
                "zero writes claimed on a thread other than the one that submitted them"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::{RefillPace, PACED_REFILL_CHUNK, PACED_REFILL_LEAD};
    use crate::config::LogConfig;
    use crate::format::builder::BatchBuilder;
    use crate::io::sim::{Fault, SimStorage};
    use crate::io::{IoOp, IoOpKind, Storage};
    use crate::log::{Log, LogOptions, Writes};

    /// A log written by its caller, as the shard's are, with a lead of `lead` bytes and one 20
    /// KB batch written.
    fn written_log(sim: &SimStorage, lead: u32) -> Log {
        let options = LogOptions {
            storage: Arc::new(sim.clone()),
            config: LogConfig { segment_bytes: 1 << 30, ..LogConfig::default() },
            zero_fill_bytes: lead,
            writes: Writes::Caller,
            ..LogOptions::default()
        };
        let mut log = Log::open("/data/t-0", options).unwrap();
        append_and_write(sim, &mut log, 20_000);
        log
    }

    /// Appends a batch of one record of `bytes` and writes it (its write taken, submitted and
    /// completed).
    fn append_and_write(sim: &SimStorage, log: &mut Log, bytes: usize) {
        let mut b = BatchBuilder::new();
        b.push(1_700_000_000_000, None, Some(&vec![7u8; bytes][..]), &[]);
        log.append_as_leader(&mut b.build().unwrap(), 0).unwrap();
        let ops = log.take_writes(0, true).unwrap();
        let io = sim.submit_async(vec![ops]).pop().unwrap();
        log.writes_started(io, Some(log.log_end_offset()));
        while let Some(r) = log.poll_writes(true) {
            r.unwrap();
        }
    }

    /// Submits a refill's writes and polls until they complete.
    fn complete(sim: &SimStorage, log: &mut Log, ops: Vec<IoOp>) {
        let io = sim.submit_async(vec![ops]).pop().unwrap();
        log.zero_fill_started(io);
        // The simulated disk runs each operation whose turn has come at a poll, by chance.
        let polls = (0..1_000).take_while(|_| log.zero_fill_busy()).count();
        assert!(polls < 1_000, "the refill never completed");
    }

    /// Each zero write: its position, length and whether it is linked to the next.
    fn shape(ops: &[IoOp]) -> Vec<(u64, usize, bool)> {
        ops.iter()
            .map(|op| match &op.kind {
                IoOpKind::Write { buf, pos, dsync } => {
                    assert!(!dsync, "zero writes carry no RWF_DSYNC");
                    (*pos, buf.len(), op.link_next)
                }
                IoOpKind::SyncData => panic!("a refill carries no fdatasync"),
            })
            .collect()
    }

    /// A paced refill covers the bytes a burst does, in writes of at most 128 KiB each linked to
    /// the next but the last; a burst's writes are independent.
    #[test]
    fn a_paced_refill_covers_a_bursts_bytes_in_linked_small_writes() {
        let sim = SimStorage::with_direct_alignment(4096);
        let burst = shape(&written_log(&sim, 8 << 20).take_zero_fill_within(0, u64::MAX, RefillPace::Burst));
        let sim = SimStorage::with_direct_alignment(4096);
        let mut log = written_log(&sim, 8 << 20);
        let paced = shape(&log.take_zero_fill_within(0, u64::MAX, RefillPace::Paced));
        let span = |s: &[(u64, usize, bool)]| (s[0].0, s.iter().map(|w| w.1 as u64).sum::<u64>());
        assert!(!burst.is_empty() && !paced.is_empty());
        assert_eq!(span(&burst), span(&paced), "the same zeros: {burst:?} against {paced:?}");
        assert!(burst.iter().all(|w| !w.2), "a burst's writes are independent: {burst:?}");
        assert!(paced.len() > 1, "the first refill (256 KiB) takes several paced writes: {paced:?}");
        for (i, w) in paced.iter().enumerate() {
            assert!(w.1 as u64 <= PACED_REFILL_CHUNK, "{w:?}");
            assert_eq!(w.2, i + 1 < paced.len(), "only the last write ends the chain: {paced:?}");
            if i > 0 {
                assert_eq!(paced[i - 1].0 + paced[i - 1].1 as u64, w.0, "contiguous: {paced:?}");
            }
        }
        assert_eq!(log.zero_fill_stats().paced, 1);
    }

    /// A paced write that fails cancels the writes after it: nothing past it is written, the
    /// refill counts as failed (zero fill is off for the segment), and the data is intact.
    #[test]
    fn a_failed_paced_write_fails_the_whole_refill() {
        let sim = SimStorage::with_direct_alignment(4096);
        let mut log = written_log(&sim, 8 << 20);
        let data = sim.file("/data/t-0/00000000000000000000.log").unwrap();
        let ops = log.take_zero_fill_within(0, u64::MAX, RefillPace::Paced);
        let writes = ops.len() as u64;
        assert!(writes >= 2);
        let before = sim.counters().writes;
        sim.inject(Fault::Write(before + 1));
        complete(&sim, &mut log, ops);
        assert_eq!(sim.counters().writes - before, 1, "the writes linked after the failed one never ran");
        let stats = log.zero_fill_stats();
        assert_eq!((stats.fills, stats.failures), (1, 1), "{stats:?}");
        assert!(
            log.take_zero_fill_within(0, u64::MAX, RefillPace::Paced).is_empty(),
            "zero fill is off for the segment"
        );
        let now = sim.file("/data/t-0/00000000000000000000.log").unwrap();
        assert_eq!(&now[..data.len()], &data[..], "the data is untouched");
    }

    /// A paced refill keeps at most `PACED_REFILL_LEAD` ahead of the data whatever the lead (32
    /// MiB here, which bursts grow to): each is a 128 KiB write and a short one, and the zeros
    /// written end within that lead past the data.
    #[test]
    fn a_paced_refill_keeps_a_small_lead_whatever_the_setting() {
        const LEAD: u64 = 32 << 20;
        let sim = SimStorage::with_direct_alignment(4096);
        let mut log = written_log(&sim, LEAD as u32);
        let mut most = 0;
        for _ in 0..48 {
            append_and_write(&sim, &mut log, 100_000);
            let ops = log.take_zero_fill_within(0, u64::MAX, RefillPace::Paced);
            most = most.max(ops.len());
            if !ops.is_empty() {
                complete(&sim, &mut log, ops);
            }
            // The zeros written so far end at most the small lead past the data.
            let (data, zeros) = (log.active_segment().size() as u64, log.zero_fill_stats().bytes);
            assert!(zeros <= data + PACED_REFILL_LEAD, "{zeros} zero bytes for {data} of data");
        }
        assert!(most == 2, "the largest paced refill, in writes: {most}");
        let stats = log.zero_fill_stats();
        assert!(stats.fills >= 24 && stats.paced == stats.fills, "{stats:?}");
        // Past its zeros, the same log's next burst grows the lead again.
        append_and_write(&sim, &mut log, 200_000);
        let ops = log.take_zero_fill_within(0, u64::MAX, RefillPace::Burst);
        let burst = shape(&ops);
        assert!(burst.iter().map(|w| w.1 as u64).sum::<u64>() > PACED_REFILL_LEAD, "{burst:?}");
    }
}
