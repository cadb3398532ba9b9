//! What the executor asks the helper to do: the wire format on the helper's stdin.
//!
//! These types are the helper's own: it imports nothing of `config`, so the
//! confined side depends on no file format. The parent builds a [`Confinement`]
//! from settings (see `Confinement::from_settings`, defined in [`crate::exec`]).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// One request to the helper: the job and the confinement to apply first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HelperRequest {
    /// What to do once confined.
    pub job: Job,
    /// How to confine.
    pub confine: Confinement,
}

/// The confinement of one tool process, resolved by the parent from settings: the
/// helper applies it and decides nothing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Confinement {
    /// Absolute paths readable (and executable).
    pub read: Vec<PathBuf>,
    /// Absolute paths writable (and readable) under the write profile; under the
    /// read-only profile they are only readable.
    pub write: Vec<PathBuf>,
    /// Whether the process may write `write` or only `/dev/null` and a private
    /// temporary directory.
    pub profile: Profile,
    /// `settings.sandbox` as it was when the call started: network, resource
    /// limits, user, require.
    pub limits: Limits,
}

/// What a tool process may write (docs/policy.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Profile {
    /// Nothing but `/dev/null` and a private temporary directory gone at the end of
    /// the call: a call allowed by a pattern `allow` rule.
    ReadOnly,
    /// `allowed_paths.write`: whole-tool allows, approved asks, `allow_write`, file
    /// tools.
    Write,
    /// A long-running server: reads `read`, writes `write` (its own, often none),
    /// `/dev/null` and a private temporary directory like the read-only
    /// profile's, which `TMPDIR` names.
    Server,
}

/// Whether the helper may run a job when a layer cannot be enforced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Require {
    /// Refuse the job if any layer cannot be enforced.
    Full,
    /// Run with what the kernel offers; the report says what is missing.
    BestEffort,
}

/// Network, resource limits and account of one tool process. The wall-clock
/// timeout is not here: the parent enforces it, the helper never sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// What of the network the process may use.
    pub network: Network,
    /// CPU seconds (RLIMIT_CPU); `None` for none at all: a server lives as long
    /// as its task, and each of its calls is bounded by the caller instead.
    pub cpu_secs: Option<u64>,
    /// Address space in MiB.
    pub memory_mb: u64,
    /// Processes of the sandbox user.
    pub max_processes: u64,
    /// Largest file it may write, in MiB.
    pub max_file_mb: u64,
    /// Open descriptors per process.
    pub max_open_files: u64,
    /// MiB of the private temporary directory of a read-only call.
    pub tmp_mb: u64,
    /// Account it runs as when the helper starts as root.
    pub user: String,
    /// Whether every layer is required.
    pub require: Require,
}

/// What of the network a confined process may use.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Network {
    /// None: Landlock refuses TCP bind and connect, seccomp every other socket
    /// but AF_UNIX (tools, unless `sandbox.network`).
    Off,
    /// Any socket.
    On,
    /// TCP connections to exactly these ports (Landlock), no bind, and no socket
    /// but TCP over IPv4 or IPv6 and AF_UNIX, no TCP fast open and no `listen`
    /// (seccomp): no UDP, so no DNS. A
    /// kernel that cannot enforce it (Landlock ABI below 4) refuses the job
    /// whatever `require` says.
    TcpPorts(Vec<u16>),
}

impl Network {
    /// [`Network::On`] when `on`, else [`Network::Off`].
    pub fn from_bool(on: bool) -> Network {
        if on { Network::On } else { Network::Off }
    }
}

/// One unit of work for the helper. A file job's `path` is the path the daemon
/// judged: absolute, normalised and free of symbolic links when it was judged. The
/// helper opens exactly that name, following no link, or refuses; the kernel, not
/// this type, decides what is reachable.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Job {
    /// Print lines `offset..offset+limit` (1-based) of a UTF-8 file.
    ReadFile {
        /// The file.
        path: PathBuf,
        /// First line, 1-based.
        offset: Option<u64>,
        /// Number of lines.
        limit: Option<u64>,
    },
    /// Replace a file's content, creating parent directories.
    WriteFile {
        /// The file.
        path: PathBuf,
        /// New content.
        content: String,
    },
    /// Replace the single occurrence of `old_string`.
    EditFile {
        /// The file.
        path: PathBuf,
        /// Text that must occur exactly once.
        old_string: String,
        /// Its replacement.
        new_string: String,
    },
    /// List a directory.
    ListDir {
        /// The directory.
        path: PathBuf,
    },
    /// `bash -c command`.
    Bash {
        /// The command.
        command: String,
        /// The command's argv when it is one proven simple command of a program
        /// (`policy::shell::simple_command`): the helper `exec`s it as bash would,
        /// without bash, and falls back to `bash -c command` when the program is
        /// not found or cannot be executed (see `sandbox::direct`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        direct: Option<Vec<String>>,
    },
    /// `python3 -c code`.
    Python {
        /// The code.
        code: String,
    },
    /// Any program with arguments (`harnessd sandbox -- CMD…`).
    Exec {
        /// Program and arguments.
        argv: Vec<String>,
    },
    /// Confine, then print a JSON report of what is enforced (for `check`).
    Probe,
    /// A long-running server speaking on stdin and stdout: the one job whose stdin
    /// stays the daemon's pipe after the job is read. `env` is set on top of the
    /// tool environment the helper was started with; the values travel here, in
    /// the job, never on a command line.
    McpServer {
        /// Program (found on `PATH` inside the sandbox) and arguments.
        argv: Vec<String>,
        /// Variables added to the environment.
        env: Vec<(String, String)>,
    },
    /// A one-shot operator program (a hook): like [`Job::McpServer`] its stdin
    /// stays the daemon's pipe after the job (it carries the hook's input), and
    /// `env` is set on top of the tool environment.
    Hook {
        /// Program (found on `PATH` inside the sandbox) and arguments.
        argv: Vec<String>,
        /// Variables added to the environment.
        env: Vec<(String, String)>,
    },
}

impl Job {
    /// Whether the job's output is a command's (`exit_code`/`stdout`/`stderr`
    /// sections) rather than a file operation's text.
    pub fn is_command(&self) -> bool {
        matches!(
            self,
            Job::Bash { .. } | Job::Python { .. } | Job::Exec { .. }
        )
    }
}

/// The line the helper writes on stderr once a [`Job::McpServer`] is confined and
/// its program found, just before it becomes the server: whatever the helper wrote
/// before it is the sandbox's refusal, whatever comes after is the server's own.
/// Nothing but the helper can write first, so the server cannot forge it away.
pub const SERVER_READY: &str = "harnessd sandbox: server confined";

/// Longest job accepted: a file job carries a whole file's new content.
const MAX_JOB_BYTES: usize = 1 << 30;

/// `req` as the helper reads it: its length in decimal, a newline, then the JSON.
/// The length, not the end of the stream, delimits the job, so the stream can go on
/// to be a server's stdin.
pub fn frame(req: &HelperRequest) -> serde_json::Result<Vec<u8>> {
    let json = serde_json::to_vec(req)?;
    let mut framed = format!("{}\n", json.len()).into_bytes();
    framed.extend_from_slice(&json);
    Ok(framed)
}

/// Reads one [`frame`]d request from `input`, not one byte past it. `input` must
/// not be buffered: what follows the job belongs to the server.
pub fn read_framed(input: &mut impl std::io::Read) -> Result<HelperRequest, String> {
    let mut header = Vec::new();
    loop {
        let mut byte = [0u8; 1];
        match input.read(&mut byte) {
            Ok(0) => return Err("stdin closed before the job".into()),
            Ok(_) if byte[0] == b'\n' => break,
            Ok(_) if header.len() < 20 => header.push(byte[0]),
            Ok(_) => return Err("the job's length line is too long".into()),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("cannot read the job from stdin: {e}")),
        }
    }
    let len: usize = std::str::from_utf8(&header)
        .ok()
        .and_then(|h| h.parse().ok())
        .filter(|n| *n <= MAX_JOB_BYTES)
        .ok_or_else(|| {
            format!(
                "malformed job length {:?}",
                String::from_utf8_lossy(&header)
            )
        })?;
    let mut json = vec![0u8; len];
    input
        .read_exact(&mut json)
        .map_err(|e| format!("cannot read the job from stdin: {e}"))?;
    serde_json::from_slice(&json).map_err(|e| format!("malformed job: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> HelperRequest {
        HelperRequest {
            job: Job::McpServer {
                argv: vec!["cat".into()],
                env: vec![("A".into(), "line\nbreak".into())],
            },
            confine: Confinement {
                read: vec![PathBuf::from("/usr")],
                write: Vec::new(),
                profile: Profile::Server,
                limits: Limits {
                    network: Network::Off,
                    cpu_secs: None,
                    memory_mb: 1,
                    max_processes: 1,
                    max_file_mb: 1,
                    max_open_files: 1,
                    tmp_mb: 1,
                    user: "nobody".into(),
                    require: Require::Full,
                },
            },
        }
    }

    #[test]
    fn a_framed_job_is_read_whole_and_the_stream_after_it_is_left_unread() {
        let mut stream = frame(&request()).unwrap();
        stream.extend_from_slice(b"{\"jsonrpc\":\"2.0\"}\n");
        let mut input = std::io::Cursor::new(stream);
        assert_eq!(read_framed(&mut input).unwrap(), request());
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut input, &mut rest).unwrap();
        assert_eq!(rest, "{\"jsonrpc\":\"2.0\"}\n");
    }

    #[test]
    fn a_truncated_or_unframed_job_is_refused() {
        let framed = frame(&request()).unwrap();
        let cut = &framed[..framed.len() - 1];
        assert!(read_framed(&mut std::io::Cursor::new(cut)).is_err());
        let bare = serde_json::to_vec(&request()).unwrap();
        assert!(read_framed(&mut std::io::Cursor::new(bare)).is_err());
        assert!(read_framed(&mut std::io::Cursor::new(b"")).is_err());
    }
}
