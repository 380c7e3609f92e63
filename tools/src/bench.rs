//! `seglog bench`: the workload benchmark of the bench crate (`seglog_bench::cli`), run from the
//! seglog command. See docs/benchmarks.md for what each workload does and how to read the figures.

use std::process::ExitCode;

pub use seglog_bench::cli::Args;

pub fn run(args: Args) -> Result<ExitCode, Box<dyn std::error::Error>> {
    seglog_bench::apply_env_knobs();
    seglog_bench::cli::run(args)?;
    Ok(ExitCode::SUCCESS)
}
