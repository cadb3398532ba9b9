//! Reads and writes outside the allowed paths: every read outside `allowed_paths.read`, every write, truncation, rename, delete or link outside `allowed_paths.write`.

use serde_json::{Value, json};

use super::{Targets, bash, py};

/// The attacks of this family: (id, tool, input), each printing ESCAPED only if it worked.
pub(super) fn attacks(_t: &Targets) -> Vec<(&'static str, &'static str, Value)> {
    let d = "D=$(cat daemon.pid); ";
    vec![
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
    ]
}
