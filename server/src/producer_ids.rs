//! Producer ids for InitProducerId, never handed out twice, across restarts too: ids are taken in
//! blocks (as Kafka's coordinator takes blocks from its controller), and the end of the block in
//! use is written to `seglog-producer-ids` in the data directory (temporary file, fsync, rename,
//! directory fsync) before any id of it is given. A restart continues after that block: at most
//! one block of ids is skipped.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::{Result, ServerError};

/// The file holding the end of the block in use; Kafka ignores files it does not know in a log
/// directory.
pub const PRODUCER_IDS_FILE: &str = "seglog-producer-ids";
/// Ids per block (Kafka's coordinator takes blocks of 1,000).
const BLOCK: i64 = 1000;

pub(crate) struct ProducerIds {
    path: PathBuf,
    /// The next id to give, and the end (exclusive) of the block it is in.
    next: Mutex<(i64, i64)>,
}

impl ProducerIds {
    /// Reads where the last block ended (0 for a new directory).
    pub(crate) fn open(data_dir: &Path) -> Result<ProducerIds> {
        let path = data_dir.join(PRODUCER_IDS_FILE);
        let start = match std::fs::read_to_string(&path) {
            Ok(text) => parse(&text).ok_or_else(|| {
                ServerError::Config(format!("{}: expected `next.block.start=<id>`, found {text:?}", path.display()))
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
            Err(source) => return Err(ServerError::Io { what: format!("reading {}", path.display()), source }),
        };
        Ok(ProducerIds { path, next: Mutex::new((start, start)) })
    }

    /// A producer id not given before.
    pub(crate) fn next(&self) -> Result<i64> {
        let mut g = self.next.lock().unwrap_or_else(|p| p.into_inner());
        if g.0 == g.1 {
            let end = g.1 + BLOCK;
            self.persist(end)?;
            g.1 = end;
        }
        let id = g.0;
        g.0 += 1;
        Ok(id)
    }

    /// The engine's atomic replace (temporary file, fsync, rename, directory fsync), which never
    /// follows a symbolic link where a file belongs.
    fn persist(&self, end: i64) -> Result<()> {
        use seglog::io::Storage;
        let text = format!("next.block.start={end}\n");
        seglog::io::std_backend::StdStorage::default()
            .write_file_atomic(&self.path, text.as_bytes())
            .map_err(ServerError::Engine)
    }
}

fn parse(text: &str) -> Option<i64> {
    let v: i64 = text.trim().strip_prefix("next.block.start=")?.parse().ok()?;
    (v >= 0).then_some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_never_given_twice_across_restarts() {
        let dir = tempfile::tempdir().unwrap();
        let a = ProducerIds::open(dir.path()).unwrap();
        let first: Vec<i64> = (0..3).map(|_| a.next().unwrap()).collect();
        assert_eq!(first, [0, 1, 2]);
        drop(a);
        let b = ProducerIds::open(dir.path()).unwrap();
        assert_eq!(b.next().unwrap(), BLOCK);
        std::fs::write(dir.path().join(PRODUCER_IDS_FILE), "garbage").unwrap();
        assert!(ProducerIds::open(dir.path()).is_err());
    }
}
