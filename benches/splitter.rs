//! Benchmark of the run_bash judgement on hostile input (a figure of docs/benchmarks.md): time
//! and peak heap for 500 000-character commands built to be worst cases for the
//! tokenizer (deep nesting, unterminated quotes, here-documents, many commands,
//! many deny forms), through `shell::analyse` alone and through the whole
//! `policy::decide` with the shipped settings.
//!
//! Run: `cargo bench --bench splitter` (prints the figures; asserts nothing).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use harnessd::config::{Settings, default_settings};
use harnessd::policy::{Subject, decide, shell};
use harnessd::tools::ToolName;

/// The system allocator, counting live and peak bytes.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let now = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

const LEN: usize = 500_000;

fn repeat(unit: &str) -> String {
    let mut s = unit.repeat(LEN / unit.len() + 1);
    s.truncate(s.char_indices().nth(LEN).map_or(s.len(), |(i, _)| i));
    s
}

/// Median time and peak heap above the baseline of running `f` five times.
fn measure(f: impl Fn()) -> (Duration, usize) {
    let mut times = Vec::new();
    let base = LIVE.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    for _ in 0..5 {
        let t = Instant::now();
        f();
        times.push(t.elapsed());
    }
    times.sort();
    (times[2], PEAK.load(Ordering::Relaxed) - base)
}

fn main() {
    let policy = Settings::parse(&default_settings(), "settings.json").unwrap();
    let inputs = [
        ("plain commands `ls -la /tmp; `", repeat("ls -la /tmp; ")),
        (
            "deny spellings `sudo /bin/rm -r -f -v x; `",
            repeat("sudo /bin/rm -r -f -v x; "),
        ),
        ("nested `(`", repeat("(")),
        ("nested `$(`", repeat("$(")),
        ("nested `${`", repeat("${")),
        ("backquotes `` `a` ``", repeat("`a`")),
        ("unterminated `'`", format!("'{}", repeat("a"))),
        ("here-documents `<<E\\n`", repeat("<<E\n")),
        ("`$'\\x41` escapes", repeat("$'\\x41")),
        ("one long word", repeat("a")),
        ("alternating quotes `'a'\"b\"`", repeat("'a'\"b\"")),
        ("leading keywords `{ `", repeat("{ ")),
        ("leading keywords `if `", repeat("if ")),
        ("one word of `=`", repeat("=")),
        ("`eval ` ×25 then words", "eval ".repeat(25) + &repeat("a ")),
        ("`env -S` repeated", repeat("env -S ")),
    ];
    println!(
        "{:<46} {:>12} {:>12} {:>12}",
        "input (500 000 chars)", "analyse", "decide", "peak heap"
    );
    for (name, cmd) in &inputs {
        let (t_analyse, peak_a) = measure(|| {
            std::hint::black_box(shell::analyse(cmd));
        });
        let (t_decide, peak_d) = measure(|| {
            std::hint::black_box(decide(
                &policy,
                Subject {
                    tool: ToolName::RunBash,
                    arg: Some(cmd),
                },
            ));
        });
        println!(
            "{name:<46} {:>9.1} ms {:>9.1} ms {:>9.1} MiB",
            t_analyse.as_secs_f64() * 1e3,
            t_decide.as_secs_f64() * 1e3,
            peak_a.max(peak_d) as f64 / (1024.0 * 1024.0)
        );
    }
}
