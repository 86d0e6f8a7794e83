//! `tinybox-driver-namespace`: rootless kernel isolation with bubblewrap.
//!
//! Each command is a fresh `bwrap` over the box's workspace: user, pid, ipc,
//! uts and cgroup namespaces always, and a network namespace with nothing but
//! loopback unless the box may reach out, in which case slirp4netns gives it
//! egress without the host's loopback, or, for an allowlist, stays
//! loopback only with core's egress proxy relayed into it (ADR 0020). There is no long-running sandbox
//! process, so nothing written outside /workspace survives a command — which
//! is why this driver declares no snapshots and no forking.
//!
//! It runs nothing itself: every command, bwrap included, goes to the box's
//! host through core (`host.run`), so the same driver confines boxes on a
//! remote host.
//!
//! Nothing a box writes reaches the host with privilege (ADR 0015): a
//! seccomp program refuses setuid and setgid bits, no nested user namespace
//! can grant file capabilities, and a root caller's box runs as its
//! workspace's owner. Resource limits are a cgroup per box, declared only
//! where the caller can make one: root, or a caller given a delegated
//! cgroup (see `cgroup::support` and `delegated.rs`).

mod bwrap;
mod cgroup;
mod health;
mod holder;
mod image_box;
mod overlay;
mod probe;
mod sandbox;
mod seccomp;
mod snapshots;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::OnceLock;

use async_trait::async_trait;
use tinybox_sdk::model::{
    ExitStatus, Feature, IsolationLevel, SandboxCapabilities, SnapshotId, SnapshotSupport, SourceKind, TtySize,
};
use tinybox_sdk::protocol::{
    BoxRef, CreateParams, CreateResult, DriverError, ExecParams, InspectResult, SnapshotRmParams, SnapshotSweepParams,
    SnapshotSweepResult,
};
use tinybox_sdk::{DriverInfo, HostHandle, SandboxDriver};

struct Namespace {
    /// The limits this caller can apply here, decided in the handshake.
    limits: OnceLock<cgroup::Support>,
    /// Boxes run on another machine (core says so in the handshake).
    remote: OnceLock<bool>,
    /// Commands running in image boxes, through their agents.
    running: tinybox_agent::host::Running,
}

impl Namespace {
    fn support(&self) -> cgroup::Support {
        self.limits
            .get()
            .cloned()
            .unwrap_or_else(|| cgroup::Support::none("no resource limits (asked before the handshake)"))
    }

    /// Where this store's boxes keep what the driver makes for them: boxes
    /// given no workspace get one under the store's state directory on this
    /// machine, or under `.tinybox/namespace` in the login directory of
    /// another (core says which in the handshake), as core's own synced
    /// workspaces are; box cgroups go where the handshake found room.
    fn site(&self, host: &HostHandle) -> sandbox::Site {
        let store = host.state_dir().map(|d| d.display().to_string()).unwrap_or_default();
        let remote = host.config().pointer("/host/remote").and_then(|r| r.as_bool()).unwrap_or(false);
        let workspaces = if remote {
            Some(".tinybox/namespace".to_owned())
        } else {
            host.state_dir().map(|d| d.join("workspaces").display().to_string())
        };
        let support = self.support();
        let cgroups = sandbox::Cgroups { unified: support.unified, parents: support.parents };
        let local = if remote { None } else { host.state_dir().map(Path::to_path_buf) };
        sandbox::Site { store, workspaces, cgroups, local }
    }
}

/// A terminal wherever the box runs: on this machine the box takes the
/// terminal its host made in a session of its own; on another, it stays in
/// the session its host (sshd) made around the terminal made for this run
/// (`bwrap::Terminal`, docs/adr/0025). An allowlist only on this machine
/// (see below).
fn features(limits: bool, remote: bool, fence: bool) -> std::collections::BTreeSet<Feature> {
    // Every egress box is behind the fence, wherever it runs (netwrap.sh).
    // This machine's tools for it are checked here: one that lacks them
    // does not declare the fence (plain egress is refused before dispatch,
    // and nothing else of the declaration is held to it). Another
    // machine's cannot be seen from here: a host without them refuses the
    // box at create instead.
    let mut features: std::collections::BTreeSet<Feature> = [Feature::Terminal].into();
    if fence {
        features.insert(Feature::EgressFence);
    }
    if limits {
        features.insert(Feature::ResourceLimits);
    }
    if !remote {
        // Core hands an image box the image's root from its own store;
        // such a box forks from its snapshot, which its box alone finds.
        features.extend([Feature::ImageRoot, Feature::Fork, Feature::SnapshotSweep]);
        // The proxy runs beside core, on this machine: its socket can be
        // bound into a box here, not into one on another machine.
        features.insert(Feature::NetworkAllowlist);
        // Its proxy's CA bundle is bound in beside the socket (bwrap.rs, ADR 0032).
        features.insert(Feature::SecretInjection);
    }
    features
}

#[async_trait]
impl SandboxDriver for Namespace {
    fn configure(&self, host: &HostHandle) {
        // Boxes on another machine (core says so in the handshake) get no
        // limits: whether that machine's cgroups are writable, and by whom,
        // is not something this process can see.
        let _ = self.limits.set(limits_here(host));
        let _ = self.remote.set(cgroup::is_remote(host.config()));
    }

    fn info(&self) -> DriverInfo {
        let health = health::check(&self.support().why);
        DriverInfo { name: "namespace".into(), version: env!("CARGO_PKG_VERSION").into(), health }
    }

    fn capabilities(&self) -> SandboxCapabilities {
        let limits = self.support().limits;
        SandboxCapabilities {
            isolation: IsolationLevel::Kernel,
            // Of boxes made from an image (ADR 0029); a box made without
            // one says at create that it takes none.
            snapshot: match self.remote.get().copied().unwrap_or(true) {
                true => SnapshotSupport::None,
                false => SnapshotSupport::Filesystem,
            },
            features: {
                let remote = self.remote.get().copied().unwrap_or(true);
                features(!limits.is_empty(), remote, remote || health::fence_missing().is_none())
            },
            limits,
            network_deny: true,
            // Images only on this machine, where core's image store is.
            sources: match self.remote.get().copied().unwrap_or(true) {
                true => [SourceKind::LocalDir].into(),
                false => [SourceKind::LocalDir, SourceKind::OciImage, SourceKind::Snapshot].into(),
            },
            options: Default::default(),
        }
    }

    async fn create(&self, host: &HostHandle, p: CreateParams) -> Result<CreateResult, DriverError> {
        sandbox::create(host, &self.site(host), p).await
    }

    async fn exec(&self, host: &HostHandle, p: ExecParams) -> Result<ExitStatus, DriverError> {
        // On this machine the program is a file of the driver's, opened
        // without a fork; on another, fed through a pipe.
        let remote = self.remote.get().copied().unwrap_or(true);
        let programs = if remote { None } else { host.state_dir() };
        sandbox::exec(host, p, programs, remote, &self.running).await
    }

    async fn destroy(&self, host: &HostHandle, target: BoxRef) -> Result<(), DriverError> {
        sandbox::destroy(host, &self.site(host), target).await
    }

    async fn inspect(&self, host: &HostHandle, target: BoxRef) -> Result<InspectResult, DriverError> {
        sandbox::inspect(host, &self.site(host), target).await
    }

    async fn snapshot(&self, host: &HostHandle, target: BoxRef) -> Result<SnapshotId, DriverError> {
        sandbox::snapshot(host, &self.site(host), target).await
    }

    async fn snapshot_rm(&self, host: &HostHandle, params: SnapshotRmParams) -> Result<(), DriverError> {
        let local = self.site(host).local.ok_or_else(|| DriverError::not_found("no snapshots on another machine"))?;
        snapshots::remove(host, &local, &params).await
    }

    async fn snapshot_sweep(
        &self,
        host: &HostHandle,
        params: SnapshotSweepParams,
    ) -> Result<SnapshotSweepResult, DriverError> {
        match self.site(host).local {
            Some(local) => snapshots::sweep(host, &local, &params).await,
            None => Ok(SnapshotSweepResult::default()),
        }
    }

    /// An image box's command runs under its agent, not `host.run`: its
    /// cancel and its terminal's size go there (other commands' are core's).
    async fn cancel(&self, _host: &HostHandle, exec_id: &str) -> Result<(), DriverError> {
        tinybox_agent::host::cancel(&self.running, exec_id);
        Ok(())
    }

    async fn resize(&self, _host: &HostHandle, exec_id: &str, size: TtySize) -> Result<(), DriverError> {
        self.running.resize(exec_id, size.rows, size.cols);
        Ok(())
    }
}

/// The limits this caller can apply on this machine: root's, or those of
/// a cgroup delegated to it (its own, or `cgroup_parent` in config.json
/// in the driver's state directory).
fn limits_here(host: &HostHandle) -> cgroup::Support {
    let root = Path::new("/sys/fs/cgroup");
    // Another machine's limits are decided before any local setting is read.
    if rustix::process::geteuid().is_root() || cgroup::is_remote(host.config()) {
        return cgroup::for_host(host.config(), root, &cgroup::Caller::Root);
    }
    let parent = match cgroup::delegated::parent_setting(host.state_dir()) {
        Ok(parent) => parent,
        Err(why) => return cgroup::Support::none(&format!("no resource limits: {why}")),
    };
    let proc_cgroup = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let user = cgroup::delegated::Caller {
        uid: rustix::process::geteuid().as_raw(),
        proc_cgroup: &proc_cgroup,
        parent: parent.as_deref(),
    };
    cgroup::for_host(host.config(), root, &cgroup::Caller::Unprivileged(user))
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("--version") => {
            println!("tinybox-driver-namespace {}", env!("CARGO_PKG_VERSION"));
            return;
        }
        // For benchmarks: the exact bwrap arguments a denied-network box over
        // WORKSPACE, with the cgroup directories CGROUP..., runs a command
        // with (the command itself follows), and the seccomp program bwrap
        // reads from descriptor 3, written to SECCOMP_FILE (run it as
        // `bwrap ARGS CMD 3<SECCOMP_FILE`).
        Some("--print-bwrap-args") if args.len() >= 4 => {
            let machine = std::process::Command::new("uname")
                .arg("-m")
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
                .unwrap_or_default();
            let Some(arch) = seccomp::Arch::from_uname(&machine) else {
                eprintln!("tinybox-driver-namespace: no seccomp program for {machine}");
                std::process::exit(1);
            };
            if let Err(e) = std::fs::write(&args[3], seccomp::bytes(arch)) {
                eprintln!("tinybox-driver-namespace: cannot write {}: {e}", args[3]);
                std::process::exit(1);
            }
            let env = BTreeMap::new();
            let cgroups = &args[4..];
            let layout = bwrap::Layout {
                workspace: &args[2],
                cwd: None,
                env: &env,
                share_net: false,
                cgroups,
                cgroup_v2: Path::new("/sys/fs/cgroup/cgroup.controllers").exists(),
                terminal: bwrap::Terminal::None,
                egress: None,
            };
            let words = bwrap::args(&layout, &[]);
            println!("{}", words.iter().map(|w| bwrap::shell_word(w)).collect::<Vec<_>>().join(" "));
            return;
        }
        // An image box's root, mounted before bwrap starts (overlay.rs):
        // here, before any thread exists.
        Some("--overlay-root") => std::process::exit(overlay::main(&args[2..])),
        _ => {}
    }
    tinybox_sdk::run_sandbox_main(Namespace {
        limits: OnceLock::new(),
        remote: OnceLock::new(),
        running: Default::default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_terminal_is_declared_wherever_the_box_runs_an_allowlist_only_on_this_machine() {
        assert!(features(false, false, true).contains(&Feature::Terminal));
        assert!(features(false, true, true).contains(&Feature::Terminal), "ssh hosts too (ADR 0025)");
        assert!(features(false, false, true).contains(&Feature::NetworkAllowlist));
        assert!(
            !features(false, true, true).contains(&Feature::NetworkAllowlist),
            "the proxy's socket is on this machine"
        );
        assert_eq!(
            features(true, true, true),
            [Feature::ResourceLimits, Feature::EgressFence, Feature::Terminal].into()
        );
    }

    #[test]
    fn a_machine_without_the_fence_s_tools_declares_no_fence_and_keeps_the_rest() {
        let without = features(true, false, false);
        assert!(!without.contains(&Feature::EgressFence));
        let with = features(true, false, true);
        assert_eq!(with.difference(&without).collect::<Vec<_>>(), [&Feature::EgressFence]);
    }
}
