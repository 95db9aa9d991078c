//! 5-minute rollups (min, max, sum, count, last) kept after raw samples expire.
//!
//! Rollups are stored per series in day blocks (`R` + id + day start), each block a list
//! of buckets. A bucket is written when the raw chunk holding its samples expires; since
//! chunk boundaries need not align with buckets, a bucket can receive samples from two
//! chunks and is then merged (older part first).

use serde::{Deserialize, Serialize};

use crate::Sample;
use crate::chunk::{get_uvarint, put_uvarint};
use crate::error::{Error, Result};

/// Width of a rollup bucket.
pub const ROLLUP_STEP_MS: i64 = 5 * 60 * 1000;
/// Width of a rollup block on disk.
pub const ROLLUP_BLOCK_MS: i64 = 24 * 60 * 60 * 1000;
const BLOCK_ENCODING: u8 = 1;

/// Aggregate of the samples of one series within `[start_ms, start_ms + 5 min)`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Rollup {
    /// Bucket start (a multiple of [`ROLLUP_STEP_MS`]).
    pub start_ms: i64,
    /// Smallest value.
    pub min: f64,
    /// Largest value.
    pub max: f64,
    /// Sum of values.
    pub sum: f64,
    /// Number of samples.
    pub count: u64,
    /// Value of the newest sample.
    pub last: f64,
}

impl Rollup {
    /// Mean of the bucket.
    pub fn avg(&self) -> f64 {
        self.sum / self.count as f64
    }

    fn of(s: Sample) -> Rollup {
        Rollup {
            start_ms: bucket_start(s.ts_ms),
            min: s.value,
            max: s.value,
            sum: s.value,
            count: 1,
            last: s.value,
        }
    }

    /// Folds in a newer partial aggregate of the same bucket.
    pub(crate) fn merge_newer(&mut self, newer: &Rollup) {
        self.min = self.min.min(newer.min);
        self.max = self.max.max(newer.max);
        self.sum += newer.sum;
        self.count += newer.count;
        self.last = newer.last;
    }
}

/// Bucket start of a timestamp.
pub fn bucket_start(ts_ms: i64) -> i64 {
    ts_ms - ts_ms.rem_euclid(ROLLUP_STEP_MS)
}

/// Block start of a timestamp.
pub(crate) fn block_start(ts_ms: i64) -> i64 {
    ts_ms - ts_ms.rem_euclid(ROLLUP_BLOCK_MS)
}

/// Rollups of time-ordered samples.
pub fn rollup_samples(samples: &[Sample]) -> Vec<Rollup> {
    let mut out: Vec<Rollup> = Vec::new();
    for &s in samples {
        match out.last_mut() {
            Some(r) if r.start_ms == bucket_start(s.ts_ms) => r.merge_newer(&Rollup::of(s)),
            _ => out.push(Rollup::of(s)),
        }
    }
    out
}

/// Merges two bucket lists sorted by start, where each of `newer`'s buckets holds samples
/// later than those of the same bucket in `older`.
pub(crate) fn merge_rollups(older: Vec<Rollup>, newer: Vec<Rollup>) -> Vec<Rollup> {
    let mut out = Vec::with_capacity(older.len() + newer.len());
    let mut a = older.into_iter().peekable();
    let mut b = newer.into_iter().peekable();
    loop {
        match (a.peek(), b.peek()) {
            (Some(x), Some(y)) if x.start_ms == y.start_ms => {
                let mut r = *x;
                r.merge_newer(y);
                out.push(r);
                a.next();
                b.next();
            }
            (Some(x), Some(y)) => {
                if x.start_ms < y.start_ms {
                    out.push(*x);
                    a.next();
                } else {
                    out.push(*y);
                    b.next();
                }
            }
            (Some(x), None) => {
                out.push(*x);
                a.next();
            }
            (None, Some(y)) => {
                out.push(*y);
                b.next();
            }
            (None, None) => return out,
        }
    }
}

/// Encodes a day block: `u8 1, varint n, n × (varint bucket index, varint count,
/// f64 min, f64 max, f64 sum, f64 last)` (f64 little-endian).
pub(crate) fn encode_block(block_start: i64, rollups: &[Rollup]) -> Vec<u8> {
    let mut out = Vec::with_capacity(2 + rollups.len() * 36);
    out.push(BLOCK_ENCODING);
    put_uvarint(&mut out, rollups.len() as u64);
    for r in rollups {
        put_uvarint(
            &mut out,
            ((r.start_ms - block_start) / ROLLUP_STEP_MS) as u64,
        );
        put_uvarint(&mut out, r.count);
        for v in [r.min, r.max, r.sum, r.last] {
            out.extend_from_slice(&v.to_le_bytes());
        }
    }
    out
}

/// Decodes a day block.
pub(crate) fn decode_block(block_start: i64, data: &[u8]) -> Result<Vec<Rollup>> {
    let bad = |d: &str| Error::corrupt("rollup block", d.to_string());
    if data.first() != Some(&BLOCK_ENCODING) {
        return Err(bad("unknown encoding"));
    }
    let mut pos = 1;
    let n = get_uvarint(data, &mut pos).ok_or_else(|| bad("count"))?;
    let per_day = (ROLLUP_BLOCK_MS / ROLLUP_STEP_MS) as u64;
    if n > per_day {
        return Err(bad("too many buckets"));
    }
    let mut out = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let idx = get_uvarint(data, &mut pos).ok_or_else(|| bad("bucket"))?;
        if idx >= per_day {
            return Err(bad("bucket index out of range"));
        }
        let count = get_uvarint(data, &mut pos).ok_or_else(|| bad("count"))?;
        let mut f = [0f64; 4];
        for v in &mut f {
            let b = data.get(pos..pos + 8).ok_or_else(|| bad("truncated"))?;
            let mut a = [0u8; 8];
            a.copy_from_slice(b);
            *v = f64::from_le_bytes(a);
            pos += 8;
        }
        out.push(Rollup {
            start_ms: block_start + idx as i64 * ROLLUP_STEP_MS,
            min: f[0],
            max: f[1],
            sum: f[2],
            count,
            last: f[3],
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rollup_and_merge() {
        let s = |t, v| Sample { ts_ms: t, value: v };
        let all = [s(0, 1.0), s(1000, 3.0), s(300_000, 5.0), s(300_001, 2.0)];
        let whole = rollup_samples(&all);
        assert_eq!(whole.len(), 2);
        assert_eq!(whole[0].count, 2);
        assert_eq!(whole[1].last, 2.0);
        let merged = merge_rollups(rollup_samples(&all[..3]), rollup_samples(&all[3..]));
        assert_eq!(merged, whole);
        let enc = encode_block(0, &whole);
        assert_eq!(decode_block(0, &enc).unwrap(), whole);
        assert!(decode_block(0, &enc[..enc.len() - 1]).is_err());
    }
}
