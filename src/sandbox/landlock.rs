//! The Landlock layer: filesystem access limited to the allowed paths, TCP bind and
//! connect refused when the network is off, and both scopes (abstract unix sockets,
//! signals) so a tool cannot reach outside its own domain.

use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, NetPort, Ruleset,
    RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope, path_beneath_rules,
};

use super::job::Network;

use std::path::PathBuf;

/// The paths of one process's Landlock ruleset, resolved from its profile.
#[derive(Debug)]
pub struct PathSets {
    /// Readable and executable.
    pub read: Vec<PathBuf>,
    /// Writable (and readable).
    pub write: Vec<PathBuf>,
}

/// Lowest ABI that gives everything docs/sandbox.md asks of Landlock (scopes came in 6).
pub const FULL_ABI: u32 = 6;

/// Lowest ABI that governs TCP ports.
pub const NET_ABI: u32 = 4;

/// Restricts the calling thread (and everything it execs) to `paths`, and TCP to
/// nothing ([`Network::Off`]) or to connecting to the listed ports. `abi` is the
/// kernel's. Returns what was enforced, or why it could not be.
pub fn restrict(paths: &PathSets, network: &Network, kernel_abi: u32) -> Result<String, String> {
    if kernel_abi == 0 {
        return Err(
            "Landlock is not available on this kernel (enable CONFIG_SECURITY_LANDLOCK \
                    and add landlock to the lsm= boot parameter)"
                .into(),
        );
    }
    if matches!(network, Network::TcpPorts(_)) && kernel_abi < NET_ABI {
        return Err(format!(
            "Landlock ABI {kernel_abi} cannot limit TCP to ports (needs {NET_ABI}, Linux 6.7+)"
        ));
    }
    let abi = ABI::from(kernel_abi.min(10) as i32);
    let read: BitFlags<AccessFs> = AccessFs::from_read(abi);
    // Full write rights, except creating device nodes anywhere.
    let write = AccessFs::from_all(abi) & !(AccessFs::MakeChar | AccessFs::MakeBlock);
    let e = |e: landlock::RulesetError| format!("Landlock: {e}");
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(abi))
        .map_err(e)?;
    let net_handled = *network != Network::On && kernel_abi >= NET_ABI;
    if net_handled {
        ruleset = ruleset.handle_access(AccessNet::from_all(abi)).map_err(e)?;
    }
    let ports: &[u16] = match network {
        Network::TcpPorts(ports) => ports,
        _ => &[],
    };
    let scoped = kernel_abi >= 6;
    if scoped {
        ruleset = ruleset.scope(Scope::from_all(abi)).map_err(e)?;
    }
    let status = ruleset
        .create()
        .map_err(e)?
        .add_rules(path_beneath_rules(&paths.read, read))
        .map_err(e)?
        .add_rules(path_beneath_rules(&paths.write, write))
        .map_err(e)?
        .add_rules(
            ports
                .iter()
                .map(|p| Ok::<_, landlock::RulesetError>(NetPort::new(*p, AccessNet::ConnectTcp))),
        )
        .map_err(e)?
        .restrict_self()
        .map_err(e)?;
    match status.ruleset {
        RulesetStatus::FullyEnforced | RulesetStatus::PartiallyEnforced => {}
        RulesetStatus::NotEnforced => return Err("Landlock ruleset not enforced".into()),
    }
    let mut detail = format!("ABI {kernel_abi}: filesystem");
    if net_handled && ports.is_empty() {
        detail.push_str(", TCP bind/connect");
    } else if net_handled {
        let list: Vec<String> = ports.iter().map(u16::to_string).collect();
        detail.push_str(&format!(
            ", TCP connect only to port(s) {}, no bind",
            list.join(", ")
        ));
    }
    if scoped {
        detail.push_str(", abstract unix sockets and signals scoped");
    }
    if kernel_abi < FULL_ABI {
        return Err(format!(
            "{detail}; ABI {kernel_abi} lacks scopes (needs {FULL_ABI}, Linux 6.12+)"
        ));
    }
    Ok(detail)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Refused before any ruleset is made: nothing of the calling test is confined.
    #[test]
    fn a_port_list_is_refused_on_a_kernel_that_cannot_limit_tcp_ports() {
        let paths = PathSets {
            read: Vec::new(),
            write: Vec::new(),
        };
        let e = restrict(&paths, &Network::TcpPorts(vec![443]), NET_ABI - 1).unwrap_err();
        assert!(e.contains("cannot limit TCP to ports"), "{e}");
    }
}
