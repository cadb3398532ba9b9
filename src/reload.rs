//! Hot reload, wired: file events from `notify` and SIGHUP (a stream handed in by
//! the command entry, which installs the handler) go through a
//! [`Debouncer`] into [`LiveConfig::reload`], and every outcome is recorded
//! (`config_loaded` with what changed, `config_rejected` with the error) and told
//! to the operator as a notice ([`crate::text::NOTICE`]).
//!
//! The watches are on directories, not files, so editors' write-to-temp-and-rename,
//! truncate-then-write and delete-and-recreate are all seen; the root itself is
//! watched too, so a symlinked `config/` or `policies/` swapped atomically (the way
//! Kubernetes updates a ConfigMap) is seen. A file that is itself a symbolic link
//! has the directory of every file its chain of links names watched too, so a
//! plain write to the file it names is seen. The watches are set again after
//! every burst to follow a new target.
//!
//! Each file is judged on its own ([`LiveConfig::reload`]): a valid edit of one
//! takes effect while the other is invalid, and a rejected content is recorded
//! once (`config_rejected` with its sha256) and logged as an error, not again at
//! every later event.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::stream::BoxStream;
use notify::{RecursiveMode, Watcher};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::protocol::Trigger;

use crate::config::{ConfigSource, Debouncer, FileOutcome, LiveConfig, ReloadOutcome, Verdict};
use crate::events::{Event, EventError, EventLog};
use crate::text::{NOTICE, escape_text};

/// Quiet time after the last file event before reloading.
pub const DEBOUNCE: Duration = Duration::from_millis(50);

/// Longest wait from the first file event of a burst: a file rewritten more often
/// than [`DEBOUNCE`] is still loaded this often, not never.
pub const MAX_WAIT: Duration = Duration::from_millis(500);

/// What the watcher looks at: the directories it watches, and the files behind
/// symbolic links whose events count as well as those of the two paths.
#[derive(Debug, Default, PartialEq)]
struct Watched {
    dirs: Vec<PathBuf>,
    targets: Vec<PathBuf>,
}

/// The root, the directories holding both files, and, for a file that is a
/// symbolic link, every file of its chain of links and the directory holding it:
/// a plain write to the file a link names happens in that directory, where a
/// watch on the link's own directory sees nothing.
fn watched(live: &LiveConfig) -> Watched {
    let paths = live.current().paths.clone();
    let mut w = Watched {
        dirs: vec![paths.root.clone()],
        targets: Vec::new(),
    };
    // Two names of one directory (a symlinked `policies/`) share one inotify
    // watch, whose events then carry the last name given: one name each.
    let mut seen: Vec<PathBuf> = vec![canonical(&paths.root)];
    let mut add_dir = |w: &mut Watched, dir: &Path| {
        let real = canonical(dir);
        if !seen.contains(&real) {
            seen.push(real);
            w.dirs.push(dir.to_path_buf());
        }
    };
    for file in [&paths.config, &paths.settings] {
        if let Some(dir) = file.parent() {
            add_dir(&mut w, dir);
        }
        for hop in link_chain(file) {
            if let Some(dir) = hop.parent() {
                add_dir(&mut w, dir);
            }
            w.targets.push(hop);
        }
    }
    w
}

fn canonical(dir: &Path) -> PathBuf {
    dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf())
}

/// The files a chain of symbolic links starting at `file` names, in order, each
/// in its directory as the kernel finds it; empty when `file` is no link.
fn link_chain(file: &Path) -> Vec<PathBuf> {
    let mut hops = Vec::new();
    let mut at = file.to_path_buf();
    // The kernel's own bound on a chain (ELOOP).
    for _ in 0..40 {
        let Ok(target) = std::fs::read_link(&at) else {
            break;
        };
        at = at.parent().unwrap_or(Path::new("/")).join(target);
        if let (Some(dir), Some(name)) = (at.parent(), at.file_name()) {
            at = canonical(dir).join(name);
        }
        hops.push(at.clone());
    }
    hops
}

/// Whether a file event may concern the config or settings file. Reads are not:
/// a reload's own reads would otherwise trigger the next reload.
fn relevant(live: &LiveConfig, watched: &Watched, event: &notify::Event) -> bool {
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
            || watched.targets.contains(p)
    })
}

/// Watches `new.dirs`, and no longer those of `old` that are not among them (the
/// directory of a link's former target).
fn rewatch(watcher: &mut notify::RecommendedWatcher, old: &Watched, new: &Watched) {
    for dir in old.dirs.iter().filter(|d| !new.dirs.contains(d)) {
        let _ = watcher.unwatch(dir);
    }
    for dir in &new.dirs {
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
            Err(_) => ReloadOutcome::new(),
        },
    }
}

/// Reloads once and records the outcome, file by file: `config_loaded` for a
/// file whose new version is in force, `config_rejected` for one whose new
/// version was refused. A rejection is recorded once per content (the reload
/// remembers it, see [`crate::config::Verdict::Rejected`]), except on SIGHUP: an
/// operator who asks for a reload always gets a line and an event, when nothing
/// changed `config_loaded` with `changes: []` for each file. The first
/// valid version of a file after its rejection is "accepted", even when it is the
/// version already in force (the bad edit was undone).
pub async fn reload_and_record(
    live: &Arc<LiveConfig>,
    events: &EventLog,
    trigger: Trigger,
    by: Option<&str>,
) -> Result<ReloadOutcome, EventError> {
    let outcome = reload_off_runtime(live).await;
    // `audit.sync` applies from the next line on, like any other live setting.
    events.set_sync(live.current().config.audit.sync);
    events.set_rotate_mb(live.current().config.audit.rotate_mb);
    // A SIGHUP that changed nothing is told as such, file by file; one that
    // loaded or rejected something is told by that.
    let sighup = trigger == Trigger::Sighup
        && outcome
            .iter()
            .all(|f| matches!(f.verdict, Verdict::Unchanged));
    let mut unchanged_verb = None;
    for f in &outcome {
        let verb = if f.after_rejection {
            "accepted"
        } else {
            "reloaded"
        };
        match &f.verdict {
            Verdict::Unchanged if sighup || f.after_rejection => {
                record_unchanged(live, events, (trigger, by), f).await?;
                // "accepted" wins: the line says the bad edit is gone.
                if unchanged_verb != Some("accepted") {
                    unchanged_verb = Some(verb);
                }
            }
            Verdict::Unchanged => {}
            Verdict::Loaded {
                changes,
                restart_needed,
            } => record_loaded(events, (trigger, by), verb, f, changes, restart_needed).await?,
            Verdict::Rejected { repeated, .. } if *repeated && trigger != Trigger::Sighup => {}
            Verdict::Rejected { error, .. } => {
                record_rejected(events, (trigger, by), f, error).await?
            }
        }
    }
    if let Some(verb) = unchanged_verb {
        tracing::info!(
            target: NOTICE,
            "config {verb} ({trigger}): no change, the version in force stays"
        );
    }
    Ok(outcome)
}

/// What asked for a reload, and who when a person did (`approve --remember`).
type Cause<'a> = (Trigger, Option<&'a str>);

/// Records `config_rejected` and says on the daemon's log (stderr, journald)
/// that the old version stays.
async fn record_rejected(
    events: &EventLog,
    (trigger, by): Cause<'_>,
    f: &FileOutcome,
    error: &str,
) -> Result<(), EventError> {
    events
        .record(
            None,
            Event::ConfigRejected {
                file: f.file.clone(),
                sha256: f.sha256.clone(),
                error: error.to_string(),
                trigger,
                by: by.map(str::to_string),
            },
        )
        .await?;
    tracing::error!(
        "config rejected ({trigger}), the previous version stays in force: {}",
        escape_text(error)
    );
    Ok(())
}

/// Records `config_loaded` with no changes for a file as it is in force: a
/// SIGHUP, or an undone bad edit, that left it as it was.
async fn record_unchanged(
    live: &Arc<LiveConfig>,
    events: &EventLog,
    (trigger, by): Cause<'_>,
    f: &FileOutcome,
) -> Result<(), EventError> {
    let current = live.current();
    let sha256 = match f.file.as_str() {
        crate::config::CONFIG_FILE => current.config_sha256.clone(),
        _ => current.settings_sha256.clone(),
    };
    events
        .record(
            None,
            Event::ConfigLoaded {
                file: f.file.clone(),
                sha256,
                changes: Vec::new(),
                restart_needed: Vec::new(),
                trigger,
                by: by.map(str::to_string),
            },
        )
        .await?;
    Ok(())
}

/// Records `config_loaded` for a changed file and tells the operator what changed.
async fn record_loaded(
    events: &EventLog,
    (trigger, by): Cause<'_>,
    verb: &str,
    f: &FileOutcome,
    changes: &[String],
    restart_needed: &[String],
) -> Result<(), EventError> {
    events
        .record(
            None,
            Event::ConfigLoaded {
                file: f.file.clone(),
                sha256: f.sha256.clone().unwrap_or_default(),
                changes: changes.to_vec(),
                restart_needed: restart_needed.to_vec(),
                trigger,
                by: by.map(str::to_string),
            },
        )
        .await?;
    // Rules can hold model text (`approve --remember`): escaped for the terminal.
    tracing::info!(
        target: NOTICE,
        "config {verb} ({trigger}): {}",
        if changes.is_empty() {
            "no effective change".to_string()
        } else {
            escape_text(&changes.join("; ")).into_owned()
        }
    );
    if !restart_needed.is_empty() {
        tracing::info!(
            target: NOTICE,
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
    watch(
        live,
        events,
        futures::stream::pending().boxed(),
        cancel,
        None,
    )
    .await
}

/// After a reload: the daemon's shared MCP servers the settings no longer have as
/// they were started are let go of (a task using one keeps it until it ends).
fn retain_shared(mcp: Option<&crate::mcp::Hub>, live: &LiveConfig) {
    if let Some(hub) = mcp {
        hub.retain_shared(&live.current());
    }
}

/// Watches the files, and reloads at every item of `hangups` (SIGHUP, installed by
/// the command entry), until `cancel` fires; after each reload, `mcp`'s shared
/// servers the settings no longer have are let go of. Errors setting up the
/// watcher are reported and leave `hangups` as the only trigger.
pub async fn watch(
    live: Arc<LiveConfig>,
    events: EventLog,
    mut hangups: BoxStream<'static, ()>,
    cancel: CancellationToken,
    mcp: Option<crate::mcp::Hub>,
) -> Result<(), EventError> {
    let (tx, mut rx) = mpsc::unbounded_channel::<notify::Event>();
    let watcher = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
        if let Ok(ev) = res {
            let _ = tx.send(ev);
        }
    });
    let mut in_view = watched(&live);
    let mut watcher = match watcher {
        Ok(mut w) => {
            rewatch(&mut w, &Watched::default(), &in_view);
            Some(w)
        }
        Err(e) => {
            tracing::info!(
                target: NOTICE,
                "warning: cannot watch the config files ({e}); reload with SIGHUP"
            );
            None
        }
    };
    let mut debounce = Debouncer::new(DEBOUNCE, MAX_WAIT);
    loop {
        let deadline = debounce.deadline();
        tokio::select! {
            () = cancel.cancelled() => return Ok(()),
            Some(ev) = rx.recv() => {
                if relevant(&live, &in_view, &ev) {
                    debounce.event(Instant::now());
                }
            }
            Some(()) = hangups.next() => {
                reload_and_record(&live, &events, Trigger::Sighup, None).await?;
                retain_shared(mcp.as_ref(), &live);
            }
            () = async { match deadline { Some(d) => tokio::time::sleep_until(d.into()).await, None => std::future::pending().await } } => {
                if debounce.take_due(Instant::now()) {
                    // The links may name other files now: followed again.
                    if let Some(w) = watcher.as_mut() {
                        let now = watched(&live);
                        rewatch(w, &in_view, &now);
                        in_view = now;
                    }
                    reload_and_record(&live, &events, Trigger::Watch, None).await?;
                    retain_shared(mcp.as_ref(), &live);
                }
            }
        }
    }
}
