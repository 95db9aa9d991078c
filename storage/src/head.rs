//! The in-memory head of one series: its open (still growing) chunk.

use crate::Sample;
use crate::chunk::{ChunkEncoder, MAX_CHUNK_SAMPLES, MAX_CHUNK_SPAN_MS};

/// `wal_seq` value meaning "every sample of the open chunk is in a chunk on disk".
pub(crate) const NO_SEQ: u64 = u64::MAX;

/// What appending a sample did.
pub(crate) enum Appended {
    /// Stored in the open chunk.
    Stored,
    /// Stored in a new open chunk; the previous one is returned, sealed.
    Cut(ChunkEncoder),
}

/// Rejection reasons, turned into [`crate::Error`] by the caller (which knows the id).
pub(crate) enum Reject {
    OutOfOrder(i64),
    DuplicateTimestamp,
}

/// Head of one series (72 bytes).
#[derive(Default)]
pub(crate) struct Head {
    /// The open chunk; `None` until the first sample.
    pub(crate) open: Option<ChunkEncoder>,
    /// Lowest write-ahead-log segment holding samples of `open` that are not yet in a
    /// chunk on disk, or [`NO_SEQ`]. Segments below the minimum over all heads can go.
    pub(crate) wal_seq: u64,
}

impl Head {
    pub(crate) fn new() -> Head {
        Head {
            open: None,
            wal_seq: NO_SEQ,
        }
    }

    pub(crate) fn latest(&self) -> Option<Sample> {
        self.open.as_ref().map(|c| c.last_sample())
    }

    /// Validates ordering against the newest sample.
    pub(crate) fn check(&self, ts_ms: i64, value: f64) -> Result<bool, Reject> {
        if let Some(c) = &self.open {
            let last = c.last_sample();
            if ts_ms < last.ts_ms {
                return Err(Reject::OutOfOrder(last.ts_ms));
            }
            if ts_ms == last.ts_ms {
                return if value.to_bits() == last.value.to_bits() {
                    Ok(true)
                } else {
                    Err(Reject::DuplicateTimestamp)
                };
            }
        }
        Ok(false)
    }

    /// Appends a sample that passed [`Head::check`]; `seq` is the log segment it goes to.
    pub(crate) fn append(&mut self, ts_ms: i64, value: f64, seq: u64) -> Appended {
        match &mut self.open {
            Some(c)
                if c.count() < MAX_CHUNK_SAMPLES && ts_ms - c.first_ts() < MAX_CHUNK_SPAN_MS =>
            {
                c.append(ts_ms, value);
                if self.wal_seq == NO_SEQ {
                    self.wal_seq = seq;
                }
                Appended::Stored
            }
            Some(_) => {
                let new = ChunkEncoder::new(ts_ms, value);
                // Invariant: matched Some just above.
                let mut old = self.open.replace(new).expect("open chunk present");
                old.shrink();
                // The sealed chunk is written by the next flush in the same atomic batch
                // that may drop the log segments it came from, so only the new chunk pins.
                self.wal_seq = seq;
                Appended::Cut(old)
            }
            None => {
                self.open = Some(ChunkEncoder::new(ts_ms, value));
                self.wal_seq = seq;
                Appended::Stored
            }
        }
    }
}
