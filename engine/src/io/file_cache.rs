//! Descriptors under a limit: a `LazyFile` is a file that is opened on first use and may be
//! closed when idle, so that a log with 100,000 segments does not hold 100,000 (or 300,000)
//! descriptors. A [`FileCache`] counts the lazily opened files of a shard and, when a new one
//! would pass `max_open_files`, closes the least recently used idle ones first.
//!
//! Files a shard keeps open outside the cache (each active segment's `.log`) are counted against
//! the same limit through a `HeldDescriptor`: the lazily opened files get what they leave, but
//! never less than a quarter of the limit, so sealed segments stay readable however many
//! partitions a shard has.
//!
//! A file is idle when nothing but its `LazyFile` holds the open handle: a read in progress or a
//! pinned handle (`LazyFile::pin`, for sendfile) keeps it open. When every open file is in use,
//! opening another is [`Error::TooManyOpenFiles`], never a crash; so is the process running out of
//! descriptors (EMFILE) with nothing idle left to close.
//!
//! Closing a file that has unsynced writes is safe: a later fdatasync through a new descriptor
//! covers the inode's dirty pages, and since Linux 4.16 a write-back error nobody has seen is
//! reported to the next descriptor that syncs.

use std::collections::HashMap;
use std::os::unix::io::RawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};

use nix::errno::Errno;

use super::{DirectAlignment, IoFile, OpenMode, Storage};
use crate::error::{Error, Result};

/// The default `max_open_files` under a soft descriptor limit of `soft_nofile`: half of it, at
/// least 64. The active `.log`s count in it and the lazily opened files get the rest (at least a
/// quarter of it); the other half of the descriptors is left for the embedding process (its
/// sockets), checkpoint files, rings and the rest.
pub fn max_open_files_for(soft_nofile: usize) -> usize {
    (soft_nofile / 2).max(64)
}

/// How a lazily opened file is opened again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reopen {
    /// [`Storage::open`] (index files).
    Plain,
    /// [`Storage::open_log`] (a segment's `.log`: O_DIRECT in direct mode).
    Log,
}

/// Counters of a [`FileCache`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FileCacheStats {
    pub limit: usize,
    /// Lazily opened files open now.
    pub open: usize,
    /// Files held open outside the cache (active segments' `.log`s), counted against `limit`.
    pub held: usize,
    /// Highest `open` seen.
    pub peak_open: usize,
    /// Opens (first and re-opens), and closes of idle files to stay under the limit.
    pub opens: u64,
    pub evictions: u64,
    /// Opens refused with [`Error::TooManyOpenFiles`].
    pub refusals: u64,
}

#[derive(Debug, Default)]
struct CacheState {
    open: HashMap<u64, Weak<LazyFile>>,
    peak_open: usize,
    opens: u64,
    evictions: u64,
    refusals: u64,
}

/// The lazily opened files of one shard (or one process), under `limit` open at a time.
#[derive(Debug)]
pub struct FileCache {
    limit: usize,
    /// Descriptors held outside the cache ([`HeldDescriptor`]s alive).
    held: AtomicUsize,
    state: Mutex<CacheState>,
    tick: AtomicU64,
    next_id: AtomicU64,
}

impl FileCache {
    /// A cache that keeps at most `limit` lazily opened files open (at least 1).
    pub(crate) fn new(limit: usize) -> Arc<FileCache> {
        Arc::new(FileCache {
            limit: limit.max(1),
            held: AtomicUsize::new(0),
            state: Mutex::new(CacheState::default()),
            tick: AtomicU64::new(1),
            next_id: AtomicU64::new(1),
        })
    }

    /// [`max_open_files_for`] this process's soft descriptor limit (`RLIMIT_NOFILE`).
    pub(crate) fn default_limit() -> usize {
        // "Max open files  <soft>  <hard>  files" in /proc/self/limits.
        let soft = std::fs::read_to_string("/proc/self/limits")
            .ok()
            .and_then(|t| {
                t.lines()
                    .find(|l| l.starts_with("Max open files"))
                    .and_then(|l| l.split_whitespace().nth(3).and_then(|v| v.parse::<usize>().ok()))
            })
            .unwrap_or(1024);
        max_open_files_for(soft)
    }

    /// Counts one descriptor held open outside the cache (an active segment's `.log`) against
    /// the limit for as long as the returned guard lives.
    pub(crate) fn hold(self: &Arc<Self>) -> HeldDescriptor {
        self.held.fetch_add(1, Ordering::Relaxed);
        HeldDescriptor { cache: self.clone() }
    }

    /// How many lazily opened files may be open now: the limit less the held descriptors, at
    /// least a quarter of it.
    fn room(&self) -> usize {
        self.limit.saturating_sub(self.held.load(Ordering::Relaxed)).max((self.limit / 4).max(1))
    }

    pub fn stats(&self) -> FileCacheStats {
        let st = self.lock();
        FileCacheStats {
            limit: self.limit,
            open: st.open.len(),
            held: self.held.load(Ordering::Relaxed),
            peak_open: st.peak_open,
            opens: st.opens,
            evictions: st.evictions,
            refusals: st.refusals,
        }
    }

    fn lock(&self) -> MutexGuard<'_, CacheState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn tick(&self) -> u64 {
        self.tick.fetch_add(1, Ordering::Relaxed)
    }

    /// Makes room for one more open file (closing idle ones) and counts `file` as open. With
    /// `force`, the file is counted even when nothing can be closed (it is open already, or the
    /// write path needs it).
    fn admit(&self, id: u64, file: Weak<LazyFile>, path: &Path, force: bool) -> Result<()> {
        let mut dropped = Vec::new();
        let r = {
            let mut st = self.lock();
            let room = self.room();
            if st.open.len() >= room {
                let want = st.open.len() + 1 - room;
                self.close_idle(&mut st, id, want.max(room / 16).max(1), &mut dropped);
            }
            if st.open.len() >= room && !force {
                st.refusals += 1;
                Err(Error::TooManyOpenFiles {
                    path: path.to_path_buf(),
                    limit: self.limit,
                    open: st.open.len() + self.held.load(Ordering::Relaxed),
                })
            } else {
                st.open.insert(id, file);
                st.opens += 1;
                st.peak_open = st.peak_open.max(st.open.len());
                Ok(())
            }
        };
        // Handles are dropped outside the lock: dropping the last one of a `LazyFile` calls back.
        drop(dropped);
        r
    }

    /// Closes up to `want` idle files, least recently used first (never `except`).
    fn close_idle(&self, st: &mut CacheState, except: u64, want: usize, dropped: &mut Vec<Arc<LazyFile>>) {
        let mut idle: Vec<(u64, u64, Arc<LazyFile>)> = Vec::new();
        for (&id, w) in &st.open {
            if id == except {
                continue;
            }
            if let Some(f) = w.upgrade() {
                idle.push((f.last_used.load(Ordering::Relaxed), id, f));
            }
        }
        idle.sort_unstable_by_key(|(t, id, _)| (*t, *id));
        let mut closed = 0;
        for (_, id, f) in idle {
            if closed < want {
                if let Ok(mut slot) = f.slot.try_lock() {
                    if slot.as_ref().is_some_and(|h| Arc::strong_count(h) == 1) {
                        *slot = None;
                        st.open.remove(&id);
                        st.evictions += 1;
                        closed += 1;
                    }
                }
            }
            dropped.push(f);
        }
    }

    fn forget(&self, id: u64) {
        self.lock().open.remove(&id);
    }

    /// Closes up to `n` idle files now (for tests and for shedding descriptors); returns how
    /// many were closed.
    pub(crate) fn close_idle_files(&self, n: usize) -> usize {
        let mut dropped = Vec::new();
        let closed = {
            let mut st = self.lock();
            let before = st.open.len();
            self.close_idle(&mut st, 0, n, &mut dropped);
            before - st.open.len()
        };
        drop(dropped);
        closed
    }
}

/// One descriptor a shard keeps open outside its [`FileCache`] (an active segment's `.log`),
/// counted against the cache's limit until dropped.
#[derive(Debug)]
pub(crate) struct HeldDescriptor {
    cache: Arc<FileCache>,
}

impl Drop for HeldDescriptor {
    fn drop(&mut self) {
        self.cache.held.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A file opened on demand through a [`FileCache`], closed by the cache when idle. It is an
/// [`IoFile`]: every call opens the file first if it is closed.
pub(crate) struct LazyFile {
    id: u64,
    path: PathBuf,
    storage: Arc<dyn Storage>,
    reopen: Reopen,
    cache: Arc<FileCache>,
    me: Weak<LazyFile>,
    slot: Mutex<Option<Arc<dyn IoFile>>>,
    last_used: AtomicU64,
    alignment: OnceLock<Option<DirectAlignment>>,
}

impl std::fmt::Debug for LazyFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LazyFile").field("path", &self.path).field("open", &self.is_open()).finish()
    }
}

impl LazyFile {
    /// A file at `path`, not opened yet; it opens with `ReadWrite` on first use.
    pub(crate) fn new(storage: Arc<dyn Storage>, path: &Path, reopen: Reopen, cache: &Arc<FileCache>) -> Arc<LazyFile> {
        Arc::new_cyclic(|me| LazyFile {
            id: cache.next_id.fetch_add(1, Ordering::Relaxed),
            path: path.to_path_buf(),
            storage,
            reopen,
            cache: cache.clone(),
            me: me.clone(),
            slot: Mutex::new(None),
            last_used: AtomicU64::new(0),
            alignment: OnceLock::new(),
        })
    }

    /// Takes an open file under the cache's management (it may be closed when idle and reopened
    /// with `ReadWrite` later). Counted even if the cache is full, since it is open already; idle
    /// files are closed to make room.
    pub(crate) fn adopt(
        storage: Arc<dyn Storage>,
        file: Arc<dyn IoFile>,
        reopen: Reopen,
        cache: &Arc<FileCache>,
    ) -> Arc<LazyFile> {
        let lf = LazyFile::new(storage, file.path(), reopen, cache);
        let _ = lf.alignment.set(file.direct_alignment());
        *lf.lock_slot() = Some(file);
        lf.last_used.store(cache.tick(), Ordering::Relaxed);
        let _ = cache.admit(lf.id, Arc::downgrade(&lf), &lf.path, true);
        lf
    }

    /// Creates (or opens) the file at once, as [`LazyFile::adopt`] of `storage.open(path, mode)`:
    /// counted even when every file under the limit is in use (idle ones are closed to make
    /// room), so that a roll or a log's load never fails for want of a slot in the cache.
    pub(crate) fn create(
        storage: Arc<dyn Storage>,
        path: &Path,
        mode: OpenMode,
        reopen: Reopen,
        cache: &Arc<FileCache>,
    ) -> Result<Arc<LazyFile>> {
        let lf = LazyFile::new(storage, path, reopen, cache);
        lf.open_with(mode, true)?;
        Ok(lf)
    }

    pub(crate) fn is_open(&self) -> bool {
        self.lock_slot().is_some()
    }

    fn lock_slot(&self) -> MutexGuard<'_, Option<Arc<dyn IoFile>>> {
        self.slot.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The open file, opening it if needed. The handle returned keeps the descriptor open (the
    /// cache will not close a file whose handle is held): for sendfile and other raw-descriptor
    /// uses, hold it for as long as the descriptor is used.
    pub(crate) fn pin(&self) -> Result<Arc<dyn IoFile>> {
        self.open_with(OpenMode::ReadWrite, false)
    }

    /// Opens the file if it is closed; with `force`, even when every file under the limit is in
    /// use (see [`FileCache::admit`]).
    fn open_with(&self, mode: OpenMode, force: bool) -> Result<Arc<dyn IoFile>> {
        let mut slot = self.lock_slot();
        self.last_used.store(self.cache.tick(), Ordering::Relaxed);
        if let Some(f) = slot.as_ref() {
            return Ok(f.clone());
        }
        self.cache.admit(self.id, self.me.clone(), &self.path, force)?;
        let open = || match self.reopen {
            Reopen::Plain => self.storage.open(&self.path, mode),
            Reopen::Log => self.storage.open_log(&self.path, mode),
        };
        let f = match open() {
            Ok(f) => f,
            Err(Error::Io { source, .. })
                if matches!(source.raw_os_error().map(Errno::from_raw), Some(Errno::EMFILE | Errno::ENFILE)) =>
            {
                // The process is out of descriptors: close idle files and try once more.
                if self.cache.close_idle_files((self.cache.limit / 16).max(1)) == 0 {
                    self.cache.forget(self.id);
                    let open = {
                        let s = self.cache.stats();
                        s.open + s.held
                    };
                    self.cache.lock().refusals += 1;
                    return Err(Error::TooManyOpenFiles { path: self.path.clone(), limit: self.cache.limit, open });
                }
                match open() {
                    Ok(f) => f,
                    Err(e) => {
                        self.cache.forget(self.id);
                        return Err(e);
                    }
                }
            }
            Err(e) => {
                self.cache.forget(self.id);
                return Err(e);
            }
        };
        let _ = self.alignment.set(f.direct_alignment());
        *slot = Some(f.clone());
        Ok(f)
    }

    /// Takes the file out of the cache's management and returns it open (for a sealed segment
    /// that becomes active again and keeps its `.log` open).
    pub(crate) fn detach(&self) -> Result<Arc<dyn IoFile>> {
        // Forced: the file leaves the cache at once (and becomes an active segment's, held).
        let f = self.open_with(OpenMode::ReadWrite, true)?;
        *self.lock_slot() = None;
        self.cache.forget(self.id);
        Ok(f)
    }
}

impl Drop for LazyFile {
    fn drop(&mut self) {
        if self.slot.get_mut().map(|s| s.is_some()).unwrap_or(true) {
            self.cache.forget(self.id);
        }
    }
}

impl IoFile for LazyFile {
    /// Closes the file now if it is open and nothing else holds its handle (it opens again on
    /// next use): an active segment's index files, not used until the segment is sealed or
    /// flushed, hold no descriptor meanwhile.
    fn close_if_idle(&self) {
        let closed = {
            let mut slot = self.lock_slot();
            match slot.as_ref() {
                Some(h) if Arc::strong_count(h) == 1 => slot.take(),
                _ => None,
            }
        };
        if closed.is_some() {
            self.cache.forget(self.id);
        }
    }

    fn path(&self) -> &Path {
        &self.path
    }
    fn read_at(&self, buf: &mut [u8], pos: u64) -> Result<usize> {
        self.pin()?.read_at(buf, pos)
    }
    fn read_exact_at(&self, buf: &mut [u8], pos: u64) -> Result<()> {
        self.pin()?.read_exact_at(buf, pos)
    }
    fn write_all_at(&self, buf: &[u8], pos: u64) -> Result<()> {
        self.pin()?.write_all_at(buf, pos)
    }
    fn sync_data(&self) -> Result<()> {
        self.pin()?.sync_data()
    }
    fn set_len(&self, len: u64) -> Result<()> {
        self.pin()?.set_len(len)
    }
    fn allocate(&self, len: u64) -> Result<()> {
        self.pin()?.allocate(len)
    }
    fn len(&self) -> Result<u64> {
        self.pin()?.len()
    }
    fn modified_ms(&self) -> Result<i64> {
        self.pin()?.modified_ms()
    }
    /// No descriptor: the file may be closed (and the number reused) at any moment. Use
    /// [`LazyFile::pin`] and the descriptor of the handle it returns.
    fn raw_fd(&self) -> Option<RawFd> {
        None
    }
    fn descriptor_handle(&self) -> Result<Option<Arc<dyn IoFile>>> {
        self.pin().map(Some)
    }
    fn direct_alignment(&self) -> Option<DirectAlignment> {
        match self.alignment.get() {
            Some(a) => *a,
            None => self.pin().ok().and_then(|f| f.direct_alignment()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::std_backend::StdStorage;

    fn files(n: usize, dir: &Path, storage: &Arc<dyn Storage>, cache: &Arc<FileCache>) -> Vec<Arc<LazyFile>> {
        (0..n)
            .map(|i| {
                let p = dir.join(format!("{i}.log"));
                LazyFile::create(storage.clone(), &p, OpenMode::CreateNew, Reopen::Plain, cache).unwrap()
            })
            .collect()
    }

    #[test]
    fn stays_under_the_limit_and_reopens() {
        let dir = tempfile::tempdir().unwrap();
        let storage: Arc<dyn Storage> = Arc::new(StdStorage::default());
        let cache = FileCache::new(4);
        let fs = files(10, dir.path(), &storage, &cache);
        assert!(cache.stats().open <= 4);
        for (i, f) in fs.iter().enumerate() {
            f.write_all_at(format!("file {i}").as_bytes(), 0).unwrap();
            assert!(cache.stats().open <= 4);
        }
        for (i, f) in fs.iter().enumerate() {
            let mut b = vec![0u8; 6];
            f.read_exact_at(&mut b, 0).unwrap();
            assert_eq!(b, format!("file {i}").as_bytes());
        }
        let s = cache.stats();
        assert!(s.open <= 4 && s.peak_open <= 4 && s.evictions >= 6, "{s:?}");
        drop(fs);
        assert_eq!(cache.stats().open, 0);
    }

    #[test]
    fn held_descriptors_count_against_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let storage: Arc<dyn Storage> = Arc::new(StdStorage::default());
        let cache = FileCache::new(8);
        let held: Vec<_> = (0..5).map(|_| cache.hold()).collect();
        let fs = files(6, dir.path(), &storage, &cache);
        let s = cache.stats();
        assert_eq!((s.held, s.open), (5, 3), "{s:?}");
        // Held past the limit: the lazily opened files still get a quarter of it.
        let more: Vec<_> = (0..10).map(|_| cache.hold()).collect();
        for f in &fs {
            f.read_at(&mut [0u8; 1], 0).unwrap();
        }
        assert_eq!(cache.stats().open, 2);
        drop((held, more));
        for f in &fs {
            f.read_at(&mut [0u8; 1], 0).unwrap();
        }
        let s = cache.stats();
        assert_eq!((s.held, s.open), (0, 6), "{s:?}");
    }

    #[test]
    fn every_file_in_use_is_a_typed_error() {
        let dir = tempfile::tempdir().unwrap();
        let storage: Arc<dyn Storage> = Arc::new(StdStorage::default());
        let cache = FileCache::new(2);
        let fs = files(3, dir.path(), &storage, &cache);
        let pinned: Vec<_> = fs[..2].iter().map(|f| f.pin().unwrap()).collect();
        let e = fs[2].read_at(&mut [0u8; 1], 0).unwrap_err();
        assert!(matches!(e, Error::TooManyOpenFiles { limit: 2, .. }), "{e}");
        drop(pinned);
        fs[2].read_at(&mut [0u8; 1], 0).unwrap();
        assert_eq!(cache.stats().refusals, 1);
    }
}
