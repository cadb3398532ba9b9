//! Notification sinks (`[[notify]]`) against a real HTTP receiver on 127.0.0.1
//! that records every request: what is sent (the line byte for byte, a Slack
//! message, the HMAC), that a failing receiver never holds up a task, that a
//! restart after kill -9 resumes at the cursor, where a new sink starts, and that
//! bad sinks are refused with their file, line and key.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use crate::common::daemon::Daemon;
use crate::common::{FakeApi, Reply, TestRoot, stderr, wait_until};

/// A webhook receiver: answers 500 while `down` is set, 200 otherwise, and notes
/// the `seq` of each body it accepted (a json sink's body is the line).
struct Receiver {
    fake: FakeApi,
    down: Arc<AtomicBool>,
    accepted: Arc<Mutex<Vec<Value>>>,
}

impl Receiver {
    fn start(down: bool) -> Receiver {
        let down = Arc::new(AtomicBool::new(down));
        let accepted = Arc::new(Mutex::new(Vec::new()));
        let (d, a) = (down.clone(), accepted.clone());
        let fake = FakeApi::with_responder(Box::new(move |body: &Value| {
            if d.load(Ordering::SeqCst) {
                return Reply::raw(500, "{\"error\":\"down\"}");
            }
            a.lock().unwrap().push(body.clone());
            Reply::raw(200, "ok")
        }));
        Receiver {
            fake,
            down,
            accepted,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.fake.url)
    }

    /// The requests that reached `path`.
    fn at(&self, path: &str) -> Vec<crate::common::fake_api::Recorded> {
        self.fake
            .received()
            .into_iter()
            .filter(|r| r.path == path)
            .collect()
    }
}

/// Appends a `[[notify]]` table to the root's config.
fn add_sink(root: &TestRoot, table: &str) {
    let path = root.dir.join("config/config.toml");
    let mut f = std::fs::OpenOptions::new().append(true).open(path).unwrap();
    write!(f, "\n[[notify]]\n{table}\n").unwrap();
}

/// A credential file outside every allowed path, mode 0600.
fn credential(root: &TestRoot, name: &str, value: &str) -> String {
    let path = root.dir.join("config").join(name);
    std::fs::write(&path, value).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path.display().to_string()
}

/// HMAC-SHA256 computed by python's own `hmac`, not by harnessd's code.
fn python_hmac(secret: &str, timestamp: &str, body: &[u8]) -> String {
    let mut child = Command::new("python3")
        .args([
            "-c",
            "import hmac,hashlib,sys; print(hmac.new(sys.argv[1].encode(), \
             sys.argv[2].encode() + b'.' + sys.stdin.buffer.read(), hashlib.sha256).hexdigest())",
            secret,
            timestamp,
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(body).unwrap();
    let out = child.wait_with_output().unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// The raw lines of events.jsonl.
fn lines(root: &TestRoot) -> Vec<String> {
    std::fs::read_to_string(root.dir.join("transcripts/events.jsonl"))
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// The URL's secret path never shows in the log or the daemon's output.
fn assert_url_kept_secret(root: &TestRoot, d: &Daemon, secret_path: &str) {
    for (what, text) in [
        ("events.jsonl", lines(root).join("\n")),
        ("the daemon's log", std::fs::read_to_string(&d.log).unwrap()),
    ] {
        assert!(!text.contains(secret_path), "{what} holds the URL: {text}");
    }
}

const HOSTILE: &str = "```\n<!channel> @channel & <https://evil.example|click> `x`\nend";

#[test]
fn an_approval_request_reaches_json_and_slack_sinks_whole_and_signed() {
    let api = FakeApi::start(vec![
        Reply::tool(
            "w1",
            "write_file",
            json!({"path": "asked.txt", "content": HOSTILE}),
        ),
        Reply::text("done"),
    ]);
    let root = TestRoot::new(&api.url);
    let rx = Receiver::start(false);
    let url_file = credential(&root, "hook-url", &rx.url("/json-s3cr3t-path"));
    let secret_file = credential(&root, "hook-secret", "hmac-key-123\n");
    add_sink(
        &root,
        &format!(
            "name = \"json\"\nurl_file = {url_file:?}\nevents = [\"approval_requested\"]\n\
             secret_file = {secret_file:?}"
        ),
    );
    add_sink(
        &root,
        &format!(
            "name = \"chat\"\nurl = {:?}\nformat = \"slack\"\n\
             events = [\"approval_requested\", \"task_finished\"]",
            rx.url("/slack-s3cr3t-path")
        ),
    );
    let d = Daemon::start(&root);
    let id = d.submit("write it");
    wait_until("the approval at both sinks", || {
        !rx.at("/json-s3cr3t-path").is_empty() && !rx.at("/slack-s3cr3t-path").is_empty()
    });
    // json: the line itself, byte for byte, with the whole input.
    let line = lines(&root)
        .into_iter()
        .find(|l| l.contains("\"type\":\"approval_requested\""))
        .unwrap();
    let got = &rx.at("/json-s3cr3t-path")[0];
    assert_eq!(String::from_utf8(got.raw.clone()).unwrap(), line);
    assert_eq!(got.body["input"]["content"], HOSTILE);
    assert_eq!(got.body["tool"], "write_file");
    assert!(got.body["expires_at"].is_string(), "{}", got.body);
    let ts = &got.headers["x-harnessd-timestamp"];
    assert!(ts.parse::<u64>().is_ok(), "{ts}");
    assert_eq!(
        got.headers["x-harnessd-signature"],
        format!("sha256={}", python_hmac("hmac-key-123", ts, &got.raw))
    );
    // slack: text and blocks; the hostile input stays inside its code block.
    let slack = &rx.at("/slack-s3cr3t-path")[0];
    assert!(!slack.headers.contains_key("x-harnessd-signature"));
    let approval_id = got.body["approval_id"].as_str().unwrap();
    let blocks = slack.body["blocks"].as_array().unwrap();
    let texts: Vec<&str> = blocks
        .iter()
        .map(|b| b["text"]["text"].as_str().unwrap())
        .collect();
    assert!(slack.body["text"].as_str().unwrap().contains("write_file"));
    assert!(
        texts[0].contains(&id) && texts[0].contains("expires in"),
        "{texts:?}"
    );
    let code: Vec<&&str> = texts.iter().filter(|t| t.starts_with("```")).collect();
    assert_eq!(code.len(), 1, "{texts:?}");
    let inner = code[0]
        .strip_prefix("```\n")
        .and_then(|t| t.strip_suffix("\n```"))
        .unwrap();
    assert!(
        !inner.contains('`') && !inner.contains('<') && !inner.contains('@'),
        "{inner}"
    );
    assert!(
        inner.contains("&lt;!channel&gt;") && inner.contains("&amp;"),
        "{inner}"
    );
    for t in &texts {
        assert!(!t.contains("<!channel>") && !t.contains("@channel"), "{t}");
    }
    let commands = texts.last().unwrap();
    assert!(
        commands.contains(&format!("harnessd approve {approval_id}")),
        "{commands}"
    );
    assert!(
        commands.contains(&format!("harnessd deny {approval_id}")),
        "{commands}"
    );
    let out = root.run(&["deny", approval_id]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    d.wait_finished(&id);
    wait_until("task_finished at the slack sink", || {
        rx.at("/slack-s3cr3t-path").len() == 2
    });
    let finished = &rx.at("/slack-s3cr3t-path")[1].body;
    let summary = finished["text"].as_str().unwrap();
    assert!(
        summary.contains("end_turn") && summary.contains("2 turns"),
        "{summary}"
    );
    // Only the types asked for: the json sink got the approval alone.
    assert_eq!(rx.at("/json-s3cr3t-path").len(), 1);
    let (_, metrics) = d.request_text("GET", "/metrics");
    assert!(
        metrics.contains("harnessd_notify_sent_total{sink=\"chat\"} 2"),
        "{metrics}"
    );
    assert!(
        metrics.contains("harnessd_notify_backlog{sink=\"json\"}"),
        "{metrics}"
    );
    assert_url_kept_secret(&root, &d, "s3cr3t-path");
}

#[test]
fn a_receiver_answering_500_never_holds_up_a_task_and_is_recorded() {
    let api = FakeApi::start(vec![Reply::text("one"), Reply::text("two")]);
    let root = TestRoot::new(&api.url);
    let rx = Receiver::start(true);
    add_sink(
        &root,
        &format!(
            "name = \"down\"\nurl = {:?}\nevents = [\"task_finished\"]",
            rx.url("/hook-s3cr3t")
        ),
    );
    let d = Daemon::start(&root);
    // Both tasks run to their end while the first notification is still failing.
    for prompt in ["a", "b"] {
        let id = d.submit(prompt);
        d.wait_finished(&id);
    }
    wait_until("notify_failed", || {
        !root.events_of("notify_failed").is_empty()
    });
    let failed = &root.events_of("notify_failed")[0];
    let first = &root.events_of("task_finished")[0];
    assert_eq!(failed["sink"], "down");
    assert_eq!(failed["first_seq"], first["seq"]);
    assert!(failed["last_seq"].as_u64() >= root.events_of("task_finished")[1]["seq"].as_u64());
    assert_eq!(failed["status"], 500);
    assert_eq!(failed["attempts"], 4);
    assert_eq!(failed["error"], "HTTP 500");
    // Every POST was of the first event: none after it was sent before it.
    let posts = rx.at("/hook-s3cr3t");
    assert!(posts.len() >= 4);
    assert!(posts.iter().all(|p| p.body["seq"] == first["seq"]));
    let (_, metrics) = d.request_text("GET", "/metrics");
    assert!(
        metrics.contains("harnessd_notify_sent_total{sink=\"down\"} 0"),
        "{metrics}"
    );
    let failed_total = metrics
        .lines()
        .find(|l| l.starts_with("harnessd_notify_failed_total{sink=\"down\"}"))
        .unwrap();
    assert!(!failed_total.ends_with(" 0"), "{failed_total}");
    let backlog = metrics
        .lines()
        .find(|l| l.starts_with("harnessd_notify_backlog{sink=\"down\"}"))
        .unwrap();
    assert!(!backlog.ends_with(" 0"), "{backlog}");
    assert_url_kept_secret(&root, &d, "hook-s3cr3t");
}

#[test]
fn kill_9_before_delivery_then_restart_delivers_every_event_in_order() {
    let api = FakeApi::with_responder(Box::new(|_| Reply::text("done")));
    let root = TestRoot::new(&api.url);
    let rx = Receiver::start(true);
    add_sink(
        &root,
        &format!(
            "name = \"ops\"\nurl = {:?}\nevents = [\"task_started\", \"task_finished\"]",
            rx.url("/ops")
        ),
    );
    let mut d = Daemon::start(&root);
    for prompt in ["a", "b", "c"] {
        let id = d.submit(prompt);
        d.wait_finished(&id);
    }
    wait_until("a failed POST", || !rx.at("/ops").is_empty());
    d.child.kill().unwrap();
    d.child.wait().unwrap();
    let expected: Vec<u64> = root
        .events()
        .iter()
        .filter(|e| e["type"] == "task_started" || e["type"] == "task_finished")
        .map(|e| e["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(expected.len(), 6);
    rx.down.store(false, Ordering::SeqCst);
    let d = Daemon::start(&root);
    wait_until("every event delivered", || {
        rx.accepted.lock().unwrap().len() >= 6
    });
    let seqs: Vec<u64> = rx
        .accepted
        .lock()
        .unwrap()
        .iter()
        .map(|b| b["seq"].as_u64().unwrap())
        .collect();
    // In order, none missing; an event sent twice would be counted here.
    let mut first_seen: Vec<u64> = Vec::new();
    let mut duplicates = 0;
    for s in &seqs {
        if first_seen.contains(s) {
            duplicates += 1;
        } else {
            first_seen.push(*s);
        }
    }
    assert_eq!(first_seen, expected, "delivered {seqs:?}");
    assert_eq!(duplicates, 0, "delivered {seqs:?}");
    wait_until("the cursor at the last delivery", || {
        std::fs::read_to_string(root.dir.join("transcripts/notify-ops.cursor"))
            .is_ok_and(|c| c.trim().parse::<u64>().unwrap() >= expected[5])
    });
    drop(d);
}

#[test]
fn a_sink_added_by_a_reload_starts_at_the_end_unless_from_start() {
    let api = FakeApi::with_responder(Box::new(|_| Reply::text("done")));
    let root = TestRoot::new(&api.url);
    let rx = Receiver::start(false);
    let d = Daemon::start(&root);
    let before = d.submit("before");
    d.wait_finished(&before);
    add_sink(
        &root,
        &format!(
            "name = \"late\"\nurl = {:?}\nevents = [\"task_finished\"]",
            rx.url("/late")
        ),
    );
    add_sink(
        &root,
        &format!(
            "name = \"all\"\nurl = {:?}\nevents = [\"task_finished\"]\nfrom = \"start\"",
            rx.url("/all")
        ),
    );
    let cursors = ["late", "all"].map(|n| root.dir.join(format!("transcripts/notify-{n}.cursor")));
    wait_until("both sinks started by the reload", || {
        cursors.iter().all(|c| c.exists())
    });
    let after = d.submit("after");
    d.wait_finished(&after);
    wait_until("the later task at both", || {
        rx.at("/late").len() == 1 && rx.at("/all").len() == 2
    });
    let task_of = |r: &crate::common::fake_api::Recorded| r.body["task_id"].clone();
    assert_eq!(task_of(&rx.at("/late")[0]), after.as_str());
    assert_eq!(
        rx.at("/all").iter().map(task_of).collect::<Vec<_>>(),
        [before.as_str(), after.as_str()]
    );
    // The reload's record says a sink's URL changed, never what it is.
    let loaded = root.events_of("config_loaded");
    let changes = loaded.last().unwrap()["changes"].to_string();
    assert!(
        changes.contains("notify") && !changes.contains("/late"),
        "{changes}"
    );
    // A reload with a sink harnessd cannot deliver is rejected, at its key.
    add_sink(
        &root,
        "name = \"bad\"\nurl = \"http://127.0.0.1:9/x\"\nevents = [\"no_such_event\"]",
    );
    wait_until("the bad sink rejected", || {
        !root.events_of("config_rejected").is_empty()
    });
    let rejected = &root.events_of("config_rejected")[0];
    let error = rejected["error"].as_str().unwrap();
    assert!(error.contains("key `notify[2].events[0]`"), "{error}");
}

#[test]
fn bad_sinks_are_refused_with_file_line_and_key() {
    let api = FakeApi::start(vec![]);
    let root = TestRoot::new(&api.url);
    let config = root.dir.join("config/config.toml");
    let shipped = std::fs::read_to_string(&config).unwrap();
    let line_of = |needle: &str| {
        let text = std::fs::read_to_string(&config).unwrap();
        text.lines().position(|l| l.contains(needle)).unwrap() + 1
    };
    let serve_error = |root: &TestRoot| {
        let out = root.run(&["serve"]);
        assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
        stderr(&out)
    };
    // An event type harnessd does not write.
    add_sink(
        &root,
        "name = \"a\"\nurl = \"http://127.0.0.1:9/x\"\nevents = [\"task_finished\", \"task_done\"]",
    );
    let e = serve_error(&root);
    let out = root.run(&["check"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("key `notify[0].events[1]`"),
        "{}",
        stderr(&out)
    );
    let at = format!("config/config.toml:{}:", line_of("task_done"));
    assert!(
        e.contains(&at) && e.contains("key `notify[0].events[1]`") && e.contains("\"task_done\""),
        "{e}"
    );
    // A secret file others may read.
    std::fs::write(&config, &shipped).unwrap();
    let secret = credential(&root, "loose-secret", "s");
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o644)).unwrap();
    add_sink(
        &root,
        &format!(
            "name = \"a\"\nurl = \"http://127.0.0.1:9/x\"\nevents = [\"task_finished\"]\n\
             secret_file = {secret:?}"
        ),
    );
    let e = serve_error(&root);
    assert!(
        e.contains(&format!("config/config.toml:{}:", line_of("loose-secret")))
            && e.contains("key `notify[0].secret_file`")
            && e.contains("chmod 600"),
        "{e}"
    );
    // Both a url and a url_file: refused by check too.
    std::fs::write(&config, &shipped).unwrap();
    add_sink(
        &root,
        "name = \"a\"\nurl = \"http://127.0.0.1:9/x\"\nurl_file = \"/run/x\"\nevents = [\"task_finished\"]",
    );
    let out = root.run(&["check"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!(
            "config/config.toml:{}:1: key `notify[0].url_file`",
            line_of("/run/x")
        )),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_post_in_flight_does_not_hold_up_the_stop() {
    let api = FakeApi::start(vec![Reply::text("done")]);
    let root = TestRoot::new(&api.url);
    // A receiver that reads the request and then answers after a minute.
    let rx = FakeApi::with_responder(Box::new(|_| {
        let mut reply = Reply::raw(200, "ok");
        reply.delay = std::time::Duration::from_secs(60);
        reply
    }));
    add_sink(
        &root,
        &format!(
            "name = \"slow\"\nurl = \"{}/slow\"\nevents = [\"task_finished\"]",
            rx.url
        ),
    );
    let mut d = Daemon::start(&root);
    let id = d.submit("a");
    d.wait_finished(&id);
    wait_until("the POST in flight", || !rx.received().is_empty());
    let asked = std::time::Instant::now();
    assert!(d.terminate());
    // Far below the POST's own 10 s bound: the stop dropped it.
    assert!(
        asked.elapsed() < std::time::Duration::from_secs(8),
        "{:?}",
        asked.elapsed()
    );
    assert_eq!(root.events().last().unwrap()["type"], "daemon_stopping");
    // Not delivered, so not passed: the next start sends it again.
    let cursor = std::fs::read_to_string(root.dir.join("transcripts/notify-slow.cursor")).unwrap();
    let finished = &root.events_of("task_finished")[0];
    assert!(cursor.trim().parse::<u64>().unwrap() < finished["seq"].as_u64().unwrap());
}

#[test]
fn a_cursor_that_holds_no_seq_starts_the_sink_at_the_end_even_from_start() {
    let api = FakeApi::with_responder(Box::new(|_| Reply::text("done")));
    let root = TestRoot::new(&api.url);
    let rx = Receiver::start(false);
    let d = Daemon::start(&root);
    let before = d.submit("before");
    d.wait_finished(&before);
    // A cursor that was damaged: the sink must not send the whole log again.
    let cursor = root.dir.join("transcripts/notify-all.cursor");
    std::fs::write(&cursor, "not a seq\n").unwrap();
    add_sink(
        &root,
        &format!(
            "name = \"all\"\nurl = {:?}\nevents = [\"task_finished\"]\nfrom = \"start\"",
            rx.url("/all")
        ),
    );
    wait_until("the sink's start written down", || {
        std::fs::read_to_string(&cursor).is_ok_and(|c| c.trim().parse::<u64>().is_ok())
    });
    let after = d.submit("after");
    d.wait_finished(&after);
    wait_until("the later task delivered", || !rx.at("/all").is_empty());
    std::thread::sleep(std::time::Duration::from_millis(500));
    let tasks: Vec<Value> = rx
        .at("/all")
        .iter()
        .map(|r| r.body["task_id"].clone())
        .collect();
    assert_eq!(tasks, [after.as_str()]);
    let log = std::fs::read_to_string(&d.log).unwrap();
    assert!(log.contains("does not hold a seq"), "{log}");
}
