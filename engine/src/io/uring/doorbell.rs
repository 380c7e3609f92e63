//! Waiting on an eventfd (the shard's doorbell) through the ring, or with plain system calls.

#![allow(unsafe_code)]

use super::*;

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
pub fn wait_eventfd(fd: RawFd, timeout: Option<Duration>) -> Result<Option<u64>> {
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
        let mut val = 0u64;
        let first = if use_poll {
            opcode::PollAdd::new(types::Fd(fd), libc::POLLIN as u32).build()
        } else {
            opcode::Read::new(types::Fd(fd), (&mut val as *mut u64).cast::<u8>(), 8).offset(0).build()
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
        let first = r.first().copied().unwrap_or(-libc::EIO);
        match first {
            8 if !use_poll => {
                record_io(0, 0, 8, 0, 0);
                return Ok(Some(val));
            }
            n if n > 0 && use_poll => {
                // Readable: take the counter without blocking.
                match read_eventfd_nonblocking(fd) {
                    Ok(Some(v)) => return Ok(Some(v)),
                    Ok(None) => continue, // another reader took it
                    Err(e) => return Err(eventfd_err(fd, e)),
                }
            }
            e if e == -libc::ECANCELED && deadline.is_some() => return Ok(None),
            e if e == -libc::EAGAIN && !use_poll => use_poll = true,
            e if e == -libc::EINTR => {}
            e if e < 0 => return Err(eventfd_err(fd, errno_err(-e))),
            n => {
                return Err(eventfd_err(
                    fd,
                    io::Error::new(io::ErrorKind::InvalidData, format!("eventfd read gave {n} bytes")),
                ))
            }
        }
    }
}

/// Reads an eventfd that poll reported readable; `None` if it was empty (EAGAIN).
pub(super) fn read_eventfd_nonblocking(fd: RawFd) -> io::Result<Option<u64>> {
    let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    // SAFETY: pfd is a valid pollfd on our stack for the duration of the call.
    let rc = unsafe { libc::poll(&mut pfd, 1, 0) };
    if rc <= 0 {
        return Ok(None);
    }
    read_eventfd_raw(fd)
}

pub(super) fn read_eventfd_raw(fd: RawFd) -> io::Result<Option<u64>> {
    let mut val = 0u64;
    record_io(0, 1, 0, 0, 0);
    // SAFETY: `val` is 8 writable bytes on our stack, alive for the duration of the call.
    let n = unsafe { libc::read(fd, (&mut val as *mut u64).cast::<libc::c_void>(), 8) };
    if n == 8 {
        record_io(0, 0, 8, 0, 0);
        return Ok(Some(val));
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EAGAIN) | Some(libc::EINTR) if n < 0 => Ok(None),
        _ if n < 0 => Err(e),
        _ => Err(io::Error::new(io::ErrorKind::InvalidData, format!("eventfd read gave {n} bytes"))),
    }
}

/// The plain fallback for sync mode: poll(2) for readability (with the timeout), then read(2).
/// Returns `Some(counter)` when woken, `None` on timeout.
pub fn wait_eventfd_plain(fd: RawFd, timeout: Option<Duration>) -> Result<Option<u64>> {
    let deadline = timeout.map(|t| Instant::now() + t);
    loop {
        let ms: libc::c_int = match deadline {
            None => -1,
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                left.as_nanos().div_ceil(1_000_000).min(libc::c_int::MAX as u128) as libc::c_int
            }
        };
        let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
        record_io(0, 1, 0, 0, 0);
        // SAFETY: pfd is a valid pollfd on our stack for the duration of the call.
        let rc = unsafe { libc::poll(&mut pfd, 1, ms) };
        if rc < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(eventfd_err(fd, e));
        }
        if rc == 0 {
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(None);
            }
            continue;
        }
        if pfd.revents & (libc::POLLERR | libc::POLLNVAL) != 0 && pfd.revents & libc::POLLIN == 0 {
            return Err(eventfd_err(fd, errno_err(libc::EBADF)));
        }
        match read_eventfd_raw(fd) {
            Ok(Some(v)) => return Ok(Some(v)),
            Ok(None) => continue,
            Err(e) => return Err(eventfd_err(fd, e)),
        }
    }
}
