//! Notifications: the `[[notify]]` sinks of config.toml, each a webhook that the
//! events it names are POSTed to, one POST per event, in the log's order, at
//! least once.
//!
//! A consumer of the typed log, never a path through the loop: each sink reads
//! events.jsonl itself ([`crate::events::tail`]) after its cursor
//! (`transcripts/notify-<name>.cursor`, the last seq it has dealt with, written
//! atomically after each delivery), waking when the writer's head moves. Nothing
//! is sent to it or buffered for it, so a slow or dead sink never delays a task
//! and never grows memory: it only falls behind in its own reading, which
//! [`Status`] reports (`harnessd_notify_backlog`). A crash or restart resumes at
//! the cursor; an event whose delivery was not written down yet is sent again.
//!
//! [`run`] owns the sinks: it starts them from the config in force, and after a
//! reload stops the sinks that were removed or changed and starts the new ones.
//! It must not block the daemon's stop: an in-flight POST is dropped when the
//! stop token fires.

mod deliver;
pub mod format;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::config::{
    CONFIG_FILE, ConfigError, ConfigSource, Loaded, NotifySink, SecretSource, UrlSource,
    locate_notify_key, read_credential,
};
use crate::events::EventLog;

/// A sink ready to deliver: its settings with the URL and secret read.
#[derive(Clone, PartialEq, Eq)]
pub struct Sink {
    /// Its `[[notify]]` table.
    pub config: NotifySink,
    /// The webhook URL (a secret: never shown).
    url: String,
    /// The HMAC secret, when one is configured.
    secret: Option<Vec<u8>>,
}

impl std::fmt::Debug for Sink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Sink({}, <url redacted>)", self.config.name)
    }
}

/// Every sink of `loaded`, with URL and secret read, or the first problem, named
/// by file, line and key: an event type harnessd does not write, a credential
/// file that breaks `api.api_key_file`'s rules, a secret variable that is unset.
/// `env` looks up the daemon's environment.
pub fn resolve(
    loaded: &Loaded,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<Sink>, ConfigError> {
    let known = crate::events::event_types();
    let text = &*loaded.config_text;
    let at = |key: &str| locate_notify_key(text, key);
    let bad = |key: String, m: String| ConfigError::invalid(CONFIG_FILE, at(&key), key, m);
    let mut sinks = Vec::new();
    for (i, sink) in loaded.config.notify.iter().enumerate() {
        for (j, kind) in sink.events.iter().enumerate() {
            if !known.contains(kind) {
                return Err(bad(
                    format!("notify[{i}].events[{j}]"),
                    format!(
                        "{kind:?} is not an event type harnessd writes; known types: {}",
                        known.join(", ")
                    ),
                ));
            }
        }
        let url = match sink.url_source() {
            UrlSource::Inline(url) => url.to_string(),
            UrlSource::File(file) => {
                let key = format!("notify[{i}].url_file");
                let url = read_credential(loaded, file, &key, at(&key))?;
                // The URL itself is never quoted back: it is a secret.
                crate::config::http_url(&url)
                    .map_err(|why| bad(key, format!("{file} holds no http(s) URL: {why}")))?;
                url
            }
        };
        let secret = match sink.secret_source() {
            None => None,
            Some(SecretSource::File(file)) => {
                let key = format!("notify[{i}].secret_file");
                Some(read_credential(loaded, file, &key, at(&key))?.into_bytes())
            }
            Some(SecretSource::Env(var)) => match env(var) {
                Some(v) if !v.trim().is_empty() => Some(v.trim().as_bytes().to_vec()),
                _ => {
                    return Err(bad(
                        format!("notify[{i}].secret_env"),
                        format!("the environment variable {var} is not set or empty"),
                    ));
                }
            },
        };
        sinks.push(Sink {
            config: sink.clone(),
            url,
            secret,
        });
    }
    Ok(sinks)
}

/// The cursor file of sink `name` in `transcripts`.
pub fn cursor_path(transcripts: &Path, name: &str) -> PathBuf {
    transcripts.join(format!("notify-{name}.cursor"))
}

/// One sink's counts since the daemon started.
#[derive(Debug, Default)]
struct Counts {
    /// Events delivered (a 2xx answer).
    sent: AtomicU64,
    /// POSTs that failed (another status, no connection, a timeout).
    failed: AtomicU64,
    /// The last seq the sink has dealt with: delivered, or passed as not matching.
    position: AtomicU64,
}

/// What each sink has done, for `/metrics`. Kept for the daemon's life, so a
/// sink restarted by a reload goes on counting where it was.
pub struct Status {
    events: EventLog,
    sinks: Mutex<BTreeMap<String, Arc<Counts>>>,
    /// The names of the sinks running now.
    running: Mutex<Vec<String>>,
}

/// One sink's line of [`Status::report`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SinkReport {
    /// The sink's name.
    pub sink: String,
    /// Events delivered.
    pub sent: u64,
    /// POSTs that failed.
    pub failed: u64,
    /// Lines of the log after the last one the sink has dealt with (delivered,
    /// or passed as not matching): 0 when it is caught up. Every line counts,
    /// matching or not: it says how far behind the sink's reading is.
    pub backlog: u64,
}

impl Status {
    /// No sink yet.
    pub fn new(events: EventLog) -> Arc<Status> {
        Arc::new(Status {
            events,
            sinks: Mutex::default(),
            running: Mutex::default(),
        })
    }

    fn counts(&self, name: &str) -> Arc<Counts> {
        let mut sinks = self.sinks.lock().unwrap_or_else(|e| e.into_inner());
        sinks.entry(name.to_string()).or_default().clone()
    }

    /// The running sinks, by name.
    pub fn report(&self) -> Vec<SinkReport> {
        let head = self.events.head().0;
        let running = self.running.lock().map(|r| r.clone()).unwrap_or_default();
        running
            .into_iter()
            .map(|name| {
                let c = self.counts(&name);
                SinkReport {
                    sent: c.sent.load(Ordering::Relaxed),
                    failed: c.failed.load(Ordering::Relaxed),
                    backlog: head.saturating_sub(c.position.load(Ordering::Relaxed)),
                    sink: name,
                }
            })
            .collect()
    }
}

/// One running sink: its settings, its stop, its task.
struct Running {
    sink: Sink,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

/// How often the config in force is looked at for a reload's new sinks.
const RELOAD_EVERY: Duration = Duration::from_secs(1);

/// Runs the sinks of the config in force until `stop` is cancelled; each
/// reload that changes them takes effect within a second. Waits for every sink
/// it started before it returns.
pub async fn run(
    config: Arc<dyn ConfigSource>,
    events: EventLog,
    status: Arc<Status>,
    stop: CancellationToken,
) {
    let client = deliver::client();
    let mut running: Vec<Running> = Vec::new();
    let mut seen: Option<Arc<Loaded>> = None;
    loop {
        let current = config.current();
        if seen.as_ref().is_none_or(|s| !Arc::ptr_eq(s, &current)) {
            let env = |var: &str| std::env::var(var).ok();
            match resolve(&current, &env) {
                Ok(sinks) => {
                    let ctx = deliver::Context {
                        events: events.clone(),
                        log: current.paths.events.clone(),
                        transcripts: current.paths.transcripts.clone(),
                        client: client.clone(),
                        console: current.config.daemon.console_base(),
                    };
                    reconcile(&mut running, sinks, &ctx, &status).await;
                }
                // A reload judged the sinks before it took effect; a credential
                // gone since keeps the sinks running as they were.
                Err(e) => tracing::warn!("notification sinks left as they were: {e}"),
            }
            seen = Some(current);
        }
        tokio::select! {
            () = stop.cancelled() => break,
            () = tokio::time::sleep(RELOAD_EVERY) => {}
        }
    }
    for r in running {
        r.stop.cancel();
        let _ = r.task.await;
    }
}

/// Stops the running sinks that `sinks` no longer has as they are, starts the
/// new and changed ones.
async fn reconcile(
    running: &mut Vec<Running>,
    sinks: Vec<Sink>,
    ctx: &deliver::Context,
    status: &Status,
) {
    let (kept, gone): (Vec<Running>, Vec<Running>) =
        running.drain(..).partition(|r| sinks.contains(&r.sink));
    for r in gone {
        r.stop.cancel();
        let _ = r.task.await;
    }
    *running = kept;
    for sink in sinks {
        if running.iter().any(|r| r.sink == sink) {
            continue;
        }
        let stop = CancellationToken::new();
        let counts = status.counts(&sink.config.name);
        let task = tokio::spawn(deliver::run(
            sink.clone(),
            ctx.clone(),
            counts,
            stop.clone(),
        ));
        running.push(Running { sink, stop, task });
    }
    if let Ok(mut names) = status.running.lock() {
        *names = running.iter().map(|r| r.sink.config.name.clone()).collect();
    }
}
