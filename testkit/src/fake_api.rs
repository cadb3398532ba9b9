//! A fake Anthropic Messages API: a real HTTP/1.1 server on 127.0.0.1, scripted
//! with one reply per expected request, recording every request it receives.
//! Every recorded request is checked for tool_use/tool_result pairing.
//!
//! A request with `"stream": true` gets a 200 message as server-sent events
//! ([`crate::sse`]), written in small HTTP chunks so that chunk boundaries fall
//! inside UTF-8 characters and inside tool-input JSON; errors stay JSON bodies, as
//! the API sends them before a stream starts.

use std::collections::{HashMap, VecDeque};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::sse::{StreamPlan, error_event, message_events, ping_event};

/// One scripted reply.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
    pub delay: Duration,
    /// How a streamed answer departs from a clean stream.
    pub stream: StreamPlan,
}

impl Reply {
    /// A 200 Messages response with this content and stop reason.
    pub fn message(content: Value, stop_reason: &str) -> Reply {
        Reply::message_with_usage(
            content,
            stop_reason,
            json!({"input_tokens": 10, "output_tokens": 5}),
        )
    }

    pub fn message_with_usage(content: Value, stop_reason: &str, usage: Value) -> Reply {
        let body = json!({
            "id": "msg_fake",
            "type": "message",
            "role": "assistant",
            "model": "fake-model",
            "content": content,
            "stop_reason": stop_reason,
            "stop_sequence": null,
            "usage": usage,
        });
        Reply::raw(200, &body.to_string())
    }

    /// A final text answer.
    pub fn text(text: &str) -> Reply {
        Reply::message(json!([{"type": "text", "text": text}]), "end_turn")
    }

    /// One tool call.
    pub fn tool(id: &str, name: &str, input: Value) -> Reply {
        Reply::tools(&[(id, name, input)])
    }

    /// Several tool calls in one response.
    pub fn tools(calls: &[(&str, &str, Value)]) -> Reply {
        let content: Vec<Value> = calls
            .iter()
            .map(|(id, name, input)| json!({"type": "tool_use", "id": id, "name": name, "input": input}))
            .collect();
        Reply::message(Value::Array(content), "tool_use")
    }

    /// Any status and body.
    pub fn raw(status: u16, body: &str) -> Reply {
        Reply {
            status,
            headers: Vec::new(),
            body: body.to_string(),
            delay: Duration::ZERO,
            stream: StreamPlan::default(),
        }
    }

    /// The reply's body as JSON (`Null` when it is not JSON).
    pub fn body_json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }

    /// When streamed, block `index`'s tool input is sent as `json` (e.g. cut short).
    pub fn streamed_input(mut self, index: usize, json: &str) -> Reply {
        self.stream.partial_inputs.insert(index, json.to_string());
        self
    }

    /// When streamed, the connection closes after `events` events.
    pub fn cut_stream_after(mut self, events: usize) -> Reply {
        self.stream.cut_after = Some(events);
        self
    }

    /// When streamed, the fake goes silent for `pause` after `events` events.
    pub fn stall_stream_after(mut self, events: usize, pause: Duration) -> Reply {
        self.stream.stall_after = Some((events, pause));
        self
    }

    /// When streamed, a `ping` every `every` for `lasting` after `events` events,
    /// then the rest of the stream.
    pub fn ping_stream_after(mut self, events: usize, every: Duration, lasting: Duration) -> Reply {
        self.stream.pings_after = Some((events, every, lasting));
        self
    }

    /// When streamed, an `error` event of type `kind` follows `events` events.
    pub fn stream_error_after(mut self, events: usize, kind: &str) -> Reply {
        self.stream.error_after = Some((events, kind.to_string()));
        self
    }

    /// An API error body with this status.
    pub fn error(status: u16, kind: &str, message: &str) -> Reply {
        Reply::raw(
            status,
            &json!({"type": "error", "error": {"type": kind, "message": message}}).to_string(),
        )
    }

    pub fn header(mut self, name: &str, value: &str) -> Reply {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }
}

/// One request as received.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub path: String,
    pub headers: HashMap<String, String>,
    pub body: Value,
    /// The body's bytes as sent (a signature is over these).
    pub raw: Vec<u8>,
    pub received_at: Instant,
    /// The wall-clock time it arrived (to compare with an event's `ts`).
    pub received_wall: std::time::SystemTime,
}

/// Computes a reply from the request body (for concurrent tasks, where a fixed
/// script's order would interleave).
pub type Responder = Box<dyn Fn(&Value) -> Reply + Send + Sync>;

#[derive(Default)]
struct State {
    script: VecDeque<Reply>,
    responder: Option<Responder>,
    requests: Vec<Recorded>,
    /// When each reply finished being written.
    replied_at: Vec<Instant>,
    /// Bytes per HTTP chunk of a stream; 0 means the whole stream in one write.
    stream_chunk: Option<usize>,
}

/// The running fake. The server thread lives until the test process ends.
pub struct FakeApi {
    pub url: String,
    state: Arc<Mutex<State>>,
}

/// The first user message's text of a request body: the task's prompt.
pub fn prompt_of(body: &Value) -> String {
    body["messages"][0]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

impl FakeApi {
    /// A fake whose replies are scripted per task (by each request's first
    /// message, [`prompt_of`]): each request gets the next reply of its task's
    /// list, and `unscripted` once the list is used up. For tasks that run side by
    /// side (children of one parent), where one script's order would interleave.
    pub fn by_prompt(script: Vec<(String, Vec<Reply>)>, unscripted: Reply) -> FakeApi {
        let queues: HashMap<String, VecDeque<Reply>> = script
            .into_iter()
            .map(|(prompt, replies)| (prompt, replies.into()))
            .collect();
        let queues = Mutex::new(queues);
        FakeApi::with_responder(Box::new(move |body: &Value| {
            let mut q = queues.lock().unwrap();
            q.get_mut(&prompt_of(body))
                .and_then(VecDeque::pop_front)
                .unwrap_or_else(|| unscripted.clone())
        }))
    }

    /// A fake answering every request with `responder`.
    pub fn with_responder(responder: Responder) -> FakeApi {
        let api = FakeApi::start(Vec::new());
        api.state.lock().unwrap().responder = Some(responder);
        api
    }

    pub fn start(script: Vec<Reply>) -> FakeApi {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind fake API");
        let url = format!("http://{}", listener.local_addr().unwrap());
        let state = Arc::new(Mutex::new(State {
            script: script.into(),
            ..Default::default()
        }));
        let shared = state.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let state = shared.clone();
                std::thread::spawn(move || serve(stream, state));
            }
        });
        FakeApi { url, state }
    }

    /// Every request so far; panics if any breaks tool_use/tool_result pairing.
    pub fn requests(&self) -> Vec<Recorded> {
        let requests = self.state.lock().unwrap().requests.clone();
        for (i, r) in requests.iter().enumerate() {
            if let Err(e) = check_pairing(&r.body) {
                panic!("request {} breaks tool pairing: {e}\n{}", i + 1, r.body);
            }
        }
        requests
    }

    /// Every request so far, unchecked: for a fake that is not a Messages API (a
    /// webhook receiver).
    pub fn received(&self) -> Vec<Recorded> {
        self.state.lock().unwrap().requests.clone()
    }

    /// Streams in HTTP chunks of `bytes` (default 7); 0 writes each stream at once.
    pub fn stream_chunks_of(&self, bytes: usize) {
        self.state.lock().unwrap().stream_chunk = Some(bytes);
    }

    /// When each reply finished being written (for the benchmark).
    #[allow(dead_code)]
    pub fn replied_at(&self) -> Vec<Instant> {
        self.state.lock().unwrap().replied_at.clone()
    }
}

/// Every assistant `tool_use` is answered exactly once, in order, by `tool_result`
/// blocks at the start of the next user message, and no result answers nothing.
pub fn check_pairing(body: &Value) -> Result<(), String> {
    let messages = body["messages"].as_array().ok_or("no messages")?;
    for (i, m) in messages.iter().enumerate() {
        let content = m["content"].as_array().cloned().unwrap_or_default();
        let kinds = |c: &[Value], t: &str| -> Vec<String> {
            c.iter()
                .filter(|b| b["type"] == t)
                .map(|b| {
                    b[if t == "tool_use" { "id" } else { "tool_use_id" }]
                        .as_str()
                        .unwrap_or("")
                        .to_string()
                })
                .collect()
        };
        if m["role"] == "assistant" {
            let uses = kinds(&content, "tool_use");
            if uses.is_empty() {
                continue;
            }
            let Some(next) = messages.get(i + 1) else {
                continue;
            };
            let next_content = next["content"].as_array().cloned().unwrap_or_default();
            let results = kinds(&next_content, "tool_result");
            if results != uses {
                return Err(format!(
                    "message {i}: tool_use ids {uses:?} answered by {results:?}"
                ));
            }
            let first_other = next_content.iter().position(|b| b["type"] != "tool_result");
            if let Some(p) = first_other
                && next_content[p..].iter().any(|b| b["type"] == "tool_result")
            {
                return Err(format!(
                    "message {}: tool_result after other content",
                    i + 1
                ));
            }
        } else if (i == 0 || messages[i - 1]["role"] != "assistant")
            && !kinds(&content, "tool_result").is_empty()
        {
            return Err(format!(
                "message {i}: tool_result without a preceding tool_use"
            ));
        }
    }
    Ok(())
}

fn serve(stream: TcpStream, state: Arc<Mutex<State>>) {
    // As a real server does: a stream's small writes go out at once, not held
    // back by Nagle's algorithm until the client's delayed ACK.
    let _ = stream.set_nodelay(true);
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut writer = stream;
    loop {
        let mut request_line = String::new();
        if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
            return;
        }
        let path = request_line
            .split_whitespace()
            .nth(1)
            .unwrap_or("")
            .to_string();
        let mut headers = HashMap::new();
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some((k, v)) = line.split_once(':') {
                headers.insert(k.trim().to_lowercase(), v.trim().to_string());
            }
        }
        let len: usize = headers
            .get("content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let mut body = vec![0u8; len];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let received_at = Instant::now();
        let received_wall = std::time::SystemTime::now();
        let raw = body;
        let body: Value = serde_json::from_slice(&raw).unwrap_or(Value::Null);
        let streamed = body["stream"] == true;
        let reply = {
            let mut s = state.lock().unwrap();
            let from_responder = s.responder.as_ref().map(|r| r(&body));
            s.requests.push(Recorded {
                path,
                headers,
                body,
                raw,
                received_at,
                received_wall,
            });
            from_responder
                .or_else(|| s.script.pop_front())
                .unwrap_or_else(|| {
                    Reply::error(
                        500,
                        "fake_exhausted",
                        "the fake API's script has no reply left",
                    )
                })
        };
        if !reply.delay.is_zero() {
            std::thread::sleep(reply.delay);
        }
        let message: Value = serde_json::from_str(&reply.body).unwrap_or(Value::Null);
        if streamed && reply.status == 200 && message["content"].is_array() {
            let chunk = state.lock().unwrap().stream_chunk.unwrap_or(7);
            if !write_stream(&mut writer, &message, &reply, chunk) {
                return;
            }
            state.lock().unwrap().replied_at.push(Instant::now());
            continue;
        }
        let reason = match reply.status {
            200 => "OK",
            429 => "Too Many Requests",
            _ => "Status",
        };
        let mut head = format!(
            "HTTP/1.1 {} {reason}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n",
            reply.status,
            reply.body.len()
        );
        for (k, v) in &reply.headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str("\r\n");
        let mut bytes = head.into_bytes();
        bytes.extend_from_slice(reply.body.as_bytes());
        if writer
            .write_all(&bytes)
            .and_then(|()| writer.flush())
            .is_err()
        {
            return;
        }
        state.lock().unwrap().replied_at.push(Instant::now());
    }
}

/// Writes `message` as an event stream in HTTP chunks of `chunk` bytes; `false`
/// when the connection is done (cut on purpose, or gone).
fn write_stream(writer: &mut TcpStream, message: &Value, reply: &Reply, chunk: usize) -> bool {
    let mut events = message_events(message, &reply.stream);
    let mut cut = false;
    if let Some(n) = reply.stream.cut_after {
        events.truncate(n);
        cut = true;
    }
    if let Some((n, kind)) = &reply.stream.error_after {
        events.truncate(*n);
        events.push(error_event(kind));
    }
    let split = reply
        .stream
        .stall_after
        .map(|(n, _)| n)
        .or(reply.stream.pings_after.map(|(n, _, _)| n));
    let (before, after) = match split {
        Some(n) => events.split_at(n.min(events.len())),
        None => (&events[..], &[][..]),
    };
    let parts = [before.concat(), after.concat()];
    let mut head = String::from(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n\
         transfer-encoding: chunked\r\n",
    );
    for (k, v) in &reply.headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    if writer.write_all(head.as_bytes()).is_err() {
        return false;
    }
    for (i, text) in parts.iter().enumerate() {
        if i == 1
            && let Some((_, pause)) = reply.stream.stall_after
        {
            std::thread::sleep(pause);
        }
        if i == 1
            && let Some((_, every, lasting)) = reply.stream.pings_after
            && !write_pings(writer, every, lasting)
        {
            return false;
        }
        if !write_chunks(writer, text.as_bytes(), chunk) {
            return false;
        }
    }
    if cut {
        let _ = writer.shutdown(std::net::Shutdown::Both);
        return false;
    }
    writer
        .write_all(b"0\r\n\r\n")
        .and_then(|()| writer.flush())
        .is_ok()
}

/// A `ping` every `every` until `lasting` has passed; `false` if the peer left
/// (as a client that gave up does).
fn write_pings(writer: &mut TcpStream, every: Duration, lasting: Duration) -> bool {
    let until = Instant::now() + lasting;
    while Instant::now() < until {
        if !write_chunks(writer, ping_event().as_bytes(), 0) {
            return false;
        }
        std::thread::sleep(every);
    }
    true
}

/// `bytes` as HTTP chunks of `chunk` bytes (0: one chunk), and in at most about
/// 512 chunks, so a large answer is not a million writes; `false` if the peer left.
fn write_chunks(writer: &mut TcpStream, bytes: &[u8], chunk: usize) -> bool {
    let size = if chunk == 0 {
        bytes.len().max(1)
    } else {
        chunk.max(bytes.len() / 512)
    };
    for piece in bytes.chunks(size) {
        let mut framed = format!("{:x}\r\n", piece.len()).into_bytes();
        framed.extend_from_slice(piece);
        framed.extend_from_slice(b"\r\n");
        if writer.write_all(&framed).and_then(|()| writer.flush()).is_err() {
            return false;
        }
    }
    true
}
