//! Probes: whether io_uring may be used here, the O_DIRECT alignment of a file and its filesystem's block.
#![allow(unsafe_code)]

use std::ffi::{CStr, CString};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::io::RawFd;
use std::path::Path;

use io_uring::{opcode, IoUring};
use nix::errno::Errno;

use super::DirectAlignment;

/// The alignment assumed when nothing better is known.
pub(crate) const FALLBACK_ALIGNMENT: usize = 4096;

/// Checks that io_uring can be used by this process: `/proc/sys/kernel/io_uring_disabled` does
/// not forbid it, io_uring_setup succeeds, and the kernel has every opcode the engine needs.
/// `Err` carries a one-line reason.
pub(crate) fn uring_available() -> Result<(), String> {
    let sysctl = std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled").ok();
    let sysctl = sysctl.as_deref().map(str::trim);
    if sysctl == Some("2") {
        return Err("io_uring is disabled by the kernel.io_uring_disabled sysctl (2)".to_string());
    }
    let ring = IoUring::new(8).map_err(|e| {
        let why = match e.raw_os_error().map(Errno::from_raw) {
            Some(Errno::EPERM) if sysctl == Some("1") => {
                "not permitted (EPERM): kernel.io_uring_disabled=1 allows it only to kernel.io_uring_group or \
                 CAP_SYS_ADMIN"
            }
            Some(Errno::EPERM) => "not permitted (EPERM), e.g. by a seccomp filter or a container runtime",
            Some(Errno::EACCES) => "access denied (EACCES), e.g. by an LSM policy",
            Some(Errno::ENOSYS) => "the kernel has no io_uring (ENOSYS)",
            Some(Errno::ENOMEM) => "no memory for the ring (ENOMEM; RLIMIT_MEMLOCK on old kernels)",
            _ => "failed",
        };
        format!("io_uring_setup {why}: {e}")
    })?;
    let mut probe = io_uring::Probe::new();
    ring.submitter()
        .register_probe(&mut probe)
        .map_err(|e| format!("io_uring opcode probe failed (kernel older than 5.6?): {e}"))?;
    let needed = [
        ("READ", opcode::Read::CODE),
        ("WRITE", opcode::Write::CODE),
        ("FSYNC", opcode::Fsync::CODE),
        ("FALLOCATE", opcode::Fallocate::CODE),
        ("LINK_TIMEOUT", opcode::LinkTimeout::CODE),
        ("POLL_ADD", opcode::PollAdd::CODE),
    ];
    let missing: Vec<&str> = needed.iter().filter(|(_, c)| !probe.is_supported(*c)).map(|(n, _)| *n).collect();
    if !missing.is_empty() {
        return Err(format!("the kernel's io_uring lacks {}", missing.join(", ")));
    }
    Ok(())
}

/// O_DIRECT alignment of the file (or directory) at `path`; see `dio_alignment_fd`.
pub fn dio_alignment(path: &Path) -> DirectAlignment {
    match CString::new(path.as_os_str().as_bytes()) {
        Ok(c) => statx_alignment(libc::AT_FDCWD, &c, 0),
        Err(_) => DirectAlignment::uniform(FALLBACK_ALIGNMENT),
    }
}

/// O_DIRECT alignment of an open file: statx's STATX_DIOALIGN (Linux 6.1+, for the filesystems
/// that report it), else the logical block size of the filesystem's block device (sysfs
/// `/sys/dev/block/<major>:<minor>/queue/logical_block_size`, for both memory and offset), else
/// [`FALLBACK_ALIGNMENT`].
pub(crate) fn dio_alignment_fd(fd: RawFd) -> DirectAlignment {
    statx_alignment(fd, c"", libc::AT_EMPTY_PATH)
}

fn valid(a: u32) -> Option<usize> {
    (a >= 1 && a.is_power_of_two()).then_some(a as usize)
}

/// Raw libc: nix has no statx (its `fstatat` has no STATX_DIOALIGN fields).
fn statx_alignment(dirfd: RawFd, path: &CStr, flags: libc::c_int) -> DirectAlignment {
    let fs_block = fs_block_size(dirfd, path).unwrap_or(FALLBACK_ALIGNMENT);
    // SAFETY: statx is a plain C struct of integers, for which all-zero bytes are a valid value.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: `path` is a NUL-terminated string and `stx` a writable statx, both alive for the
    // duration of the call.
    let rc = unsafe {
        libc::statx(dirfd, path.as_ptr(), flags | libc::AT_STATX_SYNC_AS_STAT, libc::STATX_DIOALIGN, &mut stx)
    };
    if rc == 0 {
        if stx.stx_mask & libc::STATX_DIOALIGN != 0 {
            if let (Some(mem), Some(offset)) = (valid(stx.stx_dio_mem_align), valid(stx.stx_dio_offset_align)) {
                return DirectAlignment { mem, offset, fs_block };
            }
        }
        if let Some(lbs) = logical_block_size(stx.stx_dev_major, stx.stx_dev_minor) {
            return DirectAlignment { mem: lbs, offset: lbs, fs_block };
        }
    }
    DirectAlignment { fs_block, ..DirectAlignment::uniform(FALLBACK_ALIGNMENT) }
}

/// The filesystem's block size: statfs's `f_bsize` (ext4's, XFS's and btrfs's block, through
/// overlayfs the lower filesystem's; not statx's `stx_blksize`, which on XFS is the page size or,
/// with `largeio`, the stripe width). The open file `dirfd` when `path` is empty, else `path`.
fn fs_block_size(dirfd: RawFd, path: &CStr) -> Option<usize> {
    // SAFETY: statfs is a plain C struct of integers, for which all-zero bytes are a valid value.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    let rc = if path.is_empty() {
        // SAFETY: `st` is a writable statfs alive for the call; a bad descriptor is an error.
        unsafe { libc::fstatfs(dirfd, &mut st) }
    } else {
        // SAFETY: `path` is NUL-terminated and `st` a writable statfs, both alive for the call.
        unsafe { libc::statfs(path.as_ptr(), &mut st) }
    };
    if rc != 0 {
        return None;
    }
    u32::try_from(st.f_bsize).ok().and_then(valid)
}

/// A block device's logical block size from sysfs (a partition's is its disk's).
pub(crate) fn logical_block_size(major: u32, minor: u32) -> Option<usize> {
    if major == 0 {
        return None; // anonymous device (tmpfs, overlayfs, btrfs subvolumes...)
    }
    let base = format!("/sys/dev/block/{major}:{minor}");
    for p in [format!("{base}/queue/logical_block_size"), format!("{base}/../queue/logical_block_size")] {
        if let Some(v) = std::fs::read_to_string(&p).ok().and_then(|s| s.trim().parse::<u32>().ok()) {
            if let Some(v) = valid(v) {
                return Some(v.max(512));
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::uring::tests::test_dir;
    use crate::io::uring::UringStorage;
    use crate::io::{AlignedBuf, IoMode, OpenMode, Storage};
    use std::os::unix::fs::OpenOptionsExt;
    use std::os::unix::io::AsRawFd;
    use std::path::PathBuf;
    use std::process::Command;

    #[test]
    fn io_uring_is_available_here() {
        // The machines this project runs on allow io_uring (FACTS.md); a refusal is a finding.
        if let Err(why) = uring_available() {
            panic!("io_uring refused on this machine: {why}");
        }
    }

    #[test]
    fn dio_alignment_of_the_test_dir_and_a_file() {
        let dir = test_dir();
        let a = dio_alignment(dir.path());
        assert!(a.offset >= 512 && a.offset.is_power_of_two(), "{a:?}");
        assert!(a.mem >= 1 && a.mem.is_power_of_two(), "{a:?}");
        let p = dir.path().join("f");
        let f = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .custom_flags(nix::fcntl::OFlag::O_DIRECT.bits())
            .open(&p)
            .unwrap();
        let b = dio_alignment_fd(f.as_raw_fd());
        assert!(b.offset >= 512 && b.offset.is_power_of_two() && b.mem.is_power_of_two(), "{b:?}");
        // The filesystem's block as statfs reports it (`stat -f`'s %s is f_bsize).
        let out = Command::new("stat").args(["-f", "-c", "%s"]).arg(&p).output().unwrap();
        let want: usize = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
        assert_eq!(b.fs_block, want, "{b:?}");
        assert_eq!(dio_alignment(&p), b);
        println!("O_DIRECT alignment: dir {a:?}, file {b:?}");
        assert_eq!(dio_alignment(Path::new("/nonexistent/x")), DirectAlignment::uniform(4096));
    }

    fn tool(name: &str) -> Option<PathBuf> {
        ["/usr/sbin", "/sbin", "/usr/bin", "/bin"].iter().map(|d| Path::new(d).join(name)).find(|p| p.exists())
    }

    fn run(cmd: &Path, args: &[&str]) -> Result<String, String> {
        let out = Command::new(cmd).args(args).output().map_err(|e| format!("{}: {e}", cmd.display()))?;
        if !out.status.success() {
            return Err(format!(
                "{} {}: {} {}",
                cmd.display(),
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    /// Unmounts and detaches on drop, whatever happened.
    struct LoopMount {
        umount: PathBuf,
        losetup: PathBuf,
        device: Option<String>,
        mountpoint: Option<PathBuf>,
    }

    impl Drop for LoopMount {
        fn drop(&mut self) {
            if let Some(m) = self.mountpoint.take() {
                if let Err(e) = run(&self.umount, &[m.to_str().unwrap_or_default()]) {
                    eprintln!("cleanup: {e}; retrying lazily");
                    let _ = run(&self.umount, &["-l", m.to_str().unwrap_or_default()]);
                }
            }
            if let Some(d) = self.device.take() {
                if let Err(e) = run(&self.losetup, &["-d", &d]) {
                    eprintln!("cleanup: {e}");
                }
            }
        }
    }

    /// A 4096-byte-sector loop device with ext4: the alignment probe must say 4096 and a
    /// 512-aligned O_DIRECT write must fail. Skips (with the reason) when not root or without
    /// the tools or loop devices.
    #[test]
    fn loop_device_with_4096_byte_sectors() {
        if !nix::unistd::geteuid().is_root() {
            println!("skipped: not root");
            return;
        }
        let tools: Option<Vec<PathBuf>> = ["losetup", "mkfs.ext4", "mount", "umount"].iter().map(|t| tool(t)).collect();
        let Some(tools) = tools else {
            println!("skipped: losetup, mkfs.ext4, mount or umount missing");
            return;
        };
        if !Path::new("/dev/loop-control").exists() {
            println!("skipped: no /dev/loop-control");
            return;
        }
        let (losetup, mkfs, mount, umount) = (&tools[0], &tools[1], &tools[2], &tools[3]);
        let dir = test_dir();
        let image = dir.path().join("disk.img");
        std::fs::File::create(&image).and_then(|f| f.set_len(64 << 20)).unwrap();
        let mut guard = LoopMount { umount: umount.clone(), losetup: losetup.clone(), device: None, mountpoint: None };
        let dev = match run(losetup, &["--sector-size", "4096", "-f", "--show", image.to_str().unwrap()]) {
            Ok(d) if !d.is_empty() => d,
            Ok(_) => {
                println!("skipped: losetup printed no device");
                return;
            }
            Err(e) => {
                println!("skipped: {e}");
                return;
            }
        };
        guard.device = Some(dev.clone());
        run(mkfs, &["-q", "-F", "-b", "4096", &dev]).unwrap();
        let mnt = dir.path().join("mnt");
        std::fs::create_dir(&mnt).unwrap();
        run(mount, &[&dev, mnt.to_str().unwrap()]).unwrap();
        guard.mountpoint = Some(mnt.clone());

        let a = dio_alignment(&mnt);
        assert_eq!(a.offset, 4096, "{a:?}");
        let s = UringStorage::new(IoMode::Direct).unwrap();
        let path = mnt.join("0.log");
        let f = s.open_log(&path, OpenMode::CreateNew).unwrap();
        let fa = f.direct_alignment().unwrap();
        assert_eq!(fa.offset, 4096, "{fa:?}");
        assert!(fa.mem >= 512 && fa.mem.is_power_of_two(), "{fa:?}");
        let mut buf = AlignedBuf::new(8192, 4096);
        buf.extend_from_slice(&[0x5a; 8192]);
        // 512-aligned but not 4096-aligned: refused by the engine...
        let e = f.write_all_at(&buf[..4096], 512).unwrap_err();
        assert_eq!(crate::io::uring::error_errno(&e), Some(Errno::EINVAL as i32), "{e}");
        let e = f.write_all_at(&buf[..512], 0).unwrap_err();
        assert_eq!(crate::io::uring::error_errno(&e), Some(Errno::EINVAL as i32), "{e}");
        // ...and by the kernel (the same file opened again, O_DIRECT, written with pwrite).
        let again = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(nix::fcntl::OFlag::O_DIRECT.bits())
            .open(&path)
            .unwrap();
        assert_eq!(
            nix::sys::uio::pwrite(&again, &buf[..4096], 512),
            Err(Errno::EINVAL),
            "the kernel accepted a 512-aligned O_DIRECT write on a 4096-sector device"
        );
        // 4096-aligned: fine, and unaligned reads work.
        f.write_all_at(&buf, 4096).unwrap();
        f.sync_data().unwrap();
        let mut v = vec![0u8; 1000];
        assert_eq!(f.read_at(&mut v, 4096 + 3000).unwrap(), 1000);
        assert!(v.iter().all(|&b| b == 0x5a));
        drop(f);
        drop(guard); // unmount and detach before the temp dir goes
        println!("4096-sector loop device: alignment {fa:?}");
    }
}
