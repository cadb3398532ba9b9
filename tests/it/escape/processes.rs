//! Other processes and the terminal: signals and ptrace against the daemon, inherited descriptors and environment, terminal injection.

use serde_json::Value;

use super::{INHERITED, Targets, bash, py};

/// The attacks of this family: (id, tool, input), each printing ESCAPED only if it worked.
pub(super) fn attacks(_t: &Targets) -> Vec<(&'static str, &'static str, Value)> {
    let d = "D=$(cat daemon.pid); ";
    vec![
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
    ]
}
