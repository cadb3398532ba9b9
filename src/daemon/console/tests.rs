//! The pages' pieces rendered alone: hostile text comes out as escaped, visible
//! text (never markup, never a raw control character), every form carries the
//! CSRF token, and ids put in links cannot leave their place in the URL.

use serde_json::json;

use super::Viewer;
use crate::control::task_view::Call;
use crate::protocol::{Approval, ApprovalRequest, Task};

const HOSTILE: &str =
    "<script>alert(1)</script>\"><img src=x onerror=alert(1)>\x1b[31m\u{202e}x\n\u{200b}";

fn viewer() -> Viewer {
    Viewer {
        name: "<b>eve</b>".into(),
        csrf: "t0k\"en".into(),
    }
}

/// Panics unless `html` shows `HOSTILE` only as inert escaped text.
fn assert_inert(html: &str) {
    for markup in ["<script>alert", "<img", "onerror=alert(1)>"] {
        assert!(!html.contains(markup), "{markup} in {html}");
    }
    for raw in ['\x1b', '\u{202e}', '\u{200b}'] {
        assert!(!html.contains(raw), "raw {raw:?} in {html}");
    }
    assert!(
        html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
        "{html}"
    );
    assert!(
        html.contains("\\x1b[31m") && html.contains("\\u202e"),
        "{html}"
    );
}

fn task(id: &str, parent: Option<&str>, prompt: &str) -> Task {
    serde_json::from_value(json!({
        "task_id": id,
        "status": "running",
        "stop_reason": null,
        "usage": {},
        "prompt": prompt,
        "created": "2026-12-02T00:00:00.000Z",
        "updated": "2026-12-02T00:00:00.000Z",
        "parent_task_id": parent,
    }))
    .unwrap()
}

#[test]
fn a_listing_nests_children_and_escapes_prompts() {
    let tasks = vec![
        task("t-1.0123456789", Some("t-1"), "child"),
        task("t-2", None, HOSTILE),
        task("t-1", None, "parent"),
    ];
    let html = super::tasks::list(&tasks).into_string();
    assert_inert(&html);
    let parent = html.find("/console/tasks/t-1\"").unwrap();
    let nested = html.find("class=\"tasks children\"").unwrap();
    let child = html.find("/console/tasks/t-1.0123456789").unwrap();
    assert!(parent < nested && nested < child, "{html}");
}

#[test]
fn an_approval_shows_its_whole_input_and_forms_carry_the_token() {
    let long = "y".repeat(10_000);
    let a = Approval {
        request: ApprovalRequest {
            approval_id: "ap-1".into(),
            task_id: "t-1".into(),
            parent_task_id: None,
            tool_use_id: "tu/../x".into(),
            tool: "write_file".into(),
            input: json!({"path": "a.txt", "content": format!("{HOSTILE}{long}")}),
            rule: "write_file".into(),
        },
        requested_at: "2026-12-02T00:00:00.000Z".into(),
    };
    let html = super::approvals::approval(&viewer(), &a).into_string();
    assert_inert(&html);
    // Every character, wrapped but not cut.
    let ys: usize = html.matches('y').count();
    assert!(ys >= 10_000, "{ys}");
    assert_eq!(
        html.matches("name=\"csrf\" value=\"t0k&quot;en\"").count(),
        2,
        "{html}"
    );
    assert!(html.contains("action=\"/console/approvals/ap-1\""));
    assert!(html.contains("name=\"reason\"") && html.contains("name=\"remember\""));
}

#[test]
fn a_call_links_its_output_by_query_and_shows_its_record() {
    let rec = Call {
        tier: Some("ask".into()),
        rule: Some(HOSTILE.into()),
        profile: Some("write".into()),
        approval: Some("approved".into()),
        approved_by: Some("console:alice".into()),
        exit_code: Some(json!(0)),
        output_file: Some("x.out".into()),
        ..Call::default()
    };
    let input = json!({"command": HOSTILE});
    let html =
        super::task::call("t-1", "../../x?y#z", "run_bash", &input, Some(&rec)).into_string();
    assert_inert(&html);
    assert!(
        html.contains("href=\"/console/tasks/t-1/output?call=..%2F..%2Fx%3Fy%23z\""),
        "{html}"
    );
    assert!(html.contains("console:alice") && html.contains("write"));
}

#[test]
fn model_text_and_unknown_blocks_are_escaped() {
    let calls = std::collections::HashMap::new();
    for b in [
        json!({"type": "text", "text": HOSTILE}),
        json!({"type": HOSTILE, "x": HOSTILE}),
        json!({"type": "tool_result", "tool_use_id": HOSTILE, "content": [{"type": "text", "text": HOSTILE}]}),
    ] {
        let html = super::task::block("t-1", &b, &calls).into_string();
        assert!(
            !html.contains("<script>alert") && !html.contains("<img"),
            "{html}"
        );
        assert!(
            !html.contains('\x1b') && !html.contains('\u{202e}'),
            "{html}"
        );
    }
}

#[test]
fn a_page_has_no_inline_script_or_style_and_carries_the_token() {
    let html = super::layout::page(&viewer(), super::layout::Nav::Tasks, "T", maud::html! {}).0;
    assert!(
        html.contains("<meta name=\"csrf-token\" content=\"t0k&quot;en\">"),
        "{html}"
    );
    assert!(html.contains("<script src=\"/console/static/console.js\" defer></script>"));
    assert_eq!(html.matches("<script").count(), 1, "{html}");
    assert!(
        !html.contains("<style") && !html.contains(" style=") && !html.contains(" on"),
        "{html}"
    );
    assert!(html.contains("&lt;b&gt;eve&lt;/b&gt;"));
    assert!(html.contains("class=\"skip\" href=\"#main\""));
}

#[test]
fn the_script_never_writes_html_from_text() {
    let js = include_str!("static/console.js");
    for sink in [
        "innerHTML",
        "outerHTML",
        "insertAdjacentHTML",
        "document.write",
        "eval(",
        "new Function",
    ] {
        assert!(!js.contains(sink), "console.js uses {sink}");
    }
}
