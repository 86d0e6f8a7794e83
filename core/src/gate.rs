//! The capability gate. Before any driver is asked to do anything, core
//! compares the request with what the sandbox declared and refuses what was
//! not declared with `Error::Unsupported` — the same way for every driver,
//! built in or third party. What passes is reduced to exactly what will be in
//! force, so a driver is never handed a limit or a policy it cannot apply.

use tinybox_sdk::model::{
    Feature, Limit, NetworkInForce, NetworkPolicy, Resources, SandboxCapabilities, SandboxName, SnapshotSupport,
    WorkspaceSource,
};

use crate::error::{Error, Result};
use crate::model::BoxSpec;

/// What a create will put in force, once the gate has passed it.
#[derive(Debug, Clone, PartialEq)]
pub struct Admitted {
    /// Only limits the sandbox enforces: the caller's, else the defaults.
    pub limits: Resources,
    /// The policy to hand the driver; `None` when it confines no network.
    pub network: Option<NetworkPolicy>,
    pub network_in_force: NetworkInForce,
}

/// Checks a create against a declaration.
pub fn admit_create(sandbox: &SandboxName, caps: &SandboxCapabilities, spec: &BoxSpec) -> Result<Admitted> {
    let refuse = |capability: String| Err(Error::unsupported(sandbox, capability));

    if let Some(floor) = spec.min_isolation
        && caps.isolation < floor
    {
        return refuse(format!("isolation {floor} or stronger (it declares {})", caps.isolation));
    }
    if let Some(source) = &spec.source {
        if !caps.sources.contains(&source.kind()) {
            return refuse(format!("workspace source {}", source.kind()));
        }
        if matches!(source, WorkspaceSource::Snapshot { .. }) && caps.snapshot == SnapshotSupport::None {
            return refuse("snapshots".into());
        }
    }
    let enforced = if caps.has(&Feature::ResourceLimits) { caps.limits.clone() } else { Default::default() };
    for limit in spec.resources.set() {
        if !enforced.contains(&limit) {
            return refuse(format!("{limit} limit (it enforces {})", list_or_none(&enforced)));
        }
    }
    let limits = spec.resources.or(&Resources::defaults()).restricted_to(&enforced);

    let (network, network_in_force) = match (caps.network_deny, spec.network) {
        (true, asked) => {
            let policy = asked.unwrap_or_default();
            let in_force = match policy {
                NetworkPolicy::Denied => NetworkInForce::Denied,
                NetworkPolicy::Egress => NetworkInForce::Egress,
            };
            (Some(policy), in_force)
        }
        (false, Some(NetworkPolicy::Denied)) => return refuse("network deny (it cannot confine the network)".into()),
        (false, _) => (None, NetworkInForce::NotConfined),
    };
    if !spec.ports.is_empty() && !caps.has(&Feature::PortForward) {
        return refuse("port_forward".into());
    }
    if let Some(name) = spec.options.keys().find(|name| !caps.options.contains(*name)) {
        let takes = if caps.options.is_empty() {
            "no options".to_owned()
        } else {
            caps.options.iter().map(String::as_str).collect::<Vec<_>>().join(", ")
        };
        return refuse(format!("option {name} (it takes {takes})"));
    }
    Ok(Admitted { limits, network, network_in_force })
}

/// Checks that a sandbox can take a snapshot.
pub fn admit_snapshot(sandbox: &SandboxName, caps: &SandboxCapabilities) -> Result<()> {
    if caps.snapshot == SnapshotSupport::None {
        return Err(Error::unsupported(sandbox, "snapshot"));
    }
    Ok(())
}

/// Checks that a sandbox can fork a box (a new box from its snapshot).
pub fn admit_fork(sandbox: &SandboxName, caps: &SandboxCapabilities) -> Result<()> {
    admit_snapshot(sandbox, caps)?;
    if !caps.has(&Feature::Fork) {
        return Err(Error::unsupported(sandbox, "fork"));
    }
    Ok(())
}

fn list_or_none(limits: &std::collections::BTreeSet<Limit>) -> String {
    if limits.is_empty() {
        "no limits".into()
    } else {
        limits.iter().map(|l| l.as_str()).collect::<Vec<_>>().join(", ")
    }
}

#[cfg(test)]
mod tests;
