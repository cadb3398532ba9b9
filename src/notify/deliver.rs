//! One sink's delivery loop: read the log after the cursor, POST each matching
//! line, write the cursor down (at once when caught up, at most every 250 ms while
//! deliveries follow each other), wait for the next line.
//!
//! A failed POST is tried again after 0.5, 1 and 2 s (with jitter, or after the
//! receiver's `retry-after`, capped); when those tries are used up `notify_failed`
//! is recorded and the same event is tried again after a pause that doubles from
//! 30 s up to 10 min, for as long as it takes: a sink never skips an event.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::{Counts, Sink, cursor_path, format};
use crate::config::NotifyFrom;
use crate::events::tail::{Next, Tail};
use crate::events::{Event, EventLog, Record};

/// POSTs of one event in one round, the first included.
const TRIES: u32 = 4;
/// One POST's bound, from connecting to the last byte of the answer.
const POST_TIMEOUT: Duration = Duration::from_secs(10);
/// Pause after the first failed round; doubled after each, up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_secs(30);
const MAX_PAUSE: Duration = Duration::from_secs(600);
/// Lines passed over in one read of the log before the loop looks up (the stop,
/// the backlog) again.
const LINES_PER_READ: usize = 10_000;
/// Least time between two writes of a cursor that only passed lines over.
const CURSOR_EVERY: Duration = Duration::from_secs(10);
/// Least time between two writes of the cursor while deliveries follow each
/// other without a pause (each write is synced, which would otherwise bound a
/// sink to a few hundred events a second); once the sink is caught up it is
/// written at once. A crash sends again at most what this covers.
const CURSOR_SOON: Duration = Duration::from_millis(250);

/// What every sink of the daemon shares.
#[derive(Clone)]
pub(super) struct Context {
    pub events: EventLog,
    /// The live log file.
    pub log: PathBuf,
    pub transcripts: PathBuf,
    pub client: reqwest::Client,
    /// Where browsers reach the console, for links to an approval.
    pub console: Option<String>,
}

/// The HTTP client of every sink: bounded, no redirect followed (a webhook that
/// redirects would send the event, and its signature, elsewhere).
pub(super) fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(POST_TIMEOUT)
        .connect_timeout(Duration::from_secs(5))
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap_or_default()
}

/// Delivers `sink`'s events until `stop` is cancelled.
pub(super) async fn run(sink: Sink, ctx: Context, counts: Arc<Counts>, stop: CancellationToken) {
    let name = sink.config.name.clone();
    let cursor = cursor_path(&ctx.transcripts, &name);
    let start = start_at(&sink, &ctx, &cursor).await;
    counts.position.store(start, Ordering::Relaxed);
    // The seq last written to the cursor file, and the last one delivered.
    let (mut written, mut delivered) = (start, start);
    let mut written_at = Instant::now();
    let mut tail = Some(Tail::new(&ctx.log, start));
    let mut head = ctx.events.watch_head();
    let wanted = sink.config.events.clone();
    while !stop.is_cancelled() {
        let Some(reader) = tail.take() else { break };
        let name_ = name.clone();
        let wanted_ = wanted.clone();
        let read = tokio::task::spawn_blocking(move || {
            let mut reader = reader;
            let found = next_matching(&mut reader, &wanted_, &name_);
            (reader, found)
        })
        .await;
        let Ok((reader, found)) = read else { break };
        counts.position.store(reader.after(), Ordering::Relaxed);
        let passed = reader.after();
        tail = Some(reader);
        match found {
            Found::Line(seq, line, record) => {
                // Until it is delivered, only the lines before it are dealt with:
                // a stop now leaves the cursor before it.
                counts
                    .position
                    .store(seq.saturating_sub(1), Ordering::Relaxed);
                if !deliver(&sink, &ctx, &counts, seq, &line, &record, &stop).await {
                    break;
                }
                counts.position.store(seq, Ordering::Relaxed);
                counts.sent.fetch_add(1, Ordering::Relaxed);
                delivered = seq;
                if written_at.elapsed() >= CURSOR_SOON {
                    save_cursor(&cursor, seq).await;
                    (written, written_at) = (seq, Instant::now());
                }
            }
            Found::More => continue,
            Found::CaughtUp(error) => {
                if let Some(e) = error {
                    tracing::warn!("notify {name}: cannot read the audit log: {e}");
                }
                let due = delivered > written || written_at.elapsed() >= CURSOR_EVERY;
                if passed > written && due {
                    save_cursor(&cursor, passed).await;
                    (written, written_at) = (passed, Instant::now());
                }
                tokio::select! {
                    () = stop.cancelled() => break,
                    _ = head.changed() => {}
                    // A line may be written between the read and the watch.
                    () = tokio::time::sleep(Duration::from_secs(1)) => {}
                }
            }
        }
    }
    let passed = counts.position.load(Ordering::Relaxed);
    if passed > written {
        save_cursor(&cursor, passed).await;
    }
}

/// Where the sink starts: after its cursor, or, without one, after the log's
/// last line (`from = "end"`) or at its start, and after an unreadable one at
/// the log's end; the start is written down at once, so a crash before the
/// first delivery does not move it.
async fn start_at(sink: &Sink, ctx: &Context, cursor: &std::path::Path) -> u64 {
    let name = &sink.config.name;
    // A cursor that is there but cannot be read starts the sink at the end
    // whatever `from` says: `from = "start"` would send the whole log again.
    let from = match std::fs::read_to_string(cursor) {
        Ok(text) => match text.trim().parse::<u64>() {
            Ok(seq) => return seq,
            Err(_) => {
                tracing::error!(
                    "notify {name}: {} does not hold a seq; the sink starts at the log's end",
                    cursor.display()
                );
                NotifyFrom::End
            }
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => sink.config.from,
        Err(e) => {
            tracing::error!(
                "notify {name}: cannot read {}: {e}; the sink starts at the log's end",
                cursor.display()
            );
            NotifyFrom::End
        }
    };
    let start = match from {
        NotifyFrom::Start => 0,
        NotifyFrom::End => ctx.events.head().0,
    };
    save_cursor(cursor, start).await;
    start
}

/// [`write_cursor`] off the runtime's workers: the write is synced, and a slow
/// disk must not stall the tasks that share them.
async fn save_cursor(path: &std::path::Path, seq: u64) {
    let path = path.to_path_buf();
    let _ = tokio::task::spawn_blocking(move || write_cursor(&path, seq)).await;
}

/// Writes `seq` to the cursor file atomically (a new file renamed over it); a
/// failure is logged, and the sink goes on (a restart sends again from the
/// cursor last written).
fn write_cursor(path: &std::path::Path, seq: u64) {
    use crate::config::replace::{temp_beside, write_new};
    let tmp = temp_beside(path, "tmp");
    let written = write_new(&tmp, format!("{seq}\n").as_bytes(), 0o600, None)
        .and_then(|()| std::fs::rename(&tmp, path));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        tracing::warn!("cannot write the cursor {}: {e}", path.display());
    }
}

/// What one read of the log found.
enum Found {
    /// A matching line: its seq, bytes and record.
    Line(u64, Vec<u8>, Box<Record>),
    /// [`LINES_PER_READ`] lines passed over; more may follow at once.
    More,
    /// The end of what is written (or why the log could not be read).
    CaughtUp(Option<std::io::Error>),
}

/// Reads on until a line of a type in `wanted`.
fn next_matching(tail: &mut Tail, wanted: &[String], sink: &str) -> Found {
    for _ in 0..LINES_PER_READ {
        match tail.read_next() {
            Ok(Next::Line { seq, bytes }) => {
                let Some(record) = Record::parse(&bytes) else {
                    continue;
                };
                let kind = record.kind().map(str::to_owned).or(record.unread.clone());
                if kind.is_some_and(|k| wanted.contains(&k)) {
                    return Found::Line(seq, bytes, Box::new(record));
                }
            }
            Ok(Next::Unreadable { path, line }) => tracing::warn!(
                "notify {sink}: {}:{line} is not a line of the audit log; passed over",
                path.display()
            ),
            Ok(Next::CaughtUp) => return Found::CaughtUp(None),
            Err(e) => return Found::CaughtUp(Some(e)),
        }
    }
    Found::More
}

/// Why one POST failed.
struct Failure {
    status: Option<u16>,
    error: String,
    retry_after: Option<Duration>,
}

/// POSTs the event until it is delivered (`true`) or `stop` is cancelled.
async fn deliver(
    sink: &Sink,
    ctx: &Context,
    counts: &Counts,
    seq: u64,
    line: &[u8],
    record: &Record,
    stop: &CancellationToken,
) -> bool {
    let mut attempts = 0u32;
    let mut pause = FIRST_PAUSE;
    loop {
        let mut last = None;
        for try_ in 0..TRIES {
            if try_ > 0 {
                let wait = last
                    .as_ref()
                    .and_then(|f: &Failure| f.retry_after)
                    .unwrap_or_else(|| backoff(try_));
                if !sleep_or_stop(wait, stop).await {
                    return false;
                }
            }
            attempts += 1;
            let body = format::body(
                sink.config.format,
                line,
                record,
                ctx.console.as_deref(),
                chrono::Utc::now(),
            );
            let posted = tokio::select! {
                () = stop.cancelled() => return false,
                posted = post(&ctx.client, sink, body) => posted,
            };
            match posted {
                Ok(()) => return true,
                Err(f) => {
                    counts.failed.fetch_add(1, Ordering::Relaxed);
                    last = Some(f);
                }
            }
        }
        let Some(last) = last else { return false };
        record_failure(sink, ctx, seq, attempts, &last).await;
        if !sleep_or_stop(pause, stop).await {
            return false;
        }
        pause = (pause * 2).min(MAX_PAUSE);
    }
}

async fn record_failure(sink: &Sink, ctx: &Context, seq: u64, attempts: u32, last: &Failure) {
    let name = &sink.config.name;
    tracing::warn!(
        "notify {name}: event {seq} not delivered after {attempts} POSTs ({}); trying again",
        last.error
    );
    let event = Event::NotifyFailed {
        sink: name.clone(),
        first_seq: seq,
        last_seq: ctx.events.head().0,
        status: last.status,
        attempts,
        error: last.error.clone(),
    };
    if let Err(e) = ctx.events.record(None, event).await {
        tracing::warn!("notify {name}: cannot record notify_failed: {e}");
    }
}

/// The wait before try `n` (from 1): 500 ms × 2ⁿ⁻¹, with full jitter.
fn backoff(n: u32) -> Duration {
    let cap = 500u64 << (n - 1).min(6);
    Duration::from_millis(fastrand::u64(cap / 2..=cap))
}

/// Sleeps `wait`; `false` when `stop` came first.
async fn sleep_or_stop(wait: Duration, stop: &CancellationToken) -> bool {
    tokio::select! {
        () = stop.cancelled() => false,
        () = tokio::time::sleep(wait) => true,
    }
}

/// One POST of `body`, signed when the sink has a secret.
async fn post(client: &reqwest::Client, sink: &Sink, body: Vec<u8>) -> Result<(), Failure> {
    let timestamp = chrono::Utc::now().timestamp().to_string();
    let mut request = client
        .post(&sink.url)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .header("X-Harnessd-Timestamp", &timestamp);
    if let Some(secret) = &sink.secret {
        request = request.header(
            "X-Harnessd-Signature",
            format::signature(secret, &timestamp, &body),
        );
    }
    match request.body(body).send().await {
        Ok(answer) if answer.status().is_success() => Ok(()),
        Ok(answer) => {
            let status = answer.status().as_u16();
            let retry_after = answer
                .headers()
                .get(reqwest::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map(|s| Duration::from_secs(s.min(60)));
            Err(Failure {
                status: Some(status),
                error: format!("HTTP {status}"),
                retry_after,
            })
        }
        // The URL is a secret: the error is shown without it.
        Err(e) => Err(Failure {
            status: None,
            error: e.without_url().to_string(),
            retry_after: None,
        }),
    }
}
