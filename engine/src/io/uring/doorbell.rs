//! Waiting on an eventfd (the shard's doorbell) through the ring, or with plain system calls.

#![allow(unsafe_code)]

use std::os::unix::io::BorrowedFd;

use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

use super::*;

/// Runs `f` with the caller's descriptor borrowed. Every function here takes the eventfd as a
/// `RawFd` (the callers in `io/mod.rs` and `ring.rs` hold the `EventFd` and pass `raw()`); once
/// they pass a `BorrowedFd`, this goes.
fn with_borrowed<R>(fd: RawFd, f: impl FnOnce(BorrowedFd<'_>) -> R) -> R {
    // SAFETY: a `BorrowedFd` asserts only that the descriptor stays open while it is borrowed;
    // `fd` is the caller's open eventfd for the duration of the call that passed it, and the
    // borrow ends when `f` returns, inside that call.
    f(unsafe { BorrowedFd::borrow_raw(fd) })
}

/// A poll(2) timeout in milliseconds, rounded up so that a wait never ends before `left`.
fn poll_timeout(left: Duration) -> PollTimeout {
    PollTimeout::try_from(left.as_nanos().div_ceil(1_000_000)).unwrap_or(PollTimeout::MAX)
}

pub(super) fn eventfd_err(fd: RawFd, e: io::Error) -> Error {
    Error::io("eventfd wait", format!("<eventfd {fd}>"), e)
}

/// Sleeps on the thread's ring until `fd` (an eventfd) is readable, then reads it: an
/// IORING_OP_READ of 8 bytes (linked to a LINK_TIMEOUT when `timeout` is set) and one
/// io_uring_enter that waits for it. Returns `Some(counter)` when woken, `None` on timeout.
/// A non-blocking (EFD_NONBLOCK) eventfd works too: on this kernel (6.18) the READ still waits
/// in one enter; where a kernel answers it with EAGAIN, the wait is retried as a POLL_ADD (plus
/// the timeout) and a non-blocking read(2). Falls back to [`wait_eventfd_plain`] if this
/// thread cannot have a ring.
pub(crate) fn wait_eventfd(fd: RawFd, timeout: Option<Duration>) -> Result<Option<u64>> {
    match with_thread_ring(|ring| wait_eventfd_on(ring, fd, timeout)) {
        Ok(r) => r,
        Err(_) => wait_eventfd_plain(fd, timeout),
    }
}

pub(super) fn wait_eventfd_on(ring: &mut Ring, fd: RawFd, timeout: Option<Duration>) -> Result<Option<u64>> {
    let deadline = timeout.map(|t| Instant::now() + t);
    let mut use_poll = false;
    let mut first_round = true;
    loop {
        let left = match deadline {
            Some(d) => {
                let now = Instant::now();
                if now >= d && !first_round {
                    return Ok(None);
                }
                Some(d.saturating_duration_since(now))
            }
            None => None,
        };
        let ts = left.map(|d| types::Timespec::new().sec(d.as_secs()).nsec(d.subsec_nanos()));
        let mut val = [0u8; 8];
        let first = if use_poll {
            opcode::PollAdd::new(types::Fd(fd), PollFlags::POLLIN.bits() as u32).build()
        } else {
            opcode::Read::new(types::Fd(fd), val.as_mut_ptr(), 8).offset(0).build()
        };
        let mut entries = vec![first];
        if let Some(ts) = ts.as_ref() {
            entries[0] = entries[0].clone().flags(squeue::Flags::IO_LINK);
            entries.push(opcode::LinkTimeout::new(ts).build());
        }
        // SAFETY: `val` and `ts` live on this stack frame until run returns, after both the
        // read (or poll) and its timeout have completed.
        let r = unsafe { ring.run(&entries) };
        first_round = false;
        let first = r.first().copied().unwrap_or(-(Errno::EIO as i32));
        match first {
            8 if !use_poll => {
                record_io(0, 0, 8, 0, 0);
                return Ok(Some(u64::from_ne_bytes(val)));
            }
            n if n > 0 && use_poll => {
                // Readable: take the counter without blocking.
                match read_eventfd_nonblocking(fd) {
                    Ok(Some(v)) => return Ok(Some(v)),
                    Ok(None) => continue, // another reader took it
                    Err(e) => return Err(eventfd_err(fd, e)),
                }
            }
            n if n >= 0 => {
                return Err(eventfd_err(
                    fd,
                    io::Error::new(io::ErrorKind::InvalidData, format!("eventfd read gave {n} bytes")),
                ))
            }
            e => match Errno::from_raw(-e) {
                Errno::ECANCELED if deadline.is_some() => return Ok(None),
                Errno::EAGAIN if !use_poll => use_poll = true,
                Errno::EINTR => {}
                errno => return Err(eventfd_err(fd, errno.into())),
            },
        }
    }
}

/// Reads an eventfd that poll reported readable; `None` if it was empty (EAGAIN).
pub(super) fn read_eventfd_nonblocking(fd: RawFd) -> io::Result<Option<u64>> {
    let ready = with_borrowed(fd, |fd| poll(&mut [PollFd::new(fd, PollFlags::POLLIN)], PollTimeout::ZERO));
    if !matches!(ready, Ok(n) if n > 0) {
        return Ok(None);
    }
    read_eventfd_raw(fd)
}

pub(super) fn read_eventfd_raw(fd: RawFd) -> io::Result<Option<u64>> {
    let mut val = [0u8; 8];
    record_io(0, 1, 0, 0, 0);
    match with_borrowed(fd, |fd| nix::unistd::read(fd, &mut val)) {
        Ok(8) => {
            record_io(0, 0, 8, 0, 0);
            Ok(Some(u64::from_ne_bytes(val)))
        }
        Err(Errno::EAGAIN | Errno::EINTR) => Ok(None),
        Err(e) => Err(e.into()),
        Ok(n) => Err(io::Error::new(io::ErrorKind::InvalidData, format!("eventfd read gave {n} bytes"))),
    }
}

/// The plain fallback for sync mode: poll(2) for readability (with the timeout), then read(2).
/// Returns `Some(counter)` when woken, `None` on timeout.
pub(crate) fn wait_eventfd_plain(fd: RawFd, timeout: Option<Duration>) -> Result<Option<u64>> {
    let deadline = timeout.map(|t| Instant::now() + t);
    loop {
        let wait = deadline.map_or(PollTimeout::NONE, |d| poll_timeout(d.saturating_duration_since(Instant::now())));
        record_io(0, 1, 0, 0, 0);
        let polled = with_borrowed(fd, |fd| {
            let mut pfd = [PollFd::new(fd, PollFlags::POLLIN)];
            poll(&mut pfd, wait).map(|n| (n, pfd[0].revents().unwrap_or(PollFlags::empty())))
        });
        let revents = match polled {
            Err(Errno::EINTR) => continue,
            Err(e) => return Err(eventfd_err(fd, e.into())),
            Ok((0, _)) => {
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    return Ok(None);
                }
                continue;
            }
            Ok((_, revents)) => revents,
        };
        if revents.intersects(PollFlags::POLLERR | PollFlags::POLLNVAL) && !revents.contains(PollFlags::POLLIN) {
            return Err(eventfd_err(fd, errno_err(Errno::EBADF as i32)));
        }
        match read_eventfd_raw(fd) {
            Ok(Some(v)) => return Ok(Some(v)),
            Ok(None) => continue,
            Err(e) => return Err(eventfd_err(fd, e)),
        }
    }
}
