use super::partition_metadata::decode_topic_id;
use super::*;

fn fixture(name: &str) -> String {
    let path =
        format!("{}/../fixtures/kafka-pinterest/ts-common/log-files/timeindex_test/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn line_of(e: FormatError) -> u32 {
    match e {
        FormatError::InvalidCheckpoint { line, .. } => line,
        other => panic!("unexpected error {other:?}"),
    }
}

fn oc(entries: &[(&str, i32, i64)]) -> OffsetCheckpoint {
    OffsetCheckpoint { entries: entries.iter().map(|&(t, p, o)| (t.to_owned(), p, o)).collect() }
}

#[test]
fn java_lines_match_buffered_reader() {
    let l = |s| JavaLines { rest: s }.collect::<Vec<_>>();
    assert_eq!(l(""), Vec::<&str>::new());
    assert_eq!(l("a"), ["a"]);
    assert_eq!(l("a\n"), ["a"]);
    assert_eq!(l("a\n\n"), ["a", ""]);
    assert_eq!(l("a\r\nb\rc\n"), ["a", "b", "c"]);
    assert_eq!(l("\n"), [""]);
    assert_eq!(l("a\r\r\n"), ["a", ""]);
}

#[test]
fn offset_checkpoint_exact_bytes_and_round_trip() {
    let c = oc(&[("t", 0, 5), ("t", 1, 7)]);
    assert_eq!(c.serialize(), "0\n2\nt 0 5\nt 1 7\n");
    assert_eq!(OffsetCheckpoint::parse("0\n2\nt 0 5\nt 1 7\n"), Ok(c.clone()));
    assert_eq!(OffsetCheckpoint::default().serialize(), "0\n0\n");
    assert_eq!(OffsetCheckpoint::parse("0\n0\n"), Ok(OffsetCheckpoint::default()));
    let big = oc(&[("__consumer_offsets", 49, i64::MAX), ("a.b_c-d", i32::MAX, -1), ("x", 0, 0)]);
    assert_eq!(big.validate(), Ok(()));
    assert_eq!(OffsetCheckpoint::parse(&big.serialize()), Ok(big.clone()));
    assert_eq!(OffsetCheckpoint::from_map(&big.to_map()).to_map(), big.to_map());
}

#[test]
fn offset_checkpoint_tolerances() {
    let want = oc(&[("t", 0, 5), ("t", 1, 7)]);
    // Missing final newline, CRLF, tabs and runs of spaces, trailing whitespace.
    for text in [
        "0\n2\nt 0 5\nt 1 7",
        "0\r\n2\r\nt 0 5\r\nt 1 7\r\n",
        "0\n2\nt\t0  5\nt \t 1\x0b7 \n",
        "+0\n02\nt +0 5\nt 1 +7\n",
    ] {
        assert_eq!(OffsetCheckpoint::parse(text), Ok(want.clone()), "{text:?}");
    }
    // Duplicates: kept in order, last wins in the map, as in Kafka's HashMap.
    let dup = OffsetCheckpoint::parse("0\n2\nt 0 5\nt 0 9\n").unwrap();
    assert_eq!(dup.entries.len(), 2);
    assert_eq!(dup.to_map()[&("t".to_owned(), 0)], 9);
}

#[test]
fn offset_checkpoint_rejects() {
    for (text, line) in [
        ("", 1),
        ("\n", 1),
        ("1\n0\n", 1),
        ("-1\n0\n", 1),
        ("x\n0\n", 1),
        ("0 \n0\n", 1),
        ("0", 2),
        ("0\n", 2),
        ("0\n\n", 2),
        ("0\nx\n", 2),
        ("0\n-1\n", 2),
        ("0\n99999999999\n", 2),
        ("0\n2147483648\n", 2),
        ("0\n99999999\nt 0 1\n", 4),
        ("0\n1\n", 3),
        ("0\n2\nt 0 5\n", 4),
        ("0\n0\nt 0 5\n", 3),
        ("0\n1\nt 0 5\nt 1 7\n", 4),
        ("0\n1\nt 0 5\n\n", 4),
        ("0\n1\nt 0 5\n \n", 4),
        ("0\n1\n\n", 3),
        ("0\n1\nt 0\n", 3),
        ("0\n1\nt 0 5 6\n", 3),
        ("0\n1\n t 0 5\n", 3),
        ("0\n1\nt x 5\n", 3),
        ("0\n1\nt 0 x\n", 3),
        ("0\n1\nt -1 5\n", 3),
        ("0\n1\nt 2147483648 5\n", 3),
        ("0\n1\nt 0 9223372036854775808\n", 3),
        ("0\n1\nt 0 5.0\n", 3),
        ("0\n1\nt 0 ５\n", 3),
    ] {
        let r = OffsetCheckpoint::parse(text);
        assert_eq!(r.clone().map_err(line_of), Err(line), "{text:?} -> {r:?}");
    }
    assert_eq!(line_of(oc(&[("t", 0, 1), ("a b", 0, 1)]).validate().unwrap_err()), 4);
    assert_eq!(line_of(oc(&[("", 0, 1)]).validate().unwrap_err()), 3);
    assert_eq!(line_of(oc(&[("t", -1, 1)]).validate().unwrap_err()), 3);
}

#[test]
fn leader_epoch_checkpoint() {
    let c = LeaderEpochCheckpoint { entries: vec![(0, 0), (3, 7729), (i32::MAX, i64::MAX)] };
    assert_eq!(c.serialize(), "0\n3\n0 0\n3 7729\n2147483647 9223372036854775807\n");
    assert_eq!(LeaderEpochCheckpoint::parse(&c.serialize()), Ok(c));
    let fx = LeaderEpochCheckpoint::parse(&fixture(LEADER_EPOCH_CHECKPOINT_FILE)).unwrap();
    assert_eq!(fx.entries, vec![(0, 0)]);
    assert_eq!(fx.serialize(), fixture(LEADER_EPOCH_CHECKPOINT_FILE));
    for (text, line) in [
        ("", 1),
        ("1\n1\n0 0\n", 1),
        ("0\n2\n0 0\n", 4),
        ("0\n1\n0\n", 3),
        ("0\n1\n0 0 0\n", 3),
        ("0\n1\nx 0\n", 3),
        ("0\n1\n2147483648 0\n", 3),
        ("0\n99999999999\n0 0\n", 2),
        ("0\n1\n0 0\nextra\n", 4),
    ] {
        let r = LeaderEpochCheckpoint::parse(text);
        assert_eq!(r.clone().map_err(line_of), Err(line), "{text:?} -> {r:?}");
    }
}

#[test]
fn generic_checkpoint_with_other_version() {
    let text = serialize_checkpoint(3, &["a", "b"], |s, out| out.push_str(s));
    assert_eq!(text, "3\n2\na\nb\n");
    assert_eq!(parse_checkpoint(&text, 3, |l| Ok(l.to_owned())), Ok(vec!["a".to_owned(), "b".to_owned()]));
    assert_eq!(parse_checkpoint(&text, 0, |l| Ok(l.to_owned())).map_err(line_of), Err(1));
    let e = parse_checkpoint(&text, 3, |_| Err::<(), _>("nope".to_owned())).unwrap_err();
    assert_eq!(e, FormatError::InvalidCheckpoint { line: 3, detail: "nope".to_owned() });
}

#[test]
fn clean_shutdown() {
    let c = CleanShutdown { broker_epoch: Some(42) };
    assert_eq!(c.serialize(), r#"{"version":0,"brokerEpoch":42}"#);
    assert_eq!(CleanShutdown::parse(&c.serialize()), Ok(c));
    for epoch in [0, -1, i64::MAX, i64::MIN] {
        let c = CleanShutdown { broker_epoch: Some(epoch) };
        assert_eq!(CleanShutdown::parse(&c.serialize()), Ok(c));
    }
    let none = CleanShutdown { broker_epoch: None };
    assert_eq!(none.serialize(), "");
    for text in ["", " \n", "{\"version\":0}", "{\"version\":0,\"brokerEpoch\":null}"] {
        assert_eq!(CleanShutdown::parse(text), Ok(none), "{text:?}");
    }
    for text in [
        " {\n  \"brokerEpoch\" : 7 ,\n\t\"version\": 0\n}\n",
        r#"{"version":0,"brokerEpoch":7,"extra":{"a":[1,2.5e3,true,null,"x\"\u00e9"]}}"#,
        r#"{"future":"field","version":0,"brokerEpoch":7}"#,
    ] {
        assert_eq!(CleanShutdown::parse(text), Ok(CleanShutdown { broker_epoch: Some(7) }), "{text:?}");
    }
    for (text, line) in [
        ("{}", 1),
        ("{\"brokerEpoch\":1}", 1),
        ("{\"version\":1,\"brokerEpoch\":1}", 1),
        ("{\"version\":0,\"brokerEpoch\":1.5}", 1),
        ("{\"version\":0,\"brokerEpoch\":1e3}", 1),
        ("{\"version\":0,\"brokerEpoch\":\"1\"}", 1),
        ("{\"version\":0,\"brokerEpoch\":9223372036854775808}", 1),
        ("{\"version\":0,\"brokerEpoch\":01}", 1),
        ("{\"version\":0,\"brokerEpoch\":-}", 1),
        ("{\"version\":0,\"version\":0}", 1),
        ("{\"version\":0,\"brokerEpoch\":1,\"brokerEpoch\":2}", 1),
        ("{\"version\":0,\"brokerEpoch\":1}x", 1),
        ("{\"version\":0,\"brokerEpoch\":1}{}", 1),
        ("{\"version\":0,\"brokerEpoch\":1,}", 1),
        ("{\"version\":0 \"brokerEpoch\":1}", 1),
        ("{\"version\":0,\"brokerEpoch\":1", 1),
        ("{\"version\":0,\n\"brokerEpoch\":x}", 2),
        ("{\"version\"", 1),
        ("{\"vers", 1),
        ("[]", 1),
        ("null", 1),
        ("{\"version\":0,\"x\":\"\\q\"}", 1),
        ("{\"version\":0,\"x\":\"\\u12\"}", 1),
        ("{\"version\":0,\"x\":\"a\nb\"}", 1),
        ("{\"version\":0,\"x\":tru}", 1),
    ] {
        let r = CleanShutdown::parse(text);
        assert_eq!(r.map_err(line_of), Err(line), "{text:?}");
    }
    let deep = format!("{{\"version\":0,\"x\":{}{}}}", "[".repeat(10_000), "]".repeat(10_000));
    assert!(CleanShutdown::parse(&deep).is_err());
    let ok_deep = format!("{{\"version\":0,\"x\":{}{}}}", "[".repeat(20), "]".repeat(20));
    assert_eq!(CleanShutdown::parse(&ok_deep), Ok(none));
}

#[test]
fn partition_metadata() {
    let text = fixture(PARTITION_METADATA_FILE);
    let m = PartitionMetadata::parse(&text).unwrap();
    assert_eq!(m, PartitionMetadata::new("p59PN4qkR8y176nhuDDPPA"));
    assert_eq!(m.validate(), Ok(()));
    assert_eq!(m.serialize(), text, "byte-identical to the Kafka-written fixture");
    assert_eq!(m.serialize(), "version: 0\ntopic_id: p59PN4qkR8y176nhuDDPPA");
    for ok in [
        "version: 0\ntopic_id: p59PN4qkR8y176nhuDDPPA\n",
        "version: 0\r\ntopic_id: p59PN4qkR8y176nhuDDPPA\r\n",
        "version:\t 0\ntopic_id:  p59PN4qkR8y176nhuDDPPA",
        "version: 0\ntopic_id: p59PN4qkR8y176nhuDDPPA==",
        "version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ",
        "version: 0\ntopic_id: -_-_-_-_-_-_-_-_-_-_-_",
    ] {
        let m = PartitionMetadata::parse(ok).unwrap_or_else(|e| panic!("{ok:?}: {e}"));
        assert_eq!(PartitionMetadata::parse(&m.serialize()), Ok(m.clone()));
    }
    let v1 = PartitionMetadata::parse("version: 1\ntopic_id: p59PN4qkR8y176nhuDDPPA\nnew_key: x\n").unwrap();
    assert_eq!(v1.version, 1);
    assert_eq!(PartitionMetadata::parse(&v1.serialize()), Ok(v1));
    for (text, line) in [
        ("", 1),
        ("\n", 1),
        ("version: 0", 2),
        ("version: 0\n", 2),
        ("version:0\ntopic_id: p59PN4qkR8y176nhuDDPPA", 1),
        ("Version: 0\ntopic_id: p59PN4qkR8y176nhuDDPPA", 1),
        ("version: -1\ntopic_id: p59PN4qkR8y176nhuDDPPA", 1),
        ("version: x\ntopic_id: p59PN4qkR8y176nhuDDPPA", 1),
        ("version: 99999999999\ntopic_id: p59PN4qkR8y176nhuDDPPA", 1),
        ("version: 0\ntopic: p59PN4qkR8y176nhuDDPPA", 2),
        ("version: 0\ntopic_id: ", 2),
        ("version: 0\ntopic_id: p59PN4qkR8y176nhuDDPP", 2),
        ("version: 0\ntopic_id: p59PN4qkR8y176nhuDDPPAA", 2),
        ("version: 0\ntopic_id: p59PN4qkR8y176nhuDDPPA=", 2),
        ("version: 0\ntopic_id: p59PN4qkR8y176nhuDDPP+", 2),
        ("version: 0\ntopic_id: p59PN4qkR8y176nhuDDPPA ", 2),
        ("version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA", 2),
        ("version: 0\ntopic_id: 7f1c9b6e-8e1a-4b1e-9a6f-2d3c4b5a6e7f", 2),
        ("version: 0\ntopic_id: p59PN4qkR8y176nhuDDPPA\nmore", 3),
        ("version: 0\ntopic_id: p59PN4qkR8y176nhuDDPPA\n\n", 3),
    ] {
        let r = PartitionMetadata::parse(text);
        assert_eq!(r.clone().map_err(line_of), Err(line), "{text:?} -> {r:?}");
    }
    assert!(PartitionMetadata::new("nope").validate().is_err());
}

#[test]
fn topic_id_decodes_like_java() {
    // 0xa7 0x9f 0x4f 0x37 ... from "p59PN4qkR8y176nhuDDPPA".
    let b = decode_topic_id("p59PN4qkR8y176nhuDDPPA").unwrap();
    assert_eq!(&b[..4], &[0xa7, 0x9f, 0x4f, 0x37]);
    let one = decode_topic_id("AAAAAAAAAAAAAAAAAAAAAQ").unwrap();
    assert_eq!(one, [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    // Java ignores the unused low bits of the last character.
    assert_eq!(decode_topic_id("AAAAAAAAAAAAAAAAAAAAAR"), Ok(one));
}

/// Deterministic xorshift so the no-panic sweep needs no extra dependency.
fn xorshift(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

fn parse_all(text: &str) {
    let _ = OffsetCheckpoint::parse(text);
    let _ = LeaderEpochCheckpoint::parse(text);
    let _ = CleanShutdown::parse(text);
    let _ = PartitionMetadata::parse(text);
}

#[test]
fn no_panics_on_truncations_and_mutations() {
    let seeds = [
        oc(&[("t", 0, 5), ("t", 1, 7)]).serialize(),
        LeaderEpochCheckpoint { entries: vec![(0, 0), (1, 100)] }.serialize(),
        CleanShutdown { broker_epoch: Some(-12345) }.serialize(),
        r#"{"version":0,"x":[{"a":"\u00e9\n"},1.5e-3,true],"brokerEpoch":1}"#.to_owned(),
        PartitionMetadata::new("p59PN4qkR8y176nhuDDPPA").serialize(),
        "é€ 😀\r\n\u{0b}".to_owned(),
    ];
    let alphabet: &[u8] = b"0123456789 \t\r\n-+.:,{}[]\"\\eEnultrfaAQ_=xv";
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    for seed in &seeds {
        for cut in 0..=seed.len() {
            if let Some(prefix) = seed.get(..cut) {
                parse_all(prefix);
            }
        }
        let bytes = seed.as_bytes();
        for _ in 0..2_000 {
            let mut m = bytes.to_vec();
            for _ in 0..1 + xorshift(&mut rng) % 3 {
                if m.is_empty() {
                    break;
                }
                let i = (xorshift(&mut rng) % m.len() as u64) as usize;
                let c = alphabet[(xorshift(&mut rng) % alphabet.len() as u64) as usize];
                match xorshift(&mut rng) % 3 {
                    0 => m[i] = c,
                    1 => m.insert(i, c),
                    _ => {
                        m.remove(i);
                    }
                }
            }
            if let Ok(s) = std::str::from_utf8(&m) {
                parse_all(s);
            }
        }
    }
}
