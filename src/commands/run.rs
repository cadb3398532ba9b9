//! `harnessd run "TASK"`: one task in-process. Answer on stdout, progress on
//! stderr, exit code from the stop reason (docs/commands.md).

use super::error::{CliError, exit};
use super::terminal_approver::TerminalApprover;
use std::future::Future;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use futures::stream::BoxStream;
use tokio_util::sync::CancellationToken;

use super::EXIT_CONFIG;
use crate::agent::{RunLock, TaskSpec, new_task_id, run_task};
use crate::remember::LiveRemember;
use crate::services::{Services, StartOptions};
use crate::text::{escape_line, escape_text};

/// Options of `run`.
#[derive(Debug)]
pub struct RunOptions {
    /// The root.
    pub root: PathBuf,
    /// The prompt.
    pub task: String,
    /// Approve every ask-tier call.
    pub yes: bool,
    /// Override loop.max_turns.
    pub max_turns: Option<u32>,
    /// Exit 5 when the task ended its turn but a call was denied or refused.
    pub strict: bool,
    /// The helper binary (this executable).
    pub helper: PathBuf,
}

/// Runs `run` on a fresh tokio runtime; returns the exit code. A config error comes
/// back as [`crate::services::StartError::Config`] for `main` to show (exit 2).
pub fn run(opts: RunOptions, env: impl Fn(&str) -> Option<String>) -> Result<ExitCode, CliError> {
    if opts.max_turns == Some(0) {
        eprintln!("error: --max-turns must be at least 1");
        return Ok(exit(EXIT_CONFIG));
    }
    let runtime = super::runtime()?;
    runtime.block_on(async {
        // Installed here, at the top, and handed down (docs/commands.md: Ctrl-C exits 130).
        let interrupted = super::signals::interrupt()?;
        run_async(opts, env, interrupted, super::signals::hangups()).await
    })
}

async fn run_async(
    opts: RunOptions,
    env: impl Fn(&str) -> Option<String>,
    interrupted: impl Future<Output = ()> + Send + 'static,
    hangups: BoxStream<'static, ()>,
) -> Result<ExitCode, CliError> {
    let (tap_tx, tap_rx) = tokio::sync::mpsc::unbounded_channel();
    // The elapsed-time line only where a person watches: a terminal on stderr.
    let live = std::io::IsTerminal::is_terminal(&std::io::stderr());
    // `run`, not the daemon: the printer is awaited before `run` returns.
    let printer = tokio::spawn(super::progress::print(tap_rx, live));
    let live_text = tap_tx.clone();
    let start = StartOptions {
        helper: opts.helper.clone(),
        tap: Some(tap_tx),
        hangups,
        record_daemon_started: false,
    };
    // The probe's verdict is already on stderr and, if weakened, in the executor.
    let services = Services::start(&opts.root, env, start).await?;
    let cancel = CancellationToken::new();
    let on_interrupt = cancel.clone();
    // Only waits for Ctrl-C and cancels a token: dropped with the runtime, it
    // leaves nothing half written.
    tokio::spawn(async move {
        interrupted.await;
        on_interrupt.cancel();
    });
    // `[a]lways` at the prompt writes the call's allow rule and reloads at once.
    let remember = LiveRemember::new(services.live.clone(), services.events.clone());
    let approver = TerminalApprover::new(opts.yes).with_remember(Arc::new(remember));
    let env = {
        let mut task_services = services.task_services(Arc::new(approver));
        // The model's text streams to the same printer as the progress lines; only
        // `env` keeps the sender, so the printer ends when `env` is dropped.
        task_services.live_text = Some(live_text);
        task_services.for_task(cancel)
    };
    let spec = TaskSpec {
        task_id: new_task_id(),
        prompt: opts.task,
        max_turns: opts.max_turns,
        source: crate::protocol::Source::Cli,
        by: "cli".into(),
        resume: None,
        resume_recorded: false,
    };
    // Held for the whole run, so a daemon on the same root neither marks this task
    // interrupted nor resumes it while it runs.
    let lock = RunLock::acquire(&services.loaded.paths.transcripts, &spec.task_id)?;
    // A panic in the task comes back as an `error` outcome (exit 1), not an unwind.
    let outcome = run_task(&env, &spec).await;
    drop(lock);
    let loaded = services.loaded.clone();
    services.shutdown().await;
    // The last handles to the audit log: the printer ends once every line is out.
    drop(env);
    let calls = printer.await.unwrap_or_default();
    let outcome = outcome?;
    let transcript = crate::agent::Transcript::path(&loaded.paths.transcripts, &spec.task_id);
    eprintln!(
        "transcript: {}",
        escape_line(&loaded.paths.display(&transcript))
    );
    if let Some(e) = &outcome.error {
        eprintln!("error: {}", escape_text(&e.to_string()));
    }
    let mut out = std::io::stdout().lock();
    // The answer is model text: newlines stay, controls are escaped (docs/commands.md).
    if !outcome.answer.is_empty() {
        writeln!(out, "{}", escape_text(&outcome.answer))?;
    }
    out.flush()?;
    drop(out);
    // Last, so a cron job's log ends with what its agent was let do.
    eprintln!("{}", calls.line());
    Ok(exit(
        calls.exit_code(outcome.stop_reason.exit_code(), opts.strict),
    ))
}
