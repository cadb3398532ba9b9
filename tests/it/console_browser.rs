//! The web console in a real browser (Debian's headless chromium driven by
//! Playwright, tests/fixtures/browser): the real binary against the fake Messages
//! API, logged in through `console-url`'s one-time link. A task submitted while
//! the tasks page is open appears without a reload; an approval answered from
//! the approvals page is recorded as `console:alice` and lets the task finish; a
//! denial's reason reaches the model; hostile model text stays inert, escaped
//! text on the task and approvals pages. Screenshots of every page at desktop and
//! phone width go to a temporary directory on every run, and with
//! `HARNESSD_BLESS_DOCS=1` to docs/screenshots/.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

use crate::common::daemon::Daemon;
use crate::common::{
    FakeApi, Reply, TestRoot, fresh_dir, last_results, stderr, stdout, wait_until,
};

/// Model text that tries to become markup, colour the terminal and reverse what
/// follows it.
const HOSTILE: &str = "<script>alert(1)</script> \"><img src=x onerror=alert(1)> \
                       \x1b[31mred\x1b[0m \u{202e}txt.exe";

/// The reason typed into the deny form.
const REASON: &str = "not in this directory, use notes/";

/// The pages the scenario photographs, each at both widths.
const SHOTS: &[&str] = &["tasks", "task", "approvals", "events", "policy", "audit"];

/// Where tests/fixtures/browser/install.sh put the venv and browser.py.
fn installed() -> PathBuf {
    let dir = PathBuf::from(
        std::env::var("HARNESSD_TEST_BROWSER")
            .unwrap_or_else(|_| "/opt/harnessd-test/browser".into()),
    );
    assert!(
        dir.join(".done").exists() && Path::new("/usr/bin/chromium").exists(),
        "the browser toolchain is not installed in {}: run tests/fixtures/browser/install.sh \
         (.ci/run does)",
        dir.display()
    );
    dir
}

/// A port free on 127.0.0.1 now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The fake model: each task's replies by its prompt.
fn fake_api() -> FakeApi {
    let write = |id: &str, content: &str| {
        Reply::tool(
            id,
            "write_file",
            json!({"path": format!("{id}.txt"), "content": content}),
        )
    };
    FakeApi::by_prompt(
        vec![
            (
                "approve me".into(),
                vec![write("wa", "x"), Reply::text("written")],
            ),
            (
                "deny me".into(),
                vec![write("wd", "x"), Reply::text("told no")],
            ),
            ("hostile ask".into(), vec![write("wh", HOSTILE)]),
            (HOSTILE.into(), vec![Reply::text(HOSTILE)]),
        ],
        Reply::text("ok"),
    )
}

/// The pending approval of task `id`.
fn approval_of(d: &Daemon, id: &str) -> String {
    let (_, list) = d.request("GET", "/v1/approvals", None);
    list["approvals"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["task_id"] == id)
        .and_then(|a| a["approval_id"].as_str())
        .unwrap_or_else(|| panic!("no approval for {id}: {list}"))
        .to_string()
}

/// The one `approval_resolved` line of approval `id`.
fn resolved(root: &TestRoot, id: &str) -> Value {
    let lines: Vec<Value> = root
        .events_of("approval_resolved")
        .into_iter()
        .filter(|e| e["approval_id"] == id)
        .collect();
    assert_eq!(lines.len(), 1, "{lines:?}");
    lines[0].clone()
}

#[test]
fn the_console_works_in_a_browser_and_keeps_hostile_text_inert() {
    let browser = installed();
    let api = fake_api();
    let root = TestRoot::new(&api.url);
    let port = free_port();
    root.set_config("daemon", "listen", &format!("\"127.0.0.1:{port}\""));
    let d = Daemon::start(&root);
    let base = format!("http://127.0.0.1:{port}");
    let out = root.run(&["console-url", "--name", "alice"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let login = stdout(&out).trim().to_string();
    assert!(
        login.starts_with(&format!("{base}/console/login?token=")),
        "{login}"
    );

    let approve_task = d.submit("approve me");
    let deny_task = d.submit("deny me");
    let ask_task = d.submit("hostile ask");
    let hostile_task = d.submit(HOSTILE);
    d.wait_finished(&hostile_task);
    wait_until("three approvals", || {
        d.request("GET", "/v1/approvals", None).1["approvals"]
            .as_array()
            .is_some_and(|a| a.len() == 3)
    });
    let shots = fresh_dir("harnessd-console-shots-");
    let args = json!({
        "base": base,
        "login": login,
        "socket": root.dir.join("run/harnessd.sock"),
        "approve": approval_of(&d, &approve_task),
        "approve_task": approve_task,
        "deny": approval_of(&d, &deny_task),
        "deny_task": deny_task,
        "reason": REASON,
        "hostile_task": hostile_task,
        "hostile_approval": approval_of(&d, &ask_task),
        "shots": shots,
    });
    let args_file = root.dir.join("browser-args.json");
    std::fs::write(&args_file, args.to_string()).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/browser/console.py");
    let run = Command::new(browser.join("venv/bin/python"))
        .arg(&script)
        .arg(&args_file)
        .env("HARNESSD_TEST_BROWSER", &browser)
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "the browser scenario failed:\n{}\n{}",
        stdout(&run),
        stderr(&run)
    );

    // Both answers are the console's, by the name the link was made for.
    let approved = resolved(&root, args["approve"].as_str().unwrap());
    assert_eq!(approved["decision"], "approved");
    assert_eq!(approved["by"], "console:alice");
    let denied = resolved(&root, args["deny"].as_str().unwrap());
    assert_eq!(denied["decision"], "denied");
    assert_eq!(denied["by"], "console:alice");
    assert_eq!(d.wait_finished(&approve_task)["answer"], "written");
    // The reason typed into the form is what the model was told.
    let told: Vec<Value> = api
        .requests()
        .iter()
        .filter(|r| harnessd_testkit::fake_api::prompt_of(&r.body) == "deny me")
        .flat_map(|r| last_results(&r.body))
        .collect();
    assert_eq!(told.len(), 1, "{told:?}");
    assert!(told[0].to_string().contains(REASON), "{}", told[0]);

    keep_screenshots(&shots);
}

/// Checks each screenshot was written, and with `HARNESSD_BLESS_DOCS=1` copies
/// them to docs/screenshots/.
fn keep_screenshots(shots: &Path) {
    let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/screenshots");
    let bless = std::env::var("HARNESSD_BLESS_DOCS").is_ok_and(|v| v == "1");
    for page in SHOTS {
        for width in ["desktop", "phone"] {
            let name = format!("console-{page}-{width}.png");
            let png = std::fs::read(shots.join(format!("{page}-{width}.png"))).unwrap();
            assert!(png.starts_with(b"\x89PNG"), "{name} is not a PNG");
            if bless {
                std::fs::create_dir_all(&docs).unwrap();
                std::fs::write(docs.join(&name), &png).unwrap();
            }
        }
    }
    println!("screenshots in {}", shots.display());
}
