//! `unconfined-ns`: the security issue's negative control. It declares
//! kernel isolation and network deny, and runs each command as the brief
//! `unshare --user --map-root-user --pid --fork --mount-proc --net` would —
//! its own pid, mount and network namespaces and a clean environment, so
//! the old four-item checklist passed it — with no filesystem confinement
//! at all: the box's root is the host's root, reading /etc/shadow and
//! writing the host's files. The kit's filesystem claims must catch it.

use tinybox_sdk::model::{IsolationLevel, SandboxCapabilities, SourceKind};

use crate::Invocation;
use crate::relay::Relay;

pub fn unconfined_ns(me: Invocation) -> ! {
    let capabilities = SandboxCapabilities {
        isolation: IsolationLevel::Kernel,
        network_deny: true,
        sources: [SourceKind::LocalDir].into(),
        ..SandboxCapabilities::nothing()
    };
    let wrap = ["unshare", "--user", "--map-root-user", "--pid", "--fork", "--mount-proc", "--net", "--"];
    let wrap = wrap.into_iter().map(str::to_owned).collect();
    tinybox_sdk::run_sandbox_main(Relay { me, capabilities, wrap, clean_env: true, drop_tty: false })
}
