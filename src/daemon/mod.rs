//! `harnessd serve`: the long-running service. Wiring only: the control API
//! ([`api`]) and who may call it ([`access`]), the socket's directory ([`socket`]),
//! the scheduler ([`tasks`]), approvals ([`approvals`]), hot reload, metrics
//! ([`metrics`]) and the systemd handshake. [`serve`] is a library function taking
//! its shutdown trigger; the signals are installed by the `serve` command.

pub mod access;
pub mod api;
pub mod approvals;
pub mod checkpoint;
mod connection_slots;
mod events_api;
pub mod index;
pub mod loose_ends;
pub mod metrics;
mod recover;
pub mod remember;
pub mod serve;
pub mod socket;
pub mod tasks;
