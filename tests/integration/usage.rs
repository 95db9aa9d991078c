//! Real usage in decisions, through `headroom place` as users run it: the seed scenarios
//! (002 reservations, 003 database disk, 000 history), the memory reserve, and the usage
//! view computed from a store with `--data-dir`.

use headroom_storage::{Labels, RunRecord, Store, StoreConfig, UsageSummary};
use serde_json::Value;

use super::{repo, run};

fn place(args: &[&str]) -> (Option<i32>, Vec<Value>, String) {
    let mut all = vec!["place", "--output", "json"];
    all.extend_from_slice(args);
    let o = run(&all);
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    let v: Vec<Value> = serde_json::from_slice(&o.stdout).unwrap_or_default();
    (o.status.code(), v, err)
}

fn ex(path: &str) -> String {
    repo(path).to_str().unwrap().to_string()
}

fn verdict<'a>(decision: &'a Value, node: &str) -> &'a Value {
    decision["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == node)
        .unwrap_or_else(|| panic!("no node {node} in {decision}"))
}

/// `plugin`'s score of `node` in a decision record (`Null` when it did not score it).
pub(crate) fn score(decision: &Value, node: &str, plugin: &str) -> Value {
    verdict(decision, node)["scores"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["plugin"] == plugin)
        .cloned()
        .unwrap_or(Value::Null)
}

/// Seed 002's acceptance test: 3 workers, 2 cores reserved on worker-1, workers 2 and 3
/// filled: a normal 3-core pod is unschedulable, the reserved 2-core pod lands on
/// worker-1, a 1.5-core pod then fits on worker-1.
#[test]
fn seed_002_reservation_acceptance() {
    let (code, d, err) = place(&[
        "--cluster",
        &ex("examples/seed-002/cluster.yaml"),
        "--pod",
        &ex("examples/seed-002/pods.yaml"),
        "--usage",
        &ex("examples/seed-002/usage.yaml"),
    ]);
    assert_eq!(code, Some(3), "{err}");
    assert_eq!(d[0]["placed"], false);
    assert_eq!(
        d[0]["message"],
        "0/3 nodes are available: 1 node(s) didn't have enough free resources after reservations, 2 Insufficient cpu. preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod."
    );
    let w1 = verdict(&d[0], "worker-1");
    assert_eq!(w1["plugin"], "Reservation");
    assert!(
        w1["detail"]
            .as_str()
            .unwrap()
            .starts_with("free resource not enough after reservation: freeCPU 4000 - reservedCPU 2000 < needed 3000"),
        "{w1}"
    );
    assert_eq!(d[1]["node"], "worker-1");
    assert_eq!(d[2]["node"], "worker-1");

    // Without the reservation the normal pod takes worker-1 itself.
    let (code, d, err) = place(&[
        "--cluster",
        &ex("examples/seed-002/cluster.yaml"),
        "--pod",
        &ex("examples/seed-002/pods.yaml"),
    ]);
    assert_eq!(code, Some(3), "{err}");
    assert_eq!(d[0]["node"], "worker-1");
    assert_eq!(d[1]["placed"], false);

    // An expired reservation holds nothing.
    let dir = tempfile::tempdir().unwrap();
    let usage = dir.path().join("usage.yaml");
    std::fs::write(
        &usage,
        "now: 2026-11-22T10:00:00Z\nreservations:\n- {name: r, pod: reserved-pod, node: worker-1, cpu: \"2\", expireAt: 2026-11-22T09:59:59Z}\n",
    )
    .unwrap();
    let (_, d, err) = place(&[
        "--cluster",
        &ex("examples/seed-002/cluster.yaml"),
        "--pod",
        &ex("examples/seed-002/pods.yaml"),
        "--usage",
        usage.to_str().unwrap(),
    ]);
    assert_eq!(d[0]["node"], "worker-1", "{err}");
}

/// Seed 003's disk rules at their boundaries (see the comments in the example files).
#[test]
fn seed_003_disk_rules() {
    let (code, d, err) = place(&[
        "--cluster",
        &ex("examples/seed-003/cluster.yaml"),
        "--pod",
        &ex("examples/seed-003/pods.yaml"),
    ]);
    assert_eq!(code, Some(3), "{err}");
    let by_name = |n: &str| {
        d.iter()
            .find(|x| x["pod"] == format!("db/{n}"))
            .unwrap_or_else(|| panic!("{n}"))
    };
    assert_eq!(by_name("mysql-a")["node"], "db-small");
    let pika = by_name("pika-b");
    assert_eq!(pika["placed"], false);
    assert_eq!(
        verdict(pika, "db-small")["detail"],
        "free disk 250Gi − pod 124Gi < hold 250Gi (max(10 %, 250Gi), class databases; node annotations)"
    );
    let c = by_name("mysql-c");
    assert_eq!(c["placed"], false);
    assert_eq!(
        verdict(c, "db-promised")["reasons"][0],
        "node(s) didn't have enough disk after the hold"
    );
    assert_eq!(by_name("mysql-d")["node"], "db-promised");
    let huge = by_name("mysql-huge");
    assert!(
        verdict(huge, "db-big")["detail"]
            .as_str()
            .unwrap()
            .contains("< hold 409.6Gi"),
        "{huge}"
    );
    assert_eq!(by_name("redis-e")["node"], "db-small");
}

/// Seed 000: history index 0/1/2 scores 30/20/10 (× weight 10), matched by node IP, with
/// the seed's scores configured; headroom's defaults score 60/50/40.
#[test]
fn seed_000_history_30_20_10() {
    let dir = tempfile::tempdir().unwrap();
    let seed = dir.path().join("seed-000.yaml");
    std::fs::write(
        &seed,
        "profiles: [{schedulerName: headroom, pluginArgs: {history: {scores: [30, 20, 10], olderScore: 0}}}]\n",
    )
    .unwrap();
    let files = [
        "--cluster",
        &ex("examples/seed-000/cluster.yaml"),
        "--pod",
        &ex("examples/seed-000/pod.yaml"),
        "--usage",
        &ex("examples/seed-000/usage.yaml"),
    ];
    let seed_args = [&["--config", seed.to_str().unwrap()][..], &files[..]].concat();
    for (args, want) in [(&seed_args[..], [30, 20, 10]), (&files[..], [60, 50, 40])] {
        let (code, d, err) = place(args);
        assert_eq!(code, Some(0), "{err}");
        assert_eq!(d[0]["node"], "build-c");
        for (node, raw) in [
            ("build-c", want[0]),
            ("build-a", want[1]),
            ("build-b", want[2]),
            ("build-d", 0),
        ] {
            let s = score(&d[0], node, "History");
            assert_eq!(s["raw"], raw, "{node}: {s}");
            assert_eq!(s["weighted"], raw * 10, "{node}: {s}");
        }
    }

    // A garbage annotation is ignored, with a note, and history then scores nothing.
    let dir = tempfile::tempdir().unwrap();
    let pod = std::fs::read_to_string(repo("examples/seed-000/pod.yaml"))
        .unwrap()
        .replace(
            r#"'["10.0.0.3","10.0.0.1","10.0.0.2"]'"#,
            "'10.0.0.3;10.0.0.1'",
        );
    let p = dir.path().join("pod.yaml");
    std::fs::write(&p, pod).unwrap();
    let (_, d, err) = place(&[
        "--cluster",
        &ex("examples/seed-000/cluster.yaml"),
        "--pod",
        p.to_str().unwrap(),
        "--usage",
        &ex("examples/seed-000/usage.yaml"),
    ]);
    assert!(
        d[0]["notes"][0]
            .as_str()
            .unwrap()
            .starts_with("ignored bkci.dispatch.kubenetes/builder-history-nodes"),
        "{err} {}",
        d[0]
    );
    assert!(
        d[0]["skippedScores"]
            .as_array()
            .unwrap()
            .contains(&Value::from("History"))
    );
}

/// A cluster of 16 GiB nodes `nodes`, a usage file with `usage_nodes` (YAML list items)
/// and builder-x's profile (median 1 GiB, p95 2 GiB, 8 runs), and one pod of builder-x, in
/// `dir`: the paths of the cluster, usage and pod files.
fn builder_x_files(dir: &tempfile::TempDir, nodes: &[&str], usage_nodes: &str) -> [String; 3] {
    let cluster = dir.path().join("cluster.yaml");
    std::fs::write(
        &cluster,
        "apiVersion: v1\nkind: List\nitems:\n".to_string()
            + &nodes
                .iter()
                .map(|n| format!("- {{apiVersion: v1, kind: Node, metadata: {{name: {n}}}, status: {{capacity: {{cpu: \"8\", memory: 16Gi}}, allocatable: {{cpu: \"8\", memory: 16Gi, pods: \"110\"}}}}}}\n"))
                .collect::<String>(),
    )
    .unwrap();
    let usage = dir.path().join("usage.yaml");
    std::fs::write(
        &usage,
        format!("now: 2026-11-22T10:00:00Z\nnodes:\n{usage_nodes}builders:\n- {{name: builder-x, runs: 8, cpu: 1, memory: {{p50: 1Gi, p95: 2Gi, max: 3Gi}}}}\n"),
    )
    .unwrap();
    let pod = dir.path().join("pod.yaml");
    std::fs::write(
        &pod,
        "apiVersion: v1\nkind: Pod\nmetadata: {name: b, namespace: ci, labels: {bkci.dispatch.kubenetes/core: builder-x}}\nspec: {containers: [{name: c, image: x, resources: {requests: {cpu: 100m, memory: 128Mi}}}]}\n",
    )
    .unwrap();
    [cluster, usage, pod].map(|p| p.to_str().unwrap().to_string())
}

/// RealMemoryFit with usage from a file: the decision record carries the numbers; a stale
/// node passes (fallback) and the record says so.
#[test]
fn real_memory_fit_through_place() {
    let dir = tempfile::tempdir().unwrap();
    let [cluster, usage, pod] = builder_x_files(
        &dir,
        &["hot", "cool", "stale"],
        "- {name: hot, cpu: 1, memory: 12.9Gi, age: 15s}\n- {name: cool, cpu: 1, memory: 2Gi, age: 15s}\n- {name: stale, cpu: 1, memory: 15Gi, age: 10m}\n",
    );
    let (code, d, err) = place(&["--cluster", &cluster, "--pod", &pod, "--usage", &usage]);
    assert_eq!(code, Some(0), "{err}");
    // hot: 16 − 12.9 = 3.1 GiB free − 2 GiB predicted (p95) < 1.6 GiB reserve.
    let hot = verdict(&d[0], "hot");
    assert_eq!(hot["plugin"], "RealMemoryFit");
    assert!(
        hot["detail"]
            .as_str()
            .unwrap()
            .starts_with("real free memory 3.1Gi − predicted 2Gi < reserve 1.6Gi"),
        "{hot}"
    );
    assert_eq!(d[0]["node"], "cool");
    let rh = score(&d[0], "stale", "RealHeadroom");
    assert!(rh["detail"].as_str().unwrap().contains("requests"), "{rh}");
    assert!(
        d[0]["notes"][0]
            .as_str()
            .unwrap()
            .starts_with("usage of 1/3 node(s) is stale"),
        "{}",
        d[0]
    );
}

/// `usage.memoryRiskPercent` through `place --config`: the pod's memory is its profile's
/// distribution (median 1 GiB, p95 2 GiB, 8 runs: sd 1/1.645 · √(9/8) ≈ 0.645 GiB); on
/// "hot" (12.9 of 16 GiB used, limit 14.4 GiB) the demand is 13.9 ± 0.645 GiB, a risk of
/// 21.9 % of passing the limit: rejected at a 5 % target, let through at 30 %. Every
/// node's risk is in the record: RealMemoryFit's verdict on a rejected node,
/// RealHeadroom's score on a feasible one (scores run with two feasible nodes or more).
#[test]
fn memory_risk_through_place() {
    let dir = tempfile::tempdir().unwrap();
    let [cluster, usage, pod] = builder_x_files(
        &dir,
        &["hot", "cool"],
        "- {name: hot, cpu: 1, memory: 12.9Gi, age: 15s}\n- {name: cool, cpu: 1, memory: 2Gi, age: 15s}\n",
    );
    let decide = |target: u32| {
        let config = dir.path().join(format!("risk-{target}.yaml"));
        std::fs::write(&config, format!("usage: {{memoryRiskPercent: {target}}}\n")).unwrap();
        let (code, d, err) = place(&[
            "--config",
            config.to_str().unwrap(),
            "--cluster",
            &cluster,
            "--pod",
            &pod,
            "--usage",
            &usage,
        ]);
        assert_eq!(code, Some(0), "{err}");
        d.into_iter().next().unwrap()
    };
    let d = decide(5);
    let hot = verdict(&d, "hot");
    assert_eq!(hot["plugin"], "RealMemoryFit", "{d}");
    let detail = hot["detail"].as_str().unwrap();
    assert!(
        detail.starts_with("memory risk 21.9 % > target 5 %: expected 13.9Gi"),
        "{detail}"
    );
    assert_eq!(d["node"], "cool");
    // At 30 % both are feasible, and both scores give the risk.
    let d = decide(30);
    let rh = score(&d, "cool", "RealHeadroom");
    assert!(
        rh["detail"]
            .as_str()
            .unwrap()
            .ends_with("; memory risk 0.0 % (target 30 %)"),
        "{rh}"
    );
    assert_eq!(verdict(&d, "hot")["feasible"], true, "{d}");
    let rh = score(&d, "hot", "RealHeadroom");
    assert!(
        rh["detail"]
            .as_str()
            .unwrap()
            .ends_with("; memory risk 21.9 % (target 30 %)"),
        "{rh}"
    );
}

/// `--data-dir`: the usage view computed from a store — node usage, the builder's profile
/// from its runs, and its placement history.
#[test]
fn data_dir_feeds_the_usage_view() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    {
        let store = Store::open(&data, StoreConfig::default()).unwrap();
        for (node, cpu, mem) in [("n1", 1.0, 2e9), ("n2", 6.0, 12e9), ("n3", 1.0, 2e9)] {
            let l = Labels::new([("node", node)]).unwrap();
            for i in 0..5 {
                let t = now - 60_000 + i * 10_000;
                store.append("node_cpu_usage_cores", &l, t, cpu).unwrap();
                store
                    .append("node_memory_working_set_bytes", &l, t, mem)
                    .unwrap();
            }
        }
        let s = UsageSummary {
            mean: 1.0,
            p95: 1.5,
            max: 2.0,
        };
        store
            .put_run(
                "builder-x",
                &RunRecord {
                    pod_uid: "u1".into(),
                    node: "n3".into(),
                    start_ms: now - 600_000,
                    end_ms: now - 300_000,
                    cpu: s,
                    memory: UsageSummary {
                        mean: 1e9,
                        p95: 1.5e9,
                        max: 2e9,
                    },
                },
            )
            .unwrap();
        store.record_placement("builder-x", "n3", 1).unwrap();
        store.flush().unwrap();
    }
    let cluster = dir.path().join("cluster.yaml");
    std::fs::write(
        &cluster,
        "apiVersion: v1\nkind: List\nitems:\n".to_string()
            + &["n1", "n2", "n3"]
                .map(|n| format!("- {{apiVersion: v1, kind: Node, metadata: {{name: {n}}}, status: {{allocatable: {{cpu: \"8\", memory: 16Gi, pods: \"110\"}}}}}}\n"))
                .concat(),
    )
    .unwrap();
    let pod = dir.path().join("pod.yaml");
    std::fs::write(
        &pod,
        "apiVersion: v1\nkind: Pod\nmetadata: {name: b, namespace: ci, labels: {bkci.dispatch.kubenetes/core: builder-x}}\nspec: {containers: [{name: c, image: x, resources: {requests: {cpu: \"4\", memory: 8Gi}}}]}\n",
    )
    .unwrap();
    let (code, d, err) = place(&[
        "--cluster",
        cluster.to_str().unwrap(),
        "--pod",
        pod.to_str().unwrap(),
        "--data-dir",
        data.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(0), "{err}");
    // n3: as idle as n1 for real, and in the builder's history.
    assert_eq!(d[0]["node"], "n3", "{}", d[0]);
    let h = score(&d[0], "n3", "History");
    assert_eq!(h["raw"], 60);
    assert!(h["detail"].as_str().unwrap().contains("placement history"));
    let rh = score(&d[0], "n2", "RealHeadroom");
    assert!(
        rh["detail"]
            .as_str()
            .unwrap()
            .contains("profile p95 of 1 runs"),
        "{rh}"
    );
    assert!(
        rh["raw"].as_i64().unwrap() < score(&d[0], "n1", "RealHeadroom")["raw"].as_i64().unwrap()
    );

    // A missing store is an error, not an empty view; a bad usage file names the field.
    let (code, _, err) = place(&[
        "--cluster",
        cluster.to_str().unwrap(),
        "--pod",
        pod.to_str().unwrap(),
        "--data-dir",
        dir.path().join("nope").to_str().unwrap(),
    ]);
    assert_eq!(code, Some(2));
    assert!(err.contains("no store there"), "{err}");
    let bad = dir.path().join("bad.yaml");
    std::fs::write(&bad, "nodes: [{name: n1, cpu: lots, memory: 1}]\n").unwrap();
    let (code, _, err) = place(&[
        "--cluster",
        cluster.to_str().unwrap(),
        "--pod",
        pod.to_str().unwrap(),
        "--usage",
        bad.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(2));
    assert!(err.contains("bad.yaml: nodes[0].cpu: "), "{err}");
}
