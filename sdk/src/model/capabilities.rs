//! What a sandbox declares it can do. Core reads this declaration and refuses
//! anything outside it before a driver is ever called.

use std::collections::BTreeSet;
use std::fmt;

use serde::{Deserialize, Serialize};

use super::resources::Limit;
use super::source::SourceKind;

/// How strongly a sandbox separates the workload from the host.
///
/// Ordered, so a caller states a floor (`level >= IsolationLevel::Kernel`)
/// rather than enumerating acceptable backends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IsolationLevel {
    /// Nothing is confined: the code runs as the caller would.
    None,
    /// A separate principal (another user, rlimits) on the same kernel view.
    Process,
    /// Kernel namespaces: host processes are invisible and unsignalable.
    Kernel,
    /// A separate kernel behind a hypervisor.
    Hardware,
}

impl IsolationLevel {
    /// The floor for untrusted code: the workload must at minimum be unable to
    /// see or signal host processes. This is the one place that decision lives.
    pub const UNTRUSTED_FLOOR: IsolationLevel = IsolationLevel::Kernel;

    pub fn as_str(self) -> &'static str {
        match self {
            IsolationLevel::None => "none",
            IsolationLevel::Process => "process",
            IsolationLevel::Kernel => "kernel",
            IsolationLevel::Hardware => "hardware",
        }
    }
}

impl fmt::Display for IsolationLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What state a snapshot captures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SnapshotSupport {
    None,
    Filesystem,
    FilesystemAndMemory,
}

/// The optional operations a sandbox may declare.
///
/// Unknown names decode to [`Feature::Unknown`] so an older core still reads a
/// newer driver's declaration; core never grants an unknown feature anything.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Feature {
    Fork,
    PauseResume,
    PortForward,
    ResourceLimits,
    /// Runs a command on a pseudo-terminal made for it (`ExecRequest::tty`)
    /// and resizes it (`exec.resize`).
    Terminal,
    /// `sandbox.snapshot_sweep` finds the snapshots it took of a box by
    /// the box alone, so an interrupted snapshot leaves nothing unknown.
    SnapshotSweep,
    /// A box can have `NetworkPolicy::Allowlist`: loopback only, the
    /// egress proxy's socket and relay inside (`EgressEndpoint`).
    NetworkAllowlist,
    /// `sandbox.snapshot_exec` runs a read-only command from a snapshot
    /// (a stopped box's newest), without bringing the box back.
    SnapshotExec,
    /// A box with `NetworkPolicy::Egress` reaches public addresses only:
    /// never the host's own addresses, loopback, private, link-local,
    /// CGNAT or reserved ranges, nor IPv6, unless the create listed the
    /// address as an exception (`CreateParams::egress_exceptions`, the
    /// rules in [`crate::fence`]). Core admits plain egress on a sandbox
    /// that confines the network only where this is declared.
    EgressFence,
    /// `sandbox.run_once` makes a box, runs one command in it with the
    /// caller's streams and removes it, as one step: when it answers,
    /// nothing it made remains; a run interrupted before it answered is
    /// found by `sandbox.destroy` of the interrupted box, as a create is.
    /// A sandbox declaring it never makes such a box below its declared
    /// isolation. Core uses it for `tinybox run` where nothing needs the
    /// box to outlive its command.
    RunOnce,
    /// `sandbox.archive` moves a tar of a running box's path out of it, or
    /// extracts one into a directory of it, through the sandbox's own
    /// archive path (docker's `docker cp`), which keeps every path it
    /// resolves inside the box's own root (a sandbox whose archive path
    /// cannot promise that declines, and core goes through the box). Core
    /// still checks each entry of a tar coming out, and writes the tar
    /// going in itself.
    Archive,
    /// An `oci_image` box is made from the image's root filesystem that
    /// core resolved in its own image store (`CreateParams::image`), not
    /// from the reference by the sandbox itself.
    ImageRoot,
    /// With `ImageRoot`: boots a box from an OCI image's base disk: core builds the image's
    /// read-only ext4 disk once per image (the image store's `disk.rs`)
    /// and sends its path in `CreateParams::image` (`ImageRoot::disk`).
    ImageDisk,
    /// Credentials a box can use but never read (ADR 0032): core's egress
    /// proxy intercepts TLS to the hosts a secret is bound to and puts the
    /// real value in place of a placeholder, and the sandbox makes the
    /// proxy's CA bundle visible at [`crate::protocol::egress::CA_BUNDLE_IN_BOX`].
    /// Only with `network_allowlist`: the proxy is the box's only way out.
    SecretInjection,
    #[serde(untagged)]
    Unknown(String),
}

impl fmt::Display for Feature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Feature::Fork => f.write_str("fork"),
            Feature::PauseResume => f.write_str("pause_resume"),
            Feature::PortForward => f.write_str("port_forward"),
            Feature::ResourceLimits => f.write_str("resource_limits"),
            Feature::Terminal => f.write_str("terminal"),
            Feature::SnapshotSweep => f.write_str("snapshot_sweep"),
            Feature::NetworkAllowlist => f.write_str("network_allowlist"),
            Feature::SnapshotExec => f.write_str("snapshot_exec"),
            Feature::EgressFence => f.write_str("egress_fence"),
            Feature::RunOnce => f.write_str("run_once"),
            Feature::Archive => f.write_str("archive"),
            Feature::ImageRoot => f.write_str("image_root"),
            Feature::ImageDisk => f.write_str("image_disk"),
            Feature::SecretInjection => f.write_str("secret_injection"),
            Feature::Unknown(name) => f.write_str(name),
        }
    }
}

/// A sandbox's whole declaration, sent in its handshake.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxCapabilities {
    pub isolation: IsolationLevel,
    pub snapshot: SnapshotSupport,
    #[serde(default)]
    pub features: BTreeSet<Feature>,
    /// Which resource limits the sandbox really applies. Non-empty exactly
    /// when `features` holds [`Feature::ResourceLimits`].
    #[serde(default)]
    pub limits: BTreeSet<Limit>,
    /// Whether the sandbox can enforce `NetworkPolicy::Denied`.
    #[serde(default)]
    pub network_deny: bool,
    /// Which workspace sources the sandbox accepts; creating a box with no
    /// source is always allowed to be refused by the driver itself.
    #[serde(default)]
    pub sources: BTreeSet<SourceKind>,
    /// The names of the driver-specific create options the sandbox
    /// understands (microvm's `accel`, say). Core refuses a create naming any
    /// other; the values are the driver's to check.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub options: BTreeSet<String>,
}

impl SandboxCapabilities {
    /// A declaration of nothing: no isolation, no snapshots, no features.
    pub fn nothing() -> Self {
        SandboxCapabilities {
            isolation: IsolationLevel::None,
            snapshot: SnapshotSupport::None,
            features: BTreeSet::new(),
            limits: BTreeSet::new(),
            network_deny: false,
            sources: BTreeSet::new(),
            options: BTreeSet::new(),
        }
    }

    pub fn has(&self, feature: &Feature) -> bool {
        self.features.contains(feature)
    }

    /// Whether code nobody trusts may run here. Kernel is the floor.
    pub fn is_suitable_for_untrusted_code(&self) -> bool {
        self.isolation >= IsolationLevel::UNTRUSTED_FLOOR
    }

    /// Checks the declaration is self-consistent; a driver whose declaration
    /// contradicts itself is refused at the handshake.
    pub fn check_consistent(&self) -> Result<(), String> {
        let declares_limits = self.has(&Feature::ResourceLimits);
        if declares_limits && self.limits.is_empty() {
            return Err("declares resource_limits but lists no enforced limit".into());
        }
        if !declares_limits && !self.limits.is_empty() {
            return Err("lists enforced limits but does not declare resource_limits".into());
        }
        if self.has(&Feature::Fork) && self.snapshot == SnapshotSupport::None {
            return Err("declares fork but no snapshot support to fork from".into());
        }
        if self.has(&Feature::SnapshotSweep) && self.snapshot == SnapshotSupport::None {
            return Err("declares snapshot_sweep but takes no snapshots to sweep".into());
        }
        if self.has(&Feature::SnapshotExec) && self.snapshot == SnapshotSupport::None {
            return Err("declares snapshot_exec but takes no snapshots to run from".into());
        }
        if self.has(&Feature::EgressFence) && !self.network_deny {
            return Err("declares egress_fence but cannot deny the network, so nothing confines a box's egress".into());
        }
        if self.has(&Feature::SecretInjection) && !self.has(&Feature::NetworkAllowlist) {
            return Err("declares secret_injection but not network_allowlist, so no proxy stands between a box and the hosts its secrets are for".into());
        }
        if self.has(&Feature::NetworkAllowlist) && !self.network_deny {
            return Err(
                "declares network_allowlist but cannot deny the network, so nothing would keep a box to its proxy"
                    .into(),
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn isolation_is_ordered_and_kernel_is_the_untrusted_floor() {
        assert!(IsolationLevel::None < IsolationLevel::Process);
        assert!(IsolationLevel::Process < IsolationLevel::Kernel);
        assert!(IsolationLevel::Kernel < IsolationLevel::Hardware);
        let mut caps = SandboxCapabilities::nothing();
        for (level, ok) in [
            (IsolationLevel::None, false),
            (IsolationLevel::Process, false),
            (IsolationLevel::Kernel, true),
            (IsolationLevel::Hardware, true),
        ] {
            caps.isolation = level;
            assert_eq!(caps.is_suitable_for_untrusted_code(), ok, "{level}");
        }
    }

    #[test]
    fn unknown_features_decode_instead_of_failing() {
        let f: BTreeSet<Feature> = serde_json::from_str(r#"["fork","teleport"]"#).unwrap();
        assert!(f.contains(&Feature::Fork));
        assert!(f.contains(&Feature::Unknown("teleport".into())));
    }

    #[test]
    fn network_allowlist_is_spelled_so_and_needs_network_deny() {
        assert_eq!(serde_json::to_value(Feature::NetworkAllowlist).unwrap(), "network_allowlist");
        assert_eq!(serde_json::from_str::<Feature>(r#""network_allowlist""#).unwrap(), Feature::NetworkAllowlist);
        assert_eq!(Feature::NetworkAllowlist.to_string(), "network_allowlist");
        let mut caps = SandboxCapabilities::nothing();
        caps.features.insert(Feature::NetworkAllowlist);
        assert!(caps.check_consistent().unwrap_err().contains("network_allowlist"));
        caps.network_deny = true;
        assert_eq!(caps.check_consistent(), Ok(()));
    }

    #[test]
    fn secret_injection_is_spelled_so_and_needs_network_allowlist() {
        assert_eq!(serde_json::to_value(Feature::SecretInjection).unwrap(), "secret_injection");
        assert_eq!(serde_json::from_str::<Feature>(r#""secret_injection""#).unwrap(), Feature::SecretInjection);
        let mut caps = SandboxCapabilities::nothing();
        caps.network_deny = true;
        caps.features.insert(Feature::SecretInjection);
        assert!(caps.check_consistent().unwrap_err().contains("secret_injection but not network_allowlist"));
        caps.features.insert(Feature::NetworkAllowlist);
        assert_eq!(caps.check_consistent(), Ok(()));
    }

    #[test]
    fn terminal_is_spelled_terminal() {
        assert_eq!(serde_json::to_value(Feature::Terminal).unwrap(), "terminal");
        assert_eq!(serde_json::from_str::<Feature>(r#""terminal""#).unwrap(), Feature::Terminal);
        assert_eq!(Feature::Terminal.to_string(), "terminal");
    }

    #[test]
    fn options_are_declared_only_when_there_are_some() {
        let mut caps = SandboxCapabilities::nothing();
        let json = serde_json::to_value(&caps).unwrap();
        assert!(json.get("options").is_none(), "{json}");

        caps.options.insert("accel".into());
        let json = serde_json::to_value(&caps).unwrap();
        assert_eq!(json["options"], serde_json::json!(["accel"]));
        assert_eq!(serde_json::from_value::<SandboxCapabilities>(json).unwrap(), caps);

        // An older driver's declaration has none.
        let old: SandboxCapabilities = serde_json::from_str(r#"{"isolation":"kernel","snapshot":"none"}"#).unwrap();
        assert!(old.options.is_empty());
    }

    #[test]
    fn inconsistent_declarations_are_named() {
        let mut caps = SandboxCapabilities::nothing();
        caps.features.insert(Feature::ResourceLimits);
        assert!(caps.check_consistent().unwrap_err().contains("no enforced limit"));
        caps.features.clear();
        caps.limits.insert(Limit::Memory);
        assert!(caps.check_consistent().unwrap_err().contains("does not declare"));
        caps.limits.clear();
        caps.features.insert(Feature::Fork);
        assert!(caps.check_consistent().unwrap_err().contains("fork"));
    }
}
