//! DNS rebinding through a forwarded socket: a page served from a name the
//! attacker controls (`harnessd` through a search domain, LLMNR or mDNS) rebinds
//! it to the loopback port an operator forwards with `ssh -L`. Its own scripts
//! then fetch same-origin: Chromium sends no `Origin` on a GET, no `Sec-Fetch-*`
//! to an http name that is not loopback, no `Referer` when the script asks for
//! none, and no cookie of the console's. The request must not pass as the
//! command-line client, which names the daemon `harnessd` and nothing more.

use crate::common::console::{To, send};
use crate::common::daemon::Daemon;
use crate::common::{TestRoot, stderr};

/// The headers headless Chromium 148 sent for `fetch(path, {referrerPolicy:
/// "no-referrer"})` from a page at `http://harnessd:<port>/` (recorded with an
/// echo server behind `--host-resolver-rules="MAP harnessd 127.0.0.1"`).
const CHROMIUM_SAME_ORIGIN_GET: &[&str] = &[
    "user-agent: Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) \
     HeadlessChrome/148.0.0.0 Safari/537.36",
    "accept: */*",
    "accept-encoding: gzip, deflate",
    "accept-language: en-US,en;q=0.9",
];

#[test]
fn a_page_on_a_name_rebound_to_a_forwarded_socket_is_not_the_cli() {
    let root = TestRoot::new("http://127.0.0.1:9");
    let d = Daemon::start(&root);
    let socket = To::Socket(&d);
    for host in ["harnessd:8080", "harnessd:80", "harnessd"] {
        for path in ["/v1/tasks", "/v1/approvals", "/v1/events"] {
            let a = send(&socket, "GET", path, host, CHROMIUM_SAME_ORIGIN_GET, "");
            assert_eq!(a.status, 403, "{host} {path}: {}", a.body);
        }
    }
    // Without the browser's own headers, a port still says it is not the client.
    let a = send(&socket, "GET", "/v1/tasks", "harnessd:8080", &[], "");
    assert_eq!(a.status, 403, "{}", a.body);
    // The command-line client keeps working, as does a script naming localhost.
    let out = root.run(&["tasks"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let cli = ["content-type: application/json"];
    assert_eq!(
        send(&socket, "GET", "/v1/tasks", "harnessd", &cli, "").status,
        200
    );
    assert_eq!(
        send(
            &socket,
            "GET",
            "/v1/tasks",
            "localhost",
            &["accept-encoding: gzip"],
            ""
        )
        .status,
        200
    );
}
