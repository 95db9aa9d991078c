//! `/ui` and `/ui/pods`: the recent decisions held in memory, newest first, each linking to
//! its pod's page, and a form to find any other (`/ui/find`).

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::{Page, age, encode_segment, error_page, when};
use crate::api::explain::parse_pod;
use crate::api::{ApiError, ApiState};
use headroom_scheduler::framework::Outcome;

/// At most this many decisions are listed: a page a browser renders at once.
const MAX_LISTED: usize = 500;

/// `GET /ui`, `/ui/`, `/ui/pods`.
pub(super) async fn list(State(state): State<ApiState>, uri: Uri) -> Response {
    let recent = state.decisions().recent(MAX_LISTED);
    let (held, _) = state.decisions().size();
    let now = state.now_ms();
    let mut p = Page::start(&uri, "Recent decisions");
    p.h.raw("<p class=\"muted\">")
        .text(format_args!(
            "{} of the {held} decisions held in memory, newest first; older ones by name:",
            recent.len()
        ))
        .raw("</p>");
    // A plain GET form (no script): any pod whose decision memory or the store still has.
    let find = p.href("ui/find");
    p.h.raw("<form action=\"")
        .text(&find)
        .raw("\" method=\"get\"><input name=\"pod\" placeholder=\"namespace/name\" required> ")
        .raw("<button type=\"submit\">explain</button></form>");
    if recent.is_empty() {
        p.h.raw("<p class=\"note\">No decision yet.</p>");
        return p.finish(StatusCode::OK);
    }
    p.h.raw("<table><tr><th>pod</th><th>result</th><th>node</th><th>decided</th>")
        .raw("<th>cycle</th><th>feasible</th><th>fallback</th></tr>");
    for r in &recent {
        let d = &r.decision;
        let key = d.key();
        let href = p.pod_href(&key);
        p.h.raw("<tr><td>").link(&href, &key).raw("</td><td>");
        match &d.outcome {
            Outcome::Placed { node } => {
                p.h.raw("<span class=\"tag placed\">placed</span></td>")
                    .td_nw(node);
            }
            Outcome::Unschedulable { message } => {
                p.h.raw("<span class=\"tag unschedulable\">unschedulable</span> ")
                    .text(message)
                    .raw("</td>");
                match &d.nomination {
                    Some(n) => p.h.td(format_args!("nominated {}", n.node)),
                    None => p.h.raw("<td class=\"muted\">–</td>"),
                };
            }
            Outcome::Error { message } => {
                p.h.raw("<span class=\"tag error\">error</span> ")
                    .text(message)
                    .raw("</td><td class=\"muted\">–</td>");
            }
        }
        p.h.td_nw(when(r.decided_at_ms, now))
            .raw("<td class=\"num\">")
            .text(format_args!(
                "{:.2} ms",
                d.cycle_duration.as_secs_f64() * 1e3
            ))
            .raw("</td><td class=\"num\">")
            .text(d.feasible_count())
            .raw("</td>");
        match &d.fallback {
            Some(f) => p.h.td(format_args!(
                "after {}: {}",
                age(f.waited_seconds),
                f.relaxed.join(", ")
            )),
            None => p.h.raw("<td class=\"muted\">–</td>"),
        };
        p.h.raw("</tr>");
    }
    p.h.raw("</table>");
    p.finish(StatusCode::OK)
}

/// `?pod=` of `/ui/find`.
#[derive(Debug, Deserialize)]
pub(super) struct FindQuery {
    pod: String,
}

/// `GET /ui/find?pod=NAMESPACE/NAME`: 303 to the pod's page. The `Location` is relative
/// (`pods/ns/name`, beside `find`), so it stays under a proxy's prefix.
pub(super) async fn find(uri: Uri, query: Result<Query<FindQuery>, QueryRejection>) -> Response {
    let pod = match query {
        Ok(Query(q)) => q.pod,
        Err(e) => return error_page(&uri, &ApiError::BadRequest(e.body_text())),
    };
    match parse_pod(pod.trim()) {
        Ok(key) => {
            let to = format!(
                "pods/{}/{}",
                encode_segment(&key.namespace),
                encode_segment(&key.name)
            );
            (StatusCode::SEE_OTHER, [(header::LOCATION, to)]).into_response()
        }
        Err(e) => error_page(&uri, &e),
    }
}
