//! One MCP connection over a byte stream pair, through the official SDK (`rmcp`):
//! the handshake, the tool list (uncached, every page), a call with its timeout and
//! cancellation. What the server asks of the client — sampling, roots, elicitation,
//! anything else — is refused and reported, never answered.

// The sampling and roots types are deprecated in the SDK (the revision of 2026-07-28
// moves them); refusing them still needs their names.
#![allow(deprecated)]

use std::time::Duration;

use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CancelledNotificationParam, ClientCapabilities,
    ClientConfig, ClientRequest, CreateMessageRequestParams, CreateMessageResult, CustomRequest,
    CustomResult, ElicitRequestParams, ElicitResult, ErrorCode, Implementation, ListRootsResult,
    ListToolsRequest, PaginatedRequestParams, ProtocolVersion, ServerResult,
};
use rmcp::service::{
    ClientLifecycleMode, ClientServiceExt, NotificationContext, PeerRequestOptions, RequestContext,
    RoleClient, RunningService, ServiceError,
};
use rmcp::{ClientHandler, ErrorData};
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::protocol::mcp::{ToolAnnotations, ToolDefinition};

/// Something a server did that the session records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Note {
    /// It sent a request the client refuses (`sampling/createMessage`, `roots/list`,
    /// `elicitation/create`, or any other method).
    Refused(String),
    /// It said its tool list changed.
    ToolsChanged,
}

/// The client side of a connection: refuses every server request, reports it.
struct Harness {
    notes: mpsc::Sender<Note>,
    /// Requests refused so far on this connection.
    refused: std::sync::atomic::AtomicUsize,
}

/// Refused requests of one connection that are recorded: a server may send
/// requests without end, and each would be a line of the audit log. Past this
/// they are still refused, and one warning says the rest go unrecorded.
pub const MAX_RECORDED_REFUSALS: usize = 64;

impl Harness {
    fn refuse(&self, method: &str) -> ErrorData {
        let n = self
            .refused
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if n < MAX_RECORDED_REFUSALS {
            let _ = self.notes.try_send(Note::Refused(method.to_string()));
        } else if n == MAX_RECORDED_REFUSALS {
            tracing::warn!(
                target: "mcp",
                "an MCP server sent more than {MAX_RECORDED_REFUSALS} requests the client \
                 refuses; the rest are refused without a record"
            );
        }
        ErrorData::new(
            ErrorCode::METHOD_NOT_FOUND,
            format!("harnessd does not serve {method} to MCP servers"),
            None,
        )
    }
}

impl ClientHandler for Harness {
    fn get_info(&self) -> ClientConfig {
        // No capability at all: no roots, sampling or elicitation to offer.
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("harnessd", env!("CARGO_PKG_VERSION")),
        )
        .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
    }

    async fn create_message(
        &self,
        _params: CreateMessageRequestParams,
        _cx: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        Err(self.refuse("sampling/createMessage"))
    }

    async fn list_roots(
        &self,
        _cx: RequestContext<RoleClient>,
    ) -> Result<ListRootsResult, ErrorData> {
        Err(self.refuse("roots/list"))
    }

    async fn create_elicitation(
        &self,
        _params: ElicitRequestParams,
        _cx: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        Err(self.refuse("elicitation/create"))
    }

    async fn on_custom_request(
        &self,
        request: CustomRequest,
        _cx: RequestContext<RoleClient>,
    ) -> Result<CustomResult, ErrorData> {
        Err(self.refuse(&request.method))
    }

    async fn on_tool_list_changed(&self, _cx: NotificationContext<RoleClient>) {
        // A full channel already holds a change to act on, or refusals ahead of it;
        // room is kept for one change beyond every recorded refusal.
        let _ = self.notes.try_send(Note::ToolsChanged);
    }
}

/// Why a connection or a call failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The handshake failed.
    #[error("the MCP handshake failed: {0}")]
    Handshake(String),
    /// The server answered with a protocol revision this client does not know.
    #[error("the server answered with protocol revision {0}, which harnessd does not speak")]
    UnknownRevision(String),
    /// The connection closed (the server exited or closed its stdout).
    #[error("the server closed the connection")]
    Closed,
    /// The call passed its timeout (the server was sent `notifications/cancelled`).
    #[error("no answer within {0} s (the request was cancelled at the server)")]
    Timeout(u64),
    /// The task was cancelled during the call (the server was sent `notifications/cancelled`).
    #[error("the task was cancelled during the call")]
    Cancelled,
    /// The server answered with a JSON-RPC error.
    #[error("the server answered with an error: {0}")]
    Server(String),
    /// Anything else the SDK reported.
    #[error("{0}")]
    Other(String),
}

impl From<ServiceError> for ClientError {
    fn from(e: ServiceError) -> ClientError {
        match e {
            ServiceError::TransportClosed | ServiceError::TransportSend(_) => ClientError::Closed,
            ServiceError::Timeout { timeout } => ClientError::Timeout(timeout.as_secs()),
            ServiceError::Cancelled { .. } => ClientError::Cancelled,
            ServiceError::McpError(e) => {
                ClientError::Server(format!("{} ({})", e.message, e.code.0))
            }
            other => ClientError::Other(other.to_string()),
        }
    }
}

/// What the handshake established.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handshake {
    /// The protocol revision in use (`2025-11-25`, `2026-07-28`, …).
    pub protocol: String,
    /// The server's own name and version, as it reports them (unverified).
    pub server_info: String,
}

/// A live connection to one server.
pub struct Connection {
    service: RunningService<RoleClient, Harness>,
    /// What the handshake established.
    pub handshake: Handshake,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("handshake", &self.handshake)
            .finish_non_exhaustive()
    }
}

/// Longest line a stdio server may send: a longer one is dropped by the SDK (and
/// the call it answered times out) rather than buffered without bound.
pub const MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

/// How long the handshake may take: a server that never answers is given up.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);

/// Connects over a stdio pair (see [`connect_transport`]).
pub async fn connect<R, W>(
    read: R,
    write: W,
) -> Result<(Connection, mpsc::Receiver<Note>), ClientError>
where
    R: tokio::io::AsyncRead + Send + Unpin + 'static,
    W: tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    let transport = rmcp::transport::async_rw::AsyncRwTransport::new_client(read, write)
        .with_max_line_length(MAX_LINE_BYTES);
    connect_transport(transport).await
}

/// The handshake over `transport`, trying the stateless revision of 2026-07-28
/// first and falling back to `initialize` (2025-11-25 and older, which is what most
/// servers speak today). The receiver gets what the server does that the caller
/// records (refused requests, list changes) as it happens.
pub async fn connect_transport<T, E, A>(
    transport: T,
) -> Result<(Connection, mpsc::Receiver<Note>), ClientError>
where
    T: rmcp::transport::IntoTransport<RoleClient, E, A>,
    E: std::error::Error + Send + Sync + 'static,
{
    let (tx, notes) = mpsc::channel(MAX_RECORDED_REFUSALS + 1);
    let lifecycle = ClientLifecycleMode::Auto {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        legacy_version: Some(ProtocolVersion::V_2025_11_25),
    };
    let harness = Harness {
        notes: tx,
        refused: std::sync::atomic::AtomicUsize::new(0),
    };
    let started = harness.serve_with_lifecycle(transport, lifecycle);
    let service = match tokio::time::timeout(HANDSHAKE_TIMEOUT, started).await {
        Ok(Ok(service)) => service,
        Ok(Err(e)) => return Err(ClientError::Handshake(e.to_string())),
        Err(_) => {
            return Err(ClientError::Handshake(format!(
                "no answer within {} s",
                HANDSHAKE_TIMEOUT.as_secs()
            )));
        }
    };
    let handshake = handshake_of(&service)?;
    Ok((Connection { service, handshake }, notes))
}

fn handshake_of(service: &RunningService<RoleClient, Harness>) -> Result<Handshake, ClientError> {
    let info = service
        .peer_info()
        .ok_or_else(|| ClientError::Handshake("the server sent no information".into()))?;
    let info = serde_json::to_value(&*info).unwrap_or(Value::Null);
    let protocol = info
        .get("protocolVersion")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let known = ProtocolVersion::KNOWN_VERSIONS
        .iter()
        .any(|v| v.as_str() == protocol);
    if !known {
        return Err(ClientError::UnknownRevision(protocol));
    }
    let field = |k: &str| {
        info.get("serverInfo")
            .and_then(|s| s.get(k))
            .and_then(Value::as_str)
            .unwrap_or("?")
            .to_string()
    };
    Ok(Handshake {
        protocol,
        server_info: format!("{} {}", field("name"), field("version")),
    })
}

/// Most pages of a tool list read: a server that hands out cursors forever is cut off.
const MAX_LIST_PAGES: usize = 100;

/// Most tools one server may list: every list is held against the pins tool by
/// tool (and offered each turn), so a list of hundreds of thousands would keep the
/// daemon busy for minutes.
pub const MAX_TOOLS: usize = 1000;

/// Most bytes (as JSON) one server's whole tool list may take, across its pages.
pub const MAX_LIST_BYTES: usize = MAX_LINE_BYTES;

/// The outcome of one call: the result as the server sent it (JSON), to be mapped
/// by `content`.
pub type CallAnswer = Value;

impl Connection {
    /// Lists every tool, page by page, bypassing the SDK's cache (which could answer
    /// with a stale list: pinning must see what the server says now).
    pub async fn list_tools(&self, timeout: Duration) -> Result<Vec<ToolDefinition>, ClientError> {
        let mut tools = Vec::new();
        let mut bytes = 0usize;
        let mut names = std::collections::HashSet::new();
        let mut cursor = None;
        for _ in 0..MAX_LIST_PAGES {
            let request = match cursor.take() {
                Some(c) => ListToolsRequest::with_param(
                    PaginatedRequestParams::default().with_cursor(Some(c)),
                ),
                None => ListToolsRequest::default(),
            };
            let handle = self
                .service
                .peer()
                .send_request_with_option(
                    ClientRequest::ListToolsRequest(request),
                    PeerRequestOptions::with_timeout(timeout),
                )
                .await?;
            let ServerResult::ListToolsResult(page) = handle.await_response().await? else {
                return Err(ClientError::Other(
                    "tools/list was answered with another result".into(),
                ));
            };
            for tool in &page.tools {
                let value = serde_json::to_value(tool).unwrap_or(Value::Null);
                bytes += value.to_string().len();
                if tools.len() >= MAX_TOOLS || bytes > MAX_LIST_BYTES {
                    return Err(ClientError::Other(format!(
                        "the tool list is longer than harnessd takes ({MAX_TOOLS} tools, \
                         {} MiB)",
                        MAX_LIST_BYTES / (1024 * 1024)
                    )));
                }
                let def = definition_of(&value)?;
                // Pinned by name: a second definition under one name would be
                // pinned in place of the first, and the first held against it.
                if !names.insert(def.name.clone()) {
                    return Err(ClientError::Other(format!(
                        "the tool list names {:?} twice",
                        def.name
                    )));
                }
                tools.push(def);
            }
            match page.next_cursor {
                Some(c) if !c.is_empty() => cursor = Some(c),
                _ => return Ok(tools),
            }
        }
        Err(ClientError::Other(format!(
            "the tool list did not end after {MAX_LIST_PAGES} pages"
        )))
    }

    /// Calls `tool` with `arguments`, bounded by `timeout` and by `cancel` (either
    /// sends `notifications/cancelled` for the request).
    pub async fn call(
        &self,
        tool: &str,
        arguments: serde_json::Map<String, Value>,
        timeout: Duration,
        cancel: &CancellationToken,
    ) -> Result<CallAnswer, ClientError> {
        let params = CallToolRequestParams::new(tool.to_string()).with_arguments(arguments);
        let peer = self.service.peer().clone();
        let handle = peer
            .send_request_with_option(
                ClientRequest::CallToolRequest(CallToolRequest::new(params)),
                PeerRequestOptions::with_timeout(timeout),
            )
            .await?;
        let id = handle.id.clone();
        tokio::select! {
            answer = handle.await_response() => match answer? {
                ServerResult::CallToolResult(r) => Ok(serde_json::to_value(&r).unwrap_or(Value::Null)),
                _ => Err(ClientError::Other("tools/call was answered with another result".into())),
            },
            () = cancel.cancelled() => {
                let reason = Some("the task was cancelled".to_string());
                let _ = peer.notify_cancelled(CancelledNotificationParam::new(Some(id), reason)).await;
                Err(ClientError::Cancelled)
            }
        }
    }

    /// Whether the connection is still open.
    pub fn is_open(&self) -> bool {
        !self.service.is_closed()
    }

    /// Closes the connection (a stdio server sees end of input).
    pub async fn close(self) {
        let _ = self.service.cancel().await;
    }
}

/// What the SDK's tool value carries, as a [`ToolDefinition`]: the parts that are
/// pinned (icons and `_meta` are not: they change nothing a call means).
fn definition_of(tool: &Value) -> Result<ToolDefinition, ClientError> {
    let text = |k: &str| tool.get(k).and_then(Value::as_str).map(str::to_string);
    let name =
        text("name").ok_or_else(|| ClientError::Other("a listed tool has no name".into()))?;
    let annotations = match tool.get("annotations") {
        None | Some(Value::Null) => None,
        Some(a) => Some(
            serde_json::from_value::<ToolAnnotations>(a.clone())
                .map_err(|e| ClientError::Other(format!("tool {name:?}: bad annotations: {e}")))?,
        ),
    };
    Ok(ToolDefinition {
        title: text("title"),
        description: text("description"),
        input_schema: tool.get("inputSchema").cloned().unwrap_or(Value::Null),
        output_schema: tool.get("outputSchema").cloned().filter(|v| !v.is_null()),
        annotations,
        name,
    })
}
