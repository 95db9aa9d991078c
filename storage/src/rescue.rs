//! Rescuing a damaged store (power lost mid-write, a truncated or corrupted file): what
//! `headroom serve` does instead of refusing to start.
//!
//! [`Store::open_or_rescue`] opens the store as [`Store::open`] does. When the open finds
//! damage ([`Error::Corrupt`]) it
//! 1. moves every file of the store into a subdirectory `damaged-<UTC time>/` of the same
//!    directory (a rename on the same volume: instant, and it works where the directory
//!    itself is a mount point, as a Kubernetes volume is), so nothing is deleted and the
//!    damage can still be examined;
//! 2. opens that copy's database and copies into a new store, in place, every value that
//!    still reads and passes its checksum, with the store's own consistency rules: a
//!    series' chunks, rollups and log records only with its definition; each chunk and
//!    log segment only if it decodes;
//! 3. opens the new store the normal way. If it does not open (or nothing could be read),
//!    it starts empty in its place — never silently: [`Rescue`] says what was found, where
//!    it went and what was kept, for the caller to log.
//!
//! Entries named `damaged-*` never make a directory count as occupied, so the new store is
//! created beside them.
//!
//! Other errors (the directory is not a store, another format, a held lock, an I/O error)
//! are returned as they are: those are not damage, and nothing is moved.

use std::path::{Path, PathBuf};

use crate::checksum::{self, unseal};
use crate::chunk::decode_chunk;
use crate::error::{Error, Result};
use crate::keys::{self, CHUNK, LAST_FLUSH_KEY, ROLLUP, SERIES, WAL};
use crate::{Store, StoreConfig};

pub use crate::manifest::DAMAGED_PREFIX;
use crate::manifest::is_damaged_dir;

/// What [`Store::open_or_rescue`] found and did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rescue {
    /// What was wrong: the open's error.
    pub found: String,
    /// Where the damaged files were moved.
    pub moved_to: PathBuf,
    /// What was copied into the new store.
    pub kept: Kept,
    /// Values left behind: damaged, unreadable, or belonging to a series whose definition
    /// was lost.
    pub dropped: u64,
    /// Why some of it (or all of it) could not be read at all, when that happened.
    pub unreadable: Option<String>,
}

/// What a rescue kept, by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Kept {
    /// Series definitions.
    pub series: u64,
    /// Chunks of samples.
    pub chunks: u64,
    /// Rollup blocks.
    pub rollups: u64,
    /// Log segments (samples not yet in chunks).
    pub log_segments: u64,
    /// Builders' run records.
    pub runs: u64,
    /// Builders' placement histories.
    pub placements: u64,
    /// Decision records (and their index entries).
    pub decisions: u64,
    /// Everything else (metadata, keyed state).
    pub other: u64,
}

impl Kept {
    /// The number of values kept.
    pub fn total(&self) -> u64 {
        self.series
            + self.chunks
            + self.rollups
            + self.log_segments
            + self.runs
            + self.placements
            + self.decisions
            + self.other
    }
}

impl std::fmt::Display for Kept {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} series ({} chunks, {} rollup blocks, {} log segments), run records of {} builders, \
             placement histories of {} builders, {} decision log entries, {} other values",
            self.series,
            self.chunks,
            self.rollups,
            self.log_segments,
            self.runs,
            self.placements,
            self.decisions,
            self.other
        )
    }
}

impl std::fmt::Display for Rescue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}; its files were moved to {}; ",
            self.found,
            self.moved_to.display()
        )?;
        if self.kept.total() == 0 {
            write!(f, "nothing in them could be kept")?;
        } else {
            write!(f, "kept {}", self.kept)?;
        }
        if self.dropped > 0 {
            write!(
                f,
                "; {} damaged or orphaned values left behind",
                self.dropped
            )?;
        }
        if let Some(why) = &self.unreadable {
            write!(f, " ({why})")?;
        }
        write!(
            f,
            "; the new store starts from there (remove {} once it is no longer needed)",
            self.moved_to.display()
        )
    }
}

impl Store {
    /// Opens the store in `dir` as [`Store::open`] does; if the open finds the store
    /// damaged ([`Error::Corrupt`]), moves its files aside, keeps what can still be read in
    /// a new store in `dir`, and opens that (see the module docs). The [`Rescue`] says what
    /// happened; the caller logs it. Other errors are returned unchanged.
    ///
    /// Blocking I/O proportional to the store's size when a rescue runs.
    pub fn open_or_rescue(
        dir: impl AsRef<Path>,
        config: StoreConfig,
    ) -> Result<(Store, Option<Rescue>)> {
        let dir = dir.as_ref();
        let found = match Store::open(dir, config.clone()) {
            Ok(store) => return Ok((store, None)),
            Err(e @ Error::Corrupt { .. }) => e.to_string(),
            Err(e) => return Err(e),
        };
        let moved_to = move_aside(dir)?;
        let mut rescue = Rescue {
            found,
            moved_to: moved_to.clone(),
            kept: Kept::default(),
            dropped: 0,
            unreadable: None,
        };
        let copied = copy_readable(&moved_to, dir, &config, &mut rescue);
        if let Err(e) = &copied {
            rescue.unreadable = Some(format!("copying what was readable failed: {e}"));
        }
        match Store::open(dir, config.clone()) {
            Ok(store) if copied.is_ok() => return Ok((store, Some(rescue))),
            Ok(store) => drop(store),
            Err(e) => rescue.unreadable = Some(format!("the rescued copy did not open: {e}")),
        }
        // Start empty: what the rescue wrote goes aside too.
        rescue.kept = Kept::default();
        let leftover = moved_to.join("rescue-attempt");
        std::fs::create_dir_all(&leftover).map_err(|e| Error::io(&leftover, e))?;
        move_entries(dir, &leftover)?;
        let store = Store::open(dir, config)?;
        Ok((store, Some(rescue)))
    }
}

/// Moves every entry of `dir` but earlier `damaged-*` directories (and a volume's
/// `lost+found`) into a new `dir/damaged-<UTC time>`; returns it.
fn move_aside(dir: &Path) -> Result<PathBuf> {
    let stamp = chrono_free_utc_stamp();
    let mut target = dir.join(format!("{DAMAGED_PREFIX}{stamp}"));
    let mut n = 1;
    while target.exists() {
        n += 1;
        target = dir.join(format!("{DAMAGED_PREFIX}{stamp}-{n}"));
    }
    std::fs::create_dir(&target).map_err(|e| Error::io(&target, e))?;
    move_entries(dir, &target)?;
    Ok(target)
}

fn move_entries(from: &Path, to: &Path) -> Result<()> {
    let entries = std::fs::read_dir(from).map_err(|e| Error::io(from, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| Error::io(from, e))?;
        let name = entry.file_name();
        if is_damaged_dir(&name) || name == "lost+found" || to.starts_with(entry.path()) {
            continue;
        }
        let dst = to.join(&name);
        std::fs::rename(entry.path(), &dst).map_err(|e| Error::io(entry.path(), e))?;
    }
    Ok(())
}

/// `YYYYMMDDTHHMMSSZ` for now (UTC), without a date library: days from the epoch by the
/// civil-from-days algorithm (Howard Hinnant's).
fn chrono_free_utc_stamp() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}{month:02}{day:02}T{:02}{:02}{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Opens the damaged copy's database in `damaged` and copies what passes the checks into
/// a new database in `dir`, counting into `rescue`. An error here is the new store's
/// (writing it failed); the damaged copy failing to open is noted in `rescue` and leaves
/// the new store empty.
fn copy_readable(
    damaged: &Path,
    dir: &Path,
    config: &StoreConfig,
    rescue: &mut Rescue,
) -> Result<()> {
    crate::manifest::write(dir, 0, None)?;
    let src = match open_damaged(&crate::manifest::damaged_sled_dir(damaged), config) {
        Ok(db) => db,
        Err(why) => {
            rescue.unreadable = Some(why);
            return Ok(());
        }
    };
    let dst = crate::compact::new_sled(dir, config)?;
    let mut stopped = Vec::new();
    for name in src.tree_names() {
        let Ok(tree) = std::str::from_utf8(&name) else {
            continue;
        };
        // sled's default tree holds nothing of the store's (and no checksums).
        if tree.starts_with("__sled__") {
            continue;
        }
        let from = match crate::guard::catch_panic(|| src.open_tree(&name)) {
            Ok(Ok(t)) => t,
            Ok(Err(e)) => {
                stopped.push(format!("tree {tree}: {}", Error::from(e)));
                continue;
            }
            Err(panic) => {
                stopped.push(format!("tree {tree}: sled panicked: {panic}"));
                continue;
            }
        };
        let to = dst.open_tree(&name)?;
        let copied = crate::guard::catch_panic(|| copy_tree(tree, &from, &to, rescue));
        match copied {
            Ok(Ok(None)) => {}
            Ok(Ok(Some(why))) => stopped.push(format!("tree {tree}: {why}")),
            Ok(Err(e)) => return Err(e),
            Err(panic) => stopped.push(format!("tree {tree}: sled panicked: {panic}")),
        }
    }
    dst.flush()?;
    // The marker records the flushes the copied data holds, as compaction does.
    let tsdb = dst.open_tree(checksum::TSDB)?;
    let last_flush = tsdb
        .get(LAST_FLUSH_KEY)?
        .and_then(|v| {
            unseal(checksum::TSDB, LAST_FLUSH_KEY, &v)
                .ok()
                .and_then(|p| <[u8; 8]>::try_from(p).ok())
        })
        .map(u64::from_be_bytes)
        .unwrap_or(0);
    drop(tsdb);
    drop(dst);
    crate::manifest::write(dir, last_flush, None)?;
    if !stopped.is_empty() {
        rescue.unreadable = Some(format!("reading stopped early in {}", stopped.join("; ")));
    }
    Ok(())
}

/// sled on the damaged copy, or why not. A settings file (`conf`) that fails its check
/// is kept as `conf.damaged` and replaced by the one sled writes for these settings (sled
/// would otherwise believe the damaged text).
fn open_damaged(dir: &Path, config: &StoreConfig) -> std::result::Result<sled::Db, String> {
    let db = dir.join("db");
    match std::fs::metadata(&db) {
        Ok(m) if m.len() > 0 => {}
        Ok(_) => return Err("its database file db is empty".into()),
        Err(e) => return Err(format!("its database file db cannot be read: {e}")),
    }
    if crate::manifest::check_conf(dir).is_err() {
        let conf = dir.join("conf");
        let _ = std::fs::rename(&conf, dir.join("conf.damaged"));
        let fresh = fresh_conf(config).map_err(|e| format!("writing a new settings file: {e}"))?;
        std::fs::write(&conf, fresh).map_err(|e| format!("writing {}: {e}", conf.display()))?;
    }
    let open = || match crate::guard::catch_panic(|| {
        sled::Config::new()
            .path(dir)
            .cache_capacity(config.cache_capacity_bytes)
            .flush_every_ms(None)
            .open()
    }) {
        Ok(Ok(db)) => Ok(db),
        Ok(Err(e)) => Err(format!("sled could not open it: {}", Error::from(e))),
        Err(panic) => Err(format!("sled could not open it (it panicked: {panic})")),
    };
    let first = match open() {
        Ok(db) => return Ok(db),
        Err(why) => why,
    };
    // sled's snapshot (`snap.*`) only saves it reading the whole log at open; without it,
    // sled rebuilds its page table from the log and takes the part before any damage as
    // the log (as after a crash). Then the large values (`blobs/`): without them the rest
    // reads, and the values that lived there fail their reads (and are left behind).
    let aside = dir.join("set-aside");
    for step in ["snap.", "blobs"] {
        let _ = std::fs::create_dir_all(&aside);
        if let Ok(entries) = std::fs::read_dir(dir) {
            for e in entries.flatten() {
                if e.file_name().to_string_lossy().starts_with(step) {
                    let _ = std::fs::rename(e.path(), aside.join(e.file_name()));
                }
            }
        }
        if step == "blobs" {
            let _ = std::fs::create_dir_all(dir.join("blobs"));
        }
        if let Ok(db) = open() {
            return Ok(db);
        }
    }
    Err(first)
}

/// The `conf` file sled writes for a new database with these settings.
fn fresh_conf(config: &StoreConfig) -> std::io::Result<Vec<u8>> {
    let tmp = tempfile_dir()?;
    let db = sled::Config::new()
        .path(&tmp)
        .cache_capacity(config.cache_capacity_bytes)
        .flush_every_ms(None)
        .open()
        .map_err(std::io::Error::other)?;
    drop(db);
    let bytes = std::fs::read(tmp.join("conf"));
    let _ = std::fs::remove_dir_all(&tmp);
    bytes
}

fn tempfile_dir() -> std::io::Result<PathBuf> {
    let base = std::env::temp_dir();
    for i in 0..1000u32 {
        let p = base.join(format!("headroom-conf-{}-{i}", std::process::id()));
        if std::fs::create_dir(&p).is_ok() {
            return Ok(p);
        }
    }
    Err(std::io::Error::other(
        "no temporary directory for sled's settings",
    ))
}

/// Copies the values of `tree` that read and check. Returns why reading stopped early, if
/// it did; an error only when writing the new tree fails.
fn copy_tree(
    tree: &str,
    from: &sled::Tree,
    to: &sled::Tree,
    rescue: &mut Rescue,
) -> Result<Option<String>> {
    if tree == checksum::TSDB {
        return copy_tsdb(from, to, rescue);
    }
    let mut stopped = None;
    for kv in from.iter() {
        let (k, v) = match kv {
            Ok(kv) => kv,
            Err(e) => {
                stopped = Some(Error::from(e).to_string());
                break;
            }
        };
        if unseal(tree, &k, &v).is_err() {
            rescue.dropped += 1;
            continue;
        }
        to.insert(&k, v)?;
        let kept = &mut rescue.kept;
        match tree {
            checksum::RUNS => kept.runs += 1,
            checksum::PLACEMENTS => kept.placements += 1,
            checksum::DECISIONS if k.first() == Some(&b'L') => kept.decisions += 1,
            checksum::DECISIONS => {}
            _ => kept.other += 1,
        }
    }
    Ok(stopped)
}

/// The `tsdb` tree: series definitions first; then chunks, rollups and log segments only
/// of series whose definition was kept (a log segment only if every record in it is).
fn copy_tsdb(from: &sled::Tree, to: &sled::Tree, rescue: &mut Rescue) -> Result<Option<String>> {
    const T: &str = checksum::TSDB;
    let mut series = std::collections::HashSet::new();
    let mut stopped = None;
    for kv in from.scan_prefix([SERIES]) {
        let (k, v) = match kv {
            Ok(kv) => kv,
            Err(e) => {
                stopped = Some(Error::from(e).to_string());
                break;
            }
        };
        let ok = keys::parse_u64_suffix(&k)
            .ok()
            .filter(|_| unseal(T, &k, &v).is_ok_and(|p| keys::decode_series_def(p).is_ok()));
        match ok {
            Some(id) => {
                series.insert(id);
                to.insert(&k, v)?;
                rescue.kept.series += 1;
            }
            None => rescue.dropped += 1,
        }
    }
    let mut samples = Vec::new();
    for kv in from.iter() {
        let (k, v) = match kv {
            Ok(kv) => kv,
            Err(e) => {
                stopped.get_or_insert(Error::from(e).to_string());
                break;
            }
        };
        let Some(&tag) = k.first() else { continue };
        if tag == SERIES {
            continue;
        }
        let Ok(payload) = unseal(T, &k, &v) else {
            rescue.dropped += 1;
            continue;
        };
        let keep = match tag {
            CHUNK | ROLLUP => keys::parse_id_ts_key(&k).is_ok_and(|(id, _)| {
                series.contains(&id) && {
                    samples.clear();
                    tag == ROLLUP || decode_chunk(payload, 0, i64::MAX, &mut samples).is_ok()
                }
            }),
            WAL => {
                let mut known = true;
                keys::decode_wal(payload, |id, _, _| known &= series.contains(&id)).is_ok() && known
            }
            _ => true,
        };
        if !keep {
            rescue.dropped += 1;
            continue;
        }
        to.insert(&k, v)?;
        match tag {
            CHUNK => rescue.kept.chunks += 1,
            ROLLUP => rescue.kept.rollups += 1,
            WAL => rescue.kept.log_segments += 1,
            _ => rescue.kept.other += 1,
        }
    }
    Ok(stopped)
}
