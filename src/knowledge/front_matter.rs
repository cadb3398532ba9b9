//! A `SKILL.md`'s front matter: the YAML block between a first line `---` and
//! the next line `---`, holding `name` and `description` (the Agent Skills
//! convention; its other keys — `license`, `allowed-tools`, `metadata`,
//! `compatibility` … — are accepted and ignored). Pure: it parses text it is
//! given, so hostile input is tested on literals.

use serde::Deserialize;

/// Longest skill name, in characters.
pub const MAX_NAME_CHARS: usize = 64;
/// Longest description, in characters.
pub const MAX_DESCRIPTION_CHARS: usize = 1024;
/// Largest front matter (the YAML between the fences), in bytes: room for the
/// convention's keys, and a bound on what a hostile file makes the parser do.
pub const MAX_FRONT_MATTER_BYTES: usize = 8 * 1024;
/// Deepest nesting of flow collections (`[`, `{`) in the front matter: the
/// parser's time grows with depth, even for keys it ignores.
pub const MAX_FLOW_DEPTH: usize = 32;

/// What a skill says of itself, and where its body starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrontMatter {
    /// `name`: lowercase letters, digits and single hyphens, at most
    /// [`MAX_NAME_CHARS`].
    pub name: String,
    /// `description`, as written (non-empty, at most [`MAX_DESCRIPTION_CHARS`]).
    pub description: String,
    /// The line of `name:` in the file.
    pub name_line: usize,
    /// Byte offset of the body (the text after the closing `---` line).
    pub body_start: usize,
}

/// Why a front matter is refused; every variant holds the line (1-based, in the
/// file) where the problem is ([`FrontMatterError::line`]), which the caller
/// prints with the file's name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrontMatterError {
    /// The file does not start with a `---` line.
    #[error(
        "no front matter: the file must start with a line `---`, then `name:` and `description:`, then a line `---`"
    )]
    Missing {
        /// Where it was looked for.
        line: usize,
    },
    /// The opening `---` is never closed.
    #[error("the front matter opened on line 1 is never closed by a line `---`")]
    Unclosed {
        /// The file's last line.
        line: usize,
    },
    /// The YAML does not parse, or a key has the wrong type or is missing.
    #[error("front matter: {message}")]
    Yaml {
        /// Where the parser stopped.
        line: usize,
        /// What it said.
        message: String,
    },
    /// A key parses but its value breaks the convention.
    #[error("key `{key}`: {message}")]
    Key {
        /// The key's line.
        line: usize,
        /// `name` or `description`.
        key: &'static str,
        /// What is wrong with it.
        message: String,
    },
}

impl FrontMatterError {
    /// The line the error is about.
    pub fn line(&self) -> usize {
        match self {
            FrontMatterError::Missing { line }
            | FrontMatterError::Unclosed { line }
            | FrontMatterError::Yaml { line, .. }
            | FrontMatterError::Key { line, .. } => *line,
        }
    }
}

/// The keys read; any other key is ignored (serde skips it).
#[derive(Deserialize)]
struct Raw {
    name: String,
    description: String,
}

/// Whether `line` (without its newline) is a front matter fence.
fn is_fence(line: &str) -> bool {
    line.trim_end_matches(['\r', ' ', '\t']) == "---"
}

/// Parses the front matter of `text` (a whole `SKILL.md`). A leading UTF-8 byte
/// order mark is skipped; lines may end in `\n` or `\r\n`.
pub fn parse(text: &str) -> Result<FrontMatter, FrontMatterError> {
    let bom = if text.starts_with('\u{feff}') { 3 } else { 0 };
    let mut lines = text[bom..].split_inclusive('\n');
    let first = lines.next().unwrap_or("");
    if !is_fence(first.trim_end_matches('\n')) {
        return Err(FrontMatterError::Missing { line: 1 });
    }
    let yaml_start = bom + first.len();
    let mut offset = yaml_start;
    let mut line = 1;
    let mut close = None;
    for l in lines {
        line += 1;
        if is_fence(l.trim_end_matches('\n')) {
            close = Some((offset, offset + l.len()));
            break;
        }
        offset += l.len();
    }
    let Some((yaml_end, body_start)) = close else {
        return Err(FrontMatterError::Unclosed { line });
    };
    let yaml = &text[yaml_start..yaml_end];
    if yaml.len() > MAX_FRONT_MATTER_BYTES {
        return Err(FrontMatterError::Yaml {
            line: 1,
            message: format!(
                "{} bytes; a front matter holds at most {MAX_FRONT_MATTER_BYTES}",
                yaml.len()
            ),
        });
    }
    if let Some(line) = too_deep(yaml) {
        return Err(FrontMatterError::Yaml {
            line: line + 1,
            message: format!("nested deeper than {MAX_FLOW_DEPTH} levels"),
        });
    }
    let raw: Raw = serde_yaml_ng::from_str(yaml).map_err(|e| FrontMatterError::Yaml {
        // The YAML starts on the file's line 2; an error without a place (an
        // empty block) is put on the opening fence.
        line: e.location().map_or(1, |l| l.line() + 1),
        message: without_location(&e),
    })?;
    let key_line = |key: &str| key_line(yaml, key).map_or(1, |l| l + 1);
    check_name(&raw.name).map_err(|message| FrontMatterError::Key {
        line: key_line("name"),
        key: "name",
        message,
    })?;
    check_description(&raw.description).map_err(|message| FrontMatterError::Key {
        line: key_line("description"),
        key: "description",
        message,
    })?;
    Ok(FrontMatter {
        name_line: key_line("name"),
        name: raw.name,
        description: raw.description,
        body_start,
    })
}

/// The parser's message without its own place (`at line L column C`, counted
/// in the YAML block, not the file): the caller names the file's line.
fn without_location(e: &serde_yaml_ng::Error) -> String {
    let text = e.to_string();
    match (e.location(), text.rfind(" at line ")) {
        (Some(_), Some(at)) => text[..at].to_string(),
        _ => text,
    }
}

/// The line (1-based, within `yaml`) where flow collections nest past
/// [`MAX_FLOW_DEPTH`]. Brackets inside quoted strings count too: that only refuses
/// a front matter no skill needs.
fn too_deep(yaml: &str) -> Option<usize> {
    let mut depth = 0usize;
    let mut line = 1;
    for c in yaml.chars() {
        match c {
            '\n' => line += 1,
            '[' | '{' => {
                depth += 1;
                if depth > MAX_FLOW_DEPTH {
                    return Some(line);
                }
            }
            ']' | '}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    None
}

/// The line (1-based, within `yaml`) of the top-level `key:`.
fn key_line(yaml: &str, key: &str) -> Option<usize> {
    yaml.lines()
        .position(|l| {
            l.strip_prefix(key)
                .is_some_and(|rest| rest.trim_start().starts_with(':'))
        })
        .map(|i| i + 1)
}

/// The convention's name rule: 1 to 64 of `a-z`, `0-9`, `-`, neither starting nor
/// ending with a hyphen, no two hyphens in a row.
pub fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("the name is empty".into());
    }
    if name.chars().count() > MAX_NAME_CHARS {
        return Err(format!(
            "the name is longer than {MAX_NAME_CHARS} characters"
        ));
    }
    let allowed = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-';
    if let Some(bad) = name.chars().find(|c| !allowed(*c)) {
        return Err(format!(
            "{name:?} has {bad:?}: a name is lowercase letters, digits and hyphens"
        ));
    }
    if name.starts_with('-') || name.ends_with('-') || name.contains("--") {
        return Err(format!(
            "{name:?}: a name neither starts nor ends with a hyphen, nor has two in a row"
        ));
    }
    Ok(())
}

fn check_description(description: &str) -> Result<(), String> {
    if description.trim().is_empty() {
        return Err(
            "the description is empty: say what the skill is for and when to load it".into(),
        );
    }
    let n = description.chars().count();
    if n > MAX_DESCRIPTION_CHARS {
        return Err(format!(
            "the description has {n} characters; at most {MAX_DESCRIPTION_CHARS}"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "---\nname: audit-log\ndescription: Read the log.\n---\n# Body\n";

    #[test]
    fn a_good_front_matter_parses_and_the_body_follows_it() {
        let fm = parse(GOOD).unwrap();
        assert_eq!(fm.name, "audit-log");
        assert_eq!(fm.description, "Read the log.");
        assert_eq!(&GOOD[fm.body_start..], "# Body\n");
    }

    #[test]
    fn bom_and_crlf_are_read() {
        let text = "\u{feff}---\r\nname: a\r\ndescription: b\r\n---\r\nbody\r\n";
        let fm = parse(text).unwrap();
        assert_eq!((fm.name.as_str(), fm.description.as_str()), ("a", "b"));
        assert_eq!(&text[fm.body_start..], "body\r\n");
    }

    #[test]
    fn other_convention_keys_are_ignored() {
        let text = "---\nname: x\ndescription: y\nlicense: MIT\nallowed-tools: [a, b]\n\
                    metadata:\n  author: me\n  nested: {deep: [1, {x: 2}]}\ncompatibility: any\n---\n";
        assert_eq!(parse(text).unwrap().name, "x");
    }

    #[test]
    fn missing_and_unclosed_front_matter_name_their_line() {
        assert_eq!(
            parse("# just text\n"),
            Err(FrontMatterError::Missing { line: 1 })
        );
        assert_eq!(parse(""), Err(FrontMatterError::Missing { line: 1 }));
        let e = parse("---\nname: a\ndescription: b\n").unwrap_err();
        assert_eq!(e, FrontMatterError::Unclosed { line: 3 });
        // A fence of four dashes is not a fence.
        assert!(matches!(
            parse("---\nname: a\n----\n"),
            Err(FrontMatterError::Unclosed { .. })
        ));
    }

    #[test]
    fn bad_yaml_names_the_file_line() {
        let e = parse("---\nname: a\ndescription: [unclosed\n---\n").unwrap_err();
        assert!(matches!(e, FrontMatterError::Yaml { .. }), "{e}");
        assert!(e.line() >= 3, "{e}");
        let e = parse("---\nname: a\n---\n").unwrap_err();
        assert!(e.to_string().contains("description"), "{e}");
        let e = parse("---\n---\n").unwrap_err();
        assert!(matches!(e, FrontMatterError::Yaml { .. }), "{e}");
    }

    #[test]
    fn a_name_that_is_not_a_string_is_refused() {
        for text in [
            "---\nname: [a, b]\ndescription: d\n---\n",
            "---\nname: {a: 1}\ndescription: d\n---\n",
            "---\nname: ~\ndescription: d\n---\n",
        ] {
            let e = parse(text).unwrap_err();
            assert_eq!(e.line(), 2, "{text:?}: {e}");
        }
    }

    #[test]
    fn duplicate_keys_are_refused() {
        let e = parse("---\nname: a\nname: b\ndescription: d\n---\n").unwrap_err();
        assert!(e.to_string().contains("name"), "{e}");
        assert!(e.line() >= 2, "{e}");
    }

    #[test]
    fn names_and_descriptions_follow_the_convention() {
        for bad in ["", "Audit", "a_b", "-a", "a-", "a--b", "ä", &"a".repeat(65)] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
        for good in ["a", "audit-log", "x1-2y", &"a".repeat(64)] {
            assert!(check_name(good).is_ok(), "{good:?}");
        }
        let e = parse("---\nname: a\ndescription: \"  \"\n---\n").unwrap_err();
        assert_eq!(e.line(), 3, "{e}");
        let long = format!("---\nname: a\ndescription: {}\n---\n", "x".repeat(1025));
        assert!(parse(&long).unwrap_err().to_string().contains("1025"));
        let e = parse("---\ndescription: d\nname: Bad_Name\n---\n").unwrap_err();
        assert_eq!(e.line(), 3, "{e}");
    }

    #[test]
    fn huge_and_deeply_nested_input_is_refused_not_a_crash() {
        let deep = format!(
            "---\nname: a\ndescription: d\nmetadata: {}{}\n---\n",
            "[".repeat(100_000),
            "]".repeat(100_000)
        );
        let e = parse(&deep).unwrap_err();
        assert!(e.to_string().contains("bytes"), "{e}");
        let deep = format!(
            "---\nname: a\ndescription: d\nmetadata:\n  x: {}{}\n---\n",
            "{a: ".repeat(40),
            "}".repeat(40)
        );
        let e = parse(&deep).unwrap_err();
        assert_eq!(e.line(), 5, "{e}");
        assert!(e.to_string().contains("nested deeper"), "{e}");
        // Alias expansion (a "billion laughs") is bounded by the parser.
        let mut laughs =
            String::from("---\nname: a\ndescription: d\nl0: &l0 [x, x, x, x, x, x, x, x, x]\n");
        for i in 1..10 {
            let refs = vec![format!("*l{}", i - 1); 9].join(", ");
            laughs.push_str(&format!("l{i}: &l{i} [{refs}]\n"));
        }
        laughs.push_str("---\n");
        assert_eq!(parse(&laughs).map(|f| f.name), Ok("a".to_string()));
        let huge = format!("---\nname: a\ndescription: {}\n---\n", "y".repeat(1 << 20));
        assert!(parse(&huge).is_err());
    }
}
