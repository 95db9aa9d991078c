//! The Prometheus source against a real Prometheus scraping a real node-exporter and a
//! loopback cAdvisor-format fixture, so real PromQL `rate()` runs over real stored series.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::common::{
    Fixture, Reply, fast_schedule, poll_until, start_node_exporter, start_prometheus,
};
use headroom_collectors::config::{InstanceMapConfig, PrometheusConfig, QueriesConfig};
use headroom_collectors::prometheus::PrometheusClient;
use headroom_collectors::scrape::{parse_exposition, scalar};
use headroom_collectors::{CollectReport, Collectors, CollectorsConfig, MemorySink, SourceKind};

const MIB: f64 = (1u64 << 20) as f64;

/// cAdvisor-format container metrics whose CPU counters grow at known rates.
fn cadvisor_text(start: Instant) -> String {
    let t = start.elapsed().as_secs_f64();
    let base =
        r#"cpu="total",id="/kubepods/burstable/pod1/c1",image="registry.example/ci:1",name="c1""#;
    format!(
        "# HELP container_cpu_usage_seconds_total Cumulative cpu time consumed in seconds.\n\
         # TYPE container_cpu_usage_seconds_total counter\n\
         container_cpu_usage_seconds_total{{container=\"build\",{base},namespace=\"ci\",node=\"node-1\",pod=\"builder-a\"}} {a}\n\
         container_cpu_usage_seconds_total{{container=\"build\",{base},namespace=\"ci\",node=\"node-1\",pod=\"builder-b\"}} {b}\n\
         container_cpu_usage_seconds_total{{container=\"build\",{base},namespace=\"ci\",pod=\"builder-c\"}} {c}\n\
         container_cpu_usage_seconds_total{{container=\"POD\",{base},namespace=\"ci\",node=\"node-1\",pod=\"builder-a\"}} {a}\n\
         container_cpu_usage_seconds_total{{id=\"/\"}} {b}\n\
         # HELP container_memory_working_set_bytes Current working set in bytes.\n\
         # TYPE container_memory_working_set_bytes gauge\n\
         container_memory_working_set_bytes{{container=\"build\",{base},namespace=\"ci\",node=\"node-1\",pod=\"builder-a\"}} 536870912\n\
         container_memory_working_set_bytes{{container=\"build\",{base},namespace=\"ci\",node=\"node-1\",pod=\"builder-b\"}} 1.073741824e+09\n\
         container_memory_working_set_bytes{{container=\"build\",{base},namespace=\"ci\",pod=\"builder-c\"}} 1048576\n",
        a = 100.0 + 0.5 * t,
        b = 5000.0 + 2.0 * t,
        c = 0.25 * t,
    )
}

async fn node_exporter_values(url: &str) -> BTreeMap<String, f64> {
    let text = reqwest::get(format!("{url}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let scrape = parse_exposition(&text, 0).unwrap();
    let mut out = BTreeMap::new();
    for s in scrape.samples {
        let key = match (s.metric.as_str(), s.labels.get("mountpoint")) {
            ("node_filesystem_size_bytes", Some("/")) => "fs_size",
            ("node_filesystem_avail_bytes", Some("/")) => "fs_avail",
            ("node_memory_MemAvailable_bytes", _) => "mem_avail",
            ("node_memory_MemTotal_bytes", _) => "mem_total",
            _ => continue,
        };
        if let Some(v) = scalar(&s.value) {
            out.insert(key.to_owned(), v);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_prometheus_rates_node_exporter_and_outage() {
    let start = Instant::now();
    let cadvisor = Fixture::start(move |path| {
        if path == "/metrics" {
            Reply::text(cadvisor_text(start))
        } else {
            Reply::status(404, "")
        }
    })
    .await;
    let node_exporter = start_node_exporter().await;
    let mut prometheus = start_prometheus(&[
        ("node-exporter", format!("127.0.0.1:{}", node_exporter.port)),
        ("kubelet", cadvisor.addr.to_string()),
    ])
    .await;
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim()
        .to_owned();

    let mut static_map = BTreeMap::new();
    // cAdvisor series of builder-c lack a node label: mapped from the target's instance.
    static_map.insert(cadvisor.addr.to_string(), "node-2".to_owned());
    let config = CollectorsConfig {
        prometheus: Some(PrometheusConfig {
            url: prometheus.url(),
            http: Default::default(),
            schedule: fast_schedule(),
            rate_window: "5s".into(),
            mountpoint: "/".into(),
            queries: QueriesConfig {
                pod_ephemeral_storage_used_bytes: Some("headroom_missing_recording_rule".into()),
                ..Default::default()
            },
            labels: Default::default(),
            // node-exporter's instance is 127.0.0.1:port: mapped through node_uname_info.
            instance_map: InstanceMapConfig {
                static_map,
                query: Some("node_uname_info".into()),
                ..Default::default()
            },
            backfill: None,
        }),
        ..Default::default()
    };
    let mut collectors = Collectors::new(config.clone()).unwrap();
    let sink = MemorySink::new();

    let client = PrometheusClient::new(config.prometheus.as_ref().unwrap()).unwrap();
    let report = first_complete_cycle(&mut collectors, &sink, &client, &hostname).await;
    assert_container_values(&sink);
    assert_node_values(&sink, &hostname, &node_exporter.url()).await;
    assert_missing_rule_named(&report);
    assert_query_range_and_backfill(&client, &config).await;

    // Prometheus goes down: errors counted per query, nothing stored is lost.
    let before = sink.series();
    let errors_before = collectors
        .metrics()
        .errors(SourceKind::Prometheus, "connect");
    prometheus.kill();
    let report = collectors.collect_once(&sink).await;
    let p = report.source(SourceKind::Prometheus).unwrap();
    assert!(
        !p.errors.is_empty() && p.errors.iter().all(|e| e.reason == "connect"),
        "{:?}",
        p.errors
    );
    assert_eq!(p.samples, 0);
    assert_eq!(sink.series(), before);
    assert!(
        collectors
            .metrics()
            .errors(SourceKind::Prometheus, "connect")
            >= errors_before + 8
    );
}

/// Collects until every source's first series are in (Prometheus needs a few scrapes
/// before `rate()` has two points); the report of that cycle.
async fn first_complete_cycle(
    collectors: &mut Collectors,
    sink: &MemorySink,
    client: &PrometheusClient,
    hostname: &str,
) -> CollectReport {
    // rate() extrapolates from a partly filled window while a series is younger than the
    // window; wait until Prometheus holds 8 s of the fixture's series, then values are exact.
    poll_until(Duration::from_secs(40), "8 s of scraped cAdvisor series", || async {
        let r = client
            .query("wait", r#"min(count_over_time(container_cpu_usage_seconds_total{container="build"}[8s]))"#, None)
            .await
            .ok()?;
        let v = r.series.first()?.points.first()?.1;
        (v >= 7.0).then_some(())
    })
    .await;
    let have = |m: &str, k: &str, v: &str| sink.latest(m, &[(k, v)]).is_some();
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        let report = collectors.collect_once(sink).await;
        if have("container_cpu_usage_cores", "pod", "builder-a")
            && have("container_cpu_usage_cores", "pod", "builder-c")
            && have("container_memory_working_set_bytes", "pod", "builder-b")
            && have("node_cpu_usage_cores", "node", hostname)
            && have("node_fs_capacity_bytes", "node", hostname)
        {
            break report;
        }
        assert!(
            Instant::now() < deadline,
            "no complete data from Prometheus in 40 s: {report:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Container rates computed by Prometheus, and memory mapped to nodes.
fn assert_container_values(sink: &MemorySink) {
    // Rates computed by Prometheus over the fixture's linear counters.
    let cpu = |pod: &str| {
        sink.latest("container_cpu_usage_cores", &[("pod", pod)])
            .unwrap()
            .1
    };
    assert!(
        (cpu("builder-a") - 0.5).abs() < 0.05,
        "builder-a {}",
        cpu("builder-a")
    );
    assert!(
        (cpu("builder-b") - 2.0).abs() < 0.2,
        "builder-b {}",
        cpu("builder-b")
    );
    assert!(
        (cpu("builder-c") - 0.25).abs() < 0.03,
        "builder-c {}",
        cpu("builder-c")
    );
    // The POD container and the root cgroup are excluded by the default query.
    assert_eq!(
        sink.find("container_cpu_usage_cores", &[("container", "POD")])
            .len(),
        0
    );
    assert_eq!(
        sink.latest(
            "container_memory_working_set_bytes",
            &[("pod", "builder-a"), ("node", "node-1")]
        )
        .unwrap()
        .1,
        512.0 * MIB
    );
    assert_eq!(
        sink.latest(
            "container_memory_working_set_bytes",
            &[("pod", "builder-c"), ("node", "node-2")]
        )
        .unwrap()
        .1,
        MIB
    );
}

/// Node values agree with what node-exporter itself reports.
async fn assert_node_values(sink: &MemorySink, hostname: &str, node_exporter: &str) {
    let direct = node_exporter_values(node_exporter).await;
    let node = [("node", hostname)];
    assert_eq!(
        sink.latest("node_fs_capacity_bytes", &node).unwrap().1,
        direct["fs_size"]
    );
    let avail = sink.latest("node_fs_available_bytes", &node).unwrap().1;
    assert!(
        (avail - direct["fs_avail"]).abs() < 0.05 * direct["fs_size"],
        "fs avail {avail} vs {}",
        direct["fs_avail"]
    );
    let mem = sink.latest("node_memory_available_bytes", &node).unwrap().1;
    assert!(
        (mem - direct["mem_avail"]).abs() < 0.2 * direct["mem_total"],
        "mem {mem} vs {}",
        direct["mem_avail"]
    );
    let ws = sink
        .latest("node_memory_working_set_bytes", &node)
        .unwrap()
        .1;
    assert!(ws > 0.0 && ws < direct["mem_total"]);
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1) as f64;
    let node_cpu = sink.latest("node_cpu_usage_cores", &node).unwrap().1;
    assert!(
        (0.0..=cores * 1.05).contains(&node_cpu),
        "node cpu {node_cpu}"
    );
    // Samples carry Prometheus' evaluation time: fresh.
    let (ts, _) = sink.latest("node_cpu_usage_cores", &node).unwrap();
    assert!((chrono::Utc::now().timestamp_millis() - ts).abs() < 60_000);
}

/// The missing recording rule: one error naming the query and the setting to fix.
fn assert_missing_rule_named(report: &CollectReport) {
    let p = report.source(SourceKind::Prometheus).unwrap();
    let missing: Vec<_> = p.errors.iter().filter(|e| e.reason == "no_data").collect();
    assert_eq!(missing.len(), 1, "{:?}", p.errors);
    assert!(
        missing[0]
            .message
            .contains("headroom_missing_recording_rule")
    );
    assert!(
        missing[0]
            .message
            .contains("prometheus.queries.pod_ephemeral_storage_used_bytes")
    );
    assert!(
        p.errors.iter().all(|e| e.reason == "no_data"),
        "{:?}",
        p.errors
    );
}

/// `query_range` over what Prometheus stored, and the backfill that reads it.
async fn assert_query_range_and_backfill(client: &PrometheusClient, config: &CollectorsConfig) {
    // query_range over what Prometheus stored.
    let now = chrono::Utc::now().timestamp_millis();
    let range = client
        .query_range(
            "test",
            r#"container_memory_working_set_bytes{pod="builder-a"}"#,
            now - 5_000,
            now,
            Duration::from_secs(1),
        )
        .await
        .unwrap();
    assert_eq!(range.series.len(), 1);
    assert!(
        range.series[0].points.len() >= 3,
        "{:?}",
        range.series[0].points
    );
    assert!(
        range.series[0]
            .points
            .iter()
            .all(|&(_, v)| v == 512.0 * MIB)
    );

    // Backfill: the first cycle of `run` reads history with query_range.
    let mut backfill_config = config.clone();
    backfill_config.prometheus.as_mut().unwrap().backfill = Some(Duration::from_secs(10));
    let backfill_sink = MemorySink::new();
    let started_ms = chrono::Utc::now().timestamp_millis();
    headroom_collectors::run(
        &backfill_config,
        &backfill_sink,
        tokio::time::sleep(Duration::from_millis(1500)),
    )
    .await
    .unwrap();
    let samples = &backfill_sink.find(
        "container_memory_working_set_bytes",
        &[("pod", "builder-a")],
    )[0]
    .1;
    assert!(
        samples.iter().any(|&(ts, _)| ts < started_ms - 3_000),
        "{samples:?}"
    );
}
