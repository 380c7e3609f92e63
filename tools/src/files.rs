//! Opening the files the tools read, safely: only regular files, never blocking, never following
//! a symbolic link, and never reading more than a bound into memory.
//!
//! A FIFO named like a segment file would block a plain `open(2)` for reading until a writer
//! appears, and a device or a socket is not a file Kafka writes. [`open_regular`] refuses them:
//! it looks at the path first (`lstat`, so nothing with side effects on open is opened), opens
//! with `O_NONBLOCK | O_NOFOLLOW | O_NOCTTY` (so even a FIFO swapped in after that look does not
//! block, and a symbolic link is refused with `ELOOP`), checks the opened descriptor itself
//! (`fstat`, race-free: what is read is what was checked), and only then clears `O_NONBLOCK`.
//!
//! Symbolic links are reported, not followed, by every read-only command (the rule the engine's
//! storage opens are getting with `O_NOFOLLOW`): a segment file that is a link is not a file Kafka
//! wrote there.
//!
//! Paths handed to the engine (`Segment::open_existing` through the tools' overlay) go through
//! [`open_regular`] in the overlay, and [`check_regular`] before the engine gets the path.

use std::fs::{File, FileType, OpenOptions};
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{fcntl, FcntlArg, OFlag};

/// A path that exists but is not a regular file: what it is instead.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotRegular {
    pub path: PathBuf,
    /// "a FIFO", "a socket", "a directory", "a symbolic link", ...
    pub what: &'static str,
}

impl std::fmt::Display for NotRegular {
    /// The path is not repeated here: callers prefix it, as for every other I/O error.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.what == SYMLINK {
            write!(f, "{}, not a regular file (not followed: the tools read only regular files)", self.what)
        } else {
            write!(f, "{}, not a regular file (the tools read only regular files)", self.what)
        }
    }
}

impl std::error::Error for NotRegular {}

const SYMLINK: &str = "a symbolic link";

/// What a file type is, in words (the engine's names).
pub fn describe(ft: FileType) -> &'static str {
    seglog::io::std_backend::file_type_name(ft)
}

fn not_regular(path: &Path, ft: FileType) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidInput, NotRegular { path: path.to_path_buf(), what: describe(ft) })
}

/// The [`NotRegular`] inside `e`, if `e` is the refusal of a non-regular file.
pub fn as_not_regular(e: &std::io::Error) -> Option<&NotRegular> {
    e.get_ref().and_then(|inner| inner.downcast_ref::<NotRegular>())
}

/// Refuses `path` unless it is a regular file, by its own type (`lstat`: a symbolic link is
/// refused, not followed). Opens nothing. For paths handed to code that opens them itself.
pub fn check_regular(path: &Path) -> std::io::Result<()> {
    let ft = std::fs::symlink_metadata(path)?.file_type();
    if ft.is_file() {
        Ok(())
    } else {
        Err(not_regular(path, ft))
    }
}

/// Opens `path` read-only if, and only if, it is a regular file (see the module comment). The
/// refusal is an `InvalidInput` error carrying a [`NotRegular`] ([`as_not_regular`]); it never
/// blocks.
pub fn open_regular(path: &Path) -> std::io::Result<File> {
    // A first look, so that a device or a FIFO is not even opened in the usual case.
    check_regular(path)?;
    let file = OpenOptions::new()
        .read(true)
        .custom_flags((OFlag::O_NONBLOCK | OFlag::O_NOFOLLOW | OFlag::O_NOCTTY).bits())
        .open(path)
        .map_err(|e| match e.raw_os_error().map(Errno::from_raw) {
            // The path was swapped for a link (ELOOP) or a socket (ENXIO) after the first look.
            Some(Errno::ELOOP | Errno::ENXIO) => match std::fs::symlink_metadata(path) {
                Ok(m) if !m.file_type().is_file() => not_regular(path, m.file_type()),
                _ => e,
            },
            _ => e,
        })?;
    // The check that counts: the type of what was opened.
    let ft = file.metadata()?.file_type();
    if !ft.is_file() {
        return Err(not_regular(path, ft));
    }
    let flags = fcntl(&file, FcntlArg::F_GETFL).map_err(std::io::Error::from)?;
    let mut flags = OFlag::from_bits_truncate(flags);
    flags.remove(OFlag::O_NONBLOCK);
    fcntl(&file, FcntlArg::F_SETFL(flags)).map_err(std::io::Error::from)?;
    Ok(file)
}

/// Reads a whole small file (a checkpoint, a marker) through [`open_regular`], refusing one
/// longer than `limit` bytes without reading past the limit: memory is bounded by `limit`, not by
/// the file's length.
pub fn read_capped(path: &Path, limit: u64) -> std::io::Result<Vec<u8>> {
    let f = open_regular(path)?;
    let mut bytes = Vec::new();
    f.take(limit.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(std::io::Error::new(
            std::io::ErrorKind::FileTooLarge,
            format!("more than {limit} bytes, not read"),
        ));
    }
    Ok(bytes)
}

/// `n` with thousands separators: `3,099,900`.
pub fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_fifos_links_and_directories_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let reg = dir.path().join("00000000000000000000.log");
        std::fs::write(&reg, b"abc").unwrap();
        let mut f = open_regular(&reg).unwrap();
        let mut s = String::new();
        f.read_to_string(&mut s).unwrap();
        assert_eq!(s, "abc");
        let fl = OFlag::from_bits_truncate(fcntl(&f, FcntlArg::F_GETFL).unwrap());
        assert!(!fl.contains(OFlag::O_NONBLOCK), "O_NONBLOCK is cleared on a regular file");

        let fifo = dir.path().join("00000000000000000001.log");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let e = open_regular(&fifo).unwrap_err();
        assert_eq!(as_not_regular(&e).map(|n| n.what), Some("a FIFO"));
        assert_eq!(e.to_string(), "a FIFO, not a regular file (the tools read only regular files)");

        let link = dir.path().join("00000000000000000002.log");
        std::os::unix::fs::symlink(&reg, &link).unwrap();
        let e = open_regular(&link).unwrap_err();
        assert_eq!(as_not_regular(&e).map(|n| n.what), Some("a symbolic link"));
        assert!(check_regular(&link).is_err());

        let e = open_regular(dir.path()).unwrap_err();
        assert_eq!(as_not_regular(&e).map(|n| n.what), Some("a directory"));

        let e = open_regular(&dir.path().join("missing")).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
        assert!(as_not_regular(&e).is_none());
    }

    #[test]
    fn read_capped_stops_at_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, vec![7u8; 100]).unwrap();
        assert_eq!(read_capped(&p, 100).unwrap().len(), 100);
        assert!(read_capped(&p, 99).unwrap_err().to_string().contains("more than 99 bytes"));
    }

    #[test]
    fn thousands_separators() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(3_099_900), "3,099,900");
    }
}
