//! seglog against segments written by a real Kafka broker (`fixtures/kafka-pinterest`: 148
//! segments in five partition directories, see its README.md).
//!
//! Every claim is checked against an independent model built here by walking each `.log` file
//! byte by byte (framing read with plain big-endian loads, records decoded with
//! `seglog::format::record`): batches and records read and pass their CRC, rebuilt indexes equal
//! the broker's files, offset and time lookups through the broker's own indexes agree with linear
//! scans, the directories reopen as logs, and the checkpoint files parse.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use seglog::format::batch;
use seglog::format::checkpoint::{LeaderEpochCheckpoint, PartitionMetadata};
use seglog::format::filename;
use seglog::format::record;
use seglog::format::Compression;
use seglog::io::{OpenMode, Storage};
use seglog::log::{ListOffset, Log, LogOptions, Recovery};
use seglog::segment::{
    BatchScanner, LogOffsetPosition, Segment, SegmentResources, SegmentSettings, TimestampAndOffset,
};
use seglog_tests::{
    copy_dir_to_temp, copy_segment_files, fixture, list_partition_dirs, read_file, segment_base_offsets,
    KAFKA_PINTEREST, KAFKA_PINTEREST_PARTITIONS,
};

/// Kafka's default `index.interval.bytes`, which the broker used for 146 of the 148 segments.
const INDEX_INTERVAL_BYTES: u32 = 4096;
const SEGMENT_INDEX_BYTES: u32 = 10 * 1024 * 1024;
const SEGMENTS_IN_FIXTURES: usize = 148;

/// The two segments the broker indexed with a smaller interval (README.md).
const SMALL_INTERVAL_SEGMENTS: [(&str, i64); 2] =
    [("ts-consumer/log-files/test_topic_a-1", 0), ("ts-consumer/log-files/test_topic_a-2", 0)];

fn settings() -> SegmentSettings {
    SegmentSettings {
        index_interval_bytes: INDEX_INTERVAL_BYTES,
        segment_index_bytes: SEGMENT_INDEX_BYTES,
        preallocate_bytes: 0,
        tail_cache_bytes: 0,
        zero_fill_bytes: 0,
        length_lead_bytes: 0,
        segment_bytes: i32::MAX as u32,
    }
}

// ---------------------------------------------------------------------------------------------
// The independent model: every batch and record of every segment, from a plain walk of the bytes.

#[derive(Clone, Debug)]
struct Batch {
    position: u32,
    size: u32,
    base_offset: i64,
    last_offset: i64,
    max_timestamp: i64,
    leader_epoch: i32,
    /// This batch's records are `records[first_record..records_end]` of its segment.
    first_record: usize,
    records_end: usize,
}

#[derive(Clone, Copy, Debug)]
struct Rec {
    offset: i64,
    timestamp: i64,
    /// Index of the batch holding it in its segment.
    batch: usize,
}

#[derive(Debug)]
struct Seg {
    base: i64,
    /// The largest batch max timestamp, -1 when none.
    max_timestamp: i64,
    log: Vec<u8>,
    batches: Vec<Batch>,
    records: Vec<Rec>,
}

impl Seg {
    fn last_offset(&self) -> i64 {
        self.batches.last().map_or(self.base - 1, |b| b.last_offset)
    }
    /// Kafka's segment max timestamp: the largest batch max timestamp.
    fn max_timestamp(&self) -> i64 {
        self.max_timestamp
    }
    fn records_of(&self, b: &Batch) -> &[Rec] {
        &self.records[b.first_record..b.records_end]
    }
    fn batch_bytes(&self, b: &Batch) -> &[u8] {
        &self.log[b.position as usize..(b.position + b.size) as usize]
    }
    /// The result a lookup reports for a record: its timestamp, offset and batch leader epoch.
    fn hit(&self, r: &Rec) -> TimestampAndOffset {
        let epoch = self.batches[r.batch].leader_epoch;
        TimestampAndOffset { timestamp: r.timestamp, offset: r.offset, leader_epoch: (epoch >= 0).then_some(epoch) }
    }
}

#[derive(Debug)]
struct Partition {
    name: &'static str,
    dir: PathBuf,
    segs: Vec<Seg>,
}

impl Partition {
    fn records(&self) -> impl Iterator<Item = (&Seg, &Rec)> {
        self.segs.iter().flat_map(|s| s.records.iter().map(move |r| (s, r)))
    }
    fn log_end_offset(&self) -> i64 {
        self.segs.last().expect("segments").last_offset() + 1
    }
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

fn partition_dirs() -> Vec<(&'static str, PathBuf)> {
    let root = fixture(KAFKA_PINTEREST);
    KAFKA_PINTEREST_PARTITIONS.iter().map(|rel| (*rel, root.join(rel))).collect()
}

fn load_partitions() -> Vec<Partition> {
    partition_dirs()
        .into_iter()
        .map(|(name, dir)| {
            let segs = segment_base_offsets(&dir).into_iter().map(|base| load_segment(&dir, base)).collect();
            Partition { name, dir, segs }
        })
        .collect()
}

/// Walks a `.log` file: 12-byte framing, magic 2 at byte 16, fields at their v2 positions, every
/// record decoded. Anything that does not fit (trailing bytes included) fails the test.
fn load_segment(dir: &Path, base: i64) -> Seg {
    let path = dir.join(filename::log_file_name(base));
    let log = read_file(&path);
    let (mut batches, mut records, mut scratch) = (Vec::new(), Vec::new(), Vec::new());
    let mut pos = 0usize;
    while pos < log.len() {
        let left = log.len() - pos;
        assert!(left >= batch::BATCH_HEADER_SIZE, "{}: {left} trailing bytes at {pos}", path.display());
        let size = be_i32(&log, pos + 8) as usize + batch::LOG_OVERHEAD;
        assert!(size >= batch::BATCH_HEADER_SIZE && size <= left, "{}: batch size {size} at {pos}", path.display());
        let b = &log[pos..pos + size];
        assert_eq!(b[16], 2, "{}: magic at {pos}", path.display());
        let base_offset = be_i64(b, 0);
        let log_append_time = be_i16(b, 21) & 0x08 != 0;
        let (base_ts, max_ts) = (be_i64(b, 27), be_i64(b, 35));
        let first_record = records.len();
        let iter = record::batch_records(b, &mut scratch).unwrap_or_else(|e| panic!("{}@{pos}: {e}", path.display()));
        for r in iter {
            let r = r.unwrap_or_else(|e| panic!("{}@{pos}: {e}", path.display()));
            let timestamp = if log_append_time { max_ts } else { base_ts + r.timestamp_delta };
            records.push(Rec { offset: base_offset + r.offset_delta as i64, timestamp, batch: batches.len() });
        }
        batches.push(Batch {
            position: pos as u32,
            size: size as u32,
            base_offset,
            last_offset: base_offset + be_i32(b, 23) as i64,
            max_timestamp: max_ts,
            leader_epoch: be_i32(b, 12),
            first_record,
            records_end: records.len(),
        });
        pos += size;
    }
    let max_timestamp = batches.iter().map(|b| b.max_timestamp).max().unwrap_or(batch::NO_TIMESTAMP);
    Seg { base, max_timestamp, log, batches, records }
}

/// Kafka's append rule replayed over a segment's batches: an offset entry `(batch last offset,
/// batch position)` when more than `interval` bytes went by since the last entry (checked before
/// the batch is counted), a time entry `(max timestamp so far, last offset of the first batch
/// holding it)` at the same moments if the timestamp grew, and a final time entry at roll.
fn kafka_rule_indexes(seg: &Seg, interval: u32) -> SegIndexes {
    fn maybe_append(time: &mut Vec<(i64, i64)>, entry: (i64, i64)) {
        if entry.0 > time.last().map_or(batch::NO_TIMESTAMP, |e| e.0) {
            time.push(entry);
        }
    }
    let (mut offsets, mut times) = (Vec::new(), Vec::new());
    let mut since_last_entry = 0u64;
    let mut max = (batch::NO_TIMESTAMP, seg.base);
    for b in &seg.batches {
        if b.max_timestamp > max.0 {
            max = (b.max_timestamp, b.last_offset);
        }
        if since_last_entry > interval as u64 {
            offsets.push((b.last_offset, b.position));
            maybe_append(&mut times, max);
            since_last_entry = 0;
        }
        since_last_entry += b.size as u64;
    }
    maybe_append(&mut times, max);
    SegIndexes { offsets, times }
}

fn encode_offset_index(base: i64, entries: &[(i64, u32)]) -> Vec<u8> {
    let mut out = Vec::new();
    for &(offset, position) in entries {
        out.extend_from_slice(&((offset - base) as i32).to_be_bytes());
        out.extend_from_slice(&(position as i32).to_be_bytes());
    }
    out
}

fn encode_time_index(base: i64, entries: &[(i64, i64)]) -> Vec<u8> {
    let mut out = Vec::new();
    for &(timestamp, offset) in entries {
        out.extend_from_slice(&timestamp.to_be_bytes());
        out.extend_from_slice(&((offset - base) as i32).to_be_bytes());
    }
    out
}

fn decode_offset_index(base: i64, bytes: &[u8]) -> Vec<(i64, u32)> {
    assert_eq!(bytes.len() % 8, 0, "offset index length {}", bytes.len());
    bytes.chunks_exact(8).map(|e| (base + be_i32(e, 0) as i64, be_i32(e, 4) as u32)).collect()
}

fn decode_time_index(base: i64, bytes: &[u8]) -> Vec<(i64, i64)> {
    assert_eq!(bytes.len() % 12, 0, "time index length {}", bytes.len());
    bytes.chunks_exact(12).map(|e| (be_i64(e, 0), base + be_i32(e, 8) as i64)).collect()
}

/// Kafka's `findOffsetByTimestamp` over one segment, done linearly over the model: the time-index
/// floor (last entry with timestamp <= t, else the base offset), the offset-index floor of
/// `max(that offset, starting_offset)` (else position 0), then from that position the first batch
/// with max timestamp >= t that holds a record with timestamp >= t and offset >= starting_offset
/// (later batches are tried when one holds none).
fn kafka_segment_time_lookup(
    seg: &Seg,
    offsets: &[(i64, u32)],
    times: &[(i64, i64)],
    t: i64,
    starting_offset: i64,
) -> Option<TimestampAndOffset> {
    let floor_offset = times.iter().rev().find(|e| e.0 <= t).map_or(seg.base, |e| e.1);
    let target = floor_offset.max(starting_offset);
    let position = offsets.iter().rev().find(|e| e.0 <= target).map_or(0, |e| e.1);
    let first = seg.batches.partition_point(|b| b.position < position);
    assert!(
        first < seg.batches.len() && seg.batches[first].position == position,
        "index position {position} is not a batch start"
    );
    seg.batches[first..]
        .iter()
        .filter(|b| b.max_timestamp >= t)
        .find_map(|b| seg.records_of(b).iter().find(|r| r.timestamp >= t && r.offset >= starting_offset))
        .map(|r| seg.hit(r))
}

/// Kafka's `fetchOffsetByTimestamp` for a plain timestamp: the first segment whose largest
/// timestamp is >= t, then [`kafka_segment_time_lookup`] in it (and nowhere else).
fn kafka_time_lookup(p: &Partition, indexes: &[SegIndexes], t: i64, log_start: i64) -> Option<TimestampAndOffset> {
    let i = p.segs.iter().position(|s| s.max_timestamp() >= t)?;
    kafka_segment_time_lookup(&p.segs[i], &indexes[i].offsets, &indexes[i].times, t, log_start)
}

/// Kafka's `MAX_TIMESTAMP`: the first segment with the largest max timestamp, the first batch in
/// it whose max timestamp is that, the first record in it holding it.
fn kafka_max_timestamp_lookup(p: &Partition) -> Option<TimestampAndOffset> {
    let mut best: Option<&Seg> = None;
    for s in &p.segs {
        if best.is_none_or(|b| s.max_timestamp() > b.max_timestamp()) {
            best = Some(s);
        }
    }
    let s = best?;
    let max = s.max_timestamp();
    let b = s.batches.iter().find(|b| b.max_timestamp == max)?;
    s.records_of(b).iter().find(|r| r.timestamp == max).map(|r| s.hit(r))
}

/// The entries of a segment's two indexes, as a lookup uses them.
struct SegIndexes {
    offsets: Vec<(i64, u32)>,
    times: Vec<(i64, i64)>,
}

fn broker_indexes(p: &Partition) -> Vec<SegIndexes> {
    p.segs
        .iter()
        .map(|s| SegIndexes {
            offsets: decode_offset_index(s.base, &read_file(&p.dir.join(filename::index_file_name(s.base)))),
            times: decode_time_index(s.base, &read_file(&p.dir.join(filename::time_index_file_name(s.base)))),
        })
        .collect()
}

fn rule_indexes(p: &Partition) -> Vec<SegIndexes> {
    p.segs.iter().map(|s| kafka_rule_indexes(s, INDEX_INTERVAL_BYTES)).collect()
}

/// What a segment's index files hold after seglog rebuilt them.
struct Rebuilt {
    index: Vec<u8>,
    time_index: Vec<u8>,
}

fn rebuild(p: &Partition, seg: &Seg) -> Rebuilt {
    let storage = seglog_tests::test_storage();
    let tmp = tempfile::tempdir().expect("tempdir");
    let copied = copy_segment_files(&p.dir, seg.base, tmp.path());
    assert_eq!(copied.len(), 3, "{} {}: {copied:?}", p.name, seg.base);
    let (mut s, missing_index) =
        open_segment(&*storage, tmp.path(), seg.base).unwrap_or_else(|e| panic!("{} {}: open: {e}", p.name, seg.base));
    assert!(!missing_index);
    let r = s.recover().unwrap_or_else(|e| panic!("{} {}: recover: {e}", p.name, seg.base));
    assert_eq!(r.truncated_bytes, 0, "{} {}: recovery cut bytes: {:?}", p.name, seg.base, r.first_error);
    assert!(r.first_error.is_none());
    assert_eq!(r.batches, seg.batches.len() as u64);
    assert_eq!(r.valid_bytes as usize, seg.log.len());
    drop(s);
    assert!(
        read_file(&tmp.path().join(filename::log_file_name(seg.base))) == seg.log,
        "{} {}: recovery changed the .log file",
        p.name,
        seg.base
    );
    Rebuilt {
        index: read_file(&tmp.path().join(filename::index_file_name(seg.base))),
        time_index: read_file(&tmp.path().join(filename::time_index_file_name(seg.base))),
    }
}

/// A broker segment copied to `dir`, opened with its indexes read (nothing rebuilt).
fn open_segment(storage: &dyn Storage, dir: &Path, base: i64) -> seglog::Result<(Segment, bool)> {
    Segment::open_existing(storage, dir, base, settings(), &SegmentResources::process_default())
}

// ---------------------------------------------------------------------------------------------

/// 1. Every batch of every `.log` walks with seglog's scanner, passes `validate_batch` (CRC-32C),
///    and decodes into exactly its declared records with offsets `base + delta`; the walk ends
///    exactly at the end of each file.
#[test]
fn every_batch_reads_and_passes_crc() {
    let root = fixture(KAFKA_PINTEREST);
    let expected: Vec<PathBuf> = KAFKA_PINTEREST_PARTITIONS.iter().map(|rel| root.join(rel)).collect();
    assert_eq!(list_partition_dirs(&root), expected, "partition directories of {}", root.display());

    let storage = seglog_tests::test_storage();
    let (mut segments, mut batches, mut records, mut bytes) = (0usize, 0u64, 0u64, 0u64);
    let mut codecs: BTreeMap<&'static str, u64> = BTreeMap::new();
    let (mut buf, mut scratch) = (Vec::new(), Vec::new());
    for (name, dir) in partition_dirs() {
        let mut next_offset = i64::MIN;
        for base in segment_base_offsets(&dir) {
            let path = dir.join(filename::log_file_name(base));
            let file = storage.open(&path, OpenMode::Read).unwrap_or_else(|e| panic!("{e}"));
            let len = file.len().expect("len");
            let mut scan = BatchScanner::new(file.clone(), 0, len as u32);
            let mut expected_position = 0u32;
            let mut first = true;
            while let Some(b) = scan.next_batch().unwrap_or_else(|e| panic!("{name}: {e}")) {
                let at = format!("{name} {base} @{}", b.position);
                assert_eq!(b.position, expected_position, "{at}: batches are back to back");
                scan.read_batch(&b, &mut buf).unwrap_or_else(|e| panic!("{at}: {e}"));
                let h = batch::validate_batch(&buf, false).unwrap_or_else(|e| panic!("{at}: {e}"));
                assert_eq!(h, b.header, "{at}: scanner header");
                assert!(h.base_offset >= next_offset, "{at}: offsets go back");
                if first {
                    assert!(h.base_offset >= base, "{at}: batch below the segment base");
                    first = false;
                }
                let codec = h.compression().expect("codec");
                *codecs.entry(codec_name(codec)).or_default() += 1;
                let mut count = 0i32;
                let mut max_ts = batch::NO_TIMESTAMP;
                let iter = record::batch_records(&buf, &mut scratch).unwrap_or_else(|e| panic!("{at}: {e}"));
                for r in iter {
                    let r = r.unwrap_or_else(|e| panic!("{at}: record {count}: {e}"));
                    let offset = r.offset(h.base_offset);
                    assert_eq!(offset, h.base_offset + r.offset_delta as i64, "{at}: record {count}");
                    assert_eq!(r.offset_delta, count, "{at}: offsets are dense (no compaction here)");
                    max_ts = max_ts.max(r.timestamp(h.base_timestamp, h.max_timestamp, h.timestamp_type()));
                    count += 1;
                }
                assert_eq!(count, h.records_count, "{at}: record count");
                assert_eq!(h.base_offset + count as i64 - 1, h.last_offset(), "{at}: last offset");
                assert_eq!(max_ts, h.max_timestamp, "{at}: max record timestamp");
                next_offset = h.next_offset();
                expected_position = b.end();
                batches += 1;
                records += count as u64;
            }
            assert_eq!(expected_position as u64, len, "{name} {base}: the walk stopped before the end");
            assert_eq!(scan.position() as u64, len, "{name} {base}: trailing bytes");
            segments += 1;
            bytes += len;
        }
    }
    eprintln!("{segments} segments, {batches} batches, {records} records, {bytes} bytes; codecs {codecs:?}");
    assert_eq!(segments, SEGMENTS_IN_FIXTURES);
    assert!(batches > 0 && records > 0);
    assert!(records > batches, "some batches hold several records");

    // The independent walk agrees on every count.
    let model = load_partitions();
    let model_batches: usize = model.iter().flat_map(|p| &p.segs).map(|s| s.batches.len()).sum();
    let model_records: usize = model.iter().flat_map(|p| &p.segs).map(|s| s.records.len()).sum();
    assert_eq!((model_batches as u64, model_records as u64), (batches, records));
}

fn codec_name(c: Compression) -> &'static str {
    match c {
        Compression::None => "none",
        Compression::Gzip => "gzip",
        Compression::Snappy => "snappy",
        Compression::Lz4 => "lz4",
        Compression::Zstd => "zstd",
    }
}

/// 2. `Segment::recover` rebuilds `.index` with Kafka's rule (index.interval.bytes 4096): equal to
///    the rule replayed here in all 148 segments, and to the broker's file in 146; the two others
///    are exactly the base-0 segments of ts-consumer test_topic_a-1 and -2, where the broker
///    indexed every batch after the first. Rebuilding never changes the `.log`.
#[test]
fn rebuilt_offset_index_matches_broker() {
    let mut matched = 0usize;
    let mut differ: BTreeSet<(&str, i64)> = BTreeSet::new();
    for p in load_partitions() {
        for seg in &p.segs {
            let rebuilt = rebuild(&p, seg);
            let rule = kafka_rule_indexes(seg, INDEX_INTERVAL_BYTES).offsets;
            assert!(
                rebuilt.index == encode_offset_index(seg.base, &rule),
                "{} {}: seglog's rebuild is not Kafka's rule",
                p.name,
                seg.base
            );
            let broker = read_file(&p.dir.join(filename::index_file_name(seg.base)));
            if rebuilt.index == broker {
                matched += 1;
            } else {
                differ.insert((p.name, seg.base));
                // What the broker wrote instead: an entry for every batch after the first.
                let every_batch: Vec<(i64, u32)> =
                    seg.batches[1..].iter().map(|b| (b.last_offset, b.position)).collect();
                assert_eq!(decode_offset_index(seg.base, &broker), every_batch, "{} {}", p.name, seg.base);
            }
        }
    }
    eprintln!("offset index rebuilt byte for byte: {matched} segments; differ: {differ:?}");
    assert_eq!(differ, SMALL_INTERVAL_SEGMENTS.into_iter().collect::<BTreeSet<_>>());
    assert_eq!(matched, SEGMENTS_IN_FIXTURES - 2);
}

/// 3. The rebuilt `.timeindex` equals the broker's in ts-common and ts-segment-uploader. In
///    ts-consumer (an older broker) the timestamps are the same but an entry holds the offset of
///    the record with the max timestamp, inside the batch that first reached it, where the rule
///    stores that batch's last offset; seglog's time lookups work on those files as they are.
#[test]
fn rebuilt_time_index_matches_broker() {
    let storage = seglog_tests::test_storage();
    let (mut identical, mut consumer_differ, mut consumer_entries) = (0usize, 0usize, 0usize);
    let (mut exact_record_entries, mut lookups, mut empty_index_segments) = (0usize, 0usize, 0usize);
    for p in load_partitions() {
        let older_broker = p.name.starts_with("ts-consumer/");
        let tmp = copy_dir_to_temp(&p.dir);
        for seg in &p.segs {
            let at = format!("{} {}", p.name, seg.base);
            let rebuilt = rebuild(&p, seg);
            let rule = kafka_rule_indexes(seg, INDEX_INTERVAL_BYTES).times;
            assert!(
                rebuilt.time_index == encode_time_index(seg.base, &rule),
                "{at}: seglog's rebuild is not Kafka's rule"
            );
            // The rule with the interval the broker used (every batch indexed in the two segments
            // of test 2 written with a smaller one).
            let broker_interval =
                if SMALL_INTERVAL_SEGMENTS.contains(&(p.name, seg.base)) { 0 } else { INDEX_INTERVAL_BYTES };
            let rule = kafka_rule_indexes(seg, broker_interval).times;
            let broker_bytes = read_file(&p.dir.join(filename::time_index_file_name(seg.base)));
            let broker = decode_time_index(seg.base, &broker_bytes);

            // README: a segment with an empty .index still has the 12-byte roll entry.
            if read_file(&p.dir.join(filename::index_file_name(seg.base))).is_empty() {
                assert_eq!(broker_bytes.len(), 12, "{at}: empty .index beside a .timeindex of {}", broker_bytes.len());
                empty_index_segments += 1;
            }

            if !older_broker {
                assert!(rebuilt.time_index == broker_bytes, "{at}: rebuilt .timeindex differs from the broker's");
                identical += 1;
            } else {
                if rebuilt.time_index != broker_bytes {
                    consumer_differ += 1;
                }
                consumer_entries += broker.len();
                assert_eq!(broker.len(), rule.len(), "{at}: entry count");
                for (i, (&(ts, offset), &(rule_ts, rule_offset))) in broker.iter().zip(&rule).enumerate() {
                    assert_eq!(ts, rule_ts, "{at}: entry {i} timestamp");
                    // The batch that first reached this max timestamp holds the entry's offset.
                    let b = seg.batches.iter().find(|b| b.max_timestamp >= ts).expect("a batch reaches it");
                    assert_eq!(b.max_timestamp, ts, "{at}: entry {i}");
                    assert!((b.base_offset..=b.last_offset).contains(&offset), "{at}: entry {i} offset {offset}");
                    assert_eq!(rule_offset, b.last_offset, "{at}: entry {i}");
                    // ... and it is the offset of the record holding that timestamp.
                    let r = seg.records_of(b).iter().find(|r| r.offset == offset).expect("record");
                    assert_eq!(r.timestamp, ts, "{at}: entry {i}: record {offset}");
                    let first_holder = seg.records_of(b).iter().find(|r| r.timestamp == ts).expect("holder");
                    assert_eq!(first_holder.offset, offset, "{at}: entry {i}: the first record holding it");
                    if offset != b.last_offset {
                        exact_record_entries += 1;
                    }
                }
            }

            // seglog's lookups through the broker's own files (nothing rebuilt).
            let (s, _) = open_segment(&*storage, tmp.path(), seg.base).unwrap_or_else(|e| panic!("{at}: {e}"));
            s.sanity_check().unwrap_or_else(|e| panic!("{at}: {e}"));
            let offsets = decode_offset_index(seg.base, &read_file(&p.dir.join(filename::index_file_name(seg.base))));
            for &(ts, _) in &broker {
                for t in [ts - 1, ts, ts + 1] {
                    let got = s.find_offset_by_timestamp(t, seg.base).unwrap_or_else(|e| panic!("{at}: {e}"));
                    let want = kafka_segment_time_lookup(seg, &offsets, &broker, t, seg.base);
                    assert_eq!(got, want, "{at}: time lookup {t}");
                    let naive = seg.records.iter().find(|r| r.timestamp >= t).map(|r| seg.hit(r));
                    assert_eq!(want, naive, "{at}: time lookup {t}, Kafka vs first record");
                    lookups += 1;
                }
            }
            let max = seg.max_timestamp();
            assert_eq!(s.max_timestamp_so_far().timestamp, max, "{at}: max timestamp from the broker's index");
            let want = seg.records.iter().find(|r| r.timestamp == max).map(|r| seg.hit(r));
            assert_eq!(s.offset_of_max_timestamp().unwrap(), want, "{at}: offset of max timestamp");
        }
    }
    eprintln!(
        "time index: {identical} segments identical (ts-common, ts-segment-uploader); ts-consumer: \
         {consumer_differ} segments differ, {exact_record_entries} of {consumer_entries} entries at a \
         record before the batch's last offset; {empty_index_segments} segments with an empty .index; \
         {lookups} lookups through broker files"
    );
    assert_eq!(identical, 4 + 31);
    // Every ts-consumer segment has an entry that is not at its batch's last offset.
    assert_eq!(consumer_differ, 40 + 36 + 37, "README: ts-consumer entries hold exact record offsets");
    assert_eq!(exact_record_entries, consumer_entries, "every ts-consumer entry points inside its batch");
}

/// 4. For every offset of every segment, `translate_offset` through the broker's own `.index`
///    finds the batch a linear scan finds (the first batch whose last offset is >= the offset).
#[test]
fn offset_lookup_through_broker_index_matches_scan() {
    let storage = seglog_tests::test_storage();
    let mut checked = 0u64;
    for p in load_partitions() {
        let tmp = copy_dir_to_temp(&p.dir);
        for seg in &p.segs {
            let at = format!("{} {}", p.name, seg.base);
            let (s, missing_index) =
                open_segment(&*storage, tmp.path(), seg.base).unwrap_or_else(|e| panic!("{at}: {e}"));
            assert!(!missing_index);
            let mut bi = 0usize;
            for offset in seg.base..=seg.last_offset() {
                while seg.batches[bi].last_offset < offset {
                    bi += 1;
                }
                let b = &seg.batches[bi];
                let want = LogOffsetPosition { offset: b.last_offset, position: b.position, size: b.size };
                let got = s.translate_offset(offset, 0).unwrap_or_else(|e| panic!("{at}: {e}"));
                assert_eq!(got, Some(want), "{at}: offset {offset}");
                checked += 1;
            }
            assert_eq!(s.translate_offset(seg.last_offset() + 1, 0).unwrap(), None, "{at}: past the end");
            drop(s);
            let index = filename::index_file_name(seg.base);
            assert!(
                read_file(&tmp.path().join(&index)) == read_file(&p.dir.join(&index)),
                "{at}: lookups changed the .index"
            );
        }
    }
    eprintln!("{checked} offsets looked up through the broker's .index files");
    assert!(checked > 0);
}

/// 5. `Log::offset_for_time` (after full recovery, and with `Recovery::Clean` on the broker's own
///    indexes) against Kafka's algorithm done linearly, for every distinct record timestamp, each
///    minus 1, and one before and one after all; on these files Kafka's answer is also the first
///    record overall with a timestamp >= the target. Earliest, Latest and MaxTimestamp against a
///    linear scan.
#[test]
fn time_lookup_matches_linear_scan() {
    let mut queries = 0u64;
    for p in load_partitions() {
        assert!(p.segs.iter().all(|s| s.max_timestamp() >= 0), "{}: a segment without timestamps", p.name);
        let mut timestamps: BTreeSet<i64> = BTreeSet::new();
        for (_, r) in p.records() {
            timestamps.insert(r.timestamp);
            timestamps.insert(r.timestamp - 1);
        }
        let (min, max) = (*timestamps.first().expect("records"), *timestamps.last().expect("records"));
        timestamps.insert(min - 1000);
        timestamps.insert(max + 1000);

        // Naive answers: the first record (offset order) whose timestamp is >= t.
        let all: Vec<(&Seg, &Rec)> = p.records().collect();
        let mut prefix_max = Vec::with_capacity(all.len());
        let mut m = i64::MIN;
        for (_, r) in &all {
            m = m.max(r.timestamp);
            prefix_max.push(m);
        }
        let naive = |t: i64| {
            let i = prefix_max.partition_point(|&m| m < t);
            all.get(i).map(|(s, r)| s.hit(r))
        };

        let log_start = p.segs[0].base;
        for (recovery, indexes) in [(Recovery::default(), rule_indexes(&p)), (Recovery::Clean, broker_indexes(&p))] {
            let tmp = copy_dir_to_temp(&p.dir);
            let log = Log::open(tmp.path(), LogOptions { recovery, ..Default::default() })
                .unwrap_or_else(|e| panic!("{} {recovery:?}: {e}", p.name));
            let at = format!("{} {recovery:?}", p.name);
            for &t in &timestamps {
                let got = log.offset_for_time(ListOffset::Timestamp(t)).unwrap_or_else(|e| panic!("{at}: {e}"));
                let want = kafka_time_lookup(&p, &indexes, t, log_start);
                assert_eq!(got, want, "{at}: timestamp {t}");
                assert_eq!(want, naive(t), "{at}: timestamp {t}: Kafka's answer vs the first record");
                queries += 1;
            }
            let earliest = log.offset_for_time(ListOffset::Earliest).unwrap().expect("earliest");
            assert_eq!(earliest.offset, log_start, "{at}: earliest");
            let latest = log.offset_for_time(ListOffset::Latest).unwrap().expect("latest");
            assert_eq!(latest.offset, p.log_end_offset(), "{at}: latest");
            let max_ts = log.offset_for_time(ListOffset::MaxTimestamp).unwrap();
            assert_eq!(max_ts, kafka_max_timestamp_lookup(&p), "{at}: max timestamp");
        }
    }
    eprintln!("{queries} timestamp lookups");
}

/// 6. `Log::open` on a copy of each partition (full recovery, and `Recovery::Clean` on the broker's
///    own indexes): offsets from a linear scan, every batch fetched by its base offset (and by its
///    last offset) comes back byte for byte, the `.log` files are unchanged, and files that are not
///    segments (.snapshot, leader-epoch-checkpoint, partition.metadata, .wm) are left alone by open
///    and close. After a clean close every index file is Kafka's: the rule's entries after full
///    recovery, the broker's own bytes after a clean open.
#[test]
fn reopen_partition_and_fetch_every_batch() {
    let mut fetched = 0u64;
    for p in load_partitions() {
        for recovery in [Recovery::default(), Recovery::Clean] {
            let at = format!("{} {recovery:?}", p.name);
            let tmp = copy_dir_to_temp(&p.dir);
            let others = non_segment_files(tmp.path());
            assert!(others.contains_key("leader-epoch-checkpoint"), "{at}: {:?}", others.keys());
            let (log, report) = Log::open_with_report(tmp.path(), LogOptions { recovery, ..Default::default() })
                .unwrap_or_else(|e| panic!("{at}: open: {e}"));
            assert_eq!(report.segments, p.segs.len(), "{at}");
            let recovered = if recovery == Recovery::Clean { 0 } else { p.segs.len() };
            assert_eq!(report.segments_recovered, recovered, "{at}");
            assert_eq!(report.indexes_rebuilt, recovered, "{at}: the broker's indexes pass the sanity check");
            assert!(report.truncations.is_empty(), "{at}: {:?}", report.truncations);
            assert!(report.segments_removed.is_empty() && report.files_removed.is_empty(), "{at}: {report:?}");
            assert_eq!(log.log_start_offset(), p.segs[0].base, "{at}");
            assert_eq!(log.log_end_offset(), p.log_end_offset(), "{at}");
            let bases: Vec<i64> = log.segments().map(|s| s.base_offset()).collect();
            assert_eq!(bases, p.segs.iter().map(|s| s.base).collect::<Vec<_>>(), "{at}");
            for seg in &p.segs {
                for b in &seg.batches {
                    let last = (b.last_offset != b.base_offset).then_some(b.last_offset);
                    for offset in std::iter::once(b.base_offset).chain(last) {
                        let at = format!("{at} segment {} offset {offset}", seg.base);
                        let f = log.read(offset, 1, None, true).unwrap_or_else(|e| panic!("{at}: {e}"));
                        assert_eq!((f.segment_base_offset, f.position), (seg.base, b.position), "{at}");
                        assert!(
                            f.records == seg.batch_bytes(b),
                            "{at}: fetched {} bytes, not the batch",
                            f.records.len()
                        );
                    }
                    fetched += 1;
                }
            }
            let end = log.read(p.log_end_offset(), 1, None, true).expect("read at the log end");
            assert!(end.records.is_empty(), "{at}");
            assert_eq!(non_segment_files(tmp.path()), others, "{at}: open touched non-segment files");
            log.close().unwrap_or_else(|e| panic!("{at}: close: {e}"));
            // Close adds the producer snapshot at the log end (as Kafka's close does) and touches
            // no other file.
            let mut after = non_segment_files(tmp.path());
            let snapshot = filename::snapshot_file_name(p.log_end_offset());
            if !others.contains_key(&snapshot) {
                let added = after.remove(&snapshot).unwrap_or_else(|| panic!("{at}: no snapshot at the log end"));
                seglog::log::producer_state::read_snapshot(&added.0).unwrap_or_else(|e| panic!("{at}: {e}"));
            }
            assert_eq!(after, others, "{at}: close touched non-segment files");
            let rule = rule_indexes(&p);
            for (seg, rule) in p.segs.iter().zip(&rule) {
                let at = format!("{at} segment {}", seg.base);
                let file = |name: String| read_file(&tmp.path().join(name));
                assert!(file(filename::log_file_name(seg.base)) == seg.log, "{at}: the .log changed");
                let (index, time_index) =
                    (file(filename::index_file_name(seg.base)), file(filename::time_index_file_name(seg.base)));
                if recovery == Recovery::Clean {
                    let broker = |name: String| read_file(&p.dir.join(name));
                    assert!(index == broker(filename::index_file_name(seg.base)), "{at}: .index changed");
                    assert!(time_index == broker(filename::time_index_file_name(seg.base)), "{at}: .timeindex changed");
                } else {
                    assert!(index == encode_offset_index(seg.base, &rule.offsets), "{at}: .index is not the rule's");
                    assert!(
                        time_index == encode_time_index(seg.base, &rule.times),
                        "{at}: .timeindex is not the rule's"
                    );
                }
            }
        }
    }
    eprintln!("{fetched} batches fetched by base and last offset");
    assert!(fetched > 0);
}

/// Files of a directory that are not `.log`, `.index`, `.timeindex` or `.txnindex`, with their
/// bytes and modification time.
fn non_segment_files(dir: &Path) -> BTreeMap<String, (Vec<u8>, std::time::SystemTime)> {
    let mut out = BTreeMap::new();
    for ent in std::fs::read_dir(dir).expect("read_dir") {
        let ent = ent.expect("read_dir");
        let name = ent.file_name().to_string_lossy().into_owned();
        let kind = filename::SegmentFileName::parse(&name).ok().flatten().map(|n| n.kind);
        if matches!(kind, Some(k) if k != filename::FileKind::Snapshot) {
            continue;
        }
        let mtime = ent.metadata().and_then(|m| m.modified()).expect("mtime");
        out.insert(name, (read_file(&ent.path()), mtime));
    }
    out
}

/// 7. `leader-epoch-checkpoint` and `partition.metadata` parse with `seglog::format::checkpoint`,
///    serialize back to the same bytes, and agree with the leader epochs stamped on the batches.
#[test]
fn checkpoint_and_metadata_files_parse() {
    let mut files = 0usize;
    for p in load_partitions() {
        let text = String::from_utf8(read_file(&p.dir.join("leader-epoch-checkpoint"))).expect("utf-8");
        let cp = LeaderEpochCheckpoint::parse(&text).unwrap_or_else(|e| panic!("{}: {e}", p.name));
        assert_eq!(cp.serialize(), text, "{}: leader-epoch-checkpoint round trip", p.name);
        // Each epoch starts at the first batch stamped with it.
        let mut starts: Vec<(i32, i64)> = Vec::new();
        for b in p.segs.iter().flat_map(|s| &s.batches) {
            if b.leader_epoch >= 0 && starts.last().is_none_or(|&(e, _)| b.leader_epoch > e) {
                starts.push((b.leader_epoch, b.base_offset));
            }
        }
        assert_eq!(cp.entries, starts, "{}: epochs vs batches", p.name);
        files += 1;

        let meta = p.dir.join("partition.metadata");
        if meta.exists() {
            let text = String::from_utf8(read_file(&meta)).expect("utf-8");
            let m = PartitionMetadata::parse(&text).unwrap_or_else(|e| panic!("{}: {e}", p.name));
            assert_eq!(m, PartitionMetadata::new("p59PN4qkR8y176nhuDDPPA"), "{}", p.name);
            m.validate().expect("valid");
            assert_eq!(m.serialize(), text, "{}: partition.metadata round trip", p.name);
            files += 1;
        }
    }
    assert_eq!(files, 6, "five leader-epoch-checkpoint files and one partition.metadata");
}

/// Every producer snapshot the broker wrote (116: 113 empty, 3 with one idempotent producer)
/// reads, and the state it loads writes back byte for byte as the broker wrote it.
#[test]
fn the_brokers_producer_snapshots_read_and_write_back_identically() {
    use seglog::log::producer_state::{read_snapshot, ProducerState};
    let (mut files, mut producers) = (0, 0);
    for (_, dir) in partition_dirs() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_none_or(|e| e != "snapshot") {
                continue;
            }
            let bytes = std::fs::read(&path).unwrap();
            let entries = read_snapshot(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            producers += entries.len();
            for e in &entries {
                // The broker's producers here are idempotent ones: epoch 0, no transaction.
                assert_eq!(
                    (e.epoch, e.current_txn_first_offset, e.coordinator_epoch),
                    (0, None, -1),
                    "{}",
                    path.display()
                );
                assert_eq!(e.batches.len(), 1);
            }
            let offset: i64 = path.file_stem().unwrap().to_str().unwrap().parse().unwrap();
            let state = ProducerState::load(entries, offset, 0, i64::MAX);
            assert_eq!(state.snapshot(), bytes, "{}", path.display());
            files += 1;
        }
    }
    assert_eq!((files, producers), (116, 3));
}
