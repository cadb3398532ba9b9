//! `harnessd check`: validate both files and print the effective settings, the
//! tier of every tool, and what the sandbox enforces here; warn about settings
//! that weaken the boundary and state the one documented gap (see [`super::boundary`]).

use super::error::{CliError, exit};
use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use serde_json::{Value, json};

use super::EXIT_CONFIG;
use crate::agent::advertised;
use crate::config::{ApiKey, Loaded};
use crate::exec::Executor;
use crate::exec::verdict::Enforcement;
use crate::policy::{self, Subject};
use crate::text::{escape_json, escape_line, escape_text};
use crate::tools::ToolName;

fn tool_tiers(loaded: &Loaded) -> Vec<Value> {
    let p = &loaded.policy;
    ToolName::ALL
        .into_iter()
        .map(|tool| {
            let d = policy::decide(p, Subject { tool, arg: None });
            // A command tool's `allow` pattern runs read-only: said where it is listed.
            let allow = if tool.runs_commands() {
                "allow (read-only)"
            } else {
                "allow"
            };
            let patterns: Vec<String> = [
                ("deny", &p.deny),
                ("ask", &p.ask),
                ("allow_write", &p.allow_write),
                (allow, &p.allow),
            ]
            .iter()
            .flat_map(|(tier, rules)| {
                rules
                    .iter()
                    .filter(|r| r.tool == tool && r.text.contains('('))
                    .map(move |r| format!("{tier} {}", r.text))
            })
            .collect();
            json!({
                "tool": tool.as_str(),
                "advertised": advertised(loaded, tool),
                "tier": d.tier.as_str(),
                "rule": d.rule_label(),
                "patterns": patterns,
            })
        })
        .collect()
}

/// What `check` found beyond the files themselves: the key, the probe of the
/// sandbox (judged as a reload judges it, [`Enforcement`]) and the boundary
/// warnings. Gathered once, then printed as JSON or text.
struct Findings {
    /// Why the API key is unusable, if it is (check itself does not need it).
    key_warning: Option<String>,
    enforcement: Enforcement,
    boundary: Vec<String>,
    /// Where traces would go (`None`: off), as `run` and `serve` would resolve it.
    telemetry: Option<crate::telemetry::Settings>,
}

impl Findings {
    fn gather(
        loaded: &Loaded,
        helper: &Path,
        env: impl Fn(&str) -> Option<String>,
        telemetry: Option<crate::telemetry::Settings>,
    ) -> Self {
        let key_warning = ApiKey::load(loaded, env).err().map(|e| e.to_string());
        let enforcement = Enforcement::probe(loaded, &Executor::new(helper.to_path_buf()));
        // `check` makes no other call: the probes' pooled cgroups are removed
        // here, or every `check` would leave one in the host's tree.
        crate::exec::remove_pooled_cgroups();
        // Unreadable passwd: /home and /root are still checked.
        let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
        let mut boundary =
            super::boundary::warnings(loaded, &super::boundary::passwd_homes(&passwd));
        let pins = crate::config::load_pins(&loaded.paths.root).unwrap_or_default();
        boundary.extend(super::check_mcp::warnings(loaded, &pins));
        boundary.extend(super::check_hooks::warnings(loaded));
        boundary.extend(super::skills::warnings(loaded));
        boundary.extend(listen_warning(loaded));
        boundary.extend(crate::exec::slow_join_warning());
        Self {
            key_warning,
            enforcement,
            boundary,
            telemetry,
        }
    }
}

/// Whom tools run as, in words: the resolved uid and where it is kept.
fn tool_user_line(loaded: &Loaded) -> String {
    let t = &loaded.tool_user;
    let asked = &loaded.policy.settings.sandbox.user;
    match (&t.kept_in, &t.registry) {
        (Some(kept), registry) => format!(
            "uid {} (sandbox.user {asked:?}), kept in {}; {}",
            t.user,
            loaded.paths.display(kept),
            registry.as_deref().unwrap_or("")
        ),
        (None, _) if asked == crate::config::AUTO => format!(
            "uid {} (sandbox.user {asked:?}): harnessd is not root, tools keep its uid",
            t.user
        ),
        (None, _) => format!("{} (sandbox.user as written)", t.user),
    }
}

/// The `--json` report; the text output reads its file names from it too.
fn report_json(loaded: &Loaded, f: &Findings) -> Value {
    json!({
        "root": loaded.paths.root.display().to_string(),
        "config": {"file": crate::config::CONFIG_FILE, "sha256": loaded.config_sha256},
        "settings": {"file": loaded.paths.display(&loaded.paths.settings), "sha256": loaded.settings_sha256},
        "api": {
            "base_url": crate::config::shown_url(&loaded.config.api.base_url),
            "base_url_from": loaded.base_url_from,
            "model": loaded.config.api.model,
            "max_tokens": loaded.config.api.max_tokens,
            "key": f.key_warning.clone().unwrap_or_else(|| "present".into()),
        },
        "loop": loaded.config.loop_,
        "paths": loaded.config.paths,
        "tools": tool_tiers(loaded),
        "allowed_paths": loaded.policy.settings.allowed_paths,
        "output": loaded.policy.settings.output,
        "sandbox": loaded.policy.settings.sandbox,
        "mcp": super::check_mcp::servers(loaded),
        "hooks": super::check_hooks::hooks(loaded),
        "telemetry": f.telemetry.as_ref().map(|t| json!({
            "traces_url": crate::config::shown_url(&t.traces_url),
            "content": t.content,
        })),
        "tool_user": {
            "user": loaded.tool_user.user,
            "kept_in": loaded.tool_user.kept_in.as_ref().map(|p| loaded.paths.display(p)),
            "registry": loaded.tool_user.registry,
        },
        "enforced": {
            "landlock_abi": f.enforcement.landlock_abi,
            "layers": f.enforcement.layers,
            "probe_error": f.enforcement.probe_error,
            "tools_refused": f.enforcement.refused,
        },
        "warnings": f.boundary,
        "documented_gap": super::boundary::HARD_LINK_GAP,
        "metadata": metadata_cost(),
        "error": f.enforcement.refusal(loaded).map(|e| e.to_string()),
    })
}

/// A value as the file spells it (`"full"` → `full`), not Rust's `Debug`.
fn as_written(value: &impl serde::Serialize) -> String {
    match serde_json::to_value(value) {
        Ok(Value::String(s)) => s,
        Ok(other) => other.to_string(),
        Err(_) => String::new(),
    }
}

/// Rules can hold model text (`approve --remember` writes the literal command),
/// and the probe's details quote the helper: every field printed is escaped.
fn field(v: &Value) -> String {
    escape_line(v.as_str().unwrap_or("")).into_owned()
}

/// The text output's first part: the files, the API, the loop and the tiers.
fn print_config(out: &mut impl Write, loaded: &Loaded, report: &Value) -> std::io::Result<()> {
    let verdict = if report["error"].is_null() {
        "ok: {config} and {settings} are valid"
    } else {
        "NOT OK: {config} and {settings} parse, but tools cannot run as configured (see the error)"
    };
    writeln!(
        out,
        "{}",
        verdict
            .replace("{config}", &field(&report["config"]["file"]))
            .replace("{settings}", &field(&report["settings"]["file"]))
    )?;
    writeln!(
        out,
        "root       {}",
        escape_line(&loaded.paths.root.display().to_string())
    )?;
    writeln!(
        out,
        "model      {} at {}{}",
        escape_line(&loaded.config.api.model),
        escape_line(&crate::config::shown_url(&loaded.config.api.base_url)),
        if loaded.base_url_from == crate::protocol::BaseUrlFrom::Environment {
            " (from ANTHROPIC_BASE_URL, over api.base_url)"
        } else {
            ""
        }
    )?;
    let telemetry = &report["telemetry"];
    if telemetry.is_null() {
        writeln!(out, "telemetry  off")?;
    } else {
        let content = if telemetry["content"] == true {
            "on"
        } else {
            "off"
        };
        let url = field(&telemetry["traces_url"]);
        writeln!(out, "telemetry  traces to {url} · content {content}")?;
    }
    let l = &loaded.config.loop_;
    writeln!(
        out,
        "loop       max_turns {} · token_budget {} · max_tool_calls_per_turn {} · no_progress_repeats {}",
        l.max_turns, l.token_budget, l.max_tool_calls_per_turn, l.no_progress_repeats
    )?;
    writeln!(
        out,
        "tools      (tier without a pattern; pattern rules below)"
    )?;
    for t in tool_tiers(loaded) {
        let shown = if t["advertised"] == true {
            ""
        } else {
            " (not advertised)"
        };
        writeln!(
            out,
            "  {:<11} {:<5} by {}{shown}",
            field(&t["tool"]),
            field(&t["tier"]),
            field(&t["rule"])
        )?;
        for p in t["patterns"].as_array().into_iter().flatten() {
            writeln!(out, "              {}", field(p))?;
        }
    }
    Ok(())
}

/// The text output's second part: paths, output, the sandbox settings and what
/// the probe found enforced.
fn print_sandbox(out: &mut impl Write, loaded: &Loaded, f: &Findings) -> std::io::Result<()> {
    let s = &loaded.policy.settings;
    let list = |l: &[String]| escape_line(&l.join(", ")).into_owned();
    writeln!(out, "read       {}", list(&s.allowed_paths.read))?;
    writeln!(out, "write      {}", list(&s.allowed_paths.write))?;
    writeln!(out, "output     max_chars {}", s.output.max_chars)?;
    let sb = &s.sandbox;
    writeln!(
        out,
        "sandbox    network {} · timeout {} s · cpu {} s · memory {} MiB · processes {} · file {} MiB · open files {} · user {} · require {}",
        sb.network,
        sb.timeout_secs,
        sb.cpu_secs,
        sb.memory_mb,
        sb.max_processes,
        sb.max_file_mb,
        sb.max_open_files,
        escape_line(&sb.user),
        as_written(&sb.require)
    )?;
    writeln!(out, "tool user  {}", escape_line(&tool_user_line(loaded)))?;
    writeln!(
        out,
        "enforced   (probed: a helper confined exactly as a tool; Landlock ABI {})",
        f.enforcement.landlock_abi
    )?;
    for l in &f.enforcement.layers {
        let mark = if l.enforced { "yes" } else { "NO " };
        writeln!(
            out,
            "  {mark} {:<15} {}",
            escape_line(&l.name),
            escape_line(&l.detail)
        )?;
    }
    if let Some(e) = &f.enforcement.probe_error {
        writeln!(out, "  NO  probe           {}", escape_line(e))?;
    }
    if let Some(cost) = metadata_cost() {
        writeln!(out, "metadata   {cost}")?;
    }
    writeln!(out, "gap        {}", super::boundary::HARD_LINK_GAP)?;
    for server in super::check_mcp::servers(loaded) {
        writeln!(out, "mcp        {}", escape_line(&mcp_line(&server)))?;
    }
    for hook in super::check_hooks::hooks(loaded) {
        writeln!(
            out,
            "hook       {}",
            escape_line(&super::check_hooks::line(&hook))
        )?;
    }
    Ok(())
}

/// One server's line: what it runs and what its sandbox allows.
fn mcp_line(s: &Value) -> String {
    let list = |v: &Value| {
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .unwrap_or_default()
    };
    match s["kind"].as_str() {
        Some("stdio") => format!(
            "{}: stdio `{}` · read {} · write {} · network {} · shared {} · env {} · timeout {} s",
            field(&s["name"]),
            list(&s["command"]).replace(", ", " "),
            list(&s["read"]),
            if list(&s["write"]).is_empty() {
                "none".into()
            } else {
                list(&s["write"])
            },
            s["network"],
            s["shared"],
            if list(&s["env"]).is_empty() {
                "none".into()
            } else {
                list(&s["env"])
            },
            s["timeout_secs"]
        ),
        _ => format!(
            "{}: remote {} · headers {} · timeout {} s (reached by the daemon, not sandboxed)",
            field(&s["name"]),
            field(&s["url"]),
            list(&s["headers"]),
            s["timeout_secs"]
        ),
    }
}

/// What tools lose to the metadata filter, when harnessd is not root (as root they
/// run as `sandbox.user` and file permissions protect the daemon's files).
fn metadata_cost() -> Option<&'static str> {
    (!nix::unistd::Uid::effective().is_root()).then_some(super::boundary::SAME_UID_METADATA_COST)
}

/// A listener off loopback (`daemon.listen_public`) speaks plain HTTP: logins and
/// session cookies cross the network in the clear unless TLS is terminated in
/// front of it.
fn listen_warning(loaded: &Loaded) -> Option<String> {
    let daemon = &loaded.config.daemon;
    let addr = daemon.listen_addr()?;
    (daemon.listen_public && !addr.ip().is_loopback()).then(|| {
        format!(
            "daemon.listen = {addr} is reachable off this host and serves plain HTTP: \
             terminate TLS in front of it (a reverse proxy on the same host) or login \
             links and session cookies cross the network in the clear"
        )
    })
}

/// The warnings that follow the text output, on stderr.
fn print_warnings(f: &Findings) {
    for w in &f.boundary {
        eprintln!("warning: {w}");
    }
    let e = &f.enforcement;
    if e.missing > 0 && !e.refused {
        eprintln!(
            "warning: best_effort sandbox: {} layer(s) not enforced",
            e.missing
        );
    }
}

/// Runs `check`.
pub fn run(
    root: &Path,
    json_out: bool,
    helper: &Path,
    env: impl Fn(&str) -> Option<String>,
) -> Result<ExitCode, CliError> {
    let loaded = match crate::commands::load_root(root) {
        Ok(l) => l,
        Err(code) => return Ok(exit(code)),
    };
    // The OTEL_* variables `run` and `serve` would read: a bad one fails here too.
    let telemetry = match crate::telemetry::Settings::resolve(&loaded.config.telemetry, &env) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: {}", escape_text(&e.to_string()));
            return Ok(exit(EXIT_CONFIG));
        }
    };
    // A sink that serve would refuse (an unknown event type, a credential file
    // others may read, an unset secret) is a config error here too.
    if let Err(e) = crate::notify::resolve(&loaded, &|var: &str| env(var)) {
        eprintln!("error: {}", escape_text(&e.to_string()));
        return Ok(exit(EXIT_CONFIG));
    }
    let findings = Findings::gather(&loaded, helper, env, telemetry);
    let report = report_json(&loaded, &findings);
    // docs/policy.md: a full sandbox that cannot be had is a configuration this host
    // cannot run, so it fails like any config error, not with an "ok".
    let code = if findings.enforcement.refused {
        EXIT_CONFIG
    } else {
        0
    };
    let mut out = std::io::stdout().lock();
    if json_out {
        writeln!(
            out,
            "{}",
            escape_json(&serde_json::to_string_pretty(&report)?)
        )?;
        return Ok(exit(code));
    }
    if let Some(w) = &findings.key_warning {
        eprintln!(
            "warning: {} (check does not need it; run does)",
            escape_text(w)
        );
    }
    print_config(&mut out, &loaded, &report)?;
    print_sandbox(&mut out, &loaded, &findings)?;
    print_warnings(&findings);
    if let Some(e) = report["error"].as_str() {
        eprintln!("error: {}", escape_text(e));
    }
    Ok(exit(code))
}
