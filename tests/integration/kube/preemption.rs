//! Preemption under `serve`, on the fake API server: a high-priority pod that fits nowhere
//! gets a nominated node, the victim chosen there gets upstream's `DisruptionTarget`
//! condition and is deleted, and the pod is bound there once it is gone; a
//! PodDisruptionBudget watched from the API server steers the choice; `preemptionPolicy:
//! Never` deletes nothing.

use std::time::Duration;

use serde_json::{Value, json};

use super::fake::Fake;
use super::{BASE, assert_calls_allowed, condition, events_for, namespace, node, serve};

/// A running pod on `node` (phase Running, a start time: preemption's tie-breaks read it).
fn running(name: &str, node: &str, cpu: &str, priority: i32, start: &str) -> Value {
    json!({"metadata": {"name": name, "namespace": "default", "labels": {"app": name}},
           "spec": {"nodeName": node, "schedulerName": "default-scheduler", "priority": priority,
                    "containers": [{"name": "c", "image": "registry.invalid/pause:1",
                                    "resources": {"requests": {"cpu": cpu, "memory": "256Mi"}}}]},
           "status": {"phase": "Running", "startTime": start}})
}

/// The pending pod: `priority` as admission resolved it, optionally `preemptionPolicy`.
pub(super) fn pending(name: &str, cpu: &str, priority: i32, never: bool) -> Value {
    let mut p = json!({"metadata": {"name": name, "namespace": "default"},
           "spec": {"schedulerName": "headroom", "priority": priority,
                    "priorityClassName": "high",
                    "containers": [{"name": "c", "image": "registry.invalid/pause:1",
                                    "resources": {"requests": {"cpu": cpu, "memory": "256Mi"}}}]},
           "status": {"phase": "Pending"}});
    if never {
        p["spec"]["preemptionPolicy"] = json!("Never");
    }
    p
}

/// Two 4-CPU nodes, each with a 3-CPU low-priority pod; node-b's started later (so
/// without a budget it would be the better victim: latest start wins).
pub(super) fn cluster(fake: &Fake) {
    fake.put("namespaces", namespace("default"));
    fake.put(
        "priorityclasses",
        json!({"metadata": {"name": "high"}, "value": 100000}),
    );
    fake.put("nodes", node("node-a", "4"));
    fake.put("nodes", node("node-b", "4"));
    fake.put(
        "pods",
        running("low-a", "node-a", "3", 100, "2024-01-01T00:00:01Z"),
    );
    fake.put(
        "pods",
        running("low-b", "node-b", "3", 100, "2024-01-01T00:00:09Z"),
    );
}

async fn metrics(s: &super::Running) -> String {
    reqwest::get(s.url("/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// `/metrics` once `ready` holds of it, or as it is after 10 s: serve records a bind in
/// its metrics after the API server has it, so a test that saw the binding polls.
async fn metrics_when(s: &super::Running, ready: impl Fn(&str) -> bool) -> String {
    let mut m = String::new();
    for _ in 0..100 {
        m = metrics(s).await;
        if ready(&m) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    m
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_preemption_evicts_the_victim_nominates_and_binds() {
    let fake = Fake::start().await;
    cluster(&fake);
    // low-b is protected: its budget allows no disruption, so node-a's pod is the victim.
    fake.put(
        "poddisruptionbudgets",
        json!({"metadata": {"name": "low-b", "namespace": "default"},
               "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "low-b"}}},
               "status": {"disruptionsAllowed": 0, "currentHealthy": 1, "desiredHealthy": 1,
                          "expectedPods": 1, "observedGeneration": 1}}),
    );
    let s = serve(&fake, BASE, "a").await;
    // The budget is in the snapshot before the pod arrives.
    let listed = |m: &str| {
        m.contains("headroom_cluster_lists_total{kind=\"PodDisruptionBudget\"} 1")
            && m.contains("headroom_cluster_lists_total{kind=\"PriorityClass\"} 1")
    };
    let m = metrics_when(&s, listed).await;
    assert!(listed(&m), "PDBs and PriorityClasses listed:\n{m}");
    fake.put("pods", pending("urgent", "2", 100000, false));

    fake.wait_for(20, "urgent bound", |f| {
        f.node_of("default", "urgent").is_some()
    })
    .await;
    assert_eq!(fake.node_of("default", "urgent").as_deref(), Some("node-a"));
    // The victim: DisruptionTarget written, then deleted.
    assert!(
        fake.get("pods", "default", "low-a").is_none(),
        "low-a deleted"
    );
    let history = fake.history("pods", "default", "low-a");
    let marked = history.iter().any(|v| {
        v["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| {
                c["type"] == "DisruptionTarget"
                    && c["status"] == "True"
                    && c["reason"] == "PreemptionByScheduler"
                    && c["message"] == "headroom: preempting to accommodate a higher priority pod"
            })
    });
    assert!(marked, "DisruptionTarget before deletion: {history:#?}");
    // The protected pod stays.
    assert!(fake.get("pods", "default", "low-b").is_some());
    // The preemptor was nominated to node-a with its FailedScheduling condition.
    let nominated = fake
        .history("pods", "default", "urgent")
        .iter()
        .any(|v| v["status"]["nominatedNodeName"] == "node-a");
    assert!(nominated, "nominatedNodeName written");
    assert!(!events_for(&fake, "low-a", "Preempted").is_empty());
    let failed = events_for(&fake, "urgent", "FailedScheduling");
    assert!(
        failed
            .iter()
            .any(|e| e["note"] == "0/2 nodes are available: 2 Insufficient cpu."),
        "a nominating attempt's message has no preemption tail: {failed:#?}"
    );
    // The bind is in serve's metrics once its SLI is (CI saw the binding before it).
    let sli_observed = |m: &str| {
        m.lines().any(|l| {
            l.starts_with("scheduler_pod_scheduling_sli_duration_seconds_count{attempts=\"")
                && !l.ends_with(" 0")
        })
    };
    let m = metrics_when(&s, sli_observed).await;
    // Upstream's names (issue #24): preemption ran and chose one victim; the preemptor's
    // scheduling SLI was observed with its attempts.
    let value = |name: &str| -> f64 {
        m.lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("{name} not in /metrics:\n{m}"))
    };
    assert!(value("scheduler_preemption_attempts_total ") >= 1.0);
    assert!(value("scheduler_preemption_victims_bucket{le=\"1.0\"} ") >= 1.0);
    assert!(sli_observed(&m), "{m}");
    assert!(
        value("scheduler_schedule_attempts_total{result=\"unschedulable\",profile=\"headroom\"} ")
            >= 1.0
    );
    assert!(
        !m.contains("headroom_preemption_victims_deleted_total 0"),
        "{m}"
    );
    assert!(
        m.contains("headroom_preemption_victims_deleted_total"),
        "{m}"
    );
    assert!(m.contains("headroom_preemption_failures_total 0"), "{m}");
    assert_calls_allowed(&fake);
    assert!(
        fake.calls()
            .iter()
            .any(|(g, r, v)| g == "policy" && r == "poddisruptionbudgets" && v == "watch")
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_preemption_policy_never_deletes_nothing() {
    let fake = Fake::start().await;
    cluster(&fake);
    let s = serve(&fake, BASE, "a").await;
    fake.put("pods", pending("polite", "2", 100000, true));
    let want = "0/2 nodes are available: 2 Insufficient cpu. preemption: not eligible due to preemptionPolicy=Never.";
    fake.wait_for(20, "polite's PodScheduled=False", |f| {
        condition(f, "polite").is_some_and(|c| c["message"] == want)
    })
    .await;
    assert!(fake.get("pods", "default", "low-a").is_some());
    assert!(fake.get("pods", "default", "low-b").is_some());
    assert!(fake.node_of("default", "polite").is_none());
    let polite = fake.get("pods", "default", "polite").unwrap();
    assert!(polite["status"]["nominatedNodeName"].is_null(), "{polite}");
    assert!(
        !fake
            .calls()
            .iter()
            .any(|(_, r, v)| r == "pods" && v == "delete"),
        "no deletion"
    );
    // Upstream's gauge (issue #24): the pod waits in the unschedulable pool, blamed on
    // the plugin that rejected it, as kube-scheduler's `scheduler_unschedulable_pods`.
    let want = "scheduler_unschedulable_pods{plugin=\"NodeResourcesFit\",profile=\"headroom\"} 1";
    let m = metrics_when(&s, |m| m.contains(want)).await;
    assert!(m.contains(want), "{want} not in\n{m}");
    assert!(
        m.contains("scheduler_pending_pods{queue=\"unschedulable\"} 1"),
        "{m}"
    );
    assert_calls_allowed(&fake);
    s.stop().await;
}

/// Upstream's `PreemptionBasic` in small, as a burst: six 4-CPU nodes each full of four
/// 900m pods, six 3-CPU preemptors at once. The victims of each nomination are evicted
/// together, and nominations beside each other, each preemptor waiting for its own: each
/// fails once and preempts once, exactly three pods go per node, every preemptor is bound
/// to the node it was nominated to, and its Scheduled event is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_a_burst_of_preemptors_evicts_each_victim_once() {
    let fake = Fake::start().await;
    fake.put("namespaces", namespace("default"));
    fake.put(
        "priorityclasses",
        json!({"metadata": {"name": "high"}, "value": 100000}),
    );
    for n in 0..6 {
        fake.put("nodes", node(&format!("node-{n}"), "4"));
        for j in 0..4 {
            fake.put(
                "pods",
                running(
                    &format!("low-{n}-{j}"),
                    &format!("node-{n}"),
                    "900m",
                    100,
                    &format!("2024-01-01T00:00:0{j}Z"),
                ),
            );
        }
    }
    let s = serve(&fake, BASE, "a").await;
    for p in 0..6 {
        fake.put("pods", pending(&format!("urgent-{p}"), "3", 100000, false));
    }
    fake.wait_for(30, "every preemptor bound", |f| {
        (0..6).all(|p| f.node_of("default", &format!("urgent-{p}")).is_some())
    })
    .await;
    for n in 0..6 {
        let left = (0..4)
            .filter(|j| {
                fake.get("pods", "default", &format!("low-{n}-{j}"))
                    .is_some()
            })
            .count();
        assert_eq!(left, 1, "node-{n} keeps one of its four pods");
    }
    for p in 0..6 {
        let name = format!("urgent-{p}");
        let bound = fake.node_of("default", &name).unwrap();
        let nominated: Vec<String> = fake
            .history("pods", "default", &name)
            .iter()
            .filter_map(|v| v["status"]["nominatedNodeName"].as_str().map(String::from))
            .collect();
        assert!(
            nominated.iter().all(|n| *n == bound),
            "{name} bound to {bound}, nominated to {nominated:?}"
        );
    }
    // Each preemptor waited until the cache had seen its victims go, so it failed once
    // (the attempt that nominated) and preempted once; retried on the other victims'
    // deletions, it would fail again and preempt again.
    let m = metrics(&s).await;
    assert!(m.contains("headroom_preemption_failures_total 0"), "{m}");
    assert!(m.contains("headroom_preemption_nominations_total 6"), "{m}");
    assert!(
        m.contains(
            "scheduler_schedule_attempts_total{result=\"unschedulable\",profile=\"headroom\"} 6"
        ),
        "{m}"
    );
    s.stop().await;
    for p in 0..6 {
        assert_eq!(
            events_for(&fake, &format!("urgent-{p}"), "Scheduled").len(),
            1,
            "urgent-{p}'s Scheduled event"
        );
    }
    assert_calls_allowed(&fake);
}
