//! Shared helpers for seglog's benchmarks: workload generation.
