//! What other programs do with their arguments (docs/policy.md): the one table of
//! programs whose options make them *run* other text or *write* files they name.
//!
//! A *runs* entry makes a command not provable: no `allow` or `allow_write`
//! pattern applies, because the text it would run (a `sed` `e` command, an `awk`
//! program, a compress program) is not what the pattern was written about. A
//! *writes* entry leaves the command provable; what it may write is the profile's
//! to say, and the kernel enforces it (an `allow` runs read-only). A program that
//! runs code the workspace holds (`make`, `npm test`) is provable too — the
//! command is known — but `check` warns about an `allow_write` rule for it and
//! `approve --remember` never writes one.
//!
//! [`met`] takes the words of one simple command with wrappers already looked
//! through and the program as its base name (see `shell::normal::effective`). When
//! it cannot read a program's arguments (an unparseable `sed` script), it says
//! *runs*: unknown is never provable. Each entry is tested against the real
//! program in `tests/it/programs.rs`.

/// What an option makes a program do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    /// It runs other text: a command, a script, code.
    Runs,
    /// It writes files its arguments name.
    Writes,
    /// It runs code the workspace holds (a Makefile, a test suite).
    WorkspaceCode,
}

impl Effect {
    /// The effect as recorded.
    pub fn as_str(self) -> &'static str {
        match self {
            Effect::Runs => "runs",
            Effect::Writes => "writes",
            Effect::WorkspaceCode => "runs workspace code",
        }
    }
}

/// One entry of the table: a program and what one of its options does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// The program (its base name; variants such as `gawk` share `awk`'s entries).
    pub program: &'static str,
    /// The option, command or form, as the record names it (`e command`, `-delete`).
    pub what: &'static str,
    /// What it does.
    pub effect: Effect,
    /// Why, for the record and the docs.
    pub why: &'static str,
}

impl Entry {
    /// `sed e: runs`, as `policy_decision` lists it.
    pub fn label(&self) -> String {
        format!("{} {}: {}", self.program, self.what, self.effect.as_str())
    }
}

const fn runs(program: &'static str, what: &'static str, why: &'static str) -> Entry {
    Entry {
        program,
        what,
        effect: Effect::Runs,
        why,
    }
}

const fn writes(program: &'static str, what: &'static str, why: &'static str) -> Entry {
    Entry {
        program,
        what,
        effect: Effect::Writes,
        why,
    }
}

const fn workspace(program: &'static str, what: &'static str, why: &'static str) -> Entry {
    Entry {
        program,
        what,
        effect: Effect::WorkspaceCode,
        why,
    }
}

/// The table. [`met`] decides which entries a command meets; this list is what
/// docs and tests enumerate.
pub const TABLE: &[Entry] = &[
    runs(
        "sed",
        "e command",
        "`e` runs the pattern space or its argument as a shell command",
    ),
    runs(
        "sed",
        "s///e flag",
        "the `e` flag runs the substituted text as a command",
    ),
    runs(
        "sed",
        "-f/--file",
        "the script comes from a file harnessd has not read",
    ),
    runs(
        "sed",
        "unreadable script",
        "a script harnessd cannot read may hold `e`",
    ),
    writes("sed", "-i/--in-place", "rewrites the files it reads"),
    writes("sed", "w/W command or s///w", "writes the named file"),
    runs(
        "awk",
        "a program",
        "awk programs can call system() and pipe to commands",
    ),
    runs(
        "find",
        "-exec/-execdir/-ok/-okdir",
        "runs the command that follows",
    ),
    writes("find", "-delete", "deletes what it finds"),
    writes(
        "find",
        "-fprint/-fprint0/-fprintf/-fls",
        "writes the named file",
    ),
    runs(
        "sort",
        "--compress-program",
        "runs the named program on temporary files",
    ),
    writes("sort", "-o/--output", "writes the named file"),
    runs(
        "tar",
        "-I/--use-compress-program",
        "runs the named compressor",
    ),
    runs("tar", "--to-command", "pipes each member to a command"),
    runs(
        "tar",
        "--checkpoint-action",
        "`exec=` runs a command at checkpoints",
    ),
    runs(
        "tar",
        "--info-script/--new-volume-script/-F",
        "runs a script at each volume",
    ),
    runs(
        "tar",
        "--rsh-command/--rmt-command",
        "runs the named remote shell or rmt program",
    ),
    writes("tar", "extract or create", "writes members or the archive"),
    runs(
        "git",
        "-c/--config-env",
        "config on the command line can name programs (aliases, pager, fsmonitor)",
    ),
    runs(
        "git",
        "--exec-path=",
        "git runs its subcommands from the named directory",
    ),
    runs("git", "--ext-diff", "runs the configured external diff"),
    runs(
        "git",
        "an alias or unknown command",
        "an alias can be `!command`",
    ),
    runs(
        "git",
        "difftool/mergetool/filter-branch/bisect run/submodule foreach/rebase --exec",
        "runs the command they are given or configured with",
    ),
    runs(
        "git",
        "grep -O/--open-files-in-pager",
        "runs a pager program on the files",
    ),
    runs(
        "git",
        "--upload-pack/--receive-pack/--exec/clone -u",
        "runs the named program as the other end of a transport",
    ),
    runs(
        "git",
        "an unknown global option",
        "it may take the next word as its value, hiding the real command",
    ),
    writes("git", "--output", "writes the named file"),
    runs(
        "less",
        "a + or ! command",
        "`+!cmd` runs a shell command at start",
    ),
    runs(
        "less",
        "-k/--lesskey-src/--lesskey-file",
        "a lesskey file can set LESSOPEN, which runs a command",
    ),
    runs(
        "man",
        "-P/--pager/-H/--html",
        "runs the named pager or browser",
    ),
    runs(
        "zip",
        "-T/-TT/--unzip-command",
        "runs the named command to test the archive",
    ),
    writes("zip", "an archive", "writes the archive"),
    runs(
        "rsync",
        "-e/--rsh/--rsync-path",
        "runs the named remote shell or program",
    ),
    writes("rsync", "a destination", "writes the destination"),
    runs(
        "python",
        "code, a script, a module or stdin",
        "runs Python code",
    ),
    runs("perl", "code, a script or stdin", "runs Perl code"),
    runs("ruby", "code, a script or stdin", "runs Ruby code"),
    runs("node", "code, a script or stdin", "runs JavaScript"),
    runs("php", "code, a script or stdin", "runs PHP code"),
    runs("lua", "code, a script or stdin", "runs Lua code"),
    runs(
        "tcl",
        "code, a script or stdin",
        "runs Tcl code (`exec` runs programs)",
    ),
    runs("ed", "any invocation", "`!command` runs a shell command"),
    runs(
        "vim",
        "any invocation",
        "`-c`, `+cmd` and `:!` run commands",
    ),
    runs(
        "emacs",
        "any invocation",
        "`--eval` and init files run Lisp",
    ),
    runs(
        "gdb",
        "any invocation",
        "`-ex`, `shell` and init files run commands",
    ),
    runs(
        "sqlite3",
        "any invocation",
        "`.shell` and `.system` run commands",
    ),
    runs(
        "ssh",
        "any invocation",
        "runs a command (locally through ProxyCommand too)",
    ),
    runs(
        "socat",
        "any invocation",
        "`EXEC:` and `SYSTEM:` addresses run commands",
    ),
    runs("tmux", "any invocation", "runs shell commands"),
    runs("nc", "-e/-c", "runs a program on the connection"),
    writes("cp", "a destination", "writes the destination"),
    writes("mv", "a destination", "moves files"),
    writes("tee", "files", "writes the named files"),
    writes("dd", "of=", "writes the named file"),
    writes("rm", "files", "deletes files"),
    writes("install", "a destination", "writes the destination"),
    runs(
        "make",
        "--eval/-E",
        "evaluates makefile text, which can run `$(shell …)`",
    ),
    workspace("make", "any target", "runs the workspace's Makefile"),
    workspace(
        "npm",
        "run/test/exec/start/install",
        "runs the workspace's package scripts",
    ),
    workspace(
        "cargo",
        "build/test/run/bench",
        "runs build scripts and tests of the workspace",
    ),
    workspace("go", "test/run/generate", "runs the workspace's code"),
    workspace(
        "pytest",
        "any invocation",
        "runs the workspace's tests and conftest.py",
    ),
    workspace("tox", "any invocation", "runs the workspace's tox.ini"),
];

/// The entry of `program` whose `what` starts with `what`.
fn entry(program: &str, what: &str) -> &'static Entry {
    TABLE
        .iter()
        .find(|e| e.program == program && e.what.starts_with(what))
        .unwrap_or(&UNKNOWN)
}

/// Stands in for a lookup that found nothing, so a typo in [`met`] fails closed.
const UNKNOWN: Entry = runs("?", "unknown entry", "an entry the table does not hold");

/// A command that uses a *runs* entry, for `check`: a rule whose pattern matches
/// it allows a command of that shape, so the warning is about what the operator
/// wrote, not about every rule naming the program (`git status*` matches none of
/// git's, `sed -n *` matches `sed -n 1e id f`).
pub fn example(entry: &Entry) -> Option<&'static str> {
    let examples: &[(&str, &str, &str)] = &[
        ("sed", "e command", "sed -n 1e\\ id f"),
        ("sed", "s///e", "sed s/x/id/e f"),
        ("sed", "-f", "sed -n -f script f"),
        ("awk", "a program", "awk BEGIN{system(\"id\")}"),
        ("find", "-exec", "find . -exec id ;"),
        (
            "sort",
            "--compress-program",
            "sort --compress-program=./x f",
        ),
        ("tar", "-I", "tar -I ./x -tf a.tar"),
        ("tar", "--to-command", "tar -xf a.tar --to-command=./x"),
        (
            "tar",
            "--checkpoint-action",
            "tar -tf a.tar --checkpoint-action=exec=./x",
        ),
        ("tar", "--info-script", "tar -F ./x -tf a.tar"),
        ("git", "-c", "git -c alias.x=!id x"),
        ("git", "--exec-path", "git --exec-path=. x"),
        ("git", "--ext-diff", "git diff --ext-diff"),
        ("git", "an alias", "git x"),
        ("git", "difftool", "git rebase --exec id"),
        ("git", "grep -O", "git grep -Oid x"),
        ("less", "a + or !", "less +!id f"),
        ("man", "-P", "man -P ./x ls"),
        ("zip", "-T", "zip x.zip f -T --unzip-command=./x"),
        ("rsync", "-e", "rsync -e ./x f h:g"),
        ("nc", "-e", "nc -e ./x h 1"),
    ];
    if let Some((_, _, ex)) = examples
        .iter()
        .find(|(p, w, _)| *p == entry.program && entry.what.starts_with(w))
    {
        return Some(ex);
    }
    // Programs whose every invocation runs code: the bare name is the example.
    (entry.effect == Effect::Runs && entry.what.contains("any invocation")
        || entry.what.starts_with("code"))
    .then_some(entry.program)
}

/// Every entry of `program` (a base name; variants such as `gawk` included).
pub fn entries_of(program: &str) -> Vec<&'static Entry> {
    let name = family(program.rsplit('/').next().unwrap_or(program));
    TABLE.iter().filter(|e| e.program == name).collect()
}

/// Program names that share another's entries.
fn family(program: &str) -> &str {
    match program {
        "gawk" | "mawk" | "nawk" | "awk" => "awk",
        "gsed" => "sed",
        "gtar" | "bsdtar" => "tar",
        "vi" | "vim" | "nvim" | "view" | "ex" | "rvim" | "gvim" => "vim",
        "ncat" | "netcat" | "nc.openbsd" | "nc.traditional" => "nc",
        "scp" | "sftp" => "ssh",
        "red" => "ed",
        "nodejs" => "node",
        "irb" | "erb" => "ruby",
        p if p.starts_with("ipython") => "python",
        p if p.starts_with("tclsh") || p.starts_with("wish") => "tcl",
        "yarn" | "pnpm" => "npm",
        p if is_python(p) => "python",
        p if p.starts_with("perl") && p[4..].chars().all(|c| c.is_ascii_digit() || c == '.') => {
            "perl"
        }
        p if p.starts_with("ruby") && p[4..].chars().all(|c| c.is_ascii_digit() || c == '.') => {
            "ruby"
        }
        p if p.starts_with("php") && p[3..].chars().all(|c| c.is_ascii_digit() || c == '.') => {
            "php"
        }
        p if p.starts_with("lua") && p[3..].chars().all(|c| c.is_ascii_digit() || c == '.') => {
            "lua"
        }
        "py.test" => "pytest",
        p => p,
    }
}

/// `python`, `python3`, `python3.11`, `pypy3`.
fn is_python(p: &str) -> bool {
    let rest = p.strip_prefix("python").or_else(|| p.strip_prefix("pypy"));
    rest.is_some_and(|r| r.chars().all(|c| c.is_ascii_digit() || c == '.'))
}

/// The entries one simple command meets. `words`: program (base name) first,
/// wrappers already looked through.
pub fn met(words: &[String]) -> Vec<&'static Entry> {
    let Some((program, args)) = words.split_first() else {
        return Vec::new();
    };
    let name = family(program);
    let mut out: Vec<&'static Entry> = Vec::new();
    if !option_programs(name, args, &mut out) {
        other_programs(name, args, &mut out);
    }
    out
}

/// Whether `full` (`--compress-program`) is among `args` (before `--`) as itself or
/// as any prefix getopt would take for it (`--co`, `--compress=x`): GNU programs
/// accept unambiguous abbreviations, and an ambiguous one is refused by the
/// program anyway, so every prefix counts.
fn long_option(args: &[String], full: &str) -> bool {
    args.iter()
        .take_while(|a| *a != "--")
        .filter_map(|a| a.strip_prefix("--"))
        .map(|a| a.split_once('=').map_or(a, |(name, _)| name))
        .any(|name| !name.is_empty() && full.trim_start_matches('-').starts_with(name))
}

/// Whether `--opt` or `--opt=…` is among `args`.
fn has(args: &[String], opt: &str) -> bool {
    args.iter()
        .any(|a| a == opt || a.strip_prefix(opt).is_some_and(|r| r.starts_with('=')))
}

/// The programs whose options decide: sed, awk, find, sort, tar, git, less, man,
/// zip, rsync. `false` when `name` is none of them.
fn option_programs(name: &str, args: &[String], out: &mut Vec<&'static Entry>) -> bool {
    match name {
        "sed" => sed(args, out),
        "awk" => out.extend((!only_version_or_help(args)).then(|| entry("awk", "a program"))),
        "find" => {
            if args
                .iter()
                .any(|a| matches!(a.as_str(), "-exec" | "-execdir" | "-ok" | "-okdir"))
            {
                out.push(entry("find", "-exec"));
            }
            if has(args, "-delete") {
                out.push(entry("find", "-delete"));
            }
            if args
                .iter()
                .any(|a| matches!(a.as_str(), "-fprint" | "-fprint0" | "-fprintf" | "-fls"))
            {
                out.push(entry("find", "-fprint"));
            }
        }
        "sort" => {
            if long_option(args, "--compress-program") {
                out.push(entry("sort", "--compress-program"));
            }
            if long_option(args, "--output") || short_option(args, 'o', "") {
                out.push(entry("sort", "-o"));
            }
        }
        "tar" => tar(args, out),
        "git" => git(args, out),
        "less" | "more" => {
            out.extend(
                args.iter()
                    .any(|a| a.starts_with('+'))
                    .then(|| entry("less", "a + or !")),
            );
            let lesskey = short_option(args, 'k', "")
                || long_option(args, "--lesskey-file")
                || long_option(args, "--lesskey-src")
                || long_option(args, "--lesskey-content");
            out.extend(lesskey.then(|| entry("less", "-k/")));
        }
        "man" => {
            // `-C FILE` names a configuration that can name a pager too.
            let runs = long_option(args, "--pager")
                || long_option(args, "--html")
                || long_option(args, "--config-file")
                || ['P', 'H', 'C'].iter().any(|&l| short_option(args, l, ""));
            out.extend(runs.then(|| entry("man", "-P")));
        }
        "zip" => {
            let runs = long_option(args, "--unzip-command")
                || long_option(args, "--test")
                || short_option(args, 'T', "");
            out.extend(runs.then(|| entry("zip", "-T")));
            out.push(entry("zip", "an archive"));
        }
        "rsync" => {
            let runs = long_option(args, "--rsh")
                || long_option(args, "--rsync-path")
                || short_option(args, 'e', "");
            out.extend(runs.then(|| entry("rsync", "-e")));
            out.push(entry("rsync", "a destination"));
        }
        _ => return false,
    }
    true
}

/// Interpreters, programs that always run commands, writers and workspace-code
/// runners.
fn other_programs(name: &str, args: &[String], out: &mut Vec<&'static Entry>) {
    match name {
        "python" | "perl" | "ruby" | "node" | "php" | "lua" | "tcl" => {
            out.extend((!only_version_or_help(args)).then(|| entry(name, "code")))
        }
        "vim" | "emacs" | "gdb" | "sqlite3" | "ssh" | "socat" | "tmux" | "ed" => {
            out.extend((!only_version_or_help(args)).then(|| entry(name, "any invocation")))
        }
        "nc" => out.extend(
            (short_option(args, 'e', "") || short_option(args, 'c', "") || has(args, "--exec"))
                .then(|| entry("nc", "-e")),
        ),
        "cp" | "mv" | "install" => out.push(entry(name, "a destination")),
        "tee" => out.push(entry("tee", "files")),
        "rm" => out.push(entry("rm", "files")),
        "dd" => out.extend((args.iter().any(|a| a.starts_with("of="))).then(|| entry("dd", "of="))),
        "make" | "pytest" | "tox" => {
            if name == "make" && (long_option(args, "--eval") || short_option(args, 'E', "")) {
                out.push(entry("make", "--eval"));
            }
            out.push(entry(name, if name == "make" { "any target" } else { "" }));
        }
        "npm" => out.extend(
            (args.iter().any(|a| {
                matches!(
                    a.as_str(),
                    "run"
                        | "run-script"
                        | "test"
                        | "t"
                        | "exec"
                        | "x"
                        | "start"
                        | "install"
                        | "i"
                        | "ci"
                        | "rebuild"
                )
            }))
            .then(|| entry("npm", "")),
        ),
        "cargo" => out.extend(
            (args.iter().any(|a| {
                matches!(
                    a.as_str(),
                    "build"
                        | "b"
                        | "test"
                        | "t"
                        | "run"
                        | "r"
                        | "bench"
                        | "check"
                        | "c"
                        | "clippy"
                        | "doc"
                        | "install"
                )
            }))
            .then(|| entry("cargo", "")),
        ),
        "go" => out.extend(
            (args
                .first()
                .is_some_and(|a| matches!(a.as_str(), "test" | "run" | "generate" | "build")))
            .then(|| entry("go", "")),
        ),
        _ => {}
    }
}

/// Whether the arguments only ask for a version or help, which run no code.
fn only_version_or_help(args: &[String]) -> bool {
    !args.is_empty()
        && args
            .iter()
            .all(|a| matches!(a.as_str(), "--version" | "-V" | "-v" | "--help" | "-h"))
}

/// Whether a short option `letter` appears, alone (`-o`), attached (`-ofile`) or in
/// a cluster (`-so`); `also` lists long spellings checked by the caller. Stops at
/// `--`.
fn short_option(args: &[String], letter: char, _also: &str) -> bool {
    for a in args {
        if a == "--" {
            return false;
        }
        if let Some(cluster) = a.strip_prefix('-')
            && !cluster.starts_with('-')
            && cluster.contains(letter)
        {
            return true;
        }
    }
    false
}

/// `sed`: scripts from `-e`/`--expression` or the first operand; `-f` is unseen.
fn sed(args: &[String], out: &mut Vec<&'static Entry>) {
    let mut scripts: Vec<&str> = Vec::new();
    let mut operands: Vec<&str> = Vec::new();
    let mut i = 0;
    let mut options_end = false;
    while let Some(a) = args.get(i) {
        i += 1;
        if options_end || !a.starts_with('-') || a == "-" {
            operands.push(a);
            continue;
        }
        if a == "--" {
            options_end = true;
        } else if long_option(std::slice::from_ref(a), "--expression") {
            // `--expression X`, `--e=X`: any prefix getopt takes.
            match a.split_once('=') {
                Some((_, s)) => scripts.push(s),
                None => {
                    scripts.extend(args.get(i).map(String::as_str));
                    i += 1;
                }
            }
        } else if long_option(std::slice::from_ref(a), "--file") {
            // `--f` is ambiguous to sed (`--follow-symlinks`); taken as a file.
            out.push(entry("sed", "-f"));
            i += usize::from(!a.contains('='));
        } else if long_option(std::slice::from_ref(a), "--in-place") {
            out.push(entry("sed", "-i"));
        } else if a == "--line-length" {
            i += 1;
        } else if a.starts_with("--") {
            // --quiet, --posix, --regexp-extended, --separate, --null-data, …
        } else {
            sed_cluster(&a[1..], args, &mut i, &mut scripts, out);
        }
    }
    let has_file_script = out.iter().any(|e| e.what.starts_with("-f"));
    if scripts.is_empty() && !has_file_script {
        scripts.extend(operands.first().copied());
    }
    for s in scripts {
        match sed_script(s) {
            Some(found) => {
                if found.runs_e {
                    out.push(entry("sed", "e command"));
                }
                if found.runs_flag {
                    out.push(entry("sed", "s///e"));
                }
                if found.writes {
                    out.push(entry("sed", "w/W"));
                }
            }
            None => out.push(entry("sed", "unreadable")),
        }
    }
    out.dedup();
}

/// One cluster of sed's short options (`-ne 'p'`, `-e'p'`, `-i.bak`, `-nf f`,
/// `-l 5`): a script it names goes to `scripts`, `-f` and `-i` to `out`; `i` moves
/// past a separate value.
fn sed_cluster<'a>(
    cluster: &'a str,
    args: &'a [String],
    i: &mut usize,
    scripts: &mut Vec<&'a str>,
    out: &mut Vec<&'static Entry>,
) {
    for (at, c) in cluster.char_indices() {
        let attached = &cluster[at + c.len_utf8()..];
        match c {
            'e' | 'f' | 'l' => {
                let value = if attached.is_empty() {
                    *i += 1;
                    args.get(*i - 1).map(String::as_str)
                } else {
                    Some(attached)
                };
                match c {
                    'e' => scripts.extend(value),
                    'f' => out.push(entry("sed", "-f")),
                    _ => {}
                }
                break;
            }
            'i' => {
                // `-i` takes the rest of the cluster as its suffix.
                out.push(entry("sed", "-i"));
                break;
            }
            _ => {}
        }
    }
}

/// What a sed script holds.
#[derive(Default)]
struct SedFound {
    runs_e: bool,
    runs_flag: bool,
    writes: bool,
}

/// Moves `i` to the end of the line.
fn to_eol(s: &[char], i: &mut usize) {
    while *i < s.len() && s[*i] != '\n' {
        *i += 1;
    }
}

/// Moves `i` past text up to an unescaped `delim`; `false` when it never ends on
/// this line.
fn delimited(s: &[char], i: &mut usize, delim: char) -> bool {
    while *i < s.len() {
        let c = s[*i];
        *i += 1;
        if c == '\\' {
            *i += 1;
        } else if c == delim {
            return true;
        } else if c == '\n' {
            return false;
        }
    }
    false
}

/// [`delimited`] for a regular expression: a bracket expression (`[/]`,
/// `[]/]`, `[[:alpha:]/]`) holds the delimiter as a plain character, as sed reads
/// it.
fn regex_delimited(s: &[char], i: &mut usize, delim: char) -> bool {
    while *i < s.len() {
        let c = s[*i];
        *i += 1;
        match c {
            '\\' => *i += 1,
            '[' => {
                // `[^]…]` and `[]…]`: a `]` first is literal.
                if s.get(*i) == Some(&'^') {
                    *i += 1;
                }
                if s.get(*i) == Some(&']') {
                    *i += 1;
                }
                loop {
                    match s.get(*i) {
                        None | Some('\n') => return false,
                        Some(']') => {
                            *i += 1;
                            break;
                        }
                        Some('[') if matches!(s.get(*i + 1), Some(':' | '.' | '=')) => {
                            let close = s[*i + 1];
                            *i += 2;
                            while *i < s.len() && !(s[*i] == close && s.get(*i + 1) == Some(&']')) {
                                if s[*i] == '\n' {
                                    return false;
                                }
                                *i += 1;
                            }
                            *i += 2;
                        }
                        Some(_) => *i += 1,
                    }
                }
            }
            c if c == delim => return true,
            '\n' => return false,
            _ => {}
        }
    }
    false
}

/// Moves `i` up to `;` or the end of the line (labels, versions).
fn to_separator(s: &[char], i: &mut usize) {
    while *i < s.len() && !matches!(s[*i], ';' | '\n') {
        *i += 1;
    }
}

/// Reads a GNU sed script far enough to find `e`, the `e` flag and `w`/`W`.
/// `None` when it cannot be read: the caller treats that as *runs*.
fn sed_script(script: &str) -> Option<SedFound> {
    let s: Vec<char> = script.chars().collect();
    let mut found = SedFound::default();
    let mut i = 0;
    while i < s.len() {
        let c = s[i];
        // Separators, blocks and negation between commands.
        if c.is_whitespace() || matches!(c, ';' | '{' | '}' | '!') {
            i += 1;
            continue;
        }
        if c == '#' {
            to_eol(&s, &mut i);
            continue;
        }
        // Addresses: numbers, `$`, `first~step`, `addr,+N`, `/re/`, `\cREc`, flags.
        if c.is_ascii_digit() || matches!(c, '$' | ',' | '~' | '+') {
            i += 1;
            continue;
        }
        if c == '/' || c == '\\' {
            let delim = if c == '\\' {
                i += 1;
                *s.get(i)?
            } else {
                '/'
            };
            i += 1;
            if !regex_delimited(&s, &mut i, delim) {
                return None;
            }
            // `I` and `M` address flags.
            while i < s.len() && matches!(s[i], 'I' | 'M') {
                i += 1;
            }
            continue;
        }
        i += 1;
        sed_command(c, &s, &mut i, &mut found)?;
    }
    Some(found)
}

/// One sed command `c` (already consumed), its arguments read up to `i`.
fn sed_command(c: char, s: &[char], i: &mut usize, found: &mut SedFound) -> Option<()> {
    match c {
        's' => {
            let delim = *s.get(*i)?;
            if delim == '\n' || delim == '\\' {
                return None;
            }
            *i += 1;
            if !regex_delimited(s, i, delim) || !delimited(s, i, delim) {
                return None;
            }
            while *i < s.len() && !matches!(s[*i], ';' | '\n' | '}') {
                match s[*i] {
                    'e' => found.runs_flag = true,
                    'w' => {
                        found.writes = true;
                        to_eol(s, i);
                        break;
                    }
                    'g' | 'p' | 'i' | 'I' | 'm' | 'M' | ' ' | '\t' => {}
                    d if d.is_ascii_digit() => {}
                    _ => return None,
                }
                *i += 1;
            }
        }
        'y' => {
            let delim = *s.get(*i)?;
            *i += 1;
            if !delimited(s, i, delim) || !delimited(s, i, delim) {
                return None;
            }
        }
        'e' => {
            found.runs_e = true;
            to_eol(s, i);
        }
        'w' | 'W' => {
            found.writes = true;
            to_eol(s, i);
        }
        // A file name runs to the end of the line.
        'r' | 'R' => to_eol(s, i),
        // Text runs to the end of the line; a line ending in an odd number of
        // backslashes continues it (`\\` is an escaped backslash, not a
        // continuation).
        'a' | 'i' | 'c' => loop {
            to_eol(s, i);
            let trailing = s[..*i].iter().rev().take_while(|&&c| c == '\\').count();
            if trailing % 2 == 1 && *i < s.len() {
                *i += 1;
                continue;
            }
            break;
        },
        ':' | 'b' | 't' | 'T' | 'v' => to_separator(s, i),
        'q' | 'Q' | 'l' | 'L' => {
            while *i < s.len() && (s[*i].is_ascii_digit() || s[*i] == ' ') {
                *i += 1;
            }
        }
        '=' | 'd' | 'D' | 'g' | 'G' | 'h' | 'H' | 'n' | 'N' | 'p' | 'P' | 'x' | 'z' | 'F' => {}
        _ => return None,
    }
    Some(())
}

/// `tar`: the options that run programs, and whether it extracts or creates.
fn tar(args: &[String], out: &mut Vec<&'static Entry>) {
    let long = |full: &str| long_option(args, full);
    // Old-style first argument (`tar xIf …`) is a cluster without the dash.
    let clusters: Vec<&str> = args
        .iter()
        .enumerate()
        .filter_map(|(i, a)| {
            if let Some(c) = a.strip_prefix('-') {
                (!c.starts_with('-')).then_some(c)
            } else {
                (i == 0).then_some(a.as_str())
            }
        })
        .collect();
    let short = |letter: char| clusters.iter().any(|c| c.contains(letter));
    if long("--use-compress-program") || short('I') {
        out.push(entry("tar", "-I"));
    }
    if long("--to-command") {
        out.push(entry("tar", "--to-command"));
    }
    if long("--checkpoint-action") {
        out.push(entry("tar", "--checkpoint-action"));
    }
    if long("--info-script") || long("--new-volume-script") || short('F') {
        out.push(entry("tar", "--info-script"));
    }
    if long("--rsh-command") || long("--rmt-command") {
        out.push(entry("tar", "--rsh-command"));
    }
    let lists_only = short('t') || long("--list");
    if !lists_only
        || short('x')
        || short('c')
        || long("--extract")
        || long("--create")
        || long("--get")
        || long("--remove-files")
    {
        out.push(entry("tar", "extract"));
    }
}

/// Git's own commands that neither run configured programs beyond what the
/// environment switches off nor are aliases.
const GIT_COMMANDS: &[&str] = &[
    "add",
    "am",
    "annotate",
    "apply",
    "archive",
    "blame",
    "branch",
    "bundle",
    "cat-file",
    "check-attr",
    "check-ignore",
    "checkout",
    "cherry",
    "cherry-pick",
    "clean",
    "clone",
    "commit",
    "config",
    "count-objects",
    "describe",
    "diff",
    "diff-files",
    "diff-index",
    "diff-tree",
    "fetch",
    "for-each-ref",
    "format-patch",
    "fsck",
    "gc",
    "grep",
    "help",
    "init",
    "log",
    "ls-files",
    "ls-remote",
    "ls-tree",
    "merge",
    "merge-base",
    "mv",
    "name-rev",
    "notes",
    "pull",
    "push",
    "range-diff",
    "reflog",
    "remote",
    "reset",
    "restore",
    "rev-list",
    "rev-parse",
    "revert",
    "rm",
    "shortlog",
    "show",
    "show-branch",
    "show-ref",
    "stash",
    "status",
    "switch",
    "tag",
    "version",
    "whatchanged",
    "worktree",
    "rebase",
    "bisect",
    "submodule",
    "sparse-checkout",
    "maintenance",
];

/// `git`: global options, then the command and its options.
fn git(args: &[String], out: &mut Vec<&'static Entry>) {
    let Some((command, rest)) = git_command(args, out) else {
        return;
    };
    if !GIT_COMMANDS.contains(&command) {
        out.push(entry("git", "an alias"));
        return;
    }
    let rest_long = |full: &str| long_option(rest, full);
    if rest_long("--ext-diff") {
        out.push(entry("git", "--ext-diff"));
    }
    let runs_given = match command {
        "rebase" => rest_long("--exec") || short_option(rest, 'x', ""),
        "bisect" => rest.first().is_some_and(|a| a == "run"),
        "submodule" => rest.iter().any(|a| a == "foreach"),
        _ => false,
    };
    if runs_given {
        out.push(entry("git", "difftool"));
    }
    if command == "grep" && (rest_long("--open-files-in-pager") || short_option(rest, 'O', "")) {
        out.push(entry("git", "grep -O"));
    }
    let transport = rest_long("--upload-pack")
        || rest_long("--receive-pack")
        || (command != "rebase" && rest_long("--exec"))
        || (command == "clone" && short_option(rest, 'u', ""));
    if transport {
        out.push(entry("git", "--upload-pack"));
    }
    if rest_long("--output") {
        out.push(entry("git", "--output"));
    }
}

/// Git's global options that take no value.
const GIT_FLAGS: &[&str] = &[
    "-p",
    "--paginate",
    "-P",
    "--no-pager",
    "--bare",
    "--no-replace-objects",
    "--no-lazy-fetch",
    "--no-optional-locks",
    "--no-advice",
    "--literal-pathspecs",
    "--glob-pathspecs",
    "--noglob-pathspecs",
    "--icase-pathspecs",
    "--version",
    "--help",
];

/// Git's global options that take the next word as their value (or `=value`).
const GIT_VALUED: &[&str] = &[
    "-C",
    "--git-dir",
    "--work-tree",
    "--namespace",
    "--super-prefix",
    "--shallow-file",
    "--attr-source",
    "--list-cmds",
];

/// The subcommand and its arguments, after git's global options; records `-c`,
/// `--exec-path=` and any global option git may read differently from this list
/// (an unknown one could take the next word as its value and hide the command).
fn git_command<'a>(
    args: &'a [String],
    out: &mut Vec<&'static Entry>,
) -> Option<(&'a str, &'a [String])> {
    let mut i = 0;
    while let Some(a) = args.get(i) {
        i += 1;
        let name = a.split_once('=').map_or(a.as_str(), |(n, _)| n);
        match a.as_str() {
            "-c" | "--config-env" => {
                out.push(entry("git", "-c"));
                i += 1;
            }
            a if a.starts_with("--config-env=") || (a.starts_with("-c") && a.len() > 2) => {
                out.push(entry("git", "-c"));
            }
            a if a.starts_with("--exec-path=") => out.push(entry("git", "--exec-path")),
            "--exec-path" => {}
            a if GIT_FLAGS.contains(&a) => {}
            a if GIT_VALUED.contains(&a) => i += 1,
            a if a.starts_with("-C") || (a.contains('=') && GIT_VALUED.contains(&name)) => {}
            a if a.starts_with('-') => {
                out.push(entry("git", "an unknown global option"));
                return None;
            }
            a => return Some((a, args.get(i..).unwrap_or_default())),
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(cmd: &str) -> Vec<String> {
        let words: Vec<String> = cmd.split_whitespace().map(str::to_string).collect();
        met(&words).iter().map(|e| e.label()).collect()
    }

    fn runs_any(cmd: &str) -> bool {
        let words: Vec<String> = cmd.split_whitespace().map(str::to_string).collect();
        met(&words).iter().any(|e| e.effect == Effect::Runs)
    }

    #[test]
    fn every_lookup_names_a_real_entry() {
        // A `what` prefix that matches nothing would record `?` and fail closed;
        // this keeps the table and the matcher in step.
        for cmd in [
            "sed -n 1e\\ id f",
            "sed s/a/b/e f",
            "sed -f s f",
            "sed -i s/a/b/ f",
            "sed w\\ out f",
            "awk 1",
            "find . -exec id ;",
            "find . -delete",
            "find . -fprint x",
            "sort --compress-program=x",
            "sort -o x",
            "tar -I x -cf a",
            "tar --to-command=x -xf a",
            "tar --checkpoint-action=exec=x -tf a",
            "tar -F x -tf a",
            "git -c a=b status",
            "git --exec-path=. status",
            "git diff --ext-diff",
            "git x",
            "git rebase --exec id",
            "git grep -O x",
            "git log --output=x",
            "less +!id f",
            "man -P x ls",
            "zip -T a b",
            "rsync -e x a b",
            "python3 -c 1",
            "perl -e 1",
            "nc -e x",
            "make",
            "npm test",
            "cargo test",
            "go test",
            "dd of=x",
        ] {
            for l in labels(cmd) {
                assert!(!l.starts_with('?'), "{cmd}: {l}");
            }
            assert!(!labels(cmd).is_empty(), "{cmd} met nothing");
        }
    }

    #[test]
    fn sed_scripts_are_read_for_e_and_w() {
        assert!(runs_any("sed -n 1e\\ rm f"));
        assert!(runs_any("sed 1e f"));
        assert!(runs_any("sed s/x/id/e f"));
        assert!(runs_any("sed -e p -e 1e f"));
        assert!(runs_any("sed -ne1e f"));
        assert!(runs_any("sed --expression=e f"));
        assert!(runs_any("sed -f script f"));
        assert!(runs_any("sed s/a/b/Q f"), "an unknown flag is unreadable");
        assert!(runs_any("sed s/a/b f"), "an unterminated s is unreadable");
        for ok in [
            "sed -n 1p f",
            "sed -n 5,10p f",
            "sed s/e/E/g f",
            "sed -E s/(e+)/x/2 f",
            "sed /e/d f",
            "sed \\,e,d f",
            "sed -n $p f",
            "sed y/abe/xyz/ f",
            "sed 1~2d f",
            "sed -n /start/,/end/p f",
        ] {
            assert!(!runs_any(ok), "{ok}");
        }
        assert_eq!(labels("sed -i s/a/b/ f"), ["sed -i/--in-place: writes"]);
        assert_eq!(
            labels("sed s/a/b/w\\ out f"),
            ["sed w/W command or s///w: writes"]
        );
    }

    #[test]
    fn programs_that_run_their_arguments() {
        for cmd in [
            "awk {print}",
            "gawk BEGIN{system(\"id\")}",
            "find . -execdir id ;",
            "sort --compress-prog=./x f",
            "tar tf a.tar --checkpoint=1 --checkpoint-action=exec=./x",
            "tar xIf ./x a.tar",
            "git -c core.pager=id log",
            "git -ccore.pager=id log",
            "git --config-env=core.pager=X log",
            "git diff --no-index --ext-diff a b",
            "git myalias",
            "git -C sub myalias",
            "man -P ./x ls",
            "man --pager=./x ls",
            "zip x.zip a -T --unzip-command=./x",
            "less +!./x a",
            "more +/x a",
            "python3 x.py",
            "python3.11 -c 1",
            "python3 -",
            "python3",
            "perl -e 1",
            "node -e 1",
            "vim -c !id",
            "rsync --rsh=./x a b:c",
        ] {
            assert!(runs_any(cmd), "{cmd}");
        }
        for cmd in [
            "git status",
            "git log --oneline",
            "git diff a b",
            "git -C sub status",
            "sort f",
            "tar tf a.tar",
            "find . -name x",
            "ls -la",
            "python3 --version",
            "less f",
            "man ls",
        ] {
            assert!(!runs_any(cmd), "{cmd}");
        }
    }

    /// Spellings the attack on the table found: GNU long-option abbreviations,
    /// sed scripts the reader misread, git options that run transports or hide the
    /// command, lesskey files, more interpreters.
    #[test]
    fn abbreviations_and_misread_scripts_still_run() {
        for cmd in [
            "sed --e=e f",
            "sed -n --expression=p --e=1e\\ id f",
            "sed --expr=1e\\ id f",
            "sed --fi=script f",
            "sort -S 16k --co=sh f",
            "sort --compress=sh f",
            "tar --use=sh -tf x.tar",
            "tar --to-c=id -xf x.tar",
            "tar --checkpoint=1 --checkpoint-a=exec=id -tf x.tar",
            "tar --info=x -tf x.tar",
            "tar --rsh-command=x -tf h:x.tar",
            "tar --rmt-command=x -tf h:x.tar",
            "git -C repo ls-remote --upload-pack=id .",
            "git -C repo archive --remote=. --exec=id HEAD",
            "git fetch --upload-pack=id .",
            "git clone -u id . x",
            "git push --receive-pack=id .",
            "git -C repo grep --open=id hi",
            "git -C repo grep -iOid hi",
            "git -C repo --shallow-file status difftool -y -x id a b",
            "git -C repo --attr-source stash difftool -x id",
            "git rebase --ex=id HEAD~1",
            "git rebase -qxid HEAD~1",
            "less --lesskey-src=k f",
            "less -k k f",
            "zip x.zip f --tes --unzip-c=id",
            "man --pag=id ls",
            "man --ht=id ls",
            "man -C cfg ls",
            "make --eval=x -f /dev/null",
            "tclsh",
            "irb",
            "erb",
            "ed f",
            "scp -o ProxyCommand=id a h:b",
        ] {
            assert!(runs_any(cmd), "{cmd}");
        }
        // The reader: an escaped backslash is no continuation, `r` takes no
        // continuation, a delimiter inside a bracket expression is a character.
        assert!(
            runs_any("sed -n 1a\\x\\\\\n1e\\ id f")
                || sed_script("1a x\\\\\n1e id").is_some_and(|f| f.runs_e)
        );
        assert!(sed_script("1a x\\\\\n1e id").is_some_and(|f| f.runs_e));
        assert!(sed_script("1r foo\\\n1e id").is_some_and(|f| f.runs_e));
        assert!(sed_script("s/[/]/w/;e id").is_some_and(|f| f.runs_e && !f.writes));
        assert!(sed_script("s/[[:alpha:]/]/x/g").is_some_and(|f| !f.runs_e && !f.writes));
        // Git's own valueless flags still leave the command readable.
        assert!(!runs_any("git --no-pager log"));
        assert!(!runs_any("git -P -C repo status"));
        assert!(!runs_any("git --git-dir=.git log"));
    }

    /// Hostile scripts and arguments end in an answer, never a panic: every
    /// prefix of each (so a script cut anywhere), multi-byte text included.
    #[test]
    fn hostile_arguments_never_panic() {
        let nasty = [
            "s/[[:al/x/",
            "s/[/",
            "s\\",
            "1a x\\",
            "y/a",
            "\\",
            "/\\",
            "s/é[]/ü/e;w é",
            "[[:]]",
            "1~2!{e}",
        ];
        for text in nasty {
            for (at, _) in text.char_indices().chain([(text.len(), ' ')]) {
                let cut = &text[..at];
                let _ = sed_script(cut);
                for program in ["sed", "tar", "git", "sort", "less", "man", "zip", "rm"] {
                    let words: Vec<String> = [program, "-", "--", cut, "--x=", "-é"]
                        .iter()
                        .map(|w| w.to_string())
                        .collect();
                    let _ = met(&words);
                }
            }
        }
    }

    #[test]
    fn writes_entries_leave_a_command_provable_but_named() {
        assert_eq!(labels("find . -delete"), ["find -delete: writes"]);
        assert_eq!(
            labels("find . -fprintf F x"),
            ["find -fprint/-fprint0/-fprintf/-fls: writes"]
        );
        assert_eq!(
            labels("git log --output=.git/config"),
            ["git --output: writes"]
        );
        assert_eq!(labels("sort -o out f"), ["sort -o/--output: writes"]);
        assert!(labels("tar tf a.tar").is_empty());
        assert_eq!(labels("tar xf a.tar"), ["tar extract or create: writes"]);
    }
}
