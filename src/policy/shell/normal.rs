//! Normalised forms of a seen command, for deny rules (docs/policy.md), and the programs
//! that make a command not provable.
//!
//! A deny rule such as `run_bash(rm -rf *)` must also catch `/bin/rm -fr /`,
//! `sudo rm -r -f /` and `\rm -rf /`: each seen command is matched as written, after
//! quote removal, with wrappers looked through and the program's base name, and with
//! its short options merged and sorted in every order a pattern might spell them.

use super::SeenCommand;

/// Shell builtins (bash 5) and the few of them that are provable: they run nothing
/// else, read no variable name or arithmetic from their arguments, and do not
/// change how later commands are found. Any other builtin — `eval`, `source`,
/// `hash -p`, `enable -f`, `alias`, `declare`, `printf -v`, `read`, `test -v`… —
/// can run or redirect other text.
pub(super) const BUILTINS: [&str; 61] = [
    ".",
    ":",
    "[",
    "alias",
    "bg",
    "bind",
    "break",
    "builtin",
    "caller",
    "cd",
    "command",
    "compgen",
    "complete",
    "compopt",
    "continue",
    "declare",
    "dirs",
    "disown",
    "echo",
    "enable",
    "eval",
    "exec",
    "exit",
    "export",
    "false",
    "fc",
    "fg",
    "getopts",
    "hash",
    "help",
    "history",
    "jobs",
    "kill",
    "let",
    "local",
    "logout",
    "mapfile",
    "popd",
    "printf",
    "pushd",
    "pwd",
    "read",
    "readarray",
    "readonly",
    "return",
    "set",
    "shift",
    "shopt",
    "source",
    "suspend",
    "test",
    "times",
    "trap",
    "true",
    "type",
    "typeset",
    "ulimit",
    "umask",
    "unalias",
    "unset",
    "wait",
];
const PROVABLE_BUILTINS: [&str; 6] = [":", "cd", "echo", "false", "pwd", "true"];

/// Programs whose arguments are another command or script: running them runs text
/// harnessd has not proven.
const RUNS_OTHER: [&str; 52] = [
    "bash",
    "sh",
    "dash",
    "zsh",
    "ksh",
    "mksh",
    "rbash",
    "fish",
    "csh",
    "tcsh",
    "busybox",
    "env",
    "xargs",
    "nohup",
    "nice",
    "timeout",
    "time",
    "sudo",
    "doas",
    "su",
    "runuser",
    "setsid",
    "stdbuf",
    "chroot",
    "unshare",
    "nsenter",
    "flock",
    "ionice",
    "taskset",
    "chrt",
    "watch",
    "parallel",
    "script",
    "strace",
    "ltrace",
    "systemd-run",
    "setpriv",
    "prlimit",
    "unbuffer",
    "expect",
    "pkexec",
    "setarch",
    "linux32",
    "linux64",
    "fakeroot",
    "ssh-agent",
    "sg",
    "capsh",
    "valgrind",
    "start-stop-daemon",
    "dbus-run-session",
    "runcon",
];
const SHELLS: [&str; 11] = [
    "bash", "sh", "dash", "zsh", "ksh", "mksh", "rbash", "fish", "csh", "tcsh", "busybox",
];
const FIND_RUNS: [&str; 4] = ["-exec", "-execdir", "-ok", "-okdir"];

/// At most this many wrappers are looked through in one command.
const MAX_WRAPPERS: usize = 64;

/// The last path component: `/bin/rm` → `rm`.
fn base_name(word: &str) -> &str {
    word.rsplit('/').next().unwrap_or(word)
}

/// Why a command with these words (assignments removed) is not provable, if it is
/// not.
pub(super) fn not_provable_program(words: &[String]) -> Option<String> {
    let program = words.first()?;
    if BUILTINS.contains(&program.as_str()) && !PROVABLE_BUILTINS.contains(&program.as_str()) {
        return Some(format!(
            "`{program}` is a shell builtin that can run or redirect other commands"
        ));
    }
    let base = base_name(program);
    if RUNS_OTHER.contains(&base) || is_dynamic_loader(base) {
        return Some(format!("`{base}` runs another command"));
    }
    if base == "find" && words.iter().any(|w| FIND_RUNS.contains(&w.as_str())) {
        return Some("`find -exec` runs another command".into());
    }
    let eff = effective(words);
    crate::policy::programs::met(&eff)
        .into_iter()
        .find(|e| e.effect == crate::policy::programs::Effect::Runs)
        .map(|e| format!("`{} {}` runs other text: {}", e.program, e.what, e.why))
}

/// `ld-linux-x86-64.so.2`, `ld.so`: the dynamic loader runs the program it is given.
fn is_dynamic_loader(base: &str) -> bool {
    base == "ld.so" || (base.starts_with("ld-") && base.contains(".so"))
}

/// Whether the program word is a wrapper that runs another command or a shell.
pub(super) fn is_wrapper_or_shell(words: &[String]) -> bool {
    let skip = words.iter().take_while(|w| is_assignment(w)).count();
    words.get(skip).is_some_and(|w| {
        let base = base_name(w);
        RUNS_OTHER.contains(&base)
            || SHELLS.contains(&base)
            || is_dynamic_loader(base)
            // A builtin that is not provable can rebind names (`hash -p`,
            // `alias`, `enable -f`) or run text, so later commands are not what
            // they seem.
            || (BUILTINS.contains(&base) && !PROVABLE_BUILTINS.contains(&base))
            || matches!(
                base,
                "eval" | "source" | "." | "exec" | "command" | "builtin" | "pkexec"
            )
    })
}

/// Something a command runs itself, followed for seen commands.
pub(super) enum Inner {
    /// A script: `bash -c SCRIPT`, `eval ARGS…`, `trap SCRIPT …`.
    Script(String),
    /// A command line: `find … -exec CMD… ;`.
    Argv(Vec<String>),
}

/// What the command (with wrappers looked through) runs itself.
pub(super) fn inner(words: &[String]) -> Vec<Inner> {
    let eff = effective(words);
    let Some(program) = eff.first() else {
        return Vec::new();
    };
    let args = eff.get(1..).unwrap_or_default();
    let mut out = Vec::new();
    match program.as_str() {
        p if SHELLS.contains(&p) => {
            // `-c`, or a cluster holding c (`-lc`, `-ec`): the first operand after it
            // is the script.
            let takes_script =
                |w: &String| w.starts_with('-') && !w.starts_with("--") && w.contains('c');
            if let Some(at) = args.iter().position(takes_script)
                && let Some(script) = args
                    .get(at + 1..)
                    .and_then(|rest| rest.iter().find(|w| !w.starts_with('-')))
            {
                out.push(Inner::Script(script.clone()));
            }
        }
        "eval" => out.push(Inner::Script(args.join(" "))),
        "trap" => out.extend(args.first().map(|s| Inner::Script(s.clone()))),
        "su" | "runuser" | "flock" | "script" => out.extend(dash_c_script(args).map(Inner::Script)),
        // watch runs its arguments joined through `sh -c` (unless `-x`).
        "watch" => {
            let skip = wrapper_arity("watch", args).unwrap_or(0);
            let rest = args.get(skip..).unwrap_or_default();
            if !rest.is_empty() {
                out.push(Inner::Script(rest.join(" ")));
            }
        }
        "find" => {
            let mut rest = args;
            while let Some(at) = rest.iter().position(|w| FIND_RUNS.contains(&w.as_str())) {
                let after = rest.get(at + 1..).unwrap_or_default();
                let end = after
                    .iter()
                    .position(|w| w == ";" || w == "+")
                    .unwrap_or(after.len());
                let argv = after.get(..end).unwrap_or_default().to_vec();
                if !argv.is_empty() {
                    out.push(Inner::Argv(argv));
                }
                rest = after.get(end..).unwrap_or_default();
            }
        }
        _ => {}
    }
    out
}

/// The script of `-c SCRIPT`, `--command SCRIPT`, `--command=SCRIPT`, or a cluster
/// ending in `c` (`-qc SCRIPT`) or holding it (`-qcSCRIPT`), before `--`.
fn dash_c_script(args: &[String]) -> Option<String> {
    for (i, w) in args.iter().enumerate() {
        if w == "--" {
            return None;
        }
        if w == "--command" {
            return args.get(i + 1).cloned();
        }
        if let Some(s) = w.strip_prefix("--command=") {
            return Some(s.to_string());
        }
        if let Some(cluster) = w.strip_prefix('-')
            && !cluster.starts_with('-')
            && let Some(at) = cluster.find('c')
        {
            let attached = cluster.get(at + 1..).unwrap_or_default();
            return if attached.is_empty() {
                args.get(i + 1).cloned()
            } else {
                Some(attached.to_string())
            };
        }
    }
    None
}

/// Whether `word` is `NAME=…`.
fn is_assignment(word: &str) -> bool {
    word.split_once('=').is_some_and(|(name, _)| {
        let mut c = name.chars();
        c.next()
            .is_some_and(|c| c == '_' || c.is_ascii_alphabetic())
            && c.all(|c| c == '_' || c.is_ascii_alphanumeric())
    })
}

/// The options of `sudo` (and `doas`, which takes a subset) that take an argument.
const SUDO_OPTIONS: &[&str] = &[
    "-u",
    "-g",
    "-C",
    "-D",
    "-h",
    "-p",
    "-r",
    "-t",
    "-U",
    "-T",
    "-R",
    "--user",
    "--group",
    "--close-from",
    "--chdir",
    "--host",
    "--prompt",
    "--role",
    "--type",
    "--other-user",
    "--command-timeout",
    "--chroot",
];

/// Options of `runuser` and `su` (util-linux, which shares them) that take a value.
const RUNUSER_OPTIONS: &[&str] = &[
    "-u",
    "-g",
    "-G",
    "-s",
    "-w",
    "--user",
    "--group",
    "--supp-group",
    "--shell",
    "--whitelist-environment",
];

/// The options of `strace` and `ltrace` that take an argument (the union of both).
const TRACE_OPTIONS: &[&str] = &[
    "-o",
    "-e",
    "-p",
    "-s",
    "-u",
    "-a",
    "-b",
    "-E",
    "-I",
    "-O",
    "-S",
    "-P",
    "-X",
    "-n",
    "-l",
    "-L",
    "--output",
    "--signal",
    "--trace",
    "--user",
    "--env",
    "--string-limit",
];

/// Wrappers looked through for seen commands (docs/policy.md), each with its options that
/// take a separate argument (long ones too: getopt takes `--user root` like
/// `--user=root`). `busybox APPLET ARGS…` runs the applet like a wrapper runs its
/// command.
const WRAPPER_OPTIONS: &[(&str, &[&str])] = &[
    ("sudo", SUDO_OPTIONS),
    ("doas", SUDO_OPTIONS),
    ("env", &["-u", "--unset", "-C", "--chdir"]),
    ("nice", &["-n", "--adjustment"]),
    ("timeout", &["-s", "--signal", "-k", "--kill-after"]),
    ("time", &["-f", "--format", "-o", "--output"]),
    (
        "xargs",
        &[
            "-I",
            "-n",
            "-L",
            "-P",
            "-s",
            "-d",
            "-E",
            "-a",
            "--arg-file",
            "--delimiter",
            "--max-args",
            "--max-procs",
            "--max-chars",
            "--process-slot-var",
        ],
    ),
    (
        "stdbuf",
        &["-i", "-o", "-e", "--input", "--output", "--error"],
    ),
    ("exec", &["-a"]),
    ("ionice", &["-c", "-n", "--class", "--classdata"]),
    (
        "chrt",
        &[
            "-T",
            "-P",
            "-D",
            "--sched-runtime",
            "--sched-period",
            "--sched-deadline",
        ],
    ),
    ("flock", &["-w", "--timeout", "-E", "--conflict-exit-code"]),
    (
        "setpriv",
        &[
            "--reuid",
            "--regid",
            "--groups",
            "--inh-caps",
            "--ambient-caps",
            "--bounding-set",
            "--securebits",
            "--selinux-label",
            "--apparmor-profile",
            "--landlock-access",
            "--landlock-rule",
            "--pdeathsig",
            "--ptracer",
            "--seccomp-filter",
        ],
    ),
    ("strace", TRACE_OPTIONS),
    ("ltrace", TRACE_OPTIONS),
    (
        "unshare",
        &[
            "-S",
            "-G",
            "-R",
            "-w",
            "--setuid",
            "--setgid",
            "--root",
            "--wd",
            "--map-user",
            "--map-group",
            "--map-users",
            "--map-groups",
            "--propagation",
        ],
    ),
    (
        "nsenter",
        &["-t", "--target", "-S", "-G", "--setuid", "--setgid"],
    ),
    ("runuser", RUNUSER_OPTIONS),
    ("su", RUNUSER_OPTIONS),
    ("pkexec", &["--user"]),
    (
        "systemd-run",
        &[
            "-p",
            "--property",
            "-u",
            "--unit",
            "-E",
            "--setenv",
            "--uid",
            "--gid",
            "--nice",
            "-M",
            "--machine",
            "--slice",
            "--working-directory",
            "--description",
            "-H",
            "--host",
            "--on-active",
            "--on-boot",
            "--on-calendar",
            "--timer-property",
            "--path-property",
            "--socket-property",
            "--service-type",
        ],
    ),
    ("watch", &["-n", "--interval", "-q", "--equexit"]),
    ("prlimit", &["-p", "--pid"]),
    ("chroot", &[]),
    ("taskset", &[]),
    ("nohup", &[]),
    ("command", &[]),
    ("builtin", &[]),
    ("setsid", &[]),
    ("busybox", &[]),
    ("coproc", &[]),
];

/// How many words after a wrapper's own name are its options (and their
/// arguments), for the wrappers docs/policy.md names and a few alike.
fn wrapper_arity(wrapper: &str, args: &[String]) -> Option<usize> {
    // With `-c` these run a script, which `inner` follows, not an argv.
    if matches!(wrapper, "su" | "runuser" | "flock") && dash_c_script(args).is_some() {
        return None;
    }
    // Options that take a separate argument, per wrapper.
    // Long options too: getopt takes `--user root` like `--user=root`.
    let with_arg: &[&str] = match WRAPPER_OPTIONS.iter().find(|(w, _)| *w == wrapper) {
        Some((_, options)) => options,
        None => return None,
    };
    let mut i = 0;
    while let Some(w) = args.get(i) {
        if w == "--" {
            i += 1;
            break;
        }
        if wrapper == "env" && (is_assignment(w) || w == "-") {
            // `env -` is `env -i`.
            i += 1;
        } else if w.starts_with('-') && w.len() > 1 {
            i += if with_arg.contains(&w.as_str()) { 2 } else { 1 };
        } else {
            break;
        }
    }
    // One operand before the command: `timeout DURATION CMD`, `taskset MASK CMD`,
    // `chrt PRIO CMD`, `flock FILE CMD`, `chroot DIR CMD`, `su USER …`.
    let user_given = args.iter().any(|w| w == "-u" || w == "--user");
    let operand = match wrapper {
        "timeout" | "chrt" | "flock" | "chroot" => true,
        // `taskset -p` works on a pid; `taskset MASK CMD` and `-c LIST CMD` alike.
        "taskset" => true,
        "runuser" | "su" => !user_given,
        _ => false,
    };
    if operand {
        i += 1;
    }
    Some(i.min(args.len()))
}

/// `env`'s split string, however written (`-S X`, `-SX`, `-iS X`, `-iSX`,
/// `--split-string X`, `--split-string=X`), and the index of the word after it.
fn env_split_string(args: &[String]) -> Option<(String, usize)> {
    for (i, w) in args.iter().enumerate() {
        if w == "--" || !w.starts_with('-') {
            return None;
        }
        if w == "--split-string" {
            return Some((args.get(i + 1).cloned().unwrap_or_default(), i + 2));
        }
        if let Some(script) = w.strip_prefix("--split-string=") {
            return Some((script.to_string(), i + 1));
        }
        if w.starts_with("--") {
            continue;
        }
        // A cluster of short options: `u` and `C` take the rest as their argument.
        for (at, c) in w.char_indices().skip(1) {
            match c {
                'u' | 'C' => break,
                'S' => {
                    let attached = w.get(at + 1..).unwrap_or_default();
                    return Some(if attached.is_empty() {
                        (args.get(i + 1).cloned().unwrap_or_default(), i + 2)
                    } else {
                        (attached.to_string(), i + 1)
                    });
                }
                _ => {}
            }
        }
    }
    None
}

/// The words of what actually runs: leading assignments and wrappers removed, the
/// program as its base name. `env -S 'a b'` is split like env splits it.
pub(crate) fn effective(words: &[String]) -> Vec<String> {
    let mut words: Vec<String> = words.to_vec();
    for _ in 0..MAX_WRAPPERS {
        let skip = words.iter().take_while(|w| is_assignment(w)).count();
        words.drain(..skip);
        let Some(first) = words.first() else { break };
        let base = base_name(first).to_string();
        let args = words.get(1..).unwrap_or_default();
        if base == "env"
            && let Some((script, after)) = env_split_string(args)
        {
            // The split words are env's own arguments again (`-S '-i rm …'`).
            let rest = args.get(after..).unwrap_or_default().to_vec();
            words = std::iter::once(base)
                .chain(script.split_whitespace().map(str::to_string))
                .chain(rest)
                .collect();
            continue;
        }
        match wrapper_arity(&base, args) {
            Some(n) => {
                words.drain(..(n + 1).min(words.len()));
            }
            None => {
                if let Some(first) = words.first_mut() {
                    *first = base;
                }
                break;
            }
        }
    }
    words
}

/// Characters a word may hold and still be written without quotes.
fn plain(c: char) -> bool {
    c.is_ascii_alphanumeric() || "-_./,:=+%@^".contains(c)
}

/// `word` quoted for a shell only where needed: `a b` → `'a b'`, `it's` → `'it'\''s'`.
pub fn quote_word(word: &str) -> String {
    if !word.is_empty() && word.chars().all(plain) {
        return word.to_string();
    }
    format!("'{}'", word.replace('\'', r"'\''"))
}

/// Whether `word`, written without quotes before the program, would be an assignment
/// (`NAME=…` or `NAME+=…`).
fn reads_as_assignment(word: &str) -> bool {
    word.split_once('=').is_some_and(|(name, _)| {
        let name = name.strip_suffix('+').unwrap_or(name);
        let mut c = name.chars();
        c.next()
            .is_some_and(|c| c == '_' || c.is_ascii_alphabetic())
            && c.all(|c| c == '_' || c.is_ascii_alphanumeric())
    })
}

/// Reserved words bash recognises only unquoted in command position.
const RESERVED: [&str; 22] = [
    "if", "then", "else", "elif", "fi", "case", "esac", "for", "select", "while", "until", "do",
    "done", "in", "function", "time", "coproc", "{", "}", "!", "[[", "]]",
];

/// Words rendered with [`quote_word`], joined by spaces. The program word is also
/// quoted when it would read back as a keyword or an assignment (`\if`, `\a=`), so
/// the rendering always reads back as the same argv.
pub(super) fn render(words: &[String]) -> String {
    words
        .iter()
        .enumerate()
        .map(|(i, w)| {
            if i == 0 && (RESERVED.contains(&w.as_str()) || reads_as_assignment(w)) {
                format!("'{}'", w.replace('\'', r"'\''"))
            } else {
                quote_word(w)
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Every form of `cmd` deny and ask patterns are tried against.
pub(super) fn forms(cmd: &SeenCommand) -> Vec<String> {
    let mut out = vec![cmd.text.clone(), cmd.words.join(" ")];
    let eff = effective(&cmd.words);
    out.push(eff.join(" "));
    if let Some((program, args)) = eff.split_first() {
        for (program, args) in folded(program, args) {
            out.push(
                format!("{program} {}", args.join(" "))
                    .trim_end()
                    .to_string(),
            );
            merged_forms(&program, &args, &mut out);
        }
    }
    out.sort();
    out.dedup();
    out
}

/// `program -<letters> rest` in every order and subset the letters can be
/// written in, for short options merged and sorted.
fn merged_forms(program: &str, args: &[String], out: &mut Vec<String>) {
    let mut letters: Vec<char> = Vec::new();
    let mut rest: Vec<&str> = Vec::new();
    let mut options_end = false;
    for w in args {
        let short = !options_end
            && w.len() > 1
            && w.starts_with('-')
            && !w.starts_with("--")
            && w.chars().skip(1).all(|c| c.is_ascii_alphanumeric());
        if short {
            letters.extend(w.chars().skip(1));
        } else {
            options_end |= w == "--";
            rest.push(w);
        }
    }
    letters.sort_unstable();
    letters.dedup();
    if letters.is_empty() {
        return;
    }
    let rest = rest.join(" ");
    for order in orders(&letters) {
        let merged = format!("{program} -{order} {rest}");
        out.push(merged.trim_end().to_string());
    }
    // Extra letters cannot hide the ones a pattern names: `rm -rfv d` and
    // `rm -r -v -f d` are also tried as `rm -rf d`, `rm -fr d`, `rm -r d` ….
    for order in subsets(&letters) {
        let merged = format!("{program} -{order} {rest}");
        out.push(merged.trim_end().to_string());
    }
}

/// The command with option spellings folded (docs/policy.md), as (program, args)
/// variants: the command itself first, then each spelling a deny pattern might
/// use. `rm -R --force d` is also `rm -r -f d` and `rm -R -f d`; `kill -s KILL 1`
/// is also `kill -9 1`; `git push origin +main` is also `git push --force origin
/// main`; `find d -delete` is also `rm -rf d`.
fn folded(program: &str, args: &[String]) -> Vec<(String, Vec<String>)> {
    let mut out = vec![(program.to_string(), args.to_vec())];
    out.extend(option_spellings(program, args));
    match program {
        "kill" => out.extend(kill_spellings(args)),
        "git" => out.extend(git_push_forced(args)),
        "find" if args.iter().any(|a| a == "-delete") => {
            let paths: Vec<String> = args
                .iter()
                .take_while(|a| !a.starts_with('-') && *a != "(" && *a != "!")
                .cloned()
                .collect();
            let paths = if paths.is_empty() {
                vec![".".to_string()]
            } else {
                paths
            };
            out.push((
                "rm".into(),
                std::iter::once("-rf".to_string()).chain(paths).collect(),
            ));
        }
        _ => {}
    }
    out
}

/// `rm`, `cp`, `mv`, `chmod`, `chown`, `chgrp` with their long options (and any
/// prefix of them) as short ones, `-R` as `-r` for `rm` and `cp` (and back), and
/// `rm -r` also as `rm -rf`.
fn option_spellings(program: &str, args: &[String]) -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    let longs: &[(&str, &str)] = match program {
        "rm" => &[("--recursive", "-r"), ("--force", "-f"), ("--dir", "-d")],
        "cp" => &[("--recursive", "-r"), ("--force", "-f")],
        "mv" => &[("--force", "-f")],
        "chmod" | "chown" | "chgrp" => &[("--recursive", "-R")],
        _ => &[],
    };
    if !longs.is_empty() {
        let mut options_end = false;
        let canon: Vec<String> = args
            .iter()
            .map(|w| {
                if options_end {
                    return w.clone();
                }
                options_end |= w == "--";
                // Any prefix getopt takes (`--rec`, `--fo`) is the option.
                let name = w.split_once('=').map_or(w.as_str(), |(n, _)| n);
                if let Some((_, short)) = longs
                    .iter()
                    .find(|(l, _)| name.len() > 2 && name.starts_with("--") && l.starts_with(name))
                {
                    return short.to_string();
                }
                // `--interactive=never` asks nothing: it is `-f`.
                if program == "rm" && w.starts_with("--interactive=n") {
                    return "-f".to_string();
                }
                // `rm -R` and `cp -R` are `-r`.
                if matches!(program, "rm" | "cp") && w.starts_with('-') && !w.starts_with("--") {
                    return w.replace('R', "r");
                }
                w.clone()
            })
            .collect();
        // Tools have no terminal: `rm -r` asks nothing (write-protected files
        // aside, answered "no" from /dev/null), so it is also tried as `rm -rf`.
        let short =
            |w: &String, l: char| w.starts_with('-') && !w.starts_with("--") && w.contains(l);
        let options: Vec<&String> = canon.iter().take_while(|w| *w != "--").collect();
        if program == "rm"
            && options.iter().any(|w| short(w, 'r'))
            && !options.iter().any(|w| short(w, 'f'))
        {
            let forced = std::iter::once("-f".to_string())
                .chain(canon.iter().cloned())
                .collect();
            out.push((program.to_string(), forced));
        }
        if matches!(program, "rm" | "cp") {
            let upper = canon
                .iter()
                .map(|w| {
                    if w.starts_with('-') && !w.starts_with("--") {
                        w.replace('r', "R")
                    } else {
                        w.clone()
                    }
                })
                .collect();
            out.push((program.to_string(), upper));
        }
        out.push((program.to_string(), canon));
    }
    out
}

/// Signal names and numbers `kill` accepts for the same signal.
const SIGNALS: [(&str, &str); 9] = [
    ("1", "HUP"),
    ("2", "INT"),
    ("3", "QUIT"),
    ("9", "KILL"),
    ("10", "USR1"),
    ("12", "USR2"),
    ("15", "TERM"),
    ("18", "CONT"),
    ("19", "STOP"),
];

/// `kill` with its signal written as `-9`, `-KILL`, `-SIGKILL` and `-s KILL`.
fn kill_spellings(args: &[String]) -> Vec<(String, Vec<String>)> {
    let (signal, rest): (Option<&str>, Vec<String>) = match args.first().map(String::as_str) {
        Some("-s" | "-n" | "--signal") => (
            args.get(1).map(String::as_str),
            args.get(2..).unwrap_or_default().to_vec(),
        ),
        Some(a) if a.starts_with('-') && a.len() > 1 && a != "--" && a != "-l" && a != "-L" => {
            (Some(&a[1..]), args.get(1..).unwrap_or_default().to_vec())
        }
        _ => return Vec::new(),
    };
    let Some(signal) = signal else {
        return Vec::new();
    };
    let name = signal
        .strip_prefix("SIG")
        .unwrap_or(signal)
        .to_ascii_uppercase();
    let Some((number, name)) = SIGNALS
        .iter()
        .find(|(n, s)| *n == name || *s == name)
        .copied()
    else {
        return Vec::new();
    };
    let with = |spec: Vec<String>| {
        let args: Vec<String> = spec.into_iter().chain(rest.iter().cloned()).collect();
        ("kill".to_string(), args)
    };
    vec![
        with(vec![format!("-{number}")]),
        with(vec![format!("-{name}")]),
        with(vec![format!("-SIG{name}")]),
        with(vec!["-s".into(), name.to_string()]),
    ]
}

/// `git push` that forces (`-f`, `--force`, `--force-with-lease`,
/// `--force-if-includes`, a `+refspec`), also as `git push --force …` and
/// `git push -f …` with the rest unforced.
fn git_push_forced(args: &[String]) -> Vec<(String, Vec<String>)> {
    let Some(at) = args.iter().position(|a| a == "push") else {
        return Vec::new();
    };
    // Global options (`-C dir`) are left out: patterns name `git push …`.
    let after = args.get(at + 1..).unwrap_or_default();
    let forcing = |a: &String| {
        a == "-f"
            || a == "--force"
            || a.starts_with("--force-with-lease")
            || a == "--force-if-includes"
            || (a.starts_with('-') && !a.starts_with("--") && a.contains('f'))
    };
    let plus = after.iter().any(|a| a.starts_with('+') && a.len() > 1);
    if !plus && !after.iter().any(forcing) {
        return Vec::new();
    }
    let rest: Vec<String> = after
        .iter()
        .filter(|a| !forcing(a))
        .map(|a| a.strip_prefix('+').unwrap_or(a).to_string())
        .collect();
    ["--force", "-f"]
        .into_iter()
        .map(|f| {
            let args = ["push".to_string(), f.to_string()]
                .into_iter()
                .chain(rest.iter().cloned())
                .collect();
            ("git".to_string(), args)
        })
        .collect()
}

/// The orders merged option letters are written in: every permutation of up to
/// four letters, else sorted and reverse-sorted.
fn orders(letters: &[char]) -> Vec<String> {
    if letters.len() > 4 {
        let asc: String = letters.iter().collect();
        let desc: String = letters.iter().rev().collect();
        return vec![asc, desc];
    }
    let mut out = Vec::new();
    permute(letters.to_vec(), 0, &mut out);
    out
}

/// Letters of at most this many distinct options are also tried in subsets.
const MAX_SUBSET_LETTERS: usize = 8;

/// Every ordered choice of one or two of `letters` (as many as a deny pattern
/// usually names); none when there are more than [`MAX_SUBSET_LETTERS`], which
/// bounds them to 64 for one command.
fn subsets(letters: &[char]) -> Vec<String> {
    if letters.len() < 2 || letters.len() > MAX_SUBSET_LETTERS {
        return Vec::new();
    }
    let mut out = Vec::new();
    for (i, &a) in letters.iter().enumerate() {
        out.push(a.to_string());
        for (j, &b) in letters.iter().enumerate() {
            if j != i {
                out.push([a, b].iter().collect());
            }
        }
    }
    out
}

fn permute(mut v: Vec<char>, k: usize, out: &mut Vec<String>) {
    if k + 1 >= v.len() {
        out.push(v.iter().collect());
        return;
    }
    for j in k..v.len() {
        v.swap(k, j);
        permute(v.clone(), k + 1, out);
        v.swap(k, j);
    }
}
