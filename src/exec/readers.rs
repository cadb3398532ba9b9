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

/// The idle readers, each waiting for one piece of work: an id and its sender.
static IDLE: Mutex<Vec<(u64, Sender<Work>)>> = Mutex::new(Vec::new());

/// Ids of idle registrations, so a reader can find its own again.
static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Runs `work` on an idle reader thread, or a new one if none is idle.
pub(super) fn run(work: Work) {
    let idle = IDLE.lock().ok().and_then(|mut v| v.pop());
    if let Some((_, tx)) = idle {
        // A popped reader waits until it has this (see `serve`), so the send
        // only fails if the reader thread is gone; the work then gets a new one.
        match tx.send(work) {
            Ok(()) => return,
            Err(back) => return spawn(back.0),
        }
    }
    spawn(work);
}

fn spawn(work: Work) {
    let spawned = std::thread::Builder::new()
        .name("output-reader".into())
        .spawn(move || serve(work));
    if let Err(e) = spawned {
        // As the per-call thread of before did: nothing would read the pipe, and
        // the task's guard answers a panic for what it owed.
        panic!("cannot start an output reader thread: {e}");
    }
}

/// A reader's life: the work it was started for, then whatever comes while it
/// waits idle.
fn serve(first: Work) {
    first();
    loop {
        let (tx, rx): (Sender<Work>, Receiver<Work>) = channel();
        let id = NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        match IDLE.lock() {
            Ok(mut idle) => idle.push((id, tx)),
            Err(_) => return,
        }
        let work = match rx.recv_timeout(IDLE_LIMIT) {
            Ok(work) => work,
            Err(_) => {
                // Leave only if no caller took this registration: one that
                // popped it is about to send, and its work must not be lost.
                let Ok(mut idle) = IDLE.lock() else { return };
                match idle.iter().position(|(i, _)| *i == id) {
                    Some(at) => {
                        idle.remove(at);
                        return;
                    }
                    None => {
                        drop(idle);
                        match rx.recv() {
                            Ok(work) => work,
                            Err(_) => return,
                        }
                    }
                }
            }
        };
        work();
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
