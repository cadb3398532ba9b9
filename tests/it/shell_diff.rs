//! Differential test of the `run_bash` proof against bash itself (docs/policy.md): for
//! generated commands covering every construct docs/policy.md lists, whenever harnessd
//! says "provable: C1 … Cn", bash — with logging shims on `PATH` in place of the
//! programs — executes only commands among C1 … Cn (argv equal), and exactly those
//! when nothing can skip one.

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use harnessd::policy::shell;
use wait_timeout::ChildExt;

/// Programs replaced by shims. Builtins the proof accepts run inside bash and log
/// nothing; anything else is not on `PATH`.
pub(crate) const SHIMS: [&str; 9] = [
    "ls", "cat", "git", "rm", "id", "wc", "grep", "touch", "curl",
];
const QUIET_BUILTINS: [&str; 6] = [":", "cd", "echo", "false", "pwd", "true"];

fn write_shims(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir).unwrap();
    // Arguments joined by US (0x1f), records ended by RS (0x1e): generated words
    // never hold either.
    // One write per record (O_APPEND), so background commands cannot interleave.
    let body = "#!/bin/sh\nus=$(printf '\\037'); r=\"${0##*/}\"; for a in \"$@\"; do r=\"$r$us$a\"; done; printf '%s\\036' \"$r\" >> \"$SHIM_LOG\"\n";
    for name in SHIMS {
        let path = dir.join(name);
        std::fs::write(&path, body).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
}

/// Runs `cmd` under bash in `work`; returns the argv of every shim that ran.
fn bash_runs(cmd: &str, work: &Path, shims: &Path, log: &Path) -> Vec<Vec<String>> {
    let _ = std::fs::remove_file(log);
    // `wait` afterwards, so background commands have logged before we read.
    let script = format!("{cmd}\nwait");
    let mut child = Command::new(bash_path())
        .arg("-c")
        .arg(&script)
        .env_clear()
        .env("PATH", shims)
        .env("SHIM_LOG", log)
        .env("HOME", work)
        .current_dir(work)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    if child
        .wait_timeout(Duration::from_secs(5))
        .unwrap()
        .is_none()
    {
        let _ = child.kill();
        let _ = child.wait();
        panic!("bash did not finish {cmd:?}");
    }
    let mut text = String::new();
    if let Ok(mut f) = std::fs::File::open(log) {
        f.read_to_string(&mut text).unwrap();
    }
    text.split('\u{1e}')
        .filter(|r| !r.is_empty())
        .map(|r| r.split('\u{1f}').map(str::to_string).collect())
        .collect()
}

/// Words the proof should accept.
const LITERAL_ARGS: [&str; 24] = [
    "-l",
    "a",
    "x.txt",
    "'a b'",
    "\"c d\"",
    "'a;b'",
    "\"x|y\"",
    "a\\;b",
    "'$(id)'",
    "\"\\$(id)\"",
    "'#'",
    "x#y",
    "\"!x\"",
    "'*'",
    "\"a\\\"b\"",
    "é",
    "''",
    "--",
    "a=b",
    "\"\\\\\"",
    "'`id`'",
    "\\$HOME",
    "--opt=v",
    "'${x[$(id)]}'",
];

/// Words and fragments that expand, glob or substitute.
const EXPANDING_ARGS: [&str; 24] = [
    "$(id)",
    "`id`",
    "${x}",
    "$HOME",
    "$((1+1))",
    "<(id)",
    ">(id)",
    "$'\\x3b id'",
    "*",
    "?",
    "[a]",
    "~",
    "{a,b}",
    "$'a'",
    "\"$(id)\"",
    "${_@P}",
    "${x[$(id)]}",
    "a[$(id)]",
    "$\"x\"",
    "\"`id`\"",
    "$1",
    "a{b}",
    "\\\nx",
    "$",
];

const PREFIXES: [&str; 16] = [
    "X=1 ",
    "PATH=. ",
    "env ",
    "exec ",
    "command ",
    "builtin ",
    "eval ",
    "time ",
    "! ",
    "nohup ",
    "a[$(id)]=1 ",
    "exec -a ls ",
    "\\exec ",
    "'eval' ",
    "source /dev/null; ",
    "{ ",
];

const REDIRECTIONS: [&str; 14] = [
    " > out",
    " 2>&1",
    " >> out2",
    " < /dev/null",
    " &> all",
    " >&2",
    " 2>/dev/null",
    " <<<x",
    " <<E\nid\nE\n",
    " > $(id)",
    " >&$x",
    " >& out3",
    " <(id)",
    " 3<> rw",
];

const SEPARATORS: [&str; 8] = ["; ", " && ", " || ", " | ", " & ", "\n", " |& ", " ;; "];

/// Whole constructs with one `{}` for a command.
const WRAPPED: [&str; 22] = [
    "({})",
    "{ {}; }",
    "if {}; then id; fi",
    "f() { {}; }; f",
    "# comment {}",
    "{} # '\nid\n# '",
    "bash -c '{}'",
    "sh -c \"{}\"",
    "for i in 1; do {}; done",
    "case a in a) {};; esac",
    "while false; do {}; done",
    "[[ -v 'a[$(id)]' ]]; {}",
    "test -v 'a[$(id)]'; {}",
    "read 'a[$(id)]' < /dev/null; {}",
    "printf -v 'a[$(id)]' x; {}",
    "x='a[$(id)]'; {} ${x[_]}",
    "{} <<E\n$(id)\nE",
    "{} $'\\'' ; id # '",
    "alias ls=id; {}",
    "shopt -s expand_aliases; alias ls=id\n{}",
    "hash -p /bin/sh ls; {}",
    "trap id EXIT; {}",
];

fn pick<'a>(rng: &mut fastrand::Rng, xs: &[&'a str]) -> &'a str {
    xs[rng.usize(..xs.len())]
}

fn program(rng: &mut fastrand::Rng) -> String {
    let name = if rng.u8(..10) < 8 {
        pick(rng, &SHIMS)
    } else {
        pick(rng, &QUIET_BUILTINS)
    };
    match rng.u8(..8) {
        0 => format!("'{name}'"),
        1 => format!("\"{name}\""),
        2 => format!("\\{name}"),
        _ => name.to_string(),
    }
}

fn simple(rng: &mut fastrand::Rng, wild: bool) -> String {
    let mut cmd = String::new();
    if wild && rng.u8(..4) == 0 {
        cmd.push_str(pick(rng, &PREFIXES));
    }
    cmd.push_str(&program(rng));
    for _ in 0..rng.usize(..4) {
        cmd.push(' ');
        let expand = wild && rng.u8(..4) == 0;
        cmd.push_str(pick(
            rng,
            if expand {
                &EXPANDING_ARGS
            } else {
                &LITERAL_ARGS
            },
        ));
    }
    if rng.u8(..3) == 0 {
        let r = pick(rng, &REDIRECTIONS);
        if wild || !r.contains(['$', '(', '<', '&']) || r == " 2>&1" || r.contains("/dev/null") {
            cmd.push_str(r);
        }
    }
    cmd
}

/// One generated command: mostly literal (so many are provable), with constructs
/// from docs/policy.md's list mixed in. The proof's corpus, shared with
/// `direct_exec_diff`.
pub(crate) fn generate(rng: &mut fastrand::Rng) -> String {
    let wild = rng.u8(..2) == 0;
    let mut cmd = simple(rng, wild);
    for _ in 0..rng.usize(..3) {
        let sep = pick(rng, &SEPARATORS);
        if !wild && sep == " ;; " {
            continue;
        }
        cmd.push_str(sep);
        cmd.push_str(&simple(rng, wild));
    }
    if wild && rng.u8(..3) == 0 {
        cmd = pick(rng, &WRAPPED).replacen("{}", &cmd, 1);
    }
    cmd
}

/// The reported attacks on the old splitter, run as they were reported.
pub(crate) const REPRODUCTIONS: [&str; 8] = [
    "ls '$(id > pwned.txt; echo x)'; ls ${_@P}",
    "ls 'a[$(rm -rf important)]'; ls ${x[_]}",
    "ls # '\nrm -rf d\n# '",
    "ls <<<x\nrm -rf d\nx",
    "exec -a ls rm -rf d",
    "ls $'\\'' ; rm -rf d # '",
    "ls `",
    "echo \"`",
];

#[test]
fn bash_runs_only_what_harnessd_proved() {
    let dir = tempdir("shell-diff");
    let (shims, work, log) = (dir.join("bin"), dir.join("work"), dir.join("log"));
    write_shims(&shims);
    std::fs::create_dir_all(&work).unwrap();
    let mut rng = fastrand::Rng::with_seed(0x5eed_0008);
    let mut cases: Vec<String> = REPRODUCTIONS.iter().map(|s| s.to_string()).collect();
    cases.extend((0..1200).map(|_| generate(&mut rng)));
    let (mut proven, mut refused, mut executed) = (0, 0, 0);
    for cmd in &cases {
        let analysis = shell::analyse(cmd);
        let Ok(commands) = analysis.provable() else {
            refused += 1;
            continue;
        };
        proven += 1;
        let mut expected: Vec<Vec<String>> = commands
            .into_iter()
            .filter(|argv| argv.first().is_some_and(|p| SHIMS.contains(&p.as_str())))
            .map(<[String]>::to_vec)
            .collect();
        let ran = bash_runs(cmd, &work, &shims, &log);
        executed += ran.len();
        let exact = !cmd.contains("||") && !cmd.contains("false") && !cmd.contains("cd");
        let all_expected = expected.len();
        for argv in &ran {
            let at = expected.iter().position(|e| e == argv).unwrap_or_else(|| {
                panic!(
                    "{cmd:?}: harnessd proved {:?} but bash ran {argv:?}",
                    analysis.provable()
                )
            });
            expected.remove(at);
        }
        if exact {
            assert!(
                expected.is_empty(),
                "{cmd:?}: proven {all_expected} commands, bash ran only {ran:?}"
            );
        }
    }
    for cmd in REPRODUCTIONS {
        assert!(shell::analyse(cmd).provable().is_err(), "{cmd:?}");
    }
    // The generator must exercise both sides, and bash must really have run shims.
    assert!(
        proven > 300 && refused > 300,
        "proven {proven}, refused {refused}"
    );
    assert!(executed > 300, "only {executed} shim runs");
    let _ = std::fs::remove_dir_all(&dir);
}

/// bash from the test's own PATH (the child's PATH holds only shims).
fn bash_path() -> std::path::PathBuf {
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|d| d.join("bash"))
        .find(|p| p.is_file())
        .expect("bash on PATH")
}

fn tempdir(name: &str) -> std::path::PathBuf {
    crate::common::fresh_dir(&format!("harnessd-{name}-"))
}
