//! A console link followed from another site (a chat's approval message): the
//! browser's cross-site navigation carries no `SameSite=Strict` cookie, so the
//! daemon answers it with a page that loads the same address again from its own
//! origin — and with nothing else: no page content, no state change, and every
//! other cross-site request still refused.

use std::process::Command;

use crate::common::console::{browse, browser_python, console_url, listen_on_free_port, login};
use crate::common::daemon::Daemon;
use crate::common::{TestRoot, stderr, stdout};

const NAVIGATION: [&str; 3] = [
    "sec-fetch-site: cross-site",
    "sec-fetch-mode: navigate",
    "sec-fetch-dest: document",
];

#[test]
fn a_followed_link_gets_only_a_same_origin_reload_and_other_cross_site_requests_are_refused() {
    let root = TestRoot::new("http://127.0.0.1:9");
    let addr = listen_on_free_port(&root);
    let _d = Daemon::start(&root);
    let s = login(&root, addr, "alice");
    let target = "/console/approvals?x=%22%3E%3Cscript%3E#approval-ap-1";
    let a = browse(addr, "GET", target, &NAVIGATION, "");
    assert_eq!(a.status, 200, "{}", a.body);
    assert!(a.body.contains("http-equiv=\"refresh\""), "{}", a.body);
    assert!(!a.body.contains("<script"), "{}", a.body);
    assert!(
        !a.body.contains("Signed in"),
        "no console content: {}",
        a.body
    );
    // Not for the API, not with a cookie's help, not for anything but a page.
    let with_cookie: Vec<&str> = NAVIGATION
        .iter()
        .copied()
        .chain([s.cookie.as_str()])
        .collect();
    for (method, path, headers) in [
        ("GET", "/v1/tasks", NAVIGATION.to_vec()),
        ("POST", "/console/logout", with_cookie.clone()),
        (
            "GET",
            "/console/",
            vec!["sec-fetch-site: cross-site", "sec-fetch-mode: no-cors"],
        ),
        (
            "GET",
            "/console/",
            vec![
                "sec-fetch-site: cross-site",
                "sec-fetch-mode: navigate",
                "sec-fetch-dest: iframe",
            ],
        ),
        (
            "GET",
            "/console/",
            with_cookie
                .iter()
                .copied()
                .chain(["origin: http://evil.example"])
                .collect(),
        ),
    ] {
        let a = browse(addr, method, path, &headers, "");
        assert_eq!(a.status, 403, "{method} {path} {headers:?}: {}", a.body);
    }
    // A foreign Host is refused even as a navigation.
    let a = crate::common::console::send(
        &crate::common::console::To::Tcp(addr),
        "GET",
        "/console/",
        "evil.example",
        &NAVIGATION,
        "",
    );
    assert_eq!(a.status, 403, "{}", a.body);
}

#[test]
fn a_link_from_another_site_opens_the_console_page_logged_in_in_a_real_browser() {
    let root = TestRoot::new("http://127.0.0.1:9");
    let addr = listen_on_free_port(&root);
    let _d = Daemon::start(&root);
    let login_url = console_url(&root, "alice");
    let target = format!("http://{addr}/console/approvals");
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/browser/chat_link.py"
    );
    let out = Command::new(browser_python())
        .args([script, &login_url, &target])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}\n{}", stdout(&out), stderr(&out));
    let last = stdout(&out).lines().last().unwrap_or("").to_string();
    let seen: serde_json::Value = serde_json::from_str(&last).unwrap_or_default();
    assert_eq!(seen["url"], target.as_str(), "{last}");
    assert_eq!(seen["signed_in"], true, "{last}");
    assert_eq!(seen["dialogs"], 0, "{last}");
}
