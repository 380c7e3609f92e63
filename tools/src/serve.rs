//! `seglog serve`: Kafka's wire protocol over the engine, for unmodified Kafka clients (the
//! server lives in the seglog-server crate; docs/server.md).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use seglog::{Durability, IoMode};

/// Serve a data directory to Kafka clients until Ctrl-C or SIGTERM, which stop it cleanly: every
/// partition closed, the checkpoints and the clean-shutdown marker written (exit code 0).
/// docs/server.md lists the APIs and versions served.
#[derive(Parser, Debug)]
#[command(after_help = crate::EXIT_CODES)]
pub struct Args {
    /// The data directory (Kafka's log.dirs): created if missing; its partitions are served.
    #[arg(long)]
    dir: PathBuf,
    /// Address to listen on (loopback by default; port 0 picks a free one, printed at start).
    #[arg(long, default_value = "127.0.0.1:9092")]
    listen: SocketAddr,
    /// I/O mode: direct (O_DIRECT + io_uring), buffered (page cache + io_uring) or sync.
    #[arg(long, default_value = "direct")]
    io_mode: IoMode,
    /// Engine shards (default: one per core the process may run on).
    #[arg(long)]
    shards: Option<usize>,
    /// Partitions of a topic created on first use or without a count (Kafka's num.partitions).
    #[arg(long, default_value_t = 1)]
    partitions: i32,
    /// When an append is acknowledged: `none` (Kafka's default: once the kernel has it) or
    /// `every-batch` (after an fdatasync covering it).
    #[arg(long, default_value = "none", value_parser = ["none", "every-batch"])]
    durability: String,
    /// Do not create topics on first use (Kafka's auto.create.topics.enable=false).
    #[arg(long)]
    no_auto_create: bool,
    /// The largest request taken, in bytes (Kafka's socket.request.max.bytes), and the most
    /// request and answer bytes one connection holds at once.
    #[arg(long, default_value_t = seglog_server::DEFAULT_MAX_REQUEST_BYTES)]
    max_request_bytes: usize,
    /// Connections served at once.
    #[arg(long, default_value_t = seglog_server::DEFAULT_MAX_CONNECTIONS)]
    max_connections: usize,
    /// Threads that read requests, decode them, hand partition work to the shards and write
    /// answers (Kafka's num.network.threads). One keeps up with a shard or two; more where many
    /// connections or shards keep one thread busy.
    #[arg(long, default_value_t = 1)]
    network_threads: usize,
    /// HOST:PORT given to clients in Metadata (Kafka's advertised.listeners); default the
    /// --listen address, which must then not be a wildcard such as 0.0.0.0.
    #[arg(long)]
    advertise: Option<String>,
    /// Benchmarks only: answer produce requests without storing them (scripts/serve-load.py
    /// measures the wire alone with it).
    #[cfg(feature = "bench")]
    #[arg(long, hide = true)]
    discard_produce: bool,
}

pub fn run(a: Args) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let mut config = seglog_server::ServerConfig::new(&a.dir);
    config.listen = a.listen;
    config.engine.io_mode = a.io_mode;
    config.engine.shards = a.shards;
    config.engine.durability = if a.durability == "every-batch" { Durability::EveryBatch } else { Durability::None };
    config.default_partitions = a.partitions;
    config.auto_create_topics = !a.no_auto_create;
    config.max_request_bytes = a.max_request_bytes;
    config.max_connections = a.max_connections;
    config.network_threads = a.network_threads;
    config.stop_on_signals = true;
    #[cfg(feature = "bench")]
    {
        config.discard_produce = a.discard_produce;
    }
    if let Some(adv) = &a.advertise {
        let (host, port) = adv.rsplit_once(':').ok_or_else(|| format!("--advertise {adv}: expected HOST:PORT"))?;
        let port = port.parse().map_err(|_| format!("--advertise {adv}: the port is not a number"))?;
        config.advertised = Some((host.to_string(), port));
    }
    let running = seglog_server::start(config)?;
    // One line a script can wait for: the address and the I/O mode running.
    println!("seglog serve: listening on {} (data {})", running.local_addr(), a.dir.display());
    running.wait()?;
    println!("seglog serve: stopped cleanly");
    Ok(ExitCode::SUCCESS)
}
