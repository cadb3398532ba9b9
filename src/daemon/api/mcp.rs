//! `/v1/mcp/servers`: the configured MCP servers with their pins and drift, and
//! accepting a server's current definitions (`mcp pin`) — here, because the audit
//! log has one writer and the daemon is it.

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::{Extension, Json};
use serde::Serialize;

use super::{ApiError, AppState, Caller};
use crate::config::ConfigSource;
use crate::mcp::McpError;
use crate::protocol::mcp::{Drift, PinResponse, ServerView};

/// `GET /v1/mcp/servers`.
#[derive(Debug, Serialize)]
pub(super) struct ServerList {
    servers: Vec<ServerView>,
}

fn failed(e: McpError) -> ApiError {
    match e {
        McpError::Log(e) => ApiError::log_failing(e.to_string()),
        other => ApiError::new(StatusCode::BAD_GATEWAY, "mcp_server", other.to_string()),
    }
}

/// Every configured server, each started once to list what it serves now.
pub(super) async fn list_servers(State(s): State<AppState>) -> Result<Json<ServerList>, ApiError> {
    let loaded = s.config.current();
    let mut servers = Vec::new();
    for name in loaded.policy.settings.mcp.servers.keys() {
        servers.push(s.mcp.view(&loaded, name).await.map_err(failed)?);
    }
    Ok(Json(ServerList { servers }))
}

/// Pins what server `name` lists now.
pub(super) async fn pin_server(
    State(s): State<AppState>,
    Extension(caller): Extension<Caller>,
    name: Result<Path<String>, PathRejection>,
) -> Result<Json<PinResponse>, ApiError> {
    let Path(name) = name?;
    let loaded = s.config.current();
    if !loaded.policy.settings.mcp.servers.contains_key(&name) {
        return Err(ApiError::not_found("MCP server", &name));
    }
    let (_, listed) = s.mcp.list_now(&loaded, &name).await.map_err(failed)?;
    let drift = Drift::between(s.mcp.pins().servers.get(&name), &listed);
    let tools = s
        .mcp
        .pin(None, &name, &listed, &caller.by())
        .await
        .map_err(failed)?;
    Ok(Json(PinResponse {
        server: name,
        tools,
        drift,
    }))
}
