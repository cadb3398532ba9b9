//! `harnessd serve`: the long-running service. Wiring only: the control API
//! ([`api`]) and who may call it ([`access`]), the socket's directory ([`socket`]),
//! the scheduler ([`tasks`]), approvals ([`approvals`]), hot reload, metrics
//! ([`metrics`]), signals and the systemd handshake.

pub mod access;
pub mod api;
pub mod approvals;
pub mod client;
pub mod metrics;
pub mod serve;
pub mod socket;
pub mod tasks;
