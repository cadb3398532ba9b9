//! The daemon's clients: `submit`, `tasks`, `cancel`, `resume`,
//! `approvals`, `approve`, `deny` (`events` is [`super::events`], `show`
//! [`super::show`]: both read the files and need no daemon). Human-readable by default, `--json`
//! for scripts.
//!
//! Everything printed passes through [`crate::text::escape`]: fields as one-line
//! text, answers as multi-line text, JSON (`--json`, `events` lines) with JSON
//! escapes so it still parses to the same value. Approvals show every character
//! of a call's input, wrapped ([`crate::text::render_input`]).

use super::error::{CliError, exit};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde::Serialize;
use serde_json::Value;

use super::EXIT_CONFIG;
use crate::config::resolve;
use crate::control::ClientError;
use crate::control::client::{request, request_empty};
use crate::protocol::TaskStatus;
use crate::protocol::{
    ApprovalList, DecisionRequest, DecisionResponse, LinkRequest, LinkResponse, SubmitRequest,
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
        /// Override of api.model.
        model: Option<String>,
        /// The caller's W3C traceparent.
        traceparent: Option<String>,
        /// Follow it to the end and exit like `run`.
        wait: bool,
        /// With `wait`: exit 5 when a call was denied or refused.
        strict: bool,
    },
    /// List tasks.
    Tasks,
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
        /// Also remember the call as an allow rule.
        remember: bool,
    },
    /// A console login link.
    ConsoleUrl {
        /// Who it is for; the caller's user name when unset.
        name: Option<String>,
    },
}

/// The prompt of `submit`: TASK, or the text of `file` (`-`: standard input).
/// An unreadable or non-UTF-8 file is a usage error (exit 2) naming it.
pub fn prompt_from(task: Option<String>, file: Option<&Path>) -> Result<String, i32> {
    let Some(file) = file else {
        return Ok(task.unwrap_or_default());
    };
    let read = if file == Path::new("-") {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin().lock(), &mut text).map(|_| text)
    } else {
        std::fs::read_to_string(file)
    };
    read.map_err(|e| {
        let name = if file == Path::new("-") {
            "standard input".to_string()
        } else {
            file.display().to_string()
        };
        eprintln!(
            "error: cannot read the prompt from {}: {e}",
            escape_line(&name)
        );
        EXIT_CONFIG
    })
}

/// The control socket of `root`, from its config.toml alone.
pub fn socket_of(root: &Path) -> Result<PathBuf, String> {
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

/// `s` percent-encoded for a URL path or query.
pub fn enc(s: &str) -> String {
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

/// `--json`: the daemon's answer, pretty-printed.
pub(super) fn print_json(value: &impl Serialize) -> Result<(), CliError> {
    let text = serde_json::to_string_pretty(value)?;
    writeln!(std::io::stdout().lock(), "{}", escape_json(&text))?;
    Ok(())
}

/// Runs a client command.
pub fn run(root: &Path, cmd: ClientCommand, json_out: bool) -> Result<ExitCode, CliError> {
    let socket = match socket_of(root) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {}", escape_text(&e));
            return Ok(exit(EXIT_CONFIG));
        }
    };
    // `tasks` with no daemon reads the transcripts instead (a permission error is
    // not "no daemon": it is reported as such by the request below).
    if matches!(cmd, ClientCommand::Tasks)
        && let Err(e) = std::os::unix::net::UnixStream::connect(&socket)
        && matches!(
            e.kind(),
            std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused
        )
    {
        return super::tasks_offline::run(root, json_out);
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let prefix = super::wait::CommandPrefix::for_root(root);
    runtime.block_on(run_async(&socket, cmd, json_out, &prefix))
}

/// A warning on stderr, escaped; a failed write (stderr on a full disk) is
/// ignored rather than a panic.
pub(crate) fn warn(message: &str) {
    let _ = writeln!(std::io::stderr(), "warning: {}", escape_text(message));
}

/// The warning for an `unreadable_line` object of the daemon's event stream.
pub(crate) fn warn_unreadable(obj: &Value) {
    let file = obj["file"].as_str().unwrap_or("events.jsonl");
    let error = obj["error"].as_str().unwrap_or("");
    warn(&format!(
        "{file}:{}: unreadable line: {error}",
        obj["line"].as_u64().unwrap_or(0)
    ));
}

async fn run_async(
    socket: &Path,
    cmd: ClientCommand,
    json_out: bool,
    prefix: &super::wait::CommandPrefix,
) -> Result<ExitCode, CliError> {
    let result = match cmd {
        ClientCommand::Submit {
            prompt,
            max_turns,
            model,
            traceparent,
            wait,
            strict,
        } => {
            let body = SubmitRequest {
                prompt,
                max_turns,
                model,
                traceparent,
            };
            let wait = wait.then_some(strict);
            submit(socket, body, wait, json_out, prefix).await
        }
        ClientCommand::Tasks => tasks(socket, json_out).await,
        ClientCommand::Cancel(id) => cancel(socket, &id, json_out).await,
        ClientCommand::Resume(id) => {
            let path = format!("/v1/tasks/{}/resume", enc(&id));
            one_task(socket, "POST", &path, json_out).await
        }
        ClientCommand::Approvals => approvals(socket, json_out).await,
        ClientCommand::Answer {
            id,
            approve,
            reason,
            remember,
        } => {
            let mut body = DecisionRequest::new(approve, reason);
            body.remember = remember;
            answer(socket, &id, &body, json_out).await
        }
        ClientCommand::ConsoleUrl { name } => console_url(socket, name, json_out).await,
    };
    // An error the daemon answered with is the user's to read (exit 1); only a
    // failure to talk to the daemon at all goes up as an error of the command.
    match result {
        Err(CliError::Client(ClientError::Api { message, .. })) => {
            eprintln!("error: {}", escape_text(&message));
            Ok(ExitCode::FAILURE)
        }
        ok => ok,
    }
}

/// `submit`: prints the new task's id, or with `wait` (`Some(strict)`) follows it
/// like `run`.
async fn submit(
    socket: &Path,
    body: SubmitRequest,
    wait: Option<bool>,
    json_out: bool,
    prefix: &super::wait::CommandPrefix,
) -> Result<ExitCode, CliError> {
    let SubmitResponse { task_id } = request(socket, "POST", "/v1/tasks", Some(&body)).await?;
    if let Some(strict) = wait {
        eprintln!(
            "task {} submitted; waiting (approvals it asks for are shown here)",
            escape_line(&task_id)
        );
        return super::wait::wait_for(socket, &task_id, json_out, strict, prefix).await;
    }
    if json_out {
        print_json(&SubmitResponse { task_id })?;
    } else {
        writeln!(std::io::stdout().lock(), "{}", escape_line(&task_id))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `tasks`: one line per task of the first page (the newest 50); a following
/// page is mentioned on stderr, so a script reading stdout still sees tasks only.
async fn tasks(socket: &Path, json_out: bool) -> Result<ExitCode, CliError> {
    let list: TaskList = request_empty(socket, "GET", "/v1/tasks").await?;
    if json_out {
        print_json(&list)?;
        return Ok(ExitCode::SUCCESS);
    }
    super::listing::print_tasks(&mut std::io::stdout().lock(), &list.tasks)?;
    if let Some(next) = &list.next {
        eprintln!(
            "(older tasks not shown: GET /v1/tasks?before={})",
            escape_line(next)
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `show`, `cancel`, `resume`: each answers with the task, printed with its
/// answer if it has one.
async fn one_task(
    socket: &Path,
    method: &str,
    path: &str,
    json_out: bool,
) -> Result<ExitCode, CliError> {
    let t: Task = request_empty(socket, method, path).await?;
    if json_out {
        print_json(&t)?;
        return Ok(ExitCode::SUCCESS);
    }
    super::listing::print_task(&mut std::io::stdout().lock(), &t)?;
    Ok(ExitCode::SUCCESS)
}

/// How long `cancel` waits for the task to stop before it shows what it has.
const CANCEL_SETTLE: std::time::Duration = std::time::Duration::from_secs(10);

/// `cancel`: asks the daemon to cancel, then shows the task once it has stopped
/// (its tool's process tree killed, its transcript saved), so what is printed is
/// the state after the cancel, not the `running` of the moment it was asked.
async fn cancel(socket: &Path, id: &str, json_out: bool) -> Result<ExitCode, CliError> {
    let mut t: Task =
        request_empty(socket, "POST", &format!("/v1/tasks/{}/cancel", enc(id))).await?;
    let path = format!("/v1/tasks/{}", enc(id));
    let deadline = std::time::Instant::now() + CANCEL_SETTLE;
    while !matches!(t.status, TaskStatus::Finished | TaskStatus::Interrupted)
        && std::time::Instant::now() < deadline
    {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        t = request_empty(socket, "GET", &path).await?;
    }
    if json_out {
        print_json(&t)?;
    } else {
        super::listing::print_task(&mut std::io::stdout().lock(), &t)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `console-url`: asks the daemon for a one-time link and prints it: the whole URL
/// on `daemon.listen`, or without one the path to open on a port forwarded to the
/// socket (`ssh -L`).
async fn console_url(
    socket: &Path,
    name: Option<String>,
    json_out: bool,
) -> Result<ExitCode, CliError> {
    let name = name.unwrap_or_else(|| {
        nix::unistd::User::from_uid(nix::unistd::Uid::current())
            .ok()
            .flatten()
            .map_or_else(|| format!("uid{}", nix::unistd::Uid::current()), |u| u.name)
    });
    let link: LinkResponse = request(
        socket,
        "POST",
        "/v1/console/links",
        Some(&LinkRequest { name }),
    )
    .await?;
    if json_out {
        print_json(&link)?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut out = std::io::stdout().lock();
    match &link.url {
        Some(url) => writeln!(out, "{}", escape_line(url))?,
        None => {
            writeln!(out, "{}", escape_line(&link.path))?;
            eprintln!(
                "daemon.listen is not set: forward the socket (ssh -L 8080:{} host) and open \
                 http://localhost:8080 followed by this path",
                escape_line(&socket.display().to_string())
            );
        }
    }
    eprintln!(
        "the link works once, until {}",
        escape_line(&link.expires_at)
    );
    Ok(ExitCode::SUCCESS)
}

/// `approvals`: a table of every pending approval, then each one's input.
async fn approvals(socket: &Path, json_out: bool) -> Result<ExitCode, CliError> {
    let list: ApprovalList = request_empty(socket, "GET", "/v1/approvals").await?;
    if json_out {
        print_json(&list)?;
        return Ok(ExitCode::SUCCESS);
    }
    let width = crate::text::terminal_width(std::os::fd::AsFd::as_fd(&std::io::stdout()))
        .unwrap_or(crate::text::DEFAULT_WIDTH);
    super::listing::print_approvals(&mut std::io::stdout().lock(), &list.approvals, width)?;
    Ok(ExitCode::SUCCESS)
}

/// `approve` and `deny`.
async fn answer(
    socket: &Path,
    id: &str,
    body: &DecisionRequest,
    json_out: bool,
) -> Result<ExitCode, CliError> {
    let path = format!("/v1/approvals/{}", enc(id));
    let answered: DecisionResponse = request(socket, "POST", &path, Some(body)).await?;
    if json_out {
        print_json(&answered)?;
    } else {
        let mut out = std::io::stdout().lock();
        writeln!(
            out,
            "{} {}",
            escape_line(&answered.approval_id),
            escape_line(&answered.decision)
        )?;
        // Rules hold the call's text (model text): one-line escapes.
        for rule in answered.remembered.iter().flatten() {
            writeln!(out, "remembered: {}", escape_line(rule))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
