//! Running fio for the disk's own limit: the same pattern as the seglog run (sequential O_DIRECT
//! writes at the block size and queue depth seglog used, optionally with fdatasync), read back
//! from fio's JSON output.

use std::path::{Path, PathBuf};
use std::process::Command;

/// One fio job's result.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct FioResult {
    pub mb_per_s: f64,
    pub iops: f64,
    pub clat_p50_us: f64,
    pub clat_p99_us: f64,
    pub clat_p999_us: f64,
    pub clat_max_us: f64,
    /// Whole latency (submission + completion) percentiles.
    pub lat_p50_us: f64,
    pub lat_p99_us: f64,
    pub lat_p999_us: f64,
    /// fdatasync latency percentiles, when the job synced.
    pub sync_p50_us: f64,
    pub sync_p99_us: f64,
    pub sync_p999_us: f64,
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
/// file in `dir`, O_DIRECT (`direct`) or through the page cache, with io_uring; a non-zero
/// `fdatasync_every` adds an fdatasync after that many writes. fio lays the file out with
/// fallocate first (its default); see [`seq_write_as`] to append past the end instead.
pub fn seq_write(
    dir: &Path,
    bs: u64,
    iodepth: u32,
    size: u64,
    direct: bool,
    fdatasync_every: u32,
) -> Result<FioResult, String> {
    let sync = if fdatasync_every > 0 { FioSync::Fdatasync(fdatasync_every) } else { FioSync::None };
    seq_write_as(dir, bs, iodepth, size, direct, sync, FioLayout::Fallocate)
}

/// Where a write job's writes land.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FioLayout {
    /// Past the end of the file: every write extends it (`--fallocate=none` on a new file: fio
    /// gives a new file no length before writing it, as strace shows).
    Extend,
    /// Inside a file given its length first (`ftruncate`, nothing reserved): each write
    /// allocates its blocks but changes no size, as in seglog's direct-mode `.log`, whose length
    /// is kept ahead of its data (`ActiveSegment::keep_length_ahead`).
    Sparse,
    /// Inside a file laid out with fallocate first (fio's default): unwritten extents, which
    /// each write converts.
    Fallocate,
    /// Over a file written in full beforehand (zeros): no allocation and no metadata change,
    /// what seglog's zero fill gives its appends.
    Written,
}

impl FioLayout {
    pub fn name(self) -> &'static str {
        match self {
            FioLayout::Extend => "extend",
            FioLayout::Sparse => "sparse",
            FioLayout::Fallocate => "fallocate",
            FioLayout::Written => "written",
        }
    }
}

impl std::str::FromStr for FioLayout {
    type Err = String;
    fn from_str(s: &str) -> Result<FioLayout, String> {
        match s {
            "extend" | "none" => Ok(FioLayout::Extend),
            "sparse" => Ok(FioLayout::Sparse),
            "fallocate" | "native" => Ok(FioLayout::Fallocate),
            "written" => Ok(FioLayout::Written),
            other => Err(format!("fio layout {other:?}: extend, sparse, fallocate or written")),
        }
    }
}

/// Writes `size` bytes of zeros to `file` and makes them durable (the [`FioLayout::Written`]
/// layout).
fn write_zeros(file: &Path, size: u64) -> Result<(), String> {
    use std::io::Write;
    let err = |e: std::io::Error| format!("laying out {}: {e}", file.display());
    let mut f = std::fs::File::create(file).map_err(err)?;
    let zeros = vec![0u8; 1 << 20];
    let mut left = size;
    while left > 0 {
        let n = left.min(zeros.len() as u64) as usize;
        f.write_all(&zeros[..n]).map_err(err)?;
        left -= n as u64;
    }
    f.sync_all().map_err(err)
}

/// Lays `file` out for `layout` before fio runs: zeros made durable ([`FioLayout::Written`]),
/// or its length alone, made durable ([`FioLayout::Sparse`]); nothing for the others (fio
/// creates the file).
fn lay_out(file: &Path, size: u64, layout: FioLayout) -> Result<(), String> {
    match layout {
        FioLayout::Written => write_zeros(file, size),
        FioLayout::Sparse => {
            let err = |e: std::io::Error| format!("laying out {}: {e}", file.display());
            let f = std::fs::File::create(file).map_err(err)?;
            f.set_len(size).map_err(err)?;
            f.sync_all().map_err(err)
        }
        FioLayout::Extend | FioLayout::Fallocate => Ok(()),
    }
}

/// How a write job makes its writes durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FioSync {
    None,
    /// An fdatasync after every n writes (`--fdatasync=n`).
    Fdatasync(u32),
    /// The file opened O_DSYNC (`--sync=dsync`): every write durable on completion, as RWF_DSYNC.
    Dsync,
}

/// [`seq_write`] with the sync method and the file's layout chosen ([`FioLayout`]): seglog's
/// appends extend the file without `preallocate`, land in fallocated space with it, and in
/// written blocks with zero fill.
pub fn seq_write_as(
    dir: &Path,
    bs: u64,
    iodepth: u32,
    size: u64,
    direct: bool,
    sync: FioSync,
    layout: FioLayout,
) -> Result<FioResult, String> {
    let file = dir.join("fio-seq-write.dat");
    let _ = std::fs::remove_file(&file);
    lay_out(&file, size, layout)?;
    let mut args = vec![
        "--name=seq-write".to_string(),
        format!("--filename={}", file.display()),
        "--rw=write".into(),
        format!("--bs={bs}"),
        format!("--size={size}"),
        format!("--iodepth={iodepth}"),
        format!("--direct={}", direct as u8),
        "--ioengine=io_uring".into(),
        // Percentiles of the whole latency too, not only of the completion.
        "--lat_percentiles=1".into(),
        "--output-format=json".into(),
    ];
    if layout != FioLayout::Fallocate {
        // Extend: a new file, nothing reserved. Written and sparse: the file exists at full size
        // already (fio keeps an existing file of the job's size as it is).
        args.push("--fallocate=none".into());
    }
    match sync {
        FioSync::None => {}
        FioSync::Fdatasync(n) => args.push(format!("--fdatasync={n}")),
        FioSync::Dsync => args.push("--sync=dsync".into()),
    }
    let r = run(&args);
    let _ = std::fs::remove_file(&file);
    r
}

/// Sequential writes into several files from one job (one thread, one io_uring), the files
/// taking turns write by write (`--file_service_type=roundrobin`), as one engine shard writes
/// its partitions' segments: the durable sweep's reference for one point of the sweep.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FilesWrite {
    /// Files (one per partition), each written from its start.
    pub files: usize,
    /// Bytes per write.
    pub bs: u64,
    /// Writes in flight over all the files (the io_uring queue depth).
    pub iodepth: u32,
    /// Bytes written into each file.
    pub file_bytes: u64,
    /// O_DIRECT, or through the page cache.
    pub direct: bool,
    pub sync: FioSync,
    pub layout: FioLayout,
}

impl FilesWrite {
    /// The job's files in `dir`: `fio-files-write.0.dat`, `fio-files-write.1.dat`, ...
    pub fn paths(&self, dir: &Path) -> Vec<PathBuf> {
        (0..self.files.max(1)).map(|i| dir.join(format!("fio-files-write.{i}.dat"))).collect()
    }

    /// fio's arguments for the job on files in `dir`.
    pub fn args(&self, dir: &Path) -> Vec<String> {
        // fio separates file names with ':'; a ':' inside a name is escaped.
        let names: Vec<String> = self.paths(dir).iter().map(|f| f.display().to_string().replace(':', "\\:")).collect();
        let mut args = vec![
            "--name=files-write".to_string(),
            format!("--filename={}", names.join(":")),
            "--rw=write".into(),
            format!("--bs={}", self.bs),
            // fio divides the size between the files.
            format!("--size={}", self.file_bytes * names.len() as u64),
            format!("--iodepth={}", self.iodepth.max(1)),
            format!("--direct={}", self.direct as u8),
            "--file_service_type=roundrobin".into(),
            "--ioengine=io_uring".into(),
            // Percentiles of the whole latency too, not only of the completion.
            "--lat_percentiles=1".into(),
            "--output-format=json".into(),
        ];
        if self.layout != FioLayout::Fallocate {
            // As in `seq_write_as`: a new file with nothing reserved, or one written in full
            // beforehand, which fio keeps as it is.
            args.push("--fallocate=none".into());
        }
        match self.sync {
            FioSync::None => {}
            FioSync::Fdatasync(n) => args.push(format!("--fdatasync={n}")),
            FioSync::Dsync => args.push("--sync=dsync".into()),
        }
        args
    }

    /// A short description, e.g. `64 files, bs=131072, qd=512, O_DIRECT + O_DSYNC, written`.
    pub fn describe(&self) -> String {
        let how = if self.direct { "O_DIRECT" } else { "buffered" };
        let sync = match self.sync {
            FioSync::None => String::new(),
            FioSync::Fdatasync(n) => format!(" + fdatasync every {n}"),
            FioSync::Dsync => " + O_DSYNC".into(),
        };
        format!("{} files, bs={}, qd={}, {how}{sync}, {}", self.files, self.bs, self.iodepth, self.layout.name())
    }

    /// Lays the files out in `dir` (zeros made durable for `written`, a length set first for
    /// `sparse`), runs the job and removes the files.
    pub fn run(&self, dir: &Path) -> Result<FioResult, String> {
        let paths = self.paths(dir);
        let remove = || paths.iter().for_each(|p| drop(std::fs::remove_file(p)));
        remove();
        let r = (|| {
            for p in &paths {
                lay_out(p, self.file_bytes, self.layout)?;
            }
            run(&self.args(dir))
        })();
        remove();
        r
    }
}

pub fn run(args: &[String]) -> Result<FioResult, String> {
    let out = Command::new("fio").args(args).output().map_err(|e| format!("fio: {e}"))?;
    if !out.status.success() {
        return Err(format!("fio failed: {}", String::from_utf8_lossy(&out.stderr)));
    }
    parse(&out.stdout)
}

/// Reads of an existing (or, the first time, laid out by fio) file `file` of `size` bytes:
/// `rw` is "read" (sequential) or "randread"; O_DIRECT, io_uring, at most `runtime_s` seconds.
/// The file is kept, so interleaved repetitions reuse it; the caller removes it.
pub fn read_file(file: &Path, rw: &str, bs: u64, iodepth: u32, size: u64, runtime_s: u32) -> Result<FioResult, String> {
    let mut args = vec![
        format!("--name={rw}"),
        format!("--filename={}", file.display()),
        format!("--rw={rw}"),
        format!("--bs={bs}"),
        format!("--size={size}"),
        format!("--iodepth={iodepth}"),
        "--direct=1".into(),
        "--ioengine=io_uring".into(),
        // Percentiles of the whole latency too, not only of the completion.
        "--lat_percentiles=1".into(),
        "--output-format=json".into(),
    ];
    if runtime_s > 0 {
        args.push(format!("--runtime={runtime_s}"));
    }
    run(&args)
}

/// Sequential reads of existing files, one after the other (`--file_service_type=sequential`),
/// in `bs`-byte blocks at queue depth 1 with io_uring: O_DIRECT (`direct`) or through the page
/// cache, which fio drops for the files first (`--invalidate=1`). The recovery workload reads the
/// very `.log` files seglog just revalidated. fio reads whole blocks only: the last partial block
/// of each file (under `bs`) is left out, which does not change the rate.
pub fn seq_read_files(files: &[std::path::PathBuf], bs: u64, direct: bool) -> Result<FioResult, String> {
    if files.is_empty() {
        return Err("no files to read".into());
    }
    // fio separates file names with ':'; a ':' inside a name is escaped.
    let names: Vec<String> = files.iter().map(|f| f.display().to_string().replace(':', "\\:")).collect();
    let args = vec![
        "--name=seq-read-files".to_string(),
        format!("--filename={}", names.join(":")),
        "--rw=read".into(),
        format!("--bs={bs}"),
        "--iodepth=1".into(),
        format!("--direct={}", direct as u8),
        "--invalidate=1".into(),
        "--file_service_type=sequential".into(),
        "--ioengine=io_uring".into(),
        // Percentiles of the whole latency too, not only of the completion.
        "--lat_percentiles=1".into(),
        "--output-format=json".into(),
    ];
    run(&args)
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
        clat_p999_us: pct(&side["clat_ns"], "99.900000"),
        clat_max_us: side["clat_ns"]["max"].as_f64().unwrap_or(0.0) / 1000.0,
        lat_p50_us: pct(&side["lat_ns"], "50.000000"),
        lat_p99_us: pct(&side["lat_ns"], "99.000000"),
        lat_p999_us: pct(&side["lat_ns"], "99.900000"),
        sync_p50_us: pct(&job["sync"]["lat_ns"], "50.000000"),
        sync_p99_us: pct(&job["sync"]["lat_ns"], "99.000000"),
        sync_p999_us: pct(&job["sync"]["lat_ns"], "99.900000"),
    })
}

/// Flushes the filesystem holding `dir` (`sync -f`, syncfs(2)): its dirty data, its journal and
/// the discards of files deleted before (on a filesystem mounted with `discard`), so that a
/// latency run started next does not wait for them. Run before each side of a latency pair.
pub fn settle(dir: &Path) -> Result<(), String> {
    match std::process::Command::new("sync").arg("-f").arg(dir).status() {
        Ok(s) if s.success() => Ok(()),
        Ok(s) => Err(format!("sync -f {}: {s}", dir.display())),
        Err(e) => Err(format!("sync -f {}: {e}", dir.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sweep's job: every file named, the size split between them, the queue depth over all
    /// of them, and the sync and layout options of [`seq_write_as`].
    #[test]
    fn a_files_write_names_every_file_and_its_options() {
        let job = FilesWrite {
            files: 3,
            bs: 65_536,
            iodepth: 24,
            file_bytes: 1 << 20,
            direct: true,
            sync: FioSync::Dsync,
            layout: FioLayout::Written,
        };
        let args = job.args(Path::new("/d"));
        for want in [
            "--filename=/d/fio-files-write.0.dat:/d/fio-files-write.1.dat:/d/fio-files-write.2.dat",
            "--bs=65536",
            "--size=3145728",
            "--iodepth=24",
            "--direct=1",
            "--sync=dsync",
            "--fallocate=none",
            "--file_service_type=roundrobin",
        ] {
            assert!(args.iter().any(|a| a == want), "no {want} in {args:?}");
        }
        assert_eq!(job.describe(), "3 files, bs=65536, qd=24, O_DIRECT + O_DSYNC, written");
        let buffered = FilesWrite { direct: false, sync: FioSync::Fdatasync(1), layout: FioLayout::Fallocate, ..job };
        let args = buffered.args(Path::new("/d"));
        assert!(args.iter().any(|a| a == "--fdatasync=1") && args.iter().any(|a| a == "--direct=0"), "{args:?}");
        assert!(!args.iter().any(|a| a.starts_with("--fallocate") || a.starts_with("--sync")), "{args:?}");
    }

    #[test]
    fn parses_write_and_sync_percentiles() {
        let json = br#"note: a line fio prints first
{"jobs": [{"write": {"io_bytes": 8388608, "bw_bytes": 100000000, "iops": 6100.5,
  "clat_ns": {"max": 900000, "percentile": {"50.000000": 20000, "99.000000": 80000, "99.900000": 400000}},
  "lat_ns": {"percentile": {"50.000000": 25000, "99.000000": 90000, "99.900000": 410000}}},
  "read": {"io_bytes": 0},
  "sync": {"lat_ns": {"percentile": {"50.000000": 71168, "99.000000": 3948544, "99.900000": 6979584}}}}]}"#;
        let r = parse(json).unwrap();
        assert_eq!(r.mb_per_s, 100.0);
        assert_eq!((r.clat_p50_us, r.clat_p99_us, r.clat_p999_us, r.clat_max_us), (20.0, 80.0, 400.0, 900.0));
        assert_eq!((r.sync_p50_us, r.sync_p99_us), (71.168, 3948.544));
        assert_eq!((r.lat_p50_us, r.lat_p99_us, r.lat_p999_us), (25.0, 90.0, 410.0));
    }
}
