//! A copy-on-write [`Storage`] so the tools can run the engine's own segment code (open a
//! segment, translate offsets, `recover()` to rebuild indexes) over a directory without changing
//! a byte of it: files are opened read-only on disk, and every write, truncation or file creation
//! lands in memory. A file is copied into memory only when it is first written past a logical
//! truncation; a log that is only read or cut short stays on disk.
//!
//! Directory operations that would change the directory (rename, remove, create) are refused:
//! the tools never need them through the engine.
//!
//! Files are opened through [`crate::files::open_regular`]: a FIFO, a socket or a symbolic link
//! named like a segment file is refused, never blocked on. For a rebuild
//! ([`OverlayStorage::rebuilding`]) the index files read as empty: the engine's rebuild starts by
//! emptying them anyway, and so never reads (or holds in memory) what a damaged index file holds;
//! and what the rebuild writes to them is not kept (only their length): the rebuilt entries are in
//! the engine's indexes already, and a second copy here would double the memory a rebuild takes.
//! For lookups ([`OverlayStorage::for_lookups`]) the `.timeindex` reads as empty (an offset
//! lookup never uses it) and an `.index` longer than a limit is refused, so what the engine loads
//! is bounded.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use seglog::io::{IoFile, OpenMode, Storage};
use seglog::{Error, Result};

fn io_err(op: &'static str, path: &Path, e: std::io::Error) -> Error {
    Error::Io { op, path: path.to_path_buf(), source: e }
}

fn refused(op: &'static str, path: &Path) -> Error {
    io_err(
        op,
        path,
        std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            "the tools' read-only overlay does not change directories",
        ),
    )
}

/// Reads through to disk, keeps every change in memory.
#[derive(Debug, Default)]
pub struct OverlayStorage {
    /// Files opened so far, so a file opened twice shares its in-memory changes.
    files: Mutex<HashMap<PathBuf, Arc<CowFile>>>,
    /// Extensions of files that exist but read as empty (see the module comment).
    empty: &'static [&'static str],
    /// Writes to `.index` and `.timeindex` files keep only the length (see the module comment).
    discard_index_writes: bool,
    /// Index files longer than this are refused.
    max_index_bytes: Option<u64>,
}

impl OverlayStorage {
    #[cfg(test)]
    pub fn new() -> Self {
        Self::default()
    }

    /// An overlay for rebuilding indexes: index files exist but read as empty, and what is
    /// written to them is not kept (only their length).
    pub fn rebuilding() -> Self {
        OverlayStorage { empty: &["index", "timeindex"], discard_index_writes: true, ..Self::default() }
    }

    /// An overlay for offset lookups: the `.timeindex` reads as empty, and an `.index` or
    /// `.timeindex` longer than `max_index_bytes` is refused (an error naming the file and its
    /// length).
    pub fn for_lookups(max_index_bytes: u64) -> Self {
        OverlayStorage { empty: &["timeindex"], max_index_bytes: Some(max_index_bytes), ..Self::default() }
    }

    fn is_index(path: &Path) -> bool {
        path.extension().is_some_and(|e| e == "index" || e == "timeindex")
    }

    fn reads_empty(&self, path: &Path) -> bool {
        path.extension().is_some_and(|e| self.empty.iter().any(|x| e == *x))
    }

    fn discards(&self, path: &Path) -> bool {
        self.discard_index_writes && Self::is_index(path)
    }

    fn lookup(&self, path: &Path) -> Option<Arc<CowFile>> {
        self.files.lock().expect("overlay lock").get(path).cloned()
    }

    fn insert(&self, f: Arc<CowFile>) -> Arc<CowFile> {
        self.files.lock().expect("overlay lock").insert(f.path.clone(), f.clone());
        f
    }
}

impl Storage for OverlayStorage {
    fn open(&self, path: &Path, mode: OpenMode) -> Result<Arc<dyn IoFile>> {
        match mode {
            OpenMode::Read | OpenMode::ReadWrite => {
                if let Some(f) = self.lookup(path) {
                    return Ok(f);
                }
                let file = crate::files::open_regular(path).map_err(|e| io_err("open", path, e))?;
                if self.reads_empty(path) {
                    return Ok(self.insert(Arc::new(CowFile::empty(path, self.discards(path)))));
                }
                let meta = file.metadata().map_err(|e| io_err("stat", path, e))?;
                if let Some(max) = self.max_index_bytes.filter(|&m| Self::is_index(path) && meta.len() > m) {
                    return Err(Error::CorruptIndex {
                        path: path.to_path_buf(),
                        detail: format!(
                            "index file is {} bytes, more than the {max} bytes a segment's index may have (--segment-index-bytes)",
                            meta.len()
                        ),
                    });
                }
                let modified_ms = meta
                    .modified()
                    .ok()
                    .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                    .map_or(0, |d| d.as_millis() as i64);
                Ok(self.insert(Arc::new(CowFile {
                    path: path.to_path_buf(),
                    disk: Some(file),
                    modified_ms,
                    discard_writes: false,
                    state: Mutex::new(CowState { mem: None, len: meta.len() }),
                })))
            }
            OpenMode::CreateNew | OpenMode::CreateTruncate => {
                if mode == OpenMode::CreateNew && self.exists(path) {
                    return Err(io_err("create", path, std::io::Error::from(std::io::ErrorKind::AlreadyExists)));
                }
                Ok(self.insert(Arc::new(CowFile::empty(path, self.discards(path)))))
            }
        }
    }
    fn create_dir_all(&self, path: &Path) -> Result<()> {
        Err(refused("mkdir", path))
    }
    fn list_dir(&self, path: &Path) -> Result<Vec<String>> {
        let rd = std::fs::read_dir(path).map_err(|e| io_err("list", path, e))?;
        let mut out = Vec::new();
        for e in rd {
            let e = e.map_err(|e| io_err("list", path, e))?;
            out.push(e.file_name().to_string_lossy().into_owned());
        }
        Ok(out)
    }
    fn rename(&self, from: &Path, _to: &Path) -> Result<()> {
        Err(refused("rename", from))
    }
    fn remove_file(&self, path: &Path) -> Result<()> {
        Err(refused("remove", path))
    }
    fn sync_dir(&self, _path: &Path) -> Result<()> {
        Ok(())
    }
    fn exists(&self, path: &Path) -> bool {
        self.lookup(path).is_some() || path.exists()
    }
    fn is_dir(&self, path: &Path) -> bool {
        path.is_dir()
    }
}

#[derive(Debug)]
struct CowState {
    /// The whole file, once something wrote to it.
    mem: Option<Vec<u8>>,
    /// The logical length.
    len: u64,
}

/// One file of the overlay.
#[derive(Debug)]
pub struct CowFile {
    path: PathBuf,
    disk: Option<File>,
    modified_ms: i64,
    /// Writes keep only the length; reading what was written is an error.
    discard_writes: bool,
    state: Mutex<CowState>,
}

impl CowFile {
    /// A file with nothing in it, in memory.
    fn empty(path: &Path, discard_writes: bool) -> CowFile {
        CowFile {
            path: path.to_path_buf(),
            disk: None,
            modified_ms: 0,
            discard_writes,
            state: Mutex::new(CowState { mem: Some(Vec::new()), len: 0 }),
        }
    }

    fn materialize(&self, st: &mut CowState) -> Result<()> {
        if st.mem.is_some() {
            return Ok(());
        }
        let mut v = vec![0u8; st.len as usize];
        if let Some(f) = &self.disk {
            f.read_exact_at(&mut v, 0).map_err(|e| io_err("read", &self.path, e))?;
        }
        st.mem = Some(v);
        Ok(())
    }
}

impl IoFile for CowFile {
    fn path(&self) -> &Path {
        &self.path
    }
    fn read_at(&self, buf: &mut [u8], pos: u64) -> Result<usize> {
        let st = self.state.lock().expect("file lock");
        if pos >= st.len {
            return Ok(0);
        }
        if self.discard_writes {
            return Err(io_err(
                "read",
                &self.path,
                std::io::Error::other("the tools' overlay does not keep what a rebuild writes to index files"),
            ));
        }
        let n = ((st.len - pos) as usize).min(buf.len());
        match (&st.mem, &self.disk) {
            (Some(m), _) => {
                buf[..n].copy_from_slice(&m[pos as usize..pos as usize + n]);
                Ok(n)
            }
            (None, Some(f)) => f.read_at(&mut buf[..n], pos).map_err(|e| io_err("read", &self.path, e)),
            (None, None) => Ok(0),
        }
    }
    fn write_all_at(&self, buf: &[u8], pos: u64) -> Result<()> {
        let mut st = self.state.lock().expect("file lock");
        if self.discard_writes {
            st.len = st.len.max(pos + buf.len() as u64);
            return Ok(());
        }
        self.materialize(&mut st)?;
        let end = pos as usize + buf.len();
        let m = st.mem.as_mut().expect("materialized");
        if m.len() < end {
            m.resize(end, 0);
        }
        m[pos as usize..end].copy_from_slice(buf);
        st.len = st.len.max(end as u64);
        Ok(())
    }
    fn sync_data(&self) -> Result<()> {
        Ok(())
    }
    fn set_len(&self, len: u64) -> Result<()> {
        let mut st = self.state.lock().expect("file lock");
        if self.discard_writes || (st.mem.is_none() && len <= st.len) {
            st.len = len;
            return Ok(());
        }
        self.materialize(&mut st)?;
        st.mem.as_mut().expect("materialized").resize(len as usize, 0);
        st.len = len;
        Ok(())
    }
    fn allocate(&self, _len: u64) -> Result<()> {
        Ok(())
    }
    fn len(&self) -> Result<u64> {
        Ok(self.state.lock().expect("file lock").len)
    }
    fn modified_ms(&self) -> Result<i64> {
        Ok(self.modified_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_stay_in_memory() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a");
        std::fs::write(&p, b"hello world").unwrap();
        let s = OverlayStorage::new();
        let f = s.open(&p, OpenMode::ReadWrite).unwrap();
        f.set_len(5).unwrap();
        let mut b = [0u8; 11];
        assert_eq!(f.read_at(&mut b, 0).unwrap(), 5);
        f.write_all_at(b"!!", 5).unwrap();
        assert_eq!(f.len().unwrap(), 7);
        f.read_exact_at(&mut b[..7], 0).unwrap();
        assert_eq!(&b[..7], b"hello!!");
        assert_eq!(std::fs::read(&p).unwrap(), b"hello world");
        let n = dir.path().join("new");
        let g = s.open(&n, OpenMode::CreateNew).unwrap();
        g.write_all_at(b"x", 0).unwrap();
        assert!(s.exists(&n) && !n.exists());
        assert!(s.open(&n, OpenMode::CreateNew).is_err());
        assert!(s.remove_file(&p).is_err());
    }

    #[test]
    fn a_rebuild_keeps_only_index_lengths() {
        let dir = tempfile::tempdir().unwrap();
        let idx = dir.path().join("00000000000000000000.index");
        std::fs::write(&idx, [7u8; 16]).unwrap();
        let s = OverlayStorage::rebuilding();
        let f = s.open(&idx, OpenMode::ReadWrite).unwrap();
        assert_eq!(f.len().unwrap(), 0, "reads as empty");
        f.write_all_at(&[1u8; 4096], 0).unwrap();
        assert_eq!(f.len().unwrap(), 4096);
        assert!(f.read_at(&mut [0u8; 8], 0).is_err(), "the bytes are not kept");
        f.set_len(8).unwrap();
        assert_eq!(f.len().unwrap(), 8);
        assert_eq!(std::fs::read(&idx).unwrap(), [7u8; 16]);

        let s = OverlayStorage::for_lookups(8);
        let e = s.open(&idx, OpenMode::ReadWrite).unwrap_err().to_string();
        assert!(e.contains("index file is 16 bytes, more than the 8 bytes"), "{e}");
        let t = dir.path().join("00000000000000000000.timeindex");
        std::fs::write(&t, [7u8; 24]).unwrap();
        assert_eq!(s.open(&t, OpenMode::ReadWrite).unwrap().len().unwrap(), 0, "a time index reads as empty");
    }
}
