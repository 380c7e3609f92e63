//! criterion micro-benchmarks of the format layer: CRC-32C over batch sizes, batch validation
//! (framing + CRC, then the leader's record decode), and splitting a request into batches.
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use seglog::format::{batch, record};
use seglog_bench::workload::make_batch;
use std::hint::black_box;

fn crc(c: &mut Criterion) {
    let mut g = c.benchmark_group("crc32c");
    for size in [64usize, 512, 4096, 16_384, 65_536, 1 << 20] {
        let buf = vec![7u8; size];
        g.throughput(Throughput::Bytes(size as u64));
        g.bench_with_input(BenchmarkId::from_parameter(size), &buf, |b, buf| b.iter(|| crc32c::crc32c(black_box(buf))));
    }
    g.finish();
}

fn validation(c: &mut Criterion) {
    let mut g = c.benchmark_group("validate");
    for (size, records) in [(1024usize, 1usize), (16_384, 1), (16_384, 16), (65_536, 64), (1 << 20, 1024)] {
        let b16 = make_batch(size, records, 1_700_000_000_000);
        g.throughput(Throughput::Bytes(size as u64));
        let id = format!("{size}B_x{records}");
        // Framing, magic, CRC-32C, record count: what every append and every recovery runs.
        g.bench_with_input(BenchmarkId::new("validate_batch", &id), &b16, |b, buf| {
            b.iter(|| batch::validate_batch(black_box(buf), true).expect("valid"))
        });
        // The leader's record pass: every record decoded (offset deltas, timestamps).
        g.bench_with_input(BenchmarkId::new("validate_and_decode_records", &id), &b16, |b, buf| {
            let mut scratch = Vec::new();
            b.iter(|| {
                batch::validate_batch(black_box(buf), true).expect("valid");
                let mut n = 0i64;
                for r in record::batch_records(buf, &mut scratch).expect("records") {
                    n += r.expect("record").offset_delta as i64;
                }
                n
            })
        });
    }
    // A produce request of 16 batches of 1 KiB split and checked one by one.
    let request: Vec<u8> = (0..16).flat_map(|_| make_batch(1024, 1, 0)).collect();
    g.throughput(Throughput::Bytes(request.len() as u64));
    g.bench_function("split_batches_16x1KiB", |b| {
        b.iter(|| batch::split_batches(black_box(&request), true).expect("valid"))
    });
    g.finish();
}

criterion_group!(benches, crc, validation);
criterion_main!(benches);
