//! Cost accounting: `usd` on every `model_response`, `task_finished` and the
//! transcript from the price table (built in, or `[pricing."<model>"]`); a
//! `loop.usd_budget` stop that answers the unexecuted calls like `token_budget`;
//! an unpriced model shown as cost unknown, and refused with a budget.

use serde_json::json;

use crate::common::{FakeApi, Reply, TestRoot, last_results, stderr};

fn close(a: &serde_json::Value, b: f64) -> bool {
    a.as_f64().is_some_and(|a| (a - b).abs() < 1e-9)
}

/// A model priced at $1000 per million tokens of every kind: the fake's 10 input
/// and 5 output tokens cost $0.015 a request.
pub(crate) fn priced_root(api: &FakeApi) -> TestRoot {
    let root = TestRoot::new(&api.url);
    root.set_config("api", "model", "\"fake-model\"");
    for key in ["input", "output", "cache_write", "cache_read"] {
        root.set_config("pricing.\"fake-model\"", key, "1000.0");
    }
    root
}

#[test]
fn usd_budget_stops_the_task_and_answers_its_calls() {
    let api = FakeApi::start(vec![
        Reply::tool("tu_1", "list_dir", json!({"path": "."})),
        Reply::tools(&[
            ("tu_2", "list_dir", json!({"path": "."})),
            ("tu_3", "get_time", json!({})),
        ]),
        Reply::text("never asked"),
        Reply::text("never asked"),
    ]);
    let root = priced_root(&api);
    root.set_config("loop", "usd_budget", "0.02");
    let out = root.run(&["run", "go"]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    // Two requests: $0.015 after the first (under), $0.030 after the second.
    let reqs = api.requests();
    assert_eq!(reqs.len(), 2);
    let responses = root.events_of("model_response");
    assert!(
        responses.iter().all(|r| close(&r["usd"], 0.015)),
        "{responses:?}"
    );
    let finished = &root.events_of("task_finished")[0];
    assert_eq!(finished["stop_reason"], "usd_budget");
    assert!(close(&finished["usd"], 0.03), "{finished}");
    let t = root.transcript();
    assert_eq!(t["stop_reason"], "usd_budget");
    assert!(close(&t["usd"], 0.03));
    assert!(close(&t["turns"][1]["usd"], 0.015));
    // The second turn's calls were not run, and each was answered.
    let last = t["messages"].as_array().unwrap().last().unwrap().clone();
    let answers = last_results(&json!({"messages": [last]}));
    let ids: Vec<_> = answers.iter().map(|a| a["tool_use_id"].clone()).collect();
    assert_eq!(ids, [json!("tu_2"), json!("tu_3")]);
    assert!(answers.iter().all(|a| {
        a["content"]
            .as_str()
            .unwrap()
            .starts_with("not executed: the task's USD budget")
    }));
    assert!(stderr(&out).contains("$0.0300"), "{}", stderr(&out));
}

#[test]
fn an_unpriced_model_with_a_usd_budget_is_a_config_error() {
    let api = FakeApi::start(vec![Reply::text("never asked")]);
    let root = TestRoot::new(&api.url);
    root.set_config("api", "model", "\"fake-model\"");
    root.set_config("loop", "usd_budget", "5.0");
    let out = root.run(&["run", "go"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("config/config.toml:"), "{err}");
    assert!(err.contains("loop.usd_budget"), "{err}");
    assert!(err.contains("\"fake-model\" has no price"), "{err}");
    assert!(api.requests().is_empty());
}

#[test]
fn an_unpriced_model_costs_unknown_and_a_built_in_one_is_priced() {
    let api = FakeApi::start(vec![Reply::text("hi")]);
    let root = TestRoot::new(&api.url);
    root.set_config("api", "model", "\"fake-model\"");
    let out = root.run(&["run", "go"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(root.events_of("model_response")[0]["usd"].is_null());
    assert!(root.events_of("task_finished")[0]["usd"].is_null());
    assert!(root.transcript()["usd"].is_null());
    assert!(stderr(&out).contains("cost unknown"), "{}", stderr(&out));

    // The default model is in the built-in table: 10 × $3 + 5 × $15 per million.
    let api = FakeApi::start(vec![Reply::text("hi")]);
    let root = TestRoot::new(&api.url);
    let out = root.run(&["run", "go"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let finished = &root.events_of("task_finished")[0];
    assert!(close(&finished["usd"], 0.000105), "{finished}");
}

/// A task submitted with `--model` naming a model without a price, under a USD
/// budget: its cost is unknown, so the budget cannot be kept and the task stops
/// at its first tool call instead of running unbounded.
#[test]
fn a_per_task_model_without_a_price_stops_under_a_usd_budget() {
    let api = FakeApi::start(vec![
        Reply::tool("tu_1", "get_time", json!({})),
        Reply::text("never asked"),
    ]);
    let root = priced_root(&api);
    root.set_config("loop", "usd_budget", "5.0");
    let daemon = crate::common::daemon::Daemon::start(&root);
    let out = root.run(&["submit", "--model", "unpriced-model", "go"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let id = crate::common::stdout(&out).trim().to_string();
    let task = daemon.wait_finished(&id);
    assert_eq!(task["stop_reason"], "usd_budget", "{task}");
    assert_eq!(api.requests().len(), 1);
    let finished = &root.events_of("task_finished")[0];
    assert!(
        finished.get("usd").is_none_or(|u| u.is_null()),
        "{finished}"
    );
    let result = &last_results(&root.transcript())[0];
    assert!(
        result["content"]
            .as_str()
            .unwrap()
            .contains("cost is unknown"),
        "{result}"
    );
}
