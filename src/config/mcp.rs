//! The `mcp` section of settings.json: the MCP servers whose tools the model may
//! call, and how long one call may take.
//!
//! A server is one struct with every key optional rather than an untagged enum of
//! a stdio and a remote kind: serde's untagged enums lose the line and column of
//! an error. [`validate`] then checks the kinds apart, naming the key of each
//! problem (`mcp.servers.git.command`), as the other sections do.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::protocol::mcp::valid_server_name;

/// `mcp`: the MCP servers and the bound on one call.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct McpSettings {
    /// Seconds one MCP tool call may take before it is cancelled; a server's own
    /// `timeout_secs` overrides it.
    pub timeout_secs: u64,
    /// The servers by name: the model sees a server's tools as
    /// `mcp__<name>__<tool>`. A name is 1 to 32 of `a-z`, `0-9`, `_` and `-`,
    /// starting with a letter or digit, without `__`.
    #[schemars(extend("propertyNames" = {"pattern": "^[a-z0-9][a-z0-9-]*(?:_[a-z0-9-]+)*$", "maxLength": 32}))]
    pub servers: BTreeMap<String, McpServer>,
}

impl Default for McpSettings {
    fn default() -> Self {
        McpSettings {
            timeout_secs: 60,
            servers: BTreeMap::new(),
        }
    }
}

impl McpSettings {
    /// The seconds one call of `server`'s tools may take: its own `timeout_secs`,
    /// else `mcp.timeout_secs`.
    pub fn call_timeout_secs(&self, server: &McpServer) -> u64 {
        server.timeout_secs.unwrap_or(self.timeout_secs)
    }
}

/// One MCP server: a stdio server (`command`, run inside the sandbox) or a remote
/// one (`url`, streamable HTTP, reached by the daemon). Exactly one of the two.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct McpServer {
    /// stdio: the program and its arguments, run from where it is installed
    /// (`npx -y`, which fetches a package at start, needs the network).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Vec<String>")]
    pub command: Option<Vec<String>>,
    /// stdio: the server's environment variables beyond the tools' base, each
    /// name in the server → the name of the daemon's variable holding the value.
    /// The API key's variable can never be named.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "BTreeMap<String, String>")]
    pub env: Option<BTreeMap<String, String>>,
    /// stdio: whether the server process may use the network (default `false`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "bool")]
    pub network: Option<bool>,
    /// stdio: trees the server may read beyond `allowed_paths.read` (what a node
    /// or python server needs of its installation), relative to the root unless
    /// absolute.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Vec<String>")]
    pub read: Option<Vec<String>>,
    /// stdio: trees the server may write (default none), relative to the root
    /// unless absolute.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Vec<String>")]
    pub write: Option<Vec<String>>,
    /// stdio: one process for the whole daemon instead of one per task (default
    /// `false`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "bool")]
    pub shared: Option<bool>,
    /// Seconds one call of this server's tools may take, instead of
    /// `mcp.timeout_secs`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "u64")]
    pub timeout_secs: Option<u64>,
    /// remote: the server's streamable HTTP endpoint, `http://` or `https://`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "String")]
    pub url: Option<String>,
    /// remote: request headers from the daemon's environment, each header name →
    /// the name of the variable holding its value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "BTreeMap<String, String>")]
    pub headers_env: Option<BTreeMap<String, String>>,
    /// remote: request headers from files, each header name → the file whose
    /// content, trimmed, is its value (a systemd credential, say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "BTreeMap<String, String>")]
    pub headers_file: Option<BTreeMap<String, String>>,
}

/// How a server is reached, once [`validate`] has accepted it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum McpTransport<'a> {
    /// A process speaking JSON-RPC on its stdin and stdout: program and arguments.
    Stdio(&'a [String]),
    /// A streamable HTTP endpoint.
    Http(&'a str),
}

impl McpServer {
    /// Stdio or remote. Only meaningful for a validated server (exactly one of
    /// `command` and `url`); an unvalidated one without `command` reads as remote.
    pub fn transport(&self) -> McpTransport<'_> {
        match (&self.command, &self.url) {
            (Some(argv), _) => McpTransport::Stdio(argv),
            (None, url) => McpTransport::Http(url.as_deref().unwrap_or("")),
        }
    }

    /// The server's variables: (name in the server, daemon variable), sorted.
    pub fn env(&self) -> impl Iterator<Item = (&str, &str)> {
        pairs(&self.env)
    }

    /// Whether the server process may use the network.
    pub fn network(&self) -> bool {
        self.network.unwrap_or(false)
    }

    /// Its extra readable trees.
    pub fn read(&self) -> &[String] {
        self.read.as_deref().unwrap_or(&[])
    }

    /// Its writable trees.
    pub fn write(&self) -> &[String] {
        self.write.as_deref().unwrap_or(&[])
    }

    /// Whether one process serves every task.
    pub fn shared(&self) -> bool {
        self.shared.unwrap_or(false)
    }

    /// Headers from the environment: (header, daemon variable), sorted.
    pub fn headers_env(&self) -> impl Iterator<Item = (&str, &str)> {
        pairs(&self.headers_env)
    }

    /// Headers from files: (header, file), sorted.
    pub fn headers_file(&self) -> impl Iterator<Item = (&str, &str)> {
        pairs(&self.headers_file)
    }
}

fn pairs(map: &Option<BTreeMap<String, String>>) -> impl Iterator<Item = (&str, &str)> {
    map.iter().flatten().map(|(k, v)| (k.as_str(), v.as_str()))
}

/// Variables no server's `env` may name whatever the config says: the API key's
/// conventional variable and the daemon's own (`HARNESSD_*`).
const FORBIDDEN_ENV: &str = "ANTHROPIC_API_KEY";
/// The prefix of the daemon's own variables.
const DAEMON_ENV_PREFIX: &str = "HARNESSD_";

/// A problem in the `mcp` section: the dotted key (`mcp.servers.git.command`) and
/// what is wrong.
pub(crate) type McpProblem = (String, String);

/// Checks the section; `api_key_env` is the config's `api.api_key_env` when the
/// caller knows it. The first problem found, in key order, is the error.
pub(crate) fn validate(mcp: &McpSettings, api_key_env: Option<&str>) -> Result<(), McpProblem> {
    if mcp.timeout_secs == 0 {
        return Err(("mcp.timeout_secs".into(), "must be greater than 0".into()));
    }
    for (name, server) in &mcp.servers {
        let key = format!("mcp.servers.{name}");
        if !valid_server_name(name) {
            return Err((
                key,
                format!(
                    "{name:?} is not a server name: 1 to 32 of a-z, 0-9, `_` and `-`, \
                     starting with a letter or digit, without `__` and not ending in `_`"
                ),
            ));
        }
        validate_server(&key, server, api_key_env)?;
    }
    Ok(())
}

fn validate_server(
    key: &str,
    server: &McpServer,
    api_key_env: Option<&str>,
) -> Result<(), McpProblem> {
    let at = |sub: &str| format!("{key}.{sub}");
    if server.timeout_secs == Some(0) {
        return Err((at("timeout_secs"), "must be greater than 0".into()));
    }
    let stdio_only = [
        ("env", server.env.is_some()),
        ("network", server.network.is_some()),
        ("read", server.read.is_some()),
        ("write", server.write.is_some()),
        ("shared", server.shared.is_some()),
    ];
    let remote_only = [
        ("headers_env", server.headers_env.is_some()),
        ("headers_file", server.headers_file.is_some()),
    ];
    match (&server.command, &server.url) {
        (None, None) => Err((
            key.to_string(),
            "a server needs `command` (a stdio server) or `url` (a remote one)".into(),
        )),
        (Some(_), Some(_)) => Err((
            at("url"),
            "a server has `command` (stdio) or `url` (remote), not both".into(),
        )),
        (Some(argv), None) => {
            if let Some((k, _)) = remote_only.iter().find(|(_, set)| *set) {
                return Err((at(k), format!("`{k}` is for remote servers (`url`)")));
            }
            validate_stdio(key, server, argv, api_key_env)
        }
        (None, Some(url)) => {
            if let Some((k, _)) = stdio_only.iter().find(|(_, set)| *set) {
                return Err((
                    at(k),
                    format!(
                        "`{k}` is for stdio servers (`command`); a remote server runs elsewhere"
                    ),
                ));
            }
            validate_remote(key, server, url, api_key_env)
        }
    }
}

fn validate_stdio(
    key: &str,
    server: &McpServer,
    argv: &[String],
    api_key_env: Option<&str>,
) -> Result<(), McpProblem> {
    validate_command(key, argv)?;
    validate_env(key, server.env(), api_key_env)?;
    let at = |sub: &str| format!("{key}.{sub}");
    for (list, paths) in [("read", server.read()), ("write", server.write())] {
        if let Some(i) = paths.iter().position(String::is_empty) {
            return Err((at(&format!("{list}[{i}]")), "empty path".into()));
        }
    }
    Ok(())
}

/// Checks `key.command`, the program and arguments of a confined operator program
/// (a stdio server, a hook).
pub(crate) fn validate_command(key: &str, argv: &[String]) -> Result<(), McpProblem> {
    let at = |sub: &str| format!("{key}.{sub}");
    match argv.first() {
        None => return Err((at("command"), "names no program".into())),
        Some(p) if p.is_empty() => return Err((at("command[0]"), "empty program".into())),
        // Found from the program's working directory, which tools may write:
        // whatever they put there would run with the program's rights.
        Some(p) if p.contains('/') && !p.starts_with('/') => {
            return Err((
                at("command[0]"),
                format!(
                    "{p:?} is a relative path, which would run from the workspace; give a \
                     program on the sandbox's PATH or an absolute path"
                ),
            ));
        }
        Some(_) => {}
    }
    if let Some(i) = argv.iter().position(|a| a.contains('\0')) {
        return Err((at(&format!("command[{i}]")), "holds a NUL character".into()));
    }
    Ok(())
}

/// Checks `key.env`: each (name in the program, daemon variable) pair names
/// variables, and none the API key's or the daemon's own.
pub(crate) fn validate_env<'a>(
    key: &str,
    env: impl Iterator<Item = (&'a str, &'a str)>,
    api_key_env: Option<&str>,
) -> Result<(), McpProblem> {
    for (inner, outer) in env {
        let k = format!("{key}.env.{inner}");
        if !variable_name(inner) {
            return Err((
                k,
                format!("{inner:?} is not a variable name ([A-Za-z_][A-Za-z0-9_]*)"),
            ));
        }
        if !variable_name(outer) {
            return Err((
                k,
                format!(
                    "{outer:?} is not a variable name: the value names the daemon's variable \
                     that holds it, never the value itself"
                ),
            ));
        }
        if let Some(why) = never_sent(outer, api_key_env) {
            return Err((k, why));
        }
    }
    Ok(())
}

fn validate_remote(
    key: &str,
    server: &McpServer,
    url: &str,
    api_key_env: Option<&str>,
) -> Result<(), McpProblem> {
    let at = |sub: &str| format!("{key}.{sub}");
    super::file::http_url(url).map_err(|why| (at("url"), format!("{url:?}: {why}")))?;
    let mut seen: Vec<String> = Vec::new();
    for (list, pairs) in [
        ("headers_env", server.headers_env().collect::<Vec<_>>()),
        ("headers_file", server.headers_file().collect::<Vec<_>>()),
    ] {
        for (header, source) in pairs {
            // A header name may hold a `.`, which the located key cannot: then
            // the list is named.
            let k = if header.contains('.') {
                at(list)
            } else {
                at(&format!("{list}.{header}"))
            };
            if !header_name(header) {
                return Err((k, format!("{header:?} is not an HTTP header name")));
            }
            let lower = header.to_ascii_lowercase();
            if seen.contains(&lower) {
                return Err((k, format!("header {header} is given twice")));
            }
            seen.push(lower);
            if list == "headers_env" && !variable_name(source) {
                return Err((
                    k,
                    format!(
                        "{source:?} is not a variable name: the value names the daemon's \
                         variable that holds the header, never the header itself"
                    ),
                ));
            }
            if list == "headers_env"
                && let Some(why) = never_sent(source, api_key_env)
            {
                return Err((k, why));
            }
            if list == "headers_file" && source.is_empty() {
                return Err((k, "empty path".into()));
            }
        }
    }
    Ok(())
}

/// Why the daemon's variable `var` may never reach a server (in its environment
/// or a remote one's headers), if it may not.
pub(super) fn never_sent(var: &str, api_key_env: Option<&str>) -> Option<String> {
    if Some(var) == api_key_env || var == FORBIDDEN_ENV {
        return Some(format!(
            "{var} holds the API key, which never reaches a server or hook"
        ));
    }
    var.starts_with(DAEMON_ENV_PREFIX).then(|| {
        format!("{var} is the daemon's own variable, which never reaches a server or hook")
    })
}

/// `[A-Za-z_][A-Za-z0-9_]*`.
pub(super) fn variable_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// An HTTP header name: one or more token characters (RFC 9110).
fn header_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::config::{Settings, SettingsContext};
    use crate::protocol::mcp::PinFile;

    /// The error of a settings text whose `mcp` section is `mcp` (on line 2 on).
    fn error(mcp: &str) -> String {
        let text = format!("{{\n  \"mcp\": {mcp}\n}}\n");
        let context = SettingsContext {
            pins: None,
            api_key_env: Some("MY_KEY"),
        };
        Settings::parse_in(&text, "policies/settings.json", context)
            .map(|_| ())
            .expect_err(mcp)
            .to_string()
    }

    #[test]
    fn the_spec_example_is_valid_and_reads_back() {
        let text = r#"{"mcp": {"servers": {
            "git":  { "command": ["python3", "-m", "mcp_server_git", "--repository", "workspace"] },
            "everything": { "command": ["node", "/opt/mcp/server-everything/dist/index.js"],
                            "env": { "API_TOKEN": "EVERYTHING_TOKEN" }, "network": false,
                            "read": ["/usr/lib/node_modules"], "write": [], "shared": false, "timeout_secs": 5 },
            "remote": { "url": "https://mcp.example.com/mcp", "headers_env": { "Authorization": "REMOTE_MCP_AUTH" } },
            "remote2": { "url": "https://mcp2.example.com/mcp", "headers_file": { "Authorization": "/run/credentials/harnessd.service/mcp2-auth" } }
        }}}"#;
        let s = Settings::parse(text, "s.json").expect("valid").settings.mcp;
        assert_eq!(s.timeout_secs, 60);
        let git = &s.servers["git"];
        assert!(
            matches!(git.transport(), super::McpTransport::Stdio(argv) if argv[0] == "python3")
        );
        assert!(!git.network() && !git.shared() && git.read().is_empty());
        let every = &s.servers["everything"];
        assert_eq!(
            every.env().collect::<Vec<_>>(),
            [("API_TOKEN", "EVERYTHING_TOKEN")]
        );
        assert_eq!(s.call_timeout_secs(every), 5);
        assert_eq!(s.call_timeout_secs(git), 60);
        assert_eq!(
            s.servers["remote"].transport(),
            super::McpTransport::Http("https://mcp.example.com/mcp")
        );
        assert_eq!(
            s.servers["remote2"].headers_file().collect::<Vec<_>>(),
            [(
                "Authorization",
                "/run/credentials/harnessd.service/mcp2-auth"
            )]
        );
    }

    /// Bad `mcp` sections: the section, the key its error names, and what the
    /// message says. The section starts on line 2, column 10.
    const BAD_SECTIONS: &[(&str, &str, &str)] = &[
        (
            r#"{"timeout_secs": 0}"#,
            "mcp.timeout_secs",
            "greater than 0",
        ),
        (
            r#"{"servers": {"Git": {"command": ["x"]}}}"#,
            "mcp.servers.Git",
            "not a server name",
        ),
        (
            r#"{"servers": {"a__b": {"command": ["x"]}}}"#,
            "mcp.servers.a__b",
            "not a server name",
        ),
        (
            r#"{"servers": {"g": {}}}"#,
            "mcp.servers.g",
            "needs `command`",
        ),
        (
            r#"{"servers": {"g": {"command": ["x"], "url": "http://h/"}}}"#,
            "mcp.servers.g.url",
            "not both",
        ),
        (
            r#"{"servers": {"g": {"command": []}}}"#,
            "mcp.servers.g.command",
            "names no program",
        ),
        (
            r#"{"servers": {"g": {"command": [""]}}}"#,
            "mcp.servers.g.command[0]",
            "empty program",
        ),
        (
            r#"{"servers": {"g": {"command": ["x", "a\u0000b"]}}}"#,
            "mcp.servers.g.command[1]",
            "NUL",
        ),
        (
            r#"{"servers": {"g": {"command": ["x"], "headers_env": {}}}}"#,
            "mcp.servers.g.headers_env",
            "for remote servers",
        ),
        (
            r#"{"servers": {"g": {"command": ["x"], "env": {"T": "secret value"}}}}"#,
            "mcp.servers.g.env.T",
            "not a variable name",
        ),
        (
            r#"{"servers": {"g": {"command": ["x"], "env": {"1T": "T"}}}}"#,
            "mcp.servers.g.env.1T",
            "not a variable name",
        ),
        (
            r#"{"servers": {"g": {"command": ["x"], "env": {"K": "MY_KEY"}}}}"#,
            "mcp.servers.g.env.K",
            "holds the API key",
        ),
        (
            r#"{"servers": {"g": {"command": ["x"], "env": {"K": "ANTHROPIC_API_KEY"}}}}"#,
            "mcp.servers.g.env.K",
            "holds the API key",
        ),
        (
            r#"{"servers": {"g": {"command": ["x"], "env": {"K": "HARNESSD_ROOT"}}}}"#,
            "mcp.servers.g.env.K",
            "daemon's own",
        ),
        (
            r#"{"servers": {"g": {"command": ["./server.sh"]}}}"#,
            "mcp.servers.g.command[0]",
            "relative path",
        ),
        (
            r#"{"servers": {"g": {"command": ["bin/server"]}}}"#,
            "mcp.servers.g.command[0]",
            "relative path",
        ),
        (
            r#"{"servers": {"g": {"command": ["x"], "timeout_secs": 0}}}"#,
            "mcp.servers.g.timeout_secs",
            "greater than 0",
        ),
        (
            r#"{"servers": {"g": {"command": ["x"], "read": ["/usr", ""]}}}"#,
            "mcp.servers.g.read[1]",
            "empty path",
        ),
        (
            r#"{"servers": {"g": {"command": ["x"], "write": [""]}}}"#,
            "mcp.servers.g.write[0]",
            "empty path",
        ),
        (
            r#"{"servers": {"r": {"url": "ftp://h/"}}}"#,
            "mcp.servers.r.url",
            "http:// or https://",
        ),
        (
            r#"{"servers": {"r": {"url": "https://h/", "network": true}}}"#,
            "mcp.servers.r.network",
            "for stdio servers",
        ),
        (
            r#"{"servers": {"r": {"url": "https://h/", "env": {}}}}"#,
            "mcp.servers.r.env",
            "for stdio servers",
        ),
        (
            r#"{"servers": {"r": {"url": "https://h/", "headers_env": {"Bad Header": "V"}}}}"#,
            "mcp.servers.r.headers_env.Bad Header",
            "not an HTTP header name",
        ),
        (
            r#"{"servers": {"r": {"url": "https://h/", "headers_env": {"A": "not a var"}}}}"#,
            "mcp.servers.r.headers_env.A",
            "not a variable name",
        ),
        (
            r#"{"servers": {"r": {"url": "https://h/", "headers_env": {"A": "V"}, "headers_file": {"a": "/f"}}}}"#,
            "mcp.servers.r.headers_file.a",
            "given twice",
        ),
        (
            r#"{"servers": {"r": {"url": "https://h/", "headers_env": {"A": "ANTHROPIC_API_KEY"}}}}"#,
            "mcp.servers.r.headers_env.A",
            "holds the API key",
        ),
        (
            r#"{"servers": {"r": {"url": "https://h/", "headers_env": {"A": "MY_KEY"}}}}"#,
            "mcp.servers.r.headers_env.A",
            "holds the API key",
        ),
        (
            r#"{"servers": {"r": {"url": "https://h/", "headers_env": {"A": "HARNESSD_ROOT"}}}}"#,
            "mcp.servers.r.headers_env.A",
            "daemon's own",
        ),
        (
            r#"{"servers": {"r": {"url": "https://h/", "headers_file": {"A": ""}}}}"#,
            "mcp.servers.r.headers_file.A",
            "empty path",
        ),
    ];

    #[test]
    fn every_bad_server_is_a_located_error_naming_its_key() {
        for &(mcp, key, says) in BAD_SECTIONS {
            let e = error(mcp);
            assert!(e.starts_with("policies/settings.json:2:"), "{mcp}: {e}");
            assert!(e.contains(&format!(": key `{key}`: ")), "{mcp}: {e}");
            assert!(e.contains(says), "{mcp}: {e}");
        }
        // The column is the key's value, not the section's.
        let e = error(r#"{"servers": {"g": {"command": ["x"], "timeout_secs": 0}}}"#);
        assert!(e.starts_with("policies/settings.json:2:63: "), "{e}");
        // Unknown keys and wrong types keep serde's location.
        let e = error(r#"{"servers": {"g": {"command": ["x"], "cmd": 1}}}"#);
        assert!(
            e.starts_with("policies/settings.json:2:") && e.contains("cmd"),
            "{e}"
        );
        let e = error(r#"{"servers": {"g": {"command": "x"}}}"#);
        assert!(e.contains("mcp.servers.g.command"), "{e}");
    }

    #[test]
    fn rules_name_configured_servers_and_pinned_keys() {
        let text = |rule: &str| {
            format!(
                "{{\"mcp\": {{\"servers\": {{\"git\": {{\"command\": [\"x\"]}}}}}},\n \"tools\": {{\"deny\": [\n  \"{rule}\"]}}}}"
            )
        };
        let e = Settings::parse(&text("mcp__gti__x"), "s.json")
            .expect_err("typo")
            .to_string();
        assert!(e.starts_with("s.json:3:3: key `tools.deny[0]`: "), "{e}");
        assert!(e.contains("not in mcp.servers; servers: git"), "{e}");
        let mut pins = PinFile::default();
        let def = crate::protocol::mcp::ToolDefinition {
            name: "log".into(),
            title: None,
            description: None,
            input_schema: serde_json::json!({"type": "object", "properties": {"n": {}}}),
            output_schema: None,
            annotations: None,
        };
        crate::config::pin_server(&mut pins, "git", &[def]);
        let pins = Arc::new(pins);
        let context = SettingsContext {
            pins: Some(&pins),
            api_key_env: None,
        };
        let e = Settings::parse_in(&text("mcp__git__log(m=1)"), "s.json", context)
            .expect_err("no such key")
            .to_string();
        assert!(e.starts_with("s.json:3:3: key `tools.deny[0]`: "), "{e}");
        assert!(
            e.contains("not a property of log's pinned input schema"),
            "{e}"
        );
        let ok = Settings::parse_in(&text("mcp__git__log(n=1)"), "s.json", context).expect("valid");
        assert_eq!(ok.pins, pins);
        // Without pins the key cannot be checked, and the rule stands.
        Settings::parse(&text("mcp__git__log(m=1)"), "s.json").expect("unpinned");
    }
}
