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

mod agents_md;
mod allow_rules;
mod api;
mod architecture;
mod audit;
mod audit_attribution;
mod audit_query;
mod audit_show;
mod boundary_rules;
mod bounded;
mod cgroup_cleanup;
mod cgroup_reaping;
mod check;
mod compaction;
mod completions;
mod connections;
mod console_browser;
mod console_chat_links;
mod console_cookie_shadowing;
mod console_host_header;
mod console_login;
mod console_origin_config;
mod console_pages;
mod console_rebinding;
mod console_tcp_slots;
mod control_api_errors;
mod cost;
mod daemon;
mod defaults;
mod delegation;
mod delegation_attacks;
mod direct_exec_diff;
mod disk_full;
mod docs;
mod escape;
mod events_sse;
mod failpoints;
mod forged_log_files;
mod forged_transcripts;
mod guard;
mod hooks;
mod hostile_call_text;
mod hostile_commands;
mod inprocess;
mod kill_loop;
mod live_text_order;
mod local_servers;
mod log_is_truth;
mod log_replaced;
mod loose_ends;
mod mcp_daemon;
mod mcp_policy;
mod mcp_proto;
mod mcp_reference;
mod mcp_remote;
mod mcp_sandbox;
mod mcp_servers;
mod memory_budget;
mod notify;
mod operator;
mod operators_group;
mod out_files;
mod package;
mod paths;
mod pause_turn_budget;
mod policy_cli;
mod private_files;
mod programs;
mod protocol;
mod queue;
mod queued_descriptors;
mod readme;
mod records;
mod refused_peers;
mod reload;
mod reload_files_apart;
mod remember_refusals;
mod reserve;
mod restart_keeps_queue;
mod resume;
mod sandbox_git;
mod sandbox_ipc;
mod sandbox_metadata;
mod sandbox_read_only;
mod sandbox_x32;
mod shared_spawn;
mod shell_diff;
mod shutdown;
mod skills;
mod spawn_server;
mod stalled_answers;
mod stops;
mod stream_deadline;
mod streaming;
mod strict_exit;
mod systemd;
mod telemetry;
mod terminal;
mod tool_uid;
mod tools;
mod verify_head;
mod worked_examples;
mod workspace_owners;
mod workspace_race;
