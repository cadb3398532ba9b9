//! `harnessd run "TASK"`: one task in-process. Answer on stdout, progress on
//! stderr, exit code from the stop reason (SPEC §8).

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::EXIT_CONFIG;
use crate::agent::{TaskEnv, TaskSpec, new_task_id, run_task};
use crate::approval::TerminalApprover;
use crate::config::{LiveConfig, Loaded};
use crate::exec::Executor;
use crate::llm::AnthropicClient;
use crate::text::{escape_line, escape_text};

/// Options of `run`.
#[derive(Debug)]
pub struct RunOptions {
    /// The root.
    pub root: PathBuf,
    /// The task.
    pub task: String,
    /// Approve every ask-tier call.
    pub yes: bool,
    /// Override loop.max_turns.
    pub max_turns: Option<u32>,
    /// The helper binary (this executable).
    pub helper: PathBuf,
}

fn config_error(e: impl std::fmt::Display) -> i32 {
    eprintln!("error: {}", escape_text(&e.to_string()));
    EXIT_CONFIG
}

/// Runs `run` on a fresh tokio runtime; returns the exit code.
pub fn run(opts: RunOptions, env: impl Fn(&str) -> Option<String>) -> anyhow::Result<i32> {
    if opts.max_turns == Some(0) {
        return Ok(config_error("--max-turns must be at least 1"));
    }
    let (loaded, client) = match super::load_with_client(&opts.root, env)? {
        Ok(v) => v,
        Err(code) => return Ok(code),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(run_async(opts, loaded, client))
}

async fn run_async(
    opts: RunOptions,
    loaded: Arc<Loaded>,
    client: AnthropicClient,
) -> anyhow::Result<i32> {
    let (tap_tx, tap_rx) = tokio::sync::mpsc::unbounded_channel();
    let printer = tokio::spawn(super::progress::print(tap_rx));
    let events = crate::startup::open_audit_log(&loaded, Some(tap_tx)).await?;
    let mut executor = Executor::new(opts.helper.clone());
    // The probe's verdict is already on stderr and, if weakened, in the executor.
    let _report = crate::startup::prepare_sandbox(&mut executor, &loaded)?;
    let cancel = CancellationToken::new();
    let interrupted = cancel.clone();
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            interrupted.cancel();
        }
    });
    // Hot reload: a valid edit of either file applies from the next tool call.
    let live = Arc::new(LiveConfig::new(loaded.clone()));
    let stop_reloader = CancellationToken::new();
    let reloader = tokio::spawn(crate::reload::run_reloader(
        live.clone(),
        events.clone(),
        stop_reloader.clone(),
    ));
    let env = TaskEnv {
        config: live.clone(),
        client,
        events,
        executor,
        approver: Arc::new(TerminalApprover::new(opts.yes)),
        cancel,
    };
    let spec = TaskSpec {
        task_id: new_task_id(),
        prompt: opts.task,
        max_turns: opts.max_turns,
        source: "cli".into(),
        resume: None,
    };
    // A panic in the task comes back as an `error` outcome (exit 1), not an unwind.
    let outcome = run_task(&env, &spec).await;
    stop_reloader.cancel();
    let _ = reloader.await;
    drop(env);
    let _ = printer.await;
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
    // The answer is model text: newlines stay, controls are escaped (SPEC §8).
    if !outcome.answer.is_empty() {
        writeln!(out, "{}", escape_text(&outcome.answer))?;
    }
    out.flush()?;
    Ok(outcome.stop_reason.exit_code())
}
