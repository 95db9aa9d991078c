//! `/ui/advice`: the descheduling advice (hot nodes by real memory, the moves that would
//! help most), from the same computation as `/advice`. Nothing is evicted.

use axum::extract::State;
use axum::http::{StatusCode, Uri};
use axum::response::Response;

use super::{Page, age, bytes, load_class};
use crate::advice::HotNode;
use crate::api::ApiState;
use crate::decisions::DecisionLog;

/// `GET /ui/advice`.
pub(super) async fn page(State(state): State<ApiState>, uri: Uri) -> Response {
    let a = state.advice();
    let mut p = Page::start(&uri, "Advice");
    p.h.raw("<p class=\"muted\">")
        .text(format_args!(
            "{} hot node(s) above {:.0} % real memory of {} judged ({} without fresh usage); {} move(s) suggested toward {:.0} %, freeing {} above the target. Nothing is evicted.",
            a.hot_nodes.len(),
            a.hot_memory_percent,
            a.nodes_judged,
            a.stale_nodes,
            a.moves,
            a.target_memory_percent,
            bytes(a.excess_bytes)
        ))
        .raw("</p>");
    if a.hot_nodes.is_empty() {
        p.h.raw("<p class=\"note\">No node runs hot.</p>");
    }
    for n in &a.hot_nodes {
        hot_node(&mut p, n, state.decisions());
    }
    p.finish(StatusCode::OK)
}

fn hot_node(p: &mut Page, n: &HotNode, decisions: &DecisionLog) {
    p.h.raw("<h2>").text(&n.node).raw("</h2><p>");
    let used = n.memory_percent / 100.0;
    p.h.bar(
        used,
        load_class(used),
        format_args!(
            "{:.1} % real memory ({} of {}), {} pod(s); {} above the target, {} not covered by a move",
            n.memory_percent,
            bytes(n.memory_used_bytes),
            bytes(n.memory_total_bytes),
            n.pods,
            bytes(n.excess_bytes),
            bytes(n.uncovered_bytes)
        ),
    );
    p.h.raw("</p>");
    if n.moves.is_empty() {
        return;
    }
    p.h.raw("<table><tr><th>pod</th><th>builder</th><th>frees</th><th>running</th>")
        .raw("<th>restart cost</th><th>to</th><th>its memory after</th></tr>");
    for m in &n.moves {
        p.h.raw("<tr><td>");
        // A link only where there is a decision to show: the pods advice moves have often
        // run for long, past the decision log's memory.
        if decisions.by_pod(&m.pod).is_some() {
            let href = p.pod_href(&m.pod);
            p.h.link(&href, &m.pod);
        } else {
            p.h.text(&m.pod);
        }
        p.h.raw("</td>")
            .td(&m.builder)
            .td(format_args!(
                "{} ({})",
                bytes(m.predicted_memory_bytes),
                m.prediction
            ))
            .td(m.running_seconds.map_or_else(|| "unknown".to_string(), age))
            .td(format_args!("{:.0} min", m.cost_minutes))
            .td(&m.to)
            .raw("<td>");
        let after = m.to_memory_percent_after / 100.0;
        p.h.bar(
            after,
            load_class(after),
            format_args!("{:.1} %", m.to_memory_percent_after),
        );
        p.h.raw("</td></tr>");
    }
    p.h.raw("</table>");
}
