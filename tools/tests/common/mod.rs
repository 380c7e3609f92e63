//! Helpers shared by the `seglog` command tests: where the Kafka fixtures are, running the
//! binary, copying fixture directories to scratch space, and a seglog-written demo directory.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// The repository's `fixtures/` (or `$SEGLOG_FIXTURES`): fails loudly when it is missing, since every test
/// here reads real Kafka files.
pub fn fixtures() -> PathBuf {
    let dir = match std::env::var_os("SEGLOG_FIXTURES") {
        Some(d) => PathBuf::from(d),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures"),
    };
    assert!(
        dir.join("kafka-pinterest").is_dir(),
        "Kafka fixtures not found at {} (set SEGLOG_FIXTURES to the directory holding kafka-pinterest/)",
        dir.display()
    );
    dir
}

pub fn pinterest() -> PathBuf {
    fixtures().join("kafka-pinterest")
}

pub fn ts_common() -> PathBuf {
    pinterest().join("ts-common/log-files/timeindex_test")
}

pub fn ts_consumer(partition: u32) -> PathBuf {
    pinterest().join(format!("ts-consumer/log-files/test_topic_a-{partition}"))
}

pub fn uploader() -> PathBuf {
    pinterest().join("ts-segment-uploader/log_segments/test_topic_a-0")
}

/// What one run of `seglog` did.
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not one JSON document ({e}):\n{}", self.stdout))
    }
}

/// Runs `seglog` with `args` (stdout and stderr are pipes, so no progress bar is drawn).
pub fn seglog<I, S>(args: I) -> Run
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    let out: Output = Command::new(env!("CARGO_BIN_EXE_seglog")).args(args).output().expect("run seglog");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Copies a directory (one level, files only) into `to`, writable.
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_file() {
            let dst = to.join(e.file_name());
            std::fs::copy(e.path(), &dst).unwrap();
            let mut perm = std::fs::metadata(&dst).unwrap().permissions();
            #[allow(clippy::permissions_set_readonly_false)]
            perm.set_readonly(false);
            std::fs::set_permissions(&dst, perm).unwrap();
        }
    }
}

/// A directory written by seglog itself: `seglog demo --dir`, four partitions
/// `interval-<N>-0`. Made once per test binary under Cargo's scratch directory.
pub fn demo_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        // One directory per test binary, replaced on each run, so scratch space stays bounded.
        let exe = std::env::current_exe().expect("test binary path");
        let stem = exe.file_stem().map_or_else(|| "tests".into(), |s| s.to_string_lossy().into_owned());
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("seglog-demo-{stem}"));
        let _ = std::fs::remove_dir_all(&dir);
        let r = seglog([Path::new("demo").as_os_str(), "--dir".as_ref(), dir.as_os_str()]);
        assert_eq!(r.code, 0, "seglog demo failed: {}", r.stderr);
        dir
    })
}

/// Lines of `s` that contain `needle`.
pub fn lines_with<'a>(s: &'a str, needle: &str) -> Vec<&'a str> {
    s.lines().filter(|l| l.contains(needle)).collect()
}

/// Runs `seglog` with `args` under a watchdog: if it has not finished after `limit`, it is killed
/// and the test fails naming the command (a tool that blocks, on a FIFO say, must not hang the
/// test run). stdout and stderr are drained while it runs, so a large output cannot stall it.
pub fn seglog_within<I, S>(limit: std::time::Duration, args: I) -> Run
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    use std::io::Read;
    use std::process::Stdio;
    let args: Vec<std::ffi::OsString> = args.into_iter().map(|a| a.as_ref().to_owned()).collect();
    let mut child = Command::new(env!("CARGO_BIN_EXE_seglog"))
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run seglog");
    let drain = |r: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            if let Some(mut r) = r {
                let _ = r.read_to_end(&mut v);
            }
            v
        })
    };
    let out = drain(child.stdout.take().map(|s| Box::new(s) as Box<dyn Read + Send>));
    let err = drain(child.stderr.take().map(|s| Box::new(s) as Box<dyn Read + Send>));
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait for seglog") {
            break s;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("seglog {args:?} did not finish within {limit:?}: killed (it blocked or ran away)");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    Run {
        code: status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.join().expect("stdout reader")).into_owned(),
        stderr: String::from_utf8_lossy(&err.join().expect("stderr reader")).into_owned(),
    }
}

/// `len` bytes from a seeded generator (splitmix64): the same bytes on every run.
pub fn seeded_bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        out.extend_from_slice(&(z ^ (z >> 31)).to_le_bytes());
    }
    out.truncate(len);
    out
}
