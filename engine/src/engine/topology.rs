//! Which cores shards run on. Default: the cores this process may run on (its affinity mask, as
//! `core_affinity` reads it through sched_getaffinity), falling back to the count of online CPUs.

/// The machine's cores as the engine sees them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Topology {
    /// Core ids the process may run on.
    pub allowed: Vec<usize>,
    /// Where the list came from.
    pub source: &'static str,
}

impl Topology {
    pub fn detect() -> Topology {
        if let Some(ids) = core_affinity::get_core_ids() {
            if !ids.is_empty() {
                return Topology { allowed: ids.into_iter().map(|c| c.id).collect(), source: "sched_getaffinity" };
            }
        }
        let n = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
        Topology { allowed: (0..n).collect(), source: "available_parallelism" }
    }
}

/// The cores this process may run on.
pub fn allowed_cores() -> Vec<usize> {
    Topology::detect().allowed
}

/// Pins the calling thread to `core`; false if the OS refused.
pub(crate) fn pin_current_thread(core: usize) -> bool {
    core_affinity::set_for_current(core_affinity::CoreId { id: core })
}
