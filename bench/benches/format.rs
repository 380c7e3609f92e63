//! criterion micro-benchmarks of the format layer.
use criterion::{criterion_group, criterion_main, Criterion};

fn crc(c: &mut Criterion) {
    let buf = vec![7u8; 16 * 1024];
    c.bench_function("crc32c_16k", |b| b.iter(|| crc32c::crc32c(std::hint::black_box(&buf))));
}

criterion_group!(benches, crc);
criterion_main!(benches);
