//! `seglog index-report DIR`: what the offset index of a partition costs and what another
//! `index.interval.bytes` would change, measured on the files, writing nothing.
//!
//! For every offset, the engine's own lookup (`Segment::translate_offset_with_cost`, phase 1 the
//! index floor, phase 2 the header walk) is replayed over the segment files through a read-only
//! overlay, and the walk (bytes scanned, header hops) is summarised beside its bound,
//! `min(interval + largest batch, segment size)`. For each `--interval N`, Kafka's per-batch rule
//! is simulated on the batches (`indexsim`). The interval that wrote the files is not recorded
//! anywhere, so it is inferred as the range of intervals that reproduce the existing entries.
//!
//! Memory is bounded whatever the files hold: one segment at a time, first a walk of its `.log`
//! (headers only) beside its `.index` (read in chunks) that feeds every model at once, then the
//! replay; what is kept is what the report prints (counts, maxima, distributions in bounded
//! memory, the plot binned per column). The engine loads the `.index` whole for the replay,
//! so one longer than `--segment-index-bytes` (Kafka never writes one) is not loaded, and that
//! segment's lookups are not replayed; its `.timeindex` is not loaded at all (a lookup by offset
//! never reads it).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use seglog::segment::{Segment, SegmentResources, SegmentSettings};
use seglog_plot as plot;
use serde::Serialize;

use crate::indexcheck::OffsetIndexStream;
use crate::indexsim::{Inference, Inferrer, SimBatch, Simulator, WalkMax};
use crate::layout::{self, PartitionDir, SegmentFiles};
use crate::logscan::LogWalker;
use crate::overlay::OverlayStorage;
use crate::progress::Progress;
use crate::stats::{Distribution, Summary, EXACT_DISTINCT_VALUES};
use crate::units::human_bytes;

#[derive(clap::Args, Debug)]
#[command(after_help = crate::EXIT_CODES)]
pub struct Args {
    /// A partition directory (`<topic>-<partition>`), or a directory above partition directories
    /// (each partition gets its own report).
    dir: PathBuf,
    /// Simulate Kafka's index rule with this index.interval.bytes on the batch list and report the
    /// index it would write and the walks it would leave; repeat for several values (suffixes
    /// allowed: 4KiB). Nothing is written.
    #[arg(long = "interval", value_name = "N", value_parser = crate::units::parse_bytes)]
    intervals: Vec<u64>,
    /// Draw bytes scanned per offset to FILE, as SVG. Needs a single partition directory.
    #[arg(long, value_name = "FILE")]
    plot: Option<PathBuf>,
    /// Replay the lookup of every Nth offset only (default: every offset), for very large logs.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    every: u64,
    /// The segment.index.bytes the files were written with: an .index longer than this is not
    /// loaded and its segment's lookups are not replayed (Kafka never writes a longer one: it rolls
    /// the segment first). Suffixes allowed; at most 2147483647.
    #[arg(long, value_name = "N", default_value = "10MiB", value_parser = crate::units::parse_segment_index_bytes)]
    segment_index_bytes: u32,
    /// Print one JSON document instead of text.
    #[arg(long)]
    json: bool,
}

/// Segments listed one by one (`per_segment`) and notes kept per partition; the rest are counted.
const MAX_LISTED: usize = 100;

/// The walks a set of lookups paid.
#[derive(Clone, Debug, Serialize)]
pub struct Replay {
    pub lookups: usize,
    pub every: u64,
    pub bytes_scanned: Summary,
    pub header_hops: Summary,
    /// Lookups that found no batch (offsets past a torn tail).
    pub not_found: usize,
    /// Segments whose `.index` is longer than `--segment-index-bytes`: not loaded, not replayed.
    #[serde(skip_serializing_if = "is_zero")]
    pub segments_not_replayed: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// The existing index and what it tells.
#[derive(Clone, Debug, Serialize)]
pub struct Existing {
    pub offset_entries: usize,
    pub entries_per_segment_min: usize,
    pub entries_per_segment_max: usize,
    pub segments_without_index: usize,
    pub inferred: Inference,
    /// Per segment, when segments disagree (the first [`MAX_LISTED`]).
    pub per_segment: Vec<(i64, Inference)>,
    /// Segments with an index beyond those in `per_segment`, when segments disagree.
    #[serde(skip_serializing_if = "is_zero")]
    pub per_segment_not_listed: usize,
    pub on_plateau: bool,
    /// The bound for the inferred interval (its largest value), if there is one.
    pub bound: Option<u64>,
    pub bound_interval: Option<u64>,
}

/// One simulated interval.
#[derive(Clone, Debug, Serialize)]
pub struct WhatIf {
    pub interval: u64,
    pub offset_entries: usize,
    pub entries_per_segment_min: usize,
    pub entries_per_segment_max: usize,
    pub time_entries: usize,
    /// Bytes of `.index` plus `.timeindex` after roll (trimmed).
    pub index_bytes: u64,
    pub max_bytes_scanned: u64,
    pub bound: u64,
    pub on_plateau: bool,
    /// Whether it writes exactly the existing entries (`None` when an index is missing).
    pub same_as_existing: Option<bool>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub dir: PathBuf,
    pub segments: usize,
    pub batches: usize,
    pub offsets: i64,
    pub log_bytes: u64,
    pub batch_sizes: Summary,
    pub existing: Existing,
    pub replay: Replay,
    /// Every interval below this gives the densest index (every batch after the first of each
    /// segment); `None` when no segment has two batches.
    pub plateau_below: Option<u64>,
    pub what_if: Vec<WhatIf>,
    pub notes: Vec<String>,
}

/// What the report needs of one segment after its walk: a few numbers.
struct SegFacts {
    base: i64,
    /// Bytes of whole batches.
    size: u64,
    largest_batch: u64,
    next_offset: i64,
    /// The `.index` is within `--segment-index-bytes` (or missing): the lookups are replayed.
    replay: bool,
}

impl SegFacts {
    fn bound(&self, interval: u64) -> u64 {
        interval.saturating_add(self.largest_batch).min(self.size)
    }
}

/// A partition's notes: the first [`MAX_LISTED`], and a count of the rest.
#[derive(Default)]
struct Notes {
    kept: Vec<String>,
    more: usize,
}

impl Notes {
    fn push(&mut self, n: String) {
        if self.kept.len() < MAX_LISTED {
            self.kept.push(n);
        } else {
            self.more += 1;
        }
    }
    fn into_vec(mut self) -> Vec<String> {
        if self.more > 0 {
            self.kept.push(format!("... and {} more notes (only the first {MAX_LISTED} are kept)", self.more));
        }
        self.kept
    }
}

/// An existing `.index`'s entries in order, read in chunks, one looked at before it is taken.
struct EntryCursor {
    stream: OffsetIndexStream,
    next: Option<Option<(i64, u64)>>,
}

impl EntryCursor {
    fn open(path: &Path, base: i64) -> Result<EntryCursor, String> {
        let stream = OffsetIndexStream::open(path, base).map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(EntryCursor { stream, next: None })
    }
    /// The next entry as `(offset, position)`, not taken.
    fn peek(&mut self) -> Result<Option<(i64, u64)>, String> {
        if let Some(e) = self.next {
            return Ok(e);
        }
        let e = match self.stream.next_entry() {
            Ok(e) => e.map(|(_, e)| (e.offset, e.position as u64)),
            Err(e) => return Err(format!("{}: {e}", self.stream.path.display())),
        };
        self.next = Some(e);
        Ok(e)
    }
    fn take(&mut self) {
        self.next = None;
    }
    /// Takes the next entry if it is `(b's last offset, b's position)`; true when it was.
    fn take_if_names(&mut self, b: &SimBatch) -> Result<bool, String> {
        let names = self.peek()? == Some((b.last_offset, b.position));
        if names {
            self.take();
        }
        Ok(names)
    }
}

/// The cursors over a segment's `.index` that the models read, each at its own pace.
struct IndexCursors {
    infer: EntryCursor,
    plateau: EntryCursor,
    model: EntryCursor,
    /// One per `--interval`.
    what_if: Vec<EntryCursor>,
    /// Entries before Kafka's stop rule.
    entries: usize,
}

/// The models one segment's walk feeds, batch by batch: the inference of the interval that
/// wrote the existing index, whether it is on the plateau, the walk it leaves, and one
/// simulation per `--interval` (with whether it writes the existing entries).
struct SegModels {
    inferrer: Inferrer,
    plateau: bool,
    model: WalkMax,
    sims: Vec<Simulator>,
    same: Vec<bool>,
    batches: u64,
}

impl SegModels {
    fn new(base: i64, what_if: &[WhatIfAcc]) -> SegModels {
        let sims: Vec<Simulator> = what_if.iter().map(|w| Simulator::new(w.interval, base)).collect();
        SegModels {
            inferrer: Inferrer::new(),
            plateau: true,
            model: WalkMax::new(base),
            same: vec![true; sims.len()],
            sims,
            batches: 0,
        }
    }

    /// Feeds batch `b` to every model, and to those that compare with the existing index its
    /// `cursors` (none when the segment has no `.index`).
    fn push(&mut self, b: &SimBatch, cursors: Option<&mut IndexCursors>) -> Result<(), String> {
        if let Some(c) = cursors {
            if self.inferrer.push(b, c.infer.peek()?) {
                c.infer.take();
            }
            if self.plateau && self.batches > 0 {
                self.plateau = c.plateau.take_if_names(b)?;
            }
            self.model.push(b, c.model.take_if_names(b)?);
            for ((sim, same), cur) in self.sims.iter_mut().zip(&mut self.same).zip(&mut c.what_if) {
                if sim.push(b) && *same {
                    *same = cur.take_if_names(b)?;
                }
            }
        } else {
            for sim in &mut self.sims {
                sim.push(b);
            }
        }
        self.batches += 1;
        Ok(())
    }
}

/// One `--interval` over the partition so far.
struct WhatIfAcc {
    interval: u64,
    offset_entries: usize,
    per_segment: Option<(usize, usize)>,
    time_entries: usize,
    max_scan: u64,
    bound: u64,
    plateau: bool,
    same: Option<bool>,
}

/// What the walks of a partition's segments found, folded segment by segment.
struct Partition {
    segs: Vec<SegFacts>,
    notes: Notes,
    sizes: Distribution,
    plateau_below: Option<u64>,
    offset_entries: usize,
    per_segment_entries: Option<(usize, usize)>,
    segments_without_index: usize,
    inferred: Inference,
    per_segment: Vec<(i64, Inference)>,
    with_index: usize,
    existing_plateau: bool,
    any_padded: bool,
    model_max: Option<u64>,
    what_if: Vec<WhatIfAcc>,
}

fn fold_range(r: &mut Option<(usize, usize)>, n: usize) {
    *r = Some(r.map_or((n, n), |(a, b)| (a.min(n), b.max(n))));
}

impl Partition {
    fn new(intervals: &[u64]) -> Partition {
        Partition {
            segs: Vec::new(),
            notes: Notes::default(),
            sizes: Distribution::new(),
            plateau_below: None,
            offset_entries: 0,
            per_segment_entries: None,
            segments_without_index: 0,
            inferred: Inference::Range { lo: 0, hi: None },
            per_segment: Vec::new(),
            with_index: 0,
            existing_plateau: true,
            any_padded: false,
            model_max: None,
            what_if: intervals
                .iter()
                .map(|&interval| WhatIfAcc {
                    interval,
                    offset_entries: 0,
                    per_segment: None,
                    time_entries: 0,
                    max_scan: 0,
                    bound: 0,
                    plateau: true,
                    same: Some(true),
                })
                .collect(),
        }
    }

    /// Walks one segment's `.log` (headers only) beside its `.index` and folds what they say
    /// into the partition's figures. Memory does not grow with the segment.
    fn walk_segment(&mut self, s: &SegmentFiles, max_index_bytes: u64) -> Result<(), String> {
        let log = s.log.as_ref().expect("log segments");
        let base = s.base_offset;
        let mut seg_notes = Vec::new();
        // The existing index: its shape first, then one cursor per model that reads it.
        let (mut cursors, index_ok) = match &s.index {
            None => (None, true),
            Some(path) => {
                let (c, ok) = self.open_index(path, base, max_index_bytes, &mut seg_notes)?;
                (Some(c), ok)
            }
        };
        let mut walker = LogWalker::open(log, None).map_err(|e| format!("{}: {e}", log.display()))?;
        let mut models = SegModels::new(base, &self.what_if);
        let (mut largest, mut next_offset) = (0u64, base);
        let mut prev_size: Option<u64> = None;
        while let Some((position, h)) = walker.next_header().map_err(|e| format!("{}: {e}", log.display()))? {
            let b = SimBatch {
                position,
                size: h.size_in_bytes() as u64,
                last_offset: h.last_offset(),
                max_timestamp: h.max_timestamp,
            };
            self.sizes.add(b.size);
            // The plateau: every batch but the last of each segment.
            if let Some(p) = prev_size {
                self.plateau_below = Some(self.plateau_below.map_or(p, |m| m.min(p)));
            }
            prev_size = Some(b.size);
            largest = largest.max(b.size);
            next_offset = b.last_offset.saturating_add(1);
            models.push(&b, cursors.as_mut())?;
        }
        let end = walker.end_state();
        if let Some(pos) = end.problem_position() {
            self.notes.push(format!(
                "{}: {} (lookups cover the valid bytes before byte {pos}; run verify)",
                log.display(),
                end.describe()
            ));
        }
        if s.index.is_none() {
            self.notes.push(format!("{}: no .index; lookups walk from byte 0", log.display()));
        }
        for n in seg_notes {
            self.notes.push(n);
        }
        let facts = SegFacts { base, size: walker.position(), largest_batch: largest, next_offset, replay: index_ok };
        self.fold_models(cursors, models, &facts)?;
        self.segs.push(facts);
        Ok(())
    }

    /// Opens the cursors over a segment's existing `.index` and notes its shape in `seg_notes`:
    /// zero padding, and a file longer than `max_index_bytes` (then the second value is false:
    /// the engine would not load it, so the segment's lookups are not replayed).
    fn open_index(
        &mut self,
        path: &Path,
        base: i64,
        max_index_bytes: u64,
        seg_notes: &mut Vec<String>,
    ) -> Result<(IndexCursors, bool), String> {
        let mut index_ok = true;
        let mut st = OffsetIndexStream::open(path, base).map_err(|e| format!("{}: {e}", path.display()))?;
        let pad = st.padding().map_err(|e| format!("{}: {e}", path.display()))?;
        if pad.slots > pad.entries {
            self.any_padded = true;
            seg_notes.push(format!(
                "{}: {} slots after the {} entries (zero padding, not trimmed): Kafka and the engine search them as entries until the index is trimmed or rebuilt",
                path.display(),
                pad.slots - pad.entries,
                pad.entries
            ));
        }
        if st.file_len > max_index_bytes {
            index_ok = false;
            seg_notes.push(format!(
                "{}: {} bytes, more than --segment-index-bytes ({max_index_bytes}): not loaded, so this segment's lookups are not replayed",
                path.display(),
                st.file_len
            ));
        }
        let cursors = IndexCursors {
            infer: EntryCursor::open(path, base)?,
            plateau: EntryCursor::open(path, base)?,
            model: EntryCursor::open(path, base)?,
            what_if: self.what_if.iter().map(|_| EntryCursor::open(path, base)).collect::<Result<_, _>>()?,
            entries: pad.entries,
        };
        Ok((cursors, index_ok))
    }

    /// Folds what one segment's models found (beside its index's `cursors`, if it has one) into
    /// the partition's figures.
    fn fold_models(
        &mut self,
        cursors: Option<IndexCursors>,
        models: SegModels,
        facts: &SegFacts,
    ) -> Result<(), String> {
        let SegModels { inferrer, plateau, model, sims, same, .. } = models;
        match cursors {
            None => {
                self.segments_without_index += 1;
                for w in &mut self.what_if {
                    w.same = None;
                }
            }
            Some(mut c) => {
                self.with_index += 1;
                self.offset_entries += c.entries;
                fold_range(&mut self.per_segment_entries, c.entries);
                let i = inferrer.finish(c.infer.peek()?);
                self.inferred = self.inferred.intersect(&i);
                if self.per_segment.len() < MAX_LISTED {
                    self.per_segment.push((facts.base, i));
                }
                self.existing_plateau &= plateau && c.plateau.peek()?.is_none();
                if c.model.peek()?.is_none() {
                    self.model_max = Some(self.model_max.map_or(model.max, |m| m.max(model.max)));
                }
                for ((w, same), cur) in self.what_if.iter_mut().zip(&same).zip(&mut c.what_if) {
                    if let Some(v) = w.same.as_mut() {
                        *v &= *same && cur.peek()?.is_none();
                    }
                }
            }
        }
        for (w, sim) in self.what_if.iter_mut().zip(&sims) {
            let r = sim.finish();
            w.offset_entries += r.entries;
            fold_range(&mut w.per_segment, r.entries);
            w.time_entries += r.time_entries;
            w.max_scan = w.max_scan.max(r.max_bytes_scanned);
            w.bound = w.bound.max(facts.bound(w.interval));
            w.plateau &= r.on_plateau;
        }
        Ok(())
    }

    fn existing(&self) -> Existing {
        let on_plateau = self.existing_plateau && self.with_index > 0;
        let bound_interval = match &self.inferred {
            Inference::Range { hi: Some(h), .. } => Some(h.saturating_sub(1)),
            _ => None,
        };
        let bound = match (&self.inferred, bound_interval) {
            (_, Some(i)) => Some(self.segs.iter().map(|s| s.bound(i)).max().unwrap_or(0)),
            (Inference::Range { hi: None, .. }, None) => Some(self.segs.iter().map(|s| s.size).max().unwrap_or(0)),
            _ => None,
        };
        let disagree = matches!(self.inferred, Inference::NoInterval { .. });
        let (min, max) = self.per_segment_entries.unwrap_or((0, 0));
        Existing {
            offset_entries: self.offset_entries,
            entries_per_segment_min: min,
            entries_per_segment_max: max,
            segments_without_index: self.segments_without_index,
            inferred: self.inferred.clone(),
            per_segment: if disagree { self.per_segment.clone() } else { Vec::new() },
            per_segment_not_listed: if disagree { self.with_index - self.per_segment.len() } else { 0 },
            on_plateau,
            bound,
            bound_interval,
        }
    }

    fn what_if(&self) -> Vec<WhatIf> {
        self.what_if
            .iter()
            .map(|w| {
                let (min, max) = w.per_segment.unwrap_or((0, 0));
                WhatIf {
                    interval: w.interval,
                    offset_entries: w.offset_entries,
                    entries_per_segment_min: min,
                    entries_per_segment_max: max,
                    time_entries: w.time_entries,
                    index_bytes: w.offset_entries as u64 * 8 + w.time_entries as u64 * 12,
                    max_bytes_scanned: w.max_scan,
                    bound: w.bound,
                    on_plateau: w.plateau,
                    same_as_existing: w.same,
                }
            })
            .collect()
    }
}

/// The offsets a replay looks up in a segment: from its base, every `every`th, below its next
/// offset.
fn lookup_offsets(s: &SegFacts, every: u64) -> impl Iterator<Item = i64> {
    let step = usize::try_from(every).unwrap_or(usize::MAX);
    (s.base..s.next_offset).step_by(step)
}

/// How many offsets [`lookup_offsets`] gives.
fn lookup_count(s: &SegFacts, every: u64) -> u64 {
    let span = (s.next_offset as i128 - s.base as i128).max(0) as u128;
    span.div_ceil(every as u128).min(u64::MAX as u128) as u64
}

/// Replays a lookup of every `every`th offset through the engine's segment code, one segment at
/// a time; feeds `points` for a plot.
fn replay(
    p: &PartitionDir,
    segs: &[SegFacts],
    args: &Args,
    mut points: Option<&mut plot::Columns>,
) -> Result<Replay, String> {
    let settings = SegmentSettings {
        index_interval_bytes: 4096,
        segment_index_bytes: args.segment_index_bytes,
        preallocate_bytes: 0,
        tail_cache_bytes: 0,
        zero_fill_bytes: 0,
        length_lead_bytes: 0,
        segment_bytes: i32::MAX as u32,
    };
    let every = args.every;
    let total: u64 = segs.iter().filter(|s| s.replay).map(|s| lookup_count(s, every)).sum();
    let progress = Progress::new(total, "lookups", false);
    let (mut bytes, mut hops) = (Distribution::new(), Distribution::new());
    let (mut lookups, mut not_found, mut skipped) = (0usize, 0usize, 0usize);
    for s in segs {
        if !s.replay {
            skipped += 1;
            continue;
        }
        // The engine opens the files itself: refuse a FIFO or a link before it gets the paths.
        if let Some(files) = p.segments.get(&s.base) {
            files.check_regular()?;
        }
        // A fresh overlay per segment: nothing is held from one segment to the next.
        let storage = OverlayStorage::for_lookups(u64::from(args.segment_index_bytes));
        let (seg, _) =
            Segment::open_existing(&storage, &p.path, s.base, settings, &SegmentResources::process_default())
                .map_err(|e| format!("opening segment {} in {}: {e}", s.base, p.path.display()))?;
        let mut n = 0u64;
        for offset in lookup_offsets(s, every) {
            let (hit, cost) =
                seg.translate_offset_with_cost(offset, 0).map_err(|e| format!("lookup of offset {offset}: {e}"))?;
            if hit.is_none() {
                not_found += 1;
                continue;
            }
            bytes.add(cost.bytes_scanned as u64);
            hops.add(cost.hops as u64);
            if let Some(pts) = points.as_deref_mut() {
                pts.add(offset as f64, cost.bytes_scanned as f64);
            }
            lookups += 1;
            n += 1;
            if n.is_multiple_of(4096) {
                progress.inc(4096);
            }
        }
        progress.inc(n % 4096);
    }
    progress.finish();
    Ok(Replay {
        lookups,
        every,
        bytes_scanned: bytes.summary(),
        header_hops: hops.summary(),
        not_found,
        segments_not_replayed: skipped,
    })
}

/// The first and last offset a replay looks up (the plot's x range).
fn lookup_range(segs: &[SegFacts], every: u64) -> (i64, i64) {
    let replayed = || segs.iter().filter(|s| s.replay && lookup_count(s, every) > 0);
    let first = replayed().next().map_or(0, |s| s.base);
    let last = replayed().next_back().map_or(1, |s| {
        let steps = (lookup_count(s, every) - 1) as i128 * every as i128;
        (s.base as i128 + steps).min(i64::MAX as i128) as i64
    });
    (first, last)
}

/// Builds the report for one partition; fills `points` for a plot.
fn report(p: &PartitionDir, args: &Args, want_plot: bool) -> Result<(Report, Option<plot::Columns>), String> {
    let mut part = Partition::new(&args.intervals);
    for s in p.log_segments() {
        part.walk_segment(s, u64::from(args.segment_index_bytes))?;
    }
    let mut points = want_plot.then(|| {
        let (x0, x1) = lookup_range(&part.segs, args.every);
        plot::Columns::new(x0 as f64, x1 as f64)
    });
    let replay = replay(p, &part.segs, args, points.as_mut())?;
    let existing = part.existing();
    let mut notes = std::mem::take(&mut part.notes);
    // The model and the engine must agree on the worst walk with the existing index.
    if args.every == 1 && !part.any_padded && replay.segments_not_replayed == 0 {
        if let Some(m) = part.model_max {
            if existing.segments_without_index == 0 && m != replay.bytes_scanned.max {
                notes.push(format!(
                    "the engine's replay (max {}) and the index-rule model (max {m}) disagree: please report this",
                    replay.bytes_scanned.max
                ));
            }
        }
    }
    let batch_sizes = part.sizes.summary();
    if batch_sizes.approximate || replay.bytes_scanned.approximate || replay.header_hops.approximate {
        notes.push(format!(
            "medians and p99s marked ~ are approximate: with more than {EXACT_DISTINCT_VALUES} distinct values they come from a histogram, at most 1/1024 (0.1%) above the exact value"
        ));
    }
    let report = Report {
        dir: p.path.clone(),
        segments: part.segs.len(),
        batches: usize::try_from(part.sizes.count()).unwrap_or(usize::MAX),
        offsets: part.segs.iter().fold(0i64, |a, s| a.saturating_add(s.next_offset.saturating_sub(s.base))),
        log_bytes: part.segs.iter().map(|s| s.size).sum(),
        batch_sizes,
        existing,
        replay,
        plateau_below: part.plateau_below,
        what_if: part.what_if(),
        notes: notes.into_vec(),
    };
    Ok((report, points))
}

fn range(a: usize, b: usize) -> String {
    if a == b {
        a.to_string()
    } else {
        format!("{a}-{b}")
    }
}

/// "median M, p99 P", each marked `~` when approximate.
fn mid(s: &Summary) -> String {
    let m = if s.approximate { "~" } else { "" };
    format!("median {m}{}, p99 {m}{}", s.median, s.p99)
}

fn print(r: &Report) {
    println!("index-report {}", r.dir.display());
    println!(
        "  {} segments, {} batches, {} offsets, {} of log",
        r.segments,
        r.batches,
        r.offsets,
        human_bytes(r.log_bytes)
    );
    print_existing(&r.existing);
    print_replay(&r.replay, &r.existing);
    let b = &r.batch_sizes;
    println!("  batch sizes ({} batches): min {}, {}, max {}", b.count, b.min, mid(b), b.max);
    if let Some(p) = r.plateau_below {
        println!("  the plateau: any interval below {p} indexes every batch after the first of each segment");
    }
    if !r.what_if.is_empty() {
        print_what_if(&r.what_if);
    }
    for n in &r.notes {
        println!("  note: {n}");
    }
}

/// The existing index: its entries and the interval inferred from them.
fn print_existing(e: &Existing) {
    let missing = if e.segments_without_index > 0 {
        format!(", {} segments without .index", e.segments_without_index)
    } else {
        String::new()
    };
    println!(
        "  existing index: {} offset entries (per segment {}){missing}; {}",
        e.offset_entries,
        range(e.entries_per_segment_min, e.entries_per_segment_max),
        e.inferred.describe()
    );
    for (base, inf) in &e.per_segment {
        println!("    segment {base}: {}", inf.describe());
    }
    if e.per_segment_not_listed > 0 {
        println!("    ... and {} more segments (only the first {MAX_LISTED} are listed)", e.per_segment_not_listed);
    }
    if e.on_plateau {
        println!("  on the plateau: every batch after the first of each segment is indexed (a lower interval changes nothing)");
    }
}

/// The replayed lookups: bytes scanned and header hops beside the bound of the existing index `e`.
fn print_replay(rp: &Replay, e: &Existing) {
    let how = if rp.every == 1 { "every offset".to_owned() } else { format!("every {}th offset", rp.every) };
    println!("  lookups replayed: {} ({how}, through Segment::translate_offset_with_cost)", rp.lookups);
    let s = &rp.bytes_scanned;
    let bound = match (e.bound, e.bound_interval) {
        (Some(b), Some(i)) => format!(
            "bound min(interval + largest batch, segment size) = {b} (interval taken as {i}, the largest consistent)"
        ),
        (Some(b), None) => format!("bound: segment size {b} (no upper limit on the interval)"),
        _ => "bound: interval unknown".to_owned(),
    };
    println!("    bytes scanned: min {}, {}, max {}   {bound}", s.min, mid(s), s.max);
    let h = &rp.header_hops;
    println!("    header hops:   min {}, {}, max {}", h.min, mid(h), h.max);
    if rp.not_found > 0 {
        println!("    {} offsets not found (past a torn tail)", rp.not_found);
    }
    if rp.segments_not_replayed > 0 {
        println!(
            "    {} segments not replayed (their .index is longer than --segment-index-bytes: see the notes)",
            rp.segments_not_replayed
        );
    }
}

/// The `--interval` table.
fn print_what_if(what_if: &[WhatIf]) {
    println!("  what if (Kafka's per-batch rule simulated on the batch list; nothing written):");
    println!(
        "    {:>10} {:>14} {:>12} {:>12} {:>12} {:>17} {:>10} {:>11}  lower interval",
        "interval",
        "offset entries",
        "per segment",
        "time entries",
        "index bytes",
        "max bytes scanned",
        "bound",
        "same as now"
    );
    for w in what_if {
        println!(
            "    {:>10} {:>14} {:>12} {:>12} {:>12} {:>17} {:>10} {:>11}  {}",
            w.interval,
            w.offset_entries,
            range(w.entries_per_segment_min, w.entries_per_segment_max),
            w.time_entries,
            w.index_bytes,
            w.max_bytes_scanned,
            w.bound,
            match w.same_as_existing {
                Some(true) => "yes",
                Some(false) => "no",
                None => "-",
            },
            if w.on_plateau { "on the plateau: changes nothing" } else { "would add entries" }
        );
    }
}

/// The `--plot` chart: bytes scanned per offset (min and max per column), segment starts as
/// guides, the bound as a dashed line.
fn chart(p: &PartitionDir, r: &Report, points: &plot::Columns) -> plot::Chart {
    plot::Chart {
        title: format!(
            "{}: bytes scanned per offset ({} lookups, max {})",
            p.path.display(),
            r.replay.lookups,
            r.replay.bytes_scanned.max
        ),
        x_label: "offset".into(),
        y_label: "bytes scanned (phase 2)".into(),
        x_range: Some(points.x_range()),
        x_guides: p.log_segments().map(|s| s.base_offset as f64).collect(),
        y_marks: r.existing.bound.iter().map(|&b| (b as f64, format!("bound {b}"))).collect(),
        series: vec![points.series("")],
        ..Default::default()
    }
}

pub fn run(args: Args) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let d = layout::discover(&args.dir)?;
    crate::live::warn_if_live(std::iter::once(args.dir.as_path()).chain(d.partitions.iter().map(|p| p.path.as_path())));
    if d.partitions.is_empty() {
        return Err(format!("{}: no partition directories found", args.dir.display()).into());
    }
    if let Some(path) = args.plot.as_ref().filter(|p| p.extension().is_some_and(|e| e.eq_ignore_ascii_case("png"))) {
        return Err(format!(
            "--plot {}: plots are written as SVG only (name the file .svg; an SVG converts to PNG with e.g. rsvg-convert)",
            path.display()
        )
        .into());
    }
    if args.plot.is_some() && d.partitions.len() != 1 {
        return Err(format!(
            "--plot needs a single partition directory; {} holds {}",
            args.dir.display(),
            d.partitions.len()
        )
        .into());
    }
    let mut reports = Vec::new();
    for p in &d.partitions {
        let (r, points) = report(p, &args, args.plot.is_some())?;
        if let (Some(path), Some(points)) = (&args.plot, &points) {
            plot::write(path, &chart(p, &r, points)).map_err(|e| format!("{}: {e}", path.display()))?;
            if !args.json {
                eprintln!("plot written to {}", path.display());
            }
        }
        if !args.json {
            print(&r);
        }
        reports.push(r);
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&serde_json::json!({ "partitions": reports }))?);
    }
    Ok(ExitCode::SUCCESS)
}
