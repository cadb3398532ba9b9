//! The tokenizer behind [`super::analyse`]: one pass over the characters, recursing
//! into substitutions and subshells up to [`MAX_DEPTH`]. It records every simple
//! command it sees and, the first time it meets anything outside the literal
//! subset, why the command is not provable. Indexing is only ever `get(i)`, so no
//! input can make it panic.

use super::normal::{self, Inner};
use super::{Analysis, MAX_DEPTH, SeenCommand};

/// Analyses `src` as a script at `depth`, appending to `out`.
pub(super) fn script(src: &str, depth: usize, out: &mut Analysis) {
    if src.contains('\0') {
        // bash -c stops at the first NUL (and exec refuses one): never provable.
        out.refuse(|| "a NUL character".into());
    }
    let chars: Vec<char> = src.chars().collect();
    let mut lexer = Lexer {
        s: &chars,
        i: 0,
        depth,
        out,
    };
    lexer.script(Term::Eof);
}

/// What ends a script: the end of input, or the `)` of a substitution or subshell.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Term {
    Eof,
    Paren,
}

/// What ended one simple command.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Sep {
    Newline,
    /// `;` or `&`.
    List,
    /// `&&`, `||`, `|`, `|&`: a command must follow.
    Binary,
    /// The `)` of a nested script.
    Close,
    Eof,
}

/// A word after quote removal.
#[derive(Default)]
struct Word {
    value: String,
    /// Any quoting or escaping was used in it.
    quoted: bool,
    /// A leading `NAME=` (or `NAME+=`) written without quotes: an assignment when the
    /// word comes before the command name.
    assignment: bool,
    /// An unquoted `=` was seen (only the first can make an assignment).
    equals: bool,
    /// Nothing in it was refused (no expansion, glob, brace, tilde …).
    literal: bool,
}

impl Word {
    fn is_fd_number(&self) -> bool {
        !self.quoted && !self.value.is_empty() && self.value.chars().all(|c| c.is_ascii_digit())
    }
}

/// A here-document whose body starts after the current line.
struct Heredoc {
    delimiter: String,
    strip_tabs: bool,
    /// Unquoted delimiter: the body expands `$(…)` and backquotes.
    expands: bool,
}

struct Lexer<'s, 'o> {
    s: &'s [char],
    i: usize,
    depth: usize,
    out: &'o mut Analysis,
}

/// Reserved words bash only recognises unquoted in command position. Those that
/// only open or close a compound command are dropped so the command after them is
/// seen; the rest stay in the seen command.
const DROPPED_KEYWORDS: [&str; 13] = [
    "if", "then", "else", "elif", "while", "until", "do", "!", "{", "fi", "done", "esac", "}",
];
/// `time` stays: its options are looked through as a wrapper's.
const KEPT_KEYWORDS: [&str; 8] = [
    "for", "case", "select", "function", "coproc", "time", "[[", "]]",
];

impl Lexer<'_, '_> {
    fn peek(&self) -> Option<char> {
        self.s.get(self.i).copied()
    }

    fn peek_at(&self, k: usize) -> Option<char> {
        self.s.get(self.i.saturating_add(k)).copied()
    }

    fn refuse(&mut self, reason: &str) {
        self.out.refuse(|| reason.to_string());
    }

    fn text(&self, from: usize, to: usize) -> String {
        let to = to.min(self.s.len());
        let from = from.min(to);
        self.s
            .get(from..to)
            .unwrap_or_default()
            .iter()
            .collect::<String>()
            .trim()
            .to_string()
    }

    fn skip_blanks(&mut self) {
        while matches!(self.peek(), Some(' ' | '\t')) {
            self.i += 1;
        }
    }

    /// A list of commands until `term`.
    fn script(&mut self, term: Term) {
        let mut pending: Vec<Heredoc> = Vec::new();
        let mut after_binary = false;
        loop {
            let start = self.i;
            let (words, redirected, end, sep) = self.command(term, &mut pending);
            let empty = words.is_empty() && !redirected;
            if empty {
                match sep {
                    // A blank line, or the line break after `&&` / `|`.
                    Sep::Newline => continue,
                    Sep::List | Sep::Binary => self.refuse("an empty command before a separator"),
                    Sep::Close | Sep::Eof if after_binary => {
                        self.refuse("a command that ends with an operator")
                    }
                    Sep::Close | Sep::Eof => {}
                }
            } else {
                let text = self.text(start, end);
                self.finish(words, redirected, text);
            }
            after_binary = sep == Sep::Binary;
            match sep {
                Sep::Eof => {
                    if term == Term::Paren {
                        self.refuse("an unterminated `(`");
                    }
                    break;
                }
                Sep::Close => break,
                _ => {}
            }
        }
        if !pending.is_empty() {
            self.refuse("a here-document without a body");
        }
    }

    /// One simple command: its words, whether it had redirections, where its text
    /// ends, and what ended it.
    fn command(&mut self, term: Term, pending: &mut Vec<Heredoc>) -> (Vec<Word>, bool, usize, Sep) {
        let mut words: Vec<Word> = Vec::new();
        let mut redirected = false;
        loop {
            self.skip_blanks();
            let at = self.i;
            let Some(c) = self.peek() else {
                return (words, redirected, at, Sep::Eof);
            };
            match c {
                // Before the separators: `&>` is a redirection, not `&`.
                '&' if self.peek_at(1) == Some('>') => {
                    self.redirection(pending);
                    redirected = true;
                }
                '<' | '>' => {
                    self.redirection(pending);
                    redirected = true;
                }
                '(' => {
                    self.parenthesis(words.is_empty());
                    if !words.is_empty() {
                        // `f() cmd`, `case … in (x) cmd`, `a=(…) cmd`: what follows
                        // the `)` is in command position, a command of its own.
                        return (words, redirected, self.i, Sep::List);
                    }
                }
                '#' => {
                    self.refuse("a comment");
                    while self.peek().is_some_and(|c| c != '\n') {
                        self.i += 1;
                    }
                }
                _ => match self.separator(c, term, pending) {
                    Some(sep) => return (words, redirected, at, sep),
                    None => self.command_word(&mut words),
                },
            }
        }
    }

    /// Consumes the separator `c` at the current position and says what it is, or
    /// consumes nothing and returns `None` when `c` starts no separator. Called
    /// after `&>` was taken as a redirection, so a `&` here is `&` or `&&`.
    fn separator(&mut self, c: char, term: Term, pending: &mut Vec<Heredoc>) -> Option<Sep> {
        Some(match c {
            '\n' => {
                self.i += 1;
                if !pending.is_empty() {
                    self.heredoc_bodies(pending);
                }
                Sep::Newline
            }
            ';' => {
                self.i += 1;
                if matches!(self.peek(), Some(';' | '&')) {
                    self.refuse("`;;` or `;&` (a case clause)");
                    while matches!(self.peek(), Some(';' | '&')) {
                        self.i += 1;
                    }
                }
                Sep::List
            }
            '&' if self.peek_at(1) == Some('&') => {
                self.i += 2;
                Sep::Binary
            }
            '&' => {
                self.i += 1;
                Sep::List
            }
            '|' => {
                self.i += 1;
                if matches!(self.peek(), Some('|' | '&')) {
                    self.i += 1;
                }
                Sep::Binary
            }
            ')' if term == Term::Paren => {
                self.i += 1;
                Sep::Close
            }
            ')' => {
                self.refuse("an unbalanced `)`");
                self.i += 1;
                Sep::List
            }
            _ => return None,
        })
    }

    /// A `(` in a command: a subshell when it starts the command (`first`),
    /// otherwise a function definition or an array. Never provable; the script
    /// inside is still read so its commands are seen.
    fn parenthesis(&mut self, first: bool) {
        self.refuse(if first {
            "a subshell `( … )`"
        } else {
            "a parenthesis (function definition or array)"
        });
        self.i += 1;
        self.nested_script();
    }

    /// Reads one word of a command into `words`, unless it is the descriptor of a
    /// redirection that follows it (`2>`, `{name}>`).
    fn command_word(&mut self, words: &mut Vec<Word>) {
        let word = self.word();
        if matches!(self.peek(), Some('<' | '>')) {
            if word.is_fd_number() {
                return;
            }
            if word.value.starts_with('{') {
                // `{name}>file`: bash assigns a descriptor to a variable.
                self.refuse("a `{name}` redirection");
                return;
            }
        }
        words.push(word);
    }

    /// Records one simple command and follows the commands it runs itself.
    fn finish(&mut self, words: Vec<Word>, redirected: bool, text: String) {
        // A `{` after other words opens a compound command in command position
        // (`f() { …`, `function f { …`, `coproc NAME { …`): what follows it is a
        // command of its own, recorded with its words as its text. One pass, no
        // copy of the rest per split, so `a { a { …` stays linear.
        let brace = |w: &Word| !w.quoted && w.value == "{";
        if !words.iter().skip(1).any(brace) {
            self.finish_one(words, redirected, text);
            return;
        }
        let mut segment: Vec<Word> = Vec::new();
        // Whether `segment` holds a word other than `{`.
        let mut other = false;
        let mut first = Some(text);
        for w in words {
            if brace(&w) && other {
                let text = first.take().unwrap_or_else(|| joined(&segment));
                self.finish_one(std::mem::take(&mut segment), redirected, text);
                other = false;
            }
            other |= !brace(&w);
            segment.push(w);
        }
        let text = first.take().unwrap_or_else(|| joined(&segment));
        self.finish_one(segment, redirected, text);
    }

    fn finish_one(&mut self, mut words: Vec<Word>, redirected: bool, text: String) {
        // Leading keywords, counted then removed at once (one `remove(0)` per
        // keyword made `{ { { …` quadratic).
        let mut dropped = 0;
        for first in words.iter().take_while(|w| !w.quoted) {
            let v = first.value.as_str();
            if DROPPED_KEYWORDS.contains(&v) {
                self.out.refuse(|| format!("the shell keyword `{v}`"));
                dropped += 1;
            } else {
                if KEPT_KEYWORDS.contains(&v) {
                    self.out.refuse(|| format!("the shell keyword `{v}`"));
                }
                break;
            }
        }
        words.drain(..dropped);
        let assignments = words.iter().take_while(|w| w.assignment).count();
        if assignments > 0 {
            self.refuse("a variable assignment");
            words.drain(..assignments);
        }
        let program_literal = words.first().is_some_and(|w| w.literal);
        let words: Vec<String> = words.into_iter().map(|w| w.value).collect();
        if let Some(reason) = normal::not_provable_program(&words) {
            self.refuse(&reason);
        }
        let inner = normal::inner(&words);
        let programs = crate::policy::programs::met(&normal::effective(&words));
        self.out.commands.push(SeenCommand {
            words,
            text,
            redirected,
            nested: self.depth > 0,
            program_literal,
            programs,
        });
        follow(inner, self.depth, self.out);
    }

    /// A script inside `(…)`, the opening paren already consumed; consumes the `)`.
    fn nested_script(&mut self) {
        if self.depth >= MAX_DEPTH {
            self.refuse("commands nested too deeply to follow");
            self.skip_balanced();
            return;
        }
        let mut inner = Lexer {
            s: self.s,
            i: self.i,
            depth: self.depth + 1,
            out: &mut *self.out,
        };
        inner.script(Term::Paren);
        self.i = inner.i;
    }

    /// Skips to after the `)` closing an already opened `(`, minding quotes, without
    /// recursion.
    fn skip_balanced(&mut self) {
        let mut level = 1usize;
        while let Some(c) = self.peek() {
            self.i += 1;
            match c {
                '\\' => self.i += 1,
                '\'' | '"' => {
                    while let Some(q) = self.peek() {
                        self.i += 1;
                        if q == '\\' && c == '"' {
                            self.i += 1;
                        } else if q == c {
                            break;
                        }
                    }
                }
                '(' => level += 1,
                ')' => {
                    level -= 1;
                    if level == 0 {
                        return;
                    }
                }
                _ => {}
            }
        }
    }

    /// A redirection at `<`, `>` or `&>`.
    ///
    /// A redirection that writes a file (`>`, `>>`, `>|`, `&>`, `&>>`, `<>`) other than
    /// `/dev/null` makes the command not provable: an allow rule for a command never
    /// grants a file write. Otherwise `allow run_bash(ls *)` could truncate any file
    /// (`ls > scores.csv`) or, name by name, write a config another allowed program
    /// runs (`ls -d '[core]…' >> .git/config` then `git status`).
    fn redirection(&mut self, pending: &mut Vec<Heredoc>) {
        let mut to_descriptor = false;
        let writes = matches!(
            (self.peek(), self.peek_at(1)),
            (Some('>' | '&'), _) | (Some('<'), Some('>'))
        );
        match (self.peek(), self.peek_at(1), self.peek_at(2)) {
            (Some('<'), Some('<'), Some('<')) => {
                self.i += 3;
                self.refuse("a here-string `<<<`");
            }
            (Some('<'), Some('<'), _) => {
                self.i += 2;
                let strip_tabs = self.peek() == Some('-');
                if strip_tabs {
                    self.i += 1;
                }
                self.refuse("a here-document");
                self.skip_blanks();
                if self.at_operator() {
                    self.refuse("a here-document without a delimiter");
                    return;
                }
                let word = self.word();
                pending.push(Heredoc {
                    delimiter: word.value,
                    strip_tabs,
                    expands: !word.quoted,
                });
                return;
            }
            (Some('<' | '>'), Some('('), _) => {
                self.i += 2;
                self.refuse("a process substitution");
                self.nested_script();
                return;
            }
            (Some('&'), _, Some('>')) => self.i += 3,
            (Some('&'), _, _) => self.i += 2,
            (Some('<' | '>'), Some('&'), _) => {
                self.i += 2;
                to_descriptor = true;
            }
            (Some('<'), Some('>'), _) | (Some('>'), Some('>' | '|'), _) => self.i += 2,
            _ => self.i += 1,
        }
        self.skip_blanks();
        if self.at_operator() {
            self.refuse("a redirection without a file");
            return;
        }
        let target = self.word();
        if to_descriptor {
            if !(target.is_fd_number() || (!target.quoted && target.value == "-")) {
                self.refuse("a redirection to a descriptor expression");
            }
        } else if writes && target.value != "/dev/null" {
            self.refuse("a redirection that writes a file (write files with write_file)");
        }
    }

    fn at_operator(&self) -> bool {
        matches!(
            self.peek(),
            None | Some('\n' | ';' | '&' | '|' | '<' | '>' | '(' | ')')
        )
    }

    /// Skips the bodies of `pending` here-documents, which start at the current
    /// position; an expanding body is scanned for the commands it would run.
    fn heredoc_bodies(&mut self, pending: &mut Vec<Heredoc>) {
        for doc in pending.drain(..) {
            let mut body = String::new();
            let mut ended = false;
            while self.i < self.s.len() {
                let start = self.i;
                while self.peek().is_some_and(|c| c != '\n') {
                    self.i += 1;
                }
                let line: String = self
                    .s
                    .get(start..self.i)
                    .unwrap_or_default()
                    .iter()
                    .collect();
                self.i += 1;
                let compared = if doc.strip_tabs {
                    line.trim_start_matches('\t')
                } else {
                    &line
                };
                if compared == doc.delimiter {
                    ended = true;
                    break;
                }
                body.push_str(&line);
                body.push('\n');
            }
            self.i = self.i.min(self.s.len());
            if !ended {
                self.refuse("an unterminated here-document");
            }
            if doc.expands && (body.contains('$') || body.contains('`')) {
                self.expansions_in(&body);
            }
        }
    }

    /// Follows the substitutions in text that expands like a double-quoted string
    /// (a here-document body).
    fn expansions_in(&mut self, text: &str) {
        if self.depth >= MAX_DEPTH {
            self.refuse("commands nested too deeply to follow");
            return;
        }
        if !spend(self.out, text.len()) {
            return;
        }
        let chars: Vec<char> = text.chars().collect();
        let mut inner = Lexer {
            s: &chars,
            i: 0,
            depth: self.depth + 1,
            out: &mut *self.out,
        };
        let mut scratch = String::new();
        inner.double_quoted(&mut scratch, false);
    }

    /// One word, up to an unquoted blank or operator.
    fn word(&mut self) -> Word {
        let refusals = self.out.refusals;
        let mut w = self.word_inner();
        w.literal = self.out.refusals == refusals;
        w
    }

    fn word_inner(&mut self) -> Word {
        let mut w = Word::default();
        while let Some(c) = self.peek() {
            match c {
                ' ' | '\t' | '\n' | ';' | '&' | '|' | '<' | '>' | '(' | ')' => break,
                '\\' => {
                    w.quoted = true;
                    match self.peek_at(1) {
                        None => {
                            self.refuse("a trailing backslash");
                            w.value.push('\\');
                            self.i += 1;
                        }
                        Some('\n') => {
                            self.refuse("a line continuation");
                            self.i += 2;
                        }
                        Some(n) => {
                            w.value.push(n);
                            self.i += 2;
                        }
                    }
                }
                '\'' => {
                    w.quoted = true;
                    self.i += 1;
                    self.single_quoted(&mut w.value);
                }
                '"' => {
                    w.quoted = true;
                    self.i += 1;
                    self.double_quoted(&mut w.value, true);
                }
                '$' => {
                    w.quoted = true;
                    self.dollar(&mut w.value, false);
                }
                '`' => {
                    w.quoted = true;
                    self.backquote();
                }
                '=' => {
                    // Only a word's first `=` can make it an assignment: checked
                    // once, or `====…` re-reads the word at every `=`.
                    if !w.quoted && !w.equals && is_assignment_name(&w.value) {
                        w.assignment = true;
                    }
                    w.equals = true;
                    w.value.push(c);
                    self.i += 1;
                }
                _ => {
                    let reason = match c {
                        '*' | '?' | '[' => Some("a glob character"),
                        '{' | '}' => Some("a brace"),
                        '~' => Some("a tilde"),
                        '!' => Some("a `!`"),
                        c if c.is_control() => Some("a control character"),
                        _ => None,
                    };
                    if let Some(reason) = reason {
                        self.refuse(reason);
                    }
                    w.value.push(c);
                    self.i += 1;
                }
            }
        }
        w
    }

    /// After an opening `'`: everything up to the next `'` is literal.
    fn single_quoted(&mut self, value: &mut String) {
        while let Some(c) = self.peek() {
            self.i += 1;
            if c == '\'' {
                return;
            }
            value.push(c);
        }
        self.refuse("an unterminated quote");
    }

    /// After an opening `"` (or over a here-document body when `until_quote` is
    /// false): literal text with `\` escapes, plus expansions.
    fn double_quoted(&mut self, value: &mut String, until_quote: bool) {
        while let Some(c) = self.peek() {
            match c {
                '"' if until_quote => {
                    self.i += 1;
                    return;
                }
                '\\' => match self.peek_at(1) {
                    Some(n @ ('$' | '`' | '"' | '\\')) => {
                        value.push(n);
                        self.i += 2;
                    }
                    Some('\n') => self.i += 2,
                    _ => {
                        value.push('\\');
                        self.i += 1;
                    }
                },
                '$' => self.dollar(value, true),
                '`' => self.backquote(),
                _ => {
                    value.push(c);
                    self.i += 1;
                }
            }
        }
        if until_quote {
            self.refuse("an unterminated double quote");
        }
    }

    /// A `$` expansion of any kind: never provable; substitutions inside are followed.
    fn dollar(&mut self, value: &mut String, in_double_quotes: bool) {
        match self.peek_at(1) {
            Some('(') => {
                self.refuse(if self.peek_at(2) == Some('(') {
                    "an arithmetic expansion `$((…))`"
                } else {
                    "a command substitution `$(…)`"
                });
                // For `$((`, the inner `(` is read as a subshell: its contents are
                // still followed, so `$(( $(id) ))` shows `id`.
                self.i += 2;
                self.nested_script();
            }
            Some('{') => {
                self.refuse("a parameter expansion `${…}`");
                self.i += 2;
                self.brace_body(value);
            }
            Some('\'') if !in_double_quotes => {
                self.refuse("`$'…'` quoting");
                self.i += 2;
                self.ansi_c(value);
            }
            Some('"') if !in_double_quotes => {
                self.refuse("`$\"…\"` quoting");
                self.i += 2;
                self.double_quoted(value, true);
            }
            Some(c) if c == '_' || c.is_ascii_alphabetic() => {
                self.refuse("a variable expansion");
                value.push('$');
                self.i += 1;
                while self
                    .peek()
                    .is_some_and(|c| c == '_' || c.is_ascii_alphanumeric())
                {
                    value.extend(self.peek());
                    self.i += 1;
                }
            }
            Some(c) if c.is_ascii_digit() || "@*#?-$!".contains(c) => {
                self.refuse("a special parameter expansion");
                value.push('$');
                value.push(c);
                self.i += 2;
            }
            _ => {
                self.refuse("a bare `$`");
                value.push('$');
                self.i += 1;
            }
        }
    }

    /// After `${`: up to the matching `}`, following substitutions inside (an array
    /// subscript can run `$(…)`).
    fn brace_body(&mut self, value: &mut String) {
        if self.depth >= MAX_DEPTH {
            self.refuse("commands nested too deeply to follow");
        }
        self.depth += 1;
        let deep = self.depth > MAX_DEPTH;
        while let Some(c) = self.peek() {
            match c {
                '}' => {
                    self.i += 1;
                    self.depth -= 1;
                    return;
                }
                '\\' => {
                    value.extend(self.peek_at(1));
                    self.i += 2;
                }
                '\'' => {
                    self.i += 1;
                    self.single_quoted(value);
                }
                '"' if !deep => {
                    self.i += 1;
                    self.double_quoted(value, true);
                }
                '$' if !deep => self.dollar(value, false),
                '`' if !deep => self.backquote(),
                _ => {
                    value.push(c);
                    self.i += 1;
                }
            }
        }
        self.depth -= 1;
        self.i = self.i.min(self.s.len());
        self.refuse("an unterminated `${`");
    }

    /// After `$'`: ANSI-C escapes decoded, so `$'\x72m'` is seen as `rm`.
    fn ansi_c(&mut self, value: &mut String) {
        while let Some(c) = self.peek() {
            self.i += 1;
            match c {
                '\'' => return,
                '\\' => {
                    let Some(e) = self.peek() else {
                        value.push('\\');
                        break;
                    };
                    self.i += 1;
                    let decoded = match e {
                        'n' => Some('\n'),
                        't' => Some('\t'),
                        'r' => Some('\r'),
                        'a' => Some('\x07'),
                        'b' => Some('\x08'),
                        'e' | 'E' => Some('\x1b'),
                        'f' => Some('\x0c'),
                        'v' => Some('\x0b'),
                        '\\' | '\'' | '"' | '?' => Some(e),
                        'x' => Some(self.number(16, 2)),
                        'u' => Some(self.number(16, 4)),
                        'U' => Some(self.number(16, 8)),
                        '0'..='7' => {
                            self.i -= 1;
                            Some(self.number(8, 3))
                        }
                        'c' => {
                            let k = self.peek().map_or(0, |k| u32::from(k) & 0x1f);
                            self.i += 1;
                            char::from_u32(k)
                        }
                        _ => {
                            value.push('\\');
                            Some(e)
                        }
                    };
                    value.extend(decoded);
                }
                _ => value.push(c),
            }
        }
        self.i = self.i.min(self.s.len());
        self.refuse("an unterminated `$'`");
    }

    /// Up to `max` digits in `radix` at the cursor, as a character.
    fn number(&mut self, radix: u32, max: usize) -> char {
        let mut n: u32 = 0;
        for _ in 0..max {
            match self.peek().and_then(|c| c.to_digit(radix)) {
                Some(d) => {
                    n = n.saturating_mul(radix).saturating_add(d);
                    self.i += 1;
                }
                None => break,
            }
        }
        char::from_u32(n).unwrap_or('\u{fffd}')
    }

    /// A backquote substitution at the cursor: its body, with `\\`, `` \` `` and
    /// `\$` unescaped, is followed as a script.
    fn backquote(&mut self) {
        self.refuse("a backquote substitution");
        self.i += 1;
        let mut body = String::new();
        let mut closed = false;
        while let Some(c) = self.peek() {
            self.i += 1;
            match c {
                '`' => {
                    closed = true;
                    break;
                }
                '\\' => match self.peek() {
                    Some(n @ ('\\' | '`' | '$')) => {
                        body.push(n);
                        self.i += 1;
                    }
                    _ => body.push('\\'),
                },
                _ => body.push(c),
            }
        }
        if !closed {
            self.refuse("an unterminated backquote");
        }
        if self.depth >= MAX_DEPTH {
            self.refuse("commands nested too deeply to follow");
            return;
        }
        if spend(self.out, body.len()) {
            script(&body, self.depth + 1, self.out);
        }
    }
}

/// The words of a command, joined: the text of a command split from another.
fn joined(words: &[Word]) -> String {
    words
        .iter()
        .map(|w| w.value.as_str())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Follows what a command at `depth` runs itself: a script is analysed, a command
/// line (`find -exec bash -c …`) recorded and followed in turn.
fn follow(runs: Vec<Inner>, depth: usize, out: &mut Analysis) {
    if runs.is_empty() {
        return;
    }
    if depth >= MAX_DEPTH {
        out.refuse(|| "commands nested too deeply to follow".into());
        return;
    }
    for run in runs {
        match run {
            Inner::Script(src) => {
                if spend(out, src.len()) {
                    script(&src, depth + 1, out);
                }
            }
            Inner::Argv(words) => {
                if !spend(out, words.iter().map(String::len).sum()) {
                    continue;
                }
                let more = normal::inner(&words);
                if let Some(reason) = normal::not_provable_program(&words) {
                    out.refuse(|| reason);
                }
                let programs = crate::policy::programs::met(&normal::effective(&words));
                out.commands.push(SeenCommand {
                    text: words.join(" "),
                    words,
                    redirected: false,
                    nested: true,
                    program_literal: true,
                    programs,
                });
                follow(more, depth + 1, out);
            }
        }
    }
}

/// Takes `len` characters of re-read text from the analysis' budget
/// ([`MAX_FOLLOWED`]); when it is spent, the command is not provable and the text
/// is not followed, so nesting cannot multiply the work and memory of one input.
fn spend(out: &mut Analysis, len: usize) -> bool {
    match out.followed.checked_add(len) {
        Some(total) if total <= MAX_FOLLOWED => {
            out.followed = total;
            true
        }
        _ => {
            out.refuse(|| "too much nested text to follow".into());
            false
        }
    }
}

/// Characters of nested scripts (`bash -c`, `eval`, backquotes, here-document
/// bodies) re-read in one analysis, in all.
pub(super) const MAX_FOLLOWED: usize = 1 << 20;

/// Whether `name` (the text before an unquoted `=`) makes the word an assignment:
/// `NAME`, `NAME+` or `NAME[subscript]`.
fn is_assignment_name(name: &str) -> bool {
    let name = name.strip_suffix('+').unwrap_or(name);
    let name = match name.find('[') {
        Some(open) if name.ends_with(']') => name.get(..open).unwrap_or(""),
        _ => name,
    };
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c == '_' || c.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
}
