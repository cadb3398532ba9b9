//! Hot reload, wired: file events from `notify` and SIGHUP (a stream handed in by
//! the command entry, which installs the handler) go through a
//! [`Debouncer`] into [`LiveConfig::reload`], and every outcome is recorded
//! (`config_loaded` with what changed, `config_rejected` with the error) and told
//! on stderr.
//!
//! The watches are on directories, not files, so editors' write-to-temp-and-rename,
//! truncate-then-write and delete-and-recreate are all seen; the root itself is
//! watched too, so a symlinked `config/` or `policies/` swapped atomically (the way
//! Kubernetes updates a ConfigMap) is seen, and the watches are set again after
//! every burst to follow the new target.

// Writes to stderr ignore errors: `eprintln!` panics when stderr is on a full disk.
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::stream::BoxStream;
use notify::{RecursiveMode, Watcher};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::config::{ConfigSource, Debouncer, LiveConfig, ReloadOutcome};
use crate::events::{Event, EventError, EventLog};
use crate::text::escape_text;

/// Quiet time after the last file event before reloading.
pub const DEBOUNCE: Duration = Duration::from_millis(50);

/// Longest wait from the first file event of a burst: a file rewritten more often
/// than [`DEBOUNCE`] is still loaded this often, not never.
pub const MAX_WAIT: Duration = Duration::from_millis(500);

/// The directories to watch: the root, and the directories holding both files.
fn watched_dirs(live: &LiveConfig) -> Vec<PathBuf> {
    let paths = live.current().paths.clone();
    let mut dirs = vec![paths.root.clone()];
    for file in [&paths.config, &paths.settings] {
        if let Some(dir) = file.parent()
            && !dirs.iter().any(|d| d == dir)
        {
            dirs.push(dir.to_path_buf());
        }
    }
    dirs
}

/// Whether a file event may concern the config or settings file. Reads are not:
/// a reload's own reads would otherwise trigger the next reload.
fn relevant(live: &LiveConfig, event: &notify::Event) -> bool {
    if matches!(event.kind, notify::EventKind::Access(_)) {
        return false;
    }
    let paths = live.current().paths.clone();
    let names: Vec<&Path> = [&paths.config, &paths.settings]
        .iter()
        .flat_map(|f| [f.as_path(), f.parent().unwrap_or(f)])
        .collect();
    event.paths.iter().any(|p| {
        names.iter().any(|n| p == *n || p.starts_with(n))
            || p.parent() == Some(paths.root.as_path())
                && names.iter().any(|n| n.file_name() == p.file_name())
    })
}

fn rewatch(watcher: &mut notify::RecommendedWatcher, dirs: &[PathBuf]) {
    for dir in dirs {
        let _ = watcher.unwatch(dir);
        if let Err(e) = watcher.watch(dir, RecursiveMode::NonRecursive) {
            tracing::warn!("cannot watch {} for config changes: {e}", dir.display());
        }
    }
}

/// [`LiveConfig::reload`] on a blocking thread: it reads both files and
/// canonicalises the root, which must not stall the runtime's workers.
async fn reload_off_runtime(live: &Arc<LiveConfig>) -> ReloadOutcome {
    let live = live.clone();
    match tokio::task::spawn_blocking(move || live.reload()).await {
        Ok(outcome) => outcome,
        // A panic in the reload travels on as it would have on this thread.
        Err(e) => match e.try_into_panic() {
            Ok(panic) => std::panic::resume_unwind(panic),
            // The runtime is shutting down and the reload never ran.
            Err(_) => ReloadOutcome::Unchanged,
        },
    }
}

/// The trigger of a reload asked for by SIGHUP.
const SIGHUP: &str = "sighup";

/// Reloads once and records the outcome. A rejection equal to `last_rejection`
/// is not recorded again, except on SIGHUP: an operator who asks for a reload
/// always gets a line and an event, `config_loaded` with `changes: []` when
/// nothing changed. The first valid version after a rejection is "accepted",
/// even when it is the version already in force (the bad edit was undone).
pub async fn reload_and_record(
    live: &Arc<LiveConfig>,
    events: &EventLog,
    trigger: &str,
    last_rejection: &mut Option<ReloadOutcome>,
) -> Result<ReloadOutcome, EventError> {
    let outcome = reload_off_runtime(live).await;
    // `audit.sync` applies from the next line on, like any other live setting.
    events.set_sync(live.current().config.audit.sync);
    events.set_rotate_mb(live.current().config.audit.rotate_mb);
    let previous = last_rejection.take();
    let verb = if previous.is_some() {
        "accepted"
    } else {
        "reloaded"
    };
    match &outcome {
        ReloadOutcome::Unchanged if trigger == SIGHUP || previous.is_some() => {
            record_unchanged(live, events, trigger, verb).await?;
        }
        ReloadOutcome::Unchanged => {}
        ReloadOutcome::Loaded {
            files,
            changes,
            restart_needed,
        } => record_loaded(events, trigger, verb, files, changes, restart_needed).await?,
        ReloadOutcome::Rejected { file, error } => {
            let repeated = previous.as_ref() == Some(&outcome);
            *last_rejection = Some(outcome.clone());
            if !repeated || trigger == SIGHUP {
                record_rejected(events, trigger, file, error).await?;
            }
        }
    }
    Ok(outcome)
}

/// Records `config_rejected` and says on stderr that the old version stays.
async fn record_rejected(
    events: &EventLog,
    trigger: &str,
    file: &str,
    error: &str,
) -> Result<(), EventError> {
    events
        .record(
            None,
            Event::ConfigRejected {
                file: file.to_string(),
                error: error.to_string(),
                trigger: trigger.into(),
            },
        )
        .await?;
    let _ = writeln!(
        std::io::stderr(),
        "config rejected ({trigger}), the previous version stays in force: {}",
        escape_text(error)
    );
    Ok(())
}

/// Records `config_loaded` with no changes for both files, as they are in
/// force: a SIGHUP, or an undone bad edit, that left everything as it was.
async fn record_unchanged(
    live: &Arc<LiveConfig>,
    events: &EventLog,
    trigger: &str,
    verb: &str,
) -> Result<(), EventError> {
    let current = live.current();
    let files = [
        (
            crate::config::CONFIG_FILE.to_string(),
            current.config_sha256.clone(),
        ),
        (
            current.paths.display(&current.paths.settings),
            current.settings_sha256.clone(),
        ),
    ];
    for (file, sha256) in files {
        events
            .record(
                None,
                Event::ConfigLoaded {
                    file,
                    sha256,
                    changes: Vec::new(),
                    restart_needed: Vec::new(),
                    trigger: trigger.into(),
                },
            )
            .await?;
    }
    let _ = writeln!(
        std::io::stderr(),
        "config {verb} ({trigger}): no change, the version in force stays"
    );
    Ok(())
}

/// Records `config_loaded` for each changed file and says on stderr what changed.
async fn record_loaded(
    events: &EventLog,
    trigger: &str,
    verb: &str,
    files: &[(String, String)],
    changes: &[String],
    restart_needed: &[String],
) -> Result<(), EventError> {
    for (file, sha256) in files {
        events
            .record(
                None,
                Event::ConfigLoaded {
                    file: file.clone(),
                    sha256: sha256.clone(),
                    changes: changes.to_vec(),
                    restart_needed: restart_needed.to_vec(),
                    trigger: trigger.into(),
                },
            )
            .await?;
    }
    // Rules can hold model text (`approve --remember`): escaped for the terminal.
    let _ = writeln!(
        std::io::stderr(),
        "config {verb} ({trigger}): {}",
        if changes.is_empty() {
            "no effective change".to_string()
        } else {
            escape_text(&changes.join("; ")).into_owned()
        }
    );
    if !restart_needed.is_empty() {
        let _ = writeln!(
            std::io::stderr(),
            "warning: changed but needs a restart: {}",
            escape_text(&restart_needed.join(", "))
        );
    }
    Ok(())
}

/// Watches the files until `cancel` fires, with no SIGHUP trigger: for callers
/// that only need file events (the reload benchmark).
pub async fn run_reloader(
    live: Arc<LiveConfig>,
    events: EventLog,
    cancel: CancellationToken,
) -> Result<(), EventError> {
    watch(live, events, futures::stream::pending().boxed(), cancel).await
}

/// Watches the files, and reloads at every item of `hangups` (SIGHUP, installed by
/// the command entry), until `cancel` fires. Errors setting up the watcher are
/// reported and leave `hangups` as the only trigger.
pub async fn watch(
    live: Arc<LiveConfig>,
    events: EventLog,
    mut hangups: BoxStream<'static, ()>,
    cancel: CancellationToken,
) -> Result<(), EventError> {
    let (tx, mut rx) = mpsc::unbounded_channel::<notify::Event>();
    let watcher = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
        if let Ok(ev) = res {
            let _ = tx.send(ev);
        }
    });
    let mut watcher = match watcher {
        Ok(mut w) => {
            rewatch(&mut w, &watched_dirs(&live));
            Some(w)
        }
        Err(e) => {
            let _ = writeln!(
                std::io::stderr(),
                "warning: cannot watch the config files ({e}); reload with SIGHUP"
            );
            None
        }
    };
    let mut debounce = Debouncer::new(DEBOUNCE, MAX_WAIT);
    // The same rejection is recorded once, not at every later event.
    let mut last_rejection: Option<ReloadOutcome> = None;
    loop {
        let deadline = debounce.deadline();
        tokio::select! {
            () = cancel.cancelled() => return Ok(()),
            Some(ev) = rx.recv() => {
                if relevant(&live, &ev) {
                    debounce.event(Instant::now());
                }
            }
            Some(()) = hangups.next() => {
                reload_and_record(&live, &events, SIGHUP, &mut last_rejection).await?;
            }
            () = async { match deadline { Some(d) => tokio::time::sleep_until(d.into()).await, None => std::future::pending().await } } => {
                if debounce.take_due(Instant::now()) {
                    if let Some(w) = watcher.as_mut() {
                        rewatch(w, &watched_dirs(&live));
                    }
                    reload_and_record(&live, &events, "watch", &mut last_rejection).await?;
                }
            }
        }
    }
}
