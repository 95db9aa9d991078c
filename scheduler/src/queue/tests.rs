use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, PodCondition, PodSchedulingGate, PodSpec, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use tokio::time::{Instant, advance};

use super::sort::active_cmp;
use super::*;
use crate::framework::Status;

fn raw_pod(name: &str, priority: i32, gates: &[&str]) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some("ns".to_string()),
            uid: Some(format!("uid-{name}")),
            ..Default::default()
        },
        spec: Some(PodSpec {
            priority: Some(priority),
            scheduling_gates: (!gates.is_empty()).then(|| {
                gates
                    .iter()
                    .map(|g| PodSchedulingGate {
                        name: g.to_string(),
                    })
                    .collect()
            }),
            ..Default::default()
        }),
        status: None,
    }
}

fn pod(name: &str, priority: i32) -> Arc<PodInfo> {
    Arc::new(PodInfo::new(Arc::new(raw_pod(name, priority, &[]))))
}

fn gated(name: &str, gates: &[&str]) -> Arc<PodInfo> {
    Arc::new(PodInfo::new(Arc::new(raw_pod(name, 0, gates))))
}

fn key(name: &str) -> PodId {
    PodId::new(crate::key::PodKey::new("ns", name), format!("uid-{name}"))
}

/// The hints of the default profile's plugins, as the engine gives them to its queue.
fn hints() -> QueueingHints {
    crate::scheduler::Scheduler::new(&crate::config::CoreConfig::default())
        .unwrap()
        .queueing_hints()
}

fn queue() -> SchedulingQueue {
    SchedulingQueue::with_pre_enqueue(QueueConfig::default(), Arc::new(scheduling_gates), hints())
}

fn popped_name(q: &SchedulingQueue) -> Option<String> {
    q.try_pop().map(|p| p.pod_info.name.to_string())
}

fn no_fit(plugin: &'static str) -> Status {
    Status::unschedulable("no fit").with_plugin(plugin)
}

/// Pops `name` and reports its attempt as unschedulable by `plugin`.
fn fail(q: &SchedulingQueue, name: &str, plugin: &'static str) -> Option<SubQueue> {
    let p = q.try_pop().expect("a pod to pop");
    assert_eq!(&*p.pod_info.name, name);
    q.add_unschedulable(p.pod_info, no_fit(plugin))
}

#[tokio::test(start_paused = true)]
async fn priority_then_fifo() {
    let q = queue();
    q.add(pod("low", 0));
    advance(Duration::from_millis(1)).await;
    q.add(pod("high-1", 100));
    advance(Duration::from_millis(1)).await;
    q.add(pod("mid", 50));
    // Same instant as the next one: insertion order breaks the tie.
    q.add(pod("high-2", 100));
    q.add(pod("high-3", 100));
    let order: Vec<String> = std::iter::from_fn(|| popped_name(&q)).collect();
    assert_eq!(order, ["high-1", "high-2", "high-3", "mid", "low"]);
}

#[tokio::test(start_paused = true)]
async fn queue_sort_less_matches_active_order() {
    assert_eq!(QueueSort::NAME, "PrioritySort");
    let t0 = Instant::now();
    let mk = |name: &str, prio: i32, after_ms: u64| QueuedPodInfo {
        pod_info: pod(name, prio),
        timestamp: t0 + Duration::from_millis(after_ms),
        attempts: 0,
        initial_attempt_timestamp: None,
    };
    let pods = [
        mk("a", 10, 5),
        mk("b", 10, 1),
        mk("c", 20, 9),
        mk("d", -1, 0),
    ];
    for a in &pods {
        for b in &pods {
            assert_eq!(
                queue_sort_less(a, b),
                active_cmp(a, b).is_lt(),
                "{} vs {}",
                a.pod_info.name,
                b.pod_info.name
            );
            assert_eq!(QueueSort::less(a, b), queue_sort_less(a, b));
        }
    }
    assert!(queue_sort_less(&pods[2], &pods[0]));
    assert!(queue_sort_less(&pods[1], &pods[0]));
    assert!(!queue_sort_less(&pods[0], &pods[0]));
}

#[test]
fn backoff_growth_is_capped() {
    let c = QueueConfig::default();
    let got: Vec<u64> = (0..=7).map(|a| c.backoff_duration(a).as_secs()).collect();
    assert_eq!(got, [0, 1, 2, 4, 8, 10, 10, 10]);
    assert_eq!(c.backoff_duration(u32::MAX), Duration::from_secs(10));
    let c = QueueConfig {
        initial_backoff: Duration::from_millis(300),
        max_backoff: Duration::from_secs(1),
        ..QueueConfig::default()
    };
    let got: Vec<u128> = (1..=4).map(|a| c.backoff_duration(a).as_millis()).collect();
    assert_eq!(got, [300, 600, 1000, 1000]);
}

#[test]
fn config_reads_humantime_and_rejects_unknown_fields() {
    let c: QueueConfig = serde_json::from_str("{}").unwrap();
    assert_eq!(c, QueueConfig::default());
    assert_eq!(c.unschedulable_timeout, Duration::from_secs(300));
    let c: QueueConfig = serde_norway::from_str(
        "initialBackoff: 2s\nmaxBackoff: 1m\nunschedulableTimeout: 90s\nbackoffFlushInterval: 500ms\n",
    )
    .unwrap();
    assert_eq!(c.initial_backoff, Duration::from_secs(2));
    assert_eq!(c.max_backoff, Duration::from_secs(60));
    assert_eq!(c.unschedulable_timeout, Duration::from_secs(90));
    assert_eq!(c.backoff_flush_interval, Duration::from_millis(500));
    assert_eq!(c.unschedulable_flush_interval, Duration::from_secs(30));
    assert!(c.validate().is_ok());
    assert!(serde_json::from_str::<QueueConfig>(r#"{"podMaxBackoff":"1s"}"#).is_err());
    let bad = QueueConfig {
        max_backoff: Duration::from_millis(10),
        ..QueueConfig::default()
    };
    assert!(bad.validate().unwrap_err().contains("maxBackoff"));
    let round = serde_json::to_string(&QueueConfig::default()).unwrap();
    assert!(round.contains(r#""initialBackoff":"1s""#), "{round}");
    assert!(round.contains(r#""unschedulableTimeout":"5m""#), "{round}");
}

#[tokio::test(start_paused = true)]
async fn backoff_pod_pops_only_after_its_backoff() {
    let q = queue();
    q.add(pod("p", 0));
    for (attempt, secs) in [(1u32, 1u64), (2, 2), (3, 4), (4, 8), (5, 10), (6, 10)] {
        let p = q.try_pop().expect("pod ready");
        assert_eq!(p.attempts, attempt);
        let to = q.add_unschedulable(p.pod_info, Failure::error("bind failed"));
        assert_eq!(to, Some(SubQueue::Backoff));
        let wait = Duration::from_secs(secs);
        advance(wait - Duration::from_millis(1)).await;
        assert!(q.try_pop().is_none(), "popped before {secs}s of backoff");
        assert_eq!(q.len().backoff, 1);
        advance(Duration::from_millis(1)).await;
    }
    assert_eq!(q.try_pop().unwrap().attempts, 7);
}

#[tokio::test(start_paused = true)]
async fn waiting_pop_wakes_when_backoff_expires() {
    let q = Arc::new(queue());
    q.add(pod("p", 0));
    let p = q.pop().await.unwrap();
    q.add_unschedulable(p.pod_info, Failure::error("boom"));
    let start = Instant::now();
    // No flush loop runs: `pop` itself sleeps until the backoff expiry.
    let p = q.pop().await.unwrap();
    assert_eq!(&*p.pod_info.name, "p");
    assert_eq!(start.elapsed(), Duration::from_secs(1));
}

#[tokio::test(start_paused = true)]
async fn unschedulable_pod_returns_on_node_added() {
    let q = queue();
    q.add(pod("p", 0));
    assert_eq!(
        fail(&q, "p", "NodeResourcesFit"),
        Some(SubQueue::Unschedulable)
    );
    advance(Duration::from_secs(3)).await;
    q.flush();
    assert!(
        q.try_pop().is_none(),
        "unschedulable pods wait for an event"
    );
    assert_eq!(q.move_all_to_active_or_backoff(ClusterEvent::NodeAdded), 1);
    assert_eq!(q.len().active, 1);
    let p = q.try_pop().unwrap();
    assert_eq!(p.attempts, 2);

    // An event right after the failure finds the pod still backing off (2 s now).
    q.add_unschedulable(p.pod_info, no_fit("NodeResourcesFit"));
    assert_eq!(
        q.move_all_to_active_or_backoff(ClusterEvent::NodeUpdated),
        1
    );
    assert_eq!(q.len().backoff, 1);
    advance(Duration::from_millis(1999)).await;
    assert!(q.try_pop().is_none());
    advance(Duration::from_millis(1)).await;
    assert_eq!(popped_name(&q).as_deref(), Some("p"));
}

#[tokio::test(start_paused = true)]
async fn events_move_only_pods_they_may_help() {
    let q = queue();
    for name in ["taint", "fit", "affinity", "custom", "nobody"] {
        q.add(pod(name, 0));
    }
    assert_eq!(
        fail(&q, "taint", "TaintToleration"),
        Some(SubQueue::Unschedulable)
    );
    assert_eq!(
        fail(&q, "fit", "NodeResourcesFit"),
        Some(SubQueue::Unschedulable)
    );
    assert_eq!(
        fail(&q, "affinity", "InterPodAffinity"),
        Some(SubQueue::Unschedulable)
    );
    assert_eq!(
        fail(&q, "custom", "HeadroomUsage"),
        Some(SubQueue::Unschedulable)
    );
    let p = q.try_pop().unwrap();
    q.add_unschedulable(p.pod_info, Status::unschedulable("?"));
    advance(Duration::from_secs(2)).await;

    let unschedulable = |q: &SchedulingQueue| -> Vec<String> {
        q.pending()
            .into_iter()
            .filter(|p| p.queue == SubQueue::Unschedulable)
            .map(|p| p.id.key.name.to_string())
            .collect()
    };
    // A new pod only takes resources: neither taints nor fit can improve.
    assert_eq!(
        q.move_all_to_active_or_backoff(ClusterEvent::AssignedPodAdded),
        3
    );
    assert_eq!(unschedulable(&q), ["fit", "taint"]);
    // A deleted pod frees resources, but taints are still there.
    assert_eq!(q.move_all_to_active_or_backoff(ClusterEvent::PodDeleted), 1);
    assert_eq!(unschedulable(&q), ["taint"]);
    assert_eq!(
        q.move_all_to_active_or_backoff(ClusterEvent::NodeUpdated),
        1
    );
    assert!(unschedulable(&q).is_empty());
    assert_eq!(q.len().active, 5);
}

#[tokio::test(start_paused = true)]
async fn unschedulable_pod_returns_after_timeout() {
    let q = queue();
    q.add(pod("p", 0));
    fail(&q, "p", "NodeAffinity");
    advance(Duration::from_secs(299)).await;
    assert_eq!(q.flush(), 0);
    assert!(q.try_pop().is_none());
    advance(Duration::from_secs(1)).await;
    assert_eq!(q.flush(), 1);
    assert_eq!(popped_name(&q).as_deref(), Some("p"));
}

#[tokio::test(start_paused = true)]
async fn flush_loop_brings_back_pods_until_shutdown() {
    let q = Arc::new(queue());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let looper = tokio::spawn({
        let q = q.clone();
        async move {
            q.run_flush_loop(async {
                let _ = stopped.await;
            })
            .await
        }
    });
    q.add(pod("p", 0));
    let p = q.pop().await.unwrap();
    let failed_at = Instant::now();
    q.add_unschedulable(p.pod_info, no_fit("NodeAffinity"));
    // Nothing but the loop can bring it back: the timeout (5 min) rounded up to the
    // unschedulable flush period (30 s).
    let p = q.pop().await.unwrap();
    let waited = failed_at.elapsed();
    assert!(
        waited >= Duration::from_secs(300) && waited <= Duration::from_secs(331),
        "{waited:?}"
    );
    q.done(&p.id());
    stop.send(()).unwrap();
    looper.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn gated_pod_never_pops_until_ungated() {
    let q = queue();
    assert_eq!(
        q.add(gated("g", &["example.com/wait"])),
        Some(SubQueue::Gated)
    );
    q.add(pod("free", 0));
    assert_eq!(popped_name(&q).as_deref(), Some("free"));
    for e in [ClusterEvent::NodeAdded, ClusterEvent::PodDeleted] {
        q.move_all_to_active_or_backoff(e);
    }
    advance(Duration::from_secs(3600)).await;
    q.flush();
    assert!(q.try_pop().is_none());
    let listed = q.pending();
    let g = listed.iter().find(|p| &*p.id.key.name == "g").unwrap();
    assert_eq!(g.queue, SubQueue::Gated);
    assert!(
        g.last_failure
            .as_deref()
            .unwrap()
            .contains("waiting for scheduling gates: [example.com/wait]"),
        "{:?}",
        g.last_failure
    );
    // Still one gate left.
    assert_eq!(q.update(gated("g", &["other"])), Some(SubQueue::Gated));
    assert!(q.try_pop().is_none());
    assert_eq!(q.update(gated("g", &[])), Some(SubQueue::Active));
    let p = q.try_pop().unwrap();
    assert_eq!((&*p.pod_info.name, p.attempts), ("g", 1));
}

#[tokio::test(start_paused = true)]
async fn custom_pre_enqueue_is_rechecked_on_update_and_timeout() {
    let open = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let check: PreEnqueueFn = {
        let open = open.clone();
        Arc::new(move |_: &PodInfo| {
            (!open.load(std::sync::atomic::Ordering::SeqCst))
                .then(|| Status::unresolvable("closed"))
        })
    };
    let q = SchedulingQueue::with_pre_enqueue(QueueConfig::default(), check, hints());
    assert_eq!(q.add(pod("p", 0)), Some(SubQueue::Gated));
    advance(Duration::from_secs(300)).await;
    assert_eq!(q.flush(), 0, "still closed");
    open.store(true, std::sync::atomic::Ordering::SeqCst);
    // Cluster events do not re-check gated pods; the leftover flush does.
    assert_eq!(q.move_all_to_active_or_backoff(ClusterEvent::NodeAdded), 0);
    assert_eq!(q.flush(), 1);
    assert_eq!(popped_name(&q).as_deref(), Some("p"));
    // Gated pods are also re-checked when they are updated.
    open.store(false, std::sync::atomic::Ordering::SeqCst);
    q.add(pod("r", 0));
    open.store(true, std::sync::atomic::Ordering::SeqCst);
    assert_eq!(q.update(pod("r", 0)), Some(SubQueue::Active));
}

#[tokio::test(start_paused = true)]
async fn delete_removes_from_every_place() {
    let q = queue();
    for name in ["backoff", "unsched", "flying", "active"] {
        q.add(pod(name, 0));
    }
    q.add(gated("gated", &["x"]));
    // FIFO: the first three are popped and filed; "active" stays.
    assert_eq!(
        fail(&q, "backoff", "NodeResourcesFit"),
        Some(SubQueue::Unschedulable)
    );
    q.move_all_to_active_or_backoff(ClusterEvent::NodeAdded);
    let unsched = q.try_pop().unwrap();
    q.add_unschedulable(unsched.pod_info, no_fit("NodeResourcesFit"));
    let flying = q.try_pop().unwrap();
    assert_eq!(&*flying.pod_info.name, "flying");
    assert_eq!(
        q.len(),
        QueueLengths {
            active: 1,
            backoff: 1,
            unschedulable: 1,
            gated: 1,
            in_flight: 1
        }
    );
    for name in ["active", "backoff", "unsched", "gated", "flying"] {
        assert!(q.delete(&key(name)), "{name}");
    }
    assert!(!q.delete(&key("never")));
    // A pod deleted while in flight is dropped when its attempt reports back.
    assert_eq!(
        q.add_unschedulable(flying.pod_info, Failure::error("late")),
        None
    );
    assert!(q.is_empty(), "{:?}", q.len());
    advance(Duration::from_secs(600)).await;
    q.flush();
    assert!(q.try_pop().is_none());
}

#[tokio::test(start_paused = true)]
async fn update_keeps_one_copy_and_resorts() {
    let q = queue();
    q.add(pod("a", 10));
    q.add(pod("b", 5));
    q.add(pod("a", 10));
    assert_eq!(q.update(pod("a", 10)), Some(SubQueue::Active));
    assert_eq!(q.len().active, 2);
    // b's priority rises above a's.
    assert_eq!(q.update(pod("b", 20)), Some(SubQueue::Active));
    let order: Vec<String> = std::iter::from_fn(|| popped_name(&q)).collect();
    assert_eq!(order, ["b", "a"]);
    assert_eq!(q.len().total(), 2);
    let p = q.pending();
    assert!(p.iter().all(|p| p.queue == SubQueue::InFlight));
}

#[tokio::test(start_paused = true)]
async fn update_of_unschedulable_pod_moves_it_unless_only_status_changed() {
    let q = queue();
    q.add(pod("p", 0));
    fail(&q, "p", "NodeAffinity");
    advance(Duration::from_secs(5)).await;
    // The scheduler's own PodScheduled=False condition is not a reason to retry.
    let mut status_only = raw_pod("p", 0, &[]);
    status_only.metadata.resource_version = Some("42".to_string());
    status_only.status = Some(PodStatus {
        conditions: Some(vec![PodCondition {
            type_: "PodScheduled".to_string(),
            status: "False".to_string(),
            ..Default::default()
        }]),
        ..Default::default()
    });
    let status_only = Arc::new(PodInfo::new(Arc::new(status_only)));
    assert_eq!(q.update(status_only), Some(SubQueue::Unschedulable));
    // A label change might make node affinity match: retried (its 1 s backoff is over).
    let mut labeled = raw_pod("p", 0, &[]);
    labeled.metadata.labels = Some([("tier".to_string(), "web".to_string())].into());
    assert_eq!(
        q.update(Arc::new(PodInfo::new(Arc::new(labeled)))),
        Some(SubQueue::Active)
    );
    let p = q.try_pop().unwrap();
    assert_eq!(
        p.pod_info.labels().get("tier").map(String::as_str),
        Some("web")
    );
    // Updated right after failing: still backing off.
    q.add_unschedulable(p.pod_info, no_fit("NodeAffinity"));
    assert_eq!(q.update(pod("p", 0)), Some(SubQueue::Backoff));
}

#[tokio::test(start_paused = true)]
async fn events_and_updates_during_a_cycle_are_not_lost() {
    let q = queue();
    q.add(pod("p", 0));
    q.add(pod("u", 0));
    let p = q.try_pop().unwrap();
    let u = q.try_pop().unwrap();
    // A node arrives while the cycle still looks at the old snapshot.
    q.move_all_to_active_or_backoff(ClusterEvent::NodeAdded);
    assert_eq!(
        q.add_unschedulable(p.pod_info, no_fit("NodeResourcesFit")),
        Some(SubQueue::Backoff)
    );
    // An update while in flight: the requeue keeps the newer version and retries it.
    assert_eq!(q.update(pod("u", 7)), Some(SubQueue::InFlight));
    assert_eq!(
        q.add_unschedulable(u.pod_info, no_fit("NodeAffinity")),
        Some(SubQueue::Backoff)
    );
    advance(Duration::from_secs(1)).await;
    // Both backoffs expire together; the updated priority puts "u" first.
    let p2 = q.try_pop().unwrap();
    assert_eq!(&*p2.pod_info.name, "u");
    assert_eq!(p2.pod_info.priority, 7);
    // An event that cannot help the pod's rejector does not count.
    q.move_all_to_active_or_backoff(ClusterEvent::PodDeleted);
    assert_eq!(
        q.add_unschedulable(p2.pod_info, no_fit("TaintToleration")),
        Some(SubQueue::Unschedulable)
    );
}

#[tokio::test(start_paused = true)]
async fn done_forgets_attempts_and_bound_pods_leave() {
    let q = queue();
    q.add(pod("p", 0));
    let p = q.try_pop().unwrap();
    q.done(&p.id());
    assert!(q.is_empty());
    q.add(pod("p", 0));
    assert_eq!(q.try_pop().unwrap().attempts, 1);

    let mut bound = raw_pod("b", 0, &[]);
    bound.spec.as_mut().unwrap().node_name = Some("n1".to_string());
    let bound = Arc::new(PodInfo::new(Arc::new(bound)));
    assert_eq!(q.add(bound.clone()), None);
    q.add(pod("b", 0));
    assert_eq!(q.len().active, 1);
    assert_eq!(q.update(bound), None);
    assert_eq!(q.len().active, 0);
}

#[tokio::test(start_paused = true)]
async fn pending_lists_everything_with_reasons() {
    let q = queue();
    q.add(pod("a", 1));
    q.add(pod("b", 2));
    q.add(gated("g", &["x"]));
    let b = q.try_pop().unwrap();
    q.add_unschedulable(
        b.pod_info,
        Status::unschedulable("Insufficient cpu").with_plugin("NodeResourcesFit"),
    );
    let list = q.pending();
    let names: Vec<(&str, SubQueue)> = list.iter().map(|p| (&*p.id.key.name, p.queue)).collect();
    assert_eq!(
        names,
        [
            ("a", SubQueue::Active),
            ("b", SubQueue::Unschedulable),
            ("g", SubQueue::Gated)
        ]
    );
    let b = &list[1];
    assert_eq!(b.attempts, 1);
    assert_eq!(b.last_failure.as_deref(), Some("Insufficient cpu"));
    assert_eq!(b.rejected_by, ["NodeResourcesFit"]);
    let json = serde_json::to_value(&list).unwrap();
    assert_eq!(json[1]["queue"], "unschedulable");
    assert_eq!(json[1]["namespace"], "ns");
    assert_eq!(json[1]["rejectedBy"][0], "NodeResourcesFit");
    assert_eq!(json[0]["waiting"], "0s");
    assert!(json[0].get("backoffRemaining").is_none());
}

#[tokio::test(start_paused = true)]
async fn close_wakes_a_waiting_pop() {
    let q = Arc::new(queue());
    let waiter = tokio::spawn({
        let q = q.clone();
        async move { q.pop().await }
    });
    tokio::task::yield_now().await;
    assert!(!waiter.is_finished());
    q.close();
    assert!(waiter.await.unwrap().is_none());
    q.add(pod("late", 0));
    assert!(q.try_pop().is_none());
    assert!(q.pop().await.is_none());
    assert!(q.is_closed());
}

#[tokio::test(start_paused = true)]
async fn waiting_pop_wakes_on_add() {
    let q = Arc::new(queue());
    let waiter = tokio::spawn({
        let q = q.clone();
        async move { q.pop().await.map(|p| p.pod_info.name.clone()) }
    });
    tokio::task::yield_now().await;
    q.add(pod("p", 0));
    assert_eq!(waiter.await.unwrap().as_deref(), Some("p"));
}

/// Real threads as producers (the queue is `Sync`), one async consumer.
#[tokio::test]
async fn concurrent_producers_and_consumer() {
    const PRODUCERS: usize = 4;
    const EACH: usize = 250;
    let q = Arc::new(queue());
    let consumer = tokio::spawn({
        let q = q.clone();
        async move {
            let mut seen = HashSet::new();
            while seen.len() < PRODUCERS * EACH {
                let p = q.pop().await.expect("queue open");
                q.done(&p.id());
                assert!(seen.insert(p.pod_info.name.clone()), "popped twice");
            }
            seen
        }
    });
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|t| {
            let q = q.clone();
            std::thread::spawn(move || {
                for i in 0..EACH {
                    q.add(pod(&format!("p{t}-{i}"), (i % 3) as i32));
                    if i % 50 == 0 {
                        q.move_all_to_active_or_backoff(ClusterEvent::NodeUpdated);
                    }
                }
            })
        })
        .collect();
    for p in producers {
        p.join().unwrap();
    }
    let seen = tokio::time::timeout(Duration::from_secs(30), consumer)
        .await
        .expect("consumer finished")
        .unwrap();
    assert_eq!(seen.len(), PRODUCERS * EACH);
    assert!(q.is_empty());
}

#[test]
fn failure_from_status_and_event_rules() {
    let f = Failure::from(Status::error("boom"));
    assert_eq!(f.kind, FailureKind::Error);
    let f = Failure::from(no_fit("NodePorts"));
    assert_eq!(f.kind, FailureKind::Unschedulable);
    assert_eq!(f.plugins.iter().copied().collect::<Vec<_>>(), ["NodePorts"]);
    let h = hints();
    assert!(!h.may_help(ClusterEvent::AssignedPodUpdated, ["NodePorts"]));
    assert!(h.may_help(ClusterEvent::AssignedPodUpdated, ["NodeResourcesFit"]));
    assert!(h.may_help(ClusterEvent::PodDeleted, ["NodeAffinity", "NodePorts"]));
    assert!(h.may_help(ClusterEvent::PodDeleted, std::iter::empty::<&str>()));
    assert!(h.may_help(ClusterEvent::NodeAdded, ["TaintToleration"]));
    // A new usage view can only cure the usage-based plugins' rejections.
    assert!(h.may_help(ClusterEvent::UsageRefreshed, ["RealMemoryFit"]));
    assert!(h.may_help(
        ClusterEvent::UsageRefreshed,
        ["NodeResourcesFit", "RealCpuFit"]
    ));
    assert!(!h.may_help(ClusterEvent::UsageRefreshed, ["NodeResourcesFit"]));
}

#[test]
fn failure_from_decision_blames_every_rejecting_plugin() {
    use crate::framework::{Decision, Outcome};
    let names = Arc::new(vec![
        Arc::<str>::from("n1"),
        Arc::from("n2"),
        Arc::from("n3"),
    ]);
    let mut d = Decision::new("ns", "p", "u".into(), "default-scheduler", 1, names);
    d.rejected.push((
        0,
        Status::unschedulable("Insufficient cpu").with_plugin("NodeResourcesFit"),
    ));
    d.rejected.push((
        1,
        Status::unresolvable("taint").with_plugin("TaintToleration"),
    ));
    d.rejected.push((
        2,
        Status::unschedulable("Insufficient memory").with_plugin("NodeResourcesFit"),
    ));
    d.outcome = Outcome::Unschedulable {
        message: d.fit_error_message(),
    };
    let f = Failure::from(&d);
    assert_eq!(f.kind, FailureKind::Unschedulable);
    assert_eq!(
        f.plugins.iter().copied().collect::<Vec<_>>(),
        ["NodeResourcesFit", "TaintToleration"]
    );
    assert!(
        f.message.starts_with("0/3 nodes are available"),
        "{}",
        f.message
    );
    // Freed resources may help: one plugin is curable by a pod deletion.
    let h = hints();
    assert!(h.may_help(ClusterEvent::PodDeleted, f.plugins.iter().copied()));
    d.outcome = Outcome::Error {
        message: "plugin failed".to_string(),
    };
    assert_eq!(Failure::from(&d).kind, FailureKind::Error);
}

/// History rejects nothing through its extension points, but the warm wait holds builds in
/// its name: with the warm wait on, its registration declares the events that may end a
/// hold, so a held pod is retried on them; with it off, History has no events.
#[test]
fn history_declares_the_warm_waits_events_only_with_it_on() {
    let on = hints();
    assert_eq!(
        on.get(crate::plugins::history::NAME),
        Some(crate::usage::warm::RETRY_ON)
    );
    let mut config = crate::config::CoreConfig::default();
    config.usage.warm_wait.enabled = false;
    let off = crate::scheduler::Scheduler::new(&config)
        .unwrap()
        .queueing_hints();
    assert_eq!(off.get(crate::plugins::history::NAME), None);
}

/// Upstream's async preemption: a preemptor waits, whatever happens, until the cluster
/// shows every one of its victims gone (events, even one seen during its cycle, and updates
/// of its spec leave it); then it is retried at once. Given up on, it is retried; never
/// told, the unschedulable timeout retries it; deleted, it is forgotten. A victim two
/// preemptions chose counts for both.
#[tokio::test(start_paused = true)]
async fn a_preemptor_waits_until_its_victims_are_gone() {
    let q = queue();
    q.add(pod("p", 100));
    let p = q.try_pop().unwrap();
    // An event during the cycle would send an unschedulable pod to backoff.
    q.move_all_to_active_or_backoff(ClusterEvent::PodDeleted);
    assert_eq!(
        q.add_preempting(
            p.pod_info.clone(),
            no_fit("NodeResourcesFit"),
            [key("v1"), key("v2")]
        ),
        Some(SubQueue::Unschedulable)
    );
    assert!(q.is_preempting(&key("p")));
    advance(Duration::from_secs(5)).await;
    assert_eq!(q.move_all_to_active_or_backoff(ClusterEvent::PodDeleted), 0);
    let mut labeled = raw_pod("p", 100, &[]);
    labeled.metadata.labels = Some([("tier".to_string(), "web".to_string())].into());
    assert_eq!(
        q.update(Arc::new(PodInfo::new(Arc::new(labeled)))),
        Some(SubQueue::Unschedulable)
    );
    assert_eq!(q.flush(), 0);
    // Another pod's deletion changes nothing; the first victim's neither; the last one's
    // retries it.
    assert!(!q.victim_gone(&key("other")));
    assert!(!q.victim_gone(&key("v1")));
    assert!(!q.victim_gone(&key("v1")), "each victim counts once");
    assert!(q.try_pop().is_none());
    assert!(q.victim_gone(&key("v2")));
    assert!(!q.is_preempting(&key("p")));
    let p = q.try_pop().expect("retried");
    assert_eq!(&*p.pod_info.name, "p");

    // Given up on: retried after its backoff (2 s now).
    q.add_preempting(p.pod_info, no_fit("NodeResourcesFit"), [key("v3")]);
    assert!(q.preemption_done(&key("p")));
    assert!(!q.is_preempting(&key("p")));
    assert!(!q.victim_gone(&key("v3")), "forgotten with its preemptor");
    assert!(q.try_pop().is_none());
    advance(Duration::from_secs(2)).await;
    let p = q.try_pop().expect("retried after its backoff");

    // Never told: the unschedulable timeout retries it.
    q.add_preempting(p.pod_info, no_fit("NodeResourcesFit"), [key("v4")]);
    advance(Duration::from_secs(299)).await;
    assert_eq!(q.flush(), 0);
    advance(Duration::from_secs(1)).await;
    assert_eq!(q.flush(), 1);
    assert!(!q.is_preempting(&key("p")));
    let p = q.try_pop().expect("retried after the timeout");

    // Two preemptors chose one victim: its deletion releases both.
    q.add(pod("r", 100));
    let r = q.try_pop().unwrap();
    q.add_preempting(p.pod_info, no_fit("NodeResourcesFit"), [key("v5")]);
    q.add_preempting(r.pod_info, no_fit("NodeResourcesFit"), [key("v5")]);
    assert!(q.victim_gone(&key("v5")));
    assert!(!q.is_preempting(&key("p")) && !q.is_preempting(&key("r")));
    // Past the longest backoff (p has failed four times).
    advance(Duration::from_secs(11)).await;
    let (a, b) = (
        q.try_pop().expect("a preemptor"),
        q.try_pop().expect("the other"),
    );
    let p = if &*a.pod_info.name == "p" { a } else { b };

    // No victim named: nothing would end the wait, so it does not wait.
    q.add(pod("s", 100));
    let s = q.try_pop().unwrap();
    q.add_preempting(s.pod_info, no_fit("NodeResourcesFit"), []);
    assert!(!q.is_preempting(&key("s")));
    assert!(q.delete(&key("s")));

    // Deleted while waiting: forgotten, and the news changes nothing.
    q.add_preempting(p.pod_info, no_fit("NodeResourcesFit"), [key("v6")]);
    assert!(q.delete(&key("p")));
    assert!(!q.is_preempting(&key("p")));
    assert!(!q.victim_gone(&key("v6")));
    assert!(!q.preemption_done(&key("p")));
    assert_eq!(q.len().unschedulable, 0);
}
