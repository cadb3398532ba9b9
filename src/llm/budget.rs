//! The one memory budget that the response bodies of all running tasks share
//! (`daemon.memory_mb`): a response being read holds a [`Lease`] that grows as its
//! bytes arrive, and a growth that would pass the budget waits for room.
//!
//! Growing in small steps keeps a normal answer (a few KiB) from reserving the
//! worst case up front, but waiting while holding part of the budget can deadlock:
//! two responses each holding half, each waiting for the other's half. The rule
//! that prevents it is the banker's, simplified by every response having the same
//! largest claim `per_response` (`api.max_response_mb`, with the copies it costs):
//! a growth is granted only if afterwards the free budget still covers what the
//! largest holder may yet need. That holder can then always finish, and when it
//! does it frees at least what any other may yet need, so some response always
//! makes progress and every waiter eventually gets its room.
//!
//! It holds counts, never bytes: what is charged is the caller's estimate of what
//! the body costs in memory. Dropping a lease (a finished or cancelled read)
//! returns its bytes and wakes the waiters.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// Why a budget cannot be made or a lease cannot grow.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BudgetError {
    /// One response's largest cost does not fit in the whole budget: it could never
    /// be read, so this is a configuration error found before any request.
    #[error("one response may cost {per_response} bytes, more than the whole budget of {total}")]
    NeverFits {
        /// The largest cost of one response.
        per_response: u64,
        /// The whole budget.
        total: u64,
    },
    /// The lease would pass the largest cost of one response.
    #[error("a response may cost at most {0} bytes")]
    PastClaim(u64),
}

/// The shared budget; clones share it.
#[derive(Debug, Clone)]
pub struct ResponseBudget {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    total: u64,
    per_response: u64,
    /// What each live lease holds, by lease id. A short section, never held
    /// across an await.
    state: Mutex<State>,
    /// Notified (all waiters) whenever a lease shrinks or ends.
    room: Notify,
}

#[derive(Debug, Default)]
struct State {
    next_id: u64,
    /// (lease id, bytes held) of every live lease.
    held: Vec<(u64, u64)>,
}

impl State {
    fn used(&self) -> u64 {
        self.held.iter().map(|(_, h)| h).sum()
    }
}

impl ResponseBudget {
    /// A budget of `total` bytes for responses that may each cost up to
    /// `per_response`.
    pub fn new(total: u64, per_response: u64) -> Result<ResponseBudget, BudgetError> {
        if per_response > total {
            return Err(BudgetError::NeverFits {
                per_response,
                total,
            });
        }
        Ok(ResponseBudget {
            inner: Arc::new(Inner {
                total,
                per_response,
                state: Mutex::new(State::default()),
                room: Notify::new(),
            }),
        })
    }

    /// A lease holding nothing yet, for one response.
    pub fn lease(&self) -> Lease {
        let mut state = self.inner.lock();
        let id = state.next_id;
        state.next_id += 1;
        state.held.push((id, 0));
        Lease {
            inner: self.inner.clone(),
            id,
            held: 0,
            waited: Arc::default(),
        }
    }

    /// Bytes held by all leases now.
    pub fn used(&self) -> u64 {
        self.inner.lock().used()
    }

    /// The whole budget, in bytes.
    pub fn total(&self) -> u64 {
        self.inner.total
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Every section leaves the state consistent, so a panic elsewhere while
        // holding it does not make it wrong.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Grants `bytes` more to lease `id` if that keeps the budget safe.
    fn try_grant(&self, id: u64, bytes: u64) -> bool {
        let mut state = self.lock();
        let free = self.total.saturating_sub(state.used());
        let mut largest = 0;
        for (lease, held) in &state.held {
            let after = if *lease == id { held + bytes } else { *held };
            largest = largest.max(after);
        }
        let safe = free >= bytes && free - bytes >= self.per_response.saturating_sub(largest);
        if safe && let Some((_, held)) = state.held.iter_mut().find(|(lease, _)| *lease == id) {
            *held += bytes;
        }
        safe
    }
}

/// One response's share of the budget; dropping it returns the share.
#[derive(Debug)]
pub struct Lease {
    inner: Arc<Inner>,
    id: u64,
    held: u64,
    waited: Arc<Waited>,
}

/// The time a lease spent waiting for room, for whoever times the request: that
/// wait is the daemon's own, not the peer's, so it is no part of a timeout.
#[derive(Debug, Default)]
pub struct Waited(Mutex<(Duration, Option<Instant>)>);

impl Waited {
    fn lock(&self) -> MutexGuard<'_, (Duration, Option<Instant>)> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The waiting done since the last call, a wait in progress included.
    pub fn take(&self) -> Duration {
        let mut state = self.lock();
        let mut waited = std::mem::take(&mut state.0);
        if let Some(since) = state.1.as_mut() {
            let now = Instant::now();
            waited += now - *since;
            *since = now;
        }
        waited
    }

    fn begin(&self) {
        self.lock().1 = Some(Instant::now());
    }

    fn end(&self) {
        let mut state = self.lock();
        if let Some(since) = state.1.take() {
            state.0 += since.elapsed();
        }
    }
}

impl Lease {
    /// Grows the lease by `bytes`, waiting until the budget has room for them.
    /// Past the largest cost of one response it is refused at once (the caller's
    /// cap should have stopped the read first). Cancel-safe: a dropped wait holds
    /// nothing more.
    pub async fn grow(&mut self, bytes: u64) -> Result<(), BudgetError> {
        if bytes == 0 {
            return Ok(());
        }
        let claim = self.inner.per_response;
        if self.held.saturating_add(bytes) > claim {
            return Err(BudgetError::PastClaim(claim));
        }
        let mut waiting = false;
        loop {
            // Registered before the check, so a release between the check and the
            // wait is not missed.
            let room = self.inner.room.notified();
            tokio::pin!(room);
            room.as_mut().enable();
            if self.inner.try_grant(self.id, bytes) {
                self.held += bytes;
                if waiting {
                    self.waited.end();
                }
                return Ok(());
            }
            if !waiting {
                self.waited.begin();
                waiting = true;
            }
            room.await;
        }
    }

    /// How long this lease has waited for room, shared.
    pub fn waited(&self) -> Arc<Waited> {
        self.waited.clone()
    }

    /// Bytes this lease holds.
    pub fn held(&self) -> u64 {
        self.held
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let mut state = self.inner.lock();
        state.held.retain(|(lease, _)| *lease != self.id);
        drop(state);
        self.inner.room.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_response_larger_than_the_budget_is_refused_up_front() {
        assert_eq!(
            ResponseBudget::new(10, 11).unwrap_err(),
            BudgetError::NeverFits {
                per_response: 11,
                total: 10
            }
        );
    }

    #[tokio::test]
    async fn a_growth_past_the_budget_waits_for_room_and_gets_it_on_drop() {
        let budget = ResponseBudget::new(100, 60).unwrap();
        let mut a = budget.lease();
        a.grow(60).await.unwrap();
        let mut b = budget.lease();
        // 60 held by a, 40 free: b may take nothing a might still need (a needs 0
        // more, so 40 is safe), but not 41.
        b.grow(40).await.unwrap();
        let wait = tokio::time::timeout(Duration::from_millis(50), b.grow(1)).await;
        assert!(wait.is_err(), "b waits for room");
        assert_eq!(budget.used(), 100);
        drop(a);
        tokio::time::timeout(Duration::from_secs(1), b.grow(20))
            .await
            .expect("room once a is dropped")
            .unwrap();
        assert_eq!(b.held(), 60);
        assert!(b.grow(1).await.is_err(), "past one response's claim");
    }

    #[tokio::test]
    async fn a_cancelled_wait_holds_nothing_and_a_dropped_lease_returns_all() {
        let budget = ResponseBudget::new(10, 10).unwrap();
        let mut a = budget.lease();
        a.grow(8).await.unwrap();
        let mut b = budget.lease();
        let wait = tokio::time::timeout(Duration::from_millis(20), b.grow(5)).await;
        assert!(wait.is_err());
        assert_eq!(budget.used(), 8, "the cancelled wait took nothing");
        drop(a);
        drop(b);
        assert_eq!(budget.used(), 0);
    }

    /// The deadlock incremental growth invites: two responses each holding half
    /// and each needing the other's half. The rule never lets the second take what
    /// the first still needs, so both finish, whatever the interleaving.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn many_responses_growing_in_steps_never_deadlock() {
        let budget = ResponseBudget::new(1000, 400).unwrap();
        let mut readers = Vec::new();
        for r in 0..12u64 {
            let budget = budget.clone();
            // Awaited below, each of them.
            readers.push(tokio::spawn(async move {
                let mut lease = budget.lease();
                // Different sizes and steps, some reaching the full claim.
                let size = 150 + (r * 53) % 251;
                let step = 1 + r % 7;
                while lease.held() < size {
                    let n = step.min(size - lease.held());
                    lease.grow(n).await.unwrap();
                    assert!(budget.used() <= budget.total());
                    tokio::task::yield_now().await;
                }
            }));
        }
        let all = futures::future::join_all(readers);
        let done = tokio::time::timeout(Duration::from_secs(5), all)
            .await
            .expect("every response finished: no deadlock");
        assert!(done.iter().all(Result::is_ok));
        assert_eq!(budget.used(), 0);
    }
}
