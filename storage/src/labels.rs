//! Label sets, matchers and the PromQL-style selector parser.
//!
//! A series is identified by its metric name plus a [`Labels`] set. Label sets are validated
//! and sorted once, at construction, so every later step (hashing, the index, the on-disk
//! series definition) can rely on a canonical form.

use std::fmt;

use crate::error::{Error, Result};

/// Maximum number of labels in one set. Kubernetes series carry 3–8; anything near this
/// limit is a cardinality bug upstream, and refusing it protects the index.
pub const MAX_LABELS: usize = 32;
/// Maximum length in bytes of a metric name or a label name.
pub const MAX_NAME_LEN: usize = 256;
/// Maximum length in bytes of a label value (Kubernetes object names are ≤ 253).
pub const MAX_VALUE_LEN: usize = 1024;
/// The pseudo label name that matchers use to match the metric name.
pub const METRIC_NAME_LABEL: &str = "__name__";

/// A validated label set, sorted by name, names unique.
///
/// Rules (checked by [`Labels::new`]):
/// - names match `[a-zA-Z_][a-zA-Z0-9_]*`, are at most [`MAX_NAME_LEN`] bytes and do not
///   start with `__` (reserved, e.g. `__name__`);
/// - values are any UTF-8 of at most [`MAX_VALUE_LEN`] bytes; a label with an **empty
///   value is dropped** (as in Prometheus, empty and absent are the same);
/// - at most [`MAX_LABELS`] labels; a duplicate name is an error.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Labels(Vec<(String, String)>);

impl Labels {
    /// Builds and validates a label set.
    pub fn new<K, V>(labels: impl IntoIterator<Item = (K, V)>) -> Result<Labels>
    where
        K: Into<String>,
        V: Into<String>,
    {
        let mut out: Vec<(String, String)> = Vec::new();
        for (k, v) in labels {
            let (k, v) = (k.into(), v.into());
            validate_label_name(&k)?;
            if v.len() > MAX_VALUE_LEN {
                return Err(Error::InvalidLabels(format!(
                    "value of label {k:?} is {} bytes, longer than {MAX_VALUE_LEN}",
                    v.len()
                )));
            }
            if v.is_empty() {
                continue;
            }
            out.push((k, v));
            if out.len() > MAX_LABELS {
                return Err(Error::InvalidLabels(format!(
                    "more than {MAX_LABELS} labels"
                )));
            }
        }
        out.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        if let Some(w) = out.windows(2).find(|w| w[0].0 == w[1].0) {
            return Err(Error::InvalidLabels(format!(
                "duplicate label name {:?}",
                w[0].0
            )));
        }
        Ok(Labels(out))
    }

    /// The empty label set.
    pub fn empty() -> Labels {
        Labels(Vec::new())
    }

    /// Value of label `name`, if present.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .binary_search_by(|(k, _)| k.as_str().cmp(name))
            .ok()
            .map(|i| self.0[i].1.as_str())
    }

    /// Iterates `(name, value)` pairs in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// Number of labels.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True if there are no labels.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Builds a label set from pairs already known valid and sorted (decoded from disk).
    pub(crate) fn from_sorted_unchecked(v: Vec<(String, String)>) -> Labels {
        Labels(v)
    }
}

impl fmt::Display for Labels {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("{")?;
        for (i, (k, v)) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{k}={v:?}")?;
        }
        f.write_str("}")
    }
}

fn is_name_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_'
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Checks a label name (see [`Labels`]).
pub(crate) fn validate_label_name(name: &str) -> Result<()> {
    if name.is_empty() || name.len() > MAX_NAME_LEN {
        return Err(Error::InvalidLabels(format!(
            "label name must be 1..={MAX_NAME_LEN} bytes, got {}",
            name.len()
        )));
    }
    let mut chars = name.chars();
    let ok = chars.next().is_some_and(is_name_start) && chars.all(is_name_char);
    if !ok {
        return Err(Error::InvalidLabels(format!(
            "label name {name:?} does not match [a-zA-Z_][a-zA-Z0-9_]*"
        )));
    }
    if name.starts_with("__") {
        return Err(Error::InvalidLabels(format!(
            "label name {name:?} is reserved (starts with __)"
        )));
    }
    Ok(())
}

/// Checks a metric name: `[a-zA-Z_:][a-zA-Z0-9_:]*`, 1..=[`MAX_NAME_LEN`] bytes.
pub fn validate_metric_name(name: &str) -> Result<()> {
    if name.is_empty() || name.len() > MAX_NAME_LEN {
        return Err(Error::InvalidLabels(format!(
            "metric name must be 1..={MAX_NAME_LEN} bytes, got {}",
            name.len()
        )));
    }
    let mut chars = name.chars();
    let ok = chars.next().is_some_and(|c| is_name_start(c) || c == ':')
        && chars.all(|c| is_name_char(c) || c == ':');
    if !ok {
        return Err(Error::InvalidLabels(format!(
            "metric name {name:?} does not match [a-zA-Z_:][a-zA-Z0-9_:]*"
        )));
    }
    Ok(())
}

/// A matcher operator, as in PromQL.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum MatchOp {
    /// `=`: equal.
    Eq,
    /// `!=`: not equal.
    Ne,
    /// `=~`: fully anchored regex match.
    Re,
    /// `!~`: fully anchored regex non-match.
    Nre,
}

impl MatchOp {
    fn as_str(self) -> &'static str {
        match self {
            MatchOp::Eq => "=",
            MatchOp::Ne => "!=",
            MatchOp::Re => "=~",
            MatchOp::Nre => "!~",
        }
    }
}

/// One label matcher. `name == "__name__"` matches the metric name.
///
/// As in Prometheus, an absent label has the value `""`: `{x=""}` matches series without
/// `x` and `{x!="a"}` matches series without `x`. Regexes are fully anchored.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Matcher {
    /// Label name (or `__name__`).
    pub name: String,
    /// Operator.
    pub op: MatchOp,
    /// Value or regex.
    pub value: String,
}

impl Matcher {
    /// Builds a matcher.
    pub fn new(name: impl Into<String>, op: MatchOp, value: impl Into<String>) -> Matcher {
        Matcher {
            name: name.into(),
            op,
            value: value.into(),
        }
    }

    /// `__name__ = metric`.
    pub fn metric(metric: impl Into<String>) -> Matcher {
        Matcher::new(METRIC_NAME_LABEL, MatchOp::Eq, metric)
    }
}

impl fmt::Display for Matcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}{:?}", self.name, self.op.as_str(), self.value)
    }
}

/// A matcher with its regex compiled.
pub(crate) struct CompiledMatcher {
    pub(crate) name: String,
    pub(crate) kind: MatchKind,
}

pub(crate) enum MatchKind {
    Eq(String),
    Ne(String),
    Re(regex::Regex),
    Nre(regex::Regex),
}

/// Largest compiled regex we accept (bytes of regex program); guards against absurd input.
const REGEX_SIZE_LIMIT: usize = 1 << 20;

impl CompiledMatcher {
    pub(crate) fn compile(m: &Matcher) -> Result<CompiledMatcher> {
        let re = |v: &str| {
            regex::RegexBuilder::new(&format!("^(?:{v})$"))
                .size_limit(REGEX_SIZE_LIMIT)
                .build()
                .map_err(|e| Error::InvalidSelector(format!("regex {v:?}: {e}")))
        };
        let kind = match m.op {
            MatchOp::Eq => MatchKind::Eq(m.value.clone()),
            MatchOp::Ne => MatchKind::Ne(m.value.clone()),
            MatchOp::Re => MatchKind::Re(re(&m.value)?),
            MatchOp::Nre => MatchKind::Nre(re(&m.value)?),
        };
        Ok(CompiledMatcher {
            name: m.name.clone(),
            kind,
        })
    }

    /// Does `value` (`""` when the label is absent) satisfy the matcher?
    pub(crate) fn matches(&self, value: &str) -> bool {
        match &self.kind {
            MatchKind::Eq(v) => v == value,
            MatchKind::Ne(v) => v != value,
            MatchKind::Re(r) => r.is_match(value),
            MatchKind::Nre(r) => !r.is_match(value),
        }
    }

    /// Does the matcher match series lacking the label?
    pub(crate) fn matches_empty(&self) -> bool {
        self.matches("")
    }
}

/// Parses a PromQL series selector: `metric`, `metric{l="v",k=~"a.*"}` or `{__name__="m"}`.
///
/// Values are double- or single-quoted strings with `\\`, `\"`, `\'`, `\n`, `\t` escapes.
/// Used by `headroom series --match`.
pub fn parse_selector(s: &str) -> Result<Vec<Matcher>> {
    let mut p = Parser { s, pos: 0 };
    let mut out = Vec::new();
    p.skip_ws();
    let name = p.ident(true);
    if !name.is_empty() {
        validate_metric_name(&name)?;
        out.push(Matcher::metric(name));
    }
    p.skip_ws();
    if p.eat('{') {
        loop {
            p.skip_ws();
            if p.eat('}') {
                break;
            }
            let lname = p.ident(false);
            if lname.is_empty() {
                return Err(p.err("expected a label name"));
            }
            p.skip_ws();
            let op = if p.eat_str("=~") {
                MatchOp::Re
            } else if p.eat_str("!~") {
                MatchOp::Nre
            } else if p.eat_str("!=") {
                MatchOp::Ne
            } else if p.eat('=') {
                MatchOp::Eq
            } else {
                return Err(p.err("expected one of = != =~ !~"));
            };
            p.skip_ws();
            let value = p.string()?;
            let m = Matcher::new(lname, op, value);
            // Compile once here so a bad regex is reported at parse time.
            CompiledMatcher::compile(&m)?;
            out.push(m);
            p.skip_ws();
            if p.eat(',') {
                continue;
            }
            p.skip_ws();
            if p.eat('}') {
                break;
            }
            return Err(p.err("expected , or }"));
        }
    }
    p.skip_ws();
    if p.pos != s.len() {
        return Err(p.err("unexpected trailing input"));
    }
    if out.is_empty() {
        return Err(Error::InvalidSelector("empty selector".into()));
    }
    Ok(out)
}

struct Parser<'a> {
    s: &'a str,
    pos: usize,
}

impl Parser<'_> {
    fn rest(&self) -> &str {
        &self.s[self.pos..]
    }
    fn err(&self, what: &str) -> Error {
        Error::InvalidSelector(format!("{what} at byte {} of {:?}", self.pos, self.s))
    }
    fn skip_ws(&mut self) {
        let trimmed = self.rest().trim_start();
        self.pos = self.s.len() - trimmed.len();
    }
    fn eat(&mut self, c: char) -> bool {
        if self.rest().starts_with(c) {
            self.pos += c.len_utf8();
            true
        } else {
            false
        }
    }
    fn eat_str(&mut self, t: &str) -> bool {
        if self.rest().starts_with(t) {
            self.pos += t.len();
            true
        } else {
            false
        }
    }
    fn ident(&mut self, metric: bool) -> String {
        let start = self.pos;
        for (i, c) in self.rest().char_indices() {
            let ok = if i == 0 {
                is_name_start(c) || (metric && c == ':')
            } else {
                is_name_char(c) || (metric && c == ':')
            };
            if !ok {
                self.pos = start + i;
                return self.s[start..self.pos].to_string();
            }
        }
        self.pos = self.s.len();
        self.s[start..].to_string()
    }
    fn string(&mut self) -> Result<String> {
        let quote = match self.rest().chars().next() {
            Some(q @ ('"' | '\'')) => q,
            _ => return Err(self.err("expected a quoted string")),
        };
        self.pos += 1;
        let mut out = String::new();
        let mut chars = self.rest().char_indices();
        while let Some((i, c)) = chars.next() {
            if c == quote {
                self.pos += i + 1;
                return Ok(out);
            }
            if c == '\\' {
                match chars.next() {
                    Some((_, 'n')) => out.push('\n'),
                    Some((_, 't')) => out.push('\t'),
                    Some((_, e @ ('\\' | '"' | '\''))) => out.push(e),
                    // Keep unknown escapes verbatim so regexes like `\d` survive.
                    Some((_, e)) => {
                        out.push('\\');
                        out.push(e);
                    }
                    None => break,
                }
            } else {
                out.push(c);
            }
        }
        Err(self.err("unterminated string"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_sorted_and_validated() {
        let l = Labels::new([("pod", "a"), ("namespace", "ns"), ("empty", "")]).unwrap();
        assert_eq!(
            l.iter().collect::<Vec<_>>(),
            vec![("namespace", "ns"), ("pod", "a")]
        );
        assert_eq!(l.get("pod"), Some("a"));
        assert_eq!(l.get("empty"), None);
        assert!(Labels::new([("a", "1"), ("a", "2")]).is_err());
        assert!(Labels::new([("__name__", "x")]).is_err());
        assert!(Labels::new([("1bad", "x")]).is_err());
        assert!(Labels::new([("bad-name", "x")]).is_err());
        assert!(Labels::new([("a".repeat(MAX_NAME_LEN + 1), "x".to_string())]).is_err());
        assert!(Labels::new([("a".to_string(), "x".repeat(MAX_VALUE_LEN + 1))]).is_err());
        let many: Vec<(String, String)> = (0..=MAX_LABELS)
            .map(|i| (format!("l{i}"), "v".to_string()))
            .collect();
        assert!(Labels::new(many).is_err());
        assert!(validate_metric_name("node:cpu_total").is_ok());
        assert!(validate_metric_name("").is_err());
        assert!(validate_metric_name("a b").is_err());
    }

    #[test]
    fn selector_parsing() {
        let m = parse_selector(r#"container_memory_working_set_bytes{namespace="a",pod=~"web-.*", node!='n1',c!~"x\"y"}"#).unwrap();
        assert_eq!(m.len(), 5);
        assert_eq!(m[0], Matcher::metric("container_memory_working_set_bytes"));
        assert_eq!(m[2], Matcher::new("pod", MatchOp::Re, "web-.*"));
        assert_eq!(m[3], Matcher::new("node", MatchOp::Ne, "n1"));
        assert_eq!(m[4], Matcher::new("c", MatchOp::Nre, "x\"y"));
        assert_eq!(parse_selector("up").unwrap(), vec![Matcher::metric("up")]);
        assert_eq!(
            parse_selector(r#"{__name__="up",}"#).unwrap(),
            vec![Matcher::new("__name__", MatchOp::Eq, "up")]
        );
        assert_eq!(parse_selector(r#"x{a=~"\d+"}"#).unwrap()[1].value, r"\d+");
        for bad in [
            "",
            "{}",
            "x{",
            "x{a}",
            "x{a=b}",
            "x{a=\"b\"",
            "x y",
            "x{a=~\"(\"}",
        ] {
            assert!(parse_selector(bad).is_err(), "{bad:?} should fail");
        }
    }

    #[test]
    fn matcher_semantics() {
        let c = |op, v: &str| CompiledMatcher::compile(&Matcher::new("a", op, v)).unwrap();
        assert!(c(MatchOp::Eq, "").matches_empty());
        assert!(c(MatchOp::Ne, "x").matches_empty());
        assert!(c(MatchOp::Re, "a|b").matches("b"));
        assert!(!c(MatchOp::Re, "a|b").matches("ab"));
        assert!(c(MatchOp::Nre, "a.*").matches("ba"));
    }
}
