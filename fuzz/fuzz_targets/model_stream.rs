//! The streamed-response parsers: SSE framing of arbitrary bytes, cut at a point
//! the input chooses, and assembly of whatever events come out. Neither may panic
//! or loop, whatever the model API (or a man in the middle) sends.
//! Run with `cargo +nightly fuzz run model_stream` from the repository root.
#![no_main]

use harnessd::llm::{Assembler, SseFramer};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let cut = data.first().map_or(0, |&b| usize::from(b)).min(data.len());
    let (a, b) = data.split_at(cut);
    let mut framer = SseFramer::default();
    let mut events = Vec::new();
    let mut assembler = Assembler::default();
    for piece in [a, b] {
        if framer.push(piece, &mut events).is_err() {
            return;
        }
        for ev in events.drain(..) {
            if assembler.apply(&ev).is_err() {
                return;
            }
        }
    }
    let _ = assembler.finish();
});
