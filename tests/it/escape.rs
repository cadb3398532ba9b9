//! The escape suite: real attacks, run the way the model would run them (through
//! `run_bash`, `run_python` and the file tools, in the real loop), each of which must
//! fail — and the daemon must come through unharmed. A successful attack prints
//! `ESCAPED`; every result is checked for it, and the side effects are checked on the
//! host afterwards (listeners that must have seen nothing, files that must be
//! unchanged).

use std::io::Read;
use std::net::{TcpListener, UdpSocket};
use std::os::unix::net::UnixListener;
use std::time::Duration;

use serde_json::{Value, json};

use crate::common::{FakeApi, Reply, SECRET_KEY, TestRoot, last_results, stderr, stdout};

const KEY_IN_FILE: &str = "sk-ant-keyfile-7c6b5a4d3e2f-SECRET";
const INHERITED: &str = "INHERITED-SECRET-5e4d3c";

/// Listeners on loopback that no tool may reach.
struct Targets {
    tcp: TcpListener,
    tcp6: Option<TcpListener>,
    udp: UdpSocket,
    unix: UnixListener,
    abstract_name: String,
    abstract_unix: UnixListener,
    /// A path in /tmp, outside every allowed path, that must not come to exist.
    tmp_marker: String,
}

impl Targets {
    fn open(root: &TestRoot) -> Targets {
        let tcp = TcpListener::bind("127.0.0.1:0").unwrap();
        tcp.set_nonblocking(true).unwrap();
        let tcp6 = TcpListener::bind("[::1]:0").ok();
        if let Some(l) = &tcp6 {
            l.set_nonblocking(true).unwrap();
        }
        let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
        udp.set_nonblocking(true).unwrap();
        std::fs::create_dir_all(root.dir.join("run")).unwrap();
        // Where the daemon's control socket lives (SPEC §3), mode 0600 like it.
        let path = root.dir.join("run/harnessd.sock");
        let unix = UnixListener::bind(&path).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        unix.set_nonblocking(true).unwrap();
        let abstract_name = format!("harnessd-escape-{}", root.dir.display()).replace('/', "-");
        use std::os::linux::net::SocketAddrExt;
        let addr =
            std::os::unix::net::SocketAddr::from_abstract_name(abstract_name.as_bytes()).unwrap();
        let abstract_unix = UnixListener::bind_addr(&addr).unwrap();
        abstract_unix.set_nonblocking(true).unwrap();
        let tmp_marker = format!("/tmp/{abstract_name}");
        Targets {
            tcp,
            tcp6,
            udp,
            unix,
            abstract_name,
            abstract_unix,
            tmp_marker,
        }
    }

    fn assert_untouched(&self) {
        assert!(
            self.tcp.accept().is_err(),
            "a tool reached the TCP listener"
        );
        if let Some(l) = &self.tcp6 {
            assert!(l.accept().is_err(), "a tool reached the IPv6 TCP listener");
        }
        let mut buf = [0u8; 64];
        assert!(
            self.udp.recv_from(&mut buf).is_err(),
            "a tool's UDP datagram arrived"
        );
        assert!(
            self.unix.accept().is_err(),
            "a tool connected to the control socket path"
        );
        assert!(
            self.abstract_unix.accept().is_err(),
            "a tool connected to the abstract socket"
        );
    }
}

fn py(code: &str) -> Value {
    json!({"code": code})
}

fn bash(command: &str) -> Value {
    json!({"command": command})
}

/// Every attack: (id, tool, input). Each prints ESCAPED only if it worked.
fn attacks(t: &Targets) -> Vec<(String, &'static str, Value)> {
    let tcp = t.tcp.local_addr().unwrap().port();
    let tcp6 = t
        .tcp6
        .as_ref()
        .map_or(1, |l| l.local_addr().unwrap().port());
    let udp = t.udp.local_addr().unwrap().port();
    let d = "D=$(cat daemon.pid); ";
    let list: Vec<(&str, &'static str, Value)> = vec![
        (
            "wait",
            "run_bash",
            bash("while [ ! -s daemon.pid ]; do sleep 0.01; done; echo ready"),
        ),
        // Reads outside the allowed set.
        (
            "shadow",
            "run_bash",
            bash("cat /etc/shadow && echo ESCAPED"),
        ),
        (
            "config",
            "run_bash",
            bash("cat ../config/config.toml && echo ESCAPED"),
        ),
        (
            "keyfile",
            "run_bash",
            bash("cat ../config/key && echo ESCAPED"),
        ),
        (
            "events",
            "run_bash",
            bash("cat ../transcripts/events.jsonl && echo ESCAPED"),
        ),
        (
            "environ",
            "run_bash",
            bash(&format!("{d}cat /proc/$D/environ && echo ESCAPED")),
        ),
        (
            "maps",
            "run_bash",
            bash(&format!("{d}cat /proc/$D/maps && echo ESCAPED")),
        ),
        (
            "mem",
            "run_bash",
            bash(&format!("{d}head -c 1 /proc/$D/mem && echo ESCAPED")),
        ),
        (
            "proc_root",
            "run_bash",
            bash(&format!("{d}ls /proc/$D/root/ && echo ESCAPED")),
        ),
        (
            "self_root",
            "run_bash",
            bash("cat /proc/self/root/etc/shadow && echo ESCAPED"),
        ),
        (
            "dotdot",
            "run_bash",
            bash("cat ../../../../../../../etc/shadow && echo ESCAPED"),
        ),
        (
            "symlink",
            "run_bash",
            bash("ln -sf /etc/shadow shadow-link; cat shadow-link && echo ESCAPED"),
        ),
        (
            "dirlink",
            "run_bash",
            bash("ln -sfn / rootlink; cat rootlink/etc/shadow && echo ESCAPED"),
        ),
        ("home", "run_bash", bash("ls /root && echo ESCAPED")),
        (
            "py_read",
            "run_python",
            py("print(open('/etc/shadow').read()); print('ESCAPED')"),
        ),
        ("file_read", "read_file", json!({"path": "/etc/shadow"})),
        (
            "file_config",
            "read_file",
            json!({"path": "../config/config.toml"}),
        ),
        ("file_link", "read_file", json!({"path": "shadow-link"})),
        ("file_list", "list_dir", json!({"path": "/root"})),
        // Writes, truncation, renames, deletes, links outside the write set.
        (
            "write_usr",
            "run_bash",
            bash("echo x > /usr/harnessd-escape && echo ESCAPED"),
        ),
        (
            "write_tmp",
            "run_bash",
            bash("echo x > /tmp/harnessd-escape && echo ESCAPED"),
        ),
        (
            "truncate",
            "run_bash",
            bash(": > ../config/config.toml && echo ESCAPED"),
        ),
        (
            "rename",
            "run_bash",
            bash("mv ../policies/settings.json ../policies/moved && echo ESCAPED"),
        ),
        (
            "delete",
            "run_bash",
            bash("rm -f ../config/config.toml; [ -e ../config/config.toml ] || echo ESCAPED"),
        ),
        (
            "hardlink",
            "run_bash",
            bash("ln /etc/passwd hardlink && echo ESCAPED"),
        ),
        (
            "file_write",
            "write_file",
            json!({"path": "/usr/harnessd-escape-2", "content": "x"}),
        ),
        (
            "file_edit",
            "edit_file",
            json!({"path": "../config/config.toml", "old_string": "[api]", "new_string": "[api]\n"}),
        ),
        (
            "py_write",
            "run_python",
            py("open('../policies/settings.json', 'w').write('{}'); print('ESCAPED')"),
        ),
        // Device nodes and privileges.
        (
            "mknod",
            "run_bash",
            bash("mknod devnull c 1 3 && echo ESCAPED"),
        ),
        (
            "setuid_mount",
            "run_bash",
            bash("mkdir -p mnt; /usr/bin/mount -t tmpfs none mnt && echo ESCAPED"),
        ),
        (
            "setuid_py",
            "run_python",
            py("import os; os.setuid(0); print('ESCAPED')"),
        ),
        (
            "uid",
            "run_bash",
            bash("[ \"$(id -u)\" = 0 ] && echo ESCAPED; id"),
        ),
        (
            "caps",
            "run_python",
            py(
                "import ctypes; libc = ctypes.CDLL(None); hdr = (ctypes.c_uint32 * 2)(0x20080522, 0); data = (ctypes.c_uint32 * 6)(); r = libc.syscall(125, hdr, data); print('caps', list(data)); print('ESCAPED' if r != 0 or any(data) else 'no capabilities')",
            ),
        ),
        (
            "unshare",
            "run_bash",
            bash("unshare -Ur true && echo ESCAPED"),
        ),
        // Network with network = false.
        (
            "tcp",
            "run_python",
            py(&format!(
                "import socket; s = socket.create_connection(('127.0.0.1', {tcp}), 2); print('ESCAPED')"
            )),
        ),
        (
            "tcp6",
            "run_python",
            py(&format!(
                "import socket; s = socket.create_connection(('::1', {tcp6}), 2); print('ESCAPED')"
            )),
        ),
        (
            "bash_tcp",
            "run_bash",
            bash(&format!(
                "echo hi > /dev/tcp/127.0.0.1/{tcp} && echo ESCAPED"
            )),
        ),
        (
            "udp",
            "run_python",
            py(&format!(
                "import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(b'x', ('127.0.0.1', {udp})); print('ESCAPED')"
            )),
        ),
        (
            "raw",
            "run_python",
            py(
                "import socket; s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP); print('ESCAPED')",
            ),
        ),
        (
            "netlink",
            "run_python",
            py(
                "import socket; s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0); print('ESCAPED')",
            ),
        ),
        (
            "dns",
            "run_python",
            py("import socket; print(socket.getaddrinfo('example.com', 443)); print('ESCAPED')"),
        ),
        (
            "unix_path",
            "run_python",
            py(
                "import socket; s = socket.socket(socket.AF_UNIX); s.connect('../run/harnessd.sock'); print('ESCAPED')",
            ),
        ),
        (
            "unix_abstract",
            "run_python",
            py(&format!(
                "import socket; s = socket.socket(socket.AF_UNIX); s.connect('\\0{}'); print('ESCAPED')",
                t.abstract_name
            )),
        ),
        // Signals and ptrace against the daemon.
        (
            "signal",
            "run_bash",
            bash(&format!("{d}kill -0 $D && echo ESCAPED")),
        ),
        (
            "kill",
            "run_bash",
            bash(&format!("{d}kill -9 $D; kill -STOP $D; true")),
        ),
        (
            "ptrace",
            "run_python",
            py(
                "import ctypes; libc = ctypes.CDLL(None); d = int(open('daemon.pid').read()); r = libc.ptrace(16, d, 0, 0); print('ESCAPED' if r == 0 else 'ptrace refused')",
            ),
        ),
        // Inherited descriptors and environment.
        (
            "fds",
            "run_bash",
            bash(&format!(
                "for fd in $(seq 3 60); do cat <&$fd 2>/dev/null; done | grep -q {INHERITED} && echo ESCAPED; true"
            )),
        ),
        (
            "env",
            "run_bash",
            bash("env; echo; echo \"$ANTHROPIC_API_KEY\""),
        ),
        // Terminal injection.
        (
            "tty",
            "run_python",
            py(
                "import fcntl, termios; fd = open('/dev/tty', 'w'); fcntl.ioctl(fd, termios.TIOCSTI, b'x'); print('ESCAPED')",
            ),
        ),
        // Resource exhaustion: each must be contained.
        (
            "fork_bomb",
            "run_bash",
            json!({"command": "bomb() { bomb | bomb & }; bomb; sleep 2", "timeout_secs": 3}),
        ),
        (
            "memory_bomb",
            "run_bash",
            bash(
                "for i in 1 2 3 4 5 6; do python3 -c 'b = bytearray(2 * 1024**3); print(\"ESCAPED\")' & done; wait",
            ),
        ),
        (
            "disk_fill",
            "run_bash",
            bash(
                "dd if=/dev/zero of=fill bs=1M count=64 2>/dev/null; [ $(stat -c %s fill) -gt 16777216 ] && echo ESCAPED; true",
            ),
        ),
    ];
    list.into_iter()
        .map(|(id, tool, input)| (id.to_string(), tool, input))
        .collect()
}

/// A root whose policy lets every call through to the sandbox, with tight limits.
/// `sandbox_user`: a uid of the test's own, because RLIMIT_NPROC counts every
/// process and thread of a uid, and other tests run tools as `nobody` meanwhile.
fn hostile_root(api: &FakeApi, sandbox_user: &str) -> TestRoot {
    let root = TestRoot::new(&api.url);
    root.set_config("loop", "max_tool_calls_per_turn", "100");
    let key = root.dir.join("config/key");
    std::fs::write(&key, KEY_IN_FILE).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    root.set_config("api", "api_key_file", "\"config/key\"");
    root.edit_settings(|s| {
        s["tools"] = json!({"default": "allow", "allow": [], "ask": [], "deny": []});
        s["sandbox"]["timeout_secs"] = json!(10);
        s["sandbox"]["max_processes"] = json!(32);
        s["sandbox"]["user"] = json!(sandbox_user);
        s["sandbox"]["memory_mb"] = json!(512);
        s["sandbox"]["max_file_mb"] = json!(16);
    });
    root
}

/// Opens a file holding `INHERITED` without CLOEXEC, so children of this test
/// process inherit it; returns the descriptor.
fn open_inheritable_secret(root: &TestRoot) -> i32 {
    let path = root.dir.join("inherited-secret");
    std::fs::write(&path, INHERITED).unwrap();
    let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    let fd = unsafe { libc::open(c.as_ptr(), libc::O_RDONLY) };
    assert!(fd > 2);
    fd
}

fn run_attacks(as_user: Option<u32>, sandbox_user: &str) {
    let api_placeholder = FakeApi::start(vec![]);
    let root = hostile_root(&api_placeholder, sandbox_user);
    let targets = Targets::open(&root);
    let attacks = attacks(&targets);
    let calls: Vec<(&str, &str, Value)> = attacks
        .iter()
        .map(|(id, tool, input)| (id.as_str(), *tool, input.clone()))
        .collect();
    let api = FakeApi::start(vec![Reply::tools(&calls), Reply::text("still here")]);
    root.set_config("api", "base_url", &format!("{:?}", api.url));
    let config_before = std::fs::read(root.dir.join("config/config.toml")).unwrap();
    let settings_before = std::fs::read(root.dir.join("policies/settings.json")).unwrap();
    let fd = open_inheritable_secret(&root);
    let mut cmd = root.command(&["run", "x"]);
    cmd.stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    if let Some(uid) = as_user {
        chown_tree(&root.dir, uid);
        // std drops supplementary groups itself when it changes the uid as root.
        use std::os::unix::process::CommandExt;
        cmd.uid(uid).gid(uid);
    }
    let mut child = cmd.spawn().unwrap();
    unsafe { libc::close(fd) };
    std::fs::write(root.workspace().join("daemon.pid"), child.id().to_string()).unwrap();
    let mut err = String::new();
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(start.elapsed() < Duration::from_secs(120), "harnessd hung");
        std::thread::sleep(Duration::from_millis(50));
    };
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert_eq!(
        status.code(),
        Some(0),
        "the daemon was harmed: {status:?}\n{err}"
    );
    let reqs = api.requests();
    assert_eq!(reqs.len(), 2, "the loop went on after the attacks\n{err}");
    let results = last_results(&reqs[1].body);
    assert_eq!(results.len(), attacks.len());
    let mut escaped = Vec::new();
    for ((id, _, _), r) in attacks.iter().zip(&results) {
        let text = r["content"].as_str().unwrap_or_default();
        if text.contains("ESCAPED")
            || text.contains(SECRET_KEY)
            || text.contains(KEY_IN_FILE)
            || text.contains(INHERITED)
            || text.contains("root:x:0")
        {
            escaped.push(format!("{id}: {text}"));
        }
    }
    assert!(
        escaped.is_empty(),
        "attacks that worked:\n{}",
        escaped.join("\n---\n")
    );
    let by_id = |id: &str| {
        let i = attacks.iter().position(|(a, _, _)| a == id).unwrap();
        results[i]["content"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    // The reads failed because the kernel refused them, not for want of a file.
    for id in [
        "shadow",
        "config",
        "keyfile",
        "file_read",
        "file_config",
        "write_usr",
    ] {
        let text = by_id(id);
        assert!(text.contains("Permission denied"), "{id}: {text}");
    }
    assert!(by_id("wait").contains("ready"));
    assert!(by_id("uid").contains("uid="), "{}", by_id("uid"));
    assert!(
        by_id("caps").contains("no capabilities"),
        "{}",
        by_id("caps")
    );
    assert!(
        by_id("udp").contains("Operation not permitted"),
        "{}",
        by_id("udp")
    );
    assert!(
        by_id("ptrace").contains("ptrace refused"),
        "{}",
        by_id("ptrace")
    );
    assert!(by_id("env").contains("PATH="), "the env attack ran");
    assert!(
        by_id("memory_bomb").contains("MemoryError"),
        "{}",
        by_id("memory_bomb")
    );
    targets.assert_untouched();
    assert_eq!(
        std::fs::read(root.dir.join("config/config.toml")).unwrap(),
        config_before
    );
    assert_eq!(
        std::fs::read(root.dir.join("policies/settings.json")).unwrap(),
        settings_before
    );
    assert_eq!(
        std::fs::read_to_string(root.dir.join("config/key")).unwrap(),
        KEY_IN_FILE
    );
    assert!(!std::path::Path::new("/usr/harnessd-escape").exists());
    assert!(!std::path::Path::new("/usr/harnessd-escape-2").exists());
    assert!(!std::path::Path::new(&targets.tmp_marker).exists());
    assert!(!root.workspace().join("devnull").exists());
    // Every event line still parses, and no record holds a secret.
    let _ = root.events();
    for (path, text) in root.all_records() {
        assert!(
            !text.contains(KEY_IN_FILE) && !text.contains(SECRET_KEY),
            "secret in {}",
            path.display()
        );
    }
    let _ = stderr;
}

fn chown_tree(dir: &std::path::Path, uid: u32) {
    let mut stack = vec![dir.to_path_buf()];
    while let Some(p) = stack.pop() {
        std::os::unix::fs::lchown(&p, Some(uid), Some(uid)).unwrap();
        if p.is_dir() && !p.is_symlink() {
            for e in std::fs::read_dir(&p).unwrap() {
                stack.push(e.unwrap().path());
            }
        }
    }
}

#[test]
fn every_attack_fails_and_the_daemon_is_unharmed_as_root() {
    assert!(
        nix::unistd::Uid::effective().is_root(),
        "CI runs as root; this case needs it"
    );
    run_attacks(None, "61001");
}

#[test]
fn every_attack_fails_and_the_daemon_is_unharmed_as_an_unprivileged_user() {
    if !nix::unistd::Uid::effective().is_root() {
        // Already unprivileged: the root case above is the one that cannot run.
        run_attacks(None, "nobody");
        return;
    }
    // The daemon itself runs as an unprivileged uid; tools keep it (no drop).
    run_attacks(Some(61002), "nobody");
}

#[test]
fn no_background_process_survives_a_timeout() {
    let heartbeat = |name: &str| format!("(while true; do date +%s%N > {name}; sleep 0.05; done)");
    let command = format!(
        "{} & nohup bash -c '{}' >/dev/null 2>&1 & setsid bash -c '{}' & (bash -c '{} &' &) ; sleep 60",
        heartbeat("hb-plain"),
        heartbeat("hb-nohup"),
        heartbeat("hb-setsid"),
        heartbeat("hb-double"),
    );
    let api = FakeApi::start(vec![
        Reply::tool("t", "run_bash", json!({"command": command})),
        Reply::text("done"),
    ]);
    let root = TestRoot::new(&api.url);
    root.edit_settings(|s| s["sandbox"]["timeout_secs"] = json!(2));
    let out = root.run(&["run", "--yes", "x"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let results = last_results(&api.requests()[1].body);
    assert!(
        results[0]["content"]
            .as_str()
            .unwrap()
            .contains("timed out")
    );
    for name in ["hb-plain", "hb-nohup", "hb-setsid", "hb-double"] {
        crate::tools::assert_heartbeat_stopped(&root.workspace().join(name));
    }
}

#[test]
fn fork_bomb_is_contained_and_the_loop_goes_on() {
    // A uid of its own: RLIMIT_NPROC counts every process of the uid, so a bomb
    // under the shared `nobody` would starve the other tests' tools.
    let bomb = json!({"command": "bomb() { bomb | bomb & }; bomb; sleep 3", "timeout_secs": 2});
    let api = FakeApi::start(vec![
        Reply::tool("bomb", "run_bash", bomb),
        Reply::tool("after", "run_bash", json!({"command": "echo alive"})),
        Reply::text("done"),
    ]);
    let root = TestRoot::new(&api.url);
    root.edit_settings(|s| {
        s["sandbox"]["user"] = json!("61999");
        s["sandbox"]["max_processes"] = json!(16);
    });
    let started = std::time::Instant::now();
    let out = root.run(&["run", "--yes", "x"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(started.elapsed() < Duration::from_secs(30));
    let reqs = api.requests();
    assert_eq!(reqs.len(), 3);
    let bombed = last_results(&reqs[1].body);
    assert!(
        bombed[0]["content"].as_str().unwrap().contains("timed out"),
        "{}",
        bombed[0]
    );
    let after = last_results(&reqs[2].body);
    assert!(
        after[0]["content"].as_str().unwrap().contains("alive"),
        "the next tool ran: {}",
        after[0]
    );
}

#[test]
fn a_sandbox_that_cannot_be_had_refuses_tools_when_full() {
    // As root, an account that does not exist makes the privilege drop impossible.
    let api = FakeApi::start(vec![
        Reply::tool("t", "run_bash", json!({"command": "touch ran"})),
        Reply::text("done"),
    ]);
    let root = TestRoot::new(&api.url);
    root.edit_settings(|s| s["sandbox"]["user"] = json!("no-such-harnessd-user"));
    let out = root.run(&["run", "--yes", "x"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("tools will be refused"),
        "{}",
        stderr(&out)
    );
    let result = &last_results(&api.requests()[1].body)[0];
    let text = result["content"].as_str().unwrap();
    assert_eq!(result["is_error"], true);
    assert!(text.contains("privilege_drop cannot be enforced"), "{text}");
    assert!(text.contains("no-such-harnessd-user"), "{text}");
    assert!(!root.workspace().join("ran").exists());
    let check = root.run(&["check"]);
    assert!(
        stdout(&check).contains("NO  privilege_drop"),
        "{}",
        stdout(&check)
    );
}

#[test]
fn best_effort_runs_weakened_and_says_so_in_every_tool_finished() {
    let api = FakeApi::start(vec![
        Reply::tool(
            "t",
            "run_bash",
            json!({"command": "cat /etc/shadow; touch ran"}),
        ),
        Reply::text("done"),
    ]);
    let root = TestRoot::new(&api.url);
    root.edit_settings(|s| {
        s["sandbox"]["user"] = json!("no-such-harnessd-user");
        s["sandbox"]["require"] = json!("best_effort");
    });
    let out = root.run(&["run", "--yes", "x"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(root.workspace().join("ran").exists());
    // Never root, even weakened: the drop fell back to nobody's uid.
    let owner = std::os::unix::fs::MetadataExt::uid(
        &std::fs::metadata(root.workspace().join("ran")).unwrap(),
    );
    assert_eq!(owner, 65534);
    // Still confined by the other layers: Landlock keeps /etc/shadow out.
    let text = last_results(&api.requests()[1].body)[0]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(text.contains("Permission denied"), "{text}");
    let fin = &root.events_of("tool_finished")[0];
    let note = fin["sandbox"]
        .as_str()
        .expect("tool_finished states the weaker sandbox");
    assert!(
        note.starts_with("best_effort: ") && note.contains("privilege_drop"),
        "{note}"
    );
}

#[test]
fn sandbox_command_runs_confined_with_the_commands_exit_code() {
    let root = TestRoot::new("http://127.0.0.1:9");
    let out = root.run(&[
        "sandbox",
        "--",
        "bash",
        "-c",
        "id -u; cat /etc/shadow; exit 7",
    ]);
    assert_eq!(out.status.code(), Some(7));
    let uid = stdout(&out).trim().to_string();
    assert_ne!(uid, "0", "the command ran as root");
    assert!(
        stderr(&out).contains("Permission denied"),
        "{}",
        stderr(&out)
    );
    root.edit_settings(|s| s["sandbox"]["timeout_secs"] = json!(1));
    let started = std::time::Instant::now();
    let out = root.run(&["sandbox", "--", "sleep", "30"]);
    assert_eq!(out.status.code(), Some(124));
    assert!(started.elapsed() < Duration::from_secs(10));
    let out = root.run(&[
        "sandbox",
        "--",
        "python3",
        "-c",
        "import socket; socket.socket(socket.AF_INET6)",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("Operation not permitted"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_calls_children_share_one_memory_and_process_cap() {
    let root = TestRoot::new("http://127.0.0.1:9");
    let check = root.run(&["check", "--json"]);
    let report: Value = serde_json::from_slice(&check.stdout).unwrap();
    let cgroup = report["enforced"]["layers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["name"] == "cgroup")
        .cloned()
        .unwrap();
    if cgroup["enforced"] != true {
        // Without a writable cgroup tree the caps are per process (RLIMIT_AS) and
        // per uid (RLIMIT_NPROC); the escape suite covers those.
        eprintln!("no call cgroup here: {}", cgroup["detail"]);
        return;
    }
    root.edit_settings(|s| {
        s["sandbox"]["memory_mb"] = json!(256);
        s["sandbox"]["max_processes"] = json!(40);
        s["sandbox"]["user"] = json!("61003");
    });
    // Each child stays under its own 256 MiB address-space limit; four of them
    // together would not fit the call's 256 MiB.
    let bomb = "for i in 1 2 3 4; do python3 -c 'b = bytearray(150 * 1024**2); import time; time.sleep(1); print(\"held\")' & done; wait";
    let out = root.run(&["sandbox", "--", "bash", "-c", bomb]);
    let held = stdout(&out).matches("held").count();
    assert!(
        held < 4,
        "four children held 600 MiB inside a 256 MiB call: {}",
        stdout(&out)
    );
    // Processes: 40 for the whole call, whatever uid budget remains.
    let out = root.run(&[
        "sandbox",
        "--",
        "bash",
        "-c",
        "n=0; for i in $(seq 80); do (sleep 2) 2>/dev/null & n=$((n+1)); done; wait; echo started",
    ]);
    let err = stderr(&out);
    assert!(
        err.contains("fork") || err.contains("Resource temporarily unavailable"),
        "80 processes started in a 40-process call: {err}"
    );
}
