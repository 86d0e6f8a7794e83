//! The capability gate. Before any driver is asked to do anything, core
//! compares the request with what the sandbox declared and refuses what was
//! not declared with `Error::Unsupported` — the same way for every driver,
//! built in or third party. What passes is reduced to exactly what will be in
//! force, so a driver is never handed a limit or a policy it cannot apply.

use tinybox_sdk::model::{
    ExecRequest, Feature, NetworkInForce, NetworkPolicy, Resources, SandboxCapabilities, SandboxName, SnapshotSupport,
    WorkspaceSource,
};

use crate::error::{Capability, Error, Result};
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
    let refuse = |capability: Capability| Err(Error::unsupported(sandbox, capability));

    if let Some(floor) = spec.min_isolation
        && caps.isolation < floor
    {
        return refuse(Capability::Isolation { floor, declared: caps.isolation });
    }
    if let Some(source) = &spec.source {
        if !caps.sources.contains(&source.kind()) {
            return refuse(Capability::Source(source.kind()));
        }
        if matches!(source, WorkspaceSource::Snapshot { .. }) && caps.snapshot == SnapshotSupport::None {
            return refuse(Capability::SnapshotSource);
        }
    }
    let enforced = if caps.has(&Feature::ResourceLimits) { caps.limits.clone() } else { Default::default() };
    for limit in spec.resources.set() {
        if !enforced.contains(&limit) {
            return refuse(Capability::Limit { limit, enforced });
        }
    }
    let limits = spec.resources.or(&Resources::defaults()).restricted_to(&enforced);

    // Before the allowlist's own check: a sandbox without it cannot inject either, and this says why.
    if !spec.secrets.is_empty() && !caps.has(&Feature::SecretInjection) {
        return refuse(Capability::SecretInjection);
    }
    if spec.network == Some(NetworkPolicy::Allowlist) && !caps.has(&Feature::NetworkAllowlist) {
        return refuse(Capability::NetworkAllowlist);
    }
    // A sandbox that confines the network gives plain egress only behind
    // the fence (no host, no private ranges): one that cannot fence it
    // would let a box reach the services listening on its host.
    if spec.network == Some(NetworkPolicy::Egress) && caps.network_deny && !caps.has(&Feature::EgressFence) {
        return refuse(Capability::EgressFence);
    }
    let (network, network_in_force) = match (caps.network_deny, spec.network) {
        (true, asked) => {
            let policy = asked.unwrap_or_default();
            let in_force = match policy {
                NetworkPolicy::Denied => NetworkInForce::Denied,
                NetworkPolicy::Egress => NetworkInForce::Egress,
                NetworkPolicy::Allowlist => NetworkInForce::Allowlist,
            };
            (Some(policy), in_force)
        }
        (false, Some(NetworkPolicy::Denied)) => return refuse(Capability::NetworkDeny),
        (false, _) => (None, NetworkInForce::NotConfined),
    };
    if !spec.ports.is_empty() && !caps.has(&Feature::PortForward) {
        return refuse(Capability::PortForward);
    }
    if let Some(name) = spec.options.keys().find(|name| !caps.options.contains(*name)) {
        return refuse(Capability::Option { name: name.clone(), takes: caps.options.iter().cloned().collect() });
    }
    Ok(Admitted { limits, network, network_in_force })
}

/// Checks that a sandbox can run `request` as asked: on a terminal only
/// when it declared one.
pub fn admit_exec(sandbox: &SandboxName, caps: &SandboxCapabilities, request: &ExecRequest) -> Result<()> {
    if request.tty.is_some() && !caps.has(&Feature::Terminal) {
        return Err(Error::unsupported(sandbox, Capability::Terminal));
    }
    Ok(())
}

/// Checks that a sandbox can take a snapshot.
pub fn admit_snapshot(sandbox: &SandboxName, caps: &SandboxCapabilities) -> Result<()> {
    if caps.snapshot == SnapshotSupport::None {
        return Err(Error::unsupported(sandbox, Capability::Snapshot));
    }
    Ok(())
}

/// Checks that this one box can be snapshotted: its driver may have said
/// at create that it keeps less than its sandbox declares.
pub fn admit_box_snapshot(instance: &crate::model::Instance) -> Result<()> {
    if instance.snapshot == Some(SnapshotSupport::None) {
        return Err(Error::unsupported(&instance.placement.sandbox, Capability::BoxSnapshot));
    }
    Ok(())
}

/// Checks that a sandbox can run a read-only command from a stopped box's
/// snapshot (what copying out of a stopped box needs).
pub fn admit_snapshot_exec(sandbox: &SandboxName, caps: &SandboxCapabilities) -> Result<()> {
    admit_snapshot(sandbox, caps)?;
    if !caps.has(&Feature::SnapshotExec) {
        return Err(Error::unsupported(sandbox, Capability::SnapshotExec));
    }
    Ok(())
}

/// Checks that a sandbox can fork a box (a new box from its snapshot).
pub fn admit_fork(sandbox: &SandboxName, caps: &SandboxCapabilities) -> Result<()> {
    admit_snapshot(sandbox, caps)?;
    if !caps.has(&Feature::Fork) {
        return Err(Error::unsupported(sandbox, Capability::Fork));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
