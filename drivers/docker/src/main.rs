//! `tinybox-driver-docker`: the Docker sandbox. A box is a detached,
//! hardened container held open by a shell loop; a command is one `docker
//! exec` with the caller's own streams; a snapshot is `docker commit`.
//!
//! Every docker command runs on the box's host through core's reverse
//! `host.run`: this driver never opens the daemon's socket and never spawns
//! anything itself, so Docker on a remote machine follows by composing it
//! with a remote host (ADR 0004). It keeps no state between processes: the
//! container's name is in the box's handle and its state is read from
//! docker every time.
//!
//! With its daemon on this machine it declares `network_allowlist`: an
//! allowlist box's container has no network, and its keepalive runs under
//! the static egress relay this driver embeds (`relay.rs`, ADR 0020).
//! Where the docker CLI talks to a daemon on its own machine it declares
//! `egress_fence`: an egress box joins a network namespace fenced before
//! it starts (`fence.rs`, ADR 0021).
//!
//! `tinybox run` of a box nothing needs after its command is one `docker
//! run --rm` (`run_once`, run_once.rs).
//!
//! A copy into or out of a running box goes through `docker cp` where the
//! daemon keeps it in the container's root (`archive`, archive.rs, ADR 0024).
//!
//! A stopped box is read from its newest snapshot (`snapshot_exec`, in
//! from_snapshot.rs): a short-lived read-only container from that image.
//!
//! It does not apply a disk limit (`--storage-opt size=` works on few
//! storage drivers) and does not declare pause/resume (no sandbox method
//! reaches it); core refuses both before this driver hears of them.

mod archive;
mod argv;
mod destroy;
mod env_file;
mod exec;
mod execs;
mod failure;
mod fence;
mod from_snapshot;
mod host;
mod relay;
mod run_once;
mod sandbox;
mod seccomp;
mod state;

use async_trait::async_trait;
use tinybox_sdk::model::{
    ExitStatus, Feature, IsolationLevel, Limit, SandboxCapabilities, SnapshotId, SnapshotSupport, SourceKind,
};
use tinybox_sdk::protocol::{
    ArchiveParams, ArchiveResult, BoxRef, CreateParams, CreateResult, DriverError, ExecParams, Health, InspectResult,
    RunOnceParams, SnapshotExecParams, SnapshotRmParams, SnapshotSweepParams, SnapshotSweepResult,
};
use tinybox_sdk::{DriverInfo, HostHandle, SandboxDriver};

use sandbox::{Config, Docker};

struct DockerSandbox {
    docker: Docker,
    /// Whether the boxes' docker daemon is on this machine, where core's
    /// egress proxies are (decided in the handshake).
    local: std::sync::OnceLock<bool>,
    /// Whether the daemon is on the box's host, whose addresses the fence
    /// reads, and this machine has the fence's tools for a box here
    /// (decided in the handshake).
    fenced: std::sync::OnceLock<bool>,
    /// Why there is no fence, when there is none (the refusal's words).
    no_fence: std::sync::OnceLock<String>,
    /// Core said it does not read the handshake's health (decided there).
    health_not_read: std::sync::OnceLock<bool>,
}

/// Whether boxes are made on this machine: core's host is not another one
/// (`host.remote` in the handshake), and the docker CLI talks to a daemon
/// through a local socket (`DOCKER_HOST` unset or `unix://`, no other
/// context), so a path on this machine is one the daemon can bind.
fn is_local(config: &serde_json::Value, docker_host: Option<&str>, docker_context: Option<&str>) -> bool {
    let remote = config.pointer("/host/remote").and_then(|r| r.as_bool()).unwrap_or(false);
    !remote && daemon_on_host(docker_host, docker_context)
}

/// Whether the docker CLI on the box's host talks to a daemon on that same
/// machine (a local socket, no other context): then the host's own
/// addresses, which the egress fence refuses, are the daemon's.
fn daemon_on_host(docker_host: Option<&str>, docker_context: Option<&str>) -> bool {
    let socket = docker_host.is_none_or(|h| h.is_empty() || h.starts_with("unix://"));
    let context = docker_context.is_none_or(|c| c.is_empty() || c == "default");
    socket && context
}

/// What this driver really enforces, and nothing else. An allowlist only
/// for boxes on this machine: the proxy runs beside core, and its socket
/// (and the relay) can be bound into a container here, not on another
/// machine. The egress fence only where the daemon is on the box's host.
fn capabilities(local: bool, fenced: bool) -> SandboxCapabilities {
    let mut features: std::collections::BTreeSet<Feature> = [
        Feature::Fork,
        Feature::PortForward,
        Feature::ResourceLimits,
        Feature::Terminal,
        Feature::SnapshotSweep,
        Feature::SnapshotExec,
        Feature::RunOnce,
        Feature::Archive,
    ]
    .into();
    if local {
        features.insert(Feature::NetworkAllowlist);
        // The proxy's directory, its CA bundle in it, is bound whole (ADR 0032).
        features.insert(Feature::SecretInjection);
    }
    if fenced {
        features.insert(Feature::EgressFence);
    }
    SandboxCapabilities {
        isolation: IsolationLevel::Kernel,
        snapshot: SnapshotSupport::Filesystem,
        features,
        limits: [Limit::Cpu, Limit::Memory, Limit::Pids].into(),
        network_deny: true,
        sources: [SourceKind::OciImage, SourceKind::LocalDir, SourceKind::Snapshot].into(),
        options: Default::default(),
    }
}

/// How long health waits for the daemon: the handshake must stay fast.
const DAEMON_PROBE: std::time::Duration = std::time::Duration::from_secs(2);

/// The handshake comes before any call to the host is possible, so health
/// says what this machine shows: whether a docker CLI is on PATH and
/// whether its daemon (`DOCKER_HOST`'s, inherited from core) answers
/// `docker version` within [`DAEMON_PROBE`]. Read-only; a sandbox that is
/// not healthy is never picked, and a create names the problem. Without
/// `probe` (core does not read this health: it chose docker already, see
/// `core_feature::HEALTH_NOT_READ`) the daemon is not asked — each
/// `tinybox exec` would otherwise pay a `docker version` — and a daemon
/// that does not answer is named by the command that meets it (failure.rs).
fn health(probe: bool) -> Health {
    let found = std::env::var_os("PATH")
        .and_then(|p| std::env::split_paths(&p).map(|d| d.join("docker")).find(|d| d.is_file()));
    health_of(found, probe)
}

/// [`health`] with the docker CLI found at `found`.
fn health_of(found: Option<std::path::PathBuf>, probe: bool) -> Health {
    let Some(cli) = found else {
        return Health::unavailable("no docker CLI on PATH; install docker (docker.io on Debian)");
    };
    if !probe {
        return Health::ok_with(format!("docker CLI at {}; the daemon was not asked", cli.display()));
    }
    match probe_daemon(&cli, DAEMON_PROBE) {
        Ok(version) => Health::ok_with(format!("docker daemon {version} answers (docker CLI at {})", cli.display())),
        Err(why) => Health::unavailable(format!(
            "the docker daemon does not answer: {why}; start it, or set DOCKER_HOST to one that runs"
        )),
    }
}

/// The daemon's version, or why it did not give one within `bound`.
fn probe_daemon(cli: &std::path::Path, bound: std::time::Duration) -> Result<String, String> {
    use std::process::{Command, Stdio};
    let child = Command::new(cli)
        .args(["version", "--format", "{{.Server.Version}}"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", cli.display()))?;
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let out = match rx.recv_timeout(bound) {
        Ok(out) => out.map_err(|e| format!("docker version failed: {e}"))?,
        Err(_) => {
            if let Some(pid) = rustix::process::Pid::from_raw(pid as i32) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
            return Err(format!("docker version gave no answer within {} s", bound.as_secs()));
        }
    };
    let version = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    if out.status.success() && !version.is_empty() {
        return Ok(version);
    }
    let said = String::from_utf8_lossy(&out.stderr);
    let said: Vec<&str> = said.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    Err(if said.is_empty() { format!("docker version ended with {}", out.status) } else { said.join(" | ") })
}

#[async_trait]
impl SandboxDriver for DockerSandbox {
    fn configure(&self, host: &HostHandle) {
        let env = |name: &str| std::env::var(name).ok();
        let (docker_host, context) = (env("DOCKER_HOST"), env("DOCKER_CONTEXT"));
        let local = is_local(host.config(), docker_host.as_deref(), context.as_deref());
        let _ = self.local.set(local);
        // The fence container runs this machine's iptables-restore (its
        // /usr bound in): without it here, no fence is declared, and plain
        // egress is refused naming what to install. Another host's tools
        // cannot be seen from here; a box there that lacks them fails at create.
        let missing = if local { tinybox_sdk::fence::missing_tools(&[]) } else { None };
        let why = match (daemon_on_host(docker_host.as_deref(), context.as_deref()), missing) {
            (false, _) => Some(
                "the docker CLI talks to a daemon on another machine (DOCKER_HOST or a docker context), whose own \
                 addresses it cannot read"
                    .to_owned(),
            ),
            (true, Some(missing)) => Some(format!("its fence needs iptables on this machine (install {missing})")),
            (true, None) => None,
        };
        let _ = self.fenced.set(why.is_none());
        let _ = self.no_fence.set(why.unwrap_or_default());
        let _ = self.health_not_read.set(host.core_has(tinybox_sdk::protocol::core_feature::HEALTH_NOT_READ));
    }

    fn info(&self) -> DriverInfo {
        let probe = !self.health_not_read.get().copied().unwrap_or(false);
        DriverInfo { name: "docker".into(), version: env!("CARGO_PKG_VERSION").into(), health: health(probe) }
    }

    fn capabilities(&self) -> SandboxCapabilities {
        capabilities(self.local.get().copied().unwrap_or(false), self.fenced.get().copied().unwrap_or(false))
    }

    async fn create(&self, host: &HostHandle, params: CreateParams) -> Result<CreateResult, DriverError> {
        let fenced = self.fenced.get().copied().unwrap_or(false);
        if params.network == Some(tinybox_sdk::model::NetworkPolicy::Egress) && !fenced {
            let why = self.no_fence.get().map(String::as_str).unwrap_or("it was not configured");
            return Err(DriverError::unavailable(format!("the docker sandbox cannot fence egress here: {why}")));
        }
        // The relay is written only where it can be bound: on this machine.
        let local = self.local.get().copied().unwrap_or(false);
        let relay = match (params.network, host.state_dir()) {
            (Some(tinybox_sdk::model::NetworkPolicy::Allowlist), Some(state)) if local => {
                Some(relay::install(state).map_err(DriverError::failed)?)
            }
            _ => None,
        };
        self.docker.create_with(host, params, relay.as_deref()).await
    }

    async fn exec(&self, host: &HostHandle, params: ExecParams) -> Result<ExitStatus, DriverError> {
        self.docker.exec(host, params).await
    }

    async fn destroy(&self, host: &HostHandle, target: BoxRef) -> Result<(), DriverError> {
        self.docker.destroy(host, target).await
    }

    async fn inspect(&self, host: &HostHandle, target: BoxRef) -> Result<InspectResult, DriverError> {
        self.docker.inspect(host, target).await
    }

    async fn snapshot(&self, host: &HostHandle, target: BoxRef) -> Result<SnapshotId, DriverError> {
        self.docker.snapshot(host, target).await
    }

    async fn snapshot_rm(&self, host: &HostHandle, params: SnapshotRmParams) -> Result<(), DriverError> {
        self.docker.snapshot_rm(host, params).await
    }

    async fn snapshot_sweep(
        &self,
        host: &HostHandle,
        params: SnapshotSweepParams,
    ) -> Result<SnapshotSweepResult, DriverError> {
        self.docker.snapshot_sweep(host, params).await
    }

    async fn snapshot_exec(&self, host: &HostHandle, params: SnapshotExecParams) -> Result<ExitStatus, DriverError> {
        from_snapshot::snapshot_exec(host, params).await
    }

    async fn run_once(&self, host: &HostHandle, params: RunOnceParams) -> Result<ExitStatus, DriverError> {
        self.docker.run_once(host, params).await
    }

    async fn archive(&self, host: &HostHandle, params: ArchiveParams) -> Result<ArchiveResult, DriverError> {
        archive::archive(host, params).await
    }

    async fn cancel(&self, host: &HostHandle, exec_id: &str) -> Result<(), DriverError> {
        self.docker.cancel(host, exec_id).await
    }
}

fn main() {
    if std::env::args().nth(1).as_deref() == Some("--version") {
        println!("tinybox-driver-docker {}", env!("CARGO_PKG_VERSION"));
        return;
    }
    tinybox_sdk::run_sandbox_main(DockerSandbox {
        docker: Docker::new(Config::from_env()),
        local: Default::default(),
        fenced: Default::default(),
        no_fence: Default::default(),
        health_not_read: Default::default(),
    })
}

#[cfg(test)]
mod main_tests {
    use super::*;

    #[test]
    fn the_daemon_is_asked_only_when_core_reads_the_health() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let (cli, asked) = (dir.path().join("docker"), dir.path().join("asked"));
        let script = format!("#!/bin/sh\necho \"$@\" >> {}\necho 20.10.24\n", asked.display());
        std::fs::write(&cli, script).unwrap();
        std::fs::set_permissions(&cli, std::fs::Permissions::from_mode(0o755)).unwrap();
        let unread = health_of(Some(cli.clone()), false);
        assert!(unread.ok && unread.detail.as_deref().is_some_and(|d| d.contains("not asked")), "{unread:?}");
        assert!(!asked.exists(), "the daemon was asked though core reads no health");
        let read = health_of(Some(cli), true);
        assert!(read.ok && read.detail.as_deref().is_some_and(|d| d.contains("20.10.24")), "{read:?}");
        assert_eq!(std::fs::read_to_string(&asked).unwrap(), "version --format {{.Server.Version}}\n");
        assert!(!health_of(None, false).ok, "no CLI is unhealthy either way");
    }

    #[test]
    fn the_declaration_is_consistent_and_claims_no_disk_limit_or_pause() {
        let caps = capabilities(true, true);
        caps.check_consistent().unwrap();
        assert!(caps.has(&Feature::EgressFence));
        assert!(caps.is_suitable_for_untrusted_code());
        assert!(!caps.limits.contains(&Limit::Disk));
        assert!(!caps.has(&Feature::PauseResume));
        assert!(!caps.sources.contains(&SourceKind::GitRepo));
        assert!(caps.has(&Feature::NetworkAllowlist));
        capabilities(false, true).check_consistent().unwrap();
        assert!(!capabilities(false, true).has(&Feature::NetworkAllowlist), "the proxy's socket is on this machine");
        assert!(capabilities(false, true).has(&Feature::EgressFence), "an ssh host's own daemon is fenced there");
        assert!(!capabilities(false, false).has(&Feature::EgressFence), "a daemon elsewhere is not");
    }

    #[test]
    fn an_allowlist_is_declared_only_for_a_daemon_on_this_machine() {
        let here = serde_json::json!({ "host": { "remote": false } });
        let ssh = serde_json::json!({ "host": { "remote": true } });
        assert!(is_local(&here, None, None));
        assert!(is_local(&serde_json::Value::Null, Some("unix:///run/tinybox-test-docker.sock"), Some("default")));
        assert!(!is_local(&ssh, None, None), "a box on an ssh host");
        assert!(!is_local(&here, Some("tcp://10.0.0.2:2376"), None), "a daemon reached over tcp");
        assert!(!is_local(&here, Some("ssh://builder"), None));
        assert!(!is_local(&here, None, Some("remote-ctx")), "a docker context may name another machine");
        assert!(daemon_on_host(None, None) && daemon_on_host(Some("unix:///run/d.sock"), Some("default")));
        assert!(!daemon_on_host(Some("tcp://10.0.0.2:2376"), None) && !daemon_on_host(None, Some("remote-ctx")));
    }
}
