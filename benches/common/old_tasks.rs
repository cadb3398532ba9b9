//! Finished tasks to put on disk, for the benches that measure a daemon holding
//! many (`daemon_start`, `console`).

use harnessd::agent::{Transcript, TurnRecord};
use harnessd::llm::{Block, Message, Role, Usage};
use harnessd::protocol::{StopReason, TaskStatus};
use serde_json::json;

/// A finished two-turn task (one `run_bash`, then the answer); the tool output's
/// length varies with `i` so that the files run from about 2.3 to 5 KB.
pub fn transcript(i: usize) -> Transcript {
    let day = 1 + (i / 1440) % 28;
    let (h, m) = ((i / 60) % 24, i % 60);
    let task_id = format!("t-202610{day:02}T{h:02}{m:02}00Z-{i:06x}");
    let prompt =
        format!("Task {i}: summarise scores.csv by team and write the totals to summary-{i}.md");
    let output: String = (0..(50 + i % 150))
        .map(|r| format!("team-{r},{},{}\n", r * 7 % 101, r * 13 % 97))
        .collect();
    let answer = format!(
        "Wrote summary-{i}.md: {} teams, the highest total is team-{} with {} points.",
        50 + i % 150,
        i % 20,
        100 + i % 900
    );
    let usage = |input, output| Usage {
        input_tokens: input,
        output_tokens: output,
        ..Usage::default()
    };
    let tool_use = json!({"type": "tool_use", "id": format!("toolu_{i:08x}"),
        "name": "run_bash", "input": {"command": "cat scores.csv"}});
    let messages = vec![
        Message::user(vec![Block::text(prompt)]),
        Message {
            role: Role::Assistant,
            content: vec![Block::text("I will read the file first."), Block(tool_use)],
        },
        Message::user(vec![Block::tool_result(
            &format!("toolu_{i:08x}"),
            &output,
            false,
        )]),
        Message {
            role: Role::Assistant,
            content: vec![Block::text(answer.clone())],
        },
    ];
    let turn = |turn, stop: &str, u, latency_ms| TurnRecord {
        turn,
        stop_reason: stop.into(),
        usage: u,
        usd: None,
        latency_ms,
    };
    Transcript {
        task_id,
        model: "claude-sonnet-4-5".into(),
        created: format!("2026-10-{day:02}T{h:02}:{m:02}:00Z"),
        status: TaskStatus::Finished,
        stop_reason: Some(StopReason::EndTurn),
        answer: Some(answer),
        error: None,
        usage: usage(1900, 240),
        usd: None,
        messages,
        turns: vec![
            turn(1, "tool_use", usage(800, 60), 900 + (i % 500) as u64),
            turn(2, "end_turn", usage(1100, 180), 1400 + (i % 700) as u64),
        ],
        max_turns: None,
        source: Some(harnessd::protocol::Source::Api),
        by: Some("uid:1000".into()),
        resume_queued: false,
        traceparent: None,
        parent_tool_use_id: None,
        tools: None,
        delegated: None,
    }
}
