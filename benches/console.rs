//! Benchmark of the web console (figures of docs/benchmarks.md): a root holding
//! 20 000 finished tasks, `harnessd serve` with `daemon.listen`, a login through
//! `console-url`; then
//! - the tasks page's weight: the HTML and every stylesheet and script it links,
//!   in bytes and requests;
//! - the time to the tasks page: the whole HTML over TCP (median of 20), and, when
//!   the browser tests' toolchain is installed, headless Chromium's first
//!   contentful paint of it (median of 5 loads);
//! - the daemon's memory (VmRSS, VmHWM) idle, with 10 console sessions each
//!   following `/v1/events?follow=1`, and after 200 tasks streamed to all ten.
//!
//! Prints the figures; asserts nothing. Run: `cargo bench --bench console`
//! (`BENCH_TASKS=N`, `BENCH_KEEP=1`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

#[path = "common/old_tasks.rs"]
mod old_tasks;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

use harnessd::agent::Transcript;
use harnessd_testkit::daemon::{serve, submit};
use harnessd_testkit::root::init_root;
use harnessd_testkit::rss::status_kib;
use harnessd_testkit::{FakeApi, Reply, param};

/// One GET over TCP with `cookie`: status, body, and the time to the whole answer.
fn get(addr: SocketAddr, path: &str, cookie: &str) -> (u16, String, Duration) {
    let start = Instant::now();
    let mut s = TcpStream::connect(addr).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nhost: {addr}\r\ncookie: {cookie}\r\nsec-fetch-site: same-origin\r\nconnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let took = start.elapsed();
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(body)
    } else {
        body.to_string()
    };
    (status, body, took)
}

fn dechunk(mut rest: &str) -> String {
    let mut out = String::new();
    while let Some((size, tail)) = rest.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || tail.len() < n {
            break;
        }
        out.push_str(&tail[..n]);
        rest = tail[n..].trim_start_matches("\r\n");
    }
    out
}

/// Logs in through a fresh link: the session cookie (`name=value`).
fn login(bin: &str, root: &std::path::Path, addr: SocketAddr, name: &str) -> String {
    let out = Command::new(bin)
        .arg("--root")
        .arg(root)
        .args(["console-url", "--name", name])
        .output()
        .unwrap();
    let url = String::from_utf8(out.stdout).unwrap();
    let path = url
        .trim()
        .strip_prefix(&format!("http://{addr}"))
        .unwrap()
        .to_string();
    let mut s = TcpStream::connect(addr).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nhost: {addr}\r\nsec-fetch-site: none\r\nconnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    raw.lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .starts_with("set-cookie:")
                .then(|| l[11..].trim().to_string())
        })
        .and_then(|c| c.split(';').next().map(str::to_string))
        .expect("a session cookie")
}

/// The `href`/`src` of every stylesheet and script the page links.
fn assets(html: &str) -> Vec<String> {
    let mut out = Vec::new();
    for attr in ["href=\"", "src=\""] {
        for (i, _) in html.match_indices(attr) {
            let rest = &html[i + attr.len()..];
            let url = &rest[..rest.find('"').unwrap_or(0)];
            if url.starts_with("/console/static/") {
                out.push(url.to_string());
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// First contentful paint of `url` in headless Chromium, ms, median of `loads`,
/// through the browser tests' Playwright; `None` when it is not installed.
fn first_paint(url: &str, cookie: &str, loads: usize) -> Option<f64> {
    let dir = std::env::var("HARNESSD_TEST_BROWSER")
        .unwrap_or_else(|_| "/opt/harnessd-test/browser".to_string());
    let python = format!("{dir}/venv/bin/python");
    if !std::path::Path::new(&python).exists() {
        return None;
    }
    let (name, value) = cookie.split_once('=')?;
    let script = format!(
        r#"
import statistics
from playwright.sync_api import sync_playwright
with sync_playwright() as p:
    b = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox", "--headless=new", "--disable-gpu", "--disable-dev-shm-usage"])
    c = b.new_context()
    c.add_cookies([{{"name": "{name}", "value": "{value}", "url": "{url}"}}])
    page = c.new_page()
    fcp = []
    for _ in range({loads}):
        page.goto("{url}", wait_until="load")
        # The paint entry may come after `load`: wait for it (buffered observer).
        t = page.evaluate("""() => new Promise(done => {{
            new PerformanceObserver(list => {{
                const e = list.getEntriesByName('first-contentful-paint')[0];
                if (e) done(e.startTime);
            }}).observe({{type: 'paint', buffered: true}});
            setTimeout(() => done(-1), 5000);
        }})""")
        fcp.append(t)
    print(statistics.median(fcp))
    b.close()
"#
    );
    let out = Command::new(python).args(["-c", &script]).output().ok()?;
    String::from_utf8(out.stdout).ok()?.trim().parse().ok()
}

/// The tasks page's figures.
struct Page {
    html: usize,
    bytes: usize,
    linked: Vec<String>,
    whole: Duration,
    paint: Option<f64>,
}

fn page_figures(addr: SocketAddr, cookie: &str) -> Page {
    let (status, html, _) = get(addr, "/console/", cookie);
    assert_eq!(status, 200, "{html}");
    let linked = assets(&html);
    let mut bytes = html.len();
    for a in &linked {
        let (status, body, _) = get(addr, a, cookie);
        assert_eq!(status, 200, "{a}");
        bytes += body.len();
    }
    let times: Vec<Duration> = (0..20).map(|_| get(addr, "/console/", cookie).2).collect();
    let whole = median(times);
    let paint = first_paint(&format!("http://{addr}/console/"), cookie, 5);

    Page {
        html: html.len(),
        bytes,
        linked,
        whole,
        paint,
    }
}

type Mem = (u64, u64);

/// Memory with ten sessions following the log, then after 200 tasks streamed to
/// them: (following, after, how long the 200 took, task_finished each one saw).
fn follow_figures(
    bin: &str,
    root: &std::path::Path,
    addr: SocketAddr,
    pid: u32,
) -> (Mem, Mem, Duration, Vec<usize>) {
    let socket = root.join("run/harnessd.sock");
    // Ten sessions, each following the log.
    let followers: Vec<BufReader<TcpStream>> = (0..10)
        .map(|n| {
            let c = login(bin, root, addr, &format!("follower{n}"));
            let mut s = TcpStream::connect(addr).unwrap();
            write!(
                s,
                "GET /v1/events?follow=1&since=1m HTTP/1.1\r\nhost: {addr}\r\ncookie: {c}\r\nsec-fetch-site: same-origin\r\n\r\n"
            )
            .unwrap();
            let mut r = BufReader::new(s);
            let mut status = String::new();
            r.read_line(&mut status).unwrap();
            assert!(status.contains(" 200 "), "{status}");
            r
        })
        .collect();
    std::thread::sleep(Duration::from_secs(1));
    let following = (status_kib(pid, "VmRSS:"), status_kib(pid, "VmHWM:"));
    let readers: Vec<_> = followers
        .into_iter()
        .map(|mut r| {
            std::thread::spawn(move || {
                let mut line = String::new();
                let mut finished = 0;
                while finished < 200 && r.read_line(&mut line).is_ok_and(|n| n > 0) {
                    if line.contains("\"type\":\"task_finished\"") {
                        finished += 1;
                    }
                    line.clear();
                }
                finished
            })
        })
        .collect();
    let streamed = Instant::now();
    for i in 0..200 {
        submit(&socket, &format!("task {i}"));
    }
    let seen: Vec<usize> = readers.into_iter().map(|h| h.join().unwrap()).collect();
    let after = (status_kib(pid, "VmRSS:"), status_kib(pid, "VmHWM:"));
    (following, after, streamed.elapsed(), seen)
}

fn main() {
    let tasks: usize = param("BENCH_TASKS", 20_000);
    let bin = env!("CARGO_BIN_EXE_harnessd");
    let api = FakeApi::by_prompt(Vec::new(), Reply::text("done"));
    let addr = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let root = init_root(
        bin,
        "console",
        &[
            ("https://api.anthropic.com", &api.url),
            (
                "# listen = \"127.0.0.1:8080\"",
                &format!("listen = \"{addr}\""),
            ),
        ],
    );
    let dir = root.join("transcripts");
    for i in 0..tasks {
        old_tasks::transcript(i).save(&dir).unwrap();
    }
    assert!(Transcript::path(&dir, &old_tasks::transcript(0).task_id).exists());
    let mut daemon = serve(bin, &root);
    let pid = daemon.id();
    std::thread::sleep(Duration::from_secs(1));
    let idle = (status_kib(pid, "VmRSS:"), status_kib(pid, "VmHWM:"));
    let cookie = login(bin, &root, addr, "bench");

    let page = page_figures(addr, &cookie);
    let (following, after, took, seen) = follow_figures(bin, &root, addr, pid);
    let mib = |k: u64| k as f64 / 1024.0;
    println!("console: {tasks} tasks on disk, daemon.listen {addr}");
    println!(
        "  tasks page: {} requests, {} bytes ({} B HTML + {} asset(s): {})",
        1 + page.linked.len(),
        page.bytes,
        page.html,
        page.linked.len(),
        page.linked.join(", ")
    );
    println!(
        "  tasks page over TCP, whole HTML: median {:.2} ms of 20",
        page.whole.as_secs_f64() * 1000.0
    );
    match page.paint {
        Some(ms) => {
            println!("  first contentful paint in headless Chromium: median {ms:.0} ms of 5 loads")
        }
        None => {
            println!("  first contentful paint: not measured (no tests/fixtures/browser toolchain)")
        }
    }
    println!(
        "  memory: idle {:.1} MiB (peak {:.1}); 10 sessions following {:.1} MiB (peak {:.1}); after 200 tasks streamed to all ten in {:.1} s {:.1} MiB (peak {:.1}); each follower saw {seen:?} task_finished",
        mib(idle.0),
        mib(idle.1),
        mib(following.0),
        mib(following.1),
        took.as_secs_f64(),
        mib(after.0),
        mib(after.1)
    );
    let _ = daemon.kill();
    let _ = daemon.wait();
    if std::env::var("BENCH_KEEP").is_err() {
        let _ = std::fs::remove_dir_all(&root);
    }
}
