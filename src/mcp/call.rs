//! One MCP call run for a task: the server found (and started at first use), the
//! call made, its answer turned into the `tool_result` (capped, kept whole as the
//! `.out` file, images kept beside it).

use std::path::{Path, PathBuf};

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::{McpError, TaskServers, content};
use crate::config::Loaded;
use crate::events::EventError;
use crate::exec::SpoolBudget;
use crate::tools::{ToolResult, out_file_name, render_text, safe_file_name, write_private};

/// What a call needs from its task.
pub struct CallContext<'a> {
    /// The task.
    pub task_id: &'a str,
    /// Config and policy in force for the call.
    pub loaded: &'a Loaded,
    /// `transcripts/<task_id>/`, where the full output goes.
    pub output_dir: Option<&'a Path>,
    /// The task's output budget.
    pub spool: &'a SpoolBudget,
    /// The task's cancellation.
    pub cancel: &'a CancellationToken,
}

/// Calls `server`'s `tool` with `input` (an object, already validated); the result
/// and the full-output file. Only a failure of the audit log is an `Err`: every
/// other failure is the call's (error) result.
pub async fn run(
    servers: &TaskServers,
    cx: &CallContext<'_>,
    server: &str,
    tool: &str,
    input: &Value,
    tool_use_id: &str,
) -> Result<(ToolResult, Option<PathBuf>), EventError> {
    let Some(s) = servers.server(cx.loaded, server, cx.task_id) else {
        let why = format!("MCP server {server} is no longer configured; its tools are gone");
        return Ok((ToolResult::error(why), None));
    };
    let arguments = input.as_object().cloned().unwrap_or_default();
    let answer = match s.call(cx.loaded, tool, arguments, cx.cancel).await {
        Ok(answer) => answer,
        Err(McpError::Log(e)) => return Err(e),
        Err(e) => return Ok((ToolResult::error(advice(&e)), None)),
    };
    Ok(rendered(cx, &answer, tool_use_id))
}

/// What the model is told about a failure, and what it can do.
fn advice(e: &McpError) -> String {
    match e {
        McpError::Client(_, super::client::ClientError::Cancelled) => {
            format!("{e}; the call did not finish")
        }
        McpError::Client(_, super::client::ClientError::Timeout(_)) => {
            format!("{e}. Ask for less at a time, or continue without this call.")
        }
        _ => format!("{e}. Continue without this tool, or tell the user what you need."),
    }
}

fn rendered(
    cx: &CallContext<'_>,
    answer: &Value,
    tool_use_id: &str,
) -> (ToolResult, Option<PathBuf>) {
    let dir = cx.output_dir.and_then(|dir| {
        std::fs::create_dir_all(dir)
            .map_err(|e| tracing::warn!("cannot create {}: {e}", dir.display()))
            .ok()
            .map(|()| dir)
    });
    let shown = |name: &str| match dir {
        Some(d) => cx.loaded.paths.display(&d.join(name)),
        None => name.to_string(),
    };
    let mut r = content::render(answer, &safe_file_name(tool_use_id), &shown);
    for a in &r.attachments {
        let Some(dir) = dir else { break };
        let (granted, reason) = cx.spool.grant(a.bytes.len() as u64);
        let kept = reason.is_none() && write_private(&dir.join(&a.file_name), &a.bytes).is_ok();
        if !kept {
            cx.spool.give_back(granted);
            r.text
                .push_str(&format!("\n[note: {} was not kept]", a.file_name));
        }
    }
    let max_chars = cx.loaded.policy.settings.output.max_chars;
    let out = dir.map(|d| d.join(out_file_name(tool_use_id)));
    let result = render_text(
        &r.text,
        r.is_error,
        max_chars,
        out.as_deref().map(|p| (p, cx.spool)),
    );
    (result, out)
}
