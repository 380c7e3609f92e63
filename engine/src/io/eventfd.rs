//! An eventfd: the doorbell producers ring to wake a sleeping shard. A shard in io_uring mode
//! sleeps in io_uring_enter with a POLL_ADD on this fd armed in its ring, so one wait covers new
//! requests and its writes' completions; in sync mode it sleeps in poll(2).

use std::os::unix::io::{AsFd, AsRawFd, RawFd};
use std::time::Duration;

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::eventfd::{self, EfdFlags};

use crate::error::{Error, Result};

/// A non-blocking, close-on-exec eventfd.
#[derive(Debug)]
pub struct EventFd {
    fd: eventfd::EventFd,
}

impl EventFd {
    pub fn new() -> Result<EventFd> {
        let fd = eventfd::EventFd::from_flags(EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC)
            .map_err(|e| Error::io("eventfd", "<eventfd>", e.into()))?;
        Ok(EventFd { fd })
    }

    pub(crate) fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// A duplicate descriptor of the same eventfd (one counter: reading either resets both).
    pub(crate) fn try_clone(&self) -> std::io::Result<std::os::fd::OwnedFd> {
        self.fd.as_fd().try_clone_to_owned()
    }

    /// Rings the doorbell (adds 1 to the counter). A full counter (EAGAIN) already means "wake
    /// up", so the result needs no handling.
    pub(crate) fn notify(&self) {
        let _ = self.fd.write(1);
    }

    /// Resets the counter, returning its value (0 if it was not rung).
    pub(crate) fn drain(&self) -> u64 {
        self.fd.read().unwrap_or(0)
    }

    /// Sleeps in poll(2) until rung or `timeout` passes, then drains. The plain-syscall wait used
    /// when io_uring is not available.
    pub(crate) fn wait_plain(&self, timeout: Option<Duration>) -> u64 {
        let ms = timeout.map_or(PollTimeout::NONE, |d| PollTimeout::try_from(d).unwrap_or(PollTimeout::MAX));
        let _ = poll(&mut [PollFd::new(self.fd.as_fd(), PollFlags::POLLIN)], ms);
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
