//! The capability gate's unit tests: each refusal, and what is admitted.

use std::collections::BTreeSet;

use tinybox_sdk::model::{IsolationLevel, Limit, PortMapping, SnapshotId, SourceKind, TtySize};

use super::*;
use crate::model::Placement;

fn name() -> SandboxName {
    SandboxName::new("thing").unwrap()
}

fn spec() -> BoxSpec {
    BoxSpec::new(Placement::local_passthrough())
}

fn unsupported(r: Result<impl std::fmt::Debug>) -> Capability {
    match r {
        Err(Error::Unsupported { sandbox, capability }) => {
            assert_eq!(sandbox, name());
            capability
        }
        other => panic!("expected Unsupported, got {other:?}"),
    }
}

fn full() -> SandboxCapabilities {
    SandboxCapabilities {
        isolation: IsolationLevel::Kernel,
        snapshot: SnapshotSupport::Filesystem,
        features: [Feature::Fork, Feature::PortForward, Feature::ResourceLimits, Feature::EgressFence].into(),
        limits: [Limit::Cpu, Limit::Memory, Limit::Pids].into(),
        network_deny: true,
        sources: [SourceKind::OciImage, SourceKind::LocalDir, SourceKind::Snapshot].into(),
        options: BTreeSet::new(),
    }
}

#[test]
fn a_declaration_of_nothing_refuses_every_gated_operation() {
    let caps = SandboxCapabilities::nothing();
    let n = name();

    let mut s = spec();
    s.resources.memory_bytes = Some(1 << 30);
    assert_eq!(
        unsupported(admit_create(&n, &caps, &s)),
        Capability::Limit { limit: Limit::Memory, enforced: BTreeSet::new() }
    );

    let mut s = spec();
    s.resources.cpus = Some(1.0);
    assert_eq!(
        unsupported(admit_create(&n, &caps, &s)),
        Capability::Limit { limit: Limit::Cpu, enforced: BTreeSet::new() }
    );

    let mut s = spec();
    s.network = Some(NetworkPolicy::Denied);
    assert_eq!(unsupported(admit_create(&n, &caps, &s)), Capability::NetworkDeny);

    let mut s = spec();
    s.ports.push(PortMapping { host: 8080, guest: 80 });
    assert_eq!(unsupported(admit_create(&n, &caps, &s)), Capability::PortForward);

    let mut s = spec();
    s.min_isolation = Some(IsolationLevel::Kernel);
    assert_eq!(
        unsupported(admit_create(&n, &caps, &s)),
        Capability::Isolation { floor: IsolationLevel::Kernel, declared: IsolationLevel::None }
    );

    let mut s = spec();
    s.source = Some(WorkspaceSource::LocalDir { path: "/tmp".into() });
    assert_eq!(unsupported(admit_create(&n, &caps, &s)), Capability::Source(SourceKind::LocalDir));

    assert_eq!(unsupported(admit_snapshot(&n, &caps)), Capability::Snapshot);
    assert_eq!(unsupported(admit_fork(&n, &caps)), Capability::Snapshot);
}

#[test]
fn defaults_apply_only_where_enforced() {
    let caps = SandboxCapabilities::nothing();
    let admitted = admit_create(&name(), &caps, &spec()).unwrap();
    assert_eq!(admitted.limits, Resources::default());
    assert_eq!(admitted.network, None);
    assert_eq!(admitted.network_in_force, NetworkInForce::NotConfined);

    let admitted = admit_create(&name(), &full(), &spec()).unwrap();
    let d = Resources::defaults();
    assert_eq!(admitted.limits, Resources { disk_bytes: None, ..d });
    assert_eq!(admitted.network, Some(NetworkPolicy::Denied));
    assert_eq!(admitted.network_in_force, NetworkInForce::Denied);
}

#[test]
fn explicit_asks_override_defaults_and_unenforced_ones_are_refused() {
    let mut s = spec();
    s.resources.memory_bytes = Some(512 << 20);
    s.network = Some(NetworkPolicy::Egress);
    let admitted = admit_create(&name(), &full(), &s).unwrap();
    assert_eq!(admitted.limits.memory_bytes, Some(512 << 20));
    assert_eq!(admitted.network_in_force, NetworkInForce::Egress);

    s.resources.disk_bytes = Some(1 << 30);
    let cap = unsupported(admit_create(&name(), &full(), &s));
    assert_eq!(
        cap,
        Capability::Limit { limit: Limit::Disk, enforced: [Limit::Cpu, Limit::Memory, Limit::Pids].into() }
    );
    assert_eq!(cap.to_string(), "disk limit (it enforces cpu, memory, pids)");
}

#[test]
fn limits_without_the_feature_are_not_enforced() {
    let mut caps = full();
    caps.features.remove(&Feature::ResourceLimits);
    let admitted = admit_create(&name(), &caps, &spec()).unwrap();
    assert_eq!(admitted.limits.set(), BTreeSet::new());
}

#[test]
fn snapshot_sources_need_snapshot_support_and_fork_needs_the_feature() {
    let mut caps = full();
    caps.snapshot = SnapshotSupport::None;
    caps.features.remove(&Feature::Fork);
    let mut s = spec();
    s.source = Some(WorkspaceSource::Snapshot { id: SnapshotId::new("sha-0123456789ab").unwrap() });
    assert_eq!(unsupported(admit_create(&name(), &caps, &s)), Capability::SnapshotSource);

    let mut caps = full();
    caps.features.remove(&Feature::Fork);
    assert!(admit_snapshot(&name(), &caps).is_ok());
    assert_eq!(unsupported(admit_fork(&name(), &caps)), Capability::Fork);
}

#[test]
fn the_floor_admits_equal_or_stronger() {
    let mut s = spec();
    s.min_isolation = Some(IsolationLevel::Kernel);
    assert!(admit_create(&name(), &full(), &s).is_ok());
    let mut caps = full();
    caps.isolation = IsolationLevel::Hardware;
    assert!(admit_create(&name(), &caps, &s).is_ok());
    caps.isolation = IsolationLevel::Process;
    assert!(admit_create(&name(), &caps, &s).is_err());
}

#[test]
fn an_option_the_sandbox_did_not_declare_is_refused() {
    let mut s = spec();
    s.options.insert("accel".into(), "tcg".into());
    assert_eq!(
        unsupported(admit_create(&name(), &SandboxCapabilities::nothing(), &s)),
        Capability::Option { name: "accel".into(), takes: vec![] }
    );

    let mut caps = full();
    caps.options = ["cpu_model".to_owned(), "machine".to_owned()].into();
    assert_eq!(
        unsupported(admit_create(&name(), &caps, &s)),
        Capability::Option { name: "accel".into(), takes: vec!["cpu_model".into(), "machine".into()] }
    );
    let err = admit_create(&name(), &caps, &s).unwrap_err().to_string();
    assert_eq!(err, "sandbox thing does not support option accel (it takes cpu_model, machine)");
}

#[test]
fn declared_options_pass_and_values_are_the_drivers_to_check() {
    let mut caps = full();
    caps.options = ["accel".to_owned()].into();
    let mut s = spec();
    assert!(admit_create(&name(), &caps, &s).is_ok(), "no options asked, none needed");
    s.options.insert("accel".into(), "tcg".into());
    assert!(admit_create(&name(), &caps, &s).is_ok());
    s.options.insert("accel".into(), "anything".into());
    assert!(admit_create(&name(), &caps, &s).is_ok(), "core does not judge values");

    // Every name must be declared, not just one of them.
    s.options.insert("turbo".into(), "yes".into());
    assert_eq!(
        unsupported(admit_create(&name(), &caps, &s)),
        Capability::Option { name: "turbo".into(), takes: vec!["accel".into()] }
    );
}

#[test]
fn a_terminal_is_refused_where_none_was_declared() {
    let mut caps = SandboxCapabilities::nothing();
    let plain = ExecRequest::new(["sh"]);
    let mut terminal = plain.clone();
    terminal.tty = Some(TtySize { rows: 24, cols: 80 });
    assert!(admit_exec(&name(), &caps, &plain).is_ok());
    assert_eq!(unsupported(admit_exec(&name(), &caps, &terminal)), Capability::Terminal);
    caps.features.insert(Feature::Terminal);
    assert!(admit_exec(&name(), &caps, &terminal).is_ok());
}

/// A spec asking for an allowlist, as a request with `--allow-host` makes one.
fn allowlist_spec() -> BoxSpec {
    let mut s = spec();
    s.network = Some(NetworkPolicy::Allowlist);
    s.allow_hosts = vec!["allowed.test:8080".into()];
    s
}

#[test]
fn an_allowlist_is_refused_by_a_sandbox_that_does_not_declare_network_allowlist() {
    // Neither one that confines nothing, nor one that can deny the network but has no proxy path.
    for caps in [SandboxCapabilities::nothing(), full()] {
        assert_eq!(unsupported(admit_create(&name(), &caps, &allowlist_spec())), Capability::NetworkAllowlist);
    }
    let err = admit_create(&name(), &full(), &allowlist_spec()).unwrap_err().to_string();
    assert_eq!(
        err,
        "sandbox thing does not support network_allowlist (it cannot hold a box to an egress proxy; the namespace and docker sandboxes on this machine can)"
    );
}

#[test]
fn a_declared_allowlist_is_admitted_and_in_force() {
    let mut caps = full();
    caps.features.insert(Feature::NetworkAllowlist);
    let admitted = admit_create(&name(), &caps, &allowlist_spec()).unwrap();
    assert_eq!(admitted.network, Some(NetworkPolicy::Allowlist));
    assert_eq!(admitted.network_in_force, NetworkInForce::Allowlist);
    // Declaring it changes nothing for a box that does not ask.
    assert_eq!(admit_create(&name(), &caps, &spec()).unwrap().network_in_force, NetworkInForce::Denied);
}

#[test]
fn plain_egress_in_a_confining_sandbox_needs_the_fence_and_an_unconfined_one_stays_not_confined() {
    let mut s = spec();
    s.network = Some(NetworkPolicy::Egress);
    let mut caps = full();
    caps.features.remove(&Feature::EgressFence);
    assert_eq!(unsupported(admit_create(&name(), &caps, &s)), Capability::EgressFence);
    assert_eq!(
        admit_create(&name(), &caps, &s).unwrap_err().to_string(),
        "sandbox thing does not support network egress (its egress could reach the host itself and private networks; use --allow-host NAME for an allowlist, or --network deny)"
    );
    // A denied box needs no fence; a sandbox that confines nothing says so instead.
    assert!(admit_create(&name(), &caps, &spec()).is_ok());
    let admitted = admit_create(&name(), &SandboxCapabilities::nothing(), &s).unwrap();
    assert_eq!(admitted.network_in_force, NetworkInForce::NotConfined);
}

#[test]
fn reading_a_stopped_box_from_its_snapshot_needs_snapshots_and_the_feature() {
    let mut caps = full();
    assert_eq!(unsupported(admit_snapshot_exec(&name(), &caps)), Capability::SnapshotExec);
    caps.features.insert(Feature::SnapshotExec);
    assert!(admit_snapshot_exec(&name(), &caps).is_ok());
    caps.snapshot = SnapshotSupport::None;
    assert_eq!(unsupported(admit_snapshot_exec(&name(), &caps)), Capability::Snapshot);
}

#[test]
fn secrets_are_refused_by_a_sandbox_with_an_allowlist_but_no_secret_injection() {
    let mut s = allowlist_spec();
    s.secrets.sources.insert("T".into(), "env:T".into());
    s.secrets.hosts.insert("T".into(), vec!["allowed.test".into()]);
    let mut caps = full();
    caps.features.insert(Feature::NetworkAllowlist);
    // Where egress goes through core's proxy but nothing makes the CA visible (microvm today).
    assert_eq!(unsupported(admit_create(&name(), &caps, &s)), Capability::SecretInjection);
    // Before the allowlist's own refusal: the message says what was asked for.
    assert_eq!(unsupported(admit_create(&name(), &full(), &s)), Capability::SecretInjection);
    caps.features.insert(Feature::SecretInjection);
    assert_eq!(admit_create(&name(), &caps, &s).unwrap().network_in_force, NetworkInForce::Allowlist);
}
