//! `/ui`: server-rendered HTML pages over the inspection API, for an operator who wants to
//! look rather than parse. No JavaScript at all (the pages forbid it with their
//! Content-Security-Policy), CSS inline, every page computed from the same functions as the
//! JSON routes:
//!
//! | page | what | from |
//! |---|---|---|
//! | `/ui`, `/ui/pods` | recent decisions, newest first | the [`DecisionLog`](crate::decisions::DecisionLog) |
//! | `/ui/pods/{namespace}/{pod}` | one decision: every node's verdict, scores as bars, inputs, fallback | `/explain`'s lookup |
//! | `/ui/nodes` | each node's real headroom next to its requests | `/nodes` |
//! | `/ui/queue` | pending pods, where and why | `/queue` |
//! | `/ui/advice` | hot nodes and suggested moves | `/advice` |
//! | `/ui/find?pod=NS/NAME` | redirects to the pod's page (the pods page's form) | |
//!
//! The pages are routes of the API like any other, so they sit behind the same
//! authentication (`serve.security` on `serve.apiListen`) and are served by the read-only
//! viewer listener (`serve.viewerListen`) that the API server's service proxy reaches: a
//! browser opens them through `kubectl proxy` with the operator's own credentials and RBAC.
//! Every link is relative (computed from the request's path depth), so the pages work under
//! `/api/v1/namespaces/<ns>/services/<svc>:<port>/proxy/ui/` as well as at `/ui/`.

mod advice;
mod html;
mod nodes;
mod pod;
mod pods;
mod queue;
#[cfg(test)]
mod tests;

use axum::Router;
use axum::http::{StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use super::{ApiError, ApiState};
use headroom_scheduler::key::PodKey;
use html::Html;

use html::encode_segment;

/// The `/ui` routes (merged into the inspection routes).
pub(super) fn routes() -> Router<ApiState> {
    Router::new()
        .route("/ui", get(pods::list))
        .route("/ui/", get(pods::list))
        .route("/ui/pods", get(pods::list))
        .route("/ui/pods/{namespace}/{pod}", get(pod::page))
        .route("/ui/nodes", get(nodes::page))
        .route("/ui/queue", get(queue::page))
        .route("/ui/advice", get(advice::page))
        .route("/ui/find", get(pods::find))
        .route("/ui/{*rest}", get(not_found))
}

/// The page of pod `namespace/name`, as a path on the API (`/ui/pods/ci/build-42`): what
/// `/explain` answers link to.
pub(super) fn pod_page_path(pod: &PodKey) -> String {
    format!(
        "/ui/pods/{}/{}",
        encode_segment(&pod.namespace),
        encode_segment(&pod.name)
    )
}

/// Where the API's root is, relative to the page at `path`: `./` for `/ui`, `../` for
/// `/ui/nodes`, `../../../` for `/ui/pods/ns/p`. The proxy in front strips only its own
/// prefix, so the same relative links work at `/ui/...` and under a service proxy path.
fn root_of(path: &str) -> String {
    let depth = path.trim_start_matches('/').matches('/').count();
    if depth == 0 {
        "./".to_string()
    } else {
        "../".repeat(depth)
    }
}

/// A page being written: the document and the relative root its links start from.
struct Page {
    h: Html,
    root: String,
}

const STYLE: &str = r#"
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0;color:#1d2330;background:#f6f7f9}
header{background:#1d2b45;color:#fff;padding:10px 24px;display:flex;gap:20px;align-items:baseline}
header b{font-size:17px;margin-right:12px}
header a{color:#c9d7f2;text-decoration:none}header a:hover{color:#fff}
main{padding:16px 24px;max-width:1400px}
h1{font-size:20px;margin:4px 0 12px}h2{font-size:16px;margin:20px 0 8px}
table{border-collapse:collapse;background:#fff;width:100%;box-shadow:0 1px 2px #0002}
th,td{padding:5px 8px;border-bottom:1px solid #e4e7ec;text-align:left;vertical-align:top}
th{background:#eef1f5;font-weight:600;white-space:nowrap}
tr.chosen td{background:#e6f4ea;font-weight:600}
td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.bar{display:inline-block;width:120px;height:10px;background:#e4e7ec;border-radius:3px;vertical-align:middle;overflow:hidden}
.fill{display:block;height:100%}
.bl,.nw{white-space:nowrap}td a{white-space:nowrap}
.ok{background:#3a9d5d}.warn{background:#e0a100}.hot{background:#d64545}.score{background:#3b6fd4}.req{background:#8a94a6}
.tag{display:inline-block;padding:0 6px;border-radius:3px;font-size:12px;font-weight:600}
.placed{background:#d7f0de;color:#1e6b37}.unschedulable{background:#fde2e1;color:#a12622}.error{background:#fdebd0;color:#8a5300}
.note{background:#fff8e1;border-left:4px solid #e0a100;padding:8px 12px;margin:8px 0}
.muted{color:#6b7385}
form{margin:0 0 12px}input{font:inherit;padding:3px 6px;width:260px}
dl{display:grid;grid-template-columns:max-content 1fr;gap:4px 16px;background:#fff;padding:10px 14px;box-shadow:0 1px 2px #0002}
dt{font-weight:600}dd{margin:0}
small.sc{display:block;font-size:12px}
"#;

impl Page {
    /// Starts a page titled `title` for the request at `uri`, with the navigation.
    fn start(uri: &Uri, title: impl std::fmt::Display + Copy) -> Page {
        let root = root_of(uri.path());
        let mut h = Html::default();
        h.raw("<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">")
            .raw("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">")
            .raw("<link rel=\"icon\" href=\"data:,\"><title>")
            .text(title)
            .raw(" · headroom</title><style>")
            .raw(STYLE)
            .raw("</style></head><body><header><b>headroom</b>");
        let mut p = Page { h, root };
        for (label, to) in [
            ("pods", "ui/pods"),
            ("nodes", "ui/nodes"),
            ("queue", "ui/queue"),
            ("advice", "ui/advice"),
        ] {
            let href = p.href(to);
            p.h.link(&href, label);
        }
        p.h.raw("</header><main><h1>").text(title).raw("</h1>");
        p
    }

    /// A link target: `path` (from the API's root, no leading `/`) made relative to this page.
    fn href(&self, path: &str) -> String {
        format!("{}{path}", self.root)
    }

    /// The link to pod `namespace/name`'s page.
    fn pod_href(&self, pod: &PodKey) -> String {
        self.href(pod_page_path(pod).trim_start_matches('/'))
    }

    /// Ends the page and answers it with `status`.
    fn finish(mut self, status: StatusCode) -> Response {
        self.h.raw("</main></body></html>");
        html_response(status, self.h.finish())
    }
}

/// An HTML answer: no script may run, no other origin may frame it, forms go only to this
/// server, nothing is cached (the pages show live state).
fn html_response(status: StatusCode, body: String) -> Response {
    (
        status,
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'none'; style-src 'unsafe-inline'; img-src data:; frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
            ),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        body,
    )
        .into_response()
}

/// An error as a page, with the API's status code.
fn error_page(uri: &Uri, e: &ApiError) -> Response {
    let title = match e.status() {
        StatusCode::NOT_FOUND => "Not found",
        StatusCode::BAD_REQUEST => "Bad request",
        StatusCode::SERVICE_UNAVAILABLE => "Unavailable",
        _ => "Error",
    };
    let mut p = Page::start(uri, title);
    p.h.raw("<p class=\"note\">").text(e).raw("</p>");
    p.finish(e.status())
}

/// Any other `/ui/...` path.
async fn not_found(uri: Uri) -> Response {
    error_page(
        &uri,
        &ApiError::NotFound(format!(
            "no page {}: see pods, nodes, queue, advice",
            uri.path()
        )),
    )
}

/// `ms` since the epoch as `2026-11-25 02:31:07 UTC`, and how long before `now_ms`.
fn when(ms: i64, now_ms: i64) -> String {
    let at = chrono::DateTime::from_timestamp_millis(ms).map_or_else(
        || format!("{ms} ms"),
        |t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string(),
    );
    format!("{at} ({} ago)", age((now_ms - ms).max(0) as f64 / 1000.0))
}

/// Seconds as `45 s`, `12 min`, `3.5 h`, `2.0 d`.
fn age(s: f64) -> String {
    if s < 120.0 {
        format!("{s:.0} s")
    } else if s < 7200.0 {
        format!("{:.0} min", s / 60.0)
    } else if s < 172_800.0 {
        format!("{:.1} h", s / 3600.0)
    } else {
        format!("{:.1} d", s / 86_400.0)
    }
}

/// Bytes as operators read them (`1.5Gi`).
fn bytes(b: f64) -> String {
    headroom_scheduler::quantity::format_bytes(b as i64)
}

/// The bar colour for a share of capacity in use.
fn load_class(fraction: f64) -> &'static str {
    if fraction >= 0.9 {
        "hot"
    } else if fraction >= 0.7 {
        "warn"
    } else {
        "ok"
    }
}
