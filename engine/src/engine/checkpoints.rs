//! What the engine reads at startup and writes while it runs in the data directory: the
//! recovery-point and log-start-offset checkpoints, and whether the last shutdown was clean.

use std::collections::BTreeMap;
use std::path::Path;

use super::TopicPartition;
use crate::error::{Error, Result};
use crate::io::Storage;

/// What the engine found at startup: whether the last shutdown was clean, and the checkpoints.
#[derive(Debug, Default)]
pub(super) struct Startup {
    pub(super) clean: bool,
    pub(super) recovery_points: BTreeMap<(String, i32), i64>,
    pub(super) log_starts: BTreeMap<(String, i32), i64>,
}

impl Startup {
    /// Reads the clean-shutdown marker and the recovery-point and log-start-offset checkpoints of
    /// the data directory `dir`.
    pub(super) fn read(storage: &dyn Storage, dir: &Path) -> Result<Startup> {
        use crate::format::checkpoint::{
            CLEAN_SHUTDOWN_FILE, LOG_START_OFFSET_CHECKPOINT_FILE, RECOVERY_POINT_OFFSET_CHECKPOINT_FILE,
        };
        Ok(Startup {
            clean: storage.exists(&dir.join(CLEAN_SHUTDOWN_FILE)),
            recovery_points: read_offsets(storage, &dir.join(RECOVERY_POINT_OFFSET_CHECKPOINT_FILE))?,
            log_starts: read_offsets(storage, &dir.join(LOG_START_OFFSET_CHECKPOINT_FILE))?,
        })
    }
}

/// Writes the recovery-point and log-start-offset checkpoints of the data directory.
pub(super) fn write_checkpoints(
    storage: &dyn Storage,
    dir: &Path,
    offsets: &[(TopicPartition, i64, i64)],
) -> Result<()> {
    use crate::format::checkpoint::{
        OffsetCheckpoint, LOG_START_OFFSET_CHECKPOINT_FILE, RECOVERY_POINT_OFFSET_CHECKPOINT_FILE,
    };
    let mut sorted = offsets.to_vec();
    sorted.sort();
    let rp =
        OffsetCheckpoint { entries: sorted.iter().map(|(tp, r, _)| (tp.topic.clone(), tp.partition, *r)).collect() };
    let ls =
        OffsetCheckpoint { entries: sorted.iter().map(|(tp, _, l)| (tp.topic.clone(), tp.partition, *l)).collect() };
    storage.write_file_atomic(&dir.join(RECOVERY_POINT_OFFSET_CHECKPOINT_FILE), rp.serialize().as_bytes())?;
    storage.write_file_atomic(&dir.join(LOG_START_OFFSET_CHECKPOINT_FILE), ls.serialize().as_bytes())
}

/// Reads an offset checkpoint of the data directory; a missing or empty file is empty, a damaged
/// one is an error naming it.
pub(super) fn read_offsets(storage: &dyn Storage, path: &Path) -> Result<BTreeMap<(String, i32), i64>> {
    if !storage.exists(path) {
        return Ok(Default::default());
    }
    let bytes = storage.read_small_file(path, 256 << 20)?;
    let text = String::from_utf8_lossy(&bytes);
    if text.trim().is_empty() {
        return Ok(Default::default());
    }
    let cp = crate::format::checkpoint::OffsetCheckpoint::parse(&text).map_err(|source| Error::Corrupt {
        path: path.to_path_buf(),
        pos: 0,
        source,
    })?;
    Ok(cp.to_map())
}
