//! Every claim the kit checks, as one enum: its stable wire name (what the
//! JSON report and the CLI's table show), what in a declaration makes it,
//! and the report order, which is the order of [`Claim::ALL`].

use std::fmt;

use serde::{Serialize, Serializer};
use tinybox_sdk::model::{Feature, IsolationLevel, Limit, SandboxCapabilities, SnapshotSupport};

/// One property or protocol behaviour a sandbox's driver is held to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Claim {
    ProcessCannotSignalCaller,
    ProcessEnvRoundTrip,
    ProcessCannotPtraceCaller,
    ProcessCannotReadCallerFiles,
    ProcessCannotWriteCallerFiles,
    KernelHostProcesses,
    KernelEnvClean,
    KernelOnlyStdioFds,
    KernelHostFilesHidden,
    KernelNoHostDevices,
    KernelMountsStayInside,
    KernelNothingPrivilegedWritten,
    KernelNoTerminalInjection,
    HardwareOwnKernel,
    LimitCpu,
    LimitMemory,
    LimitPids,
    LimitDisk,
    NetworkDeny,
    NetworkNoRouteToHost,
    NetworkNoHostSockets,
    AllowlistListedNameReached,
    AllowlistUnlistedNameRefused,
    AllowlistAddressLiteralRefused,
    AllowlistNoDirectConnection,
    AllowlistNoProxyFails,
    AllowlistRebindingRefused,
    AllowlistNoDns,
    AllowlistHttpsConnect,
    AllowlistSniMismatchRefused,
    AllowlistRedirectRefused,
    AllowlistHostUnreachable,
    EgressFenceHostUnreachable,
    EgressFencePrivateUnreachable,
    SnapshotFilesystem,
    FeatureFork,
    FeaturePortForward,
    FeaturePauseResume,
    FeatureTerminal,
    ProtocolCallBeforeHandshake,
    ProtocolIncompatibleVersion,
    ProtocolUnknownMethod,
    ProtocolInvalidParams,
    ProtocolConcurrentCalls,
    ProtocolLargeBinaryStream,
    ProtocolCancellation,
}

/// What in a declaration makes a claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Requirement {
    /// Isolation at this level or above.
    Isolation(IsolationLevel),
    /// `resource_limits` with this limit.
    Limit(Limit),
    NetworkDeny,
    /// `network_allowlist`, and a target to probe it against (the kit's
    /// egress target, docs/specs/conformance.md).
    NetworkAllowlist,
    /// `egress_fence`: plain egress keeps off the host and private ranges.
    EgressFence,
    /// Any snapshot support.
    Snapshot,
    Feature(Feature),
    /// Every driver speaks the protocol (passthrough, built into core, has none).
    Protocol,
}

impl Claim {
    /// Every claim, in report order: the property claims, then the protocol ones.
    pub const ALL: [Claim; 46] = [
        Claim::ProcessCannotSignalCaller,
        Claim::ProcessEnvRoundTrip,
        Claim::ProcessCannotPtraceCaller,
        Claim::ProcessCannotReadCallerFiles,
        Claim::ProcessCannotWriteCallerFiles,
        Claim::KernelHostProcesses,
        Claim::KernelEnvClean,
        Claim::KernelOnlyStdioFds,
        Claim::KernelHostFilesHidden,
        Claim::KernelNoHostDevices,
        Claim::KernelMountsStayInside,
        Claim::KernelNothingPrivilegedWritten,
        Claim::KernelNoTerminalInjection,
        Claim::HardwareOwnKernel,
        Claim::LimitCpu,
        Claim::LimitMemory,
        Claim::LimitPids,
        Claim::LimitDisk,
        Claim::NetworkDeny,
        Claim::NetworkNoRouteToHost,
        Claim::NetworkNoHostSockets,
        Claim::AllowlistListedNameReached,
        Claim::AllowlistUnlistedNameRefused,
        Claim::AllowlistAddressLiteralRefused,
        Claim::AllowlistNoDirectConnection,
        Claim::AllowlistNoProxyFails,
        Claim::AllowlistRebindingRefused,
        Claim::AllowlistNoDns,
        Claim::AllowlistHttpsConnect,
        Claim::AllowlistSniMismatchRefused,
        Claim::AllowlistRedirectRefused,
        Claim::AllowlistHostUnreachable,
        Claim::EgressFenceHostUnreachable,
        Claim::EgressFencePrivateUnreachable,
        Claim::SnapshotFilesystem,
        Claim::FeatureFork,
        Claim::FeaturePortForward,
        Claim::FeaturePauseResume,
        Claim::FeatureTerminal,
        Claim::ProtocolCallBeforeHandshake,
        Claim::ProtocolIncompatibleVersion,
        Claim::ProtocolUnknownMethod,
        Claim::ProtocolInvalidParams,
        Claim::ProtocolConcurrentCalls,
        Claim::ProtocolLargeBinaryStream,
        Claim::ProtocolCancellation,
    ];

    /// The stable name reports carry; tools match on it, so it never changes.
    pub fn name(self) -> &'static str {
        match self {
            Claim::ProcessCannotSignalCaller => "isolation.process.cannot_signal_caller",
            Claim::ProcessEnvRoundTrip => "isolation.process.env_round_trip",
            Claim::ProcessCannotPtraceCaller => "isolation.process.cannot_ptrace_caller",
            Claim::ProcessCannotReadCallerFiles => "isolation.process.cannot_read_caller_files",
            Claim::ProcessCannotWriteCallerFiles => "isolation.process.cannot_write_caller_files",
            Claim::KernelHostProcesses => "isolation.kernel.host_processes",
            Claim::KernelEnvClean => "isolation.kernel.env_clean",
            Claim::KernelOnlyStdioFds => "isolation.kernel.only_stdio_fds",
            Claim::KernelHostFilesHidden => "isolation.kernel.host_files_hidden",
            Claim::KernelNoHostDevices => "isolation.kernel.no_host_devices",
            Claim::KernelMountsStayInside => "isolation.kernel.mounts_stay_inside",
            Claim::KernelNothingPrivilegedWritten => "isolation.kernel.nothing_privileged_written",
            Claim::KernelNoTerminalInjection => "isolation.kernel.no_terminal_injection",
            Claim::HardwareOwnKernel => "isolation.hardware.own_kernel",
            Claim::LimitCpu => "limit.cpu",
            Claim::LimitMemory => "limit.memory",
            Claim::LimitPids => "limit.pids",
            Claim::LimitDisk => "limit.disk",
            Claim::NetworkDeny => "network.deny",
            Claim::NetworkNoRouteToHost => "network.no_route_to_host",
            Claim::NetworkNoHostSockets => "network.no_host_sockets",
            Claim::AllowlistListedNameReached => "network.allowlist.listed_name_reached",
            Claim::AllowlistUnlistedNameRefused => "network.allowlist.unlisted_name_refused",
            Claim::AllowlistAddressLiteralRefused => "network.allowlist.address_literal_refused",
            Claim::AllowlistNoDirectConnection => "network.allowlist.no_direct_connection",
            Claim::AllowlistNoProxyFails => "network.allowlist.without_proxy_fails",
            Claim::AllowlistRebindingRefused => "network.allowlist.rebinding_refused",
            Claim::AllowlistNoDns => "network.allowlist.no_dns",
            Claim::AllowlistHttpsConnect => "network.allowlist.https_connect",
            Claim::AllowlistSniMismatchRefused => "network.allowlist.sni_mismatch_refused",
            Claim::AllowlistRedirectRefused => "network.allowlist.redirect_refused",
            Claim::AllowlistHostUnreachable => "network.allowlist.host_unreachable",
            Claim::EgressFenceHostUnreachable => "network.egress_fence.host_unreachable",
            Claim::EgressFencePrivateUnreachable => "network.egress_fence.private_unreachable",
            Claim::SnapshotFilesystem => "snapshot.filesystem",
            Claim::FeatureFork => "feature.fork",
            Claim::FeaturePortForward => "feature.port_forward",
            Claim::FeaturePauseResume => "feature.pause_resume",
            Claim::FeatureTerminal => "feature.terminal",
            Claim::ProtocolCallBeforeHandshake => "protocol.call_before_handshake",
            Claim::ProtocolIncompatibleVersion => "protocol.incompatible_version",
            Claim::ProtocolUnknownMethod => "protocol.unknown_method",
            Claim::ProtocolInvalidParams => "protocol.invalid_params",
            Claim::ProtocolConcurrentCalls => "protocol.concurrent_calls",
            Claim::ProtocolLargeBinaryStream => "protocol.large_binary_stream",
            Claim::ProtocolCancellation => "protocol.cancellation",
        }
    }

    /// The claim with wire name `name`.
    pub fn from_name(name: &str) -> Option<Claim> {
        Claim::ALL.into_iter().find(|c| c.name() == name)
    }

    /// What in a declaration makes this claim.
    pub fn requirement(self) -> Requirement {
        use IsolationLevel::{Hardware, Kernel, Process};
        match self {
            Claim::ProcessCannotSignalCaller
            | Claim::ProcessEnvRoundTrip
            | Claim::ProcessCannotPtraceCaller
            | Claim::ProcessCannotReadCallerFiles
            | Claim::ProcessCannotWriteCallerFiles => Requirement::Isolation(Process),
            Claim::KernelHostProcesses
            | Claim::KernelEnvClean
            | Claim::KernelOnlyStdioFds
            | Claim::KernelHostFilesHidden
            | Claim::KernelNoHostDevices
            | Claim::KernelMountsStayInside
            | Claim::KernelNothingPrivilegedWritten
            | Claim::KernelNoTerminalInjection => Requirement::Isolation(Kernel),
            Claim::HardwareOwnKernel => Requirement::Isolation(Hardware),
            Claim::LimitCpu => Requirement::Limit(Limit::Cpu),
            Claim::LimitMemory => Requirement::Limit(Limit::Memory),
            Claim::LimitPids => Requirement::Limit(Limit::Pids),
            Claim::LimitDisk => Requirement::Limit(Limit::Disk),
            Claim::NetworkDeny | Claim::NetworkNoRouteToHost | Claim::NetworkNoHostSockets => Requirement::NetworkDeny,
            Claim::AllowlistListedNameReached
            | Claim::AllowlistUnlistedNameRefused
            | Claim::AllowlistAddressLiteralRefused
            | Claim::AllowlistNoDirectConnection
            | Claim::AllowlistNoProxyFails
            | Claim::AllowlistRebindingRefused
            | Claim::AllowlistNoDns
            | Claim::AllowlistHttpsConnect
            | Claim::AllowlistSniMismatchRefused
            | Claim::AllowlistRedirectRefused
            | Claim::AllowlistHostUnreachable => Requirement::NetworkAllowlist,
            Claim::EgressFenceHostUnreachable | Claim::EgressFencePrivateUnreachable => Requirement::EgressFence,
            Claim::SnapshotFilesystem => Requirement::Snapshot,
            Claim::FeatureFork => Requirement::Feature(Feature::Fork),
            Claim::FeaturePortForward => Requirement::Feature(Feature::PortForward),
            Claim::FeaturePauseResume => Requirement::Feature(Feature::PauseResume),
            Claim::FeatureTerminal => Requirement::Feature(Feature::Terminal),
            Claim::ProtocolCallBeforeHandshake
            | Claim::ProtocolIncompatibleVersion
            | Claim::ProtocolUnknownMethod
            | Claim::ProtocolInvalidParams
            | Claim::ProtocolConcurrentCalls
            | Claim::ProtocolLargeBinaryStream
            | Claim::ProtocolCancellation => Requirement::Protocol,
        }
    }

    /// The isolation level an isolation claim is about.
    pub fn level(self) -> Option<IsolationLevel> {
        match self.requirement() {
            Requirement::Isolation(level) => Some(level),
            _ => None,
        }
    }

    /// A protocol claim: every driver makes it, whatever it declares.
    pub fn is_protocol(self) -> bool {
        self.requirement() == Requirement::Protocol
    }

    /// Whether a sandbox declaring `caps` makes this claim.
    pub fn declared_by(self, caps: &SandboxCapabilities) -> bool {
        match self.requirement() {
            Requirement::Isolation(level) => caps.isolation >= level,
            Requirement::Limit(l) => caps.has(&Feature::ResourceLimits) && caps.limits.contains(&l),
            Requirement::NetworkDeny => caps.network_deny,
            Requirement::NetworkAllowlist => caps.has(&Feature::NetworkAllowlist),
            Requirement::EgressFence => caps.has(&Feature::EgressFence),
            Requirement::Snapshot => caps.snapshot != SnapshotSupport::None,
            Requirement::Feature(f) => caps.has(&f),
            Requirement::Protocol => true,
        }
    }

    /// The property claims, in report order.
    pub fn properties() -> impl Iterator<Item = Claim> {
        Claim::ALL.into_iter().filter(|c| !c.is_protocol())
    }

    /// The protocol claims, in report order.
    pub fn protocol() -> impl Iterator<Item = Claim> {
        Claim::ALL.into_iter().filter(|c| c.is_protocol())
    }

    /// The claim's place in a report.
    pub fn position(self) -> usize {
        Claim::ALL.iter().position(|c| *c == self).unwrap_or(usize::MAX)
    }
}

impl fmt::Display for Claim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Serialize for Claim {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_round_trip() {
        let mut seen = std::collections::BTreeSet::new();
        for c in Claim::ALL {
            assert!(seen.insert(c.name()), "{} twice", c.name());
            assert_eq!(Claim::from_name(c.name()), Some(c));
            assert_eq!(serde_json::to_value(c).unwrap(), c.name());
        }
        assert_eq!(Claim::from_name("isolation.kernel.nothing"), None);
    }

    #[test]
    fn the_report_order_goes_up_the_levels_with_protocol_claims_last() {
        let names: Vec<&str> = Claim::ALL.iter().map(|c| c.name()).collect();
        assert_eq!(names[..2], ["isolation.process.cannot_signal_caller", "isolation.process.env_round_trip"]);
        // Each level's checklist comes whole, below the next level's.
        let levels: Vec<IsolationLevel> = Claim::ALL.iter().filter_map(|c| c.level()).collect();
        assert!(levels.windows(2).all(|w| w[0] <= w[1]), "{names:?}");
        assert!(Claim::ALL[..levels.len()].iter().all(|c| c.level().is_some()), "{names:?}");
        let first_protocol = Claim::ALL.iter().position(|c| c.is_protocol()).unwrap();
        assert!(Claim::ALL[first_protocol..].iter().all(|c| c.is_protocol()), "{names:?}");
        for (i, c) in Claim::ALL.iter().enumerate() {
            assert_eq!(c.position(), i);
            // The name's prefix says what kind of claim it is.
            let prefix = match c.requirement() {
                Requirement::Isolation(_) => "isolation.",
                Requirement::Limit(_) => "limit.",
                Requirement::NetworkDeny => "network.",
                Requirement::NetworkAllowlist => "network.allowlist.",
                Requirement::EgressFence => "network.egress_fence.",
                Requirement::Snapshot => "snapshot.",
                Requirement::Feature(_) => "feature.",
                Requirement::Protocol => "protocol.",
            };
            assert!(c.name().starts_with(prefix), "{c}");
        }
    }

    #[test]
    fn each_isolation_claim_is_about_the_level_that_declares_it() {
        let levels = [IsolationLevel::None, IsolationLevel::Process, IsolationLevel::Kernel, IsolationLevel::Hardware];
        for c in Claim::properties() {
            let Some(level) = c.level() else {
                assert!(!c.name().starts_with("isolation."), "{c}");
                continue;
            };
            assert!(c.name().starts_with(&format!("isolation.{level}.")), "{c} is named for its level");
            for at in levels {
                let caps = SandboxCapabilities { isolation: at, ..SandboxCapabilities::nothing() };
                assert_eq!(c.declared_by(&caps), at >= level, "{c} at {at}");
            }
        }
    }

    #[test]
    fn a_declaration_of_nothing_claims_only_the_protocol() {
        let nothing = SandboxCapabilities::nothing();
        for c in Claim::ALL {
            assert_eq!(c.declared_by(&nothing), c.is_protocol(), "{c}");
        }
    }
}
