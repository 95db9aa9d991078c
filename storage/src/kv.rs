//! Small typed keyed state (e.g. a reservations cache) in its own sled tree.

use std::marker::PhantomData;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::Store;
use crate::checksum::{seal, unseal};
use crate::error::{Error, Result};

/// A sled tree of JSON values of type `T` under string keys. Cheap to clone.
///
/// Values are JSON so that types can evolve with `#[serde(default)]` fields. Writes are
/// durable with the next [`Store::flush`] (or sled's own periodic flush within 0.5 s).
pub struct TypedTree<T> {
    /// The tree is looked up in the store's current database at every call, so that it
    /// follows a compaction ([`Store::compact`]).
    store: Store,
    /// The sled tree's name, `kv/<name>` (part of each value's checksum).
    name: std::sync::Arc<str>,
    _t: PhantomData<fn() -> T>,
}

impl<T> Clone for TypedTree<T> {
    fn clone(&self) -> Self {
        TypedTree {
            store: self.store.clone(),
            name: self.name.clone(),
            _t: PhantomData,
        }
    }
}

impl<T> std::fmt::Debug for TypedTree<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TypedTree")
            .field("name", &self.name)
            .finish()
    }
}

impl<T: Serialize + DeserializeOwned> TypedTree<T> {
    /// The sled tree in the store's current database.
    fn tree(&self) -> Result<sled::Tree> {
        Ok(self.store.inner.db().db.open_tree(&*self.name)?)
    }

    /// Checks the checksum of the value stored under `key` and decodes it. A checksum
    /// failure is [`Error::CorruptValue`]; valid bytes that do not decode as `T` (a type
    /// that changed incompatibly) are [`Error::Serde`].
    fn de(&self, key: &[u8], v: &[u8]) -> Result<T> {
        serde_json::from_slice(unseal(&self.name, key, v)?).map_err(|source| Error::Serde {
            what: "typed tree value",
            source,
        })
    }

    /// Value under `key`.
    pub fn get(&self, key: &str) -> Result<Option<T>> {
        self.tree()?
            .get(key)?
            .map(|v| self.de(key.as_bytes(), &v))
            .transpose()
    }

    /// Stores `value` under `key`, returning the previous value.
    pub fn insert(&self, key: &str, value: &T) -> Result<Option<T>> {
        let bytes = serde_json::to_vec(value).map_err(|source| Error::Serde {
            what: "typed tree value",
            source,
        })?;
        // Writes take the record lock so that none lands in a database being replaced.
        let _g = crate::lock(&self.store.inner.record_lock);
        self.tree()?
            .insert(key, seal(&self.name, key.as_bytes(), &bytes))?
            .map(|v| self.de(key.as_bytes(), &v))
            .transpose()
    }

    /// Removes `key`, returning its value.
    pub fn remove(&self, key: &str) -> Result<Option<T>> {
        let _g = crate::lock(&self.store.inner.record_lock);
        self.tree()?
            .remove(key)?
            .map(|v| self.de(key.as_bytes(), &v))
            .transpose()
    }

    /// True if `key` is present.
    pub fn contains_key(&self, key: &str) -> Result<bool> {
        Ok(self.tree()?.contains_key(key)?)
    }

    /// All entries in key order.
    pub fn iter(&self) -> impl Iterator<Item = Result<(String, T)>> + '_ {
        let tree = self.tree();
        let (tree, failed) = match tree {
            Ok(t) => (Some(t), None),
            Err(e) => (None, Some(Err(e))),
        };
        failed
            .into_iter()
            .chain(tree.into_iter().flat_map(|t| t.iter()).map(|kv| {
                let (k, v) = kv?;
                let value = self.de(&k, &v)?;
                let k = String::from_utf8(k.to_vec())
                    .map_err(|_| Error::corrupt("typed tree key", "not UTF-8"))?;
                Ok((k, value))
            }))
    }

    /// Number of entries (walks the tree; 0 if sled cannot open it).
    pub fn len(&self) -> usize {
        self.tree().map_or(0, |t| t.len())
    }

    /// True if empty (or if sled cannot open it).
    pub fn is_empty(&self) -> bool {
        self.tree().map_or(true, |t| t.is_empty())
    }

    /// Removes every entry.
    pub fn clear(&self) -> Result<()> {
        let _g = crate::lock(&self.store.inner.record_lock);
        Ok(self.tree()?.clear()?)
    }
}

impl Store {
    /// A typed tree named `name` (1..=128 bytes of `[A-Za-z0-9_.-]`), created on first use.
    /// Trees are independent of each other and of the store's own data.
    pub fn tree<T: Serialize + DeserializeOwned>(&self, name: &str) -> Result<TypedTree<T>> {
        let ok = !name.is_empty()
            && name.len() <= 128
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.' || b == b'-');
        if !ok {
            return Err(Error::InvalidArgument(format!("bad tree name {name:?}")));
        }
        let name = format!("kv/{name}");
        self.inner.db().db.open_tree(&name)?;
        Ok(TypedTree {
            store: self.clone(),
            name: name.into(),
            _t: PhantomData,
        })
    }
}
