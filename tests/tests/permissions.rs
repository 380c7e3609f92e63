//! Files and directories the engine creates are owner-only by default, and follow
//! `EngineConfig::file_mode` / `dir_mode` when set (before the umask), in every I/O mode.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use seglog::format::builder::BatchBuilder;
use seglog::{Engine, EngineConfig, IoMode, TopicPartition};

fn batch(i: i64) -> Vec<u8> {
    let mut b = BatchBuilder::new();
    b.push(1_700_000_000_000 + i, None, Some(format!("v{i}").as_bytes()), &[]);
    b.build().unwrap()
}

/// (path, mode bits, is a directory) of everything under `dir`, `dir` included.
fn walk(dir: &Path, out: &mut Vec<(std::path::PathBuf, u32, bool)>) {
    let md = std::fs::metadata(dir).unwrap();
    out.push((dir.to_path_buf(), md.permissions().mode() & 0o777, true));
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            walk(&p, out);
        } else {
            out.push((p.clone(), std::fs::metadata(&p).unwrap().permissions().mode() & 0o777, false));
        }
    }
}

fn run(mode: IoMode, modes: Option<(u32, u32)>) -> Vec<(std::path::PathBuf, u32, bool)> {
    let root = tempfile::tempdir_in("/var/tmp").unwrap();
    // The engine creates the data directory itself.
    let data = root.path().join("data");
    let mut cfg = EngineConfig::new(&data);
    cfg.io_mode = mode;
    cfg.shards = Some(1);
    cfg.log_config.segment_bytes = 4096; // several segments, so rolls create files too
    if let Some((f, d)) = modes {
        cfg.file_mode = f;
        cfg.dir_mode = d;
    }
    let engine = Engine::open(cfg).unwrap();
    // Each mode's backend creates its files its own way: a fallback to sync mode would test
    // another backend than the one named.
    assert_eq!(engine.io_mode(), mode, "the engine runs in the mode asked for");
    let tp = TopicPartition::new("perm", 0);
    engine.open_partition(&tp, None).wait().unwrap();
    for i in 0..200 {
        engine.append(&tp, batch(i), 0).wait().unwrap();
    }
    engine.shutdown().unwrap();
    let mut out = Vec::new();
    walk(&data, &mut out);
    out
}

#[test]
fn owner_only_by_default_and_configurable() {
    // The process umask applies on top of the modes; std has no accessor for it, /proc does.
    let umask = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("Umask:")).map(|l| l[6..].trim().to_string()))
        .and_then(|v| u32::from_str_radix(&v, 8).ok())
        .unwrap_or(0o022);
    for mode in [IoMode::Direct, IoMode::Buffered, IoMode::Sync] {
        for (modes, (want_file, want_dir)) in [(None, (0o600, 0o700)), (Some((0o640, 0o750)), (0o640, 0o750))] {
            let entries = run(mode, modes);
            let files = entries.iter().filter(|e| !e.2).count();
            assert!(files > 10, "{mode}: segments, indexes and checkpoints were written ({files} files)");
            for (p, bits, is_dir) in &entries {
                let want = if *is_dir { want_dir } else { want_file } & !umask;
                assert_eq!(*bits, want, "{mode} {modes:?}: {} has mode {bits:o}, want {want:o}", p.display());
            }
        }
    }
}
