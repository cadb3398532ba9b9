//! `harnessd serve`: the long-running service. [`serve`] is the daemon's life, a
//! library function taking its shutdown trigger (the signals are installed by the
//! `serve` command), with one [`shutdown`] for every task it spawns. Around it: the
//! start-up scan (`recover`), the socket's directory ([`socket`]) and its
//! `listener`, the control API ([`api`]) and who may call it ([`access`]), the
//! task [`registry`], the slot queue ([`scheduler`]) and the task runs ([`tasks`]),
//! approvals ([`approvals`]), checkpoints, and [`metrics`].

pub mod access;
pub mod api;
pub mod approvals;
pub mod checkpoint;
pub mod console;
mod listener;
pub mod login;
pub mod loose_ends;
pub mod metrics;
pub mod origin;
mod recover;
pub mod registry;
pub mod scheduler;
pub mod serve;
pub mod shutdown;
pub mod socket;
pub mod tasks;
