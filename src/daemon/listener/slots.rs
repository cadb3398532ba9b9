//! The control connections' slots: at most `daemon.max_connections` are served at
//! once, and a connection that has sent nothing yet can never keep a new one out.
//! When every slot is taken, the oldest connection that has not sent a byte is
//! closed to make room; only when every open connection has sent something is the
//! new one refused. So idle peers (a client that connected and went quiet, or a
//! flood of bare connects) cannot lock out `/healthz` or an operator, while a
//! connection in the middle of a request or following `/v1/events` keeps its slot.
//! hyper's head timeout still closes a connection whose head trickles in.
//!
//! This module only counts and chooses; the accept loop closes the chosen
//! connection through its token.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_util::sync::CancellationToken;

/// One open connection as the slots see it.
struct Open {
    /// Set by [`Heard`] at the first byte the peer sends.
    heard: Arc<AtomicBool>,
    /// Cancelled to close the connection when its slot is given to a newer one.
    evict: CancellationToken,
    /// Requests of a console session being answered on it.
    sessions: Arc<AtomicUsize>,
}

/// The slots of one pool (the operators', or the refused peers').
pub struct Slots {
    max: usize,
    /// Whether only a console session's request keeps a slot (the TCP listener,
    /// where there is no peer uid to tell an operator from anyone else).
    sessions_only: bool,
    /// Open connections by admission order (the key), so the oldest idle one is
    /// found first.
    open: Mutex<(u64, BTreeMap<u64, Open>)>,
}

/// A taken slot: given back when dropped (when the connection's task ends).
pub struct Slot {
    slots: Arc<Slots>,
    id: u64,
    /// Set at the peer's first byte; wrap the stream in [`Heard`] with it.
    pub heard: Arc<AtomicBool>,
    /// Cancelled when this connection must close to make room.
    pub evicted: CancellationToken,
    /// Requests of a console session being answered on this connection (see
    /// [`Slots::sessions_only`]).
    pub sessions: Arc<AtomicUsize>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Ok(mut open) = self.slots.open.lock() {
            open.1.remove(&self.id);
        }
    }
}

impl Slots {
    /// A pool of `max` slots.
    pub fn new(max: usize) -> Arc<Slots> {
        Arc::new(Slots {
            max,
            sessions_only: false,
            open: Mutex::new((0, BTreeMap::new())),
        })
    }

    /// A pool of `max` slots where, when it is full, the oldest connection not
    /// answering a console session's request gives way, silent or not: with no
    /// peer uid, a connection mid-head may be anyone's, and heads sent a byte at a
    /// time would otherwise keep every operator out.
    pub fn sessions_only(max: usize) -> Arc<Slots> {
        Arc::new(Slots {
            max,
            sessions_only: true,
            open: Mutex::new((0, BTreeMap::new())),
        })
    }

    /// A slot for a new connection: a free one, else the one of the oldest
    /// connection that has sent nothing (which is told to close), else none.
    pub fn admit(self: &Arc<Self>) -> Option<Slot> {
        let mut guard = self.open.lock().ok()?;
        let (next, open) = &mut *guard;
        if open.len() >= self.max {
            let idle = open
                .iter()
                .find(|(_, o)| !o.heard.load(Ordering::Acquire))
                .or_else(|| {
                    open.iter().find(|(_, o)| {
                        self.sessions_only && o.sessions.load(Ordering::Acquire) == 0
                    })
                })
                .map(|(id, _)| *id)?;
            if let Some(o) = open.remove(&idle) {
                o.evict.cancel();
                tracing::debug!("control socket: closed an idle connection to make room");
            }
        }
        let id = *next;
        *next += 1;
        let heard = Arc::new(AtomicBool::new(false));
        let evicted = CancellationToken::new();
        let sessions = Arc::new(AtomicUsize::new(0));
        open.insert(
            id,
            Open {
                heard: Arc::clone(&heard),
                evict: evicted.clone(),
                sessions: Arc::clone(&sessions),
            },
        );
        Some(Slot {
            slots: Arc::clone(self),
            id,
            heard,
            evicted,
            sessions,
        })
    }
}

/// A stream that notes the first byte its peer sends.
pub struct Heard<S> {
    inner: S,
    heard: Arc<AtomicBool>,
}

impl<S> Heard<S> {
    /// Wraps `inner`, setting `heard` at the first byte read from it.
    pub fn new(inner: S, heard: Arc<AtomicBool>) -> Heard<S> {
        Heard { inner, heard }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Heard<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.heard.store(true, Ordering::Release);
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Heard<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_pool_gives_the_oldest_silent_slot_and_keeps_busy_ones() {
        let slots = Slots::new(2);
        let a = slots.admit().unwrap();
        let b = slots.admit().unwrap();
        a.heard.store(true, Ordering::Release);
        // a has spoken, b has not: b makes room.
        let c = slots.admit().unwrap();
        assert!(!a.evicted.is_cancelled());
        assert!(b.evicted.is_cancelled());
        c.heard.store(true, Ordering::Release);
        // Both open connections have spoken: the next is refused.
        assert!(slots.admit().is_none());
        drop(b);
        assert!(
            slots.admit().is_none(),
            "an evicted slot is not counted twice"
        );
        drop(a);
        let d = slots.admit().unwrap();
        assert!(!d.evicted.is_cancelled());
    }

    #[test]
    fn where_sessions_only_keep_slots_a_heard_connection_gives_way() {
        let slots = Slots::sessions_only(2);
        let a = slots.admit().unwrap();
        let b = slots.admit().unwrap();
        a.heard.store(true, Ordering::Release);
        b.heard.store(true, Ordering::Release);
        a.sessions.fetch_add(1, Ordering::AcqRel);
        // Both have spoken; only a is answering a session: b makes room.
        let c = slots.admit().unwrap();
        assert!(!a.evicted.is_cancelled());
        assert!(b.evicted.is_cancelled());
        c.heard.store(true, Ordering::Release);
        c.sessions.fetch_add(1, Ordering::AcqRel);
        // Both open ones answer sessions: the next is refused.
        assert!(slots.admit().is_none());
    }
}
