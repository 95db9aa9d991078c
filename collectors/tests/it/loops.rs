//! The collection loop end to end: it keeps running through a hung kubelet and a failing
//! one, counts the errors, detects a finished builder run and records its placement.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::common::{Fixture, Reply, fast_schedule};
use headroom_collectors::config::{KubeletConfig, KubeletEndpoint, NodeTarget};
use headroom_collectors::{Collectors, CollectorsConfig, MemorySink, SourceKind, StaticPods};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

fn summary(node: &str, second: u32, pods: &[(&str, u64)]) -> String {
    let time = format!("2024-05-01T10:00:{second:02}Z");
    let pods: Vec<serde_json::Value> = pods
        .iter()
        .map(|(name, nano)| {
            serde_json::json!({
                "podRef": {"name": name, "namespace": "ci", "uid": format!("uid-{name}")},
                "containers": [{"name": "build",
                    "cpu": {"time": time, "usageNanoCores": nano},
                    "memory": {"time": time, "workingSetBytes": nano / 10}}]
            })
        })
        .collect();
    serde_json::json!({
        "node": {"nodeName": node, "cpu": {"time": time, "usageNanoCores": 1_000_000_000u64}},
        "pods": pods
    })
    .to_string()
}

fn pod(name: &str, builder: &str) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("ci".into()),
            uid: Some(format!("uid-{name}")),
            annotations: Some([("headroom.io/builder".to_string(), builder.to_string())].into()),
            ..Default::default()
        },
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loop_survives_faults_and_records_runs() {
    let started = Instant::now();
    let b_gone = Arc::new(AtomicBool::new(false));
    let gone = b_gone.clone();
    let server = Fixture::start(move |path| {
        // A fresh observation time each request so every cycle stores new samples.
        let second = (started.elapsed().as_millis() / 100 % 60) as u32;
        if path.contains("/node-hang/") {
            Reply::hang()
        } else if path.contains("/node-500/") {
            Reply::status(500, "boom")
        } else if gone.load(Ordering::SeqCst) {
            Reply::ok(summary("node-1", second, &[("a", 500_000_000)]))
        } else {
            Reply::ok(summary(
                "node-1",
                second,
                &[("a", 500_000_000), ("b", 2_000_000_000)],
            ))
        }
    })
    .await;
    let config = CollectorsConfig {
        kubelet: Some(KubeletConfig {
            nodes: ["node-1", "node-hang", "node-500"]
                .iter()
                .map(|n| NodeTarget::Name(n.to_string()))
                .collect(),
            endpoint: KubeletEndpoint::ApiServerProxy {
                api_server: server.url(),
            },
            http: Default::default(),
            schedule: fast_schedule(),
        }),
        ..Default::default()
    };
    let lister = Arc::new(StaticPods(vec![
        pod("a", "builder-a"),
        pod("b", "android-env"),
    ]));
    let collectors = Collectors::new(config).unwrap().with_pod_lister(lister);
    let metrics = collectors.metrics().clone();
    let sink = MemorySink::new();

    let shutdown = {
        let metrics = metrics.clone();
        let sink = &sink;
        async move {
            // Let b run for a few cycles, then make it disappear, then wait for its run.
            while metrics.cycles(SourceKind::Kubelet) < 3 {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            b_gone.store(true, Ordering::SeqCst);
            let deadline = Instant::now() + Duration::from_secs(20);
            while sink.runs().is_empty() && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    let run_started = Instant::now();
    collectors.run(&sink, shutdown).await.unwrap();
    // Shutdown is prompt even though a kubelet hangs.
    assert!(run_started.elapsed() < Duration::from_secs(25));

    let runs = sink.runs();
    assert_eq!(runs.len(), 1, "{runs:?}");
    let (builder, run) = &runs[0];
    assert_eq!(builder, "android-env");
    assert_eq!(run.pod_uid, "uid-b");
    assert_eq!(run.node, "node-1");
    assert!(run.end_ms >= run.start_ms);
    assert!((run.cpu.mean - 2.0).abs() < 1e-9 && run.cpu.max == 2.0 && run.cpu.p95 == 2.0);
    assert_eq!(run.memory.max, 200_000_000.0);
    assert_eq!(sink.placements("android-env"), vec!["node-1".to_string()]);
    assert!(
        sink.placements("builder-a").is_empty(),
        "a is still running"
    );

    // The loop kept cycling through the faults, and counted each.
    let cycles = metrics.cycles(SourceKind::Kubelet);
    assert!(cycles >= 5, "{cycles} cycles");
    assert!(metrics.errors(SourceKind::Kubelet, "timeout") >= cycles - 1);
    assert!(metrics.errors(SourceKind::Kubelet, "http_status") >= cycles - 1);
    assert_eq!(metrics.runs(), 1);
    assert!(metrics.samples(SourceKind::Kubelet) > 0);
    assert!(
        sink.find("container_cpu_usage_cores", &[("pod", "a")])[0]
            .1
            .len()
            >= 3
    );

    // The registry exposes the documented names.
    let mut registry = prometheus_client::registry::Registry::default();
    metrics.register(&mut registry);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    for name in [
        "headroom_collector_errors_total{source=\"kubelet\",reason=\"timeout\"}",
        "headroom_collector_samples_total{source=\"kubelet\"}",
        "headroom_collector_cycles_total{source=\"kubelet\"}",
        "headroom_collector_runs_total",
        "headroom_collector_scrape_duration_seconds_bucket",
    ] {
        assert!(text.contains(name), "{name} missing from:\n{text}");
    }
}

#[tokio::test]
async fn run_without_sources_is_a_config_error() {
    let err =
        headroom_collectors::run(&CollectorsConfig::default(), &MemorySink::new(), async {}).await;
    assert!(err.is_err());
}
