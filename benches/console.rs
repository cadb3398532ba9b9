//! Benchmark of the web console's tasks page with many old tasks (figures of
//! docs/benchmarks.md): a root holding 20 000 finished transcripts, `harnessd
//! serve` with `daemon.listen` on loopback, a session from `console-url`, then
//! `GET /console/` (and an older page) five times each: the time to the first
//! byte of the answer and to its last, and the page's weight — the HTML, the one
//! stylesheet and the one script, the requests a browser makes for it (the page,
//! its two assets and the event stream it follows). Prints the medians; asserts
//! nothing.
//!
//! Run: `cargo bench --bench console` (`BENCH_TASKS=N` changes the count;
//! `BENCH_KEEP=1` keeps the root).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

#[path = "shared/finished.rs"]
mod finished;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use harnessd_testkit::root::init_root;

const RUNS: usize = 5;

/// One answer: status, headers (lower-cased names), body, and when its first
/// byte and its last arrived after the request was sent.
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    first_byte: Duration,
    last_byte: Duration,
}

/// One GET over TCP with `cookie`, read to the end (`connection: close`).
fn get(addr: &str, path: &str, cookie: Option<&str>) -> Answer {
    let mut s = TcpStream::connect(addr).unwrap();
    let cookie = cookie
        .map(|c| format!("cookie: {c}\r\n"))
        .unwrap_or_default();
    let sent = Instant::now();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nhost: {addr}\r\n{cookie}connection: close\r\n\r\n"
    )
    .unwrap();
    let mut r = BufReader::new(s);
    let first = r.fill_buf().unwrap().len();
    let first_byte = sent.elapsed();
    assert!(first > 0, "no answer to {path}");
    let mut raw = Vec::new();
    r.read_to_end(&mut raw).unwrap();
    let last_byte = sent.elapsed();
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut lines = head.lines();
    let status = lines
        .next()
        .unwrap()
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect::<Vec<_>>();
    let mut body = raw[split + 4..].to_vec();
    if headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v == "chunked")
    {
        body = unchunk(&body);
    }
    Answer {
        status,
        headers,
        body,
        first_byte,
        last_byte,
    }
}

/// A chunked body's bytes.
fn unchunk(mut raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let end = raw.windows(2).position(|w| w == b"\r\n").unwrap();
        let size =
            usize::from_str_radix(std::str::from_utf8(&raw[..end]).unwrap().trim(), 16).unwrap();
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&raw[end + 2..end + 2 + size]);
        raw = &raw[end + 2 + size + 2..];
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// The session cookie a one-time link is exchanged for.
fn log_in(bin: &str, root: &Path, addr: &str) -> String {
    let out = Command::new(bin)
        .arg("--root")
        .arg(root)
        .args(["console-url", "--name", "bench"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let link = String::from_utf8_lossy(&out.stdout);
    let path = link
        .lines()
        .next()
        .unwrap()
        .trim()
        .split_once(addr)
        .unwrap()
        .1
        .to_string();
    let a = get(addr, &path, None);
    assert_eq!(a.status, 303, "{}", String::from_utf8_lossy(&a.body));
    let (_, cookie) = a.headers.iter().find(|(k, _)| k == "set-cookie").unwrap();
    cookie.split(';').next().unwrap().to_string()
}

/// `harnessd serve` on `root`, once `/healthz` answers on `addr`.
fn serve(bin: &str, root: &Path, addr: &str) -> std::process::Child {
    let log = std::fs::File::create(root.join("daemon.log")).unwrap();
    let child = Command::new(bin)
        .arg("--root")
        .arg(root)
        .arg("serve")
        .env("ANTHROPIC_API_KEY", "bench-key")
        .stdout(Stdio::null())
        .stderr(Stdio::from(log))
        .spawn()
        .unwrap();
    let up = Instant::now();
    while TcpStream::connect(addr).is_err() || get(addr, "/healthz", None).status != 200 {
        assert!(
            up.elapsed() < Duration::from_secs(60),
            "the daemon did not come up"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    child
}

fn main() {
    let tasks: usize = std::env::var("BENCH_TASKS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let bin = env!("CARGO_BIN_EXE_harnessd");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let root = init_root(
        bin,
        "console",
        &[
            ("https://api.anthropic.com", "http://127.0.0.1:9"),
            (
                "# listen = \"127.0.0.1:8080\"",
                &format!("listen = \"{addr}\""),
            ),
        ],
    );
    let dir = root.join("transcripts");
    for i in 0..tasks {
        finished::transcript(i).save(&dir).unwrap();
    }
    let mut child = serve(bin, &root, &addr);
    let cookie = log_in(bin, &root, &addr);
    let first = get(&addr, "/console/", Some(&cookie));
    assert_eq!(first.status, 200);
    let html = String::from_utf8_lossy(&first.body).into_owned();
    let listed = html.matches("class=\"task\"").count();
    let older = html
        .split("href=\"/console/?before=")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .map(|b| format!("/console/?before={b}"))
        .expect("a link to older tasks");
    let css = get(&addr, "/console/static/console.css", Some(&cookie));
    let js = get(&addr, "/console/static/console.js", Some(&cookie));
    let measure = |path: &str| {
        let runs: Vec<Answer> = (0..RUNS).map(|_| get(&addr, path, Some(&cookie))).collect();
        (
            median(runs.iter().map(|a| a.first_byte).collect()),
            median(runs.iter().map(|a| a.last_byte).collect()),
        )
    };
    let (newest_first, newest_last) = measure("/console/");
    let (older_first, older_last) = measure(&older);
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let kib = |n: usize| n as f64 / 1024.0;
    println!(
        "console: {tasks} finished transcripts on disk; tasks page lists {listed}; medians of {RUNS} GETs over loopback TCP"
    );
    println!(
        "  weight: HTML {:.1} KiB + CSS {:.1} KiB + JS {:.1} KiB = {:.1} KiB; 4 requests (page, stylesheet, script, event stream), nothing from elsewhere",
        kib(first.body.len()),
        kib(css.body.len()),
        kib(js.body.len()),
        kib(first.body.len() + css.body.len() + js.body.len())
    );
    println!(
        "  GET /console/: first byte {:.2} ms, last byte {:.2} ms; an older page (?before=): {:.2} ms, {:.2} ms",
        ms(newest_first),
        ms(newest_last),
        ms(older_first),
        ms(older_last)
    );
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let _ = child.wait();
    if std::env::var("BENCH_KEEP").is_err() {
        let _ = std::fs::remove_dir_all(&root);
    } else {
        println!("  kept {}", root.display());
    }
}
