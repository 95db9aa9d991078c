//! `/ui/nodes`: each node's real headroom (what the scheduler decides on: measured usage
//! plus recent placements) next to what its pods request, from the same list as `/nodes`.

use axum::extract::State;
use axum::http::{StatusCode, Uri};
use axum::response::Response;

use super::{Page, age, bytes, load_class};
use crate::api::ApiState;
use crate::api::nodes::{NodeView, node_list};
use headroom_scheduler::usage::Basis;

/// `GET /ui/nodes`.
pub(super) async fn page(State(state): State<ApiState>, uri: Uri) -> Response {
    let list = node_list(&state);
    let mut p = Page::start(&uri, "Nodes");
    p.h.raw("<p class=\"muted\">")
        .text(format_args!(
            "{} node(s), the most loaded first, {} without fresh usage; usage view computed {}. Real: what the scheduler counts as used (measured, plus pods placed since the sample; requests where usage is stale or missing). Requested: the pods' requests.",
            list.nodes.len(),
            list.stale_nodes,
            if list.usage_generated_ms > 0 {
                format!("{} ago", age((list.now_ms - list.usage_generated_ms).max(0) as f64 / 1000.0))
            } else {
                "never".to_string()
            }
        ))
        .raw("</p>");
    if list.nodes.is_empty() {
        p.h.raw("<p class=\"note\">No node in the snapshot.</p>");
        return p.finish(StatusCode::OK);
    }
    p.h.raw("<table><tr><th>node</th><th>pods</th><th>judged by</th>")
        .raw("<th>memory: real</th><th>memory: requested</th>")
        .raw("<th>cpu: real</th><th>cpu: requested</th><th>sample</th></tr>");
    // The most loaded first: on a large cluster those are what the page is opened for.
    let mut nodes: Vec<&NodeView> = list.nodes.iter().collect();
    nodes.sort_by(|a, b| used(b).total_cmp(&used(a)));
    for n in nodes.iter().take(MAX_ROWS) {
        row(&mut p, n);
    }
    p.h.raw("</table>");
    if nodes.len() > MAX_ROWS {
        p.h.raw("<p class=\"muted\">")
            .text(format_args!(
                "{} less loaded node(s) not shown (see /nodes).",
                nodes.len() - MAX_ROWS
            ))
            .raw("</p>");
    }
    p.finish(StatusCode::OK)
}

/// At most this many rows: a page a browser renders at once.
const MAX_ROWS: usize = 1_000;

/// The larger of the node's real memory and CPU use, as a share of capacity.
fn used(n: &NodeView) -> f64 {
    let h = &n.headroom;
    let share = |used: f64, total: f64| if total > 0.0 { used / total } else { 0.0 };
    share(h.memory_used, h.memory_total).max(share(h.cpu_used, h.cpu_total))
}

fn row(p: &mut Page, n: &NodeView) {
    let hr = &n.headroom;
    let href = p.href(&format!("nodes/{}", super::encode_segment(&n.name)));
    p.h.raw("<tr><td>").link(&href, &n.name);
    if n.unschedulable {
        p.h.raw(" <span class=\"tag error\">cordoned</span>");
    }
    if let Some(e) = &n.error {
        p.h.raw(" <span class=\"tag unschedulable\">unusable</span> ")
            .text(e);
    }
    p.h.raw("</td><td class=\"num\">").text(n.pods).raw("</td>");
    p.h.td(match hr.basis {
        Basis::Measured => "measured",
        Basis::StaleFloor => "requests (stale usage as floor)",
        Basis::Requests => "requests (no usage)",
    });
    let mem = hr.memory_used / hr.memory_total;
    p.h.raw("<td>");
    p.h.bar(
        mem,
        load_class(mem),
        format_args!(
            "{} free of {}",
            bytes(hr.memory_free()),
            bytes(hr.memory_total)
        ),
    );
    p.h.raw("</td><td>");
    let alloc_mem = n.allocatable.memory_bytes as f64;
    p.h.bar(
        n.requested.memory_bytes as f64 / alloc_mem,
        "req",
        format_args!(
            "{} of {}",
            bytes(n.requested.memory_bytes as f64),
            bytes(alloc_mem)
        ),
    );
    p.h.raw("</td><td>");
    let cpu = hr.cpu_used / hr.cpu_total;
    p.h.bar(
        cpu,
        load_class(cpu),
        format_args!("{:.2} free of {:.2} cores", hr.cpu_free(), hr.cpu_total),
    );
    p.h.raw("</td><td>");
    p.h.bar(
        n.requested.cpu_cores / n.allocatable.cpu_cores,
        "req",
        format_args!(
            "{:.2} of {:.2} cores",
            n.requested.cpu_cores, n.allocatable.cpu_cores
        ),
    );
    p.h.raw("</td>");
    match n.age_seconds {
        Some(a) => p.h.td(format_args!(
            "{} old{}",
            age(a),
            if n.stale { " (stale)" } else { "" }
        )),
        None => p.h.raw("<td class=\"muted\">none</td>"),
    };
    p.h.raw("</tr>");
}
