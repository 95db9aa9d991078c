//! What a simulation measured, per policy: as a text table, JSON, and an SVG plot.

use std::fmt::Write;

use serde::Serialize;

use super::Policy;
use super::scenario::{Kind, Scenario};

/// The measurements of one policy's run.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyReport {
    /// The policy.
    pub policy: Policy,
    /// Pods that arrived (including replacements of pods lost with a removed node).
    pub arrived: usize,
    /// Pods placed.
    pub placed: usize,
    /// Pods that finished.
    pub completed: usize,
    /// Pods running at the end.
    pub running_end: usize,
    /// Pods still pending at the end that some node of the farm could hold by requests.
    pub pending_end: usize,
    /// Pods still pending at the end that fit no node the farm ever has by their requests
    /// (CPU, memory and disk on one node): the same under every policy, so not a loss.
    pub infeasible_end: usize,
    /// Of `pendingEnd`, the pods still pending once the scenario's `drain` has passed with
    /// nothing arriving (or sooner, when none is left): the pods the policy could not
    /// place, told from the ones that arrived just before the end.
    pub pending_after_drain: usize,
    /// Pods placed during the drain.
    pub drain_placed: usize,
    /// The longest time to schedule (arrival to placement) among them, seconds; 0 if none.
    /// The time-to-schedule percentiles count the pods placed by the end only.
    pub drain_wait_max_s: f64,
    /// Pods taken off their node: lost with a removed node, OOM-killed builds, evicted
    /// and moved pods. Each is submitted again by its controller (a build's Job after its
    /// backoff: 10 s doubling to 6 min), unless its build gave up (`buildsFailed`) or still
    /// waits for its retry at the end (`retriesPendingEnd`).
    pub lost_and_resubmitted: usize,
    /// Of those, submitted again.
    pub resubmitted: usize,
    /// Builds whose Job gave up: restarted more than `backoffLimit` (6) times.
    pub builds_failed: usize,
    /// Pods still waiting for their controller's retry at the end.
    pub retries_pending_end: usize,
    /// Scheduling cycles.
    pub attempts: usize,
    /// Cycles that found no node.
    pub unschedulable_attempts: usize,
    /// Time from arrival to placement, p50, seconds of simulated time.
    pub time_to_schedule_p50_s: f64,
    /// Same, p99.
    pub time_to_schedule_p99_s: f64,
    /// Turnaround of the builds that completed: from their first arrival to their
    /// completion (retries after a kill included), p50, seconds — what a developer waiting
    /// for CI feels.
    pub turnaround_p50_s: f64,
    /// Same, p95.
    pub turnaround_p95_s: f64,
    /// Same, p99.
    pub turnaround_p99_s: f64,
    /// Builds that completed after the warm wait held them at least once.
    pub held_builds: usize,
    /// Their mean turnaround, seconds.
    pub held_turnaround_mean_s: f64,
    /// The mean turnaround they would have had placed cold when first held: the wait until
    /// that hold, then their cold run length.
    pub held_cold_turnaround_mean_s: f64,
    /// Of the held builds, those whose turnaround beat that cold start.
    pub holds_paid: usize,
    /// Node-hours with at least one pod running.
    pub node_hours_busy: f64,
    /// Mean real CPU utilisation over node-steps.
    pub cpu_util_mean: f64,
    /// p95 of it.
    pub cpu_util_p95: f64,
    /// Mean real memory utilisation over node-steps.
    pub memory_util_mean: f64,
    /// p95 of it.
    pub memory_util_p95: f64,
    /// Node-hours above 90 % real memory.
    pub node_hours_memory_above_90: f64,
    /// Of those, the node-hours in which the node's largest pod with the node's system
    /// memory alone passes 90 %: wherever the other pods had gone, that node was above 90 %
    /// (and on a farm of equal nodes so was any node that pod could have gone to).
    pub node_hours_memory_above_90_one_pod: f64,
    /// Mean over steps of (p95 − p50) of real memory utilisation across nodes.
    pub memory_spread_p95_minus_p50: f64,
    /// Builder placements of a builder that ran before.
    pub repeat_placements: usize,
    /// Of those, placements on a node the builder ran on (warm cache).
    pub warm_placements: usize,
    /// `warm / repeat`.
    pub warm_rate: f64,
    /// Of the repeat placements that went cold, those made while some node the builder ran
    /// on had room for the pod by requests (counted as the step's placements are bound):
    /// the cold placements a policy could have avoided without waiting. The others found
    /// every warm node full, where only waiting would have kept the cache.
    pub cold_with_warm_room: usize,
    /// `(warm + coldWithWarmRoom) / repeat`: the most a policy could have sent warm without
    /// waiting, given the run's other placements (docs/configuration.md, *Waiting for a warm cache*). A
    /// ceiling by requests: a warm node with room by requests may have been full in real
    /// memory, where headroom's real filters keep builds off it on purpose.
    pub warm_ceiling_rate: f64,
    /// Of the repeat placements that went cold, those whose scheduling cycle found some
    /// node the builder ran on feasible (it passed every filter, among the nodes the cycle
    /// evaluated) and placed the pod elsewhere: the cold placements the scores chose. The
    /// others had every warm node filtered out (by requests, or by headroom's real-usage
    /// filters).
    pub cold_warm_feasible: usize,
    /// Of `coldWarmFeasible`, those where History gave a feasible warm node points and the
    /// other scores (RealHeadroom's free room, the upstream plugins') outweighed them. The
    /// rest History gave no points: its band judged every feasible warm node too hot, they
    /// were further back than the history it keeps, or it did not score (always, under the
    /// request baseline).
    pub cold_warm_outscored: usize,
    /// Warm pods still running at the end.
    pub warm_running: usize,
    /// Build time saved by warm caches, hours.
    pub build_hours_saved: f64,
    /// Pods the kernel's OOM killer took (a node's real memory exceeded its capacity).
    pub oom_kills: usize,
    /// Pods the kubelet evicted under memory pressure.
    pub evictions: usize,
    /// Pods preempted by higher-priority pods (DefaultPreemption's victims; the scenario's
    /// `workloads[].priority`).
    pub preemptions: usize,
    /// Build time thrown away by OOM kills, evictions and advice moves (the build runs
    /// again from scratch), hours.
    pub build_hours_lost: f64,
    /// Build time added by CPU contention (a node's CPU demand above its capacity), hours.
    pub build_hours_slowed: f64,
    /// `build_hours_slowed` over the planned run time of the builds placed.
    pub build_slowdown: f64,
    /// Pods placed by the usage fallback (`usage.maxWait`).
    pub fallback_placements: u64,
    /// Cycles the warm wait (`usage.warmWait`) held a pod for a node with its build cache.
    pub warm_holds: u64,
    /// Pods evicted because the descheduling advice suggested moving them
    /// (`--act-on-advice`; they are submitted again and placed anew).
    pub advice_moves: usize,
    /// Node-hours the descheduling advice judged hot (evaluated at every usage refresh).
    pub advice_hot_node_hours: f64,
    /// Scheduling cycles per second of wall time spent in them.
    pub decisions_per_second: f64,
    /// Wall time in scheduling cycles, seconds.
    pub decision_wall_s: f64,
    /// (hour, mean memory utilisation, pending pods) per step, for the plot.
    #[serde(skip)]
    pub series: Vec<(f64, f64, usize)>,
    #[serde(skip)]
    pub(crate) latencies_s: Vec<f64>,
    #[serde(skip)]
    pub(crate) turnarounds_s: Vec<f64>,
    /// (turnaround got, turnaround cold at the first hold) of each held build, seconds.
    #[serde(skip)]
    pub(crate) held_s: Vec<(f64, f64)>,
    #[serde(skip)]
    pub(crate) build_ms_saved: f64,
    #[serde(skip)]
    pub(crate) build_ms_lost: f64,
    #[serde(skip)]
    pub(crate) build_ms_slowed: f64,
    #[serde(skip)]
    pub(crate) build_ms_planned: f64,
    #[serde(skip)]
    pub(crate) advice_hot_node_ms: f64,
    #[serde(skip)]
    cpu_utils: Vec<f64>,
    #[serde(skip)]
    mem_utils: Vec<f64>,
    #[serde(skip)]
    busy_ms: i64,
    #[serde(skip)]
    hot_ms: i64,
    #[serde(skip)]
    hot_one_pod_ms: i64,
    #[serde(skip)]
    spreads: Vec<f64>,
    #[serde(skip)]
    tick_mem: (f64, usize),
}

fn quantile(v: &mut [f64], q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let pos = (v.len() - 1) as f64 * q;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    v[lo] + (v[hi] - v[lo]) * (pos - lo as f64)
}

fn mean(v: &[f64]) -> f64 {
    if v.is_empty() {
        0.0
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

impl PolicyReport {
    pub(crate) fn new(policy: Policy) -> PolicyReport {
        PolicyReport {
            policy,
            arrived: 0,
            placed: 0,
            completed: 0,
            running_end: 0,
            pending_end: 0,
            infeasible_end: 0,
            pending_after_drain: 0,
            drain_placed: 0,
            drain_wait_max_s: 0.0,
            lost_and_resubmitted: 0,
            resubmitted: 0,
            builds_failed: 0,
            retries_pending_end: 0,
            attempts: 0,
            unschedulable_attempts: 0,
            time_to_schedule_p50_s: 0.0,
            time_to_schedule_p99_s: 0.0,
            turnaround_p50_s: 0.0,
            turnaround_p95_s: 0.0,
            turnaround_p99_s: 0.0,
            held_builds: 0,
            held_turnaround_mean_s: 0.0,
            held_cold_turnaround_mean_s: 0.0,
            holds_paid: 0,
            node_hours_busy: 0.0,
            cpu_util_mean: 0.0,
            cpu_util_p95: 0.0,
            memory_util_mean: 0.0,
            memory_util_p95: 0.0,
            node_hours_memory_above_90: 0.0,
            node_hours_memory_above_90_one_pod: 0.0,
            memory_spread_p95_minus_p50: 0.0,
            repeat_placements: 0,
            warm_placements: 0,
            warm_rate: 0.0,
            cold_with_warm_room: 0,
            warm_ceiling_rate: 0.0,
            cold_warm_feasible: 0,
            cold_warm_outscored: 0,
            warm_running: 0,
            build_hours_saved: 0.0,
            oom_kills: 0,
            evictions: 0,
            preemptions: 0,
            build_hours_lost: 0.0,
            build_hours_slowed: 0.0,
            build_slowdown: 0.0,
            fallback_placements: 0,
            warm_holds: 0,
            advice_moves: 0,
            advice_hot_node_hours: 0.0,
            decisions_per_second: 0.0,
            decision_wall_s: 0.0,
            series: Vec::new(),
            latencies_s: Vec::new(),
            turnarounds_s: Vec::new(),
            held_s: Vec::new(),
            build_ms_saved: 0.0,
            build_ms_lost: 0.0,
            build_ms_slowed: 0.0,
            build_ms_planned: 0.0,
            advice_hot_node_ms: 0.0,
            cpu_utils: Vec::new(),
            mem_utils: Vec::new(),
            busy_ms: 0,
            hot_ms: 0,
            hot_one_pod_ms: 0,
            spreads: Vec::new(),
            tick_mem: (0.0, 0),
        }
    }

    /// One node's step: its CPU and memory utilisation, `one_pod` the share of its memory
    /// its largest pod and its system memory take alone.
    pub(crate) fn observe_node(
        &mut self,
        cpu: f64,
        mem: f64,
        one_pod: f64,
        step_ms: i64,
        busy: bool,
    ) {
        self.cpu_utils.push(cpu);
        self.mem_utils.push(mem);
        if busy {
            self.busy_ms += step_ms;
        }
        if mem > 0.9 {
            self.hot_ms += step_ms;
            if one_pod > 0.9 {
                self.hot_one_pod_ms += step_ms;
            }
        }
        self.tick_mem.0 += mem;
        self.tick_mem.1 += 1;
    }

    pub(crate) fn observe_spread(&mut self, mems: &mut [f64]) {
        if !mems.is_empty() {
            let p95 = quantile(mems, 0.95);
            let p50 = quantile(mems, 0.5);
            self.spreads.push(p95 - p50);
        }
    }

    /// Mean memory utilisation of the step just observed (resets for the next).
    pub(crate) fn tick_mean_mem(&mut self) -> f64 {
        let (sum, n) = std::mem::take(&mut self.tick_mem);
        if n == 0 { 0.0 } else { sum / n as f64 }
    }

    pub(crate) fn finish(&mut self) {
        let mut lat = std::mem::take(&mut self.latencies_s);
        self.time_to_schedule_p50_s = quantile(&mut lat, 0.5);
        self.time_to_schedule_p99_s = quantile(&mut lat, 0.99);
        self.latencies_s = lat;
        let mut t = std::mem::take(&mut self.turnarounds_s);
        self.turnaround_p50_s = quantile(&mut t, 0.5);
        self.turnaround_p95_s = quantile(&mut t, 0.95);
        self.turnaround_p99_s = quantile(&mut t, 0.99);
        self.turnarounds_s = t;
        self.held_builds = self.held_s.len();
        let got: Vec<f64> = self.held_s.iter().map(|h| h.0).collect();
        let cold: Vec<f64> = self.held_s.iter().map(|h| h.1).collect();
        self.held_turnaround_mean_s = mean(&got);
        self.held_cold_turnaround_mean_s = mean(&cold);
        self.holds_paid = self.held_s.iter().filter(|h| h.0 < h.1).count();
        self.node_hours_busy = self.busy_ms as f64 / 3_600_000.0;
        self.node_hours_memory_above_90 = self.hot_ms as f64 / 3_600_000.0;
        self.node_hours_memory_above_90_one_pod = self.hot_one_pod_ms as f64 / 3_600_000.0;
        self.cpu_util_mean = mean(&self.cpu_utils);
        self.memory_util_mean = mean(&self.mem_utils);
        let (mut c, mut m) = (
            std::mem::take(&mut self.cpu_utils),
            std::mem::take(&mut self.mem_utils),
        );
        self.cpu_util_p95 = quantile(&mut c, 0.95);
        self.memory_util_p95 = quantile(&mut m, 0.95);
        self.memory_spread_p95_minus_p50 = mean(&self.spreads);
        self.warm_rate = if self.repeat_placements == 0 {
            0.0
        } else {
            self.warm_placements as f64 / self.repeat_placements as f64
        };
        self.warm_ceiling_rate = if self.repeat_placements == 0 {
            0.0
        } else {
            (self.warm_placements + self.cold_with_warm_room) as f64 / self.repeat_placements as f64
        };
        self.build_hours_saved = self.build_ms_saved / 3_600_000.0;
        self.build_hours_lost = self.build_ms_lost / 3_600_000.0;
        self.advice_hot_node_hours = self.advice_hot_node_ms / 3_600_000.0;
        self.build_hours_slowed = self.build_ms_slowed / 3_600_000.0;
        self.build_slowdown = if self.build_ms_planned > 0.0 {
            self.build_ms_slowed / self.build_ms_planned
        } else {
            0.0
        };
        self.decisions_per_second = if self.decision_wall_s > 0.0 {
            self.attempts as f64 / self.decision_wall_s
        } else {
            0.0
        };
    }

    /// Whether every pod that arrived is accounted for: completed, running, pending, or
    /// taken off its node — and each of those submitted again, given up with its build,
    /// or waiting for its retry.
    pub fn no_pod_lost(&self) -> bool {
        self.arrived
            == self.completed
                + self.running_end
                + self.pending_end
                + self.infeasible_end
                + self.lost_and_resubmitted
            && self.lost_and_resubmitted
                == self.resubmitted + self.builds_failed + self.retries_pending_end
    }
}

/// The whole report.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// Seed used.
    pub seed: u64,
    /// Simulated hours.
    pub hours: f64,
    /// Step, seconds.
    pub step_s: f64,
    /// Warm-cache speed-ups the scenario assumes, per builder workload.
    pub warm_speedups: Vec<(String, f64)>,
    /// One entry per policy.
    pub policies: Vec<PolicyReport>,
}

impl Report {
    pub(crate) fn new(s: &Scenario, seed: u64) -> Report {
        Report {
            seed,
            hours: s.duration.as_secs_f64() / 3600.0,
            step_s: s.step.as_secs_f64(),
            warm_speedups: s
                .workloads
                .iter()
                .filter(|w| w.kind == Kind::Builder)
                .map(|w| (w.name.clone(), w.warm_speedup))
                .collect(),
            policies: Vec::new(),
        }
    }

    /// The report of a policy.
    pub fn policy(&self, p: Policy) -> Option<&PolicyReport> {
        self.policies.iter().find(|r| r.policy == p)
    }

    /// A text table, policies as columns.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "simulated {:.1} h in {} s steps, seed {}; warm-cache speed-up assumed: {}",
            self.hours,
            self.step_s,
            self.seed,
            self.warm_speedups
                .iter()
                .map(|(w, s)| format!("{w} {:.0} %", s * 100.0))
                .collect::<Vec<_>>()
                .join(", ")
        );
        type Row = (&'static str, fn(&PolicyReport) -> String);
        let rows: Vec<Row> = vec![
            ("pods arrived", |r| r.arrived.to_string()),
            ("placed", |r| r.placed.to_string()),
            ("completed", |r| r.completed.to_string()),
            ("pending at end", |r| r.pending_end.to_string()),
            ("  placed in the drain, longest wait", |r| {
                format!("{}, {:.0} s", r.drain_placed, r.drain_wait_max_s)
            }),
            ("  still pending after the drain", |r| {
                r.pending_after_drain.to_string()
            }),
            ("infeasible at end (fit no node)", |r| {
                r.infeasible_end.to_string()
            }),
            ("unschedulable attempts", |r| {
                r.unschedulable_attempts.to_string()
            }),
            ("time to schedule p50", |r| {
                format!("{:.0} s", r.time_to_schedule_p50_s)
            }),
            ("time to schedule p99", |r| {
                format!("{:.0} s", r.time_to_schedule_p99_s)
            }),
            ("build turnaround p50 / p95 / p99", |r| {
                format!(
                    "{:.0} / {:.0} / {:.0} s",
                    r.turnaround_p50_s, r.turnaround_p95_s, r.turnaround_p99_s
                )
            }),
            ("  held builds: got / cold at hold", |r| {
                format!(
                    "{}: {:.0} / {:.0} s ({} paid)",
                    r.held_builds,
                    r.held_turnaround_mean_s,
                    r.held_cold_turnaround_mean_s,
                    r.holds_paid
                )
            }),
            ("node-hours busy", |r| format!("{:.1}", r.node_hours_busy)),
            ("real CPU mean / p95", |r| {
                format!(
                    "{:.1} % / {:.1} %",
                    r.cpu_util_mean * 100.0,
                    r.cpu_util_p95 * 100.0
                )
            }),
            ("real memory mean / p95", |r| {
                format!(
                    "{:.1} % / {:.1} %",
                    r.memory_util_mean * 100.0,
                    r.memory_util_p95 * 100.0
                )
            }),
            ("node-hours > 90 % memory", |r| {
                format!("{:.2}", r.node_hours_memory_above_90)
            }),
            ("  of which one pod alone", |r| {
                format!("{:.2}", r.node_hours_memory_above_90_one_pod)
            }),
            ("memory spread p95−p50", |r| {
                format!("{:.1} pts", r.memory_spread_p95_minus_p50 * 100.0)
            }),
            ("warm-cache placements", |r| {
                format!(
                    "{}/{} ({:.1} %)",
                    r.warm_placements,
                    r.repeat_placements,
                    r.warm_rate * 100.0
                )
            }),
            ("  ceiling without waiting", |r| {
                format!(
                    "{:.1} % (+{} cold)",
                    r.warm_ceiling_rate * 100.0,
                    r.cold_with_warm_room
                )
            }),
            ("  cold, a warm node feasible", |r| {
                r.cold_warm_feasible.to_string()
            }),
            ("    of which History scored it", |r| {
                r.cold_warm_outscored.to_string()
            }),
            ("build hours saved", |r| {
                format!("{:.1}", r.build_hours_saved)
            }),
            ("OOM kills / evictions", |r| {
                format!("{} / {}", r.oom_kills, r.evictions)
            }),
            ("preempted by higher priority", |r| {
                r.preemptions.to_string()
            }),
            ("builds failed (backoffLimit)", |r| {
                r.builds_failed.to_string()
            }),
            ("build hours lost (restarts)", |r| {
                format!("{:.1}", r.build_hours_lost)
            }),
            ("CPU contention slowdown", |r| {
                format!(
                    "{:.1} h ({:.1} %)",
                    r.build_hours_slowed,
                    r.build_slowdown * 100.0
                )
            }),
            ("usage fallback placements", |r| {
                r.fallback_placements.to_string()
            }),
            ("warm holds (usage.warmWait)", |r| r.warm_holds.to_string()),
            ("advice: hot node-hours / moves", |r| {
                format!("{:.2} / {}", r.advice_hot_node_hours, r.advice_moves)
            }),
            ("decisions/s", |r| format!("{:.0}", r.decisions_per_second)),
        ];
        // The label column as wide as the longest label, so every column lines up.
        let width = rows
            .iter()
            .map(|(l, _)| l.chars().count())
            .max()
            .unwrap_or(0);
        let mut header = format!("{:<width$}", "");
        for p in &self.policies {
            header.push_str(&format!("{:>22}", p.policy.as_str()));
        }
        let _ = writeln!(out, "{header}");
        for (label, f) in rows {
            let mut line = format!("{label:<width$}");
            for p in &self.policies {
                line.push_str(&format!("{:>22}", f(p)));
            }
            let _ = writeln!(out, "{line}");
        }
        out
    }

    /// An SVG plot: mean real memory utilisation and pending pods over time, per policy.
    pub fn to_svg(&self) -> String {
        let (w, h, pad) = (900.0f64, 420.0f64, 50.0f64);
        let max_t = self.hours.max(1e-9);
        let max_pending = self
            .policies
            .iter()
            .flat_map(|p| p.series.iter().map(|s| s.2))
            .max()
            .unwrap_or(0)
            .max(1) as f64;
        let colors = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"];
        let mut svg = format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
        );
        let half = (h - 3.0 * pad) / 2.0;
        for (panel, title) in [
            (0, "mean real memory utilisation (0–100 %)"),
            (1, &*format!("pending pods (0–{max_pending:.0})")),
        ] {
            let top = pad + panel as f64 * (half + pad);
            let _ = writeln!(
                svg,
                "<rect x=\"{pad}\" y=\"{top}\" width=\"{}\" height=\"{half}\" fill=\"none\" stroke=\"#999\"/>",
                w - 2.0 * pad
            );
            let _ = writeln!(svg, "<text x=\"{pad}\" y=\"{}\">{title}</text>", top - 6.0);
            for (i, p) in self.policies.iter().enumerate() {
                let pts: Vec<String> = p
                    .series
                    .iter()
                    .map(|(t, mem, pending)| {
                        let v = if panel == 0 {
                            mem.min(1.0)
                        } else {
                            *pending as f64 / max_pending
                        };
                        format!(
                            "{:.1},{:.1}",
                            pad + t / max_t * (w - 2.0 * pad),
                            top + half - v * half
                        )
                    })
                    .collect();
                let _ = writeln!(
                    svg,
                    "<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\" points=\"{}\"/>",
                    colors[i % colors.len()],
                    pts.join(" ")
                );
            }
        }
        for (i, p) in self.policies.iter().enumerate() {
            let _ = writeln!(
                svg,
                "<text x=\"{}\" y=\"{}\" fill=\"{}\">{}</text>",
                w - pad - 140.0,
                20.0 + 14.0 * i as f64,
                colors[i % colors.len()],
                p.policy.as_str()
            );
        }
        let _ = writeln!(
            svg,
            "<text x=\"{}\" y=\"{}\">hours</text>",
            w / 2.0,
            h - 10.0
        );
        svg.push_str("</svg>\n");
        svg
    }
}
