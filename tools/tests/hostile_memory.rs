//! Memory with hostile input: `seglog dump`, `verify`, `index-report` and `rebuild-index` on
//! 10 MiB files of random bytes named `.log`, `.index` and `.timeindex`, and on a 10 MiB log of
//! tiny valid batches, stay under a fixed bound of resident memory (measured as the children's peak
//! RSS, `getrusage(RUSAGE_CHILDREN)`), however much they print: output is streamed, problem lists
//! are capped, what is kept is what the report prints, and nothing is sized by a file's length.
//!
//! One test function on purpose: RUSAGE_CHILDREN is the peak over every child this process has
//! waited for, so the commands run one after another and the peak is read after each.
//!
//! The inputs are written by [`write_inputs`]; the ignored test `write_hostile_inputs` writes them
//! at any size for measuring by hand (docs/cli.md, "Memory with hostile input"):
//! `SEGLOG_HOSTILE_DIR=/tmp/h SEGLOG_HOSTILE_BYTES=1GiB SEGLOG_HOSTILE_SEGMENTS=1 cargo test -p
//! seglog-tools --test hostile_memory -- --ignored write_hostile_inputs`.

mod common;

use std::ffi::OsString;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use nix::sys::resource::{getrusage, UsageWho};
use seglog::format::builder::BatchBuilder;
use seglog::format::index_entry::{OffsetEntry, TimeEntry};

/// The bound on a command's peak resident memory.
const BOUND_KIB: i64 = 100 * 1024;
const FILE_BYTES: usize = 10 << 20;
const LIMIT: Duration = Duration::from_secs(60);

/// Runs seglog with stdout to /dev/null (or captured when `keep`), under a watchdog; returns
/// the exit code, stdout, and the peak RSS of all children so far, in KiB.
fn measured(args: &[OsString], keep: bool) -> (i32, String, i64) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_seglog"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(if keep { Stdio::piped() } else { Stdio::null() })
        .stderr(Stdio::null())
        .spawn()
        .expect("run seglog");
    let reader = child.stdout.take().map(|mut s| {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            std::io::Read::read_to_end(&mut s, &mut v).unwrap();
            v
        })
    });
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("seglog {args:?} did not finish within {LIMIT:?}: killed");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let out = reader.map(|r| r.join().unwrap()).unwrap_or_default();
    let rss = getrusage(UsageWho::RUSAGE_CHILDREN).expect("getrusage").max_rss();
    (status.code().unwrap_or(-1), String::from_utf8_lossy(&out).into_owned(), rss)
}

fn args(list: &[&dyn AsRef<std::ffi::OsStr>]) -> Vec<OsString> {
    list.iter().map(|a| a.as_ref().to_owned()).collect()
}

/// Writes `len` bytes of [`seeded_bytes`]'s stream to `path`, a chunk at a time.
fn write_seeded(path: &Path, seed: u64, len: usize) {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut x = seed;
    let mut left = len;
    let mut chunk = Vec::with_capacity(1 << 20);
    while left > 0 {
        chunk.clear();
        while chunk.len() < (1 << 20).min(left) {
            x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            chunk.extend_from_slice(&(z ^ (z >> 31)).to_le_bytes());
        }
        chunk.truncate((1 << 20).min(left));
        f.write_all(&chunk).unwrap();
        left -= chunk.len();
    }
    f.flush().unwrap();
}

/// One batch of one record (no key, no value) at `offset`, timestamp `1.7e12 + offset`.
fn tiny_batch(offset: i64, epoch: i32) -> Vec<u8> {
    let mut b = BatchBuilder::new().base_offset(offset).partition_leader_epoch(epoch);
    b.push(1_700_000_000_000 + offset, None, None, &[]);
    b.build().unwrap()
}

/// A `.log` of tiny batches from offset `base` filling about `len` bytes (every batch whole);
/// with `index`, the `.index` and `.timeindex` Kafka's rule writes with index.interval.bytes
/// 4096; with `epochs`, each batch's leader epoch is its offset (the epoch is not covered by
/// the CRC). Returns the number of batches.
fn write_tiny_batches(dir: &Path, base: i64, len: usize, index: bool, epochs: bool) -> usize {
    let stem = dir.join(format!("{base:020}"));
    let mut log = std::io::BufWriter::new(std::fs::File::create(stem.with_extension("log")).unwrap());
    let mut idx = Vec::new();
    let mut tidx = Vec::new();
    let (mut pos, mut last_entry, mut n) = (0usize, 0usize, 0usize);
    loop {
        let offset = base + n as i64;
        let b = tiny_batch(offset, if epochs { n as i32 } else { 0 });
        if pos + b.len() > len {
            break;
        }
        if pos - last_entry > 4096 {
            let rel = (offset - base) as i32;
            idx.extend_from_slice(&OffsetEntry { relative_offset: rel, position: pos as i32 }.encode());
            tidx.extend_from_slice(&TimeEntry { timestamp: 1_700_000_000_000 + offset, relative_offset: rel }.encode());
            last_entry = pos;
        }
        log.write_all(&b).unwrap();
        pos += b.len();
        n += 1;
    }
    log.flush().unwrap();
    if index {
        // The entry written at roll, when the last batch was not indexed.
        let last = base + n as i64 - 1;
        if tidx.len() < 12 || tidx[tidx.len() - 4..] != ((last - base) as i32).to_be_bytes() {
            let rel = (last - base) as i32;
            tidx.extend_from_slice(&TimeEntry { timestamp: 1_700_000_000_000 + last, relative_offset: rel }.encode());
        }
        std::fs::write(stem.with_extension("index"), idx).unwrap();
        std::fs::write(stem.with_extension("timeindex"), tidx).unwrap();
    }
    n
}

/// The hostile inputs, in `root`:
///
/// - `hostile-0/`: `00000000000000000000.log`, `.index` and `.timeindex` of `len` random bytes;
/// - `random-index-0/`: `segments` segments at offsets 0, 100, 200, ..., each a valid `.log` of 100
///   tiny batches beside an `.index` and a `.timeindex` of `len` random bytes;
/// - `tiny-batches-0/`: a `.log` of about `len` bytes of tiny valid batches (one record each,
///   69 bytes), with the `.index` and `.timeindex` Kafka writes (index.interval.bytes 4096);
/// - `tiny-epochs-0/`: the same `.log` with each batch in a leader epoch of its own, and no indexes;
/// - `big-batch-0/`: a `.log` of one valid batch of about `len` bytes (one record, its value
///   `len - 100` random bytes), and no indexes.
fn write_inputs(root: &Path, len: usize, segments: usize) {
    let d = root.join("hostile-0");
    std::fs::create_dir_all(&d).unwrap();
    for (i, ext) in ["log", "index", "timeindex"].into_iter().enumerate() {
        write_seeded(&d.join(format!("00000000000000000000.{ext}")), 0x5eed + i as u64, len);
    }
    let d = root.join("random-index-0");
    std::fs::create_dir_all(&d).unwrap();
    for k in 0..segments {
        let base = 100 * k as i64;
        write_tiny_batches(&d, base, 100 * tiny_batch(0, 0).len(), false, false);
        for (i, ext) in ["index", "timeindex"].into_iter().enumerate() {
            write_seeded(&d.join(format!("{base:020}.{ext}")), 0x5eed + 1 + i as u64 + 16 * k as u64, len);
        }
    }
    for (name, index, epochs) in [("tiny-batches-0", true, false), ("tiny-epochs-0", false, true)] {
        let d = root.join(name);
        std::fs::create_dir_all(&d).unwrap();
        write_tiny_batches(&d, 0, len, index, epochs);
    }
    let d = root.join("big-batch-0");
    std::fs::create_dir_all(&d).unwrap();
    let mut b = BatchBuilder::new();
    b.push(1_700_000_000_000, None, Some(&seeded_bytes(0x5eed + 3, len.saturating_sub(100))), &[]);
    std::fs::write(d.join("00000000000000000000.log"), b.build().unwrap()).unwrap();
}

#[test]
fn commands_stay_within_a_memory_bound_on_hostile_files() {
    let tmp = tempfile::tempdir().unwrap();
    write_inputs(tmp.path(), FILE_BYTES, 8);
    let d = tmp.path().join("hostile-0");
    let log = d.join("00000000000000000000.log");
    let idx = d.join("00000000000000000000.index");
    let tidx = d.join("00000000000000000000.timeindex");
    let check = |what: &str, args: Vec<OsString>, keep: bool, want_code: i32| -> String {
        let (code, out, rss) = measured(&args, keep);
        assert_eq!(code, want_code, "{what}: exit code\n{}", &out[..out.len().min(2000)]);
        assert!(rss < BOUND_KIB, "{what}: peak RSS {rss} KiB, over the bound of {BOUND_KIB} KiB");
        out
    };
    // Random entries never match the (random, unreadable) log: damage, exit code 1.
    check("dump .index", args(&[&"dump", &idx]), false, 1);
    check("dump --json .index", args(&[&"dump", &"--json", &idx]), false, 1);
    check("dump .timeindex", args(&[&"dump", &tidx]), false, 1);
    check("dump --json .timeindex", args(&[&"dump", &"--json", &tidx]), false, 1);
    check("dump --deep-iteration .log", args(&[&"dump", &"--deep-iteration", &log]), false, 1);

    let out = check("verify", args(&[&"verify", &d]), true, 1);
    assert!(out.len() < 64 << 10, "verify printed {} bytes", out.len());
    let more = lines_with(&out, "more problems in");
    assert!(!more.is_empty(), "{out}");
    assert!(more.iter().any(|l| l.contains(&format!("{}", idx.display()))), "{out}");

    let out = check("verify --json", args(&[&"verify", &"--json", &d]), true, 1);
    let j: serde_json::Value = serde_json::from_str(&out).unwrap();
    let p = &j["partitions"][0];
    assert!(p["problems"].as_array().unwrap().len() <= 300, "kept problems are capped");
    assert!(j["totals"]["problems"].as_u64().unwrap() > 1_000_000, "every problem is counted: {}", j["totals"]);
    assert!(Path::new(p["problems_not_listed"][0]["file"].as_str().unwrap()).is_absolute());

    // index-report: one segment at a time; an index is read in chunks for the models, and loaded
    // (for the engine's lookups) only up to --segment-index-bytes. Eight 10 MiB random indexes:
    // every entry of every segment was held before.
    let r = tmp.path().join("random-index-0");
    let out = check("index-report random indexes", args(&[&"index-report", &"--json", &r]), true, 0);
    let j: serde_json::Value = serde_json::from_str(&out).unwrap();
    let p = &j["partitions"][0];
    assert_eq!(p["segments"], 8);
    assert_eq!(p["existing"]["offset_entries"].as_u64(), Some(8 * (FILE_BYTES as u64 / 8)), "{}", p["existing"]);
    assert_eq!(p["replay"]["lookups"].as_u64().unwrap() + p["replay"]["not_found"].as_u64().unwrap(), 800);
    check("index-report random indexes, what if", args(&[&"index-report", &r, &"--interval", &"0"]), false, 0);
    // A .index longer than --segment-index-bytes is not loaded: those lookups are not replayed.
    let out = check(
        "index-report random indexes, small --segment-index-bytes",
        args(&[&"index-report", &r, &"--segment-index-bytes", &"1MiB"]),
        true,
        0,
    );
    assert!(out.contains("8 segments not replayed"), "{out}");
    assert_eq!(lines_with(&out, "bytes, more than --segment-index-bytes (1048576): not loaded").len(), 8, "{out}");

    // 150,000 batches, every offset looked up, their sizes and walks summarised in bounded memory.
    let t = tmp.path().join("tiny-batches-0");
    let svg = tmp.path().join("tiny.svg");
    let out = check(
        "index-report tiny batches",
        args(&[&"index-report", &"--json", &t, &"--interval", &"0", &"--interval", &"4096", &"--plot", &svg]),
        true,
        0,
    );
    let j: serde_json::Value = serde_json::from_str(&out).unwrap();
    let p = &j["partitions"][0];
    let batches = p["batches"].as_u64().unwrap();
    assert!(batches > 150_000, "{batches}");
    assert_eq!(p["replay"]["lookups"].as_u64(), Some(batches));
    assert_eq!(p["what_if"][1]["same_as_existing"], true, "the generator wrote Kafka's index: {}", p["what_if"]);
    assert_eq!(p["what_if"][0]["offset_entries"].as_u64(), Some(batches - 1));
    assert!(p["notes"].as_array().unwrap().is_empty(), "{}", p["notes"]);
    assert!(std::fs::metadata(&svg).unwrap().len() < 1 << 20);

    // rebuild-index: the rebuilt indexes are compared with the files in chunks; a random index
    // differs, a dense rebuild (an entry per batch) stays within --segment-index-bytes.
    check("rebuild-index random indexes", args(&[&"rebuild-index", &r]), false, 1);
    check("rebuild-index random indexes --json", args(&[&"rebuild-index", &"--json", &r]), false, 1);
    let out = check(
        "rebuild-index tiny batches, dense",
        args(&[&"rebuild-index", &t, &"--index-interval-bytes", &"0"]),
        true,
        1,
    );
    assert!(out.contains(&format!("{} rebuilt", batches - 1)), "{out}");
    let out = check(
        "rebuild-index tiny batches, dense, over --segment-index-bytes",
        args(&[&"rebuild-index", &t, &"--index-interval-bytes", &"0", &"--segment-index-bytes", &"64KiB"]),
        true,
        1,
    );
    // The time index fills first (12-byte entries); the engine then stops adding to both.
    assert!(out.contains("DIFFERS: not rebuilt: the rebuilt .timeindex needs more than 5461 entries"), "{out}");
    assert!(out.contains("1 not rebuilt; dry run"), "{out}");
    let out = check("rebuild-index tiny batches", args(&[&"rebuild-index", &t]), true, 0);
    assert!(out.contains(": same: .index same; .timeindex same"), "{out}");
    let out = check(
        "rebuild-index tiny batches, every epoch",
        args(&[&"rebuild-index", &tmp.path().join("tiny-epochs-0")]),
        true,
        1,
    );
    assert!(out.contains(".index missing (rebuilt: "), "{out}");
    let big = tmp.path().join("big-batch-0");
    check("index-report one big batch", args(&[&"index-report", &big]), false, 0);
    check("rebuild-index one big batch", args(&[&"rebuild-index", &big]), false, 1);
    let out = check(
        "rebuild-index --write tiny batches, dense",
        args(&[&"rebuild-index", &"--write", &t, &"--index-interval-bytes", &"0"]),
        true,
        0,
    );
    assert!(out.contains("2 files written"), "{out}");
    assert_eq!(std::fs::metadata(t.join("00000000000000000000.index")).unwrap().len(), 8 * (batches - 1));
}

/// Writes the inputs of the test above at any size, for measuring by hand (see the module
/// comment): `SEGLOG_HOSTILE_DIR` (required), `SEGLOG_HOSTILE_BYTES` (default 10MiB),
/// `SEGLOG_HOSTILE_SEGMENTS` (random-index segments, default 8).
#[test]
#[ignore = "writes large files; run by hand with SEGLOG_HOSTILE_DIR"]
fn write_hostile_inputs() {
    let root = std::env::var_os("SEGLOG_HOSTILE_DIR").expect("SEGLOG_HOSTILE_DIR");
    let bytes = std::env::var("SEGLOG_HOSTILE_BYTES").unwrap_or_else(|_| "10MiB".into());
    let len = match bytes.strip_suffix("GiB") {
        Some(g) => g.parse::<usize>().unwrap() << 30,
        None => bytes.strip_suffix("MiB").expect("a size in MiB or GiB").parse::<usize>().unwrap() << 20,
    };
    let segments = std::env::var("SEGLOG_HOSTILE_SEGMENTS").map_or(8, |s| s.parse().unwrap());
    write_inputs(Path::new(&root), len, segments);
}
