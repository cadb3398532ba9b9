//! What `check` says of the hooks: each one, at its point, with what it runs and
//! what its sandbox allows (its `env` by variable name only: values are secrets).

use serde_json::{Value, json};

use crate::config::{HookNetwork, Loaded};
use crate::protocol::HookPoint;

const POINTS: [HookPoint; 3] = [
    HookPoint::PreTool,
    HookPoint::PostTool,
    HookPoint::TaskFinished,
];

/// Every hook of the settings in force, in the order they run at each point.
pub fn hooks(loaded: &Loaded) -> Vec<Value> {
    let settings = &loaded.policy.settings.hooks;
    POINTS
        .iter()
        .flat_map(|point| settings.at(*point).iter().map(move |h| (point, h)))
        .map(|(point, h)| {
            let network = match h.network() {
                HookNetwork::All(on) => json!(on),
                HookNetwork::Ports(ports) => json!(ports),
            };
            json!({
                "point": point.as_str(),
                "name": h.name,
                "command": h.command,
                "tools": h.tools,
                "timeout_secs": h.timeout_secs(),
                "network": network,
                "may_allow": h.may_allow(),
                "read": h.read(),
                "env": h.env().map(|(name, _)| name).collect::<Vec<_>>(),
            })
        })
        .collect()
}

/// The warnings about hooks: a program not found, code in a tree tools may write
/// (what a tool puts there would answer for the hook), unrestricted network.
pub fn warnings(loaded: &Loaded) -> Vec<String> {
    let settings = &loaded.policy.settings.hooks;
    let mut out = Vec::new();
    for point in POINTS {
        for (i, h) in settings.at(point).iter().enumerate() {
            let key = format!("hooks.{}[{i}] ({})", point.as_str(), h.name);
            let program = h.command.first().map(String::as_str).unwrap_or_default();
            if super::check_mcp::found(program).is_none() {
                out.push(format!(
                    "{key}: {program:?} is not found on the sandbox's PATH; give the full path \
                     of an installed program (a hook that cannot start denies every call it is \
                     consulted for at pre_tool)"
                ));
            }
            out.extend(super::check_mcp::writable_code(loaded, &key, &h.command));
            if h.network() == HookNetwork::All(true) {
                out.push(format!(
                    "{key} has network: true: the hook can reach any host and send what it \
                     reads there; list the TCP ports it needs instead"
                ));
            }
        }
    }
    out
}

/// One hook's line of `check`'s text.
pub fn line(h: &Value) -> String {
    let list = |v: &Value, none: &str| {
        let items: Vec<String> = v
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|x| x.as_str().map_or_else(|| x.to_string(), str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        if items.is_empty() {
            none.to_string()
        } else {
            items.join(", ")
        }
    };
    let network = match &h["network"] {
        Value::Bool(true) => "any".to_string(),
        Value::Bool(false) => "none".to_string(),
        ports => format!("TCP to {}", list(ports, "none")),
    };
    format!(
        "{} {}: `{}` · tools {} · read {} · network {} · may_allow {} · env {} · timeout {} s",
        h["point"].as_str().unwrap_or_default(),
        h["name"].as_str().unwrap_or_default(),
        list(&h["command"], "").replace(", ", " "),
        list(&h["tools"], "all"),
        list(&h["read"], "the policy's"),
        network,
        h["may_allow"],
        list(&h["env"], "none"),
        h["timeout_secs"],
    )
}
