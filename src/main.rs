//! The `harnessd` binary: parse the command line, set up logging, run one command,
//! map its outcome to an exit code. Nothing else.

// Writes to stderr ignore errors: `eprintln!` panics when stderr is on a full disk.
use clap::Parser;
use std::io::Write as _;
use std::process::ExitCode;

use harnessd::cli::{AuditCommand, Cli, Command};
use harnessd::commands;
use harnessd::commands::clients::ClientCommand;
use harnessd::commands::error::{CliError, exit};

fn main() -> ExitCode {
    // The sandbox helper is this binary re-executed; it must start fast and touch
    // nothing else, so it is dispatched before clap, logging or tokio.
    if std::env::args_os().nth(1).as_deref()
        == Some(std::ffi::OsStr::new(harnessd::sandbox::HELPER_ARG))
    {
        return exit(harnessd::sandbox::helper_main());
    }
    if std::env::args_os().nth(1).as_deref()
        == Some(std::ffi::OsStr::new(
            harnessd::sandbox::spawn_server::SPAWN_SERVER_ARG,
        ))
    {
        return exit(harnessd::sandbox::spawn_server::spawn_server_main());
    }
    let cli = Cli::parse();
    // Dropped when `main` returns, after the command: the file layer's last lines
    // are written then. (`process::exit` would skip the drop and lose them.)
    let _log_guard = init_logging();
    // Tools run as this executable re-executed (the sandbox helper). Through
    // /proc/self/exe, so a daemon whose binary was replaced by an upgrade still
    // starts helpers of its own version.
    let self_exe = std::path::PathBuf::from("/proc/self/exe");
    let result = (if self_exe.exists() {
        Ok(self_exe)
    } else {
        std::env::current_exe()
    })
    .map_err(|e| CliError::Failed(format!("cannot find the harnessd executable: {e}")))
    .and_then(|helper| dispatch(cli, helper));
    match result {
        Ok(code) => code,
        // A reader that went away (`| head`) is not an error worth a line: the
        // output it wanted is written, the rest had nowhere to go.
        Err(e) if e.is_broken_pipe() => ExitCode::SUCCESS,
        Err(e) => {
            // A config error (either file, the API key) is shown as it is, without a
            // chain, and is a usage error (docs/commands.md). Errors can quote model
            // or file text (a transcript that does not parse): escaped.
            let _ = writeln!(
                std::io::stderr(),
                "error: {}",
                harnessd::text::escape_text(&e.message())
            );
            e.exit_code()
        }
    }
}

/// Runs the command; returns its exit code.
fn dispatch(cli: Cli, helper: std::path::PathBuf) -> Result<ExitCode, CliError> {
    let env = |name: &str| std::env::var(name).ok();
    let root = cli.root;
    match cli.command {
        Command::Run {
            yes,
            max_turns,
            strict,
            task,
        } => {
            let opts = commands::run::RunOptions {
                root,
                task,
                yes,
                max_turns,
                strict,
                helper,
            };
            commands::run::run(opts, env)
        }
        Command::Serve => commands::serve::run(root, helper, env),
        Command::Check { json } => commands::check::run(&root, json, &helper, env),
        Command::Skills { json } => commands::skills::run(&root, json),
        Command::Init { dir } => commands::init::run(&dir.unwrap_or(root)),
        Command::Sandbox { read_only, command } => {
            commands::sandbox::run(&root, command, sandbox_profile(read_only), &helper)
        }
        Command::Mcp { command } => commands::mcp::run(&root, command, &helper),
        Command::Policy { command } => commands::policy::dispatch(&root, command, &helper),
        Command::Audit { command } => match command {
            AuditCommand::Verify { head, json } => {
                commands::audit::verify(&root, head.as_ref(), json)
            }
            AuditCommand::Schema => commands::audit::schema(),
        },
        Command::Replay {
            settings,
            paths,
            json,
        } => commands::replay::run(&root, settings.as_deref(), &paths, json),
        Command::Submit {
            wait,
            max_turns,
            strict,
            model,
            traceparent,
            file,
            json,
            task,
        } => {
            let prompt = match commands::clients::prompt_from(task, file.as_deref()) {
                Ok(p) => p,
                Err(code) => return Ok(exit(code)),
            };
            let submit = ClientCommand::Submit {
                prompt,
                max_turns,
                model,
                traceparent,
                wait,
                strict,
            };
            client(&root, submit, json)
        }
        Command::Tasks { json } => client(&root, ClientCommand::Tasks, json),
        Command::Show { id, json } => commands::show::run(&root, &id, json),
        Command::Cancel { id, json } => client(&root, ClientCommand::Cancel(id), json),
        Command::Resume { id, json } => client(&root, ClientCommand::Resume(id), json),
        Command::Approvals { json } => client(&root, ClientCommand::Approvals, json),
        Command::Approve { id, remember, json } => {
            client(&root, answer(id, true, None, remember), json)
        }
        Command::Deny { id, reason, json } => client(&root, answer(id, false, reason, false), json),
        Command::ConsoleUrl { name, json } => {
            client(&root, ClientCommand::ConsoleUrl { name }, json)
        }
        Command::Events(args) => commands::events::run(&root, args),
        Command::Completions { shell } => commands::completions::completions(shell),
        Command::Man => commands::completions::man(),
    }
}

/// The profile `harnessd sandbox` runs its command under.
fn sandbox_profile(read_only: bool) -> harnessd::sandbox::Profile {
    if read_only {
        harnessd::sandbox::Profile::ReadOnly
    } else {
        harnessd::sandbox::Profile::Write
    }
}

fn answer(id: String, approve: bool, reason: Option<String>, remember: bool) -> ClientCommand {
    ClientCommand::Answer {
        id,
        approve,
        reason,
        remember,
    }
}

fn client(root: &std::path::Path, cmd: ClientCommand, json: bool) -> Result<ExitCode, CliError> {
    commands::clients::run(root, cmd, json)
}

/// Diagnostics to stderr (journald under systemd), filtered by `HARNESSD_LOG`
/// (default `warn`), and to a daily-rolling file in `HARNESSD_LOG_DIR` when set.
/// Never into events.jsonl. The guard flushes the file on exit.
fn init_logging() -> Option<tracing_appender::non_blocking::WorkerGuard> {
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::filter::{FilterExt as _, filter_fn};
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let filter = || {
        tracing_subscriber::EnvFilter::try_from_env("HARNESSD_LOG")
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"))
    };
    let notice = || filter_fn(|m| m.target() == harnessd::text::NOTICE);
    // Notices are lines for the operator: bare, as the library wrote them, and
    // shown whatever `HARNESSD_LOG` filters.
    let notices = tracing_subscriber::fmt::layer()
        .with_ansi(false)
        .without_time()
        .with_level(false)
        .with_target(false)
        .with_writer(std::io::stderr)
        .with_filter(notice());
    // Colour only for a person at a terminal: journald and log files keep the
    // escape codes as text otherwise.
    let stderr = tracing_subscriber::fmt::layer()
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .with_filter(filter().and(notice().not()));
    let (file, guard) = match std::env::var_os("HARNESSD_LOG_DIR") {
        Some(dir) => {
            let appender = tracing_appender::rolling::daily(dir, "harnessd.log");
            let (writer, guard) = tracing_appender::non_blocking(appender);
            let layer = tracing_subscriber::fmt::layer()
                .with_ansi(false)
                .with_writer(writer)
                .with_filter(filter().or(notice()));
            (Some(layer), Some(guard))
        }
        None => (None, None),
    };
    tracing_subscriber::registry()
        .with(notices)
        .with(stderr)
        .with(file)
        .init();
    // Panics go to the same place as every other diagnostic, once each.
    harnessd::agent::install_panic_hook();
    guard
}
