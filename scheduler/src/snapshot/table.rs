//! The node table: what filters and scores read on every node, per node index, in
//! contiguous vectors (struct of arrays), with node label values and taints interned.
//!
//! [`NodeInfo`] stays the full record of a node (its object, pods, images); the table is a
//! copy of its hot part that [`super::Snapshot`] keeps current on every node and pod change.
//! A scan over 5,000 nodes then reads a few hundred kilobytes of dense arrays instead of
//! following an `Arc<NodeInfo>` → `Node` → `BTreeMap` chain per node and plugin.
//!
//! - Resources: allocatable, requested (with the pod count) and the scoring "non-zero"
//!   requests, one fixed-size array per node.
//! - Flags: unschedulable, taints by effect, unreadable, extended resources, host ports.
//! - Labels ([`crate::labels`]): one column per label key (`u32` value id per node, absent
//!   as [`NONE`](crate::labels::NONE)), each
//!   key with its own value dictionary. A topology domain is then a value id, and per-cycle
//!   counts per domain are dense vectors indexed by it.
//! - Taints: each node's taints as ids into one dictionary of `(key, value, effect)`, so a
//!   pod's tolerations are matched once per distinct taint per cycle, not once per node.
//!
//! Dictionaries count references: an id whose last node left is recycled, so a cluster
//! with churning node names (hostnames) does not grow them forever.

use std::hash::Hash;

use k8s_openapi::api::core::v1::Taint;
use smallvec::SmallVec;

use super::NodeIdx;
use super::node_info::NodeInfo;
use crate::labels::{Interner, LabelTable};

/// Node flags ([`NodeTable::flags`]).
pub mod flag {
    /// `spec.unschedulable`.
    pub const UNSCHEDULABLE: u8 = 1;
    /// A `NoSchedule` or `NoExecute` taint.
    pub const NO_SCHEDULE_TAINTS: u8 = 1 << 1;
    /// A `PreferNoSchedule` taint.
    pub const PREFER_NO_SCHEDULE_TAINTS: u8 = 1 << 2;
    /// The node's status could not be read ([`super::NodeInfo::error`]).
    pub const ERROR: u8 = 1 << 3;
    /// Extended (scalar) resources in its allocatable or requested.
    pub const SCALARS: u8 = 1 << 4;
    /// Host ports in use.
    pub const PORTS: u8 = 1 << 5;
}

/// Indices into [`NodeTable::allocatable`] and [`NodeTable::requested`].
pub mod res {
    /// Millicores.
    pub const CPU: usize = 0;
    /// Bytes.
    pub const MEMORY: usize = 1;
    /// Bytes.
    pub const EPHEMERAL_STORAGE: usize = 2;
    /// Pods: allocatable pod count, or the number of pods on the node.
    pub const PODS: usize = 3;
}

/// Division by a fixed positive divisor through a multiplication (Granlund and Montgomery's
/// "round-up" method): `n / d == (n · m) >> s` for every `0 ≤ n < 2^63`, with
/// `s = 63 + ⌈log2 d⌉` and `m = ⌈2^s / d⌉ < 2^64`. Scores divide by each node's
/// allocatable on every node of every cycle; an integer division is the slowest
/// instruction there and is not pipelined, a 64×64-bit multiplication is. The shift is
/// done as `((n · m) >> 63) >> ⌈log2 d⌉`: a constant 128-bit shift, then a 64-bit one (a
/// variable 128-bit shift costs a branch or a slow double shift).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Divisor {
    d: i64,
    /// 0: no magic number (`d ≤ 0`); `divide` divides.
    m: u64,
    /// `⌈log2 d⌉`.
    shift: u32,
}

impl Divisor {
    /// The divisor `d`.
    pub fn new(d: i64) -> Divisor {
        if d <= 0 {
            return Divisor { d, m: 0, shift: 0 };
        }
        let ceil_log2 = 64 - (d as u64 - 1).leading_zeros();
        let m = (1u128 << (63 + ceil_log2)).div_ceil(d as u128);
        Divisor {
            d,
            m: m as u64,
            shift: ceil_log2,
        }
    }

    /// The divisor.
    pub fn get(self) -> i64 {
        self.d
    }

    /// `(n · m) >> (63 + ⌈log2 d⌉)` for `n < 2^63` (the product is below `2^127`, so
    /// its top 64 bits after the constant shift hold the whole quotient).
    #[inline(always)]
    fn multiply(self, n: u64) -> i64 {
        (((u128::from(n) * u128::from(self.m)) >> 63) as u64 >> self.shift) as i64
    }

    /// `n / d` for `n ≥ 0` and `d > 0`, which the caller has checked: the multiplication
    /// alone, with no branch (for `d ≤ 0` it gives 0, for a negative `n` a wrong quotient).
    #[inline(always)]
    pub fn divide_non_negative(self, n: i64) -> i64 {
        debug_assert!(n >= 0 && self.d > 0);
        self.multiply(n as u64)
    }

    /// `n / d`, exactly as Rust's `/` (which it falls back to for negative `n` or `d ≤ 0`).
    #[inline(always)]
    pub fn divide(self, n: i64) -> i64 {
        if n >= 0 && self.m != 0 {
            self.multiply(n as u64)
        } else {
            n / self.d
        }
    }
}

/// A taint as the dictionary keys it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TaintKey {
    /// `key`.
    pub key: String,
    /// `value` (empty when absent).
    pub value: String,
    /// `effect`.
    pub effect: String,
}

impl TaintKey {
    /// The taint as the API type, for toleration checks.
    pub fn to_taint(&self) -> Taint {
        Taint {
            key: self.key.clone(),
            value: (!self.value.is_empty()).then(|| self.value.clone()),
            effect: self.effect.clone(),
            time_added: None,
        }
    }
}

/// The hot part of every node, by node index (see the module documentation).
#[derive(Debug, Clone, Default)]
pub struct NodeTable {
    /// Allocatable: millicores, memory, ephemeral storage, pods ([`res`]).
    pub allocatable: Vec<[i64; 4]>,
    /// Requested by the node's pods: millicores, memory, ephemeral storage, and the number
    /// of pods on the node ([`res`]).
    pub requested: Vec<[i64; 4]>,
    /// The pods' CPU and memory requests with upstream's scoring defaults.
    pub non_zero: Vec<[i64; 2]>,
    /// Allocatable millicores, memory and ephemeral storage as [`Divisor`]s (scores divide
    /// by them).
    pub allocatable_div: Vec<[Divisor; 3]>,
    /// Capacity: cores and memory bytes ([`real_capacity`] of [`NodeInfo::capacity`]), as
    /// the real-usage plugins divide by them.
    pub capacity: Vec<[f64; 2]>,
    /// [`NodeInfo::disk_annotations`].
    pub disk_annotations: Vec<(Option<f64>, Option<f64>)>,
    /// [`flag`]s.
    pub flags: Vec<u8>,
    /// The node's taints, as ids into [`NodeTable::taint_dict`].
    pub taints: Vec<SmallVec<[u32; 2]>>,
    /// Every distinct taint of the cluster.
    pub taint_dict: Interner<TaintKey>,
    /// Interned labels.
    pub labels: LabelTable,
}

/// A node's capacity (millicores, bytes) as the real-usage plugins read it: cores and
/// bytes, each as `f64`. Kept in the table so that a cycle does not divide millicores by
/// 1,000 again for every node in every pass.
#[inline]
pub fn real_capacity((milli_cpu, memory): (i64, i64)) -> [f64; 2] {
    [milli_cpu as f64 / 1000.0, memory as f64]
}

fn flags_of(info: &NodeInfo) -> u8 {
    let mut f = 0;
    if info.unschedulable {
        f |= flag::UNSCHEDULABLE;
    }
    if info.has_no_schedule_taints {
        f |= flag::NO_SCHEDULE_TAINTS;
    }
    if info.has_prefer_no_schedule_taints {
        f |= flag::PREFER_NO_SCHEDULE_TAINTS;
    }
    if info.error.is_some() {
        f |= flag::ERROR;
    }
    if !info.allocatable.scalars.is_empty() || !info.requested.scalars.is_empty() {
        f |= flag::SCALARS;
    }
    if !info.used_ports.is_empty() {
        f |= flag::PORTS;
    }
    f
}

impl NodeTable {
    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.flags.len()
    }

    /// True with no nodes.
    pub fn is_empty(&self) -> bool {
        self.flags.is_empty()
    }

    /// Appends a node (its index is the previous length).
    pub(super) fn push(&mut self, info: &NodeInfo) {
        self.allocatable.push([0; 4]);
        self.allocatable_div.push([Divisor::new(0); 3]);
        self.requested.push([0; 4]);
        self.non_zero.push([0; 2]);
        self.capacity.push([0.0; 2]);
        self.disk_annotations.push((None, None));
        self.flags.push(0);
        self.taints.push(SmallVec::new());
        self.labels.push_node();
        let idx = self.len() - 1;
        self.set_node(idx, info);
        self.set_requested(idx, info);
    }

    /// Re-reads what comes from the node object (allocatable, flags, labels, taints).
    pub(super) fn set_node(&mut self, idx: usize, info: &NodeInfo) {
        let a = &info.allocatable;
        self.allocatable[idx] = [a.milli_cpu, a.memory, a.ephemeral_storage, a.pods];
        self.allocatable_div[idx] = [
            Divisor::new(a.milli_cpu),
            Divisor::new(a.memory),
            Divisor::new(a.ephemeral_storage),
        ];
        self.capacity[idx] = real_capacity(info.capacity);
        self.disk_annotations[idx] = info.disk_annotations;
        self.flags[idx] = flags_of(info);
        self.labels.clear(idx);
        self.labels.set(idx, info.labels());
        for id in std::mem::take(&mut self.taints[idx]) {
            self.taint_dict.release(id);
        }
        let ids = info
            .taints()
            .iter()
            .map(|t| {
                self.taint_dict.intern(&TaintKey {
                    key: t.key.clone(),
                    value: t.value.clone().unwrap_or_default(),
                    effect: t.effect.clone(),
                })
            })
            .collect();
        self.taints[idx] = ids;
    }

    /// Re-reads what the node's pods add up to.
    pub(super) fn set_requested(&mut self, idx: usize, info: &NodeInfo) {
        let r = &info.requested;
        self.requested[idx] = [
            r.milli_cpu,
            r.memory,
            r.ephemeral_storage,
            info.pods.len() as i64,
        ];
        self.non_zero[idx] = [info.non_zero_milli_cpu, info.non_zero_memory];
        self.flags[idx] = flags_of(info);
    }

    /// Removes node `idx`; the last node moves into its slot (as `Vec::swap_remove`).
    pub(super) fn swap_remove(&mut self, idx: usize) {
        for id in std::mem::take(&mut self.taints[idx]) {
            self.taint_dict.release(id);
        }
        self.allocatable.swap_remove(idx);
        self.allocatable_div.swap_remove(idx);
        self.requested.swap_remove(idx);
        self.non_zero.swap_remove(idx);
        self.capacity.swap_remove(idx);
        self.disk_annotations.swap_remove(idx);
        self.flags.swap_remove(idx);
        self.taints.swap_remove(idx);
        self.labels.swap_remove(idx);
    }

    /// Whether node `idx` has flag `f`.
    #[inline]
    pub fn has(&self, idx: NodeIdx, f: u8) -> bool {
        self.flags[idx as usize] & f != 0
    }

    /// A check that the table matches the nodes it mirrors (tests).
    #[cfg(test)]
    pub(crate) fn assert_mirrors(&self, nodes: &[std::sync::Arc<NodeInfo>]) {
        assert_eq!(self.len(), nodes.len());
        for (i, n) in nodes.iter().enumerate() {
            let mut fresh = NodeTable::default();
            fresh.push(n);
            assert_eq!(self.allocatable[i], fresh.allocatable[0], "{}", n.name);
            assert_eq!(
                self.allocatable_div[i], fresh.allocatable_div[0],
                "{}",
                n.name
            );
            assert_eq!(self.requested[i], fresh.requested[0], "{}", n.name);
            assert_eq!(self.non_zero[i], fresh.non_zero[0], "{}", n.name);
            assert_eq!(self.capacity[i], fresh.capacity[0], "{}", n.name);
            assert_eq!(
                self.disk_annotations[i], fresh.disk_annotations[0],
                "{}",
                n.name
            );
            assert_eq!(self.flags[i], fresh.flags[0], "{}", n.name);
            let taints: Vec<&TaintKey> = self.taints[i]
                .iter()
                .map(|t| self.taint_dict.value(*t).unwrap())
                .collect();
            let want: Vec<&TaintKey> = fresh.taints[0]
                .iter()
                .map(|t| fresh.taint_dict.value(*t).unwrap())
                .collect();
            assert_eq!(taints, want, "{}", n.name);
            for c in self.labels.columns() {
                let got = c.dict.value(c.values[i]).map(String::as_str);
                assert_eq!(
                    got,
                    n.labels().get(&c.key).map(String::as_str),
                    "{}",
                    n.name
                );
            }
            for k in n.labels().keys() {
                assert!(self.labels.column(k).is_some(), "{}: {k}", n.name);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    #[test]
    fn divisor_divides_exactly() {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(11);
        let edges = [
            1,
            2,
            3,
            5,
            7,
            100,
            4096,
            1 << 62,
            (1 << 62) + 1,
            i64::MAX - 1,
            i64::MAX,
        ];
        let mut cases: Vec<(i64, i64)> = Vec::new();
        for &d in &edges {
            for n in [
                0,
                1,
                d - 1,
                d,
                d.saturating_add(1),
                i64::MAX,
                i64::MAX - 1,
                -1,
                -d,
                i64::MIN + 1,
            ] {
                cases.push((n, d));
            }
        }
        for _ in 0..1_000_000 {
            let d = (rng.random::<u64>() >> rng.random_range(0..64)).max(1) as i64 & i64::MAX;
            let n = (rng.random::<u64>() >> rng.random_range(0..64)) as i64;
            cases.push((n, d.max(1)));
        }
        for (n, d) in cases {
            assert_eq!(Divisor::new(d).divide(n), n / d, "{n} / {d}");
            if n >= 0 && d > 0 {
                assert_eq!(Divisor::new(d).divide_non_negative(n), n / d, "{n} / {d}");
            }
        }
        assert_eq!(Divisor::new(-4).divide(9), 9 / -4);
    }
}
