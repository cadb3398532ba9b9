//! A client of the control API over the unix socket, for the `submit`, `tasks`,
//! `approve`… commands.

use std::path::Path;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::net::UnixStream;

/// Why a request failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The daemon is not reachable.
    #[error(
        "cannot reach harnessd at {path}: {source}; is `harnessd serve` running for this root?"
    )]
    Connect {
        /// The socket.
        path: String,
        /// The error.
        source: std::io::Error,
    },
    /// The HTTP exchange failed.
    #[error("control API request failed: {0}")]
    Http(String),
}

async fn send(
    socket: &Path,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> Result<hyper::Response<hyper::body::Incoming>, ClientError> {
    let stream = UnixStream::connect(socket)
        .await
        .map_err(|source| ClientError::Connect {
            path: socket.display().to_string(),
            source,
        })?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| ClientError::Http(e.to_string()))?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let bytes = body.map(|b| Bytes::from(b.to_string())).unwrap_or_default();
    let req = Request::builder()
        .method(method)
        .uri(path)
        .header("host", "harnessd")
        .header("content-type", "application/json")
        .body(Full::new(bytes))
        .map_err(|e| ClientError::Http(e.to_string()))?;
    sender
        .send_request(req)
        .await
        .map_err(|e| ClientError::Http(e.to_string()))
}

/// One request; returns the status and the JSON body (Null when not JSON).
pub async fn call(
    socket: &Path,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> Result<(u16, Value), ClientError> {
    let resp = send(socket, method, path, body).await?;
    let status = resp.status().as_u16();
    let bytes = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| ClientError::Http(e.to_string()))?
        .to_bytes();
    Ok((
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    ))
}

/// Streams a newline-delimited response, calling `on_line` for each line.
pub async fn stream_lines(
    socket: &Path,
    path: &str,
    mut on_line: impl FnMut(&str),
) -> Result<u16, ClientError> {
    let mut resp = send(socket, "GET", path, None).await?;
    let status = resp.status().as_u16();
    let mut buf = Vec::new();
    while let Some(frame) = resp.body_mut().frame().await {
        let frame = frame.map_err(|e| ClientError::Http(e.to_string()))?;
        if let Some(data) = frame.data_ref() {
            buf.extend_from_slice(data);
            while let Some(pos) = buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = buf.drain(..=pos).collect();
                on_line(String::from_utf8_lossy(&line[..line.len() - 1]).as_ref());
            }
        }
    }
    Ok(status)
}
