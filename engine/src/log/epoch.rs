//! The leader-epoch cache (Kafka's `LeaderEpochFileCache`): `(epoch, start offset)` for each
//! leader epoch seen, in increasing order of both, persisted as `leader-epoch-checkpoint` in the
//! partition directory with Kafka's write sequence (temp file, fsync, rename, fsync directory).
//! Followers use it to find where their log diverged from the leader's.
//!
//! Kafka writes the file at each new epoch before the append that starts it goes on. A log can
//! instead *defer* its writes to its owner ([`LeaderEpochCache::defer`]: the engine's shards,
//! which would otherwise stop every partition of the shard for two fsyncs whenever one starts an
//! epoch, thousands of times after a leader election). Deferred, the cache says from where the
//! file may differ from it ([`LeaderEpochCache::unpersisted_from`]: an entry assigned there, or
//! cut there by a truncation) and the recovery point that goes into
//! `recovery-point-offset-checkpoint` stays at or below it. Recovery from a recovery point drops
//! the file's entries from there on and assigns again the epochs of the batches it rescans
//! (`log::load`), so both a missing entry and a stale one are set right: what the file holds
//! below the recovery point is what the cache held, which is what Kafka's writes at assignment
//! and truncation ensure.

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
    /// Changes wait for the owner ([`LeaderEpochCache::pending`]) instead of being written at
    /// once.
    deferred: bool,
    /// Counts the changes; `persisted` is the count the file holds.
    version: u64,
    persisted: u64,
    /// Where the file may differ from the cache (an entry assigned or cut there since the file
    /// was last written), the lowest such offset.
    unpersisted_from: Option<i64>,
}

/// A deferred write of the file: its contents at one version of the cache.
#[derive(Debug)]
pub(crate) struct EpochCheckpointWrite {
    pub(crate) version: u64,
    pub(crate) path: PathBuf,
    pub(crate) contents: Vec<u8>,
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
        let cache = LeaderEpochCache {
            entries: clean,
            path,
            storage,
            deferred: false,
            version: 0,
            persisted: 0,
            unpersisted_from: None,
        };
        Ok((cache, problem))
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
                self.differs_from(start_offset);
                self.changed()?;
                Ok(true)
            }
        }
    }

    /// After a crash: drops the entries from `from` on (`None`: none) and assigns `starts`, the
    /// epoch starts of the batches rescanned from there (see `log::load`); the file is written
    /// once, and only if that changed the cache.
    pub(crate) fn reassign_from(&mut self, from: Option<i64>, starts: Vec<(i32, i64)>) -> Result<()> {
        let before = self.entries.clone();
        let deferred = std::mem::replace(&mut self.deferred, true);
        if let Some(from) = from {
            self.truncate_from_end(from)?;
        }
        for (e, o) in starts {
            self.assign(e, o)?;
        }
        self.deferred = deferred;
        if self.entries == before {
            self.written(self.version);
            self.unpersisted_from = None;
            Ok(())
        } else if deferred {
            Ok(())
        } else {
            self.flush()
        }
    }

    /// Removes entries starting at or after `end_offset` (log truncation).
    pub(crate) fn truncate_from_end(&mut self, end_offset: i64) -> Result<()> {
        let before = self.entries.len();
        self.entries.retain(|&(_, o)| o < end_offset);
        if self.entries.len() != before {
            // The file may still hold what was cut: recovery must start at or below the cut
            // to drop it again (`log::load`). (`i64::MIN` cuts everything.)
            self.differs_from(end_offset.max(0));
            self.changed()?;
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
            // Nothing below the log start is read again: recovery from the start finds what
            // the file lacks from there.
            self.unpersisted_from = self.unpersisted_from.map(|o| o.max(start_offset));
            self.changed()?;
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

    /// The file may differ from the cache from `offset` on (until it is written).
    fn differs_from(&mut self, offset: i64) {
        self.unpersisted_from = Some(self.unpersisted_from.map_or(offset, |o| o.min(offset)));
    }

    /// A change: written at once, or left for the owner when deferred.
    fn changed(&mut self) -> Result<()> {
        self.version += 1;
        if self.deferred {
            Ok(())
        } else {
            self.flush()
        }
    }

    fn contents(&self) -> Vec<u8> {
        LeaderEpochCheckpoint { entries: self.entries.clone() }.serialize().into_bytes()
    }

    /// Writes the checkpoint now, with every entry (after recovery rebuilt entries, at a clean
    /// close, or at each change when not deferred).
    pub(crate) fn flush(&mut self) -> Result<()> {
        self.storage.write_file_atomic(&self.path, &self.contents())?;
        self.written(self.version);
        Ok(())
    }

    /// From now on, changes are written by the owner: see the module doc.
    pub(crate) fn defer(&mut self) {
        self.deferred = true;
    }

    /// True when the file lacks a change.
    pub(crate) fn behind(&self) -> bool {
        self.version != self.persisted
    }

    /// The write that would bring the file up to date, if it is not.
    pub(crate) fn pending(&self) -> Option<EpochCheckpointWrite> {
        self.behind().then(|| EpochCheckpointWrite {
            version: self.version,
            path: self.path.clone(),
            contents: self.contents(),
        })
    }

    /// The file now holds the cache as it was at `version` (from [`LeaderEpochCache::pending`]).
    pub(crate) fn written(&mut self, version: u64) {
        self.persisted = self.persisted.max(version);
        if self.persisted == self.version {
            self.unpersisted_from = None;
        }
    }

    /// The lowest offset from which the file may differ from the cache, lacking an entry or
    /// holding one cut since (`None` when it is up to date): a recovery point written for this
    /// log must not pass it.
    pub(crate) fn unpersisted_from(&self) -> Option<i64> {
        self.unpersisted_from
    }
}

#[cfg(test)]
mod tests {
    use crate::format::builder::BatchBuilder;
    use crate::io::sim::{SimRng, SimStorage};
    use crate::io::Storage;
    use crate::log::{Log, LogOptions, Recovery};
    use std::sync::Arc;

    fn append(log: &mut Log, epoch: i32) {
        let mut b = BatchBuilder::new();
        b.push(1_700_000_000_000, None, Some(&[7u8; 100][..]), &[]);
        log.append_as_leader(&mut b.build().unwrap(), epoch).unwrap();
    }

    fn open(sim: &SimStorage, recovery: Recovery) -> Log {
        let options = LogOptions { storage: Arc::new(sim.clone()), recovery, ..LogOptions::default() };
        Log::open("/data/t-0", options).unwrap()
    }

    /// Deferred, the epoch checkpoint lags the log; the recovery point for the checkpoint file
    /// stays at the start of the epoch the file lacks, so that recovery from it after a power cut
    /// finds that epoch in the batches again. From the log's own recovery point (past that start)
    /// it would be lost: the bound is what keeps it.
    #[test]
    fn a_deferred_epoch_is_found_again_by_recovery_from_the_checkpointed_recovery_point() {
        let sim = SimStorage::new();
        let mut log = open(&sim, Recovery::default());
        log.defer_epoch_checkpoint();
        append(&mut log, 0);
        append(&mut log, 0);
        log.flush().unwrap();
        assert_eq!((log.recovery_point(), log.checkpointed_recovery_point()), (2, 0));
        let w = log.epoch_checkpoint_write().expect("behind");
        sim.write_file_atomic(&w.path, &w.contents).unwrap();
        log.epoch_checkpoint_written(w.version);
        assert!(!log.epoch_checkpoint_behind());
        assert_eq!(log.checkpointed_recovery_point(), 2);

        append(&mut log, 4);
        append(&mut log, 4);
        log.roll(None).unwrap();
        // A write handed out before a later change leaves the file behind that change.
        let stale = log.epoch_checkpoint_write().unwrap();
        append(&mut log, 5);
        log.epoch_checkpoint_written(stale.version);
        assert!(log.epoch_checkpoint_behind());
        log.flush().unwrap();
        let (rp, checkpointed) = (log.recovery_point(), log.checkpointed_recovery_point());
        assert_eq!((rp, checkpointed), (5, 2));

        // The file holds epoch 0 only. Epoch 4 starts in the sealed segment, which recovery
        // from the log's own recovery point does not rescan.
        let mut rng = SimRng::new(7);
        let recovered = open(&sim.crash(&mut rng), Recovery::FromRecoveryPoint(checkpointed));
        assert_eq!(recovered.leader_epochs(), &[(0, 0), (4, 2), (5, 4)]);
        let past_it = open(&sim.crash(&mut rng), Recovery::FromRecoveryPoint(rp));
        assert_eq!(past_it.leader_epochs(), &[(0, 0), (5, 4)], "only recovery finds epoch 4");
    }

    /// Not deferred (a log on its own), each new epoch is in the file before its append goes on,
    /// as in Kafka, and the recovery point needs no bound; a clean close of a deferred log
    /// writes what the file lacks.
    #[test]
    fn an_epoch_is_written_at_assignment_unless_deferred_and_at_a_clean_close() {
        let sim = SimStorage::new();
        let mut log = open(&sim, Recovery::default());
        append(&mut log, 3);
        assert!(!log.epoch_checkpoint_behind());
        log.flush().unwrap();
        assert_eq!(log.checkpointed_recovery_point(), log.recovery_point());
        log.defer_epoch_checkpoint();
        append(&mut log, 6);
        assert!(log.epoch_checkpoint_behind());
        log.close().unwrap();
        let log = open(&sim.crash(&mut SimRng::new(1)), Recovery::Clean);
        assert_eq!(log.leader_epochs(), &[(3, 0), (6, 1)]);
    }

    fn write_pending(sim: &SimStorage, log: &mut Log) {
        let w = log.epoch_checkpoint_write().expect("behind");
        sim.write_file_atomic(&w.path, &w.contents).unwrap();
        log.epoch_checkpoint_written(w.version);
    }

    /// A truncation the file does not know of yet, then appends in an epoch still in the cache:
    /// the file holds an epoch the log no longer has. The recovery point for the checkpoint stays
    /// at the cut, and recovery from it drops the file's entries from there.
    #[test]
    fn a_cut_the_file_lacks_is_made_again_by_recovery() {
        let sim = SimStorage::new();
        let mut log = open(&sim, Recovery::default());
        log.defer_epoch_checkpoint();
        for epoch in [4, 4, 4, 5] {
            append(&mut log, epoch);
        }
        write_pending(&sim, &mut log);
        log.flush().unwrap();
        assert!(log.truncate_to(2).unwrap());
        assert_eq!(log.leader_epochs(), &[(4, 0)]);
        for _ in 0..3 {
            append(&mut log, 4);
        }
        log.flush().unwrap();
        assert_eq!((log.recovery_point(), log.checkpointed_recovery_point()), (5, 2));
        let recovered = open(&sim.crash(&mut SimRng::new(3)), Recovery::FromRecoveryPoint(2));
        assert_eq!(recovered.leader_epochs(), &[(4, 0)]);
    }

    /// The same cut, then a new epoch that starts below the entry the file still holds: recovery
    /// drops the stale entry and assigns the new epoch.
    #[test]
    fn a_new_epoch_after_a_cut_the_file_lacks_is_recovered() {
        let sim = SimStorage::new();
        let mut log = open(&sim, Recovery::default());
        log.defer_epoch_checkpoint();
        for epoch in [4, 4, 4, 5] {
            append(&mut log, epoch);
        }
        write_pending(&sim, &mut log);
        log.flush().unwrap();
        assert!(log.truncate_to(2).unwrap());
        for _ in 0..3 {
            append(&mut log, 6);
        }
        log.flush().unwrap();
        let checkpointed = log.checkpointed_recovery_point();
        assert_eq!(checkpointed, 2);
        let recovered = open(&sim.crash(&mut SimRng::new(3)), Recovery::FromRecoveryPoint(checkpointed));
        assert_eq!(recovered.leader_epochs(), &[(4, 0), (6, 2)]);
    }
}
