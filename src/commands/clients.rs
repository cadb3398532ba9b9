//! The daemon's clients: `submit`, `tasks`, `show`, `cancel`, `resume`,
//! `approvals`, `approve`, `deny`, `events`. Human-readable by default, `--json`
//! for scripts.
//!
//! Everything printed passes through [`crate::text::escape`]: fields as one-line
//! text, answers as multi-line text, JSON (`--json`, `events` lines) with JSON
//! escapes so it still parses to the same value. Approvals show every character
//! of a call's input, wrapped ([`crate::text::render_input`]).

use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::EXIT_CONFIG;
use crate::agent::{StopReason, TaskStatus};
use crate::config::resolve;
use crate::daemon::client::{self, call, stream_lines};
use crate::text::{escape_json, escape_line, escape_text};

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

/// A string field of a daemon reply, escaped for one line.
fn field<'a>(v: &'a Value, default: &'a str) -> std::borrow::Cow<'a, str> {
    escape_line(v.as_str().unwrap_or(default))
}

fn print_task(out: &mut impl Write, t: &Value) -> std::io::Result<()> {
    writeln!(
        out,
        "{:<30} {:<18} {:<13} {:>8} tokens  {}",
        field(&t["task_id"], ""),
        field(&t["status"], ""),
        field(&t["stop_reason"], "-"),
        [
            "input_tokens",
            "output_tokens",
            "cache_read_input_tokens",
            "cache_creation_input_tokens"
        ]
        .iter()
        .map(|k| t["usage"][k].as_u64().unwrap_or(0))
        .sum::<u64>(),
        field(&t["updated"], "")
    )
}

/// One pending approval: who asks for what under which rule, then every
/// character of the input, wrapped at `width`.
fn print_approval(out: &mut impl Write, a: &Value, width: usize) -> std::io::Result<()> {
    writeln!(
        out,
        "{}  {}  {}  rule {}",
        field(&a["approval_id"], ""),
        field(&a["task_id"], ""),
        field(&a["tool"], ""),
        field(&a["rule"], "")
    )?;
    write!(out, "{}", crate::text::render_input(&a["input"], width))
}

/// Runs a client command.
pub fn run(root: &Path, cmd: ClientCommand, json_out: bool) -> anyhow::Result<i32> {
    let socket = match socket_of(root) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {}", escape_text(&e));
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
            writeln!(out, "{}", escape_json(line))?;
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
                let _ = writeln!(out, "{}", escape_json(line));
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
        eprintln!("error: {}", escape_text(&api_error(&body, status)));
        return Ok(1);
    }
    if json_out && !matches!(cmd, ClientCommand::Submit { wait: true, .. }) {
        writeln!(
            out,
            "{}",
            escape_json(&serde_json::to_string_pretty(&body)?)
        )?;
        return Ok(0);
    }
    match cmd {
        ClientCommand::Submit { wait, .. } => {
            let id = body["task_id"].as_str().unwrap_or("").to_string();
            if !wait {
                writeln!(out, "{}", escape_line(&id))?;
                return Ok(0);
            }
            eprintln!("task {} submitted; waiting", escape_line(&id));
            return wait_for(socket, &id, json_out).await;
        }
        ClientCommand::Tasks => {
            for t in body["tasks"].as_array().into_iter().flatten() {
                print_task(&mut out, t)?;
            }
        }
        ClientCommand::Show(_) | ClientCommand::Cancel(_) | ClientCommand::Resume(_) => {
            print_task(&mut out, &body)?;
            if let Some(a) = body["answer"].as_str().filter(|a| !a.is_empty()) {
                writeln!(out, "\n{}", escape_text(a))?;
            }
        }
        ClientCommand::Approvals => {
            let width = crate::text::terminal_width(std::os::fd::AsFd::as_fd(&std::io::stdout()))
                .unwrap_or(crate::text::DEFAULT_WIDTH);
            for (i, a) in body["approvals"]
                .as_array()
                .into_iter()
                .flatten()
                .enumerate()
            {
                if i > 0 {
                    writeln!(out)?;
                }
                print_approval(&mut out, a, width)?;
            }
        }
        ClientCommand::Answer { .. } => {
            writeln!(
                out,
                "{} {}",
                field(&body["approval_id"], ""),
                field(&body["decision"], "")
            )?;
        }
        ClientCommand::Events { .. } => {}
    }
    Ok(0)
}

/// For `submit --wait`: prints on stderr each approval task `id` waits for that
/// is not in `shown` yet, with every character of its input and how to answer it.
/// `submit --wait`: follows the task's events (the log so far, then new lines as
/// they are written) instead of polling; shows each approval it waits for as it is
/// requested, and at `task_finished` prints the answer and exits like `run`.
async fn wait_for(socket: &Path, id: &str, json_out: bool) -> anyhow::Result<i32> {
    let path = format!("/v1/events?task={}&follow=1", enc(id));
    let mut events = client::LineStream::open(socket, &path).await?;
    let mut shown = std::collections::HashSet::new();
    while let Some(line) = events.next_line().await? {
        let Ok(event) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        match event["type"].as_str() {
            Some("approval_requested") => show_waiting_approvals(socket, id, &mut shown).await?,
            Some("task_finished") => break,
            _ => {}
        }
    }
    let (_, t) = call(socket, "GET", &format!("/v1/tasks/{}", enc(id)), None).await?;
    if serde_json::from_value::<TaskStatus>(t["status"].clone()).ok() != Some(TaskStatus::Finished)
    {
        eprintln!(
            "error: the daemon stopped before task {} finished",
            escape_line(id)
        );
        return Ok(StopReason::Error.exit_code());
    }
    let mut out = std::io::stdout().lock();
    if json_out {
        writeln!(out, "{}", escape_json(&serde_json::to_string_pretty(&t)?))?;
    } else if let Some(a) = t["answer"].as_str().filter(|a| !a.is_empty()) {
        writeln!(out, "{}", escape_text(a))?;
    }
    // A finished task without a readable stop reason is reported as an error, never
    // as success.
    let reason =
        serde_json::from_value::<StopReason>(t["stop_reason"].clone()).unwrap_or(StopReason::Error);
    eprintln!("[done] {reason}");
    if let Some(e) = t["error"].as_str() {
        eprintln!("error: {}", escape_text(e));
    }
    Ok(reason.exit_code())
}

async fn show_waiting_approvals(
    socket: &Path,
    id: &str,
    shown: &mut std::collections::HashSet<String>,
) -> anyhow::Result<()> {
    let (_, list) = call(socket, "GET", "/v1/approvals", None).await?;
    let width = crate::text::terminal_width(std::os::fd::AsFd::as_fd(&std::io::stderr()))
        .unwrap_or(crate::text::DEFAULT_WIDTH);
    let mut err = std::io::stderr().lock();
    for a in list["approvals"].as_array().into_iter().flatten() {
        let approval = a["approval_id"].as_str().unwrap_or("");
        if a["task_id"] != id || !shown.insert(approval.to_string()) {
            continue;
        }
        writeln!(err, "waiting for approval:")?;
        print_approval(&mut err, a, width)?;
        let approval = escape_line(approval);
        writeln!(
            err,
            "answer: harnessd approve {approval}  |  harnessd deny {approval} [--reason R]"
        )?;
    }
    Ok(())
}
