//! `serve`'s listeners as a hostile caller meets them (issue "Hardening"): TLS, the
//! extender only for a client certificate the configured CA signed (kube-scheduler's
//! extender `tlsConfig`), the inspection API only for a bearer token the API server's
//! `TokenReview` accepts and its `SubjectAccessReview` allows, probes for anyone.

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
};
use serde_json::json;

use super::fake::Fake;
use super::{assert_calls_allowed, namespace, node, pod};

/// A CA, and a client certificate it signed for `cn` in group `org`: (CA PEM, cert PEM,
/// key PEM).
fn ca_and_client(cn: &str, org: &str) -> (String, String, String) {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name.push(DnType::CommonName, "test-ca");
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate().unwrap();
    let mut client = CertificateParams::new(Vec::<String>::new()).unwrap();
    client.distinguished_name.push(DnType::CommonName, cn);
    client
        .distinguished_name
        .push(DnType::OrganizationName, org);
    client.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let cert = client.signed_by(&key, &issuer).unwrap();
    (ca_cert.pem(), cert.pem(), key.serialize_pem())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_listeners_authenticate_and_authorize_every_caller_but_the_probes() {
    let fake = Fake::start().await;
    fake.put("namespaces", namespace("default"));
    fake.put("nodes", node("node-a", "4"));
    fake.put("pods", pod("p", "headroom", "1"));
    fake.add_token("viewer-token", "alice", &["ci"]);
    fake.add_token("stranger-token", "bob", &[]);
    fake.add_token("scraper-token", "prometheus", &[]);
    fake.grant("prometheus", "get", "/metrics");
    fake.grant("alice", "get", "/explain");
    fake.grant("system:kube-scheduler", "post", "/extender/");
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = ca_and_client("system:kube-scheduler", "system:schedulers");
    let (other_ca, other_cert, other_key) = ca_and_client("system:kube-scheduler", "x");
    let _ = other_ca;
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, &ca).unwrap();
    let yaml = format!(
        "scheduler: {{seed: 1}}\nserve:\n  listen: 127.0.0.1:0\n  apiListen: 127.0.0.1:0\n  leaderElection: {{enabled: false}}\n  reservations: {{enabled: false}}\n  security: {{clientCAFile: {}}}\n",
        ca_file.display()
    );
    let s = super::serve(&fake, &yaml, "a").await;
    fake.wait_for(15, "p bound", |f| f.node_of("default", "p").is_some())
        .await;
    // The serving certificate is self-signed (no certFile): the clients skip its check.
    let client = |identity: Option<(&str, &str)>| {
        let mut b = reqwest::Client::builder().danger_accept_invalid_certs(true);
        if let Some((c, k)) = identity {
            b = b.identity(reqwest::Identity::from_pem(format!("{c}{k}").as_bytes()).unwrap());
        }
        b.build().unwrap()
    };
    let api = |path: &str| format!("https://{}{path}", s.bound.api);
    let ext = |path: &str| format!("https://{}{path}", s.bound.extender);
    let get = |c: reqwest::Client, url: String, token: Option<&'static str>| async move {
        let mut r = c.get(url);
        if let Some(t) = token {
            r = r.bearer_auth(t);
        }
        r.send().await.unwrap().status().as_u16()
    };
    let anon = client(None);
    // Probes: anyone, on both listeners.
    assert_eq!(get(anon.clone(), api("/healthz"), None).await, 200);
    assert_eq!(get(anon.clone(), ext("/readyz"), None).await, 200);
    // The inspection API: a token, and RBAC's word on the path.
    assert_eq!(
        get(anon.clone(), api("/explain/default/p"), None).await,
        401
    );
    assert_eq!(
        get(anon.clone(), api("/explain/default/p"), Some("forged")).await,
        401
    );
    assert_eq!(
        get(
            anon.clone(),
            api("/explain/default/p"),
            Some("stranger-token")
        )
        .await,
        403
    );
    assert_eq!(
        get(
            anon.clone(),
            api("/explain/default/p"),
            Some("viewer-token")
        )
        .await,
        200
    );
    assert_eq!(
        get(anon.clone(), api("/metrics"), Some("viewer-token")).await,
        403,
        "alice may read explanations, not metrics"
    );
    explain_over_https_with_a_token(format!("https://{}", s.bound.api)).await;
    // Plain HTTP to a TLS listener gets nowhere.
    assert!(
        reqwest::get(format!("http://{}/explain/default/p", s.bound.api))
            .await
            .map(|r| r.status().as_u16() != 200)
            .unwrap_or(true)
    );
    // The extender: kube-scheduler's client certificate, signed by the configured CA.
    let bind_body =
        json!({"PodName": "p", "PodNamespace": "default", "PodUID": "x", "Node": "node-a"});
    let post = |c: reqwest::Client| {
        let (url, body) = (ext("/extender/bind"), bind_body.clone());
        async move {
            c.post(url)
                .json(&body)
                .send()
                .await
                .map(|r| r.status().as_u16())
                .unwrap_or(0)
        }
    };
    assert_eq!(post(anon.clone()).await, 401, "no certificate, no token");
    assert_eq!(
        post(client(Some((&other_cert, &other_key)))).await,
        0,
        "a certificate from another CA fails the handshake"
    );
    assert_eq!(post(client(Some((&cert, &key)))).await, 200);
    // The refused certificate is counted (and logged as a warning), plain HTTP is not
    // mistaken for it.
    let metrics = anon
        .get(api("/metrics"))
        .bearer_auth("scraper-token")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let value = |series: &str| {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(series)?.trim().parse::<f64>().ok())
            .unwrap_or_else(|| panic!("{series} missing from:\n{metrics}"))
    };
    assert_eq!(
        value("headroom_auth_tls_handshake_failures_total{reason=\"client_certificate\"}"),
        1.0
    );
    assert!(value("headroom_auth_tls_handshake_failures_total{reason=\"other\"}") >= 1.0);
    let report = s.stop().await;
    assert_eq!(report.scheduling.bound, 1);
    assert_calls_allowed(&fake);
}

/// `headroom explain` as a user runs it against `serve` at `server`: HTTPS and a token;
/// RBAC's refusal reaches the user as exit code 2 naming the 403.
async fn explain_over_https_with_a_token(server: String) {
    let explain = |token: &'static str| {
        let server = server.clone();
        tokio::task::spawn_blocking(move || {
            crate::run(&[
                "explain",
                "default/p",
                "--server",
                &server,
                "--token",
                token,
                "--insecure-skip-tls-verify",
            ])
        })
    };
    let o = explain("viewer-token").await.unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(String::from_utf8_lossy(&o.stdout).contains("node-a"));
    let o = explain("stranger-token").await.unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("403"));
}
