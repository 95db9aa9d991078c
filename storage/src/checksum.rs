//! Checksummed values: every value headroom stores in sled ends with a CRC-32 of the
//! tree name, the key and the payload (see `FORMAT.md`, "Value checksums").
//!
//! sled checksums its own log messages, but a damaged store can still hand back a value
//! that is not what was written (a page recovered from a damaged log, a value read under
//! another key, a bug). With the tree and key inside the checksum, such a value is
//! reported as [`Error::CorruptValue`] naming its key instead of being decoded into
//! plausible garbage.

use crate::error::{Error, Result};

/// Bytes of the checksum trailer.
pub(crate) const TRAILER: usize = 4;

/// Tree names as stored (they are part of each checksum).
pub(crate) const META: &str = "meta";
pub(crate) const TSDB: &str = "tsdb";
pub(crate) const RUNS: &str = "runs";
pub(crate) const PLACEMENTS: &str = "placements";
pub(crate) const DECISIONS: &str = "decisions";

fn crc(tree: &[u8], key: &[u8], payload: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&(tree.len() as u32).to_le_bytes());
    h.update(tree);
    h.update(&(key.len() as u32).to_le_bytes());
    h.update(key);
    h.update(payload);
    h.finalize()
}

/// `payload` followed by its checksum (u32 LE).
pub(crate) fn seal(tree: &str, key: &[u8], payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(payload.len() + TRAILER);
    v.extend_from_slice(payload);
    v.extend_from_slice(&crc(tree.as_bytes(), key, payload).to_le_bytes());
    v
}

/// The payload of a sealed value, after checking its checksum.
pub(crate) fn unseal<'a>(tree: &str, key: &[u8], value: &'a [u8]) -> Result<&'a [u8]> {
    let Some(split) = value.len().checked_sub(TRAILER) else {
        return Err(Error::corrupt(
            describe(tree, key),
            format!("{} bytes, shorter than its checksum", value.len()),
        ));
    };
    let (payload, trailer) = value.split_at(split);
    let mut a = [0u8; TRAILER];
    a.copy_from_slice(trailer);
    let stored = u32::from_le_bytes(a);
    let computed = crc(tree.as_bytes(), key, payload);
    if stored != computed {
        return Err(Error::corrupt(
            describe(tree, key),
            format!("checksum mismatch (stored {stored:08x}, computed {computed:08x})"),
        ));
    }
    Ok(payload)
}

fn be_u64(b: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(b.try_into().ok()?))
}

/// A human description of a key, for error messages.
pub(crate) fn describe(tree: &str, key: &[u8]) -> String {
    let text = |b: &[u8]| format!("{:?}", String::from_utf8_lossy(b));
    let id_ts = |what: &str, unit: &str| match (
        key.get(1..9).and_then(be_u64),
        key.get(9..17).and_then(be_u64),
    ) {
        (Some(id), Some(ts)) if key.len() == 17 => format!("{what} of series {id} {unit} {ts} ms"),
        _ => format!("{what} under malformed key {key:02x?}"),
    };
    match (tree, key.first()) {
        (TSDB, Some(b'S')) => match key.get(1..).and_then(be_u64) {
            Some(id) => format!("definition of series {id}"),
            None => format!("series definition under malformed key {key:02x?}"),
        },
        (TSDB, Some(b'C')) => id_ts("chunk", "starting at"),
        (TSDB, Some(b'R')) => id_ts("rollup block", "for the day starting at"),
        (TSDB, Some(b'W')) => match key.get(1..).and_then(be_u64) {
            Some(seq) => format!("write-ahead log segment {seq}"),
            None => format!("log segment under malformed key {key:02x?}"),
        },
        (TSDB, Some(b'M')) => format!("store metadata {}", text(&key[1..])),
        (META, _) => format!("store metadata {}", text(key)),
        (RUNS, _) => format!("run records of builder {}", text(key)),
        (PLACEMENTS, _) => format!("placement history of builder {}", text(key)),
        (DECISIONS, Some(b'L')) => match (
            key.get(1..9).and_then(be_u64),
            key.get(9..).and_then(be_u64),
        ) {
            (Some(ts), Some(seq)) => format!("decision record at {ts} ms (#{seq})"),
            _ => format!("decision record under malformed key {key:02x?}"),
        },
        (DECISIONS, Some(b'P')) => format!("decision index entry of pod {}", text(&key[1..])),
        (DECISIONS, Some(b'U')) => format!("decision index entry of uid {}", text(&key[1..])),
        _ => match tree.strip_prefix("kv/") {
            Some(name) => format!("value {} of tree {name:?}", text(key)),
            None => format!("value under key {key:02x?} of tree {tree:?}"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_and_every_single_bit_flip_is_caught() {
        let key = [
            b'C', 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 1, 0x8b, 0xcf, 0xe5, 0x68, 0,
        ];
        let sealed = seal(TSDB, &key, b"some payload");
        assert_eq!(unseal(TSDB, &key, &sealed).unwrap(), b"some payload");
        for bit in 0..sealed.len() * 8 {
            let mut v = sealed.clone();
            v[bit / 8] ^= 1 << (bit % 8);
            let e = unseal(TSDB, &key, &v).unwrap_err().to_string();
            assert!(
                e.contains("chunk of series 3") && e.contains("checksum"),
                "{e}"
            );
        }
        // The same bytes under another key or tree are rejected too.
        let mut other = key;
        other[8] = 4;
        assert!(unseal(TSDB, &other, &sealed).is_err());
        assert!(unseal(RUNS, &key, &sealed).is_err());
        assert!(unseal(TSDB, &key, &sealed[..3]).is_err());
    }

    #[test]
    fn describes_keys() {
        assert_eq!(
            describe(RUNS, b"ns/Job/x"),
            "run records of builder \"ns/Job/x\""
        );
        assert_eq!(describe("kv/res", b"k"), "value \"k\" of tree \"res\"");
        let mut w = vec![b'W'];
        w.extend_from_slice(&7u64.to_be_bytes());
        assert_eq!(describe(TSDB, &w), "write-ahead log segment 7");
    }
}
