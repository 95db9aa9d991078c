#![allow(missing_docs)] // criterion_group! generates undocumented items
//! Scheduling throughput of the default profile, scoring every node (no sampling), on
//! synthetic clusters (`headroom_scheduler::synthetic::Case`): a plain pod at 500, 5k and 15k nodes;
//! inter-pod anti-affinity, topology spread and the full default profile with usage data
//! (every real-usage plugin active) at 5k nodes, beside the same pod without usage data
//! (`usage-none`, the reference of issue #73's ≤ 1.5× target); each on one thread and on two
//! (`/1t`, `/2t`: `Framework::with_parallelism`). Besides criterion's estimates it prints
//! p50/p99 over 2,000 timed decisions per case; the usage case again with Fragmentation on
//! (off by default) and a full shape mix. Plus the cost of a snapshot update, and of
//! the cold-start calibration each usage refresh computes (`usage.coldStart`).
//!
//! Run: `cargo bench --bench scheduler` (numbers in benches/README.md);
//! `HEADROOM_BENCH_FILTER=plain cargo bench --bench scheduler` runs the cases whose id
//! contains `plain` only.

use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use criterion::measurement::WallTime;
use criterion::{
    BenchmarkGroup, BenchmarkId, Criterion, Throughput, criterion_group, criterion_main,
};
use headroom::config::Config;
use headroom_scheduler::framework::Framework;
use headroom_scheduler::key::PodKey;
use headroom_scheduler::plugins::build_framework;
use headroom_scheduler::snapshot::{PodInfo, Snapshot};
use headroom_scheduler::synthetic::{self, Case};
use rand::SeedableRng;
use rand::rngs::SmallRng;

/// The allocator `headroom serve` runs with (`src/main.rs`): a decision allocates its
/// columns and lists afresh, and glibc's malloc, which consolidates and returns large
/// freed chunks, made up a fifth of a usage decision's time here, none of it in `serve`.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const CASES: [(Case, usize); 8] = [
    (Case::Plain, 500),
    (Case::Plain, 5_000),
    (Case::Plain, 15_000),
    (Case::AntiAffinity, 5_000),
    (Case::Spread, 5_000),
    (Case::Usage, 5_000),
    // The same decision with nothing measured: issue #73's reference for the usage case.
    (Case::UsageNone, 5_000),
    // Upstream's PreemptionBasic size; the decision is a nomination.
    (Case::Preemption, 1_000),
];

/// The decision did what its case asks: a node, or for [`Case::Preemption`] a nomination.
fn decided(d: &headroom_scheduler::framework::Decision) -> bool {
    d.node().is_some() || d.nomination.is_some()
}

fn framework(threads: usize) -> Framework {
    build_framework(&Config::default().profiles[0])
        .unwrap()
        .with_parallelism(threads)
}

fn percentiles(name: &str, fw: &Framework, pod: &PodInfo, snap: &Snapshot) {
    let mut rng = SmallRng::seed_from_u64(2);
    for _ in 0..50 {
        black_box(fw.schedule(pod, snap, &mut rng, false));
    }
    let n = 2_000;
    let mut t: Vec<f64> = (0..n)
        .map(|_| {
            let s = Instant::now();
            let (d, _) = fw.schedule(black_box(pod), snap, &mut rng, false);
            let e = s.elapsed().as_secs_f64() * 1e6;
            assert!(decided(&d));
            e
        })
        .collect();
    t.sort_by(|a, b| a.total_cmp(b));
    println!(
        "decision {name}: {n} decisions: mean {:.1} µs, p50 {:.1} µs, p99 {:.1} µs, max {:.1} µs",
        t.iter().sum::<f64>() / n as f64,
        t[n / 2],
        t[n * 99 / 100],
        t[n - 1]
    );
}

fn decisions(c: &mut Criterion) {
    let mut group = c.benchmark_group("decision");
    group.sample_size(20);
    group.throughput(Throughput::Elements(1));
    for (case, nodes) in CASES {
        let snap = case.snapshot(nodes);
        let pod = PodInfo::new(Arc::new(case.pod()));
        for threads in [1usize, 2] {
            let fw = framework(threads);
            let id = format!("{}/{nodes}/{threads}t", case.name());
            if std::env::var("HEADROOM_BENCH_FILTER").is_ok_and(|f| !id.contains(&f)) {
                continue;
            }
            let bench = BenchmarkId::new(case.name(), format!("{nodes}/{threads}t"));
            bench_decision(&mut group, bench, &id, &fw, &pod, &snap);
        }
    }
    group.finish();
}

/// One decision case: [`percentiles`] printed, then criterion's estimate as `bench`.
fn bench_decision(
    group: &mut BenchmarkGroup<'_, WallTime>,
    bench: BenchmarkId,
    id: &str,
    fw: &Framework,
    pod: &PodInfo,
    snap: &Snapshot,
) {
    percentiles(id, fw, pod, snap);
    let mut rng = SmallRng::seed_from_u64(1);
    group.bench_with_input(bench, snap, |b, snap| {
        b.iter(|| {
            let (d, _) = fw.schedule(black_box(pod), snap, &mut rng, false);
            assert!(decided(&d));
            d
        })
    });
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
            snap.remove_pod(&PodKey::new("default", "churn"), "uid-churn")
                .unwrap();
        })
    });
    // What one change costs when a reader still holds the scheduler's snapshot (the copy
    // `Arc::make_mut` makes; `headroom_scheduler_snapshot_copies_total` counts them).
    group.sample_size(10);
    for nodes in [5_000usize, 15_000] {
        let (n, p) = synthetic::cluster(nodes, 2, 42);
        let snap = Snapshot::build(n, p);
        group.bench_function(format!("copy ({nodes} nodes, {} pods)", nodes * 2), |b| {
            b.iter(|| std::hint::black_box(snap.clone()))
        });
    }
    group.finish();
}

/// The calibration a usage refresh computes for pods without a profile (outside the
/// cache's lock), over 5k nodes of 30 pods each, every pod's builder profiled (the most
/// work it can have): over all pods (`coldStart: calibrated`, the default) and per
/// container images too (`image`).
fn calibration(c: &mut Criterion) {
    use headroom_scheduler::usage::{ColdStart, UsagePolicy, derive};
    let mut group = c.benchmark_group("calibrate");
    group.sample_size(10);
    let (n, p) = synthetic::cluster(5_000, 30, 42);
    let snap = Snapshot::build(n, p);
    let identity = headroom_collectors::IdentityConfig::default();
    let mut view = synthetic::usage_view(5_000, 0, 1);
    let profile = view.builders.values().next().expect("a profile").clone();
    for node in snap.nodes() {
        for pod in &node.pods {
            let b = headroom_collectors::builder_identity(&pod.pod.metadata, &identity);
            view.builders
                .insert(b.as_str().to_string(), profile.clone());
        }
    }
    let pods = snap.nodes().iter().map(|n| n.pods.len()).sum::<usize>();
    for cold in [ColdStart::Calibrated, ColdStart::Image] {
        let policy = UsagePolicy {
            cold_start: cold,
            ..UsagePolicy::default()
        };
        let c = derive(&snap, &view, &policy, &identity, false)
            .calibration
            .expect("profiled pods");
        assert_eq!(c.all.pods, pods);
        group.bench_function(format!("{cold:?} (5k nodes, {pods} pods)"), |b| {
            b.iter(|| black_box(derive(&snap, &view, &policy, &identity, false)))
        });
    }
    group.finish();
}

/// The usage case with Fragmentation on (off by default) and a full shape mix
/// ([`MAX_SHAPES`] shapes of 250m–16 CPU, 512 MiB–32 GiB): what the score adds to a
/// decision, each feasible node read against every shape before and after the pod.
fn fragmentation(c: &mut Criterion) {
    use headroom_scheduler::usage_context::shapes::{MAX_SHAPES, Shape, ShapeMix};
    let shapes: Vec<Shape> = (0..MAX_SHAPES as i64)
        .map(|i| Shape {
            milli_cpu: 250 * (1 + i % 64),
            memory: (512 << 20) * (1 + (i * 7) % 64),
            weight: (MAX_SHAPES as i64 - i) as f64,
        })
        .collect();
    let total = shapes.iter().map(|s| s.weight).sum();
    let mix = Arc::new(ShapeMix { shapes, total });
    usage_variant(
        c,
        "usage+fragmentation",
        "profiles: [{plugins: {Fragmentation: {enabled: true}}}]",
        |snap| snap.usage_mut().shapes = mix,
        |d| {
            assert!(
                !d.skipped_scores.contains(&"Fragmentation"),
                "Fragmentation must score here"
            )
        },
    );
}

/// The usage case while big builds run (RealHeadroom's `keepWhole`, on by default, with
/// 50 big builds of an hour and small ones of ten minutes: 11 nodes kept whole): what
/// ranking the feasible nodes by free memory adds to a decision.
fn keep_whole(c: &mut Criterion) {
    use headroom_scheduler::usage_context::WholeNeed;
    usage_variant(
        c,
        "usage+keepWhole",
        "profiles: [{}]",
        |snap| {
            snap.usage_mut().whole = WholeNeed {
                big_running: 50,
                big_run_s: 3600.0,
                small_run_s: 600.0,
                largest_memory: 1e15,
            }
        },
        |d| {
            let kept = d
                .scores
                .iter()
                .find(|c| c.plugin == "RealHeadroom")
                .and_then(|c| c.details.as_ref())
                .map(|d| {
                    d.iter()
                        .flatten()
                        .filter(|s| s.starts_with("kept whole"))
                        .count()
                });
            assert_eq!(kept, Some(11), "keepWhole must keep 11 nodes here")
        },
    );
}

/// The usage case at 5,000 nodes under profile `config`, its snapshot changed by `tweak`,
/// the decision (explained) checked by `check` before it is measured, unexplained, as
/// `name/5000/1t`.
fn usage_variant(
    c: &mut Criterion,
    name: &str,
    config: &str,
    tweak: impl FnOnce(&mut Snapshot),
    check: impl FnOnce(&headroom_scheduler::framework::Decision),
) {
    let id = format!("{name}/5000/1t");
    if std::env::var("HEADROOM_BENCH_FILTER").is_ok_and(|f| !id.contains(&f)) {
        return;
    }
    let mut group = c.benchmark_group("decision");
    group.sample_size(20);
    group.throughput(Throughput::Elements(1));
    let mut snap = Case::Usage.snapshot(5_000);
    tweak(&mut snap);
    let config = Config::from_yaml(config, "bench").expect("a valid profile");
    let fw = build_framework(&config.profiles[0]).unwrap();
    let pod = PodInfo::new(Arc::new(Case::Usage.pod()));
    let (d, _) = fw.schedule(&pod, &snap, &mut SmallRng::seed_from_u64(0), true);
    check(&d);
    let bench = BenchmarkId::new(name, "5000/1t");
    bench_decision(&mut group, bench, &id, &fw, &pod, &snap);
    group.finish();
}

criterion_group!(
    benches,
    decisions,
    fragmentation,
    keep_whole,
    snapshot_update,
    calibration
);
criterion_main!(benches);
