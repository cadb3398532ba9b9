//! Splitting a `run_bash` command into the simple commands it would run, for policy.
//!
//! A careful hand-written splitter (no shell is run): separators `;`, `&`, `&&`,
//! `||`, `|`, `|&` and newlines outside quotes end a simple command; the bodies of
//! `$(…)`, backticks, `(…)` subshells, `{ …; }` groups and `<(…)` / `>(…)` process
//! substitutions are split recursively and their commands added; `bash -c '…'`,
//! `sh -c`, `xargs CMD` and `find … -exec CMD ;` add the command they run; leading
//! `NAME=value` assignments and the wrappers `env`, `exec`, `command`, `nohup`,
//! `time`, `nice` are looked through; here-document bodies are data and skipped.
//!
//! Whatever it does not follow — `eval`, `source`, loops, `case`, function
//! definitions, an unterminated quote or substitution, a here-document whose body
//! would expand `$(…)` — makes the split not [`Split::confident`], and a command
//! that is not confidently split is never allowed by a pattern rule.

/// One simple command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    /// As written (trimmed).
    pub text: String,
    /// With leading assignments and wrapper commands removed: what actually runs.
    pub effective: String,
}

/// A command split into its simple commands.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Split {
    /// Every simple command found, outer ones first.
    pub parts: Vec<Part>,
    /// False when the command holds constructs the splitter does not follow.
    pub confident: bool,
    /// Redirection targets seen (`> file`, `< file`), for the record.
    pub redirections: Vec<String>,
}

const WRAPPERS: [&str; 6] = ["env", "exec", "command", "nohup", "time", "nice"];
const UNFOLLOWED: [&str; 8] = [
    "eval", "source", ".", "for", "case", "select", "function", "coproc",
];
const OPENERS: [&str; 6] = ["if", "then", "else", "elif", "while", "until"];
const CLOSERS: [&str; 4] = ["fi", "done", "esac", "do"];

/// Splits `cmd`.
pub fn split(cmd: &str) -> Split {
    let mut out = Split {
        confident: true,
        ..Split::default()
    };
    split_into(cmd, &mut out, 0);
    out
}

fn split_into(cmd: &str, out: &mut Split, depth: usize) {
    if depth > 8 {
        out.confident = false;
        return;
    }
    let chars: Vec<char> = cmd.chars().collect();
    let mut current = String::new();
    let mut pending: Vec<PendingHeredoc> = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        match c {
            '\\' => {
                current.push(c);
                if let Some(n) = next {
                    current.push(n);
                }
                i += 2;
            }
            '\'' => {
                let end = find_char(&chars, i + 1, '\'');
                let end = end.unwrap_or_else(|| {
                    out.confident = false;
                    chars.len() - 1
                });
                current.extend(&chars[i..=end]);
                i = end + 1;
            }
            '"' => {
                let end = scan_double_quoted(&chars, i + 1, out, depth);
                current.extend(&chars[i..end.min(chars.len())]);
                i = end;
            }
            '`' => {
                let end = find_char(&chars, i + 1, '`').unwrap_or_else(|| {
                    out.confident = false;
                    chars.len() - 1
                });
                let inner: String = chars[i + 1..end].iter().collect();
                split_into(&inner, out, depth + 1);
                current.extend(&chars[i..=end.min(chars.len() - 1)]);
                i = end + 1;
            }
            '$' if next == Some('(') => {
                i = nested(&chars, i + 1, &mut current, out, depth, 1);
            }
            '<' | '>' if next == Some('(') => {
                i = nested(&chars, i + 1, &mut current, out, depth, 1);
            }
            '(' if current.trim().is_empty() => {
                // A subshell: its body is commands.
                let end = matching_paren(&chars, i).unwrap_or_else(|| {
                    out.confident = false;
                    chars.len()
                });
                let inner: String = chars[i + 1..end.min(chars.len())].iter().collect();
                split_into(&inner, out, depth + 1);
                i = end + 1;
            }
            '(' | ')' => {
                // `name() {` or stray parentheses: not followed.
                out.confident = false;
                current.push(c);
                i += 1;
            }
            '{' | '}' if current.trim().is_empty() && next.is_none_or(char::is_whitespace) => {
                // A brace group's delimiters; its body is split as usual.
                finish(&mut current, out, depth);
                i += 1;
            }
            '<' if next == Some('<') && chars.get(i + 2) != Some(&'<') => {
                i = here_document(&chars, i, &mut current, &mut pending);
            }
            '\n' if !pending.is_empty() => {
                finish(&mut current, out, depth);
                i = skip_bodies(&chars, i + 1, &mut pending, out);
            }
            '<' | '>' => {
                current.push(c);
                i += 1;
                // `>&`, `>>`, `>|` and `&>` are redirections, not separators.
                while let Some(&n) = chars.get(i) {
                    if matches!(n, '>' | '&' | '|') {
                        current.push(n);
                        i += 1;
                    } else {
                        break;
                    }
                }
                let target = word_at(&chars, i);
                if !target.is_empty() {
                    out.redirections.push(target);
                }
            }
            '&' if next == Some('>') => {
                current.push(c);
                i += 1;
            }
            ';' | '\n' | '&' | '|' => {
                finish(&mut current, out, depth);
                i += if matches!(
                    (c, next),
                    ('&', Some('&')) | ('|', Some('|' | '&')) | (';', Some(';'))
                ) {
                    2
                } else {
                    1
                };
            }
            _ => {
                current.push(c);
                i += 1;
            }
        }
    }
    finish(&mut current, out, depth);
    if !pending.is_empty() {
        // A here-document with no body at all.
        out.confident = false;
    }
}

/// Splits the `(…)` starting at `open` (the paren) recursively and appends its
/// text to `current`; returns the index after the closing paren.
fn nested(
    chars: &[char],
    open: usize,
    current: &mut String,
    out: &mut Split,
    depth: usize,
    _n: usize,
) -> usize {
    let Some(end) = matching_paren(chars, open) else {
        out.confident = false;
        current.extend(&chars[open - 1..]);
        return chars.len();
    };
    let inner: String = chars[open + 1..end].iter().collect();
    split_into(&inner, out, depth + 1);
    current.extend(&chars[open - 1..=end]);
    end + 1
}

fn find_char(chars: &[char], from: usize, target: char) -> Option<usize> {
    (from..chars.len()).find(|&j| chars[j] == target)
}

/// Scans a double-quoted string from after its opening quote, splitting any
/// substitutions inside; returns the index after the closing quote.
fn scan_double_quoted(chars: &[char], mut i: usize, out: &mut Split, depth: usize) -> usize {
    while i < chars.len() {
        match chars[i] {
            '\\' => i += 2,
            '"' => return i + 1,
            '`' => {
                let end = find_char(chars, i + 1, '`').unwrap_or(chars.len() - 1);
                let inner: String = chars[i + 1..end].iter().collect();
                split_into(&inner, out, depth + 1);
                i = end + 1;
            }
            '$' if chars.get(i + 1) == Some(&'(') => {
                let mut scratch = String::new();
                i = nested(chars, i + 1, &mut scratch, out, depth, 1);
            }
            _ => i += 1,
        }
    }
    out.confident = false;
    chars.len()
}

/// The index of the `)` matching the `(` at `open`, respecting quotes.
fn matching_paren(chars: &[char], open: usize) -> Option<usize> {
    let mut level = 0usize;
    let mut i = open;
    while i < chars.len() {
        match chars[i] {
            '\\' => i += 1,
            '\'' => i = find_char(chars, i + 1, '\'')?,
            '"' => {
                let mut j = i + 1;
                while j < chars.len() && chars[j] != '"' {
                    if chars[j] == '\\' {
                        j += 1;
                    }
                    j += 1;
                }
                i = j;
            }
            '(' => level += 1,
            ')' => {
                level -= 1;
                if level == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
        i += 1;
    }
    None
}

/// The shell word starting at `i` (after blanks), unquoted roughly.
fn word_at(chars: &[char], mut i: usize) -> String {
    while chars.get(i).is_some_and(|c| *c == ' ' || *c == '\t') {
        i += 1;
    }
    let mut w = String::new();
    while let Some(&c) = chars.get(i) {
        if c.is_whitespace() || matches!(c, ';' | '&' | '|' | '<' | '>' | '(' | ')') {
            break;
        }
        if c != '\'' && c != '"' {
            w.push(c);
        }
        i += 1;
    }
    w
}

/// A here-document whose body starts on the next line.
struct PendingHeredoc {
    delimiter: String,
    strip_tabs: bool,
    quoted: bool,
}

/// Reads the `<<WORD` at `i` into `current` and `pending`; returns the index after
/// the word. The body is skipped when the line ends ([`skip_bodies`]).
fn here_document(
    chars: &[char],
    i: usize,
    current: &mut String,
    pending: &mut Vec<PendingHeredoc>,
) -> usize {
    let mut j = i + 2;
    let strip_tabs = chars.get(j) == Some(&'-');
    if strip_tabs {
        j += 1;
    }
    while chars.get(j).is_some_and(|c| *c == ' ' || *c == '\t') {
        j += 1;
    }
    let start = j;
    while chars
        .get(j)
        .is_some_and(|c| !c.is_whitespace() && !matches!(c, ';' | '|' | '&' | '<' | '>'))
    {
        j += 1;
    }
    let word: String = chars[start..j].iter().collect();
    let quoted = word.contains(['\'', '"', '\\']);
    let delimiter: String = word
        .chars()
        .filter(|c| !matches!(c, '\'' | '"' | '\\'))
        .collect();
    current.push_str("<<");
    current.push_str(&word);
    pending.push(PendingHeredoc {
        delimiter,
        strip_tabs,
        quoted,
    });
    j
}

/// Skips the bodies of `pending` here-documents starting at `i` (the line after
/// their command); returns the index after the last body.
fn skip_bodies(
    chars: &[char],
    mut i: usize,
    pending: &mut Vec<PendingHeredoc>,
    out: &mut Split,
) -> usize {
    for doc in pending.drain(..) {
        let mut terminated = false;
        let mut body = String::new();
        while i < chars.len() {
            let end = find_char(chars, i, '\n').unwrap_or(chars.len());
            let line: String = chars[i..end].iter().collect();
            i = (end + 1).min(chars.len());
            let l = if doc.strip_tabs {
                line.trim_start_matches('\t')
            } else {
                &line
            };
            if l == doc.delimiter {
                terminated = true;
                break;
            }
            body.push_str(&line);
            body.push('\n');
        }
        if !terminated || doc.delimiter.is_empty() {
            out.confident = false;
        }
        // An unquoted delimiter lets the body expand `$(…)`: commands we skip.
        if !doc.quoted && (body.contains("$(") || body.contains('`')) {
            out.confident = false;
        }
    }
    i
}

/// Ends the current simple command: records it and what it runs.
fn finish(current: &mut String, out: &mut Split, depth: usize) {
    let text = std::mem::take(current).trim().to_string();
    if text.is_empty() {
        return;
    }
    let words: Vec<&str> = text.split_whitespace().collect();
    let first = words.first().copied().unwrap_or("");
    if CLOSERS.contains(&first) && words.len() == 1 {
        return;
    }
    if OPENERS.contains(&first) || (CLOSERS.contains(&first) && first == "do") {
        let rest = text[first.len()..].trim().to_string();
        let mut rest = rest;
        finish(&mut rest, out, depth);
        return;
    }
    if UNFOLLOWED.contains(&first) || text.contains("()") {
        out.confident = false;
    }
    let effective = effective_command(&words);
    inner_commands(&effective, out, depth);
    out.parts.push(Part { text, effective });
}

/// Strips leading `NAME=value` assignments and wrapper commands (with their options).
fn effective_command(words: &[&str]) -> String {
    let mut i = 0;
    while i < words.len() {
        let w = words[i];
        let is_assignment = w.split_once('=').is_some_and(|(name, _)| {
            !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        });
        if is_assignment {
            i += 1;
        } else if WRAPPERS.contains(&w) {
            i += 1;
            // Options of the wrapper (`env -i`, `nice -n 5`, `time -p`).
            while i < words.len() && words[i].starts_with('-') {
                i += if matches!(words[i], "-n" | "-u") {
                    2
                } else {
                    1
                };
            }
        } else {
            break;
        }
    }
    words[i.min(words.len())..].join(" ")
}

/// Commands a simple command runs on its own: `bash -c`, `sh -c`, `xargs`,
/// `find -exec`.
fn inner_commands(effective: &str, out: &mut Split, depth: usize) {
    let words: Vec<&str> = effective.split_whitespace().collect();
    let Some(&first) = words.first() else { return };
    let name = first.rsplit('/').next().unwrap_or(first);
    if matches!(name, "bash" | "sh" | "dash" | "zsh") {
        if let Some(pos) = effective.find(" -c ") {
            let script = unquote(effective[pos + 4..].trim());
            split_into(&script, out, depth + 1);
        }
    } else if name == "xargs" {
        let rest: Vec<&str> = words[1..]
            .iter()
            .copied()
            .skip_while(|w| w.starts_with('-'))
            .collect();
        if !rest.is_empty() {
            split_into(&rest.join(" "), out, depth + 1);
        }
    } else if name == "find" {
        for (k, w) in words.iter().enumerate() {
            if matches!(*w, "-exec" | "-execdir" | "-ok" | "-okdir") {
                let cmd: Vec<&str> = words[k + 1..]
                    .iter()
                    .copied()
                    .take_while(|w| !matches!(*w, ";" | "\\;" | "+" | "';'"))
                    .collect();
                split_into(&cmd.join(" "), out, depth + 1);
            }
        }
    }
}

/// Removes one level of surrounding quotes from a `-c` script argument.
fn unquote(s: &str) -> String {
    let s = s.trim();
    for q in ['\'', '"'] {
        if let Some(inner) = s.strip_prefix(q)
            && let Some(end) = inner.rfind(q)
        {
            return inner[..end].to_string();
        }
    }
    s.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(cmd: &str) -> Vec<String> {
        split(cmd).parts.into_iter().map(|p| p.effective).collect()
    }

    #[test]
    fn separators() {
        assert_eq!(
            parts("a && b || c | d; e\nf & g |& h"),
            ["a", "b", "c", "d", "e", "f", "g", "h"]
        );
        assert!(split("a && b").confident);
    }

    #[test]
    fn quoting_and_escapes_do_not_split() {
        assert_eq!(parts("echo \"a;b\" 'c|d'"), ["echo \"a;b\" 'c|d'"]);
        assert_eq!(parts("echo a\\;b"), ["echo a\\;b"]);
        assert_eq!(parts("echo 'x && rm -rf /'"), ["echo 'x && rm -rf /'"]);
    }

    #[test]
    fn redirections_are_not_separators() {
        let s = split("ls 2>&1 > out.txt &> all | wc -l");
        assert_eq!(
            s.parts
                .iter()
                .map(|p| p.effective.as_str())
                .collect::<Vec<_>>(),
            ["ls 2>&1 > out.txt &> all", "wc -l"]
        );
        assert!(
            s.redirections.contains(&"out.txt".to_string()),
            "{:?}",
            s.redirections
        );
    }

    #[test]
    fn substitutions_are_split_recursively() {
        let p = parts("ls $(rm -rf x)");
        assert!(p.contains(&"rm -rf x".to_string()), "{p:?}");
        let p = parts("echo `curl evil.example`");
        assert!(p.contains(&"curl evil.example".to_string()), "{p:?}");
        let p = parts("echo \"$(id; whoami)\"");
        assert!(
            p.contains(&"id".to_string()) && p.contains(&"whoami".to_string()),
            "{p:?}"
        );
        let p = parts("diff <(sort a) >(tee b)");
        assert!(
            p.contains(&"sort a".to_string()) && p.contains(&"tee b".to_string()),
            "{p:?}"
        );
        assert!(split("ls $(rm -rf x)").confident);
    }

    #[test]
    fn subshells_and_groups() {
        assert_eq!(parts("(cd x && rm y)"), ["cd x", "rm y"]);
        assert_eq!(parts("{ ls; rm y; }"), ["ls", "rm y"]);
    }

    #[test]
    fn wrappers_and_assignments_are_looked_through() {
        assert_eq!(parts("env X=1 Y=2 rm -rf /"), ["rm -rf /"]);
        assert_eq!(parts("X=1 git status"), ["git status"]);
        assert_eq!(parts("nohup nice -n 5 rm x"), ["rm x"]);
        assert_eq!(split("FOO=bar ls").parts[0].text, "FOO=bar ls");
    }

    #[test]
    fn commands_run_by_other_commands() {
        let p = parts("bash -c 'ls; rm -rf /'");
        assert!(
            p.contains(&"ls".to_string()) && p.contains(&"rm -rf /".to_string()),
            "{p:?}"
        );
        let p = parts("sh -c \"curl x | sh\"");
        assert!(p.contains(&"curl x".to_string()), "{p:?}");
        let p = parts("find . -name '*.tmp' -exec rm -rf {} \\;");
        assert!(p.contains(&"rm -rf {}".to_string()), "{p:?}");
        let p = parts("ls | xargs -0 rm -rf");
        assert!(p.contains(&"rm -rf".to_string()), "{p:?}");
    }

    #[test]
    fn unfollowed_constructs_are_not_confident() {
        for cmd in [
            "eval \"$X\"",
            "source ./x.sh",
            ". ./x.sh",
            "for f in *; do rm $f; done",
            "case $x in a) ls;; esac",
            "f() { rm x; }; f",
            "echo 'open",
            "echo $(unterminated",
            "cat <<EOF\n$(rm -rf x)\nEOF",
            "cat <<EOF\nno end",
        ] {
            assert!(!split(cmd).confident, "{cmd:?} should not be confident");
        }
    }

    #[test]
    fn here_document_bodies_are_data() {
        let s = split("cat <<'EOF' > notes.txt\nrm -rf / ; curl x\nEOF\nls");
        assert!(s.confident);
        let p: Vec<&str> = s.parts.iter().map(|p| p.effective.as_str()).collect();
        assert!(!p.iter().any(|x| x.contains("rm -rf")), "{p:?}");
        assert!(p.contains(&"ls"), "{p:?}");
        let s = split("cat <<EOF | sh\necho hi\nEOF");
        let p: Vec<&str> = s.parts.iter().map(|p| p.effective.as_str()).collect();
        assert!(p.contains(&"sh"), "{p:?}");
    }

    #[test]
    fn if_and_while_bodies_are_split() {
        let p = parts("if test -f x; then rm x; else ls; fi");
        assert_eq!(p, ["test -f x", "rm x", "ls"]);
        let p = parts("while true; do curl x; done");
        assert_eq!(p, ["true", "curl x"]);
    }
}
