//! The daemon's clients: `submit`, `tasks`, `show`, `cancel`, `resume`,
//! `approvals`, `approve`, `deny`, `events`. Human-readable by default, `--json`
//! for scripts.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

use super::EXIT_CONFIG;
use crate::agent::StopReason;
use crate::config::resolve;
use crate::daemon::client::{call, stream_lines};

/// One client command.
#[derive(Debug)]
pub enum ClientCommand {
    /// Submit a task.
    Submit {
        /// The prompt.
        prompt: String,
        /// Override of loop.max_turns.
        max_turns: Option<u32>,
        /// Follow it to the end and exit like `run`.
        wait: bool,
    },
    /// List tasks.
    Tasks,
    /// Show one task.
    Show(String),
    /// Cancel a task.
    Cancel(String),
    /// Resume a task.
    Resume(String),
    /// List pending approvals.
    Approvals,
    /// Approve or deny.
    Answer {
        /// Approval id.
        id: String,
        /// Approve (true) or deny.
        approve: bool,
        /// Reason for the model.
        reason: Option<String>,
    },
    /// Read the audit log.
    Events {
        /// Only this task.
        task: Option<String>,
        /// Only this type.
        kind: Option<String>,
        /// Keep streaming.
        follow: bool,
    },
}

fn socket_of(root: &Path) -> Result<PathBuf, String> {
    // Only config.toml is needed to find the socket; read it without the policy.
    let text = std::fs::read_to_string(root.join(crate::config::CONFIG_FILE))
        .map_err(|e| format!("{}: {e}", root.join(crate::config::CONFIG_FILE).display()))?;
    let config = crate::config::Config::parse(&text, crate::config::CONFIG_FILE)
        .map_err(|e| e.to_string())?;
    let root = root
        .canonicalize()
        .map_err(|e| format!("{}: {e}", root.display()))?;
    Ok(resolve(&root, &config.daemon.socket))
}

fn api_error(v: &Value, status: u16) -> String {
    v["error"]["message"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| format!("HTTP {status}"))
}

fn enc(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                c.to_string()
            } else {
                format!("%{:02X}", c as u32)
            }
        })
        .collect()
}

fn print_task(out: &mut impl Write, t: &Value) -> std::io::Result<()> {
    writeln!(
        out,
        "{:<30} {:<18} {:<13} {:>8} tokens  {}",
        t["task_id"].as_str().unwrap_or(""),
        t["status"].as_str().unwrap_or(""),
        t["stop_reason"].as_str().unwrap_or("-"),
        [
            "input_tokens",
            "output_tokens",
            "cache_read_input_tokens",
            "cache_creation_input_tokens"
        ]
        .iter()
        .map(|k| t["usage"][k].as_u64().unwrap_or(0))
        .sum::<u64>(),
        t["updated"].as_str().unwrap_or("")
    )
}

/// Runs a client command.
pub fn run(root: &Path, cmd: ClientCommand, json_out: bool) -> anyhow::Result<i32> {
    let socket = match socket_of(root) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(EXIT_CONFIG);
        }
    };
    // Reading the log needs no daemon: without one, read the file itself.
    if let ClientCommand::Events {
        task,
        kind,
        follow: false,
    } = &cmd
        && std::os::unix::net::UnixStream::connect(&socket).is_err()
    {
        return read_events_file(root, task.as_deref(), kind.as_deref());
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(run_async(&socket, cmd, json_out))
}

/// `events` without a running daemon: the matching lines of events.jsonl.
fn read_events_file(root: &Path, task: Option<&str>, kind: Option<&str>) -> anyhow::Result<i32> {
    let loaded = match crate::commands::load_root(root) {
        Ok(l) => l,
        Err(code) => return Ok(code),
    };
    let text = std::fs::read_to_string(&loaded.paths.events).unwrap_or_default();
    let mut out = std::io::stdout().lock();
    for line in text.lines() {
        let Ok(ev) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if task.is_none_or(|t| ev["task_id"] == t) && kind.is_none_or(|k| ev["type"] == k) {
            writeln!(out, "{line}")?;
        }
    }
    Ok(0)
}

async fn run_async(socket: &Path, cmd: ClientCommand, json_out: bool) -> anyhow::Result<i32> {
    let mut out = std::io::stdout().lock();
    let (status, body) = match &cmd {
        ClientCommand::Events { task, kind, follow } => {
            let mut q = Vec::new();
            if let Some(t) = task {
                q.push(format!("task={}", enc(t)));
            }
            if let Some(k) = kind {
                q.push(format!("type={}", enc(k)));
            }
            if *follow {
                q.push("follow=1".into());
            }
            let path = format!("/v1/events?{}", q.join("&"));
            let status = stream_lines(socket, &path, |line| {
                let _ = writeln!(out, "{line}");
                let _ = out.flush();
            })
            .await?;
            return Ok(if status == 200 { 0 } else { 1 });
        }
        ClientCommand::Submit {
            prompt, max_turns, ..
        } => {
            let mut body = json!({"prompt": prompt});
            if let Some(m) = max_turns {
                body["max_turns"] = json!(m);
            }
            call(socket, "POST", "/v1/tasks", Some(&body)).await?
        }
        ClientCommand::Tasks => call(socket, "GET", "/v1/tasks", None).await?,
        ClientCommand::Show(id) => {
            call(socket, "GET", &format!("/v1/tasks/{}", enc(id)), None).await?
        }
        ClientCommand::Cancel(id) => {
            call(
                socket,
                "POST",
                &format!("/v1/tasks/{}/cancel", enc(id)),
                None,
            )
            .await?
        }
        ClientCommand::Resume(id) => {
            call(
                socket,
                "POST",
                &format!("/v1/tasks/{}/resume", enc(id)),
                None,
            )
            .await?
        }
        ClientCommand::Approvals => call(socket, "GET", "/v1/approvals", None).await?,
        ClientCommand::Answer {
            id,
            approve,
            reason,
        } => {
            let body =
                json!({"decision": if *approve { "approve" } else { "deny" }, "reason": reason});
            call(
                socket,
                "POST",
                &format!("/v1/approvals/{}", enc(id)),
                Some(&body),
            )
            .await?
        }
    };
    if status >= 400 {
        eprintln!("error: {}", api_error(&body, status));
        return Ok(1);
    }
    if json_out && !matches!(cmd, ClientCommand::Submit { wait: true, .. }) {
        writeln!(out, "{}", serde_json::to_string_pretty(&body)?)?;
        return Ok(0);
    }
    match cmd {
        ClientCommand::Submit { wait, .. } => {
            let id = body["task_id"].as_str().unwrap_or("").to_string();
            if !wait {
                writeln!(out, "{id}")?;
                return Ok(0);
            }
            eprintln!("task {id} submitted; waiting");
            loop {
                tokio::time::sleep(Duration::from_millis(200)).await;
                let (_, t) = call(socket, "GET", &format!("/v1/tasks/{}", enc(&id)), None).await?;
                if t["status"] == "finished" {
                    if json_out {
                        writeln!(out, "{}", serde_json::to_string_pretty(&t)?)?;
                    } else if let Some(a) = t["answer"].as_str().filter(|a| !a.is_empty()) {
                        writeln!(out, "{a}")?;
                    }
                    let reason = t["stop_reason"].as_str().unwrap_or("error");
                    return Ok(stop_reason_code(reason));
                }
            }
        }
        ClientCommand::Tasks => {
            for t in body["tasks"].as_array().into_iter().flatten() {
                print_task(&mut out, t)?;
            }
        }
        ClientCommand::Show(_) | ClientCommand::Cancel(_) | ClientCommand::Resume(_) => {
            print_task(&mut out, &body)?;
            if let Some(a) = body["answer"].as_str().filter(|a| !a.is_empty()) {
                writeln!(out, "\n{a}")?;
            }
        }
        ClientCommand::Approvals => {
            for a in body["approvals"].as_array().into_iter().flatten() {
                writeln!(
                    out,
                    "{:<18} {:<30} {:<11} rule {:<28} {}",
                    a["approval_id"].as_str().unwrap_or(""),
                    a["task_id"].as_str().unwrap_or(""),
                    a["tool"].as_str().unwrap_or(""),
                    a["rule"].as_str().unwrap_or(""),
                    crate::text::truncate_middle(&a["input"].to_string(), 80, 0).0
                )?;
            }
        }
        ClientCommand::Answer { .. } => {
            writeln!(
                out,
                "{} {}",
                body["approval_id"].as_str().unwrap_or(""),
                body["decision"].as_str().unwrap_or("")
            )?;
        }
        ClientCommand::Events { .. } => {}
    }
    Ok(0)
}

fn stop_reason_code(reason: &str) -> i32 {
    let all = [
        StopReason::EndTurn,
        StopReason::MaxTurns,
        StopReason::TokenBudget,
        StopReason::NoProgress,
        StopReason::MaxTokens,
        StopReason::Refusal,
        StopReason::Cancelled,
        StopReason::Error,
    ];
    all.iter()
        .find(|r| r.as_str() == reason)
        .map_or(1, |r| r.exit_code())
}
