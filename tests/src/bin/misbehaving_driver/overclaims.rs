//! `overclaims`: a sandbox that declares hardware isolation, network deny,
//! an egress fence, a pids limit and terminals, yet runs every command on its host
//! unconfined through `host.run` (it is `relay` with a false declaration),
//! applies no limit and runs a command asked for on a terminal without one.
//! The conformance kit must catch each of these claims with its probe.

use tinybox_sdk::model::{Feature, IsolationLevel, Limit, SandboxCapabilities, SourceKind};

use crate::Invocation;
use crate::relay::Relay;

pub fn overclaims(me: Invocation) -> ! {
    let capabilities = SandboxCapabilities {
        isolation: IsolationLevel::Hardware,
        features: [Feature::ResourceLimits, Feature::Terminal, Feature::EgressFence].into(),
        limits: [Limit::Pids].into(),
        network_deny: true,
        sources: [SourceKind::LocalDir].into(),
        ..SandboxCapabilities::nothing()
    };
    tinybox_sdk::run_sandbox_main(Relay { me, capabilities, wrap: Vec::new(), clean_env: false, drop_tty: true })
}
