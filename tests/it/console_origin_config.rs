//! `daemon.console_origin` is compared with what browsers send: an `Origin` (and a
//! proxy's `Host`) never carries the scheme's default port, so an origin written
//! with one, or with a port that is no port, would refuse every request of the
//! console it names. Such an origin is a config error, said at `check`.

use crate::common::{TestRoot, stderr, stdout};

#[test]
fn an_origin_that_browsers_never_send_is_a_config_error() {
    let root = TestRoot::new("http://127.0.0.1:9");
    root.set_config("daemon", "listen", "\"127.0.0.1:18080\"");
    for bad in [
        "https://hd.example.com:443",
        "http://hd.example.com:80",
        "https://hd.example.com:",
        "https://hd.example.com:99999",
        "https://hd.example.com:1:2",
        "https://:8443",
        "https://[::1",
    ] {
        root.set_config("daemon", "console_origin", &format!("\"{bad}\""));
        let out = root.run(&["check"]);
        let all = stderr(&out) + &stdout(&out);
        assert_eq!(out.status.code(), Some(2), "{bad}: {all}");
        assert!(all.contains("daemon.console_origin"), "{bad}: {all}");
    }
    for good in [
        "https://hd.example.com",
        "https://hd.example.com:8443",
        "http://[::1]:8080",
    ] {
        root.set_config("daemon", "console_origin", &format!("\"{good}\""));
        let out = root.run(&["check"]);
        let all = stderr(&out) + &stdout(&out);
        assert!(!all.contains("daemon.console_origin"), "{good}: {all}");
    }
}
