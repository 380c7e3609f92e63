//! The `seglog` command: the seed's experiment (`demo`) and the operator's tools for Kafka and
//! seglog log directories.
//!
//! Exit codes: 0 success; 1 damage found (verify, dump --verify-index-only, --index-sanity-check,
//! rebuild-index differences); 2 usage or I/O error.

mod demo;
mod stats;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(name = "seglog", version, about = "Kafka-format log storage engine: demo and tools")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Reproduce the index.interval.bytes experiment: 5000 records into four topics that differ
    /// only in index.interval.bytes, then look up every offset.
    Demo(demo::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let r = match cli.command {
        Command::Demo(a) => demo::run(a),
    };
    match r {
        Ok(code) => code,
        Err(e) => {
            eprintln!("seglog: {e}");
            let mut src = std::error::Error::source(&*e);
            while let Some(s) = src {
                eprintln!("  caused by: {s}");
                src = s.source();
            }
            ExitCode::from(2)
        }
    }
}
