//! `seglog serve`: a single-node server that speaks Kafka's wire protocol on top of the
//! [`seglog::Engine`], so unmodified Kafka clients (librdkafka and kcat, kafka-python,
//! confluent-kafka) produce to and consume from it. It is the reference embedding: what a broker
//! does with the engine, in as little code as that takes.
//!
//! - One process, one node (id 0), one data directory. Every partition is led here and has no
//!   followers ([`seglog::EngineConfig::single_replica`]): an acknowledged append moves the high
//!   watermark, so consumers see exactly what producers were told is stored.
//! - Requests are decoded by the `kafka-protocol` crate, handled on a small tokio runtime, and
//!   routed to the engine's shards. Records are taken from Produce as the client's own v2 batches
//!   and returned by Fetch as stored; the server never opens or re-encodes a batch.
//! - Topics are created on first use (Metadata with `allow_auto_topic_creation`, Kafka's
//!   `auto.create.topics.enable`) with [`ServerConfig::default_partitions`], or by CreateTopics.
//!   The topics are the partition directories found in the data directory.
//!
//! docs/server.md lists the APIs and versions served and what is not.

mod conn;
mod errors;
mod handlers;
mod producer_ids;
mod topics;
mod txn;
mod waiters;

pub use producer_ids::PRODUCER_IDS_FILE;
pub use txn::TXN_TOPIC;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use seglog::{Engine, EngineConfig};

/// Kafka's `socket.request.max.bytes` default: a request frame larger than this is refused.
pub const DEFAULT_MAX_REQUEST_BYTES: usize = 100 * 1024 * 1024;
/// Connections served at once; one more is accepted and closed at once.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;

/// How often transactions open past their timeout are looked for and aborted (Kafka's
/// `transaction.abort.timed.out.transaction.cleanup.interval.ms` is 10 s).
const TXN_TIMEOUT_CHECK: std::time::Duration = std::time::Duration::from_secs(1);

/// What `seglog serve` runs with.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// Where to listen (default 127.0.0.1:9092). Port 0 picks a free port:
    /// [`Running::local_addr`] says which.
    pub listen: SocketAddr,
    /// The engine's settings: data directory, I/O mode, shards, durability.
    /// [`EngineConfig::single_replica`] is always set: this node is every partition's only replica.
    pub engine: EngineConfig,
    /// Partitions of a topic created on first use or by CreateTopics without a count (Kafka's
    /// `num.partitions`, default 1).
    pub default_partitions: i32,
    /// Create a topic a client asks Metadata about (Kafka's `auto.create.topics.enable`, default
    /// true).
    pub auto_create_topics: bool,
    /// The largest request frame taken (Kafka's `socket.request.max.bytes`, 100 MiB), and the
    /// most request and answer bytes one connection holds at once (its requests' bytes as they
    /// arrive, until their answers are written; its fetch answers'): past it the connection's
    /// reading waits for its own answers to go out, as Kafka serves a connection one request at
    /// a time. The server's memory for requests is at most this times `max_connections`.
    pub max_request_bytes: usize,
    /// The most connections served at once.
    pub max_connections: usize,
    /// Threads of the request runtime (default 1: the shards do the storage work).
    pub network_threads: usize,
    /// The host and port Metadata gives clients (Kafka's `advertised.listeners`); default the
    /// address listened on, which must then not be a wildcard (0.0.0.0 or ::).
    pub advertised: Option<(String, u16)>,
    /// Stop cleanly on SIGINT or SIGTERM (`seglog serve`); [`Running::wait`] returns then. The
    /// handlers are in place when [`start`] returns.
    pub stop_on_signals: bool,
    /// Benchmarks only: answer every produce as stored without storing its records (offsets are
    /// answered as -1; transaction markers are still written). `scripts/serve-load.py` measures
    /// the wire alone with it.
    #[cfg(feature = "bench")]
    pub discard_produce: bool,
}

impl ServerConfig {
    pub fn new(data_dir: impl Into<PathBuf>) -> ServerConfig {
        ServerConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 9092)),
            engine: EngineConfig::new(data_dir),
            default_partitions: 1,
            auto_create_topics: true,
            max_request_bytes: DEFAULT_MAX_REQUEST_BYTES,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            network_threads: 1,
            advertised: None,
            stop_on_signals: false,
            #[cfg(feature = "bench")]
            discard_produce: false,
        }
    }
}

/// Why the server could not start or stop cleanly.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("{0}")]
    Engine(#[from] seglog::Error),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("invalid setting: {0}")]
    Config(String),
}

pub type Result<T> = std::result::Result<T, ServerError>;

/// What every connection shares.
pub(crate) struct State {
    pub(crate) engine: Engine,
    pub(crate) topics: topics::Topics,
    pub(crate) producer_ids: producer_ids::ProducerIds,
    pub(crate) coordinator: txn::Coordinator,
    /// Fetches waiting for `min_bytes`, woken by the appends to their partitions.
    pub(crate) waiters: waiters::Waiters,
    /// The host and port given to clients in Metadata (the address listened on).
    pub(crate) advertised: (String, i32),
    pub(crate) config: ServerConfig,
}

/// A server running on its own threads; [`Running::shutdown`] stops it cleanly.
pub struct Running {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<Result<()>>>,
}

impl Running {
    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting, drops every connection, and shuts the engine down cleanly (every
    /// partition closed, checkpoints and the clean-shutdown marker written).
    pub fn shutdown(mut self) -> Result<()> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.join()
    }

    /// Serves until it stops: on SIGINT or SIGTERM with [`ServerConfig::stop_on_signals`]
    /// (cleanly, as [`Running::shutdown`]), or when serving fails.
    pub fn wait(mut self) -> Result<()> {
        self.join()
    }

    fn join(&mut self) -> Result<()> {
        match self.thread.take() {
            Some(t) => t.join().unwrap_or_else(|_| Err(ServerError::Config("the server thread panicked".into()))),
            None => Ok(()),
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = self.join();
    }
}

/// Opens the engine on the data directory (recovering it if needed), listens, and serves on
/// threads of its own until [`Running::shutdown`].
pub fn start(mut config: ServerConfig) -> Result<Running> {
    if config.default_partitions < 1 {
        return Err(ServerError::Config(format!("partitions = {}: at least 1", config.default_partitions)));
    }
    if config.max_connections == 0 || config.network_threads == 0 {
        return Err(ServerError::Config("max connections and network threads must be at least 1".into()));
    }
    config.engine.single_replica = true;
    if config.advertised.is_none() && config.listen.ip().is_unspecified() {
        return Err(ServerError::Config(format!(
            "listening on {} needs an address to give clients (advertised)",
            config.listen
        )));
    }
    let listener = std::net::TcpListener::bind(config.listen)
        .map_err(|source| ServerError::Bind { addr: config.listen, source })?;
    let addr = listener.local_addr().map_err(|source| ServerError::Io { what: "local address".into(), source })?;
    listener.set_nonblocking(true).map_err(|source| ServerError::Io { what: "listener".into(), source })?;
    let producer_ids = producer_ids::ProducerIds::open(&config.engine.data_dir)?;
    let engine = Engine::open(config.engine.clone())?;
    // The coordinator's state partition first: it is a topic like the others.
    let coordinator = txn::Coordinator::load(&engine)?;
    let topics = topics::Topics::from_engine(&engine)?;
    let state = Arc::new(State {
        engine,
        topics,
        producer_ids,
        coordinator,
        waiters: waiters::Waiters::default(),
        advertised: match &config.advertised {
            Some((host, port)) => (host.clone(), *port as i32),
            None => (addr.ip().to_string(), addr.port() as i32),
        },
        config,
    });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(state.config.network_threads)
        .thread_name("seglog-net")
        .enable_all()
        .build()
        .map_err(|source| ServerError::Io { what: "starting the request runtime".into(), source })?;
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel();
    // The signal handlers go in before start returns: a signal right after it stops cleanly.
    let signals = if state.config.stop_on_signals {
        use tokio::signal::unix::{signal, SignalKind};
        let _in_runtime = runtime.enter();
        let handler = |kind| {
            signal(kind).map_err(|source| ServerError::Io { what: "installing a signal handler".into(), source })
        };
        Some((handler(SignalKind::interrupt())?, handler(SignalKind::terminate())?))
    } else {
        None
    };
    let thread = std::thread::Builder::new()
        .name("seglog-serve".into())
        .spawn(move || {
            let served = runtime.block_on(async {
                // Transactions a stop left between decision and markers are finished first.
                state.coordinator.recover(&state).await;
                let timer = state.clone();
                tokio::spawn(async move {
                    let mut every = tokio::time::interval(TXN_TIMEOUT_CHECK);
                    loop {
                        every.tick().await;
                        timer.coordinator.abort_timed_out(&timer).await;
                    }
                });
                let stop = async move {
                    match signals {
                        Some((mut int, mut term)) => {
                            tokio::select! {
                                _ = stop_rx => {}
                                _ = int.recv() => {}
                                _ = term.recv() => {}
                            }
                        }
                        None => {
                            let _ = stop_rx.await;
                        }
                    }
                };
                conn::accept_loop(listener, state.clone(), stop).await
            });
            // Every connection task goes with the runtime, and with them their handles on the state.
            drop(runtime);
            let state =
                Arc::try_unwrap(state).map_err(|_| ServerError::Config("connections outlived the server".into()))?;
            served?;
            state.engine.shutdown()?;
            Ok(())
        })
        .map_err(|source| ServerError::Io { what: "spawning the server thread".into(), source })?;
    Ok(Running { addr, stop: Some(stop_tx), thread: Some(thread) })
}
