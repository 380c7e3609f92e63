//! `.txnindex` files against the log they index: a partition's batches replayed in order through
//! the engine's producer-state rules ([`ProducerReplay`], the code a log recovers with) give the
//! entry Kafka writes for each ABORT marker that ends a transaction; `verify` compares the files
//! with them as it walks the log, `rebuild-index` rewrites the files that differ.
//!
//! The replay is exact when it starts where the log starts: at offset 0, or from the producer
//! snapshot at the first segment's base offset (Kafka and seglog take one at each roll). Without
//! one, a transaction that began before the first segment is unknown to it, so entries for such
//! transactions are not checked and a file is not rewritten.

use std::io::Read;
use std::path::Path;

use seglog::format::batch::BatchHeader;
use seglog::log::producer_state::{read_snapshot, ProducerState};
use seglog::log::{AbortedTxn, ProducerReplay, TXN_ENTRY_BYTES};

use crate::layout::PartitionDir;

/// The most producers a replay holds (a few hundred bytes each): a log naming more (each batch
/// can name a producer of its own) is not replayed further, and its `.txnindex` entries from
/// there on are not checked.
pub const MAX_PRODUCERS: usize = 1 << 18;
/// The largest producer snapshot read to start a replay: [`MAX_PRODUCERS`] entries (a larger
/// one is not read, and the replay does not know the transactions before it).
const MAX_SNAPSHOT_BYTES: u64 = (seglog::log::producer_state::SNAPSHOT_HEADER_BYTES
    + MAX_PRODUCERS * seglog::log::producer_state::SNAPSHOT_ENTRY_BYTES) as u64;

/// A partition's producer state replayed batch by batch.
pub struct TxnReplay {
    replay: ProducerReplay,
    /// Why the replay may not know every transaction, if so, and the offset it starts at (a
    /// transaction begun below it is unknown).
    inexact: Option<(String, i64)>,
}

impl TxnReplay {
    /// Starts at the first segment of `p`: from offset 0, or from the snapshot at the first
    /// segment's base offset when one reads.
    pub fn start(p: &PartitionDir) -> TxnReplay {
        let Some(first) = p.log_segments().next().map(|s| s.base_offset) else {
            return TxnReplay { replay: ProducerReplay::default(), inexact: None };
        };
        // The high watermark is the log end: every completed transaction is stable, and
        // forgotten as the replay goes.
        let replay = |state| ProducerReplay::settling(state, i64::MAX);
        if first == 0 {
            return TxnReplay { replay: replay(ProducerState::new(0)), inexact: None };
        }
        let name = seglog::format::filename::snapshot_file_name(first);
        let loaded = p.snapshots.iter().find(|s| s.file_name().is_some_and(|n| *n == *name)).and_then(|path| {
            let f = crate::files::open_regular(path).ok()?;
            // No more producers than a replay holds.
            if f.metadata().ok()?.len() > MAX_SNAPSHOT_BYTES {
                return None;
            }
            let mut b = Vec::new();
            f.take(MAX_SNAPSHOT_BYTES).read_to_end(&mut b).ok()?;
            let entries = read_snapshot(&b).ok()?;
            // Every producer of the snapshot kept: expiry is the broker's decision.
            Some(ProducerState::load(entries, first, 0, i64::MAX))
        });
        match loaded {
            Some(state) => TxnReplay { replay: replay(state), inexact: None },
            None => TxnReplay {
                replay: replay(ProducerState::new(first)),
                inexact: Some((
                    format!(
                        "the log starts at {first} with no readable producer snapshot there: transactions begun before it are unknown"
                    ),
                    first,
                )),
            },
        }
    }

    /// Why entries of transactions begun before the first segment cannot be checked, if so.
    pub fn inexact(&self) -> Option<&str> {
        self.inexact.as_ref().map(|(why, _)| why.as_str())
    }

    /// The offset below which transactions are unknown to the replay (`None`: none are).
    pub fn known_from(&self) -> Option<i64> {
        self.inexact.as_ref().map(|(_, first)| *first)
    }

    /// One valid batch of the log, in order (`bytes`: the whole batch, when it was read), and the
    /// `.txnindex` entry its marker gives, if any.
    pub fn batch(&mut self, h: &BatchHeader, bytes: Option<&[u8]>) -> Option<AbortedTxn> {
        if self.inexact.as_ref().is_some_and(|(_, from)| *from == i64::MAX) {
            return None;
        }
        if h.has_producer_id()
            && self.replay.state().len() >= MAX_PRODUCERS
            && self.replay.state().last_entry(h.producer_id).is_none()
        {
            // Nothing from here on is known: every later entry goes unchecked.
            self.inexact = Some((
                format!(
                    "the log names more than {MAX_PRODUCERS} producers by offset {}, more than a replay holds in memory",
                    h.base_offset
                ),
                i64::MAX,
            ));
            return None;
        }
        self.replay.batch(h, bytes.unwrap_or(&[]))
    }
}

/// What a comparison found.
#[derive(Debug, PartialEq, Eq)]
pub enum Finding {
    /// Damage: the byte of the file where it is (`None`: the file is missing), and what.
    Problem(Option<u64>, String),
    /// Not damage.
    Note(String),
}

/// A segment's `.txnindex`, read entry by entry beside the entries its markers give.
pub struct TxnStream {
    file: Option<std::io::BufReader<std::fs::File>>,
    /// The next entry of the file, read ahead, with its byte position.
    next: Option<(u64, AbortedTxn)>,
    at: u64,
    /// Transactions begun below it are unknown to the replay (`None`: none are).
    known_from: Option<i64>,
    /// Entries of the file not checked (transactions the replay does not know).
    pub unchecked: u64,
    /// Findings returned so far, the most returned (a hostile file could differ at every entry),
    /// and those past it, counted.
    found: usize,
    keep: usize,
    dropped: u64,
}

impl TxnStream {
    /// The `.txnindex` at `path` (`None`: the segment has none). A file whose structure is
    /// damaged (checked on its own) is compared up to the damage.
    /// At most `keep` findings are returned over the whole file, then one counting the rest.
    pub fn open(path: Option<&Path>, known_from: Option<i64>, keep: usize) -> std::io::Result<TxnStream> {
        let file = match path {
            Some(p) => Some(std::io::BufReader::new(crate::files::open_regular(p)?)),
            None => None,
        };
        let mut s = TxnStream { file, next: None, at: 0, known_from, unchecked: 0, found: 0, keep, dropped: 0 };
        s.advance()?;
        Ok(s)
    }

    fn advance(&mut self) -> std::io::Result<()> {
        self.next = None;
        let Some(f) = self.file.as_mut() else { return Ok(()) };
        let mut e = [0u8; TXN_ENTRY_BYTES];
        match f.read_exact(&mut e) {
            Ok(()) => {
                if let Ok(t) = AbortedTxn::decode(&e) {
                    self.next = Some((self.at, t));
                    self.at += TXN_ENTRY_BYTES as u64;
                }
                Ok(())
            }
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// True for an entry of a transaction begun where the replay cannot see.
    fn unknown(&self, t: &AbortedTxn) -> bool {
        self.known_from.is_some_and(|k| t.first_offset < k)
    }

    fn push(&mut self, out: &mut Vec<Finding>, f: Finding) {
        if self.found < self.keep {
            self.found += 1;
            out.push(f);
        } else {
            self.dropped += 1;
        }
    }

    fn extra(&mut self, pos: u64, t: AbortedTxn, out: &mut Vec<Finding>) {
        if !self.unknown(&t) {
            self.push(
                out,
                Finding::Problem(
                    Some(pos),
                    format!(
                        "entry for producer {} at offsets {}..={}: no ABORT marker of the log ends that transaction",
                        t.producer_id, t.first_offset, t.last_offset
                    ),
                ),
            );
        } else {
            self.unchecked += 1;
        }
    }

    /// The entry the log's next ABORT marker gives.
    pub fn expect(&mut self, want: AbortedTxn) -> std::io::Result<Vec<Finding>> {
        let mut out = Vec::new();
        while let Some((pos, t)) = self.next.filter(|(_, t)| t.last_offset < want.last_offset) {
            self.extra(pos, t, &mut out);
            self.advance()?;
        }
        match self.next {
            Some((_, t))
                if t.last_offset == want.last_offset && t.producer_id == want.producer_id && self.unknown(&t) =>
            {
                // Begun before the replay's start: the replay saw only its later batches.
                self.unchecked += 1;
                self.advance()?;
            }
            Some((pos, t)) if t.last_offset == want.last_offset => {
                if (t.producer_id, t.first_offset) != (want.producer_id, want.first_offset) {
                    self.push(&mut out, Finding::Problem(
                        Some(pos),
                        format!(
                            "entry for producer {} from offset {} where the ABORT marker at {} ends producer {}'s transaction from {}",
                            t.producer_id, t.first_offset, want.last_offset, want.producer_id, want.first_offset
                        ),
                    ));
                } else if t.last_stable_offset != want.last_stable_offset {
                    // Kafka's followers compute it after a whole fetch, not batch by batch.
                    out.push(Finding::Note(format!(
                        "entry at byte {pos}: last stable offset {}, where a batch-by-batch replay gives {}",
                        t.last_stable_offset, want.last_stable_offset
                    )));
                }
                self.advance()?;
            }
            _ => {
                let pos = self.file.as_ref().map(|_| self.at);
                let detail = format!(
                    "no entry for producer {}'s transaction from offset {}, aborted by the marker at {}",
                    want.producer_id, want.first_offset, want.last_offset
                );
                self.push(&mut out, Finding::Problem(pos, detail));
            }
        }
        Ok(out)
    }

    /// The file's entries after the last marker of its segment; `known_from` is the replay's
    /// now (it may have given up on the way: [`TxnReplay::known_from`]).
    /// The file's entries after the last marker of its segment; `known_from` is the replay's
    /// now (it may have given up on the way: [`TxnReplay::known_from`]). Past the findings kept,
    /// one counts the rest. The second value is the entries not checked.
    pub fn finish(mut self, known_from: Option<i64>) -> std::io::Result<(Vec<Finding>, u64)> {
        self.known_from = known_from;
        let mut out = Vec::new();
        while let Some((pos, t)) = self.next {
            self.extra(pos, t, &mut out);
            self.advance()?;
        }
        if self.dropped > 0 {
            out.push(Finding::Problem(None, format!("{} more differences from the log's markers", self.dropped)));
        }
        Ok((out, self.unchecked))
    }
}
