//! In-memory series index: label set → series id, and label matchers → ids.
//!
//! The index is rebuilt from the series definitions on disk at open (they are small and
//! few compared to samples), so it never has to be kept consistent on disk by itself.
//!
//! Memory matters here (the 5,000-node case has ~310 k series), so strings are interned:
//! each distinct name or value is stored once as an `Arc<str>`, a series is a boxed slice
//! of `u32` symbols, the lookup map is keyed by a 64-bit hash of the label set (collisions
//! are verified and kept in a side table), and postings lists are `Vec<u32>` of dense ids.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use crate::labels::{CompiledMatcher, Labels, METRIC_NAME_LABEL};

/// Interned strings, reference-counted by the series that use them: a label value of
/// pods that come and go (their names) is freed with the last series naming it, so the
/// index stays as large as the live series, not as all the series ever seen.
#[derive(Default)]
struct Symbols {
    strings: Vec<Arc<str>>,
    refs: Vec<u32>,
    lookup: HashMap<Arc<str>, u32>,
    /// Ids of freed symbols, reused by `intern`.
    free: Vec<u32>,
}

impl Symbols {
    /// The symbol of `s`, counting one more use of it.
    fn intern(&mut self, s: &str) -> u32 {
        if let Some(&id) = self.lookup.get(s) {
            self.refs[id as usize] += 1;
            return id;
        }
        let a: Arc<str> = Arc::from(s);
        let id = match self.free.pop() {
            Some(id) => {
                self.strings[id as usize] = a.clone();
                self.refs[id as usize] = 1;
                id
            }
            None => {
                self.strings.push(a.clone());
                self.refs.push(1);
                (self.strings.len() - 1) as u32
            }
        };
        self.lookup.insert(a, id);
        id
    }

    /// One use of `id` fewer; the last one frees it.
    fn release(&mut self, id: u32) {
        let Some(r) = self.refs.get_mut(id as usize) else {
            return;
        };
        *r = r.saturating_sub(1);
        if *r == 0 {
            let gone = std::mem::replace(&mut self.strings[id as usize], Arc::from(""));
            self.lookup.remove(&gone);
            self.free.push(id);
        }
    }

    fn get(&self, s: &str) -> Option<u32> {
        self.lookup.get(s).copied()
    }
    fn str(&self, id: u32) -> &str {
        // Invariant: symbol ids are only produced by `intern`, which stores the string.
        &self.strings[id as usize]
    }
}

/// Series index. Slots are dense: the series in slot `n` lives at `series[n]`; a removed
/// series frees its slot for the next new one (see [`Index::public_id`]).
#[derive(Default)]
pub(crate) struct Index {
    symbols: Symbols,
    /// `[metric, name0, value0, name1, value1, ...]` as symbols; `None` for an unused id.
    series: Vec<Option<Box<[u32]>>>,
    by_hash: HashMap<u64, u32>,
    /// Extra ids whose hash collided with an entry of `by_hash` (practically empty).
    collisions: HashMap<u64, Vec<u32>>,
    /// name symbol → value symbol → ids (ascending). The metric name is under `__name__`.
    postings: HashMap<u32, HashMap<u32, Vec<u32>>>,
    name_sym: u32,
    live: usize,
    /// Unused ids below `series.len()`, reused by [`Index::next_id`].
    free: Vec<u32>,
    /// Per id, how many times a series under it was removed: the high half of the public
    /// `SeriesId`, so an id kept across a removal never names the series reusing the slot.
    gens: Vec<u32>,
}

fn series_hash(metric: &str, labels: &Labels) -> u64 {
    hash_parts(metric, labels.iter())
}

fn hash_parts<'a>(metric: &str, labels: impl Iterator<Item = (&'a str, &'a str)>) -> u64 {
    // DefaultHasher::new() uses fixed keys, so the hash is stable within a process, which
    // is all the in-memory map needs.
    let mut h = std::collections::hash_map::DefaultHasher::new();
    metric.hash(&mut h);
    for (k, v) in labels {
        k.hash(&mut h);
        v.hash(&mut h);
    }
    h.finish()
}

impl Index {
    pub(crate) fn new() -> Index {
        let mut i = Index::default();
        // Never released: every series is under it.
        i.name_sym = i.symbols.intern(METRIC_NAME_LABEL);
        i
    }

    /// The id a new series gets: a freed one if any (the lowest), else the next.
    pub(crate) fn next_id(&mut self) -> u32 {
        match self.free.pop() {
            Some(id) => id,
            None => self.id_bound(),
        }
    }

    /// The public id of the series at `slot`: the slot, and in the high 32 bits how many
    /// series were removed from it before.
    pub(crate) fn public_id(&self, slot: u32) -> u64 {
        u64::from(self.gens.get(slot as usize).copied().unwrap_or(0)) << 32 | u64::from(slot)
    }

    /// The slot of a public id, if it names a series that still exists.
    pub(crate) fn slot_of(&self, id: u64) -> Option<u32> {
        let slot = (id & u64::from(u32::MAX)) as u32;
        let live = matches!(self.series.get(slot as usize), Some(Some(_)));
        (live && self.public_id(slot) == id).then_some(slot)
    }

    /// Recomputes the free ids after ids were inserted out of order (the store's open).
    pub(crate) fn rebuild_free(&mut self) {
        self.free = (0..self.series.len() as u32)
            .rev()
            .filter(|&i| self.series[i as usize].is_none())
            .collect();
    }

    /// Removes a series: its id becomes free and the symbols only it used are released.
    /// Returns false if the id held no series.
    pub(crate) fn remove(&mut self, id: u32) -> bool {
        let Some(syms) = self.series.get_mut(id as usize).and_then(Option::take) else {
            return false;
        };
        let h = hash_parts(
            self.symbols.str(syms[0]),
            syms[1..]
                .chunks_exact(2)
                .map(|c| (self.symbols.str(c[0]), self.symbols.str(c[1]))),
        );
        if self.by_hash.get(&h) == Some(&id) {
            match self.collisions.get_mut(&h).and_then(Vec::pop) {
                Some(other) => {
                    self.by_hash.insert(h, other);
                }
                None => {
                    self.by_hash.remove(&h);
                }
            }
        } else if let Some(c) = self.collisions.get_mut(&h) {
            c.retain(|&x| x != id);
        }
        if self.collisions.get(&h).is_some_and(Vec::is_empty) {
            self.collisions.remove(&h);
        }
        let pairs = std::iter::once((self.name_sym, syms[0]))
            .chain(syms[1..].chunks_exact(2).map(|c| (c[0], c[1])))
            .collect::<Vec<_>>();
        for (k, v) in pairs {
            if let Some(values) = self.postings.get_mut(&k) {
                if let Some(list) = values.get_mut(&v) {
                    if let Ok(pos) = list.binary_search(&id) {
                        list.remove(pos);
                    }
                    if list.is_empty() {
                        values.remove(&v);
                    }
                }
                if values.is_empty() {
                    self.postings.remove(&k);
                }
            }
        }
        for &sym in syms.iter() {
            self.symbols.release(sym);
        }
        self.live -= 1;
        if self.gens.len() <= id as usize {
            self.gens.resize(id as usize + 1, 0);
        }
        self.gens[id as usize] = self.gens[id as usize].wrapping_add(1);
        // Kept sorted descending so `pop` gives the lowest.
        let pos = self.free.partition_point(|&x| x > id);
        self.free.insert(pos, id);
        true
    }

    /// Number of series.
    pub(crate) fn len(&self) -> usize {
        self.live
    }

    /// One past the highest id in use.
    pub(crate) fn id_bound(&self) -> u32 {
        self.series.len() as u32
    }

    fn same(&self, id: u32, metric: &str, labels: &Labels) -> bool {
        let Some(Some(syms)) = self.series.get(id as usize) else {
            return false;
        };
        if syms.len() != 1 + 2 * labels.len() || self.symbols.str(syms[0]) != metric {
            return false;
        }
        labels.iter().enumerate().all(|(i, (k, v))| {
            self.symbols.str(syms[1 + 2 * i]) == k && self.symbols.str(syms[2 + 2 * i]) == v
        })
    }

    /// Looks a series up.
    pub(crate) fn get(&self, metric: &str, labels: &Labels) -> Option<u32> {
        let h = series_hash(metric, labels);
        let id = *self.by_hash.get(&h)?;
        if self.same(id, metric, labels) {
            return Some(id);
        }
        self.collisions
            .get(&h)?
            .iter()
            .copied()
            .find(|&c| self.same(c, metric, labels))
    }

    /// Inserts a series under a given id (the caller ensures it is unused and the series
    /// is not yet present).
    pub(crate) fn insert(&mut self, id: u32, metric: &str, labels: &Labels) {
        let mut syms = Vec::with_capacity(1 + 2 * labels.len());
        let m = self.symbols.intern(metric);
        syms.push(m);
        for (k, v) in labels.iter() {
            syms.push(self.symbols.intern(k));
            syms.push(self.symbols.intern(v));
        }
        let pairs = std::iter::once((self.name_sym, m))
            .chain(syms[1..].chunks_exact(2).map(|c| (c[0], c[1])))
            .collect::<Vec<_>>();
        for (k, v) in pairs {
            let list = self.postings.entry(k).or_default().entry(v).or_default();
            // Keep postings sorted; ids are usually appended in increasing order.
            match list.last() {
                Some(&last) if last > id => {
                    let pos = list.partition_point(|&x| x < id);
                    list.insert(pos, id);
                }
                _ => list.push(id),
            }
        }
        if self.series.len() <= id as usize {
            self.series.resize(id as usize + 1, None);
        }
        if let Some(pos) = self.free.iter().position(|&x| x == id) {
            self.free.remove(pos);
        }
        self.series[id as usize] = Some(syms.into_boxed_slice());
        self.live += 1;
        let h = series_hash(metric, labels);
        if let Some(&_other) = self.by_hash.get(&h) {
            self.collisions.entry(h).or_default().push(id);
        } else {
            self.by_hash.insert(h, id);
        }
    }

    /// Metric name and labels of a series.
    pub(crate) fn resolve(&self, id: u32) -> Option<(String, Labels)> {
        let syms = self.series.get(id as usize)?.as_ref()?;
        let metric = self.symbols.str(syms[0]).to_string();
        let pairs = syms[1..]
            .chunks_exact(2)
            .map(|c| {
                (
                    self.symbols.str(c[0]).to_string(),
                    self.symbols.str(c[1]).to_string(),
                )
            })
            .collect();
        Some((metric, Labels::from_sorted_unchecked(pairs)))
    }

    fn label_value(&self, syms: &[u32], name: &str) -> &str {
        if name == METRIC_NAME_LABEL {
            return self.symbols.str(syms[0]);
        }
        for c in syms[1..].chunks_exact(2) {
            if self.symbols.str(c[0]) == name {
                return self.symbols.str(c[1]);
            }
        }
        ""
    }

    /// Ids of the series matching all matchers, ascending. No matchers: every series.
    pub(crate) fn select(&self, matchers: &[CompiledMatcher]) -> Vec<u32> {
        // Candidates come from the postings of the matchers that cannot match an absent
        // label (so every matching series must carry a matching value); the smallest
        // such set is then filtered by all matchers.
        let mut best: Option<Vec<u32>> = None;
        for m in matchers.iter().filter(|m| !m.matches_empty()) {
            let Some(name) = self.symbols.get(&m.name) else {
                return Vec::new();
            };
            let Some(values) = self.postings.get(&name) else {
                return Vec::new();
            };
            let mut ids: Vec<u32> = match &m.kind {
                crate::labels::MatchKind::Eq(v) => self
                    .symbols
                    .get(v)
                    .and_then(|v| values.get(&v))
                    .cloned()
                    .unwrap_or_default(),
                _ => {
                    let mut all = Vec::new();
                    for (v, list) in values {
                        if m.matches(self.symbols.str(*v)) {
                            all.extend_from_slice(list);
                        }
                    }
                    all.sort_unstable();
                    all
                }
            };
            ids.dedup();
            if best.as_ref().is_none_or(|b| ids.len() < b.len()) {
                best = Some(ids);
            }
        }
        let candidates: Vec<u32> = match best {
            Some(b) => b,
            None => (0..self.series.len() as u32)
                .filter(|&i| self.series[i as usize].is_some())
                .collect(),
        };
        candidates
            .into_iter()
            .filter(|&id| {
                let Some(Some(syms)) = self.series.get(id as usize) else {
                    return false;
                };
                matchers
                    .iter()
                    .all(|m| m.matches(self.label_value(syms, &m.name)))
            })
            .collect()
    }

    /// Approximate heap bytes used by the index (for stats and the memory bench).
    pub(crate) fn heap_bytes(&self) -> usize {
        let sym_strings: usize = self.symbols.strings.iter().map(|s| s.len() + 16).sum();
        let sym = sym_strings
            + self.symbols.strings.capacity() * 16
            + self.symbols.lookup.capacity() * (16 + 4 + 1);
        let series: usize = self.series.capacity() * 16
            + self
                .series
                .iter()
                .flatten()
                .map(|s| s.len() * 4)
                .sum::<usize>();
        let hash = self.by_hash.capacity() * (8 + 4 + 1);
        let postings: usize = self
            .postings
            .values()
            .map(|m| {
                m.capacity() * (4 + 24 + 1) + m.values().map(|l| l.capacity() * 4).sum::<usize>()
            })
            .sum();
        sym + series + hash + postings
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::labels::{MatchOp, Matcher};

    fn sel(ix: &Index, ms: &[Matcher]) -> Vec<u32> {
        let c: Vec<_> = ms
            .iter()
            .map(|m| CompiledMatcher::compile(m).unwrap())
            .collect();
        ix.select(&c)
    }

    #[test]
    fn insert_lookup_select() {
        let mut ix = Index::new();
        let a = Labels::new([("node", "n1"), ("pod", "p1")]).unwrap();
        let b = Labels::new([("node", "n2"), ("pod", "p2")]).unwrap();
        let c = Labels::new([("node", "n1")]).unwrap();
        ix.insert(0, "mem", &a);
        ix.insert(1, "mem", &b);
        ix.insert(2, "node_mem", &c);
        assert_eq!(ix.get("mem", &a), Some(0));
        assert_eq!(ix.get("mem", &c), None);
        assert_eq!(ix.resolve(1), Some(("mem".to_string(), b.clone())));
        assert_eq!(sel(&ix, &[Matcher::metric("mem")]), vec![0, 1]);
        assert_eq!(
            sel(&ix, &[Matcher::new("node", MatchOp::Eq, "n1")]),
            vec![0, 2]
        );
        assert_eq!(sel(&ix, &[Matcher::new("pod", MatchOp::Eq, "")]), vec![2]);
        assert_eq!(
            sel(&ix, &[Matcher::new("pod", MatchOp::Ne, "p1")]),
            vec![1, 2]
        );
        assert_eq!(
            sel(&ix, &[Matcher::new("__name__", MatchOp::Re, "mem|x")]),
            vec![0, 1]
        );
        assert_eq!(
            sel(&ix, &[Matcher::new("pod", MatchOp::Nre, "p.*")]),
            vec![2]
        );
        assert_eq!(sel(&ix, &[Matcher::metric("nope")]), Vec::<u32>::new());
        assert_eq!(sel(&ix, &[]), vec![0, 1, 2]);
    }

    /// Series of pods that come and go: removing them frees their ids (reused lowest
    /// first) and the strings only they used, so the index does not grow with churn.
    #[test]
    fn removed_series_free_their_id_and_their_strings() {
        let mut ix = Index::new();
        let node = Labels::new([("node", "n1")]).unwrap();
        let keep = ix.next_id();
        ix.insert(keep, "node_mem", &node);
        let symbols = ix.symbols.lookup.len();
        for round in 0..50 {
            let ids: Vec<u32> = (0..20)
                .map(|i| {
                    let id = ix.next_id();
                    let l =
                        Labels::new([("node", "n1".to_string()), ("pod", format!("p{round}-{i}"))])
                            .unwrap();
                    ix.insert(id, "mem", &l);
                    id
                })
                .collect();
            assert!(ids.iter().all(|&id| id <= 20), "{ids:?}");
            assert_eq!(sel(&ix, &[Matcher::metric("mem")]).len(), 20);
            for id in ids {
                assert!(ix.remove(id));
                assert!(!ix.remove(id));
            }
        }
        assert_eq!(ix.len(), 1);
        assert_eq!(ix.id_bound(), 21);
        // Only "mem", "pod" and the pod names were freed; the node's series is intact.
        assert_eq!(ix.symbols.lookup.len(), symbols);
        assert_eq!(ix.get("node_mem", &node), Some(keep));
        assert_eq!(
            sel(&ix, &[Matcher::new("node", MatchOp::Eq, "n1")]),
            vec![keep]
        );
        assert!(
            ix.postings
                .values()
                .all(|m| m.values().all(|l| !l.is_empty()))
        );
        let p = Labels::new([("pod", "p0-0")]).unwrap();
        assert_eq!(ix.get("mem", &p), None);
        let id = ix.next_id();
        ix.insert(id, "mem", &p);
        assert_eq!(ix.get("mem", &p), Some(id));
        assert_eq!(ix.resolve(id), Some(("mem".to_string(), p)));
        // Its public id carries the slot's removals: an id of the slot's earlier series
        // names nothing.
        assert_eq!(ix.public_id(id) >> 32, 50);
        assert_eq!(ix.slot_of(ix.public_id(id)), Some(id));
        assert_eq!(ix.slot_of(u64::from(id)), None);
        assert_eq!(ix.slot_of(ix.public_id(keep)), Some(keep));
        assert_eq!(ix.public_id(keep), u64::from(keep));
    }
}
