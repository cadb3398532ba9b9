//! The process's signals, installed by the command entries (`run`, `serve`) and
//! handed down as a stream or a future, the way mini-redis hands `shutdown` to its
//! server: nothing below a command installs a handler, so the daemon can run
//! in-process in a test with a trigger of the test's own.
//!
//! Must be called inside the tokio runtime (the handlers live in its driver).

use std::future::Future;

use futures::StreamExt;
use futures::stream::BoxStream;
use tokio::signal::unix::{SignalKind, signal};

/// One item per SIGHUP (reload both files). If the handler cannot be installed the
/// stream never yields: reload then happens on file changes only, as before this
/// was handed in.
pub fn hangups() -> BoxStream<'static, ()> {
    match signal(SignalKind::hangup()) {
        Ok(mut sig) => futures::stream::poll_fn(move |cx| sig.poll_recv(cx)).boxed(),
        Err(_) => futures::stream::pending().boxed(),
    }
}

/// Resolves at the first SIGTERM or SIGINT with the signal's name (recorded in
/// `daemon_stopping`): `serve`'s shutdown trigger.
pub fn terminate() -> std::io::Result<impl Future<Output = String> + Send + 'static> {
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => "SIGTERM".to_string(),
            _ = int.recv() => "SIGINT".to_string(),
        }
    })
}

/// Resolves at the first SIGINT (Ctrl-C): `run` cancels its task (exit 130).
pub fn interrupt() -> std::io::Result<impl Future<Output = ()> + Send + 'static> {
    let mut int = signal(SignalKind::interrupt())?;
    Ok(async move {
        // `None`: the runtime is going away; there is no interrupt to report.
        if int.recv().await.is_none() {
            std::future::pending::<()>().await;
        }
    })
}
