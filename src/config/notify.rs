//! `[[notify]]` of config.toml: the sinks that events of the audit log are sent to.
//!
//! This module owns the shape of a sink and what can be checked from the file
//! alone (a name that is a safe file-name token, exactly one of `url` and
//! `url_file`, at most one secret, no variable that holds the API key). What
//! needs more than the file — the event types harnessd knows, the credential
//! files and their rules, the secrets' values — is checked where the sinks are
//! started, with [`NotifySink::resolve`]'s caller naming the same keys.
//!
//! A webhook URL is a secret: it serialises as a fingerprint, never as itself,
//! so a reload's `config_loaded` says a sink's URL changed without saying to what.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::error::Location;
use crate::protocol::mcp::valid_server_name;

/// One `[[notify]]` table.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq, Eq, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NotifySink {
    /// The sink's name, 1 to 32 of `a-z`, `0-9`, `_` and `-` (its cursor is
    /// `transcripts/notify-<name>.cursor`).
    pub name: String,
    /// The webhook's URL (`http://` or `https://`); a secret, never logged or
    /// recorded. Exactly one of `url` and `url_file`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "fingerprint"
    )]
    pub url: Option<String>,
    /// A file holding the URL (mode 0600, outside every allowed path), e.g. a
    /// systemd credential.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url_file: Option<String>,
    /// The event types sent (`approval_requested`, `task_finished`, …).
    pub events: Vec<String>,
    /// `json`: the event's line as it is in the log; `slack`: a Slack
    /// incoming-webhook message.
    #[serde(default)]
    pub format: NotifyFormat,
    /// The daemon's environment variable holding the HMAC secret: each POST
    /// then carries `X-Harnessd-Signature`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_env: Option<String>,
    /// A file holding the HMAC secret instead (mode 0600, outside every allowed
    /// path).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_file: Option<String>,
    /// Where a sink without a cursor file starts: `end` (new events only) or
    /// `start` (the whole log).
    #[serde(default)]
    pub from: NotifyFrom,
}

/// How a sink's POST body is made.
#[derive(Debug, Clone, Copy, Default, Deserialize, Serialize, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum NotifyFormat {
    /// The line of events.jsonl, byte for byte.
    #[default]
    Json,
    /// A Slack incoming-webhook message (`text` and `blocks`).
    Slack,
}

/// Where a sink without a cursor starts reading the log.
#[derive(Debug, Clone, Copy, Default, Deserialize, Serialize, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum NotifyFrom {
    /// After the last line written when the sink first starts.
    #[default]
    End,
    /// From the first line of the log.
    Start,
}

/// Where the URL comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UrlSource<'a> {
    /// Written in the file.
    Inline(&'a str),
    /// A credential file, relative to the root unless absolute.
    File(&'a str),
}

/// Where the HMAC secret comes from, if a sink has one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecretSource<'a> {
    /// The daemon's environment variable.
    Env(&'a str),
    /// A credential file, relative to the root unless absolute.
    File(&'a str),
}

impl NotifySink {
    /// The URL's source (a validated sink has exactly one).
    pub fn url_source(&self) -> UrlSource<'_> {
        match (&self.url, &self.url_file) {
            (Some(url), _) => UrlSource::Inline(url),
            (None, file) => UrlSource::File(file.as_deref().unwrap_or("")),
        }
    }

    /// The secret's source, if any.
    pub fn secret_source(&self) -> Option<SecretSource<'_>> {
        match (&self.secret_env, &self.secret_file) {
            (Some(var), _) => Some(SecretSource::Env(var)),
            (None, Some(file)) => Some(SecretSource::File(file)),
            (None, None) => None,
        }
    }
}

/// A URL as it may be shown or recorded: the first 12 hex digits of its sha256.
fn fingerprint<S: serde::Serializer>(url: &Option<String>, s: S) -> Result<S::Ok, S::Error> {
    let shown = url.as_deref().map(|u| {
        let hash = crate::protocol::sha256_hex(u.as_bytes());
        format!("(secret, sha256 {})", &hash[..12])
    });
    shown.serialize(s)
}

/// Checks what the file alone can say of the sinks; `api_key_env` is the
/// config's `api.api_key_env`. The first problem is `(key, message)`, with the
/// key as `notify[i].field`.
pub(super) fn validate(sinks: &[NotifySink], api_key_env: &str) -> Result<(), (String, String)> {
    for (i, sink) in sinks.iter().enumerate() {
        let at = |field: &str| format!("notify[{i}].{field}");
        if !valid_server_name(&sink.name) {
            return Err((
                at("name"),
                format!(
                    "{:?} is not a sink name: 1 to 32 of a-z, 0-9, `_` and `-`, starting with \
                     a letter or digit, without `__` and not ending in `_`",
                    sink.name
                ),
            ));
        }
        if sinks[..i].iter().any(|s| s.name == sink.name) {
            return Err((at("name"), format!("a second sink named {:?}", sink.name)));
        }
        match (&sink.url, &sink.url_file) {
            (None, None) => {
                return Err((at("name"), "a sink needs `url` or `url_file`".into()));
            }
            (Some(_), Some(_)) => {
                return Err((at("url_file"), "give `url` or `url_file`, not both".into()));
            }
            // The URL itself is never quoted back: it is a secret.
            (Some(url), None) => super::file::http_url(url)
                .map_err(|why| (at("url"), format!("not an http(s) URL: {why}")))?,
            (None, Some(file)) if file.is_empty() => {
                return Err((at("url_file"), "empty path".into()));
            }
            (None, Some(_)) => {}
        }
        if sink.events.is_empty() {
            return Err((
                at("events"),
                "names no event type; e.g. events = [\"approval_requested\"]".into(),
            ));
        }
        validate_secret(sink, api_key_env).map_err(|(field, why)| (at(field), why))?;
    }
    Ok(())
}

fn validate_secret(sink: &NotifySink, api_key_env: &str) -> Result<(), (&'static str, String)> {
    match (&sink.secret_env, &sink.secret_file) {
        (Some(_), Some(_)) => Err((
            "secret_file",
            "give `secret_env` or `secret_file`, not both".into(),
        )),
        (Some(var), None) => {
            if !super::mcp::variable_name(var) {
                return Err((
                    "secret_env",
                    format!(
                        "{var:?} is not a variable name: it names the daemon's variable that \
                         holds the secret, never the secret itself"
                    ),
                ));
            }
            match super::mcp::never_sent(var, Some(api_key_env)) {
                Some(why) => Err(("secret_env", why)),
                None => Ok(()),
            }
        }
        (None, Some(file)) if file.is_empty() => Err(("secret_file", "empty path".into())),
        _ => Ok(()),
    }
}

/// Where `key` (`notify[i].field`, or `notify[i].events[j]`) is written in the
/// config text: the field's line inside the i-th `[[notify]]` table, else the
/// table's header. `None` for another key.
pub fn locate(text: &str, key: &str) -> Option<Location> {
    let rest = key.strip_prefix("notify[")?;
    let (index, field) = rest.split_once(']')?;
    let index: usize = index.parse().ok()?;
    let field = field.strip_prefix('.').unwrap_or("");
    let field = field.split('[').next().unwrap_or(field);
    let mut offset = 0;
    let mut table = None;
    let mut seen = 0;
    for line in text.split_inclusive('\n') {
        let trimmed = line.trim();
        if trimmed.starts_with('[') {
            if table.is_some() {
                break;
            }
            if trimmed.replace(' ', "").starts_with("[[notify]]") {
                if seen == index {
                    table = Some(offset);
                }
                seen += 1;
            }
        } else if table.is_some() && !field.is_empty() {
            let name = trimmed.split('=').next().unwrap_or("").trim();
            if trimmed.contains('=') && name.trim_matches('"') == field {
                let column = line.len() - line.trim_start().len();
                return Some(Location::of_offset(text, offset + column));
            }
        }
        offset += line.len();
    }
    table.map(|at| Location::of_offset(text, at))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn refused(text: &str) -> String {
        Config::parse(text, "c.toml")
            .expect_err("refused")
            .to_string()
    }

    const GOOD: &str = "[[notify]]\nname = \"ops\"\nurl = \"https://hooks.example/T/abc\"\n\
                        events = [\"approval_requested\"]\n";

    #[test]
    fn a_sink_parses_with_its_defaults() {
        let c = Config::parse(GOOD, "c.toml").expect("valid");
        let sink = &c.notify[0];
        assert_eq!(sink.format, NotifyFormat::Json);
        assert_eq!(sink.from, NotifyFrom::End);
        assert_eq!(
            sink.url_source(),
            UrlSource::Inline("https://hooks.example/T/abc")
        );
        assert_eq!(sink.secret_source(), None);
    }

    #[test]
    fn the_url_never_serialises_as_itself() {
        let c = Config::parse(GOOD, "c.toml").expect("valid");
        let shown = serde_json::to_string(&c).expect("serialises");
        assert!(!shown.contains("hooks.example"), "{shown}");
        assert!(shown.contains("(secret, sha256 "), "{shown}");
    }

    #[test]
    fn bad_sinks_are_refused_at_their_line_and_key() {
        let second = format!("{GOOD}\n[[notify]]\nname = \"b\"\nevents = [\"task_finished\"]\n");
        assert_eq!(
            refused(&second),
            "c.toml:7:1: key `notify[1].name`: a sink needs `url` or `url_file`"
        );
        let both = GOOD.replace("events", "url_file = \"/x\"\nevents");
        assert_eq!(
            refused(&both),
            "c.toml:4:1: key `notify[0].url_file`: give `url` or `url_file`, not both"
        );
        let name = GOOD.replace("\"ops\"", "\"../x\"");
        assert!(
            refused(&name).starts_with("c.toml:2:1: key `notify[0].name`: \"../x\" is not"),
            "{}",
            refused(&name)
        );
        let url = GOOD.replace("https://hooks.example/T/abc", "ftp://hooks.example/T/abc");
        let e = refused(&url);
        assert!(e.starts_with("c.toml:3:1: key `notify[0].url`"), "{e}");
        assert!(!e.contains("hooks.example"), "the URL is a secret: {e}");
        let none = GOOD.replace("[\"approval_requested\"]", "[]");
        assert!(refused(&none).starts_with("c.toml:4:1: key `notify[0].events`"));
        let format = GOOD.replace("events", "format = \"xml\"\nevents");
        assert!(
            refused(&format).starts_with("c.toml:4:10: key `notify[0].format`"),
            "{}",
            refused(&format)
        );
        let from = GOOD.replace("events", "from = \"middle\"\nevents");
        assert!(refused(&from).contains("key `notify[0].from`"));
        let key = GOOD.replace("events", "secret_env = \"ANTHROPIC_API_KEY\"\nevents");
        assert!(
            refused(&key).starts_with("c.toml:4:1: key `notify[0].secret_env`"),
            "{}",
            refused(&key)
        );
        let two = GOOD.replace("events", "secret_env = \"S\"\nsecret_file = \"/s\"\nevents");
        assert!(refused(&two).starts_with("c.toml:5:1: key `notify[0].secret_file`"));
        let dup =
            format!("{GOOD}[[notify]]\nname = \"ops\"\nurl = \"http://h/\"\nevents = [\"x\"]\n");
        assert!(refused(&dup).starts_with("c.toml:6:1: key `notify[1].name`: a second sink"));
        let unknown = GOOD.replace("events", "retries = 3\nevents");
        assert!(
            refused(&unknown).contains("retries"),
            "{}",
            refused(&unknown)
        );
    }

    #[test]
    fn locate_finds_a_field_of_the_nth_table() {
        let text = "[api]\nname = \"x\"\n[[notify]]\nname = \"a\"\n[[notify]]\n  events = []\n";
        assert_eq!(
            locate(text, "notify[1].events[0]"),
            Some(Location { line: 6, column: 3 })
        );
        assert_eq!(
            locate(text, "notify[0].events"),
            Some(Location { line: 3, column: 1 })
        );
        assert_eq!(locate(text, "notify[2].name"), None);
        assert_eq!(locate(text, "api.name"), None);
    }
}
