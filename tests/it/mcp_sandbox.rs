//! A confined server process (`Executor::start_server`), against the real kernel:
//! a line server in stdlib Python (`tests/fixtures/mcp/line_server.py`) started
//! through the helper as an MCP server would be, asked over its live stdin what it
//! can see and do.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use harnessd::config::Loaded;
use harnessd::exec::{Executor, ServerError, ServerExit, ServerProcess, ServerRequest};
use harnessd::sandbox::{Confinement, Require};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{ChildStdin, ChildStdout};

use crate::common::{TestRoot, bin, wait_until};

/// A root with the fixture copied into `mcp/` (readable by the tool uid, and
/// not otherwise in the read set).
struct Fixture {
    /// Removed on drop.
    _root: TestRoot,
    loaded: Loaded,
    executor: Executor,
}

impl Fixture {
    fn new() -> Fixture {
        let root = TestRoot::new("http://127.0.0.1:9");
        let dir = root.dir.join("mcp");
        std::fs::create_dir_all(&dir).unwrap();
        let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mcp");
        std::fs::copy(fixture.join("line_server.py"), dir.join("line_server.py")).unwrap();
        let loaded = harnessd::config::load(&root.dir).unwrap();
        harnessd::exec::prepare_workspace(&loaded.paths.workspace, &loaded.tool_user.user).unwrap();
        Fixture {
            _root: root,
            loaded,
            executor: Executor::new(PathBuf::from(bin())),
        }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.loaded.paths.root.join(rel)
    }

    /// The confinement of a server reading `read` (besides the fixture and the
    /// policy's read set) and writing `write`.
    fn confine(&self, read: &[&str], write: &[&str], network: bool) -> Confinement {
        let mut r: Vec<PathBuf> = vec![self.path("mcp")];
        r.extend(read.iter().map(|p| self.path(p)));
        let w: Vec<PathBuf> = write.iter().map(|p| self.path(p)).collect();
        Confinement::for_server(&self.loaded, &r, &w, network)
    }

    async fn start(&self, confine: &Confinement, env: &[(String, String)]) -> Server {
        let argv = vec![
            "python3".to_string(),
            self.path("mcp/line_server.py").display().to_string(),
        ];
        let mut process = self
            .executor
            .start_server(&ServerRequest {
                name: "line",
                argv: &argv,
                env,
                workspace: &self.loaded.paths.workspace,
                confine,
            })
            .await
            .unwrap();
        let (stdout, stdin) = process.take_stdio().unwrap();
        assert!(process.take_stdio().is_none(), "the pipes are taken once");
        Server {
            process,
            stdout: BufReader::new(stdout),
            stdin,
        }
    }
}

struct Server {
    process: ServerProcess,
    stdout: BufReader<ChildStdout>,
    stdin: ChildStdin,
}

impl Server {
    /// Sends one line and reads the answer.
    async fn ask(&mut self, line: &str) -> String {
        self.stdin
            .write_all(format!("{line}\n").as_bytes())
            .await
            .unwrap();
        self.stdin.flush().await.unwrap();
        let mut answer = String::new();
        self.stdout.read_line(&mut answer).await.unwrap();
        assert!(answer.ends_with('\n'), "the server ended: {answer:?}");
        answer.trim_end_matches('\n').to_string()
    }
}

#[tokio::test]
async fn a_line_sent_on_stdin_comes_back_on_stdout_whole_from_the_first_byte() {
    let f = Fixture::new();
    let mut s = f.start(&f.confine(&[], &[], false), &[]).await;
    // The first bytes after the job are the server's: none is eaten by the framing.
    assert_eq!(
        s.ask("echo {\"jsonrpc\":\"2.0\",\"id\":1}").await,
        "{\"jsonrpc\":\"2.0\",\"id\":1}"
    );
    assert_eq!(s.ask("echo second").await, "second");
    assert!(s.process.pid() > 1);
}

#[tokio::test]
async fn a_server_starts_under_a_paused_clock() {
    // As in the daemon's in-process tests: a paused clock jumps to the next Tokio
    // timer whenever the runtime waits on something outside it, here the helper.
    let f = Fixture::new();
    tokio::time::pause();
    let mut s = f.start(&f.confine(&[], &[], false), &[]).await;
    assert_eq!(s.ask("echo paused").await, "paused");
}

#[tokio::test]
async fn the_environment_is_the_tool_base_and_exactly_the_named_variables() {
    let f = Fixture::new();
    let env = vec![("API_TOKEN".to_string(), "tok = 1\nline two".to_string())];
    let mut s = f.start(&f.confine(&[], &[], false), &env).await;
    let seen: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(&s.ask("env").await).unwrap();
    let mut expected: Vec<String> = harnessd::exec::tool_environment(&f.loaded.paths.workspace)
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    expected.push("API_TOKEN".into());
    expected.sort();
    let mut keys: Vec<String> = seen.keys().cloned().collect();
    keys.sort();
    assert_eq!(
        keys, expected,
        "nothing of the daemon's environment, no API key"
    );
    assert!(!seen.contains_key("ANTHROPIC_API_KEY"));
    assert_eq!(seen["API_TOKEN"], "tok = 1\nline two");
    // TMPDIR and HOME are the private /tmp, and writable there.
    let tmp = seen["TMPDIR"].as_str().unwrap().to_string();
    assert!(tmp.starts_with("/tmp"), "{tmp}");
    assert_eq!(seen["HOME"], tmp.as_str());
    assert_eq!(s.ask(&format!("write {tmp}/scratch")).await, "ok");
}

#[tokio::test]
async fn code_tools_put_in_the_workspaces_home_files_does_not_run_in_a_server() {
    // The workspace is what tools (and so the model) write. Were it the server's
    // HOME, python would load a `.pth` file from its user site-packages there at
    // start, inside the server, with its variables and rights.
    let f = Fixture::new();
    let version = std::process::Command::new("python3")
        .args(["-c", "import sys; print('%d.%d' % sys.version_info[:2])"])
        .output()
        .unwrap();
    let version = String::from_utf8(version.stdout).unwrap();
    let site = f
        .loaded
        .paths
        .workspace
        .join(format!(".local/lib/python{}/site-packages", version.trim()));
    std::fs::create_dir_all(&site).unwrap();
    std::fs::write(
        site.join("planted.pth"),
        "import os; os.environ['PLANTED'] = 'ran in the server'\n",
    )
    .unwrap();
    let mut s = f.start(&f.confine(&[], &[], false), &[]).await;
    let seen: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(&s.ask("env").await).unwrap();
    assert!(!seen.contains_key("PLANTED"), "{seen:?}");
}

/// A directory outside `/tmp` (whose paths the server's private `/tmp` would hide,
/// so a refusal there would be "no such file", not the kernel's), readable by
/// every uid as far as file modes go: only the sandbox can keep a server out.
fn outside_tmp() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    tempfile::Builder::new()
        .prefix("harnessd-it-outside-")
        .permissions(std::fs::Permissions::from_mode(0o755))
        .tempdir_in("/var/tmp")
        .unwrap()
}

#[tokio::test]
async fn a_file_outside_the_read_set_is_refused_by_the_kernel_and_one_inside_is_read() {
    let f = Fixture::new();
    let outside_dir = outside_tmp();
    let outside = outside_dir.path().join("file.txt");
    std::fs::write(&outside, "secret\n").unwrap();
    std::fs::create_dir_all(f.path("inside")).unwrap();
    std::fs::write(f.path("inside/file.txt"), "granted\n").unwrap();
    let mut s = f.start(&f.confine(&["inside"], &[], false), &[]).await;
    assert_eq!(
        s.ask(&format!("read {}", outside.display())).await,
        "err EACCES"
    );
    let inside = f.path("inside/file.txt");
    assert_eq!(
        s.ask(&format!("read {}", inside.display())).await,
        "ok granted"
    );
    // Without `write`, the workspace (in the policy's read set) is read-only.
    let ws = f.loaded.paths.workspace.join("planted.txt");
    assert_eq!(
        s.ask(&format!("write {}", ws.display())).await,
        "err EACCES"
    );
    assert!(!ws.exists());
}

#[tokio::test]
async fn a_server_writes_its_own_write_set_and_nothing_else() {
    let f = Fixture::new();
    std::fs::create_dir_all(f.path("out")).unwrap();
    // The tool uid must be able to write it as far as file modes go.
    let uid: u32 = f.loaded.tool_user.user.parse().unwrap();
    chown(&f.path("out"), uid);
    let mut s = f.start(&f.confine(&[], &["out"], false), &[]).await;
    let out = f.path("out/made.txt");
    assert_eq!(s.ask(&format!("write {}", out.display())).await, "ok");
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "written\n");
    let ws = f.loaded.paths.workspace.join("planted.txt");
    assert_eq!(
        s.ask(&format!("write {}", ws.display())).await,
        "err EACCES"
    );
}

fn chown(path: &Path, uid: u32) {
    std::os::unix::fs::chown(path, Some(uid), Some(uid)).unwrap();
}

#[tokio::test]
async fn without_network_a_loopback_listener_is_out_of_reach_and_with_it_reached() {
    let f = Fixture::new();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let mut s = f.start(&f.confine(&[], &[], false), &[]).await;
    let answer = s.ask(&format!("connect {port}")).await;
    assert!(answer.starts_with("err "), "{answer}");
    assert!(
        listener.accept().is_err(),
        "no connection reached the listener"
    );
    let mut s = f.start(&f.confine(&[], &[], true), &[]).await;
    assert_eq!(s.ask(&format!("connect {port}")).await, "ok");
}

#[tokio::test]
async fn a_server_has_no_cpu_time_limit() {
    let f = Fixture::new();
    let mut s = f.start(&f.confine(&[], &[], false), &[]).await;
    // getrlimit rather than /proc/self/limits: /proc is outside the read set.
    let line = s.ask("limits").await;
    let bytes = f.loaded.policy.settings.sandbox.memory_mb * 1024 * 1024;
    assert_eq!(
        line,
        format!("cpu -1 -1 as {bytes} {bytes}"),
        "no CPU limit, and the memory limit of tools"
    );
}

/// Whether `pid` runs nothing: no such process, or a zombie.
fn dead(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| matches!(rest.trim_start().chars().next(), Some('Z' | 'X'))),
    }
}

/// The processes whose parent is `pid`.
fn children(pid: u32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

#[tokio::test]
async fn stopping_a_server_kills_it_and_a_grandchild_that_left_its_session() {
    let f = Fixture::new();
    let mut s = f.start(&f.confine(&[], &[], false), &[]).await;
    assert_eq!(s.ask("spawn").await, "spawned");
    let helper = s.process.pid();
    let server = children(helper);
    assert_eq!(server.len(), 1, "the helper supervises one process");
    let server = server[0];
    let grandchild = children(server);
    assert_eq!(grandchild.len(), 1, "the server started one process");
    let grandchild = grandchild[0];
    assert!(!dead(grandchild));
    let watch = s.process.exit_watch();
    s.process.stop();
    for pid in [helper, server, grandchild] {
        wait_until(&format!("process {pid} to die"), || dead(pid));
    }
    let exit = (*watch.clone().wait_for(Option::is_some).await.unwrap()).unwrap();
    assert_eq!(exit.signal, Some(9), "{exit:?}");
}

#[tokio::test]
async fn dropping_a_server_kills_it() {
    let f = Fixture::new();
    let mut s = f.start(&f.confine(&[], &[], false), &[]).await;
    assert_eq!(s.ask("echo up").await, "up");
    let helper = s.process.pid();
    let server = children(helper)[0];
    drop(s);
    for pid in [helper, server] {
        wait_until(&format!("process {pid} to die"), || dead(pid));
    }
}

#[tokio::test]
async fn a_server_that_exits_by_itself_is_reported_with_its_code() {
    let f = Fixture::new();
    let mut s = f.start(&f.confine(&[], &[], false), &[]).await;
    s.stdin.write_all(b"exit 3\n").await.unwrap();
    s.stdin.flush().await.unwrap();
    assert_eq!(
        s.process.exited().await,
        ServerExit {
            code: Some(3),
            signal: None
        }
    );
    let mut rest = String::new();
    assert_eq!(
        s.stdout.read_line(&mut rest).await.unwrap(),
        0,
        "stdout closed"
    );
}

#[tokio::test]
async fn a_program_missing_inside_the_sandbox_or_outside_its_read_set_is_a_refusal() {
    let f = Fixture::new();
    let confine = f.confine(&[], &[], false);
    let start = async |argv: &[String]| {
        f.executor
            .start_server(&ServerRequest {
                name: "missing",
                argv,
                env: &[],
                workspace: &f.loaded.paths.workspace,
                confine: &confine,
            })
            .await
    };
    match start(&["no-such-server-7f3a".to_string()]).await {
        Err(ServerError::Refused { code, message }) => {
            assert_eq!(code, Some(127));
            assert!(message.contains("not found on PATH"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    // A program the kernel will not let the server read (outside its read set).
    let outside = outside_tmp();
    let program = outside.path().join("server.sh");
    std::fs::write(&program, "#!/bin/sh\nexec cat\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).unwrap();
    match start(&[program.display().to_string()]).await {
        Err(ServerError::Refused { message, .. }) => {
            assert!(message.contains("Permission denied"), "{message}");
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_confinement_the_host_cannot_give_is_the_sandboxs_refusal() {
    let f = Fixture::new();
    let mut confine = f.confine(&[], &[], false);
    // A required sandbox cannot drop to root; the helper refuses before the server.
    confine.limits.user = "root".into();
    confine.limits.require = Require::Full;
    let argv = vec!["cat".to_string()];
    let err = f
        .executor
        .start_server(&ServerRequest {
            name: "refused",
            argv: &argv,
            env: &[],
            workspace: &f.loaded.paths.workspace,
            confine: &confine,
        })
        .await
        .unwrap_err();
    match &err {
        ServerError::Refused { code, message } => {
            assert_eq!(*code, Some(125));
            assert!(
                message.contains("privilege_drop cannot be enforced"),
                "{message}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(
        err.to_string()
            .starts_with("the sandbox refused to start the server: ")
    );
}

/// Log lines the `mcp` target wrote in this process, captured once for the whole
/// test binary.
static LOG: Mutex<Vec<u8>> = Mutex::new(Vec::new());

struct Capture;

impl std::io::Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        LOG.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn a_servers_stderr_reaches_the_log_escaped_with_its_name() {
    use tracing_subscriber::prelude::*;
    let captured = tracing_subscriber::fmt::layer()
        .with_ansi(false)
        .with_writer(|| Capture)
        .with_filter(
            tracing_subscriber::filter::Targets::new().with_target("mcp", tracing::Level::INFO),
        );
    // The one test of this binary that sets the process's subscriber.
    tracing_subscriber::registry()
        .with(captured)
        .try_init()
        .expect("no other test sets the global subscriber");
    let f = Fixture::new();
    let mut s = f.start(&f.confine(&[], &[], false), &[]).await;
    assert_eq!(
        s.ask("stderr \\e[2J\\e]0;owned\\e\\ FORGED").await,
        "logged"
    );
    s.stdin.write_all(b"exit 0\n").await.unwrap();
    s.process.exited().await;
    wait_until("the stderr line in the log", || {
        String::from_utf8_lossy(&LOG.lock().unwrap()).contains("FORGED")
    });
    let log = String::from_utf8_lossy(&LOG.lock().unwrap()).into_owned();
    let line = log.lines().find(|l| l.contains("FORGED")).unwrap();
    assert!(line.contains("server=line"), "{line}");
    assert!(line.contains("\\x1b[2J\\x1b]0;owned"), "{line}");
    assert!(!log.contains('\x1b'), "no raw escape reached the log");
}

/// Set in the environment of [`a_server_host`]'s process.
const HOST_VAR: &str = "HARNESSD_IT_SERVER_HOST";

/// The daemon's side of [`a_server_dies_with_the_daemon_even_on_kill_9`], run in a
/// process of its own (this test binary, re-executed): starts a server that starts
/// a grandchild, prints the helper's, the server's and the grandchild's pids and its
/// root, then waits to be killed.
#[tokio::test]
#[ignore = "run by a_server_dies_with_the_daemon_even_on_kill_9 in a process it kills"]
async fn a_server_host() {
    if std::env::var_os(HOST_VAR).is_none() {
        return;
    }
    let f = Fixture::new();
    let mut s = f.start(&f.confine(&[], &[], false), &[]).await;
    assert_eq!(s.ask("spawn").await, "spawned");
    let helper = s.process.pid();
    let server = children(helper)[0];
    let grandchild = children(server)[0];
    println!(
        "PIDS {helper} {server} {grandchild} {}",
        f.loaded.paths.root.display()
    );
    std::future::pending::<()>().await;
}

#[test]
fn a_server_dies_with_the_daemon_even_on_kill_9() {
    use std::io::BufRead;
    let mut host = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "mcp_sandbox::a_server_host",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(HOST_VAR, "1")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(host.stdout.take().unwrap()).lines();
    let (pids, root): (Vec<u32>, TestRoot) = loop {
        let line = lines.next().expect("the host printed its pids").unwrap();
        // libtest's "test … " may begin the same line.
        if let Some((_, rest)) = line.split_once("PIDS ") {
            let words: Vec<&str> = rest.split(' ').collect();
            let pids = words[..3].iter().map(|p| p.parse().unwrap()).collect();
            // Removed when the test ends: the killed host cannot.
            break (
                pids,
                TestRoot {
                    dir: PathBuf::from(words[3]),
                },
            );
        }
    };
    assert_eq!(pids.len(), 3);
    assert!(pids.iter().all(|p| !dead(*p)));
    host.kill().unwrap();
    host.wait().unwrap();
    for pid in pids {
        wait_until(&format!("process {pid} to die with its daemon"), || {
            dead(pid)
        });
    }
    drop(root);
}
