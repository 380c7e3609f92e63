//! Running fio for the disk's own limit: the same pattern as the seglog run (sequential O_DIRECT
//! writes at the block size and queue depth seglog used, optionally with fdatasync), read back
//! from fio's JSON output.

use std::path::Path;
use std::process::Command;

/// One fio job's result.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct FioResult {
    pub mb_per_s: f64,
    pub iops: f64,
    pub clat_p50_us: f64,
    pub clat_p99_us: f64,
    /// fdatasync latency percentiles, when the job synced.
    pub sync_p50_us: f64,
    pub sync_p99_us: f64,
}

/// Makes sure fio is there, installing Debian's package when running as root.
pub fn ensure_fio() -> Result<(), String> {
    if Command::new("fio").arg("--version").output().is_ok_and(|o| o.status.success()) {
        return Ok(());
    }
    let root = Command::new("id").arg("-u").output().ok().map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
    if root != Some(true) {
        return Err("fio is not installed and we are not root: apt-get install fio".into());
    }
    eprintln!("installing fio (apt-get install fio)...");
    let ok = Command::new("sh")
        .args(["-c", "DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fio >/dev/null 2>&1 || (apt-get update -qq >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fio >/dev/null 2>&1)"])
        .status()
        .is_ok_and(|s| s.success());
    if ok {
        Ok(())
    } else {
        Err("apt-get install fio failed".into())
    }
}

/// Sequential writes of `size` bytes in `bs`-byte blocks at queue depth `iodepth` into a new
/// file in `dir`, O_DIRECT (`direct`) or through the page cache, with io_uring; `fdatasync_every`
/// > 0 adds an fdatasync after that many writes.
pub fn seq_write(
    dir: &Path,
    bs: u64,
    iodepth: u32,
    size: u64,
    direct: bool,
    fdatasync_every: u32,
) -> Result<FioResult, String> {
    let file = dir.join("fio-seq-write.dat");
    let _ = std::fs::remove_file(&file);
    let mut args = vec![
        "--name=seq-write".to_string(),
        format!("--filename={}", file.display()),
        "--rw=write".into(),
        format!("--bs={bs}"),
        format!("--size={size}"),
        format!("--iodepth={iodepth}"),
        format!("--direct={}", direct as u8),
        "--ioengine=io_uring".into(),
        "--output-format=json".into(),
    ];
    if fdatasync_every > 0 {
        args.push(format!("--fdatasync={fdatasync_every}"));
    }
    let r = run(&args);
    let _ = std::fs::remove_file(&file);
    r
}

/// Sequential or random reads of an existing layout: `rw` is "read" or "randread".
pub fn read(dir: &Path, rw: &str, bs: u64, iodepth: u32, size: u64) -> Result<FioResult, String> {
    let file = dir.join("fio-read.dat");
    let args = vec![
        format!("--name={rw}"),
        format!("--filename={}", file.display()),
        format!("--rw={rw}"),
        format!("--bs={bs}"),
        format!("--size={size}"),
        format!("--iodepth={iodepth}"),
        "--direct=1".into(),
        "--ioengine=io_uring".into(),
        "--output-format=json".into(),
    ];
    let r = run(&args);
    let _ = std::fs::remove_file(&file);
    r
}

fn run(args: &[String]) -> Result<FioResult, String> {
    let out = Command::new("fio").args(args).output().map_err(|e| format!("fio: {e}"))?;
    if !out.status.success() {
        return Err(format!("fio failed: {}", String::from_utf8_lossy(&out.stderr)));
    }
    parse(&out.stdout)
}

/// Reads the first job's figures from fio's JSON output.
pub fn parse(json: &[u8]) -> Result<FioResult, String> {
    // fio may print notes before the JSON document.
    let start = json.iter().position(|&b| b == b'{').ok_or("no JSON in fio output")?;
    let v: serde_json::Value = serde_json::from_slice(&json[start..]).map_err(|e| format!("fio JSON: {e}"))?;
    let job = &v["jobs"][0];
    let side = if job["write"]["io_bytes"].as_u64().unwrap_or(0) > 0 { &job["write"] } else { &job["read"] };
    let pct = |node: &serde_json::Value, p: &str| node["percentile"][p].as_f64().unwrap_or(0.0) / 1000.0;
    Ok(FioResult {
        mb_per_s: side["bw_bytes"].as_f64().unwrap_or(0.0) / 1e6,
        iops: side["iops"].as_f64().unwrap_or(0.0),
        clat_p50_us: pct(&side["clat_ns"], "50.000000"),
        clat_p99_us: pct(&side["clat_ns"], "99.000000"),
        sync_p50_us: pct(&job["sync"]["lat_ns"], "50.000000"),
        sync_p99_us: pct(&job["sync"]["lat_ns"], "99.000000"),
    })
}
