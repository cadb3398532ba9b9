//! The console's pages as a plain HTTP client meets them (the browser test drives
//! the same pages in Chromium): every page served with the strict headers, a
//! call's kept output shown escaped and only for a call the task's transcript
//! names, the task list paged newest first, and a cancel from a page's form
//! attributed to the session's name.

use std::net::SocketAddr;

use serde_json::json;

use crate::common::console::{Session, browse, listen_on_free_port, login};
use crate::common::daemon::Daemon;
use crate::common::{FakeApi, Reply, TestRoot, wait_until};

/// What every console response must carry.
const HEADERS: &[(&str, &str)] = &[
    (
        "content-security-policy",
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
         connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    ),
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "same-origin"),
    ("cache-control", "no-store"),
];

fn get(addr: SocketAddr, s: &Session, path: &str) -> crate::common::console::Answer {
    browse(addr, "GET", path, &[&s.cookie], "")
}

#[test]
fn every_page_has_the_strict_headers_and_kept_output_is_shown_escaped() {
    // Output that would colour a terminal, reverse the text after it and open a
    // script element, printed by a real command.
    let command = r"printf '<script>alert(1)</script>\033[31m\342\200\256tail'";
    let api = FakeApi::start(vec![
        Reply::tool("tu_out", "run_bash", json!({"command": command})),
        Reply::text("printed"),
    ]);
    let root = TestRoot::new(&api.url);
    root.edit_settings(|s| {
        s["tools"]["allow"] = json!(["run_bash"]);
        s["tools"]["ask"] = json!(["write_file"]);
        // With a deny pattern on run_bash, a command it cannot see into is asked.
        s["tools"]["deny"] = json!([]);
    });
    let addr = listen_on_free_port(&root);
    let d = Daemon::start(&root);
    let id = d.submit("print it");
    d.wait_finished(&id);
    let s = login(&root, addr, "alice");
    let task = format!("/console/tasks/{id}");
    let output = format!("{task}/output?call=tu_out");
    for path in [
        "/console/",
        &task,
        &output,
        "/console/approvals",
        "/console/events?type=tool_finished",
        "/console/policy?tool=run_bash&input=ls",
        "/console/audit",
        "/console/static/console.css",
        "/console/static/console.js",
    ] {
        let a = get(addr, &s, path);
        assert_eq!(a.status, 200, "{path}: {}", a.body);
        for (name, value) in HEADERS {
            assert_eq!(a.header(name).as_deref(), Some(*value), "{path}: {name}");
        }
    }
    let page = get(addr, &s, &task).body;
    assert!(page.contains(&format!("href=\"{output}\"")), "{page}");
    let shown = get(addr, &s, &output).body;
    assert!(
        shown.contains("&lt;script&gt;alert(1)&lt;/script&gt;\\x1b[31m\\u202etail"),
        "{shown}"
    );
    assert!(!shown.contains('\x1b') && !shown.contains('\u{202e}') && !shown.contains("<script>a"));
    // Only a call of the task's own transcript, of a task the daemon knows.
    for path in [
        format!("{task}/output?call=nope"),
        format!("{task}/output?call=..%2F..%2Fevents.jsonl"),
        format!("{task}/output?call=..%2F{id}.json"),
        "/console/tasks/t-nope/output?call=tu_out".to_string(),
        "/console/tasks/..%2Fevents.jsonl/output?call=tu_out".to_string(),
        "/console/tasks/t-nope".to_string(),
    ] {
        let a = get(addr, &s, &path);
        assert_eq!(a.status, 404, "{path}: {}", a.body);
        assert!(!a.body.contains("\"seq\""), "{path}: {}", a.body);
    }
}

#[test]
fn the_tasks_page_is_paged_newest_first() {
    let api = FakeApi::start(Vec::new());
    let root = TestRoot::new(&api.url);
    let addr = listen_on_free_port(&root);
    let d = Daemon::start(&root);
    let ids: Vec<String> = (0..55)
        .map(|i| d.submit(&format!("task number {i}")))
        .collect();
    for id in &ids {
        d.wait_finished(id);
    }
    let s = login(&root, addr, "alice");
    let first = get(addr, &s, "/console/").body;
    assert_eq!(first.matches("class=\"task\"").count(), 50, "{first}");
    let at = |page: &str, id: &str| page.find(&format!("/console/tasks/{id}\"")).unwrap();
    assert!(at(&first, &ids[54]) < at(&first, &ids[5]), "newest first");
    assert!(!first.contains(&format!("/console/tasks/{}\"", ids[4])));
    let before = first
        .split("href=\"/console/?before=")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .expect("a link to older tasks");
    let older = get(addr, &s, &format!("/console/?before={before}")).body;
    assert_eq!(older.matches("class=\"task\"").count(), 5, "{older}");
    assert!(older.contains(&format!("/console/tasks/{}\"", ids[0])));
    assert!(
        !older.contains("/console/?before="),
        "the last page links no older one"
    );
}

#[test]
fn a_cancel_from_the_task_page_is_the_sessions() {
    let api = FakeApi::start(vec![Reply::tool(
        "w",
        "write_file",
        json!({"path": "asked.txt", "content": "x"}),
    )]);
    let root = TestRoot::new(&api.url);
    let addr = listen_on_free_port(&root);
    let d = Daemon::start(&root);
    let id = d.submit("write it");
    wait_until("the approval", || {
        d.request("GET", "/v1/approvals", None).1["approvals"]
            .as_array()
            .is_some_and(|a| !a.is_empty())
    });
    let s = login(&root, addr, "alice");
    let tasks = get(addr, &s, "/console/").body;
    assert!(tasks.contains("1 call is waiting for approval"), "{tasks}");
    let page = get(addr, &s, &format!("/console/tasks/{id}")).body;
    let action = format!("/console/tasks/{id}/cancel");
    assert!(page.contains(&format!("action=\"{action}\"")), "{page}");
    let a = browse(
        addr,
        "POST",
        &action,
        &[
            &s.cookie,
            "content-type: application/x-www-form-urlencoded",
            &format!("origin: http://{addr}"),
        ],
        &format!("csrf={}", s.csrf),
    );
    assert_eq!(a.status, 303, "{}", a.body);
    assert_eq!(
        a.header("location").as_deref(),
        Some(&*format!("/console/tasks/{id}"))
    );
    let t = d.wait_finished(&id);
    assert_eq!(t["stop_reason"], "cancelled");
    let cancelled = root.events_of("task_cancelled");
    assert_eq!(cancelled.len(), 1, "{cancelled:?}");
    assert_eq!(cancelled[0]["by"], "console:alice");
    let page = get(addr, &s, &format!("/console/tasks/{id}")).body;
    assert!(
        !page.contains(&format!("action=\"{action}\"")),
        "a finished task has no cancel button"
    );
}
