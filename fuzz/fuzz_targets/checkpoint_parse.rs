//! Every text parser in `format::checkpoint` and `format::filename` on arbitrary input. Nothing
//! may panic; whatever parses must serialize to text that parses back to the same value.
#![no_main]

use libfuzzer_sys::fuzz_target;
use seglog::format::checkpoint::{
    parse_checkpoint, CleanShutdown, LeaderEpochCheckpoint, OffsetCheckpoint, PartitionMetadata,
};
use seglog::format::filename::{parse_partition_dir, validate_topic_name, SegmentFileName};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(c) = OffsetCheckpoint::parse(&text) {
        if c.validate().is_ok() {
            assert_eq!(OffsetCheckpoint::parse(&c.serialize()).as_ref(), Ok(&c));
        }
        let _ = c.to_map();
    }
    if let Ok(c) = LeaderEpochCheckpoint::parse(&text) {
        assert_eq!(LeaderEpochCheckpoint::parse(&c.serialize()).as_ref(), Ok(&c));
    }
    if let Ok(c) = CleanShutdown::parse(&text) {
        assert_eq!(CleanShutdown::parse(&c.serialize()).as_ref(), Ok(&c));
    }
    if let Ok(m) = PartitionMetadata::parse(&text) {
        if m.validate().is_ok() {
            assert_eq!(PartitionMetadata::parse(&m.serialize()).as_ref(), Ok(&m));
        }
    }
    let _ = parse_checkpoint(&text, 0, |line| Ok::<_, String>(line.len()));
    if let Ok(Some(n)) = SegmentFileName::parse(&text) {
        assert_eq!(SegmentFileName::parse(&n.to_name()), Ok(Some(n)));
    }
    if let Some((topic, partition)) = parse_partition_dir(&text) {
        assert_eq!(seglog::format::filename::partition_dir_name(&topic, partition), text);
    }
    let _ = validate_topic_name(&text);
});
