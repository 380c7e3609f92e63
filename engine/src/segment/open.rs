//! Opening an existing segment's files: eagerly for tools, lazily for a log, and turning a
//! segment into the active or a sealed one.

use super::*;

/// The last entry of a time index file of `len` bytes (every whole entry counts, as in
/// `from_bytes`), `(-1, base)` when it has none: what a sealed segment needs without loading it.
fn last_time_entry(file: &dyn IoFile, base_offset: i64, len: u64) -> Result<TimestampOffset> {
    let n = len / TIME_ENTRY_SIZE as u64;
    if n == 0 {
        return Ok(TimestampOffset { timestamp: batch::NO_TIMESTAMP, offset: base_offset });
    }
    let mut b = [0u8; TIME_ENTRY_SIZE];
    file.read_exact_at(&mut b, (n - 1) * TIME_ENTRY_SIZE as u64)?;
    let e = TimeEntry::decode(&b, 0);
    // Saturating: a damaged entry of a segment whose base is near i64::MAX must not overflow
    // here; the sanity check (or the rebuild) refuses it.
    Ok(TimestampOffset { timestamp: e.timestamp, offset: base_offset.saturating_add(e.relative_offset as i64) })
}

impl Segment {
    fn check_log_len(log_path: &Path, len: u64) -> Result<()> {
        if len > i32::MAX as u64 {
            return Err(Error::Corrupt {
                path: log_path.to_path_buf(),
                pos: i32::MAX as u64,
                source: crate::format::FormatError::BatchTooLarge { size: len as i64, limit: i32::MAX as i64 },
            });
        }
        Ok(())
    }

    /// The segment's `.log`, opened read-write, and its length (checked to fit a segment).
    fn open_log_file(storage: &dyn Storage, dir: &Path, base_offset: i64) -> Result<(Arc<dyn IoFile>, u64)> {
        let log_path = dir.join(filename::log_file_name(base_offset));
        let log = storage.open_log(&log_path, OpenMode::ReadWrite)?;
        let len = log.len()?;
        Segment::check_log_len(&log_path, len)?;
        Ok((log, len))
    }

    /// Opens the files of an existing segment and reads both indexes into the arena of `res`;
    /// the files stay open. A missing `.timeindex` is created
    /// empty (as Kafka does); a missing `.index` is created empty and reported through the return
    /// flag so the caller rebuilds it (Kafka recovers such a segment). For tools and tests: a log
    /// opens its segments with `Segment::open_lazy`.
    pub fn open_existing(
        storage: &dyn Storage,
        dir: &Path,
        base_offset: i64,
        settings: SegmentSettings,
        res: &SegmentResources,
    ) -> Result<(Segment, bool)> {
        let res = res.clone();
        let (log, len) = Segment::open_log_file(storage, dir, base_offset)?;
        let limit = index_file_limit(settings.segment_index_bytes);
        let idx_path = dir.join(filename::index_file_name(base_offset));
        let tidx_path = dir.join(filename::time_index_file_name(base_offset));
        let arena = Some(&res.arena);
        let mut needs_rebuild = false;
        let offset_index = if storage.exists(&idx_path) {
            let f = storage.open(&idx_path, OpenMode::ReadWrite)?;
            OffsetIndex::load(arena, base_offset, f, settings.segment_index_bytes, limit)?
        } else {
            needs_rebuild = true;
            let f = storage.open(&idx_path, OpenMode::CreateNew)?;
            OffsetIndex::from_bytes(base_offset, Vec::new(), settings.segment_index_bytes, Some(f))
        };
        let time_index = if storage.exists(&tidx_path) {
            let f = storage.open(&tidx_path, OpenMode::ReadWrite)?;
            TimeIndex::load(arena, base_offset, f, settings.segment_index_bytes, limit)?
        } else {
            let f = storage.open(&tidx_path, OpenMode::CreateNew)?;
            TimeIndex::from_bytes(base_offset, Vec::new(), settings.segment_index_bytes, Some(f))
        };
        let max_timestamp_so_far = time_index.last_entry();
        Ok((
            Segment {
                base_offset,
                dir: dir.to_path_buf(),
                log,
                size: len as u32,
                offset_index,
                time_index,
                sealed: None,
                lazy_log: None,
                storage: None,
                res,
                segment_index_bytes: settings.segment_index_bytes,
                max_timestamp_so_far,
                index_interval_bytes: settings.index_interval_bytes,
                dense_index: IndexDensity::unknown(),
            },
            needs_rebuild,
        ))
    }

    /// Opens an existing segment without reading its indexes: they load on first use, under the
    /// memory budget of `res`, and its files are [`LazyFile`]s under their descriptor
    /// limit. Only the time index's last entry is read (for the segment's max timestamp). Missing
    /// index files are handled as in [`Segment::open_existing`].
    pub(crate) fn open_lazy(
        storage: Arc<dyn Storage>,
        dir: &Path,
        base_offset: i64,
        settings: SegmentSettings,
        res: &SegmentResources,
    ) -> Result<(Segment, bool)> {
        let res = res.clone();
        let (log, len) = Segment::open_log_file(&*storage, dir, base_offset)?;
        let lazy_log = LazyFile::adopt(storage.clone(), log, Reopen::Log, &res.files);
        let limit = index_file_limit(settings.segment_index_bytes);
        let open_index = |path: &Path| -> Result<(Arc<LazyFile>, u64, bool)> {
            if storage.exists(path) {
                let f = LazyFile::create(storage.clone(), path, OpenMode::ReadWrite, Reopen::Plain, &res.files)?;
                let len = f.len()?;
                if len > limit {
                    return Err(Error::CorruptIndex {
                        path: path.to_path_buf(),
                        detail: format!("index file is {len} bytes, more than segment.index.bytes allows ({limit})"),
                    });
                }
                Ok((f, len, false))
            } else {
                let f = LazyFile::create(storage.clone(), path, OpenMode::CreateNew, Reopen::Plain, &res.files)?;
                Ok((f, 0, true))
            }
        };
        let (fi, ilen, needs_rebuild) = open_index(&dir.join(filename::index_file_name(base_offset)))?;
        let (ft, tlen, _) = open_index(&dir.join(filename::time_index_file_name(base_offset)))?;
        let max_timestamp_so_far = last_time_entry(&*ft, base_offset, tlen)?;
        let entries = ((ilen / OFFSET_ENTRY_SIZE as u64) as usize, (tlen / TIME_ENTRY_SIZE as u64) as usize);
        let sealed = SealedIndexes::unloaded(&res, base_offset, fi, ft, settings.segment_index_bytes, limit, entries);
        let (offset_index, time_index) = Segment::placeholder_indexes(base_offset);
        Ok((
            Segment {
                base_offset,
                dir: dir.to_path_buf(),
                log: lazy_log.clone(),
                size: len as u32,
                offset_index,
                time_index,
                sealed: Some(sealed),
                lazy_log: Some(lazy_log),
                storage: Some(storage),
                res,
                segment_index_bytes: settings.segment_index_bytes,
                max_timestamp_so_far,
                index_interval_bytes: settings.index_interval_bytes,
                dense_index: IndexDensity::unknown(),
            },
            needs_rebuild,
        ))
    }

    /// Recomputes the max timestamp so far from the time index plus a walk after its last entry
    /// (Kafka's `readLargestTimestamp`), for a segment whose time index may lag its log.
    pub(crate) fn reload_max_timestamp(&mut self) -> Result<()> {
        let (last, pos) = {
            let idx = self.indexes()?;
            let last = idx.time().last_entry();
            (last, idx.offset().lookup(last.offset).position.min(self.size))
        };
        let mut best = last;
        let mut scan = self.scanner(pos);
        while let Some(b) = scan.next_batch()? {
            if b.header.max_timestamp > best.timestamp {
                best = TimestampOffset { timestamp: b.header.max_timestamp, offset: b.last_offset() };
            }
        }
        self.max_timestamp_so_far = best;
        Ok(())
    }

    /// Makes the segment read-only: its indexes go to the index cache (packed, under the memory
    /// budget) and its `.log` becomes a lazily opened file (when the segment knows its storage).
    pub(crate) fn into_sealed(mut self) -> SealedSegment {
        self.seal_indexes();
        if let (None, Some(storage)) = (&self.lazy_log, &self.storage) {
            let lf = LazyFile::adopt(storage.clone(), self.log.clone(), Reopen::Log, &self.res.files);
            self.log = lf.clone();
            self.lazy_log = Some(lf);
        }
        SealedSegment { seg: self }
    }

    /// Makes this segment the active one again (after truncation removed later segments, or on
    /// open): indexes get room for `segment.index.bytes` again, in growth slots of the arena, and
    /// the `.log` stays open.
    pub(crate) fn into_active(
        mut self,
        storage: Arc<dyn Storage>,
        settings: SegmentSettings,
        now_ms: i64,
        roll_jitter_ms: i64,
    ) -> Result<ActiveSegment> {
        self.own_indexes(true)?;
        self.offset_index.resize(settings.segment_index_bytes)?;
        self.time_index.resize(settings.segment_index_bytes)?;
        self.offset_index.reserve(&self.res.arena);
        self.time_index.reserve(&self.res.arena);
        self.offset_index.prefault_warm();
        self.time_index.prefault_warm();
        self.segment_index_bytes = settings.segment_index_bytes;
        self.storage = Some(storage.clone());
        let file = match self.lazy_log.take() {
            Some(lf) => lf.detach()?,
            None => self.log.clone(),
        };
        let tail = Arc::new(TailFile::new(file.clone(), self.size as u64, settings.tail_cache_bytes)?);
        self.log = tail.clone();
        Ok(ActiveSegment::assemble(self, file, tail, storage, settings, now_ms, roll_jitter_ms))
    }
}
