//! An eventfd: the doorbell producers ring to wake a sleeping shard. A shard in io_uring mode
//! sleeps in io_uring_enter with a POLL_ADD on this fd armed in its ring, so one wait covers new
//! requests and its writes' completions; in sync mode it sleeps in poll(2).
#![allow(unsafe_code)]

use std::os::unix::io::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

use crate::error::{Error, Result};

/// A non-blocking, close-on-exec eventfd.
#[derive(Debug)]
pub struct EventFd {
    fd: OwnedFd,
}

impl EventFd {
    pub fn new() -> Result<EventFd> {
        // SAFETY: eventfd takes two integers and returns a new descriptor or -1; no memory is
        // passed.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(Error::io("eventfd", "<eventfd>", std::io::Error::last_os_error()));
        }
        // SAFETY: fd is a fresh descriptor that nothing else owns.
        Ok(EventFd { fd: unsafe { OwnedFd::from_raw_fd(fd) } })
    }

    pub fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Rings the doorbell (adds 1 to the counter).
    pub fn notify(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to our own descriptor. A full counter (EAGAIN)
        // already means "wake up", so the result needs no handling.
        let _ = unsafe { libc::write(self.raw(), (&one as *const u64).cast(), 8) };
    }

    /// Resets the counter, returning its value (0 if it was not rung).
    pub fn drain(&self) -> u64 {
        let mut v: u64 = 0;
        // SAFETY: reads at most 8 bytes into a live u64; the fd is non-blocking.
        let n = unsafe { libc::read(self.raw(), (&mut v as *mut u64).cast(), 8) };
        if n == 8 {
            v
        } else {
            0
        }
    }

    /// Sleeps in poll(2) until rung or `timeout` passes, then drains. The plain-syscall wait used
    /// when io_uring is not available.
    pub fn wait_plain(&self, timeout: Option<Duration>) -> u64 {
        let mut pfd = libc::pollfd { fd: self.raw(), events: libc::POLLIN, revents: 0 };
        let ms = timeout.map(|d| d.as_millis().min(i32::MAX as u128) as i32).unwrap_or(-1);
        // SAFETY: one live pollfd, count 1.
        unsafe { libc::poll(&mut pfd, 1, ms) };
        super::record_io(0, 1, 0, 0, 0);
        self.drain()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rings_and_drains() {
        let e = EventFd::new().unwrap();
        assert_eq!(e.drain(), 0);
        e.notify();
        e.notify();
        assert_eq!(e.wait_plain(Some(Duration::from_millis(10))), 2);
        let t = std::time::Instant::now();
        assert_eq!(e.wait_plain(Some(Duration::from_millis(20))), 0);
        assert!(t.elapsed() >= Duration::from_millis(15));
    }
}
