//! `/ui/pods/{namespace}/{pod}`: one pod's latest decision (the one `/explain` answers):
//! the result, the fallback, the inputs the decision used, why nodes were rejected, and
//! every node's verdict with its scores as bars.

use std::collections::BTreeMap;

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::{StatusCode, Uri};
use axum::response::Response;

use super::{Page, age, bytes, error_page, load_class, when};
use crate::api::explain::{Key, lookup};
use crate::api::{ApiError, ApiState};
use crate::decisions::{DecisionInputs, ExplainResponse};
use headroom_scheduler::framework::Code;
use headroom_scheduler::framework::decision::{Explanation, NodeVerdict};
use headroom_scheduler::key::PodKey;

/// At most this many node rows: beyond, the JSON has them all.
const MAX_ROWS: usize = 1_000;

/// `GET /ui/pods/{namespace}/{pod}`.
pub(super) async fn page(
    State(state): State<ApiState>,
    uri: Uri,
    path: Result<Path<(String, String)>, PathRejection>,
) -> Response {
    let key = match path {
        Ok(Path((namespace, name))) => PodKey::new(namespace, name),
        Err(e) => return error_page(&uri, &ApiError::BadRequest(e.body_text())),
    };
    let r = match lookup(&state, Key::Pod(key.clone())).await {
        Ok(r) => r,
        Err(e) => return error_page(&uri, &e),
    };
    let title = key.to_string();
    let mut p = Page::start(&uri, title.as_str());
    summary(&mut p, &r, &key, state.now_ms());
    events(&mut p, &r.explanation);
    rejections(&mut p, &r.explanation);
    verdicts(&mut p, &r.explanation);
    inputs(&mut p, &r.inputs, r.explanation.node.as_deref());
    notes(&mut p, &r.explanation);
    p.finish(StatusCode::OK)
}

/// The result, when, and where the JSON and text are.
fn summary(p: &mut Page, r: &ExplainResponse, pod: &PodKey, now: i64) {
    let e = &r.explanation;
    p.h.raw("<dl><dt>result</dt><dd>");
    match (&e.node, &e.message) {
        (Some(node), _) => {
            p.h.raw("<span class=\"tag placed\">placed</span> on <b>")
                .text(node)
                .raw("</b>");
        }
        (None, message) => {
            p.h.raw("<span class=\"tag unschedulable\">not placed</span> ")
                .text(message.as_deref().unwrap_or(""));
        }
    }
    p.h.raw("</dd><dt>decided</dt>")
        .el("dd", when(r.decided_at_ms, now))
        .raw("<dt>cycle</dt>")
        .el("dd", format_args!("{:.3} ms", r.cycle_seconds * 1e3))
        .raw("<dt>feasible nodes</dt>")
        .el(
            "dd",
            format_args!(
                "{} of {}",
                e.feasible_nodes,
                e.nodes.len() + e.omitted_nodes
            ),
        )
        .raw("<dt>profile</dt>")
        .el("dd", &e.profile)
        .raw("<dt>uid</dt>")
        .el("dd", &e.uid)
        .raw("<dt>snapshot</dt>")
        .el("dd", format_args!("generation {}", e.snapshot_generation))
        .raw("<dt>as data</dt><dd>");
    let json = p.href(&format!(
        "explain/{}/{}",
        super::encode_segment(&pod.namespace),
        super::encode_segment(&pod.name)
    ));
    let text = format!("{json}?format=text");
    p.h.link(&json, "JSON").raw(" · ").link(&text, "text");
    p.h.raw("</dd></dl>");
}

/// The fallback, preemption and volume bindings, when any.
fn events(p: &mut Page, e: &Explanation) {
    if let Some(f) = &e.fallback {
        p.h.raw("<p class=\"note\"><b>Fallback.</b> ")
            .text(f.describe())
            .raw("</p>");
    }
    if let Some(n) = &e.nominated_node {
        let victims = if e.victims.is_empty() {
            "none".to_string()
        } else {
            e.victims.join(", ")
        };
        p.h.raw("<p class=\"note\"><b>Preemption.</b> ")
            .text(format_args!("nominated node {n}; victims: {victims}"))
            .raw("</p>");
    }
    for (claim, pv) in &e.volume_bindings {
        p.h.raw("<p class=\"note\">")
            .text(format_args!("volume binding: claim {claim} → PV {pv}"))
            .raw("</p>");
    }
}

/// What the plugins said besides the verdicts: PreFilter statuses (skips in one line),
/// skipped score plugins, notes.
fn notes(p: &mut Page, e: &Explanation) {
    p.h.raw("<h2>Plugins</h2>");
    let skipped: Vec<&str> = e
        .pre_filter
        .iter()
        .filter(|s| s.code == Code::Skip)
        .map(|s| s.plugin.as_str())
        .collect();
    for n in &e.notes {
        p.h.raw("<p class=\"note\">").text(n).raw("</p>");
    }
    for s in e.pre_filter.iter().filter(|s| s.code != Code::Skip) {
        p.h.raw("<p class=\"note\">").text(format_args!(
            "PreFilter {}: {:?} {}",
            s.plugin, s.code, s.message
        ));
        if let Some(d) = &s.detail {
            p.h.text(format_args!(" ({d})"));
        }
        p.h.raw("</p>");
    }
    for (what, list) in [
        ("filter plugins skipped (PreFilter)", skipped.join(", ")),
        (
            "score plugins skipped (PreScore)",
            e.skipped_scores.join(", "),
        ),
    ] {
        if !list.is_empty() {
            p.h.raw("<p class=\"muted\">")
                .text(format_args!("{what}: {list}"))
                .raw("</p>");
        }
    }
}

/// What the decision used besides the per-node numbers ([`DecisionInputs`]).
fn inputs(p: &mut Page, i: &DecisionInputs, node: Option<&str>) {
    p.h.raw("<h2>Inputs</h2><dl><dt>builder</dt>");
    p.h.el("dd", i.builder.as_deref().unwrap_or("unknown"));
    p.h.raw("<dt>its profile</dt>");
    match &i.profile {
        Some(pr) => p.h.el(
            "dd",
            format_args!(
                "{} run(s): cpu p50 {:.3} / p95 {:.3} cores, memory p50 {} / p95 {}",
                pr.runs,
                pr.cpu.p50,
                pr.cpu.p95,
                bytes(pr.memory.p50),
                bytes(pr.memory.p95)
            ),
        ),
        None => p.h.el("dd", "none (requests stand in)"),
    };
    p.h.raw("<dt>warm cache</dt>").el(
        "dd",
        match i.warm_cache {
            Some(true) => "the chosen node is in the builder's placement history",
            Some(false) => "the chosen node is new to the builder",
            None => "unknown",
        },
    );
    p.h.raw("<dt>usage view</dt>");
    match i.usage_view_age_seconds {
        Some(a) => p.h.el("dd", format_args!("{} old", age(a))),
        None => p.h.el("dd", "none computed"),
    };
    if let (Some(n), Some(node)) = (&i.chosen_node, node) {
        let hr = &n.headroom;
        p.h.raw("<dt>")
            .text(node)
            .raw("</dt><dd>")
            .text(format_args!(
                "sample {} old{}, judged by {:?}",
                age(n.age_seconds),
                if n.stale { " (stale)" } else { "" },
                hr.basis
            ))
            .raw("<br>cpu ");
        let cpu = hr.cpu_used / hr.cpu_total;
        p.h.bar(
            cpu,
            load_class(cpu),
            format_args!(
                "{:.2} of {:.2} cores used, {:.2} free (measured {:.2}, windowed {:.2})",
                hr.cpu_used,
                hr.cpu_total,
                hr.cpu_free(),
                n.usage.cpu_cores.current,
                n.usage.cpu_cores.windowed
            ),
        );
        p.h.raw("<br>memory ");
        let mem = hr.memory_used / hr.memory_total;
        p.h.bar(
            mem,
            load_class(mem),
            format_args!(
                "{} of {} used, {} free",
                bytes(hr.memory_used),
                bytes(hr.memory_total),
                bytes(hr.memory_free())
            ),
        );
        p.h.raw("</dd>");
    }
    p.h.raw("</dl>");
}

/// Rejected nodes counted by plugin and reason: why the pod is not elsewhere, at a glance.
fn rejections(p: &mut Page, e: &Explanation) {
    let mut by: BTreeMap<(&str, String), usize> = BTreeMap::new();
    for n in e.nodes.iter().filter(|n| !n.feasible) {
        *by.entry((n.plugin.as_deref().unwrap_or("-"), n.reasons.join(", ")))
            .or_default() += 1;
    }
    if by.is_empty() {
        return;
    }
    let mut rows: Vec<_> = by.into_iter().collect();
    rows.sort_by_key(|r| std::cmp::Reverse(r.1));
    p.h.raw("<h2>Rejections</h2><table><tr><th>nodes</th><th>plugin</th><th>reason</th></tr>");
    for ((plugin, reasons), count) in rows {
        p.h.raw("<tr><td class=\"num\">")
            .text(count)
            .raw("</td>")
            .td(plugin)
            .td(reasons)
            .raw("</tr>");
    }
    p.h.raw("</table>");
}

/// Every node's verdict: the chosen node, then the feasible ones by total score, then the
/// rejected ones; at most [`MAX_ROWS`].
fn verdicts(p: &mut Page, e: &Explanation) {
    let mut nodes: Vec<&NodeVerdict> = e.nodes.iter().collect();
    nodes.sort_by_key(|n| (!n.chosen, !n.feasible, std::cmp::Reverse(n.total)));
    let best = nodes.iter().filter_map(|n| n.total).max().unwrap_or(0);
    p.h.raw("<h2>Nodes</h2><table><tr><th>node</th><th>verdict</th><th>total</th>")
        .raw("<th>scores (normalised 0–100 × weight) or why rejected</th></tr>");
    for n in nodes.iter().take(MAX_ROWS) {
        p.h.raw(if n.chosen {
            "<tr class=\"chosen\">"
        } else {
            "<tr>"
        })
        .td_nw(&n.name);
        if n.feasible {
            p.h.td(if n.chosen { "chosen" } else { "feasible" })
                .raw("<td class=\"num\">");
            match n.total {
                Some(t) if best > 0 => p.h.bar(t as f64 / best as f64, "score", t),
                Some(t) => {
                    p.h.text(t);
                }
                None => {
                    p.h.raw("–");
                }
            }
            p.h.raw("</td><td>");
            for s in &n.scores {
                p.h.raw("<small class=\"sc\">");
                p.h.bar(
                    s.normalized as f64 / 100.0,
                    "score",
                    format_args!(
                        "{} {} × {} = {}",
                        s.plugin, s.normalized, s.weight, s.weighted
                    ),
                );
                if let Some(d) = &s.detail {
                    p.h.raw(" <span class=\"muted\">").text(d).raw("</span>");
                }
                p.h.raw("</small>");
            }
            p.h.raw("</td>");
        } else {
            p.h.td("rejected")
                .raw("<td></td><td><b>")
                .text(n.plugin.as_deref().unwrap_or("-"))
                .raw("</b>: ")
                .text(n.reasons.join(", "));
            if let Some(d) = &n.detail {
                p.h.raw(" <span class=\"muted\">(").text(d).raw(")</span>");
            }
            p.h.raw("</td>");
        }
        p.h.raw("</tr>");
    }
    p.h.raw("</table>");
    let hidden = nodes.len().saturating_sub(MAX_ROWS) + e.omitted_nodes;
    if hidden > 0 {
        p.h.raw("<p class=\"muted\">")
            .text(format_args!(
                "{hidden} more node(s) not shown (see the JSON)."
            ))
            .raw("</p>");
    }
}
