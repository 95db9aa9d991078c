//! Text exposition scrape: real node-exporter, the real kubelet 1.21 capture, and a
//! kubelet `/metrics/resource` fixture whose counters advance between scrapes.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::common::{Fixture, Reply, fast_schedule, fixture, start_node_exporter};
use headroom_collectors::config::{ScrapeConfig, ScrapeKind, ScrapeTarget};
use headroom_collectors::scrape::{parse_exposition, scalar};
use headroom_collectors::{Collectors, CollectorsConfig, MemorySink, SourceKind};
use prometheus_parse::Value;

#[test]
fn real_kubelet_1_21_capture_parses_with_exact_numbers() {
    let text = String::from_utf8(fixture("real/kubelet-1.21-datadog.txt")).unwrap();
    let scrape = parse_exposition(&text, 0).unwrap();
    let families: std::collections::BTreeSet<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(families.len(), 95);
    let find = |metric: &str, label: Option<(&str, &str)>| {
        scrape
            .samples
            .iter()
            .find(|s| s.metric == metric && label.is_none_or(|(k, v)| s.labels.get(k) == Some(v)))
            .unwrap_or_else(|| panic!("{metric} {label:?}"))
    };
    // A gauge in exponent form.
    let line = text
        .lines()
        .find(|l| l.starts_with("process_resident_memory_bytes "))
        .unwrap();
    let expected: f64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    assert_eq!(
        scalar(&find("process_resident_memory_bytes", None).value),
        Some(expected)
    );
    // Histograms keep their +Inf bucket.
    let h = scrape.samples.iter().find(|s| matches!(&s.value, Value::Histogram(b) if b.iter().any(|b| b.less_than == f64::INFINITY)));
    assert!(h.is_some(), "a histogram with a +Inf bucket");
    // No timestamps in the capture: samples take the time given to the parser.
    assert!(
        scrape
            .samples
            .iter()
            .all(|s| s.timestamp.timestamp_millis() == 0)
    );
    // The capture's values include -1.
    assert!(text.contains(" -1\n"));
    assert!(
        scrape
            .samples
            .iter()
            .any(|s| scalar(&s.value) == Some(-1.0))
    );
}

#[tokio::test]
async fn kubelet_resource_rates_between_scrapes() {
    let scrape_n = Arc::new(AtomicU64::new(0));
    let n = scrape_n.clone();
    let server = Fixture::start(move |_| {
        // Each scrape is 10 s later in the target's own timestamps; counters grow 1.5 cores.
        let i = n.fetch_add(1, Ordering::SeqCst);
        let ts = 1_714_557_600_000 + i * 10_000;
        Reply::text(format!(
            "# TYPE container_cpu_usage_seconds_total counter\n\
             container_cpu_usage_seconds_total{{container=\"build\",namespace=\"ci\",pod=\"b-1\"}} {} {ts}\n\
             # TYPE container_memory_working_set_bytes gauge\n\
             container_memory_working_set_bytes{{container=\"build\",namespace=\"ci\",pod=\"b-1\"}} 2.097152e+06 {ts}\n\
             # TYPE node_cpu_usage_seconds_total counter\n\
             node_cpu_usage_seconds_total {} {ts}\n\
             # TYPE node_memory_working_set_bytes gauge\n\
             node_memory_working_set_bytes 1.6e+10 {ts}\n",
            100.0 + 15.0 * i as f64,
            5000.0 + 40.0 * i as f64,
        ))
    })
    .await;
    let config = CollectorsConfig {
        scrape: Some(ScrapeConfig {
            targets: vec![ScrapeTarget {
                url: format!("{}/metrics/resource", server.url()),
                kind: ScrapeKind::KubeletResource,
                node: Some("node-r".into()),
            }],
            mountpoint: "/".into(),
            http: Default::default(),
            schedule: fast_schedule(),
        }),
        ..Default::default()
    };
    let mut c = Collectors::new(config).unwrap();
    let sink = MemorySink::new();
    c.collect_once(&sink).await;
    assert!(
        sink.find("container_cpu_usage_cores", &[]).is_empty(),
        "no rate from one scrape"
    );
    assert_eq!(
        sink.latest(
            "container_memory_working_set_bytes",
            &[("pod", "b-1"), ("node", "node-r")]
        )
        .unwrap(),
        (1_714_557_600_000, 2_097_152.0)
    );
    c.collect_once(&sink).await;
    assert_eq!(
        sink.latest("container_cpu_usage_cores", &[("pod", "b-1")])
            .unwrap(),
        (1_714_557_610_000, 1.5)
    );
    assert_eq!(
        sink.latest("node_cpu_usage_cores", &[("node", "node-r")])
            .unwrap()
            .1,
        4.0
    );
    assert_eq!(
        sink.latest("node_memory_working_set_bytes", &[("node", "node-r")])
            .unwrap()
            .1,
        1.6e10
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_node_exporter_scrape() {
    let exporter = start_node_exporter().await;
    let config = CollectorsConfig {
        scrape: Some(ScrapeConfig {
            targets: vec![ScrapeTarget {
                url: format!("{}/metrics", exporter.url()),
                kind: ScrapeKind::NodeExporter,
                node: None,
            }],
            mountpoint: "/".into(),
            http: Default::default(),
            schedule: fast_schedule(),
        }),
        ..Default::default()
    };
    let mut c = Collectors::new(config).unwrap();
    let sink = MemorySink::new();
    let report = c.collect_once(&sink).await;
    assert_eq!(report.errors(), 0, "{report:?}");
    let node = [("node", "127.0.0.1")];
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap();
    let kib = |key: &str| -> f64 {
        let line = meminfo.lines().find(|l| l.starts_with(key)).unwrap();
        line.split_whitespace()
            .nth(1)
            .unwrap()
            .parse::<f64>()
            .unwrap()
            * 1024.0
    };
    let avail = sink.latest("node_memory_available_bytes", &node).unwrap().1;
    assert!(
        (avail - kib("MemAvailable:")).abs() < 0.2 * kib("MemTotal:"),
        "{avail}"
    );
    assert!(sink.latest("node_fs_capacity_bytes", &node).unwrap().1 > 0.0);
    assert!(sink.latest("node_fs_available_bytes", &node).is_some());
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    c.collect_once(&sink).await;
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1) as f64;
    let cpu = sink.latest("node_cpu_usage_cores", &node).unwrap().1;
    assert!((0.0..=cores * 1.1).contains(&cpu), "{cpu}");
    assert_eq!(c.metrics().errors_of(SourceKind::Scrape), 0);
}

/// A real kubelet v1.36.2's `/metrics/resource` (a kit node of `scripts/kit-nodes.sh`,
/// 2026-12-07, two builds running): every family parses with the kubelet's own timestamps,
/// and the values are the capture's.
#[test]
fn real_kit_kubelet_1_36_resource_metrics_parse_with_exact_numbers() {
    let text = String::from_utf8(fixture("real/kit-kubelet-1.36-resource.txt")).unwrap();
    let scrape = parse_exposition(&text, 0).unwrap();
    let find = |metric: &str, pod: Option<&str>| {
        scrape
            .samples
            .iter()
            .find(|s| s.metric == metric && pod.is_none_or(|p| s.labels.get("pod") == Some(p)))
            .unwrap_or_else(|| panic!("{metric} {pod:?}"))
    };
    let ws = find("container_memory_working_set_bytes", Some("cpp-9"));
    assert_eq!(scalar(&ws.value), Some(483_635_200.0));
    assert_eq!(ws.timestamp.timestamp_millis(), 1_796_630_972_633);
    assert_eq!(ws.labels.get("container"), Some("build"));
    let node = find("node_memory_working_set_bytes", None);
    assert_eq!(scalar(&node.value), Some(658_853_888.0));
    assert_eq!(
        scalar(&find("node_cpu_usage_seconds_total", None).value),
        Some(8.057_170_266)
    );
}
