//! Whether a directory the read-only commands look at is live: owned right now by an engine, a
//! `Log`, a writing command or a Kafka broker (its lock is held). They read it anyway, without
//! taking or disturbing any lock (`/proc/locks` is only read), and say so, since files may change
//! while they are read.

use std::path::Path;

/// A one-line note when `path` (a file, a partition directory or a log directory) or the
/// directory above it is locked, naming the lock and its holder; `None` otherwise.
pub fn live_note(path: &Path) -> Option<String> {
    let dir = if path.is_dir() { path } else { path.parent()? };
    let owner = [dir, seglog::io::lock::log_dir_of(dir)].into_iter().find_map(seglog::io::lock::live_owner);
    let (lock, pid) = owner?;
    let who = if pid == 0 { "another process".to_string() } else { format!("process {pid}") };
    Some(format!(
        "note: {} is live: {} is locked by {who} (an engine, a log, a writing command or a broker); \
         its files may change while they are read",
        dir.display(),
        lock.display()
    ))
}

/// Prints [`live_note`] for the first of `paths` that is live, on stderr (stdout stays the
/// command's output, JSON included).
pub fn warn_if_live<'a>(paths: impl IntoIterator<Item = &'a Path>) {
    if let Some(note) = paths.into_iter().find_map(live_note) {
        eprintln!("{note}");
    }
}
