//! `harnessd mcp list` and `harnessd mcp pin SERVER`: through the daemon when it
//! runs (the audit log has one writer), else in-process, starting each server in
//! the sandbox only to list its tools.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use super::clients::{enc, print_json, socket_of};
use super::error::CliError;
use crate::cli::McpCommand;
use crate::config::Loaded;
use crate::control::{ClientError, client};
use crate::mcp::Hub;
use crate::protocol::mcp::{PinResponse, ServerView};
use crate::text::escape_line;

#[derive(serde::Deserialize, serde::Serialize)]
struct ServerList {
    servers: Vec<ServerView>,
}

/// Whether `err` means no daemon serves the socket (not a refusal).
fn no_daemon(err: &ClientError) -> bool {
    matches!(err, ClientError::Connect { .. })
}

/// Runs an `mcp` subcommand.
pub fn run(root: &Path, command: McpCommand, helper: &Path) -> Result<ExitCode, CliError> {
    match command {
        McpCommand::List { json } => list(root, json, helper),
        McpCommand::Pin { server, json } => pin(root, &server, json, helper),
    }
}

/// `mcp list`.
pub fn list(root: &Path, json_out: bool, helper: &Path) -> Result<ExitCode, CliError> {
    let runtime = super::runtime()?;
    let servers = runtime.block_on(async {
        if let Ok(socket) = socket_of(root) {
            match client::request_empty::<ServerList>(&socket, "GET", "/v1/mcp/servers").await {
                Ok(list) => return Ok(list.servers),
                Err(e) if no_daemon(&e) => {}
                Err(e) => return Err(CliError::from(e)),
            }
        }
        let (loaded, hub) = offline(root, helper, false)?;
        let mut servers = Vec::new();
        for name in loaded.policy.settings.mcp.servers.keys() {
            servers.push(
                hub.view(&loaded, name)
                    .await
                    .map_err(|e| CliError::Failed(e.to_string()))?,
            );
        }
        Ok(servers)
    })?;
    if json_out {
        print_json(&ServerList { servers })?;
    } else {
        print_servers(&servers)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `mcp pin SERVER`.
pub fn pin(root: &Path, server: &str, json_out: bool, helper: &Path) -> Result<ExitCode, CliError> {
    let runtime = super::runtime()?;
    let answer = runtime.block_on(async {
        if let Ok(socket) = socket_of(root) {
            let path = format!("/v1/mcp/servers/{}/pin", enc(server));
            match client::request_empty::<PinResponse>(&socket, "POST", &path).await {
                Ok(answer) => return Ok(answer),
                Err(e) if no_daemon(&e) => {}
                Err(e) => return Err(CliError::from(e)),
            }
        }
        pin_offline(root, server, helper).await
    })?;
    if json_out {
        print_json(&answer)?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut out = std::io::stdout().lock();
    let d = &answer.drift;
    writeln!(
        out,
        "pinned {} tool(s) of {} in policies/mcp.lock.json ({} new, {} changed, {} removed)",
        answer.tools.len(),
        escape_line(&answer.server),
        d.added.len(),
        d.changed.len(),
        d.removed.len()
    )?;
    Ok(ExitCode::SUCCESS)
}

async fn pin_offline(root: &Path, server: &str, helper: &Path) -> Result<PinResponse, CliError> {
    let (loaded, hub) = offline(root, helper, true)?;
    if !loaded.policy.settings.mcp.servers.contains_key(server) {
        return Err(CliError::Failed(format!(
            "no MCP server {server:?} in mcp.servers of policies/settings.json"
        )));
    }
    let failed = |e: crate::mcp::McpError| CliError::Failed(e.to_string());
    let (_, listed) = hub.list_now(&loaded, server).await.map_err(failed)?;
    let drift = crate::protocol::mcp::Drift::between(hub.pins().servers.get(server), &listed);
    let tools = hub
        .pin(None, server, &listed, "cli")
        .await
        .map_err(failed)?;
    Ok(PinResponse {
        server: server.to_string(),
        tools,
        drift,
    })
}

/// The root loaded and a hub starting servers in its sandbox, recording to the
/// root's audit log when `record` (listing alone records nothing).
fn offline(root: &Path, helper: &Path, record: bool) -> Result<(Arc<Loaded>, Hub), CliError> {
    let loaded = Arc::new(crate::config::load(root)?);
    let events = match record {
        true => Some(crate::events::EventLog::open(&loaded.paths.events, None)?.0),
        false => None,
    };
    crate::exec::prepare_workspace(&loaded.paths.workspace, &loaded.tool_user.user)?;
    let executor = crate::exec::Executor::new(helper.to_path_buf());
    let hub = Hub::new(
        Arc::new(crate::mcp::launch::Sandboxed { executor }),
        events,
        crate::config::lock_file(&loaded.paths.root),
    );
    Ok((loaded, hub))
}

fn print_servers(servers: &[ServerView]) -> Result<(), CliError> {
    let mut out = std::io::stdout().lock();
    if servers.is_empty() {
        writeln!(out, "no MCP servers in mcp.servers")?;
    }
    for s in servers {
        let drift = if s.tools.iter().all(|t| t.pinned_sha256.is_none()) {
            "not pinned yet (`harnessd mcp pin`, or its first use, pins it)"
        } else if s.drift.is_empty() {
            "no drift"
        } else {
            "DRIFT: review, then `harnessd mcp pin`"
        };
        writeln!(
            out,
            "{} ({}, {} running{}) {drift}",
            escape_line(&s.name),
            s.kind,
            s.running,
            s.protocol
                .as_deref()
                .map(|p| format!(", protocol {}", escape_line(p)))
                .unwrap_or_default()
        )?;
        if let Some(e) = &s.error {
            writeln!(out, "  not reached: {}", escape_line(e))?;
        }
        for t in &s.tools {
            let hash = t
                .pinned_sha256
                .as_deref()
                .or(t.live_sha256.as_deref())
                .unwrap_or("-");
            writeln!(
                out,
                "  {:<9} {} {}",
                t.state,
                escape_line(&t.model_name),
                &hash[..hash.len().min(16)]
            )?;
        }
    }
    Ok(())
}
