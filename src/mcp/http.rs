//! A remote server over streamable HTTP, reached by the daemon (no process to
//! confine): the SDK's own HTTP client, with the headers an operator configured —
//! each value read when the connection is made, from the daemon's environment
//! (`headers_env`) or a credential file (`headers_file`), and marked sensitive so
//! it is never logged.

use std::collections::HashMap;
use std::path::PathBuf;

use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use tokio::sync::mpsc;

use super::client::{self, ClientError, Connection, Note};

/// Where a remote server is and what headers it is sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpTarget {
    /// The server's URL (`http://` or `https://`).
    pub url: String,
    /// Header → the daemon's environment variable holding its value.
    pub headers_env: Vec<(String, String)>,
    /// Header → the file whose content (trimmed) is its value.
    pub headers_file: Vec<(String, PathBuf)>,
}

/// The headers of `target`, read now; the error names the header and its source.
fn headers(
    target: &HttpTarget,
) -> Result<HashMap<reqwest::header::HeaderName, reqwest::header::HeaderValue>, String> {
    let mut out = HashMap::new();
    let mut add = |name: &str, value: String, from: &str| -> Result<(), String> {
        let header = reqwest::header::HeaderName::try_from(name)
            .map_err(|e| format!("header {name:?} is not a valid name: {e}"))?;
        let mut value = reqwest::header::HeaderValue::try_from(value.trim())
            .map_err(|_| format!("header {name} from {from} holds characters a header cannot"))?;
        value.set_sensitive(true);
        out.insert(header, value);
        Ok(())
    };
    for (name, var) in &target.headers_env {
        let value = std::env::var(var)
            .map_err(|_| format!("header {name}: the daemon's environment has no {var}"))?;
        add(name, value, &format!("${var}"))?;
    }
    for (name, file) in &target.headers_file {
        let value = std::fs::read_to_string(file)
            .map_err(|e| format!("header {name}: cannot read {}: {e}", file.display()))?;
        add(name, value, &file.display().to_string())?;
    }
    Ok(out)
}

/// Connects to `target`.
pub async fn connect(
    target: &HttpTarget,
) -> Result<(Connection, mpsc::Receiver<Note>), ClientError> {
    // The SDK's HTTP client brings no TLS provider of its own: ring, as the
    // model client uses. Installing it twice is harmless (the first one stays).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let headers = headers(target).map_err(ClientError::Handshake)?;
    let config =
        StreamableHttpClientTransportConfig::with_uri(target.url.as_str()).custom_headers(headers);
    client::connect_transport(StreamableHttpClientTransport::from_config(config)).await
}
