//! One module per subcommand. Each returns `Result<ExitCode, CliError>`
//! ([`error`]); only `main` exits. `run` and `serve` install their signal handlers here ([`signals`]) and
//! start through [`crate::services`].

// The edge: these modules are the terminal's side of the program, where answers go
// to stdout and progress and errors to stderr. Below them, diagnostics go through
// tracing (`crate::text::NOTICE` for the operator's lines).
#![allow(clippy::print_stderr)]

pub mod audit;
pub mod boundary;
pub mod check;
pub mod check_hooks;
pub mod check_mcp;
pub mod clients;
pub mod completions;
pub mod error;
pub mod events;
pub mod init;
pub mod listing;
pub mod mcp;
pub mod policy;
pub mod progress;
pub mod replay;
pub mod run;
pub mod sandbox;
pub mod serve;
pub mod show;
pub mod signals;
pub mod skills;
pub mod table;
pub mod tally;
pub mod tasks_offline;
pub mod terminal_approver;
pub mod wait;

/// Exit code of a usage or config error.
pub const EXIT_CONFIG: i32 = 2;

/// Loads the root's config and policy; on error prints it and returns the exit
/// code the command should end with.
pub fn load_root(root: &std::path::Path) -> Result<crate::config::Loaded, i32> {
    crate::config::load(root).map_err(|e| {
        eprintln!("error: {}", crate::text::escape_text(&e.to_string()));
        EXIT_CONFIG
    })
}

/// The runtime `run` and `serve` work on: two workers, I/O and timers.
fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    // Large buffers (response bodies, serialised transcripts) straight from mmap
    // and back to the system when freed: glibc otherwise raises this threshold
    // after the first large free, and later ones come from its arenas, are copied
    // when they grow, and stay resident past what daemon.memory_mb's budget counted.
    // SAFETY: mallopt only changes a malloc parameter, before the runtime's threads.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 256 * 1024);
    }
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
}
