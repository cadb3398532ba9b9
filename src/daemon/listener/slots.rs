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
use std::sync::atomic::{AtomicBool, Ordering};
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
}

/// The slots of one pool (the operators', or the refused peers').
pub struct Slots {
    max: usize,
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
        open.insert(
            id,
            Open {
                heard: Arc::clone(&heard),
                evict: evicted.clone(),
            },
        );
        Some(Slot {
            slots: Arc::clone(self),
            id,
            heard,
            evicted,
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
}
