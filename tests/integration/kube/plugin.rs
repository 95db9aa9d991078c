//! `kubectl headroom`: the binary run as `kubectl-headroom` (a symlink), with a kubeconfig
//! pointing at the fake API server, whose service proxy forwards to a running headroom's
//! inspection API (the demo server) as kube-apiserver forwards to the Service's endpoints.

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::{Value, json};

use super::fake::Fake;
use crate::api::spawn_demo_server;

/// A kubeconfig with two contexts: `good` (the fake, token `t-viewer`) and `broken` (a
/// closed port), current `good`.
fn kubeconfig(dir: &Path, fake_url: &str) -> PathBuf {
    let path = dir.join("kubeconfig");
    let text = format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: good\nclusters:\n- name: fake\n  cluster: {{server: \"{fake_url}\"}}\n- name: closed\n  cluster: {{server: \"http://127.0.0.1:9\"}}\nusers:\n- name: viewer\n  user: {{token: t-viewer}}\ncontexts:\n- name: good\n  context: {{cluster: fake, user: viewer}}\n- name: broken\n  context: {{cluster: closed, user: viewer}}\n"
    );
    std::fs::write(&path, text).unwrap();
    path
}

/// The binary under test, linked as `kubectl-headroom` in `dir`.
fn plugin(dir: &Path) -> PathBuf {
    let bin = std::fs::canonicalize(crate::headroom().get_program()).unwrap();
    let link = dir.join("kubectl-headroom");
    std::os::unix::fs::symlink(bin, &link).unwrap();
    link
}

fn service(ns: &str) -> Value {
    json!({"metadata": {"name": "headroom", "namespace": ns},
           "spec": {"ports": [{"name": "viewer", "port": 10262}]}})
}

/// A finished command as a failure message shows it: exit code, stdout, stderr.
fn text(o: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn kubectl_headroom_reaches_the_api_through_the_service_proxy() {
    let demo = spawn_demo_server();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let fake = rt.block_on(Fake::start());
    fake.add_token("t-viewer", "alice", &["devs"]);
    fake.put("services", service("headroom-system"));
    fake.route_service("headroom-system", "headroom", "viewer", &demo.url());
    let dir = tempfile::tempdir().unwrap();
    let kc = kubeconfig(dir.path(), &fake.url());
    let bin = plugin(dir.path());
    let run = |args: &[&str], env_kc: bool| -> Output {
        let mut c = std::process::Command::new(&bin);
        c.args(args)
            .env_remove("KUBECONFIG")
            .env("HOME", dir.path());
        if env_kc {
            c.env("KUBECONFIG", &kc);
        }
        c.output().unwrap()
    };
    let kc_arg = kc.to_str().unwrap();

    // explain through $KUBECONFIG: the same text as `headroom explain`.
    let o = run(&["explain", "ci/build-a-0"], true);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        text(&o).contains("pod ci/build-a-0 (profile headroom)"),
        "{}",
        text(&o)
    );
    // The pod's page, as the user opens it: through kubectl proxy and the service proxy.
    assert!(
        String::from_utf8_lossy(&o.stdout).ends_with(
            "page: http://127.0.0.1:8001/api/v1/namespaces/headroom-system/services/http:headroom:viewer/proxy/ui/pods/ci/build-a-0 (with `kubectl proxy` running)\n"
        ),
        "{}",
        text(&o)
    );
    // JSON, with --kubeconfig.
    let o = run(
        &[
            "--kubeconfig",
            kc_arg,
            "explain",
            "ci/build-a-0",
            "-o",
            "json",
        ],
        false,
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["pod"], "ci/build-a-0");
    // headroom's own 404 for a pod it never decided: exit 3, as `headroom explain`.
    let o = run(&["explain", "ci/missing"], true);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    // A bad pod argument never reaches the server.
    let o = run(&["explain", "no-slash"], true);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));

    // nodes: a table in text, the API's list in JSON, one node by name.
    let o = run(&["nodes"], true);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let stdout = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(stdout.starts_with("NODE"), "{stdout}");
    assert_eq!(stdout.lines().count(), 1 + 6, "six demo nodes: {stdout}");
    let o = run(&["nodes", "-o", "json"], true);
    let nodes: Value = serde_json::from_slice(&o.stdout).unwrap();
    let first = nodes["nodes"][0]["name"].as_str().unwrap().to_string();
    let o = run(&["nodes", &first], true);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains(&first), "{}", text(&o));
    let o = run(&["nodes", "no-such-node"], true);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));

    // queue: the demo keeps a gated and a too-big pod pending.
    let o = run(&["queue"], true);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("huge-0"), "{}", text(&o));
    let o = run(&["queue", "-o", "json"], true);
    let q: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(q["lengths"].is_object(), "{q}");

    // advice.
    let o = run(&["advice"], true);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = run(&["advice", "-o", "json"], true);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    serde_json::from_slice::<Value>(&o.stdout).unwrap();

    // -n: headroom in another namespace.
    let o = run(&["-n", "elsewhere", "nodes"], true);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("headroom's Service elsewhere/headroom was not found: is headroom installed? (kubectl apply -k deploy/)"),
        "{}",
        text(&o)
    );
    fake.put("services", service("elsewhere"));
    fake.route_service("elsewhere", "headroom", "viewer", &demo.url());
    let o = run(&["nodes", "-n", "elsewhere"], true);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));

    // A port with no endpoints: the API server's 503 at once (no client-side retries; the
    // real kube-apiserver answered this way on the kit).
    let started = std::time::Instant::now();
    let o = run(&["--port", "nope", "nodes"], true);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("the API server answered 503: no endpoints available"),
        "{}",
        text(&o)
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(5));

    // --context: the other context's API server is down.
    // The error names the server, what happened and what to check, as kubectl's does.
    let o = run(&["--context", "broken", "queue"], true);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains(
            "cannot reach the API server http://127.0.0.1:9: the connection was refused - \
             did you specify the right host or port? (kubeconfig "
        ) && text(&o).contains(", context broken)"),
        "{}",
        text(&o)
    );
    let o = run(&["--context", "nope", "queue"], true);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("kubeconfig"), "{}", text(&o));

    // RBAC says no: the verb and resource the user lacks.
    fake.forbid("services/proxy");
    let o = run(&["explain", "ci/build-a-0"], true);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("you may not get services/proxy headroom in headroom-system (bind the ClusterRole headroom-kubectl-viewer")
            && text(&o).contains("User \"alice\""),
        "{}",
        text(&o)
    );
    fake.allow("services/proxy");
    // Every call went through the proxy subresource, with the user's token.
    assert!(
        fake.calls().iter().all(|c| c.1 == "services/proxy"),
        "{:?}",
        fake.calls()
    );
}

/// `serve.viewerListen` end to end: `kubectl headroom explain` through the fake's service
/// proxy reaches a real `serve`'s viewer listener, which answers the read-only routes
/// without credentials (the proxy forwards none) and nothing else, while the inspection
/// API and the extender still refuse an unauthenticated caller.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_headroom_reaches_serves_read_only_viewer_listener() {
    use headroom::config::Config;
    use headroom::kube::serve::{ServeOptions, run};
    let fake = Fake::start().await;
    fake.put("namespaces", super::namespace("default"));
    fake.put("nodes", super::node("node-a", "4"));
    fake.put("pods", super::pod("p", "headroom", "1"));
    fake.add_token("t-viewer", "alice", &[]);
    let yaml = "scheduler: {seed: 1}\nserve:\n  listen: 127.0.0.1:0\n  apiListen: 127.0.0.1:0\n  viewerListen: 127.0.0.1:0\n  leaderElection: {enabled: false}\n  reservations: {enabled: false}\n";
    let mut opts = ServeOptions::new(Config::from_yaml(yaml, "t").unwrap(), fake.client("a"));
    opts.store = Some(
        headroom_storage::Store::open_temporary(headroom_storage::StoreConfig::default()).unwrap(),
    );
    let (bound_tx, bound_rx) = tokio::sync::oneshot::channel();
    opts.bound = Some(bound_tx);
    let (stop, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let handle = tokio::spawn(run(opts, async {
        let _ = stop_rx.await;
    }));
    let bound = tokio::time::timeout(std::time::Duration::from_secs(10), bound_rx)
        .await
        .unwrap()
        .unwrap();
    let viewer = bound.viewer.expect("viewerListen bound");
    fake.wait_for(15, "p bound", |f| f.node_of("default", "p").is_some())
        .await;
    let plain = reqwest::Client::new();
    let status = |r: reqwest::Response| r.status().as_u16();
    let v = |p: &str| format!("http://{viewer}{p}");
    assert_eq!(
        status(plain.get(v("/explain/default/p")).send().await.unwrap()),
        200
    );
    assert_eq!(status(plain.get(v("/nodes")).send().await.unwrap()), 200);
    assert_eq!(status(plain.get(v("/healthz")).send().await.unwrap()), 200);
    // Nothing but reads: no metrics, no extender.
    assert_eq!(status(plain.get(v("/metrics")).send().await.unwrap()), 404);
    let filter = plain
        .post(v("/extender/filter"))
        .body("{}")
        .send()
        .await
        .unwrap();
    assert!(matches!(status(filter), 404 | 405));
    // The authenticated listeners still want credentials.
    let tls = reqwest::Client::builder()
        .danger_accept_invalid_certs(true)
        .build()
        .unwrap();
    let api = format!("https://{}/explain/default/p", bound.api);
    assert_eq!(status(tls.get(api).send().await.unwrap()), 401);
    let ext = format!("https://{}/extender/filter", bound.extender);
    assert_eq!(status(tls.post(ext).body("{}").send().await.unwrap()), 401);

    // The plugin, through the proxy, to this viewer.
    fake.put("services", service("headroom-system"));
    fake.route_service(
        "headroom-system",
        "headroom",
        "viewer",
        &format!("http://{viewer}"),
    );
    let dir = tempfile::tempdir().unwrap();
    let kc = kubeconfig(dir.path(), &fake.url());
    let bin = plugin(dir.path());
    let o = tokio::task::spawn_blocking(move || {
        std::process::Command::new(&bin)
            .args(["explain", "default/p", "--kubeconfig"])
            .arg(&kc)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        out.contains("pod default/p") && out.contains("node-a"),
        "{out}"
    );
    let _ = stop.send(());
    let _ = handle.await;
}
