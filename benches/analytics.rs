#![allow(missing_docs)] // criterion_group! generates undocumented items
//! Cost of the analytics refresh: builder profiles over 10k builders × 20 runs, and node
//! usage over 5k nodes × 15 min of 15 s samples (3 metrics, 900k rows), both from
//! in-memory columns (polars only) and from a temporary store (store reads + polars); the
//! usage and window samples of 10k running pods from the store.
//!
//! Also builder profiles from raw samples, 10M (and, with `HEADROOM_BENCH_100M=1`, 100M)
//! samples over 10k builders, with the peak RSS printed.
//!
//! Run: `cargo bench --bench analytics`.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use headroom::analytics::samples::{SampleColumns, profiles_from_samples};
use headroom::analytics::{
    AnalyticsConfig, NodeParams, NodeSamples, PerRun, ProfileParams, RunColumns, compute,
    node_usage, nodes::usage_from_samples, pods::pod_usage, profiles::profiles_from_columns,
};
use headroom_storage::{Labels, RunRecord, Store, StoreConfig, UsageSummary};

const BUILDERS: usize = 10_000;
const RUNS: usize = 20;
const NODES: usize = 5_000;
const STEP_MS: i64 = 15_000;
const SAMPLES: i64 = 60; // 15 min at 15 s
const NOW: i64 = 1_700_000_000_000;
const PODS: usize = 10_000;

fn runs_of(b: usize) -> Vec<RunRecord> {
    (0..RUNS)
        .map(|i| {
            let v = ((b * 31 + i * 7) % 100) as f64;
            let s = UsageSummary {
                mean: v / 2.0,
                p95: v,
                max: v * 1.5,
            };
            RunRecord {
                pod_uid: format!("{b}-{i}"),
                node: format!("n{}", b % NODES),
                start_ms: NOW - 1_000_000 + i as i64 * 1000,
                end_ms: NOW - 1_000_000 + i as i64 * 1000 + 500,
                cpu: s,
                memory: s,
            }
        })
        .collect()
}

fn profile_params() -> ProfileParams {
    ProfileParams {
        last_runs: RUNS,
        ended_after_ms: None,
        per_run: PerRun::P95,
    }
}

fn profiles(c: &mut Criterion) {
    let params = profile_params();
    let all: Vec<(String, Vec<RunRecord>)> = (0..BUILDERS)
        .map(|b| (format!("ns/Deployment/b{b}"), runs_of(b)))
        .collect();
    let mut group = c.benchmark_group("analytics");
    group.sample_size(10);
    group.bench_function("profiles_10k_builders_x20_runs_columns", |b| {
        b.iter(|| {
            let mut cols = RunColumns::new();
            for (name, runs) in &all {
                cols.push_runs(name, runs, &params);
            }
            let p = profiles_from_columns(cols, &params).unwrap();
            assert_eq!(p.len(), BUILDERS);
            black_box(p)
        })
    });
    group.finish();
}

fn samples() -> NodeSamples {
    let mut s = NodeSamples::new();
    for n in 0..NODES {
        let node = format!("n{n}");
        for i in 0..SAMPLES {
            let ts = NOW - (SAMPLES - 1 - i) * STEP_MS;
            let v = ((n * 13 + i as usize * 5) % 64) as f64;
            s.push_cpu(&node, ts, v / 8.0);
            s.push_memory(&node, ts, v * 1e8);
            s.push_fs_available(&node, ts, 5e10 - v * 1e6);
        }
        s.push_fs_capacity(&node, NOW, 1e11);
    }
    s
}

fn nodes(c: &mut Criterion) {
    let base = samples();
    let mut group = c.benchmark_group("analytics");
    group.sample_size(10);
    group.bench_function("node_usage_5k_nodes_columns", |b| {
        b.iter(|| {
            let u = usage_from_samples(base.clone(), 0.95).unwrap();
            assert_eq!(u.len(), NODES);
            black_box(u)
        })
    });

    // The same data through the store, as the refresh loop reads it.
    let store = Store::open_temporary(StoreConfig::default()).unwrap();
    for n in 0..NODES {
        let labels = Labels::new([("node", format!("n{n}"))]).unwrap();
        let metrics = [
            "node_cpu_usage_cores",
            "node_memory_working_set_bytes",
            "node_fs_available_bytes",
        ];
        append_window(&store, &labels, metrics, |i| {
            let v = ((n * 13 + i * 5) % 64) as f64;
            [v / 8.0, v * 1e8, 5e10 - v * 1e6]
        });
    }
    for b in 0..BUILDERS {
        for r in runs_of(b) {
            store.put_run(&format!("ns/Deployment/b{b}"), &r).unwrap();
        }
    }
    // 10k running pods of one container, sampled as the nodes: what each uses now and its
    // samples over the node window (what comes off its node's window once it ends).
    for p in 0..PODS {
        let labels = Labels::new([
            ("container", "main".to_string()),
            ("namespace", "ci".to_string()),
            ("node", format!("n{}", p % NODES)),
            ("pod", format!("build-{p}")),
        ])
        .unwrap();
        let metrics = [
            "container_cpu_usage_cores",
            "container_memory_working_set_bytes",
        ];
        append_window(&store, &labels, metrics, |i| {
            let v = ((p * 7 + i * 3) % 32) as f64;
            [v / 16.0, v * 5e7]
        });
    }
    store.flush().unwrap();
    let params = NodeParams {
        start_ms: NOW - 15 * 60 * 1000,
        end_ms: NOW,
        quantile: 0.95,
    };
    group.bench_function("node_usage_5k_nodes_store", |b| {
        b.iter(|| {
            let u = node_usage(&store, &params).unwrap();
            assert_eq!(u.len(), NODES);
            black_box(u)
        })
    });
    group.bench_function("pod_usage_10k_pods_store", |b| {
        b.iter(|| {
            let (u, w) = pod_usage(&store, NOW - 2 * 60 * 1000, NOW).unwrap();
            assert_eq!((u.len(), w.len()), (PODS, PODS));
            black_box((u, w))
        })
    });
    group.bench_function("compute_view_store", |b| {
        let config = AnalyticsConfig::default();
        b.iter(|| {
            let v = compute(&store, &config, NOW).unwrap();
            assert_eq!(v.builders.len(), BUILDERS);
            black_box(v)
        })
    });
    group.finish();
}

/// Appends `SAMPLES` samples `STEP_MS` apart, the last at `NOW`, to each of `metrics`
/// under `labels`: step `i`'s values are `values(i)`, in the metrics' order.
fn append_window<const M: usize>(
    store: &Store,
    labels: &Labels,
    metrics: [&str; M],
    values: impl Fn(usize) -> [f64; M],
) {
    let ids = metrics.map(|m| store.series_id(m, labels).unwrap());
    for i in 0..SAMPLES {
        let ts = NOW - (SAMPLES - 1 - i) * STEP_MS;
        for (id, v) in ids.iter().zip(values(i as usize)) {
            store.append_id(*id, ts, v).unwrap();
        }
    }
}

/// 10k builders × 20 runs × `per_run` samples.
fn sample_columns(per_run: usize) -> SampleColumns {
    let n = BUILDERS * RUNS * per_run;
    let mut c = SampleColumns {
        names: (0..BUILDERS).map(|b| format!("ns/Job/b{b}")).collect(),
        builder: Vec::with_capacity(n),
        run: Vec::with_capacity(n),
        cpu: Vec::with_capacity(n),
        memory: Vec::with_capacity(n),
    };
    for b in 0..BUILDERS {
        for r in 0..RUNS {
            for k in 0..per_run {
                let v = ((b * 31 + r * 7 + k * 13) % 1000) as f64;
                c.builder.push(b as u32);
                c.run.push(r as u32);
                c.cpu.push(v / 100.0);
                c.memory.push(v * 1e7);
            }
        }
    }
    c
}

/// Peak resident memory of this process so far (Linux `VmHWM`), for the README.
fn peak_rss() -> String {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM"))
                .map(str::to_string)
        })
        .unwrap_or_else(|| "VmHWM: unknown".into())
}

/// The targets: profiles over 10M samples / 10k builders ≤ 50 ms, over 100M ≤ 1 s.
/// Input columns are cloned outside the timed part (`iter_batched`).
fn profiles_from_raw_samples(c: &mut Criterion) {
    let mut group = c.benchmark_group("analytics");
    group.sample_size(10);
    for (label, per_run) in [("10M", 50usize), ("100M", 500)] {
        if label == "100M" && std::env::var_os("HEADROOM_BENCH_100M").is_none() {
            eprintln!("skipping 100M samples (set HEADROOM_BENCH_100M=1; needs ~6 GiB)");
            continue;
        }
        let cols = sample_columns(per_run);
        group.bench_function(format!("profiles_from_samples_{label}"), |b| {
            b.iter_batched(
                || cols.clone(),
                |cols| {
                    let p = profiles_from_samples(cols, PerRun::P95).unwrap();
                    assert_eq!(p.len(), BUILDERS);
                    black_box(p)
                },
                criterion::BatchSize::PerIteration,
            )
        });
        eprintln!("after {label}: {}", peak_rss());
    }
    group.finish();
}

criterion_group!(benches, profiles_from_raw_samples, profiles, nodes);
criterion_main!(benches);
