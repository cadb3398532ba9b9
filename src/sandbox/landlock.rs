//! The Landlock layer: filesystem access limited to the allowed paths, TCP bind and
//! connect refused when the network is off, and both scopes (abstract unix sockets,
//! signals) so a tool cannot reach outside its own domain.

use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, Ruleset, RulesetAttr,
    RulesetCreatedAttr, RulesetStatus, Scope, path_beneath_rules,
};

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

/// Restricts the calling thread (and everything it execs) to `paths`, and TCP to
/// nothing unless `network`. `abi` is the kernel's. Returns what was enforced, or
/// why it could not be.
pub fn restrict(paths: &PathSets, network: bool, kernel_abi: u32) -> Result<String, String> {
    if kernel_abi == 0 {
        return Err(
            "Landlock is not available on this kernel (enable CONFIG_SECURITY_LANDLOCK \
                    and add landlock to the lsm= boot parameter)"
                .into(),
        );
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
    let net_handled = !network && kernel_abi >= 4;
    if net_handled {
        ruleset = ruleset.handle_access(AccessNet::from_all(abi)).map_err(e)?;
    }
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
        .restrict_self()
        .map_err(e)?;
    match status.ruleset {
        RulesetStatus::FullyEnforced | RulesetStatus::PartiallyEnforced => {}
        RulesetStatus::NotEnforced => return Err("Landlock ruleset not enforced".into()),
    }
    let mut detail = format!("ABI {kernel_abi}: filesystem");
    if net_handled {
        detail.push_str(", TCP bind/connect");
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
