//! What `check` says about MCP servers: each server with what its sandbox allows,
//! and the warnings an operator should see before a task starts one.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::config::{Loaded, resolve};

/// Address space below which node's V8 does not start (measured: 1024 MiB fails,
/// 1280 MiB starts the reference server).
const NODE_MIN_MEMORY_MB: u64 = 1536;

/// The PATH a server's program is looked up on (the tools' environment).
const SANDBOX_PATH: [&str; 3] = ["/usr/local/bin", "/usr/bin", "/bin"];

/// Each server, as the report lists it.
pub fn servers(loaded: &Loaded) -> Vec<Value> {
    let root = &loaded.paths.root;
    let s = &loaded.policy.settings;
    let abs = |l: &[String]| -> Vec<String> {
        l.iter()
            .map(|p| resolve(root, p).display().to_string())
            .collect()
    };
    s.mcp
        .servers
        .iter()
        .map(|(name, server)| match (&server.command, &server.url) {
            (Some(command), _) => {
                let mut read = abs(&s.allowed_paths.read);
                read.extend(abs(server.read()));
                json!({
                    "name": name,
                    "kind": "stdio",
                    "command": command,
                    "read": read,
                    "write": abs(server.write()),
                    "network": server.network(),
                    "shared": server.shared(),
                    "env": server.env().map(|(k, _)| k).collect::<Vec<_>>(),
                    "timeout_secs": s.mcp.call_timeout_secs(server),
                })
            }
            _ => json!({
                "name": name,
                "kind": "remote",
                "url": server.url,
                "headers": server.headers_env().map(|(h, _)| h).chain(server.headers_file().map(|(h, _)| h)).collect::<Vec<_>>(),
                "timeout_secs": s.mcp.call_timeout_secs(server),
            }),
        })
        .collect()
}

/// Where `program` is found, as the sandbox's PATH finds it.
pub(super) fn found(program: &str) -> Option<PathBuf> {
    if program.contains('/') {
        return Path::new(program).is_file().then(|| PathBuf::from(program));
    }
    SANDBOX_PATH
        .iter()
        .map(|d| Path::new(d).join(program))
        .find(|p| p.is_file())
}

/// Warnings for the entries of a server's `command` that name a file tools may
/// write (under `allowed_paths.write`; a relative one is found from the server's
/// working directory, the root): whatever a tool puts there runs as the server,
/// with its variables, write set and network.
pub(super) fn writable_code(loaded: &Loaded, key: &str, command: &[String]) -> Vec<String> {
    let root = &loaded.paths.root;
    let writable: Vec<PathBuf> = loaded
        .policy
        .settings
        .allowed_paths
        .write
        .iter()
        .map(|p| resolve(root, p))
        .filter(|p| p.is_dir())
        .collect();
    command
        .iter()
        .enumerate()
        .filter_map(|(i, arg)| {
            let path = root.join(arg);
            let tree = writable.iter().find(|t| path.starts_with(t))?;
            path.is_file().then(|| {
                format!(
                    "{key}.command[{i}] {arg:?} is {} in {}, which tools may write: what \
                     they put there runs in its place, with its variables and rights; install \
                     it outside the trees tools write",
                    loaded.paths.display(&path),
                    loaded.paths.display(tree)
                )
            })
        })
        .collect()
}

/// The warnings about servers and MCP rules.
pub fn warnings(loaded: &Loaded, pins: &crate::protocol::mcp::PinFile) -> Vec<String> {
    let s = &loaded.policy.settings;
    let mut out = Vec::new();
    for (name, server) in &s.mcp.servers {
        if let Some(command) = &server.command {
            let program = command.first().map(String::as_str).unwrap_or_default();
            match found(program) {
                None => out.push(format!(
                    "mcp.servers.{name}: {program:?} is not found on the sandbox's PATH ({}); \
                     give the full path of an installed program",
                    SANDBOX_PATH.join(":")
                )),
                Some(path) => {
                    let base = path
                        .file_name()
                        .and_then(|n| n.to_str())
                        .unwrap_or_default();
                    if base == "npx" {
                        out.push(format!(
                            "mcp.servers.{name}: npx fetches packages at start, which needs the \
                             network the sandbox does not give; install the package and run it by path"
                        ));
                    }
                    if base.starts_with("node") && s.sandbox.memory_mb < NODE_MIN_MEMORY_MB {
                        out.push(format!(
                            "mcp.servers.{name}: node needs more address space than \
                             sandbox.memory_mb = {} MiB; set it to at least {NODE_MIN_MEMORY_MB}",
                            s.sandbox.memory_mb
                        ));
                    }
                }
            }
            out.extend(writable_code(
                loaded,
                &format!("mcp.servers.{name}"),
                command,
            ));
            if server.network() {
                out.push(format!(
                    "mcp.servers.{name} has network: true: the server can reach any host, and \
                     send what it reads there"
                ));
            }
        }
        if let Some(key) = &loaded.config.api.api_key_file {
            let key = resolve(&loaded.paths.root, key);
            for (header, file) in server.headers_file() {
                if resolve(&loaded.paths.root, file) == key {
                    out.push(format!(
                        "mcp.servers.{name}.headers_file.{header} is the API key file: the \
                         daemon would send the API key to that server"
                    ));
                }
            }
        }
        if let Some(url) = &server.url
            && url.starts_with("http://")
            && !["http://127.0.0.1", "http://localhost", "http://[::1]"]
                .iter()
                .any(|l| url.starts_with(l))
        {
            out.push(format!(
                "mcp.servers.{name}: {url} is plain HTTP to another host: its headers and \
                 results cross the network unencrypted"
            ));
        }
    }
    for r in crate::policy::unpinned_mcp_rules(&loaded.policy, pins) {
        out.push(format!(
            "tools.{} rule {:?} matches no pinned tool (yet): it applies once the tool is pinned",
            r.list, r.rule
        ));
    }
    out
}
