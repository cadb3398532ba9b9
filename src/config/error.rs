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
            .filter_map(|c| text[from..].find(c.as_str()).map(|i| from + i))
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
}
