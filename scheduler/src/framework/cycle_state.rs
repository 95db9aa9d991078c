//! `CycleState`: per-pod, per-cycle data that plugins compute in PreFilter/PreScore and read in
//! Filter/Score. Keyed by type, so each plugin reads back exactly what it wrote.

use std::any::{Any, TypeId};

use super::Status;
use crate::snapshot::NodeIdx;

/// The extension point whose cycle state a later one reads ([`CycleState::written_by`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WrittenIn {
    /// PreFilter, read by Filter.
    PreFilter,
    /// PreScore, read by Score.
    PreScore,
}

impl std::fmt::Display for WrittenIn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            WrittenIn::PreFilter => "PreFilter",
            WrittenIn::PreScore => "PreScore",
        })
    }
}

/// State of one scheduling cycle.
#[derive(Default)]
pub struct CycleState {
    slots: Vec<(TypeId, Box<dyn Any + Send + Sync>)>,
    /// How to copy the inputs written with [`CycleState::write_input`] into a fork.
    inputs: Vec<fn(&CycleState, &mut CycleState)>,
    /// Notes for the decision record (ignored annotations, degraded data), copied into
    /// [`Decision::notes`](super::Decision::notes) at the end of the cycle.
    pub notes: Vec<String>,
    /// When true, plugins attach the numbers behind each verdict (`Status::detail`) and score.
    /// Off on the hot path so that no strings are built for nodes nobody will look at.
    pub explain: bool,
    /// When true, the runtime times each plugin for upstream's
    /// `scheduler_plugin_execution_duration_seconds` (upstream's `recordPluginMetrics`,
    /// set in a sample of the cycles).
    pub record_plugin_metrics: bool,
    /// Set by the framework when a single node passed the filters and scoring was skipped
    /// (as upstream does): PreScore did not run, so a plugin that needs its PreScore's
    /// state after the cycle (History's Permit) computes it for that node itself.
    scoring_skipped: bool,
    /// The slots written with [`CycleState::write_sharing_snapshot`].
    sharing: Vec<TypeId>,
}

impl CycleState {
    /// A fresh state.
    pub fn new(explain: bool) -> CycleState {
        CycleState {
            slots: Vec::new(),
            inputs: Vec::new(),
            notes: Vec::new(),
            explain,
            record_plugin_metrics: false,
            scoring_skipped: false,
            sharing: Vec::new(),
        }
    }

    /// Whether the cycle skipped scoring because a single node passed the filters.
    pub fn scoring_skipped(&self) -> bool {
        self.scoring_skipped
    }

    /// Marks the cycle as one that skipped scoring (the framework's).
    pub(crate) fn skip_scoring(&mut self) {
        self.scoring_skipped = true;
    }

    /// Stores a value the caller knows before the cycle (how long the pod waited...):
    /// unlike plugin state, it is copied into [`CycleState::fork`]s.
    pub fn write_input<T: Any + Send + Sync + Clone>(&mut self, value: T) {
        self.write(value);
        self.inputs.push(|from, to| {
            if let Some(v) = from.read::<T>() {
                to.write_input(v.clone());
            }
        });
    }

    /// A fresh state holding only the inputs of this one (no plugin state, no notes, not
    /// explaining): what PostFilter re-runs PreFilter and Filter in when it evaluates a node
    /// with pods removed (upstream clones the state and replays PreFilter extensions; a
    /// fresh PreFilter over the changed snapshot computes the same).
    pub fn fork(&self) -> CycleState {
        let mut out = CycleState::new(false);
        for copy in &self.inputs {
            copy(self, &mut out);
        }
        out
    }

    /// Leaves a note for the decision record (deduplicated).
    pub fn note(&mut self, note: String) {
        if !self.notes.contains(&note) {
            self.notes.push(note);
        }
    }

    /// Stores a value (one per type; a second write replaces the first).
    pub fn write<T: Any + Send + Sync>(&mut self, value: T) {
        let id = TypeId::of::<T>();
        if let Some(slot) = self.slots.iter_mut().find(|(t, _)| *t == id) {
            slot.1 = Box::new(value);
        } else {
            self.slots.push((id, Box::new(value)));
        }
    }

    /// [`write`](Self::write) for a value that holds a share of the cycle's snapshot (the
    /// peers' usage context): the scheduler releases such values once the node is reserved
    /// ([`release_snapshot_shares`](Self::release_snapshot_shares)).
    pub fn write_sharing_snapshot<T: Any + Send + Sync>(&mut self, value: T) {
        self.write(value);
        let id = TypeId::of::<T>();
        if !self.sharing.contains(&id) {
            self.sharing.push(id);
        }
    }

    /// Drops every value written with
    /// [`write_sharing_snapshot`](Self::write_sharing_snapshot). Why: past Permit the state
    /// goes on to the settlement and the binding task, and a share of the snapshot kept
    /// there makes the next change to the snapshot copy it.
    pub fn release_snapshot_shares(&mut self) {
        for id in std::mem::take(&mut self.sharing) {
            if let Some(i) = self.slots.iter().position(|(t, _)| *t == id) {
                self.slots.swap_remove(i);
            }
        }
    }

    /// Reads a value written in this cycle.
    #[inline]
    pub fn read<T: Any + Send + Sync>(&self) -> Option<&T> {
        let id = TypeId::of::<T>();
        self.slots
            .iter()
            .find(|(t, _)| *t == id)
            .and_then(|(_, v)| v.downcast_ref::<T>())
    }

    /// What `plugin` wrote at `point` this cycle, or the error status a Filter or Score
    /// returns when it is missing: the runtime skipped the earlier point (a framework bug,
    /// not bad input; upstream's `error reading "PreScore..." from cycleState`). One
    /// message for every plugin: `History: PreScore did not run`.
    #[inline]
    pub fn written_by<T: Any + Send + Sync>(
        &self,
        plugin: &str,
        point: WrittenIn,
    ) -> Result<&T, Status> {
        self.read::<T>()
            .ok_or_else(|| Status::error(format!("{plugin}: {point} did not run")))
    }

    /// The batch form of a Score whose raw score reads only what `plugin` wrote at PreScore
    /// and the node's index: `score` for each of `nodes`, appended to `scores` in order
    /// ([`ScorePlugin::score_batch`](super::ScorePlugin::score_batch)'s contract). The state
    /// is looked up once for the batch rather than once a node, which is the point of the
    /// batch; a missing state fails the batch at its first node, as `written_by` words it.
    pub fn score_each<T: Any + Send + Sync>(
        &self,
        plugin: &str,
        nodes: &[NodeIdx],
        scores: &mut Vec<i64>,
        score: impl Fn(&T, NodeIdx) -> i64,
    ) -> Result<(), (usize, Status)> {
        let written = self
            .written_by::<T>(plugin, WrittenIn::PreScore)
            .map_err(|e| (0, e))?;
        scores.extend(nodes.iter().map(|&idx| score(written, idx)));
        Ok(())
    }

    /// Mutable access to a value written in this cycle.
    pub fn read_mut<T: Any + Send + Sync>(&mut self) -> Option<&mut T> {
        let id = TypeId::of::<T>();
        self.slots
            .iter_mut()
            .find(|(t, _)| *t == id)
            .and_then(|(_, v)| v.downcast_mut::<T>())
    }

    /// Takes a value out of the state (`None` when none was written).
    pub fn take<T: Any + Send + Sync>(&mut self) -> Option<T> {
        let id = TypeId::of::<T>();
        let i = self.slots.iter().position(|(t, _)| *t == id)?;
        self.slots.swap_remove(i).1.downcast::<T>().ok().map(|b| *b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_slots() {
        let mut s = CycleState::new(false);
        assert!(s.read::<u32>().is_none());
        s.write(5u32);
        s.write(String::from("x"));
        s.write(7u32);
        assert_eq!(s.read::<u32>(), Some(&7));
        assert_eq!(s.read::<String>().map(String::as_str), Some("x"));
        *s.read_mut::<u32>().unwrap() += 1;
        assert_eq!(s.read::<u32>(), Some(&8));
    }

    /// What shares the snapshot is released, and only that; a slot written again after a
    /// release is a plain slot unless written as sharing again.
    #[test]
    fn snapshot_shares_are_released_and_nothing_else() {
        let shared = std::sync::Arc::new(1u8);
        let mut s = CycleState::new(false);
        s.write_sharing_snapshot(shared.clone());
        s.write(5u32);
        assert_eq!(std::sync::Arc::strong_count(&shared), 2);
        s.release_snapshot_shares();
        assert_eq!(std::sync::Arc::strong_count(&shared), 1);
        assert!(s.read::<std::sync::Arc<u8>>().is_none());
        assert_eq!(s.read::<u32>(), Some(&5));
        s.write(shared.clone());
        s.release_snapshot_shares();
        assert_eq!(std::sync::Arc::strong_count(&shared), 2, "written plainly");
    }

    #[test]
    fn written_by_names_the_plugin_and_point_when_missing() {
        let mut s = CycleState::new(false);
        let e = s
            .written_by::<u32>("History", WrittenIn::PreScore)
            .unwrap_err();
        assert_eq!(e.code, super::super::Code::Error);
        assert_eq!(e.message(), "History: PreScore did not run");
        let e = s
            .written_by::<u32>("Reservation", WrittenIn::PreFilter)
            .unwrap_err();
        assert_eq!(e.message(), "Reservation: PreFilter did not run");
        s.write(4u32);
        assert_eq!(s.written_by::<u32>("History", WrittenIn::PreScore), Ok(&4));
    }

    #[test]
    fn score_each_scores_every_node_in_order_or_fails_at_the_first() {
        let mut s = CycleState::new(false);
        let mut scores = vec![7];
        let e = s
            .score_each::<u32>("History", &[3, 1], &mut scores, |_, _| 0)
            .unwrap_err();
        assert_eq!(e.0, 0);
        assert_eq!(e.1.message(), "History: PreScore did not run");
        assert_eq!(scores, [7], "nothing appended on failure");
        s.write(10u32);
        s.score_each::<u32>("History", &[3, 1, 4], &mut scores, |w, idx| {
            i64::from(*w) * 10 + i64::from(idx)
        })
        .unwrap();
        assert_eq!(scores, [7, 103, 101, 104]);
    }

    #[test]
    fn fork_keeps_inputs_only() {
        let mut s = CycleState::new(true);
        s.write_input(3u64);
        s.write(String::from("plugin state"));
        let f = s.fork();
        assert_eq!(f.read::<u64>(), Some(&3));
        assert!(f.read::<String>().is_none());
        assert!(!f.explain);
        assert_eq!(f.fork().read::<u64>(), Some(&3));
    }
}
