//! One module per subcommand. Each returns the process exit code; only `main`
//! exits.

pub mod check;
pub mod clients;
pub mod init;
pub mod policy;
pub mod progress;
pub mod replay;
pub mod run;
pub mod sandbox;

/// Exit code of a usage or config error.
pub const EXIT_CONFIG: i32 = 2;
