//! Process crashes: the crash writer (`src/bin/crash_writer.rs`) appends to a data directory on the
//! root disk (under /var/tmp) and is SIGKILLed at a seeded moment 0-250 ms after it starts: while
//! it opens and recovers, mid-append, mid-roll (segments of 40-64 KiB roll every few dozen
//! batches), mid-checkpoint (the engine's recovery-point and log-start checkpoints every few
//! milliseconds) and mid-delete (every other directory: retention against a moving high
//! watermark, two-phase deletion with a short delay). It is restarted on the same directory several times (a generation), so
//! each start recovers what the previous kill left.
//!
//! After each kill the directory is checked on two copies (the next writer recovers the original):
//! once reopened by the engine as a restarted broker would (its checkpoints, recovery from the
//! recovery point), fetching everything; once fully revalidated with `Log::open`
//! (`seglog_tests::crash::verify_partition`). The page cache survives a SIGKILL, so every batch
//! acknowledged in any run of the generation must be there, whatever the durability policy
//! (`Durability::None` included, as in Kafka) and I/O mode (in direct mode the bytes of an
//! acknowledged append were written to the device before the acknowledgement). Offsets run from
//! the log start with no gap or duplicate, index entries point at batch starts, lookups agree with
//! a linear scan, and every stored batch is the one the seed says was appended at its offset.
//! Every third kill, a second writer is started on the directory while the first runs: it must be
//! refused with the first one's process id and acknowledge nothing.
//!
//! 36 kills by default (`SEGLOG_SIGKILL_ITERATIONS`), 6 per directory. A failing kill prints its
//! seeds; `SEGLOG_CRASH_SEED=<base seed>` repeats the schedule. Needs no root.

use std::path::Path;
use std::time::{Duration, Instant};

use seglog::{Durability, IoMode};
use seglog_tests::crash::{
    base_seed, copy_tree, mix, verify_engine_reopen, verify_partition, Ack, Rng, WriterArgs, WriterProcess,
};

const ITERATIONS: usize = 36;
/// Kills (and restarts) per data directory.
const GENERATION: usize = 6;

/// What the files say about where the kill landed.
#[derive(Debug, Default, Clone, Copy)]
struct Evidence {
    /// A checkpoint's temporary file: killed between writing it and renaming it.
    checkpoint_tmp: bool,
    /// `.deleted` files: segments renamed for deletion and not yet unlinked.
    deleted_files: bool,
    /// A sealed (not last) segment whose index is still preallocated, or an empty last segment
    /// after a non-empty one: killed in a roll.
    mid_roll: bool,
}

fn evidence(data_dir: &Path, segment_index_bytes: u32) -> Evidence {
    let mut e = Evidence::default();
    let Ok(top) = std::fs::read_dir(data_dir) else { return e };
    for ent in top.flatten() {
        let name = ent.file_name().to_string_lossy().into_owned();
        if name.ends_with(".tmp") {
            e.checkpoint_tmp = true;
        }
        if !ent.path().is_dir() {
            continue;
        }
        let mut logs: Vec<(String, u64)> = Vec::new();
        let mut index_len = std::collections::HashMap::new();
        for f in std::fs::read_dir(ent.path()).into_iter().flatten().flatten() {
            let n = f.file_name().to_string_lossy().into_owned();
            let len = f.metadata().map(|m| m.len()).unwrap_or(0);
            if n.ends_with(".deleted") {
                e.deleted_files = true;
            } else if let Some(base) = n.strip_suffix(".log") {
                logs.push((base.to_string(), len));
            } else if let Some(base) = n.strip_suffix(".index") {
                index_len.insert(base.to_string(), len);
            }
        }
        logs.sort();
        if logs.len() >= 2 {
            let (last, last_len) = &logs[logs.len() - 1];
            let sealed_untrimmed = logs[..logs.len() - 1]
                .iter()
                .any(|(b, _)| index_len.get(b).is_some_and(|&l| l >= segment_index_bytes as u64 / 2));
            let fresh_active = *last_len == 0 || !index_len.contains_key(last);
            if sealed_untrimmed || fresh_active {
                e.mid_roll = true;
            }
        }
    }
    e
}

#[test]
fn sigkill_mid_append_roll_checkpoint_and_delete_loses_no_acknowledged_batch() {
    let n = match std::env::var("SEGLOG_SIGKILL_ITERATIONS") {
        Ok(v) => v.trim().parse().unwrap_or_else(|e| panic!("SEGLOG_SIGKILL_ITERATIONS={v}: {e}")),
        Err(_) => ITERATIONS,
    };
    let exe = Path::new(env!("CARGO_BIN_EXE_crash_writer"));
    let root = tempfile::Builder::new().prefix("seglog-sigkill-").tempdir_in("/var/tmp").expect("temp dir");
    let base = base_seed();
    println!(
        "{n} kills, {GENERATION} per directory, base seed {base:#x} (SEGLOG_CRASH_SEED={base:#x} repeats the schedule)"
    );
    let forced_mode: Option<IoMode> = seglog_tests::test_io_mode();
    let started = Instant::now();
    let mut failures: Vec<String> = Vec::new();
    let (mut acks_total, mut killed_in_startup, mut deleted_acks, mut from_checkpoint) =
        (0usize, 0usize, 0usize, 0usize);
    let (mut mid_checkpoint, mut mid_delete, mut mid_roll, mut truncating, mut removed) = (0, 0, 0, 0, 0);
    let mut modes = std::collections::BTreeMap::<String, usize>::new();
    let generations = n.div_ceil(GENERATION);
    let mut kills = 0;
    let mut second_writers = 0;
    for g in 0..generations {
        let gseed = mix(&[base, g as u64]);
        let mut r = Rng::new(gseed);
        let dir = root.path().join(format!("gen{g}"));
        let mut template = WriterArgs::new(&dir, gseed);
        template.partitions = r.range(1, 4) as i32;
        template.segment_bytes = r.range(40, 64) as u32 * 1024;
        template.index_interval_bytes = [256, 1024, 4096][r.range(0, 2) as usize];
        template.preallocate = r.range(0, 2) == 0;
        template.zero_fill =
            [seglog::ZeroFill::Auto, seglog::ZeroFill::Off, seglog::ZeroFill::Lead(16 * 1024)][r.range(0, 2) as usize];
        template.checkpoint_ms = r.range(3, 30);
        if g % 2 == 0 {
            template.retention_bytes = template.segment_bytes as i64 * r.range(2, 4) as i64;
            template.retention_check_ms = r.range(3, 20);
            template.delete_delay_ms = r.range(0, 20) as i64;
            template.hw_every = r.range(1, 4);
        }
        let mut all_acks: Vec<Ack> = Vec::new();
        for k in 0..GENERATION.min(n - g * GENERATION) {
            kills += 1;
            let seed = mix(&[gseed, k as u64]);
            let mut r = Rng::new(seed);
            let mut args = template.clone();
            args.io_mode =
                forced_mode.unwrap_or([IoMode::Direct, IoMode::Buffered, IoMode::Sync][r.range(0, 2) as usize]);
            args.durability = match r.range(0, 5) {
                0..=2 => Durability::None,
                3 => Durability::EveryBatch,
                _ => Durability::Interval { flush_ms: r.range(1, 20) as i64, flush_messages: r.range(10, 200) as i64 },
            };
            args.inflight = r.range(1, 8) as usize;
            let kill_after = Duration::from_millis(r.range(0, 250));

            let w = WriterProcess::spawn(exe, &args);
            // Every third kill a second writer tries the same directory while the first runs: it
            // must be refused (the first owns the directory's lock) and write nothing.
            let mut second_refused = None;
            if k % 3 == 2 {
                match w.wait_for_start(Duration::from_secs(30)) {
                    Some(l) if l.starts_with("START") => {
                        let w2 = WriterProcess::spawn(exe, &args);
                        let line = w2.wait_for_start(Duration::from_secs(30));
                        let out2 = w2.kill();
                        second_refused = Some((line, out2.acks.len(), w.pid()));
                    }
                    other => failures.push(format!("kill {k}: the first writer did not start: {other:?}")),
                }
            }
            std::thread::sleep(kill_after);
            let out = w.kill();
            let desc = format!(
                "generation {g} kill {k} (seed {seed:#x}, generation seed {gseed:#x}): {} {:?}, {} partitions, \
                 segment.bytes {}, preallocate {}, checkpoint every {} ms, retention.bytes {}, killed after {} ms",
                args.io_mode,
                args.durability,
                args.partitions,
                args.segment_bytes,
                args.preallocate,
                args.checkpoint_ms,
                args.retention_bytes,
                kill_after.as_millis()
            );
            if let Some((line, acks, pid)) = second_refused {
                second_writers += 1;
                let want = format!("locked by process {pid}");
                if acks != 0 || !line.as_deref().is_some_and(|l| l.starts_with("ERR -1 open") && l.contains(&want)) {
                    failures.push(format!(
                        "{desc}: a second writer on the live directory was not refused with '{want}': first line {line:?}, {acks} acknowledged appends"
                    ));
                }
            }
            let errors: Vec<&String> = out.other_lines.iter().filter(|l| l.starts_with("ERR")).collect();
            if !errors.is_empty() {
                failures.push(format!("{desc}: the writer failed: {errors:?}"));
            }
            match out.mode() {
                Some(m) => *modes.entry(m).or_default() += 1,
                None => killed_in_startup += 1,
            }
            acks_total += out.acks.len();
            all_acks.extend(out.acks);

            let ev = evidence(&dir, args.log_config().segment_index_bytes);
            mid_checkpoint += ev.checkpoint_tmp as usize;
            mid_delete += ev.deleted_files as usize;
            mid_roll += ev.mid_roll as usize;

            // Check two copies; the next writer recovers the original.
            let engine_copy = root.path().join("check-engine");
            let full_copy = root.path().join("check-full");
            for c in [&engine_copy, &full_copy] {
                let _ = std::fs::remove_dir_all(c);
                if dir.exists() {
                    copy_tree(&dir, c).unwrap_or_else(|e| panic!("copy {}: {e}", dir.display()));
                }
            }
            let mut violations = Vec::new();
            let engine_args = WriterArgs { data_dir: engine_copy.clone(), ..args.clone() };
            let e = verify_engine_reopen(&engine_args, &engine_copy, &all_acks);
            from_checkpoint += e.from_checkpoint;
            violations.extend(e.violations);
            let full_args = WriterArgs { data_dir: full_copy.clone(), ..args.clone() };
            for p in 0..args.partitions {
                let v = verify_partition(&full_args, p, &all_acks, &[]);
                deleted_acks += v.deleted_acks;
                truncating += (v.truncated_bytes > 0) as usize;
                removed += v.segments_removed;
                if let Some(&(_, es, ee)) = e.partitions.iter().find(|x| x.0 == p) {
                    if (es, ee) != (v.log_start_offset, v.log_end_offset) {
                        violations.push(format!(
                            "p{p}: the restarted engine has offsets {es}..{ee}, full recovery {}..{}",
                            v.log_start_offset, v.log_end_offset
                        ));
                    }
                }
                violations.extend(v.violations);
            }
            if !violations.is_empty() {
                println!("{desc}: {} acknowledged so far; evidence {ev:?}", all_acks.len());
                for v in &violations {
                    println!("    {v}");
                }
                failures.push(format!("{desc}: {}", violations.join("; ")));
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
    println!(
        "{kills} kills in {:.1} s: {acks_total} acknowledged batches; killed during startup/recovery {killed_in_startup}, \
         per I/O mode otherwise {modes:?}; kills leaving a checkpoint .tmp {mid_checkpoint}, .deleted files {mid_delete}, \
         an interrupted roll {mid_roll}; torn tails cut in {truncating} partition checks, {removed} segments removed \
         after a truncation; {deleted_acks} acknowledged batches deleted by retention (counted per check); \
         {from_checkpoint} partitions reopened from a checkpointed recovery point; {second_writers} second writers \
         refused on a live directory",
        started.elapsed().as_secs_f64()
    );
    assert!(second_writers > 0 || n < 3, "no second writer was tried");
    assert!(failures.is_empty(), "{} of {kills} kills broke the promise:\n{}", failures.len(), failures.join("\n"));
    assert!(acks_total > 0, "the writer acknowledged nothing in {kills} runs");
}
