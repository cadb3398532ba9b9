//! One run of a hook: an operator program started through the same helper,
//! cgroup and confinement as a tool (normally [`Confinement::for_hook`]), given
//! its input on stdin, its stdout captured up to [`HOOK_STDOUT_BYTES`], its
//! stderr logged (target `hook`, escaped line by line), and its whole tree killed
//! at the timeout. What the answer means is the caller's: this runs it.

use std::path::Path;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::{Ending, ExecRequest, Executor, SpoolBudget};
use crate::sandbox::{Confinement, Job};

/// Bytes of a hook's stdout read as its answer; a longer answer is no answer.
pub const HOOK_STDOUT_BYTES: usize = 64 * 1024;

/// Lines of a hook's stderr logged per run; the rest are counted.
const STDERR_LINES: usize = 50;

/// One hook to run.
#[derive(Debug)]
pub struct HookRequest<'a> {
    /// Its name, for the log.
    pub name: &'a str,
    /// Program (found on `PATH` inside the sandbox) and arguments.
    pub argv: &'a [String],
    /// Variables added to the tools' environment; the values travel in the job,
    /// never on a command line.
    pub env: &'a [(String, String)],
    /// Working directory: the root, which tools do not write.
    pub workdir: &'a Path,
    /// How to confine it.
    pub confine: &'a Confinement,
    /// What it reads on stdin.
    pub input: Vec<u8>,
    /// Wall-clock bound of the whole run.
    pub timeout: Duration,
    /// Cancels it (the task's end).
    pub cancel: &'a CancellationToken,
}

/// How a hook run ended.
#[derive(Debug, Clone)]
pub struct HookRun {
    /// How the process ended.
    pub ending: Ending,
    /// Its stdout; `None` when it passed [`HOOK_STDOUT_BYTES`].
    pub stdout: Option<Vec<u8>>,
    /// Wall-clock time of the run.
    pub duration: Duration,
}

impl Executor {
    /// Runs one hook to its end. Blocking: call it from a blocking thread.
    pub fn run_hook(&self, req: &HookRequest<'_>) -> HookRun {
        let job = Job::Hook {
            argv: req.argv.to_vec(),
            env: req.env.to_vec(),
        };
        let outcome = self.run_fed(
            &ExecRequest {
                job: &job,
                workspace: req.workdir,
                confine: req.confine,
                timeout: req.timeout,
                spool_prefix: None,
                spool_budget: SpoolBudget::unlimited(),
                keep_bytes: HOOK_STDOUT_BYTES,
                relay_output: false,
                cancel: req.cancel,
            },
            Some(req.input.clone()),
        );
        log_stderr(req.name, &outcome.stderr.bytes(), outcome.stderr.omitted());
        let out = &outcome.stdout;
        let stdout = (out.total <= HOOK_STDOUT_BYTES as u64).then(|| out.bytes());
        HookRun {
            ending: outcome.ending,
            stdout,
            duration: outcome.duration,
        }
    }
}

/// Logs what a hook wrote on stderr, escaped, at most [`STDERR_LINES`] lines.
fn log_stderr(name: &str, stderr: &[u8], omitted: u64) {
    let mut lines = stderr.split(|b| *b == b'\n').filter(|l| !l.is_empty());
    for line in lines.by_ref().take(STDERR_LINES) {
        let text = super::server::escape_bytes(line);
        tracing::info!(target: "hook", hook = %name, "{text}");
    }
    let more = lines.count();
    if more > 0 || omitted > 0 {
        tracing::info!(target: "hook", hook = %name, "… {more} more lines and {omitted} bytes of stderr not logged");
    }
}
