//! Starting the one bwrap that holds a namespace image box for its life
//! (docs/adr/0029-namespace-image-boxes.md): its arguments ([`Holder`])
//! and its start, detached from the create that makes it ([`start`]).

use std::path::Path;

use tinybox_sdk::Host;
use tinybox_sdk::capture::capture;
use tinybox_sdk::protocol::DriverError;
use tinybox_sdk::protocol::egress::EgressEndpoint;

/// Where an allowlist image box sees what it may of its proxy (its socket,
/// and its CA bundle at `CA_BUNDLE_IN_BOX`, which is in it).
pub const PROXY_DIR_IN_BOX: &str = "/run/tinybox/egress";

use crate::image_box::{self, AGENT_IN_BOX, CTL_IN_BOX, Dirs, ImageHandle, SOCKET};
use crate::{overlay, seccomp, snapshots};

/// The bwrap arguments that hold an image box: its root the overlay at
/// `merged`, the agent as its command. The same boundary as every
/// namespace command (bwrap.rs), less what a place must keep: no
/// `--die-with-parent` (the box outlives the create that started it;
/// [`kill`] ends it), and the root is writable.
pub struct Holder<'a> {
    pub dirs: &'a Dirs,
    pub agent: &'a Path,
    pub share_net: bool,
    pub cgroups: &'a [String],
    pub cgroup_v2: bool,
    /// An allowlist box's proxy: its socket (and, with secrets, its CA
    /// bundle) bound read-only, and the agent relaying the box's loopback
    /// port to it.
    pub egress: Option<&'a EgressEndpoint>,
}

impl Holder<'_> {
    pub fn args(&self) -> Vec<String> {
        let mut a: Vec<String> = Vec::with_capacity(64);
        let mut push = |items: &[&str]| a.extend(items.iter().map(|s| s.to_string()));
        push(&["--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup"]);
        if !self.share_net {
            push(&["--unshare-net"]);
        }
        push(&["--new-session", "--cap-drop", "ALL", "--disable-userns"]);
        push(&["--seccomp", crate::bwrap::SECCOMP_FD]);
        let merged = self.dirs.merged().display().to_string();
        push(&["--bind", &merged, "/"]);
        // /proc/1 is bwrap's init, the one process the seccomp program does not filter.
        push(&["--proc", "/proc", "--tmpfs", "/proc/1", "--dev", "/dev", "--tmpfs", "/run"]);
        let (agent, ctl) = (self.agent.display().to_string(), self.dirs.ctl().display().to_string());
        push(&["--ro-bind", &agent, AGENT_IN_BOX, "--bind", &ctl, CTL_IN_BOX]);
        if self.share_net {
            // The egress namespace's resolver is slirp4netns's, as for every egress box.
            push(&["--ro-bind-try", "/etc/resolv.conf", "/etc/resolv.conf"]);
        }
        for dir in self.cgroups {
            if let Some(inside) = crate::cgroup::in_box(dir, self.cgroup_v2) {
                push(&["--ro-bind", dir, &inside]);
            }
        }
        if let Some(dir) = self.egress.and_then(|e| e.socket.parent()) {
            // What the box may see of its proxy, bound whole: a proxy started
            // again is found at the same path (a bound socket file would keep
            // the dead one), with its CA bundle for a box with secrets (ADR 0032).
            push(&["--ro-bind", &dir.to_string_lossy(), PROXY_DIR_IN_BOX]);
        }
        push(&["--chdir", "/", "--clearenv", "--", AGENT_IN_BOX, "--listen"]);
        a.push(format!("{CTL_IN_BOX}/{SOCKET}"));
        if let Some(egress) = self.egress {
            let socket = egress.socket.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            a.extend(["--relay".to_owned(), egress.port.to_string(), format!("{PROXY_DIR_IN_BOX}/{socket}")]);
        }
        a
    }
}

/// Everything the holder of one image box needs.
pub struct Start<'a> {
    pub dirs: &'a Dirs,
    pub image: &'a ImageHandle,
    /// The driver's state directory on this machine (the agent, the seccomp program).
    pub local: &'a Path,
    /// The snapshot whose layer the box starts from.
    pub seed: Option<&'a Path>,
    pub share_net: bool,
    pub cgroups: &'a [String],
    pub cgroup_v2: bool,
    pub arch: seccomp::Arch,
    pub egress: Option<&'a EgressEndpoint>,
}

/// Starts the one bwrap that holds an image box, detached from this create
/// (its own session, its output in the box's log), and waits until its
/// agent answers. `wrap` puts the start shell around the holder's command
/// (given the seccomp program's file): outermost first, the start shell
/// (cgroups, the seccomp program on descriptor 3), the egress namespace
/// when the box has one, the overlay root (overlay.rs), bwrap, the agent.
pub async fn start(
    host: &dyn Host,
    s: Start<'_>,
    wrap: impl FnOnce(Vec<String>, &Path) -> Vec<String>,
) -> Result<(), DriverError> {
    let dirs = s.dirs;
    if let Some(snapshot) = s.seed {
        snapshots::seed(host, snapshot, dirs).await?;
    }
    let shown = |p: &Path| p.display().to_string();
    dirs.make()
        .map_err(|e| DriverError::failed(format!("cannot make the box's layers in {}: {e}", shown(&dirs.root))))?;
    let agent = image_box::agent_file(s.local)?;
    let program = seccomp::program_file(s.local, s.arch)
        .ok_or_else(|| DriverError::failed(format!("cannot write the seccomp program in {}", s.local.display())))?;
    let me = std::env::current_exe()
        .map_err(|e| DriverError::failed(format!("cannot find this driver's own executable: {e}")))?;
    let lower = shown(&s.image.rootfs);
    for p in [&lower, &shown(&dirs.root)] {
        if let Some(why) = overlay::refuse(p) {
            return Err(DriverError::invalid(why));
        }
    }
    let holder = Holder {
        dirs,
        agent: &agent,
        share_net: s.share_net,
        cgroups: s.cgroups,
        cgroup_v2: s.cgroup_v2,
        egress: s.egress,
    };
    let mut inner = overlay::unshare_argv(rustix::process::geteuid().is_root());
    inner.extend([
        shown(&me),
        "--overlay-root".to_owned(),
        lower,
        shown(&dirs.upper()),
        shown(&dirs.work()),
        shown(&dirs.merged()),
        "--".to_owned(),
        "bwrap".to_owned(),
    ]);
    inner.extend(holder.args());
    let mut argv = vec!["sh".to_owned(), "-c".to_owned(), HOLD.to_owned(), "tinybox-hold".to_owned()];
    argv.push(shown(&dirs.log()));
    argv.extend(wrap(inner, &program));
    let env = [("PATH".to_owned(), crate::bwrap::BWRAP_PATH.to_owned())].into();
    let out = capture(host, argv, env, b"").await?;
    if !out.success() {
        return Err(DriverError::failed(format!(
            "cannot start the box ({}): {} {}",
            out.status,
            out.stderr_text().trim(),
            dirs.log_tail()
        )));
    }
    let pid =
        out.stdout_text().trim().parse::<i32>().map_err(|_| {
            DriverError::failed(format!("starting the box printed {:?}, not its pid", out.stdout_text()))
        })?;
    image_box::wait_ready(dirs, pid).await
}

/// Starts "$@" in a session of its own that outlives this shell, its
/// output in the log `$1`, and prints its pid (what it execs into ends as
/// the box's first bwrap): descriptor 4 carries it, closed in "$@", which
/// holds nothing of this run's.
const HOLD: &str = r#"log=$1; shift
exec 4>&1 </dev/null >>"$log" 2>&1
setsid "$@" 4>&- &
echo $! >&4
"#;

#[cfg(test)]
#[path = "holder_tests.rs"]
mod tests;
