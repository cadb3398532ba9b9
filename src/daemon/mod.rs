//! `harnessd serve`: the long-running service. Wiring only: the control API
//! ([`api`]), the scheduler ([`tasks`]), approvals ([`approvals`]), hot reload,
//! metrics ([`metrics`]), signals and the systemd handshake.

pub mod api;
pub mod approvals;
pub mod client;
pub mod metrics;
pub mod serve;
pub mod tasks;
