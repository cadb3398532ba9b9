//! Text from outside, made safe to keep and to show: [`truncate`] cuts long text in
//! the middle (records, the model's view of a result), [`escape`] makes hostile text
//! inert before it reaches a terminal. The functions are re-exported here.

pub mod escape;
pub mod truncate;

pub use escape::{
    DEFAULT_WIDTH, Mode, StreamEscaper, escape, escape_json, escape_line, escape_text, is_hidden,
    render_input, terminal_width, wrap,
};
pub use truncate::{truncate_head, truncate_middle};

/// The tracing target of lines meant for the operator as they are (`harnessd serving
/// on …`, `config reloaded (watch): …`, the chain head): code below the command
/// line writes them as `tracing::info!(target: NOTICE, …)`, never to stderr itself,
/// and `main` shows them on stderr, bare and whatever `HARNESSD_LOG` filters, and in
/// the `HARNESSD_LOG_DIR` file like every other diagnostic.
pub const NOTICE: &str = "harnessd::notice";
