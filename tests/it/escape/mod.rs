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

mod filesystem;
mod layers;
mod network;
mod privileges;
mod processes;
mod resources;

use crate::common::{FakeApi, Reply, SECRET_KEY, TestRoot, chown_tree, last_results, stderr};

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
        // Where the daemon's control socket lives (docs/config.md), mode 0600 like it.
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

/// Every attack, family by family: (id, tool, input). Each prints ESCAPED only if
/// it worked. The first waits until the daemon's pid is known.
fn attacks(t: &Targets) -> Vec<(String, &'static str, Value)> {
    let wait: Vec<(&str, &'static str, Value)> = vec![(
        "wait",
        "run_bash",
        bash("while [ ! -s daemon.pid ]; do sleep 0.01; done; echo ready"),
    )];
    wait.into_iter()
        .chain(filesystem::attacks(t))
        .chain(privileges::attacks(t))
        .chain(network::attacks(t))
        .chain(processes::attacks(t))
        .chain(resources::attacks(t))
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
    assert!(by_id("wait").contains("ready"), "{}", by_id("wait"));
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
