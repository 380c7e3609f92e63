//! Which cores shards run on. Default: the cores this process may run on. With the `hwloc`
//! feature the list comes from hwloc: one processing unit per physical core, among those allowed
//! and in the process's affinity mask (so hyperthread siblings do not get two shards). Without
//! it (or if hwloc fails) the list is the affinity mask as `core_affinity` reads it through
//! sched_getaffinity, then the count of online CPUs.

/// The machine's cores as the engine sees them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Topology {
    /// Core ids the process may run on.
    pub allowed: Vec<usize>,
    /// Where the list came from.
    pub source: &'static str,
}

impl Topology {
    pub(crate) fn detect() -> Topology {
        #[cfg(feature = "hwloc")]
        if let Some(allowed) = detect_hwloc() {
            return Topology { allowed, source: "hwloc" };
        }
        Topology::detect_fallback()
    }

    /// The topology without hwloc: the affinity mask, then the online CPU count.
    pub(crate) fn detect_fallback() -> Topology {
        if let Some(ids) = core_affinity::get_core_ids() {
            if !ids.is_empty() {
                return Topology { allowed: ids.into_iter().map(|c| c.id).collect(), source: "sched_getaffinity" };
            }
        }
        let n = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
        Topology { allowed: (0..n).collect(), source: "available_parallelism" }
    }
}

#[cfg(feature = "hwloc")]
fn detect_hwloc() -> Option<Vec<usize>> {
    use hwlocality::object::types::ObjectType;
    let topo = hwlocality::Topology::new().ok()?;
    let allowed = topo.allowed_cpuset();
    let mask: Option<Vec<usize>> = core_affinity::get_core_ids().map(|v| v.into_iter().map(|c| c.id).collect());
    let mut out = Vec::new();
    for core in topo.objects_with_type(ObjectType::Core) {
        let Some(cs) = core.cpuset() else { continue };
        for pu in cs.iter_set() {
            let id = usize::from(pu);
            if allowed.is_set(pu) && mask.as_ref().is_none_or(|m| m.contains(&id)) {
                out.push(id);
                break;
            }
        }
    }
    out.sort_unstable();
    (!out.is_empty()).then_some(out)
}

/// The cores this process may run on.
pub fn allowed_cores() -> Vec<usize> {
    Topology::detect().allowed
}

/// Pins the calling thread to `core`; false if the OS refused.
pub(crate) fn pin_current_thread(core: usize) -> bool {
    core_affinity::set_for_current(core_affinity::CoreId { id: core })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topology_lists_allowed_cores() {
        let t = Topology::detect();
        assert!(!t.allowed.is_empty());
        let f = Topology::detect_fallback();
        assert!(!f.allowed.is_empty());
        // Every core the detected topology lists is one the process may run on.
        for c in &t.allowed {
            assert!(f.allowed.contains(c), "{c} not in the affinity mask {:?}", f.allowed);
        }
        #[cfg(feature = "hwloc")]
        assert_eq!(t.source, "hwloc");
    }
}
