//! Gorilla-style chunk encoding: delta-of-delta timestamps and XOR'd floats.
//!
//! A chunk holds up to [`MAX_CHUNK_SAMPLES`] samples of one series, strictly increasing in
//! time, spanning at most [`MAX_CHUNK_SPAN_MS`]. The encoding follows Facebook's Gorilla
//! paper (Pelkonen et al., VLDB 2015) with timestamp buckets tuned for millisecond stamps:
//! a regular scrape costs 1 bit per timestamp, a few ms of jitter 9 bits. Values are XOR'd
//! with their predecessor and only the meaningful bits are written, reusing the previous
//! leading/trailing-zero window when it fits: unchanged values cost 1 bit, slowly moving
//! gauges about 1–2 bytes.
//!
//! Layout of an encoded chunk (see `FORMAT.md`):
//!
//! ```text
//! u8      encoding (1 = gorilla)
//! varint  count            (≥ 1)
//! varint  first timestamp  (ms, ≥ 0)
//! varint  last − first     (ms)
//! bits    sample 0 value: 64 raw bits
//!         sample i ≥ 1:  dod(ts) bucket, then XOR(value)
//! ```
//!
//! The encoder is incremental so the in-memory head keeps only the compressed bytes of the
//! open chunk (about 1–3 bytes per sample) instead of 16-byte raw samples.

use crate::Sample;
use crate::error::{Error, Result};

/// Encoding byte of a Gorilla chunk.
pub const ENCODING_GORILLA: u8 = 1;
/// A chunk is cut once it holds this many samples (1 h at a 15 s scrape). Longer chunks
/// compress slightly better but make the open chunk (kept in memory) bigger.
pub const MAX_CHUNK_SAMPLES: u32 = 240;
/// A chunk never spans more than this (so a range query knows how far back to look).
pub const MAX_CHUNK_SPAN_MS: i64 = 2 * 60 * 60 * 1000;

/// Appends bits, most significant first.
#[derive(Clone, Debug, Default)]
pub(crate) struct BitWriter {
    buf: Vec<u8>,
    /// Free bits in the last byte (0 when the last byte is full or there is none).
    free: u8,
}

impl BitWriter {
    #[inline]
    fn write_bit(&mut self, bit: bool) {
        if self.free == 0 {
            self.buf.push(0);
            self.free = 8;
        }
        self.free -= 1;
        if bit {
            // Invariant: buf is non-empty (pushed above when free was 0).
            if let Some(last) = self.buf.last_mut() {
                *last |= 1 << self.free;
            }
        }
    }

    /// Writes the low `n` bits of `v` (n ≤ 64).
    #[inline]
    fn write_bits(&mut self, v: u64, mut n: u8) {
        while n > 0 {
            if self.free == 0 {
                self.buf.push(0);
                self.free = 8;
            }
            let take = n.min(self.free);
            let shift = n - take;
            let part = ((v >> shift) & ((1u64 << take) - 1)) as u8;
            self.free -= take;
            if let Some(last) = self.buf.last_mut() {
                *last |= part << self.free;
            }
            n -= take;
        }
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        &self.buf
    }

    fn capacity(&self) -> usize {
        self.buf.capacity()
    }

    fn shrink(&mut self) {
        self.buf.shrink_to_fit();
    }
}

/// Reads bits, most significant first.
pub(crate) struct BitReader<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> BitReader<'a> {
    pub(crate) fn new(data: &'a [u8]) -> Self {
        BitReader { data, pos: 0 }
    }

    /// The next 64 bits at the cursor (zero-padded past the end).
    #[inline]
    fn peek64(&self) -> u64 {
        let byte = self.pos >> 3;
        let mut w = [0u8; 8];
        if byte + 8 <= self.data.len() {
            w.copy_from_slice(&self.data[byte..byte + 8]);
        } else if byte < self.data.len() {
            let n = self.data.len() - byte;
            w[..n].copy_from_slice(&self.data[byte..]);
        }
        let v = u64::from_be_bytes(w);
        v << (self.pos & 7)
    }

    #[inline]
    fn check(&self, n: usize) -> Result<()> {
        if self.pos + n > self.data.len() * 8 {
            Err(Error::corrupt("chunk", "bit stream truncated"))
        } else {
            Ok(())
        }
    }

    #[inline]
    fn read_bit(&mut self) -> Result<bool> {
        self.check(1)?;
        let b = (self.data[self.pos >> 3] >> (7 - (self.pos & 7))) & 1;
        self.pos += 1;
        Ok(b == 1)
    }

    /// Reads `n` bits (n ≤ 64).
    #[inline]
    fn read_bits(&mut self, n: u8) -> Result<u64> {
        if n == 0 {
            return Ok(0);
        }
        self.check(n as usize)?;
        if n <= 56 {
            let v = self.peek64() >> (64 - n);
            self.pos += n as usize;
            Ok(v)
        } else {
            let hi = self.peek64() >> 32;
            self.pos += 32;
            let lo_n = n - 32;
            let lo = self.peek64() >> (64 - lo_n);
            self.pos += lo_n as usize;
            Ok((hi << lo_n) | lo)
        }
    }

    /// Counts leading one bits, up to `max` (consuming them and the terminating zero, if any).
    #[inline]
    fn read_unary(&mut self, max: u8) -> Result<u8> {
        let mut n = 0;
        while n < max {
            if !self.read_bit()? {
                break;
            }
            n += 1;
        }
        Ok(n)
    }
}

/// Timestamp delta-of-delta buckets: (prefix length, payload bits). Tuned for ms stamps.
const DOD_BUCKETS: [u8; 4] = [7, 9, 12, 20];

#[inline]
fn write_dod(w: &mut BitWriter, dod: i64) {
    if dod == 0 {
        w.write_bit(false);
        return;
    }
    for (i, &bits) in DOD_BUCKETS.iter().enumerate() {
        let half = 1i64 << (bits - 1);
        if dod > -half && dod <= half {
            // Prefix: i+1 ones then a zero.
            w.write_bits((1u64 << (i + 2)) - 2, (i + 2) as u8);
            w.write_bits(dod as u64 & ((1u64 << bits) - 1), bits);
            return;
        }
    }
    w.write_bits(0b11111, 5);
    w.write_bits(dod as u64, 64);
}

#[inline]
fn read_dod(r: &mut BitReader<'_>) -> Result<i64> {
    let ones = r.read_unary(5)?;
    match ones {
        0 => Ok(0),
        1..=4 => {
            let bits = DOD_BUCKETS[ones as usize - 1];
            let v = r.read_bits(bits)? as i64;
            let half = 1i64 << (bits - 1);
            Ok(if v > half { v - (1i64 << bits) } else { v })
        }
        _ => Ok(r.read_bits(64)? as i64),
    }
}

/// Incremental encoder of one chunk.
#[derive(Clone, Debug)]
pub struct ChunkEncoder {
    bits: BitWriter,
    first_ts: i64,
    last_ts: i64,
    last_delta: i64,
    last_value: u64,
    count: u32,
    leading: u8,
    trailing: u8,
}

impl ChunkEncoder {
    /// Starts a chunk with its first sample.
    pub fn new(ts_ms: i64, value: f64) -> ChunkEncoder {
        let mut bits = BitWriter::default();
        bits.write_bits(value.to_bits(), 64);
        ChunkEncoder {
            bits,
            first_ts: ts_ms,
            last_ts: ts_ms,
            last_delta: 0,
            last_value: value.to_bits(),
            count: 1,
            // 0xff marks "no XOR window yet".
            leading: 0xff,
            trailing: 0,
        }
    }

    /// Appends a sample; the caller guarantees `ts_ms > last_ts()`.
    pub fn append(&mut self, ts_ms: i64, value: f64) {
        let delta = ts_ms - self.last_ts;
        write_dod(&mut self.bits, delta - self.last_delta);
        self.last_delta = delta;
        self.last_ts = ts_ms;

        let v = value.to_bits();
        let xor = v ^ self.last_value;
        self.last_value = v;
        if xor == 0 {
            self.bits.write_bit(false);
        } else {
            self.bits.write_bit(true);
            // Leading zeros are stored in 5 bits, so cap at 31.
            let leading = (xor.leading_zeros() as u8).min(31);
            let trailing = xor.trailing_zeros() as u8;
            if self.leading != 0xff && leading >= self.leading && trailing >= self.trailing {
                self.bits.write_bit(false);
                let sig = 64 - self.leading - self.trailing;
                self.bits.write_bits(xor >> self.trailing, sig);
            } else {
                self.bits.write_bit(true);
                let sig = 64 - leading - trailing;
                self.bits.write_bits(leading as u64, 5);
                // sig is 1..=64; 64 is stored as 0 in 6 bits.
                self.bits.write_bits((sig & 63) as u64, 6);
                self.bits.write_bits(xor >> trailing, sig);
                self.leading = leading;
                self.trailing = trailing;
            }
        }
        self.count += 1;
    }

    /// Number of samples.
    pub fn count(&self) -> u32 {
        self.count
    }
    /// Timestamp of the first sample.
    pub fn first_ts(&self) -> i64 {
        self.first_ts
    }
    /// Timestamp of the newest sample.
    pub fn last_ts(&self) -> i64 {
        self.last_ts
    }
    /// The newest sample.
    pub fn last_sample(&self) -> Sample {
        Sample {
            ts_ms: self.last_ts,
            value: f64::from_bits(self.last_value),
        }
    }

    /// Heap bytes held by the encoder's bit buffer.
    pub fn heap_bytes(&self) -> usize {
        self.bits.capacity()
    }

    /// Releases spare capacity (used when a chunk is sealed and kept until the next flush).
    pub fn shrink(&mut self) {
        self.bits.shrink();
    }

    /// The encoded chunk (header + bit stream).
    pub fn encode(&self) -> Vec<u8> {
        let stream = self.bits.bytes();
        let mut out = Vec::with_capacity(stream.len() + 16);
        out.push(ENCODING_GORILLA);
        put_uvarint(&mut out, self.count as u64);
        put_uvarint(&mut out, self.first_ts as u64);
        put_uvarint(&mut out, (self.last_ts - self.first_ts) as u64);
        out.extend_from_slice(stream);
        out
    }
}

/// A chunk's header fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkHeader {
    /// Number of samples.
    pub count: u32,
    /// First timestamp.
    pub first_ts: i64,
    /// Last timestamp.
    pub last_ts: i64,
}

/// Parses a chunk header; returns it and the offset of the bit stream.
pub fn chunk_header(data: &[u8]) -> Result<(ChunkHeader, usize)> {
    let bad = |d: &str| Error::corrupt("chunk", d.to_string());
    match data.first() {
        Some(&ENCODING_GORILLA) => {}
        Some(e) => return Err(bad(&format!("unknown chunk encoding {e}"))),
        None => return Err(bad("empty chunk")),
    }
    let mut pos = 1;
    let count = get_uvarint(data, &mut pos).ok_or_else(|| bad("count"))?;
    let first = get_uvarint(data, &mut pos).ok_or_else(|| bad("first ts"))?;
    let span = get_uvarint(data, &mut pos).ok_or_else(|| bad("span"))?;
    if count == 0 || count > u32::MAX as u64 || first > crate::MAX_TIMESTAMP_MS as u64 {
        return Err(bad("header out of range"));
    }
    let first_ts = first as i64;
    let last_ts = first_ts
        .checked_add(span.min(i64::MAX as u64) as i64)
        .ok_or_else(|| bad("span overflow"))?;
    Ok((
        ChunkHeader {
            count: count as u32,
            first_ts,
            last_ts,
        },
        pos,
    ))
}

/// Decodes a whole chunk, appending samples with `start <= ts <= end` to `out`.
///
/// Decoding stops early once past `end`. A malformed chunk yields [`Error::Corrupt`],
/// never a panic.
pub fn decode_chunk(data: &[u8], start: i64, end: i64, out: &mut Vec<Sample>) -> Result<()> {
    let (h, off) = chunk_header(data)?;
    let mut r = BitReader::new(&data[off..]);
    let mut ts = h.first_ts;
    let mut v = r.read_bits(64)?;
    let mut delta: i64 = 0;
    let mut leading: u8 = 0;
    let mut trailing: u8 = 0;
    if ts > end {
        return Ok(());
    }
    if ts >= start {
        out.push(Sample {
            ts_ms: ts,
            value: f64::from_bits(v),
        });
    }
    for _ in 1..h.count {
        let dod = read_dod(&mut r)?;
        delta = delta.wrapping_add(dod);
        ts = ts.wrapping_add(delta);
        if r.read_bit()? {
            if r.read_bit()? {
                leading = r.read_bits(5)? as u8;
                let mut sig = r.read_bits(6)? as u8;
                if sig == 0 {
                    sig = 64;
                }
                if leading as u32 + sig as u32 > 64 {
                    return Err(Error::corrupt("chunk", "xor window out of range"));
                }
                trailing = 64 - leading - sig;
            }
            let sig = 64 - leading - trailing;
            let bits = r.read_bits(sig)?;
            v ^= if trailing >= 64 { 0 } else { bits << trailing };
        }
        if ts > end {
            return Ok(());
        }
        if ts >= start {
            out.push(Sample {
                ts_ms: ts,
                value: f64::from_bits(v),
            });
        }
    }
    Ok(())
}

/// Appends an unsigned LEB128 varint.
pub(crate) fn put_uvarint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Reads an unsigned LEB128 varint at `*pos`, advancing it; `None` if truncated/overlong.
pub(crate) fn get_uvarint(data: &[u8], pos: &mut usize) -> Option<u64> {
    let mut v: u64 = 0;
    let mut shift = 0u32;
    loop {
        let b = *data.get(*pos)?;
        *pos += 1;
        if shift >= 64 {
            return None;
        }
        v |= ((b & 0x7f) as u64) << shift;
        if b < 0x80 {
            return Some(v);
        }
        shift += 7;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn roundtrip(samples: &[Sample]) -> Vec<Sample> {
        let mut e = ChunkEncoder::new(samples[0].ts_ms, samples[0].value);
        for s in &samples[1..] {
            e.append(s.ts_ms, s.value);
        }
        let bytes = e.encode();
        let mut out = Vec::new();
        decode_chunk(&bytes, i64::MIN, i64::MAX, &mut out).unwrap();
        out
    }

    fn same(a: &[Sample], b: &[Sample]) -> bool {
        a.len() == b.len()
            && a.iter()
                .zip(b)
                .all(|(x, y)| x.ts_ms == y.ts_ms && x.value.to_bits() == y.value.to_bits())
    }

    #[test]
    fn regular_series_is_small() {
        let s: Vec<Sample> = (0..240)
            .map(|i| Sample {
                ts_ms: 1_700_000_000_000 + i * 15_000,
                value: 1e9 + (i / 10) as f64 * 4096.0,
            })
            .collect();
        let mut e = ChunkEncoder::new(s[0].ts_ms, s[0].value);
        for x in &s[1..] {
            e.append(x.ts_ms, x.value);
        }
        let n = e.encode().len();
        assert!(n < 240, "encoded {n} bytes");
        assert!(same(&roundtrip(&s), &s));
    }

    #[test]
    fn corrupt_input_is_an_error_not_a_panic() {
        assert!(chunk_header(&[]).is_err());
        assert!(chunk_header(&[9]).is_err());
        let mut e = ChunkEncoder::new(10, 1.0);
        e.append(20, 2.0);
        e.append(35, -7.5);
        let bytes = e.encode();
        for cut in 0..bytes.len() {
            let mut out = Vec::new();
            let _ = decode_chunk(&bytes[..cut], 0, i64::MAX, &mut out);
        }
        let mut flipped = bytes.clone();
        for i in 0..flipped.len() {
            flipped[i] ^= 0xa5;
            let mut out = Vec::new();
            let _ = decode_chunk(&flipped, 0, i64::MAX, &mut out);
            flipped[i] ^= 0xa5;
        }
    }

    #[test]
    fn varints() {
        for v in [0u64, 1, 127, 128, 300, u64::MAX] {
            let mut b = Vec::new();
            put_uvarint(&mut b, v);
            let mut p = 0;
            assert_eq!(get_uvarint(&b, &mut p), Some(v));
            assert_eq!(p, b.len());
        }
    }

    fn arb_series() -> impl Strategy<Value = Vec<Sample>> {
        let step = prop_oneof![
            Just(15_000i64),
            14_990i64..15_010,
            1i64..100,
            1i64..(1 << 40),
        ];
        let val = prop_oneof![
            Just(0.0f64),
            any::<f64>().prop_filter("finite", |v| v.is_finite()),
            (0u64..1 << 20).prop_map(|v| (v * 4096) as f64),
            -1e6f64..1e6,
        ];
        (0i64..1 << 42, prop::collection::vec((step, val), 1..300)).prop_map(|(t0, steps)| {
            let mut ts = t0;
            steps
                .into_iter()
                .map(|(d, v)| {
                    ts += d;
                    Sample {
                        ts_ms: ts,
                        value: v,
                    }
                })
                .collect()
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        #[test]
        fn chunk_roundtrip(s in arb_series()) {
            prop_assert!(same(&roundtrip(&s), &s));
        }

        #[test]
        fn chunk_range_filter(s in arb_series(), a in 0usize..300, b in 0usize..300) {
            let (a, b) = (a.min(s.len() - 1), b.min(s.len() - 1));
            let (lo, hi) = (s[a.min(b)].ts_ms, s[a.max(b)].ts_ms);
            let mut e = ChunkEncoder::new(s[0].ts_ms, s[0].value);
            for x in &s[1..] { e.append(x.ts_ms, x.value); }
            let mut out = Vec::new();
            decode_chunk(&e.encode(), lo, hi, &mut out).unwrap();
            let want: Vec<Sample> = s.iter().copied().filter(|x| x.ts_ms >= lo && x.ts_ms <= hi).collect();
            prop_assert!(same(&out, &want));
        }
    }
}
