//! The leader-epoch cache (Kafka's `LeaderEpochFileCache`): `(epoch, start offset)` for each
//! leader epoch seen, in increasing order of both, persisted as `leader-epoch-checkpoint` in the
//! partition directory with Kafka's write sequence (temp file, fsync, rename, fsync directory).
//! Followers use it to find where their log diverged from the leader's.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::format::checkpoint::{LeaderEpochCheckpoint, LEADER_EPOCH_CHECKPOINT_FILE};
use crate::io::Storage;

/// The cache and its file.
#[derive(Debug)]
pub(crate) struct LeaderEpochCache {
    entries: Vec<(i32, i64)>,
    path: PathBuf,
    storage: Arc<dyn Storage>,
}

impl LeaderEpochCache {
    /// Loads `leader-epoch-checkpoint` from `dir` (empty if absent). A file that does not parse
    /// comes back as the error in the second element, with an empty cache: the caller rebuilds
    /// the cache from the batches' leader epochs (which is where it came from).
    pub(crate) fn load(storage: Arc<dyn Storage>, dir: &Path) -> Result<(LeaderEpochCache, Option<Error>)> {
        let path = dir.join(LEADER_EPOCH_CHECKPOINT_FILE);
        let mut entries = Vec::new();
        let mut problem = None;
        if storage.exists(&path) {
            let bytes = storage.read_small_file(&path, 16 << 20)?;
            let text = String::from_utf8_lossy(&bytes);
            // An empty file is what Kafka leaves when it crashed before its first write.
            if !text.trim().is_empty() {
                match LeaderEpochCheckpoint::parse(&text) {
                    Ok(cp) => entries = cp.entries,
                    Err(source) => problem = Some(Error::Corrupt { path: path.clone(), pos: 0, source }),
                }
            }
        }
        // Keep only a strictly increasing sequence (a hand-edited or damaged file is cut at the
        // first entry that goes backwards).
        let mut clean: Vec<(i32, i64)> = Vec::with_capacity(entries.len());
        for (e, o) in entries {
            if clean.last().is_none_or(|&(le, lo)| e > le && o >= lo) && e >= 0 && o >= 0 {
                clean.push((e, o));
            } else {
                break;
            }
        }
        Ok((LeaderEpochCache { entries: clean, path, storage }, problem))
    }

    pub(crate) fn entries(&self) -> &[(i32, i64)] {
        &self.entries
    }

    /// Records that `epoch` starts at `start_offset`, if it is newer than the latest epoch.
    /// Returns true when the cache changed (and was written).
    pub(crate) fn assign(&mut self, epoch: i32, start_offset: i64) -> Result<bool> {
        if epoch < 0 {
            return Ok(false);
        }
        match self.entries.last() {
            Some(&(le, lo)) if epoch <= le || start_offset < lo => Ok(false),
            _ => {
                self.entries.push((epoch, start_offset));
                self.persist()?;
                Ok(true)
            }
        }
    }

    /// Removes entries starting at or after `end_offset` (log truncation).
    pub(crate) fn truncate_from_end(&mut self, end_offset: i64) -> Result<()> {
        let before = self.entries.len();
        self.entries.retain(|&(_, o)| o < end_offset);
        if self.entries.len() != before {
            self.persist()?;
        }
        Ok(())
    }

    /// Drops entries wholly before `start_offset` (log start moved): the last entry at or below
    /// it is kept with its start moved up, as Kafka does.
    pub(crate) fn truncate_from_start(&mut self, start_offset: i64) -> Result<()> {
        let Some(last_below) = self.entries.iter().rposition(|&(_, o)| o <= start_offset) else {
            return Ok(());
        };
        let changed = last_below > 0 || self.entries[last_below].1 != start_offset;
        if changed {
            self.entries.drain(..last_below);
            self.entries[0].1 = start_offset;
            self.persist()?;
        }
        Ok(())
    }

    /// Kafka's `endOffsetFor`: for a follower at `epoch`, the largest epoch `<=` it that this
    /// log knows and the offset where the next epoch starts (the log end for the latest).
    /// `None` when every known epoch is newer.
    pub(crate) fn end_offset_for(&self, epoch: i32, log_end_offset: i64) -> Option<(i32, i64)> {
        let i = self.entries.iter().rposition(|&(e, _)| e <= epoch)?;
        let end = self.entries.get(i + 1).map(|&(_, o)| o).unwrap_or(log_end_offset);
        Some((self.entries[i].0, end))
    }

    fn persist(&self) -> Result<()> {
        let text = LeaderEpochCheckpoint { entries: self.entries.clone() }.serialize();
        self.storage.write_file_atomic(&self.path, text.as_bytes())
    }

    /// Rewrites the checkpoint (after recovery rebuilt entries).
    pub(crate) fn flush(&self) -> Result<()> {
        self.persist()
    }
}
