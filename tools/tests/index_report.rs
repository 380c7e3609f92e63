//! `seglog index-report`: the seed's maxima replayed through the engine on a directory seglog
//! wrote, the what-if simulation and the plateau, the inferred interval, the plot, and Kafka's files.

mod common;

use common::*;

fn report(dir: &std::path::Path, extra: &[&str]) -> serde_json::Value {
    let mut args = vec!["index-report".into(), dir.as_os_str().to_owned(), "--json".into()];
    args.extend(extra.iter().map(std::ffi::OsString::from));
    let r = seglog(&args);
    assert_eq!(r.code, 0, "{}", r.stderr);
    r.json()["partitions"][0].clone()
}

#[test]
fn replayed_maxima_match_the_seed() {
    for (interval, max, hops) in [(1, 16_350, 1), (4096, 16_350, 1), (20_000, 32_700, 2), (1_048_576, 49_050, 3)] {
        let p = report(&demo_dir().join(format!("interval-{interval}-0")), &[]);
        assert_eq!(p["replay"]["lookups"], 5000, "every offset is looked up");
        assert_eq!(p["replay"]["bytes_scanned"]["max"], max, "interval {interval}");
        assert_eq!(p["replay"]["header_hops"]["max"], hops, "interval {interval}");
        assert!(p["replay"]["bytes_scanned"]["max"].as_u64() <= p["existing"]["bound"].as_u64());
        assert_eq!(p["batch_sizes"]["max"], 16_350);
        assert!(p["notes"].as_array().unwrap().is_empty(), "{}", p["notes"]);
    }
}

#[test]
fn what_if_and_the_plateau() {
    let dir = demo_dir().join("interval-4096-0");
    let p = report(&dir, &["--interval", "4096", "--interval", "20000", "--interval", "1048576", "--interval", "1"]);
    let w = p["what_if"].as_array().unwrap();
    let maxima: Vec<u64> = w.iter().map(|w| w["max_bytes_scanned"].as_u64().unwrap()).collect();
    assert_eq!(maxima, [16_350, 32_700, 49_050, 16_350]);
    let entries: Vec<u64> = w.iter().map(|w| w["offset_entries"].as_u64().unwrap()).collect();
    assert_eq!(entries, [48, 16, 0, 48]);
    let bounds: Vec<u64> = w.iter().map(|w| w["bound"].as_u64().unwrap()).collect();
    assert_eq!(bounds, [20_446, 36_350, 65_400, 16_351]);
    assert_eq!(w[0]["on_plateau"], true);
    assert_eq!(w[3]["on_plateau"], true);
    assert_eq!(w[1]["on_plateau"], false);
    assert_eq!(w[0]["same_as_existing"], true);
    assert_eq!(w[3]["same_as_existing"], true, "1 and 4096 write the same index");
    assert_eq!(p["existing"]["on_plateau"], true);
    assert_eq!(p["plateau_below"], 16_350);

    let r = seglog([
        "index-report".as_ref(),
        dir.as_os_str(),
        "--interval".as_ref(),
        "1".as_ref(),
        "--interval".as_ref(),
        "4096".as_ref(),
    ]);
    assert_eq!(r.code, 0);
    let rows = lines_with(&r.stdout, "on the plateau: changes nothing");
    assert_eq!(rows.len(), 2, "{}", r.stdout);
    assert!(r.stdout.contains("bytes scanned: min 0, median 16350, p99 16350, max 16350"), "{}", r.stdout);
    assert!(r.stdout.contains("header hops:   min 0, median 1, p99 1, max 1"));
    assert!(r.stdout.contains("batch sizes (64 batches): min 4799, median 16350, p99 16350, max 16350"));
}

#[test]
fn the_interval_in_use_is_inferred() {
    let p = report(&demo_dir().join("interval-20000-0"), &[]);
    assert_eq!(p["existing"]["inferred"], serde_json::json!({"kind": "range", "lo": 16_350, "hi": 32_700}));
    let p = report(&demo_dir().join("interval-1048576-0"), &[]);
    assert_eq!(p["existing"]["inferred"]["hi"], serde_json::Value::Null);
    let r = seglog(["index-report".as_ref(), demo_dir().join("interval-20000-0").as_os_str()]);
    assert!(r.stdout.contains("consistent with index.interval.bytes in [16350, 32700)"), "{}", r.stdout);

    // Kafka's ts-common segments: written with the default 4096.
    let p = report(&ts_common(), &["--interval", "4096"]);
    let inf = &p["existing"]["inferred"];
    assert!(inf["lo"].as_u64().unwrap() <= 4096 && 4096 < inf["hi"].as_u64().unwrap(), "{inf}");
    assert_eq!(p["what_if"][0]["same_as_existing"], true);
    assert_eq!(p["replay"]["lookups"], 30_565);
    assert!(p["replay"]["bytes_scanned"]["max"].as_u64() <= p["existing"]["bound"].as_u64());
}

#[test]
fn plots_svg_only() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = demo_dir().join("interval-20000-0");
    let out = tmp.path().join("scan.svg");
    let r = seglog(["index-report".as_ref(), dir.as_os_str(), "--plot".as_ref(), out.as_os_str()]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let s = std::fs::read_to_string(&out).unwrap();
    let doc = roxmltree::Document::parse(&s).unwrap_or_else(|e| panic!("not well-formed: {e}\n{s}"));
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    let texts: Vec<&str> =
        doc.descendants().filter(|n| n.has_tag_name("text")).filter_map(|n| n.text().map(str::trim)).collect();
    for want in ["offset", "bytes scanned (phase 2)", "bound 49049"] {
        assert!(texts.contains(&want), "no {want:?} in {texts:?}");
    }
    assert!(texts.iter().any(|t| t.contains("bytes scanned per offset (5000 lookups, max ")), "{texts:?}");
    // A stroke per column of offsets (5000 offsets over more columns than that), the guides, the bound.
    let strokes = doc.descendants().filter(|n| n.has_tag_name("polyline")).count();
    assert!(strokes > 500, "{strokes}");
    // PNG is not drawn: said before any work, and no file is left.
    let png = tmp.path().join("scan.png");
    let r = seglog(["index-report".as_ref(), dir.as_os_str(), "--plot".as_ref(), png.as_os_str()]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("plots are written as SVG only"), "{}", r.stderr);
    assert!(!png.exists());
    let r = seglog([
        "index-report".as_ref(),
        demo_dir().as_os_str(),
        "--plot".as_ref(),
        tmp.path().join("x.svg").as_os_str(),
    ]);
    assert_eq!(r.code, 2, "a plot needs a single partition");
    assert!(r.stderr.contains("--plot needs a single partition directory"), "{}", r.stderr);
}
