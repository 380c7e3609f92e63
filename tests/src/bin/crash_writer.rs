//! The crash tests' writer: opens an [`Engine`](seglog::Engine) on a data directory and appends seed-derived
//! batches (see `seglog_tests::crash`) to every partition until it is killed. After each
//! acknowledged append it prints `ACK partition first last crc size` on stdout, flushed, so the
//! harness knows exactly what was acknowledged when it cut the power or killed the process.
//! Under `Durability::EveryBatch` an acknowledgement means durable.
//!
//! Usage: `crash_writer dir=PATH io=direct|buffered|sync durability=none|every-batch seed=N
//! partitions=N segment-bytes=N index-interval-bytes=N preallocate=BOOL inflight=N
//! limit-bytes=N sync-method=dsync-writes|fdatasync|syncfs ...` (all but `dir` have defaults, see
//! `WriterArgs::new`).
//!
//! First line: `START mode=<mode the engine runs in> negative-control=<bool> leo=<p:offset,..>`.
//! A failed append prints `ERR partition message` and stops that partition; the program keeps
//! running (idle) until killed, so that it never closes the engine cleanly.
//!
//! Built twice: `crash_writer`, and `crash_writer_nc` with the engine's TEST-ONLY
//! `negative-control` feature (EveryBatch acknowledges without fdatasync).

fn main() {
    seglog_tests::crash::writer_main();
}
