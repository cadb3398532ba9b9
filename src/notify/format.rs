//! What a sink POSTs: the line itself (`json`), or a Slack incoming-webhook
//! message (`slack`) made from the typed event; and the signature over it.
//!
//! Everything in a Slack message that came from outside (the model's tool input,
//! a tool or rule name, an error) is hostile: it is printed only inside code
//! spans or blocks, with `&`, `<` and `>` written as Slack's entities (so no
//! `<!channel>` or link can be formed), backticks replaced by `ˋ` (so no span or
//! block can be closed early) and `@` by `＠` (so no mention is made), after the
//! hidden characters were escaped as they are for a terminal.

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use crate::config::NotifyFormat;
use crate::events::{Event, Record};

/// Characters of a call's input shown in a Slack message; past it the input is
/// cut in the middle, and `harnessd approvals` shows the rest.
pub const SLACK_INPUT_CHARS: usize = 3000;

/// Characters of one Slack section's text: Slack refuses a longer one, so a
/// long input is shown in several blocks.
const SLACK_SECTION_CHARS: usize = 2900;

/// The body of a POST of the line `line`, read back as `record`, at `now` (the
/// time left of an approval is counted from it); `console` is where browsers reach
/// the web console, when it is served off the socket.
pub fn body(
    format: NotifyFormat,
    line: &[u8],
    record: &Record,
    console: Option<&str>,
    now: DateTime<Utc>,
) -> Vec<u8> {
    match format {
        NotifyFormat::Json => line.to_vec(),
        NotifyFormat::Slack => slack(record, console, now).to_string().into_bytes(),
    }
}

/// `X-Harnessd-Signature`'s value: `sha256=` and the hex HMAC-SHA256 of
/// `timestamp.body` under `secret`.
pub fn signature(secret: &[u8], timestamp: &str, body: &[u8]) -> String {
    use hmac::{KeyInit, Mac};
    // Any key length is valid for HMAC: the error arm cannot happen.
    let Ok(mut mac) = hmac::Hmac::<sha2::Sha256>::new_from_slice(secret) else {
        return String::new();
    };
    mac.update(timestamp.as_bytes());
    mac.update(b".");
    mac.update(body);
    let digest = mac.finalize().into_bytes();
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256={hex}")
}

/// `text` made inert for Slack's mrkdwn (see the module's doc).
pub fn inert(text: &str) -> String {
    entities(&crate::text::escape_text(text))
}

/// The characters mrkdwn would act on, replaced in text already escaped.
fn entities(shown: &str) -> String {
    let mut out = String::with_capacity(shown.len());
    for c in shown.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '`' => out.push('ˋ'),
            '@' => out.push('＠'),
            c => out.push(c),
        }
    }
    out
}

/// `text` as an inline code span: one line, so a newline cannot end the span
/// (it is shown escaped, as for a terminal's single line).
fn code(text: &str) -> String {
    format!("`{}`", entities(&crate::text::escape_line(text)))
}

/// The Slack message for `record`.
fn slack(record: &Record, console: Option<&str>, now: DateTime<Utc>) -> Value {
    let task = record.task_id.as_deref().unwrap_or("");
    if let Event::ApprovalRequested {
        approval_id,
        tool,
        input,
        rule,
        expires_at,
        ..
    } = &record.event
    {
        let call = Call {
            task,
            id: approval_id,
            tool,
            input,
            rule,
        };
        return approval(&call, expires_at.as_deref(), console, now);
    }
    let line = summary(record);
    json!({
        "text": line,
        "blocks": [section(&line)],
    })
}

fn section(text: &str) -> Value {
    json!({"type": "section", "text": {"type": "mrkdwn", "text": text}})
}

/// One line about any event but an approval request.
fn summary(record: &Record) -> String {
    let kind = record
        .kind()
        .map(str::to_owned)
        .or_else(|| record.unread.clone())
        .unwrap_or_else(|| "event".to_string());
    let task = record
        .task_id
        .as_deref()
        .map(|t| format!(" in task {}", code(t)))
        .unwrap_or_default();
    match &record.event {
        Event::TaskFinished {
            stop_reason,
            turns,
            usd,
            duration_ms,
            ..
        } => {
            let cost = usd.map_or("cost unknown".to_string(), |u| format!("${u:.4}"));
            format!(
                "*Task finished*{task}: stop reason {}, {turns} turn{}, {cost}, {:.1} s",
                code(stop_reason.as_str()),
                if *turns == 1 { "" } else { "s" },
                *duration_ms as f64 / 1000.0
            )
        }
        _ => format!("*{}*{task} (seq {})", inert(&kind), record.seq),
    }
}

/// An approval request's call.
struct Call<'a> {
    task: &'a str,
    id: &'a str,
    tool: &'a str,
    input: &'a Value,
    rule: &'a str,
}

/// The message for an approval request: what it is, the whole input (up to
/// [`SLACK_INPUT_CHARS`]), the time left, the commands that answer it and, when the
/// console is served, a link to its page of approvals.
fn approval(
    call: &Call,
    expires_at: Option<&str>,
    console: Option<&str>,
    now: DateTime<Utc>,
) -> Value {
    let Call {
        task,
        id,
        tool,
        input,
        rule,
    } = call;
    let left = time_left(expires_at, now);
    let head = format!(
        "*Approval requested* for {} in task {}\nRule: {} · {left}",
        code(tool),
        code(task),
        code(rule),
    );
    let rendered = crate::text::render_input(input, crate::text::DEFAULT_WIDTH);
    let (shown, cut) = crate::text::truncate_middle(&rendered, SLACK_INPUT_CHARS, 0);
    let mut blocks = vec![section(&head)];
    for piece in pieces(&shown) {
        blocks.push(section(&format!("```\n{piece}\n```")));
    }
    if cut {
        blocks.push(section(&format!(
            "_The input is cut here; {} or the console shows every character._",
            code("harnessd approvals")
        )));
    }
    let mut answer = format!(
        "Approve: {}\nDeny: {}",
        code(&format!("harnessd approve {id}")),
        code(&format!("harnessd deny {id}")),
    );
    if let Some(link) = console.and_then(|base| approval_link(base, id)) {
        answer.push_str(&format!("\n<{link}|Open it in the console>"));
    }
    blocks.push(section(&answer));
    json!({
        "text": format!("Approval requested for {} in task {}", code(tool), code(task)),
        "blocks": blocks,
    })
}

/// The console's link to approval `id`, when both are plain enough to sit in a
/// Slack link unescaped (the base is the operator's config; an id the daemon
/// made is letters, digits and `-`): anything else gets no link rather than one
/// the text could bend.
fn approval_link(base: &str, id: &str) -> Option<String> {
    let plain = |s: &str, extra: &str| {
        s.chars()
            .all(|c| c.is_ascii_alphanumeric() || extra.contains(c))
    };
    (plain(base, ":/.-[]") && plain(id, "-_"))
        .then(|| format!("{base}/console/approvals#approval-{id}"))
}

/// `text` made inert, in pieces of at most [`SLACK_SECTION_CHARS`] characters,
/// never splitting an entity.
fn pieces(text: &str) -> Vec<String> {
    let mut out = vec![String::new()];
    let mut chars = 0;
    for c in text.chars() {
        let one = inert(c.encode_utf8(&mut [0; 4]));
        let n = one.chars().count();
        if chars + n > SLACK_SECTION_CHARS {
            out.push(String::new());
            chars = 0;
        }
        if let Some(last) = out.last_mut() {
            last.push_str(&one);
        }
        chars += n;
    }
    out
}

/// "expires in 9 min 58 s (at …)", from `expires_at` and `now`.
fn time_left(expires_at: Option<&str>, now: DateTime<Utc>) -> String {
    let Some(at) = expires_at else {
        return "no deadline".to_string();
    };
    let Ok(when) = DateTime::parse_from_rfc3339(at) else {
        return format!("expires at {}", code(at));
    };
    let secs = (when.with_timezone(&Utc) - now).num_seconds();
    if secs <= 0 {
        return format!("expired at {}", code(at));
    }
    let (m, s) = (secs / 60, secs % 60);
    let left = if m > 0 {
        format!("{m} min {s} s")
    } else {
        format!("{s} s")
    };
    format!("expires in {left} (at {})", code(at))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(line: &str) -> Record {
        Record::parse(line.as_bytes()).expect("a line")
    }

    #[test]
    fn hostile_text_stays_inside_its_code_block() {
        let text = inert("```\n<!channel> @here & `x` \u{202e}");
        assert!(!text.contains('`') && !text.contains('<') && !text.contains('@'));
        assert!(text.contains("&lt;!channel&gt;") && text.contains("&amp;"));
        assert!(!text.contains('\u{202e}'), "{text}");
    }

    #[test]
    fn an_approval_links_to_the_console_only_when_it_is_served_and_the_link_is_plain() {
        let line = r#"{"seq":9,"ts":"t","task_id":"t-1","type":"approval_requested","approval_id":"ap-1","tool_use_id":"u","tool":"run_bash","input":{"command":"ls"},"input_sha256":"x","rule":"default"}"#;
        let now = Utc::now();
        let last = |console| {
            let m = slack(&record(line), console, now);
            m["blocks"].as_array().unwrap().last().unwrap()["text"]["text"]
                .as_str()
                .unwrap()
                .to_string()
        };
        let with = last(Some("http://127.0.0.1:8080"));
        assert!(
            with.contains("<http://127.0.0.1:8080/console/approvals#approval-ap-1|"),
            "{with}"
        );
        assert!(!last(None).contains("console/"));
        assert_eq!(approval_link("http://h", "a|b>"), None);
        assert_eq!(approval_link("http://h>|x", "ap-1"), None);
    }

    #[test]
    fn a_code_span_is_one_line_whatever_its_text_holds() {
        let span = code("rule\n*bold* <!here>\r`x`");
        assert!(!span.contains('\n') && !span.contains('\r'), "{span}");
        assert_eq!(span.matches('`').count(), 2, "{span}");
        assert!(span.contains("&lt;!here&gt;"), "{span}");
    }

    #[test]
    fn a_long_input_is_cut_at_3000_characters_in_blocks_slack_accepts() {
        let long = "a".repeat(5000);
        let line = format!(
            r#"{{"seq":9,"ts":"t","task_id":"t-1","type":"approval_requested","approval_id":"ap-1","tool_use_id":"u","tool":"run_bash","input":{{"command":"{long}"}},"input_sha256":"x","rule":"default","expires_at":"2026-01-01T00:10:00.000Z"}}"#
        );
        let now = DateTime::parse_from_rfc3339("2026-01-01T00:00:02Z")
            .unwrap()
            .with_timezone(&Utc);
        let message = slack(&record(&line), None, now);
        let blocks = message["blocks"].as_array().unwrap();
        let texts: Vec<&str> = blocks
            .iter()
            .map(|b| b["text"]["text"].as_str().unwrap())
            .collect();
        assert!(texts.iter().all(|t| t.chars().count() <= 3000));
        assert!(texts[0].contains("expires in 9 min 58 s"), "{}", texts[0]);
        let shown: usize = texts.iter().map(|t| t.matches('a').count()).sum();
        assert!((2500..=3000).contains(&shown), "{shown}");
        assert!(texts.iter().any(|t| t.contains("harnessd approvals")));
        assert!(texts.last().unwrap().contains("harnessd approve ap-1"));
        assert!(texts.last().unwrap().contains("harnessd deny ap-1"));
    }

    #[test]
    fn the_signature_is_hmac_sha256_of_timestamp_dot_body() {
        // python3: hmac.new(b"k", b"1700000000.{}", hashlib.sha256).hexdigest()
        assert_eq!(
            signature(b"k", "1700000000", b"{}"),
            "sha256=c6ef4734033cee2367414a0939385eca0397754aa7a59716da7463a9298b5146"
        );
    }
}
