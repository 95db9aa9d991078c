//! Node labels, interned: one column per label key (a `u32` value id per node index,
//! [`NONE`] when absent), each key with its own reference-counted value dictionary
//! ([`Interner`]). The node table ([`crate::snapshot::table`]) keeps them; compiled selectors
//! ([`crate::selector`]) and topology domains (`plugins::topology`) read them.
//!
//! Below both the snapshot's node records and the selectors, so neither imports the other
//! for labels.

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;
use std::sync::Arc;

/// A set of labels (an object's `metadata.labels`).
pub type Labels = BTreeMap<String, String>;

/// The id of an absent label value (the node lacks the key).
pub const NONE: u32 = u32::MAX;

/// A dictionary of values with reference-counted, recycled `u32` ids.
#[derive(Debug, Clone)]
pub struct Interner<T> {
    ids: HashMap<T, u32>,
    values: Vec<Option<T>>,
    refs: Vec<u32>,
    free: Vec<u32>,
}

impl<T> Default for Interner<T> {
    fn default() -> Self {
        Interner {
            ids: HashMap::new(),
            values: Vec::new(),
            refs: Vec::new(),
            free: Vec::new(),
        }
    }
}

impl<T: Hash + Eq + Clone> Interner<T> {
    /// The id of `value`, adding a reference (and the value, when new).
    pub fn intern(&mut self, value: &T) -> u32 {
        if let Some(&id) = self.ids.get(value) {
            self.refs[id as usize] += 1;
            return id;
        }
        let id = match self.free.pop() {
            Some(id) => {
                self.values[id as usize] = Some(value.clone());
                self.refs[id as usize] = 1;
                id
            }
            None => {
                self.values.push(Some(value.clone()));
                self.refs.push(1);
                (self.values.len() - 1) as u32
            }
        };
        self.ids.insert(value.clone(), id);
        id
    }

    /// Drops a reference; the id is recycled when none is left.
    pub fn release(&mut self, id: u32) {
        let i = id as usize;
        self.refs[i] -= 1;
        if self.refs[i] == 0
            && let Some(v) = self.values[i].take()
        {
            self.ids.remove(&v);
            self.free.push(id);
        }
    }

    /// The value of an id in use.
    pub fn value(&self, id: u32) -> Option<&T> {
        self.values.get(id as usize).and_then(Option::as_ref)
    }

    /// Every id in use with its value.
    pub fn iter(&self) -> impl Iterator<Item = (u32, &T)> {
        self.values
            .iter()
            .enumerate()
            .filter_map(|(i, v)| Some((i as u32, v.as_ref()?)))
    }

    /// One past the largest id ever handed out: the length of a dense array indexed by id.
    pub fn capacity(&self) -> usize {
        self.values.len()
    }

    /// Number of distinct values in use.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// True when no value is in use.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }
}

impl Interner<String> {
    /// The id of a value, if some node has it.
    pub fn get(&self, value: &str) -> Option<u32> {
        self.ids.get(value).copied()
    }
}

/// One label key: its value per node and its value dictionary.
#[derive(Debug, Clone)]
pub struct LabelColumn {
    /// The key.
    pub key: String,
    /// Value id per node index ([`NONE`]: the node lacks the key). Shared: a cycle's
    /// per-domain counts keep the column they were computed over (copied on write).
    pub values: Arc<Vec<u32>>,
    /// The key's values.
    pub dict: Interner<String>,
}

impl LabelColumn {
    /// The value id of node `idx` ([`NONE`] when absent).
    #[inline]
    pub fn at(&self, idx: u32) -> u32 {
        self.values[idx as usize]
    }
}

/// The interned node labels: one [`LabelColumn`] per key any node ever carried.
#[derive(Debug, Clone, Default)]
pub struct LabelTable {
    keys: HashMap<String, u32>,
    columns: Vec<LabelColumn>,
    /// Number of nodes (the length of every column).
    nodes: usize,
}

impl LabelTable {
    /// The column of a label key, if any node carried it.
    pub fn column(&self, key: &str) -> Option<&LabelColumn> {
        self.keys.get(key).map(|&k| &self.columns[k as usize])
    }

    /// The key id of a label key.
    pub fn key_id(&self, key: &str) -> Option<u32> {
        self.keys.get(key).copied()
    }

    /// The column of a key id.
    #[inline]
    pub fn by_id(&self, key: u32) -> &LabelColumn {
        &self.columns[key as usize]
    }

    /// Every column.
    pub fn columns(&self) -> &[LabelColumn] {
        &self.columns
    }

    pub(super) fn push_node(&mut self) {
        self.nodes += 1;
        for c in &mut self.columns {
            Arc::make_mut(&mut c.values).push(NONE);
        }
    }

    pub(super) fn set(&mut self, idx: usize, labels: &Labels) {
        for (k, v) in labels {
            let key = match self.keys.get(k.as_str()) {
                Some(&key) => key,
                None => {
                    let key = self.columns.len() as u32;
                    self.columns.push(LabelColumn {
                        key: k.clone(),
                        values: Arc::new(vec![NONE; self.nodes]),
                        dict: Interner::default(),
                    });
                    self.keys.insert(k.clone(), key);
                    key
                }
            };
            let col = &mut self.columns[key as usize];
            let id = col.dict.intern(v);
            Arc::make_mut(&mut col.values)[idx] = id;
        }
    }

    pub(super) fn clear(&mut self, idx: usize) {
        for c in &mut self.columns {
            if c.values[idx] != NONE {
                let v = std::mem::replace(&mut Arc::make_mut(&mut c.values)[idx], NONE);
                c.dict.release(v);
            }
        }
    }

    pub(super) fn swap_remove(&mut self, idx: usize) {
        self.clear(idx);
        self.nodes -= 1;
        for c in &mut self.columns {
            Arc::make_mut(&mut c.values).swap_remove(idx);
        }
    }
}
