//! Key layout of the `tsdb` tree and the codecs of its small values (see `FORMAT.md`).
//!
//! Everything about samples lives in one sled tree so that one flush is one atomic
//! `apply_batch`: new series definitions, sealed chunks, partial-chunk checkpoints, the new
//! log segment and the deletion of obsolete segments land together or not at all.

use crate::chunk::{get_uvarint, put_uvarint};
use crate::error::{Error, Result};
use crate::labels::Labels;

/// Series definition: `S` + id (u64 BE) → [`encode_series_def`].
pub(crate) const SERIES: u8 = b'S';
/// Chunk: `C` + id (u64 BE) + first timestamp (u64 BE) → encoded chunk.
pub(crate) const CHUNK: u8 = b'C';
/// Rollup block: `R` + id (u64 BE) + day start (u64 BE) → rollup block.
pub(crate) const ROLLUP: u8 = b'R';
/// Write-ahead-log segment: `W` + flush sequence (u64 BE) → segment.
pub(crate) const WAL: u8 = b'W';
/// Raw-retention watermark: `M` + "raw_cutoff" → i64 BE.
pub(crate) const RAW_CUTOFF_KEY: &[u8] = b"Mraw_cutoff";
/// Sequence number of the last completed flush: `M` + "last_flush" → u64 BE.
pub(crate) const LAST_FLUSH_KEY: &[u8] = b"Mlast_flush";

pub(crate) fn series_key(id: u64) -> [u8; 9] {
    let mut k = [0u8; 9];
    k[0] = SERIES;
    k[1..].copy_from_slice(&id.to_be_bytes());
    k
}

fn id_ts_key(tag: u8, id: u64, ts: i64) -> [u8; 17] {
    let mut k = [0u8; 17];
    k[0] = tag;
    k[1..9].copy_from_slice(&id.to_be_bytes());
    // Timestamps are validated to be ≥ 0, so plain big-endian sorts by time.
    k[9..].copy_from_slice(&(ts.max(0) as u64).to_be_bytes());
    k
}

pub(crate) fn chunk_key(id: u64, first_ts: i64) -> [u8; 17] {
    id_ts_key(CHUNK, id, first_ts)
}

pub(crate) fn rollup_key(id: u64, block_start: i64) -> [u8; 17] {
    id_ts_key(ROLLUP, id, block_start)
}

pub(crate) fn wal_key(seq: u64) -> [u8; 9] {
    let mut k = [0u8; 9];
    k[0] = WAL;
    k[1..].copy_from_slice(&seq.to_be_bytes());
    k
}

/// Splits `tag + id + ts` keys.
pub(crate) fn parse_id_ts_key(k: &[u8]) -> Result<(u64, i64)> {
    if k.len() != 17 {
        return Err(Error::corrupt("key", format!("bad length {}", k.len())));
    }
    let mut a = [0u8; 8];
    a.copy_from_slice(&k[1..9]);
    let id = u64::from_be_bytes(a);
    a.copy_from_slice(&k[9..17]);
    Ok((id, u64::from_be_bytes(a) as i64))
}

pub(crate) fn parse_u64_suffix(k: &[u8]) -> Result<u64> {
    if k.len() != 9 {
        return Err(Error::corrupt("key", format!("bad length {}", k.len())));
    }
    let mut a = [0u8; 8];
    a.copy_from_slice(&k[1..9]);
    Ok(u64::from_be_bytes(a))
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    put_uvarint(out, s.len() as u64);
    out.extend_from_slice(s.as_bytes());
}

fn get_str(data: &[u8], pos: &mut usize, what: &'static str) -> Result<String> {
    let n = get_uvarint(data, pos).ok_or_else(|| Error::corrupt(what, "length"))? as usize;
    let end = pos
        .checked_add(n)
        .filter(|&e| e <= data.len())
        .ok_or_else(|| Error::corrupt(what, "truncated"))?;
    let s = std::str::from_utf8(&data[*pos..end])
        .map_err(|_| Error::corrupt(what, "not UTF-8"))?
        .to_string();
    *pos = end;
    Ok(s)
}

/// `u8 1, str metric, varint n, n × (str name, str value)` with `str = varint len + bytes`.
pub(crate) fn encode_series_def(metric: &str, labels: &Labels) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    out.push(1);
    put_str(&mut out, metric);
    put_uvarint(&mut out, labels.len() as u64);
    for (k, v) in labels.iter() {
        put_str(&mut out, k);
        put_str(&mut out, v);
    }
    out
}

pub(crate) fn decode_series_def(data: &[u8]) -> Result<(String, Labels)> {
    const W: &str = "series definition";
    if data.first() != Some(&1) {
        return Err(Error::corrupt(W, "unknown encoding"));
    }
    let mut pos = 1;
    let metric = get_str(data, &mut pos, W)?;
    let n = get_uvarint(data, &mut pos).ok_or_else(|| Error::corrupt(W, "count"))?;
    let mut pairs = Vec::new();
    for _ in 0..n.min(crate::labels::MAX_LABELS as u64 + 1) {
        let k = get_str(data, &mut pos, W)?;
        let v = get_str(data, &mut pos, W)?;
        pairs.push((k, v));
    }
    // Re-validate: a definition on disk is input too.
    let labels = Labels::new(pairs).map_err(|e| Error::corrupt(W, e.to_string()))?;
    crate::labels::validate_metric_name(&metric).map_err(|e| Error::corrupt(W, e.to_string()))?;
    Ok((metric, labels))
}

/// Log segment: `u8 1` then records `varint id, varint ts, f64 LE value`.
pub(crate) fn wal_record(buf: &mut Vec<u8>, id: u64, ts: i64, value: f64) {
    if buf.is_empty() {
        buf.push(1);
    }
    put_uvarint(buf, id);
    put_uvarint(buf, ts as u64);
    buf.extend_from_slice(&value.to_le_bytes());
}

/// Decodes a log segment.
pub(crate) fn decode_wal(data: &[u8], mut f: impl FnMut(u64, i64, f64)) -> Result<()> {
    const W: &str = "log segment";
    if data.is_empty() {
        return Ok(());
    }
    if data[0] != 1 {
        return Err(Error::corrupt(W, "unknown encoding"));
    }
    let mut pos = 1;
    while pos < data.len() {
        let id = get_uvarint(data, &mut pos).ok_or_else(|| Error::corrupt(W, "id"))?;
        let ts = get_uvarint(data, &mut pos).ok_or_else(|| Error::corrupt(W, "ts"))?;
        let b = data
            .get(pos..pos + 8)
            .ok_or_else(|| Error::corrupt(W, "truncated value"))?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        pos += 8;
        f(id, ts as i64, f64::from_le_bytes(a));
    }
    Ok(())
}
