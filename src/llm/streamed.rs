//! Reading a streamed answer: bytes off the connection, framed into events,
//! assembled into the message a plain request returns. The whole attempt, this
//! read included, is bounded by `api.timeout_secs` (the caller's deadline), and
//! every byte counts against `api.max_response_mb`, so a stalled or endless
//! stream costs neither time nor memory beyond them.

use super::anthropic::{AnthropicClient, Failure, LlmError, OnText, check_response};
use super::assemble::{Assembler, StreamError};
use super::budget::Lease;
use super::sse::{SseEvent, SseFramer};
use super::wire::{Hold, Response};

/// Whether the API answered with server-sent events (it answers errors, and a
/// server that ignores `stream`, with one JSON body).
pub(super) fn is_event_stream(resp: &reqwest::Response) -> bool {
    resp.headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().starts_with("text/event-stream"))
}

/// One attempt's outcome: `Err(Ok(_))` may be retried, `Err(Err(_))` may not.
type Attempt = Result<Response, Result<Failure, LlmError>>;

impl AnthropicClient {
    /// Why an attempt was given up at its deadline.
    pub(super) fn timeout_message(&self) -> String {
        format!(
            "the model API request timed out after {} s (from sending it to the last byte \
             of the answer); see api.timeout_secs",
            self.timeout.as_secs()
        )
    }

    /// Reads the stream until `message_stop`. An `error` event is retried as its
    /// status would be; a stream that ends or stalls before `message_stop` is
    /// retried like a lost connection; events that make no message are not.
    pub(super) async fn read_stream(
        &self,
        mut resp: reqwest::Response,
        on_text: OnText<'_>,
        mut lease: Lease,
    ) -> Attempt {
        let mut framer = SseFramer::default();
        let mut assembler = Assembler::default();
        let mut events: Vec<SseEvent> = Vec::new();
        let mut read = 0usize;
        while !assembler.is_complete() {
            // No deadline per event: pings would renew it for ever; the attempt's
            // own deadline (send_live) bounds the whole stream.
            let chunk = match resp.chunk().await {
                Err(e) => {
                    let message = format!("reading the event stream: {e}");
                    return Err(Ok(Failure::retryable(None, message)));
                }
                Ok(None) => {
                    let message = "the event stream ended before message_stop".to_string();
                    return Err(Ok(Failure::retryable(None, message)));
                }
                Ok(Some(chunk)) => chunk,
            };
            read = read.saturating_add(chunk.len());
            if read > self.max_response_bytes {
                return Err(Err(LlmError::TooLarge(self.max_response_mb)));
            }
            self.charge_up_to(&mut lease, read).await.map_err(Err)?;
            framer
                .push(&chunk, &mut events)
                .map_err(|e| Err(LlmError::Malformed(e.to_string())))?;
            for event in events.drain(..) {
                match assembler.apply(&event) {
                    Ok(Some(text)) => on_text(&text),
                    Ok(None) => {}
                    Err(e) => return Err(stream_failure(e)),
                }
            }
        }
        // What follows message_stop (the end of the HTTP body) is read off in the
        // background, so the connection goes back to the pool for the next turn
        // instead of being closed, and the answer is not held up by it. Not on the
        // daemon's tracker (the client knows no daemon): it only reads, writes
        // nothing, and ends within `timeout`; cut off at exit, it loses nothing.
        let timeout = self.timeout;
        tokio::spawn(async move {
            let drain = async { while let Ok(Some(_)) = resp.chunk().await {} };
            let _ = tokio::time::timeout(timeout, drain).await;
        });
        let mut response = assembler.finish().map_err(stream_failure)?;
        response.hold = Hold::new(lease);
        check_response(response).map_err(Err)
    }
}

/// What a stream error means for retrying.
fn stream_failure(e: StreamError) -> Result<Failure, LlmError> {
    match e.status() {
        Some(status) => Ok(Failure::with_status(status, e.to_string())),
        None => Err(LlmError::Malformed(e.to_string())),
    }
}
