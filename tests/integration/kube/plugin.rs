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
    let text = |o: &Output| {
        format!(
            "exit {:?}\nstdout:\n{}\nstderr:\n{}",
            o.status.code(),
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
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

    // --context: the other context's API server is down.
    let o = run(&["--context", "broken", "queue"], true);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("cannot reach the API server"),
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
        text(&o).contains("you may not get services/proxy headroom in headroom-system")
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
