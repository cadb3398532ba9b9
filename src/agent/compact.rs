//! Context compaction (docs/long-tasks.md): when a response reports more input tokens than
//! `context.compress_threshold_tokens`, or the API answers a 400 saying the
//! request exceeds the context ([`crate::llm::LlmError::exceeds_context`]), the
//! history is made smaller before the next request.
//!
//! The first user message and the last `context.keep_recent_messages` messages are
//! never touched. In between, first every `tool_result`'s content becomes a
//! one-line placeholder naming the result's `.out` file; if the history is still
//! more than half the threshold (estimated by scaling the reported tokens with the
//! history's size), those turns are summarised by one model request with tools
//! disabled, and the summary joins the first user message as one text block.
//! Turns holding less than a tenth of the threshold are neither saved, replaced
//! nor summarised: the kept tail is then what is large, and compacting again every
//! turn would only cost a request and a history file each time.
//! The kept tail always starts with an assistant message, so every `tool_use`
//! keeps its `tool_result` and roles still alternate; thinking blocks go or stay
//! with their message, whole. The history before compaction is saved first as
//! `transcripts/<task_id>/history-<n>.json`: nothing is lost.

use std::path::PathBuf;
use std::time::Instant;

use serde_json::Value;

use super::TaskRun;
use super::request::{ModelErrors, build_request};
use crate::config::Loaded;
use crate::events::{Event, EventError};
use crate::llm::{Block, Message, Role, Usage};
use crate::protocol::CompactionMethod;

/// Opens the summary block in the first user message; a later compaction
/// replaces the block it finds there.
pub const SUMMARY_MARKER: &str = "[harnessd: summary of the earlier turns of this task, \
made when its history was compacted]";

/// The request for a summary, appended to the last summarised user message.
pub const COMPACT_PROMPT: &str = "The history of this task is about to be compacted: \
the turns above will be replaced by your summary. Write that summary now, without calling \
tools. Keep: the goal and every requirement of the task; decisions made and why; every \
file path, command and identifier that matters; what was found; what is done; open \
problems and what remains to be done. Be complete but concise.";

/// Where the summarised part ends: the index of the first kept message, an
/// assistant message at or before `len - keep`, after at least one message besides
/// the first. `None` when nothing can be compacted.
pub fn boundary(messages: &[Message], keep: usize) -> Option<usize> {
    let last = messages.len().checked_sub(1)?;
    let mut tail = messages.len().saturating_sub(keep).min(last);
    while tail > 1 && messages.get(tail)?.role != Role::Assistant {
        tail -= 1;
    }
    (tail >= 2 && messages.get(tail)?.role == Role::Assistant).then_some(tail)
}

/// Replaces the content of every `tool_result` in `messages` (the compacted
/// part) by `placeholder(tool_use_id)`; how many it replaced.
pub fn use_placeholders(messages: &mut [Message], placeholder: impl Fn(&str) -> String) -> usize {
    let mut replaced = 0;
    for block in messages.iter_mut().flat_map(|m| m.content.iter_mut()) {
        if block.kind() != "tool_result" {
            continue;
        }
        let id = block.0["tool_use_id"].as_str().unwrap_or("").to_string();
        let text = placeholder(&id);
        if block.0["content"].as_str() != Some(text.as_str()) {
            block.0["content"] = Value::String(text);
            replaced += 1;
        }
    }
    replaced
}

/// The history after summarising `messages[1..tail]` into `summary`.
pub fn with_summary(messages: &[Message], tail: usize, summary: &str) -> Vec<Message> {
    let Some(first) = messages.first() else {
        return Vec::new();
    };
    let mut first = first.clone();
    first.content.retain(|b| !is_summary(b));
    first
        .content
        .push(Block::text(format!("{SUMMARY_MARKER}\n\n{summary}")));
    std::iter::once(first)
        .chain(messages.iter().skip(tail).cloned())
        .collect()
}

/// Whether `b` is the summary block compaction put in the first user message.
pub(super) fn is_summary(b: &Block) -> bool {
    b.kind() == "text"
        && b.0["text"]
            .as_str()
            .is_some_and(|t| t.starts_with(SUMMARY_MARKER))
}

/// Serialised size of `messages`, the measure the token estimate scales by.
fn size(messages: &[Message]) -> u64 {
    serde_json::to_vec(messages).map_or(0, |v| v.len() as u64)
}

/// What set compaction off.
#[derive(Debug, Clone, Copy)]
pub enum Trigger {
    /// A response reported this many input tokens, over the threshold.
    Reported(u64),
    /// The API refused the request as longer than the context.
    TooLong,
}

impl TaskRun<'_> {
    /// Compacts the history before the next request; whether it did. `Err` is the
    /// audit log's failure.
    pub(super) async fn compact(
        &mut self,
        loaded: &Loaded,
        trigger: Trigger,
    ) -> Result<bool, EventError> {
        let started = Instant::now();
        let context = &loaded.config.context;
        let keep = usize::try_from(context.keep_recent_messages).unwrap_or(usize::MAX);
        let Some(tail) = boundary(&self.transcript.messages, keep) else {
            return Ok(false);
        };
        let size_before = size(&self.transcript.messages).max(1);
        let tokens_before = match trigger {
            Trigger::Reported(n) => n,
            Trigger::TooLong => size_before / 4,
        };
        let estimate = |m: &[Message]| tokens_before.saturating_mul(size(m)) / size_before;
        // Only messages[1..tail] can shrink. When they are already small, the kept
        // tail itself is over the threshold: compacting again (a history file, a
        // summary request, every turn) would cost without helping.
        let worth = |m: &[Message]| estimate(&m[1..tail]) >= context.compress_threshold_tokens / 10;
        if matches!(trigger, Trigger::Reported(_)) && !worth(&self.transcript.messages) {
            tracing::warn!(
                task_id = %self.spec.task_id,
                "the last {keep} messages alone are over context.compress_threshold_tokens; \
                 nothing older is worth compacting (lower context.keep_recent_messages)"
            );
            return Ok(false);
        }
        let Some(history_file) = self.save_history(loaded).await else {
            return Ok(false);
        };
        let placeholder = self.placeholder_fn(loaded);
        use_placeholders(&mut self.transcript.messages[1..tail], placeholder);
        let still_large = estimate(&self.transcript.messages)
            > context.compress_threshold_tokens / 2
            && worth(&self.transcript.messages);
        let mut summary_usage = None;
        if (matches!(trigger, Trigger::TooLong) || still_large)
            && let Some((summary, usage)) = self.summarise(loaded, tail).await?
        {
            self.transcript.messages = with_summary(&self.transcript.messages, tail, &summary);
            summary_usage = Some(usage);
        }
        self.record(Event::ContextCompacted {
            turn: self.turn,
            tokens_before,
            tokens_after: estimate(&self.transcript.messages),
            history_file,
            method: if summary_usage.is_some() {
                CompactionMethod::Summary
            } else {
                CompactionMethod::Placeholders
            },
            summary_usage,
            duration_ms: started.elapsed().as_millis() as u64,
        })
        .await?;
        Ok(true)
    }

    /// Writes the history as it is to the next free `history-<n>.json` of the
    /// task's directory; its path relative to the root, or `None` (logged) when it
    /// cannot be written, in which case nothing is compacted.
    async fn save_history(&self, loaded: &Loaded) -> Option<String> {
        let dir = loaded.paths.transcripts.join(&self.spec.task_id);
        let bytes = match serde_json::to_vec_pretty(&self.transcript.messages) {
            Ok(b) => b,
            Err(e) => {
                tracing::error!("cannot serialise the history to compact: {e}");
                return None;
            }
        };
        let written = tokio::task::spawn_blocking(move || write_next_history(&dir, &bytes)).await;
        match written {
            Ok(Ok(path)) => Some(loaded.paths.display(&path)),
            Ok(Err(e)) => {
                tracing::error!("cannot save the history before compacting it: {e}");
                None
            }
            Err(e) => {
                tracing::error!("cannot save the history before compacting it: {e}");
                None
            }
        }
    }

    /// The placeholder of one compacted result: the `.out` file holding its full
    /// output, when there is one.
    fn placeholder_fn(&self, loaded: &Loaded) -> impl Fn(&str) -> String + use<> {
        let dir = loaded.paths.transcripts.join(&self.spec.task_id);
        let paths = loaded.paths.clone();
        move |id: &str| {
            let out = dir.join(crate::tools::out_file_name(id));
            if out.is_file() {
                format!(
                    "[compacted by harnessd: the full output of this call is in {}]",
                    paths.display(&out)
                )
            } else {
                "[compacted by harnessd: this call kept no output file]".to_string()
            }
        }
    }

    /// One model request, tools disabled, for a summary of `messages[..tail]`;
    /// `None` (logged with why) when there is none. Its tokens and cost count for
    /// the task.
    async fn summarise(
        &mut self,
        loaded: &Loaded,
        tail: usize,
    ) -> Result<Option<(String, Usage)>, EventError> {
        let none = |why: &str| {
            tracing::warn!(
                task_id = %self.spec.task_id,
                "the summarisation request failed ({why}); only old tool results were compacted"
            );
            None
        };
        let mut messages: Vec<Message> = self.transcript.messages[..tail].to_vec();
        if let Some(last) = messages.last_mut() {
            last.content.push(Block::text(COMPACT_PROMPT));
        }
        let tools = super::request::tools_offered(self.env, &self.spec.task_id, loaded);
        let request = build_request(
            loaded,
            &self.transcript.model,
            &messages,
            true,
            tools,
            &self.knowledge,
        );
        let services = &self.env.services;
        let errors = ModelErrors {
            events: &services.events,
            task_id: &self.spec.task_id,
            turn: self.turn,
        };
        let response = match services
            .client
            .send(&request, &self.env.cancel, |f| errors.record(f))
            .await
        {
            Ok(r) => r,
            Err(crate::llm::SendError::Callback(e)) => return Err(e),
            Err(crate::llm::SendError::Model(e)) => return Ok(none(&e.to_string())),
        };
        self.transcript.usage.add(&response.usage);
        let price = crate::protocol::price_of(&request.model, &loaded.config.pricing);
        let usd = price.map(|p| p.cost(&response.usage));
        self.env.tree.spend(&response.usage, usd);
        self.transcript.usd = self.transcript.usd.zip(usd).map(|(a, b)| a + b);
        let message = Message {
            role: Role::Assistant,
            content: response.content,
        };
        // Only the text is kept: a call the model made anyway (its server ignored
        // `tool_choice: none`) never runs and never enters the history.
        let ignored = message.tool_uses().len();
        if ignored > 0 {
            tracing::warn!(
                task_id = %self.spec.task_id,
                "the summary request had tools disabled; {ignored} tool call(s) in its answer \
                 were not executed"
            );
        }
        let text = message.text();
        if text.trim().is_empty() {
            return Ok(none("the model's summary was empty"));
        }
        Ok(Some((text, response.usage)))
    }
}

/// Writes `bytes` to the first `history-<n>.json` of `dir` that does not exist
/// (created exclusively, so two writers never share one).
fn write_next_history(dir: &std::path::Path, bytes: &[u8]) -> std::io::Result<PathBuf> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::create_dir_all(dir)?;
    for n in 1u32.. {
        let path = dir.join(format!("history-{n}.json"));
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            // The whole conversation: private like the transcript it comes from.
            .mode(0o600)
            .open(&path)
        {
            Ok(mut f) => {
                f.write_all(bytes)?;
                f.sync_data()?;
                return Ok(path);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(std::io::Error::other("no free history file name"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn assistant(blocks: Value) -> Message {
        Message {
            role: Role::Assistant,
            content: serde_json::from_value(blocks).unwrap(),
        }
    }

    /// prompt, then `turns` × (assistant tool_use, user tool_result).
    fn history(turns: usize) -> Vec<Message> {
        let mut m = vec![Message::user(vec![Block::text("the task")])];
        for i in 0..turns {
            m.push(assistant(json!([
                {"type": "thinking", "thinking": "t", "signature": "s"},
                {"type": "tool_use", "id": format!("tu_{i}"), "name": "read_file", "input": {}}
            ])));
            m.push(Message::user(vec![Block::tool_result(
                &format!("tu_{i}"),
                &"x".repeat(1000),
                false,
            )]));
        }
        m
    }

    #[test]
    fn the_kept_tail_starts_with_an_assistant_message() {
        let h = history(5); // 11 messages
        assert_eq!(boundary(&h, 6), Some(5));
        assert_eq!(boundary(&h, 5), Some(5));
        assert_eq!(boundary(&h, 4), Some(7));
        assert_eq!(boundary(&h, 0), Some(9));
        assert_eq!(boundary(&h, 10), None);
        assert_eq!(boundary(&history(1), 0), None);
    }

    #[test]
    fn placeholders_and_summary_keep_every_pair_and_the_tail() {
        let h = history(5);
        let tail = boundary(&h, 4).unwrap();
        let mut compacted = h.clone();
        let n = use_placeholders(&mut compacted[1..tail], |id| format!("see {id}.out"));
        assert_eq!(n, 3);
        assert_eq!(compacted[2].content[0].0["content"], "see tu_0.out");
        assert_eq!(compacted[tail..], h[tail..]);
        assert_eq!(compacted[0], h[0]);

        let summarised = with_summary(&compacted, tail, "did things");
        assert_eq!(summarised.len(), 1 + h.len() - tail);
        assert_eq!(summarised[1..], h[tail..]);
        assert_eq!(summarised[0].content[0], h[0].content[0]);
        assert!(summarised[0].text().contains("did things"));
        // A second summary replaces the first.
        let again = with_summary(&summarised, 1, "more");
        assert_eq!(again[0].content.len(), 2);
        assert!(again[0].text().ends_with("more"));
        let body = json!({"messages": summarised});
        assert!(harnessd_pairs_ok(&body));
    }

    /// Every assistant tool_use is answered by the next message.
    fn harnessd_pairs_ok(body: &Value) -> bool {
        let msgs = body["messages"].as_array().unwrap();
        msgs.windows(2).all(|w| {
            let uses: Vec<&Value> = w[0]["content"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|b| b["type"] == "tool_use")
                .map(|b| &b["id"])
                .collect();
            let results: Vec<&Value> = w[1]["content"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|b| b["type"] == "tool_result")
                .map(|b| &b["tool_use_id"])
                .collect();
            w[0]["role"] != "assistant" || uses == results
        }) && msgs[1]["role"] == "assistant"
    }
}
