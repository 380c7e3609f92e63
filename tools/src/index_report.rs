//! `seglog index-report DIR`: what the offset index of a partition costs and what another
//! `index.interval.bytes` would change, measured on the files, writing nothing.
//!
//! For every offset, the engine's own lookup (`Segment::translate_offset_with_cost`, phase 1 the
//! index floor, phase 2 the header walk) is replayed over the segment files through a read-only
//! overlay, and the walk (bytes scanned, header hops) is summarised beside its bound,
//! `min(interval + largest batch, segment size)`. For each `--interval N`, Kafka's per-batch rule
//! is simulated on the batch list (`indexsim`). The interval that wrote the files is not recorded
//! anywhere, so it is inferred as the range of intervals that reproduce the existing entries.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use seglog::segment::{Segment, SegmentSettings};
use serde::Serialize;

use crate::indexcheck::OffsetIndexFile;
use crate::indexsim::{self, Inference, SimBatch};
use crate::layout::{self, PartitionDir};
use crate::logscan;
use crate::overlay::OverlayStorage;
use crate::plot;
use crate::progress::Progress;
use crate::stats::{summarize, Summary};
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
    /// Draw bytes scanned per offset to FILE: SVG, or PNG when FILE ends in .png. Needs a single
    /// partition directory.
    #[arg(long, value_name = "FILE")]
    plot: Option<PathBuf>,
    /// Replay the lookup of every Nth offset only (default: every offset), for very large logs.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    every: u64,
    /// Print one JSON document instead of text.
    #[arg(long)]
    json: bool,
}

/// One segment's facts.
struct SegData {
    base: i64,
    size: u64,
    batches: Vec<SimBatch>,
    /// Existing entries as `(offset, position)`, `None` when the `.index` is missing.
    existing: Option<Vec<(i64, u64)>>,
    /// The `.index` has slots after its entries (zero padding, not trimmed).
    padded: bool,
}

impl SegData {
    fn largest_batch(&self) -> u64 {
        self.batches.iter().map(|b| b.size).max().unwrap_or(0)
    }
    fn bound(&self, interval: u64) -> u64 {
        interval.saturating_add(self.largest_batch()).min(self.size)
    }
    fn next_offset(&self) -> i64 {
        self.batches.last().map_or(self.base, |b| b.last_offset + 1)
    }
}

/// The walks a set of lookups paid.
#[derive(Clone, Debug, Serialize)]
pub struct Replay {
    pub lookups: usize,
    pub every: u64,
    pub bytes_scanned: Summary,
    pub header_hops: Summary,
    /// Lookups that found no batch (offsets past a torn tail).
    pub not_found: usize,
}

/// The existing index and what it tells.
#[derive(Clone, Debug, Serialize)]
pub struct Existing {
    pub offset_entries: usize,
    pub entries_per_segment_min: usize,
    pub entries_per_segment_max: usize,
    pub segments_without_index: usize,
    pub inferred: Inference,
    /// Per segment, when segments disagree.
    pub per_segment: Vec<(i64, Inference)>,
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

fn load(p: &PartitionDir) -> Result<(Vec<SegData>, Vec<String>), String> {
    let mut segs = Vec::new();
    let mut notes = Vec::new();
    for s in p.log_segments() {
        let log = s.log.as_ref().expect("log segments");
        let mut batches = Vec::new();
        let sum = logscan::summarize_log(log, |b, _| {
            batches.push(SimBatch {
                position: b.position,
                size: b.size(),
                last_offset: b.last_offset(),
                max_timestamp: b.header.max_timestamp,
            })
        })
        .map_err(|e| format!("{}: {e}", log.display()))?;
        if let Some(pos) = sum.end.problem_position() {
            notes.push(format!(
                "{}: {} (lookups cover the valid bytes before byte {pos}; run verify)",
                log.display(),
                sum.end.describe()
            ));
        }
        let mut padded = false;
        let existing = match &s.index {
            None => {
                notes.push(format!("{}: no .index; lookups walk from byte 0", log.display()));
                None
            }
            Some(path) => {
                let idx = OffsetIndexFile::read(path, s.base_offset).map_err(|e| format!("{}: {e}", path.display()))?;
                if idx.padding.slots > idx.entries.len() {
                    padded = true;
                    notes.push(format!(
                        "{}: {} slots after the {} entries (zero padding, not trimmed): Kafka and the engine search them as entries until the index is trimmed or rebuilt",
                        path.display(),
                        idx.padding.slots - idx.entries.len(),
                        idx.entries.len()
                    ));
                }
                Some(idx.entries.iter().map(|e| (e.offset, e.position as u64)).collect())
            }
        };
        segs.push(SegData { base: s.base_offset, size: sum.valid_bytes(), batches, existing, padded });
    }
    Ok((segs, notes))
}

/// Replays a lookup of every `every`th offset through the engine's segment code.
fn replay(p: &PartitionDir, segs: &[SegData], every: u64, points: &mut Vec<(i64, u64)>) -> Result<Replay, String> {
    let storage = OverlayStorage::new();
    let settings = SegmentSettings {
        index_interval_bytes: 4096,
        segment_index_bytes: 10 * 1024 * 1024,
        preallocate_bytes: 0,
        tail_cache_bytes: 0,
        zero_fill_bytes: 0,
        segment_bytes: i32::MAX as u32,
    };
    let total: u64 = segs.iter().map(|s| (s.next_offset() - s.base).max(0) as u64 / every).sum();
    let progress = Progress::new(total, "lookups", false);
    let (mut bytes, mut hops, mut not_found) = (Vec::new(), Vec::new(), 0usize);
    for s in segs {
        // The engine opens the files itself: refuse a FIFO or a link before it gets the paths.
        if let Some(files) = p.segments.get(&s.base) {
            files.check_regular()?;
        }
        let (seg, _) = Segment::open_existing(&storage, &p.path, s.base, settings)
            .map_err(|e| format!("opening segment {} in {}: {e}", s.base, p.path.display()))?;
        let mut n = 0u64;
        for offset in (s.base..s.next_offset()).step_by(every as usize) {
            let (hit, cost) =
                seg.translate_offset_with_cost(offset, 0).map_err(|e| format!("lookup of offset {offset}: {e}"))?;
            if hit.is_none() {
                not_found += 1;
                continue;
            }
            bytes.push(cost.bytes_scanned as u64);
            hops.push(cost.hops as u64);
            points.push((offset, cost.bytes_scanned as u64));
            n += 1;
            if n.is_multiple_of(4096) {
                progress.inc(4096);
            }
        }
        progress.inc(n % 4096);
    }
    progress.finish();
    Ok(Replay {
        lookups: bytes.len(),
        every,
        bytes_scanned: summarize(&bytes),
        header_hops: summarize(&hops),
        not_found,
    })
}

fn existing_facts(segs: &[SegData]) -> Existing {
    let with_index: Vec<&SegData> = segs.iter().filter(|s| s.existing.is_some()).collect();
    let counts: Vec<usize> = with_index.iter().map(|s| s.existing.as_ref().map_or(0, Vec::len)).collect();
    let per_segment: Vec<(i64, Inference)> = with_index
        .iter()
        .map(|s| (s.base, indexsim::infer_interval(&s.batches, s.existing.as_deref().unwrap_or(&[]))))
        .collect();
    let mut inferred = Inference::Range { lo: 0, hi: None };
    for (_, i) in &per_segment {
        inferred = inferred.intersect(i);
    }
    let on_plateau = with_index.iter().all(|s| {
        let e = s.existing.as_deref().unwrap_or(&[]);
        e.len() + 1 == s.batches.len().max(1)
            && e.iter().zip(&s.batches[1..]).all(|(&(o, p), b)| o == b.last_offset && p == b.position)
    }) && !with_index.is_empty();
    let bound_interval = match &inferred {
        Inference::Range { hi: Some(h), .. } => Some(h.saturating_sub(1)),
        _ => None,
    };
    let bound = match (&inferred, bound_interval) {
        (_, Some(i)) => Some(segs.iter().map(|s| s.bound(i)).max().unwrap_or(0)),
        (Inference::Range { hi: None, .. }, None) => Some(segs.iter().map(|s| s.size).max().unwrap_or(0)),
        _ => None,
    };
    let disagree = matches!(inferred, Inference::NoInterval { .. });
    Existing {
        offset_entries: counts.iter().sum(),
        entries_per_segment_min: counts.iter().copied().min().unwrap_or(0),
        entries_per_segment_max: counts.iter().copied().max().unwrap_or(0),
        segments_without_index: segs.len() - with_index.len(),
        inferred,
        per_segment: if disagree { per_segment } else { Vec::new() },
        on_plateau,
        bound,
        bound_interval,
    }
}

fn what_if(segs: &[SegData], interval: u64) -> WhatIf {
    let mut counts = Vec::new();
    let (mut time_entries, mut max_scan, mut bound) = (0usize, 0u64, 0u64);
    let mut plateau = true;
    let mut same: Option<bool> = Some(true);
    for s in segs {
        let sim = indexsim::simulate(&s.batches, interval);
        counts.push(sim.indexed.len());
        time_entries += sim.time_entries;
        max_scan = max_scan.max(indexsim::max_bytes_scanned(&s.batches, &sim.indexed, s.base));
        bound = bound.max(s.bound(interval));
        plateau &= indexsim::on_plateau(&s.batches, &sim.indexed);
        match &s.existing {
            None => same = None,
            Some(e) => {
                let sim_entries: Vec<(i64, u64)> =
                    sim.indexed.iter().map(|&j| (s.batches[j].last_offset, s.batches[j].position)).collect();
                if let Some(v) = same.as_mut() {
                    *v &= &sim_entries == e;
                }
            }
        }
    }
    let offset_entries: usize = counts.iter().sum();
    WhatIf {
        interval,
        offset_entries,
        entries_per_segment_min: counts.iter().copied().min().unwrap_or(0),
        entries_per_segment_max: counts.iter().copied().max().unwrap_or(0),
        time_entries,
        index_bytes: offset_entries as u64 * 8 + time_entries as u64 * 12,
        max_bytes_scanned: max_scan,
        bound,
        on_plateau: plateau,
        same_as_existing: same,
    }
}

/// Builds the report for one partition; fills `points` for a plot.
fn report(p: &PartitionDir, args: &Args, points: &mut Vec<(i64, u64)>) -> Result<Report, String> {
    let (segs, mut notes) = load(p)?;
    let sizes: Vec<u64> = segs.iter().flat_map(|s| s.batches.iter().map(|b| b.size)).collect();
    let replay = replay(p, &segs, args.every, points)?;
    let existing = existing_facts(&segs);
    // The model and the engine must agree on the worst walk with the existing index.
    if args.every == 1 && !segs.iter().any(|s| s.padded) {
        let model_max = segs
            .iter()
            .filter_map(|s| {
                let e = s.existing.as_ref()?;
                let idx: Option<Vec<usize>> = e
                    .iter()
                    .map(|&(o, pos)| s.batches.iter().position(|b| b.position == pos && b.last_offset == o))
                    .collect();
                Some(indexsim::max_bytes_scanned(&s.batches, &idx?, s.base))
            })
            .max();
        if let Some(m) = model_max {
            if existing.segments_without_index == 0 && m != replay.bytes_scanned.max {
                notes.push(format!(
                    "the engine's replay (max {}) and the index-rule model (max {m}) disagree: please report this",
                    replay.bytes_scanned.max
                ));
            }
        }
    }
    let plateau_below =
        segs.iter().flat_map(|s| s.batches.iter().take(s.batches.len().saturating_sub(1)).map(|b| b.size)).min();
    let what_if = args.intervals.iter().map(|&i| what_if(&segs, i)).collect();
    Ok(Report {
        dir: p.path.clone(),
        segments: segs.len(),
        batches: sizes.len(),
        offsets: segs.iter().map(|s| s.next_offset() - s.base).sum(),
        log_bytes: segs.iter().map(|s| s.size).sum(),
        batch_sizes: summarize(&sizes),
        existing,
        replay,
        plateau_below,
        what_if,
        notes,
    })
}

fn range(a: usize, b: usize) -> String {
    if a == b {
        a.to_string()
    } else {
        format!("{a}-{b}")
    }
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
    let e = &r.existing;
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
    if e.on_plateau {
        println!("  on the plateau: every batch after the first of each segment is indexed (a lower interval changes nothing)");
    }
    let rp = &r.replay;
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
    println!("    bytes scanned: min {}, median {}, p99 {}, max {}   {bound}", s.min, s.median, s.p99, s.max);
    let h = &rp.header_hops;
    println!("    header hops:   min {}, median {}, p99 {}, max {}", h.min, h.median, h.p99, h.max);
    if rp.not_found > 0 {
        println!("    {} offsets not found (past a torn tail)", rp.not_found);
    }
    let b = &r.batch_sizes;
    println!("  batch sizes ({} batches): min {}, median {}, p99 {}, max {}", b.count, b.min, b.median, b.p99, b.max);
    if let Some(p) = r.plateau_below {
        println!("  the plateau: any interval below {p} indexes every batch after the first of each segment");
    }
    if !r.what_if.is_empty() {
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
        for w in &r.what_if {
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
    for n in &r.notes {
        println!("  note: {n}");
    }
}

fn plot_title(dir: &Path, r: &Report) -> String {
    format!(
        "{}: bytes scanned per offset ({} lookups, max {})",
        dir.display(),
        r.replay.lookups,
        r.replay.bytes_scanned.max
    )
}

pub fn run(args: Args) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let d = layout::discover(&args.dir)?;
    crate::live::warn_if_live(std::iter::once(args.dir.as_path()).chain(d.partitions.iter().map(|p| p.path.as_path())));
    if d.partitions.is_empty() {
        return Err(format!("{}: no partition directories found", args.dir.display()).into());
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
        let mut points = Vec::new();
        let r = report(p, &args, &mut points)?;
        if let Some(path) = &args.plot {
            let starts: Vec<i64> = p.log_segments().map(|s| s.base_offset).collect();
            let pl = plot::Plot {
                title: plot_title(&p.path, &r),
                points: &points,
                bound: r.existing.bound,
                segment_starts: &starts,
            };
            plot::write(path, &pl).map_err(|e| format!("{}: {e}", path.display()))?;
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
