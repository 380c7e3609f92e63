//! [`UringFile`]: a file read and written through the calling thread's ring, O_DIRECT rules
//! checked before the kernel sees a write.

#![allow(unsafe_code)]

#[cfg(test)]
use nix::errno::Errno;
use nix::fcntl::FallocateFlags;

use super::*;

/// Why an O_DIRECT write was refused before reaching the kernel: `what` ("offset", "length" or
/// "memory address") is `value`, not a multiple of `align`. Carried inside the `io::Error`
/// (kind `InvalidInput`, what EINVAL maps to) of an [`Error::Io`]; find it with
/// `source.get_ref().and_then(|e| e.downcast_ref::<Misaligned>())`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Misaligned {
    pub what: &'static str,
    pub value: u64,
    pub align: usize,
}

impl std::fmt::Display for Misaligned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "EINVAL: O_DIRECT write {} {} (0x{:x}) is not a multiple of the {}-byte alignment",
            self.what, self.value, self.value, self.align
        )
    }
}

impl std::error::Error for Misaligned {}

#[cfg(test)]
/// The errno an error carries: the OS one, or EINVAL for a [`Misaligned`] refusal.
pub(crate) fn error_errno(e: &Error) -> Option<i32> {
    match e {
        Error::Io { source, .. } => source.raw_os_error().or_else(|| {
            source.get_ref().and_then(|inner| inner.downcast_ref::<Misaligned>()).map(|_| Errno::EINVAL as i32)
        }),
        _ => None,
    }
}

/// Checks an O_DIRECT write's offset, length and buffer address.
pub(super) fn check_direct_write(a: DirectAlignment, pos: u64, len: usize, addr: usize) -> io::Result<()> {
    let bad = if !pos.is_multiple_of(a.offset as u64) {
        Some(Misaligned { what: "offset", value: pos, align: a.offset })
    } else if !len.is_multiple_of(a.offset) {
        Some(Misaligned { what: "length", value: len as u64, align: a.offset })
    } else if !addr.is_multiple_of(a.mem) {
        Some(Misaligned { what: "memory address", value: addr as u64, align: a.mem })
    } else {
        None
    };
    match bad {
        Some(m) => Err(io::Error::new(io::ErrorKind::InvalidInput, m)),
        None => Ok(()),
    }
}

// ---------------------------------------------------------------------------------------------
// Files
// ---------------------------------------------------------------------------------------------

/// A file whose I/O goes through the calling thread's ring. `direct` is set when it was opened
/// O_DIRECT.
#[derive(Debug)]
pub(crate) struct UringFile {
    pub(super) file: File,
    pub(super) path: PathBuf,
    pub(super) direct: Option<DirectAlignment>,
}

impl UringFile {
    /// Writes all of `buf` at `pos` with `rw_flags` (0 or RWF_DSYNC); for an O_DIRECT file the
    /// offset, length and address must be aligned.
    fn write_with_flags(&self, buf: &[u8], pos: u64, rw_flags: i32, op: &'static str) -> Result<()> {
        if buf.is_empty() {
            return Ok(());
        }
        if let Some(a) = self.direct {
            check_direct_write(a, pos, buf.len(), buf.as_ptr() as usize)
                .map_err(|e| Error::io("write", &self.path, e))?;
        }
        let fd = self.fd();
        self.ring(op, |ring| write_full(ring, fd, buf, pos, rw_flags))
    }

    fn ring<R>(&self, op: &'static str, f: impl FnOnce(&mut Ring) -> io::Result<R>) -> Result<R> {
        match with_thread_ring(f) {
            Ok(r) => r.map_err(|e| Error::io(op, &self.path, e)),
            Err(e) => Err(Error::io(op, &self.path, e)),
        }
    }

    fn fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }

    /// O_DIRECT read of any range: aligned requests go straight into `buf`; others read the
    /// aligned superset into a bounce buffer (pieces of at most [`BOUNCE_MAX`]) and copy out.
    fn read_direct(ring: &mut Ring, fd: RawFd, a: DirectAlignment, buf: &mut [u8], pos: u64) -> io::Result<usize> {
        let al = a.mem.max(a.offset);
        let al64 = al as u64;
        if pos.is_multiple_of(a.offset as u64)
            && buf.len().is_multiple_of(a.offset)
            && (buf.as_ptr() as usize).is_multiple_of(a.mem)
        {
            return read_full(ring, fd, buf, pos, Some(a.offset as u64));
        }
        let end = pos
            .checked_add(buf.len() as u64)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "read range overflows"))?;
        crate::io::record_bounced_read();
        let start = pos / al64 * al64;
        let aligned_end = end.div_ceil(al64) * al64;
        let chunk = ((aligned_end - start) as usize).min(BOUNCE_MAX.max(al));
        let mut bounce = AlignedBuf::new(chunk, al);
        let mut cur = start;
        let mut copied = 0usize;
        let mut read = 0u64;
        while cur < aligned_end {
            let want = ((aligned_end - cur) as usize).min(chunk);
            let n = read_once(ring, fd, &mut bounce.full_mut()[..want], cur)?;
            read += n as u64;
            let from = cur.max(pos);
            let to = (cur + n as u64).min(end);
            if to > from {
                let src = &bounce.full()[(from - cur) as usize..(to - cur) as usize];
                buf[(from - pos) as usize..(to - pos) as usize].copy_from_slice(src);
                copied = (to - pos) as usize;
            }
            if n == 0 || (n < want && !(cur + n as u64).is_multiple_of(al64)) {
                break; // end of file
            }
            cur += n as u64;
        }
        record_io(0, 0, read, 0, 0);
        Ok(copied)
    }
}

impl IoFile for UringFile {
    fn path(&self) -> &Path {
        &self.path
    }

    fn read_at(&self, buf: &mut [u8], pos: u64) -> Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let fd = self.fd();
        match self.direct {
            Some(a) => self.ring("read", |ring| UringFile::read_direct(ring, fd, a, buf, pos)),
            None => self.ring("read", |ring| read_full(ring, fd, buf, pos, None)),
        }
    }

    fn write_all_at(&self, buf: &[u8], pos: u64) -> Result<()> {
        self.write_with_flags(buf, pos, 0, "write")
    }

    fn write_all_at_dsync(&self, buf: &[u8], pos: u64) -> Result<()> {
        self.write_with_flags(buf, pos, rw_flags(true), "write RWF_DSYNC")
    }

    fn sync_data(&self) -> Result<()> {
        let fd = self.fd();
        self.ring("fdatasync", |ring| fsync_on(ring, fd, true))
    }

    fn set_len(&self, len: u64) -> Result<()> {
        let fd = self.fd();
        if caps().ftruncate {
            return self.ring("truncate", |ring| {
                // SAFETY: an ftruncate entry points to no memory of ours.
                unsafe { run_one(ring, opcode::Ftruncate::new(types::Fd(fd), len).build()) }.map(|_| ())
            });
        }
        record_io(1, 1, 0, 0, 0);
        self.file.set_len(len).map_err(|e| Error::io("truncate", &self.path, e))
    }

    fn allocate(&self, len: u64) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        let fd = self.fd();
        self.ring("fallocate", |ring| {
            let e = opcode::Fallocate::new(types::Fd(fd), len)
                .offset(0)
                .mode(FallocateFlags::FALLOC_FL_KEEP_SIZE.bits())
                .build();
            // SAFETY: a fallocate entry points to no memory of ours.
            unsafe { run_one(ring, e) }.map(|_| ())
        })
    }

    fn len(&self) -> Result<u64> {
        self.file.metadata().map(|m| m.len()).map_err(|e| Error::io("stat", &self.path, e))
    }

    fn modified_ms(&self) -> Result<i64> {
        let m = self.file.metadata().and_then(|m| m.modified()).map_err(|e| Error::io("stat", &self.path, e))?;
        Ok(m.duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0))
    }

    fn raw_fd(&self) -> Option<RawFd> {
        Some(self.fd())
    }

    fn direct_alignment(&self) -> Option<DirectAlignment> {
        self.direct
    }
}

// ---------------------------------------------------------------------------------------------
// Kernel capabilities
// ---------------------------------------------------------------------------------------------
