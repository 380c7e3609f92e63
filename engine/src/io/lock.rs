//! One owner per directory. A log directory (the engine's data directory) is owned through
//! Kafka's own lock: `.lock` in it, write-locked with an fcntl record lock over the whole file,
//! which is what a Kafka broker takes (`FileChannel.tryLock`). seglog takes the open-file-
//! description flavour of that lock (`F_OFD_SETLK`), which conflicts with a broker's classic POSIX
//! lock and, unlike it, also with a second owner inside the same process. A partition directory is
//! owned through `flock` on the directory itself (no file is added to it), taken by every
//! [`crate::log::Log`]; a `Log` opened on its own also read-locks the `.lock` of the log directory
//! above it, when there is one, so it cannot open a partition of a directory an engine or a broker
//! owns, and they cannot start while it is open. It creates no `.lock` (nothing outside the
//! directory it was given), so where the log directory has none (Kafka deletes its own at a clean
//! shutdown) a broker starting later does not see the `Log`; an engine does (it tries each
//! partition's lock).
//!
//! Locks are advisory: they keep seglog processes, tools and Kafka brokers apart, not programs that
//! ignore them. Each is released when its guard is dropped (or the process dies).
//!
//! Who holds a lock is read from `/proc/locks` (matched by device and inode), which never takes or
//! disturbs a lock: read-only commands use `lock_holder` to say a directory is live.
use std::collections::HashSet;
use std::ffi::OsString;
use std::fs::File;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use nix::errno::Errno;
use nix::fcntl::{fcntl, FcntlArg, Flock, FlockArg, OFlag};

use super::Storage;
use crate::error::{Error, Result};

/// The name of Kafka's log-directory lock file.
pub(crate) const LOCK_FILE: &str = ".lock";

/// Which lock [`crate::io::Storage::lock`] takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LockKind {
    /// Kafka's `.lock` of a log directory, exclusively (created if missing): the engine and every
    /// command that writes a log directory.
    LogDir,
    /// A shared (read) lock on the `.lock` of a log directory, only if the file exists (nothing is
    /// created): a partition opened on its own. Conflicts with [`LockKind::LogDir`] holders.
    LogDirShared,
    /// A partition directory itself, exclusively (`flock`): every open [`crate::log::Log`].
    Partition,
}

/// A held lock: released when dropped.
#[derive(Debug)]
pub struct LockGuard {
    path: PathBuf,
    kind: LockKind,
    /// Under an exclusive log-directory lock: the partition directories (by name) open under it
    /// in this process, so that logs sharing the lock still have one owner each.
    claims: Mutex<HashSet<OsString>>,
    _held: Box<dyn std::fmt::Debug + Send + Sync>,
}

impl LockGuard {
    pub fn new(path: &Path, kind: LockKind, held: impl std::fmt::Debug + Send + Sync + 'static) -> LockGuard {
        LockGuard { path: path.to_path_buf(), kind, claims: Mutex::new(HashSet::new()), _held: Box::new(held) }
    }
    /// The directory locked (a log directory for the `LogDir` kinds).
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// One partition's claim under a held log-directory lock, given back when dropped.
#[derive(Debug)]
struct Claim {
    guard: Arc<LockGuard>,
    name: OsString,
}

impl Drop for Claim {
    fn drop(&mut self) {
        self.guard.claims.lock().unwrap_or_else(|p| p.into_inner()).remove(&self.name);
    }
}

/// What makes a [`crate::log::Log`] the only owner of its partition directory, held as long as
/// the log lives.
#[derive(Debug)]
pub struct PartitionLocks {
    _own: Option<LockGuard>,
    _log_dir: Option<Arc<LockGuard>>,
    _claim: Option<Claim>,
}

/// The log directory a partition directory is in (`.` for a bare relative name).
pub fn log_dir_of(dir: &Path) -> &Path {
    match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// Makes the caller the only owner of the partition directory `dir`, creating it (and fsyncing
/// the log directory) when `create` and it is missing; nothing is created when it is refused.
///
/// - `held`, the exclusive lock of `dir`'s log directory (the engine's): the partition is claimed
///   in it (a second log on it in this process is refused), and `dir`'s own lock is only tried,
///   to refuse a partition a log opened on its own holds, not kept: a descriptor per partition is
///   what ten thousand partitions cannot spare.
/// - alone: a shared lock on the log directory's `.lock` when it has one, then `dir`'s own lock,
///   held; then the log directory's lock is looked at again if it had none, so an engine that
///   started meanwhile is seen (it locks its directory before it tries a partition's lock).
///
/// # Panics
/// When `held` is not an exclusive lock of `dir`'s log directory (a caller bug).
pub fn lock_partition(
    storage: &dyn Storage,
    dir: &Path,
    held: Option<Arc<LockGuard>>,
    create: bool,
) -> Result<PartitionLocks> {
    let log_dir = log_dir_of(dir);
    let make = |storage: &dyn Storage| -> Result<()> {
        if create && !storage.exists(dir) {
            storage.create_dir_all(dir)?;
            storage.sync_dir(log_dir)?;
        }
        Ok(())
    };
    if let Some(held) = held {
        assert!(
            held.kind == LockKind::LogDir && held.path == log_dir,
            "the lock passed for {} is {:?} of {}, not the log directory's exclusive lock",
            dir.display(),
            held.kind,
            held.path.display()
        );
        let name = dir.file_name().map(|n| n.to_os_string()).unwrap_or_default();
        if !held.claims.lock().unwrap_or_else(|p| p.into_inner()).insert(name.clone()) {
            return Err(Error::Locked { path: dir.to_path_buf(), holder: Some(std::process::id()) });
        }
        let claim = Claim { guard: held.clone(), name };
        make(storage)?;
        drop(storage.lock(dir, LockKind::Partition)?);
        return Ok(PartitionLocks { _own: None, _log_dir: Some(held), _claim: Some(claim) });
    }
    let mut shared = storage.lock(log_dir, LockKind::LogDirShared)?;
    make(storage)?;
    let own = storage.lock(dir, LockKind::Partition)?;
    if shared.is_none() {
        shared = storage.lock(log_dir, LockKind::LogDirShared)?;
    }
    Ok(PartitionLocks { _own: own, _log_dir: shared.map(Arc::new), _claim: None })
}

/// An open file or directory holding a lock, released when dropped. The release is explicit
/// (`F_UNLCK`, `LOCK_UN`), not left to the close: a child process forked by another thread holds
/// a copy of the descriptor until its exec closes it, and with it the lock.
#[derive(Debug)]
enum Held {
    /// A `.lock` file under an OFD record lock, released with `F_UNLCK` when dropped.
    Ofd(File),
    /// A partition directory under `flock`: nix's guard releases it with `LOCK_UN` when dropped
    /// (nix panics if that fails, which `LOCK_UN` on a descriptor we own cannot: its errors are
    /// a bad descriptor, a bad operation, or a signal while waiting for a lock).
    Flock { _held: Flock<File> },
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Held::Ofd(file) = self {
            let _ = fcntl(&*file, FcntlArg::F_OFD_SETLK(&whole_file(libc::F_UNLCK)));
        }
    }
}

/// A record lock of `kind` (F_RDLCK, F_WRLCK, F_UNLCK) over the whole file whatever its length
/// (l_start 0, l_len 0); l_pid must be 0 for OFD locks. nix's fcntl takes libc's struct as is
/// (nix has no type of its own for it), hence libc here.
fn whole_file(kind: libc::c_int) -> libc::flock {
    libc::flock {
        l_type: kind as libc::c_short,
        l_whence: libc::SEEK_SET as libc::c_short,
        l_start: 0,
        l_len: 0,
        l_pid: 0,
    }
}

/// Takes `kind` on `path` (a log directory for the `LogDir` kinds, a partition directory for
/// `Partition`) with real system calls, creating a missing `.lock` with `file_mode`; what
/// [`crate::io::Storage::lock`] does on a real filesystem. `Ok(None)` for
/// [`LockKind::LogDirShared`] when the directory has no `.lock`.
pub(crate) fn lock_path(path: &Path, kind: LockKind, file_mode: u32) -> Result<Option<LockGuard>> {
    match kind {
        LockKind::LogDir => {
            let lock = path.join(LOCK_FILE);
            let f = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .mode(file_mode)
                .custom_flags((OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC).bits())
                .open(&lock)
                .map_err(|e| super::std_backend::open_error(&lock, e))?;
            ofd_lock(&f, &lock, libc::F_WRLCK)?;
            // Kafka leaves the file empty and reads nothing from it; seglog notes its process id
            // there, because /proc/locks does not name the holder of an OFD lock.
            let _ = f.set_len(0).and_then(|()| {
                std::os::unix::fs::FileExt::write_all_at(&f, format!("{}\n", std::process::id()).as_bytes(), 0)
            });
            Ok(Some(LockGuard::new(path, kind, Held::Ofd(f))))
        }
        LockKind::LogDirShared => {
            let lock = path.join(LOCK_FILE);
            let f = match std::fs::OpenOptions::new()
                .read(true)
                .custom_flags((OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK).bits())
                .open(&lock)
            {
                Ok(f) => f,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
                // Not ours to judge (unreadable, not a file): no broker can hold it as a lock we
                // could see, so there is nothing to exclude against.
                Err(e) if e.raw_os_error() == Some(Errno::EACCES as i32) => return Ok(None),
                Err(e) => return Err(super::std_backend::open_error(&lock, e)),
            };
            ofd_lock(&f, &lock, libc::F_RDLCK)?;
            Ok(Some(LockGuard::new(path, kind, Held::Ofd(f))))
        }
        LockKind::Partition => {
            let f = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags((OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC).bits())
                .open(path)
                .map_err(|e| match std::fs::symlink_metadata(path) {
                    // O_DIRECTORY is checked before O_NOFOLLOW: a link to a directory gives ENOTDIR.
                    Ok(m) if m.file_type().is_symlink() => {
                        Error::NotRegular { path: path.to_path_buf(), what: "a symbolic link" }
                    }
                    Ok(m) if !m.is_dir() => Error::NotRegular { path: path.to_path_buf(), what: "not a directory" },
                    _ => super::std_backend::open_error(path, e),
                })?;
            let f = match Flock::lock(f, FlockArg::LockExclusiveNonblock) {
                Ok(held) => held,
                Err((f, Errno::EWOULDBLOCK)) => return Err(locked(path, &f)),
                Err((_, e)) => return Err(Error::io("flock", path, e.into())),
            };
            Ok(Some(LockGuard::new(path, kind, Held::Flock { _held: f })))
        }
    }
}

/// `F_OFD_SETLK` of `kind` over the whole file, without waiting.
fn ofd_lock(f: &File, path: &Path, kind: libc::c_int) -> Result<()> {
    match fcntl(f, FcntlArg::F_OFD_SETLK(&whole_file(kind))) {
        Ok(_) => Ok(()),
        Err(Errno::EAGAIN | Errno::EACCES) => Err(locked(path, f)),
        Err(e) => Err(Error::io("fcntl F_OFD_SETLK", path, e.into())),
    }
}

fn locked(path: &Path, f: &File) -> Error {
    let mut holder = f.metadata().ok().and_then(|m| holder_of(m.dev(), m.ino()));
    if holder == Some(0) || holder.is_none() {
        holder = noted_pid(f).or(holder);
    }
    Error::Locked { path: path.to_path_buf(), holder }
}

/// The process id seglog notes in a `.lock` it holds (empty for a Kafka broker's).
fn noted_pid(f: &File) -> Option<u32> {
    let mut buf = [0u8; 16];
    let n = std::os::unix::fs::FileExt::read_at(f, &mut buf, 0).ok()?;
    std::str::from_utf8(&buf[..n]).ok()?.trim().parse().ok()
}

/// Who holds a lock on the file or directory at `path`, read from `/proc/locks` without touching
/// any lock: `Some(pid)` (0 when the kernel does not say which process) or `None` when nobody
/// does (or `path` does not exist).
pub(crate) fn lock_holder(path: &Path) -> Option<u32> {
    let m = std::fs::symlink_metadata(path).ok()?;
    holder_of(m.dev(), m.ino())
}

/// Whether a log or partition directory is in use by a live owner: the directory's own lock
/// (a partition's `flock`) or its `.lock` (a log directory's). Returns what is locked and by
/// which process.
pub fn live_owner(dir: &Path) -> Option<(PathBuf, u32)> {
    let lock = dir.join(LOCK_FILE);
    if let Some(mut pid) = lock_holder(&lock) {
        if pid == 0 {
            // An OFD lock (seglog's): the holder noted its id in the file.
            let f = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags((OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK).bits())
                .open(&lock);
            pid = f.ok().and_then(|f| noted_pid(&f)).unwrap_or(0);
        }
        return Some((lock, pid));
    }
    lock_holder(dir).map(|pid| (dir.to_path_buf(), pid))
}

/// `/proc/locks` lines name `pid major:minor:inode` (major and minor in hex); blocked waiters
/// (`->`) are not holders.
fn holder_of(dev: u64, ino: u64) -> Option<u32> {
    let text = std::fs::read_to_string("/proc/locks").ok()?;
    let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
    let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
    let want = format!("{major:02x}:{minor:02x}:{ino}");
    text.lines().filter(|l| !l.contains("->")).find_map(|l| {
        let fields: Vec<&str> = l.split_whitespace().collect();
        // "1: FLOCK ADVISORY WRITE 1234 08:01:5678 0 EOF"
        if fields.get(5) != Some(&want.as_str()) {
            return None;
        }
        Some(fields.get(4).and_then(|p| p.parse::<i64>().ok()).filter(|&p| p > 0).unwrap_or(0) as u32)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_dir_has_one_owner_even_in_one_process() {
        let d = tempfile::tempdir().unwrap();
        let first = lock_path(d.path(), LockKind::LogDir, 0o600).unwrap();
        assert!(first.is_some());
        match lock_path(d.path(), LockKind::LogDir, 0o600) {
            Err(Error::Locked { path, holder }) => {
                assert_eq!(path, d.path().join(LOCK_FILE));
                assert_eq!(holder, Some(std::process::id()));
            }
            other => panic!("second owner not refused: {other:?}"),
        }
        // A partition opened on its own conflicts with the owner of its log directory.
        assert!(matches!(lock_path(d.path(), LockKind::LogDirShared, 0o600), Err(Error::Locked { .. })));
        assert_eq!(live_owner(d.path()).map(|(_, pid)| pid), Some(std::process::id()));
        drop(first);
        assert!(live_owner(d.path()).is_none());
        let shared = lock_path(d.path(), LockKind::LogDirShared, 0o600).unwrap();
        let shared2 = lock_path(d.path(), LockKind::LogDirShared, 0o600).unwrap();
        assert!(shared.is_some() && shared2.is_some(), "shared locks coexist");
        assert!(matches!(lock_path(d.path(), LockKind::LogDir, 0o600), Err(Error::Locked { .. })));
    }

    #[test]
    fn shared_lock_needs_no_file_and_creates_none() {
        let d = tempfile::tempdir().unwrap();
        assert!(lock_path(d.path(), LockKind::LogDirShared, 0o600).unwrap().is_none());
        assert!(!d.path().join(LOCK_FILE).exists());
    }

    #[test]
    fn a_partition_dir_has_one_owner_and_symlinks_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("t-0");
        std::fs::create_dir(&p).unwrap();
        let held = lock_path(&p, LockKind::Partition, 0o600).unwrap();
        assert!(matches!(lock_path(&p, LockKind::Partition, 0o600), Err(Error::Locked { .. })));
        assert_eq!(live_owner(&p).map(|(_, pid)| pid), Some(std::process::id()));
        drop(held);
        assert!(lock_path(&p, LockKind::Partition, 0o600).unwrap().is_some());
        let link = d.path().join("t-1");
        std::os::unix::fs::symlink(&p, &link).unwrap();
        assert!(matches!(lock_path(&link, LockKind::Partition, 0o600), Err(Error::NotRegular { .. })));
        let other = d.path().join("o");
        std::fs::create_dir(&other).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", other.join(LOCK_FILE)).unwrap();
        assert!(matches!(lock_path(&other, LockKind::LogDir, 0o600), Err(Error::NotRegular { .. })));
    }
}
