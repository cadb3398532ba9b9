//! The daemon's clients: `submit`, `tasks`, `show`, `cancel`, `resume`,
//! `approvals`, `approve`, `deny`, `events`. Human-readable by default, `--json`
//! for scripts.
//!
//! Everything printed passes through [`crate::text::escape`]: fields as one-line
//! text, answers as multi-line text, JSON (`--json`, `events` lines) with JSON
//! escapes so it still parses to the same value. Approvals show every character
//! of a call's input, wrapped ([`crate::text::render_input`]).

use std::collections::HashSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::Value;

use super::EXIT_CONFIG;
use crate::agent::{StopReason, TaskStatus};
use crate::config::resolve;
use crate::control::client::{self, request, request_empty, stream_lines};
use crate::control::{
    Approval, ApprovalList, ClientError, DecisionRequest, DecisionResponse, SubmitRequest,
    SubmitResponse, Task, TaskList,
};
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

fn print_task(out: &mut impl Write, t: &Task) -> std::io::Result<()> {
    writeln!(
        out,
        "{:<30} {:<18} {:<13} {:>8} tokens {:>9}  {}",
        escape_line(&t.task_id),
        t.status.as_str(),
        t.stop_reason.map_or("-", StopReason::as_str),
        t.usage.total(),
        t.usd
            .map_or_else(|| "cost ?".to_string(), |d| format!("${d:.4}")),
        escape_line(&t.updated)
    )
}

/// One pending approval: who asks for what under which rule, then every
/// character of the input, wrapped at `width`.
fn print_approval(out: &mut impl Write, a: &Approval, width: usize) -> std::io::Result<()> {
    let r = &a.request;
    writeln!(
        out,
        "{}  {}  {}  rule {}",
        escape_line(&r.approval_id),
        escape_line(&r.task_id),
        escape_line(&r.tool),
        escape_line(&r.rule)
    )?;
    write!(out, "{}", crate::text::render_input(&r.input, width))
}

/// `--json`: the daemon's answer, pretty-printed.
fn print_json(value: &impl Serialize) -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(value)?;
    writeln!(std::io::stdout().lock(), "{}", escape_json(&text))?;
    Ok(())
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

/// `events` without a running daemon: the matching lines of events.jsonl, read
/// line by line (memory does not grow with the file). A line that does not parse
/// is never skipped silently (SPEC §7): each is named on stderr by file and line
/// number, the rest is still printed, and the exit code is 1.
fn read_events_file(root: &Path, task: Option<&str>, kind: Option<&str>) -> anyhow::Result<i32> {
    use std::io::BufRead as _;
    let loaded = match crate::commands::load_root(root) {
        Ok(l) => l,
        Err(code) => return Ok(code),
    };
    let path = &loaded.paths.events;
    let mut reader = match std::fs::File::open(path) {
        Ok(f) => std::io::BufReader::new(f),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => {
            warn(&format!("cannot read {}: {e}", path.display()));
            return Ok(1);
        }
    };
    let mut out = std::io::stdout().lock();
    let mut unreadable = 0;
    let mut buf = Vec::new();
    for number in 1.. {
        buf.clear();
        match reader.read_until(b'\n', &mut buf) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) => {
                warn(&format!("{}:{number}: cannot read on: {e}", path.display()));
                return Ok(1);
            }
        }
        let line = buf.strip_suffix(b"\n").unwrap_or(&buf);
        let ev = match serde_json::from_slice::<Value>(line) {
            Ok(ev) => ev,
            Err(e) => {
                unreadable += 1;
                warn(&format!(
                    "{}:{number}: unreadable line: {e}",
                    path.display()
                ));
                continue;
            }
        };
        if task.is_none_or(|t| ev["task_id"] == t) && kind.is_none_or(|k| ev["type"] == k) {
            // It parsed as JSON, so it is UTF-8.
            writeln!(out, "{}", escape_json(&String::from_utf8_lossy(line)))?;
        }
    }
    Ok(if unreadable == 0 { 0 } else { 1 })
}

/// A warning on stderr, escaped; a failed write (stderr on a full disk) is
/// ignored rather than a panic.
fn warn(message: &str) {
    let _ = writeln!(std::io::stderr(), "warning: {}", escape_text(message));
}

/// The warning for an `unreadable_line` object of the daemon's event stream.
fn warn_unreadable(obj: &Value) {
    let file = obj["file"].as_str().unwrap_or("events.jsonl");
    let error = obj["error"].as_str().unwrap_or("");
    warn(&format!(
        "{file}:{}: unreadable line: {error}",
        obj["line"].as_u64().unwrap_or(0)
    ));
}

async fn run_async(socket: &Path, cmd: ClientCommand, json_out: bool) -> anyhow::Result<i32> {
    let result = match cmd {
        ClientCommand::Events { task, kind, follow } => {
            events(socket, task.as_deref(), kind.as_deref(), follow).await
        }
        ClientCommand::Submit {
            prompt,
            max_turns,
            wait,
        } => submit(socket, SubmitRequest { prompt, max_turns }, wait, json_out).await,
        ClientCommand::Tasks => tasks(socket, json_out).await,
        ClientCommand::Show(id) => {
            one_task(socket, "GET", &format!("/v1/tasks/{}", enc(&id)), json_out).await
        }
        ClientCommand::Cancel(id) => {
            let path = format!("/v1/tasks/{}/cancel", enc(&id));
            one_task(socket, "POST", &path, json_out).await
        }
        ClientCommand::Resume(id) => {
            let path = format!("/v1/tasks/{}/resume", enc(&id));
            one_task(socket, "POST", &path, json_out).await
        }
        ClientCommand::Approvals => approvals(socket, json_out).await,
        ClientCommand::Answer {
            id,
            approve,
            reason,
        } => {
            answer(
                socket,
                &id,
                &DecisionRequest::new(approve, reason),
                json_out,
            )
            .await
        }
    };
    // An error the daemon answered with is the user's to read (exit 1); only a
    // failure to talk to the daemon at all goes up as an error of the command.
    match result {
        Err(e) => match e.downcast_ref::<ClientError>() {
            Some(ClientError::Api { message, .. }) => {
                eprintln!("error: {}", escape_text(message));
                Ok(1)
            }
            _ => Err(e),
        },
        ok => ok,
    }
}

/// `events`: the matching lines of the log, and with `follow` new ones as they
/// are written. Exit 1 when the daemon refuses the query or names a line of the
/// log that does not parse.
async fn events(
    socket: &Path,
    task: Option<&str>,
    kind: Option<&str>,
    follow: bool,
) -> anyhow::Result<i32> {
    let mut q = Vec::new();
    if let Some(t) = task {
        q.push(format!("task={}", enc(t)));
    }
    if let Some(k) = kind {
        q.push(format!("type={}", enc(k)));
    }
    if follow {
        q.push("follow=1".into());
    }
    let path = format!("/v1/events?{}", q.join("&"));
    let mut out = std::io::stdout().lock();
    let mut unreadable = false;
    let status = stream_lines(socket, &path, |line| {
        // The daemon names a line of the log that does not parse; a warning, and
        // exit 1 at the end, rather than an event among the others.
        if let Ok(obj) = serde_json::from_str::<Value>(line)
            && obj["type"] == "unreadable_line"
        {
            unreadable = true;
            warn_unreadable(&obj);
            return;
        }
        let _ = writeln!(out, "{}", escape_json(line));
        let _ = out.flush();
    })
    .await?;
    Ok(if status == 200 && !unreadable { 0 } else { 1 })
}

/// `submit`: prints the new task's id, or with `wait` follows it like `run`.
async fn submit(
    socket: &Path,
    body: SubmitRequest,
    wait: bool,
    json_out: bool,
) -> anyhow::Result<i32> {
    let SubmitResponse { task_id } = request(socket, "POST", "/v1/tasks", Some(&body)).await?;
    if wait {
        eprintln!("task {} submitted; waiting", escape_line(&task_id));
        return wait_for(socket, &task_id, json_out).await;
    }
    if json_out {
        print_json(&SubmitResponse { task_id })?;
    } else {
        writeln!(std::io::stdout().lock(), "{}", escape_line(&task_id))?;
    }
    Ok(0)
}

/// `tasks`: one line per task of the first page (the newest 50); a following
/// page is mentioned on stderr, so a script reading stdout still sees tasks only.
async fn tasks(socket: &Path, json_out: bool) -> anyhow::Result<i32> {
    let list: TaskList = request_empty(socket, "GET", "/v1/tasks").await?;
    if json_out {
        print_json(&list)?;
        return Ok(0);
    }
    let mut out = std::io::stdout().lock();
    for t in &list.tasks {
        print_task(&mut out, t)?;
    }
    if let Some(next) = &list.next {
        eprintln!(
            "(older tasks not shown: GET /v1/tasks?before={})",
            escape_line(next)
        );
    }
    Ok(0)
}

/// `show`, `cancel`, `resume`: each answers with the task, printed with its
/// answer if it has one.
async fn one_task(socket: &Path, method: &str, path: &str, json_out: bool) -> anyhow::Result<i32> {
    let t: Task = request_empty(socket, method, path).await?;
    if json_out {
        print_json(&t)?;
        return Ok(0);
    }
    let mut out = std::io::stdout().lock();
    print_task(&mut out, &t)?;
    if let Some(a) = t.answer.as_deref().filter(|a| !a.is_empty()) {
        writeln!(out, "\n{}", escape_text(a))?;
    }
    Ok(0)
}

/// `approvals`: every pending approval, a blank line between two.
async fn approvals(socket: &Path, json_out: bool) -> anyhow::Result<i32> {
    let list: ApprovalList = request_empty(socket, "GET", "/v1/approvals").await?;
    if json_out {
        print_json(&list)?;
        return Ok(0);
    }
    let width = crate::text::terminal_width(std::os::fd::AsFd::as_fd(&std::io::stdout()))
        .unwrap_or(crate::text::DEFAULT_WIDTH);
    let mut out = std::io::stdout().lock();
    for (i, a) in list.approvals.iter().enumerate() {
        if i > 0 {
            writeln!(out)?;
        }
        print_approval(&mut out, a, width)?;
    }
    Ok(0)
}

/// `approve` and `deny`.
async fn answer(
    socket: &Path,
    id: &str,
    body: &DecisionRequest,
    json_out: bool,
) -> anyhow::Result<i32> {
    let path = format!("/v1/approvals/{}", enc(id));
    let answered: DecisionResponse = request(socket, "POST", &path, Some(body)).await?;
    if json_out {
        print_json(&answered)?;
    } else {
        writeln!(
            std::io::stdout().lock(),
            "{} {}",
            escape_line(&answered.approval_id),
            escape_line(&answered.decision)
        )?;
    }
    Ok(0)
}

/// `submit --wait`: follows the task's events (the log so far, then new lines as
/// they are written) instead of polling; shows each approval it waits for as it is
/// requested, and at `task_finished` prints the answer and exits like `run`.
async fn wait_for(socket: &Path, id: &str, json_out: bool) -> anyhow::Result<i32> {
    let saw_finished = follow_until_finished(socket, id).await?;
    let Some(t) = finished_task(socket, id, saw_finished).await? else {
        eprintln!(
            "error: the daemon stopped before task {} finished",
            escape_line(id)
        );
        return Ok(StopReason::Error.exit_code());
    };
    if json_out {
        print_json(&t)?;
    } else if let Some(a) = t.answer.as_deref().filter(|a| !a.is_empty()) {
        writeln!(std::io::stdout().lock(), "{}", escape_text(a))?;
    }
    // A finished task without a stop reason is reported as an error, never as
    // success.
    let reason = t.stop_reason.unwrap_or(StopReason::Error);
    eprintln!("[done] {reason}");
    if let Some(e) = &t.error {
        eprintln!("error: {}", escape_text(e));
    }
    Ok(reason.exit_code())
}

/// How long `submit --wait` lets the daemon's task list catch up with a
/// `task_finished` it has already streamed: the task records the event, and the
/// scheduler marks it finished only once the task has returned.
const SETTLE: Duration = Duration::from_secs(5);

/// Task `id` once the daemon lists it as finished; `None` when it does not (it
/// stopped, forgot the task, or answered with something else), which the caller
/// reports as an error, never as success. After `task_finished` was seen, a task
/// still listed as running is asked again until [`SETTLE`] passes.
async fn finished_task(
    socket: &Path,
    id: &str,
    saw_finished: bool,
) -> Result<Option<Task>, ClientError> {
    let path = format!("/v1/tasks/{}", enc(id));
    let deadline = Instant::now() + SETTLE;
    loop {
        match request_empty::<Task>(socket, "GET", &path).await {
            Ok(t) if t.status == TaskStatus::Finished => return Ok(Some(t)),
            Ok(t) if saw_finished && t.status != TaskStatus::Interrupted => {
                if Instant::now() >= deadline {
                    return Ok(None);
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Ok(_) | Err(ClientError::Api { .. } | ClientError::Decode { .. }) => return Ok(None),
            Err(e) => return Err(e),
        }
    }
}

/// Reads task `id`'s events until `task_finished` (or the end of the stream),
/// showing each approval it waits for as it is requested; whether
/// `task_finished` came.
async fn follow_until_finished(socket: &Path, id: &str) -> anyhow::Result<bool> {
    let path = format!("/v1/events?task={}&follow=1&text=1", enc(id));
    let mut events = client::LineStream::open(socket, &path).await?;
    let mut shown = HashSet::new();
    let mut mid_text = false;
    while let Some(line) = events.next_line().await? {
        let Ok(event) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        match event["type"].as_str() {
            // The model's text as it streams, escaped like an answer.
            Some("text_delta") => {
                let text = event["text"].as_str().unwrap_or("");
                let mut err = std::io::stderr().lock();
                let _ = write!(err, "{}", escape_text(text));
                let _ = err.flush();
                if !text.is_empty() {
                    mid_text = !text.ends_with('\n');
                }
            }
            Some("task_finished") if mid_text => {
                eprintln!();
                return Ok(true);
            }
            Some("unreadable_line") => warn_unreadable(&event),
            Some("approval_requested") => show_waiting_approvals(socket, id, &mut shown).await?,
            Some("task_finished") => return Ok(true),
            _ => {}
        }
    }
    Ok(false)
}

/// Prints on stderr each approval task `id` waits for that is not in `shown` yet,
/// with every character of its input and how to answer it.
async fn show_waiting_approvals(
    socket: &Path,
    id: &str,
    shown: &mut HashSet<String>,
) -> anyhow::Result<()> {
    // The list is a courtesy while waiting: if the daemon refuses it, the wait
    // goes on without it.
    let list = match request_empty::<ApprovalList>(socket, "GET", "/v1/approvals").await {
        Ok(list) => list,
        Err(ClientError::Api { .. } | ClientError::Decode { .. }) => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    let width = crate::text::terminal_width(std::os::fd::AsFd::as_fd(&std::io::stderr()))
        .unwrap_or(crate::text::DEFAULT_WIDTH);
    let mut err = std::io::stderr().lock();
    for a in &list.approvals {
        let approval = &a.request.approval_id;
        if a.request.task_id != id || !shown.insert(approval.clone()) {
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
