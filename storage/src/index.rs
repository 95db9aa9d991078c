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

#[derive(Default)]
struct Symbols {
    strings: Vec<Arc<str>>,
    lookup: HashMap<Arc<str>, u32>,
}

impl Symbols {
    fn intern(&mut self, s: &str) -> u32 {
        if let Some(&id) = self.lookup.get(s) {
            return id;
        }
        let id = self.strings.len() as u32;
        let a: Arc<str> = Arc::from(s);
        self.strings.push(a.clone());
        self.lookup.insert(a, id);
        id
    }
    fn get(&self, s: &str) -> Option<u32> {
        self.lookup.get(s).copied()
    }
    fn str(&self, id: u32) -> &str {
        // Invariant: symbol ids are only produced by `intern`, which pushes the string.
        &self.strings[id as usize]
    }
}

/// Series index. Ids are dense: `SeriesId(n)` lives at `series[n]`.
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
}

fn series_hash(metric: &str, labels: &Labels) -> u64 {
    // DefaultHasher::new() uses fixed keys, so the hash is stable within a process, which
    // is all the in-memory map needs.
    let mut h = std::collections::hash_map::DefaultHasher::new();
    metric.hash(&mut h);
    for (k, v) in labels.iter() {
        k.hash(&mut h);
        v.hash(&mut h);
    }
    h.finish()
}

impl Index {
    pub(crate) fn new() -> Index {
        let mut i = Index::default();
        i.name_sym = i.symbols.intern(METRIC_NAME_LABEL);
        i
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
}
