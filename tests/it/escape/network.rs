//! The network with `sandbox.network = false`: TCP, UDP, raw, DNS, unix sockets.

use serde_json::Value;

use super::{Targets, bash, py};

/// The attacks of this family: (id, tool, input), each printing ESCAPED only if it worked.
pub(super) fn attacks(t: &Targets) -> Vec<(&'static str, &'static str, Value)> {
    let tcp = t.tcp.local_addr().unwrap().port();
    let tcp6 = t
        .tcp6
        .as_ref()
        .map_or(1, |l| l.local_addr().unwrap().port());
    let udp = t.udp.local_addr().unwrap().port();
    vec![
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
    ]
}
