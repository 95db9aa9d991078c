//! Prometheus API faults a real server cannot be made to produce on demand: slow answers,
//! HTTP 500, malformed JSON, query errors, NaN/Inf values, partial results.

use std::time::Duration;

use crate::common::{Fixture, Reply, fast_schedule};
use headroom_collectors::config::{PrometheusConfig, QueriesConfig};
use headroom_collectors::{Collectors, CollectorsConfig, MemorySink, SourceKind};

/// Only custom queries named `q_<case>` for node memory and container memory signals.
fn config(url: &str, node_q: &str, container_q: &str) -> CollectorsConfig {
    let off = || Some(String::new());
    CollectorsConfig {
        prometheus: Some(PrometheusConfig {
            url: url.to_owned(),
            http: Default::default(),
            schedule: fast_schedule(),
            rate_window: "2m".into(),
            mountpoint: "/".into(),
            queries: QueriesConfig {
                node_cpu_usage_cores: off(),
                node_memory_working_set_bytes: off(),
                node_memory_available_bytes: Some(node_q.into()),
                node_fs_available_bytes: off(),
                node_fs_capacity_bytes: off(),
                node_imagefs_available_bytes: None,
                node_imagefs_capacity_bytes: None,
                container_cpu_usage_cores: off(),
                container_memory_working_set_bytes: Some(container_q.into()),
                pod_ephemeral_storage_used_bytes: None,
            },
            labels: Default::default(),
            instance_map: Default::default(),
            backfill: None,
        }),
        ..Default::default()
    }
}

fn vector(samples: &[(&str, &str)]) -> String {
    let result: Vec<String> = samples
        .iter()
        .map(|(labels, v)| format!(r#"{{"metric":{{{labels}}},"value":[1714557600.5,"{v}"]}}"#))
        .collect();
    format!(
        r#"{{"status":"success","data":{{"resultType":"vector","result":[{}]}}}}"#,
        result.join(",")
    )
}

async fn server() -> Fixture {
    Fixture::start(|path| {
        let good_node = vector(&[(r#""instance":"node-a:9100""#, "1024")]);
        if path.contains("q_good") {
            Reply::ok(good_node)
        } else if path.contains("q_slow") {
            Reply::ok(good_node).delayed(Duration::from_secs(5))
        } else if path.contains("q_500") {
            Reply::status(500, "internal server error")
        } else if path.contains("q_malformed") {
            Reply::ok(r#"{"status":"success","data":{"resultType":"vector","result":[{"metric":"#)
        } else if path.contains("q_bad_query") {
            Reply::status(400, r#"{"status":"error","errorType":"bad_data","error":"1:5: parse error: unexpected"}"#)
        } else if path.contains("q_nan") {
            Reply::ok(vector(&[
                (r#""namespace":"ci","pod":"p1","container":"c","node":"n1""#, "NaN"),
                (r#""namespace":"ci","pod":"p2","container":"c","node":"n1""#, "+Inf"),
                (r#""namespace":"ci","pod":"p3","container":"c","node":"n1""#, "-Inf"),
                (r#""namespace":"ci","pod":"p4","container":"c","node":"n1""#, "2048"),
            ]))
        } else if path.contains("q_partial") {
            let body = vector(&[(r#""namespace":"ci","pod":"p5","container":"c","node":"n2""#, "4096")]);
            let body = body[..body.len() - 1].to_owned() + r#","warnings":["remote store unavailable: partial result"]}"#;
            Reply::ok(body)
        } else if path.contains("q_unmapped") {
            Reply::ok(vector(&[(r#""job":"x""#, "1")]))
        } else {
            Reply::status(404, "unknown query")
        }
    })
    .await
}

#[tokio::test]
async fn each_fault_is_counted_under_its_reason_and_good_data_is_kept() {
    let server = server().await;
    let sink = MemorySink::new();

    let cases: &[(&str, &str, &str, usize)] = &[
        // (node query, container query, expected reason of the failing one, requests)
        ("q_slow", "q_nan", "timeout", 2),
        ("q_500", "q_partial", "http_status", 2),
        ("q_malformed", "q_nan", "decode", 1),
        ("q_bad_query", "q_nan", "query", 1),
        ("q_unmapped", "q_nan", "unmapped", 1),
    ];
    for &(node_q, container_q, reason, attempts) in cases {
        let mut c = Collectors::new(config(&server.url(), node_q, container_q)).unwrap();
        let before = server.requests();
        let report = c.collect_once(&sink).await;
        let p = report.source(SourceKind::Prometheus).unwrap();
        assert!(
            p.errors
                .iter()
                .any(|e| e.reason == reason && e.subject == "node_memory_available_bytes"),
            "{node_q}: {:?}",
            p.errors
        );
        assert_eq!(
            c.metrics().errors(SourceKind::Prometheus, reason),
            1,
            "{node_q}"
        );
        // Retryable failures are retried once (retries: 1), others are not.
        assert_eq!(
            server.requests() - before,
            attempts + 1,
            "{node_q}: requests"
        );
        if container_q == "q_nan" {
            // NaN and ±Inf are skipped and counted; the finite value is stored.
            assert_eq!(c.metrics().errors(SourceKind::Prometheus, "non_finite"), 1);
            assert!(
                p.errors
                    .iter()
                    .any(|e| e.reason == "non_finite" && e.message.contains("3 non-finite"))
            );
            assert_eq!(
                sink.latest("container_memory_working_set_bytes", &[("pod", "p4")])
                    .unwrap(),
                (1_714_557_600_500, 2048.0)
            );
            assert!(
                sink.find("container_memory_working_set_bytes", &[("pod", "p1")])
                    .is_empty()
            );
        } else {
            // A partial answer is stored and flagged.
            assert_eq!(c.metrics().errors(SourceKind::Prometheus, "partial"), 1);
            assert_eq!(
                sink.latest("container_memory_working_set_bytes", &[("pod", "p5")])
                    .unwrap()
                    .1,
                4096.0
            );
        }
    }

    // After all those faults a good cycle stores node data, and nothing earlier was lost.
    let before = sink.series();
    let mut c = Collectors::new(config(&server.url(), "q_good", "q_nan")).unwrap();
    let report = c.collect_once(&sink).await;
    assert_eq!(report.source(SourceKind::Prometheus).unwrap().samples, 2);
    assert_eq!(
        sink.latest("node_memory_available_bytes", &[("node", "node-a")])
            .unwrap()
            .1,
        1024.0
    );
    for (key, samples) in before {
        assert_eq!(sink.series().get(&key), Some(&samples));
    }
}

#[tokio::test]
async fn prometheus_down_is_a_connect_error() {
    // Bind and drop: nothing listens on this port.
    let port = crate::common::free_port();
    let mut c = Collectors::new(config(
        &format!("http://127.0.0.1:{port}"),
        "q_good",
        "q_nan",
    ))
    .unwrap();
    let report = c.collect_once(&MemorySink::new()).await;
    let p = report.source(SourceKind::Prometheus).unwrap();
    assert_eq!(p.errors.len(), 2);
    assert!(
        p.errors.iter().all(|e| e.reason == "connect"),
        "{:?}",
        p.errors
    );
    assert!(p.errors[0].message.contains(&port.to_string()));
}

/// The configured credentials reach the server: a bearer token read from a file (trailing
/// newline stripped, as service-account tokens have none but hand-written files do) and basic
/// auth with a password file.
#[tokio::test]
async fn bearer_and_basic_auth_are_sent() {
    use headroom_collectors::config::AuthConfig;
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "s3cret-token\n").unwrap();
    let password = dir.path().join("password");
    std::fs::write(&password, "pa55\n").unwrap();
    let ok = vector(&[(r#""node":"n1""#, "1024")]);
    let cases = [
        (
            AuthConfig::Bearer {
                token: None,
                token_file: Some(token.clone()),
            },
            "authorization: Bearer s3cret-token".to_string(),
        ),
        (
            AuthConfig::Basic {
                username: "headroom".into(),
                password: None,
                password_file: Some(password.clone()),
            },
            // base64("headroom:pa55")
            "authorization: Basic aGVhZHJvb206cGE1NQ==".to_string(),
        ),
    ];
    for (auth, want) in cases {
        let body = ok.clone();
        let prom = Fixture::start(move |_| Reply::ok(body.clone())).await;
        let mut cfg = config(&prom.url(), "q_node", "");
        cfg.prometheus.as_mut().unwrap().http.auth = Some(auth);
        let mut collectors = Collectors::new(cfg).unwrap();
        let sink = MemorySink::new();
        let report = collectors.collect_once(&sink).await;
        assert!(report.samples() > 0, "{report:?}");
        let heads = prom.heads.lock().unwrap().clone();
        assert!(!heads.is_empty());
        for h in &heads {
            assert!(
                h.to_ascii_lowercase().contains(&want.to_ascii_lowercase()),
                "missing {want:?} in:\n{h}"
            );
        }
    }
}
