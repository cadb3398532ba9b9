//! What a `run_bash` command would run, for policy (docs/policy.md).
//!
//! [`analyse`] reads a command once and gives two answers:
//!
//! - **Seen commands**, for deny and ask rules: every simple command harnessd can
//!   find, provable or not — inside `$(…)`, backticks, `<(…)`, subshells, here-document
//!   bodies that expand, `bash -c '…'`, `eval …`, `find -exec … ;`, and through
//!   wrappers (`sudo`, `env`, `xargs`, …). Each is matched in several normalised
//!   forms ([`SeenCommand::forms`]) so spelling cannot dodge a deny rule.
//! - **Provable commands**, for allow rules: the argv of each simple command, but only
//!   when harnessd can prove that bash runs exactly those and nothing else. The
//!   proof is a strict tokenizer, not a bash grammar: it accepts words made of
//!   literal characters, quotes without expansions, and backslash escapes; commands
//!   joined by `;` `&&` `||` `|` `|&` `&` or newlines; redirections to literal files
//!   or descriptor numbers. Everything else — any `$`, backquote, glob, brace, tilde,
//!   comment, here-document or here-string, keyword, assignment, parenthesis, a
//!   builtin other than a few inert ones, or a program that runs other text — makes
//!   the command not provable, with the reason ([`Analysis::provable`]).
//!
//! [`simple_command`] reads the same analysis for the executor rather than for
//! policy: whether the command is one provable simple command that the sandbox
//! helper may `exec` without bash, and its argv.
//!
//! Why a strict tokenizer rather than a full bash parser (such as `brush-parser`):
//! a parser answers "what is the syntax tree", but a proof needs "what will bash
//! execute", and every construct a parser accepts would then need its own argument
//! that it cannot run anything else (prompt expansion, arithmetic subscripts,
//! aliases…). Refusing everything outside a subset that is literal by construction
//! keeps the argument short, and the differential test against bash checks it.
//!
//! Hostile input: no slicing by arithmetic, recursion bounded by [`MAX_DEPTH`], time
//! linear in the input times that bound; an unbalanced or unparseable command is
//! never an error, only "not provable".

mod lex;
mod normal;
mod simple;

pub use normal::quote_word;
pub use simple::simple_command;

/// How deep substitutions, `bash -c` scripts and subshells are followed for seen
/// commands. Deeper nesting is still scanned (so its end is found) but not split.
pub const MAX_DEPTH: usize = 24;

/// One simple command harnessd saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeenCommand {
    /// The words after quote removal (best effort when not provable), assignments
    /// and redirections left out.
    pub words: Vec<String>,
    /// As written in the source, trimmed.
    pub text: String,
    /// Whether it had redirections (left out of `words`).
    pub redirected: bool,
    /// Seen inside another command (a substitution, a `bash -c` script, …) rather
    /// than at the top level.
    pub nested: bool,
    /// Whether the program word was literal: no expansion, glob or brace in it, so
    /// the program that runs is the one named.
    pub program_literal: bool,
    /// The entries of the program table this command meets (wrappers looked
    /// through).
    pub programs: Vec<&'static crate::policy::programs::Entry>,
}

/// What [`analyse`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Analysis {
    /// Every simple command seen, in source order (nested ones where they occur).
    pub commands: Vec<SeenCommand>,
    /// Why the command is not provable; `None` when it is.
    pub not_provable: Option<String>,
    /// Characters of nested text re-read so far (bounded by `lex::MAX_FOLLOWED`).
    followed: usize,
    /// How many times something was found that is not provable (the reason kept is
    /// the first): lets the lexer tell whether one word was literal.
    refusals: usize,
}

impl Analysis {
    /// The argv of each simple command when the whole command is provable, or the
    /// reason it is not.
    pub fn provable(&self) -> Result<Vec<&[String]>, &str> {
        match &self.not_provable {
            Some(reason) => Err(reason),
            None => Ok(self.commands.iter().map(|c| c.words.as_slice()).collect()),
        }
    }

    pub(crate) fn refuse(&mut self, reason: impl FnOnce() -> String) {
        self.refusals = self.refusals.saturating_add(1);
        if self.not_provable.is_none() {
            self.not_provable = Some(reason());
        }
    }
}

impl SeenCommand {
    /// The command rendered with each word shell-quoted where needed: what allow
    /// patterns are matched against (`ls 'a b'`, never a word boundary moved).
    pub fn canonical(&self) -> String {
        normal::render(&self.words)
    }

    /// The strings deny and ask patterns are matched against: as written, after
    /// quote removal, and normalised (wrappers looked through, program base name,
    /// short options merged and sorted).
    pub fn forms(&self) -> Vec<String> {
        normal::forms(self)
    }

    /// The program that runs, wrappers looked through, as its base name.
    pub fn program(&self) -> Option<String> {
        normal::effective(&self.words).into_iter().next()
    }

    /// Whether the command's own program word (before wrappers are looked
    /// through) is a wrapper or a shell: it runs text or a command of its own.
    pub fn is_wrapper_or_shell(&self) -> bool {
        normal::is_wrapper_or_shell(&self.words)
    }
}

/// Analyses `cmd`. Never fails: whatever cannot be read is "not provable".
pub fn analyse(cmd: &str) -> Analysis {
    let mut out = Analysis::default();
    lex::script(cmd, 0, &mut out);
    out
}

#[cfg(test)]
mod tests;
