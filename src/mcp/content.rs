//! A `tools/call` result turned into what the model reads: text as it is, an
//! embedded text resource with its URI, a resource link as one line, an image, audio
//! or binary resource as a placeholder naming the file it is kept in (the model
//! never gets base64 it cannot use), structured content when nothing else came,
//! and `isError` as the result's error flag.

use base64::Engine as _;
use serde_json::Value;

/// A binary part of a result, to be kept as a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attachment {
    /// The file name (one path component) it is kept under.
    pub file_name: String,
    /// Its bytes.
    pub bytes: Vec<u8>,
}

/// A result as the model reads it, before the output cap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendered {
    /// The whole text.
    pub text: String,
    /// Whether the server said the call failed (`isError`).
    pub is_error: bool,
    /// The binary parts, each named in `text` by its placeholder.
    pub attachments: Vec<Attachment>,
}

/// Renders `answer` (a `CallToolResult` as JSON). Attachments are named
/// `<stem>.<n>.<ext>`; `shown` turns such a name into how the placeholder names it
/// (the path under the root).
pub fn render(answer: &Value, stem: &str, shown: &dyn Fn(&str) -> String) -> Rendered {
    let mut out = Rendered {
        text: String::new(),
        is_error: answer
            .get("isError")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        attachments: Vec::new(),
    };
    let blocks = answer.get("content").and_then(Value::as_array);
    for block in blocks.into_iter().flatten() {
        let piece = match block.get("type").and_then(Value::as_str) {
            Some("text") => str_field(block, "text").to_string(),
            Some(kind @ ("image" | "audio")) => {
                let mime = str_field(block, "mimeType");
                binary(&mut out, kind, mime, str_field(block, "data"), stem, shown)
            }
            Some("resource") => resource(&mut out, block.get("resource"), stem, shown),
            Some("resource_link") => format!(
                "[resource link: {} ({})]",
                escape_inline(str_field(block, "uri")),
                escape_inline(str_field(block, "name"))
            ),
            other => format!(
                "[content of type {} not shown]",
                escape_inline(other.unwrap_or("?"))
            ),
        };
        push(&mut out.text, &piece);
    }
    if out.text.is_empty()
        && let Some(structured) = answer.get("structuredContent").filter(|v| !v.is_null())
    {
        out.text = crate::protocol::canonical_json(structured);
    }
    out
}

fn str_field<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or_default()
}

/// Server text put inside a bracketed placeholder: one line, so it cannot pass for
/// a placeholder of its own.
fn escape_inline(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() || c == ']' { '?' } else { c })
        .collect()
}

fn push(text: &mut String, piece: &str) {
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(piece);
}

fn resource(
    out: &mut Rendered,
    resource: Option<&Value>,
    stem: &str,
    shown: &dyn Fn(&str) -> String,
) -> String {
    let Some(r) = resource else {
        return "[resource without contents]".into();
    };
    let uri = escape_inline(str_field(r, "uri"));
    if let Some(text) = r.get("text").and_then(Value::as_str) {
        return format!("[resource {uri}]\n{text}");
    }
    let mime = str_field(r, "mimeType");
    let kept = binary(out, "resource", mime, str_field(r, "blob"), stem, shown);
    format!("{kept} (resource {uri})")
}

/// Keeps base64 `data` as an attachment; the placeholder the model reads.
fn binary(
    out: &mut Rendered,
    kind: &str,
    mime: &str,
    data: &str,
    stem: &str,
    shown: &dyn Fn(&str) -> String,
) -> String {
    let mime = escape_inline(mime);
    let bytes = match base64::engine::general_purpose::STANDARD.decode(data.trim()) {
        Ok(b) => b,
        Err(e) => return format!("[{kind} {mime}: not kept, its data is not base64: {e}]"),
    };
    let file_name = format!("{stem}.{}.{}", out.attachments.len() + 1, extension(&mime));
    let line = format!(
        "[{kind} {mime}, {} bytes, kept as {}]",
        bytes.len(),
        shown(&file_name)
    );
    out.attachments.push(Attachment { file_name, bytes });
    line
}

/// A file extension for `mime`, from a short list; `bin` for anything else (the
/// name never carries server text).
fn extension(mime: &str) -> &'static str {
    match mime {
        "image/png" => "png",
        "image/jpeg" => "jpg",
        "image/gif" => "gif",
        "image/webp" => "webp",
        "image/svg+xml" => "svg",
        "audio/wav" | "audio/x-wav" => "wav",
        "audio/mpeg" => "mp3",
        "application/pdf" => "pdf",
        "application/json" => "json",
        "text/plain" => "txt",
        _ => "bin",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn shown(name: &str) -> String {
        format!("transcripts/t/{name}")
    }

    #[test]
    fn text_blocks_join_in_order() {
        let r = render(
            &json!({"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}),
            "id",
            &shown,
        );
        assert_eq!(r.text, "a\nb");
        assert!(!r.is_error);
        assert!(r.attachments.is_empty());
    }

    #[test]
    fn an_image_is_kept_and_named() {
        let data = base64::engine::general_purpose::STANDARD.encode(b"\x89PNG....");
        let r = render(
            &json!({"content": [{"type": "image", "mimeType": "image/png", "data": data}], "isError": true}),
            "toolu_1",
            &shown,
        );
        assert!(r.is_error);
        assert_eq!(r.attachments.len(), 1);
        assert_eq!(r.attachments[0].file_name, "toolu_1.1.png");
        assert_eq!(r.attachments[0].bytes, b"\x89PNG....");
        assert_eq!(
            r.text,
            "[image image/png, 8 bytes, kept as transcripts/t/toolu_1.1.png]"
        );
    }

    #[test]
    fn resources_links_and_structured_content() {
        let r = render(
            &json!({"content": [
                {"type": "resource", "resource": {"uri": "file:///a", "text": "body"}},
                {"type": "resource_link", "uri": "file:///b]\n[image", "name": "b"},
                {"type": "resource", "resource": {"uri": "x:y", "mimeType": "evil/../../x", "blob": "AAE="}},
            ]}),
            "s",
            &shown,
        );
        assert_eq!(
            r.text,
            "[resource file:///a]\nbody\n[resource link: file:///b??[image (b)]\n\
             [resource evil/../../x, 2 bytes, kept as transcripts/t/s.1.bin] (resource x:y)"
        );
        let r = render(
            &json!({"content": [], "structuredContent": {"b": 1, "a": 2}}),
            "s",
            &shown,
        );
        assert_eq!(r.text, r#"{"a":2,"b":1}"#);
    }

    #[test]
    fn bad_base64_is_said_not_kept() {
        let r = render(
            &json!({"content": [{"type": "image", "mimeType": "image/png", "data": "***"}]}),
            "s",
            &shown,
        );
        assert!(r.attachments.is_empty());
        assert!(r.text.contains("not kept"), "{}", r.text);
    }
}
