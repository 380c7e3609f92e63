//! The I/O layer: the only way the rest of the engine touches files and directories, and the only
//! module where `unsafe` is allowed (each block carries a `// SAFETY:` comment).
//!
//! Everything above talks to two traits: [`Storage`] (directories, opening, renaming, removing,
//! atomic small-file replacement) and [`IoFile`] (positioned reads and writes, sync, truncate,
//! allocate). Backends: [`std_backend::StdStorage`] (plain `pread`/`pwrite` through std, the
//! portable fallback). io_uring, O_DIRECT and a simulated crash disk plug in behind the same
//! traits, so segment code never changes with the I/O mode.
//!
//! Errors from this layer already carry the operation and the path.

pub mod std_backend;

use std::fmt::Debug;
use std::path::Path;
use std::sync::Arc;

use crate::error::Result;

/// How to open a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpenMode {
    /// Existing file, read only.
    Read,
    /// Existing file, read and write.
    ReadWrite,
    /// Create the file (it must not exist) for read and write.
    CreateNew,
    /// Create or truncate to zero, read and write.
    CreateTruncate,
}

/// One open file. Positions are absolute; there is no cursor.
// `len` is a fallible syscall here, not a collection size, so an `is_empty` would mislead.
#[allow(clippy::len_without_is_empty)]
pub trait IoFile: Send + Sync + Debug {
    /// The path the file was opened at (renames through [`Storage::rename`] do not update it;
    /// callers that rename reopen).
    fn path(&self) -> &Path;
    /// Reads up to `buf.len()` bytes at `pos`; fewer only at end of file.
    fn read_at(&self, buf: &mut [u8], pos: u64) -> Result<usize>;
    /// Reads exactly `buf.len()` bytes at `pos`, or fails with `UnexpectedEof`.
    fn read_exact_at(&self, buf: &mut [u8], pos: u64) -> Result<()> {
        let mut done = 0;
        while done < buf.len() {
            let n = self.read_at(&mut buf[done..], pos + done as u64)?;
            if n == 0 {
                return Err(crate::Error::io(
                    "read",
                    self.path(),
                    std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        format!("{} bytes short at byte {}", buf.len() - done, pos + done as u64),
                    ),
                ));
            }
            done += n;
        }
        Ok(())
    }
    /// Writes all of `buf` at `pos`.
    fn write_all_at(&self, buf: &[u8], pos: u64) -> Result<()>;
    /// Makes the file's data durable (fdatasync).
    fn sync_data(&self) -> Result<()>;
    /// Sets the file's length (truncates or extends with zeros).
    fn set_len(&self, len: u64) -> Result<()>;
    /// Reserves disk blocks for `[0, len)` without changing the file's length.
    fn allocate(&self, len: u64) -> Result<()>;
    /// The file's current length.
    fn len(&self) -> Result<u64>;
    /// The file's modification time in ms since the epoch.
    fn modified_ms(&self) -> Result<i64>;
}

/// Directory-level operations and file opening.
pub trait Storage: Send + Sync + Debug {
    fn open(&self, path: &Path, mode: OpenMode) -> Result<Arc<dyn IoFile>>;
    /// Creates a directory and its parents (owner-only permissions where the backend supports it).
    fn create_dir_all(&self, path: &Path) -> Result<()>;
    /// Names of the entries in a directory (files and directories), unsorted.
    fn list_dir(&self, path: &Path) -> Result<Vec<String>>;
    fn rename(&self, from: &Path, to: &Path) -> Result<()>;
    fn remove_file(&self, path: &Path) -> Result<()>;
    /// Makes a directory's entries durable (creates, renames, unlinks inside it).
    fn sync_dir(&self, path: &Path) -> Result<()>;
    fn exists(&self, path: &Path) -> bool;
    fn is_dir(&self, path: &Path) -> bool;
    /// Reads a whole small file (checkpoints). `limit` bounds the size accepted.
    fn read_small_file(&self, path: &Path, limit: u64) -> Result<Vec<u8>> {
        let f = self.open(path, OpenMode::Read)?;
        let len = f.len()?;
        if len > limit {
            return Err(crate::Error::io(
                "read",
                path,
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("file is {len} bytes, more than the {limit} accepted"),
                ),
            ));
        }
        let mut buf = vec![0u8; len as usize];
        f.read_exact_at(&mut buf, 0)?;
        Ok(buf)
    }
    /// Replaces a small file atomically with Kafka's sequence: write `<name>.tmp`, fsync it,
    /// rename over the target, fsync the directory.
    fn write_file_atomic(&self, path: &Path, contents: &[u8]) -> Result<()> {
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".tmp");
        let tmp = std::path::PathBuf::from(tmp);
        let f = self.open(&tmp, OpenMode::CreateTruncate)?;
        f.write_all_at(contents, 0)?;
        f.sync_data()?;
        drop(f);
        self.rename(&tmp, path)?;
        if let Some(parent) = path.parent() {
            self.sync_dir(parent)?;
        }
        Ok(())
    }
}

/// The default storage: std files with plain positioned reads and writes.
pub fn default_storage() -> Arc<dyn Storage> {
    Arc::new(std_backend::StdStorage::default())
}
