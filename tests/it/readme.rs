//! The README and the docs show commands and their output as a user types and sees
//! them; these tests keep them true. Every `harnessd …` command shown — in a code
//! block, or as inline code — names a real subcommand and only flags that
//! subcommand takes, and every `$ harnessd …` line of a code block parses whole
//! with the binary's own command line. The README's sample session is what the
//! binary prints for the same inputs, against the fake Messages API, and so is the
//! output of every code block marked `<!-- checked: output -->` (commands that
//! print the same on any fresh root); `HARNESSD_BLESS_DOCS=1 cargo test --test it
//! readme::` rewrites both from a fresh run. Every link to a heading finds it, and
//! the README's test command is the one `.ci/run` runs.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use clap::{CommandFactory, Parser};
use serde_json::json;

use crate::common::daemon::Daemon;
use crate::common::{FakeApi, Reply, TestRoot, bin, stderr};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every page a user reads: the README, ARCHITECTURE.md, CHANGELOG.md and docs/*.md.
fn pages() -> Vec<PathBuf> {
    let mut pages: Vec<PathBuf> = ["README.md", "ARCHITECTURE.md", "CHANGELOG.md"]
        .iter()
        .map(|p| repo().join(p))
        .collect();
    for entry in std::fs::read_dir(repo().join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            pages.push(path);
        }
    }
    pages
}

/// A command shown on a page: its line, its text, and whether it is a `$ ` line of
/// a code block (a session: it must parse whole, values included).
struct Shown {
    line: usize,
    text: String,
    session: bool,
}

/// The inline code spans of `text` (outside code blocks), with the line each
/// starts on; a span opened by N backticks ends at the next run of exactly N.
fn code_spans(text: &str, first_line: usize) -> Vec<(usize, String)> {
    let bytes = text.as_bytes();
    let mut spans = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'`' {
            i += 1;
            continue;
        }
        let run = bytes[i..].iter().take_while(|&&b| b == b'`').count();
        let start = i + run;
        let mut j = start;
        let mut end = None;
        while j < bytes.len() {
            if bytes[j] == b'`' {
                let n = bytes[j..].iter().take_while(|&&b| b == b'`').count();
                if n == run {
                    end = Some(j);
                    break;
                }
                j += n;
            } else {
                j += 1;
            }
        }
        let Some(end) = end else { break };
        let line = first_line + text[..i].matches('\n').count();
        spans.push((line, text[start..end].replace('\n', " ").trim().to_string()));
        i = end + run;
    }
    spans
}

/// Every `harnessd …` command `page` shows.
fn shown_commands(page: &str) -> Vec<Shown> {
    let mut shown = Vec::new();
    let mut prose = String::new();
    let mut prose_start = 1;
    let mut in_fence = false;
    for (n, line) in page.lines().enumerate() {
        let n = n + 1;
        if line.trim_start().starts_with("```") {
            if !in_fence {
                for (l, span) in code_spans(&prose, prose_start) {
                    shown.push(Shown {
                        line: l,
                        text: span,
                        session: false,
                    });
                }
                prose.clear();
            }
            in_fence = !in_fence;
            prose_start = n + 1;
            continue;
        }
        if !in_fence {
            prose.push_str(line);
            prose.push('\n');
            continue;
        }
        let trimmed = line.trim_start();
        let (session, rest) = match trimmed.strip_prefix("$ ") {
            Some(rest) => (true, rest),
            // An output line naming a command: `  approve: harnessd approve …`.
            None => match trimmed.split_once(':') {
                Some((label, rest))
                    if !label.contains(' ') && rest.trim_start().starts_with("harnessd ") =>
                {
                    (false, rest.trim_start())
                }
                _ => (false, trimmed),
            },
        };
        shown.push(Shown {
            line: n,
            text: rest.to_string(),
            session,
        });
    }
    for (l, span) in code_spans(&prose, prose_start) {
        shown.push(Shown {
            line: l,
            text: span,
            session: false,
        });
    }
    shown
        .into_iter()
        .filter_map(|mut s| {
            let text = s.text.trim();
            let text = text
                .strip_prefix("cargo run --release -- ")
                .map(|t| format!("harnessd {t}"))
                .unwrap_or_else(|| text.to_string());
            text.starts_with("harnessd ").then(|| {
                s.text = text;
                s
            })
        })
        .collect()
}

/// `text` cut into shell words (quotes kept out, as a shell would), and into
/// commands at `|`, `;`, `&&`, `>`, `<`, ` · ` and a `#` comment.
fn commands_of(text: &str) -> Vec<Vec<String>> {
    let mut commands = vec![Vec::new()];
    let mut word: Option<String> = None;
    let mut chars = text.chars().peekable();
    let mut quote = None;
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.get_or_insert_default().push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                word.get_or_insert_default();
            }
            (None, ' ' | '\t') => commands.last_mut().unwrap().extend(word.take()),
            (None, '#') if word.is_none() => break,
            (None, '|' | ';' | '>' | '<' | '·' | '&') => {
                commands.last_mut().unwrap().extend(word.take());
                while chars.peek().is_some_and(|n| "|&>".contains(*n)) {
                    chars.next();
                }
                commands.push(Vec::new());
            }
            (None, c) => word.get_or_insert_default().push(c),
        }
    }
    commands.last_mut().unwrap().extend(word.take());
    commands
        .into_iter()
        .filter(|c| c.first().is_some_and(|w| w == "harnessd"))
        .collect()
}

/// Whether `words` (after `harnessd`) names a real subcommand and only flags it
/// takes; values and positional placeholders (`ID`, `"TASK"`) are not judged.
/// Usage brackets (`[--remember]`) are read as the flag inside.
fn check_flags(words: &[String]) -> Result<(), String> {
    // `harnessd …` names no command; the helper's and the spawn server's
    // arguments are taken before the command line is parsed.
    let internal = [
        harnessd::sandbox::HELPER_ARG,
        harnessd::sandbox::spawn_server::SPAWN_SERVER_ARG,
    ];
    if words[1..] == ["…"] || words.get(1).is_some_and(|w| internal.contains(&w.as_str())) {
        return Ok(());
    }
    let mut cli = harnessd::cli::Cli::command();
    cli.build();
    let mut current = &cli;
    let mut path = vec!["harnessd".to_string()];
    let mut words = words[1..]
        .iter()
        .map(|w| w.trim_matches(|c| c == '[' || c == ']').to_string())
        .filter(|w| !w.is_empty() && w != "…");
    while let Some(w) = words.next() {
        if w == "--" {
            break;
        }
        if let Some(flag) = w.strip_prefix('-').filter(|f| !f.is_empty()) {
            let (name, inline_value) = match flag.split_once('=') {
                Some((n, _)) => (n, true),
                None => (flag, false),
            };
            let arg = current
                .get_arguments()
                .find(|a| match name.strip_prefix('-') {
                    Some(long) => a.get_long() == Some(long),
                    None => name.chars().count() == 1 && a.get_short() == name.chars().next(),
                });
            let Some(arg) = arg else {
                return Err(format!("`{}` has no flag {w}", path.join(" ")));
            };
            if arg.get_action().takes_values() && !inline_value {
                words.next();
            }
            continue;
        }
        if current.has_subcommands() {
            let Some(sub) = current.find_subcommand(&w) else {
                return Err(format!("`{}` has no subcommand {w:?}", path.join(" ")));
            };
            path.push(w.clone());
            current = sub;
        }
    }
    if current.has_subcommands() {
        return Err(format!("`{}` needs a subcommand", path.join(" ")));
    }
    Ok(())
}

#[test]
fn every_harnessd_command_the_docs_show_is_a_real_command_with_real_flags() {
    let mut problems = Vec::new();
    let mut checked = 0;
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        let name = page.strip_prefix(repo()).unwrap().display().to_string();
        for shown in shown_commands(&text) {
            for words in commands_of(&shown.text) {
                checked += 1;
                if let Err(e) = check_flags(&words) {
                    problems.push(format!("{name}:{}: {}: {e}", shown.line, shown.text));
                    continue;
                }
                if shown.session
                    && let Err(e) = harnessd::cli::Cli::try_parse_from(&words)
                {
                    let e = e.to_string();
                    let first = e.lines().next().unwrap_or_default();
                    problems.push(format!("{name}:{}: {}: {first}", shown.line, shown.text));
                }
            }
        }
    }
    assert!(checked > 100, "only {checked} commands found in the docs");
    assert!(
        problems.is_empty(),
        "commands shown in the docs that the binary does not take:\n{}",
        problems.join("\n")
    );
}

/// The checker itself: it must refuse what does not exist, or the test above
/// proves nothing.
#[test]
fn the_command_checker_refuses_unknown_subcommands_and_flags() {
    let check = |text: &str| {
        let words = commands_of(text).pop().unwrap();
        check_flags(&words)
    };
    assert!(check("harnessd approve ID [--remember]").is_ok());
    assert!(check("harnessd --root /srv/r events --task ID --since 7d --json").is_ok());
    assert!(check("harnessd submit -f - --wait").is_ok());
    assert!(check("harnessd sandbox --read-only -- ls --bogus").is_ok());
    assert!(check("harnessd aprove ID").is_err());
    assert!(check("harnessd approve ID --always").is_err());
    assert!(check("harnessd events --since 7d --folow").is_err());
    assert!(check("harnessd audit check").is_err());
    assert!(check("harnessd audit").is_err());
    assert!(check("harnessd …").is_ok());
    assert!(check("harnessd __sandbox-helper").is_ok());
    assert!(check("harnessd __spawn-server").is_ok());
    let shown = shown_commands(
        "Run `harnessd tasks | head -1`.\n\n```text\n$ harnessd policy test run_bash 'ls | sh'\n  approve: harnessd approve ap-1\n```\n",
    );
    let texts: Vec<(&str, bool)> = shown.iter().map(|s| (s.text.as_str(), s.session)).collect();
    assert_eq!(
        texts,
        [
            ("harnessd tasks | head -1", false),
            ("harnessd policy test run_bash 'ls | sh'", true),
            ("harnessd approve ap-1", false),
        ]
    );
    assert_eq!(
        commands_of("harnessd policy test run_bash 'ls | sh' # why"),
        [vec!["harnessd", "policy", "test", "run_bash", "ls | sh"]]
    );
}

/// The prompt of the README's sample session (the quick start's).
const PROMPT: &str = "What is the average score in scores.csv?";

/// The code the model asks to run in the sample: the shipped policy asks first.
const CODE: &str = "import csv\nrows = list(csv.DictReader(open('scores.csv')))\nprint(sum(int(r['score']) for r in rows) / len(rows))";

/// The model's answer in the sample.
const ANSWER: &str = "The average score is 81.125.";

/// `harnessd ARGS` run from the root itself (so the commands it prints carry no
/// `--root`), as the README's user runs it.
fn in_root(root: &TestRoot, args: &[&str]) -> Command {
    let mut cmd = Command::new(bin());
    cmd.current_dir(&root.dir)
        .args(args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .stdin(Stdio::null());
    cmd
}

/// Runs the sample session for real: `submit --wait` with stdout and stderr on one
/// pipe (as a terminal shows them), `approve` run when the approval is shown.
/// Returns both transcripts, each starting with its `$ ` line.
fn run_sample() -> (Vec<String>, Vec<String>) {
    let api = FakeApi::start(vec![
        Reply::tool("toolu_01", "run_python", json!({ "code": CODE })),
        Reply::text(ANSWER),
    ]);
    let root = TestRoot::new(&api.url);
    let _daemon = Daemon::start(&root);
    let (reader, writer) = std::io::pipe().unwrap();
    let mut child = in_root(&root, &["submit", "--wait", PROMPT])
        .stdout(writer.try_clone().unwrap())
        .stderr(writer)
        .spawn()
        .unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(reader).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut submit = vec![format!("$ harnessd submit --wait {PROMPT:?}")];
    loop {
        let line = rx
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| panic!("no approval shown; saw {submit:#?}"));
        let done = line.trim_start().starts_with("deny:");
        submit.push(line);
        if done {
            break;
        }
    }
    let id = root.events_of("approval_requested")[0]["approval_id"]
        .as_str()
        .unwrap()
        .to_string();
    let out = in_root(&root, &["approve", &id]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let mut approve = vec![format!("$ harnessd approve {id}")];
    approve.extend(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(String::from),
    );
    approve.extend(
        String::from_utf8_lossy(&out.stderr)
            .lines()
            .map(String::from),
    );
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0), "{submit:#?}");
    submit.extend(rx.iter());
    (submit, approve)
}

/// The README's sample session block: both terminals and the sentence between.
fn sample_block(submit: &[String], approve: &[String]) -> String {
    format!(
        "```text\n{}\n```\n\nIn a second terminal, while it waits:\n\n```text\n{}\n```\n",
        submit.join("\n"),
        approve.join("\n")
    )
}

/// What varies from run to run, masked: task and approval ids, the answering uid,
/// durations.
fn masked(text: &str) -> String {
    let rules = [
        (r"t-\d{8}T\d{6}Z-[0-9a-f]{6}", "t-<ID>"),
        (r"ap-[0-9a-f]{12}", "ap-<ID>"),
        (r"uid:\d+ \([^)]*\)", "uid:<N> (<NAME>)"),
        (r"\b\d+(\.\d+)? ?(ms|s)\b", "<T>"),
    ];
    rules.iter().fold(text.to_string(), |t, (re, with)| {
        regex::Regex::new(re)
            .unwrap()
            .replace_all(&t, *with)
            .into_owned()
    })
}

/// Checks (or, blessed, rewrites) the sample `name` of `file` against
/// `generated`, what varies between runs masked.
fn check_sample(file: &str, name: &str, generated: &str) {
    let kept = crate::common::blessed::Kept {
        kind: "SAMPLE",
        stale: "is not what the binary prints",
        module: "readme::",
    };
    kept.check(file, name, generated, |current| {
        masked(current) == masked(generated)
    });
}

#[test]
fn the_readme_sample_session_is_what_the_binary_prints() {
    let (submit, approve) = run_sample();
    let generated = sample_block(&submit, &approve);
    check_sample("README.md", "session", &generated);
    check_sample("docs/operating.md", "session", &generated);
}

/// The answer of the `run` sample in docs/operating.md.
const RUN_ANSWER: &str = "The average score is 81.125 (8 people; highest erin 94, lowest dave 62).";

/// The `run` session of docs/operating.md: one `read_file`, allowed by the shipped
/// policy, then the answer; stdout and stderr on one pipe.
#[test]
fn the_run_sample_in_the_operating_page_is_what_the_binary_prints() {
    let api = FakeApi::start(vec![
        Reply::tool("toolu_01", "read_file", json!({ "path": "scores.csv" })),
        Reply::text(RUN_ANSWER),
    ]);
    let root = TestRoot::new(&api.url);
    let mut run = in_root(&root, &["run", PROMPT]);
    run.env("ANTHROPIC_API_KEY", crate::common::SECRET_KEY);
    let (out, code) = on_one_pipe(run);
    assert_eq!(code, 0, "{out}");
    let generated = format!("```text\n$ harnessd run {PROMPT:?}\n{out}```\n");
    check_sample("docs/operating.md", "run", &generated);
}

/// The README's test command is exactly the one `.ci/run` runs, so "run every
/// test" means what CI means.
#[test]
fn the_readme_test_command_is_what_ci_runs() {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let ci = std::fs::read_to_string(repo().join(".ci/run")).unwrap();
    let shown = readme
        .split("**Run every test**")
        .nth(1)
        .and_then(|rest| rest.split("```sh\n").nth(1))
        .and_then(|block| block.split("\n```").next())
        .expect("README.md: a **Run every test** paragraph followed by a ```sh block");
    assert!(
        ci.lines().any(|l| l.trim() == shown.trim()),
        ".ci/run does not run the README's test command {shown:?}"
    );
}

/// The anchor GitHub gives a heading: lower case, punctuation dropped but `-` and
/// `_`, each space a `-`.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of the headings of `text` (outside code blocks).
fn anchors(text: &str) -> Vec<String> {
    let mut in_fence = false;
    let mut out = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
        } else if !in_fence && line.starts_with('#') {
            out.push(slug(line.trim_start_matches('#')));
        }
    }
    out
}

/// A link to a heading (`page.md#heading`, or `#heading` on the same page) finds
/// it: moving a section to another page breaks no link silently.
#[test]
fn every_link_to_a_heading_finds_it() {
    assert_eq!(
        slug(" The tool user: `sandbox.user = \"auto\"`"),
        "the-tool-user-sandboxuser--auto"
    );
    let mut broken = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        for (i, _) in text.match_indices("](") {
            let target = &text[i + 2..];
            let target = &target[..target.find(')').unwrap_or(target.len())];
            let Some((file, anchor)) = target.split_once('#') else {
                continue;
            };
            if target.contains("://") {
                continue;
            }
            let linked = if file.is_empty() {
                page.clone()
            } else {
                page.parent().unwrap().join(file)
            };
            let Ok(linked_text) = std::fs::read_to_string(&linked) else {
                continue; // a missing file is docs.rs's to report
            };
            if !anchors(&linked_text).iter().any(|a| a == anchor) {
                broken.push(format!("{}: {target}", page.display()));
            }
        }
    }
    assert!(
        broken.is_empty(),
        "links to no heading:\n{}",
        broken.join("\n")
    );
}

/// The marker before a code block whose commands print the same on every fresh
/// root (no ids, no times): its output is checked line for line.
const CHECKED: &str = "<!-- checked: output -->";

/// One `$ ` command of a checked block and what the page shows after it: its
/// output lines, and the exit code when a `$ echo $?` follows.
struct CheckedCommand {
    command: String,
    output: Vec<String>,
    exit: Option<String>,
}

/// The checked blocks of `text`: (byte range of the block's body, its commands).
fn checked_blocks(text: &str) -> Vec<(std::ops::Range<usize>, Vec<CheckedCommand>)> {
    let mut blocks = Vec::new();
    for (at, _) in text.match_indices(CHECKED) {
        let after = at + CHECKED.len();
        let open = text[after..].find("```").unwrap() + after;
        let body = text[open..].find('\n').unwrap() + open + 1;
        let end = text[body..].find("```").unwrap() + body;
        let mut shown: Vec<CheckedCommand> = Vec::new();
        let mut lines = text[body..end].lines().peekable();
        while let Some(line) = lines.next() {
            let command = line
                .strip_prefix("$ ")
                .expect("a checked block starts with `$ `");
            let mut output = Vec::new();
            while lines.peek().is_some_and(|l| !l.starts_with("$ ")) {
                output.push(lines.next().unwrap().to_string());
            }
            let mut exit = None;
            if lines.peek() == Some(&"$ echo $?") {
                lines.next();
                exit = lines.next().map(String::from);
            }
            shown.push(CheckedCommand {
                command: command.to_string(),
                output,
                exit,
            });
        }
        blocks.push((body..end, shown));
    }
    blocks
}

/// Runs `command` on a fresh root, from the root, stdout and stderr on one pipe
/// as a terminal shows them; its output lines and exit code.
/// What `cmd` prints with stdout and stderr on one pipe, as a terminal shows them,
/// and its exit code (-1: killed by a signal).
fn on_one_pipe(mut cmd: Command) -> (String, i32) {
    let (mut reader, writer) = std::io::pipe().unwrap();
    let mut child = cmd
        .stdout(writer.try_clone().unwrap())
        .stderr(writer)
        .spawn()
        .unwrap();
    // Dropped, the command closes its copies of the write end: the read ends
    // when the child's do.
    drop(cmd);
    let mut out = String::new();
    std::io::Read::read_to_string(&mut reader, &mut out).unwrap();
    (out, child.wait().unwrap().code().unwrap_or(-1))
}

fn printed(command: &str) -> (Vec<String>, i32) {
    let root = TestRoot::new("http://127.0.0.1:9");
    let words = commands_of(command).pop().expect("a harnessd command");
    let (out, code) = on_one_pipe(in_root(
        &root,
        &words[1..].iter().map(String::as_str).collect::<Vec<_>>(),
    ));
    (out.lines().map(String::from).collect(), code)
}

/// Output the docs show for commands that print the same on any fresh root — a
/// `policy test` answer, a usage error listing the event types — is what the
/// binary prints, so a new event type or a new line of `policy test` cannot leave
/// the page behind. `HARNESSD_BLESS_DOCS=1` rewrites the blocks.
#[test]
fn checked_output_in_the_docs_is_what_the_binary_prints() {
    let mut stale = Vec::new();
    let mut checked = 0;
    for page in pages() {
        let mut text = std::fs::read_to_string(&page).unwrap();
        let blocks = checked_blocks(&text);
        for (range, shown) in blocks.into_iter().rev() {
            let mut body = String::new();
            for s in &shown {
                checked += 1;
                let (output, code) = printed(&s.command);
                body.push_str(&format!("$ {}\n", s.command));
                for line in &output {
                    body.push_str(&format!("{line}\n"));
                }
                if let Some(exit) = &s.exit {
                    body.push_str(&format!("$ echo $?\n{code}\n"));
                    if *exit != code.to_string() {
                        stale.push(format!(
                            "{}: `{}` exits {code}, not {exit}",
                            page.display(),
                            s.command
                        ));
                    }
                }
                if output != s.output {
                    stale.push(format!(
                        "{}: `{}` prints:\n{}",
                        page.display(),
                        s.command,
                        output.join("\n")
                    ));
                }
            }
            text.replace_range(range, &body);
        }
        if std::env::var_os("HARNESSD_BLESS_DOCS").is_some() {
            std::fs::write(&page, &text).unwrap();
        }
    }
    assert!(checked >= 2, "only {checked} checked commands in the docs");
    if std::env::var_os("HARNESSD_BLESS_DOCS").is_none() {
        assert!(
            stale.is_empty(),
            "output in the docs is not what the binary prints; run \
             `HARNESSD_BLESS_DOCS=1 cargo test --test it readme::` and commit the result:\n{}",
            stale.join("\n")
        );
    }
}
