//! The MCP side of a turn: which server tools the model is offered (the pinned
//! definitions, minus what policy denies outright and what a running server no
//! longer lists the same), a call admitted (input checked against the pinned
//! schema, decided by policy with the live definition in view, asked when it must
//! be) and run through the task's servers.

use std::sync::Arc;

use serde_json::{Value, json};

use super::TaskEnv;
use super::calls::NotRun;
use crate::config::Loaded;
use crate::events::{Event, EventError};
use crate::llm::ToolUse;
use crate::mcp::session::is_current;
use crate::mcp::{McpError, call::CallContext};
use crate::policy::{self, McpSubject};
use crate::protocol::mcp::{McpToolName, ToolDefinition, model_name, model_name_accepted};
use crate::protocol::{Profile, Tier};
use crate::tools::ToolResult;

/// Whether `tools.enabled` (when set) names the tool or its server.
fn enabled(loaded: &Loaded, server: &str, tool: &str) -> bool {
    let name = model_name(server, tool);
    let whole = format!("{}{server}", crate::protocol::mcp::PREFIX);
    loaded
        .config
        .tools
        .enabled
        .as_ref()
        .is_none_or(|list| list.iter().any(|n| *n == name || *n == whole))
}

/// The MCP tools offered this turn, as Messages API tool definitions.
pub(super) fn offered(env: &TaskEnv, loaded: &Loaded) -> Vec<Value> {
    let pins = env.services.mcp.pins();
    let mut tools = Vec::new();
    for server in loaded.policy.settings.mcp.servers.keys() {
        let Some(pinned) = pins.servers.get(server) else {
            continue;
        };
        let listed = env.mcp.last_listed(server);
        for (name, pin) in &pinned.tools {
            let drifted = listed
                .as_ref()
                .is_some_and(|l| !is_current(l, Some(&pin.definition)));
            if drifted
                || !model_name_accepted(server, name)
                || !object_schema(&pin.definition.input_schema)
                || !enabled(loaded, server, name)
                || policy::mcp_denied_outright(&loaded.policy, server, name)
            {
                continue;
            }
            tools.push(definition(server, &pin.definition));
        }
    }
    tools
}

/// Whether the Messages API takes `schema` as a tool's input schema: an object
/// schema (`type` absent, which [`definition`] fills in, or `"object"`). Any other
/// would fail every request of the task, so the tool is withheld.
fn object_schema(schema: &Value) -> bool {
    schema
        .as_object()
        .is_some_and(|o| o.get("type").is_none_or(|t| t == "object"))
}

/// A pinned definition as the model reads it: the server named in the description.
fn definition(server: &str, def: &ToolDefinition) -> Value {
    let mut schema = def.input_schema.clone();
    if let Some(obj) = schema.as_object_mut() {
        obj.entry("type").or_insert_with(|| json!("object"));
    }
    let description = match &def.description {
        Some(d) => format!("(MCP server {server}) {d}"),
        None => format!("(MCP server {server})"),
    };
    json!({
        "name": model_name(server, &def.name),
        "description": description,
        "input_schema": schema,
    })
}

/// Starts, once, each configured server that was never pinned, so its tools are
/// listed and pinned (`first_use`) and offered from this turn on. A server that
/// cannot start is logged; its tools stay unoffered.
pub(super) async fn pin_new(
    env: &TaskEnv,
    task_id: &str,
    loaded: &Loaded,
) -> Result<(), EventError> {
    let pins = env.services.mcp.pins();
    for name in loaded.policy.settings.mcp.servers.keys() {
        // Once per task: a server that failed to start is not tried every turn.
        if pins.servers.contains_key(name) || env.mcp.has(name) {
            continue;
        }
        let Some(s) = env.mcp.server(loaded, name, task_id) else {
            continue;
        };
        match s.listed(loaded, &env.cancel).await {
            Ok(_) => {}
            Err(McpError::Log(e)) => return Err(e),
            Err(e) => tracing::warn!("{e}; its tools are not offered"),
        }
    }
    Ok(())
}

/// A validated MCP call that may run.
#[derive(Debug, Clone)]
pub(super) struct McpRunnable {
    /// The server.
    pub server: String,
    /// The tool's own name.
    pub tool: String,
}

/// Loads no document: a server's schema is checked with what it holds alone (the
/// standard metaschemas are built into boon).
struct NoLoader;

impl boon::UrlLoader for NoLoader {
    fn load(&self, url: &str) -> Result<Value, Box<dyn std::error::Error>> {
        Err(format!("{url} is not loaded: an input schema may refer only to itself").into())
    }
}

/// Checks `input` against the pinned input schema.
fn check_input(input: &Value, pinned: Option<&ToolDefinition>) -> Result<(), String> {
    if !input.is_object() {
        return Err("the input must be a JSON object".into());
    }
    let Some(def) = pinned else {
        return Ok(());
    };
    let mut schemas = boon::Schemas::new();
    let mut compiler = boon::Compiler::new();
    // A `$ref` the schema does not hold itself is never fetched: boon's default
    // loader opens `file:` URLs, and the daemon's files are not the server's to read.
    compiler.use_loader(Box::new(NoLoader));
    let url = "urn:harnessd:mcp-input";
    compiler
        .add_resource(url, def.input_schema.clone())
        .map_err(|e| format!("the server's input schema is unusable: {e}"))?;
    let index = compiler
        .compile(url, &mut schemas)
        .map_err(|e| format!("the server's input schema is unusable: {e}"))?;
    schemas.validate(input, index).map_err(|e| format!("{e:#}"))
}

/// Validates, decides and (for `ask`) approves an MCP call. Servers start here, at
/// the first call that policy does not deny outright: the decision sees whether the
/// server still lists the tool as pinned.
pub(super) async fn admit(
    env: &TaskEnv,
    task_id: &str,
    loaded: &Arc<Loaded>,
    call: &ToolUse,
    name: McpToolName<'_>,
) -> Result<McpRunnable, NotRun> {
    let (server, tool) = (name.server, name.tool);
    if !loaded.policy.settings.mcp.servers.contains_key(server) || !enabled(loaded, server, tool) {
        return Err(NotRun::Refused(ToolResult::error(format!(
            "unknown tool {:?}: no MCP server {server} is configured",
            call.name
        ))));
    }
    let pins = env.services.mcp.pins();
    let pinned = pins.tool(server, tool).map(|p| &p.definition);
    if let Err(why) = check_input(&call.input, pinned) {
        return Err(NotRun::Refused(ToolResult::error(format!(
            "invalid input for {}: {why}. Call it again with input matching its schema.",
            call.name
        ))));
    }
    let subject = |current| McpSubject {
        server,
        tool,
        input: &call.input,
        pinned,
        current,
    };
    let mut decision = policy::decide_mcp(&loaded.policy, subject(true));
    let mut start_error = None;
    if decision.tier != Tier::Deny
        && let Some(s) = env.mcp.server(loaded, server, task_id)
    {
        match s.listed(loaded, &env.cancel).await {
            Ok(listed) => {
                decision = policy::decide_mcp(&loaded.policy, subject(is_current(&listed, pinned)));
            }
            Err(McpError::Log(e)) => return Err(NotRun::Log(e)),
            Err(e) => start_error = Some(e.to_string()),
        }
    }
    let hook_refusal = match start_error {
        None => super::hooks::pre_tool(env, task_id, loaded, call, &mut decision).await?,
        Some(_) => None,
    };
    record_decision(env, task_id, call, &decision).await?;
    if let Some(e) = start_error {
        return Err(NotRun::Refused(ToolResult::error(format!(
            "{e}. Continue without this tool, or tell the user what you need."
        ))));
    }
    let runnable = McpRunnable {
        server: server.to_string(),
        tool: tool.to_string(),
    };
    match decision.tier {
        Tier::Allow => Ok(runnable),
        Tier::Deny => Err(NotRun::Refused(ToolResult::error(
            hook_refusal.unwrap_or_else(|| denied(&decision)),
        ))),
        Tier::Ask => {
            super::calls::ask(env, task_id, call, decision.rule_label()).await?;
            Ok(runnable)
        }
    }
}

fn denied(decision: &policy::Decision) -> String {
    let rule = decision.rule_label();
    match rule.as_str() {
        "mcp:unpinned" | "mcp:drifted" => format!(
            "denied: this tool's definition is not the one an operator accepted (`{rule}`); \
             it stays denied until an operator runs `harnessd mcp pin`. Do not retry it; \
             continue without it or tell the user."
        ),
        _ => format!(
            "denied by policy (rule `{rule}`): this call will not run. Do not retry it; use \
             another approach within the policy, or tell the user what you need."
        ),
    }
}

async fn record_decision(
    env: &TaskEnv,
    task_id: &str,
    call: &ToolUse,
    decision: &policy::Decision,
) -> Result<(), EventError> {
    env.services
        .events
        .record(
            Some(task_id),
            Event::PolicyDecision {
                tool_use_id: call.id.clone(),
                tool: call.name.clone(),
                tier: decision.tier,
                rule: decision.rule_label(),
                subject: None,
                commands: None,
                provable: None,
                not_provable: None,
                profile: Profile::Write,
                programs: Vec::new(),
                raised: decision.raised.clone(),
            },
        )
        .await
        .map(|_| ())
}

/// Runs an admitted call.
pub(super) async fn run(
    env: &TaskEnv,
    task_id: &str,
    loaded: &Loaded,
    r: &McpRunnable,
    call: &ToolUse,
    spool: &crate::exec::SpoolBudget,
) -> Result<(ToolResult, Option<std::path::PathBuf>), EventError> {
    let dir = loaded.paths.transcripts.join(task_id);
    let cx = CallContext {
        task_id,
        loaded,
        output_dir: Some(&dir),
        spool,
        cancel: &env.cancel,
    };
    crate::mcp::call::run(&env.mcp, &cx, &r.server, &r.tool, &call.input, &call.id).await
}
