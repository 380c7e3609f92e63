//! What the process spent during a run: CPU seconds (user + system) and page faults, from
//! `getrusage(RUSAGE_SELF)` before and after. It covers every thread of the process (the shards,
//! the producers, the consumers), not fio, which runs as a child and is measured separately.

/// A snapshot of the process's resource counters.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Usage {
    pub cpu_s: f64,
    pub minor_faults: u64,
    pub major_faults: u64,
}

impl Usage {
    /// The counters now.
    pub fn now() -> Usage {
        // SAFETY: an all-zero `rusage` is a valid value of this plain C struct.
        let mut u: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: getrusage only writes into the struct we pass, which lives across the call.
        let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
        if rc != 0 {
            return Usage::default();
        }
        let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
        Usage {
            cpu_s: secs(u.ru_utime) + secs(u.ru_stime),
            minor_faults: u.ru_minflt as u64,
            major_faults: u.ru_majflt as u64,
        }
    }

    /// What happened between `earlier` and `self`.
    pub fn since(&self, earlier: &Usage) -> Usage {
        Usage {
            cpu_s: (self.cpu_s - earlier.cpu_s).max(0.0),
            minor_faults: self.minor_faults.saturating_sub(earlier.minor_faults),
            major_faults: self.major_faults.saturating_sub(earlier.major_faults),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_time_moves_forward() {
        let a = Usage::now();
        let mut x = 0u64;
        let t = std::time::Instant::now();
        while t.elapsed().as_millis() < 30 {
            x = x.wrapping_mul(31).wrapping_add(std::hint::black_box(7));
        }
        std::hint::black_box(x);
        let d = Usage::now().since(&a);
        assert!(d.cpu_s > 0.0, "{d:?}");
    }
}
