//! Fixtures shared by harnessd's integration tests (`tests/it`) and benchmarks
//! (`benches/`), so neither includes the other's files by `#[path]`:
//!
//! - [`fake_api`]: a fake Anthropic Messages API, a real HTTP/1.1 server on
//!   127.0.0.1, scripted per test, recording and checking every request;
//! - [`sse`]: the event stream the fake sends when a request asks for one;
//! - [`rss`]: the peak resident memory of a child process;
//! - [`root`]: a fresh root made by `harnessd init`, its config edited;
//! - [`daemon`]: a `harnessd serve` on such a root, and requests to its socket.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

pub mod daemon;
pub mod fake_api;
pub mod long_task;
pub mod root;
pub mod rss;
pub mod sse;

pub use fake_api::{FakeApi, Reply};

/// A bench's knob: the environment variable `name` parsed, else `default` (a
/// value that does not parse counts as unset).
pub fn param<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
