//! The way out: finished spans wait in a bounded queue, one thread sends them in
//! batches through the OTLP/HTTP exporter, and what cannot be queued or sent is
//! counted, never held. A task never waits for the collector.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{SpanData, SpanExporter, SpanProcessor};
use prometheus_client::metrics::counter::Counter;

/// Spans waiting for export at most; past it a finished span is dropped (and
/// counted). A task's spans are a handful per turn, so this is minutes of a busy
/// daemon's spans while a collector restarts.
pub(super) const QUEUE_SPANS: usize = 2048;

/// Spans sent in one request at most.
const BATCH_SPANS: usize = 512;

/// One export request, from connecting to the last byte of the answer.
pub(super) const EXPORT_TIMEOUT: Duration = Duration::from_secs(3);

/// The answer to an export is a few bytes; more is not read.
const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// The exporter's HTTP client: our reqwest, run on the process's tokio runtime
/// (the export thread has none of its own).
#[derive(Debug)]
pub(super) struct Client {
    pub(super) http: reqwest::Client,
    pub(super) runtime: tokio::runtime::Handle,
}

#[async_trait]
impl HttpClient for Client {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let http = self.http.clone();
        let (parts, body) = request.into_parts();
        let sent = self.runtime.spawn(async move {
            let mut answer = http
                .request(parts.method, parts.uri.to_string())
                .headers(parts.headers)
                .body(body)
                .send()
                .await?;
            let mut response = Response::builder().status(answer.status());
            let mut read = Vec::new();
            while let Some(chunk) = answer.chunk().await? {
                let room = MAX_ANSWER_BYTES.saturating_sub(read.len());
                read.extend_from_slice(&chunk[..chunk.len().min(room)]);
            }
            if let Some(headers) = response.headers_mut() {
                *headers = answer.headers().clone();
            }
            Ok::<_, HttpError>(response.body(Bytes::from(read))?)
        });
        sent.await?
    }
}

/// What the export thread and the tracer share.
#[derive(Debug)]
struct Shared {
    state: Mutex<State>,
    /// Wakes the export thread: a span, a flush or the end.
    work: Condvar,
    /// Wakes flushers: the queue was emptied.
    emptied: Condvar,
    /// Spans dropped: the queue was full, or their export failed.
    dropped: Counter,
}

#[derive(Debug, Default)]
struct State {
    queue: VecDeque<SpanData>,
    /// Flushes asked for, and the last one done: a flush waits until the queue
    /// as it was when it asked has been sent.
    asked: u64,
    flushed: u64,
    closed: bool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A span processor with a bounded queue and a drop counter (the SDK's batch
/// processor keeps its count to itself).
#[derive(Debug)]
pub(super) struct Bounded {
    shared: Arc<Shared>,
}

impl Bounded {
    /// Starts the export thread sending through `exporter`; `dropped` counts
    /// what is lost.
    pub(super) fn start<E: SpanExporter + 'static>(
        mut exporter: E,
        resource: &opentelemetry_sdk::Resource,
        dropped: Counter,
    ) -> std::io::Result<Bounded> {
        // The exporter is the thread's from here on: it learns the resource now.
        exporter.set_resource(resource);
        let shared = Arc::new(Shared {
            state: Mutex::default(),
            work: Condvar::new(),
            emptied: Condvar::new(),
            dropped,
        });
        let worker = shared.clone();
        std::thread::Builder::new()
            .name("telemetry-export".into())
            .spawn(move || export_loop(&worker, &exporter))?;
        Ok(Bounded { shared })
    }

    /// Waits until what was queued before this call is sent (or dropped), for
    /// `bound` at most.
    fn flush_within(&self, bound: Duration) -> OTelSdkResult {
        let mut state = self.shared.lock();
        state.asked += 1;
        let target = state.asked;
        self.shared.work.notify_one();
        let (state, waited) = self
            .shared
            .emptied
            .wait_timeout_while(state, bound, |s| s.flushed < target && !s.closed)
            .unwrap_or_else(PoisonError::into_inner);
        drop(state);
        if waited.timed_out() {
            return Err(OTelSdkError::Timeout(bound));
        }
        Ok(())
    }
}

impl SpanProcessor for Bounded {
    fn on_start(&self, _span: &mut opentelemetry_sdk::trace::Span, _cx: &opentelemetry::Context) {}

    fn on_end(&self, span: SpanData) {
        let mut state = self.shared.lock();
        if state.closed || state.queue.len() >= QUEUE_SPANS {
            self.shared.dropped.inc();
            return;
        }
        state.queue.push_back(span);
        self.shared.work.notify_one();
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.flush_within(EXPORT_TIMEOUT * 2)
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        let flushed = self.flush_within(timeout);
        // Whatever is still queued is given up, and counted.
        let mut state = self.shared.lock();
        state.closed = true;
        self.shared.dropped.inc_by(state.queue.len() as u64);
        state.queue.clear();
        self.shared.work.notify_one();
        flushed
    }
}

/// The export thread: takes a batch, sends it (no retry: a failed batch is
/// counted and the next one goes on), and tells flushers when the queue is empty.
fn export_loop<E: SpanExporter>(shared: &Shared, exporter: &E) {
    loop {
        let (batch, target) = {
            let state = shared.lock();
            let mut state = shared
                .work
                .wait_while(state, |s| {
                    s.queue.is_empty() && !s.closed && s.asked == s.flushed
                })
                .unwrap_or_else(PoisonError::into_inner);
            let n = state.queue.len().min(BATCH_SPANS);
            (state.queue.drain(..n).collect::<Vec<_>>(), state.asked)
        };
        if !batch.is_empty() {
            let n = batch.len() as u64;
            if let Err(e) = futures::executor::block_on(exporter.export(batch)) {
                tracing::debug!("telemetry: {n} spans not exported: {e}");
                shared.dropped.inc_by(n);
            }
        }
        let mut state = shared.lock();
        if state.queue.is_empty() {
            state.flushed = state.flushed.max(target);
            shared.emptied.notify_all();
            if state.closed {
                let _ = exporter.shutdown();
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::mpsc;

    use opentelemetry::trace::{Tracer as _, TracerProvider as _};
    use opentelemetry_sdk::trace::SdkTracerProvider;

    use super::*;

    /// An exporter that sends nothing until let go, then counts what it gets.
    #[derive(Debug)]
    struct Held {
        go: Mutex<mpsc::Receiver<()>>,
        exported: Arc<AtomicU64>,
    }

    impl SpanExporter for Held {
        async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
            let _ = self.go.lock().unwrap().recv();
            self.exported
                .fetch_add(batch.len() as u64, Ordering::SeqCst);
            Ok(())
        }
    }

    #[test]
    fn a_stalled_collector_costs_counted_spans_never_an_unbounded_queue() {
        let (go, held) = mpsc::channel();
        let exported = Arc::new(AtomicU64::new(0));
        let exporter = Held {
            go: Mutex::new(held),
            exported: exported.clone(),
        };
        let dropped = Counter::default();
        let resource = opentelemetry_sdk::Resource::builder_empty().build();
        let processor = Bounded::start(exporter, &resource, dropped.clone()).unwrap();
        let shared = processor.shared.clone();
        let provider = SdkTracerProvider::builder()
            .with_span_processor(processor)
            .build();
        let tracer = provider.tracer("test");
        let total = QUEUE_SPANS as u64 * 2;
        for i in 0..total {
            // Ending a span never waits, however stalled the export is.
            tracer.in_span(format!("s{i}"), |_| {});
            assert!(shared.lock().queue.len() <= QUEUE_SPANS);
        }
        // At most the queue and one batch in flight are held; the rest is counted.
        assert!(dropped.get() >= total - (QUEUE_SPANS + BATCH_SPANS) as u64);
        for _ in 0..total {
            let _ = go.send(());
        }
        provider.force_flush().unwrap();
        assert_eq!(exported.load(Ordering::SeqCst) + dropped.get(), total);
    }
}
