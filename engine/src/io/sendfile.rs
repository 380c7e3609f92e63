//! Zero-copy handoff of a file range to a socket or pipe: sendfile(2), the way Kafka sends fetch
//! responses straight from the page cache.
#![allow(unsafe_code)]

use std::os::unix::io::RawFd;

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
    let mut off = pos as libc::off_t;
    let mut sent = 0u64;
    while sent < len {
        let want = (len - sent).min(1 << 30) as usize;
        // SAFETY: sendfile reads from and writes to descriptors we were given and updates `off`,
        // a live local; no user memory is transferred.
        let n = unsafe { libc::sendfile(out_fd, in_fd, &mut off, want) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(Error::io("sendfile", file.path(), e));
        }
        if n == 0 {
            break;
        }
        sent += n as u64;
    }
    super::record_io(1, 1, sent, 0, 0);
    Ok(sent)
}
