//! One request names one host. With two `Host` headers the daemon checked the
//! first while a proxy in front may route by the last; such a request is
//! malformed (RFC 9112 §3.2) and refused on both listeners.

use crate::common::TestRoot;
use crate::common::console::{To, listen_on_free_port, send};
use crate::common::daemon::Daemon;

#[test]
fn a_request_with_two_hosts_is_refused_on_both_listeners() {
    let root = TestRoot::new("http://127.0.0.1:9");
    let addr = listen_on_free_port(&root);
    let d = Daemon::start(&root);
    let tcp = To::Tcp(addr);
    let socket = To::Socket(&d);
    for to in [&tcp, &socket] {
        let a = send(
            to,
            "GET",
            "/healthz",
            "localhost",
            &["host: evil.example"],
            "",
        );
        assert_eq!(a.status, 403, "{}", a.body);
        assert!(a.body.contains("Host"), "{}", a.body);
        let a = send(to, "GET", "/healthz", "localhost", &["host: localhost"], "");
        assert_eq!(a.status, 403, "{}", a.body);
        assert_eq!(
            send(to, "GET", "/healthz", "localhost", &[], "").status,
            200
        );
    }
}
