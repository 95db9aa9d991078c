//! Ingest throughput with the durable flush in the steady state.
//!
//! Each iteration is one scrape of every series followed by `Store::flush` (a 15 s scrape
//! with a 10 s flush interval flushes at least once per scrape), on a store on disk.
#![allow(missing_docs)]

mod common;

use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use headroom_storage::{Store, StoreConfig};

const SERIES: usize = 50_000;

fn ingest(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), StoreConfig::default()).unwrap();
    let mut g = common::Gen::new(&store, SERIES, 1);
    let mut round = 0i64;
    // Warm up past the first chunk cuts so the steady state includes sealing.
    for _ in 0..300 {
        g.scrape(&store, round);
        round += 1;
        store.flush().unwrap();
    }
    let mut group = c.benchmark_group("ingest");
    group.throughput(Throughput::Elements(SERIES as u64));
    group.sample_size(20);
    group.measurement_time(Duration::from_secs(20));
    group.bench_function("scrape_50k_series_then_flush", |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            for _ in 0..iters {
                g.scrape(&store, round);
                round += 1;
                store.flush().unwrap();
            }
            start.elapsed()
        })
    });
    group.finish();
    let samples = SERIES as u64 * round as u64;
    store.checkpoint().unwrap();
    let disk = common::dir_bytes(dir.path());
    println!(
        "after {samples} samples: sled dir {disk} bytes = {:.2} B/sample (incl. sled overhead, before sled GC settles)",
        disk as f64 / samples as f64
    );
}

criterion_group!(benches, ingest);
criterion_main!(benches);
