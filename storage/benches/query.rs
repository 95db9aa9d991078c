//! Range query of one series over 24 h at 15 s, and a full contiguous scan.
#![allow(missing_docs)]

mod common;

use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use headroom_storage::{Matcher, Store, StoreConfig};

const SERIES: usize = 1_000;
const ROUNDS: i64 = 5_760; // 24 h at 15 s

fn query(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), StoreConfig::default()).unwrap();
    let mut g = common::Gen::new(&store, SERIES, 2);
    for round in 0..ROUNDS {
        g.scrape(&store, round);
        if round % 40 == 0 {
            store.flush().unwrap();
        }
    }
    store.checkpoint().unwrap();
    let ids = g.ids.clone();
    let end = common::T0 + ROUNDS * common::STEP;

    let mut group = c.benchmark_group("query");
    group.throughput(Throughput::Elements(ROUNDS as u64));
    let mut k = 0usize;
    group.bench_function("range_24h_one_series", |b| {
        b.iter(|| {
            k = (k + 7) % ids.len();
            let q = store.query_range(ids[k], common::T0 - 10, end).unwrap();
            assert_eq!(q.len(), ROUNDS as usize);
            q
        })
    });
    group.throughput(Throughput::Elements(SERIES as u64 * ROUNDS as u64));
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(15));
    group.bench_function("scan_all_series_24h", |b| {
        b.iter(|| {
            let mut n = 0usize;
            store
                .for_each_series(&[], 0, i64::MAX, |_, s| {
                    n += s.len();
                    Ok(())
                })
                .unwrap();
            assert_eq!(n, SERIES * ROUNDS as usize);
            n
        })
    });
    group.finish();

    // One timed pass printed in plain numbers too.
    let t = Instant::now();
    let mut n = 0usize;
    store
        .for_each_series(
            &[Matcher::metric("container_cpu_usage_seconds_total")],
            0,
            i64::MAX,
            |_, s| {
                n += s.len();
                Ok(())
            },
        )
        .unwrap();
    let el = t.elapsed();
    println!(
        "scan cpu series: {n} samples in {el:?} = {:.1} M samples/s",
        n as f64 / el.as_secs_f64() / 1e6
    );
}

criterion_group!(benches, query);
criterion_main!(benches);
