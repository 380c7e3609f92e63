//! Kafka's small files beside the segments, decoded for `dump` and checked by `verify`:
//! checkpoint files (through `seglog::format::checkpoint`), producer-state `.snapshot` files and
//! `.txnindex` files (decoded here, FACTS §11: the engine has no parser for them yet).
//!
//! Every file is opened through [`crate::files::open_regular`]. Checkpoint files are read whole
//! up to [`MAX_CHECKPOINT_BYTES`]; snapshots and transaction indexes, which grow with producers
//! and aborted transactions, are read in bounded chunks: a first pass checks the file, a second
//! hands out its entries one at a time.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use seglog::format::checkpoint::{CleanShutdown, LeaderEpochCheckpoint, OffsetCheckpoint, PartitionMetadata};
use seglog::format::{be_i16, be_i32, be_u32};
use serde::Serialize;

use crate::layout::CheckpointKind;

/// Checkpoint files are small (a line per partition or per leader epoch: 16 MiB is hundreds of
/// thousands of lines); anything larger is refused rather than read.
pub const MAX_CHECKPOINT_BYTES: u64 = 16 << 20;

/// A decoded checkpoint file: text lines for humans and a JSON value.
#[derive(Debug)]
pub struct Decoded {
    pub lines: Vec<String>,
    pub json: serde_json::Value,
}

fn read_text(path: &Path) -> Result<String, String> {
    let bytes = crate::files::read_capped(path, MAX_CHECKPOINT_BYTES).map_err(|e| match e.kind() {
        std::io::ErrorKind::FileTooLarge => {
            format!("{}: more than {MAX_CHECKPOINT_BYTES} bytes is too large for a checkpoint file", path.display())
        }
        _ => format!("{}: {e}", path.display()),
    })?;
    String::from_utf8(bytes).map_err(|e| {
        format!("{}: not UTF-8 text (invalid byte at byte {})", path.display(), e.utf8_error().valid_up_to())
    })
}

/// Reads and parses a checkpoint file. `Err` is either an I/O problem (`io == true`) or a
/// format problem naming the line.
pub fn decode_checkpoint(path: &Path, kind: CheckpointKind) -> Result<Decoded, (bool, String)> {
    let text = read_text(path).map_err(|e| (true, e))?;
    let bad = |e: seglog::format::FormatError| (false, format!("{}: {e}", path.display()));
    Ok(match kind {
        CheckpointKind::Offsets => {
            let c = OffsetCheckpoint::parse(&text).map_err(bad)?;
            let mut lines = vec![format!("version: 0 entries: {}", c.entries.len())];
            lines.extend(c.entries.iter().map(|(t, p, o)| format!("topic: {t} partition: {p} offset: {o}")));
            let json = serde_json::json!({
                "version": 0,
                "entries": c.entries.iter().map(|(t, p, o)| serde_json::json!({"topic": t, "partition": p, "offset": o})).collect::<Vec<_>>(),
            });
            Decoded { lines, json }
        }
        CheckpointKind::LeaderEpoch => {
            let c = LeaderEpochCheckpoint::parse(&text).map_err(bad)?;
            let mut lines = vec![format!("version: 0 entries: {}", c.entries.len())];
            lines.extend(c.entries.iter().map(|(e, o)| format!("epoch: {e} startOffset: {o}")));
            let json = serde_json::json!({
                "version": 0,
                "entries": c.entries.iter().map(|(e, o)| serde_json::json!({"epoch": e, "start_offset": o})).collect::<Vec<_>>(),
            });
            Decoded { lines, json }
        }
        CheckpointKind::CleanShutdown => {
            let c = CleanShutdown::parse(&text).map_err(bad)?;
            let line = match c.broker_epoch {
                Some(e) => format!("clean shutdown marker: brokerEpoch: {e}"),
                None => "clean shutdown marker (no broker epoch)".into(),
            };
            Decoded { lines: vec![line], json: serde_json::json!({"version": 0, "broker_epoch": c.broker_epoch}) }
        }
        CheckpointKind::PartitionMetadata => {
            let c = PartitionMetadata::parse(&text).map_err(bad)?;
            Decoded {
                lines: vec![format!("version: {} topicId: {}", c.version, c.topic_id)],
                json: serde_json::json!({"version": c.version, "topic_id": c.topic_id}),
            }
        }
    })
}

/// One producer's state in a `.snapshot` file.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct ProducerEntry {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub last_sequence: i32,
    pub last_offset: i64,
    pub offset_delta: i32,
    pub timestamp: i64,
    pub coordinator_epoch: i32,
    pub current_txn_first_offset: i64,
}

use seglog::log::producer_state::{
    SnapshotEntry, SNAPSHOT_ENTRY_BYTES as SNAPSHOT_ENTRY, SNAPSHOT_HEADER_BYTES as SNAPSHOT_HEADER,
};

/// Entries read at once from a snapshot or a transaction index.
const ENTRIES_PER_READ: usize = 1024;

fn decode_producer(e: &[u8]) -> ProducerEntry {
    // The layout is the engine's (`SnapshotEntry`); the tool prints the fields as stored.
    let e = SnapshotEntry::decode(e);
    ProducerEntry {
        producer_id: e.producer_id,
        producer_epoch: e.producer_epoch,
        last_sequence: e.last_sequence,
        last_offset: e.last_offset,
        offset_delta: e.offset_delta,
        timestamp: e.timestamp,
        coordinator_epoch: e.coordinator_epoch,
        current_txn_first_offset: e.current_txn_first_offset,
    }
}

/// Hands `f` the bytes of `file` from `start` to `end` in pieces of at most `piece` bytes (a
/// multiple of the entry size, so that only the last piece can end in a partial entry).
fn for_each_piece(
    file: &File,
    start: u64,
    end: u64,
    piece: usize,
    mut f: impl FnMut(u64, &[u8]) -> std::io::Result<bool>,
) -> std::io::Result<()> {
    let mut buf = vec![0u8; piece.min(end.saturating_sub(start) as usize)];
    let mut pos = start;
    while pos < end {
        let n = ((end - pos) as usize).min(piece);
        file.read_exact_at(&mut buf[..n], pos).map_err(|e| match e.kind() {
            std::io::ErrorKind::UnexpectedEof => {
                std::io::Error::new(e.kind(), format!("the file shrank while reading at byte {pos}"))
            }
            _ => e,
        })?;
        if !f(pos, &buf[..n])? {
            break;
        }
        pos += n as u64;
    }
    Ok(())
}

/// An open producer-state snapshot: version i16 (1), CRC-32C u32 over bytes `[6, end)`, count
/// i32, then 46-byte entries (`ProducerSnapshot.json`).
#[derive(Debug)]
pub struct Snapshot {
    file: File,
    len: u64,
}

impl Snapshot {
    pub fn open(path: &Path) -> std::io::Result<Snapshot> {
        let file = crate::files::open_regular(path)?;
        let len = file.metadata()?.len();
        Ok(Snapshot { file, len })
    }

    /// Checks the header, the CRC and the count, reading the file in chunks: the number of
    /// producers, or what is wrong (with its byte position).
    pub fn check(&self) -> std::io::Result<Result<usize, String>> {
        if self.len < SNAPSHOT_HEADER as u64 {
            return Ok(Err(format!("{} bytes, shorter than the 10-byte header", self.len)));
        }
        let mut header = [0u8; SNAPSHOT_HEADER];
        self.file.read_exact_at(&mut header, 0)?;
        let version = be_i16(&header, 0);
        if version != 1 {
            return Ok(Err(format!("unknown snapshot version {version} at byte 0 (expected 1)")));
        }
        let stored = be_u32(&header, 2);
        let mut computed = crc32c::crc32c(&header[6..]);
        for_each_piece(&self.file, SNAPSHOT_HEADER as u64, self.len, SNAPSHOT_ENTRY * ENTRIES_PER_READ, |_, b| {
            computed = crc32c::crc32c_append(computed, b);
            Ok(true)
        })?;
        if stored != computed {
            return Ok(Err(format!("CRC-32C mismatch at byte 2: stored {stored:#010x}, computed {computed:#010x}")));
        }
        let count = be_i32(&header, 6);
        let body = self.len - SNAPSHOT_HEADER as u64;
        if count < 0 || body != count as u64 * SNAPSHOT_ENTRY as u64 {
            return Ok(Err(format!(
                "count {count} at byte 6 does not match the {body} bytes of entries ({SNAPSHOT_ENTRY} each)"
            )));
        }
        Ok(Ok(count as usize))
    }

    /// Hands `f` every entry, in order (after [`Snapshot::check`] passed).
    pub fn each(&self, mut f: impl FnMut(ProducerEntry) -> std::io::Result<()>) -> std::io::Result<()> {
        let end = SNAPSHOT_HEADER as u64
            + (self.len - SNAPSHOT_HEADER as u64) / SNAPSHOT_ENTRY as u64 * SNAPSHOT_ENTRY as u64;
        for_each_piece(&self.file, SNAPSHOT_HEADER as u64, end, SNAPSHOT_ENTRY * ENTRIES_PER_READ, |_, b| {
            for e in b.chunks_exact(SNAPSHOT_ENTRY) {
                f(decode_producer(e))?;
            }
            Ok(true)
        })
    }
}

/// One aborted transaction in a `.txnindex` file, as `dump` prints it.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct AbortedTxn {
    pub version: i16,
    pub producer_id: i64,
    pub first_offset: i64,
    pub last_offset: i64,
    pub last_stable_offset: i64,
}

impl From<seglog::log::AbortedTxn> for AbortedTxn {
    fn from(t: seglog::log::AbortedTxn) -> AbortedTxn {
        AbortedTxn {
            version: seglog::log::txn_index::TXN_ENTRY_VERSION,
            producer_id: t.producer_id,
            first_offset: t.first_offset,
            last_offset: t.last_offset,
            last_stable_offset: t.last_stable_offset,
        }
    }
}

const TXN_ENTRY: usize = seglog::log::TXN_ENTRY_BYTES;

/// An open `.txnindex`: 34-byte entries; a trailing partial entry or a last offset that does not
/// increase is an error naming its byte position.
#[derive(Debug)]
pub struct TxnIndex {
    file: File,
    len: u64,
}

impl TxnIndex {
    pub fn open(path: &Path) -> std::io::Result<TxnIndex> {
        let file = crate::files::open_regular(path)?;
        let len = file.metadata()?.len();
        Ok(TxnIndex { file, len })
    }

    /// Hands `f` every entry in order while they are valid by the engine's rules (entries
    /// whole, version 0, last offsets increasing); the first problem ends the pass and is
    /// returned. Run it once with a no-op `f` to check the file before printing anything.
    pub fn each(&self, f: impl FnMut(AbortedTxn) -> std::io::Result<()>) -> std::io::Result<Result<u64, String>> {
        self.each_in(seglog::log::TxnIndexRules::new(i64::MIN, None), f)
    }

    /// [`TxnIndex::each`] under `rules`: those of the segment the file belongs to also check
    /// that every marker offset lies in it.
    pub fn each_in(
        &self,
        mut rules: seglog::log::TxnIndexRules,
        mut f: impl FnMut(AbortedTxn) -> std::io::Result<()>,
    ) -> std::io::Result<Result<u64, String>> {
        let mut n = 0u64;
        let mut problem = None;
        for_each_piece(&self.file, 0, self.len, TXN_ENTRY * ENTRIES_PER_READ, |_, b| {
            for e in b.chunks(TXN_ENTRY) {
                match rules.check(e) {
                    Ok(t) => {
                        f(t.into())?;
                        n += 1;
                    }
                    Err(p) => {
                        problem = Some(p);
                        return Ok(false);
                    }
                }
            }
            Ok(true)
        })?;
        Ok(problem.map_or(Ok(n), Err))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(bytes: &[u8]) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, bytes).unwrap();
        (dir, p)
    }

    fn snapshot(bytes: &[u8]) -> Result<Vec<ProducerEntry>, String> {
        let (_d, p) = file(bytes);
        let s = Snapshot::open(&p).unwrap();
        s.check().unwrap()?;
        let mut v = Vec::new();
        s.each(|e| {
            v.push(e);
            Ok(())
        })
        .unwrap();
        Ok(v)
    }

    fn txn_index(bytes: &[u8]) -> Result<Vec<AbortedTxn>, String> {
        let (_d, p) = file(bytes);
        let t = TxnIndex::open(&p).unwrap();
        let mut v = Vec::new();
        let n = t
            .each(|e| {
                v.push(e);
                Ok(())
            })
            .unwrap()?;
        assert_eq!(n, v.len() as u64);
        Ok(v)
    }

    #[test]
    fn snapshot_round_trip() {
        let mut body = Vec::new();
        let producers = 3000; // more than one read
        body.extend_from_slice(&(producers as i32).to_be_bytes());
        for i in 0..producers as i64 {
            body.extend_from_slice(&(7 + i).to_be_bytes());
            body.extend_from_slice(&0i16.to_be_bytes());
            body.extend_from_slice(&9i32.to_be_bytes());
            body.extend_from_slice(&(100 + i).to_be_bytes());
            body.extend_from_slice(&9i32.to_be_bytes());
            body.extend_from_slice(&1234i64.to_be_bytes());
            body.extend_from_slice(&(-1i32).to_be_bytes());
            body.extend_from_slice(&(-1i64).to_be_bytes());
        }
        let mut f = 1i16.to_be_bytes().to_vec();
        f.extend_from_slice(&crc32c::crc32c(&body).to_be_bytes());
        f.extend_from_slice(&body);
        let e = snapshot(&f).unwrap();
        assert_eq!(e.len(), producers);
        assert_eq!((e[0].producer_id, e[0].last_offset, e[0].timestamp), (7, 100, 1234));
        assert_eq!(e[producers - 1].producer_id, 7 + producers as i64 - 1);
        let mut bad = f.clone();
        bad[20] ^= 1;
        assert!(snapshot(&bad).unwrap_err().contains("CRC"));
        assert!(snapshot(&f[..8]).unwrap_err().contains("shorter than the 10-byte header"));
    }

    #[test]
    fn txn_index_entries_and_errors() {
        let mut b = Vec::new();
        for last in 1..=2000i64 {
            b.extend_from_slice(&0i16.to_be_bytes());
            b.extend_from_slice(&5i64.to_be_bytes());
            b.extend_from_slice(&1i64.to_be_bytes());
            b.extend_from_slice(&(last * 10).to_be_bytes());
            b.extend_from_slice(&3i64.to_be_bytes());
        }
        assert_eq!(txn_index(&b).unwrap().len(), 2000);
        assert_eq!(txn_index(&b[..40]).unwrap_err(), "partial entry of 6 bytes at byte 34");
        let mut back = b.clone();
        back[34 * 1500 + 25] = 0; // entry 1500's last offset drops below entry 1499's
        assert!(txn_index(&back).unwrap_err().starts_with(&format!("entry at byte {}: last offset", 34 * 1500)));
    }
}
