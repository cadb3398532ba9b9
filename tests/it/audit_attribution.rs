//! Attribution (docs/events.md): a submit, cancel, resume and approve made by a second
//! uid (a member of `daemon.operators_group`, over the real socket) record that
//! uid and its name in `by`.

use serde_json::{Value, json};

use crate::common::daemon::Daemon;
use crate::common::{FakeApi, Reply, TestRoot, wait_until};
use crate::workspace_race::{Operators, assert_root, request_as};

/// The pending approval of call `call`, if any.
fn pending(d: &Daemon, call: &str) -> Option<String> {
    let list = d.request("GET", "/v1/approvals", None).1;
    list["approvals"]
        .as_array()?
        .iter()
        .find(|a| a["tool_use_id"] == call)
        .and_then(|a| a["approval_id"].as_str())
        .map(str::to_string)
}

#[test]
fn submit_cancel_resume_and_approve_from_a_second_uid_record_it() {
    assert_root();
    let ops = match Operators::create_tagged("a") {
        Ok(ops) => ops,
        Err(why) => {
            println!("skipped: cannot create a throwaway group and users here: {why}");
            return;
        }
    };
    let write = |id: &str| Reply::tool(id, "write_file", json!({"path": "x.txt", "content": "x"}));
    let api = FakeApi::start(vec![write("w1"), write("w2"), Reply::text("done")]);
    let root = TestRoot::new(&api.url);
    root.set_config("daemon", "operators_group", &format!("{:?}", ops.group));
    let d = Daemon::start(&root);
    let (uid, gid) = ops.listed;
    let name = nix::unistd::User::from_uid(uid.into())
        .unwrap()
        .unwrap()
        .name;
    let by = format!("uid:{uid} ({name})");
    let call = |method: &str, path: &str, body: Option<&str>| {
        let (status, v) = request_as(uid, gid, true, &d.socket, method, path, body).unwrap();
        assert!(
            status == 200 || status == 202,
            "{method} {path}: {status} {v}"
        );
        v
    };
    let id = call("POST", "/v1/tasks", Some(r#"{"prompt":"write"}"#))["task_id"]
        .as_str()
        .unwrap()
        .to_string();
    wait_until("the first approval", || pending(&d, "w1").is_some());
    call("POST", &format!("/v1/tasks/{id}/cancel"), None);
    d.wait_finished(&id);
    call("POST", &format!("/v1/tasks/{id}/resume"), None);
    wait_until("the second approval", || pending(&d, "w2").is_some());
    let approval = pending(&d, "w2").unwrap();
    call(
        "POST",
        &format!("/v1/approvals/{approval}"),
        Some(r#"{"decision":"approve"}"#),
    );
    d.wait_finished(&id);
    let of = |kind: &str| -> Vec<Value> { root.events_of(kind) };
    assert_eq!(of("task_queued")[0]["by"], json!(by));
    assert_eq!(of("task_cancelled")[0]["by"], json!(by));
    assert_eq!(of("task_cancelled")[0]["task_id"], json!(id));
    assert_eq!(of("task_resumed")[0]["by"], json!(by));
    let resolved = of("approval_resolved");
    let approved: Vec<&Value> = resolved
        .iter()
        .filter(|e| e["decision"] == "approved")
        .collect();
    assert_eq!(approved.len(), 1, "{resolved:?}");
    assert_eq!(approved[0]["by"], json!(by));
    assert_eq!(approved[0]["approval_id"], json!(approval));
}
