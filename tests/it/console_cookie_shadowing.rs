//! Cookies are not kept apart by port: a page on another port of the same host
//! (`http://localhost:3000`) can set `harnessd_session=anything; Path=/v1`, and a
//! browser sends the longer path first. Such a cookie must not shadow the
//! operator's real one (locking the console out), nor be taken for a session.

use crate::common::TestRoot;
use crate::common::console::{browse, listen_on_free_port, login};
use crate::common::daemon::Daemon;

#[test]
fn a_cookie_planted_by_another_port_does_not_shadow_the_session() {
    let root = TestRoot::new("http://127.0.0.1:9");
    let addr = listen_on_free_port(&root);
    let _d = Daemon::start(&root);
    let s = login(&root, addr, "alice");
    let real = s.cookie.trim_start_matches("cookie: ");
    let planted = format!("cookie: harnessd_session=planted; {real}");
    let a = browse(addr, "GET", "/v1/tasks", &[&planted], "");
    assert_eq!(a.status, 200, "{}", a.body);
    // As two headers too (HTTP/2 proxies split them).
    let a = browse(
        addr,
        "GET",
        "/v1/tasks",
        &["cookie: harnessd_session=planted", &s.cookie],
        "",
    );
    assert_eq!(a.status, 200, "{}", a.body);
    // Planted cookies alone are no session.
    let a = browse(
        addr,
        "GET",
        "/v1/tasks",
        &["cookie: harnessd_session=planted; harnessd_session=other"],
        "",
    );
    assert_eq!(a.status, 401, "{}", a.body);
    // Logging out with a planted cookie ahead ends the real session.
    let csrf = format!("x-csrf-token: {}", s.csrf);
    let a = browse(addr, "POST", "/console/logout", &[&planted, &csrf], "");
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(
        browse(addr, "GET", "/v1/tasks", &[&s.cookie], "").status,
        401
    );
    assert_eq!(root.events_of("console_logout").len(), 1);
}
