//! What is in a directory, by Kafka's naming rules: which directories are partition
//! directories, which files form each segment, which are Kafka's sidecar files, and which are
//! neither. A directory given to a tool may be a partition directory or any directory above
//! partition directories (a log directory, or a tree of them like the fixtures).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use seglog::format::checkpoint as cp;
use seglog::format::filename::{self, FileKind, FileSuffix, SegmentFileName};

/// How deep below the given directory partition directories are looked for.
const MAX_DEPTH: usize = 8;

/// The checkpoint and marker files Kafka keeps, by exact name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CheckpointKind {
    /// `recovery-point-offset-checkpoint`, `log-start-offset-checkpoint`,
    /// `replication-offset-checkpoint`, `cleaner-offset-checkpoint`.
    Offsets,
    LeaderEpoch,
    CleanShutdown,
    PartitionMetadata,
}

/// What a file is, from its name alone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FileClass {
    /// A segment file (`<20 digits>.<kind>[.deleted|.cleaned|.swap]`).
    Segment(SegmentFileName),
    /// A segment-like name whose stem is not a valid offset (`abc.log`).
    BadSegmentName(String),
    Checkpoint(CheckpointKind),
    /// A file Kafka writes that the tools do not check (`quorum-state`, `meta.properties`,
    /// `.lock`, KRaft `.checkpoint` snapshots, `.tmp` leftovers), with what it is.
    KnownOther(&'static str),
    Unknown,
}

pub fn classify(name: &str) -> FileClass {
    match name {
        cp::RECOVERY_POINT_OFFSET_CHECKPOINT_FILE
        | cp::LOG_START_OFFSET_CHECKPOINT_FILE
        | cp::REPLICATION_OFFSET_CHECKPOINT_FILE
        | cp::CLEANER_OFFSET_CHECKPOINT_FILE => return FileClass::Checkpoint(CheckpointKind::Offsets),
        cp::LEADER_EPOCH_CHECKPOINT_FILE => return FileClass::Checkpoint(CheckpointKind::LeaderEpoch),
        cp::CLEAN_SHUTDOWN_FILE => return FileClass::Checkpoint(CheckpointKind::CleanShutdown),
        cp::PARTITION_METADATA_FILE => return FileClass::Checkpoint(CheckpointKind::PartitionMetadata),
        "quorum-state" => return FileClass::KnownOther("KRaft quorum state"),
        "meta.properties" => return FileClass::KnownOther("broker metadata"),
        ".lock" => return FileClass::KnownOther("log directory lock"),
        "bootstrap.checkpoint" => return FileClass::KnownOther("KRaft bootstrap checkpoint"),
        _ => {}
    }
    match SegmentFileName::parse(name) {
        Ok(Some(s)) => return FileClass::Segment(s),
        Ok(None) => {}
        Err(_) => return FileClass::BadSegmentName(name.to_owned()),
    }
    if name.ends_with(".checkpoint") || name.ends_with(".checkpoint.deleted") {
        return FileClass::KnownOther("KRaft snapshot");
    }
    if name.ends_with(cp::TMP_FILE_SUFFIX) {
        return FileClass::KnownOther("temporary file of an interrupted checkpoint write");
    }
    FileClass::Unknown
}

/// The files of one segment that exist.
#[derive(Clone, Debug, Default)]
pub struct SegmentFiles {
    pub base_offset: i64,
    pub log: Option<PathBuf>,
    pub index: Option<PathBuf>,
    pub time_index: Option<PathBuf>,
    pub txn_index: Option<PathBuf>,
}

impl SegmentFiles {
    /// Refuses the segment unless each of its files is a regular file (by `lstat`: a symbolic
    /// link is refused, not followed), naming the first that is not. For code that hands the
    /// paths to the engine, which opens them itself.
    pub fn check_regular(&self) -> Result<(), String> {
        for f in [&self.log, &self.index, &self.time_index, &self.txn_index].into_iter().flatten() {
            crate::files::check_regular(f).map_err(|e| format!("{}: {e}", f.display()))?;
        }
        Ok(())
    }
}

/// A partition directory and what it holds.
#[derive(Clone, Debug, Default)]
pub struct PartitionDir {
    pub path: PathBuf,
    /// `(topic, partition)` when the directory name is `<topic>-<partition>`.
    pub topic_partition: Option<(String, i32)>,
    /// Live segments by base offset (those with a `.log`, and orphan index files).
    pub segments: BTreeMap<i64, SegmentFiles>,
    /// Sidecar files to parse (leader-epoch-checkpoint, partition.metadata, ...).
    pub checkpoints: Vec<(PathBuf, CheckpointKind)>,
    /// Observations that are not damage (unknown files, `.deleted` leftovers, ...).
    pub notes: Vec<String>,
    /// Producer-state `.snapshot` files.
    pub snapshots: Vec<PathBuf>,
}

impl PartitionDir {
    /// Segments that have a `.log` file.
    pub fn log_segments(&self) -> impl Iterator<Item = &SegmentFiles> {
        self.segments.values().filter(|s| s.log.is_some())
    }
}

/// Everything found under a directory.
#[derive(Clone, Debug, Default)]
pub struct Discovery {
    pub partitions: Vec<PartitionDir>,
    /// Log-directory level checkpoint files (recovery points, ...).
    pub checkpoints: Vec<(PathBuf, CheckpointKind)>,
    pub notes: Vec<String>,
}

fn sorted_entries(dir: &Path) -> std::io::Result<Vec<(String, PathBuf, bool)>> {
    let mut v = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let path = e.path();
        let is_dir = path.is_dir();
        v.push((e.file_name().to_string_lossy().into_owned(), path, is_dir));
    }
    v.sort();
    Ok(v)
}

/// True when `dir` directly holds segment files.
fn holds_segments(entries: &[(String, PathBuf, bool)]) -> bool {
    entries.iter().any(|(n, _, d)| {
        !*d && matches!(classify(n), FileClass::Segment(s) if matches!(s.kind, FileKind::Log | FileKind::Index | FileKind::TimeIndex))
    })
}

/// Reads one partition directory.
pub fn read_partition_dir(dir: &Path) -> std::io::Result<PartitionDir> {
    let entries = sorted_entries(dir)?;
    let mut p = PartitionDir {
        path: dir.to_path_buf(),
        topic_partition: dir.file_name().and_then(|n| filename::parse_partition_dir(&n.to_string_lossy())),
        ..Default::default()
    };
    for (name, path, is_dir) in entries {
        let class = classify(&name);
        // A directory named like a segment or sidecar file stays where the file is expected, so
        // that the tools report it as not a regular file when they come to read it.
        let named_like_a_file = matches!(class, FileClass::Segment(ref s) if s.suffix == FileSuffix::None)
            || matches!(class, FileClass::Checkpoint(_));
        if is_dir && !named_like_a_file {
            p.notes.push(format!("{}: a directory inside a partition directory, not looked at", path.display()));
            continue;
        }
        match class {
            FileClass::Segment(s) if s.suffix != FileSuffix::None => {
                let what = match s.suffix {
                    FileSuffix::Deleted => "scheduled for deletion; Kafka deletes it at the next load",
                    FileSuffix::Cleaned => "log-cleaner output in progress; Kafka deletes it at the next load",
                    FileSuffix::Swap => "log-cleaner swap file; Kafka renames it into place at the next load",
                    FileSuffix::None => unreachable!(),
                };
                p.notes.push(format!("{}: {what}, not checked", path.display()));
            }
            FileClass::Segment(s) => {
                let seg = p
                    .segments
                    .entry(s.base_offset)
                    .or_insert_with(|| SegmentFiles { base_offset: s.base_offset, ..Default::default() });
                match s.kind {
                    FileKind::Log => seg.log = Some(path),
                    FileKind::Index => seg.index = Some(path),
                    FileKind::TimeIndex => seg.time_index = Some(path),
                    FileKind::TxnIndex => seg.txn_index = Some(path),
                    FileKind::Snapshot => p.snapshots.push(path),
                }
            }
            FileClass::BadSegmentName(n) => p.notes.push(format!(
                "{}: named like a segment file but {n:?} has no 20-digit offset; Kafka would fail to load it",
                path.display()
            )),
            FileClass::Checkpoint(k) => p.checkpoints.push((path, k)),
            FileClass::KnownOther(_) => {}
            FileClass::Unknown => p.notes.push(format!("{}: unknown file (not Kafka's), ignored", path.display())),
        }
    }
    // Snapshots-only entries are not segments.
    p.segments.retain(|_, s| s.log.is_some() || s.index.is_some() || s.time_index.is_some() || s.txn_index.is_some());
    for s in p.segments.values() {
        if s.log.is_none() {
            for f in [&s.index, &s.time_index, &s.txn_index].into_iter().flatten() {
                p.notes.push(format!("{}: index file without a .log (orphan); Kafka deletes it at load", f.display()));
            }
        }
    }
    if p.topic_partition.is_none() {
        p.notes.push(format!(
            "{}: the directory name is not <topic>-<partition>; Kafka would not load it as a partition",
            dir.display()
        ));
    }
    Ok(p)
}

/// Finds partition directories at or below `root`.
pub fn discover(root: &Path) -> std::io::Result<Discovery> {
    let meta =
        std::fs::metadata(root).map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", root.display())))?;
    if !meta.is_dir() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{} is not a directory", root.display()),
        ));
    }
    let mut d = Discovery::default();
    walk(root, 0, &mut d)?;
    Ok(d)
}

fn walk(dir: &Path, depth: usize, d: &mut Discovery) -> std::io::Result<()> {
    let entries = sorted_entries(dir).map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", dir.display())))?;
    let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    // A directory named <topic>-<partition> is a partition even without segments, except the
    // directory given when it has subdirectories (a log directory such as `/data/kafka-1`).
    let named_like_partition =
        filename::parse_partition_dir(&name).is_some() && (depth > 0 || !entries.iter().any(|(_, _, is_dir)| *is_dir));
    if holds_segments(&entries) || named_like_partition {
        d.partitions.push(read_partition_dir(dir)?);
        return Ok(());
    }
    for suffix in [filename::DELETE_DIR_SUFFIX, filename::FUTURE_DIR_SUFFIX, filename::STRAY_DIR_SUFFIX] {
        if depth > 0 && name.ends_with(suffix) {
            d.notes.push(format!(
                "{}: a {suffix} directory (deleted, moving or stray replica), not checked",
                dir.display()
            ));
            return Ok(());
        }
    }
    for (n, path, is_dir) in entries {
        if is_dir {
            if depth < MAX_DEPTH {
                walk(&path, depth + 1, d)?;
            }
            continue;
        }
        match classify(&n) {
            FileClass::Checkpoint(k) => d.checkpoints.push((path, k)),
            FileClass::KnownOther(_) => {}
            _ => d.notes.push(format!("{}: unknown file (not Kafka's), ignored", path.display())),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_kafka_names() {
        assert!(matches!(classify("00000000000000000000.log"), FileClass::Segment(_)));
        assert!(
            matches!(classify("00000000000000000000.log.deleted"), FileClass::Segment(s) if s.suffix == FileSuffix::Deleted)
        );
        assert_eq!(classify("leader-epoch-checkpoint"), FileClass::Checkpoint(CheckpointKind::LeaderEpoch));
        assert_eq!(classify("00000000000000000000.wm"), FileClass::Unknown);
        assert!(matches!(classify("abc.log"), FileClass::BadSegmentName(_)));
        assert!(matches!(classify("00000000000000000100-0000000001.checkpoint"), FileClass::KnownOther(_)));
    }
}
