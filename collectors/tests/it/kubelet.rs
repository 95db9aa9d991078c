//! Kubelet summary source: real captures, realistic fixtures served on loopback, faults.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::common::{Fixture, Reply, fast_schedule, fixture};
use headroom_collectors::config::{KubeletConfig, KubeletEndpoint, NodeTarget};
use headroom_collectors::kubelet::parse_summary;
use headroom_collectors::{Collectors, CollectorsConfig, MemorySink, SourceKind, collect_once};

const GIB: f64 = (1u64 << 30) as f64;
const MIB: f64 = (1u64 << 20) as f64;

fn kubelet_config(api_server: &str, nodes: &[&str]) -> CollectorsConfig {
    CollectorsConfig {
        kubelet: Some(KubeletConfig {
            nodes: nodes
                .iter()
                .map(|n| NodeTarget::Name(n.to_string()))
                .collect(),
            endpoint: KubeletEndpoint::ApiServerProxy {
                api_server: api_server.to_owned(),
            },
            http: Default::default(),
            schedule: fast_schedule(),
        }),
        ..Default::default()
    }
}

/// Serves `/api/v1/nodes/<node>/proxy/stats/summary` from fixture files named by node.
async fn proxy_serving(files: &'static [(&'static str, &'static str)]) -> Fixture {
    Fixture::start(move |path| {
        for (node, file) in files {
            if path == format!("/api/v1/nodes/{node}/proxy/stats/summary") {
                return Reply::ok(fixture(file));
            }
        }
        Reply::status(404, "not found")
    })
    .await
}

#[test]
fn real_captures_parse_with_exact_numbers() {
    let gke = parse_summary(&fixture("real/gke-2019-datadog.json")).expect("gke capture");
    assert_eq!(gke.node.node_name, "gke-lenaic-pool-1-1c8b424c-wnkn");
    assert_eq!(gke.pods.len(), 10);
    assert_eq!(
        gke.pods.iter().map(|p| p.containers.len()).sum::<usize>(),
        17
    );
    assert!(gke.node.cpu.as_ref().unwrap().usage_nano_cores.is_some());
    assert!(gke.pods.iter().any(|p| p.ephemeral_storage.is_some()));

    let win = parse_summary(&fixture("real/windows-datadog.json")).expect("windows capture");
    assert_eq!(win.node.node_name, "ip-172-29-160-189.ec2.internal");
    assert_eq!(win.pods.len(), 2);
    assert_eq!(
        win.pods.iter().map(|p| p.containers.len()).sum::<usize>(),
        6
    );
    let no_cpu = win
        .pods
        .iter()
        .flat_map(|p| &p.containers)
        .filter(|c| c.cpu.as_ref().and_then(|c| c.usage_nano_cores).is_none())
        .count();
    assert_eq!(no_cpu, 1, "one Windows container has no usageNanoCores");

    let beats = parse_summary(&fixture("real/beats.json")).expect("beats capture");
    assert_eq!(beats.pods.len(), 1);
    assert!(
        beats.pods[0].cpu.is_none(),
        "2017 schema has no pod-level cpu"
    );
    assert!(beats.node.fs.as_ref().unwrap().time.is_none());

    let multi =
        parse_summary(&fixture("real/beats-multiple-containers.json")).expect("beats multi");
    assert_eq!(multi.pods[0].containers.len(), 2);
    // 2^64-1 must survive exactly.
    assert_eq!(multi.node.fs.as_ref().unwrap().inodes_free, Some(u64::MAX));
    assert_eq!(
        multi
            .node
            .runtime
            .as_ref()
            .unwrap()
            .image_fs
            .as_ref()
            .unwrap()
            .inodes_free,
        Some(18_446_744_073_709_551_615)
    );
}

#[tokio::test]
async fn real_captures_collected_through_the_api_server_proxy() {
    static FILES: &[(&str, &str)] = &[
        ("gke", "real/gke-2019-datadog.json"),
        ("win", "real/windows-datadog.json"),
        ("beats", "real/beats.json"),
        ("beats-multi", "real/beats-multiple-containers.json"),
    ];
    let server = proxy_serving(FILES).await;
    let sink = MemorySink::new();
    let report = collect_once(
        &kubelet_config(&server.url(), &["gke", "win", "beats", "beats-multi"]),
        &sink,
    )
    .await
    .expect("config");
    let k = report.source(SourceKind::Kubelet).unwrap();
    assert!(k.errors.is_empty(), "{:?}", k.errors);
    assert_eq!(k.requests, 4);

    // The GKE node's values, read back from the sink, are the capture's numbers.
    let gke = parse_summary(&fixture("real/gke-2019-datadog.json")).unwrap();
    let node = gke.node.node_name.as_str();
    let cpu = gke.node.cpu.as_ref().unwrap();
    let (ts, v) = sink
        .latest("node_cpu_usage_cores", &[("node", node)])
        .unwrap();
    assert_eq!(v, cpu.usage_nano_cores.unwrap() as f64 / 1e9);
    assert_eq!(
        ts,
        chrono::DateTime::parse_from_rfc3339(cpu.time.as_deref().unwrap())
            .unwrap()
            .timestamp_millis()
    );
    let fs = gke.node.fs.as_ref().unwrap();
    assert_eq!(
        sink.latest("node_fs_capacity_bytes", &[("node", node)])
            .unwrap()
            .1,
        fs.capacity_bytes.unwrap() as f64
    );
    let pod = &gke.pods[0];
    for c in &pod.containers {
        if let Some(ws) = c.memory.as_ref().and_then(|m| m.working_set_bytes) {
            let got = sink
                .latest(
                    "container_memory_working_set_bytes",
                    &[
                        ("pod", &pod.pod_ref.name),
                        ("container", &c.name),
                        ("node", node),
                    ],
                )
                .unwrap();
            assert_eq!(got.1, ws as f64);
        }
    }
    // Windows: 6 containers but one without CPU → 5 cpu series on that node.
    let win_cpu = sink.find(
        "container_cpu_usage_cores",
        &[("node", "ip-172-29-160-189.ec2.internal")],
    );
    assert_eq!(win_cpu.len(), 5);
    // 2017 schema: fs without time is stamped with the fetch time, not dropped.
    assert!(
        sink.latest(
            "node_fs_available_bytes",
            &[("node", "gke-beats-default-pool-a5b33e2e-hdww")]
        )
        .is_some()
    );
}

#[tokio::test]
async fn node_with_30_pods_init_and_sidecar_and_missing_fields() {
    static FILES: &[(&str, &str)] = &[
        ("node-30", "node-30-pods.json"),
        ("node-sc", "init-sidecar.json"),
        ("node-sparse", "missing-fields.json"),
    ];
    let server = proxy_serving(FILES).await;
    let sink = MemorySink::new();
    let report = collect_once(
        &kubelet_config(&server.url(), &["node-30", "node-sc", "node-sparse"]),
        &sink,
    )
    .await
    .unwrap();
    assert!(report.errors() == 0, "{report:?}");

    // node-30: node series and 30 pods with known values.
    assert_eq!(
        sink.latest("node_cpu_usage_cores", &[("node", "node-30")])
            .unwrap()
            .1,
        12.5
    );
    assert_eq!(
        sink.latest("node_memory_available_bytes", &[("node", "node-30")])
            .unwrap()
            .1,
        8.0 * GIB
    );
    assert_eq!(
        sink.latest("node_memory_working_set_bytes", &[("node", "node-30")])
            .unwrap()
            .1,
        24.0 * GIB
    );
    assert_eq!(
        sink.latest("node_fs_available_bytes", &[("node", "node-30")])
            .unwrap()
            .1,
        100.0 * GIB
    );
    assert_eq!(
        sink.latest("node_imagefs_capacity_bytes", &[("node", "node-30")])
            .unwrap()
            .1,
        100.0 * GIB
    );
    assert_eq!(
        sink.find("container_cpu_usage_cores", &[("node", "node-30")])
            .len(),
        30
    );
    for i in 0..30 {
        let pod = format!("build-{i}");
        let n = f64::from(i + 1);
        let m = [
            ("namespace", "ci"),
            ("pod", pod.as_str()),
            ("container", "build"),
        ];
        let cpu = sink.latest("container_cpu_usage_cores", &m).unwrap().1;
        assert!((cpu - n * 0.1).abs() < 1e-9, "{pod} cpu {cpu}");
        assert_eq!(
            sink.latest("container_memory_working_set_bytes", &m)
                .unwrap()
                .1,
            n * 64.0 * MIB
        );
        assert_eq!(
            sink.latest("pod_ephemeral_storage_used_bytes", &[("pod", pod.as_str())])
                .unwrap()
                .1,
            n * MIB
        );
    }
    let ts = sink
        .latest("node_cpu_usage_cores", &[("node", "node-30")])
        .unwrap()
        .0;
    assert_eq!(
        ts, 1_714_557_600_000,
        "observed-at time is the kubelet's stats time"
    );

    // init + sidecar: the terminated init container has no stats and no series.
    let sc = |c: &str| {
        sink.latest(
            "container_cpu_usage_cores",
            &[("pod", "android-build-7x2kq"), ("container", c)],
        )
    };
    assert_eq!(sc("istio-proxy").unwrap().1, 0.05);
    assert_eq!(sc("build").unwrap().1, 2.0);
    assert!(sc("init-clone").is_none());
    assert_eq!(
        sink.latest(
            "pod_ephemeral_storage_used_bytes",
            &[("pod", "android-build-7x2kq")]
        )
        .unwrap()
        .1,
        700.0 * MIB
    );

    // Missing fields: what is there is stored, the rest is skipped without error.
    assert_eq!(
        sink.latest("node_memory_working_set_bytes", &[("node", "node-sparse")])
            .unwrap()
            .1,
        5.0 * GIB
    );
    assert!(
        sink.latest("node_cpu_usage_cores", &[("node", "node-sparse")])
            .is_none()
    );
    assert_eq!(
        sink.latest("container_memory_working_set_bytes", &[("pod", "no-cpu")])
            .unwrap()
            .1,
        MIB
    );
    assert_eq!(
        sink.latest("container_cpu_usage_cores", &[("pod", "no-uid")])
            .unwrap()
            .1,
        0.25
    );
    assert_eq!(
        sink.latest("pod_ephemeral_storage_used_bytes", &[("pod", "no-uid")])
            .unwrap()
            .1,
        4096.0
    );
}

#[tokio::test]
async fn read_only_port_and_template_endpoints() {
    let server = Fixture::start(|path| match path {
        "/stats/summary" => Reply::ok(fixture("init-sidecar.json")),
        _ => Reply::status(404, ""),
    })
    .await;
    let mut config = kubelet_config("http://unused", &[]);
    let k = config.kubelet.as_mut().unwrap();
    k.nodes = vec![NodeTarget::Name("127.0.0.1".into())];
    k.endpoint = KubeletEndpoint::ReadOnlyPort {
        port: server.addr.port(),
        scheme: "http".into(),
    };
    let sink = MemorySink::new();
    let report = collect_once(&config, &sink).await.unwrap();
    assert_eq!(report.errors(), 0, "{report:?}");
    // The node is named by the summary's nodeName, not the address polled.
    assert!(
        sink.latest("node_cpu_usage_cores", &[("node", "node-sc")])
            .is_some()
    );

    let k = config.kubelet.as_mut().unwrap();
    k.endpoint = KubeletEndpoint::Template {
        url: format!("http://{{address}}:{}/stats/summary", server.addr.port()),
    };
    let report = collect_once(&config, &MemorySink::new()).await.unwrap();
    assert_eq!(report.errors(), 0, "{report:?}");
}

#[tokio::test]
async fn faults_are_counted_and_stored_data_kept() {
    // node-ok answers; node-hang never answers; node-500 fails; node-bad sends garbage.
    let mode = Arc::new(AtomicUsize::new(0));
    let m = mode.clone();
    let server = Fixture::start(move |path| {
        if path.contains("/node-hang/") {
            Reply::hang()
        } else if path.contains("/node-500/") {
            Reply::status(500, "internal error")
        } else if path.contains("/node-bad/") {
            Reply::ok(
                "{\"node\": {\"nodeName\": \"node-bad\", \"cpu\": {\"usageNanoCores\": \"lots\"",
            )
        } else if m.load(Ordering::SeqCst) == 0 {
            Reply::ok(fixture("init-sidecar.json"))
        } else {
            Reply::status(503, "kubelet going down")
        }
    })
    .await;
    let config = kubelet_config(
        &server.url(),
        &["node-ok", "node-hang", "node-500", "node-bad"],
    );
    let mut collectors = Collectors::new(config).unwrap();
    let sink = MemorySink::new();

    let started = Instant::now();
    let report = collectors.collect_once(&sink).await;
    // The hung kubelet costs at most timeout × (retries + 1) plus backoff, not forever.
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    let k = report.source(SourceKind::Kubelet).unwrap();
    let reasons: Vec<_> = k
        .errors
        .iter()
        .map(|e| (e.subject.as_str(), e.reason))
        .collect();
    assert!(reasons.contains(&("node-hang", "timeout")), "{reasons:?}");
    assert!(
        reasons.contains(&("node-500", "http_status")),
        "{reasons:?}"
    );
    assert!(reasons.contains(&("node-bad", "decode")), "{reasons:?}");
    assert_eq!(k.errors.len(), 3);
    let metrics = collectors.metrics().clone();
    assert_eq!(metrics.errors(SourceKind::Kubelet, "timeout"), 1);
    assert_eq!(metrics.errors(SourceKind::Kubelet, "http_status"), 1);
    assert_eq!(metrics.errors(SourceKind::Kubelet, "decode"), 1);
    let before = sink.series();
    assert!(!before.is_empty());

    // Now the good node fails too; a second cycle stores nothing new and loses nothing.
    mode.store(1, Ordering::SeqCst);
    let report = collectors.collect_once(&sink).await;
    assert_eq!(report.source(SourceKind::Kubelet).unwrap().errors.len(), 4);
    assert_eq!(sink.series(), before);
    assert_eq!(metrics.errors(SourceKind::Kubelet, "http_status"), 3);
    assert_eq!(metrics.cycles(SourceKind::Kubelet), 2);

    // Recovery: the same samples (same kubelet stats time) are not stored twice.
    mode.store(0, Ordering::SeqCst);
    let report = collectors.collect_once(&sink).await;
    let k = report.source(SourceKind::Kubelet).unwrap();
    assert_eq!(k.samples, 0);
    assert!(k.duplicates > 0);
    assert_eq!(sink.series(), before);
}

#[tokio::test]
async fn sink_failures_are_counted() {
    static FILES: &[(&str, &str)] = &[("node-sc", "init-sidecar.json")];
    let server = proxy_serving(FILES).await;
    let mut collectors = Collectors::new(kubelet_config(&server.url(), &["node-sc"])).unwrap();
    let sink = MemorySink::new();
    sink.set_fail_appends(true);
    let report = collectors.collect_once(&sink).await;
    assert_eq!(report.samples(), 0);
    assert_eq!(collectors.metrics().errors(SourceKind::Kubelet, "sink"), 1);
    // Samples refused are retried next cycle (not marked written).
    sink.set_fail_appends(false);
    let report = collectors.collect_once(&sink).await;
    assert!(report.samples() > 0);
}

/// What a real kubelet v1.36.2 serves (a kit node of `scripts/kit-nodes.sh`, 2026-12-07,
/// two builds running): the summary parses, and a poll through the read-only port's URL
/// template stores the capture's own numbers for the node and both builds.
#[tokio::test]
async fn kit_kubelet_1_36_summary_collects_with_exact_numbers() {
    const FILE: &str = "real/kit-kubelet-1.36-summary.json";
    let s = parse_summary(&fixture(FILE)).expect("kit capture");
    assert_eq!(s.node.node_name, "node5");
    assert_eq!(s.pods.len(), 2);
    assert!(
        s.pods
            .iter()
            .all(|p| p.containers.len() == 1 && p.containers[0].name == "build")
    );
    let server = Fixture::start(|path| {
        if path == "/stats/summary" {
            Reply::ok(fixture(FILE))
        } else {
            Reply::status(404, "not found")
        }
    })
    .await;
    let address = server.url().trim_start_matches("http://").to_string();
    let config = CollectorsConfig {
        kubelet: Some(KubeletConfig {
            nodes: vec![NodeTarget::Addressed(
                headroom_collectors::config::NodeAddress {
                    name: "node5".into(),
                    address,
                },
            )],
            endpoint: KubeletEndpoint::Template {
                url: "http://{address}/stats/summary".into(),
            },
            http: Default::default(),
            schedule: fast_schedule(),
        }),
        ..Default::default()
    };
    let sink = MemorySink::new();
    let report = collect_once(&config, &sink).await.unwrap();
    assert_eq!(report.errors(), 0, "{report:?}");
    let node = [("node", "node5")];
    assert_eq!(
        sink.latest("node_memory_working_set_bytes", &node).unwrap(),
        (1_796_630_972_000, 658_853_888.0)
    );
    assert_eq!(
        sink.latest("node_cpu_usage_cores", &node).unwrap().1,
        0.047_229_877
    );
    for (pod, ws) in [("web-4", 121_778_176.0), ("cpp-9", 483_635_200.0)] {
        assert_eq!(
            sink.latest(
                "container_memory_working_set_bytes",
                &[("pod", pod), ("container", "build"), ("node", "node5")],
            )
            .unwrap()
            .1,
            ws,
            "{pod}"
        );
    }
}
