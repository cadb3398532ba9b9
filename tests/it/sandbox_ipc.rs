//! docs/sandbox.md: a tool cannot create SysV IPC objects or POSIX message queues that
//! another process can reach or that outlive the call — each call has its own IPC
//! namespace, as root and as an unprivileged daemon alike.

use std::process::Command;

use crate::common::sandbox;
use crate::common::{TestRoot, chown_tree, stderr, stdout};

/// Creates (`create`) or looks for (`probe`) a shared memory segment, a message
/// queue and a semaphore set of key `argv[1]`, and the POSIX queue `/argv[2]`.
const IPC: &str = r#"
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
rt = ctypes.CDLL("librt.so.1", use_errno=True)
key, name, mode = int(sys.argv[1]), sys.argv[2].encode(), sys.argv[3]
flags = 0o1600 if mode == "create" else 0
shm = libc.shmget(key, 4096, flags)
msg = libc.msgget(key, flags)
sem = libc.semget(key, 1, flags)
mq = rt.mq_open(b"/" + name, (os.O_CREAT | os.O_RDWR) if mode == "create" else os.O_RDONLY, 0o600, None)
print(mode, "shm", shm >= 0, "msg", msg >= 0, "sem", sem >= 0, "mq", mq >= 0)
"#;

fn key_and_name(tag: u32) -> (String, String) {
    let key = 0x4852_0000 + (std::process::id() & 0xfff) * 16 + tag;
    (key.to_string(), format!("harnessd-it-{key}"))
}

fn assert_private_to_each_call(root: &TestRoot, as_uid: Option<u32>, tag: u32) {
    let (key, name) = key_and_name(tag);
    let call = |mode: &str| {
        let out = sandbox::run(
            root,
            false,
            as_uid,
            &["python3", "-c", IPC, &key, &name, mode],
        );
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        stdout(&out)
    };
    // Inside the call SysV objects can be made (the namespace is a working one);
    // a POSIX queue is not, whichever namespace: Landlock refuses the open in the
    // mqueue filesystem, which is outside every allowed path.
    assert_eq!(
        call("create").trim(),
        "create shm True msg True sem True mq False"
    );
    // …a second call does not see the first's…
    assert_eq!(
        call("probe").trim(),
        "probe shm False msg False sem False mq False"
    );
    // …and neither does the host.
    let host = Command::new("python3")
        .args(["-c", IPC, &key, &name, "probe"])
        .output()
        .unwrap();
    assert_eq!(
        stdout(&host).trim(),
        "probe shm False msg False sem False mq False",
        "{}",
        stderr(&host)
    );
    for table in ["shm", "msg", "sem"] {
        let text = std::fs::read_to_string(format!("/proc/sysvipc/{table}")).unwrap();
        let found = text
            .lines()
            .skip(1)
            .any(|l| l.split_whitespace().next() == Some(key.as_str()));
        assert!(
            !found,
            "a {table} object of the tool is on the host:\n{text}"
        );
    }
}

#[test]
fn ipc_objects_are_private_to_the_call_as_root() {
    let root = TestRoot::new("http://127.0.0.1:9");
    assert_private_to_each_call(&root, None, 1);
}

#[test]
fn ipc_objects_are_private_to_the_call_as_an_unprivileged_daemon() {
    let root = TestRoot::new("http://127.0.0.1:9");
    let uid = 61011;
    chown_tree(&root.dir, uid);
    assert_private_to_each_call(&root, Some(uid), 2);
}
