//! Threads that read tool processes' output pipes, kept for the next call once
//! their pipe has ended: a call's two readers would otherwise be two thread
//! creations and exits per call, a visible share of what a short call costs the
//! daemon.
//!
//! Unbounded on purpose: a reader blocks on its pipe for as long as the tool
//! writes, so a fixed pool could leave a call's pipe unread (and the call stuck
//! on a full pipe) behind other calls' readers. An idle thread waits
//! [`IDLE_LIMIT`] for work, then exits.

use std::sync::Mutex;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::time::Duration;

/// How long an idle reader waits for the next pipe before it exits.
const IDLE_LIMIT: Duration = Duration::from_secs(30);

/// Work for a reader thread.
type Work = Box<dyn FnOnce() + Send + 'static>;

/// Senders of the idle readers, each waiting for one piece of work.
static IDLE: Mutex<Vec<Sender<Work>>> = Mutex::new(Vec::new());

/// Runs `work` on an idle reader thread, or a new one if none is idle.
pub(super) fn run(work: Work) {
    let mut work = work;
    loop {
        let idle = IDLE.lock().ok().and_then(|mut v| v.pop());
        let Some(tx) = idle else { break };
        // A reader that timed out between its registration and this send has
        // dropped its receiver: the work comes back, and the next one is tried.
        match tx.send(work) {
            Ok(()) => return,
            Err(back) => work = back.0,
        }
    }
    let spawned = std::thread::Builder::new()
        .name("output-reader".into())
        .spawn(move || serve(work));
    if let Err(e) = spawned {
        // Nothing else would read the pipe: say so, as a failed spawn of the
        // old per-call thread did (it panicked).
        tracing::error!("cannot start an output reader thread: {e}");
    }
}

/// A reader's life: the work it was started for, then whatever comes while it
/// waits idle.
fn serve(first: Work) {
    first();
    loop {
        let (tx, rx): (Sender<Work>, Receiver<Work>) = channel();
        match IDLE.lock() {
            Ok(mut idle) => idle.push(tx),
            Err(_) => return,
        }
        match rx.recv_timeout(IDLE_LIMIT) {
            Ok(work) => work(),
            // Gone from the list when its sender is popped and fails; a
            // timed-out reader leaves its dead sender there until then.
            Err(_) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn every_piece_of_work_runs_and_threads_are_reused() {
        let done = Arc::new(AtomicUsize::new(0));
        let (tx, rx) = channel::<std::thread::ThreadId>();
        let mut ids = std::collections::HashSet::new();
        for _ in 0..20 {
            let (done, tx) = (done.clone(), tx.clone());
            run(Box::new(move || {
                done.fetch_add(1, Ordering::SeqCst);
                let _ = tx.send(std::thread::current().id());
            }));
            // One at a time: the reader is idle again before the next.
            ids.insert(rx.recv_timeout(Duration::from_secs(5)).unwrap());
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(done.load(Ordering::SeqCst), 20);
        // Other tests share the pool, so not always the same thread; but far
        // fewer than one a piece.
        assert!(
            ids.len() <= 10,
            "{} threads for 20 pieces of work",
            ids.len()
        );
    }

    #[test]
    fn concurrent_work_does_not_wait_for_a_busy_reader() {
        // Ten readers blocked at once: the eleventh still runs.
        let (release_tx, release_rx) = channel::<()>();
        let release_rx = Arc::new(Mutex::new(release_rx));
        let blocked = Arc::new(AtomicUsize::new(0));
        for _ in 0..10 {
            let (rx, blocked) = (release_rx.clone(), blocked.clone());
            run(Box::new(move || {
                blocked.fetch_add(1, Ordering::SeqCst);
                let _ = rx.lock().unwrap().recv();
            }));
        }
        let (ran_tx, ran_rx) = channel();
        run(Box::new(move || {
            let _ = ran_tx.send(());
        }));
        assert!(ran_rx.recv_timeout(Duration::from_secs(5)).is_ok());
        for _ in 0..10 {
            let _ = release_tx.send(());
        }
    }
}
