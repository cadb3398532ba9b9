//! The Anthropic Messages API over reqwest (rustls): one request, retried exactly
//! as docs/config.md says, each failed attempt reported to the caller's callback before
//! the wait (the agent loop records it as a `model_error` event). Prompt-cache
//! breakpoints are placed here, on the last tool definition, the system prompt and
//! the newest message, so they move forward every turn. A streamed answer is read
//! by [`super::streamed`].

use std::future::Future;
use std::time::{Duration, SystemTime};

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use serde::Serialize;

use super::budget::{Lease, ResponseBudget};
use super::wire::{Block, Hold, Message, Request, Response, Role, ToolChoice};
use crate::config::{ApiConfig, ApiKey};

const ANTHROPIC_VERSION: &str = "2023-06-01";
const BACKOFF_BASE: Duration = Duration::from_millis(500);
const BACKOFF_CAP: Duration = Duration::from_secs(30);
const RETRY_AFTER_CAP: Duration = Duration::from_secs(60);
/// Statuses worth another attempt.
const RETRYABLE: [u16; 7] = [408, 429, 500, 502, 503, 504, 529];

/// Why a model request failed for good.
#[derive(Debug, thiserror::Error)]
pub enum LlmError {
    /// The API answered with an error status (after retries if retryable).
    #[error("model API returned HTTP {status}: {message}")]
    Status {
        /// HTTP status.
        status: u16,
        /// The API's own error message.
        message: String,
    },
    /// No response: connection failure or timeout, after retries.
    #[error("model API request failed: {0}")]
    Transport(String),
    /// A 2xx response whose body is not a Messages API response.
    #[error("model API returned a malformed response body: {0}")]
    Malformed(String),
    /// The task was cancelled while waiting.
    #[error("cancelled")]
    Cancelled,
    /// The client could not be built.
    #[error("cannot build the HTTP client: {0}")]
    Client(String),
    /// The response body passed `api.max_response_mb`; reading stopped there.
    #[error("the model's response exceeds api.max_response_mb ({0} MiB)")]
    TooLarge(u64),
}

/// Why [`AnthropicClient::send`] returned without a response: the request
/// failed, or the caller's callback refused to go on.
#[derive(Debug, thiserror::Error)]
pub enum SendError<E> {
    /// The request failed for good (or was cancelled).
    #[error(transparent)]
    Model(#[from] LlmError),
    /// The `on_failure` callback failed; the request was abandoned at once.
    #[error(transparent)]
    Callback(E),
}

/// One failed attempt, as reported to the caller before the client waits for the
/// next attempt or gives up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailedAttempt {
    /// Attempt number, from 1.
    pub attempt: u32,
    /// HTTP status, if there was a response.
    pub status: Option<u16>,
    /// The wait before the next attempt; `None` when there will be none.
    pub retry_in: Option<Duration>,
    /// What went wrong.
    pub message: String,
}

/// A failed attempt.
pub(super) struct Failure {
    pub(super) status: Option<u16>,
    pub(super) message: String,
    pub(super) retryable: bool,
    pub(super) retry_after: Option<Duration>,
}

impl Failure {
    /// A failure worth another attempt, with no `retry-after`.
    pub(super) fn retryable(status: Option<u16>, message: String) -> Failure {
        Failure {
            status,
            message,
            retryable: true,
            retry_after: None,
        }
    }

    /// A failure with this status, retried if the status is (docs/config.md).
    pub(super) fn with_status(status: u16, message: String) -> Failure {
        Failure {
            status: Some(status),
            message,
            retryable: RETRYABLE.contains(&status),
            retry_after: None,
        }
    }
}

/// Receives the text of each `text_delta` of a streamed answer as it arrives.
pub type OnText<'a> = &'a (dyn Fn(&str) + Send + Sync);

/// Client of the Messages API.
#[derive(Debug, Clone)]
pub struct AnthropicClient {
    http: reqwest::Client,
    url: String,
    key: ApiKey,
    max_retries: u32,
    /// `api.timeout_secs`: the whole of one attempt, from sending the request to
    /// the last byte of the answer, streamed or not.
    pub(super) timeout: Duration,
    /// `api.max_response_mb`, in MiB (for messages) and bytes (for reading).
    pub(super) max_response_mb: u64,
    pub(super) max_response_bytes: usize,
    /// `daemon.memory_mb`'s share for response bodies, shared by every clone of
    /// this client (every task): each body read is charged to it as it arrives.
    pub(super) budget: ResponseBudget,
}

/// What a byte read costs the budget, matching `Config::response_cost_bytes`: the
/// byte as read (the buffered line, the event being parsed, the plain body), in the
/// assembled message (then the history), and twice more while the task saves it
/// (the transcript's answer, and the serialised transcript being written).
pub(super) fn charge(bytes: usize) -> u64 {
    u64::try_from(bytes).unwrap_or(u64::MAX).saturating_mul(4)
}

/// Charged before a request is sent, so a request waits for room before it costs
/// the API anything; most answers fit in it whole.
const FIRST_CHARGE: usize = 64 * 1024;

impl AnthropicClient {
    /// Builds a client from `[api]` and the key; response bodies are charged to
    /// `budget`.
    pub fn new(
        api: &ApiConfig,
        key: ApiKey,
        budget: ResponseBudget,
    ) -> Result<AnthropicClient, LlmError> {
        // No client-wide timeout: each attempt is timed whole by `send_live`.
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(api.timeout_secs.min(10)))
            .build()
            .map_err(|e| LlmError::Client(e.to_string()))?;
        Ok(AnthropicClient {
            http,
            url: format!("{}/v1/messages", api.base_url.trim_end_matches('/')),
            key,
            max_retries: api.max_retries,
            timeout: Duration::from_secs(api.timeout_secs),
            max_response_mb: api.max_response_mb,
            max_response_bytes: usize::try_from(api.max_response_mb.saturating_mul(1024 * 1024))
                .unwrap_or(usize::MAX),
            budget,
        })
    }

    /// Sends `req`, retrying per policy; returns the parsed response.
    ///
    /// Every failed attempt is passed to `on_failure`, and the client waits for
    /// the returned future before it sleeps or returns, so what the caller does
    /// with it (recording it) happens before the wait. An `Err` from the callback
    /// abandons the request. `cancel` ends the request and any wait.
    pub async fn send<E, F, Fut>(
        &self,
        req: &Request<'_>,
        cancel: &CancellationToken,
        on_failure: F,
    ) -> Result<Response, SendError<E>>
    where
        F: FnMut(FailedAttempt) -> Fut,
        Fut: Future<Output = Result<(), E>>,
    {
        self.send_live(req, cancel, on_failure, &|_| {}).await
    }

    /// [`Self::send`], passing the text of a streamed answer to `on_text` as it
    /// arrives (an attempt that fails after some text and is retried streams its
    /// text again).
    pub async fn send_live<E, F, Fut>(
        &self,
        req: &Request<'_>,
        cancel: &CancellationToken,
        mut on_failure: F,
        on_text: OnText<'_>,
    ) -> Result<Response, SendError<E>>
    where
        F: FnMut(FailedAttempt) -> Fut,
        Fut: Future<Output = Result<(), E>>,
    {
        // Shared, not copied, by each attempt: the body holds the whole history.
        let body = bytes::Bytes::from(
            request_body(req)
                .map_err(|e| LlmError::Malformed(format!("cannot serialise the request: {e}")))?,
        );
        let mut attempt: u32 = 0;
        loop {
            attempt += 1;
            // One deadline for the whole attempt, from sending the request to the
            // last byte of the answer: a peer that keeps a stream alive with pings,
            // or trickles a body, cannot hold the task past `api.timeout_secs`.
            let result = tokio::select! {
                r = self.timed_attempt(&body, on_text) => r,
                () = cancel.cancelled() => return Err(LlmError::Cancelled.into()),
            };
            let failure = match result {
                Ok(resp) => return Ok(resp),
                Err(Ok(failure)) => failure,
                Err(Err(permanent)) => {
                    on_failure(FailedAttempt {
                        attempt,
                        status: None,
                        retry_in: None,
                        message: permanent.to_string(),
                    })
                    .await
                    .map_err(SendError::Callback)?;
                    return Err(permanent.into());
                }
            };
            let retry = failure.retryable && attempt <= self.max_retries;
            let wait = retry.then(|| {
                failure
                    .retry_after
                    .map(|d| d.min(RETRY_AFTER_CAP))
                    .unwrap_or_else(|| backoff(attempt - 1))
            });
            on_failure(FailedAttempt {
                attempt,
                status: failure.status,
                retry_in: wait,
                message: failure.message.clone(),
            })
            .await
            .map_err(SendError::Callback)?;
            let Some(wait) = wait else {
                return Err(match failure.status {
                    Some(status) => LlmError::Status {
                        status,
                        message: failure.message,
                    },
                    None => LlmError::Transport(failure.message),
                }
                .into());
            };
            tracing::warn!(
                "model request failed (attempt {attempt}): {}; retrying in {} ms",
                failure.message,
                wait.as_millis()
            );
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = cancel.cancelled() => return Err(LlmError::Cancelled.into()),
            }
        }
    }

    /// [`Self::attempt_once`] within `api.timeout_secs`, the time its lease waits
    /// for room in the budget not counted.
    async fn timed_attempt(
        &self,
        body: &bytes::Bytes,
        on_text: OnText<'_>,
    ) -> Result<Response, Result<Failure, LlmError>> {
        let lease = self.budget.lease();
        let waited = lease.waited();
        within(
            self.timeout,
            &waited,
            self.attempt_once(body, on_text, lease),
        )
        .await
        .unwrap_or_else(|| Err(Ok(Failure::retryable(None, self.timeout_message()))))
    }

    /// One HTTP exchange. `Err(Ok(_))` may be retried; `Err(Err(_))` may not.
    async fn attempt_once(
        &self,
        body: &bytes::Bytes,
        on_text: OnText<'_>,
        mut lease: super::Lease,
    ) -> Result<Response, Result<Failure, LlmError>> {
        let first = charge(FIRST_CHARGE.min(self.max_response_bytes));
        lease.grow(first).await.map_err(|_| Err(self.too_large()))?;
        let builder = self
            .http
            .post(&self.url)
            .header("x-api-key", self.key.expose())
            .header("anthropic-version", ANTHROPIC_VERSION)
            .header("content-type", "application/json")
            .body(body.clone());
        // Timed by the caller, whole (send_live).
        let resp = match builder.send().await {
            Ok(resp) => resp,
            Err(e) => return Err(Ok(Failure::retryable(None, transport_message(&e)))),
        };
        if resp.status().is_success() && super::streamed::is_event_stream(&resp) {
            return self.read_stream(resp, on_text, lease).await;
        }
        let status = resp.status().as_u16();
        let retry_after = resp
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| parse_retry_after(v, SystemTime::now()));
        let bytes = match self.read_body(resp, &mut lease).await {
            Ok(b) => b,
            Err(Ok(message)) => {
                return Err(Ok(Failure {
                    status: Some(status),
                    message,
                    retryable: true,
                    retry_after,
                }));
            }
            Err(Err(too_large)) => return Err(Err(too_large)),
        };
        if (200..300).contains(&status) {
            let mut response = parse_response(&bytes).map_err(Err)?;
            response.hold = Hold::new(lease);
            return Ok(response);
        }
        let message = api_error_message(&bytes);
        if RETRYABLE.contains(&status) {
            Err(Ok(Failure {
                status: Some(status),
                message,
                retryable: true,
                retry_after,
            }))
        } else {
            Err(Ok(Failure {
                status: Some(status),
                message,
                retryable: false,
                retry_after: None,
            }))
        }
    }
}

impl AnthropicClient {
    /// A body that is not an event stream, read whole (within the attempt's
    /// deadline, which the caller keeps).
    /// `Err(Ok(_))`: why the read failed (retryable); `Err(Err(_))`: too large.
    async fn read_body(
        &self,
        resp: reqwest::Response,
        lease: &mut Lease,
    ) -> Result<Vec<u8>, Result<String, LlmError>> {
        self.read_capped(resp, lease)
            .await
            .map_err(|e| e.map(|e| format!("reading the response body: {}", transport_message(&e))))
    }

    /// The body, read chunk by chunk and given up as soon as it passes
    /// `api.max_response_mb`: a peer's huge (or endless) answer costs at most the
    /// cap in memory, and retrying it would only fetch the same again.
    /// `Err(Ok(_))`: the read failed (retryable); `Err(Err(_))`: too large.
    async fn read_capped(
        &self,
        mut resp: reqwest::Response,
        lease: &mut Lease,
    ) -> Result<Vec<u8>, Result<reqwest::Error, LlmError>> {
        let cap = self.max_response_bytes;
        let too_large = || self.too_large();
        // A declared length past the cap is refused before any of it is read.
        if resp
            .content_length()
            .is_some_and(|n| usize::try_from(n).map_or(true, |n| n > cap))
        {
            return Err(Err(too_large()));
        }
        let hint = resp
            .content_length()
            .and_then(|n| usize::try_from(n).ok())
            .unwrap_or(0);
        let mut body = Vec::with_capacity(hint.min(cap));
        while let Some(chunk) = resp.chunk().await.map_err(Ok)? {
            let len = body.len().saturating_add(chunk.len());
            if len > cap {
                return Err(Err(too_large()));
            }
            self.charge_up_to(lease, len).await.map_err(Err)?;
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }
}

impl AnthropicClient {
    pub(super) fn too_large(&self) -> LlmError {
        LlmError::TooLarge(self.max_response_mb)
    }

    /// Grows `lease` to cover `read` bytes of a body, waiting for room if the
    /// budget is short (the first charge already covers most answers whole).
    pub(super) async fn charge_up_to(
        &self,
        lease: &mut Lease,
        read: usize,
    ) -> Result<(), LlmError> {
        let more = charge(read).saturating_sub(lease.held());
        lease.grow(more).await.map_err(|_| self.too_large())
    }
}

/// `attempt`, or `None` once `timeout` has passed since it began, not counting the
/// time its lease waited for room in the budget (`waited`).
async fn within<T>(
    timeout: Duration,
    waited: &super::budget::Waited,
    attempt: impl Future<Output = T>,
) -> Option<T> {
    tokio::pin!(attempt);
    let mut deadline = tokio::time::Instant::now() + timeout;
    loop {
        tokio::select! {
            r = &mut attempt => return Some(r),
            () = tokio::time::sleep_until(deadline) => {
                let extra = waited.take();
                if extra.is_zero() {
                    return None;
                }
                deadline += extra;
            }
        }
    }
}

fn transport_message(e: &reqwest::Error) -> String {
    let mut msg = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        msg.push_str(": ");
        msg.push_str(&s.to_string());
        source = s.source();
    }
    if e.is_timeout() {
        msg.push_str(" (timed out; see api.timeout_secs)");
    }
    msg
}

/// The wait a `retry-after` header asks for (docs/config.md), capped at 60 s: either
/// delay-seconds or an HTTP-date in any of the three forms RFC 7231 §7.1.1.1 says a
/// recipient must accept (IMF-fixdate, RFC 850, asctime), measured from `now`.
///
/// A date not after `now` gives `None`, so the computed backoff applies: the header
/// then says nothing about how long to wait, and with a clock that runs ahead of
/// the server's every date would look past — zero waits would spend the retries in
/// a burst. An unparseable value is ignored the same way.
fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<f64>() {
        // Capped before converting: a huge value would overflow a Duration.
        return (secs.is_finite() && secs >= 0.0)
            .then(|| Duration::from_secs_f64(secs.min(RETRY_AFTER_CAP.as_secs_f64())));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    at.duration_since(now)
        .ok()
        .filter(|d| !d.is_zero())
        .map(|d| d.min(RETRY_AFTER_CAP))
}

/// 500 ms × 2ⁿ, capped at 30 s, with full jitter.
fn backoff(n: u32) -> Duration {
    let ceiling = BACKOFF_BASE
        .saturating_mul(2u32.saturating_pow(n))
        .min(BACKOFF_CAP);
    ceiling.mul_f64(fastrand::f64())
}

/// The API's own error message as `type: message`, or the body's start. Anthropic
/// and most servers of its API nest it (`{"error": {"type", "message"}}`);
/// Ollama's own API gives a string (`{"error": "…"}`), OpenAI-style servers (older
/// vLLM) put it at the top (`{"type", "message"}`).
pub(super) fn api_error_message(bytes: &[u8]) -> String {
    let parsed: Option<Value> = serde_json::from_slice(bytes).ok();
    if let Some(text) = parsed.as_ref().and_then(|v| v["error"].as_str()) {
        return format!("error: {text}");
    }
    let nested = parsed.as_ref().and_then(|v| v.get("error"));
    let top = parsed.as_ref().filter(|v| v["message"].is_string());
    if let Some(err) = nested.or(top) {
        let kind = err.get("type").and_then(Value::as_str).unwrap_or("error");
        let message = err.get("message").and_then(Value::as_str).unwrap_or("");
        return format!("{kind}: {message}");
    }
    let text = String::from_utf8_lossy(bytes);
    crate::text::truncate_middle(text.trim(), 300, 0).0
}

fn parse_response(bytes: &[u8]) -> Result<Response, LlmError> {
    let resp: Response = serde_json::from_slice(bytes).map_err(|e| {
        let text = String::from_utf8_lossy(bytes);
        let start = crate::text::truncate_middle(&text, 200, 0).0;
        LlmError::Malformed(format!("{e}; body: {start}"))
    })?;
    check_response(resp)
}

/// How many levels of arrays and objects a content block may nest, itself
/// counted. A block is kept in the transcript five levels down and its tool input
/// in the audit log, whose readers parse at most 128 levels: a block nested deeper
/// than that would be written, then never read back (the task's transcript and
/// its `tool_requested` line unreadable).
pub const MAX_BLOCK_DEPTH: usize = 64;

/// A response is the assistant's and its blocks can be recorded, or it is not a
/// Messages API response to act on.
pub(super) fn check_response(resp: Response) -> Result<Response, LlmError> {
    if resp.role != Role::Assistant {
        return Err(LlmError::Malformed("role is not \"assistant\"".into()));
    }
    if let Some(index) = resp
        .content
        .iter()
        .position(|b| depth(&b.0) > MAX_BLOCK_DEPTH)
    {
        return Err(LlmError::Malformed(format!(
            "content block {index} nests arrays and objects more than {MAX_BLOCK_DEPTH} levels deep"
        )));
    }
    Ok(resp)
}

/// Levels of arrays and objects in `v` (a scalar is 0).
fn depth(v: &Value) -> usize {
    match v {
        Value::Array(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
        Value::Object(map) => 1 + map.values().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

/// The request as it goes on the wire: the history borrowed, with the one message
/// that carries a cache breakpoint replaced by a marked copy.
#[derive(Serialize)]
struct WireRequest<'a> {
    model: &'a str,
    max_tokens: u32,
    system: Vec<Value>,
    tools: Vec<Value>,
    messages: Vec<&'a Message>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<ToolChoice>,
    #[serde(skip_serializing_if = "Option::is_none")]
    thinking: Option<&'a Value>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    stream: bool,
}

fn mark_last(blocks: &mut [Value]) {
    if let Some(last) = blocks.last_mut() {
        last["cache_control"] = json!({"type": "ephemeral"});
    }
}

/// The JSON body, with cache breakpoints on the last tool, the system prompt and
/// the newest user message (assistant messages are resent exactly as received, so
/// a pause_turn continuation never carries one). The stored history is untouched.
pub(crate) fn request_body(req: &Request<'_>) -> Result<Vec<u8>, serde_json::Error> {
    let mut tools = req.tools.clone();
    mark_last(&mut tools);
    let mut system = req.system.clone();
    mark_last(&mut system);
    let newest_user = req.messages.iter().rposition(|m| m.role == Role::User);
    let mark = |i: usize| {
        let mut m = req.messages.get(i)?.clone();
        if let Some(Block(last)) = m.content.last_mut() {
            last["cache_control"] = json!({"type": "ephemeral"});
        }
        Some((i, m))
    };
    // At most four breakpoints: tools, system, a compacted prefix, the newest.
    let prefix = req.cache_prefix.filter(|p| Some(*p) != newest_user);
    let marked: Vec<(usize, Message)> = [prefix, newest_user]
        .into_iter()
        .flatten()
        .filter_map(mark)
        .collect();
    let messages = req
        .messages
        .iter()
        .enumerate()
        .map(|(i, m)| marked.iter().find(|(j, _)| *j == i).map_or(m, |(_, c)| c))
        .collect();
    serde_json::to_vec(&WireRequest {
        model: &req.model,
        max_tokens: req.max_tokens,
        system,
        tools,
        messages,
        tool_choice: req.tool_choice,
        thinking: req.thinking.as_ref(),
        stream: req.stream,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_is_bounded() {
        for n in 0..20 {
            let d = backoff(n);
            assert!(d <= BACKOFF_CAP);
            assert!(d <= BACKOFF_BASE * 2u32.saturating_pow(n));
        }
    }

    #[test]
    fn breakpoints_on_tools_system_and_newest_message() {
        let messages = vec![
            Message::user(vec![Block::text("one")]),
            Message::user(vec![
                Block::tool_result("x", "r", false),
                Block::text("two"),
            ]),
        ];
        let req = Request {
            model: "m".into(),
            max_tokens: 10,
            system: vec![json!({"type": "text", "text": "s"})],
            tools: vec![json!({"name": "a"}), json!({"name": "b"})],
            messages: &messages,
            tool_choice: None,
            thinking: None,
            cache_prefix: None,
            stream: false,
        };
        let body: Value = serde_json::from_slice(&request_body(&req).unwrap()).unwrap();
        assert!(body["tools"][0].get("cache_control").is_none());
        assert_eq!(body["tools"][1]["cache_control"]["type"], "ephemeral");
        assert_eq!(body["system"][0]["cache_control"]["type"], "ephemeral");
        assert!(
            body["messages"][0]["content"][0]
                .get("cache_control")
                .is_none()
        );
        assert_eq!(
            body["messages"][1]["content"][1]["cache_control"]["type"],
            "ephemeral"
        );
        assert!(req.messages[1].content[1].0.get("cache_control").is_none());
    }

    #[test]
    fn retry_after_takes_seconds_and_http_dates() {
        let now = httpdate::parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT").unwrap();
        let secs = |s| Some(Duration::from_secs(s));
        assert_eq!(parse_retry_after("2", now), secs(2));
        assert_eq!(parse_retry_after(" 0 ", now), secs(0));
        assert_eq!(parse_retry_after("1e30", now), secs(60));
        assert_eq!(parse_retry_after("-1", now), None);
        assert_eq!(parse_retry_after("soon", now), None);
        for later in [
            "Sun, 06 Nov 1994 08:49:40 GMT",
            "Sunday, 06-Nov-94 08:49:40 GMT",
            "Sun Nov  6 08:49:40 1994",
        ] {
            assert_eq!(parse_retry_after(later, now), secs(3), "{later}");
        }
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 09:49:37 GMT", now),
            secs(60)
        );
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", now),
            None
        );
        assert_eq!(
            parse_retry_after("Sat, 05 Nov 1994 08:49:37 GMT", now),
            None
        );
    }

    /// A body without a length (read until the peer closes) is cut off at the
    /// cap too, after reading no more than the cap, and is not retried.
    #[tokio::test]
    async fn an_unsized_body_past_the_cap_is_refused() {
        use tokio::io::AsyncWriteExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        // A test's fake server, stopped by the test when it is done.
        let server = tokio::spawn(async move {
            let (mut sock, _) = listener.accept().await.unwrap();
            let mut buf = vec![0u8; 64 * 1024];
            let _ = tokio::io::AsyncReadExt::read(&mut sock, &mut buf).await;
            let _ = sock
                .write_all(b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\n")
                .await;
            let chunk = vec![b'x'; 64 * 1024];
            // 3 MiB; the client stops reading past 1 MiB, so a write may fail.
            for _ in 0..48 {
                if sock.write_all(&chunk).await.is_err() {
                    break;
                }
            }
        });
        let api = ApiConfig {
            base_url: format!("http://{addr}"),
            max_response_mb: 1,
            max_retries: 3,
            ..ApiConfig::default()
        };
        let budget = ResponseBudget::new(u64::MAX, charge(1024 * 1024)).unwrap();
        let client = AnthropicClient::new(&api, ApiKey::new("k".into()), budget).unwrap();
        let messages = vec![Message::user(vec![Block::text("x")])];
        let req = Request {
            model: "m".into(),
            max_tokens: 10,
            system: vec![],
            tools: vec![],
            messages: &messages,
            tool_choice: None,
            thinking: None,
            cache_prefix: None,
            stream: false,
        };
        let mut attempts = 0;
        let err = client
            .send(&req, &CancellationToken::new(), |_| {
                attempts += 1;
                async { Ok::<(), std::convert::Infallible>(()) }
            })
            .await
            .unwrap_err();
        assert!(
            matches!(err, SendError::Model(LlmError::TooLarge(1))),
            "{err:?}"
        );
        assert_eq!(attempts, 1);
        assert_eq!(
            err.to_string(),
            "the model's response exceeds api.max_response_mb (1 MiB)"
        );
        server.abort();
    }

    #[test]
    fn api_error_message_is_surfaced() {
        let m = api_error_message(br#"{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: too big"}}"#);
        assert_eq!(m, "invalid_request_error: max_tokens: too big");
    }
}
