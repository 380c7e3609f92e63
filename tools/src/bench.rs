//! `seglog bench`: the workload benchmark of the bench crate (`seglog_bench::cli`), run from the
//! seglog command. See docs/benchmarks.md for what each workload does and how to read the figures.
//!
//! Only with the cargo feature `bench` (off by default, so that the operator's build carries none
//! of the benchmark's dependencies); without it the subcommand takes any arguments and says how to
//! get it (`NOT_BUILT`).

use std::process::ExitCode;

#[cfg(feature = "bench")]
pub use seglog_bench::cli::Args;

#[cfg(feature = "bench")]
pub fn run(args: Args) -> Result<ExitCode, Box<dyn std::error::Error>> {
    seglog_bench::apply_env_knobs();
    seglog_bench::cli::run(args)?;
    Ok(ExitCode::SUCCESS)
}

/// What `seglog bench` says in a build without the feature `bench`.
#[cfg(not(feature = "bench"))]
pub const NOT_BUILT: &str = "bench: this seglog was built without the workload benchmark (the cargo feature \
     `bench` of seglog-tools, off by default so that the operator's build has none of its dependencies); \
     build it with `cargo build --release -p seglog-tools --features bench` and run \
     `./target/release/seglog bench ...`, or run the same driver on its own with \
     `cargo run --release -p seglog-bench --bin seglog-bench -- ...`";

/// The subcommand's help in a build without the feature `bench`.
#[cfg(not(feature = "bench"))]
pub const NOT_BUILT_ABOUT: &str =
    "The workload benchmark: not in this build (it needs the cargo feature `bench`: cargo build --release -p seglog-tools --features bench)";

/// Without the feature: whatever arguments `seglog bench` is given (`--help` included).
#[cfg(not(feature = "bench"))]
#[derive(clap::Args, Debug)]
pub struct Args {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, hide = true)]
    args: Vec<std::ffi::OsString>,
}

#[cfg(not(feature = "bench"))]
pub fn run(_args: Args) -> Result<ExitCode, Box<dyn std::error::Error>> {
    Err(NOT_BUILT.into())
}
