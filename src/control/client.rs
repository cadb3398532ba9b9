//! A client of the control API over the unix socket, for the `submit`, `tasks`,
//! `approve`… commands: one HTTP/1.1 connection per request, bodies typed by
//! [`super::message`].

use std::path::Path;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::rt::TokioIo;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::net::UnixStream;

use crate::protocol::ErrorBody;

/// Why a request failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The daemon is not reachable.
    #[error("cannot reach harnessd at {path}: {error}; is `harnessd serve` running for this root?")]
    Connect {
        /// The socket.
        path: String,
        /// Why the connection failed (absent socket, refused). Not a `source`: the
        /// message already says it, and a source would be printed a second time.
        error: std::io::Error,
    },
    /// The socket (or its directory) does not let this user in: not an operator.
    #[error("permission denied: {hint}")]
    PermissionDenied {
        /// Who may connect and how to become one of them, from the socket's owner,
        /// group and mode.
        hint: String,
    },
    /// The HTTP exchange failed.
    #[error("control API request failed: {0}")]
    Http(String),
    /// The daemon answered with an error status.
    #[error("{message}")]
    Api {
        /// The HTTP status (400 or above).
        status: u16,
        /// The daemon's message, or `HTTP <status>` when the body had none.
        message: String,
    },
    /// A success status whose body is not what the endpoint returns.
    #[error("unexpected answer from harnessd to {path}: {source}")]
    Decode {
        /// The request path.
        path: String,
        /// Why the body did not parse.
        source: serde_json::Error,
    },
}

async fn send(
    socket: &Path,
    method: &str,
    path: &str,
    body: Option<Bytes>,
) -> Result<hyper::Response<hyper::body::Incoming>, ClientError> {
    let stream = UnixStream::connect(socket)
        .await
        .map_err(|source| match source.kind() {
            std::io::ErrorKind::PermissionDenied => ClientError::PermissionDenied {
                hint: access_hint(socket),
            },
            _ => ClientError::Connect {
                path: socket.display().to_string(),
                error: source,
            },
        })?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| ClientError::Http(e.to_string()))?;
    // The client side: drives this one connection and ends with it (when the
    // response is read and `sender` dropped). No daemon task; nothing to track.
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let bytes = body.unwrap_or_default();
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

/// Who may use `socket`, for a caller the kernel refused: the daemon's user and
/// root, and the group of the socket when its mode lets the group in (that is
/// `daemon.operators_group`, docs/api.md). Read from the socket, or from its
/// directory when the caller cannot even look inside it.
fn access_hint(socket: &Path) -> String {
    use std::os::unix::fs::MetadataExt;
    let shown = socket.display();
    let meta = std::fs::metadata(socket).or_else(|_| {
        let dir = socket.parent().unwrap_or(socket);
        std::fs::metadata(dir)
    });
    let Ok(meta) = meta else {
        return format!(
            "you are not in the operators group of the harnessd serving {shown}, nor its user \
             or root"
        );
    };
    let owner = nix::unistd::User::from_uid(meta.uid().into())
        .ok()
        .flatten()
        .map_or_else(|| format!("uid {}", meta.uid()), |u| u.name);
    let who = if meta.uid() == 0 {
        "root".to_string()
    } else {
        format!("its user {owner} and root")
    };
    let group = nix::unistd::Group::from_gid(meta.gid().into())
        .ok()
        .flatten()
        .map_or_else(|| format!("gid {}", meta.gid()), |g| g.name);
    // The socket is 0660 and its directory 0710 when an operators group is set.
    if meta.mode() & 0o070 != 0 {
        format!(
            "you are not in the operators group {group:?} of the harnessd serving {shown} \
             (only {who} and members of {group} may connect); ask an administrator to add \
             you (usermod -aG {group} YOUR_USER, then log in again)"
        )
    } else {
        format!(
            "you are not in the operators group of the harnessd serving {shown}: none is set, \
             so only {who} may connect; run as {owner}, or have daemon.operators_group set \
             in its config.toml (and the daemon restarted)"
        )
    }
}

/// One request with an optional JSON `body`; returns the answer decoded as `T`, or
/// [`ClientError::Api`] with the daemon's message when the status is 400 or above.
pub async fn request<T: DeserializeOwned>(
    socket: &Path,
    method: &str,
    path: &str,
    body: Option<&impl Serialize>,
) -> Result<T, ClientError> {
    let body = body
        .map(serde_json::to_vec)
        .transpose()
        .map_err(|e| ClientError::Http(format!("cannot encode the request: {e}")))?
        .map(Bytes::from);
    let resp = send(socket, method, path, body).await?;
    let status = resp.status().as_u16();
    let bytes = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| ClientError::Http(e.to_string()))?
        .to_bytes();
    if status >= 400 {
        let message = serde_json::from_slice::<ErrorBody>(&bytes)
            .map(|b| b.error.message)
            .unwrap_or_else(|_| format!("HTTP {status}"));
        return Err(ClientError::Api { status, message });
    }
    serde_json::from_slice(&bytes).map_err(|source| ClientError::Decode {
        path: path.to_string(),
        source,
    })
}

/// A request without a body (`GET`, and the `POST`s that take none).
pub async fn request_empty<T: DeserializeOwned>(
    socket: &Path,
    method: &str,
    path: &str,
) -> Result<T, ClientError> {
    request(socket, method, path, None::<&()>).await
}

/// An `application/x-ndjson` response read line by line.
pub struct LineStream {
    response: hyper::Response<hyper::body::Incoming>,
    buf: Vec<u8>,
}

impl LineStream {
    /// GETs `path`; the status is known before any line is read.
    pub async fn open(socket: &Path, path: &str) -> Result<LineStream, ClientError> {
        let response = send(socket, "GET", path, None).await?;
        Ok(LineStream {
            response,
            buf: Vec::new(),
        })
    }

    /// The response's HTTP status.
    pub fn status(&self) -> u16 {
        self.response.status().as_u16()
    }

    /// The next complete line, without its newline; `None` at the end of the body.
    pub async fn next_line(&mut self) -> Result<Option<String>, ClientError> {
        loop {
            if let Some(pos) = self.buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=pos).collect();
                let text = line.get(..pos).unwrap_or_default();
                return Ok(Some(String::from_utf8_lossy(text).into_owned()));
            }
            match self.response.body_mut().frame().await {
                None => return Ok(None),
                Some(frame) => {
                    let frame = frame.map_err(|e| ClientError::Http(e.to_string()))?;
                    if let Some(data) = frame.data_ref() {
                        self.buf.extend_from_slice(data);
                    }
                }
            }
        }
    }
}
