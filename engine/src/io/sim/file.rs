//! An open simulated file.

use super::*;

/// An open simulated file. Positions are absolute; renames do not change `path`.
pub struct SimFile {
    pub(super) state: Arc<Mutex<SimState>>,
    pub(super) ino: usize,
    pub(super) path: PathBuf,
    pub(super) writable: bool,
    pub(super) align: Option<DirectAlignment>,
}

impl fmt::Debug for SimFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimFile").field("path", &self.path).field("inode", &self.ino).finish()
    }
}

impl SimFile {
    fn lock(&self) -> MutexGuard<'_, SimState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
    fn check_writable(&self, op: &'static str) -> Result<()> {
        if self.writable {
            Ok(())
        } else {
            Err(Error::io(op, &self.path, Errno::EBADF.into()))
        }
    }
}

impl IoFile for SimFile {
    fn path(&self) -> &Path {
        &self.path
    }
    fn read_at(&self, buf: &mut [u8], pos: u64) -> Result<usize> {
        let mut s = self.lock();
        s.counters.reads += 1;
        if pos.saturating_add(buf.len() as u64) > s.inodes[self.ino].volatile.len {
            s.counters.reads_past_eof += 1;
        }
        let n = s.inodes[self.ino].volatile.read(buf, pos);
        crate::io::record_io(1, 1, n as u64, 0, 0);
        Ok(n)
    }
    fn write_all_at(&self, buf: &[u8], pos: u64) -> Result<()> {
        self.check_writable("write")?;
        if let Some(a) = self.align {
            let (o, m) = (a.offset as u64, a.mem);
            if !pos.is_multiple_of(o)
                || !(buf.len() as u64).is_multiple_of(o)
                || !(buf.as_ptr() as usize).is_multiple_of(m)
            {
                return Err(Error::io("write", &self.path, Errno::EINVAL.into()));
            }
        }
        let mut s = self.lock();
        s.begin(OpKind::Write, "write", &self.path)?;
        s.counters.bytes_written += buf.len() as u64;
        s.data_op(self.ino, DataOp::Write { pos, bytes: buf.to_vec() });
        crate::io::record_io(1, 1, 0, buf.len() as u64, 0);
        crate::io::record_writes(1);
        Ok(())
    }
    fn sync_data(&self) -> Result<()> {
        let mut s = self.lock();
        s.begin(OpKind::Sync, "fdatasync", &self.path)?;
        if s.faults.contains(&Fault::LyingSync) {
            return Ok(());
        }
        let i = &mut s.inodes[self.ino];
        i.durable = i.volatile.clone();
        i.pending.clear();
        crate::io::record_io(1, 1, 0, 0, 1);
        Ok(())
    }
    fn set_len(&self, len: u64) -> Result<()> {
        self.check_writable("truncate")?;
        let mut s = self.lock();
        s.begin(OpKind::SetLen, "truncate", &self.path)?;
        s.data_op(self.ino, DataOp::SetLen(len));
        Ok(())
    }
    fn allocate(&self, len: u64) -> Result<()> {
        self.check_writable("fallocate")?;
        if len == 0 {
            return Ok(());
        }
        self.lock().begin(OpKind::Allocate, "fallocate", &self.path)
    }
    fn len(&self) -> Result<u64> {
        Ok(self.lock().inodes[self.ino].volatile.len)
    }
    fn modified_ms(&self) -> Result<i64> {
        Ok(self.lock().inodes[self.ino].mtime_ms)
    }
    fn direct_alignment(&self) -> Option<DirectAlignment> {
        self.align
    }
}
