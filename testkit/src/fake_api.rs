//! A fake Anthropic Messages API: a real HTTP/1.1 server on 127.0.0.1, scripted
//! with one reply per expected request, recording every request it receives.
//! Every recorded request is checked for tool_use/tool_result pairing.

use std::collections::{HashMap, VecDeque};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// One scripted reply.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
    pub delay: Duration,
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
        }
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
    pub received_at: Instant,
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
}

/// The running fake. The server thread lives until the test process ends.
pub struct FakeApi {
    pub url: String,
    state: Arc<Mutex<State>>,
}

impl FakeApi {
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
        let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let reply = {
            let mut s = state.lock().unwrap();
            let from_responder = s.responder.as_ref().map(|r| r(&body));
            s.requests.push(Recorded {
                path,
                headers,
                body,
                received_at,
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
