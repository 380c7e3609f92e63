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
