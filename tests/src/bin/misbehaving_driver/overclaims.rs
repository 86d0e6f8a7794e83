//! `overclaims`: a sandbox that declares hardware isolation, network deny and
//! a pids limit, yet runs every command on its host unconfined through
//! `host.run` (it is `relay` with a false declaration) and applies no limit.
//! The conformance kit must catch each of these claims with its probe.

use tinybox_sdk::model::{Feature, IsolationLevel, Limit, SandboxCapabilities, SourceKind};

use crate::Invocation;
use crate::relay::Relay;

pub fn overclaims(me: Invocation) -> ! {
    let capabilities = SandboxCapabilities {
        isolation: IsolationLevel::Hardware,
        features: [Feature::ResourceLimits].into(),
        limits: [Limit::Pids].into(),
        network_deny: true,
        sources: [SourceKind::LocalDir].into(),
        ..SandboxCapabilities::nothing()
    };
    tinybox_sdk::run_sandbox_main(Relay { me, capabilities, wrap: Vec::new(), clean_env: false })
}
