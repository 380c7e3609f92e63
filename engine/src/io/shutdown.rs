//! `ioctl(FS_IOC_SHUTDOWN)`: stop a whole filesystem at once, as a power cut would. Every later
//! write, fsync and metadata change on it fails with EIO; what was not yet on the device (and,
//! with [`FS_GOING_DOWN_NOLOGFLUSH`], what was only in the journal's in-memory log) is lost when
//! it is unmounted and mounted again. Crash tests use it on loop-mounted ext4 and XFS; root only.
#![allow(unsafe_code)]

use std::os::unix::io::AsRawFd;
use std::path::Path;

use crate::error::{Error, Result};

/// Flush the whole filesystem (data and journal) first, then shut down.
pub const FS_GOING_DOWN_FULLSYNC: u32 = 0;
/// Flush the journal, not the data, then shut down.
pub const FS_GOING_DOWN_METADATA: u32 = 1;
/// Shut down at once without flushing the journal: the closest thing to pulling the plug.
pub const FS_GOING_DOWN_NOLOGFLUSH: u32 = 2;

#[cfg(test)]
/// `_IOR('X', 125, __u32)`: direction read (2) << 30 | size 4 << 16 | type 'X' << 8 | number 125.
pub(crate) const FS_IOC_SHUTDOWN: u64 = nix::request_code_read!(b'X', 125, std::mem::size_of::<u32>()) as u64;

mod sys {
    // linux/fs.h: `#define FS_IOC_SHUTDOWN _IOR('X', 125, __u32)`. Despite the _IOR, the kernel
    // reads the flags through the pointer (get_user).
    nix::ioctl_read!(fs_ioc_shutdown, b'X', 125, u32);
}

/// Shuts down the filesystem holding `path` (any file or directory on it) with `flags`, one of
/// the `FS_GOING_DOWN_*` values. Needs CAP_SYS_ADMIN; filesystems without the ioctl answer
/// ENOTTY (tmpfs) and the error says so.
pub fn fs_shutdown(path: &Path, flags: u32) -> Result<()> {
    let f = std::fs::File::open(path).map_err(|e| Error::io("open", path, e))?;
    let mut arg: u32 = flags;
    // SAFETY: FS_IOC_SHUTDOWN reads one u32 through the pointer; `arg` is a live, aligned u32 on
    // this stack frame for the whole call, and `f` keeps the descriptor open until it returns.
    unsafe { sys::fs_ioc_shutdown(f.as_raw_fd(), &mut arg) }
        .map_err(|e| Error::io("ioctl(FS_IOC_SHUTDOWN)", path, e.into()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_number_matches_linux() {
        // linux/fs.h: #define FS_IOC_SHUTDOWN _IOR('X', 125, __u32) == 0x8004587d
        assert_eq!(FS_IOC_SHUTDOWN, 0x8004_587d);
    }

    #[test]
    fn refused_where_unsupported_or_unprivileged() {
        // /proc has no FS_IOC_SHUTDOWN: the call fails (ENOTTY, or EPERM without root) rather
        // than shutting anything down.
        assert!(fs_shutdown(Path::new("/proc"), FS_GOING_DOWN_NOLOGFLUSH).is_err());
    }
}
