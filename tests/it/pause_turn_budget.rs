//! A `pause_turn` answer, sent again at once, is still held to the task's budgets:
//! a model answering `pause_turn` over and over stops at `loop.usd_budget`.

use crate::common::{FakeApi, Reply, stderr};

/// A `pause_turn` answer is sent again at once, and that path skipped the limits
/// checked before calls run: a model (or a hostile API) answering `pause_turn`
/// over and over was asked again up to the turn limit however far past
/// `loop.usd_budget` the task's cost went. The budgets now stop it there too.
#[test]
fn pause_turn_does_not_run_past_the_usd_budget() {
    let paused = serde_json::json!([{"type": "server_tool_use", "id": "srv_1",
        "name": "web_search", "input": {"query": "q"}}]);
    let mut script: Vec<Reply> = (0..6)
        .map(|_| Reply::message(paused.clone(), "pause_turn"))
        .collect();
    script.push(Reply::text("done"));
    let api = FakeApi::start(script);
    let root = crate::cost::priced_root(&api);
    root.set_config("loop", "usd_budget", "0.02");
    let out = root.run(&["run", "go"]);
    // $0.015 a request: the second one reaches the budget, no third is sent.
    assert_eq!(api.requests().len(), 2, "{}", stderr(&out));
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let finished = &root.events_of("task_finished")[0];
    assert_eq!(finished["stop_reason"], "usd_budget", "{finished}");
}
