//! Every parser that reads text the model wrote: the run_bash analysis (seen
//! commands, normalised forms, canonical rendering, the direct-exec check) and
//! tool-input validation.
//! Run with `cargo +nightly fuzz run model_text` from the repository root.
#![no_main]

use harnessd::policy::shell;
use harnessd::tools::{ToolInput, ToolName};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let analysis = shell::analyse(&text);
    for c in &analysis.commands {
        let _ = (c.forms(), c.canonical());
    }
    let _ = analysis.provable();
    let _ = shell::simple_command(&text);
    if let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) {
        for tool in ToolName::ALL {
            let _ = ToolInput::parse(tool, &value);
        }
    }
    for tool in ToolName::ALL {
        let _ = ToolInput::parse(tool, &serde_json::json!({"command": text, "path": text, "code": text, "content": text}));
    }
});
