//! Relaying a job's output to harnessd's own stdout and stderr as it arrives
//! (`harnessd sandbox -- CMD`).
//!
//! The job never gets harnessd's descriptors: it writes into pipes, and this copies
//! what comes out. Handing it the operator's terminal would let it change the
//! terminal's modes (`stty -echo <&1`) and read the next keystrokes from it. Where
//! harnessd's own stream is a terminal, the bytes are escaped as text
//! ([`crate::text::StreamEscaper`]), because a command's output can drive a
//! terminal as well as model text can; to a pipe or a file they go as they are, so
//! `harnessd sandbox -- CMD > out` keeps the command's exact bytes.

use std::io::{IsTerminal, Write};

use crate::text::StreamEscaper;

/// One of harnessd's own output streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Target {
    /// harnessd's stdout.
    Stdout,
    /// harnessd's stderr.
    Stderr,
}

/// Copies one stream of the job to one of harnessd's.
#[derive(Debug)]
pub(crate) struct Relay {
    target: Target,
    /// Present when the target is a terminal.
    escaper: Option<StreamEscaper>,
}

impl Relay {
    /// A relay to `target`, escaping if `target` is a terminal now.
    pub(crate) fn new(target: Target) -> Relay {
        let terminal = match target {
            Target::Stdout => std::io::stdout().is_terminal(),
            Target::Stderr => std::io::stderr().is_terminal(),
        };
        Relay {
            target,
            escaper: terminal.then(StreamEscaper::default),
        }
    }

    /// Writes one chunk of the job's output. `false` when the target is gone (a
    /// closed pipe): the caller stops reading, so the job sees a broken pipe as it
    /// would have writing there itself.
    pub(crate) fn write(&mut self, chunk: &[u8]) -> bool {
        match &mut self.escaper {
            Some(escaper) => {
                let mut shown = Vec::with_capacity(chunk.len() + 16);
                escaper.push(chunk, &mut shown);
                self.emit(&shown)
            }
            None => self.emit(chunk),
        }
    }

    /// Writes what the escaper still holds (a character the job never finished).
    pub(crate) fn finish(&mut self) {
        if let Some(escaper) = &mut self.escaper {
            let mut rest = Vec::new();
            escaper.finish(&mut rest);
            self.emit(&rest);
        }
    }

    fn emit(&self, bytes: &[u8]) -> bool {
        if bytes.is_empty() {
            return true;
        }
        // Flushed at once: a prompt without a newline must show while the job waits.
        let written = match self.target {
            Target::Stdout => {
                let mut out = std::io::stdout().lock();
                out.write_all(bytes).and_then(|()| out.flush())
            }
            Target::Stderr => {
                let mut err = std::io::stderr().lock();
                err.write_all(bytes).and_then(|()| err.flush())
            }
        };
        written.is_ok()
    }
}
