//! Real filesystems on loop devices, for tests that need a sector size other than the root
//! disk's (O_DIRECT alignment) or a filesystem to shut down (power cuts). Root only: without
//! root, or without losetup/mkfs, [`LoopFs::new`] returns the reason and the test skips, saying
//! so. Everything is unmounted and detached on drop, whatever happened.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Which filesystem to make.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FsKind {
    Ext4,
    Xfs,
}

/// A mounted filesystem on a loop device over an image file.
#[derive(Debug)]
pub struct LoopFs {
    pub kind: FsKind,
    pub device: String,
    pub mountpoint: PathBuf,
    image_dir: Option<tempfile::TempDir>,
    mounted: bool,
}

fn tool(name: &str) -> Option<PathBuf> {
    ["/usr/sbin", "/sbin", "/usr/bin", "/bin"].iter().map(|d| Path::new(d).join(name)).find(|p| p.exists())
}

fn run(cmd: &str, args: &[&str]) -> Result<String, String> {
    let path = tool(cmd).ok_or_else(|| format!("{cmd} is not installed"))?;
    let out = Command::new(&path).args(args).output().map_err(|e| format!("{cmd}: {e}"))?;
    if !out.status.success() {
        return Err(format!("{cmd} {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// True when running as root.
pub fn is_root() -> bool {
    Command::new("id").arg("-u").output().is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

impl LoopFs {
    /// Makes a `size_mib` image (sparse; XFS needs at least 300 MiB) under /var/tmp, attaches it with `sector_size`-byte sectors, makes
    /// the filesystem and mounts it. `Err(reason)` when this machine cannot (not root, no tools).
    pub fn new(kind: FsKind, sector_size: u32, size_mib: u64) -> Result<LoopFs, String> {
        if !is_root() {
            return Err("not root".into());
        }
        if !Path::new("/dev/loop-control").exists() {
            return Err("no /dev/loop-control".into());
        }
        let mkfs = match kind {
            FsKind::Ext4 => "mkfs.ext4",
            FsKind::Xfs => "mkfs.xfs",
        };
        if tool(mkfs).is_none() {
            return Err(format!("{mkfs} is not installed"));
        }
        let image_dir =
            tempfile::Builder::new().prefix("seglog-loop-").tempdir_in("/var/tmp").map_err(|e| e.to_string())?;
        let image = image_dir.path().join("disk.img");
        std::fs::File::create(&image).and_then(|f| f.set_len(size_mib << 20)).map_err(|e| e.to_string())?;
        let device =
            run("losetup", &["--sector-size", &sector_size.to_string(), "-f", "--show", image.to_str().unwrap_or("")])?;
        let mountpoint = image_dir.path().join("mnt");
        let mut fs = LoopFs {
            kind,
            device: device.clone(),
            mountpoint: mountpoint.clone(),
            image_dir: Some(image_dir),
            mounted: false,
        };
        // From here on a failure is a real failure, not a reason to skip (the guard cleans up).
        let made = match kind {
            FsKind::Ext4 => run(mkfs, &["-q", "-F", "-b", "4096", &device]),
            FsKind::Xfs => run(mkfs, &["-q", "-f", "-s", &format!("size={sector_size}"), &device]),
        };
        made.unwrap_or_else(|e| panic!("{e}"));
        std::fs::create_dir(&mountpoint).unwrap_or_else(|e| panic!("mkdir {}: {e}", mountpoint.display()));
        run("mount", &[&device, mountpoint.to_str().unwrap_or("")]).unwrap_or_else(|e| panic!("{e}"));
        fs.mounted = true;
        Ok(fs)
    }

    pub fn path(&self) -> &Path {
        &self.mountpoint
    }

    /// Unmounts and mounts again (after a shutdown, this replays the journal), waiting up to
    /// three minutes for the filesystem to stop being busy.
    pub fn remount(&mut self) -> Result<(), String> {
        self.remount_within(std::time::Duration::from_secs(180))
    }

    /// [`LoopFs::remount`], giving up when the filesystem stays busy for `patience`; the error
    /// then says what holds it.
    pub fn remount_within(&mut self, patience: std::time::Duration) -> Result<(), String> {
        let m = self.mountpoint.to_str().unwrap_or("").to_string();
        // A killed process's io_uring is torn down asynchronously: its files can keep the
        // filesystem busy after the process is reaped, with nothing left in /proc holding it.
        // Usually for milliseconds; after a shutdown, rarely (about 1 remount in 200) for about
        // 30 seconds.
        let started = std::time::Instant::now();
        let mut reported = false;
        while let Err(e) = run("umount", &[&m]) {
            if !e.contains("busy") || started.elapsed() >= patience {
                return Err(format!(
                    "{e}; open on it: {:?}; tasks waiting in the kernel: {:#?}",
                    holders(&self.mountpoint),
                    kernel_waiters()
                ));
            }
            if !reported && started.elapsed() >= std::time::Duration::from_secs(5) {
                reported = true;
                println!(
                    "note: {m} busy for 5 s; open on it: {:?}; tasks waiting in the kernel: {:#?}",
                    holders(&self.mountpoint),
                    kernel_waiters()
                );
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        if started.elapsed() >= std::time::Duration::from_secs(2) {
            println!(
                "note: {} stayed busy for {:.1} s after its last user was gone",
                m,
                started.elapsed().as_secs_f64()
            );
        }
        self.mounted = false;
        run("mount", &[&self.device, &m])?;
        self.mounted = true;
        Ok(())
    }

    /// Cuts the power, as far as a filesystem can tell: `ioctl(FS_IOC_SHUTDOWN)` with `flags`
    /// (`seglog::io::shutdown::FS_GOING_DOWN_NOLOGFLUSH` drops the journal's unwritten log).
    /// Every later write and fsync on it fails; [`LoopFs::remount`] (after every process has
    /// closed its files) brings back what had reached the device.
    pub fn shutdown(&self, flags: u32) -> Result<(), String> {
        seglog::io::shutdown::fs_shutdown(&self.mountpoint, flags).map_err(|e| e.to_string())
    }

    /// Removes everything on the filesystem but `lost+found`, and syncs it: a fresh start for
    /// the next iteration without a new mkfs.
    pub fn clear(&self) -> Result<(), String> {
        let entries = std::fs::read_dir(&self.mountpoint).map_err(|e| format!("read_dir: {e}"))?;
        for ent in entries {
            let ent = ent.map_err(|e| format!("read_dir: {e}"))?;
            if ent.file_name() == "lost+found" {
                continue;
            }
            let p = ent.path();
            let r = if p.is_dir() { std::fs::remove_dir_all(&p) } else { std::fs::remove_file(&p) };
            r.map_err(|e| format!("remove {}: {e}", p.display()))?;
        }
        run("sync", &["-f", self.mountpoint.to_str().unwrap_or("")]).map(|_| ())
    }
}

impl Drop for LoopFs {
    fn drop(&mut self) {
        if self.mounted {
            let m = self.mountpoint.to_str().unwrap_or("").to_string();
            if run("umount", &[&m]).is_err() {
                let _ = run("umount", &["-l", &m]);
            }
        }
        let _ = run("losetup", &["-d", &self.device]);
        drop(self.image_dir.take());
    }
}

/// Processes (`pid comm: path`) with a file, working directory or mapping under `dir`: why an
/// unmount is refused.
pub fn holders(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let Ok(procs) = std::fs::read_dir("/proc") else { return out };
    for p in procs.flatten() {
        let pid = p.file_name().to_string_lossy().into_owned();
        if !pid.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let comm = std::fs::read_to_string(p.path().join("comm")).unwrap_or_default().trim().to_string();
        let mut links: Vec<PathBuf> =
            ["cwd", "root", "exe"].iter().filter_map(|l| std::fs::read_link(p.path().join(l)).ok()).collect();
        if let Ok(fds) = std::fs::read_dir(p.path().join("fd")) {
            links.extend(fds.flatten().filter_map(|f| std::fs::read_link(f.path()).ok()));
        }
        let maps = std::fs::read_to_string(p.path().join("maps")).unwrap_or_default();
        links.extend(maps.lines().filter_map(|l| l.split_whitespace().nth(5)).map(PathBuf::from));
        for l in links {
            if l.starts_with(dir) {
                out.push(format!("{pid} {comm}: {}", l.display()));
            }
        }
    }
    out
}

/// Threads in uninterruptible sleep or inside io_uring, with their kernel stacks: what keeps a
/// filesystem busy when no process has it open.
pub fn kernel_waiters() -> Vec<String> {
    let mut out = Vec::new();
    let Ok(procs) = std::fs::read_dir("/proc") else { return out };
    for p in procs.flatten() {
        if !p.file_name().to_string_lossy().bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        for t in std::fs::read_dir(p.path().join("task")).into_iter().flatten().flatten() {
            let stat = std::fs::read_to_string(t.path().join("stat")).unwrap_or_default();
            let state = stat.rsplit(") ").next().and_then(|r| r.chars().next()).unwrap_or('?');
            let stack = std::fs::read_to_string(t.path().join("stack")).unwrap_or_default();
            if state == 'D' || stack.contains("io_uring") || stack.contains("io_ring") || stack.contains("io_wq") {
                let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
                let cmd = std::fs::read(p.path().join("cmdline")).unwrap_or_default();
                let cmd: String = String::from_utf8_lossy(&cmd).replace('\0', " ").chars().take(160).collect();
                let frames: Vec<&str> = stack.lines().filter_map(|l| l.split_whitespace().nth(1)).take(12).collect();
                out.push(format!(
                    "pid {} ({}) thread {} {} {state}: {}",
                    p.file_name().to_string_lossy(),
                    cmd.trim(),
                    t.file_name().to_string_lossy(),
                    comm.trim(),
                    frames.join(" < ")
                ));
            }
        }
    }
    out
}
