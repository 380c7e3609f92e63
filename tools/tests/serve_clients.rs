//! `seglog serve` against real Kafka clients: kafka-python and confluent-kafka (librdkafka) from
//! PyPI, kcat from Debian. They produce (plain, every codec, idempotent, acks 0/1/all, and in
//! transactions: committed, aborted, one left open), the server is stopped with SIGTERM and
//! started again on the same directory, they consume (from the beginning, from an offset, from a
//! time, read committed and uncommitted), a topic is deleted, and `seglog verify` passes on the
//! files afterwards.
//!
//! `.ci/run` installs the clients and sets SEGLOG_REQUIRE_CLIENTS=1, which turns a missing client
//! into a failure; elsewhere the test says what is missing and passes without them.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use common::*;

/// A `seglog serve` process and the address it listens on.
struct Server {
    child: Child,
    addr: String,
    /// Its standard output, read to the end at the stop (a closed pipe would kill it with SIGPIPE
    /// when it says it stopped).
    stdout: BufReader<std::process::ChildStdout>,
}

impl Server {
    fn start(dir: &Path) -> Server {
        Server::start_with(dir, &[])
    }

    fn start_with(dir: &Path, args: &[&str]) -> Server {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_seglog"));
        cmd.args(["serve", "--dir"]).arg(dir).args(["--listen", "127.0.0.1:0"]).args(args);
        if let Ok(mode) = std::env::var("SEGLOG_IO_MODE") {
            cmd.args(["--io-mode", &mode]);
        }
        let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn().expect("start seglog serve");
        let mut line = String::new();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        stdout.read_line(&mut line).unwrap();
        let addr = line
            .strip_prefix("seglog serve: listening on ")
            .and_then(|r| r.split_whitespace().next())
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_string();
        Server { child, addr, stdout }
    }

    /// SIGTERM, and the clean stop it must lead to.
    fn stop(mut self) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut self.stdout, &mut rest).unwrap();
        let status = self.child.wait().unwrap();
        assert!(status.success(), "seglog serve exited with {status}");
        assert!(rest.contains("stopped cleanly"), "{rest}");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether the clients are here; without them the test is skipped unless CI requires them.
fn clients_present() -> bool {
    let python = Command::new("python3").args(["-c", "import kafka, confluent_kafka"]).output();
    let kcat = Command::new("kcat").arg("-V").output();
    let missing: Vec<&str> = [
        ("python3 with kafka-python and confluent-kafka", python.is_ok_and(|o| o.status.success())),
        ("kcat", kcat.is_ok_and(|o| o.status.success())),
    ]
    .into_iter()
    .filter(|(_, ok)| !ok)
    .map(|(what, _)| what)
    .collect();
    if missing.is_empty() {
        return true;
    }
    assert!(
        std::env::var_os("SEGLOG_REQUIRE_CLIENTS").is_none(),
        "SEGLOG_REQUIRE_CLIENTS is set but these are missing: {missing:?}"
    );
    eprintln!("skipped: missing {missing:?} (pip install kafka-python confluent-kafka; apt-get install kcat)");
    false
}

fn python(step: &str, addr: &str) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients/clients.py");
    let out = Command::new("python3").arg(script).args([step, addr]).output().unwrap();
    assert!(
        out.status.success(),
        "clients.py {step}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn kcat(args: &[&str], stdin: &str) -> String {
    let mut child = Command::new("kcat")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "kcat {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn kafka_clients_produce_restart_and_consume() {
    if !clients_present() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let lines: String = (0..200).map(|i| format!("key{i}:value {i} {}\n", "y".repeat(i % 50))).collect();

    let server = Server::start(&dir);
    python("produce", &server.addr);
    // kcat (librdkafka), snappy, keys split at ':'; the topic is created on first use.
    kcat(&["-P", "-b", &server.addr, "-t", "kcat-lines", "-K:", "-z", "snappy"], &lines);
    let listing = kcat(&["-L", "-b", &server.addr, "-t", "kcat-lines"], "");
    assert!(listing.contains("topic \"kcat-lines\" with 1 partitions") && listing.contains("leader 0"), "{listing}");
    server.stop();

    let server = Server::start(&dir);
    python("consume", &server.addr);
    let read = kcat(&["-C", "-b", &server.addr, "-t", "kcat-lines", "-o", "beginning", "-e", "-f", "%k:%s\n"], "");
    assert_eq!(read, lines, "kcat read back something else");
    let from = kcat(&["-C", "-b", &server.addr, "-t", "kcat-lines", "-o", "150", "-e", "-f", "%o %k\n"], "");
    let want: String = (150..200).map(|i| format!("{i} key{i}\n")).collect();
    assert_eq!(from, want);
    server.stop();

    assert!(!dir.join("kp-timed-0").exists(), "a deleted topic's directory");
    // The files the clients' batches went into are whole and their indexes right.
    let v = seglog([std::ffi::OsStr::new("verify"), dir.as_os_str()]);
    assert_eq!(v.code, 0, "{}\n{}", v.stdout, v.stderr);
    assert!(v.stdout.contains("0 problems"), "{}", v.stdout);
}

/// `--discard-produce` (a bench build's, for scripts/serve-load.py's pass over the wire alone):
/// the producer is told its records are stored, and nothing is.
#[cfg(feature = "bench")]
#[test]
fn discard_produce_answers_without_storing() {
    if !clients_present() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_with(dir.path(), &["--discard-produce"]);
    let lines: String = (0..50).map(|i| format!("record {i}\n")).collect();
    // kcat -P fails when a delivery is not acknowledged (within 10 s, not librdkafka's 300).
    kcat(&["-P", "-b", &server.addr, "-t", "discarded", "-X", "acks=all", "-X", "message.timeout.ms=10000"], &lines);
    let read = kcat(&["-C", "-b", &server.addr, "-t", "discarded", "-o", "beginning", "-e"], "");
    assert_eq!(read, "", "records were stored");
    server.stop();
    let log = dir.path().join("discarded-0").join(format!("{:020}.log", 0));
    assert_eq!(std::fs::metadata(&log).unwrap().len(), 0, "{}", log.display());
}
