//! The README's example configuration parses, defaults are as documented, typos are errors.

use std::time::Duration;

use headroom_collectors::CollectorsConfig;
use headroom_collectors::config::{AuthConfig, KubeletEndpoint, NodeTarget, ScrapeKind};

fn readme_yaml() -> String {
    let readme = include_str!("../../README.md");
    let start = readme.find("```yaml\n").expect("yaml block") + "```yaml\n".len();
    let end = start + readme[start..].find("```").expect("end of yaml block");
    readme[start..end].to_owned()
}

#[test]
fn readme_example_parses_and_validates() {
    let config: CollectorsConfig = serde_norway::from_str(&readme_yaml()).expect("README example");
    config.validate().expect("valid");
    let p = config.prometheus.as_ref().unwrap();
    assert!(matches!(p.http.auth, Some(AuthConfig::Bearer { .. })));
    assert_eq!(p.backfill, Some(Duration::from_secs(3600)));
    assert_eq!(p.instance_map.static_map["10.0.3.7:9100"], "node-a");
    let k = config.kubelet.as_ref().unwrap();
    assert_eq!(
        k.nodes[1],
        NodeTarget::Addressed(headroom_collectors::config::NodeAddress {
            name: "node-b".into(),
            address: "10.0.3.8".into(),
        })
    );
    assert_eq!(
        k.endpoint.url_for(&k.nodes[1]),
        "http://10.0.3.8:10255/stats/summary"
    );
    assert_eq!(
        config.scrape.as_ref().unwrap().targets[1].kind,
        ScrapeKind::NodeExporter
    );
}

#[test]
fn defaults_are_as_documented() {
    let config: CollectorsConfig =
        serde_norway::from_str("kubelet:\n  nodes: [n1]\nprometheus:\n  url: http://p:9090\n")
            .unwrap();
    let k = config.kubelet.as_ref().unwrap();
    assert_eq!(k.schedule.interval, Duration::from_secs(15));
    assert_eq!(k.schedule.timeout, Duration::from_secs(10));
    assert_eq!(k.schedule.retries, 2);
    assert_eq!(k.schedule.concurrency, 64);
    assert_eq!(k.endpoint, KubeletEndpoint::default());
    let proxy = KubeletEndpoint::ApiServerProxy {
        api_server: "https://kubernetes.default.svc/".into(),
    };
    assert_eq!(
        proxy.url_for(&k.nodes[0]),
        "https://kubernetes.default.svc/api/v1/nodes/n1/proxy/stats/summary"
    );
    assert_eq!(
        config.identity.label_key.as_deref(),
        Some("bkci.dispatch.kubenetes/core")
    );
    assert_eq!(
        config.identity.annotation_key.as_deref(),
        Some("headroom.io/builder")
    );
    assert_eq!(config.runs.missing_cycles, 2);
    assert_eq!(config.prometheus.as_ref().unwrap().rate_window, "2m");
}

#[test]
fn unknown_fields_and_bad_values_are_errors() {
    assert!(serde_norway::from_str::<CollectorsConfig>("kubelet:\n  nodez: [n1]\n").is_err());
    assert!(
        serde_norway::from_str::<CollectorsConfig>(
            "prometheus:\n  url: x\n  schedule: { intervl: 1s }\n"
        )
        .is_err()
    );
    let bad_url: CollectorsConfig =
        serde_norway::from_str("prometheus:\n  url: ftp://p\n").unwrap();
    assert!(bad_url.validate().is_err());
    let zero: CollectorsConfig =
        serde_norway::from_str("kubelet:\n  nodes: [n]\n  schedule: { interval: 0s }\n").unwrap();
    assert!(zero.validate().is_err());
    let missing_ca: CollectorsConfig = serde_norway::from_str(
        "prometheus:\n  url: https://p\n  http: { tlsCaFile: /nonexistent/ca.pem }\n",
    )
    .unwrap();
    assert!(headroom_collectors::Collectors::new(missing_ca).is_err());
}
