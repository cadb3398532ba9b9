//! Hostile text made inert for a page: escaped as the terminal shows it first
//! (control, bidi and invisible characters become visible `\x..`/`\u....`
//! escapes), then left to maud, which escapes `<`, `>`, `&` and quotes for HTML.
//! Also the percent-encoding of ids put in URLs.

use std::borrow::Cow;
use std::fmt::Write as _;

use crate::text::{escape_json, escape_line, escape_text};

/// A one-line field (an id, a tool name, a prompt's start): newlines shown as `\n`.
pub(super) fn line(s: &str) -> Cow<'_, str> {
    escape_line(s)
}

/// Multi-line text (an answer, a tool's output): newlines and tabs kept.
pub(super) fn text(s: &str) -> Cow<'_, str> {
    escape_text(s)
}

/// A JSON value as compact text, every hidden character as a JSON escape.
pub(super) fn json(v: &serde_json::Value) -> String {
    escape_json(&v.to_string()).into_owned()
}

/// `s` as a query value: everything but the unreserved characters
/// percent-encoded, so no id can end the value, add a parameter or a fragment.
/// (Ids the model chose go in a query, never a path: a browser resolves a path
/// segment of `..`, even encoded.)
pub(super) fn url_part(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// The stream a live section follows: the log's events written from now on
/// (`extra`: more of the query, already encoded).
pub(super) fn follow_url(extra: &str) -> String {
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    format!("/v1/events?follow=1&since={}{extra}", url_part(&now))
}

/// A cost in US dollars, or why there is none.
pub(super) fn usd(v: Option<f64>) -> String {
    v.map_or_else(|| "unknown".to_string(), |d| format!("${d:.4}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hidden_characters_become_visible_escapes() {
        assert_eq!(
            line("a\u{202e}b\x1b[31m\u{200b}"),
            "a\\u202eb\\x1b[31m\\u200b"
        );
        assert_eq!(text("one\ntwo\x07"), "one\ntwo\\x07");
    }

    #[test]
    fn url_parts_cannot_leave_their_segment() {
        assert_eq!(url_part("a/../b?c#d e"), "a%2F..%2Fb%3Fc%23d%20e");
        assert_eq!(url_part("toolu_01-x"), "toolu_01-x");
    }
}
