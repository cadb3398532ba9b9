//! Direct exec: a `run_bash` command that is one proven simple command of a
//! program (`policy::shell::simple_command`) run without bash, in the confined
//! helper, exactly as `bash -c COMMAND` would run it.
//!
//! For such a command bash does not fork: it finds the program, adds a few
//! variables to the environment and `exec`s it in its own place. Doing that here
//! saves starting bash. What the program gets must be what bash gives it:
//!
//! - the program found like bash finds it: a word holding `/` as it is; else each
//!   `PATH` entry left to right (an empty one is `.`), joined as `entry/word` (no
//!   `/` added after an entry that ends with one), the first that exists, is not
//!   a directory and is executable (`eaccess`);
//! - argv as the proof read it, `argv[0]` the word as written;
//! - the environment as bash exports it: the one it was started with, `PWD` set
//!   to the working directory, `SHLVL` as bash leaves it (raised at start, lowered
//!   again for the `exec`: unchanged, `0` when unset), in bash's order, and `_`
//!   the path run, last;
//! - the signal mask empty and SIGPIPE at its default, as `Command::exec` leaves
//!   them before bash, which passes them on;
//! - the same working directory, descriptors and limits: nothing here changes them.
//!
//! Anything this module cannot reproduce exactly — a variable bash reads or
//! rewrites (`BASH_ENV`, `SHELLOPTS`, `PWD`, `IFS`, …), an unusual `SHLVL` or
//! `PATH`, a program not found — and any `execve` failure (ENOEXEC for a script
//! without `#!`, EACCES, ENOENT, E2BIG …) runs `bash -c COMMAND` instead, so the
//! message and exit code are bash's own. A failed `execve` changes nothing bash
//! would see: the environment given to it is built apart, never set on this
//! process.

use std::ffi::{CString, OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};

use nix::unistd::{AccessFlags, faccessat};

use super::environment::Overrides;

/// Runs `argv` directly when that is exactly what `bash -c command` would do,
/// else `bash -c command`. Returns only when neither could be `exec`ed.
/// `env` is what the profile sets on top of the process's environment (bash
/// would have been started with it).
pub(super) fn run(command: &str, argv: &[String], env: &Overrides) -> i32 {
    if let Some(direct) = prepare(argv, env.environment()) {
        direct.exec();
    }
    super::exec_bash(command, env)
}

/// What `execve` is given.
struct Direct {
    path: CString,
    argv: Vec<CString>,
    env: Vec<CString>,
}

impl Direct {
    /// `exec`s the program; returns only if `execve` failed.
    fn exec(&self) {
        let (argv, env) = (super::pointers(&self.argv), super::pointers(&self.env));
        // What the exec of bash does first, and bash hands on.
        super::reset_signals();
        let mark = super::spawn_server::before_exec();
        // SAFETY: NUL-terminated arrays of pointers to C strings that outlive the
        // call; execve returns only on failure.
        unsafe { libc::execve(self.path.as_ptr(), argv.as_ptr(), env.as_ptr()) };
        drop(mark);
    }
}

/// Variables bash reads at start or exports changed, by name: with any of them set,
/// the command runs under bash. Those bash passes on untouched (`PATH`, `HOME`,
/// `LANG`, `LC_*`, `TMPDIR`, `TERM`, …) are not here; `SHLVL` is rewritten below,
/// as bash does. (`_` is here: bash would replace it where it stands.)
const SHELL_VARIABLES: [&str; 59] = [
    "_",
    "CDPATH",
    "CHILD_MAX",
    "COLUMNS",
    "COPROC",
    "DIRSTACK",
    "EMACS",
    "ENV",
    "EPOCHREALTIME",
    "EPOCHSECONDS",
    "EUID",
    "EXECIGNORE",
    "FCEDIT",
    "FIGNORE",
    "FUNCNAME",
    "FUNCNEST",
    "GLOBIGNORE",
    "GROUPS",
    "HOSTFILE",
    "HOSTNAME",
    "HOSTTYPE",
    "IFS",
    "IGNOREEOF",
    "INPUTRC",
    "INSIDE_EMACS",
    "LINENO",
    "LINES",
    "MACHTYPE",
    "MAIL",
    "MAILCHECK",
    "MAILPATH",
    "MAPFILE",
    "OLDPWD",
    "OPTARG",
    "OPTERR",
    "OPTIND",
    "OSTYPE",
    "PIPESTATUS",
    "POSIXLY_CORRECT",
    "PPID",
    "PROMPT_COMMAND",
    "PROMPT_DIRTRIM",
    "PS0",
    "PS1",
    "PS2",
    "PS3",
    "PS4",
    "PWD",
    "RANDOM",
    "REPLY",
    "SECONDS",
    "SHELL",
    "SHELLOPTS",
    "SRANDOM",
    "TIMEFORMAT",
    "TMOUT",
    "UID",
    "auto_resume",
    "histchars",
];

/// Prefixes of variables bash reads (`BASH_ENV`, `BASH_FUNC_name%%` functions,
/// `BASHOPTS`, completion and history settings).
const SHELL_PREFIXES: [&str; 4] = ["BASH", "COMP", "HIST", "READLINE_"];

fn read_by_bash(name: &OsStr) -> bool {
    let bytes = name.as_bytes();
    SHELL_VARIABLES.iter().any(|v| v.as_bytes() == bytes)
        || SHELL_PREFIXES
            .iter()
            .any(|p| bytes.starts_with(p.as_bytes()))
}

/// The direct `exec` of `argv`, or `None` when bash is needed to get it exactly.
/// `vars` is the environment bash would be started with.
fn prepare(argv: &[String], vars: Vec<(OsString, OsString)>) -> Option<Direct> {
    let program = argv.first().filter(|p| !p.is_empty())?;
    if vars
        .iter()
        .any(|(name, _)| read_by_bash(name) || !is_identifier(name))
    {
        return None;
    }
    let value = |name: &str| {
        vars.iter()
            .find(|(n, _)| n.as_bytes() == name.as_bytes())
            .map(|(_, v)| v.as_os_str())
    };
    let level = shell_level(value("SHLVL"))?;
    let path = if program.contains('/') {
        OsString::from(program)
    } else {
        search(program, value("PATH")?)?
    };
    // bash sets PWD from getcwd(3) when it was not given one; it must succeed and
    // be a real path for bash to set it without a warning.
    let cwd = std::env::current_dir().ok().filter(|d| d.is_absolute())?;
    let mut exported: Vec<Var<'_>> = Vec::with_capacity(vars.len() + 2);
    for (name, value) in &vars {
        if exported.iter().any(|(n, _)| *n == name.as_bytes()) {
            return None;
        }
        let value = if name.as_bytes() == b"SHLVL" {
            level.as_bytes()
        } else {
            value.as_bytes()
        };
        exported.push((name.as_bytes(), value));
    }
    exported.push((b"PWD", cwd.as_os_str().as_bytes()));
    if value("SHLVL").is_none() {
        exported.push((b"SHLVL", level.as_bytes()));
    }
    let mut env: Vec<CString> = bash_order(exported)
        .into_iter()
        .map(|(name, value)| entry(name, value))
        .collect::<Option<_>>()?;
    env.push(entry(b"_", path.as_bytes())?);
    Some(Direct {
        path: CString::new(path.into_vec()).ok()?,
        argv: argv
            .iter()
            .map(|a| CString::new(a.as_bytes()).ok())
            .collect::<Option<_>>()?,
        env,
    })
}

/// `NAME` as bash's variables are named; bash passes other names on in an order
/// of its own, so a command whose environment holds one runs under bash.
fn is_identifier(name: &OsStr) -> bool {
    let bytes = name.as_bytes();
    bytes
        .first()
        .is_some_and(|b| b.is_ascii_alphabetic() || *b == b'_')
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || *b == b'_')
}

/// Buckets of bash's variable table (`VARIABLES_HASH_BUCKETS`).
const BASH_BUCKETS: u32 = 1024;

/// `vars`, in the order they were defined, put in the order bash 5 exports them:
/// its variable table's bucket order (FNV-1 of the name, 1024 buckets), the most
/// recently defined first within a bucket. `printenv` shows that order, and a
/// program may depend on it; the differential test checks it against bash.
fn bash_order<'a>(vars: Vec<Var<'a>>) -> Vec<Var<'a>> {
    let mut keyed: Vec<(usize, Var<'a>)> = vars.into_iter().enumerate().collect();
    keyed.sort_by_key(|(defined, (name, _))| {
        (fnv1(name) % BASH_BUCKETS, std::cmp::Reverse(*defined))
    });
    keyed.into_iter().map(|(_, var)| var).collect()
}

/// A variable's name and value.
type Var<'a> = (&'a [u8], &'a [u8]);

/// bash's `hash_string`: 32-bit FNV-1.
fn fnv1(bytes: &[u8]) -> u32 {
    bytes.iter().fold(2_166_136_261u32, |h, b| {
        h.wrapping_mul(16_777_619) ^ u32::from(*b)
    })
}

fn entry(name: &[u8], value: &[u8]) -> Option<CString> {
    let mut bytes = Vec::with_capacity(name.len() + value.len() + 1);
    bytes.extend_from_slice(name);
    bytes.push(b'=');
    bytes.extend_from_slice(value);
    CString::new(bytes).ok()
}

/// `SHLVL` as bash exports it to a program it `exec`s for `bash -c`: raised by one
/// at start and lowered by one for the `exec`, so unchanged (normalised), `0` when
/// unset. `None` for anything else (a sign, blanks, no digits, or a level that
/// makes bash warn "shell level too high"): bash then handles it itself.
fn shell_level(value: Option<&OsStr>) -> Option<String> {
    let Some(value) = value else {
        return Some("0".into());
    };
    let digits = value.to_str()?;
    if digits.is_empty() || digits.len() > 3 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let level: u16 = digits.parse().ok()?;
    (level <= 998).then(|| level.to_string())
}

/// bash's search of `PATH` for `name` (no `/` in it): the first candidate that
/// exists, is not a directory and that this process may execute. `None` when
/// none is, or `PATH` is empty or holds an entry bash would tilde-expand.
fn search(name: &str, path: &OsStr) -> Option<OsString> {
    if path.is_empty() {
        // bash then runs `name` from the working directory: left to bash.
        return None;
    }
    for dir in path.as_bytes().split(|b| *b == b':') {
        if dir.starts_with(b"~") {
            return None;
        }
        let dir: &[u8] = if dir.is_empty() { b"." } else { dir };
        let mut candidate = dir.to_vec();
        if !candidate.ends_with(b"/") {
            candidate.push(b'/');
        }
        candidate.extend_from_slice(name.as_bytes());
        // bash's eaccess treats /dev/fd/N and /dev/std* specially.
        if candidate.starts_with(b"/dev/") {
            return None;
        }
        let candidate = OsString::from_vec(candidate);
        match std::fs::metadata(&candidate) {
            Ok(meta) if !meta.is_dir() => {}
            _ => continue,
        }
        if faccessat(
            nix::fcntl::AT_FDCWD,
            candidate.as_os_str(),
            AccessFlags::X_OK,
            nix::fcntl::AtFlags::AT_EACCESS,
        )
        .is_ok()
        {
            return Some(candidate);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shlvl_is_what_bash_exports_or_left_to_bash() {
        let level = |v: Option<&str>| shell_level(v.map(OsStr::new));
        assert_eq!(level(None).as_deref(), Some("0"));
        assert_eq!(level(Some("0")).as_deref(), Some("0"));
        assert_eq!(level(Some("5")).as_deref(), Some("5"));
        assert_eq!(level(Some("007")).as_deref(), Some("7"));
        assert_eq!(level(Some("998")).as_deref(), Some("998"));
        for odd in ["999", "1000", "-1", " 3", "x", "", "+2"] {
            assert_eq!(level(Some(odd)), None, "{odd:?}");
        }
    }

    #[test]
    fn path_search_follows_bash() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("harnessd-direct-{}", std::process::id()));
        let (a, b) = (dir.join("a"), dir.join("b"));
        std::fs::create_dir_all(&a).unwrap();
        std::fs::create_dir_all(b.join("sub")).unwrap();
        std::fs::write(a.join("prog"), "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(a.join("prog"), std::fs::Permissions::from_mode(0o644)).unwrap();
        std::fs::write(b.join("prog"), "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(b.join("prog"), std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = |p: String| OsString::from(p);
        let (a, b) = (a.display(), b.display());
        // Not executable in `a`: the executable one later on wins.
        assert_eq!(
            search("prog", &path(format!("{a}:{b}/"))),
            Some(path(format!("{b}/prog")))
        );
        assert_eq!(
            search("prog", &path(format!("{b}//"))),
            Some(path(format!("{b}//prog")))
        );
        // A directory is skipped, and nothing else is found.
        assert_eq!(search("sub", &path(format!("{b}"))), None);
        assert_eq!(search("missing", &path(format!("{a}:{b}"))), None);
        assert_eq!(search("prog", OsStr::new("")), None);
        assert_eq!(search("prog", &path(format!("~/x:{b}"))), None);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_environment_is_in_the_order_bash_exports_it() {
        // As bash 5.2 printed it for this environment.
        let vars: Vec<(&[u8], &[u8])> = [
            "PATH",
            "LANG",
            "HOME",
            "TMPDIR",
            "TERM",
            "GIT_CONFIG_COUNT",
            "GIT_CONFIG_KEY_0",
            "GIT_CONFIG_VALUE_0",
            "PWD",
            "SHLVL",
        ]
        .iter()
        .map(|n| (n.as_bytes(), &b""[..]))
        .collect();
        let names: Vec<&str> = bash_order(vars)
            .into_iter()
            .map(|(n, _)| std::str::from_utf8(n).unwrap())
            .collect();
        let printed = [
            "PWD",
            "HOME",
            "LANG",
            "TMPDIR",
            "TERM",
            "GIT_CONFIG_VALUE_0",
            "SHLVL",
            "GIT_CONFIG_COUNT",
            "PATH",
            "GIT_CONFIG_KEY_0",
        ];
        assert_eq!(names, printed);
    }

    #[test]
    fn variables_bash_reads_send_the_command_to_bash() {
        for name in [
            "BASH_ENV",
            "BASH_FUNC_ls%%",
            "SHELLOPTS",
            "PWD",
            "OLDPWD",
            "IFS",
            "ENV",
        ] {
            assert!(read_by_bash(OsStr::new(name)), "{name}");
        }
        for name in [
            "PATH",
            "HOME",
            "LANG",
            "TMPDIR",
            "TERM",
            "GIT_CONFIG_COUNT",
            "LC_ALL",
        ] {
            assert!(!read_by_bash(OsStr::new(name)), "{name}");
        }
    }
}
