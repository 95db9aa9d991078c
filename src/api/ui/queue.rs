//! `/ui/queue`: the pending pods, where they wait and why, from the same answer as `/queue`.

use axum::extract::State;
use axum::http::{StatusCode, Uri};
use axum::response::Response;

use super::{Page, age, error_page};
use crate::api::ApiState;
use crate::api::queue::queue_response;
use headroom_scheduler::queue::SubQueue;

/// At most this many rows, in the queue's order: a page a browser renders at once.
const MAX_ROWS: usize = 1_000;

/// `GET /ui/queue`.
pub(super) async fn page(State(state): State<ApiState>, uri: Uri) -> Response {
    let q = match queue_response(&state) {
        Ok(q) => q,
        Err(e) => return error_page(&uri, &e),
    };
    let l = &q.lengths;
    let mut p = Page::start(&uri, "Queue");
    p.h.raw("<p class=\"muted\">")
        .text(format_args!(
            "{} pending: {} active, {} in backoff, {} unschedulable, {} gated, {} in flight.",
            l.total(),
            l.active,
            l.backoff,
            l.unschedulable,
            l.gated,
            l.in_flight
        ))
        .raw("</p>");
    if q.pods.is_empty() {
        p.h.raw("<p class=\"note\">Nothing is pending.</p>");
        return p.finish(StatusCode::OK);
    }
    p.h.raw("<table><tr><th>pod</th><th>where</th><th>priority</th><th>attempts</th>")
        .raw("<th>waiting</th><th>rejected by</th><th>last failure</th></tr>");
    for pod in q.pods.iter().take(MAX_ROWS) {
        let k = &pod.id.key;
        p.h.raw("<tr><td>");
        // Gated pods were never tried: no decision to link to.
        if state.decisions().by_pod(k).is_some() {
            let href = p.pod_href(k);
            p.h.link(&href, k);
        } else {
            p.h.text(k);
        }
        p.h.raw("</td>");
        p.h.td(match pod.queue {
            SubQueue::Active => "active",
            SubQueue::Backoff => "backoff",
            SubQueue::Unschedulable => "unschedulable",
            SubQueue::Gated => "gated",
            SubQueue::InFlight => "in flight",
        });
        p.h.raw("<td class=\"num\">")
            .text(pod.priority)
            .raw("</td><td class=\"num\">")
            .text(pod.attempts)
            .raw("</td>");
        let waiting = age(pod.waiting.as_secs_f64());
        match pod.backoff_remaining {
            Some(b) => p.h.td(format_args!(
                "{waiting} (backoff {} left)",
                age(b.as_secs_f64())
            )),
            None => p.h.td(waiting),
        };
        p.h.td(pod.rejected_by.join(", "))
            .td(pod.last_failure.as_deref().unwrap_or(""))
            .raw("</tr>");
    }
    p.h.raw("</table>");
    if q.pods.len() > MAX_ROWS {
        p.h.raw("<p class=\"muted\">")
            .text(format_args!(
                "{} more not shown (see /queue).",
                q.pods.len() - MAX_ROWS
            ))
            .raw("</p>");
    }
    p.finish(StatusCode::OK)
}
