//! The control API as both ends speak it: the request and response bodies of
//! every endpoint ([`message`]) and the client that sends them over the unix
//! socket ([`client`]). The server (`daemon::api`) and the clients
//! (`commands::clients`) use these same types, as pueue's daemon and client share
//! `pueue_lib::message`, so the two ends cannot drift apart.
//!
//! Below `daemon` and `commands` in the layering: nothing here knows the
//! scheduler, the approvals' channels or the command line.

pub mod client;
pub mod message;

pub use client::{ClientError, LineStream};
pub use message::{
    Approval, ApprovalList, DecisionRequest, DecisionResponse, ErrorBody, ErrorDetail,
    SubmitRequest, SubmitResponse, Task, TaskList,
};
