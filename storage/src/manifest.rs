//! The `HEADROOM` marker file: what makes a directory recognisably a headroom store, and
//! the durable-flush counter that lets an open notice that sled lost acknowledged data.
//!
//! ```text
//! headroom store
//! format 2
//! flushes 17
//! crc32 1a2b3c4d
//! ```
//!
//! The last line is the CRC-32 (hex) of every byte before it. The file is replaced
//! atomically (write `HEADROOM.tmp`, fsync, rename, fsync the directory) after every
//! completed flush. See `FORMAT.md`.

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

/// The marker's text for `flushes` completed flushes.
fn render(flushes: u64) -> String {
    let body = format!("{MAGIC}\nformat {FORMAT_VERSION}\nflushes {flushes}\n");
    let crc = crc32fast::hash(body.as_bytes());
    format!("{body}crc32 {crc:08x}\n")
}

/// Writes the marker atomically.
pub(crate) fn write(dir: &Path, flushes: u64) -> Result<()> {
    let tmp = dir.join(TMP_FILE);
    let mut f = fs::File::create(&tmp).map_err(|e| Error::io(&tmp, e))?;
    f.write_all(render(flushes).as_bytes())
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
fn parse(dir: &Path, bytes: &[u8]) -> Result<u64> {
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
    let mut flushes = None;
    for line in lines {
        // Unknown fields are allowed: a later build of the same format may add some.
        if let Some(v) = line.strip_prefix("flushes ") {
            flushes = Some(
                v.parse::<u64>()
                    .map_err(|_| bad("has a bad flushes line"))?,
            );
        }
    }
    flushes.ok_or_else(|| bad("has no flushes line"))
}

/// Reads the marker, `None` if there is none.
fn read(dir: &Path) -> Result<Option<u64>> {
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

/// True if the directory looks like a bare sled database (e.g. a format-1 store, which
/// had no marker).
fn looks_like_sled(dir: &Path) -> bool {
    fs::read(dir.join("conf")).is_ok_and(|b| b.starts_with(b"segment_size: "))
        && dir.join("db").is_file()
}

/// Checks `dir` before sled sees it and returns the number of flushes its marker records
/// (0 for a store being created, whose marker this writes). Never writes to a directory
/// that is not empty and has no marker.
pub(crate) fn prepare(dir: &Path, mode: OpenMode) -> Result<u64> {
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
            write(dir, 0)?;
            return Ok(0);
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
    if let Some(flushes) = read(dir)? {
        if flushes == 0 {
            // Created, but the first flush never completed (a crash during creation).
            if must_exist {
                return Err(no_store("its creation did not complete"));
            }
            return Ok(0);
        }
        check_conf(dir)?;
        check_db(dir, flushes)?;
        return Ok(flushes);
    }
    let mut entries = fs::read_dir(dir).map_err(|e| Error::io(dir, e))?;
    let occupied = entries.try_fold(false, |found, e| {
        e.map(|e| found || !ignorable(&e.file_name()))
    });
    match occupied.map_err(|e| Error::io(dir, e))? {
        false if must_exist => Err(no_store("the directory is empty")),
        false => {
            write(dir, 0)?;
            Ok(0)
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
        let text = render(42);
        assert_eq!(parse(dir, text.as_bytes()).unwrap(), 42);
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
