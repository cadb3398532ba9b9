//! Differential test of direct exec (docs/sandbox.md): every command of the
//! proof's corpus (`shell_diff::generate`) and of the extra cases below that
//! `policy::shell::simple_command` accepts is run through the real helper twice —
//! as `bash -c COMMAND` and the direct way — and must give the same argv,
//! environment, working directory, pid, signal state, descriptors, exit code,
//! stdout and stderr, as told by a probe program (tests/fixtures/direct_exec/probe.c)
//! standing in for every program of the corpus.
//!
//! The direct runs have a tripwire in place of bash on `PATH`: a direct run that
//! fell back to bash prints `TRIPWIRE` and differs, so the test sees that the
//! direct path was taken. The fallback cases (not found, no `#!`, not executable,
//! a directory, a bad interpreter) must hit the tripwire, and with the real bash
//! give bash's own answer.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use harnessd::config::Loaded;
use harnessd::exec::{Ending, ExecRequest, Executor};
use harnessd::policy::shell::simple_command;
use harnessd::sandbox::{Confinement, Job, Profile};
use tokio_util::sync::CancellationToken;

use crate::common::{TestRoot, bin};
use crate::shell_diff::{REPRODUCTIONS, SHIMS, generate};

/// What one run gave.
#[derive(Debug, PartialEq, Eq)]
struct Run {
    ending: Ending,
    stdout: String,
    stderr: String,
}

struct Fixture {
    root: TestRoot,
    loaded: Loaded,
    /// `workspace/pbin`: the probe under every shim name, and `bash`.
    pbin: PathBuf,
    /// Executors already made, by `PATH`.
    executors: std::collections::HashMap<String, Executor>,
}

impl Fixture {
    fn new() -> Fixture {
        let root = TestRoot::new("http://127.0.0.1:9");
        let loaded = harnessd::config::load(&root.dir).unwrap();
        let ws = loaded.paths.workspace.clone();
        harnessd::exec::prepare_workspace(&ws, &loaded.tool_user.user).unwrap();
        let pbin = ws.join("pbin");
        std::fs::create_dir_all(&pbin).unwrap();
        let source =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/direct_exec/probe.c");
        let probe = root.dir.join("probe");
        let cc = Command::new("cc")
            .args(["-O", "-o"])
            .arg(&probe)
            .arg(&source)
            .status()
            .expect("the direct-exec test needs a C compiler (cc) for its probe");
        assert!(cc.success(), "cc failed on {}", source.display());
        for name in SHIMS.iter().copied().chain(["here"]) {
            let dir = if name == "here" { &ws } else { &pbin };
            std::fs::copy(&probe, dir.join(name)).unwrap();
            chmod(&dir.join(name), 0o755);
        }
        let noexec = ws.join("noexec");
        std::fs::create_dir_all(&noexec).unwrap();
        for name in ["cat", "onlyhere"] {
            std::fs::copy(&probe, noexec.join(name)).unwrap();
            chmod(&noexec.join(name), 0o644);
        }
        let script = |name: &str, body: &str, mode: u32| {
            std::fs::write(ws.join(name), body).unwrap();
            chmod(&ws.join(name), mode);
        };
        let cat = pbin.join("cat");
        script(
            "script.sh",
            &format!("#!/bin/sh\nexec {} \"$0\" \"$@\"\n", cat.display()),
            0o755,
        );
        script(
            "noshebang.sh",
            "echo no shebang \"$0\" \"$1\"\nexit 3\n",
            0o755,
        );
        script("notexec.sh", "#!/bin/sh\necho ran\n", 0o644);
        script("badinterp.sh", "#!/nonexistent/sh\necho ran\n", 0o755);
        script("hello.txt", "hello\n", 0o644);
        std::fs::create_dir_all(ws.join("adir")).unwrap();
        let fx = Fixture {
            root,
            loaded,
            pbin,
            executors: std::collections::HashMap::new(),
        };
        fx.real_bash(true);
        fx
    }

    /// `pbin/bash`: the real bash, or a tripwire that says it ran.
    fn real_bash(&self, real: bool) {
        let link = self.pbin.join("bash");
        let _ = std::fs::remove_file(&link);
        if real {
            std::os::unix::fs::symlink(bash_path(), &link).unwrap();
        } else {
            std::fs::write(&link, "#!/bin/sh\necho TRIPWIRE >&2\nexit 99\n").unwrap();
            chmod(&link, 0o755);
        }
    }

    /// An executor whose helpers start with `PATH` set to `path` (the rest of the
    /// tool environment as the executor sets it): a wrapper in front of the
    /// helper, which drops the `PWD` that `sh` exports.
    fn executor(&mut self, path: &str) -> Executor {
        let n = self.executors.len();
        let dir = self.root.dir.clone();
        self.executors
            .entry(path.to_string())
            .or_insert_with(|| {
                let wrapper = dir.join(format!("helper-{n}.sh"));
                std::fs::write(
                    &wrapper,
                    format!(
                        "#!/bin/sh\nexec /usr/bin/env -u PWD PATH='{path}' '{}' \"$@\"\n",
                        bin()
                    ),
                )
                .unwrap();
                chmod(&wrapper, 0o755);
                Executor::new(wrapper)
            })
            .clone()
    }

    /// `PATH` with the probes first, then the tool environment's.
    fn path(&self) -> String {
        format!("{}:/usr/local/bin:/usr/bin:/bin", self.pbin.display())
    }

    fn run(&mut self, path: &str, profile: Profile, job: &Job) -> Run {
        let executor = self.executor(path);
        let confine = Confinement::for_root(&self.loaded, profile);
        let never = CancellationToken::new();
        let o = executor.run(&ExecRequest {
            job,
            workspace: &self.loaded.paths.workspace,
            confine: &confine,
            timeout: Duration::from_secs(20),
            spool_prefix: None,
            spool_budget: harnessd::exec::SpoolBudget::unlimited(),
            keep_bytes: 1 << 20,
            cancel: &never,
            relay_output: false,
        });
        Run {
            ending: o.ending,
            stdout: o.stdout.text(),
            stderr: o.stderr.text(),
        }
    }

    /// `cmd` under bash, then direct with the tripwire in place of bash; both runs
    /// must agree, and the direct one must not have run bash.
    fn same_direct(&mut self, path: &str, profile: Profile, cmd: &str) -> Run {
        let argv = simple_command(cmd).unwrap_or_else(|| panic!("{cmd:?} should be accepted"));
        let bash = self.run(path, profile, &bash_job(cmd, None));
        self.real_bash(false);
        let direct = self.run(path, profile, &bash_job(cmd, Some(argv)));
        self.real_bash(true);
        assert_eq!(bash, direct, "{cmd:?} with PATH={path}");
        bash
    }

    /// `cmd` accepted, but not run directly by the helper: the direct job hits the
    /// tripwire, and with the real bash gives what bash gives.
    fn falls_back(&mut self, path: &str, cmd: &str) -> Run {
        let argv = simple_command(cmd).unwrap_or_else(|| panic!("{cmd:?} should be accepted"));
        let job = bash_job(cmd, Some(argv));
        self.real_bash(false);
        let tripped = self.run(path, Profile::Write, &job);
        self.real_bash(true);
        assert_eq!(tripped.ending, Ending::Exited(99), "{cmd:?}: {tripped:?}");
        assert!(tripped.stderr.contains("TRIPWIRE"), "{cmd:?}: {tripped:?}");
        let bash = self.run(path, Profile::Write, &bash_job(cmd, None));
        let direct = self.run(path, Profile::Write, &job);
        assert_eq!(bash, direct, "{cmd:?}");
        bash
    }
}

fn bash_job(cmd: &str, direct: Option<Vec<String>>) -> Job {
    Job::Bash {
        command: cmd.to_string(),
        direct,
    }
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn bash_path() -> PathBuf {
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|d| d.join("bash"))
        .find(|p| p.is_file())
        .expect("bash on PATH")
}

/// The corpus: the proof's own (`shell_diff`'s seed), and as many again.
fn corpus() -> Vec<String> {
    let mut cases: Vec<String> = REPRODUCTIONS.iter().map(|s| s.to_string()).collect();
    for seed in [0x5eed_0008, 0xd1ec_7e8e] {
        let mut rng = fastrand::Rng::with_seed(seed);
        cases.extend((0..1200).map(|_| generate(&mut rng)));
    }
    cases
}

#[test]
fn direct_exec_matches_bash_over_the_proof_corpus() {
    let mut fx = Fixture::new();
    let path = fx.path();
    let (mut accepted, mut refused) = (Vec::new(), Vec::new());
    for cmd in corpus() {
        match simple_command(&cmd) {
            Some(argv) => accepted.push((cmd, argv)),
            None => refused.push(cmd),
        }
    }
    // Under bash first (the real one), then direct with the tripwire: two passes,
    // so the link is swapped twice, not twice per command.
    let bash: Vec<Run> = accepted
        .iter()
        .map(|(cmd, _)| fx.run(&path, Profile::Write, &bash_job(cmd, None)))
        .collect();
    fx.real_bash(false);
    for ((cmd, argv), bash) in accepted.iter().zip(&bash) {
        let direct = fx.run(&path, Profile::Write, &bash_job(cmd, Some(argv.clone())));
        assert_eq!(bash, &direct, "{cmd:?}");
        // The probe ran, as the namespace's PID 1 (bash exec'd it, it did not fork).
        assert!(
            direct.stdout.starts_with(&format!("argv {}\n", argv[0]))
                && direct.stdout.contains("\npid 1\n"),
            "{cmd:?}: {direct:?}"
        );
    }
    fx.real_bash(true);
    // The corpus must exercise both sides for the test to mean anything.
    println!("accepted {}, refused {}", accepted.len(), refused.len());
    assert!(
        accepted.len() > 150 && refused.len() > 1500,
        "accepted {}, refused {}",
        accepted.len(),
        refused.len()
    );
    // What is refused runs under bash as before: the job on the wire is the one
    // the helper always read, and a sample of them runs as on the host.
    let ws = fx.loaded.paths.workspace.clone();
    // Not the ones whose output is not the same twice: concurrent commands (`&`,
    // `|`, process substitution), substituted probe output (its pid), timings.
    let steady = |c: &&String| {
        !["&", "|", "$", "`", "<(", ">(", "time"]
            .iter()
            .any(|s| c.contains(s))
    };
    let sample: Vec<&String> = refused.iter().filter(steady).step_by(7).collect();
    assert!(
        sample.len() > 30,
        "only {} refused commands sampled",
        sample.len()
    );
    for cmd in sample {
        let job = bash_job(cmd, simple_command(cmd));
        assert_eq!(
            serde_json::to_value(&job).unwrap(),
            serde_json::json!({"op": "bash", "command": cmd}),
        );
        let confined = fx.run(&path, Profile::Write, &job);
        let host = host_bash(cmd, &ws, &path);
        assert_eq!(
            (
                &confined.ending,
                comparable(&confined.stdout),
                comparable(&confined.stderr)
            ),
            (
                &host.ending,
                comparable(&host.stdout),
                comparable(&host.stderr)
            ),
            "{cmd:?}"
        );
    }
}

/// `cmd` under bash on the host, in the tool environment with `PATH`.
fn host_bash(cmd: &str, ws: &Path, path: &str) -> Run {
    use std::os::unix::process::CommandExt;
    let out = Command::new(bash_path())
        .arg0("bash")
        .arg("-c")
        .arg(cmd)
        .env_clear()
        .envs(harnessd::exec::tool_environment(ws))
        .env("PATH", path)
        .current_dir(ws)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    use std::os::unix::process::ExitStatusExt;
    Run {
        ending: match (out.status.code(), out.status.signal()) {
            (Some(code), _) => Ending::Exited(code),
            (None, Some(sig)) => Ending::Exited(128 + sig),
            _ => Ending::SpawnFailed("?".into()),
        },
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Output lines a confined and a host process share: not the pid, descriptors or
/// signal state (the test process's own), in order.
fn comparable(text: &str) -> Vec<&str> {
    text.lines()
        .filter(|l| {
            !["pid ", "fd ", "ignored ", "blocked ", "handled "]
                .iter()
                .any(|p| l.starts_with(p))
        })
        .collect()
}

#[test]
fn direct_exec_matches_bash_for_paths_arguments_and_path_entries() {
    let mut fx = Fixture::new();
    let path = fx.path();
    let pbin = fx.pbin.display().to_string();
    let ws = fx.loaded.paths.workspace.display().to_string();
    let ok = |run: &Run, code: i32| {
        assert_eq!(run.ending, Ending::Exited(code), "{run:?}");
    };
    let r = fx.same_direct(&path, Profile::Write, "cat exit=7");
    ok(&r, 7);
    assert!(r.stderr.contains("probe stderr: 2 args, exit 7"), "{r:?}");
    let r = fx.same_direct(
        &path,
        Profile::Write,
        "grep 'a b' \"c\\\"d\" e\\\\f 'ü€😀' 'two\nlines' '' --x=y \"\\$HOME\" 'it'\\''s'",
    );
    ok(&r, 10);
    assert!(r.stdout.contains("argv two\\x0alines\n"), "{r:?}");
    assert!(r.stdout.contains("argv it's\n"), "{r:?}");
    // Given by path: `_` is the word as written.
    let r = fx.same_direct(&path, Profile::Write, &format!("{pbin}/cat abs"));
    assert!(r.stdout.contains(&format!("env _={pbin}/cat\n")), "{r:?}");
    fx.same_direct(&path, Profile::Write, "./pbin/cat rel");
    let r = fx.same_direct(&path, Profile::Write, "pbin/wc rel");
    assert!(r.stdout.contains("env _=pbin/wc\n"), "{r:?}");
    // Found on PATH: `_` is the path run, SHLVL what bash leaves, PWD the cwd.
    let r = fx.same_direct(&path, Profile::Write, "cat x\n");
    for line in [
        format!("env _={pbin}/cat"),
        "env SHLVL=0".into(),
        format!("env PWD={ws}"),
        format!("cwd {ws}"),
        "pid 1".into(),
    ] {
        assert!(r.stdout.lines().any(|l| l == line), "{line:?} in {r:?}");
    }
    fx.same_direct(&path, Profile::Write, " \n\tcat y \t");
    // A script with `#!`: the kernel runs it with the path bash would pass.
    let r = fx.same_direct(&path, Profile::Write, "./script.sh s1");
    assert!(r.stdout.contains("argv ./script.sh\nargv s1\n"), "{r:?}");
    // Real programs: the whole environment as printenv sees it, and a file.
    fx.same_direct(&path, Profile::Write, "printenv");
    let r = fx.same_direct(&path, Profile::Write, "/bin/cat hello.txt");
    assert_eq!(r.stdout, "hello\n");
    // The read-only profile changes HOME, TMPDIR and git's variables first.
    fx.same_direct(&path, Profile::ReadOnly, "cat ro");
    fx.same_direct(&path, Profile::ReadOnly, "printenv");
    // PATH entries: empty ones are the working directory, a trailing `/` is not
    // doubled (but `//` stays), a relative entry stays relative, and a file that
    // is not executable is passed over for a later one that is.
    for (path, cmd, found) in [
        (
            format!("{pbin}::/usr/bin:/bin"),
            "here 1",
            "./here".to_string(),
        ),
        (format!(":{pbin}:/usr/bin:/bin"), "here 2", "./here".into()),
        (format!("{pbin}:/usr/bin:/bin:"), "here 3", "./here".into()),
        (
            format!("{pbin}/:/usr/bin:/bin"),
            "cat 4",
            format!("{pbin}/cat"),
        ),
        (
            format!("{pbin}//:/usr/bin:/bin"),
            "cat 5",
            format!("{pbin}//cat"),
        ),
        ("pbin:/usr/bin:/bin".into(), "cat 6", "pbin/cat".into()),
        (
            format!("{ws}/noexec:{pbin}:/usr/bin:/bin"),
            "cat 7",
            format!("{pbin}/cat"),
        ),
    ] {
        let r = fx.same_direct(&path, Profile::Write, cmd);
        assert!(
            r.stdout.contains(&format!("\nenv _={found}\n")),
            "{path} {cmd}: {r:?}"
        );
        assert!(
            r.stdout.contains(&format!("\nenv PATH={path}\n")),
            "{path} {cmd}: {r:?}"
        );
    }
}

#[test]
fn direct_exec_falls_back_to_bash_with_bash_s_own_answer() {
    let mut fx = Fixture::new();
    let path = fx.path();
    let ws = fx.loaded.paths.workspace.display().to_string();
    let r = fx.falls_back(&path, "no-such-program x");
    assert_eq!(r.ending, Ending::Exited(127), "{r:?}");
    assert!(
        r.stderr.contains("no-such-program: command not found"),
        "{r:?}"
    );
    // ENOEXEC: bash runs a script without `#!` itself.
    let r = fx.falls_back(&path, "./noshebang.sh a");
    assert_eq!(r.ending, Ending::Exited(3), "{r:?}");
    assert_eq!(r.stdout, "no shebang ./noshebang.sh a\n");
    for cmd in ["./notexec.sh", "./adir", "./badinterp.sh", "./missing"] {
        let r = fx.falls_back(&path, cmd);
        assert!(
            matches!(r.ending, Ending::Exited(126 | 127)),
            "{cmd}: {r:?}"
        );
        assert!(r.stderr.starts_with("bash: line 1: "), "{cmd}: {r:?}");
    }
    // On PATH but not executable: the search finds nothing, bash says why.
    let r = fx.falls_back(&format!("{ws}/noexec:{}", fx.path()), "onlyhere");
    assert_eq!(r.ending, Ending::Exited(126), "{r:?}");
    assert!(r.stderr.contains("Permission denied"), "{r:?}");
    // An empty PATH is left to bash (it then runs names from the working
    // directory) — here with no bash to fall back to, so the helper says so.
    let r = fx.run(
        "",
        Profile::Write,
        &bash_job("here", simple_command("here")),
    );
    assert_eq!(r.ending, Ending::Exited(127), "{r:?}");
    assert!(r.stderr.contains("cannot run bash"), "{r:?}");
}

/// Every builtin and keyword of the real bash (`enable -a`, `compgen -k`) runs
/// under bash, however it is spelled: the lists in `policy::shell` are bash's own.
#[test]
fn every_bash_builtin_and_keyword_is_refused() {
    let out = Command::new(bash_path())
        .args(["-c", "enable -a; compgen -k"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let names: Vec<&str> = text
        .lines()
        .map(|l| l.strip_prefix("enable ").unwrap_or(l).trim())
        .collect();
    assert!(names.len() > 70, "{names:?}");
    for name in names {
        for spelled in [name.to_string(), format!("'{name}'"), format!("\\{name}")] {
            let cmd = format!("{spelled} x");
            assert_eq!(simple_command(&cmd), None, "{cmd:?}");
        }
    }
}
