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
    tree: sled::Tree,
    /// The sled tree's name, `kv/<name>` (part of each value's checksum).
    name: std::sync::Arc<str>,
    _t: PhantomData<fn() -> T>,
}

impl<T> Clone for TypedTree<T> {
    fn clone(&self) -> Self {
        TypedTree {
            tree: self.tree.clone(),
            name: self.name.clone(),
            _t: PhantomData,
        }
    }
}

impl<T> std::fmt::Debug for TypedTree<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TypedTree")
            .field("name", &String::from_utf8_lossy(&self.tree.name()))
            .finish()
    }
}

impl<T: Serialize + DeserializeOwned> TypedTree<T> {
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
        self.tree
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
        self.tree
            .insert(key, seal(&self.name, key.as_bytes(), &bytes))?
            .map(|v| self.de(key.as_bytes(), &v))
            .transpose()
    }

    /// Removes `key`, returning its value.
    pub fn remove(&self, key: &str) -> Result<Option<T>> {
        self.tree
            .remove(key)?
            .map(|v| self.de(key.as_bytes(), &v))
            .transpose()
    }

    /// True if `key` is present.
    pub fn contains_key(&self, key: &str) -> Result<bool> {
        Ok(self.tree.contains_key(key)?)
    }

    /// All entries in key order.
    pub fn iter(&self) -> impl Iterator<Item = Result<(String, T)>> + '_ {
        self.tree.iter().map(|kv| {
            let (k, v) = kv?;
            let value = self.de(&k, &v)?;
            let k = String::from_utf8(k.to_vec())
                .map_err(|_| Error::corrupt("typed tree key", "not UTF-8"))?;
            Ok((k, value))
        })
    }

    /// Number of entries (walks the tree).
    pub fn len(&self) -> usize {
        self.tree.len()
    }

    /// True if empty.
    pub fn is_empty(&self) -> bool {
        self.tree.is_empty()
    }

    /// Removes every entry.
    pub fn clear(&self) -> Result<()> {
        Ok(self.tree.clear()?)
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
        Ok(TypedTree {
            tree: self.inner.db.open_tree(&name)?,
            name: name.into(),
            _t: PhantomData,
        })
    }
}
