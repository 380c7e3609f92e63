//! The workload benchmark as a binary of its own (the same as `seglog bench`):
//! `cargo run --release -p seglog-bench --bin seglog-bench -- --profile quick`.

use clap::Parser;

fn main() -> std::process::ExitCode {
    seglog_bench::apply_env_knobs();
    let cli = seglog_bench::cli::Cli::parse();
    match seglog_bench::cli::run(cli.args) {
        Ok(_) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("seglog-bench: {e}");
            std::process::ExitCode::from(2)
        }
    }
}
