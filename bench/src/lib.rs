//! seglog's workload benchmarks, and the disk's own limit measured beside them with fio in the
//! same run, so every figure is a ratio on the same disk at the same moment (these machines are
//! shared and noisy: compare within a run, interleave, repeat, report medians).
//!
//! - [`workload`]: produce, tail, catch-up, seek, lookups, time lookups, mixed, recovery, through
//!   the engine; [`refs`] runs the reference designs ([`kafka_ref`], the `commitlog` crate) on the
//!   same batches; [`fio`] runs and parses fio; [`cli`] is `seglog bench` (the driver, the summary,
//!   `--json`, `--plot`); [`plot`] draws every chart (these and `seglog index-report --plot`'s).
//! - [`append`] is the older append-only comparison behind the `append-vs-fio` binary.

pub mod append;
pub mod cli;
pub mod fio;
pub mod kafka_ref;
pub mod pct;
pub mod plot;
pub mod refs;
pub mod rusage;
pub mod workload;
