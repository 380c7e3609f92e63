//! Helpers shared by the integration tests: where the real Kafka fixtures are, which partition
//! directories and segments they hold, and how to get a writable copy of them.
//!
//! Fixtures live in the repository's `fixtures/` (`<tests crate>/../fixtures`), or wherever the
//! environment variable `SEGLOG_FIXTURES` points. A missing fixture directory is a test failure with a message saying where it was looked for, never a silent pass.

pub mod crash;
pub mod loopfs;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use seglog::format::filename::{FileKind, FileSuffix, SegmentFileName};

/// The storage of the I/O mode `SEGLOG_IO_MODE` names (`direct`, `buffered`, `sync`; CI runs the
/// suite once per mode), plain positioned reads and writes when it names none. The library reads
/// no environment variable: tests and tools choose the mode.
pub fn test_storage() -> std::sync::Arc<dyn seglog::io::Storage> {
    static FROM_ENV: std::sync::OnceLock<Option<std::sync::Arc<dyn seglog::io::Storage>>> = std::sync::OnceLock::new();
    let env = FROM_ENV.get_or_init(|| Some(seglog::io::storage_for_mode(test_io_mode()?).storage));
    env.clone().unwrap_or_else(seglog::io::default_storage)
}

/// The I/O mode `SEGLOG_IO_MODE` names, if any (for engines the tests open).
pub fn test_io_mode() -> Option<seglog::IoMode> {
    std::env::var("SEGLOG_IO_MODE").ok().and_then(|m| m.parse().ok())
}

/// Runs `send` while the shard of `tp` is held in a `with_log` call, entered before `send` runs:
/// what `send` queues reaches the shard in one turn, whatever the machine's load. (Sent with
/// the hold, the first requests could share its turn on a shard slow to wake.)
pub fn while_held<T>(engine: &seglog::Engine, tp: &seglog::TopicPartition, send: impl FnOnce() -> T) -> T {
    let (entered, held) = std::sync::mpsc::channel();
    let (release, released) = std::sync::mpsc::channel::<()>();
    // Dropping `release` (a panic in `send`) lets the shard go too.
    let hold = engine.with_log(tp, move |_| {
        let _ = entered.send(());
        let _ = released.recv();
        Ok(())
    });
    held.recv().expect("the shard runs the closure");
    let sent = send();
    release.send(()).expect("the closure waits");
    hold.wait().expect("hold");
    sent
}

/// `LogOptions::default()` on [`test_storage`].
pub fn log_options() -> seglog::log::LogOptions {
    seglog::log::LogOptions { storage: test_storage(), ..Default::default() }
}

/// The environment variable that overrides the fixture root.
pub const FIXTURES_ENV: &str = "SEGLOG_FIXTURES";

/// The real-broker segments from pinterest/tiered-storage, relative to the fixture root.
pub const KAFKA_PINTEREST: &str = "kafka-pinterest";

/// The five partition directories of [`KAFKA_PINTEREST`], relative to it, in a fixed order.
pub const KAFKA_PINTEREST_PARTITIONS: [&str; 5] = [
    "ts-common/log-files/timeindex_test",
    "ts-consumer/log-files/test_topic_a-0",
    "ts-consumer/log-files/test_topic_a-1",
    "ts-consumer/log-files/test_topic_a-2",
    "ts-segment-uploader/log_segments/test_topic_a-0",
];

/// The fixture root: `$SEGLOG_FIXTURES` if set, else the repository's `fixtures/`.
///
/// # Panics
/// When the directory does not exist, naming the path tried and how to override it.
pub fn fixtures_dir() -> PathBuf {
    let (dir, origin) = match std::env::var_os(FIXTURES_ENV) {
        Some(v) if !v.is_empty() => (PathBuf::from(v), format!("${FIXTURES_ENV}")),
        _ => (Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures"), "<tests crate>/../fixtures".to_string()),
    };
    assert!(
        dir.is_dir(),
        "fixture directory {} (from {origin}) is missing: it is part of the repository \
         (fixtures/); or set {FIXTURES_ENV} to the fixtures directory",
        dir.display()
    );
    dir
}

/// A fixture set under the root (e.g. [`KAFKA_PINTEREST`]); panics with a clear message if absent.
pub fn fixture(name: &str) -> PathBuf {
    let dir = fixtures_dir().join(name);
    assert!(dir.is_dir(), "fixture set {} is missing", dir.display());
    dir
}

/// Every directory under `root` (itself included) that holds at least one `.log` segment file,
/// sorted by path.
pub fn list_partition_dirs(root: &Path) -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let entries = fs::read_dir(dir).unwrap_or_else(|e| panic!("read_dir {}: {e}", dir.display()));
        let mut has_log = false;
        for ent in entries {
            let ent = ent.unwrap_or_else(|e| panic!("read_dir {}: {e}", dir.display()));
            let path = ent.path();
            if path.is_dir() {
                walk(&path, out);
            } else if is_live_log_file(&ent.file_name().to_string_lossy()) {
                has_log = true;
            }
        }
        if has_log {
            out.push(dir.to_path_buf());
        }
    }
    let mut out = Vec::new();
    walk(root, &mut out);
    out.sort();
    out
}

fn is_live_log_file(name: &str) -> bool {
    matches!(
        SegmentFileName::parse(name),
        Ok(Some(SegmentFileName { kind: FileKind::Log, suffix: FileSuffix::None, .. }))
    )
}

/// The base offsets of the live `.log` files in a partition directory, ascending.
pub fn segment_base_offsets(dir: &Path) -> Vec<i64> {
    let mut out: Vec<i64> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read_dir {}: {e}", dir.display()))
        .map(|ent| ent.unwrap_or_else(|e| panic!("read_dir {}: {e}", dir.display())))
        .filter_map(|ent| match SegmentFileName::parse(&ent.file_name().to_string_lossy()) {
            Ok(Some(n)) if n.kind == FileKind::Log && n.suffix == FileSuffix::None => Some(n.base_offset),
            _ => None,
        })
        .collect();
    out.sort_unstable();
    out
}

/// Copies the regular files of `src` whose names pass `keep` into `dst` (which must exist), made
/// writable by the owner (fixtures are often checked out read-only, and the engine opens segment
/// files read-write). Returns the names copied, sorted.
pub fn copy_files(src: &Path, dst: &Path, keep: impl Fn(&str) -> bool) -> Vec<String> {
    let mut names = Vec::new();
    for ent in fs::read_dir(src).unwrap_or_else(|e| panic!("read_dir {}: {e}", src.display())) {
        let ent = ent.unwrap_or_else(|e| panic!("read_dir {}: {e}", src.display()));
        let name = ent.file_name().to_string_lossy().into_owned();
        if !ent.path().is_file() || !keep(&name) {
            continue;
        }
        let to = dst.join(&name);
        fs::copy(ent.path(), &to).unwrap_or_else(|e| panic!("copy {} to {}: {e}", ent.path().display(), to.display()));
        let mut perm = fs::metadata(&to).unwrap_or_else(|e| panic!("stat {}: {e}", to.display())).permissions();
        perm.set_mode(perm.mode() | 0o600);
        fs::set_permissions(&to, perm).unwrap_or_else(|e| panic!("chmod {}: {e}", to.display()));
        names.push(name);
    }
    names.sort();
    names
}

/// A writable copy of a whole partition directory's files in a new temporary directory.
pub fn copy_dir_to_temp(src: &Path) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().expect("create a temporary directory");
    copy_files(src, tmp.path(), |_| true);
    tmp
}

/// Copies one segment's files (`.log`, `.index`, `.timeindex`, `.txnindex` when present) into
/// `dst`. Returns the names copied.
pub fn copy_segment_files(src: &Path, base_offset: i64, dst: &Path) -> Vec<String> {
    copy_files(src, dst, |name| {
        matches!(
            SegmentFileName::parse(name),
            Ok(Some(n)) if n.base_offset == base_offset
                && n.suffix == FileSuffix::None
                && n.kind != FileKind::Snapshot
        )
    })
}

/// Reads a whole file, naming it on failure.
pub fn read_file(path: &Path) -> Vec<u8> {
    fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}
