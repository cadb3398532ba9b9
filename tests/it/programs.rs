//! The program table against the real programs (docs/policy.md): for every entry, a
//! command that uses the option, the table's verdict on it (through the same
//! analysis `policy` uses), and the real program run outside the sandbox showing
//! it does what the entry says — runs a command that leaves a marker, or writes
//! the file it names. `.ci/run` installs the programs the image lacks.

use std::process::Command;

use harnessd::policy::programs::{Effect, TABLE};
use harnessd::policy::shell::analyse;

/// One demonstration: `setup` prepares the directory, `cmd` is the command the
/// table judges, `check` exits 0 when the effect happened. `$M` is the marker path.
struct Case {
    label: &'static str,
    setup: &'static str,
    cmd: &'static str,
    check: &'static str,
}

const fn case(
    label: &'static str,
    setup: &'static str,
    cmd: &'static str,
    check: &'static str,
) -> Case {
    Case {
        label,
        setup,
        cmd,
        check,
    }
}

/// A marker the command must create.
const MARKER: &str = "test -e M";

const REPO: &str = "git init -q r && cd r && echo x > a && git add a && \
    git -c user.name=t -c user.email=t@t commit -qm 1 && echo y > a && \
    git -c user.name=t -c user.email=t@t commit -qam 2 && cd ..";

fn cases() -> Vec<Case> {
    vec![
        case(
            "sed e command: runs",
            "echo a > f",
            "sed -n '1e touch M' f",
            MARKER,
        ),
        case(
            "sed s///e flag: runs",
            "echo 'touch M' > f",
            "sed 's/^//e' f",
            MARKER,
        ),
        case(
            "sed -f/--file: runs",
            "echo a > f; echo '1e touch M' > s",
            "sed -n -f s f",
            MARKER,
        ),
        case(
            "sed -i/--in-place: writes",
            "echo a > f",
            "sed -i s/a/b/ f",
            "grep -qx b f",
        ),
        case(
            "sed w/W command or s///w: writes",
            "echo a > f",
            "sed -n 'w M' f",
            MARKER,
        ),
        case(
            "awk a program: runs",
            "",
            "awk 'BEGIN{system(\"touch M\")}'",
            MARKER,
        ),
        case(
            "awk a program: runs",
            "",
            "gawk 'BEGIN{print 1 | \"touch M\"}'",
            MARKER,
        ),
        case(
            "find -exec/-execdir/-ok/-okdir: runs",
            "",
            "find . -maxdepth 0 -exec touch M ';'",
            MARKER,
        ),
        case(
            "find -delete: writes",
            "mkdir -p d/e",
            "find d -delete",
            "! test -e d",
        ),
        case(
            "find -fprint/-fprint0/-fprintf/-fls: writes",
            "",
            "find . -maxdepth 0 -fprintf M x",
            MARKER,
        ),
        case(
            "sort --compress-program: runs",
            "seq 1 300000 > f; printf '#!/bin/sh\\ntouch M\\nexec gzip \"$@\"\\n' > x; chmod +x x",
            "sort -S 16k -T . --compress-program=./x f",
            MARKER,
        ),
        case(
            "sort -o/--output: writes",
            "echo b > f",
            "sort -o M f",
            MARKER,
        ),
        case(
            "tar -I/--use-compress-program: runs",
            "echo a > f; printf '#!/bin/sh\\ntouch M\\ncat\\n' > x; chmod +x x",
            "tar -I ./x -cf b.tar f",
            MARKER,
        ),
        case(
            "tar --to-command: runs",
            "echo a > f; tar -cf a.tar f",
            "tar -xf a.tar --to-command='touch M'",
            MARKER,
        ),
        case(
            "tar --checkpoint-action: runs",
            "echo a > f; tar -cf a.tar f",
            "tar -tf a.tar --checkpoint=1 --checkpoint-action=exec='touch M'",
            MARKER,
        ),
        case(
            "tar --info-script/--new-volume-script/-F: runs",
            "head -c 100000 /dev/urandom > b",
            "tar -c -M -L 20 -F 'touch M' -f v.tar b",
            MARKER,
        ),
        case(
            "tar --rsh-command/--rmt-command: runs",
            "printf '#!/bin/sh\\ntouch M\\nexit 1\\n' > x; chmod +x x",
            "tar -tf 127.0.0.1:x.tar --rsh-command=./x",
            MARKER,
        ),
        case(
            "tar extract or create: writes",
            "echo a > f; tar -cf a.tar f; rm f",
            "tar -xf a.tar",
            "test -e f",
        ),
        case(
            "git -c/--config-env: runs",
            REPO,
            "git -C r -c alias.x='!touch ../M' x",
            MARKER,
        ),
        case(
            "git -c/--config-env: runs",
            REPO,
            "X='!touch ../M' git -C r --config-env=alias.y=X y",
            MARKER,
        ),
        case(
            "git --exec-path=: runs",
            "mkdir ep; printf '#!/bin/sh\\ntouch M\\n' > ep/git-foo; chmod +x ep/git-foo",
            "git --exec-path=ep foo",
            MARKER,
        ),
        case(
            "git --ext-diff: runs",
            "echo a > a; echo b > b; printf '#!/bin/sh\\ntouch M\\n' > x; chmod +x x",
            "GIT_EXTERNAL_DIFF=./x git diff --no-index --ext-diff a b",
            MARKER,
        ),
        case(
            "git an alias or unknown command: runs",
            "git init -q r && git -C r config alias.st2 '!touch ../M'",
            "git -C r st2",
            MARKER,
        ),
        case(
            "git difftool/mergetool/filter-branch/bisect run/submodule foreach/rebase --exec: runs",
            REPO,
            "git -C r -c user.name=t -c user.email=t@t rebase -q -x 'touch ../M' HEAD~1",
            MARKER,
        ),
        case(
            "git grep -O/--open-files-in-pager: runs",
            REPO,
            "git -C r grep -O'touch ../M;true' y",
            MARKER,
        ),
        case(
            "git --upload-pack/--receive-pack/--exec/clone -u: runs",
            REPO,
            "git -C r ls-remote --upload-pack=\"touch $PWD/M;\" .",
            MARKER,
        ),
        case(
            // `--shallow-file` takes `status` as its value: the command is
            // `difftool`, which the table does not take for a plain command.
            "git an alias or unknown command: runs",
            REPO,
            "git -C r --shallow-file status difftool -y -x \"touch $PWD/M; true\" HEAD~1 HEAD",
            MARKER,
        ),
        case(
            "git --output: writes",
            REPO,
            "git -C r log --output=../M",
            MARKER,
        ),
        // less and man act on these options only with a terminal: `script` gives one.
        case(
            "less a + or ! command: runs",
            "echo a > f; printf '#!/bin/sh\\nless \"+!touch M\\n\" f\\n' > l; chmod +x l",
            "less '+!touch M' f",
            "TERM=xterm timeout 10 script -qc ./l /dev/null </dev/null >/dev/null 2>&1; test -e M",
        ),
        case(
            "less -k/--lesskey-src/--lesskey-file: runs",
            "echo a > f; printf '#env\\nLESSOPEN=||touch M; cat %%s\\n' > k; \
             printf '#!/bin/sh\\nless --lesskey-src=k f\\n' > l; chmod +x l",
            "less --lesskey-src=k f",
            "TERM=xterm timeout 10 script -qc ./l /dev/null </dev/null >/dev/null 2>&1; test -e M",
        ),
        case(
            "man -P/--pager/-H/--html: runs",
            "printf '#!/bin/sh\\ntouch M\\ncat >/dev/null\\n' > pg; chmod +x pg; \
             printf '#!/bin/sh\\nman -P ./pg ls\\n' > m; chmod +x m",
            "man -P ./pg ls",
            "TERM=xterm timeout 10 script -qc ./m /dev/null </dev/null >/dev/null 2>&1; test -e M",
        ),
        case(
            "zip -T/-TT/--unzip-command: runs",
            "echo a > f",
            "zip -q x.zip f -T --unzip-command='touch M; true'",
            MARKER,
        ),
        case(
            "zip an archive: writes",
            "echo a > f",
            "zip -q M f",
            "test -e M.zip",
        ),
        case(
            "rsync -e/--rsh/--rsync-path: runs",
            "echo a > f; printf '#!/bin/sh\\ntouch M\\nexit 1\\n' > x; chmod +x x",
            "rsync -e ./x f host:g",
            MARKER,
        ),
        case(
            "rsync a destination: writes",
            "echo a > f",
            "rsync f M",
            MARKER,
        ),
        case(
            "python code, a script, a module or stdin: runs",
            "",
            "python3 -c 'open(\"M\", \"w\")'",
            MARKER,
        ),
        case(
            "python code, a script, a module or stdin: runs",
            "echo 'open(\"M\", \"w\")' > s.py",
            "python3 s.py",
            MARKER,
        ),
        case(
            "perl code, a script or stdin: runs",
            "",
            "perl -e 'open F, \">M\"'",
            MARKER,
        ),
        case(
            "ruby code, a script or stdin: runs",
            "",
            "ruby -e 'File.write(\"M\", \"\")'",
            MARKER,
        ),
        case(
            "node code, a script or stdin: runs",
            "",
            "node -e 'require(\"fs\").writeFileSync(\"M\", \"\")'",
            MARKER,
        ),
        case(
            "php code, a script or stdin: runs",
            "",
            "php -r 'touch(\"M\");'",
            MARKER,
        ),
        case(
            "lua code, a script or stdin: runs",
            "",
            "lua5.4 -e 'io.open(\"M\", \"w\")'",
            MARKER,
        ),
        case(
            "tcl code, a script or stdin: runs",
            "echo 'exec touch M' > s.tcl",
            "tclsh s.tcl",
            MARKER,
        ),
        case(
            "ed any invocation: runs",
            "echo a > f; printf '!touch M\\nq\\n' > s",
            "ed -s f < s",
            MARKER,
        ),
        case(
            "vim any invocation: runs",
            "",
            "vim -es -c 'call system(\"touch M\")' -c 'qa!'",
            MARKER,
        ),
        case(
            "emacs any invocation: runs",
            "",
            "emacs --batch --eval '(shell-command \"touch M\")'",
            MARKER,
        ),
        case(
            "gdb any invocation: runs",
            "",
            "gdb -batch -ex 'shell touch M'",
            MARKER,
        ),
        case(
            "sqlite3 any invocation: runs",
            "",
            "sqlite3 :memory: '.shell touch M'",
            MARKER,
        ),
        case(
            "ssh any invocation: runs",
            "",
            "ssh -o ProxyCommand='touch M' host",
            MARKER,
        ),
        case(
            "socat any invocation: runs",
            "",
            "socat -u OPEN:/dev/null EXEC:'touch M'",
            MARKER,
        ),
        case(
            "tmux any invocation: runs",
            "",
            "tmux -L harnessd-programs-test new-session -d 'touch M'",
            "for i in $(seq 50); do test -e M && break; sleep 0.1; done; \
             tmux -L harnessd-programs-test kill-server 2>/dev/null; test -e M",
        ),
        case(
            "nc -e/-c: runs",
            "",
            "nc -l -p 0 -c 'touch M'",
            // netcat-openbsd has no -e/-c; ncat and netcat-traditional do. Shown
            // with ncat's or traditional's `-c` when one is installed, else with
            // socat's equivalent (the entry stands for the option either way).
            "(command -v nc.traditional >/dev/null && timeout 5 nc.traditional -c 'touch M' 127.0.0.1 9 ; \
              test -e M) || (socat -u OPEN:/dev/null SYSTEM:'touch M'; test -e M)",
        ),
        case("cp a destination: writes", "echo a > f", "cp f M", MARKER),
        case("mv a destination: writes", "echo a > f", "mv f M", MARKER),
        case("tee files: writes", "", "tee M", MARKER),
        case(
            "dd of=: writes",
            "",
            "dd if=/dev/null of=M status=none",
            MARKER,
        ),
        case("rm files: writes", "echo a > f", "rm f", "! test -e f"),
        case(
            "install a destination: writes",
            "echo a > f",
            "install f M",
            MARKER,
        ),
        case(
            "make --eval/-E: runs",
            "",
            "make -s --eval='$(shell touch M)' -f /dev/null",
            MARKER,
        ),
        case(
            "make any target: runs workspace code",
            "printf 'all:\\n\\ttouch M\\n' > Makefile",
            "make -s",
            MARKER,
        ),
        case(
            "npm run/test/exec/start/install: runs workspace code",
            "echo '{\"name\":\"t\",\"version\":\"1.0.0\",\"scripts\":{\"test\":\"touch M\"}}' > package.json",
            "npm test --silent",
            MARKER,
        ),
        case(
            "cargo build/test/run/bench: runs workspace code",
            "cargo init -q --name t --vcs none . && echo 'fn main() { std::fs::write(\"M\", \"\").unwrap(); }' > build.rs",
            "cargo build -q --offline",
            MARKER,
        ),
    ]
}

/// Entries no case demonstrates, and why.
const NOT_RUN: [(&str, &str); 5] = [
    (
        "git an unknown global option: runs",
        "the fail-closed default for a global option harnessd does not know, not a git feature",
    ),
    (
        "sed unreadable script: runs",
        "the fail-closed default for a script harnessd cannot read, not a sed feature",
    ),
    (
        "go test/run/generate: runs workspace code",
        "no Go toolchain in the image",
    ),
    (
        "pytest any invocation: runs workspace code",
        "pytest is not installed",
    ),
    (
        "tox any invocation: runs workspace code",
        "tox is not installed",
    ),
];

/// An empty directory for one case, removed on drop.
struct Scratch(std::path::PathBuf);

impl Scratch {
    fn new(i: usize) -> Scratch {
        let dir = crate::common::fresh_dir(&format!("harnessd-programs-{i}-"));
        std::fs::create_dir_all(dir.join("home")).unwrap();
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Every entry does what the table says, with the real program; and the table's
/// verdict on the demonstrating command names that entry (a *runs* entry makes
/// the command not provable).
#[test]
fn every_program_table_entry_does_what_it_says() {
    let mut failures = Vec::new();
    for (i, c) in cases().into_iter().enumerate() {
        let analysis = analyse(c.cmd);
        let met: Vec<String> = analysis
            .commands
            .iter()
            .flat_map(|cmd| cmd.programs.iter().map(|e| e.label()))
            .collect();
        if !met.iter().any(|l| l == c.label) {
            failures.push(format!(
                "{}: the table said {met:?} of `{}`",
                c.label, c.cmd
            ));
            continue;
        }
        if c.label.ends_with(": runs") && analysis.not_provable.is_none() {
            failures.push(format!("{}: `{}` is still provable", c.label, c.cmd));
        }
        let dir = Scratch::new(i);
        // The check decides; the command's own status is not asserted (ssh and
        // rsync fail after running the program, by design of the demonstration).
        let script = format!(
            "set +e; {setup}\n{{ {cmd} ; }} </dev/null >/dev/null 2>&1\n{check}",
            setup = c.setup,
            cmd = if c.check.contains("script -qc") {
                ":"
            } else {
                c.cmd
            },
            check = c.check
        );
        let out = Command::new("bash")
            .arg("-c")
            .arg(&script)
            .current_dir(&dir.0)
            .env("HOME", dir.0.join("home"))
            .env("CARGO_TARGET_DIR", dir.0.join("target"))
            .output()
            .unwrap();
        if !out.status.success() {
            failures.push(format!(
                "{}: `{}` did not do it: {}",
                c.label,
                c.cmd,
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The cases cover the whole table, so an entry added without a demonstration
/// fails here.
#[test]
fn every_program_table_entry_has_a_demonstration() {
    let shown: Vec<&str> = cases().iter().map(|c| c.label).collect();
    let missing: Vec<String> = TABLE
        .iter()
        .map(|e| e.label())
        .filter(|l| !shown.contains(&l.as_str()) && !NOT_RUN.iter().any(|(n, _)| n == l))
        .collect();
    assert!(missing.is_empty(), "no case for {missing:?}");
    // And the runs entries are the ones that make a command not provable.
    assert!(TABLE.iter().any(|e| e.effect == Effect::Runs));
}
