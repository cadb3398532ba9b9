//! A server looked at from outside any task: started once to list its tools (no
//! pin written, nothing recorded), and the view `mcp list` prints. `mcp pin` uses
//! the same listing.

use super::McpError;
use super::client::{self, Handshake};
use super::hub::Hub;
use super::spec::Transport;
use crate::config::Loaded;
use crate::protocol::mcp::{Drift, ServerView, ToolDefinition, ToolView, model_name};

impl Hub {
    /// Starts server `name` of `loaded`'s settings (or reaches it, when remote),
    /// lists its tools and stops it.
    pub async fn list_now(
        &self,
        loaded: &Loaded,
        name: &str,
    ) -> Result<(Handshake, Vec<ToolDefinition>), McpError> {
        let (spec, _) = super::spec::server_spec(loaded, name).ok_or_else(|| {
            McpError::Start(name.to_string(), "no such server in mcp.servers".into())
        })?;
        let failed = |e| McpError::Client(name.to_string(), e);
        let (conn, keep) = match &spec.transport {
            Transport::Stdio(command) => {
                let launched = self
                    .launcher()
                    .launch(loaded, command)
                    .await
                    .map_err(|why| McpError::Start(name.to_string(), why))?;
                let (conn, _notes) = client::connect(launched.read, launched.write)
                    .await
                    .map_err(failed)?;
                (conn, Some(launched.keep))
            }
            Transport::Http(target) => {
                (super::http::connect(target).await.map_err(failed)?.0, None)
            }
        };
        let listed = conn.list_tools(spec.timeout).await;
        let handshake = conn.handshake.clone();
        conn.close().await;
        drop(keep);
        Ok((handshake, listed.map_err(failed)?))
    }

    /// The view of server `name`: its pins, and (when it can be reached) what it
    /// lists now.
    pub async fn view(&self, loaded: &Loaded, name: &str) -> Result<ServerView, McpError> {
        let server = loaded
            .policy
            .settings
            .mcp
            .servers
            .get(name)
            .ok_or_else(|| {
                McpError::Start(name.to_string(), "no such server in mcp.servers".into())
            })?;
        let pins = self.pins();
        let pinned = pins.servers.get(name);
        let remote = server.command.is_none();
        let (protocol, error, listed) = match self.list_now(loaded, name).await {
            Ok((h, listed)) => (Some(h.protocol), None, Some(listed)),
            Err(McpError::Log(e)) => return Err(McpError::Log(e)),
            Err(e) => (None, Some(e.to_string()), None),
        };
        let drift = listed
            .as_ref()
            .map(|l| Drift::between(pinned, l))
            .unwrap_or_default();
        let mut tools: Vec<ToolView> = Vec::new();
        let mut names: Vec<&str> = pinned
            .into_iter()
            .flat_map(|p| p.tools.keys().map(String::as_str))
            .collect();
        names.extend(listed.iter().flatten().map(|d| d.name.as_str()));
        names.sort_unstable();
        names.dedup();
        for tool in names {
            let pinned_sha256 = pinned
                .and_then(|p| p.tools.get(tool))
                .map(|p| p.sha256.clone());
            let live_sha256 = listed
                .as_ref()
                .and_then(|l| l.iter().find(|d| d.name == tool))
                .map(ToolDefinition::sha256);
            let state = match (&pinned_sha256, &live_sha256, listed.is_some()) {
                (Some(_), _, false) => "unchecked",
                (Some(p), Some(l), true) if p == l => "pinned",
                (Some(_), Some(_), true) => "changed",
                (Some(_), None, true) => "removed",
                (None, _, _) => "new",
            };
            tools.push(ToolView {
                name: tool.to_string(),
                model_name: model_name(name, tool),
                pinned_sha256,
                live_sha256,
                state: state.into(),
            });
        }
        Ok(ServerView {
            name: name.to_string(),
            kind: if remote { "remote" } else { "stdio" }.into(),
            running: self.running(name),
            protocol,
            error,
            tools,
            drift,
        })
    }
}
