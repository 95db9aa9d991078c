//! The scheduler's decision log, bounded by count and age, looked up by pod.
//!
//! One tree, three key kinds, so each `put_decision` is one atomic batch:
//! - `L` + ts (u64 BE) + sequence (u64 BE) → entry (the log, oldest first);
//! - `P` + varint len + namespace + name → the `L` key of the pod's newest decision;
//! - `U` + uid → the `L` key of the uid's newest decision.
//!
//! Index entries may outlive the log entry they point to (after trimming); lookups then
//! return `None`, and trimming removes index entries that still point at what it drops.

use std::sync::atomic::Ordering;

use crate::Store;
use crate::checksum::{DECISIONS, seal, unseal};
use crate::chunk::{get_uvarint, put_uvarint};
use crate::error::{Error, Result};
use crate::lock;

/// Identifies a decision: the pod and the decision time.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct DecisionKey {
    /// Pod namespace.
    pub namespace: String,
    /// Pod name.
    pub name: String,
    /// Pod uid.
    pub uid: String,
    /// Decision time, ms since the epoch.
    pub ts_ms: i64,
}

const LOG: u8 = b'L';
const POD: u8 = b'P';
const UID: u8 = b'U';

/// The number of records in the log, and the sequence number the next one takes: one
/// past the largest in the log, so that records of the same millisecond keep their order
/// and never share a key (also in a database a compaction wrote, which starts afresh).
pub(crate) fn count(tree: &sled::Tree) -> Result<(usize, u64)> {
    let mut n = 0;
    let mut next = 0u64;
    for kv in tree.scan_prefix([LOG]) {
        let (k, _) = kv?;
        if let Some(b) = k.get(9..17) {
            let mut a = [0u8; 8];
            a.copy_from_slice(b);
            next = next.max(u64::from_be_bytes(a).saturating_add(1));
        }
        n += 1;
    }
    Ok((n, next))
}

fn pod_key(namespace: &str, name: &str) -> Vec<u8> {
    let mut k = vec![POD];
    put_uvarint(&mut k, namespace.len() as u64);
    k.extend_from_slice(namespace.as_bytes());
    k.extend_from_slice(name.as_bytes());
    k
}

fn uid_key(uid: &str) -> Vec<u8> {
    let mut k = vec![UID];
    k.extend_from_slice(uid.as_bytes());
    k
}

/// An entry whose record follows as written (stores from before records were compressed).
const RAW: u8 = 1;
/// An entry whose record follows compressed with raw DEFLATE (RFC 1951): the explanations
/// are JSON that compresses several times over, and sled keeps what it wrote in memory.
const DEFLATE: u8 = 2;
/// The most a compressed record may inflate to: a damaged or hostile entry cannot make a
/// lookup allocate more.
const MAX_RECORD_BYTES: usize = 64 << 20;

fn encode_entry(key: &DecisionKey, record: &[u8]) -> Vec<u8> {
    // Level 1: at several hundred decisions a second the sink's thread compresses each in
    // tens of microseconds, and still keeps a fraction of the JSON.
    let body = miniz_oxide::deflate::compress_to_vec(record, 1);
    let mut v = Vec::with_capacity(body.len() + 64);
    v.push(DEFLATE);
    for s in [&key.namespace, &key.name, &key.uid] {
        put_uvarint(&mut v, s.len() as u64);
        v.extend_from_slice(s.as_bytes());
    }
    v.extend_from_slice(&body);
    v
}

struct Entry {
    namespace: String,
    name: String,
    uid: String,
    /// [`RAW`] or [`DEFLATE`].
    encoding: u8,
    body: Vec<u8>,
}

impl Entry {
    /// The record as it was put (inflated when stored compressed); `key` names the entry in
    /// the error.
    fn record(self, key: &[u8]) -> Result<Vec<u8>> {
        match self.encoding {
            DEFLATE => {
                miniz_oxide::inflate::decompress_to_vec_with_limit(&self.body, MAX_RECORD_BYTES)
                    .map_err(|e| {
                        Error::corrupt(
                            crate::checksum::describe(DECISIONS, key),
                            format!("compressed record: {:?}", e.status),
                        )
                    })
            }
            _ => Ok(self.body),
        }
    }
}

/// Decodes the sealed log entry `v` stored under `key` (the record left as stored).
fn decode_entry(key: &[u8], v: &[u8]) -> Result<Entry> {
    let v = unseal(DECISIONS, key, v)?;
    let what = || crate::checksum::describe(DECISIONS, key);
    decode_payload(v).map_err(|e| match e {
        Error::CorruptValue { detail, .. } => Error::corrupt(what(), detail),
        other => other,
    })
}

fn decode_payload(v: &[u8]) -> Result<Entry> {
    const W: &str = "decision entry";
    let encoding = match v.first() {
        Some(&e @ (RAW | DEFLATE)) => e,
        _ => return Err(Error::corrupt(W, "unknown encoding")),
    };
    let mut pos = 1;
    let mut strs = Vec::with_capacity(3);
    for _ in 0..3 {
        let n = get_uvarint(v, &mut pos).ok_or_else(|| Error::corrupt(W, "length"))? as usize;
        let end = pos
            .checked_add(n)
            .filter(|&e| e <= v.len())
            .ok_or_else(|| Error::corrupt(W, "truncated"))?;
        strs.push(
            String::from_utf8(v[pos..end].to_vec()).map_err(|_| Error::corrupt(W, "not UTF-8"))?,
        );
        pos = end;
    }
    let uid = strs.pop().unwrap_or_default();
    let name = strs.pop().unwrap_or_default();
    let namespace = strs.pop().unwrap_or_default();
    Ok(Entry {
        namespace,
        name,
        uid,
        encoding,
        body: v[pos..].to_vec(),
    })
}

impl Store {
    /// Appends a decision record (opaque bytes; the scheduler writes JSON). It becomes the
    /// pod's and the uid's current decision unless a newer one (by `ts_ms`) is recorded.
    /// The oldest records beyond `decision_log_max_records` are dropped.
    pub fn put_decision(&self, key: &DecisionKey, record: &[u8]) -> Result<()> {
        if key.namespace.len() > 1024 || key.name.len() > 1024 || key.uid.len() > 1024 {
            return Err(Error::InvalidArgument(
                "decision key field longer than 1024 bytes".into(),
            ));
        }
        if key.ts_ms < 0 {
            return Err(Error::InvalidArgument(format!(
                "negative decision time {}",
                key.ts_ms
            )));
        }
        let _g = lock(&self.inner.record_lock);
        // Taken under the record lock, which compaction holds while it copies and swaps.
        let db = self.inner.db();
        let tree = &db.decisions;
        let seq = self.inner.decision_seq.fetch_add(1, Ordering::Relaxed);
        let mut log_key = vec![LOG];
        log_key.extend_from_slice(&(key.ts_ms as u64).to_be_bytes());
        log_key.extend_from_slice(&seq.to_be_bytes());
        let mut batch = sled::Batch::default();
        batch.insert(
            log_key.as_slice(),
            seal(DECISIONS, &log_key, &encode_entry(key, record)),
        );
        for ik in [pod_key(&key.namespace, &key.name), uid_key(&key.uid)] {
            let newer_exists = match tree.get(&ik)? {
                Some(cur) => unseal(DECISIONS, &ik, &cur)? > log_key.as_slice(),
                None => false,
            };
            if !newer_exists {
                let sealed = seal(DECISIONS, &ik, &log_key);
                batch.insert(ik, sealed);
            }
        }
        tree.apply_batch(batch)?;
        let n = self.inner.decision_count.fetch_add(1, Ordering::Relaxed) + 1;
        let max = self.inner.config.decision_log_max_records.max(1);
        if n > max {
            self.trim_decisions(n - max, i64::MAX)?;
        }
        Ok(())
    }

    /// Drops up to `n` oldest entries with ts < `before_ms`; returns how many it dropped.
    /// The caller holds `record_lock`.
    fn trim_decisions(&self, n: usize, before_ms: i64) -> Result<u64> {
        let db = self.inner.db();
        let tree = &db.decisions;
        let mut batch = sled::Batch::default();
        let mut dropped = 0u64;
        for kv in tree.scan_prefix([LOG]).take(n) {
            let (k, v) = kv?;
            let ts = k.get(1..9).map(|b| {
                let mut a = [0u8; 8];
                a.copy_from_slice(b);
                u64::from_be_bytes(a) as i64
            });
            if ts.is_none_or(|t| t >= before_ms) {
                break;
            }
            if let Ok(e) = decode_entry(&k, &v) {
                for ik in [pod_key(&e.namespace, &e.name), uid_key(&e.uid)] {
                    // A damaged index entry is left alone: reading it reports the damage.
                    let points_here = tree.get(&ik)?.is_some_and(|cur| {
                        unseal(DECISIONS, &ik, &cur).is_ok_and(|c| c == k.as_ref())
                    });
                    if points_here {
                        batch.remove(ik);
                    }
                }
            }
            batch.remove(k);
            dropped += 1;
        }
        tree.apply_batch(batch)?;
        self.inner
            .decision_count
            .fetch_sub(dropped as usize, Ordering::Relaxed);
        Ok(dropped)
    }

    pub(crate) fn expire_decisions(&self, now_ms: i64) -> Result<u64> {
        let _g = lock(&self.inner.record_lock);
        let age = crate::config::ms(self.inner.config.decision_log_max_age);
        self.trim_decisions(usize::MAX, now_ms.saturating_sub(age))
    }

    fn decision_via(&self, index_key: &[u8]) -> Result<Option<Vec<u8>>> {
        let db = self.inner.db();
        let tree = &db.decisions;
        let Some(sealed) = tree.get(index_key)? else {
            return Ok(None);
        };
        let log_key = unseal(DECISIONS, index_key, &sealed)?;
        match tree.get(log_key)? {
            Some(v) => Ok(Some(decode_entry(log_key, &v)?.record(log_key)?)),
            None => Ok(None),
        }
    }

    /// The newest decision record of pod `namespace/name`.
    pub fn decision_by_pod(&self, namespace: &str, name: &str) -> Result<Option<Vec<u8>>> {
        self.decision_via(&pod_key(namespace, name))
    }

    /// The newest decision record of the pod with this uid.
    pub fn decision_by_uid(&self, uid: &str) -> Result<Option<Vec<u8>>> {
        self.decision_via(&uid_key(uid))
    }

    /// Number of decision records kept.
    pub fn decision_count(&self) -> usize {
        self.inner.decision_count.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::StoreConfig;

    fn key(name: &str, ts_ms: i64) -> DecisionKey {
        DecisionKey {
            namespace: "ns".into(),
            name: name.into(),
            uid: format!("uid-{name}"),
            ts_ms,
        }
    }

    /// An explanation-like record: JSON with a verdict per node.
    fn record(nodes: usize) -> Vec<u8> {
        let verdicts: Vec<String> = (0..nodes)
            .map(|i| {
                format!(
                    r#"{{"node":"node-{i:05}","feasible":true,"score":{}}}"#,
                    i % 97
                )
            })
            .collect();
        format!(r#"{{"pod":"ns/a","nodes":[{}]}}"#, verdicts.join(",")).into_bytes()
    }

    /// Records are stored compressed and read back as put; the stored entry is a fraction
    /// of the record.
    #[test]
    fn records_are_stored_compressed() {
        let s = Store::open_temporary(StoreConfig::default()).unwrap();
        let r = record(100);
        s.put_decision(&key("a", 1), &r).unwrap();
        assert_eq!(s.decision_by_pod("ns", "a").unwrap().unwrap(), r);
        assert_eq!(s.decision_by_uid("uid-a").unwrap().unwrap(), r);
        let (_, stored) = s
            .inner
            .db()
            .decisions
            .scan_prefix([LOG])
            .next()
            .unwrap()
            .unwrap();
        assert!(
            stored.len() * 3 < r.len(),
            "{} stored bytes for a {}-byte record",
            stored.len(),
            r.len()
        );
        // An empty record too.
        s.put_decision(&key("e", 2), b"").unwrap();
        assert_eq!(s.decision_by_pod("ns", "e").unwrap().unwrap(), b"");
    }

    /// Writes an entry as an older store did, or a damaged one, with valid checksums.
    fn put_raw(s: &Store, name: &str, ts: u64, encoding: u8, body: &[u8]) {
        let mut v = vec![encoding];
        for part in ["ns", name, &format!("uid-{name}")] {
            put_uvarint(&mut v, part.len() as u64);
            v.extend_from_slice(part.as_bytes());
        }
        v.extend_from_slice(body);
        let mut log_key = vec![LOG];
        log_key.extend_from_slice(&ts.to_be_bytes());
        log_key.extend_from_slice(&7u64.to_be_bytes());
        let db = s.inner.db();
        let tree = &db.decisions;
        tree.insert(&log_key, seal(DECISIONS, &log_key, &v))
            .unwrap();
        let ik = pod_key("ns", name);
        tree.insert(&ik, seal(DECISIONS, &ik, &log_key)).unwrap();
    }

    /// Entries written before compression (`u8 1`) still read; a compressed body that does
    /// not inflate is a corrupt record naming the entry, not a panic.
    #[test]
    fn uncompressed_entries_read_and_bad_bodies_are_errors() {
        let s = Store::open_temporary(StoreConfig::default()).unwrap();
        put_raw(&s, "old", 1_700_000_000_000, RAW, b"{\"old\":true}");
        assert_eq!(
            s.decision_by_pod("ns", "old").unwrap().unwrap(),
            b"{\"old\":true}"
        );
        put_raw(
            &s,
            "bad",
            1_700_000_000_001,
            DEFLATE,
            b"\xff\xfe not deflate",
        );
        let e = s.decision_by_pod("ns", "bad").unwrap_err().to_string();
        assert!(
            e.contains("decision record at 1700000000001 ms") && e.contains("compressed record"),
            "{e}"
        );
        put_raw(&s, "what", 1_700_000_000_002, 9, b"x");
        let e = s.decision_by_pod("ns", "what").unwrap_err().to_string();
        assert!(e.contains("unknown encoding"), "{e}");
    }
}
