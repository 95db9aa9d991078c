//! The store: series index + heads in memory, chunks/log/rollups in sled.
//!
//! # Write path
//! [`Store::append`] validates the sample, appends it to the series' open chunk (Gorilla
//! encoded in memory) and to an in-memory log buffer. [`Store::flush`] writes, in **one
//! atomic sled batch**, the log buffer as a new log segment, every chunk sealed since the
//! last flush, new series definitions, checkpoints of open chunks that have lived in the
//! log for `wal_checkpoint_flushes` flushes, and deletions of log segments no open chunk
//! needs any more; then it calls `sled::Db::flush` (fsync). So after a crash the store is
//! exactly the state of the last completed flush: chunks on disk plus log segments
//! replayed into the heads at open.
//!
//! # Concurrency
//! `Store` is `Clone + Send + Sync`. Appends take a short mutex; flush and maintenance
//! serialise on a second mutex and hold the first only to copy what they write. All
//! methods are synchronous and some (flush, maintain, open, large queries) do real I/O:
//! async callers should run them in `tokio::task::spawn_blocking`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use crate::checksum::{self, META, TSDB, seal, unseal};
use crate::chunk::{ChunkEncoder, MAX_CHUNK_SPAN_MS, chunk_header, decode_chunk};
use crate::config::{StoreConfig, ms};
use crate::error::{Error, Result};
use crate::head::{Appended, Head, NO_SEQ, Reject};
use crate::index::Index;
use crate::keys::*;
use crate::labels::{CompiledMatcher, Labels, Matcher, validate_metric_name};
use crate::lock;
use crate::manifest::FORMAT_VERSION;
use crate::rollup::{
    ROLLUP_BLOCK_MS, Rollup, block_start, bucket_start, decode_block, encode_block, merge_rollups,
    rollup_samples,
};
use crate::{MAX_TIMESTAMP_MS, Sample, SeriesId, SeriesInfo};

const FORMAT_KEY: &[u8] = b"format_version";

/// Whether [`Store::open_with`] may create a store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpenMode {
    /// A directory that does not exist, or is empty, becomes a new store (its `HEADROOM`
    /// marker is written first). A non-empty directory without the marker is refused.
    CreateIfMissing,
    /// Only an existing store is opened: a missing or empty directory is
    /// [`Error::NoStore`], and nothing is created (for commands that only read, such as
    /// `headroom series` and `headroom place --data-dir`).
    MustExist,
}

/// What one [`Store::flush`] wrote.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FlushStats {
    /// Sequence number of the flush (and of its log segment).
    pub seq: u64,
    /// Samples in the log segment written.
    pub samples: u64,
    /// Bytes of the log segment written (0 if it was not needed).
    pub wal_bytes: u64,
    /// New series definitions written.
    pub series_written: u64,
    /// Sealed chunks written.
    pub chunks_sealed: u64,
    /// Open chunks checkpointed.
    pub chunks_checkpointed: u64,
    /// Log segments deleted.
    pub segments_deleted: u64,
    /// Wall time spent.
    pub duration: Duration,
}

/// What one [`Store::maintain`] pass did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MaintenanceStats {
    /// Raw chunks expired (folded into rollups and deleted).
    pub chunks_expired: u64,
    /// Raw samples folded into rollups.
    pub samples_rolled_up: u64,
    /// Rollup blocks written.
    pub rollup_blocks_written: u64,
    /// Rollup blocks deleted (past rollup retention).
    pub rollup_blocks_deleted: u64,
    /// Decision records deleted (past the age limit).
    pub decisions_expired: u64,
    /// Series removed: nothing of them left after retention (see `Store::maintain`).
    pub series_deleted: u64,
    /// Builders whose run records and placement histories were dropped (nothing recorded
    /// for `builder_max_age`).
    pub builders_expired: crate::runs::BuildersExpired,
    /// The compaction this pass ran, if the store was due one ([`Store::compaction_due`]).
    pub compaction: Option<Compaction>,
}

/// What one [`Store::compact`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Compaction {
    /// Size on disk before, bytes (as sled reports it).
    pub before_bytes: u64,
    /// Size on disk of the new database, bytes.
    pub after_bytes: u64,
    /// Keys and values copied, bytes.
    pub live_bytes: u64,
    /// The subdirectory now holding sled's files.
    pub directory: String,
    /// Whether the old database's files are gone already (else the next open removes
    /// them: a reader still held it).
    pub old_removed: bool,
    /// Wall time, copy and swap.
    pub duration: Duration,
}

/// Point-in-time statistics (for `/metrics`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// Number of series.
    pub series: u64,
    /// Samples held in open chunks.
    pub head_samples: u64,
    /// Bytes of open-chunk buffers.
    pub head_chunk_bytes: u64,
    /// Approximate heap bytes of the series index.
    pub index_bytes: u64,
    /// Sealed chunks waiting for the next flush.
    pub pending_chunks: u64,
    /// Bytes of the log buffer waiting for the next flush.
    pub pending_wal_bytes: u64,
    /// Completed flushes since open.
    pub flushes: u64,
    /// Size of the sled directory as sled reports it.
    pub disk_bytes: u64,
    /// Compactions in place since open ([`Store::compact`]).
    pub compactions: u64,
}

pub(crate) struct State {
    pub(crate) index: Index,
    pub(crate) heads: Vec<Head>,
    /// Log records appended since the last flush.
    wal: Vec<u8>,
    wal_samples: u64,
    /// Chunks cut since the last completed flush, by (id, first ts).
    sealed: BTreeMap<(u64, i64), Box<[u8]>>,
    /// Series created since the last completed flush (definitions to write).
    new_series: Vec<u64>,
    /// Sequence number the next flush will use.
    next_seq: u64,
    /// Samples older than this are rejected (raw data there has been rolled up).
    raw_cutoff: i64,
}

/// The sled database and the store's trees in it. Compaction ([`Store::compact`]) writes a
/// fresh database and swaps this whole value, so every operation takes it once
/// ([`Inner::db`]) and works on one database from start to end.
pub(crate) struct Db {
    pub(crate) db: sled::Db,
    pub(crate) tsdb: sled::Tree,
    pub(crate) runs: sled::Tree,
    pub(crate) placements: sled::Tree,
    pub(crate) decisions: sled::Tree,
    /// The subdirectory of the store directory holding sled's files (`sled-<n>`, written
    /// by compaction), or `None` for the store directory itself.
    pub(crate) subdir: Option<String>,
}

impl Db {
    pub(crate) fn new(db: sled::Db, subdir: Option<String>) -> Result<Db> {
        Ok(Db {
            tsdb: db.open_tree(TSDB)?,
            runs: db.open_tree(checksum::RUNS)?,
            placements: db.open_tree(checksum::PLACEMENTS)?,
            decisions: db.open_tree(checksum::DECISIONS)?,
            db,
            subdir,
        })
    }
}

pub(crate) struct Inner {
    /// Read for every operation (a pointer copy), written only by compaction's swap.
    db: RwLock<Arc<Db>>,
    pub(crate) config: StoreConfig,
    pub(crate) state: Mutex<State>,
    /// Serialises flush, maintenance and compaction (all write the tsdb tree). Taken
    /// before `record_lock` when both are.
    pub(crate) flush_lock: Mutex<()>,
    /// Serialises read-modify-write of runs, placements and decisions.
    pub(crate) record_lock: Mutex<()>,
    pub(crate) decision_count: AtomicUsize,
    /// The sequence number of the next decision record (see `decisions::count`).
    pub(crate) decision_seq: AtomicU64,
    flushes: AtomicU64,
    /// Compactions in place since open.
    pub(crate) compactions: AtomicU64,
    path: Option<PathBuf>,
    /// The size compaction measures growth from: right after the last compaction, or
    /// the live data counted by the first check; `u64::MAX` until then. See
    /// [`Store::compaction_due`].
    pub(crate) compaction_base: AtomicU64,
}

impl Inner {
    /// The current database.
    pub(crate) fn db(&self) -> Arc<Db> {
        self.db.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Replaces the database (compaction); returns the old one.
    pub(crate) fn swap_db(&self, new: Db) -> Arc<Db> {
        let mut w = self.db.write().unwrap_or_else(|p| p.into_inner());
        std::mem::replace(&mut *w, Arc::new(new))
    }
}

/// headroom's embedded time-series and record store. Cheap to clone (an `Arc` inside).
#[derive(Clone)]
pub struct Store {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("path", &self.inner.path)
            .finish_non_exhaustive()
    }
}

fn check_sample(ts_ms: i64, value: f64) -> Result<()> {
    if !value.is_finite() {
        return Err(Error::InvalidValue { ts_ms, value });
    }
    if !(0..=MAX_TIMESTAMP_MS).contains(&ts_ms) {
        return Err(Error::TimestampOutOfRange(ts_ms));
    }
    Ok(())
}

/// The period of sled's own background thread (its log roll, fsync and segment cleaning):
/// the store's flush interval, within 1 s and 60 s.
fn sled_flush_ms(config: &StoreConfig) -> u64 {
    (config.flush_interval.as_millis() as u64).clamp(1000, 60_000)
}

/// Opens sled on a store directory. sled releases its directory lock only when the last
/// handle of a previous `Store` (possibly still being dropped on another thread) goes away,
/// so a reopen in the same process can race it: retry briefly before reporting the lock
/// as held.
pub(crate) fn open_sled(path: &Path, config: &StoreConfig) -> Result<sled::Db> {
    let mut attempt = 0u32;
    loop {
        match sled::Config::new()
            .path(path)
            .cache_capacity(config.cache_capacity_bytes)
            // Durability is our explicit `flush` (one fsync'd batch), but sled's periodic
            // thread is also the only one that reclaims the space of overwritten and
            // deleted values (its segment cleaner): without it a store under churn grows
            // by every value ever written (kit-soak.py: 8 MB a minute at 1,000 nodes). It
            // runs at the flush interval, so it adds no fsync our own flushes do not.
            .flush_every_ms(Some(sled_flush_ms(config)))
            .open()
        {
            Ok(db) => return Ok(db),
            Err(sled::Error::Io(e)) if e.to_string().contains("could not acquire lock") => {
                if attempt >= 50 {
                    return Err(Error::Locked {
                        path: path.to_path_buf(),
                    });
                }
                attempt += 1;
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(sled::Error::Io(source)) => {
                return Err(Error::Open {
                    path: path.to_path_buf(),
                    source: sled::Error::Io(source),
                });
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Names damage found while opening as damage of the store at `path`.
fn open_error(path: &Path, e: Error) -> Error {
    let detail = match e {
        Error::CorruptValue { what, detail } => format!("{what}: {detail}"),
        Error::Sled(e @ (sled::Error::Unsupported(_) | sled::Error::ReportableBug(_))) => {
            format!("sled could not recover its database: {e}")
        }
        other => return other,
    };
    Error::Corrupt {
        path: path.to_path_buf(),
        detail,
    }
}

impl Store {
    /// Opens the store in `dir`, creating it if `dir` does not exist or is empty
    /// ([`OpenMode::CreateIfMissing`]); see [`Store::open_with`].
    pub fn open(dir: impl AsRef<Path>, config: StoreConfig) -> Result<Store> {
        Self::open_with(dir, config, OpenMode::CreateIfMissing)
    }

    /// Opens the existing store in `dir`, never creating one ([`OpenMode::MustExist`]).
    pub fn open_existing(dir: impl AsRef<Path>, config: StoreConfig) -> Result<Store> {
        Self::open_with(dir, config, OpenMode::MustExist)
    }

    /// Opens a store in `dir`.
    ///
    /// In order: the configuration is validated ([`Error::InvalidConfig`]); the directory
    /// must be a store (its `HEADROOM` marker; [`Error::NotAStore`] otherwise, and such a
    /// directory is never written to), of this format ([`Error::IncompatibleVersion`]), or
    /// absent/empty when `mode` allows creating one ([`Error::NoStore`] otherwise); sled's
    /// files are checked where sled itself does not check them (its `conf` checksum, a
    /// missing or empty `db`); then sled opens and recovers the database — a panic inside
    /// sled is caught and reported — and the store checks that sled recovered every flush
    /// the marker records as completed. All damage is [`Error::Corrupt`]; a lock held by
    /// another process is [`Error::Locked`].
    ///
    /// Recovery replays the log segments of the last completed flushes; it takes time
    /// proportional to the number of series plus the log length.
    pub fn open_with(dir: impl AsRef<Path>, config: StoreConfig, mode: OpenMode) -> Result<Store> {
        config.validate()?;
        let path = dir.as_ref().to_path_buf();
        let marker = crate::manifest::prepare(&path, mode)?;
        let opened = crate::guard::catch_panic(|| {
            let db = open_sled(&marker.sled_dir(&path), &config)?;
            if marker.flushes > 0 {
                // sled's lock is ours: no other process uses the database the marker
                // named. If another one compacted the store between the marker's read and
                // the lock, the marker names another now, and that one is in use.
                let current = crate::manifest::read(&path)?.unwrap_or_default();
                if current.sled != marker.sled {
                    return Err(Error::Locked { path: path.clone() });
                }
                // Only now is what an interrupted compaction left surely nobody's.
                crate::manifest::remove_stale(&path, &marker);
            }
            let db = Db::new(db, marker.sled.clone())?;
            Self::from_db(db, config, Some(path.clone()), Some(marker.flushes))
        });
        match opened {
            Ok(Ok(store)) => Ok(store),
            Ok(Err(e)) => Err(open_error(&path, e)),
            Err(panic) => Err(Error::Corrupt {
                path,
                detail: format!("sled could not recover its database (it panicked: {panic})"),
            }),
        }
    }

    /// Opens a store in a fresh temporary directory that is removed when the last clone
    /// is dropped (for the simulator and tests). No marker, no flush counter.
    pub fn open_temporary(config: StoreConfig) -> Result<Store> {
        config.validate()?;
        let db = sled::Config::new()
            .temporary(true)
            .cache_capacity(config.cache_capacity_bytes)
            .flush_every_ms(None)
            .open()?;
        Self::from_db(Db::new(db, None)?, config, None, None)
    }

    /// `flushes`: the flushes the marker records (`None` for a temporary store); 0 means
    /// the store is being created.
    fn from_db(
        db: Db,
        config: StoreConfig,
        path: Option<PathBuf>,
        flushes: Option<u64>,
    ) -> Result<Store> {
        let meta = db.db.open_tree(META)?;
        let recorded = flushes.unwrap_or(0);
        let created = match meta.get(FORMAT_KEY)? {
            Some(v) => {
                let v = unseal(META, FORMAT_KEY, &v)?;
                let found = <[u8; 4]>::try_from(v)
                    .map(u32::from_be_bytes)
                    .map_err(|_| Error::corrupt("format version", "not 4 bytes"))?;
                if found != FORMAT_VERSION {
                    return Err(Error::IncompatibleVersion {
                        path: path.clone().unwrap_or_default(),
                        found,
                        expected: FORMAT_VERSION,
                    });
                }
                false
            }
            None if recorded > 0 => {
                return Err(Error::corrupt(
                    "database",
                    format!(
                        "it holds no store (no format version), but {recorded} flushes completed: \
                         the db file was truncated, replaced or damaged"
                    ),
                ));
            }
            None => {
                meta.insert(
                    FORMAT_KEY,
                    seal(META, FORMAT_KEY, &FORMAT_VERSION.to_be_bytes()),
                )?;
                true
            }
        };
        let (decision_count, decision_seq) = crate::decisions::count(&db.decisions)?;
        let (state, last_flush) = recover(&db.tsdb)?;
        if last_flush < recorded {
            return Err(Error::corrupt(
                "database",
                format!(
                    "sled recovered it only up to flush {last_flush}, but flush {recorded} completed \
                     ({} says so): the db file was truncated or damaged, and sled dropped the log \
                     after the damaged part",
                    crate::manifest::MARKER_FILE
                ),
            ));
        }
        let store = Store {
            inner: Arc::new(Inner {
                db: RwLock::new(Arc::new(db)),
                decision_count: AtomicUsize::new(decision_count),
                decision_seq: AtomicU64::new(decision_seq),
                compaction_base: AtomicU64::new(u64::MAX),
                config,
                state: Mutex::new(state),
                flush_lock: Mutex::new(()),
                record_lock: Mutex::new(()),
                flushes: AtomicU64::new(0),
                compactions: AtomicU64::new(0),
                path,
            }),
        };
        let _ = created;
        if flushes == Some(0) {
            // Creation completes with the first flush: from then on the marker says 1+.
            store.flush()?;
        }
        Ok(store)
    }

    /// Adds the series' name to a [`Error::CorruptValue`] about one of its values.
    fn name_series(&self, id: u64, e: Error) -> Error {
        match e {
            Error::CorruptValue { what, detail } => {
                let name = u32::try_from(id)
                    .ok()
                    .and_then(|i| lock(&self.inner.state).index.resolve(i))
                    .map(|(m, l)| format!(" ({m}{l})"))
                    .unwrap_or_default();
                Error::CorruptValue {
                    what: format!("{what}{name}"),
                    detail,
                }
            }
            other => other,
        }
    }

    /// The configuration the store was opened with.
    pub fn config(&self) -> &StoreConfig {
        &self.inner.config
    }

    /// Directory of the store (`None` for a temporary store).
    pub fn path(&self) -> Option<&Path> {
        self.inner.path.as_deref()
    }

    /// Id of the series `metric{labels}`, creating it if needed.
    ///
    /// A new series is durable with the next flush. Errors: invalid metric name,
    /// [`Error::TooManySeries`].
    pub fn series_id(&self, metric: &str, labels: &Labels) -> Result<SeriesId> {
        let mut st = lock(&self.inner.state);
        self.series_id_locked(&mut st, metric, labels)
    }

    fn series_id_locked(&self, st: &mut State, metric: &str, labels: &Labels) -> Result<SeriesId> {
        if let Some(slot) = st.index.get(metric, labels) {
            return Ok(SeriesId(st.index.public_id(slot)));
        }
        validate_metric_name(metric)?;
        if st.index.len() >= self.inner.config.max_series {
            return Err(Error::TooManySeries(st.index.len()));
        }
        let slot = st.index.next_id();
        st.index.insert(slot, metric, labels);
        match st.heads.get_mut(slot as usize) {
            Some(h) => *h = Head::new(),
            None => st.heads.push(Head::new()),
        }
        st.new_series.push(u64::from(slot));
        Ok(SeriesId(st.index.public_id(slot)))
    }

    /// The slot (the key on disk) of a series that still exists.
    fn slot(&self, id: SeriesId) -> Result<u64> {
        lock(&self.inner.state)
            .index
            .slot_of(id.0)
            .map(u64::from)
            .ok_or(Error::UnknownSeries(id.0))
    }

    /// Appends a sample to `metric{labels}` (creating the series), returning its id.
    ///
    /// Bad input has defined behaviour, and a rejected sample leaves the store unchanged:
    /// - NaN or ±∞ → [`Error::InvalidValue`];
    /// - timestamp outside `0..=MAX_TIMESTAMP_MS` → [`Error::TimestampOutOfRange`];
    /// - older than the series' newest sample → [`Error::OutOfOrder`];
    /// - same timestamp as the newest sample: ignored if the value is bit-identical (a
    ///   re-scrape), else [`Error::DuplicateTimestamp`];
    /// - older than the raw-retention cutoff of the last maintenance pass →
    ///   [`Error::TooOld`].
    pub fn append(
        &self,
        metric: &str,
        labels: &Labels,
        ts_ms: i64,
        value: f64,
    ) -> Result<SeriesId> {
        check_sample(ts_ms, value)?;
        let mut st = lock(&self.inner.state);
        let id = self.series_id_locked(&mut st, metric, labels)?;
        let slot = st.index.slot_of(id.0).ok_or(Error::UnknownSeries(id.0))?;
        append_locked(&mut st, u64::from(slot), ts_ms, value, true)?;
        Ok(id)
    }

    /// Appends a sample to a known series (the fast path). Same rules as [`Store::append`];
    /// an unknown id is [`Error::UnknownSeries`].
    pub fn append_id(&self, id: SeriesId, ts_ms: i64, value: f64) -> Result<()> {
        check_sample(ts_ms, value)?;
        let mut st = lock(&self.inner.state);
        let slot = st.index.slot_of(id.0).ok_or(Error::UnknownSeries(id.0))?;
        append_locked(&mut st, u64::from(slot), ts_ms, value, true)
    }

    /// Appends many samples to known series under one lock; stops at the first error
    /// (earlier samples stay appended).
    pub fn append_many(&self, samples: &[(SeriesId, i64, f64)]) -> Result<()> {
        let mut st = lock(&self.inner.state);
        for &(id, ts, v) in samples {
            check_sample(ts, v)?;
            let slot = st.index.slot_of(id.0).ok_or(Error::UnknownSeries(id.0))?;
            append_locked(&mut st, u64::from(slot), ts, v, true)?;
        }
        Ok(())
    }

    /// Makes everything appended so far durable (see the module docs). Blocking I/O.
    pub fn flush(&self) -> Result<FlushStats> {
        let _f = lock(&self.inner.flush_lock);
        self.flush_locked(Checkpoint::Due)
    }

    /// Like [`Store::flush`], but also checkpoints every open chunk so the whole log can
    /// be deleted: the on-disk size is then chunks only (used before measuring size and
    /// at shutdown, to make the next open fast).
    pub fn checkpoint(&self) -> Result<FlushStats> {
        let _f = lock(&self.inner.flush_lock);
        self.flush_locked(Checkpoint::All)
    }

    pub(crate) fn flush_locked(&self, mode: Checkpoint) -> Result<FlushStats> {
        let started = Instant::now();
        let mut stats = FlushStats::default();
        let mut batch = sled::Batch::default();
        let k = self.inner.config.wal_checkpoint_flushes.max(1);
        let (seq, wal, sealed_keys, n_new, snapshots, min_live);
        {
            let mut st = lock(&self.inner.state);
            seq = st.next_seq;
            st.next_seq += 1;
            wal = std::mem::take(&mut st.wal);
            stats.samples = std::mem::take(&mut st.wal_samples);
            n_new = st.new_series.len();
            for &id in &st.new_series {
                if let Some((m, l)) = st.index.resolve(id as u32) {
                    let key = series_key(id);
                    batch.insert(&key, seal(TSDB, &key, &encode_series_def(&m, &l)));
                }
            }
            sealed_keys = st.sealed.keys().copied().collect::<Vec<_>>();
            for ((id, t0), bytes) in &st.sealed {
                let key = chunk_key(*id, *t0);
                batch.insert(&key, seal(TSDB, &key, bytes));
            }
            let mut snaps = Vec::new();
            let mut live = u64::MAX;
            for (id, head) in st.heads.iter().enumerate() {
                let (Some(enc), true) = (&head.open, head.wal_seq != NO_SEQ) else {
                    continue;
                };
                let due = match mode {
                    Checkpoint::Due => false,
                    Checkpoint::All => true,
                    Checkpoint::Before(cutoff) => enc.first_ts() < cutoff,
                };
                if due || head.wal_seq.saturating_add(k) <= seq {
                    let key = chunk_key(id as u64, enc.first_ts());
                    batch.insert(&key, seal(TSDB, &key, &enc.encode()));
                    snaps.push((id, enc.first_ts(), enc.count()));
                } else {
                    live = live.min(head.wal_seq);
                }
            }
            snapshots = snaps;
            min_live = live;
        }
        stats.series_written = n_new as u64;
        stats.chunks_sealed = sealed_keys.len() as u64;
        stats.chunks_checkpointed = snapshots.len() as u64;
        if wal.len() > 1 && min_live <= seq {
            stats.wal_bytes = wal.len() as u64;
            let key = wal_key(seq);
            batch.insert(&key, seal(TSDB, &key, &wal));
        }
        // The flush counter: the marker records it once the batch is durable, and an open
        // that finds sled behind the marker knows sled lost acknowledged data.
        batch.insert(
            LAST_FLUSH_KEY,
            seal(TSDB, LAST_FLUSH_KEY, &seq.to_be_bytes()),
        );
        let db = self.inner.db();
        let result = (|| -> Result<()> {
            for kv in db.tsdb.range(wal_key(0)..wal_key(min_live.min(seq + 1))) {
                let (key, _) = kv?;
                batch.remove(key);
                stats.segments_deleted += 1;
            }
            db.tsdb.apply_batch(batch)?;
            db.db.flush()?;
            Ok(())
        })();
        let mut st = lock(&self.inner.state);
        if let Err(e) = result {
            // Put the log records back in front of those appended meanwhile; sealed chunks
            // and new series were only copied, so they are still pending.
            if !wal.is_empty() {
                let mut old = wal;
                if st.wal.len() > 1 {
                    old.extend_from_slice(&st.wal[1..]);
                }
                st.wal = old;
                st.wal_samples += stats.samples;
            }
            return Err(e);
        }
        for key in sealed_keys {
            st.sealed.remove(&key);
        }
        st.new_series.drain(..n_new);
        for (id, t0, count) in snapshots {
            let head = &mut st.heads[id];
            if let Some(enc) = &head.open
                && enc.first_ts() == t0
            {
                // Samples appended after the copy went to the next segment.
                head.wal_seq = if enc.count() == count {
                    NO_SEQ
                } else {
                    seq + 1
                };
            }
        }
        drop(st);
        self.inner.flushes.fetch_add(1, Ordering::Relaxed);
        stats.seq = seq;
        if let Some(dir) = &self.inner.path {
            // The data is durable whether or not this succeeds; a marker left behind only
            // weakens the check at the next open, and the next flush rewrites it.
            crate::manifest::write(dir, seq, db.subdir.as_deref())?;
        }
        stats.duration = started.elapsed();
        Ok(stats)
    }

    /// Series matching all `matchers` (all series if empty), ordered by id.
    pub fn select(&self, matchers: &[Matcher]) -> Result<Vec<SeriesInfo>> {
        self.select_where(matchers, |_| true)
    }

    /// Series matching all `matchers` whose newest raw sample is at or after `since_ms`,
    /// ordered by id. The age test comes before the labels are resolved, so series that
    /// stopped long ago (a finished pod's containers, kept until retention) cost one
    /// comparison each: the per-pod usage of every refresh reads only the live ones.
    pub fn select_active(&self, matchers: &[Matcher], since_ms: i64) -> Result<Vec<SeriesInfo>> {
        self.select_where(matchers, |last| last.is_some_and(|s| s.ts_ms >= since_ms))
    }

    /// Series matching all `matchers` whose newest raw sample passes `keep`, which is
    /// asked before the labels are resolved.
    fn select_where(
        &self,
        matchers: &[Matcher],
        keep: impl Fn(Option<Sample>) -> bool,
    ) -> Result<Vec<SeriesInfo>> {
        let compiled = matchers
            .iter()
            .map(CompiledMatcher::compile)
            .collect::<Result<Vec<_>>>()?;
        let st = lock(&self.inner.state);
        let ids = st.index.select(&compiled);
        Ok(ids
            .into_iter()
            .filter_map(|slot| {
                let last = st.heads.get(slot as usize).and_then(Head::latest);
                if !keep(last) {
                    return None;
                }
                let (metric, labels) = st.index.resolve(slot)?;
                Some(SeriesInfo {
                    id: SeriesId(st.index.public_id(slot)),
                    metric,
                    labels,
                    last,
                })
            })
            .collect())
    }

    /// Metric and labels of a series.
    pub fn series_info(&self, id: SeriesId) -> Result<SeriesInfo> {
        let st = lock(&self.inner.state);
        let slot = st.index.slot_of(id.0).ok_or(Error::UnknownSeries(id.0))?;
        let (metric, labels) = st.index.resolve(slot).ok_or(Error::UnknownSeries(id.0))?;
        Ok(SeriesInfo {
            id,
            metric,
            labels,
            last: st.heads.get(slot as usize).and_then(Head::latest),
        })
    }

    /// Samples of one series with `start_ms <= ts <= end_ms`, in time order.
    ///
    /// Raw samples where they are kept; where raw data has expired (older than
    /// `raw_retention` at the last maintenance pass) each stored 5-minute rollup appears
    /// as **one sample stamped at the bucket start with the bucket's average**.
    pub fn query_range(&self, id: SeriesId, start_ms: i64, end_ms: i64) -> Result<Vec<Sample>> {
        let mut out = Vec::new();
        self.query_into(id, start_ms, end_ms, &mut out)?;
        Ok(out)
    }

    fn query_into(
        &self,
        id: SeriesId,
        start_ms: i64,
        end_ms: i64,
        out: &mut Vec<Sample>,
    ) -> Result<()> {
        let start = start_ms.max(0);
        let end = end_ms.min(MAX_TIMESTAMP_MS);
        if start > end {
            return Ok(());
        }
        // Stored rollups first: they only exist for data older than any raw chunk.
        for r in self.stored_rollups(id, start, end)? {
            if r.start_ms >= start {
                out.push(Sample {
                    ts_ms: r.start_ms,
                    value: r.avg(),
                });
            }
        }
        let slot = self.slot(id)?;
        for bytes in self.raw_chunks(id, start, end)? {
            decode_chunk(&bytes, start, end, out).map_err(|e| self.name_series(slot, e))?;
        }
        Ok(())
    }

    /// First timestamp and encoded size of each raw chunk of a series (diagnostics and the
    /// footprint bench).
    pub fn raw_chunk_sizes(&self, id: SeriesId) -> Result<Vec<(i64, usize)>> {
        Ok(self
            .raw_chunks(id, 0, MAX_TIMESTAMP_MS)?
            .iter()
            .map(|c| {
                let t0 = chunk_header(c).map(|(h, _)| h.first_ts).unwrap_or(0);
                (t0, c.len())
            })
            .collect())
    }

    /// Encoded chunks of a series that may hold samples in `[start, end]`, time ordered.
    /// In-memory versions (open chunk, chunks awaiting flush) supersede on-disk versions
    /// with the same first timestamp (an on-disk checkpoint is a prefix of them).
    fn raw_chunks(&self, id: SeriesId, start: i64, end: i64) -> Result<Vec<ChunkBytes>> {
        let mut mem: Vec<(i64, Vec<u8>)> = Vec::new();
        let slot = {
            let st = lock(&self.inner.state);
            let slot = st.index.slot_of(id.0).ok_or(Error::UnknownSeries(id.0))?;
            let slot = u64::from(slot);
            let head = st
                .heads
                .get(slot as usize)
                .ok_or(Error::UnknownSeries(id.0))?;
            for ((_, t0), b) in st.sealed.range((slot, 0)..=(slot, end)) {
                mem.push((*t0, b.to_vec()));
            }
            if let Some(enc) = &head.open
                && enc.first_ts() <= end
                && enc.last_ts() >= start
            {
                mem.push((enc.first_ts(), enc.encode()));
            }
            slot
        };
        let lo = start.saturating_sub(MAX_CHUNK_SPAN_MS).max(0);
        let mut chunks: BTreeMap<i64, ChunkBytes> = BTreeMap::new();
        for kv in self
            .inner
            .db()
            .tsdb
            .range(chunk_key(slot, lo)..=chunk_key(slot, end))
        {
            let (k, v) = kv?;
            let (_, t0) = parse_id_ts_key(&k)?;
            let len = unseal(TSDB, &k, &v)
                .map_err(|e| self.name_series(slot, e))?
                .len();
            chunks.insert(t0, ChunkBytes::Disk(v, len));
        }
        for (t0, b) in mem {
            chunks.insert(t0, ChunkBytes::Mem(b));
        }
        Ok(chunks.into_values().collect())
    }

    /// Matching series with their samples in `[start_ms, end_ms]` (see [`Store::query_range`]).
    pub fn query(
        &self,
        matchers: &[Matcher],
        start_ms: i64,
        end_ms: i64,
    ) -> Result<Vec<(SeriesInfo, Vec<Sample>)>> {
        let mut out = Vec::new();
        self.for_each_series(matchers, start_ms, end_ms, |info, samples| {
            out.push((info.clone(), samples.to_vec()));
            Ok(())
        })?;
        Ok(out)
    }

    /// Calls `f` once per matching series, in id order (which is on-disk order, so the
    /// scan reads the tree contiguously), with that series' samples in `[start_ms, end_ms]`.
    /// An error from `f` stops the scan and is returned.
    pub fn for_each_series(
        &self,
        matchers: &[Matcher],
        start_ms: i64,
        end_ms: i64,
        mut f: impl FnMut(&SeriesInfo, &[Sample]) -> Result<()>,
    ) -> Result<()> {
        let mut buf = Vec::new();
        for info in self.select(matchers)? {
            buf.clear();
            self.query_into(info.id, start_ms, end_ms, &mut buf)?;
            f(&info, &buf)?;
        }
        Ok(())
    }

    /// [`Store::for_each_series`] over the series [`Store::select_active`] keeps: those
    /// whose newest raw sample is at or after `since_ms`. A series that stopped long ago
    /// (a finished pod's containers, kept until retention) costs one comparison.
    pub fn for_each_active_series(
        &self,
        matchers: &[Matcher],
        since_ms: i64,
        start_ms: i64,
        end_ms: i64,
        mut f: impl FnMut(&SeriesInfo, &[Sample]) -> Result<()>,
    ) -> Result<()> {
        let mut buf = Vec::new();
        for info in self.select_active(matchers, since_ms)? {
            buf.clear();
            self.query_into(info.id, start_ms, end_ms, &mut buf)?;
            f(&info, &buf)?;
        }
        Ok(())
    }

    /// Newest raw sample of a series (`None` if it has none, e.g. all expired).
    pub fn latest(&self, id: SeriesId) -> Result<Option<Sample>> {
        let st = lock(&self.inner.state);
        st.index
            .slot_of(id.0)
            .and_then(|i| st.heads.get(i as usize))
            .map(Head::latest)
            .ok_or(Error::UnknownSeries(id.0))
    }

    fn stored_rollups(&self, id: SeriesId, start: i64, end: i64) -> Result<Vec<Rollup>> {
        let mut out = Vec::new();
        let lo = block_start(bucket_start(start));
        let slot = self.slot(id)?;
        for kv in self
            .inner
            .db()
            .tsdb
            .range(rollup_key(slot, lo)..=rollup_key(slot, end))
        {
            let (k, v) = kv?;
            let (_, day) = parse_id_ts_key(&k)?;
            let v = unseal(TSDB, &k, &v).map_err(|e| self.name_series(slot, e))?;
            out.extend(
                decode_block(day, v)?
                    .into_iter()
                    .filter(|r| r.start_ms >= bucket_start(start) && r.start_ms <= end),
            );
        }
        Ok(out)
    }

    /// 5-minute rollups of a series for buckets starting in
    /// `[bucket_start(start_ms), end_ms]`, each aggregating all of its samples: stored
    /// rollups where raw data expired, computed from raw samples elsewhere.
    pub fn rollups(&self, id: SeriesId, start_ms: i64, end_ms: i64) -> Result<Vec<Rollup>> {
        let start = bucket_start(start_ms.max(0));
        let end = end_ms.min(MAX_TIMESTAMP_MS);
        if start > end {
            return Ok(Vec::new());
        }
        let stored = self.stored_rollups(id, start, end)?;
        let mut raw = Vec::new();
        let raw_end = (bucket_start(end) + crate::rollup::ROLLUP_STEP_MS - 1).min(MAX_TIMESTAMP_MS);
        for bytes in self.raw_chunks(id, start, raw_end)? {
            decode_chunk(&bytes, start, raw_end, &mut raw)?;
        }
        Ok(merge_rollups(stored, rollup_samples(&raw)))
    }

    /// One retention + downsampling pass at time `now_ms`. It first raises the raw cutoff
    /// and flushes (so it also makes all appended samples durable); then raw chunks entirely older than
    /// `now − raw_retention` are folded into 5-minute rollups and deleted (atomically per
    /// series), rollup blocks older than `now − rollup_retention` are deleted, series with
    /// nothing left are removed (their ids then name nothing: [`Error::UnknownSeries`]),
    /// decision records older than `decision_log_max_age` are dropped, and so are the
    /// builders nothing was recorded for in `builder_max_age`
    /// ([`Store::expire_builders`]). Last, if the store has grown to `compaction_ratio`
    /// times its live data, it is compacted in place ([`Store::compact`]). Blocking I/O.
    ///
    /// Afterwards samples older than the raw cutoff are rejected by `append`
    /// ([`Error::TooOld`]), so a rolled-up bucket never receives raw samples again.
    pub fn maintain(&self, now_ms: i64) -> Result<MaintenanceStats> {
        let mut stats = self.retention_pass(now_ms)?;
        if self.compaction_due()? {
            stats.compaction = Some(self.compact()?);
        }
        Ok(stats)
    }

    fn retention_pass(&self, now_ms: i64) -> Result<MaintenanceStats> {
        let _f = lock(&self.inner.flush_lock);
        let mut stats = MaintenanceStats::default();
        let raw_cutoff = now_ms
            .saturating_sub(ms(self.inner.config.raw_retention))
            .clamp(0, MAX_TIMESTAMP_MS);
        let rollup_cutoff = now_ms
            .saturating_sub(ms(self.inner.config.rollup_retention))
            .clamp(0, MAX_TIMESTAMP_MS);
        // Raise the cutoff first so no sample older than it is accepted from now on.
        let cutoff_changed = {
            let mut st = lock(&self.inner.state);
            if raw_cutoff > st.raw_cutoff {
                st.raw_cutoff = raw_cutoff;
                true
            } else {
                false
            }
        };
        if cutoff_changed {
            self.inner.db().tsdb.insert(
                RAW_CUTOFF_KEY,
                seal(TSDB, RAW_CUTOFF_KEY, &raw_cutoff.to_be_bytes()),
            )?;
        }
        let raw_cutoff = lock(&self.inner.state).raw_cutoff;
        // Make every sample older than the cutoff durable in a chunk (not only in the
        // log): recovery skips log records older than the cutoff, because those of
        // rolled-up chunks must not come back. No such sample can arrive any more.
        self.flush_locked(Checkpoint::Before(raw_cutoff))?;
        let n = lock(&self.inner.state).heads.len();
        for id in 0..n as u64 {
            self.maintain_series(id, raw_cutoff, rollup_cutoff, &mut stats)?;
        }
        stats.decisions_expired = self.expire_decisions(now_ms)?;
        stats.builders_expired = self.expire_builders(now_ms)?;
        // A last flush makes the pass durable and counts it in the marker.
        self.flush_locked(Checkpoint::Due)?;
        Ok(stats)
    }

    fn maintain_series(
        &self,
        id: u64,
        raw_cutoff: i64,
        rollup_cutoff: i64,
        stats: &mut MaintenanceStats,
    ) -> Result<()> {
        let db = self.inner.db();
        let tsdb = &db.tsdb;
        // What the head holds in memory is not expired here, except a fully checkpointed
        // open chunk that is itself older than the cutoff (a series that went quiet).
        let (open_t0, stale_open) = {
            let st = lock(&self.inner.state);
            let head = &st.heads[id as usize];
            let open_t0 = head.open.as_ref().map(ChunkEncoder::first_ts);
            let stale = head
                .open
                .as_ref()
                .is_some_and(|c| c.last_ts() < raw_cutoff && head.wal_seq == NO_SEQ)
                && !st.sealed.range((id, 0)..=(id, i64::MAX)).any(|_| true);
            (open_t0, stale)
        };
        let mut expired_keys = Vec::new();
        let mut samples = Vec::new();
        if raw_cutoff > 0 {
            for kv in tsdb.range(chunk_key(id, 0)..chunk_key(id, raw_cutoff)) {
                let (k, v) = kv?;
                let (_, t0) = parse_id_ts_key(&k)?;
                let v = unseal(TSDB, &k, &v).map_err(|e| self.name_series(id, e))?;
                let (h, _) = chunk_header(v)?;
                let pending = lock(&self.inner.state).sealed.contains_key(&(id, t0));
                if h.last_ts >= raw_cutoff || pending || (Some(t0) == open_t0 && !stale_open) {
                    break;
                }
                decode_chunk(v, 0, MAX_TIMESTAMP_MS, &mut samples)?;
                expired_keys.push(k);
            }
        }
        let mut batch = sled::Batch::default();
        let mut dirty = false;
        if !expired_keys.is_empty() {
            stats.chunks_expired += expired_keys.len() as u64;
            stats.samples_rolled_up += samples.len() as u64;
            let new = rollup_samples(&samples);
            let mut by_block: BTreeMap<i64, Vec<Rollup>> = BTreeMap::new();
            for r in new {
                by_block.entry(block_start(r.start_ms)).or_default().push(r);
            }
            for (day, rs) in by_block {
                if day + ROLLUP_BLOCK_MS <= rollup_cutoff {
                    continue;
                }
                let key = rollup_key(id, day);
                let old = match tsdb.get(key)? {
                    Some(v) => decode_block(
                        day,
                        unseal(TSDB, &key, &v).map_err(|e| self.name_series(id, e))?,
                    )?,
                    None => Vec::new(),
                };
                let block = encode_block(day, &merge_rollups(old, rs));
                batch.insert(&key, seal(TSDB, &key, &block));
                stats.rollup_blocks_written += 1;
            }
            for k in &expired_keys {
                batch.remove(k);
            }
            dirty = true;
        }
        if rollup_cutoff - ROLLUP_BLOCK_MS + 1 > 0 {
            for kv in
                tsdb.range(rollup_key(id, 0)..rollup_key(id, rollup_cutoff - ROLLUP_BLOCK_MS + 1))
            {
                let (k, _) = kv?;
                batch.remove(k);
                stats.rollup_blocks_deleted += 1;
                dirty = true;
            }
        }
        // A series with nothing in memory (a pod that is gone): the day block that straddles
        // the rollup cutoff loses its buckets past retention now rather than at the end of
        // its day, so the series is removed once its retention has passed (below).
        if open_t0.is_none() || stale_open {
            dirty |= self.trim_rollup_block(id, rollup_cutoff, &mut batch, stats)?;
        }
        if dirty {
            // The watermark travels with the deletions so recovery never replays log
            // records of chunks that were rolled up (see `recover`).
            batch.insert(
                RAW_CUTOFF_KEY,
                seal(TSDB, RAW_CUTOFF_KEY, &raw_cutoff.to_be_bytes()),
            );
            let drops_open = stale_open
                && expired_keys
                    .iter()
                    .any(|k| parse_id_ts_key(k).ok().map(|x| x.1) == open_t0);
            if drops_open {
                // Hold the state lock so no append can slip into the chunk being dropped.
                let mut st = lock(&self.inner.state);
                let head = &mut st.heads[id as usize];
                if head.open.as_ref().map(ChunkEncoder::first_ts) == open_t0
                    && head.wal_seq == NO_SEQ
                {
                    tsdb.apply_batch(batch)?;
                    head.open = None;
                }
            } else {
                tsdb.apply_batch(batch)?;
            }
        }
        if self.forget_if_empty(id, raw_cutoff)? {
            stats.series_deleted += 1;
        }
        Ok(())
    }

    /// Drops the buckets older than `rollup_cutoff` from the series' block that straddles
    /// it (the whole block when none is left). Returns whether the batch changed.
    fn trim_rollup_block(
        &self,
        id: u64,
        rollup_cutoff: i64,
        batch: &mut sled::Batch,
        stats: &mut MaintenanceStats,
    ) -> Result<bool> {
        let day = block_start(rollup_cutoff);
        let key = rollup_key(id, day);
        let Some(v) = self.inner.db().tsdb.get(key)? else {
            return Ok(false);
        };
        let all = decode_block(
            day,
            unseal(TSDB, &key, &v).map_err(|e| self.name_series(id, e))?,
        )?;
        let kept: Vec<Rollup> = all
            .iter()
            .filter(|r| r.start_ms >= rollup_cutoff)
            .cloned()
            .collect();
        if kept.len() == all.len() {
            return Ok(false);
        }
        if kept.is_empty() {
            batch.remove(&key);
            stats.rollup_blocks_deleted += 1;
        } else {
            batch.insert(&key, seal(TSDB, &key, &encode_block(day, &kept)));
            stats.rollup_blocks_written += 1;
        }
        Ok(true)
    }

    /// Removes a series with nothing left (no sample in memory or waiting for a flush, no
    /// chunk and no rollup on disk, its definition written) — a pod that is gone, once its
    /// samples passed retention — so the index, and what it takes in memory, stays as large
    /// as the live series under churn. Its slot goes to the next new series; its public id
    /// is [`Error::UnknownSeries`] from now on. Its log records, if a segment still holds
    /// any, are older than `raw_cutoff`, which recovery skips, so they never reach the
    /// slot's next series.
    fn forget_if_empty(&self, id: u64, raw_cutoff: i64) -> Result<bool> {
        let db = self.inner.db();
        let tsdb = &db.tsdb;
        let on_disk = tsdb
            .range(chunk_key(id, 0)..=chunk_key(id, MAX_TIMESTAMP_MS))
            .next()
            .is_some()
            || tsdb
                .range(rollup_key(id, 0)..=rollup_key(id, MAX_TIMESTAMP_MS))
                .next()
                .is_some();
        if on_disk || raw_cutoff <= 0 {
            return Ok(false);
        }
        // Under the state lock, so no append can give it a sample meanwhile.
        let mut st = lock(&self.inner.state);
        let Ok(slot) = u32::try_from(id) else {
            return Ok(false);
        };
        let empty = st.heads.get(id as usize).is_some_and(|h| h.open.is_none())
            && !st.sealed.range((id, 0)..=(id, i64::MAX)).any(|_| true)
            && !st.new_series.contains(&id)
            && st.index.resolve(slot).is_some();
        if !empty {
            return Ok(false);
        }
        tsdb.remove(series_key(id))?;
        st.index.remove(slot);
        st.heads[id as usize] = Head::new();
        Ok(true)
    }

    /// Current statistics.
    pub fn stats(&self) -> StoreStats {
        let st = lock(&self.inner.state);
        let (mut samples, mut bytes) = (0u64, 0u64);
        for h in &st.heads {
            if let Some(c) = &h.open {
                samples += c.count() as u64;
                bytes += c.heap_bytes() as u64;
            }
        }
        StoreStats {
            series: st.index.len() as u64,
            head_samples: samples,
            head_chunk_bytes: bytes,
            index_bytes: (st.index.heap_bytes() + st.heads.capacity() * std::mem::size_of::<Head>())
                as u64,
            pending_chunks: st.sealed.len() as u64,
            pending_wal_bytes: st.wal.len() as u64,
            flushes: self.inner.flushes.load(Ordering::Relaxed),
            disk_bytes: self.inner.db().db.size_on_disk().unwrap_or(0),
            compactions: self.inner.compactions.load(Ordering::Relaxed),
        }
    }
}

/// Which open chunks a flush checkpoints besides those due by `wal_checkpoint_flushes`.
#[derive(Clone, Copy)]
pub(crate) enum Checkpoint {
    Due,
    All,
    /// Open chunks starting before this time (so nothing older than it is log-only).
    Before(i64),
}

enum ChunkBytes {
    /// A value read from sled whose checksum was verified, and its payload length.
    Disk(sled::IVec, usize),
    Mem(Vec<u8>),
}

impl std::ops::Deref for ChunkBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            ChunkBytes::Disk(v, len) => &v[..*len],
            ChunkBytes::Mem(v) => v,
        }
    }
}

/// Appends under the state lock. `log`: also record in the log buffer (false on replay).
fn append_locked(st: &mut State, id: u64, ts_ms: i64, value: f64, log: bool) -> Result<()> {
    if ts_ms < st.raw_cutoff {
        return Err(Error::TooOld {
            ts_ms,
            cutoff_ms: st.raw_cutoff,
        });
    }
    let seq = st.next_seq;
    let head = usize::try_from(id)
        .ok()
        .and_then(|i| st.heads.get_mut(i))
        .ok_or(Error::UnknownSeries(id))?;
    match head.check(ts_ms, value) {
        Ok(true) => return Ok(()),
        Ok(false) => {}
        Err(Reject::OutOfOrder(newest_ms)) => {
            return Err(Error::OutOfOrder {
                series: id,
                ts_ms,
                newest_ms,
            });
        }
        Err(Reject::DuplicateTimestamp) => {
            return Err(Error::DuplicateTimestamp { series: id, ts_ms });
        }
    }
    if let Appended::Cut(old) = head.append(ts_ms, value, seq) {
        st.sealed
            .insert((id, old.first_ts()), old.encode().into_boxed_slice());
    }
    if log {
        wal_record(&mut st.wal, id, ts_ms, value);
        st.wal_samples += 1;
    }
    Ok(())
}

/// Rebuilds the in-memory state from the tsdb tree: series definitions, the newest chunk
/// of each series as its open chunk, then the log segments replayed on top. Also returns
/// the sequence number of the last completed flush (0 if none).
fn recover(tsdb: &sled::Tree) -> Result<(State, u64)> {
    let mut st = State {
        index: Index::new(),
        heads: Vec::new(),
        wal: Vec::new(),
        wal_samples: 0,
        sealed: BTreeMap::new(),
        new_series: Vec::new(),
        next_seq: 1,
        raw_cutoff: 0,
    };
    let get_u64 = |key: &[u8]| -> Result<Option<u64>> {
        let Some(v) = tsdb.get(key)? else {
            return Ok(None);
        };
        let a = <[u8; 8]>::try_from(unseal(TSDB, key, &v)?)
            .map_err(|_| Error::corrupt(checksum::describe(TSDB, key), "not 8 bytes"))?;
        Ok(Some(u64::from_be_bytes(a)))
    };
    if let Some(v) = get_u64(RAW_CUTOFF_KEY)? {
        st.raw_cutoff = i64::try_from(v)
            .ok()
            .filter(|c| *c <= MAX_TIMESTAMP_MS)
            .ok_or_else(|| Error::corrupt("raw cutoff", format!("{v} is out of range")))?;
    }
    let last_flush = get_u64(LAST_FLUSH_KEY)?.unwrap_or(0);
    st.next_seq = last_flush.saturating_add(1);
    for kv in tsdb.scan_prefix([SERIES]) {
        let (k, v) = kv?;
        let id = parse_u64_suffix(&k)?;
        let id32 = u32::try_from(id).map_err(|_| Error::corrupt("series key", "id too large"))?;
        let (metric, labels) = decode_series_def(unseal(TSDB, &k, &v)?).map_err(|e| match e {
            Error::CorruptValue { detail, .. } => {
                Error::corrupt(checksum::describe(TSDB, &k), detail)
            }
            other => other,
        })?;
        st.index.insert(id32, &metric, &labels);
    }
    // Slots whose series were removed before are free for new ones.
    st.index.rebuild_free();
    st.heads
        .resize_with(st.index.id_bound() as usize, Head::new);
    let mut buf = Vec::new();
    for (id, head) in st.heads.iter_mut().enumerate() {
        let Some(kv) = tsdb
            .range(chunk_key(id as u64, 0)..=chunk_key(id as u64, MAX_TIMESTAMP_MS))
            .next_back()
        else {
            continue;
        };
        let (k, v) = kv?;
        buf.clear();
        decode_chunk(unseal(TSDB, &k, &v)?, 0, MAX_TIMESTAMP_MS, &mut buf).map_err(
            |e| match e {
                Error::CorruptValue { detail, .. } => {
                    Error::corrupt(checksum::describe(TSDB, &k), detail)
                }
                other => other,
            },
        )?;
        // Re-encoding is deterministic, so the reloaded chunk will overwrite the same key
        // with a superset of the same bytes.
        if let Some((first, rest)) = buf.split_first() {
            let mut enc = ChunkEncoder::new(first.ts_ms, first.value);
            for s in rest {
                enc.append(s.ts_ms, s.value);
            }
            head.open = Some(enc);
        }
    }
    let mut segments = Vec::new();
    for kv in tsdb.scan_prefix([WAL]) {
        let (k, v) = kv?;
        let len = unseal(TSDB, &k, &v)?.len();
        segments.push((parse_u64_suffix(&k)?, v, len));
    }
    for (seq, data, len) in segments {
        let data = &data[..len];
        st.next_seq = st.next_seq.max(seq.saturating_add(1));
        let mut err = None;
        decode_wal(data, |id, ts, v| {
            // Skip what is already in chunks (ts ≤ newest) and what was rolled up.
            let known = (id as usize) < st.heads.len();
            let newer = known && st.heads[id as usize].latest().is_none_or(|l| ts > l.ts_ms);
            if known && newer && ts >= st.raw_cutoff && err.is_none() {
                let prev = st.next_seq;
                st.next_seq = seq;
                if let Err(e) =
                    check_sample(ts, v).and_then(|_| append_locked(&mut st, id, ts, v, false))
                {
                    err = Some(e);
                }
                st.next_seq = prev;
            }
        })?;
        if let Some(e) = err {
            return Err(Error::corrupt(
                "log segment",
                format!("replaying segment {seq}: {e}"),
            ));
        }
    }
    Ok((st, last_flush))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only series with a sample at or after the cut are selected, with their newest
    /// sample; the matchers still apply.
    #[test]
    fn select_active_skips_series_that_stopped() {
        let store = Store::open_temporary(StoreConfig::default()).unwrap();
        let l = |pod: &str| Labels::new([("pod", pod)]).unwrap();
        store.append("m", &l("old"), 1_000, 1.0).unwrap();
        store.append("m", &l("live"), 1_000, 2.0).unwrap();
        store.append("m", &l("live"), 9_000, 3.0).unwrap();
        store.append("other", &l("live"), 9_000, 4.0).unwrap();
        let got = store.select_active(&[Matcher::metric("m")], 5_000).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].labels.get("pod"), Some("live"));
        assert_eq!(got[0].last.map(|s| (s.ts_ms, s.value)), Some((9_000, 3.0)));
        assert_eq!(
            store
                .select_active(&[Matcher::metric("m")], 0)
                .unwrap()
                .len(),
            2
        );
        assert!(
            store
                .select_active(&[Matcher::metric("m")], 9_001)
                .unwrap()
                .is_empty()
        );
    }

    /// The `meta` tree's version is checked too (a marker copied onto another store, or
    /// a store rewritten by a later build in place).
    #[test]
    fn meta_format_version_mismatch_is_incompatible() {
        let dir = tempfile::tempdir().unwrap();
        drop(Store::open(dir.path(), StoreConfig::default()).unwrap());
        {
            let db = sled::open(dir.path()).unwrap();
            let meta = db.open_tree(META).unwrap();
            meta.insert(FORMAT_KEY, seal(META, FORMAT_KEY, &7u32.to_be_bytes()))
                .unwrap();
            db.flush().unwrap();
        }
        let e = Store::open_existing(dir.path(), StoreConfig::default()).unwrap_err();
        assert!(
            matches!(
                e,
                Error::IncompatibleVersion {
                    found: 7,
                    expected: FORMAT_VERSION,
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(e.to_string().contains("format version 7"), "{e}");
    }
}
