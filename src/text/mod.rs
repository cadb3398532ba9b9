//! Text from outside, made safe to keep and to show: [`truncate`] cuts long text in
//! the middle (records, the model's view of a result), [`escape`] makes hostile text
//! inert before it reaches a terminal. The functions are re-exported here.

pub mod escape;
pub mod truncate;

pub use escape::{
    DEFAULT_WIDTH, Mode, StreamEscaper, escape, escape_json, escape_line, escape_text, is_hidden,
    render_input, terminal_width, wrap,
};
pub use truncate::truncate_middle;
