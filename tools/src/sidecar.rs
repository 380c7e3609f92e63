//! Kafka's small files beside the segments, decoded for `dump` and checked by `verify`:
//! checkpoint files (through `seglog::format::checkpoint`), producer-state `.snapshot` files and
//! `.txnindex` files (decoded here, FACTS §11: the engine has no parser for them yet).

use std::path::Path;

use seglog::format::checkpoint::{CleanShutdown, LeaderEpochCheckpoint, OffsetCheckpoint, PartitionMetadata};
use serde::Serialize;

use crate::layout::CheckpointKind;

/// Checkpoint files are small; anything larger is refused rather than read.
const MAX_CHECKPOINT_BYTES: u64 = 64 << 20;

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

const SNAPSHOT_HEADER: usize = 10;
const SNAPSHOT_ENTRY: usize = 46;

/// A whole file, through [`crate::files::open_regular`] (only a regular file, never blocked on).
pub fn read_all(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut bytes = Vec::new();
    crate::files::open_regular(path)?.read_to_end(&mut bytes)?;
    Ok(bytes)
}

fn be_i64(b: &[u8], at: usize) -> i64 {
    i64::from_be_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}
fn be_i32(b: &[u8], at: usize) -> i32 {
    i32::from_be_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
fn be_i16(b: &[u8], at: usize) -> i16 {
    i16::from_be_bytes(b[at..at + 2].try_into().expect("2 bytes"))
}

/// Decodes a producer-state snapshot: version i16 (1), CRC-32C u32 over bytes `[6, end)`, count
/// i32, then 46-byte entries (`ProducerSnapshot.json`).
pub fn decode_snapshot(bytes: &[u8]) -> Result<Vec<ProducerEntry>, String> {
    if bytes.len() < SNAPSHOT_HEADER {
        return Err(format!("{} bytes, shorter than the 10-byte header", bytes.len()));
    }
    let version = be_i16(bytes, 0);
    if version != 1 {
        return Err(format!("unknown snapshot version {version} at byte 0 (expected 1)"));
    }
    let stored = be_i32(bytes, 2) as u32;
    let computed = crc32c::crc32c(&bytes[6..]);
    if stored != computed {
        return Err(format!("CRC-32C mismatch at byte 2: stored {stored:#010x}, computed {computed:#010x}"));
    }
    let count = be_i32(bytes, 6);
    let body = &bytes[SNAPSHOT_HEADER..];
    if count < 0 || body.len() != count as usize * SNAPSHOT_ENTRY {
        return Err(format!(
            "count {count} at byte 6 does not match the {} bytes of entries ({SNAPSHOT_ENTRY} each)",
            body.len()
        ));
    }
    Ok(body
        .chunks_exact(SNAPSHOT_ENTRY)
        .map(|e| ProducerEntry {
            producer_id: be_i64(e, 0),
            producer_epoch: be_i16(e, 8),
            last_sequence: be_i32(e, 10),
            last_offset: be_i64(e, 14),
            offset_delta: be_i32(e, 22),
            timestamp: be_i64(e, 26),
            coordinator_epoch: be_i32(e, 34),
            current_txn_first_offset: be_i64(e, 38),
        })
        .collect())
}

/// One aborted transaction in a `.txnindex` file.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct AbortedTxn {
    pub version: i16,
    pub producer_id: i64,
    pub first_offset: i64,
    pub last_offset: i64,
    pub last_stable_offset: i64,
}

const TXN_ENTRY: usize = 34;

/// Decodes a `.txnindex`: 34-byte entries; a trailing partial entry or a last offset that does
/// not increase is an error naming its byte position.
pub fn decode_txn_index(bytes: &[u8]) -> Result<Vec<AbortedTxn>, String> {
    let mut out: Vec<AbortedTxn> = Vec::new();
    for (i, e) in bytes.chunks(TXN_ENTRY).enumerate() {
        let at = i * TXN_ENTRY;
        if e.len() < TXN_ENTRY {
            return Err(format!("partial entry of {} bytes at byte {at}", e.len()));
        }
        let t = AbortedTxn {
            version: be_i16(e, 0),
            producer_id: be_i64(e, 2),
            first_offset: be_i64(e, 10),
            last_offset: be_i64(e, 18),
            last_stable_offset: be_i64(e, 26),
        };
        if t.version != 0 {
            return Err(format!("unknown entry version {} at byte {at}", t.version));
        }
        if let Some(p) = out.last() {
            if t.last_offset <= p.last_offset {
                return Err(format!(
                    "entry at byte {at}: last offset {} does not increase (previous {})",
                    t.last_offset, p.last_offset
                ));
            }
        }
        out.push(t);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_round_trip() {
        let mut body = Vec::new();
        body.extend_from_slice(&1i32.to_be_bytes());
        body.extend_from_slice(&7i64.to_be_bytes());
        body.extend_from_slice(&0i16.to_be_bytes());
        body.extend_from_slice(&9i32.to_be_bytes());
        body.extend_from_slice(&100i64.to_be_bytes());
        body.extend_from_slice(&9i32.to_be_bytes());
        body.extend_from_slice(&1234i64.to_be_bytes());
        body.extend_from_slice(&(-1i32).to_be_bytes());
        body.extend_from_slice(&(-1i64).to_be_bytes());
        let mut f = 1i16.to_be_bytes().to_vec();
        f.extend_from_slice(&crc32c::crc32c(&body).to_be_bytes());
        f.extend_from_slice(&body);
        let e = decode_snapshot(&f).unwrap();
        assert_eq!(e.len(), 1);
        assert_eq!((e[0].producer_id, e[0].last_offset, e[0].timestamp), (7, 100, 1234));
        f[20] ^= 1;
        assert!(decode_snapshot(&f).unwrap_err().contains("CRC"));
    }

    #[test]
    fn txn_index() {
        let mut b = Vec::new();
        for last in [10i64, 20] {
            b.extend_from_slice(&0i16.to_be_bytes());
            b.extend_from_slice(&5i64.to_be_bytes());
            b.extend_from_slice(&1i64.to_be_bytes());
            b.extend_from_slice(&last.to_be_bytes());
            b.extend_from_slice(&3i64.to_be_bytes());
        }
        assert_eq!(decode_txn_index(&b).unwrap().len(), 2);
        assert!(decode_txn_index(&b[..40]).is_err());
    }
}
