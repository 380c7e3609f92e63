//! `seglog --help`: every subcommand documents its flags and the exit codes.

mod common;

use common::*;

#[test]
fn every_subcommand_documents_flags_and_exit_codes() {
    let top = seglog(["--help"]);
    assert_eq!(top.code, 0);
    for sub in ["demo", "dump", "verify", "index-report", "rebuild-index", "capacity", "serve"] {
        assert!(top.stdout.contains(sub), "{sub} missing from --help");
    }
    assert!(top.stdout.contains("Exit codes:"));
    for (sub, flags) in [
        (
            "dump",
            &[
                "--deep-iteration",
                "--print-data-log",
                "--skip-record-metadata",
                "--max-bytes",
                "--verify-index-only",
                "--index-sanity-check",
                "--json",
            ][..],
        ),
        ("verify", &["--deep", "--json", "--quiet", "--all"][..]),
        (
            "serve",
            &[
                "--dir",
                "--listen",
                "--io-mode",
                "--shards",
                "--partitions",
                "--durability",
                "--no-auto-create",
                "--max-request-bytes",
                "--max-connections",
                "--network-threads",
                "--advertise",
            ][..],
        ),
        ("index-report", &["--interval", "--plot", "--every", "--json"][..]),
        ("rebuild-index", &["--index-interval-bytes", "--write", "--strict-flavour", "--json"][..]),
        (
            "capacity",
            &[
                "--partitions",
                "--data-bytes",
                "--total",
                "--segment-bytes",
                "--retention-ms",
                "--retention-bytes",
                "--produce-bytes-per-sec",
                "--avg-batch-bytes",
                "--index-interval-bytes",
                "--json",
            ][..],
        ),
    ] {
        let r = seglog([sub, "--help"]);
        assert_eq!(r.code, 0, "{sub}");
        assert!(r.stdout.contains("Exit codes:") && r.stdout.contains("2  usage error"), "{sub}");
        for f in flags {
            let line = r.stdout.lines().skip_while(|l| !l.starts_with("Options:")).find(|l| {
                let t = l.trim_end().trim_start();
                t == *f
                    || t.starts_with(&format!("{f} "))
                    || (t.len() > 4 && t.starts_with('-') && t[4..].starts_with(&format!("{f} ")))
            });
            let line = line.unwrap_or_else(|| panic!("{sub} --help lacks {f}:\n{}", r.stdout));
            // The description follows the flag (and its value name) on the same line, or on the
            // next line when the flag column is wide.
            let rest = &line[line.find(f).unwrap() + f.len()..];
            let rest = rest.trim_start();
            let rest = if rest.starts_with('<') { rest.split_once('>').map_or("", |(_, r)| r) } else { rest };
            let next = r.stdout.lines().skip_while(|l| *l != line).nth(1).unwrap_or("");
            let after = if rest.trim().is_empty() { next.to_owned() } else { rest.to_owned() };
            assert!(!after.trim().is_empty(), "{sub} {f} has no description");
        }
    }
    let r = seglog(["verify"]);
    assert_eq!(r.code, 2, "a missing argument is a usage error");
}

/// `seglog bench` is the workload benchmark in a build with the cargo feature `bench`; without it
/// (the default) it takes any arguments and says how to get it.
#[test]
fn bench_runs_only_with_the_feature_and_otherwise_says_how_to_get_it() {
    let r = seglog(["bench", "--help"]);
    if cfg!(feature = "bench") {
        assert_eq!(r.code, 0, "{}", r.stderr);
        assert!(r.stdout.contains("--profile") && r.stdout.contains("Exit codes:"), "{}", r.stdout);
        return;
    }
    for args in [&["bench", "--help"][..], &["bench"], &["bench", "--profile", "quick", "--json"]] {
        let r = seglog(args);
        assert_eq!(r.code, 2, "{args:?}: {}", r.stdout);
        assert!(r.stdout.is_empty(), "{args:?}: {}", r.stdout);
        assert!(
            r.stderr.contains("built without the workload benchmark")
                && r.stderr.contains("cargo build --release -p seglog-tools --features bench"),
            "{args:?}: {}",
            r.stderr
        );
    }
    let top = seglog(["--help"]);
    assert!(top.stdout.contains("not in this build"), "{}", top.stdout);
}
