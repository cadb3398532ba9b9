//! Whether a `run_bash` command is one simple command that the helper may run
//! without bash (docs/sandbox.md, "Direct exec").
//!
//! `bash -c 'prog args'` parses the command, finds that it is one simple command
//! with nothing after it, and `exec`s the program in place of itself (no fork).
//! [`simple_command`] answers "is this such a command, and with what argv", so the
//! helper can skip bash and do that `exec` itself. It is strict: anything it is not
//! sure of is `None`, and the command then runs under bash as before. The answer
//! changes how a command runs, never whether it may: policy is decided on the
//! command text, by the same proof, before this is asked.

use super::normal::BUILTINS;

/// bash's reserved words (`compgen -k`). A quoted one is an ordinary word to bash,
/// but refusing every spelling keeps the rule simple.
const KEYWORDS: [&str; 22] = [
    "if", "then", "else", "elif", "fi", "case", "esac", "for", "select", "while", "until", "do",
    "done", "in", "function", "time", "{", "}", "!", "[[", "]]", "coproc",
];

/// The argv of `cmd` when it is exactly one provable simple command that bash
/// would run by `exec`ing a program: literal words only, no redirection, no
/// assignment, no `;` `&` `|` `&&` `||` or second line, and a program word that is
/// neither a bash builtin nor a keyword (bash -c defines no function or alias).
///
/// What may surround the command is what bash still `exec`s for: blanks and line
/// breaks before it, blanks and at most one line break after it. bash forks for
/// anything more (`prog\n\n` runs as a child of bash, with `SHLVL` not
/// decremented), so that stays on the bash path.
pub fn simple_command(cmd: &str) -> Option<Vec<String>> {
    let analysis = super::analyse(cmd);
    let provable = analysis.provable().ok()?;
    let ([argv], [seen]) = (provable.as_slice(), analysis.commands.as_slice()) else {
        return None;
    };
    if seen.nested || seen.redirected {
        return None;
    }
    let program = argv.first()?;
    if program.is_empty()
        || BUILTINS.contains(&program.as_str())
        || KEYWORDS.contains(&program.as_str())
    {
        return None;
    }
    // `text` is the command as written, trimmed: what follows it in `cmd` is what
    // bash has left to read after the command.
    let body = cmd.trim_start_matches([' ', '\t', '\n']);
    let rest = body.strip_prefix(seen.text.as_str())?;
    let rest = rest.trim_start_matches([' ', '\t']);
    if !(rest.is_empty() || rest == "\n") {
        return None;
    }
    Some(argv.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(words: &[&str]) -> Option<Vec<String>> {
        Some(words.iter().map(|s| s.to_string()).collect())
    }

    #[test]
    fn one_literal_program_is_accepted_with_its_argv() {
        assert_eq!(simple_command("cat hello.txt"), v(&["cat", "hello.txt"]));
        assert_eq!(simple_command("ls"), v(&["ls"]));
        assert_eq!(
            simple_command("  git status --short\n"),
            v(&["git", "status", "--short"])
        );
        assert_eq!(simple_command("\n \nwc -l \t"), v(&["wc", "-l"]));
        assert_eq!(
            simple_command("grep -n 'a b' \"c;d\" e\\|f é"),
            v(&["grep", "-n", "a b", "c;d", "e|f", "é"])
        );
        assert_eq!(
            simple_command("cat 'two\nlines'"),
            v(&["cat", "two\nlines"])
        );
        assert_eq!(simple_command("/bin/cat x"), v(&["/bin/cat", "x"]));
        assert_eq!(simple_command("./run.sh"), v(&["./run.sh"]));
        assert_eq!(simple_command("'cat' x"), v(&["cat", "x"]));
        assert_eq!(simple_command("cat a\\ "), v(&["cat", "a "]));
    }

    #[test]
    fn builtins_and_keywords_are_refused_however_quoted() {
        for program in [
            "echo", "cd", "printf", "test", "[", "type", "command", "exec", "eval", "source", ".",
            "kill", "read", "pwd", "true", "false", ":", "builtin", "enable", "hash", "alias",
            "set", "export", "trap", "wait", "ulimit", "umask", "times", "help",
        ] {
            for spelled in [
                program.to_string(),
                format!("'{program}'"),
                format!("\\{program}"),
            ] {
                let cmd = format!("{spelled} x");
                assert_eq!(simple_command(&cmd), None, "{cmd:?}");
            }
        }
        for keyword in [
            "if", "time", "!", "{", "[[", "coproc", "function", "'while'", "\"in\"",
        ] {
            let cmd = format!("{keyword} ls");
            assert_eq!(simple_command(&cmd), None, "{cmd:?}");
        }
    }

    #[test]
    fn anything_but_one_bare_command_is_refused() {
        for cmd in [
            "cat hello.txt > out",
            "cat < in",
            "cat x 2>/dev/null",
            "cat x 2>&1",
            "cat x &>/dev/null",
            "FOO=1 cmd",
            "FOO=1",
            "cat a; cat b",
            "cat a;",
            "cat a &",
            "cat a | wc",
            "cat a && ls",
            "cat a || ls",
            "cat a\nls",
            "cat a\n\n",
            "cat a\n ",
            "cat a \n\t",
            "cat $HOME",
            "cat *.txt",
            "cat ~/x",
            "cat {a,b}",
            "cat $(id)",
            "cat `id`",
            "cat # comment",
            "(cat a)",
            "{ cat a; }",
            "bash -c 'cat a'",
            "env cat a",
            "sudo cat a",
            "find . -exec rm {} ;",
            "python3 -c 'print(1)'",
            "cat \\\nx",
            "''",
            "",
            "   ",
            "\n",
            "cat a\r",
            "\u{a0}cat a",
            "cat a\u{3000}",
            "cat <<E\nx\nE",
            "cat\0x",
        ] {
            assert_eq!(simple_command(cmd), None, "{cmd:?}");
        }
    }
}
