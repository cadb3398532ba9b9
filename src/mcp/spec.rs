//! A server's settings (`mcp.servers.<name>`) resolved into what starts it: paths
//! made absolute, the variables its `env` names read from the daemon's environment,
//! a remote server's header sources.

use std::time::Duration;

use super::http::HttpTarget;
use super::launch::ServerCommand;
use crate::config::{Loaded, resolve};

/// How a server is reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transport {
    /// A process in the sandbox, over its stdin and stdout.
    Stdio(ServerCommand),
    /// A remote server over streamable HTTP, reached by the daemon.
    Http(HttpTarget),
}

/// A server as its owner runs it: how it is reached and how long a call may take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerSpec {
    /// Its name in `mcp.servers`.
    pub name: String,
    /// How it is reached.
    pub transport: Transport,
    /// Bound of one request (`timeout_secs` of the server, else `mcp.timeout_secs`).
    pub timeout: Duration,
}

/// The spec of server `name` under `loaded`, and whether it is shared; `None`
/// when the settings have no such server.
pub fn server_spec(loaded: &Loaded, name: &str) -> Option<(ServerSpec, bool)> {
    let mcp = &loaded.policy.settings.mcp;
    let server = mcp.servers.get(name)?;
    let root = &loaded.paths.root;
    let transport = match (&server.command, &server.url) {
        (Some(argv), _) => {
            let paths = |list: &[String]| list.iter().map(|p| resolve(root, p)).collect();
            // A variable missing from the daemon's environment is left out: the
            // server starts without it and says what it misses, as it would
            // outside harnessd.
            let env = server
                .env()
                .filter_map(|(inner, outer)| {
                    std::env::var(outer).ok().map(|v| (inner.to_string(), v))
                })
                .collect();
            Transport::Stdio(ServerCommand {
                name: name.to_string(),
                argv: argv.clone(),
                env,
                read: paths(server.read()),
                write: paths(server.write()),
                network: server.network(),
            })
        }
        (None, Some(url)) => Transport::Http(HttpTarget {
            url: url.clone(),
            headers_env: server
                .headers_env()
                .map(|(h, v)| (h.to_string(), v.to_string()))
                .collect(),
            headers_file: server
                .headers_file()
                .map(|(h, f)| (h.to_string(), resolve(root, f)))
                .collect(),
        }),
        (None, None) => return None,
    };
    let spec = ServerSpec {
        name: name.to_string(),
        transport,
        timeout: Duration::from_secs(mcp.call_timeout_secs(server)),
    };
    Some((spec, server.shared()))
}
