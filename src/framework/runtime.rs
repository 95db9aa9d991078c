//! The framework runtime: one profile's plugins in order, run over a snapshot for one pod.

use rand::Rng;
use smallvec::SmallVec;

use super::decision::{Decision, Outcome, ScoreColumn};
use super::{
    Code, CycleState, FilterPlugin, MAX_NODE_SCORE, MIN_NODE_SCORE, NodeNames, Registered,
    ScorePlugin, Status,
};
use crate::snapshot::{NodeIdx, PodInfo, Snapshot};

/// A score plugin's weight in a profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PluginWeight {
    /// Plugin name.
    pub name: &'static str,
    /// Weight (≥ 1).
    pub weight: i64,
}

/// The plugins of one profile, ready to run.
#[derive(Debug, Clone)]
pub struct Framework {
    profile: String,
    plugins: Vec<Registered>,
    weights: Vec<i64>,
}

/// Reason for a node whose own status could not be read.
const NODE_UNREADABLE: &str = "node(s) had an unreadable status";

impl Framework {
    /// Builds a framework from registered plugins (in extension-point order) and the weights
    /// of the score plugins (a score plugin without a weight gets 1).
    pub fn new(profile: &str, plugins: Vec<Registered>, weights: &[PluginWeight]) -> Framework {
        let weights = plugins
            .iter()
            .map(|p| {
                weights
                    .iter()
                    .find(|w| w.name == p.name)
                    .map_or(1, |w| w.weight)
            })
            .collect();
        Framework {
            profile: profile.to_string(),
            plugins,
            weights,
        }
    }

    /// The profile (scheduler) name.
    pub fn profile(&self) -> &str {
        &self.profile
    }

    /// The registered plugins, in order.
    pub fn plugins(&self) -> &[Registered] {
        &self.plugins
    }

    /// Runs PreEnqueue plugins: `None` when the pod may be queued, else the blocking status.
    pub fn pre_enqueue(&self, pod: &PodInfo) -> Option<Status> {
        for p in &self.plugins {
            if let Some(pe) = &p.pre_enqueue {
                let s = pe.pre_enqueue(pod);
                if !s.is_success() {
                    return Some(s.with_plugin(p.name));
                }
            }
        }
        None
    }

    /// Runs one scheduling cycle (PreFilter through host selection) and returns the record
    /// together with the cycle state (for Reserve/Permit).
    pub fn schedule<R: Rng + ?Sized>(
        &self,
        pod: &PodInfo,
        snapshot: &Snapshot,
        rng: &mut R,
        explain: bool,
    ) -> (Decision, CycleState) {
        self.schedule_in(pod, snapshot, rng, CycleState::new(explain))
    }

    /// [`schedule`](Self::schedule) in a cycle state the caller prepared: what the
    /// scheduler knows about the pod beyond its spec (how long it has waited, whether the
    /// usage fallback applies) is written there before the plugins run.
    pub fn schedule_in<R: Rng + ?Sized>(
        &self,
        pod: &PodInfo,
        snapshot: &Snapshot,
        rng: &mut R,
        state: CycleState,
    ) -> (Decision, CycleState) {
        let (mut d, mut state) = self.run_cycle(pod, snapshot, rng, state);
        // Plugins' notes (ignored annotations, stale data) belong to the record whatever
        // the outcome; moved, not copied: the state is done with them.
        let mut notes = std::mem::take(&mut state.notes);
        notes.append(&mut d.notes);
        d.notes = notes;
        (d, state)
    }

    fn run_cycle<R: Rng + ?Sized>(
        &self,
        pod: &PodInfo,
        snapshot: &Snapshot,
        rng: &mut R,
        mut state: CycleState,
    ) -> (Decision, CycleState) {
        let explain = state.explain;
        let mut d = Decision::new(
            &pod.namespace,
            &pod.name,
            &pod.uid,
            &self.profile,
            snapshot.generation(),
            snapshot.names(),
        );
        if let Some(err) = &pod.error {
            d.outcome = Outcome::Error {
                message: format!(
                    "pod {}/{} cannot be scheduled: {err}",
                    pod.namespace, pod.name
                ),
            };
            d.absent =
                Some(Status::unresolvable("pod has an unreadable spec").with_detail(err.clone()));
            return (d, state);
        }
        if snapshot.is_empty() {
            d.outcome = Outcome::Unschedulable {
                message: "no nodes available to schedule pods".to_string(),
            };
            return (d, state);
        }

        // PreFilter.
        let mut skip_filter: SmallVec<[bool; 16]> = SmallVec::from_elem(false, self.plugins.len());
        let mut restrict: Option<NodeNames> = None;
        let mut restricting: Vec<&'static str> = Vec::new();
        for (i, p) in self.plugins.iter().enumerate() {
            let Some(pf) = &p.pre_filter else { continue };
            let (s, names) = pf.pre_filter(&mut state, pod, snapshot);
            match s.code {
                Code::Success => {}
                Code::Skip => {
                    skip_filter[i] = true;
                    d.pre_filter.push(s.with_plugin(p.name));
                    continue;
                }
                Code::Unschedulable | Code::UnschedulableAndUnresolvable => {
                    let s = s.with_plugin(p.name);
                    d.absent = Some(s.clone());
                    d.pre_filter.push(s);
                    d.outcome = Outcome::Unschedulable {
                        message: d.fit_error_message(),
                    };
                    return (d, state);
                }
                Code::Error => {
                    let s = s.with_plugin(p.name);
                    d.outcome = Outcome::Error {
                        message: format!("running PreFilter plugin {:?}: {}", p.name, s.message()),
                    };
                    d.pre_filter.push(s);
                    return (d, state);
                }
            }
            if let Some(names) = names {
                restricting.push(p.name);
                restrict = Some(match restrict {
                    None => names,
                    Some(prev) => prev.intersection(&names).cloned().collect(),
                });
            }
        }

        // Which nodes to evaluate.
        let candidates: Vec<NodeIdx> = match &restrict {
            None => (0..snapshot.len() as NodeIdx).collect(),
            Some(names) => {
                restricting.sort();
                d.absent = Some(Status::unresolvable(format!(
                    "node(s) didn't satisfy plugin(s) [{}]",
                    restricting.join(" ")
                )));
                let mut v: Vec<NodeIdx> =
                    names.iter().filter_map(|n| snapshot.index_of(n)).collect();
                v.sort_unstable();
                v
            }
        };

        // Filter: each node stops at its first failing plugin.
        let filters: SmallVec<[(&'static str, &dyn FilterPlugin); 16]> = self
            .plugins
            .iter()
            .enumerate()
            .filter(|(i, _)| !skip_filter[*i])
            .filter_map(|(_, p)| p.filter.as_deref().map(|f| (p.name, f)))
            .collect();
        d.feasible.reserve(candidates.len());
        'nodes: for idx in candidates {
            let node = snapshot.node(idx);
            if let Some(err) = &node.error {
                d.rejected.push((
                    idx,
                    Status::unresolvable(NODE_UNREADABLE)
                        .with_plugin("NodeInfo")
                        .with_detail(err.clone()),
                ));
                continue;
            }
            for (name, f) in &filters {
                let s = f.filter(&state, pod, node);
                if !s.is_success() {
                    if s.code == Code::Error {
                        d.outcome = Outcome::Error {
                            message: format!(
                                "running Filter plugin {name:?} on node {:?}: {}",
                                node.name,
                                s.message()
                            ),
                        };
                        return (d, state);
                    }
                    d.rejected.push((idx, s.with_plugin(name)));
                    continue 'nodes;
                }
            }
            d.feasible.push(idx);
        }

        if d.feasible.is_empty() {
            d.outcome = Outcome::Unschedulable {
                message: d.fit_error_message(),
            };
            for p in &self.plugins {
                if let Some(pf) = &p.post_filter {
                    let s = pf.post_filter(&state, pod, &d);
                    if !s.is_success() && !s.reasons.is_empty() {
                        d.notes
                            .push(format!("PostFilter {}: {}", p.name, s.message()));
                    }
                }
            }
            return (d, state);
        }
        if d.feasible.len() == 1 {
            // Upstream skips scoring when a single node fits.
            d.outcome = Outcome::Placed {
                node: d.node_names[d.feasible[0] as usize].clone(),
            };
            return (d, state);
        }

        // PreScore.
        let mut skip_score: SmallVec<[bool; 16]> = SmallVec::from_elem(false, self.plugins.len());
        for (i, p) in self.plugins.iter().enumerate() {
            let Some(ps) = &p.pre_score else { continue };
            let s = ps.pre_score(&mut state, pod, snapshot, &d.feasible);
            match s.code {
                Code::Success => {}
                Code::Skip => skip_score[i] = true,
                _ => {
                    d.outcome = Outcome::Error {
                        message: format!("running PreScore plugin {:?}: {}", p.name, s.message()),
                    };
                    return (d, state);
                }
            }
        }

        // Score node-major: every active plugin scores a node while its data is in cache, then
        // the next node. Each plugin then normalises its own column.
        let n = d.feasible.len();
        let active: SmallVec<[(usize, &dyn ScorePlugin); 16]> = self
            .plugins
            .iter()
            .enumerate()
            .filter_map(|(i, p)| {
                let sp = p.score.as_deref()?;
                if skip_score[i] {
                    d.skipped_scores.push(p.name);
                    None
                } else {
                    Some((i, sp))
                }
            })
            .collect();
        let mut raw: Vec<Vec<i64>> = active.iter().map(|_| Vec::with_capacity(n)).collect();
        for idx in &d.feasible {
            let node = snapshot.node(*idx);
            for (col, (i, sp)) in active.iter().enumerate() {
                match sp.score(&state, pod, node) {
                    Ok(v) => raw[col].push(v),
                    Err(s) => {
                        d.outcome = Outcome::Error {
                            message: format!(
                                "running Score plugin {:?} on node {:?}: {}",
                                self.plugins[*i].name,
                                node.name,
                                s.message()
                            ),
                        };
                        return (d, state);
                    }
                }
            }
        }
        let mut totals = vec![0i64; n];
        for ((i, sp), raw) in active.iter().zip(raw) {
            let name = self.plugins[*i].name;
            match self.normalize(*sp, &state, pod, snapshot, &d.feasible, raw, explain) {
                Ok(column) => {
                    let weight = self.weights[*i];
                    for (t, s) in totals.iter_mut().zip(&column.normalized) {
                        *t += s * weight;
                    }
                    d.scores.push(ScoreColumn {
                        plugin: name,
                        weight,
                        ..column
                    });
                }
                Err(s) => {
                    d.outcome = Outcome::Error {
                        message: format!("running Score plugin {name:?}: {}", s.message()),
                    };
                    return (d, state);
                }
            }
        }

        // Highest total wins; ties are broken uniformly at random, as upstream does.
        let best = totals.iter().copied().max().unwrap_or(0);
        let ties: SmallVec<[usize; 8]> = totals
            .iter()
            .enumerate()
            .filter(|(_, t)| **t == best)
            .map(|(i, _)| i)
            .collect();
        let pick = if ties.len() == 1 {
            ties[0]
        } else {
            ties[rng.random_range(0..ties.len())]
        };
        d.totals = totals;
        d.outcome = Outcome::Placed {
            node: d.node_names[d.feasible[pick] as usize].clone(),
        };
        (d, state)
    }

    /// Normalises one plugin's raw column, checks the range, and collects explanations.
    #[allow(clippy::too_many_arguments)]
    fn normalize(
        &self,
        sp: &dyn ScorePlugin,
        state: &CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        feasible: &[NodeIdx],
        raw: Vec<i64>,
        explain: bool,
    ) -> Result<ScoreColumn, Status> {
        let mut normalized = raw.clone();
        let s = sp.normalize(state, pod, &mut normalized);
        if !s.is_success() {
            return Err(s);
        }
        if let Some(bad) = normalized
            .iter()
            .find(|v| !(MIN_NODE_SCORE..=MAX_NODE_SCORE).contains(*v))
        {
            return Err(Status::error(format!(
                "plugin {:?} returns an invalid score {bad}, it should in the range of [{MIN_NODE_SCORE}, {MAX_NODE_SCORE}] after normalizing",
                sp.name()
            )));
        }
        let details = explain.then(|| {
            feasible
                .iter()
                .map(|idx| sp.explain_score(state, pod, snapshot.node(*idx)))
                .collect()
        });
        Ok(ScoreColumn {
            plugin: sp.name(),
            weight: 1,
            raw,
            normalized,
            details,
        })
    }

    /// Runs Reserve plugins in order; on failure, Unreserve runs for all of them in reverse.
    pub fn reserve(&self, state: &mut CycleState, pod: &PodInfo, node: &str) -> Status {
        for p in &self.plugins {
            if let Some(r) = &p.reserve {
                let s = r.reserve(state, pod, node);
                if !s.is_success() {
                    self.unreserve(state, pod, node);
                    return s.with_plugin(p.name);
                }
            }
        }
        Status::success()
    }

    /// Runs Unreserve plugins in reverse order.
    pub fn unreserve(&self, state: &mut CycleState, pod: &PodInfo, node: &str) {
        for p in self.plugins.iter().rev() {
            if let Some(r) = &p.reserve {
                r.unreserve(state, pod, node);
            }
        }
    }

    /// Runs Permit plugins; the first non-success status is returned.
    pub fn permit(&self, state: &mut CycleState, pod: &PodInfo, node: &str) -> Status {
        for p in &self.plugins {
            if let Some(pm) = &p.permit {
                let s = pm.permit(state, pod, node);
                if !s.is_success() {
                    return s.with_plugin(p.name);
                }
            }
        }
        Status::success()
    }
}
