//! Memory with hostile input: `seglog dump` and `seglog verify` on 10 MiB of random bytes named
//! `.log`, `.index` and `.timeindex` stay under a fixed bound of resident memory (measured as the
//! children's peak RSS, `getrusage(RUSAGE_CHILDREN)`), however much they print: output is
//! streamed and problem lists are capped, nothing is sized by a file's length.
//!
//! One test function on purpose: RUSAGE_CHILDREN is the peak over every child this process has
//! waited for, so the commands run one after another and the peak is read after each.

mod common;

use std::ffi::OsString;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use nix::sys::resource::{getrusage, UsageWho};

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

#[test]
fn dump_and_verify_stay_within_a_memory_bound_on_random_files() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("hostile-0");
    std::fs::create_dir(&d).unwrap();
    let log = d.join("00000000000000000000.log");
    let idx = d.join("00000000000000000000.index");
    let tidx = d.join("00000000000000000000.timeindex");
    for (i, p) in [&log, &idx, &tidx].into_iter().enumerate() {
        std::fs::write(p, seeded_bytes(0x5eed + i as u64, FILE_BYTES)).unwrap();
    }
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
}
