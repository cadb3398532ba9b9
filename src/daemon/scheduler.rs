//! The queue of tasks waiting for a slot: `daemon.max_concurrent_tasks` slots,
//! handed out in the order the tasks joined (first in, first out). A plain queue
//! under a short lock, with no task of its own: a slot given back goes straight to
//! the oldest waiter still waiting.
//!
//! A waiter is a oneshot receiver, so a queued task holds no descriptor. A waiter
//! dropped before its turn (its task was cancelled while queued) is skipped, and a
//! slot sent to it just as it went is given back at once. Once the queue is closed
//! (the daemon stops) no slot is handed out again and every waiter is told so: the
//! queued tasks do not start and stay queued, on disk, for the next start.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::oneshot;

/// What the queue's lock guards.
struct Queue {
    /// Slots nobody holds; only ever above 0 while nobody waits.
    free: usize,
    /// The waiters, oldest first; each is sent its slot when its turn comes.
    waiting: VecDeque<oneshot::Sender<Slot>>,
    /// No slot is handed out any more.
    closed: bool,
}

/// The slots and their queue. Cheap to clone; every clone is the same queue.
#[derive(Clone)]
pub struct SlotQueue {
    inner: Arc<Mutex<Queue>>,
}

/// A slot, held by a running task: given back when dropped.
pub struct Slot {
    /// `None` once given back (or never counted: see [`SlotQueue::hand_on`]).
    queue: Option<Arc<Mutex<Queue>>>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(inner) = self.queue.take() {
            SlotQueue { inner }.hand_on();
        }
    }
}

/// A place in the queue: resolves to its slot when its turn comes, or to an error
/// when the queue is closed first.
pub type Waiter = oneshot::Receiver<Slot>;

impl SlotQueue {
    /// A queue with `slots` slots, all free.
    pub fn new(slots: usize) -> SlotQueue {
        SlotQueue {
            inner: Arc::new(Mutex::new(Queue {
                free: slots,
                waiting: VecDeque::new(),
                closed: false,
            })),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Queue> {
        // The sections below cannot panic midway; a poisoned lock holds a whole queue.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn slot(&self) -> Slot {
        Slot {
            queue: Some(Arc::clone(&self.inner)),
        }
    }

    /// Joins the back of the queue (at once served if a slot is free). Callers join
    /// in the order their tasks must start.
    pub fn join(&self) -> Waiter {
        let (tx, rx) = oneshot::channel();
        let mut q = self.lock();
        if q.closed {
            return rx;
        }
        if q.free > 0 {
            q.free -= 1;
            // `rx` is alive, so the send cannot fail; were it to, the slot is
            // counted free again rather than dropped under the lock.
            if let Err(mut slot) = tx.send(self.slot()) {
                slot.queue = None;
                q.free += 1;
            }
        } else {
            q.waiting.push_back(tx);
        }
        rx
    }

    /// A slot given back: to the oldest waiter still waiting, else free. After
    /// [`SlotQueue::close`] it is neither.
    fn hand_on(&self) {
        let mut q = self.lock();
        if q.closed {
            return;
        }
        while let Some(tx) = q.waiting.pop_front() {
            match tx.send(self.slot()) {
                Ok(()) => return,
                // Its task was cancelled while queued: the next one's turn. The slot
                // comes back here without being given back a second time.
                Err(mut slot) => slot.queue = None,
            }
        }
        q.free += 1;
    }

    /// Hands out no slot any more; every waiter is told at once (its receiver
    /// sees the sender dropped).
    pub fn close(&self) {
        let mut q = self.lock();
        q.closed = true;
        q.waiting.clear();
    }

    /// Whether [`SlotQueue::close`] was called.
    pub fn is_closed(&self) -> bool {
        self.lock().closed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ready(w: &mut Waiter) -> Option<Slot> {
        w.try_recv().ok()
    }

    #[test]
    fn slots_go_to_waiters_in_the_order_they_joined() {
        let q = SlotQueue::new(1);
        let mut a = q.join();
        let mut b = q.join();
        let mut c = q.join();
        let held = ready(&mut a).expect("a free slot is taken at once");
        assert!(ready(&mut b).is_none() && ready(&mut c).is_none());
        drop(held);
        let held = ready(&mut b).expect("the oldest waiter is next");
        assert!(ready(&mut c).is_none());
        drop(held);
        drop(ready(&mut c).expect("then the next"));
        // Every slot came back: a new waiter is served at once.
        assert!(ready(&mut q.join()).is_some());
    }

    #[test]
    fn a_cancelled_waiter_gives_its_turn_and_its_slot_back() {
        let q = SlotQueue::new(1);
        let mut a = q.join();
        let held = ready(&mut a).unwrap();
        let gone = q.join();
        let mut next = q.join();
        drop(gone);
        drop(held);
        let held = ready(&mut next).expect("the dropped waiter was skipped");
        // A slot sent to a waiter that is dropped before it takes it comes back.
        let late = q.join();
        drop(held);
        drop(late);
        assert!(ready(&mut q.join()).is_some(), "the slot was lost");
    }

    #[test]
    fn a_closed_queue_starts_nobody() {
        let q = SlotQueue::new(1);
        let mut a = q.join();
        let held = ready(&mut a).unwrap();
        let mut waiting = q.join();
        q.close();
        assert!(q.is_closed());
        assert!(matches!(
            waiting.try_recv(),
            Err(oneshot::error::TryRecvError::Closed)
        ));
        drop(held);
        assert!(matches!(
            q.join().try_recv(),
            Err(oneshot::error::TryRecvError::Closed)
        ));
    }
}
