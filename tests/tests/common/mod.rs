//! Helpers shared by the behaviour tests in this directory: logs in a temporary directory on the
//! real disk driven by a manual clock, batch building and patching, whole-directory snapshots,
//! record decoding, and a reference model of Kafka's per-batch index rule.
//!
//! Each test file uses a different subset, hence the `dead_code` allowance.
#![allow(dead_code)]

use std::collections::hash_map::DefaultHasher;
use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use seglog::config::{LogConfig, ManualClock};
use seglog::format::batch::{compute_crc, split_batches, BatchHeader, CRC_OFFSET};
use seglog::format::builder::BatchBuilder;
use seglog::format::filename;
use seglog::format::record::batch_records;
use seglog::log::{Log, LogOptions, Recovery, SegmentInfo, Writes};

/// A wall-clock time in the recent past, the default "now" of the tests.
pub const T0: i64 = 1_700_000_000_000;

/// A log opened in a fresh temporary directory, with the clock that drives it.
pub struct TestLog {
    pub tmp: tempfile::TempDir,
    pub clock: Arc<ManualClock>,
    pub log: Log,
}

impl TestLog {
    pub fn dir(&self) -> PathBuf {
        self.tmp.path().join("topic-0")
    }
}

/// A small-index configuration (index files of `segment_index_bytes`, not 10 MiB), otherwise
/// Kafka's defaults.
pub fn small_config() -> LogConfig {
    LogConfig { segment_index_bytes: 4096, ..LogConfig::default() }
}

/// Options for the tests that read a log's files beside it: each append is in the file when it
/// returns (`Writes::Through`), as the files are what they check. The default, `Writes::Async`,
/// has tests of its own (async_appends.rs, crash_sim.rs).
pub fn options(config: LogConfig, clock: &Arc<ManualClock>, recovery: Recovery) -> LogOptions {
    LogOptions { config, clock: clock.clone(), recovery, writes: Writes::Through, ..seglog_tests::log_options() }
}

/// Opens a new log in `<tmp>/topic-0` with the clock at [`T0`].
pub fn new_log(config: LogConfig) -> TestLog {
    let tmp = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(T0));
    let dir = tmp.path().join("topic-0");
    let log = Log::open(&dir, options(config, &clock, Recovery::default())).expect("open log");
    TestLog { tmp, clock, log }
}

/// Opens an existing directory.
pub fn open_dir(dir: &Path, config: LogConfig, clock: &Arc<ManualClock>, recovery: Recovery) -> Log {
    Log::open(dir, options(config, clock, recovery)).expect("reopen log")
}

/// Deterministic key (the record's index, 4 bytes) and value (`value_len` bytes) of record `i`.
pub fn key_of(i: usize) -> [u8; 4] {
    (i as u32).to_be_bytes()
}
pub fn value_of(i: usize, value_len: usize) -> Vec<u8> {
    (0..value_len).map(|j| (i * 31 + j * 7) as u8).collect()
}

/// Builds one batch with `builder`'s settings and one record per timestamp.
pub fn build(mut builder: BatchBuilder, timestamps: &[i64], value_len: usize) -> Vec<u8> {
    for (i, &ts) in timestamps.iter().enumerate() {
        builder.push(ts, Some(&key_of(i)), Some(&value_of(i, value_len)), &[]);
    }
    builder.build().expect("build batch")
}

/// A producer batch (base offset 0, CreateTime, uncompressed) with one record per timestamp.
pub fn batch(timestamps: &[i64], value_len: usize) -> Vec<u8> {
    build(BatchBuilder::new(), timestamps, value_len)
}

/// A producer batch of `n` records stamped `ts, ts+1, ...`.
pub fn batch_n(n: usize, ts: i64, value_len: usize) -> Vec<u8> {
    let timestamps: Vec<i64> = (0..n as i64).map(|i| ts + i).collect();
    batch(&timestamps, value_len)
}

/// A single-record uncompressed batch of exactly `size` bytes (72 <= size <= 124).
pub fn batch_of_size(size: usize, ts: i64) -> Vec<u8> {
    // One record: header 61 + length varint 1 + body (attrs 1, ts delta 1, offset delta 1,
    // key length 1 + 4, value length 1 + v, header count 1) = 72 + v, for a body below 64 bytes.
    assert!((72..=124).contains(&size), "size {size} out of the one-byte-varint range");
    let b = batch(&[ts], size - 72);
    assert_eq!(b.len(), size);
    b
}

/// A follower batch: the given base offset and leader epoch, one record per timestamp.
pub fn follower_batch(base_offset: i64, epoch: i32, timestamps: &[i64], value_len: usize) -> Vec<u8> {
    build(BatchBuilder::new().base_offset(base_offset).partition_leader_epoch(epoch), timestamps, value_len)
}

pub fn header(b: &[u8]) -> BatchHeader {
    BatchHeader::parse(b).expect("batch header")
}

/// Rewrites the CRC field after a patch inside the CRC-covered bytes.
pub fn fix_crc(batch: &mut [u8]) {
    let crc = compute_crc(batch);
    batch[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
}

pub fn put_i16(b: &mut [u8], at: usize, v: i16) {
    b[at..at + 2].copy_from_slice(&v.to_be_bytes());
}
pub fn put_i32(b: &mut [u8], at: usize, v: i32) {
    b[at..at + 4].copy_from_slice(&v.to_be_bytes());
}
pub fn put_i64(b: &mut [u8], at: usize, v: i64) {
    b[at..at + 8].copy_from_slice(&v.to_be_bytes());
}

/// `(position, header)` of every whole batch in `buf` (which must hold nothing else).
pub fn batches_in(buf: &[u8]) -> Vec<(usize, BatchHeader)> {
    split_batches(buf, false).expect("whole valid batches")
}

/// One record as a consumer sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decoded {
    pub offset: i64,
    pub timestamp: i64,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub leader_epoch: i32,
}

/// Every record of every batch in `buf`, decompressed.
pub fn decode(buf: &[u8]) -> Vec<Decoded> {
    let mut out = Vec::new();
    for (pos, h) in batches_in(buf) {
        let b = &buf[pos..pos + h.size_in_bytes() as usize];
        let mut scratch = Vec::new();
        for r in batch_records(b, &mut scratch).expect("records") {
            let r = r.expect("record");
            out.push(Decoded {
                offset: r.offset(h.base_offset),
                timestamp: r.timestamp(h.base_timestamp, h.max_timestamp, h.timestamp_type()),
                key: r.key.map(<[u8]>::to_vec),
                value: r.value.map(<[u8]>::to_vec),
                leader_epoch: h.partition_leader_epoch,
            });
        }
    }
    out
}

/// One stored batch, as a test appended it: where it went, its offsets and its bytes.
#[derive(Clone, Debug)]
pub struct Stored {
    pub segment: i64,
    pub position: u32,
    pub base: i64,
    pub last: i64,
    pub bytes: Vec<u8>,
}

/// Appends `b` as leader at `epoch` and records where it went.
pub fn append_stored(log: &mut Log, mut b: Vec<u8>, epoch: i32) -> Stored {
    let info = log.append_as_leader(&mut b, epoch).unwrap();
    Stored {
        segment: info.segment_base_offset,
        position: info.position,
        base: info.first_offset,
        last: info.last_offset,
        bytes: b,
    }
}

/// Kafka's fetch over the stored batches: from the batch holding `offset`, within its segment,
/// only batches wholly below `upper`, as many as fit in `max_bytes` (the first whatever its size
/// with `min_one`). The first batch's segment and position, and the bytes; `None` at or past the
/// last stored offset.
pub fn kafka_fetch(
    stored: &[Stored],
    offset: i64,
    max_bytes: u32,
    upper: i64,
    min_one: bool,
) -> Option<(i64, u32, Vec<u8>)> {
    let first = stored.iter().position(|s| s.last >= offset)?;
    let seg = stored[first].segment;
    let limit = if min_one { (max_bytes as usize).max(stored[first].bytes.len()) } else { max_bytes as usize };
    let mut out = Vec::new();
    for s in stored[first..].iter().take_while(|s| s.segment == seg && s.last < upper) {
        if out.len() + s.bytes.len() > limit {
            break;
        }
        out.extend_from_slice(&s.bytes);
    }
    Some((seg, stored[first].position, out))
}

/// The tests' log options with `config` on the storage of I/O mode `mode`, or `None` (saying so)
/// where that mode is not available (io_uring refused: the storage fell back).
pub fn mode_options(mode: seglog::IoMode, config: LogConfig) -> Option<LogOptions> {
    let opened = seglog::io::storage_for_mode(mode);
    if opened.mode != mode {
        println!("skipped {mode}: {:?}", opened.fallback);
        return None;
    }
    Some(LogOptions { storage: opened.storage, config, ..seglog_tests::log_options() })
}

/// Every byte of the log, segment by segment, read through the public fetch path.
pub fn read_all(log: &Log) -> Vec<u8> {
    let mut out = Vec::new();
    let mut next = log.log_start_offset();
    while next < log.log_end_offset() {
        let f = log.read(next, u32::MAX, None, true).expect("read");
        assert!(!f.records.is_empty(), "empty read at {next} below the log end");
        let last = batches_in(&f.records).last().expect("a batch").1;
        next = last.next_offset();
        out.extend_from_slice(&f.records);
    }
    out
}

pub fn file_hash(bytes: &[u8]) -> u64 {
    let mut h = DefaultHasher::new();
    bytes.hash(&mut h);
    h.finish()
}

/// Every regular file of `dir`: name -> contents.
pub fn snapshot(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(dir).expect("read_dir") {
        let e = e.expect("dir entry");
        if e.file_type().expect("file type").is_file() {
            let name = e.file_name().into_string().expect("utf-8 name");
            out.insert(name, std::fs::read(e.path()).expect("read file"));
        }
    }
    out
}

/// Every regular file of `dir` as (name, length, hash): cheap to compare and to print.
pub fn snapshot_digest(dir: &Path) -> BTreeMap<String, (usize, u64)> {
    snapshot(dir).into_iter().map(|(n, b)| (n, (b.len(), file_hash(&b)))).collect()
}

/// Everything an append could change: offsets, segments, in-memory indexes, files on disk.
#[derive(Debug, PartialEq, Eq)]
pub struct LogState {
    pub log_start_offset: i64,
    pub log_end_offset: i64,
    pub high_watermark: i64,
    pub segments: Vec<SegmentInfo>,
    /// Per segment: (offset index bytes hash, time index bytes hash), in memory.
    pub indexes: Vec<(u64, u64)>,
    pub files: BTreeMap<String, (usize, u64)>,
}

pub fn state(log: &Log) -> LogState {
    LogState {
        log_start_offset: log.log_start_offset(),
        log_end_offset: log.log_end_offset(),
        high_watermark: log.high_watermark(),
        segments: log.segment_infos(),
        indexes: log
            .segments()
            .map(|s| (file_hash(s.offset_index().as_bytes()), file_hash(s.time_index().as_bytes())))
            .collect(),
        files: snapshot_digest(log.dir()),
    }
}

pub fn log_path(dir: &Path, base: i64) -> PathBuf {
    dir.join(filename::log_file_name(base))
}
pub fn index_path(dir: &Path, base: i64) -> PathBuf {
    dir.join(filename::index_file_name(base))
}
pub fn time_index_path(dir: &Path, base: i64) -> PathBuf {
    dir.join(filename::time_index_file_name(base))
}
/// The I/O mode `SEGLOG_IO_MODE` asks the tests for (CI runs the suite again per mode), if any.
pub fn env_io_mode() -> Option<seglog::IoMode> {
    seglog_tests::test_io_mode()
}

pub fn file_len(p: &Path) -> u64 {
    std::fs::metadata(p).expect("metadata").len()
}

/// The valid bytes of segment `base`'s `.log` file. A `Log` on its own returns from an append
/// before writing it: call `Log::finish_writes` first. In direct I/O mode
/// (`SEGLOG_IO_MODE=direct`) an active segment's file runs past its logical size (aligned writes)
/// until roll or close trims it, so the file is cut at the size the log reports.
pub fn segment_bytes(log: &Log, base: i64) -> Vec<u8> {
    let size = log.segment_infos().iter().find(|s| s.base_offset == base).expect("a segment at that base offset").size
        as usize;
    let mut bytes = std::fs::read(log_path(log.dir(), base)).expect("read .log");
    assert!(bytes.len() >= size, "{base}.log is shorter than the segment");
    assert!(bytes[size..].iter().all(|&b| b == 0), "{base}.log has data past the segment end");
    bytes.truncate(size);
    bytes
}

pub fn segment_bases(log: &Log) -> Vec<i64> {
    log.segment_infos().iter().map(|s| s.base_offset).collect()
}

/// What Kafka's index rule needs to know of a batch.
#[derive(Clone, Copy, Debug)]
pub struct BatchMeta {
    pub position: u32,
    pub size: u32,
    pub last_offset: i64,
    pub max_timestamp: i64,
}

/// The batches of a segment's `.log` bytes.
pub fn batch_metas(log_bytes: &[u8]) -> Vec<BatchMeta> {
    batches_in(log_bytes)
        .into_iter()
        .map(|(pos, h)| BatchMeta {
            position: pos as u32,
            size: h.size_in_bytes() as u32,
            last_offset: h.last_offset(),
            max_timestamp: h.max_timestamp,
        })
        .collect()
}

/// Reference model of Kafka's index rule (LogSegment.append, one session from an empty
/// segment; LogSegment.recover gives the same): per batch, first the max timestamp so far is
/// updated (first batch holding it wins), then, if more than `interval` bytes went by since the
/// last entry, `(batch last offset, batch position)` goes to the offset index and
/// `(max ts so far, its batch's last offset)` to the time index if the timestamp grew; the batch
/// is counted afterwards. With `final_entry` (roll, close, recovery) the time index also gets
/// `(max ts so far, offset)` if it grew. Returns both files' bytes.
pub fn kafka_indexes(base: i64, batches: &[BatchMeta], interval: u32, final_entry: bool) -> (Vec<u8>, Vec<u8>) {
    kafka_indexes_sessions(base, batches, interval, &[], final_entry)
}

/// [`kafka_indexes`] for a segment written over several sessions: before the batch at each
/// position in `reopened_at` the segment was closed (final time-index entry) and opened again
/// (Kafka's LogSegment starts its byte counter at zero).
pub fn kafka_indexes_sessions(
    base: i64,
    batches: &[BatchMeta],
    interval: u32,
    reopened_at: &[u32],
    final_entry: bool,
) -> (Vec<u8>, Vec<u8>) {
    let mut offset_index = Vec::new();
    let mut time_index = Vec::new();
    let mut since: u64 = 0;
    let mut max = (-1i64, base);
    let mut last_time_entry = -1i64;
    let push_time = |ti: &mut Vec<u8>, last: &mut i64, (ts, off): (i64, i64)| {
        if ts > *last {
            ti.extend_from_slice(&ts.to_be_bytes());
            ti.extend_from_slice(&((off - base) as i32).to_be_bytes());
            *last = ts;
        }
    };
    for b in batches {
        if reopened_at.contains(&b.position) {
            push_time(&mut time_index, &mut last_time_entry, max);
            since = 0;
        }
        if b.max_timestamp > max.0 {
            max = (b.max_timestamp, b.last_offset);
        }
        if since > interval as u64 {
            offset_index.extend_from_slice(&((b.last_offset - base) as i32).to_be_bytes());
            offset_index.extend_from_slice(&(b.position as i32).to_be_bytes());
            push_time(&mut time_index, &mut last_time_entry, max);
            since = 0;
        }
        since += b.size as u64;
    }
    if final_entry {
        push_time(&mut time_index, &mut last_time_entry, max);
    }
    (offset_index, time_index)
}

/// Copies every regular file of `src` into `dst` (created).
pub fn copy_dir(src: &Path, dst: &Path) {
    std::fs::create_dir_all(dst).expect("create dir");
    for (name, bytes) in snapshot(src) {
        std::fs::write(dst.join(name), bytes).expect("write file");
    }
}

/// A small deterministic generator (xorshift64*), so failures reproduce.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in `[lo, hi)`.
    pub fn range(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (self.next() % (hi - lo) as u64) as i64
    }
}
