//! Requests the control API's extractors reject (a repeated query parameter, an id
//! that is not UTF-8) are answered as every other error is: JSON
//! `{error: {type, message}}` with a 400.

use crate::common::TestRoot;
use crate::common::daemon::Daemon;

/// A query string or path the extractors reject (a repeated parameter, an id
/// that is not UTF-8) is answered like every other error (docs/api.md): JSON
/// `{error: {type, message}}` with a 400, not axum's plain-text rejection.
#[test]
fn rejected_query_strings_and_paths_are_json_errors() {
    let root = TestRoot::new("http://127.0.0.1:9");
    let d = Daemon::start(&root);
    for (method, path) in [
        ("GET", "/v1/tasks?status=queued&status=running"),
        ("GET", "/v1/tasks?limit=1&limit=2"),
        ("GET", "/v1/events?task=a&task=b"),
        ("GET", "/v1/tasks/%ff"),
        ("POST", "/v1/tasks/%ff/cancel"),
        ("POST", "/v1/tasks/%ff/resume"),
    ] {
        let (status, text) = d.request_text(method, path);
        let v: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
        assert_eq!(status, 400, "{method} {path}: {text}");
        assert_eq!(
            v["error"]["type"], "invalid_request",
            "{method} {path}: {text}"
        );
    }
}
