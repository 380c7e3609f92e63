//! Counters the tests and the benchmark read: page faults of this thread or process, memory
//! maps and descriptors of the process.

use nix::sys::resource::{getrusage, UsageWho};

/// Page faults counted by the kernel.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PageFaults {
    /// Served without I/O (a page in memory mapped in, a zero page, a copy on write).
    pub minor: u64,
    /// Needed I/O (a file page read from disk, a swapped page).
    pub major: u64,
}

fn rusage(who: UsageWho) -> PageFaults {
    match getrusage(who) {
        Ok(u) => PageFaults { minor: u.minor_page_faults() as u64, major: u.major_page_faults() as u64 },
        Err(_) => PageFaults::default(),
    }
}

/// Page faults of the calling thread so far (`getrusage(RUSAGE_THREAD)`).
pub fn thread_page_faults() -> PageFaults {
    rusage(UsageWho::RUSAGE_THREAD)
}

/// Memory maps of this process (lines of `/proc/self/maps`): what `vm.max_map_count` limits.
pub fn map_count() -> usize {
    std::fs::read_to_string("/proc/self/maps").map(|t| t.lines().count()).unwrap_or(0)
}

/// Open file descriptors of this process (entries of `/proc/self/fd`).
pub fn open_fd_count() -> usize {
    // The directory handle itself is one of the entries.
    std::fs::read_dir("/proc/self/fd").map(|d| d.count().saturating_sub(1)).unwrap_or(0)
}
