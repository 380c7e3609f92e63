//! Zero-copy handoff of a file range to a socket or pipe: sendfile(2), the way Kafka sends fetch
//! responses straight from the page cache.
#![allow(unsafe_code)]

use std::os::unix::io::{BorrowedFd, RawFd};

use nix::errno::Errno;
use nix::sys::sendfile::sendfile;

use super::IoFile;
use crate::error::{Error, Result};

/// Sends `len` bytes of `file` from `pos` to `out_fd` with sendfile(2), looping over short
/// transfers. Returns the bytes sent (fewer only if the file ends first).
pub fn send_file_range(out_fd: RawFd, file: &dyn IoFile, pos: u64, len: u64) -> Result<u64> {
    let Some(in_fd) = file.raw_fd() else {
        return Err(Error::io(
            "sendfile",
            file.path(),
            std::io::Error::new(std::io::ErrorKind::Unsupported, "the file has no kernel descriptor"),
        ));
    };
    // SAFETY: `BorrowedFd` only asserts the descriptors stay open while borrowed: `in_fd` is the
    // file's own, kept open by `file`, borrowed here for this call; `out_fd` is the caller's,
    // open for the duration of the call (what passing it means). (With `IoFile` handing out a
    // `BorrowedFd` instead of a `RawFd`, and an `AsFd` parameter, this block would go.)
    let (out_fd, in_fd) = unsafe { (BorrowedFd::borrow_raw(out_fd), BorrowedFd::borrow_raw(in_fd)) };
    let mut off = pos as i64;
    let mut sent = 0u64;
    while sent < len {
        let want = (len - sent).min(1 << 30) as usize;
        match sendfile(out_fd, in_fd, Some(&mut off), want) {
            Ok(0) => break,
            Ok(n) => sent += n as u64,
            Err(Errno::EINTR) => continue,
            Err(e) => return Err(Error::io("sendfile", file.path(), e.into())),
        }
    }
    super::record_io(1, 1, sent, 0, 0);
    Ok(sent)
}
