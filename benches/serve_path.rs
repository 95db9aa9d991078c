#![allow(missing_docs)] // criterion_group! generates undocumented items
//! One decision as `headroom serve` makes it, in process, at 5,000 and 15,000 nodes: the
//! engine's scheduling loop (the cycle on the leased snapshot, then the assumption, the bind
//! annotation and the decision inputs as the lease settles), a bind (instant: no API server), and the engine's decision
//! sink running beside it as under `serve` (metrics, the decision log, the store's decision
//! log on sled through `spawn_blocking`). Everything but the API server's round trips and
//! the reporter's events: what a decision costs outside the cycle shows as the difference
//! from `decision/plain/N/1t` in `benches/scheduler.rs`.
//!
//! Each sample schedules a batch of plain pods (500m / 1Gi) and waits until the sink has
//! logged the batch's last decision. Besides criterion's estimate it prints pods/s over a
//! batch of 2,000 and how many times the cache had to copy its whole snapshot
//! (`headroom_scheduler_snapshot_copies_total`).
//!
//! Run: `cargo bench --bench serve_path` (numbers in benches/README.md).

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use headroom::config::Config;
use headroom::config::serve::ServeConfig;
use headroom::engine::{Drive, Engine, Parts};
use headroom::scheduling_loop::{InstantBinder, SchedulingLoop};
use headroom_scheduler::clock::Clock;
use headroom_scheduler::key::PodKey;
use headroom_scheduler::synthetic;

struct Setup {
    rt: tokio::runtime::Runtime,
    engine: Arc<Engine>,
    lp: SchedulingLoop,
    next: std::cell::Cell<usize>,
    _dir: tempfile::TempDir,
}

fn setup(nodes: usize) -> Setup {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let store = headroom_storage::Store::open(dir.path(), Default::default()).expect("store");
    let mut config = Config::default();
    config.scheduler.seed = Some(1);
    let engine = Engine::new(config, Parts::new(Clock::wall(), store)).expect("engine");
    let (n, _) = synthetic::cluster(nodes, 0, 42);
    engine.cluster().replace_nodes(n);
    let lp = rt.block_on(async {
        let running = engine.start(Drive::Manual, None).expect("start");
        // The sink runs until the runtime ends; the bench never stops it.
        std::mem::forget(running);
        engine.scheduling_loop(
            Arc::new(InstantBinder::new()),
            true,
            headroom::kube::events::bind_annotator(&ServeConfig::default()),
        )
    });
    Setup {
        rt,
        engine,
        lp,
        next: std::cell::Cell::new(0),
        _dir: dir,
    }
}

/// Queues `n` plain pods, schedules them and waits until the sink has logged the last.
fn batch(s: &Setup, n: usize) -> Duration {
    let first = s.next.get();
    s.next.set(first + n);
    let pods: Vec<_> = (first..first + n)
        .map(|i| {
            let mut p = synthetic::plain_pod(&format!("p-{i}"));
            p.spec.as_mut().expect("spec").scheduler_name = Some("headroom".into());
            p
        })
        .collect();
    let last = PodKey::new("default", format!("p-{}", first + n - 1));
    let start = Instant::now();
    for p in pods {
        s.engine.cluster().apply_pod(p);
    }
    s.rt.block_on(async {
        s.lp.run_until_settled().await;
        while s.engine.api_state().decisions().by_pod(&last).is_none() {
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
    });
    start.elapsed()
}

fn serve_path(c: &mut Criterion) {
    let mut group = c.benchmark_group("serve-path");
    group.sample_size(10);
    for nodes in [5_000usize, 15_000] {
        let s = setup(nodes);
        batch(&s, 200);
        let t = batch(&s, 2_000);
        let copies = s.engine.scheduler().cache().copies().get();
        println!(
            "serve path, {nodes} nodes: 2,000 pods in {:.2} s = {:.0} pods/s ({:.1} µs a pod); whole-snapshot copies so far: {copies}",
            t.as_secs_f64(),
            2_000.0 / t.as_secs_f64(),
            t.as_secs_f64() * 1e6 / 2_000.0
        );
        group.bench_function(format!("plain/{nodes}/100 pods"), |b| {
            b.iter_custom(|iters| (0..iters).map(|_| batch(&s, 100)).sum())
        });
    }
    group.finish();
}

criterion_group!(benches, serve_path);
criterion_main!(benches);
