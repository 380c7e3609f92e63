//! The `seglog` command: the seed's experiment (`demo`) and the operator's tools for Kafka and
//! seglog log directories.
//!
//! Exit codes: 0 success; 1 damage found (verify, dump --verify-index-only, --index-sanity-check,
//! rebuild-index differences); 2 usage or I/O error.

mod bench;
mod capacity;
mod demo;
mod dump;
mod files;
mod index_report;
mod indexcheck;
mod indexsim;
mod layout;
mod live;
mod logscan;
mod overlay;
mod progress;
mod rebuild_index;
mod recover;
mod serve;
mod sidecar;
mod stats;
mod txncheck;
mod units;
mod verify;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// The exit-code table shown at the end of every `--help`.
pub const EXIT_CODES: &str = "\
Exit codes:
  0  success: nothing wrong found
  1  damage or differences found (a corrupt batch, a torn tail, an index entry that does not
     match its log, an index that fails Kafka's sanity check, rebuild-index differences in a dry run)
  2  usage error, unreadable file or directory, or any other I/O error";

#[derive(Parser, Debug)]
#[command(
    name = "seglog",
    version,
    about = "Kafka-format log storage engine: demo and tools",
    long_about = "Kafka-format log storage engine: the seed's demo and tools that read Kafka's on-disk \
                  files (and seglog's, which are the same format) without changing them, except \
                  `rebuild-index --write`.",
    after_help = EXIT_CODES
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Reproduce the index.interval.bytes experiment: 5000 records into four topics that differ
    /// only in index.interval.bytes, then look up every offset.
    Demo(demo::Args),
    /// Print the contents of segment, index, snapshot and checkpoint files (like kafka-dump-log),
    /// and check indexes against their log.
    Dump(dump::Args),
    /// Check every batch (CRC, framing, offsets) and every index entry of a partition directory
    /// or a whole log directory; exit code 1 on any damage.
    Verify(verify::Args),
    /// Measure what the offset index costs (bytes scanned and header hops per lookup, replayed
    /// for every offset) and simulate other index.interval.bytes values, writing nothing.
    IndexReport(index_report::Args),
    /// Rebuild each segment's .index and .timeindex from its .log with Kafka's rule and report
    /// how they differ from the files (a dry run unless --write).
    RebuildIndex(rebuild_index::Args),
    /// The capacity worksheet: segments, index bytes, memory maps and open files for a given
    /// partition count and data volume, Kafka against seglog, checked against this machine's limits.
    Capacity(capacity::Args),
    /// Run offline exactly what opening the engine runs on a log directory (crash recovery from
    /// the recovery points, torn tails cut, indexes rebuilt, leftovers removed) and print it.
    Recover(recover::Args),
    /// Serve the data directory to Kafka clients over Kafka's wire protocol (one node: produce,
    /// fetch, list offsets, metadata, create and delete topics, idempotent and transactional
    /// producers).
    Serve(serve::Args),
    /// The workload benchmark: produce, tail, catch-up, seek, time lookups, mixed and recovery
    /// through the engine, each beside fio on the same disk and the reference designs (Kafka's
    /// page cache + mmap index, the commitlog crate); `--profile quick` runs in under a minute.
    #[command(after_help = EXIT_CODES)]
    #[cfg_attr(
        not(feature = "bench"),
        command(about = bench::NOT_BUILT_ABOUT, long_about = None, disable_help_flag = true)
    )]
    Bench(Box<bench::Args>),
}

fn main() -> ExitCode {
    reset_sigpipe();
    let cli = Cli::parse();
    let r = match cli.command {
        Command::Demo(a) => demo::run(a),
        Command::Dump(a) => dump::run(a),
        Command::Verify(a) => verify::run(a),
        Command::IndexReport(a) => index_report::run(a),
        Command::RebuildIndex(a) => rebuild_index::run(a),
        Command::Capacity(a) => capacity::run(a),
        Command::Recover(a) => recover::run(a),
        Command::Serve(a) => serve::run(a),
        Command::Bench(a) => bench::run(*a),
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

/// Restores the default SIGPIPE action, so `seglog dump ... | head` ends quietly as other Unix
/// tools do instead of panicking on a closed pipe.
fn reset_sigpipe() {
    use nix::sys::signal::{signal, SigHandler, Signal};
    // SAFETY: SIG_DFL installs no handler code (nix marks every signal() unsafe because of
    // handlers); it runs before any thread starts.
    let _ = unsafe { signal(Signal::SIGPIPE, SigHandler::SigDfl) };
}
