//! Configuration errors: every one names the file, and where it can, the line,
//! column and key, so an operator can fix the file without guessing.

use std::fmt;
use std::path::PathBuf;

/// Where in a file a problem sits (1-based).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Location {
    /// 1-based line number.
    pub line: usize,
    /// 1-based column number, in characters.
    pub column: usize,
}

impl Location {
    /// The location of byte offset `offset` in `text`.
    pub fn of_offset(text: &str, offset: usize) -> Location {
        let offset = offset.min(text.len());
        let before = &text[..text.floor_char_boundary(offset)];
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let column = before[line_start..].chars().count() + 1;
        Location { line, column }
    }
}

/// Why a configuration file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file is missing or unreadable.
    #[error("{}: cannot read: {source}; `harnessd init <DIR>` writes a root with the default files", path.display())]
    Read {
        /// The file that could not be read.
        path: PathBuf,
        /// The underlying I/O error.
        source: std::io::Error,
    },
    /// The file was read but its content is not acceptable.
    #[error("{0}")]
    Invalid(Invalid),
}

/// A syntax, type or semantic error inside a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid {
    /// The file, as given (relative to the root when it is under it).
    pub file: String,
    /// Line and column, when known.
    pub location: Option<Location>,
    /// The dotted key path (`loop.max_turns`), empty when the error is not about one key.
    pub key: String,
    /// What is wrong and, where useful, what to write instead.
    pub message: String,
}

impl fmt::Display for Invalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file)?;
        if let Some(loc) = self.location {
            write!(f, ":{}:{}", loc.line, loc.column)?;
        }
        if !self.key.is_empty() {
            write!(f, ": key `{}`", self.key)?;
        }
        write!(f, ": {}", self.message)
    }
}

impl ConfigError {
    /// Builds an [`ConfigError::Invalid`].
    pub fn invalid(
        file: &str,
        location: Option<Location>,
        key: impl Into<String>,
        message: impl Into<String>,
    ) -> ConfigError {
        ConfigError::Invalid(Invalid {
            file: file.to_string(),
            location,
            key: key.into(),
            message: message.into(),
        })
    }

    /// The line/column of the error, when known.
    pub fn location(&self) -> Option<Location> {
        match self {
            ConfigError::Read { .. } => None,
            ConfigError::Invalid(i) => i.location,
        }
    }
}

/// A serde_json error in `text` as a located [`ConfigError`]. serde_json reports
/// a missing or extra comma where it noticed it — at the next token, often on
/// the next line — so those point back at the value the comma belongs after;
/// a syntax error names the object it is in, not serde's `?` placeholder.
pub fn json_error(text: &str, file: &str, path: &str, e: &serde_json::Error) -> ConfigError {
    // serde_json appends " at line L column C"; the location is reported apart.
    let full = e.to_string();
    let message = full.split(" at line ").next().unwrap_or(&full).to_string();
    let mut location = (e.line() > 0).then(|| Location {
        line: e.line(),
        column: e.column(),
    });
    let comma = message.starts_with("expected `,`") || message == "trailing comma";
    if let (true, Some(at)) = (comma, location) {
        let offset = offset_of(text, at);
        let before = text[..offset].trim_end_matches(char::is_whitespace);
        let culprit = if message == "trailing comma" {
            before.len().saturating_sub(1)
        } else {
            before.len()
        };
        location = Some(Location::of_offset(text, culprit));
    }
    let key = path
        .split('.')
        .filter(|s| !s.is_empty() && *s != "?")
        .collect::<Vec<_>>()
        .join(".");
    ConfigError::invalid(file, location, key, message)
}

/// The byte offset of a 1-based line and column (a column counts characters;
/// serde_json's points at the character it stopped on).
fn offset_of(text: &str, at: Location) -> usize {
    let line_start: usize = text
        .split_inclusive('\n')
        .take(at.line.saturating_sub(1))
        .map(str::len)
        .sum();
    let line = &text[line_start.min(text.len())..];
    let column = line
        .char_indices()
        .nth(at.column.saturating_sub(1))
        .map_or(line.len(), |(i, _)| i);
    line_start + column
}

/// Finds where `key_path` (dotted) is written in a TOML or JSON text, for semantic
/// errors found after parsing. A best effort: it walks the path's segments in order,
/// so `loop.max_turns` finds `max_turns` after `[loop]`.
pub fn find_key(text: &str, key_path: &str) -> Option<Location> {
    let mut from = 0;
    let mut found = None;
    for segment in key_path.split('.') {
        let segment = segment.split('[').next().unwrap_or(segment);
        let candidates = [
            format!("\"{segment}\""),
            format!("[{segment}]"),
            // A dotted table header: `[pricing."model"]`.
            format!("[{segment}."),
            format!("{segment} ="),
            format!("{segment}="),
        ];
        let hit = candidates
            .iter()
            .filter_map(|c| uncommented(text, from, c))
            .min()?;
        found = Some(hit);
        from = hit + 1;
    }
    found.map(|offset| {
        // Point at the key itself, not the quote.
        let skip = usize::from(text[offset..].starts_with(['"', '[']));
        Location::of_offset(text, offset + skip)
    })
}

/// The first `pattern` in `text` from `from` that is not in a comment: the
/// generated files show unset keys as commented examples (`# key = …`), and an
/// error about the key set below one points at the one set.
fn uncommented(text: &str, from: usize, pattern: &str) -> Option<usize> {
    text[from..]
        .match_indices(pattern)
        .map(|(i, _)| from + i)
        .find(|&at| {
            let line_start = text[..at].rfind('\n').map_or(0, |n| n + 1);
            !text[line_start..at].contains('#')
        })
}

/// Finds where the JSON value at `key_path` (dotted, with `[i]` for an item of an
/// array: `tools.ask[1]`) starts, through a real parse of `text`: an error about
/// one rule points at the rule, not at its list. Falls back to [`find_key`] (the
/// list's key) when the text does not parse or the path is not there.
pub fn find_json_value(text: &str, key_path: &str) -> Option<Location> {
    use jsonc_parser::ast::Value;
    use jsonc_parser::common::Ranged as _;
    let parsed = jsonc_parser::parse_to_ast(text, &Default::default(), &Default::default());
    let found = parsed.ok().and_then(|parsed| {
        let mut value = parsed.value?;
        for segment in key_path.split('.') {
            let (name, index) = match segment.split_once('[') {
                Some((name, i)) => (name, Some(i.strip_suffix(']')?.parse::<usize>().ok()?)),
                None => (segment, None),
            };
            let Value::Object(mut object) = value else {
                return None;
            };
            let at = object
                .properties
                .iter()
                .position(|p| p.name.as_str() == name)?;
            value = object.properties.swap_remove(at).value;
            if let Some(i) = index {
                let Value::Array(mut array) = value else {
                    return None;
                };
                if i >= array.elements.len() {
                    return None;
                }
                value = array.elements.swap_remove(i);
            }
        }
        Some(value.start())
    });
    match found {
        Some(offset) => Some(Location::of_offset(text, offset)),
        None => find_key(text, key_path),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_to_line_and_column() {
        let text = "a = 1\nbé = 2\n";
        assert_eq!(
            Location::of_offset(text, 0),
            Location { line: 1, column: 1 }
        );
        assert_eq!(
            Location::of_offset(text, 6),
            Location { line: 2, column: 1 }
        );
        assert_eq!(
            Location::of_offset(text, 9),
            Location { line: 2, column: 3 }
        );
    }

    fn json(text: &str) -> String {
        let mut de = serde_json::Deserializer::from_str(text);
        let err = serde_path_to_error::deserialize::<_, serde_json::Value>(&mut de)
            .expect_err("bad json");
        json_error(text, "s.json", &err.path().to_string(), err.inner()).to_string()
    }

    #[test]
    fn json_comma_errors_point_at_the_value_they_follow() {
        let missing = "{\n  \"a\": {\n    \"b\": false\n    \"c\": 1\n  }\n}\n";
        assert_eq!(json(missing), "s.json:3:15: key `a`: expected `,` or `}`");
        let trailing = "{\n  \"a\": { \"b\": 1,\n  }\n}\n";
        assert_eq!(json(trailing), "s.json:2:16: key `a`: trailing comma");
        let doubled = "{\n  \"a\": 1,,\n}";
        assert_eq!(json(doubled), "s.json:2:10: key must be a string");
    }

    #[test]
    fn find_key_walks_the_path() {
        let toml = "[api]\nmax_turns = 9\n[loop]\nmax_turns = 0\n";
        assert_eq!(
            find_key(toml, "loop.max_turns"),
            Some(Location { line: 4, column: 1 })
        );
        let json = "{\n  \"output\": {\n    \"max_chars\": 0\n  }\n}";
        assert_eq!(
            find_key(json, "output.max_chars"),
            Some(Location { line: 3, column: 6 })
        );
        assert_eq!(find_key(json, "nope"), None);
    }

    #[test]
    fn find_json_value_points_at_an_item_of_an_array() {
        let json = "{\n  \"tools\": {\n    \"ask\": [\"a\",\n      \"b(\"]\n  }\n}";
        assert_eq!(
            find_json_value(json, "tools.ask[1]"),
            Some(Location { line: 4, column: 7 })
        );
        assert_eq!(
            find_json_value(json, "tools.ask"),
            Some(Location {
                line: 3,
                column: 12
            })
        );
        // Past the end, or not JSON: the key, as find_key finds it.
        assert_eq!(
            find_json_value(json, "tools.ask[5]"),
            Some(Location { line: 3, column: 6 })
        );
    }
}
