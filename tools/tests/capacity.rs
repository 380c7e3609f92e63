//! `seglog capacity`: the worksheet's numbers, checked by hand, and this machine's limits.

mod common;

use common::*;

#[test]
fn thousand_partitions_of_ten_gib_by_hand() {
    let r = seglog(["capacity", "--partitions", "1000", "--data-bytes", "10GiB", "--shards", "2", "--json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let w = &r.json()["worksheet"];
    // 1 GiB segments of 16 KiB batches: 65,536 batches; 4096 < 16 KiB, so each batch after the
    // first is indexed: 65,535 entries of 8 bytes and 65,535 of 12 (the last batch is indexed,
    // so the roll adds no time entry).
    assert_eq!(w["batches_per_segment"], 65_536);
    assert_eq!(w["offset_entries_per_segment"], 65_535);
    assert_eq!(w["time_entries_per_segment"], 65_535);
    assert_eq!(w["index_bytes_per_segment"], 65_535 * 8 + 65_535 * 12);
    assert_eq!(w["segments_per_partition"], 10);
    assert_eq!(w["segments"], 10_000);
    assert_eq!(w["index_bytes_total"], 13_107_000_000u64);
    let checks = w["checks"].as_array().unwrap();
    assert_eq!(checks[0]["needed"], 20_000, "Kafka: two maps per segment");
    assert_eq!(checks[1]["needed"], 4, "seglog: two per shard");
    assert_eq!(checks[2]["needed"], 30_000, "Kafka: .log + two index files per segment");
    let max_map_count: u64 = std::fs::read_to_string("/proc/sys/vm/max_map_count").unwrap().trim().parse().unwrap();
    assert_eq!(w["max_map_count"], max_map_count);
    assert_eq!(checks[0]["ok"], 20_000 <= max_map_count);

    let r = seglog(["capacity", "--partitions", "1000", "--data-bytes", "10000GiB", "--total", "--shards", "2"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("data kept: 10.0 GiB per partition"), "{}", r.stdout);
    assert!(r.stdout.contains("memory maps, Kafka"));
    assert!(r.stdout.contains("model: 2 per segment"));
    assert!(r.stdout.contains(&format!("vm.max_map_count {max_map_count}")));
    assert!(r.stdout.contains("OK") || r.stdout.contains("EXCEEDS"));
}

#[test]
fn seed_demo_segments_and_a_large_interval() {
    let r = seglog([
        "capacity",
        "--partitions",
        "4",
        "--data-bytes",
        "1MiB",
        "--segment-bytes",
        "65536",
        "--avg-batch-bytes",
        "16350",
        "--index-interval-bytes",
        "20000",
        "--json",
    ]);
    let w = &r.json()["worksheet"];
    assert_eq!(w["batches_per_segment"], 4);
    assert_eq!(w["offset_entries_per_segment"], 1);
    assert_eq!(w["time_entries_per_segment"], 2);
    assert_eq!(w["segments_per_partition"], 17, "1 MiB in 65,400-byte segments");
}

#[test]
fn rate_retention_and_usage_errors() {
    let r = seglog([
        "capacity",
        "--partitions",
        "10",
        "--produce-bytes-per-sec",
        "10MiB",
        "--retention-ms",
        "1h",
        "--json",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let w = &r.json()["worksheet"];
    // 1 MiB/s per partition for 3600 s, plus one segment.
    assert_eq!(w["retained_bytes_per_partition"], 3600u64 * (1 << 20) + (1 << 30));
    let r = seglog(["capacity", "--partitions", "10"]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("--data-bytes"), "{}", r.stderr);
    let r = seglog(["capacity", "--partitions", "10", "--data-bytes", "10XB"]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("unknown size suffix"), "{}", r.stderr);
}
