//! Server-sent events framing: bytes in, `(event, data)` pairs out.
//!
//! Bytes are buffered until a whole line has arrived and only then decoded, so a
//! chunk boundary inside a UTF-8 character (or anywhere else) never matters. It
//! knows nothing of what the events mean: [`super::assemble`] does.
//!
//! Hand-rolled rather than a crate: the framing is a few dozen lines, and the
//! client must count every byte against `api.max_response_mb` itself, which a
//! stream adapter would hide.

/// One event of the stream: its `event:` name (empty when absent) and its `data:`
/// lines joined with `\n`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field.
    pub event: String,
    /// The `data:` field(s).
    pub data: String,
}

/// Why the bytes are not a server-sent event stream.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SseError {
    /// A complete line is not UTF-8.
    #[error("line {line} of the event stream is not UTF-8")]
    NotUtf8 {
        /// Line number, from 1.
        line: u64,
    },
}

/// Incremental framer: [`SseFramer::push`] bytes as they come, collect events.
#[derive(Debug, Default)]
pub struct SseFramer {
    /// Bytes of the line not yet ended.
    partial: Vec<u8>,
    /// Fields of the event not yet dispatched.
    event: String,
    data: Option<String>,
    line: u64,
}

impl SseFramer {
    /// Feeds `bytes`; every event they complete is appended to `out`.
    pub fn push(&mut self, bytes: &[u8], out: &mut Vec<SseEvent>) -> Result<(), SseError> {
        let mut rest = bytes;
        while let Some(end) = rest.iter().position(|&b| b == b'\n') {
            let (head, tail) = rest.split_at(end);
            rest = tail.get(1..).unwrap_or_default();
            if self.partial.is_empty() {
                self.line_done(head, out)?;
            } else {
                self.partial.extend_from_slice(head);
                let whole = std::mem::take(&mut self.partial);
                self.line_done(&whole, out)?;
            }
        }
        self.partial.extend_from_slice(rest);
        Ok(())
    }

    /// One complete line (without its `\n`; a trailing `\r` is dropped).
    fn line_done(&mut self, raw: &[u8], out: &mut Vec<SseEvent>) -> Result<(), SseError> {
        self.line += 1;
        let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
        let line = std::str::from_utf8(raw).map_err(|_| SseError::NotUtf8 { line: self.line })?;
        if line.is_empty() {
            if let Some(data) = self.data.take() {
                out.push(SseEvent {
                    event: std::mem::take(&mut self.event),
                    data,
                });
            }
            self.event.clear();
            return Ok(());
        }
        if line.starts_with(':') {
            return Ok(());
        }
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "event" => self.event = value.to_string(),
            "data" => match &mut self.data {
                Some(d) => {
                    d.push('\n');
                    d.push_str(value);
                }
                None => self.data = Some(value.to_string()),
            },
            // `id`, `retry` and unknown fields mean nothing to the Messages API.
            _ => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame_in_pieces(bytes: &[u8], piece: usize) -> Vec<SseEvent> {
        let mut framer = SseFramer::default();
        let mut out = Vec::new();
        for chunk in bytes.chunks(piece) {
            framer.push(chunk, &mut out).unwrap();
        }
        out
    }

    #[test]
    fn any_chunking_gives_the_same_events() {
        let text = "event: message_start\ndata: {\"a\":\"h\u{e9}llo \u{1F600}\"}\n\n: comment\n\
                    event: ping\r\ndata: {}\r\n\r\ndata: one\ndata: two\n\n";
        let whole = frame_in_pieces(text.as_bytes(), text.len());
        assert_eq!(
            whole,
            vec![
                SseEvent {
                    event: "message_start".into(),
                    data: "{\"a\":\"h\u{e9}llo \u{1F600}\"}".into()
                },
                SseEvent {
                    event: "ping".into(),
                    data: "{}".into()
                },
                SseEvent {
                    event: String::new(),
                    data: "one\ntwo".into()
                },
            ]
        );
        for piece in 1..12 {
            assert_eq!(frame_in_pieces(text.as_bytes(), piece), whole, "{piece}");
        }
    }

    #[test]
    fn an_event_without_its_blank_line_is_not_dispatched() {
        assert!(frame_in_pieces(b"event: x\ndata: y\n", 3).is_empty());
    }

    #[test]
    fn a_line_that_is_not_utf8_is_named() {
        let mut framer = SseFramer::default();
        let err = framer
            .push(b"data: ok\n\ndata: \xff\n", &mut Vec::new())
            .unwrap_err();
        assert_eq!(err, SseError::NotUtf8 { line: 3 });
    }
}
