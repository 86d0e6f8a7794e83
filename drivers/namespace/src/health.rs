//! What the handshake says about this machine. Only cheap, local checks:
//! every tinybox command starts the driver and pays for them. Whether user
//! namespaces are allowed is probed when a box is created, on its host.

use tinybox_sdk::protocol::Health;

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file()))
}

pub fn check() -> Health {
    if !on_path("bwrap") {
        return Health::unavailable("bwrap is not installed; install the bubblewrap package");
    }
    let egress = if on_path("slirp4netns") { "egress via slirp4netns" } else { "no egress (install slirp4netns)" };
    Health::ok_with(format!("bwrap found; {egress}; no resource limits (no systemd user manager to delegate a cgroup)"))
}
