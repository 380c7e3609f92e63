//! A FIFO, a socket, a directory or a symbolic link named like a segment file, given to or found
//! by `dump`, `verify`, `index-report` and `rebuild-index`: each command finishes (a watchdog
//! kills it after 20 s and fails the test), never blocks on the FIFO, and names the file and what
//! it is. `verify` reports it as damage (exit 1) and checks the rest; `dump` reports an error for
//! that file (exit 2) and dumps the others.

mod common;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::*;

const LIMIT: Duration = Duration::from_secs(20);

fn mkfifo(p: &Path) {
    nix::unistd::mkfifo(p, nix::sys::stat::Mode::from_bits_truncate(0o600)).expect("mkfifo");
}

/// A copy of the ts-common partition (four segments) under `root`.
fn partition(root: &Path, name: &str) -> PathBuf {
    let d = root.join(name);
    copy_dir(&ts_common(), &d);
    d
}

fn args(cmd: &str, rest: &[&Path]) -> Vec<OsString> {
    let mut v = vec![OsString::from(cmd)];
    v.extend(rest.iter().map(|p| p.as_os_str().to_owned()));
    v
}

#[test]
fn fifo_segment_found_by_verify_is_damage_and_the_rest_is_checked() {
    let tmp = tempfile::tempdir().unwrap();
    let d = partition(tmp.path(), "t-0");
    // A whole segment whose .log is a FIFO, after the real ones, and a FIFO .index beside a real log.
    let fifo_log = d.join("00000000000000099999.log");
    mkfifo(&fifo_log);
    let fifo_idx = d.join("00000000000000007729.index");
    std::fs::remove_file(&fifo_idx).unwrap();
    mkfifo(&fifo_idx);
    let r = seglog_within(LIMIT, args("verify", &[&d]));
    assert_eq!(r.code, 1, "{}\n{}", r.stdout, r.stderr);
    for f in [&fifo_log, &fifo_idx] {
        let line = format!("{}: a FIFO, not a regular file", f.display());
        assert!(r.stdout.contains(&line), "{line}\n{}", r.stdout);
    }
    // The regular segments were still checked.
    assert!(r.stdout.contains("t-0: 4 segments"), "{}", r.stdout);
    assert!(r.stdout.contains("; 2 problems,"), "{}", r.stdout);

    let j = seglog_within(LIMIT, args("verify", &[Path::new("--json"), &d])).json();
    let kinds: Vec<_> = j["partitions"][0]["problems"].as_array().unwrap().iter().map(|p| p["kind"].clone()).collect();
    assert_eq!(kinds, ["file-type", "file-type"], "{j}");
}

#[test]
fn fifo_given_to_dump_is_an_error_for_that_file_only() {
    let tmp = tempfile::tempdir().unwrap();
    let d = partition(tmp.path(), "t-0");
    let fifo_log = d.join("00000000000000099999.log");
    mkfifo(&fifo_log);
    let fifo_tidx = d.join("00000000000000099999.timeindex");
    mkfifo(&fifo_tidx);
    let good = d.join("00000000000000000000.index");
    let r = seglog_within(LIMIT, args("dump", &[&fifo_log, &good, &fifo_tidx]));
    assert_eq!(r.code, 2, "{}\n{}", r.stdout, r.stderr);
    for f in [&fifo_log, &fifo_tidx] {
        let line = format!("seglog dump: {}: a FIFO, not a regular file", f.display());
        assert!(r.stderr.contains(&line), "{line}\n{}", r.stderr);
    }
    assert!(r.stdout.contains("249 entries checked against the log, 0 mismatches"), "{}", r.stdout);

    // An index whose sibling .log is a FIFO: the entries are printed, not checked.
    let idx = d.join("00000000000000099999.index");
    std::fs::write(&idx, [0, 0, 0, 1, 0, 0, 0, 0]).unwrap();
    let r = seglog_within(LIMIT, args("dump", &[Path::new("--verify-index-only"), &idx]));
    assert_eq!(r.code, 2, "{}\n{}", r.stdout, r.stderr);
    assert!(r.stderr.contains(&format!("{}: a FIFO", fifo_log.display())), "{}", r.stderr);

    let j = seglog_within(LIMIT, args("dump", &[Path::new("--json"), &fifo_log, &good])).json();
    assert!(j["files"][0]["error"].as_str().unwrap().contains("a FIFO, not a regular file"), "{j}");
    assert_eq!(j["files"][1]["entries_checked"], 249);
    assert_eq!(j["errors"], true);
}

#[test]
fn fifo_found_by_index_report_and_rebuild_index_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    for (cmd, ext) in
        [("index-report", "log"), ("index-report", "timeindex"), ("rebuild-index", "log"), ("rebuild-index", "index")]
    {
        let d = partition(tmp.path(), &format!("{cmd}-{ext}-0"));
        let fifo = d.join(format!("00000000000000022964.{ext}"));
        std::fs::remove_file(&fifo).unwrap();
        mkfifo(&fifo);
        let r = seglog_within(LIMIT, args(cmd, &[&d]));
        assert_eq!(r.code, 2, "{cmd} with a FIFO .{ext}:\n{}\n{}", r.stdout, r.stderr);
        let line = format!("{}: a FIFO, not a regular file", fifo.display());
        assert!(r.stderr.contains(&line), "{cmd}: {line}\n{}", r.stderr);
    }
}

#[test]
fn symlinked_segment_file_is_reported_not_followed() {
    let tmp = tempfile::tempdir().unwrap();
    let d = partition(tmp.path(), "t-0");
    let log = d.join("00000000000000007729.log");
    let elsewhere = tmp.path().join("elsewhere.log");
    std::fs::rename(&log, &elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &log).unwrap();
    let what = format!("{}: a symbolic link, not a regular file (not followed", log.display());

    let r = seglog_within(LIMIT, args("verify", &[&d]));
    assert_eq!(r.code, 1, "{}\n{}", r.stdout, r.stderr);
    assert!(r.stdout.contains(&what), "{}", r.stdout);

    let r = seglog_within(LIMIT, args("dump", &[&log]));
    assert_eq!(r.code, 2, "{}\n{}", r.stdout, r.stderr);
    assert!(r.stderr.contains(&what), "{}", r.stderr);

    for cmd in ["index-report", "rebuild-index"] {
        let r = seglog_within(LIMIT, args(cmd, &[&d]));
        assert_eq!(r.code, 2, "{cmd}: {}\n{}", r.stdout, r.stderr);
        assert!(r.stderr.contains(&what), "{cmd}: {}", r.stderr);
    }
}

#[test]
fn socket_and_directory_named_like_segment_files_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let d = partition(tmp.path(), "t-0");
    let sock = d.join("00000000000000015363.timeindex");
    std::fs::remove_file(&sock).unwrap();
    let _listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    let r = seglog_within(LIMIT, args("verify", &[&d]));
    assert_eq!(r.code, 1, "{}\n{}", r.stdout, r.stderr);
    assert!(r.stdout.contains(&format!("{}: a socket, not a regular file", sock.display())), "{}", r.stdout);

    let r = seglog_within(LIMIT, args("dump", &[&sock]));
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains(&format!("{}: a socket, not a regular file", sock.display())), "{}", r.stderr);

    // A directory where a segment file is expected: refused by dump, damage for verify.
    let dir = d.join("00000000000000000000.index");
    std::fs::remove_file(&dir).unwrap();
    std::fs::create_dir(&dir).unwrap();
    let what = format!("{}: a directory, not a regular file", dir.display());
    let r = seglog_within(LIMIT, args("dump", &[&dir]));
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains(&what), "{}", r.stderr);
    let r = seglog_within(LIMIT, args("verify", &[&d]));
    assert_eq!(r.code, 1, "{}\n{}", r.stdout, r.stderr);
    assert!(r.stdout.contains(&what), "{}", r.stdout);
    assert!(r.stdout.contains("; 2 problems,"), "the socket and the directory: {}", r.stdout);
}
