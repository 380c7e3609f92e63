//! Plain std files: `pread`/`pwrite`, `fdatasync`, `ftruncate`, `fallocate`. The portable backend
//! and the fallback when io_uring is unavailable.
#![allow(unsafe_code)]

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{DirBuilderExt, FileExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use nix::errno::Errno;
use nix::fcntl::{fallocate, fcntl, FallocateFlags, FcntlArg, OFlag};

use super::select::{DEFAULT_DIR_MODE, DEFAULT_FILE_MODE};
use super::{IoFile, OpenMode, Storage};
use crate::error::{Error, Result};

/// Std-backed storage. `file_mode`/`dir_mode` are the permissions of created files and
/// directories (owner-only by default, as log directories hold user data).
#[derive(Debug, Clone)]
pub struct StdStorage {
    pub file_mode: u32,
    pub dir_mode: u32,
}

impl Default for StdStorage {
    fn default() -> Self {
        StdStorage { file_mode: DEFAULT_FILE_MODE, dir_mode: DEFAULT_DIR_MODE }
    }
}

#[derive(Debug)]
pub(crate) struct StdFile {
    file: File,
    path: PathBuf,
}

impl IoFile for StdFile {
    fn path(&self) -> &Path {
        &self.path
    }
    fn read_at(&self, buf: &mut [u8], pos: u64) -> Result<usize> {
        loop {
            match self.file.read_at(buf, pos) {
                Ok(n) => {
                    super::record_io(1, 1, n as u64, 0, 0);
                    return Ok(n);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(Error::io("read", &self.path, e)),
            }
        }
    }
    fn write_all_at(&self, buf: &[u8], pos: u64) -> Result<()> {
        super::record_io(1, 1, 0, buf.len() as u64, 0);
        super::record_writes(1);
        self.file.write_all_at(buf, pos).map_err(|e| Error::io("write", &self.path, e))
    }
    /// pwritev2 with RWF_DSYNC; write then fdatasync where the kernel refuses the flag. Raw libc:
    /// nix has no pwritev2 (nor the RWF_* flags).
    fn write_all_at_dsync(&self, buf: &[u8], pos: u64) -> Result<()> {
        let mut done = 0usize;
        while done < buf.len() {
            let rest = &buf[done..];
            let iov = libc::iovec { iov_base: rest.as_ptr() as *mut libc::c_void, iov_len: rest.len() };
            super::record_io(1, 1, 0, 0, 0);
            // SAFETY: one iovec over `rest`, a live borrowed slice, for the duration of the call;
            // the kernel only reads it.
            let n = unsafe {
                libc::pwritev2(self.file.as_raw_fd(), &iov, 1, (pos + done as u64) as libc::off_t, libc::RWF_DSYNC)
            };
            if n < 0 {
                match Errno::last() {
                    Errno::EINTR => continue,
                    Errno::EOPNOTSUPP | Errno::ENOSYS if done == 0 => {
                        self.write_all_at(buf, pos)?;
                        return self.sync_data();
                    }
                    e => return Err(Error::io("pwritev2 RWF_DSYNC", &self.path, e.into())),
                }
            }
            if n == 0 {
                return Err(Error::io("pwritev2 RWF_DSYNC", &self.path, std::io::ErrorKind::WriteZero.into()));
            }
            done += n as usize;
        }
        super::record_io(0, 0, 0, buf.len() as u64, 0);
        super::record_writes(1);
        Ok(())
    }
    fn sync_data(&self) -> Result<()> {
        super::record_io(1, 1, 0, 0, 1);
        self.file.sync_data().map_err(|e| Error::io("fdatasync", &self.path, e))
    }
    fn set_len(&self, len: u64) -> Result<()> {
        self.file.set_len(len).map_err(|e| Error::io("truncate", &self.path, e))
    }
    fn allocate(&self, len: u64) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        fallocate(&self.file, FallocateFlags::FALLOC_FL_KEEP_SIZE, 0, len as i64)
            .map_err(|e| Error::io("fallocate", &self.path, e.into()))
    }
    fn len(&self) -> Result<u64> {
        self.file.metadata().map(|m| m.len()).map_err(|e| Error::io("stat", &self.path, e))
    }
    fn raw_fd(&self) -> Option<std::os::unix::io::RawFd> {
        Some(self.file.as_raw_fd())
    }
    fn modified_ms(&self) -> Result<i64> {
        let m = self.file.metadata().and_then(|m| m.modified()).map_err(|e| Error::io("stat", &self.path, e))?;
        Ok(m.duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0))
    }
}

impl Storage for StdStorage {
    fn open(&self, path: &Path, mode: OpenMode) -> Result<Arc<dyn IoFile>> {
        let mut o = open_options(mode, self.file_mode);
        o.custom_flags(SAFE_OPEN_FLAGS.bits());
        let file = o.open(path).map_err(|e| open_error(path, e))?;
        check_regular(&file, path)?;
        Ok(Arc::new(StdFile { file, path: path.to_path_buf() }))
    }
    fn create_dir_all(&self, path: &Path) -> Result<()> {
        create_dir_all(path, self.dir_mode)
    }
    fn lock(&self, path: &Path, kind: super::lock::LockKind) -> Result<Option<super::lock::LockGuard>> {
        super::lock::lock_path(path, kind, self.file_mode)
    }
    fn list_dir(&self, path: &Path) -> Result<Vec<String>> {
        list_dir(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        std::fs::rename(from, to).map_err(|e| Error::io("rename", from, e))
    }
    fn remove_file(&self, path: &Path) -> Result<()> {
        std::fs::remove_file(path).map_err(|e| Error::io("unlink", path, e))
    }
    fn remove_dir(&self, path: &Path) -> Result<()> {
        std::fs::remove_dir(path).map_err(|e| Error::io("rmdir", path, e))
    }
    fn sync_dir(&self, path: &Path) -> Result<()> {
        let d = File::open(path).map_err(|e| Error::io("open", path, e))?;
        d.sync_all().map_err(|e| Error::io("fsync", path, e))
    }
    /// A symbolic link exists here even when dangling: opening it is then refused, not created.
    fn exists(&self, path: &Path) -> bool {
        std::fs::symlink_metadata(path).is_ok()
    }
    fn is_dir(&self, path: &Path) -> bool {
        path.is_dir()
    }
}

/// The options for `mode` (always readable; files created with `file_mode`), shared by every
/// backend.
pub(crate) fn open_options(mode: OpenMode, file_mode: u32) -> OpenOptions {
    let mut o = OpenOptions::new();
    o.read(true).mode(file_mode);
    match mode {
        OpenMode::Read => {}
        OpenMode::ReadWrite => {
            o.write(true);
        }
        OpenMode::CreateNew => {
            o.write(true).create_new(true);
        }
        OpenMode::CreateTruncate => {
            o.write(true).create(true).truncate(true);
        }
    }
    o
}

/// Flags every file inside a data directory is opened with: never through a symbolic link (so
/// nothing outside the directory is written through one), never blocking on a FIFO (O_NONBLOCK,
/// cleared by [`check_regular`] once the file is known to be regular), never inherited.
pub(crate) const SAFE_OPEN_FLAGS: OFlag = OFlag::O_NOFOLLOW.union(OFlag::O_NONBLOCK).union(OFlag::O_CLOEXEC);

/// An open error, with a symbolic link (ELOOP under O_NOFOLLOW) or a directory said plainly.
pub(crate) fn open_error(path: &Path, e: std::io::Error) -> Error {
    let what = match e.raw_os_error().map(Errno::from_raw) {
        Some(Errno::ELOOP) => "a symbolic link",
        Some(Errno::EISDIR) => "a directory",
        _ => return Error::io("open", path, e),
    };
    Error::NotRegular { path: path.to_path_buf(), what }
}

/// Refuses anything but a regular file (a FIFO, a device, a socket). The O_NONBLOCK of
/// [`SAFE_OPEN_FLAGS`] then does nothing to `pread`/`pwrite` of a regular file; io_uring needs it
/// cleared ([`set_status_flags`]).
pub(crate) fn check_regular(file: &File, path: &Path) -> Result<()> {
    let t = file.metadata().map_err(|e| Error::io("stat", path, e))?.file_type();
    match not_regular(t) {
        Some(what) => Err(Error::NotRegular { path: path.to_path_buf(), what }),
        None => Ok(()),
    }
}

/// What a file of type `t` is when it is not a regular file (for [`Error::NotRegular`]).
pub(crate) fn not_regular(t: std::fs::FileType) -> Option<&'static str> {
    (!t.is_file()).then(|| file_type_name(t))
}

/// A file type in words ("a regular file", "a FIFO", "a symbolic link", ...), as errors and the
/// `seglog` command name it.
pub fn file_type_name(t: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if t.is_file() {
        "a regular file"
    } else if t.is_dir() {
        "a directory"
    } else if t.is_symlink() {
        "a symbolic link"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else {
        "not a file of a known type"
    }
}

/// Sets the file's changeable status flags to `flags` (O_DIRECT or none): for io_uring, which
/// completes reads of an O_NONBLOCK file with EAGAIN instead of waiting for them.
pub(crate) fn set_status_flags(file: &File, path: &Path, flags: OFlag) -> Result<()> {
    fcntl(file, FcntlArg::F_SETFL(flags)).map(drop).map_err(|e| Error::io("fcntl F_SETFL", path, e.into()))
}

/// `mkdir -p` with `mode` for every directory created (shared by every backend).
pub(crate) fn create_dir_all(path: &Path, mode: u32) -> Result<()> {
    std::fs::DirBuilder::new().recursive(true).mode(mode).create(path).map_err(|e| Error::io("mkdir", path, e))
}

/// The names in a directory, unsorted; names that are not UTF-8 are skipped (no segment or
/// checkpoint file has one). Shared by every backend.
pub(crate) fn list_dir(path: &Path) -> Result<Vec<String>> {
    let rd = std::fs::read_dir(path).map_err(|e| Error::io("readdir", path, e))?;
    let mut out = Vec::new();
    for ent in rd {
        let ent = ent.map_err(|e| Error::io("readdir", path, e))?;
        if let Ok(name) = ent.file_name().into_string() {
            out.push(name);
        }
    }
    Ok(out)
}
