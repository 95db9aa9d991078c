//! A tiny HTML writer whose only way to add text that is not a literal is to escape it, so
//! a pod name, a reason or a message from the cluster can never become markup.

use std::fmt::{self, Display, Write};

/// An HTML document being written.
#[derive(Debug, Default)]
pub(super) struct Html {
    out: String,
}

/// Writes through to a string, escaping `& < > " '`: safe in element content and in
/// double- or single-quoted attribute values.
struct Escaper<'a>(&'a mut String);

impl Write for Escaper<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        for c in s.chars() {
            match c {
                '&' => self.0.push_str("&amp;"),
                '<' => self.0.push_str("&lt;"),
                '>' => self.0.push_str("&gt;"),
                '"' => self.0.push_str("&quot;"),
                '\'' => self.0.push_str("&#39;"),
                c => self.0.push(c),
            }
        }
        Ok(())
    }
}

/// One URL path segment, percent-encoded: everything but `A-Z a-z 0-9 - . _ ~`, and the
/// dots of a segment made only of dots (a browser would resolve `..`).
pub(super) fn encode_segment(s: &str) -> String {
    let all_dots = !s.is_empty() && s.bytes().all(|b| b == b'.');
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        let plain = b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'~');
        if plain || (b == b'.' && !all_dots) {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

impl Html {
    /// Markup: only literals, so nothing from outside can be written unescaped.
    pub(super) fn raw(&mut self, s: &'static str) -> &mut Html {
        self.out.push_str(s);
        self
    }

    /// Text (or an attribute value), escaped; numbers and `format_args!` too.
    pub(super) fn text(&mut self, v: impl Display) -> &mut Html {
        let _ = write!(Escaper(&mut self.out), "{v}");
        self
    }

    /// `<tag>text</tag>` for a literal tag name.
    pub(super) fn el(&mut self, tag: &'static str, v: impl Display) -> &mut Html {
        self.raw("<")
            .raw(tag)
            .raw(">")
            .text(v)
            .raw("</")
            .raw(tag)
            .raw(">")
    }

    /// `<td>text</td>`.
    pub(super) fn td(&mut self, v: impl Display) -> &mut Html {
        self.el("td", v)
    }

    /// `<td class="nw">text</td>`: a cell that does not wrap (names, times).
    pub(super) fn td_nw(&mut self, v: impl Display) -> &mut Html {
        self.raw("<td class=\"nw\">").text(v).raw("</td>")
    }

    /// `<a href="href">text</a>`; `href` is escaped as an attribute value.
    pub(super) fn link(&mut self, href: &str, v: impl Display) -> &mut Html {
        self.raw("<a href=\"")
            .text(href)
            .raw("\">")
            .text(v)
            .raw("</a>")
    }

    /// A horizontal bar filled to `fraction` (clamped to 0..=1), of CSS class `class`
    /// (`ok`, `warn`, `hot`, `score`), followed by `label`.
    pub(super) fn bar(&mut self, fraction: f64, class: &'static str, label: impl Display) {
        let pct = if fraction.is_finite() {
            (fraction * 100.0).clamp(0.0, 100.0)
        } else {
            0.0
        };
        self.raw("<span class=\"bl\"><span class=\"bar\"><span class=\"fill ")
            .raw(class)
            .raw("\" style=\"width:")
            .text(format_args!("{pct:.1}"))
            .raw("%\"></span></span> ")
            .text(label)
            .raw("</span>");
    }

    /// The document.
    pub(super) fn finish(self) -> String {
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup_and_quotes() {
        let mut h = Html::default();
        h.text(r#"<script>alert("x")</script> & 'y'"#)
            .text(" build-42 ✓");
        assert_eq!(
            h.finish(),
            "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &#39;y&#39; build-42 ✓"
        );
        let mut h = Html::default();
        h.el("td", "<b>").link("a\"onmouseover=\"x", 1.5);
        assert_eq!(
            h.finish(),
            "<td>&lt;b&gt;</td><a href=\"a&quot;onmouseover=&quot;x\">1.5</a>"
        );
    }

    #[test]
    fn bars_are_clamped() {
        let mut h = Html::default();
        h.bar(1.7, "hot", "<x>");
        h.bar(f64::NAN, "ok", "");
        let s = h.finish();
        assert!(
            s.contains("width:100.0%") && s.contains("width:0.0%"),
            "{s}"
        );
        assert!(s.contains("&lt;x&gt;"), "{s}");
    }

    #[test]
    fn segments_are_percent_encoded() {
        assert_eq!(encode_segment("build-42.a_b~"), "build-42.a_b~");
        assert_eq!(encode_segment("<a b>/?#"), "%3Ca%20b%3E%2F%3F%23");
        assert_eq!(encode_segment(".."), "%2E%2E");
        assert_eq!(encode_segment("é"), "%C3%A9");
    }
}
