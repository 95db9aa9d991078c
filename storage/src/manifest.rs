//! The `HEADROOM` marker file: what makes a directory recognisably a headroom store, and
//! the durable-flush counter that lets an open notice that sled lost acknowledged data.
//!
//! ```text
//! headroom store
//! format 2
//! flushes 17
//! sled sled-3
//! crc32 1a2b3c4d
//! ```
//!
//! The last line is the CRC-32 (hex) of every byte before it. The `sled` line names the
//! subdirectory holding sled's files since the store was last compacted in place
//! ([`Store::compact`](crate::Store::compact)); without it they are in the store directory
//! itself. The file is replaced atomically (write `HEADROOM.tmp`, fsync, rename, fsync the
//! directory) after every completed flush, so the marker is also what makes a compaction's
//! new database the store's in one step. See `FORMAT.md`.

use std::fs;
use std::io::{ErrorKind, Write};
use std::path::Path;

use crate::OpenMode;
use crate::error::{Error, Result};

/// On-disk format version, stored in the `HEADROOM` marker and the `meta` tree and
/// checked at open. Version 2 added the marker and value checksums; version 1 stores are
/// refused (see `FORMAT.md`).
pub const FORMAT_VERSION: u32 = 2;
/// Name of the marker file in a store directory.
pub const MARKER_FILE: &str = "HEADROOM";
const TMP_FILE: &str = "HEADROOM.tmp";
const MAGIC: &str = "headroom store";
/// A marker is a few dozen bytes; anything much larger is not ours.
const MAX_LEN: u64 = 4096;

/// Entries that do not make a directory "non-empty": a file system's `lost+found` (the
/// root of a freshly formatted volume, e.g. a Kubernetes PersistentVolume), a marker
/// left half-written by a crash during creation, and the `damaged-*` directories a rescue
/// moved damaged stores into ([`crate::Rescue`]).
fn ignorable(name: &std::ffi::OsStr) -> bool {
    name == "lost+found" || name == TMP_FILE || name == PROBE_FILE || is_damaged_dir(name)
}

/// A file written and removed again to check that the store's disk takes writes
/// (`headroom serve`'s store watchdog); never part of a store.
pub const PROBE_FILE: &str = ".headroom-probe";

/// The prefix of the directories a rescue moves damaged stores into
/// ([`Store::open_or_rescue`](crate::Store::open_or_rescue)).
pub const DAMAGED_PREFIX: &str = "damaged-";

/// Whether `name` is a directory a rescue moved a damaged store into.
pub(crate) fn is_damaged_dir(name: &std::ffi::OsStr) -> bool {
    name.to_str().is_some_and(|n| n.starts_with(DAMAGED_PREFIX))
}

/// The prefix of the subdirectories compaction writes sled's files into (`sled-<n>`).
pub(crate) const SLED_PREFIX: &str = "sled-";

/// The number `n` of a subdirectory name `sled-<n>`.
pub(crate) fn sled_generation(name: &str) -> Option<u64> {
    let digits = name.strip_prefix(SLED_PREFIX)?;
    if digits.is_empty() || digits.len() > 19 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// What a marker records.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Marker {
    /// Completed flushes (0: the store is being created).
    pub(crate) flushes: u64,
    /// The subdirectory holding sled's files (`None`: the store directory).
    pub(crate) sled: Option<String>,
}

impl Marker {
    /// The directory sled's files are in, for a store in `dir`.
    pub(crate) fn sled_dir(&self, dir: &Path) -> std::path::PathBuf {
        match &self.sled {
            Some(sub) => dir.join(sub),
            None => dir.to_path_buf(),
        }
    }
}

/// The marker's text.
fn render(marker: &Marker) -> String {
    let mut body = format!(
        "{MAGIC}\nformat {FORMAT_VERSION}\nflushes {}\n",
        marker.flushes
    );
    if let Some(sub) = &marker.sled {
        body.push_str(&format!("sled {sub}\n"));
    }
    let crc = crc32fast::hash(body.as_bytes());
    format!("{body}crc32 {crc:08x}\n")
}

/// Writes the marker atomically: `flushes` completed flushes, sled's files in the
/// subdirectory `sled` (or in `dir`).
pub(crate) fn write(dir: &Path, flushes: u64, sled: Option<&str>) -> Result<()> {
    let marker = Marker {
        flushes,
        sled: sled.map(str::to_string),
    };
    let tmp = dir.join(TMP_FILE);
    let mut f = fs::File::create(&tmp).map_err(|e| Error::io(&tmp, e))?;
    f.write_all(render(&marker).as_bytes())
        .and_then(|_| f.sync_all())
        .map_err(|e| Error::io(&tmp, e))?;
    drop(f);
    let marker = dir.join(MARKER_FILE);
    fs::rename(&tmp, &marker).map_err(|e| Error::io(&marker, e))?;
    sync_dir(dir)
}

#[cfg(unix)]
fn sync_dir(dir: &Path) -> Result<()> {
    fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Error::io(dir, e))
}

#[cfg(not(unix))]
fn sync_dir(_dir: &Path) -> Result<()> {
    Ok(())
}

fn corrupt(dir: &Path, detail: impl Into<String>) -> Error {
    Error::Corrupt {
        path: dir.to_path_buf(),
        detail: detail.into(),
    }
}

/// Parses a marker: checksum first (so a damaged version line is reported as damage),
/// then the magic line and the format version, then the fields.
fn parse(dir: &Path, bytes: &[u8]) -> Result<Marker> {
    let bad = |what: &str| corrupt(dir, format!("its {MARKER_FILE} marker file {what}"));
    let text = std::str::from_utf8(bytes).map_err(|_| bad("is not UTF-8 text"))?;
    let complete = text
        .strip_suffix('\n')
        .ok_or_else(|| bad("is truncated (no final newline)"))?;
    let body_end = complete
        .rfind('\n')
        .map(|i| i + 1)
        .ok_or_else(|| bad("is truncated (no checksum line)"))?;
    let (body, last) = text.split_at(body_end);
    let stored = last
        .strip_prefix("crc32 ")
        .and_then(|h| h.strip_suffix('\n'))
        .ok_or_else(|| bad("has no checksum line"))?;
    // Compared as text: the exact lowercase rendering, so no change to the line passes.
    let computed = format!("{:08x}", crc32fast::hash(body.as_bytes()));
    if stored != computed {
        return Err(bad(&format!(
            "fails its checksum (stored {stored:?}, computed {computed})"
        )));
    }
    let mut lines = body.lines();
    if lines.next() != Some(MAGIC) {
        return Err(bad("does not start with \"headroom store\""));
    }
    let found = lines
        .next()
        .and_then(|l| l.strip_prefix("format "))
        .and_then(|v| v.parse::<u32>().ok())
        .ok_or_else(|| bad("has no format line"))?;
    if found != FORMAT_VERSION {
        return Err(Error::IncompatibleVersion {
            path: dir.to_path_buf(),
            found,
            expected: FORMAT_VERSION,
        });
    }
    let (mut flushes, mut sled) = (None, None);
    for line in lines {
        // Unknown fields are allowed: a later build of the same format may add some.
        if let Some(v) = line.strip_prefix("flushes ") {
            flushes = Some(
                v.parse::<u64>()
                    .map_err(|_| bad("has a bad flushes line"))?,
            );
        } else if let Some(v) = line.strip_prefix("sled ") {
            sled_generation(v).ok_or_else(|| bad(&format!("has a bad sled line ({v:?})")))?;
            sled = Some(v.to_string());
        }
    }
    Ok(Marker {
        flushes: flushes.ok_or_else(|| bad("has no flushes line"))?,
        sled,
    })
}

/// Reads the marker, `None` if there is none.
pub(crate) fn read(dir: &Path) -> Result<Option<Marker>> {
    let path = dir.join(MARKER_FILE);
    let meta = match fs::symlink_metadata(&path) {
        Ok(m) => m,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(&path, e)),
    };
    if !meta.is_file() || meta.len() > MAX_LEN {
        return Err(corrupt(
            dir,
            format!("{MARKER_FILE} is not a marker file (not a small regular file)"),
        ));
    }
    let bytes = fs::read(&path).map_err(|e| Error::io(&path, e))?;
    parse(dir, &bytes).map(Some)
}

/// sled's `conf` file: its settings as text followed by their CRC-32 (u32 LE). sled
/// itself only warns on a mismatch and then trusts the damaged text (a flipped digit
/// reads as another sled version or segment size), so it is checked here first.
pub(crate) fn check_conf(dir: &Path) -> Result<()> {
    let path = dir.join("conf");
    let bytes = match fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == ErrorKind::NotFound => {
            return Err(corrupt(dir, "sled's settings file conf is missing"));
        }
        Err(e) => return Err(Error::io(&path, e)),
    };
    let ok = bytes.len() > 8 && {
        let (text, trailer) = bytes.split_at(bytes.len() - 4);
        let mut a = [0u8; 4];
        a.copy_from_slice(trailer);
        crc32fast::hash(text) == u32::from_le_bytes(a)
    };
    if !ok {
        return Err(corrupt(
            dir,
            format!(
                "sled's settings file conf fails its checksum ({} bytes)",
                bytes.len()
            ),
        ));
    }
    Ok(())
}

/// The sled data file: present and not empty once the store has completed a flush.
fn check_db(dir: &Path, flushes: u64) -> Result<()> {
    let path = dir.join("db");
    match fs::metadata(&path) {
        Ok(m) if m.len() > 0 => Ok(()),
        Ok(_) => Err(corrupt(
            dir,
            format!("its database file db is empty (0 bytes), but {flushes} flushes completed"),
        )),
        Err(e) if e.kind() == ErrorKind::NotFound => Err(corrupt(
            dir,
            format!("its database file db is missing, but {flushes} flushes completed"),
        )),
        Err(e) => Err(Error::io(&path, e)),
    }
}

/// Names the store directory, and the subdirectory sled's files are in, in damage found
/// there.
fn in_subdir(e: Error, dir: &Path, marker: &Marker) -> Error {
    match (e, &marker.sled) {
        (Error::Corrupt { detail, .. }, Some(sub)) => Error::Corrupt {
            path: dir.to_path_buf(),
            detail: format!("in {sub}/, {detail}"),
        },
        (e, _) => e,
    }
}

/// True if the directory looks like a bare sled database (e.g. a format-1 store, which
/// had no marker).
fn looks_like_sled(dir: &Path) -> bool {
    fs::read(dir.join("conf")).is_ok_and(|b| b.starts_with(b"segment_size: "))
        && dir.join("db").is_file()
}

/// sled's files at the top of a store directory (where they are until its first
/// compaction in place).
const TOP_LEVEL_SLED: [&str; 3] = ["conf", "db", "blobs"];

/// Removes what a compaction left behind in `dir` when it was interrupted or could not
/// remove the old database while it was still read: `sled-<n>` subdirectories the
/// marker does not name, and sled's files at the top when the marker names a
/// subdirectory. Best effort: what cannot be removed now is tried again at the next open.
pub(crate) fn remove_stale(dir: &Path, marker: &Marker) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let stale_generation =
            sled_generation(name).is_some() && marker.sled.as_deref() != Some(name);
        let stale_top =
            marker.sled.is_some() && (TOP_LEVEL_SLED.contains(&name) || name.starts_with("snap."));
        if stale_generation || stale_top {
            let path = entry.path();
            let _ = if path.is_dir() {
                fs::remove_dir_all(&path)
            } else {
                fs::remove_file(&path)
            };
        }
    }
}

/// Where sled's files are in a damaged store moved to `dir`: the subdirectory its marker
/// names if the marker still reads, else the newest `sled-<n>` subdirectory with a
/// database file, else `dir` itself.
pub(crate) fn damaged_sled_dir(dir: &Path) -> std::path::PathBuf {
    if let Ok(Some(marker)) = read(dir) {
        return marker.sled_dir(dir);
    }
    let newest = fs::read_dir(dir).ok().and_then(|entries| {
        entries
            .flatten()
            .filter_map(|e| {
                let n = sled_generation(e.file_name().to_str()?)?;
                e.path().join("db").is_file().then_some((n, e.path()))
            })
            .max()
    });
    newest.map_or_else(|| dir.to_path_buf(), |(_, p)| p)
}

/// Checks `dir` before sled sees it and returns its marker (0 flushes for a store being
/// created, whose marker this writes). Never writes to a directory that is not empty and
/// has no marker.
pub(crate) fn prepare(dir: &Path, mode: OpenMode) -> Result<Marker> {
    let must_exist = matches!(mode, OpenMode::MustExist);
    let no_store = |reason: &str| Error::NoStore {
        path: dir.to_path_buf(),
        reason: reason.into(),
    };
    match fs::metadata(dir) {
        Err(e) if e.kind() == ErrorKind::NotFound => {
            if must_exist {
                return Err(no_store("the directory does not exist"));
            }
            fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
            write(dir, 0, None)?;
            return Ok(Marker::default());
        }
        Err(e) => return Err(Error::io(dir, e)),
        Ok(m) if !m.is_dir() => {
            return Err(Error::NotAStore {
                path: dir.to_path_buf(),
                reason: "it is not a directory".into(),
            });
        }
        Ok(_) => {}
    }
    if let Some(marker) = read(dir)? {
        if marker.flushes == 0 {
            // Created, but the first flush never completed (a crash during creation).
            if must_exist {
                return Err(no_store("its creation did not complete"));
            }
            return Ok(marker);
        }
        let sled_dir = marker.sled_dir(dir);
        check_conf(&sled_dir).map_err(|e| in_subdir(e, dir, &marker))?;
        check_db(&sled_dir, marker.flushes).map_err(|e| in_subdir(e, dir, &marker))?;
        return Ok(marker);
    }
    let mut entries = fs::read_dir(dir).map_err(|e| Error::io(dir, e))?;
    let occupied = entries.try_fold(false, |found, e| {
        e.map(|e| found || !ignorable(&e.file_name()))
    });
    match occupied.map_err(|e| Error::io(dir, e))? {
        false if must_exist => Err(no_store("the directory is empty")),
        false => {
            write(dir, 0, None)?;
            Ok(Marker::default())
        }
        true => Err(Error::NotAStore {
            path: dir.to_path_buf(),
            reason: if looks_like_sled(dir) {
                format!(
                    "no {MARKER_FILE} marker; it looks like a bare sled database, such as a store \
                     written before format version 2, which this build does not read"
                )
            } else {
                format!("no {MARKER_FILE} marker")
            },
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_parse_roundtrip_and_damage() {
        let dir = Path::new("/x");
        let marker = Marker {
            flushes: 42,
            sled: Some("sled-7".into()),
        };
        let text = render(&marker);
        assert_eq!(parse(dir, text.as_bytes()).unwrap(), marker);
        let plain = Marker {
            flushes: 42,
            sled: None,
        };
        assert_eq!(parse(dir, render(&plain).as_bytes()).unwrap(), plain);
        for bad in ["sled-", "sled-x", "../x", "sled-1/..", "db"] {
            let body = format!("headroom store\nformat 2\nflushes 1\nsled {bad}\n");
            let text = format!("{body}crc32 {:08x}\n", crc32fast::hash(body.as_bytes()));
            assert!(parse(dir, text.as_bytes()).is_err(), "{bad} accepted");
        }
        for i in 0..text.len() {
            let mut b = text.clone().into_bytes();
            b[i] ^= 0x01;
            assert!(parse(dir, &b).is_err(), "flip at {i} accepted");
            assert!(
                parse(dir, &text.as_bytes()[..i]).is_err(),
                "truncation to {i}"
            );
        }
        let future = "headroom store\nformat 9\nflushes 1\n";
        let future = format!("{future}crc32 {:08x}\n", crc32fast::hash(future.as_bytes()));
        assert!(matches!(
            parse(dir, future.as_bytes()),
            Err(Error::IncompatibleVersion { found: 9, .. })
        ));
    }
}
