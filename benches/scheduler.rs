#![allow(missing_docs)] // criterion_group! generates undocumented items
//! Scheduling throughput of the default profile, scoring every node (no sampling), on
//! synthetic clusters of 1k, 5k and 10k nodes with 30 pods each; plus the cost of a snapshot
//! update for one pod.
//!
//! Run: `cargo bench --bench scheduler` (numbers in benches/README.md).

use std::hint::black_box;
use std::sync::Arc;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use headroom::config::Config;
use headroom::plugins::build_framework;
use headroom::snapshot::{PodInfo, Snapshot};
use headroom::synthetic;
use rand::SeedableRng;
use rand::rngs::SmallRng;

fn decisions(c: &mut Criterion) {
    let config = Config::default();
    let fw = build_framework(&config.profiles[0]).unwrap();
    let mut group = c.benchmark_group("decision");
    group.sample_size(20);
    for &nodes in &[1_000usize, 5_000, 10_000] {
        let (n, p) = synthetic::cluster(nodes, 30, 42);
        let snap = Snapshot::build(n, p);
        let plain = PodInfo::new(Arc::new(synthetic::plain_pod("bench")));
        let anti = PodInfo::new(Arc::new(synthetic::anti_affinity_pod("bench-anti")));
        let mut rng = SmallRng::seed_from_u64(1);
        group.throughput(Throughput::Elements(1));
        group.bench_with_input(BenchmarkId::new("plain", nodes), &snap, |b, snap| {
            b.iter(|| {
                let (d, _) = fw.schedule(black_box(&plain), snap, &mut rng, false);
                assert!(d.node().is_some());
                d
            })
        });
        group.bench_with_input(
            BenchmarkId::new("anti-affinity", nodes),
            &snap,
            |b, snap| {
                b.iter(|| {
                    let (d, _) = fw.schedule(black_box(&anti), snap, &mut rng, false);
                    assert!(d.node().is_some());
                    d
                })
            },
        );
    }
    group.finish();
}

fn snapshot_update(c: &mut Criterion) {
    let mut group = c.benchmark_group("snapshot");
    let (n, p) = synthetic::cluster(5_000, 30, 42);
    let mut snap = Snapshot::build(n, p);
    let mut pod = synthetic::plain_pod("churn");
    pod.spec.as_mut().unwrap().node_name = Some("node-00042".into());
    let info = Arc::new(PodInfo::new(Arc::new(pod)));
    group.bench_function("add+remove pod (5k nodes)", |b| {
        b.iter(|| {
            snap.add_pod(info.clone(), "node-00042");
            snap.remove_pod("default", "churn", "uid-churn").unwrap();
        })
    });
    group.finish();
}

criterion_group!(benches, decisions, snapshot_update);
criterion_main!(benches);
