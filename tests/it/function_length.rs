//! No function in `src/` is longer than [`MAX_LINES`] lines (`STYLE.md`
//! habit 14), checked on the source so the rule holds from now on.
//!
//! The scan is lexical, not a parser: comments, string, raw-string and char
//! literals are blanked out first (so a `{` or `fn` inside them counts for
//! nothing), then every `fn name` item is measured from the line of its `fn`
//! keyword to the line of the brace that closes its body. Bodiless
//! declarations (`fn f();` in a trait) and function-pointer types (`fn(u8)`)
//! are skipped. Test code inside `src/` (`#[cfg(test)]` modules, `tests.rs`
//! files) is measured like the rest: long tests are as hard to read as long
//! code.
//!
//! [`KNOWN_EXCEPTIONS`] lists functions being shortened elsewhere. An exception
//! that is already short does not fail the test, so the branch that splits the
//! function can drop its entry without coordinating with this one.

use crate::common::{rust_files, src_dir};

/// The longest a function may be, counting its signature and closing brace.
const MAX_LINES: usize = 80;

/// Functions allowed over [`MAX_LINES`] for now: (file under `src/`, fn name).
const KNOWN_EXCEPTIONS: &[(&str, &str)] = &[];

/// One measured function.
#[derive(Debug)]
struct FnSpan {
    name: String,
    /// 1-based line of the `fn` keyword.
    line: usize,
    /// Lines from the `fn` keyword to the closing brace, both included.
    len: usize,
}

/// A character that can continue an identifier or keyword.
fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Length of the raw string literal starting at `i` (`r"…"`, `r#"…"#`, with an
/// optional `b`/`c` prefix already consumed by the caller), or `None` if `i`
/// does not start one.
fn raw_string_len(s: &[char], i: usize) -> Option<usize> {
    if s.get(i) != Some(&'r') {
        return None;
    }
    let mut j = i + 1;
    let mut hashes = 0;
    while s.get(j) == Some(&'#') {
        hashes += 1;
        j += 1;
    }
    if s.get(j) != Some(&'"') {
        return None;
    }
    j += 1;
    while j < s.len() {
        if s[j] == '"' && (1..=hashes).all(|k| s.get(j + k) == Some(&'#')) {
            return Some(j + 1 + hashes - i);
        }
        j += 1;
    }
    Some(s.len() - i)
}

/// Length of the literal or comment starting at `i`, if one does. The caller
/// blanks it out.
fn skip_len(s: &[char], i: usize) -> Option<usize> {
    let c = s[i];
    let next = s.get(i + 1).copied();
    let prev_ident = i > 0 && is_ident(s[i - 1]);
    if c == '/' && next == Some('/') {
        let end = s[i..]
            .iter()
            .position(|&c| c == '\n')
            .unwrap_or(s.len() - i);
        return Some(end);
    }
    if c == '/' && next == Some('*') {
        // Block comments nest in Rust.
        let (mut j, mut depth) = (i + 2, 1);
        while j < s.len() && depth > 0 {
            if s[j] == '/' && s.get(j + 1) == Some(&'*') {
                depth += 1;
                j += 2;
            } else if s[j] == '*' && s.get(j + 1) == Some(&'/') {
                depth -= 1;
                j += 2;
            } else {
                j += 1;
            }
        }
        return Some(j - i);
    }
    if !prev_ident {
        if let Some(n) = raw_string_len(s, i) {
            return Some(n);
        }
        if matches!(c, 'b' | 'c')
            && let Some(n) = raw_string_len(s, i + 1)
        {
            return Some(n + 1);
        }
    }
    if c == '"' {
        let mut j = i + 1;
        while j < s.len() && s[j] != '"' {
            j += if s[j] == '\\' { 2 } else { 1 };
        }
        return Some(j + 1 - i);
    }
    if c == '\'' {
        // A char literal, or a lifetime/label (`'a`), which is left alone.
        if next == Some('\\') {
            // Past the escaped character, so `'\''` ends at its last quote.
            let mut j = i + 3;
            while j < s.len() && s[j] != '\'' {
                j += 1;
            }
            return Some(j + 1 - i);
        }
        if s.get(i + 2) == Some(&'\'') {
            return Some(3);
        }
    }
    None
}

/// `text` with comments and literals replaced by spaces, newlines kept so line
/// numbers stay right.
fn blank_literals(text: &str) -> Vec<char> {
    let mut s: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < s.len() {
        match skip_len(&s, i) {
            Some(n) => {
                let end = (i + n).min(s.len());
                for c in &mut s[i..end] {
                    if *c != '\n' {
                        *c = ' ';
                    }
                }
                i = end;
            }
            None => i += 1,
        }
    }
    s
}

/// Every `fn` item with a body in `text`.
fn functions(text: &str) -> Vec<FnSpan> {
    let s = blank_literals(text);
    let line_at = |i: usize| s[..i].iter().filter(|&&c| c == '\n').count() + 1;
    let mut out = Vec::new();
    for i in 0..s.len().saturating_sub(2) {
        let keyword = s[i] == 'f'
            && s[i + 1] == 'n'
            && !is_ident(s[i + 2])
            && (i == 0 || !is_ident(s[i - 1]));
        if !keyword {
            continue;
        }
        let mut j = i + 2;
        while j < s.len() && s[j].is_whitespace() {
            j += 1;
        }
        let start = j;
        while j < s.len() && is_ident(s[j]) {
            j += 1;
        }
        if j == start {
            continue; // `fn(…)`: a function-pointer type
        }
        let name: String = s[start..j].iter().collect();
        // The body opens at the first `{` after the signature, unless a `;`
        // ends a bodiless declaration first.
        let Some(open) = (j..s.len()).find(|&k| s[k] == '{' || s[k] == ';') else {
            continue;
        };
        if s[open] == ';' {
            continue;
        }
        let mut depth = 0usize;
        let mut close = open;
        for (k, &c) in s.iter().enumerate().skip(open) {
            if c == '{' {
                depth += 1;
            } else if c == '}' {
                depth -= 1;
                if depth == 0 {
                    close = k;
                    break;
                }
            }
        }
        let line = line_at(i);
        out.push(FnSpan {
            name,
            line,
            len: line_at(close) - line + 1,
        });
    }
    out
}

#[test]
fn no_function_in_src_is_over_the_limit() {
    let src = src_dir();
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let mut long = Vec::new();
    for file in &files {
        let rel = file.strip_prefix(&src).expect("file under src");
        let rel = rel.to_string_lossy().replace('\\', "/");
        let text = std::fs::read_to_string(file).expect("read source file");
        for f in functions(&text) {
            let excepted = KNOWN_EXCEPTIONS
                .iter()
                .any(|&(path, name)| path == rel && name == f.name);
            if f.len > MAX_LINES && !excepted {
                long.push(format!(
                    "src/{rel}:{} fn {} is {} lines",
                    f.line, f.name, f.len
                ));
            }
        }
    }
    assert!(
        long.is_empty(),
        "functions over {MAX_LINES} lines (split them along their seams):\n{}",
        long.join("\n")
    );
}

#[test]
fn the_scanner_measures_what_it_should() {
    let text = r##"
fn one() {
    let s = "fn fake() {";
    let c = '{';
    let q = '\'';
    let r = r#"}"#;
    // fn commented() {
    let l: &'static str = "";
}
trait T {
    fn declared(&self);
}
fn two(f: fn(u8) -> u8) -> u8 {
    /* { nested /* } */ */
    f(1)
}
"##;
    let found = functions(text);
    let got: Vec<(&str, usize, usize)> = found
        .iter()
        .map(|f| (f.name.as_str(), f.line, f.len))
        .collect();
    assert_eq!(got, vec![("one", 2, 8), ("two", 13, 4)]);
}
