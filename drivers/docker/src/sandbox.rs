//! What each sandbox method does, as docker commands run on the box's host.
//! Stateless between processes: what a later call needs is in the box's
//! handle, and the container's state is always read from docker itself.

use std::path::Path;

use serde::{Deserialize, Serialize};
use tinybox_sdk::model::{BoxId, NetworkPolicy, PortMapping, SnapshotId, WorkspaceSource};
use tinybox_sdk::protocol::{
    BoxRef, CreateParams, CreateResult, DriverError, InspectResult, SnapshotRmParams, SnapshotSweepParams,
    SnapshotSweepResult,
};

use crate::argv::{self, RunSpec};
use crate::execs::Execs;
use crate::failure::{self, Cause};
use crate::host::{Capture, Host};
use crate::state;

/// The smallest pids limit a box may have. A box at rest holds 2 (the
/// keepalive shell and its sleep) and a command 3 more (its wrapper, its
/// subshell, its lifeline watcher); starting one, runc's init briefly
/// holds several threads of its own, which count too. Measured on the
/// reference machine: at 1 the container exits at once; up to 9, `true`
/// failed now and then to start ("read init-p: connection reset by
/// peer"); from 10, none failed in 30 runs. 16 leaves a margin for a
/// command and a pipeline.
pub const MIN_PIDS: u64 = 16;

/// How long removing an interrupted create waits for the daemon to finish
/// a container it is still making (its layer, on a loaded host), and how
/// often it looks meanwhile.
pub(crate) const CLAIM_WAIT: std::time::Duration = std::time::Duration::from_secs(60);
pub(crate) const CLAIM_POLL: std::time::Duration = std::time::Duration::from_millis(100);

/// How long `inspect` waits for a commit's pause or a removal to end
/// before it reports the container as it finds it.
pub const SETTLE_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Settings read from the driver's environment (core's, inherited).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// The image a local directory is mounted over, and a box with no
    /// source starts from: `TINYBOX_DOCKER_BASE_IMAGE`, default `busybox:latest`.
    pub base_image: String,
}

impl Config {
    pub const DEFAULT_BASE_IMAGE: &str = "busybox:latest";

    pub fn from_env() -> Config {
        let base_image = std::env::var("TINYBOX_DOCKER_BASE_IMAGE")
            .ok()
            .filter(|v| !v.trim().is_empty())
            .unwrap_or_else(|| Self::DEFAULT_BASE_IMAGE.to_owned());
        Config { base_image }
    }
}

/// The driver's record of a box, kept by core and handed back on every call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Handle {
    pub container: String,
    pub image: String,
    /// `none` or `bridge`.
    pub network: String,
    /// Where commands start when they name no directory; `None`: the image's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workdir: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub published: Vec<PortMapping>,
    /// Why the box's ports were not published, when they were not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unpublished: Option<String>,
    /// Network `none` with the box's egress proxy relayed in (ADR 0020).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allowlist: bool,
    /// With egress: the container holding the box's fenced network
    /// namespace (fence.rs, ADR 0021), what its fence let through, and the
    /// resolvers it may ask, as read before the box started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub netns: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fence: Vec<tinybox_sdk::fence::Exception>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resolvers: Vec<std::net::Ipv4Addr>,
}

impl Handle {
    pub(crate) fn of(target: &BoxRef) -> Result<Handle, DriverError> {
        serde_json::from_value(target.handle.clone()).map_err(|e| {
            DriverError::invalid(format!("box {}'s handle is not one this docker driver made: {e}", target.box_id))
        })
    }
}

/// What a box's container is made from ([`Docker::resolve`]).
pub(crate) struct Resolved {
    pub container: String,
    pub image: String,
    /// The host directory bound at /workspace.
    pub workspace: Option<std::path::PathBuf>,
    /// The `uid:gid` owning it, which the box runs as.
    pub owner: Option<String>,
    /// Never pull (a snapshot is on the host or nowhere).
    pub local_only: bool,
}

pub struct Docker {
    pub(crate) config: Config,
    pub(crate) execs: Execs,
}

impl Docker {
    pub fn new(config: Config) -> Docker {
        Docker { config, execs: Execs::default() }
    }

    /// Makes the box's container, without an egress relay.
    #[cfg(test)]
    pub async fn create(&self, host: &dyn Host, p: CreateParams) -> Result<CreateResult, DriverError> {
        self.create_with(host, p, None).await
    }

    /// Makes the box's container. `relay` is the static egress relay on
    /// this machine, for an allowlist box (main.rs writes it).
    pub async fn create_with(
        &self,
        host: &dyn Host,
        p: CreateParams,
        relay: Option<&Path>,
    ) -> Result<CreateResult, DriverError> {
        // Refused now rather than at every command: the box's environment
        // is fixed, and an env file cannot carry it.
        if let Some(why) = crate::env_file::refusal(&p.env) {
            return Err(DriverError::invalid(why));
        }
        let resolved = self.resolve(host, &p).await?;
        self.create_resolved(host, p, relay, resolved).await
    }

    /// What a box's container is made from: its name, its image, the
    /// workspace it binds and the owner it runs as, and whether the image
    /// must already be on the host.
    pub(crate) async fn resolve(&self, host: &dyn Host, p: &CreateParams) -> Result<Resolved, DriverError> {
        if let Some(pids) = p.resources.pids.filter(|n| *n < MIN_PIDS) {
            return Err(DriverError::invalid(format!(
                "a pids limit of {pids} is below the {MIN_PIDS} a docker box needs (its keepalive loop takes 2, \
                 each command 3 with its wrapper and lifeline, and docker's runtime more while it starts one); \
                 ask for at least {MIN_PIDS}"
            )));
        }
        let container = argv::container_name(&p.namespace, p.box_id.as_str());
        let (image, workspace, local_only) = match &p.source {
            None => (self.config.base_image.clone(), None, false),
            Some(WorkspaceSource::OciImage { reference }) => (reference.clone(), None, false),
            Some(WorkspaceSource::LocalDir { path }) => {
                (self.config.base_image.clone(), Some(absolute(path)?.to_owned()), false)
            }
            // Where a snapshot's box was bound comes from core's record
            // (`workspace_dir`), never from the image: any image can carry
            // any label, and `docker commit` copies them.
            Some(WorkspaceSource::Snapshot { id }) => (id.to_string(), None, true),
            Some(WorkspaceSource::GitRepo { .. }) => {
                return Err(DriverError::unsupported(
                    "docker cannot start from a git repository: no clone step exists yet",
                ));
            }
        };
        let workspace = match (&p.workspace_dir, workspace) {
            (Some(dir), _) => Some(absolute(dir)?.to_owned()),
            (None, from_source) => from_source,
        };
        let owner = match &workspace {
            Some(dir) => Some(owner_of(host, dir).await?),
            None => None,
        };
        if image.starts_with('-') || image.is_empty() {
            return Err(DriverError::invalid(format!("image reference {image:?} is not an image name")));
        }
        Ok(Resolved { container, image, workspace, owner, local_only })
    }

    /// Makes the box's container from what [`Docker::resolve`] found.
    async fn create_resolved(
        &self,
        host: &dyn Host,
        p: CreateParams,
        relay: Option<&Path>,
        Resolved { container, image, workspace, owner, local_only }: Resolved,
    ) -> Result<CreateResult, DriverError> {
        // With the network denied there is nowhere for a published port to
        // lead (and docker refuses the pair): the denial wins.
        let network = p.network.unwrap_or(NetworkPolicy::Denied);
        // Where the relay and the proxy are comes from this create alone
        // (core's record of this box), never from an image's labels.
        let egress = match (network, &p.egress, relay) {
            (NetworkPolicy::Allowlist, Some(endpoint), Some(relay)) => {
                let proxy_dir = endpoint.socket.parent().filter(|d| d.is_absolute()).ok_or_else(|| {
                    DriverError::invalid(format!(
                        "egress socket {} is not an absolute path in a directory",
                        endpoint.socket.display()
                    ))
                })?;
                Some(argv::Egress { relay, proxy_dir, endpoint })
            }
            (NetworkPolicy::Allowlist, None, _) => {
                return Err(DriverError::invalid("an allowlist box needs its egress endpoint, and core sent none"));
            }
            (NetworkPolicy::Allowlist, Some(_), None) => {
                return Err(DriverError::unsupported(
                    "the docker sandbox has no egress relay for this box: its boxes' host is not this machine, \
                     or the driver has no state directory to write the relay to",
                ));
            }
            _ => None,
        };
        let (published, unpublished) = match (network, p.ports.is_empty()) {
            (_, true) => (Vec::new(), None),
            (NetworkPolicy::Denied | NetworkPolicy::Allowlist, false) => {
                (Vec::new(), Some(format!("ports {} not published: the network is denied", ports_list(&p.ports))))
            }
            (NetworkPolicy::Egress, false) => (p.ports.clone(), None),
        };
        // An egress box joins a network namespace fenced before it starts.
        let fenced = match network {
            NetworkPolicy::Egress => {
                let owner =
                    crate::fence::Owner { container: &container, box_id: p.box_id.as_str(), namespace: &p.namespace };
                Some(crate::fence::prepare(host, owner, &p.egress_exceptions, &published).await?)
            }
            _ => None,
        };
        let spec = RunSpec {
            netns: fenced.as_ref().map(|f| f.holder.as_str()),
            container: &container,
            box_id: p.box_id.as_str(),
            namespace: &p.namespace,
            image: &image,
            workspace: workspace.as_deref().zip(owner.as_deref()),
            resources: &p.resources,
            network,
            ports: &published,
            local_only,
            egress,
        };
        let run = argv::run(&spec);
        let made = match spec.workspace {
            Some(_) => host.capture_with_input(run, crate::seccomp::profile().to_string().as_bytes()).await?,
            None => host.capture(run).await?,
        };
        if !made.success() {
            let failed = self.creation_failed(host, &container, &p, &image, &made).await;
            if fenced.is_some() {
                let _ = crate::fence::remove_helpers(host, &container).await;
            }
            return Err(failed);
        }
        if spec.egress.is_some() {
            self.check_egress(host, &container, &p).await?;
        }
        let workdir = workspace.as_ref().map(|_| argv::WORKSPACE.to_owned());
        let (netns, resolvers) = fenced.map(|f| (Some(f.holder), f.resolvers)).unwrap_or_default();
        let handle = Handle {
            fence: if netns.is_some() { p.egress_exceptions.clone() } else { Vec::new() },
            netns,
            resolvers,
            container,
            image,
            network: if network == NetworkPolicy::Egress { "bridge" } else { "none" }.into(),
            allowlist: network == NetworkPolicy::Allowlist,
            workdir: workdir.clone(),
            published,
            unpublished,
        };
        let handle = serde_json::to_value(&handle).map_err(|e| DriverError::failed(e.to_string()))?;
        Ok(CreateResult { handle, workdir, isolation: None, persistent_paths: None, snapshot: None })
    }

    /// Refuses (and removes) an allowlist box whose container user cannot
    /// reach the relay or the proxy's socket: the relay runs as that user
    /// (a bound box's workspace owner), and the proxy's directory is its
    /// starter's alone (0700), never opened wider.
    async fn check_egress(&self, host: &dyn Host, container: &str, p: &CreateParams) -> Result<(), DriverError> {
        let checked = host.capture(argv::egress_check(container)).await?;
        if checked.success() {
            return Ok(());
        }
        let _ = host.capture(argv::remove(container)).await;
        let socket = p.egress.as_ref().map(|e| e.socket.display().to_string()).unwrap_or_default();
        Err(DriverError::unavailable(format!(
            "the user box {}'s container runs as cannot reach its egress proxy's socket {socket} or the relay \
             (status {}{}); a box bound to a workspace runs as the workspace's owner, who cannot enter the \
             store's proxy directory: give an allowlist box a workspace the caller owns",
            p.box_id,
            checked.status,
            match checked.stderr_text().trim() {
                "" => String::new(),
                said => format!(": {said}"),
            }
        )))
    }

    /// Removes what a failed `docker run` left (it creates the container
    /// before it starts it) and says why it failed. A name already in use
    /// belongs to someone else and is left alone.
    async fn creation_failed(
        &self,
        host: &dyn Host,
        container: &str,
        p: &CreateParams,
        image: &str,
        made: &tinybox_sdk::capture::Captured,
    ) -> DriverError {
        let cause = failure::cause(made);
        if cause == Cause::NameInUse {
            return DriverError::failed(format!(
                "container {container} already exists on the box's host, so another store uses namespace {ns}; \
                 give this store its own namespace (--namespace, or \"namespace\" in its config.json) \
                 or remove the container with `docker rm -f {container}`",
                ns = p.namespace
            ));
        }
        if !matches!(cause, Cause::NoCli | Cause::NoDaemon) {
            // A daemon that went away mid-run (it crashed, or restarts) may
            // hold the container when it is back, and cannot remove it now:
            // the box's outcome is unknown, so core keeps its reservation.
            let removed = host.capture(argv::remove(container)).await;
            let unreachable = removed.as_ref().is_ok_and(|r| failure::cause(r) == Cause::NoDaemon);
            if removed.is_err() || unreachable {
                let why = match &removed {
                    Ok(r) => r.stderr_text().trim().to_owned(),
                    Err(e) => e.message.clone(),
                };
                return DriverError::interrupted(format!(
                    "docker run failed ({}: {}) and container {container} could not be removed after it ({why}); \
                     the docker daemon on the box's host may have gone away mid-create",
                    made.status,
                    made.stderr_text().trim()
                ));
            }
        }
        match (cause, &p.source) {
            (Cause::NoShell, _) => DriverError::invalid(format!(
                "image {image} has no sh: tinybox holds a box's container open with `sh -c '{}'`, so the image \
                 needs a sh on its PATH (distroless images do not work)",
                argv::KEEPALIVE
            )),
            (Cause::NoSuchImage, Some(WorkspaceSource::Snapshot { id })) => {
                DriverError::not_found(format!("snapshot {id} does not exist on the box's host"))
            }
            (Cause::NoSuchImage, _) => {
                DriverError::not_found(format!("image {image} is not on the box's host: {}", made.stderr_text()))
            }
            _ => failure::error("docker run", made),
        }
    }

    /// The box's state, once docker's passing states have passed: `docker
    /// commit` pauses a container while it copies it, and `docker rm`
    /// marks it removing until it is gone — the daemon carries either on
    /// after its client is killed. Read in the middle, a snapshot would
    /// show a running box as stopped, and a removal a going one. So a
    /// paused or removing container is looked at again (bounded by
    /// [`SETTLE_WAIT`]); one still so after that is reported as it is.
    /// A box whose create never answered is looked up by its container's
    /// name alone (`BoxRef::interrupted`), as `sandbox.destroy` finds it.
    pub async fn inspect(&self, host: &dyn Host, target: BoxRef) -> Result<InspectResult, DriverError> {
        let (container, unpublished) = match target.interrupted_namespace() {
            Some(namespace) => {
                tinybox_sdk::model::names::validate_name("namespace", namespace)
                    .map_err(|e| DriverError::invalid(e.to_string()))?;
                (argv::container_name(namespace, target.box_id.as_str()), None)
            }
            None => {
                let handle = Handle::of(&target)?;
                (handle.container, handle.unpublished)
            }
        };
        let start = std::time::Instant::now();
        let seen = loop {
            let seen = host.capture(argv::inspect_state(&container)).await?;
            let passing = seen.success()
                && serde_json::from_slice::<state::ContainerState>(&seen.stdout)
                    .is_ok_and(|s| matches!(s.status.as_str(), "paused" | "removing"));
            if !passing || start.elapsed() >= SETTLE_WAIT {
                break seen;
            }
            tokio::time::sleep(CLAIM_POLL).await;
        };
        let mut result = read_state(&target.box_id, &container, &seen)?;
        if let (Some(note), Some(detail)) = (&unpublished, result.detail.as_mut()) {
            detail.push_str(&format!("; {note}"));
        }
        Ok(result)
    }

    /// `docker commit`, then a tag naming the image `sha-<12 hex>`: the
    /// snapshot id is then an image reference docker resolves as it is, and
    /// a tagged image is never pruned as dangling.
    pub async fn snapshot(&self, host: &dyn Host, target: BoxRef) -> Result<SnapshotId, DriverError> {
        let handle = Handle::of(&target)?;
        let committed = host.capture(argv::commit(&handle.container)).await?;
        if !committed.success() {
            return Err(match failure::cause(&committed) {
                Cause::NoSuchContainer => DriverError::not_found(format!(
                    "box {} is gone: its container {} no longer exists",
                    target.box_id, handle.container
                )),
                _ => failure::error("docker commit", &committed),
            });
        }
        let digest = committed.stdout_text();
        let id = snapshot_id(&digest)
            .ok_or_else(|| DriverError::failed(format!("docker commit printed {digest:?}, not an image digest")))?;
        let tagged = host.capture(argv::tag(&digest, id.as_str())).await?;
        if !tagged.success() {
            // The image is committed: whatever stopped the tag (a daemon
            // that went down meanwhile, say), core must keep the snapshot's
            // pending mark so `rm` sweeps the image; a clean refusal would
            // have it forget one that exists.
            return Err(DriverError::interrupted(format!(
                "docker commit made {digest} but docker tag {id} failed: {}",
                failure::error("docker tag", &tagged).message
            )));
        }
        Ok(id)
    }

    /// `docker rmi` of the snapshot's tag. Only a name this driver makes
    /// (`sha-` and twelve hex digits) is touched, so no other image on the
    /// daemon can be removed through it; without `--force`, an image a
    /// container still uses stays and the failure says so.
    pub async fn snapshot_rm(&self, host: &dyn Host, p: SnapshotRmParams) -> Result<(), DriverError> {
        let id = p.id.as_str();
        if !is_snapshot_name(id) {
            return Err(DriverError::invalid(format!(
                "snapshot {id} is not one this driver takes (sha- and 12 hex digits); nothing was removed"
            )));
        }
        let done = host.capture(argv::remove_image(id)).await?;
        if done.success() {
            return Ok(());
        }
        Err(match failure::cause(&done) {
            Cause::NoSuchImage => DriverError::not_found(format!("snapshot {id} does not exist on the box's host")),
            _ => failure::error(&format!("docker rmi {id}"), &done),
        })
    }

    /// Removes every image committed from the box's containers whose
    /// snapshot id core does not keep: a snapshot interrupted after `docker
    /// commit` left one no record names. Found by the labels the box's
    /// container carries (`docker commit` copies them), so nothing of
    /// another box, namespace or store is touched; an image still in use
    /// (a box was made from it) stays.
    pub async fn snapshot_sweep(
        &self,
        host: &dyn Host,
        p: SnapshotSweepParams,
    ) -> Result<SnapshotSweepResult, DriverError> {
        let listed = host.capture(argv::images_of(&p.namespace, p.box_id.as_str())).await?;
        if !listed.success() {
            return Err(failure::error("docker images", &listed));
        }
        let mut images: Vec<String> = listed.stdout_text().split_whitespace().map(str::to_owned).collect();
        images.sort();
        images.dedup();
        let mut removed = Vec::new();
        for image in images {
            let Some(id) = snapshot_id(&image) else { continue };
            if p.keep.contains(&id) {
                continue;
            }
            let done = host.capture(argv::remove_image(&image)).await?;
            match failure::cause(&done) {
                _ if done.success() => removed.push(id.to_string()),
                Cause::NoSuchImage => {}
                Cause::NoCli | Cause::NoDaemon | Cause::Lost => {
                    return Err(failure::error(&format!("docker rmi {id}"), &done));
                }
                // In use by a container, or the parent of a kept image.
                _ => {}
            }
        }
        Ok(SnapshotSweepResult { removed })
    }
}

/// Whether an exit status of the `docker exec` client may be docker's own
/// rather than the command's: 1 (no such container, not running), 125
/// (the exec could not be made), 126 and 127 (the runtime could not start
/// the wrapper; a missing docker CLI), 255 (the daemon went away while the
/// command ran: the client loses its stream and says nothing).
pub fn docker_may_have_failed(code: i32) -> bool {
    matches!(code, 1 | 125 | 126 | 127 | 255)
}

/// The box state a `docker container inspect` reported.
pub(crate) fn read_state(
    box_id: &BoxId,
    container: &str,
    seen: &tinybox_sdk::capture::Captured,
) -> Result<InspectResult, DriverError> {
    if !seen.success() {
        return match failure::cause(seen) {
            Cause::NoSuchContainer => Ok(state::gone(container)),
            _ => Err(failure::error("docker container inspect", seen)),
        };
    }
    let s: state::ContainerState = serde_json::from_slice(&seen.stdout).map_err(|e| {
        DriverError::failed(format!("docker container inspect printed a state this driver cannot read: {e}"))
    })?;
    Ok(state::to_box_state(box_id.as_str(), container, &s))
}

fn absolute(dir: &Path) -> Result<&Path, DriverError> {
    if dir.is_absolute() {
        Ok(dir)
    } else {
        Err(DriverError::invalid(format!("workspace directory {} is not an absolute path", dir.display())))
    }
}

/// The `uid:gid` owning the workspace directory on the box's host: the
/// box runs as it, so what it writes there is that owner's.
async fn owner_of(host: &dyn Host, dir: &Path) -> Result<String, DriverError> {
    let seen = host.capture(argv::owner(dir)).await?;
    let text = seen.stdout_text();
    let owner = text.trim();
    let numeric = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    match owner.split_once(':') {
        Some((uid, gid)) if seen.success() && numeric(uid) && numeric(gid) => Ok(owner.to_owned()),
        _ => Err(DriverError::invalid(format!(
            "cannot tell who owns workspace directory {} on the box's host ({}); it must exist there",
            dir.display(),
            seen.stderr_text().trim()
        ))),
    }
}

/// Whether `id` is a name [`snapshot_id`] makes.
pub fn is_snapshot_name(id: &str) -> bool {
    id.strip_prefix("sha-")
        .is_some_and(|h| h.len() == 12 && h.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)))
}

/// `sha-` and the first twelve hex digits of `sha256:<hex>`.
pub fn snapshot_id(digest: &str) -> Option<SnapshotId> {
    let hex = digest.trim().strip_prefix("sha256:")?;
    if hex.len() < 12 || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    SnapshotId::new(format!("sha-{}", hex[..12].to_ascii_lowercase())).ok()
}

fn ports_list(ports: &[PortMapping]) -> String {
    ports.iter().map(|p| format!("{}:{}", p.host, p.guest)).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
