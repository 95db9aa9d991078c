//! Validation errors with field paths, after Kubernetes' `field.ErrorList`.
//!
//! A [`Path`] names a field inside a document (`spec.containers[0].resources.requests.cpu`),
//! an [`Error`] says what is wrong there ([`ErrorKind`]: required, invalid, not supported,
//! too long, duplicate, out of range), optionally inside which object
//! (`items[3]: Node "n1"`), and an [`ErrorList`] collects every error of a document so that
//! one run reports all of them, each line naming the file, the object and the field:
//!
//! ```text
//! examples/x.yaml: workloads[2].arrivalsPerHour: must be finite and at most 1000000, got inf
//! cluster.yaml: items[5]: Node "n1": duplicate of items[2]
//! ```
//!
//! [`Error::from_serde`] turns a `serde_path_to_error` failure (unknown field, missing field,
//! unknown variant, wrong type) into the same shape, with the real field path and without
//! the parser's own repetition of it. The validators at the end ([`dns1123_subdomain`],
//! [`dns1123_label`], [`label_key`], [`label_value`]) check Kubernetes names as the API
//! server does.

use std::fmt;

/// One step of a [`Path`].
#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    /// A struct field (`.spec`).
    Child(String),
    /// A list index (`[0]`).
    Index(usize),
    /// A map key (`.cpu`, or `[headroom.io/service]` when it is not a plain word).
    Key(String),
}

/// Where a value sits in a document: `spec.containers[0].resources.requests.cpu`.
///
/// Built from the root: `Path::root().child("spec").child("containers").index(0)`. Map keys
/// that are plain words render like fields (`requests.cpu`); others in brackets, as
/// Kubernetes does (`labels[headroom.io/service]`). The root renders as `top level`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Path {
    segments: Vec<Segment>,
}

impl Path {
    /// The document itself.
    pub fn root() -> Path {
        Path::default()
    }

    /// A top-level field: `Path::new("spec")` is `Path::root().child("spec")`.
    pub fn new(name: impl Into<String>) -> Path {
        Path::root().child(name)
    }

    fn with(&self, s: Segment) -> Path {
        let mut segments = self.segments.clone();
        segments.push(s);
        Path { segments }
    }

    /// The field `name` of this struct.
    pub fn child(&self, name: impl Into<String>) -> Path {
        self.with(Segment::Child(name.into()))
    }

    /// The `i`-th element of this list.
    pub fn index(&self, i: usize) -> Path {
        self.with(Segment::Index(i))
    }

    /// The entry `key` of this map.
    pub fn key(&self, key: impl Into<String>) -> Path {
        self.with(Segment::Key(key.into()))
    }

    /// True for the document itself.
    pub fn is_root(&self) -> bool {
        self.segments.is_empty()
    }

    /// The name of the last field or key, if the path ends in one.
    pub fn last_name(&self) -> Option<&str> {
        match self.segments.last()? {
            Segment::Child(n) | Segment::Key(n) => Some(n),
            Segment::Index(_) => None,
        }
    }

    /// The path `serde_path_to_error` tracked (map keys become fields, as they are in a
    /// struct tree), up to the first segment it could not name.
    pub fn from_serde(p: &serde_path_to_error::Path) -> Path {
        use serde_path_to_error::Segment as S;
        let mut out = Path::root();
        for s in p {
            out = match s {
                S::Seq { index } => out.index(*index),
                S::Map { key } => out.key(key.clone()),
                S::Enum { variant } => out.key(variant.clone()),
                // Past an unknown segment (a syntax error) the rest means nothing.
                S::Unknown => break,
            };
        }
        out
    }
}

fn is_word(k: &str) -> bool {
    !k.is_empty()
        && k.len() <= 253
        && k.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.segments.is_empty() {
            return f.write_str("top level");
        }
        for (i, s) in self.segments.iter().enumerate() {
            match s {
                Segment::Child(n) => {
                    if i > 0 {
                        f.write_str(".")?;
                    }
                    f.write_str(&shown(n))?;
                }
                Segment::Key(k) if is_word(k) => {
                    if i > 0 {
                        f.write_str(".")?;
                    }
                    f.write_str(k)?;
                }
                Segment::Key(k) => {
                    let plain = !k.is_empty()
                        && !k.contains(['[', ']', '"', '\n'])
                        && !k.starts_with(' ')
                        && !k.ends_with(' ');
                    if plain {
                        write!(f, "[{}]", shown(k))?;
                    } else {
                        write!(f, "[{:?}]", shown(k))?;
                    }
                }
                Segment::Index(n) => write!(f, "[{n}]")?,
            }
        }
        Ok(())
    }
}

/// Longest value shown in a message; longer ones are cut (`aaaa… (70001 bytes)`), so a
/// 70,000-byte label value makes a one-line error.
pub const MAX_SHOWN: usize = 64;

/// `v` as shown in a message: cut at [`MAX_SHOWN`] characters with its length noted.
pub fn shown(v: &str) -> String {
    if v.chars().count() <= MAX_SHOWN {
        return v.to_string();
    }
    let cut: String = v.chars().take(MAX_SHOWN).collect();
    format!("{cut}… ({} bytes)", v.len())
}

/// `v` quoted for a message, cut as [`shown`] cuts it.
pub fn quoted(v: &str) -> String {
    format!("{:?}", shown(v))
}

/// What is wrong with a field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ErrorKind {
    /// The field is missing or empty (`detail` says which, e.g. `must not be empty`).
    Required {
        /// What is required.
        detail: String,
    },
    /// The value is not acceptable.
    Invalid {
        /// The value as given (cut to [`MAX_SHOWN`]); empty when there is none to show.
        value: String,
        /// Why.
        detail: String,
    },
    /// The value (or key) is not one of a fixed set.
    NotSupported {
        /// What was given (`unknown field`, `unsupported value "Fastest"`).
        detail: String,
        /// The accepted values.
        allowed: Vec<String>,
    },
    /// The value is longer than allowed.
    TooLong {
        /// The limit.
        max: usize,
        /// The length given.
        actual: usize,
    },
    /// The value repeats an earlier one.
    Duplicate {
        /// What it repeats (`items[2]`).
        of: String,
    },
    /// A number outside its range.
    OutOfRange {
        /// The value as given.
        value: String,
        /// The range, as words after "must be" (`finite and at most 1000000`).
        range: String,
    },
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ErrorKind::Required { detail } => f.write_str(detail),
            ErrorKind::Invalid { value, detail } if value.is_empty() => f.write_str(detail),
            ErrorKind::Invalid { value, detail } => write!(f, "{detail}, got {value}"),
            ErrorKind::NotSupported { detail, allowed } if allowed.is_empty() => {
                f.write_str(detail)
            }
            ErrorKind::NotSupported { detail, allowed } => {
                write!(f, "{detail}; expected one of {}", allowed.join(", "))
            }
            ErrorKind::TooLong { max, actual } => {
                write!(f, "must be at most {max} characters, got {actual}")
            }
            ErrorKind::Duplicate { of } => write!(f, "duplicate of {of}"),
            ErrorKind::OutOfRange { value, range } => write!(f, "must be {range}, got {value}"),
        }
    }
}

/// One validation error: where (object and field) and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    /// The object it belongs to, when the document holds several (`items[3]: Node "n1"`).
    pub object: Option<String>,
    /// The field, from the object's (or the document's) root.
    pub path: Path,
    /// What is wrong (boxed: keeps `Result<_, Error>` small).
    pub kind: Box<ErrorKind>,
    /// Where in the text, when the parser knows (`line 3, column 7`).
    pub location: Option<String>,
}

impl Error {
    /// An error of `kind` at `path`.
    pub fn new(path: Path, kind: ErrorKind) -> Error {
        Error {
            object: None,
            path,
            kind: Box::new(kind),
            location: None,
        }
    }

    /// A missing or empty field; `detail` is e.g. `is required` or `must not be empty`.
    pub fn required(path: Path, detail: impl Into<String>) -> Error {
        Error::new(
            path,
            ErrorKind::Required {
                detail: detail.into(),
            },
        )
    }

    /// An unacceptable value (`value` is shown, cut to [`MAX_SHOWN`]; `""` shows none).
    pub fn invalid(path: Path, value: impl fmt::Display, detail: impl Into<String>) -> Error {
        Error::new(
            path,
            ErrorKind::Invalid {
                value: shown(&value.to_string()),
                detail: detail.into(),
            },
        )
    }

    /// A value outside a fixed set.
    pub fn not_supported<S: AsRef<str>>(path: Path, value: &str, allowed: &[S]) -> Error {
        Error::new(
            path,
            ErrorKind::NotSupported {
                detail: format!("unsupported value {:?}", shown(value)),
                allowed: allowed.iter().map(|s| s.as_ref().to_string()).collect(),
            },
        )
    }

    /// A key the schema does not have.
    pub fn unknown_field<S: AsRef<str>>(path: Path, allowed: &[S]) -> Error {
        Error::new(
            path,
            ErrorKind::NotSupported {
                detail: "unknown field".into(),
                allowed: allowed.iter().map(|s| s.as_ref().to_string()).collect(),
            },
        )
    }

    /// A value longer than `max`.
    pub fn too_long(path: Path, max: usize, actual: usize) -> Error {
        Error::new(path, ErrorKind::TooLong { max, actual })
    }

    /// A repetition of `of`.
    pub fn duplicate(path: Path, of: impl Into<String>) -> Error {
        Error::new(path, ErrorKind::Duplicate { of: of.into() })
    }

    /// A number outside `range` (words after "must be").
    pub fn out_of_range(path: Path, value: impl fmt::Display, range: impl Into<String>) -> Error {
        Error::new(
            path,
            ErrorKind::OutOfRange {
                value: shown(&value.to_string()),
                range: range.into(),
            },
        )
    }

    /// The same error, inside `object` (kept if one is already set).
    pub fn in_object(mut self, object: impl Into<String>) -> Error {
        if self.object.is_none() {
            self.object = Some(object.into());
        }
        self
    }

    /// The same error with its path moved under `prefix` (a nested document).
    pub fn under(mut self, prefix: &Path) -> Error {
        let mut segments = prefix.segments.clone();
        segments.append(&mut self.path.segments);
        self.path = Path { segments };
        self
    }

    /// A deserialisation failure as a field error: the tracked path (completed with the
    /// field an `unknown field`/`missing field` message names), the kind that message
    /// describes, and the parser's `at line L column C` as the location. YAML parsers
    /// repeat the path at the start of their messages; that repetition is dropped.
    pub fn from_serde(path: &serde_path_to_error::Path, message: &str) -> Error {
        let mut path = Path::from_serde(path);
        let (message, location) = split_location(message);
        let message = strip_path_prefix(message);
        let ticked = |rest: &str| -> Option<(String, String)> {
            let rest = rest.strip_prefix('`')?;
            let end = rest.find('`')?;
            Some((rest[..end].to_string(), rest[end + 1..].to_string()))
        };
        let expected = |tail: &str| -> Vec<String> {
            // serde: "expected `a`", "expected `a` or `b`", "expected one of `a`, `b`, `c`".
            let Some(list) = tail.split_once("expected ").map(|(_, l)| l) else {
                return Vec::new();
            };
            list.split('`')
                .skip(1)
                .step_by(2)
                .map(str::to_string)
                .collect()
        };
        let mut e = if let Some((name, tail)) =
            message.strip_prefix("unknown field ").and_then(&ticked)
        {
            if path.last_name() != Some(name.as_str()) {
                path = path.key(name);
            }
            Error::unknown_field(path, &expected(&tail))
        } else if let Some((name, tail)) =
            message.strip_prefix("unknown variant ").and_then(&ticked)
        {
            Error::not_supported(path, &name, &expected(&tail))
        } else if let Some((name, _)) = message.strip_prefix("missing field ").and_then(&ticked) {
            Error::required(path.key(name), "is required")
        } else if let Some((name, _)) = message.strip_prefix("duplicate field ").and_then(&ticked) {
            Error::invalid(path.key(name), "", "given twice")
        } else {
            Error::invalid(path, "", message)
        };
        e.location = location;
        e
    }
}

/// Splits `... at line 3 column 7` into the message and `line 3, column 7`.
fn split_location(m: &str) -> (&str, Option<String>) {
    if let Some(i) = m.rfind(" at line ") {
        let tail = &m[i + " at line ".len()..];
        if let Some((line, col)) = tail.split_once(" column ")
            && line.bytes().all(|b| b.is_ascii_digit())
            && col.bytes().all(|b| b.is_ascii_digit())
            && !line.is_empty()
            && !col.is_empty()
        {
            return (&m[..i], Some(format!("line {line}, column {col}")));
        }
    }
    (m, None)
}

/// Drops a leading `profiles[0].x: ` that the YAML parser puts before its message.
fn strip_path_prefix(m: &str) -> &str {
    if let Some((head, rest)) = m.split_once(": ")
        && !head.is_empty()
        && !head.contains(' ')
        && !head.contains('`')
        && (head.contains('.') || head.contains('[') || !rest.is_empty())
        && head
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-[]/".contains(&b))
    {
        return rest;
    }
    m
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(o) = &self.object {
            write!(f, "{o}: ")?;
        }
        if !(self.path.is_root() && self.object.is_some()) {
            write!(f, "{}: ", self.path)?;
        }
        write!(f, "{}", self.kind)?;
        if let Some(l) = &self.location {
            write!(f, " ({l})")?;
        }
        Ok(())
    }
}

impl std::error::Error for Error {}

/// At most this many errors are listed; the rest are counted.
pub const MAX_LISTED: usize = 50;

/// Every error found in one document (a file), each shown on its own line prefixed by the
/// document's name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ErrorList {
    origin: Option<String>,
    errors: Vec<Error>,
}

impl ErrorList {
    /// An empty list.
    pub fn new() -> ErrorList {
        ErrorList::default()
    }

    /// The same list, naming the document (a file name) on every line.
    pub fn with_origin(mut self, origin: impl Into<String>) -> ErrorList {
        self.origin = Some(origin.into());
        self
    }

    /// The document's name, if set.
    pub fn origin(&self) -> Option<&str> {
        self.origin.as_deref()
    }

    /// Adds an error.
    pub fn push(&mut self, e: Error) {
        self.errors.push(e);
    }

    /// Adds errors.
    pub fn extend(&mut self, es: impl IntoIterator<Item = Error>) {
        self.errors.extend(es);
    }

    /// True when there is no error.
    pub fn is_empty(&self) -> bool {
        self.errors.is_empty()
    }

    /// How many errors.
    pub fn len(&self) -> usize {
        self.errors.len()
    }

    /// The errors, in the order found.
    pub fn errors(&self) -> &[Error] {
        &self.errors
    }

    /// The errors, in the order found.
    pub fn iter(&self) -> std::slice::Iter<'_, Error> {
        self.errors.iter()
    }

    /// `Ok(value)` when empty, else the list.
    pub fn into_result<T>(self, value: T) -> Result<T, ErrorList> {
        if self.errors.is_empty() {
            Ok(value)
        } else {
            Err(self)
        }
    }
}

impl From<Error> for ErrorList {
    fn from(e: Error) -> ErrorList {
        ErrorList {
            origin: None,
            errors: vec![e],
        }
    }
}

impl fmt::Display for ErrorList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.errors.is_empty() {
            return f.write_str("no errors");
        }
        for (i, e) in self.errors.iter().take(MAX_LISTED).enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            if let Some(o) = &self.origin {
                write!(f, "{o}: ")?;
            }
            write!(f, "{e}")?;
        }
        if self.errors.len() > MAX_LISTED {
            f.write_str("\n")?;
            if let Some(o) = &self.origin {
                write!(f, "{o}: ")?;
            }
            write!(f, "and {} more errors", self.errors.len() - MAX_LISTED)?;
        }
        Ok(())
    }
}

impl std::error::Error for ErrorList {}

fn is_dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// A DNS-1123 subdomain (Node and Pod names): at most 253 characters, lower-case
/// alphanumerics, `-` and `.`, each dot-separated part starting and ending alphanumeric.
pub fn dns1123_subdomain(path: &Path, v: &str) -> Option<Error> {
    if v.is_empty() {
        return Some(Error::required(path.clone(), "must not be empty"));
    }
    if v.len() > 253 {
        return Some(Error::too_long(path.clone(), 253, v.len()));
    }
    if !v.split('.').all(is_dns_label) {
        return Some(Error::invalid(
            path.clone(),
            quoted(v),
            "must be a DNS-1123 subdomain (lower-case letters, digits, '-' and '.', starting and ending with a letter or digit)",
        ));
    }
    None
}

/// A DNS-1123 label (namespaces): at most 63 characters, lower-case alphanumerics and `-`,
/// starting and ending alphanumeric.
pub fn dns1123_label(path: &Path, v: &str) -> Option<Error> {
    if v.is_empty() {
        return Some(Error::required(path.clone(), "must not be empty"));
    }
    if v.len() > 63 {
        return Some(Error::too_long(path.clone(), 63, v.len()));
    }
    if !is_dns_label(v) {
        return Some(Error::invalid(
            path.clone(),
            quoted(v),
            "must be a DNS-1123 label (lower-case letters, digits and '-', starting and ending with a letter or digit)",
        ));
    }
    None
}

fn is_label_name(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || b"-_.".contains(c))
}

/// A label value: empty, or at most 63 characters of alphanumerics, `-`, `_` and `.`,
/// starting and ending alphanumeric.
pub fn label_value(path: &Path, v: &str) -> Option<Error> {
    if v.is_empty() {
        return None;
    }
    if v.len() > 63 {
        return Some(Error::too_long(path.clone(), 63, v.len()));
    }
    if !is_label_name(v) {
        return Some(Error::invalid(
            path.clone(),
            quoted(v),
            "must be a valid label value (letters, digits, '-', '_' and '.', starting and ending with a letter or digit)",
        ));
    }
    None
}

/// A label (or annotation, taint, selector) key: a qualified name, `[prefix/]name` with an
/// optional DNS-1123 subdomain prefix and a name of at most 63 characters.
pub fn label_key(path: &Path, k: &str) -> Option<Error> {
    if k.is_empty() {
        return Some(Error::required(path.clone(), "must not be empty"));
    }
    let (prefix, name) = match k.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, k),
    };
    let prefix_ok =
        prefix.is_none_or(|p| !p.is_empty() && p.len() <= 253 && p.split('.').all(is_dns_label));
    if !prefix_ok || !is_label_name(name) {
        return Some(Error::invalid(
            path.clone(),
            quoted(k),
            "must be a qualified name ([DNS-subdomain/]name, the name at most 63 letters, digits, '-', '_' and '.')",
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_render_like_kubernetes() {
        let p = Path::new("spec")
            .child("containers")
            .index(0)
            .child("resources")
            .child("requests")
            .key("cpu");
        assert_eq!(p.to_string(), "spec.containers[0].resources.requests.cpu");
        assert_eq!(
            Path::new("metadata")
                .child("labels")
                .key("headroom.io/service")
                .to_string(),
            "metadata.labels[headroom.io/service]"
        );
        assert_eq!(Path::root().index(3).to_string(), "[3]");
        assert_eq!(Path::root().to_string(), "top level");
        assert_eq!(Path::new("m").key("a]b").to_string(), "m[\"a]b\"]");
        assert_eq!(Path::new("x").last_name(), Some("x"));
    }

    #[test]
    fn errors_render_kind_object_and_list() {
        let e = Error::out_of_range(
            Path::new("workloads").index(2).child("arrivalsPerHour"),
            f64::INFINITY,
            "finite and at most 1000000",
        );
        let list = ErrorList::from(e).with_origin("examples/x.yaml");
        assert_eq!(
            list.to_string(),
            "examples/x.yaml: workloads[2].arrivalsPerHour: must be finite and at most 1000000, got inf"
        );
        let d = Error::duplicate(Path::root(), "items[2]").in_object("items[5]: Node \"n1\"");
        assert_eq!(
            d.to_string(),
            "items[5]: Node \"n1\": duplicate of items[2]"
        );
        let r = Error::required(Path::new("metadata").child("name"), "must not be empty")
            .in_object("items[3]: Node");
        assert_eq!(
            r.to_string(),
            "items[3]: Node: metadata.name: must not be empty"
        );
        let mut all = ErrorList::new().with_origin("f");
        all.push(d);
        all.push(r);
        assert_eq!(all.len(), 2);
        let text = all.to_string();
        assert_eq!(text.lines().count(), 2, "{text}");
        assert!(text.lines().all(|l| l.starts_with("f: ")), "{text}");
        let mut many = ErrorList::new();
        for i in 0..MAX_LISTED + 5 {
            many.push(Error::required(Path::root().index(i), "x"));
        }
        assert!(many.to_string().ends_with("and 5 more errors"));
        assert_eq!(
            Error::too_long(Path::new("n"), 63, 70001).to_string(),
            "n: must be at most 63 characters, got 70001"
        );
        assert_eq!(
            Error::not_supported(Path::new("op"), "7", &["Exists", "Equal"]).to_string(),
            "op: unsupported value \"7\"; expected one of Exists, Equal"
        );
        let long = Error::invalid(Path::new("v"), "a".repeat(70_000), "bad").to_string();
        assert!(long.len() < 120, "{long}");
        assert!(long.contains("(70000 bytes)"), "{long}");
    }

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields, rename_all = "camelCase")]
    #[allow(dead_code)]
    struct Doc {
        profiles: Vec<Inner>,
        #[serde(default)]
        kind: Option<Kind>,
    }
    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields, rename_all = "camelCase")]
    #[allow(dead_code)]
    struct Inner {
        scheduler_name: String,
    }
    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    enum Kind {
        Least,
        Most,
    }

    fn yaml_error(text: &str) -> Error {
        let de = serde_norway::Deserializer::from_str(text);
        let e = serde_path_to_error::deserialize::<_, Doc>(de).unwrap_err();
        Error::from_serde(e.path(), &e.inner().to_string())
    }

    #[test]
    fn serde_errors_name_the_real_field() {
        let e = yaml_error("apiVersion: v2\nprofiles: []\n");
        assert_eq!(e.path.to_string(), "apiVersion");
        assert_eq!(
            e.kind.to_string(),
            "unknown field; expected one of profiles, kind"
        );
        let e = yaml_error("profiles: [{schedulerName: a, bogus: 1}]\n");
        assert_eq!(e.path.to_string(), "profiles[0].bogus");
        assert_eq!(
            e.to_string(),
            "profiles[0].bogus: unknown field; expected one of schedulerName (line 1, column 31)"
        );
        let e = yaml_error("profiles: [{}]\n");
        assert_eq!(
            e.to_string(),
            "profiles[0].schedulerName: is required (line 1, column 12)"
        );
        let e = yaml_error("profiles: []\nkind: Fastest\n");
        assert_eq!(e.path.to_string(), "kind");
        assert!(
            e.kind
                .to_string()
                .starts_with("unsupported value \"Fastest\"; expected one of Least, Most"),
            "{e}"
        );
        let e = yaml_error("profiles: []\nprofiles: []\n");
        assert!(e.to_string().starts_with("profiles: given twice"), "{e}");
        let e = yaml_error("- 1\n");
        assert!(e.path.is_root());
        assert!(e.to_string().starts_with("top level: invalid type"), "{e}");
    }

    #[test]
    fn kubernetes_names() {
        let p = Path::new("x");
        assert!(dns1123_subdomain(&p, "node-1.example").is_none());
        assert!(dns1123_subdomain(&p, "").is_some());
        assert!(dns1123_subdomain(&p, "Node").is_some());
        assert!(dns1123_subdomain(&p, "a..b").is_some());
        assert!(dns1123_subdomain(&p, &"a".repeat(254)).is_some());
        assert!(dns1123_label(&p, "kube-system").is_none());
        assert!(dns1123_label(&p, "a.b").is_some());
        assert!(dns1123_label(&p, "-a").is_some());
        assert!(label_value(&p, "").is_none());
        assert!(label_value(&p, "v1.2_x").is_none());
        assert!(label_value(&p, &"a".repeat(64)).is_some());
        assert!(label_value(&p, "a b").is_some());
        assert!(label_key(&p, "headroom.io/service").is_none());
        assert!(label_key(&p, "app").is_none());
        assert!(label_key(&p, "/app").is_some());
        assert!(label_key(&p, "Bad_Prefix/app").is_some());
        assert!(label_key(&p, "").is_some());
    }
}
