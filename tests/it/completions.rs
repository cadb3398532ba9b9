//! `harnessd completions SHELL` and `harnessd man`: scripts a shell accepts that
//! name the real subcommands, a man page that man and groff read without a warning,
//! and an unknown shell refused as a usage error.

use std::io::Write as _;
use std::process::{Command, Stdio};

use crate::common::{bin, stderr, stdout};

fn harnessd(args: &[&str]) -> std::process::Output {
    Command::new(bin()).args(args).output().unwrap()
}

/// `program args…` with `input` on stdin.
fn piped(program: &str, args: &[&str], input: &[u8]) -> std::process::Output {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("{program} cannot run ({e}): apt-get install man-db groff-base; .ci/run does so")
        });
    child.stdin.take().unwrap().write_all(input).unwrap();
    child.wait_with_output().unwrap()
}

#[test]
fn the_bash_completion_names_the_subcommands_and_bash_accepts_it() {
    let out = harnessd(&["completions", "bash"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let script = stdout(&out);
    for word in [
        "serve",
        "approvals",
        "submit",
        "audit",
        "verify",
        "--remember",
    ] {
        assert!(script.contains(word), "the bash completion lacks {word:?}");
    }
    let checked = piped("bash", &["-n"], script.as_bytes());
    assert!(checked.status.success(), "bash -n: {}", stderr(&checked));
}

#[test]
fn every_shell_gets_a_script_of_its_own() {
    let mut scripts = Vec::new();
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let out = harnessd(&["completions", shell]);
        assert!(out.status.success(), "{shell}: {}", stderr(&out));
        let script = stdout(&out);
        assert!(script.contains("approvals"), "{shell}: no subcommands");
        assert!(
            !scripts.contains(&script),
            "{shell}: the same script as another shell"
        );
        scripts.push(script);
    }
}

#[test]
fn an_unknown_shell_is_a_usage_error_naming_the_shells() {
    let out = harnessd(&["completions", "tcsh"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("invalid value 'tcsh'"), "{err}");
    assert!(err.contains("bash, elvish, fish, powershell, zsh"), "{err}");
    assert!(out.stdout.is_empty());
}

#[test]
fn the_man_page_reads_without_warnings_and_documents_every_subcommand() {
    let out = harnessd(&["man"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let page = out.stdout;
    assert!(
        page.is_ascii(),
        "the page is read as Latin-1 from a pipe: keep it ASCII"
    );
    let groff = piped("groff", &["-man", "-ww", "-z"], &page);
    assert!(groff.status.success(), "groff: {}", stderr(&groff));
    assert_eq!(stderr(&groff), "", "groff warned");
    let man = piped("man", &["--warnings", "-l", "-"], &page);
    assert!(man.status.success(), "man: {}", stderr(&man));
    assert_eq!(stderr(&man), "", "man warned");
    let text = stdout(&man);
    for (name, flag) in [
        ("harnessd serve", "--root"),
        ("harnessd approve ID", "--remember"),
        ("harnessd audit verify", "--head SEQ:HASH"),
        ("harnessd policy test TOOL INPUT", "--hooks"),
        ("harnessd completions SHELL", "SHELL"),
    ] {
        assert!(text.contains(name), "the page lacks {name:?}");
        assert!(text.contains(flag), "the page lacks {flag:?}");
    }
    // clap_mangen's own list points at pages per subcommand that are not installed.
    assert!(
        !text.contains("harnessd-run(1)"),
        "the page names a page that does not exist"
    );
}
