//! The usage view resolved by node index, as the real plugins read it: one [`UsageRow`] per
//! node of a snapshot, cached in the snapshot per view and node layout.

use std::sync::Arc;

use crate::key::NodeIdx;
use crate::view::{NodeUsage, UsageView};

/// A node's measured usage as the real plugins read it, from one [`UsageView`] entry.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct UsageRow {
    /// Time of the newest sample, ms since the epoch.
    pub newest_ms: i64,
    /// CPU in use, cores: the larger of the current value and the windowed statistic.
    pub cpu: f64,
    /// Memory in use, bytes: the same.
    pub memory: f64,
}

impl UsageRow {
    /// The row of one view entry.
    pub fn of(u: &NodeUsage) -> UsageRow {
        UsageRow {
            newest_ms: u.newest_ms,
            cpu: u.cpu_cores.current.max(u.cpu_cores.windowed),
            memory: u
                .memory_working_set_bytes
                .current
                .max(u.memory_working_set_bytes.windowed),
        }
    }

    /// The root filesystem's size and the smaller of its current and windowed free space,
    /// bytes, when both are collected. Kept apart from the row: only disk asks for it,
    /// while every pass over the nodes reads the row (32 bytes a node, not 56).
    pub fn fs_of(u: &NodeUsage) -> Option<(f64, f64)> {
        u.fs_available_bytes
            .and_then(|free| Some((u.fs_capacity_bytes?, free.current.min(free.windowed))))
    }
}

/// The usage of every node of a snapshot, by node index, resolved once per usage view (and
/// node set): the real plugins read rows by index instead of looking node names up in the
/// view on every node of every cycle.
#[derive(Debug)]
pub struct UsageRows {
    view: Arc<UsageView>,
    layout: u64,
    rows: Vec<Option<UsageRow>>,
    /// [`UsageRow::fs_of`] of each node, by index.
    fs: Vec<Option<(f64, f64)>>,
    /// `newest_ms` of every view entry, sorted (how many are fresh is a binary search).
    newest: Vec<i64>,
}

impl UsageRows {
    /// Resolves `view` for the nodes `names` (in index order) of node layout `layout`.
    pub fn build(view: &Arc<UsageView>, names: &[Arc<str>], layout: u64) -> UsageRows {
        let mut newest: Vec<i64> = view.nodes.values().map(|u| u.newest_ms).collect();
        newest.sort_unstable();
        UsageRows {
            view: view.clone(),
            layout,
            rows: names
                .iter()
                .map(|n| view.node(n).map(UsageRow::of))
                .collect(),
            fs: names
                .iter()
                .map(|n| view.node(n).and_then(UsageRow::fs_of))
                .collect(),
            newest,
        }
    }

    /// Whether these rows were resolved from `view` for node layout `layout`.
    pub fn is_for(&self, view: &Arc<UsageView>, layout: u64) -> bool {
        Arc::ptr_eq(&self.view, view) && self.layout == layout
    }

    /// The row of node `idx` (`None`: no usage for it).
    #[inline]
    pub fn row(&self, idx: NodeIdx) -> Option<&UsageRow> {
        self.rows.get(idx as usize)?.as_ref()
    }

    /// Node `idx`'s [`UsageRow::fs_of`].
    #[inline]
    pub fn fs(&self, idx: NodeIdx) -> Option<(f64, f64)> {
        self.fs.get(idx as usize).copied().flatten()
    }

    /// How many entries of the view have a sample at or after `oldest_fresh_ms`.
    pub fn fresh_count(&self, oldest_fresh_ms: i64) -> usize {
        self.newest.len() - self.newest.partition_point(|t| *t < oldest_fresh_ms)
    }
}
