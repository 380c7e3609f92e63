//! The crash writer built with the engine's TEST-ONLY `negative-control` feature:
//! `Durability::EveryBatch` acknowledges appends without the fdatasync. The power-cut test's
//! negative control runs it to show that the harness catches lost acknowledged batches. Built
//! only with `--features negative-control` (tests/power_cut.rs builds it with cargo).

#[cfg(not(feature = "negative-control"))]
compile_error!("crash_writer_nc must be built with --features negative-control");

fn main() {
    seglog_tests::crash::writer_main();
}
