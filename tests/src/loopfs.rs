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

    /// Unmounts and mounts again (after a shutdown, this replays the journal).
    pub fn remount(&mut self) -> Result<(), String> {
        let m = self.mountpoint.to_str().unwrap_or("").to_string();
        run("umount", &[&m])?;
        self.mounted = false;
        run("mount", &[&self.device, &m])?;
        self.mounted = true;
        Ok(())
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
