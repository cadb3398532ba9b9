//! Integration tests: the real `harnessd` binary against a fake Messages API on
//! 127.0.0.1. All in one test binary.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

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
mod function_length;
mod guard;
mod inprocess;
mod kill_loop;
mod loose_ends;
mod operator;
mod operators_group;
mod out_files;
mod paths;
mod policy_cli;
mod protocol;
mod queue;
mod records;
mod reload;
mod reserve;
mod resume;
mod shell_diff;
mod stops;
mod streaming;
mod systemd;
mod terminal;
mod tools;
mod workspace_owners;
mod workspace_race;
