//! seglog's workload benchmarks, and the disk's own limit measured beside them with fio in the
//! same run, so every figure is a ratio on the same disk at the same moment (these machines are
//! shared and noisy: compare within a run, interleave, repeat, report medians).

pub mod append;
pub mod fio;
pub mod pct;
