//! seglog's workload benchmarks, and the disk's own limit measured beside them with fio in the
//! same run, so every figure is a ratio on the same disk at the same moment (these machines are
//! shared and noisy: compare within a run, interleave, repeat, report medians).
//!
//! - [`workload`]: produce, tail, catch-up, seek, lookups, time lookups, mixed, recovery, through
//!   the engine; [`refs`] runs the reference designs ([`kafka_ref`], the `commitlog` crate) on the
//!   same batches; [`fio`] runs and parses fio; [`cli`] is `seglog bench` (the driver, the summary,
//!   `--json`, `--plot`); [`plot`] draws every chart (these and `seglog index-report --plot`'s).
//! - [`sweep`]: the durable-append sweep (partitions x appends in flight x zero fill x sync
//!   method, each point beside fio's equivalent job), run by [`cli`] when asked for;
//!   [`partitions`]: one shard with up to 10,000 partitions beside fio's many-files job, with
//!   the memory each partition costs.
//! - [`append`] is the older append-only comparison behind the `append-vs-fio` binary.

pub mod append;
pub mod cli;
pub mod fio;
pub mod kafka_ref;
pub mod partitions;
pub mod pct;
/// Every chart, drawn by the `seglog-plot` crate (shared with `seglog index-report --plot`).
pub use seglog_plot as plot;
pub mod refs;
pub mod rusage;
pub mod sweep;
pub mod workload;

/// Environment variable: `0` (or `false`, `no`, `off`) keeps the engine's write-buffer pool
/// unregistered (plain WRITE instead of WRITE_FIXED), for comparing the two
/// ([`seglog::io::pool::set_buffer_registration`]).
pub const FIXED_BUFFERS_ENV: &str = "SEGLOG_FIXED_BUFFERS";
/// Environment variable: the bytes recovery reads per I/O
/// ([`seglog::segment::set_recovery_read_bytes`]), for benchmarks of the window size.
pub const RECOVERY_READ_BYTES_ENV: &str = "SEGLOG_RECOVERY_READ_BYTES";

/// Applies the benchmark knobs set in the environment ([`FIXED_BUFFERS_ENV`],
/// [`RECOVERY_READ_BYTES_ENV`]) to the engine. The engine reads no environment itself: its
/// callers decide.
pub fn apply_env_knobs() {
    if std::env::var(FIXED_BUFFERS_ENV).is_ok_and(|v| matches!(v.trim(), "0" | "false" | "no" | "off")) {
        seglog::io::pool::set_buffer_registration(false);
    }
    if let Some(n) = std::env::var(RECOVERY_READ_BYTES_ENV).ok().and_then(|v| v.trim().parse::<usize>().ok()) {
        seglog::segment::set_recovery_read_bytes(n);
    }
}
