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
        use nix::sys::resource::{getrusage, UsageWho};
        use nix::sys::time::TimeValLike;
        let Ok(u) = getrusage(UsageWho::RUSAGE_SELF) else { return Usage::default() };
        Usage {
            cpu_s: (u.user_time().num_microseconds() + u.system_time().num_microseconds()) as f64 / 1e6,
            minor_faults: u.minor_page_faults() as u64,
            major_faults: u.major_page_faults() as u64,
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
