//! One shutdown for the whole daemon: a cancellation token every spawned task
//! watches and a tracker every task is spawned on, so that `serve` returns only
//! once each has ended (or the bound given to [`Shutdown::finish`] is over), and
//! nothing it spawned dies mid-write when the runtime goes.
//!
//! Tasks that must end before `daemon_stopping` is recorded (the checkpoint
//! keeper, the head logger, the reloader, the task runs) watch a child token that
//! `serve` cancels first and await their handles; the connections, the
//! `/v1/events` followers, the relays and the watchdog watch the token itself,
//! cancelled once `daemon_stopping` is on the record, so a follower is sent that
//! line before its stream ends.

use std::future::Future;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// The daemon's token and tracker. Cheap to clone; every clone is the same pair.
#[derive(Clone, Default)]
pub struct Shutdown {
    /// Cancelled by [`Shutdown::finish`] (and by a guard `serve` holds, on any
    /// early return); parent of every other token of the daemon.
    token: CancellationToken,
    /// Every task the daemon spawns; closed and waited for by [`Shutdown::finish`].
    tracker: TaskTracker,
}

impl Shutdown {
    /// A fresh pair: nothing spawned, nothing cancelled.
    pub fn new() -> Shutdown {
        Shutdown::default()
    }

    /// The daemon's token: cancelled when the daemon has stopped working and only
    /// the last bytes to its clients remain.
    pub fn token(&self) -> &CancellationToken {
        &self.token
    }

    /// A token cancelled with the daemon's, or on its own before it.
    pub fn child(&self) -> CancellationToken {
        self.token.child_token()
    }

    /// The tracker, for what is spawned outside this module's [`Shutdown::spawn`]
    /// (the reloader, by the services).
    pub fn tracker(&self) -> &TaskTracker {
        &self.tracker
    }

    /// Spawns `task` on the tracker: [`Shutdown::finish`] waits for it.
    pub fn spawn<F>(&self, task: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.tracker.spawn(task)
    }

    /// Cancels the token, closes the tracker and waits, at most `bound`, for every
    /// task spawned on it to end; whether they all did.
    pub async fn finish(&self, bound: Duration) -> bool {
        self.token.cancel();
        self.tracker.close();
        tokio::time::timeout(bound, self.tracker.wait())
            .await
            .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn finish_waits_for_tasks_that_watch_the_token_and_no_longer_than_the_bound() {
        let shutdown = Shutdown::new();
        let wrote = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (token, done) = (shutdown.child(), wrote.clone());
        shutdown.spawn(async move {
            token.cancelled().await;
            // The last write, after the cancellation: finish waits for it.
            tokio::time::sleep(Duration::from_millis(50)).await;
            done.store(true, std::sync::atomic::Ordering::SeqCst);
        });
        assert!(shutdown.finish(Duration::from_secs(5)).await);
        assert!(wrote.load(std::sync::atomic::Ordering::SeqCst));
        let stuck = Shutdown::new();
        stuck.spawn(std::future::pending::<()>());
        let start = tokio::time::Instant::now();
        assert!(!stuck.finish(Duration::from_secs(2)).await);
        assert_eq!(start.elapsed(), Duration::from_secs(2));
    }
}
