//! The control API's client, which sends the request bodies of
//! [`crate::protocol::control`] over the unix socket ([`client`]). The server
//! (`daemon::api`) and the clients (`commands::clients`) use those same types, as
//! pueue's daemon and client share `pueue_lib::message`, so the two ends cannot
//! drift apart.
//!
//! Below `daemon` and `commands` in the layering: nothing here knows the
//! scheduler, the approvals' channels or the command line.

pub mod client;
pub mod task_view;

pub use client::{ClientError, LineStream};
