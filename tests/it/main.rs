//! Integration tests: the real `harnessd` binary against a fake Messages API on
//! 127.0.0.1. All in one test binary.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr
)]
// A scenario test reads top to bottom; the function-length limit is for the crate.
#![allow(clippy::too_many_lines)]

mod common;

mod allow_rules;
mod api;
mod architecture;
mod attack_audit;
mod attack_durability;
mod attack_late;
mod attack_ops;
mod attack_regressions;
mod audit;
mod audit_attribution;
mod audit_query;
mod audit_show;
mod boundary_rules;
mod bounded;
mod cgroup_cleanup;
mod check;
mod compaction;
mod connections;
mod cost;
mod daemon;
mod defaults;
mod disk_full;
mod docs;
mod escape;
mod failpoints;
mod guard;
mod inprocess;
mod kill_loop;
mod local_servers;
mod log_is_truth;
mod log_replaced;
mod loose_ends;
mod memory_budget;
mod operator;
mod operators_group;
mod out_files;
mod paths;
mod policy_cli;
mod programs;
mod protocol;
mod queue;
mod queued_descriptors;
mod records;
mod reload;
mod reload_files_apart;
mod reserve;
mod restart_keeps_queue;
mod resume;
mod sandbox_git;
mod sandbox_ipc;
mod sandbox_metadata;
mod sandbox_read_only;
mod shell_diff;
mod stops;
mod stream_deadline;
mod streaming;
mod strict_exit;
mod systemd;
mod terminal;
mod tool_uid;
mod tools;
mod workspace_owners;
mod workspace_race;
