//! Compaction: rewriting the store into a fresh sled database.
//!
//! sled 0.34 reclaims the space of overwritten and deleted values only partly: under
//! churn (a log segment written and deleted every flush, decision records and placement
//! histories rewritten all day) its files grow far past the data they hold, and its
//! memory with them (kit-soak.py, 1,000 nodes: the directory grew 99 → 365 MB in an hour
//! holding 24 MB). A copy holds none of that garbage. So:
//!
//! - [`Store::compact`] rewrites the store *in place while it runs*: with flushes and
//!   record writes held (appends go on into memory), it checkpoints, copies every tree
//!   into a new database in the subdirectory `sled-<n+1>/`, makes it durable, and then
//!   writes the `HEADROOM` marker naming it. That marker write is the commit point: a
//!   crash before it leaves the old database in use (the next open removes the partial
//!   copy), a crash after it the new one (the next open removes the old files). The new
//!   database is then swapped in; the old one is removed once its last reader lets go.
//! - [`Store::maintain`] calls it when [`Store::compaction_due`]: the size on disk is
//!   `compactionRatio` times what it was right after the last compaction (before the
//!   first: the live data), and at least `compactionMinBytes`.
//! - [`Store::compact_to`] writes a compacted copy elsewhere (for an offline swap).
//!
//! The copy takes time proportional to the live data (about a second for 24 MB), during
//! which flushes and record writes wait.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::config::StoreConfig;
use crate::error::{Error, Result};
use crate::lock;
use crate::manifest::{self, Marker, sled_generation};
use crate::store::{Checkpoint, Compaction, Db, Store};

/// How long a compaction waits for the last reader of the old database before it leaves
/// its files to the next open.
const RETIRE_WAIT: Duration = Duration::from_secs(10);

/// A new sled database in the empty directory `dir`, without sled's periodic thread (the
/// caller flushes): for copies (`compact_to`, a rescue).
pub(crate) fn new_sled(dir: &Path, config: &StoreConfig) -> Result<sled::Db> {
    sled::Config::new()
        .path(dir)
        .create_new(true)
        .cache_capacity(config.cache_capacity_bytes)
        .flush_every_ms(None)
        .open()
        .map_err(|source| Error::Open {
            path: dir.to_path_buf(),
            source,
        })
}

/// Copies every tree of `src` into `dst` in key order; returns the bytes of keys and
/// values copied. Values are copied as they are: their checksums cover tree, key and
/// payload, which stay the same.
fn copy_trees(src: &sled::Db, dst: &sled::Db) -> Result<u64> {
    let mut bytes = 0u64;
    for name in src.tree_names() {
        let from = src.open_tree(&name)?;
        let to = dst.open_tree(&name)?;
        let mut batch = sled::Batch::default();
        let mut n = 0;
        for kv in from.iter() {
            let (k, v) = kv?;
            bytes += (k.len() + v.len()) as u64;
            batch.insert(k, v);
            n += 1;
            if n % 10_000 == 0 {
                to.apply_batch(std::mem::take(&mut batch))?;
            }
        }
        to.apply_batch(batch)?;
    }
    Ok(bytes)
}

/// Bytes of keys and values in every tree of `db`.
fn live_bytes(db: &sled::Db) -> Result<u64> {
    let mut bytes = 0u64;
    for name in db.tree_names() {
        for kv in db.open_tree(&name)?.iter() {
            let (k, v) = kv?;
            bytes += (k.len() + v.len()) as u64;
        }
    }
    Ok(bytes)
}

impl Store {
    /// Whether the store has grown enough to be compacted: its size on disk is at least
    /// `compactionMinBytes` and `compactionRatio` times its size right after the last
    /// compaction (before the first one: its live data, counted by the first call that
    /// finds the store past `compactionMinBytes`, reading every value once). Never for a
    /// temporary store or with `compactionRatio: 0`. Blocking I/O.
    pub fn compaction_due(&self) -> Result<bool> {
        let config = &self.inner.config;
        if config.compaction_ratio == 0.0 || self.path().is_none() {
            return Ok(false);
        }
        let db = self.inner.db();
        let disk = db.db.size_on_disk()?;
        if disk < config.compaction_min_bytes {
            return Ok(false);
        }
        let mut base = self.inner.compaction_base.load(Ordering::Relaxed);
        if base == u64::MAX {
            base = live_bytes(&db.db)?;
            self.inner.compaction_base.store(base, Ordering::Relaxed);
        }
        Ok(disk as f64 >= config.compaction_ratio * base as f64)
    }

    /// Compacts the store in place while it runs (see the module docs). A temporary store
    /// is [`Error::InvalidArgument`]. On an error the store goes on with its old database
    /// and the partial copy is removed. Blocking I/O proportional to the live data.
    pub fn compact(&self) -> Result<Compaction> {
        let dir = self
            .path()
            .ok_or_else(|| Error::InvalidArgument("a temporary store is not compacted".into()))?
            .to_path_buf();
        let started = Instant::now();
        let flushing = lock(&self.inner.flush_lock);
        // An empty log: everything the copy must hold is in chunks.
        let seq = self.flush_locked(Checkpoint::All)?.seq;
        let recording = lock(&self.inner.record_lock);
        let old = self.inner.db();
        let before_bytes = old.db.size_on_disk()?;
        let generation = old.subdir.as_deref().and_then(sled_generation).unwrap_or(0) + 1;
        let name = format!("{}{generation}", manifest::SLED_PREFIX);
        let new_dir = dir.join(&name);
        let abandon = |e: Error| {
            let _ = std::fs::remove_dir_all(&new_dir);
            e
        };
        if new_dir.exists() {
            // Left by a compaction that did not complete: the marker never named it.
            std::fs::remove_dir_all(&new_dir).map_err(|e| Error::io(&new_dir, e))?;
        }
        std::fs::create_dir(&new_dir).map_err(|e| Error::io(&new_dir, e))?;
        let copied = crate::store::open_sled(&new_dir, &self.inner.config).and_then(|db| {
            let bytes = copy_trees(&old.db, &db)?;
            db.flush()?;
            Ok((Db::new(db, Some(name.clone()))?, bytes))
        });
        let (db, live) = copied.map_err(abandon)?;
        if let Err(e) = manifest::write(&dir, seq, Some(&name)) {
            drop(db);
            // The marker may or may not name the copy now: put the old one back, and
            // remove the copy only if that worked.
            if manifest::write(&dir, seq, old.subdir.as_deref()).is_ok() {
                let _ = std::fs::remove_dir_all(&new_dir);
            }
            return Err(e);
        }
        let after_bytes = db.db.size_on_disk().unwrap_or(0);
        let retired = self.inner.swap_db(db);
        drop(old);
        // sled's files have a floor of their own (preallocated segments), so a store is
        // next due at `compaction_ratio` times its fresh size, not its live bytes alone.
        self.inner
            .compaction_base
            .store(live.max(after_bytes), Ordering::Relaxed);
        self.inner.compactions.fetch_add(1, Ordering::Relaxed);
        drop(recording);
        drop(flushing);
        let old_removed = retire(&dir, retired, &name);
        Ok(Compaction {
            before_bytes,
            after_bytes,
            live_bytes: live,
            directory: name,
            old_removed,
            duration: started.elapsed(),
        })
    }

    /// Writes a compacted copy of the store into the new directory `dst`: checkpoints
    /// (so the log is empty), then copies every tree in key order into a fresh sled
    /// database. `dst` must not exist or be empty ([`Error::InvalidArgument`] otherwise);
    /// it gets its own `HEADROOM` marker, so it is a complete store. Swap directories
    /// while headroom is stopped, or let [`Store::compact`] do it in place. Blocking I/O.
    pub fn compact_to(&self, dst: impl AsRef<Path>) -> Result<()> {
        let dst = dst.as_ref();
        let occupied = match std::fs::read_dir(dst) {
            Ok(mut entries) => entries.next().is_some(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
            Err(e) => return Err(Error::io(dst, e)),
        };
        if occupied {
            return Err(Error::InvalidArgument(format!(
                "compaction target {} exists and is not empty",
                dst.display()
            )));
        }
        let stats = self.checkpoint()?;
        std::fs::create_dir_all(dst).map_err(|e| Error::io(dst, e))?;
        manifest::write(dst, 0, None)?;
        let new = new_sled(dst, &self.inner.config)?;
        // Record writes wait, so that the copy is of one moment.
        let _r = lock(&self.inner.record_lock);
        copy_trees(&self.inner.db().db, &new)?;
        new.flush()?;
        // The copy holds the source's flush counter as of the checkpoint (or later).
        manifest::write(dst, stats.seq, None)?;
        Ok(())
    }
}

/// Drops the old database once no reader holds it (waiting up to [`RETIRE_WAIT`]) and
/// removes its files; `current` is the subdirectory now in use. Returns whether they were
/// removed (if not, the next open removes them).
fn retire(dir: &Path, mut old: Arc<Db>, current: &str) -> bool {
    let deadline = Instant::now() + RETIRE_WAIT;
    loop {
        match Arc::try_unwrap(old) {
            Ok(db) => {
                // sled flushes and stops its thread on drop; only then are its files
                // no longer written.
                drop(db);
                break;
            }
            Err(still_shared) if Instant::now() < deadline => {
                old = still_shared;
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(_) => return false,
        }
    }
    manifest::remove_stale(
        dir,
        &Marker {
            flushes: 0,
            sled: Some(current.to_string()),
        },
    );
    true
}
