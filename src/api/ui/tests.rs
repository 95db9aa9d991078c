//! The pages through the API's router: each renders as HTML, escapes what comes from the
//! cluster, links relatively, and answers errors as pages.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use tower::ServiceExt;

use crate::api::{ApiState, QueueView, router};
use crate::decisions::{DecisionInputs, LoggedDecision};
use crate::metrics::Metrics;
use headroom_scheduler::framework::Status;
use headroom_scheduler::framework::decision::{Decision, Fallback, Outcome, ScoreColumn};
use headroom_scheduler::key::{PodId, PodKey};
use headroom_scheduler::queue::{PendingPod, QueueLengths, SubQueue};
use headroom_scheduler::snapshot::Snapshot;

const HOSTILE: &str = "<script>alert(1)</script>";

/// `.0` pending pods, the first with a hostile name and reason.
struct Pending(usize);

impl QueueView for Pending {
    fn pending(&self) -> Vec<PendingPod> {
        (0..self.0)
            .map(|i| PendingPod {
                id: PodId::new(
                    PodKey::new(
                        "ci",
                        if i == 0 {
                            HOSTILE.to_string()
                        } else {
                            format!("p-{i}")
                        },
                    ),
                    format!("u-{i}"),
                ),
                priority: 0,
                queue: SubQueue::Unschedulable,
                attempts: 3,
                last_failure: Some(format!("0/3 nodes are available: {HOSTILE}")),
                rejected_by: vec!["NodeResourcesFit"],
                waiting: Duration::from_secs(90),
                backoff_remaining: None,
            })
            .collect()
    }

    fn lengths(&self) -> QueueLengths {
        QueueLengths {
            unschedulable: self.0,
            ..QueueLengths::default()
        }
    }

    fn unschedulable_by_plugin(&self) -> std::collections::BTreeMap<(String, &'static str), usize> {
        std::collections::BTreeMap::from([((String::new(), "NodeResourcesFit"), self.0)])
    }
}

/// Three synthetic nodes: the first rejects, the other two are feasible and scored.
fn decision(name: &str, at: i64) -> LoggedDecision {
    let (nodes, _) = headroom_scheduler::synthetic::cluster(3, 0, 1);
    let names: Vec<Arc<str>> = nodes
        .iter()
        .map(|n| Arc::from(n.metadata.name.as_deref().unwrap()))
        .collect();
    let chosen = names[2].clone();
    let mut d = Decision::new("ci", name, "u-1".into(), "headroom", 7, Arc::new(names));
    d.rejected = vec![(
        0,
        Status::unschedulable(format!("Insufficient cpu {HOSTILE}"))
            .with_plugin("NodeResourcesFit")
            .with_detail("requests 8 > 4 free".to_string()),
    )];
    d.feasible = vec![1, 2];
    d.scores = vec![ScoreColumn {
        plugin: "RealHeadroom",
        weight: 2,
        raw: None,
        normalized: vec![40, 90],
        details: Some(vec![None, Some(format!("free 12Gi {HOSTILE}"))]),
    }];
    d.totals = vec![80, 180];
    d.outcome = Outcome::Placed { node: chosen };
    d.fallback = Some(Fallback {
        waited_seconds: 130.0,
        max_wait_seconds: 120.0,
        relaxed: vec!["RealMemoryFit".into()],
    });
    d.decided_at_ms = at;
    LoggedDecision {
        decision: Arc::new(d),
        decided_at_ms: at,
        inputs: DecisionInputs {
            builder: Some(format!("ci/Job/{HOSTILE}")),
            usage_view_age_seconds: Some(12.0),
            ..DecisionInputs::default()
        },
    }
}

fn state(with_queue: bool) -> ApiState {
    state_of(3, with_queue.then_some(1))
}

/// `nodes` synthetic nodes, two decisions, and `pending` pods if a queue.
fn state_of(nodes: usize, pending: Option<usize>) -> ApiState {
    let (nodes, pods) = headroom_scheduler::synthetic::cluster(nodes, 2, 1);
    let (_tx, rx) = tokio::sync::watch::channel(Arc::new(Snapshot::build(nodes, pods)));
    let s = ApiState::new(Arc::new(rx), Arc::new(Metrics::default()));
    s.decisions().insert(decision("build-1", 1_000));
    s.decisions().insert(decision(HOSTILE, 2_000));
    match pending {
        Some(n) => s.with_queue(Arc::new(Pending(n))),
        None => s,
    }
}

/// Status, content type and body of `GET path`.
async fn get(state: &ApiState, path: &str) -> (StatusCode, String, String) {
    let r = router(state.clone())
        .oneshot(Request::get(path).body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = r.status();
    let ct = r
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    let csp = r.headers().get("content-security-policy").cloned();
    let body = axum::body::to_bytes(r.into_body(), usize::MAX)
        .await
        .unwrap();
    if ct.starts_with("text/html") {
        let csp = csp.expect("an HTML page carries a CSP");
        assert!(csp.to_str().unwrap().starts_with("default-src 'none'"));
    }
    (status, ct, String::from_utf8(body.to_vec()).unwrap())
}

const HTML: &str = "text/html; charset=utf-8";
const HOSTILE_PATH: &str = "/ui/pods/ci/%3Cscript%3Ealert(1)%3C%2Fscript%3E";

#[tokio::test]
async fn every_page_renders_and_escapes_what_comes_from_the_cluster() {
    let s = state(true);
    for path in [
        "/ui",
        "/ui/",
        "/ui/pods",
        "/ui/pods/ci/build-1",
        HOSTILE_PATH,
        "/ui/nodes",
        "/ui/queue",
        "/ui/advice",
    ] {
        let (status, ct, body) = get(&s, path).await;
        assert_eq!(status, StatusCode::OK, "{path}: {body}");
        assert_eq!(ct, HTML, "{path}");
        assert!(body.starts_with("<!doctype html>"), "{path}");
        assert!(body.ends_with("</html>"), "{path}");
        // No script at all, least of all the pod's name.
        assert!(!body.contains("<script"), "{path}: {body}");
    }
    let (_, _, list) = get(&s, "/ui/pods").await;
    // Newest first, the hostile name escaped in the text and encoded in the link.
    let hostile = list
        .find("ci/&lt;script&gt;alert(1)&lt;/script&gt;")
        .unwrap();
    let plain = list.find("ci/build-1").unwrap();
    assert!(hostile < plain, "{list}");
    assert!(
        list.contains("href=\"../ui/pods/ci/%3Cscript%3Ealert%281%29%3C%2Fscript%3E\""),
        "{list}"
    );
    assert!(list.contains("RealMemoryFit"), "fallback column: {list}");

    let (_, _, pod) = get(&s, HOSTILE_PATH).await;
    for want in [
        "Insufficient cpu &lt;script&gt;",
        "free 12Gi &lt;script&gt;",
        "ci/Job/&lt;script&gt;",
        "usage fallback: waited 2m 10s",
        "RealHeadroom 90 × 2 = 180",
        "width:100.0%",
        "width:44.4%",
        "<tr class=\"chosen\">",
    ] {
        assert!(pod.contains(want), "{want}: {pod}");
    }
    // Relative links: three levels below the API's root.
    assert!(pod.contains("href=\"../../../ui/nodes\""), "{pod}");
    assert!(
        pod.contains("href=\"../../../explain/ci/%3Cscript%3Ealert%281%29%3C%2Fscript%3E\""),
        "{pod}"
    );

    let (_, _, queue) = get(&s, "/ui/queue").await;
    assert!(queue.contains("available: &lt;script&gt;"), "{queue}");
    assert!(queue.contains("1 pending"), "{queue}");
    let (_, _, nodes) = get(&s, "/ui/nodes").await;
    assert_eq!(nodes.matches("<tr>").count(), 1 + 3, "{nodes}");
    assert!(nodes.contains("href=\"../nodes/"), "{nodes}");
}

#[tokio::test]
async fn errors_are_pages_with_the_apis_status() {
    let s = state(false);
    let (status, ct, body) = get(&s, "/ui/pods/ci/nobody").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(ct, HTML);
    assert!(
        body.contains("no decision recorded for pod ci/nobody"),
        "{body}"
    );
    let (status, ct, body) = get(&s, "/ui/nope/%3Cb%3E").await;
    assert_eq!((status, ct.as_str()), (StatusCode::NOT_FOUND, HTML));
    assert_eq!(body.matches("<b>").count(), 1, "only the header's: {body}");
    assert!(body.contains("%3Cb%3E"), "{body}");
    // A name that is not UTF-8: the API's 400, as a page.
    let (status, ct, body) = get(&s, "/ui/pods/ci/x%FF").await;
    assert_eq!(
        (status, ct.as_str()),
        (StatusCode::BAD_REQUEST, HTML),
        "{body}"
    );
    assert!(
        body.contains("<title>Bad request · headroom</title>"),
        "{body}"
    );
    let (status, ct, body) = get(&s, "/ui/queue").await;
    assert_eq!(
        (status, ct.as_str()),
        (StatusCode::SERVICE_UNAVAILABLE, HTML)
    );
    assert!(body.contains("without a scheduling queue"), "{body}");
}

#[tokio::test]
async fn explain_links_to_the_pods_page() {
    let s = state(false);
    let (status, _, body) = get(&s, "/explain/ci/build-1").await;
    assert_eq!(status, StatusCode::OK);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["ui"], "/ui/pods/ci/build-1");
    assert_eq!(v["pod"], "ci/build-1");
    let (_, _, text) = get(&s, "/explain?pod=ci/build-1&format=text").await;
    assert!(text.ends_with("page: /ui/pods/ci/build-1\n"), "{text}");
}

#[tokio::test]
async fn long_lists_are_cut_with_a_note() {
    let s = state_of(1_002, Some(1_003));
    let (status, _, nodes) = get(&s, "/ui/nodes").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(nodes.matches("<tr>").count(), 1 + 1_000);
    assert!(nodes.contains("2 less loaded node(s) not shown"), "{nodes}");
    let (_, _, queue) = get(&s, "/ui/queue").await;
    assert_eq!(queue.matches("<tr>").count(), 1 + 1_000);
    assert!(queue.contains("3 more not shown (see /queue)."), "{queue}");
}

#[tokio::test]
async fn the_form_finds_a_pod_by_name() {
    let s = state(false);
    let (_, _, list) = get(&s, "/ui").await;
    assert!(
        list.contains("<form action=\"./ui/find\" method=\"get\"><input name=\"pod\""),
        "{list}"
    );
    for (query, to) in [
        ("ci/build-1", "pods/ci/build-1"),
        ("%20ci/build-1%20", "pods/ci/build-1"),
        ("ci/%3Cb%3E", "pods/ci/%3Cb%3E"),
    ] {
        let r = router(s.clone())
            .oneshot(
                Request::get(format!("/ui/find?pod={query}"))
                    .body(Body::empty())
                    .unwrap(),
            )
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::SEE_OTHER, "{query}");
        assert_eq!(r.headers()["location"], to, "{query}");
    }
    for bad in ["/ui/find?pod=nope", "/ui/find", "/ui/find?pod=/x"] {
        let (status, ct, body) = get(&s, bad).await;
        assert_eq!(
            (status, ct.as_str()),
            (StatusCode::BAD_REQUEST, HTML),
            "{bad}"
        );
        assert!(body.contains("<title>Bad request"), "{bad}: {body}");
    }
}
