//! Counts per topology domain for InterPodAffinity and PodTopologySpread, dense by the
//! snapshot's interned label values: a domain is the value id of a node's topology key
//! ([`crate::labels::LabelColumn`]), so counting a pod and reading a node's domain
//! are array accesses instead of string hashing.
//!
//! Each [`DomainCounts`] keeps the label column it was computed over (a shared `Arc`), so
//! the per-node plugin calls, which only see a [`crate::snapshot::NodeInfo`], find the
//! node's domain through its index.

use std::sync::Arc;

use crate::labels::{LabelTable, NONE};
use crate::snapshot::NodeIdx;

/// Counts per domain of one topology key.
#[derive(Debug, Clone)]
pub(crate) struct DomainCounts {
    /// The topology key.
    pub key: String,
    /// The key's value id per node.
    column: Arc<Vec<u32>>,
    /// Per value id.
    counts: Vec<i64>,
    /// Some node with the key was counted (even by zero).
    touched: bool,
}

impl DomainCounts {
    /// Zero counts for `key`; `None` when no node carries the key.
    pub fn new(labels: &LabelTable, key: &str) -> Option<DomainCounts> {
        let col = labels.column(key)?;
        Some(DomainCounts {
            key: key.to_string(),
            column: col.values.clone(),
            counts: vec![0; col.dict.capacity()],
            touched: false,
        })
    }

    /// The domain (value id) of node `idx`; `None` when it lacks the key.
    #[inline]
    pub fn domain(&self, idx: NodeIdx) -> Option<u32> {
        let v = *self.column.get(idx as usize)?;
        (v != NONE).then_some(v)
    }

    /// The count of a domain.
    #[inline]
    pub fn get(&self, domain: u32) -> i64 {
        self.counts.get(domain as usize).copied().unwrap_or(0)
    }

    /// The count of node `idx`'s domain; `None` when it lacks the key.
    #[inline]
    pub fn at(&self, idx: NodeIdx) -> Option<i64> {
        self.domain(idx).map(|d| self.get(d))
    }

    /// Adds `delta` to node `idx`'s domain (nothing when it lacks the key).
    #[inline]
    pub fn add(&mut self, idx: NodeIdx, delta: i64) {
        if let Some(d) = self.domain(idx) {
            self.counts[d as usize] += delta;
            self.touched = true;
        }
    }
}

/// Counts per domain for several topology keys (upstream's `topologyToMatchedTermCount`).
#[derive(Debug, Clone, Default)]
pub(crate) struct TopologyCounts {
    keys: Vec<DomainCounts>,
}

impl TopologyCounts {
    /// The slot of `key`, created on first use; `None` when no node carries the key (then
    /// nothing can be counted under it).
    pub fn slot(&mut self, labels: &LabelTable, key: &str) -> Option<usize> {
        if let Some(i) = self.keys.iter().position(|k| k.key == key) {
            return Some(i);
        }
        self.keys.push(DomainCounts::new(labels, key)?);
        Some(self.keys.len() - 1)
    }

    /// Adds `delta` to node `idx`'s domain of the key in `slot`.
    #[inline]
    pub fn add(&mut self, slot: Option<usize>, idx: NodeIdx, delta: i64) {
        if let Some(s) = slot {
            self.keys[s].add(idx, delta);
        }
    }

    /// The counts of a slot.
    #[inline]
    pub fn get(&self, slot: Option<usize>) -> Option<&DomainCounts> {
        self.keys.get(slot?)
    }

    /// The counts of the keys that counted a node.
    pub fn keys(&self) -> impl Iterator<Item = &DomainCounts> {
        self.keys.iter().filter(|k| k.touched)
    }

    /// True when no node was counted under any key.
    pub fn is_empty(&self) -> bool {
        !self.keys.iter().any(|k| k.touched)
    }
}
