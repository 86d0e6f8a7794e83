//! The driver protocol's messages: method names, parameters, results and
//! error codes. Serde only, no I/O. docs/specs/driver-protocol.md is the
//! normative description; this module is its Rust spelling.

pub mod egress;
pub mod errors;
pub mod version;

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::model::{
    BoxId, ExecRequest, ExitStatus, IsolationLevel, NetworkPolicy, PortMapping, Resources, SandboxCapabilities,
    SnapshotId, TtySize, WorkspaceSource,
};

pub use egress::EgressEndpoint;
pub use errors::{DriverError, ErrorCode};
pub use version::{PROTOCOL_VERSION, protocol_version};

/// Method names. Core calls the first group; a sandbox driver calls
/// `host.run` back into core to reach its host.
pub mod method {
    pub const HANDSHAKE: &str = "handshake";
    pub const HOST_RUN: &str = "host.run";
    pub const CANCEL: &str = "cancel";
    pub const EXEC_RESIZE: &str = "exec.resize";
    pub const SANDBOX_CREATE: &str = "sandbox.create";
    pub const SANDBOX_EXEC: &str = "sandbox.exec";
    pub const SANDBOX_DESTROY: &str = "sandbox.destroy";
    pub const SANDBOX_INSPECT: &str = "sandbox.inspect";
    pub const SANDBOX_SNAPSHOT: &str = "sandbox.snapshot";
    pub const SANDBOX_SNAPSHOT_RM: &str = "sandbox.snapshot_rm";
    pub const SANDBOX_SNAPSHOT_SWEEP: &str = "sandbox.snapshot_sweep";
    pub const SANDBOX_SNAPSHOT_EXEC: &str = "sandbox.snapshot_exec";
    pub const SANDBOX_RUN_ONCE: &str = "sandbox.run_once";
    pub const SANDBOX_ARCHIVE: &str = "sandbox.archive";
}

/// Whether a driver is a host (reach) or a sandbox (confinement).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Host,
    Sandbox,
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Role::Host => "host",
            Role::Sandbox => "sandbox",
        })
    }
}

/// What core may say in [`HandshakeParams::features`].
pub mod core_feature {
    /// Core already chose this driver for a box and does not read the
    /// answer's `health`: a failure will show in the call that meets it.
    /// A driver MAY skip probes that cost time (docker's `docker version`)
    /// and answer healthy as far as it looked without them. Never sent by a
    /// listing (`tinybox drivers`) or the sandbox choice, which rely on it.
    pub const HEALTH_NOT_READ: &str = "health_not_read";
}

/// Core's first message.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HandshakeParams {
    /// The protocol version core speaks (semver; caret-compatible peers match).
    pub protocol: semver::Version,
    /// Core's own version, for logs.
    pub core_version: String,
    /// Optional protocol features core understands (see [`core_feature`]).
    #[serde(default)]
    pub features: Vec<String>,
    /// Driver-specific configuration (a configured host's destination, say);
    /// `null` when there is none.
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub config: serde_json::Value,
    /// A directory the driver may keep persistent files in (caches, the
    /// runtime files of processes it detaches), private to this store and
    /// this driver. Core creates it (mode 0700) before the handshake; absent
    /// when core has none to offer, and then the driver keeps no such files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_dir: Option<PathBuf>,
}

/// Whether a driver can do its work on this machine, and if not, why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Health {
    pub ok: bool,
    /// What the operator should know: what is missing, what was detected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

impl Health {
    pub fn ok() -> Self {
        Health { ok: true, detail: None }
    }
    pub fn ok_with(detail: impl Into<String>) -> Self {
        Health { ok: true, detail: Some(detail.into()) }
    }
    pub fn unavailable(detail: impl Into<String>) -> Self {
        Health { ok: false, detail: Some(detail.into()) }
    }
}

/// The driver's answer to the handshake.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HandshakeResult {
    pub name: String,
    pub version: String,
    pub protocol: semver::Version,
    pub role: Role,
    pub health: Health,
    /// A sandbox's full declaration; absent for a host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capabilities: Option<SandboxCapabilities>,
    #[serde(default)]
    pub features: Vec<String>,
}

/// Where a command's stdin, stdout and stderr come from: a local socket the
/// caller listens on. Connecting to it yields the three descriptors
/// (SCM_RIGHTS, in that order), so bulk bytes never pass through JSON.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StdioRef {
    pub socket: PathBuf,
}

/// `host.run`: run an argument vector on the host.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunParams {
    /// Names this run for `cancel`.
    pub exec_id: String,
    pub argv: Vec<String>,
    /// Variables added to the host's environment (or, with `clear_env`, the whole of it).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default)]
    pub clear_env: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    pub stdio: StdioRef,
    /// Run on a pseudo-terminal of this size that the host makes for this
    /// run, the command leading a new session with it as its controlling
    /// terminal; the host moves bytes between the handed stdin and stdout
    /// and the terminal (stderr is the terminal too). Absent: plain streams.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tty: Option<TtySize>,
    /// With `tty`: the command makes the terminal its controlling terminal
    /// itself (a box in a pid namespace runs `setsid -c`, since a session
    /// made outside it would be invisible inside). The host then makes no
    /// session: it starts the command in a process group of its own, as
    /// without a terminal. A host that cannot leave the terminal unowned
    /// (ssh: sshd makes the session) refuses the run.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub tty_session_inside: bool,
}

impl RunParams {
    /// `argv` run as it is on the host's own environment and working
    /// directory, with the streams `stdio` names (on a terminal of `tty`'s
    /// size when given): what a driver forwarding a box's command to the
    /// host's docker or ssh client sends.
    pub fn forwarded(exec_id: &str, argv: Vec<String>, stdio: StdioRef, tty: Option<TtySize>) -> RunParams {
        RunParams {
            exec_id: exec_id.to_owned(),
            argv,
            env: BTreeMap::new(),
            clear_env: false,
            cwd: None,
            stdio,
            tty,
            tty_session_inside: false,
        }
    }
}

/// The result of `host.run` and `sandbox.exec`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct RunResult {
    pub status: ExitStatus,
}

/// `cancel`: stop the run named `exec_id` (no error if it already ended).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CancelParams {
    pub exec_id: String,
}

/// `exec.resize`: the terminal of the run (or exec) named `exec_id` has a new
/// window size. Sent to a sandbox driver and to the host beneath it, like
/// `cancel`; whoever made that terminal sets its size (the session's
/// foreground process group gets SIGWINCH), anyone else answers with
/// nothing. A run that has ended, or has no terminal, is no error.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ResizeParams {
    pub exec_id: String,
    #[serde(flatten)]
    pub size: TtySize,
}

/// `sandbox.create`. Core has already checked every field against the
/// declaration: `resources` holds only limits the sandbox enforces, and
/// `network` is present only when the sandbox confines the network.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CreateParams {
    pub box_id: BoxId,
    /// Separates boxes of different stores that share a daemon.
    pub namespace: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<WorkspaceSource>,
    #[serde(default)]
    pub resources: Resources,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkPolicy>,
    #[serde(default)]
    pub ports: Vec<PortMapping>,
    /// Environment every command in the box starts with.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Driver-specific create options (microvm's `accel`, say). Core sends
    /// only names the sandbox declared in `SandboxCapabilities::options`;
    /// the values are the driver's to check.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub options: BTreeMap<String, String>,
    /// The host directory the box's workspace is bound from, from core's
    /// own store record: the `local_dir` source's path, or for a box made
    /// from a snapshot the directory its original box was bound from. A
    /// driver binds this and nothing else, and never learns the directory
    /// from anything a box or an image can write (a label, a file).
    /// Omitted when the box binds no host directory; an older core sends none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace_dir: Option<std::path::PathBuf>,
    /// With `network` `allowlist` only: where the box's egress proxy
    /// listens and the relay program is (ADR 0020).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress: Option<EgressEndpoint>,
    /// With `network` `egress` only: the addresses and networks the caller
    /// let through the egress fence (`Feature::EgressFence`,
    /// [`crate::fence`]), canonical, already checked by core. A driver
    /// keeps them with the box and parses them again before use.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub egress_exceptions: Vec<crate::fence::Exception>,
    /// With an `oci_image` source that core resolved in its own image
    /// store: the image's prepared root. A driver starts the box from this
    /// and never reads core's store itself. Absent: the driver gets the
    /// reference alone (docker pulls it its own way).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<ImageRoot>,
}

/// An image's prepared root, as core's image store holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageRoot {
    /// The image's flattened root filesystem: read-only by contract.
    pub rootfs: PathBuf,
    pub config: ImageRootConfig,
    /// The image's base disk (ext4, raw, read-only), for a sandbox
    /// declaring `Feature::ImageDisk`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk: Option<PathBuf>,
}

/// What of an image's config a box starts with.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageRootConfig {
    /// `NAME=VALUE` entries, the image's order.
    #[serde(default)]
    pub env: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workdir: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entrypoint: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cmd: Option<Vec<String>>,
}

/// The driver's record of a box; core stores `handle` and hands it back on
/// every later call, so a driver process can be stateless.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CreateResult {
    #[serde(default)]
    pub handle: serde_json::Value,
    /// The working directory commands start in, when the box has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workdir: Option<String>,
    /// The isolation this particular box has, when it is lower than the
    /// sandbox's declaration (a microVM under emulation, say). Absent: the
    /// declaration's. Core never records more than the declaration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isolation: Option<IsolationLevel>,
    /// The absolute paths in this box that outlive the command that
    /// writes them (a namespace box keeps `/workspace` and gives each
    /// command a fresh view of the rest). Core refuses a copy into any
    /// other path, which would be gone when the copy ends. Absent (an
    /// older driver, or one whose boxes keep everything): every path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persistent_paths: Option<Vec<String>>,
}

/// Names an existing box to its driver.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BoxRef {
    pub box_id: BoxId,
    #[serde(default)]
    pub handle: serde_json::Value,
}

impl BoxRef {
    /// A box whose create never answered (the caller was killed, the
    /// driver died): core has no handle for it, so `sandbox.destroy` gets
    /// `{"interrupted": {"namespace": NS}}` and the driver removes whatever
    /// it makes for (namespace, box id), answering not-found when nothing
    /// is there.
    pub fn interrupted(box_id: BoxId, namespace: &str) -> BoxRef {
        BoxRef { box_id, handle: serde_json::json!({ "interrupted": { "namespace": namespace } }) }
    }

    /// The namespace of an [`BoxRef::interrupted`] box; `None` for a box
    /// whose create answered.
    pub fn interrupted_namespace(&self) -> Option<&str> {
        self.handle.get("interrupted")?.get("namespace")?.as_str()
    }
}

/// `sandbox.exec`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ExecParams {
    #[serde(flatten)]
    pub target: BoxRef,
    pub exec_id: String,
    pub request: ExecRequest,
    /// The box's own environment, beneath the request's.
    #[serde(default)]
    pub box_env: BTreeMap<String, String>,
    pub stdio: StdioRef,
    /// For a box whose network is `allowlist`: its proxy, checked to be
    /// running just before this exec (ADR 0020).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress: Option<EgressEndpoint>,
}

/// A box's state as its sandbox sees it now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BoxState {
    /// Exists and accepts commands.
    Ready,
    /// Exists but is stopped; commands fail.
    Stopped,
    /// The sandbox has no such box (removed behind tinybox's back, or never made).
    Gone,
}

impl std::fmt::Display for BoxState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            BoxState::Ready => "ready",
            BoxState::Stopped => "stopped",
            BoxState::Gone => "gone",
        })
    }
}

/// The result of `sandbox.inspect`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct InspectResult {
    pub state: BoxState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// The result of `sandbox.snapshot`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SnapshotResult {
    pub id: SnapshotId,
}

/// `sandbox.snapshot_rm`: delete a snapshot this driver took. Needs no
/// box: the box it was taken of may be long gone. `namespace` is the one
/// the box had, for a driver that keeps snapshots per namespace. A snapshot
/// that is not there answers not-found; one still in use (a box was made
/// from it) answers failed and stays.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SnapshotRmParams {
    pub id: SnapshotId,
    pub namespace: String,
}

/// `sandbox.snapshot_sweep`: delete every snapshot this driver took of box
/// `box_id` in `namespace` whose id is not in `keep` — above all one a
/// snapshot left when it was interrupted between the driver's work and
/// core's record of it, whose id nobody learnt. Core sends it only to a
/// sandbox declaring the `snapshot_sweep` feature, and only once no
/// snapshot of the box can still be recorded; `keep` is every snapshot id
/// the store names. A snapshot still in use stays (not an error).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SnapshotSweepParams {
    pub namespace: String,
    pub box_id: BoxId,
    #[serde(default)]
    pub keep: Vec<SnapshotId>,
}

/// `sandbox.snapshot_exec`: run `request` from snapshot `snapshot` (which
/// core's record of box `box_id` names as its newest) in a short-lived
/// instance that reads it and changes nothing: no network, a read-only
/// root, no capabilities, removed when the command ends (and, named from
/// `namespace` and `box_id`, found again if it was left). Core sends it
/// only to a sandbox declaring the `snapshot_exec` feature, for a box that
/// is stopped; the answer is a `RunResult`, as for `sandbox.exec`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SnapshotExecParams {
    pub namespace: String,
    pub box_id: BoxId,
    pub snapshot: SnapshotId,
    pub exec_id: String,
    pub request: ExecRequest,
    pub stdio: StdioRef,
}

/// Which way `sandbox.archive` moves a tar.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ArchiveDirection {
    /// A tar on stdin is extracted into `path`, an existing directory.
    In,
    /// A tar of `path` (the entry itself, a symlink not followed), rooted
    /// at its last component, is written to stdout.
    Out,
}

/// `sandbox.archive` (`Feature::Archive`): move a tar into or out of a
/// running box through the sandbox's archive path, every path resolved in
/// the box's own root. Core sends it only to a sandbox declaring
/// `archive`, for a box that is ready, with an absolute `path` (checked by
/// [`ArchiveParams::validate`]). Only stdin (in) or stdout (out) carries
/// the tar, with one exception: in, the driver writes `go\n` on stdout
/// once it will read the tar, and core writes none before it, so a copy
/// the driver declines has read nothing of a caller's stream. stderr
/// carries what the sandbox's tool said. The answer is an [`ArchiveResult`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ArchiveParams {
    /// Names this archive for `cancel`.
    pub exec_id: String,
    pub target: BoxRef,
    pub direction: ArchiveDirection,
    pub path: String,
    pub stdio: StdioRef,
}

impl ArchiveParams {
    /// What core sends and a driver checks again before `path` reaches its
    /// tool's command line: absolute, no NUL or newline, and no `.`/`..`
    /// component (a tool may resolve those its own way; core's copy through
    /// the box takes such paths instead).
    pub fn validate(&self) -> Result<(), String> {
        archive_path_ok(&self.path)
    }
}

/// The rule [`ArchiveParams::validate`] applies to its `path`, for a caller
/// deciding before it has the rest of the params.
pub fn archive_path_ok(p: &str) -> Result<(), String> {
    if !p.starts_with('/') {
        return Err(format!("archive path {p:?} is not absolute"));
    }
    if p.contains(['\0', '\n']) {
        return Err(format!("archive path {p:?} holds a NUL or a newline"));
    }
    if p.split('/').any(|c| c == "." || c == "..") {
        return Err(format!("archive path {p:?} has a . or .. component"));
    }
    Ok(())
}

/// How a `sandbox.archive` ended, when the sandbox's tool did not fail in a
/// way only its message tells.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "status")]
pub enum ArchiveResult {
    /// The tar was moved whole.
    Done,
    /// `path` does not exist in the box; nothing was moved.
    NoSuchPath,
    /// (In) `path` is not a directory; nothing was read from stdin.
    NotADirectory,
    /// The sandbox cannot do this one archive its own way (an archive path
    /// that could resolve outside the box, a box whose user is not the one
    /// its archive path writes as); nothing was moved and core goes
    /// through the box instead. `reason` says why, for the trace.
    Declined { reason: String },
}

/// `sandbox.run_once`: make box `create.box_id` as `sandbox.create` would,
/// run `request` in it with the streams behind `stdio`, and remove it, as
/// one step (`Feature::RunOnce`). Core sends it only to a sandbox declaring
/// `run_once`, for a box with no ports, a network of `denied` (or none)
/// and a request without a terminal, with `create` admitted exactly as a
/// create's would be; the box's record is reserved (phase `creating`)
/// before it is sent. The answer is a `RunResult`, as for `sandbox.exec`,
/// and comes once nothing the run made remains; `cancel` with `exec_id`
/// stops it. A run that never answered is removed as an interrupted create
/// is: `sandbox.destroy` with `BoxRef::interrupted`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunOnceParams {
    pub create: CreateParams,
    pub exec_id: String,
    pub request: ExecRequest,
    pub stdio: StdioRef,
}

/// The result of `sandbox.snapshot_sweep`: what it removed, by the
/// driver's own image names (an unrecorded snapshot has no id yet).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotSweepResult {
    #[serde(default)]
    pub removed: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_handshake_carries_a_state_dir_only_when_there_is_one() {
        let mut p = HandshakeParams {
            protocol: protocol_version(),
            core_version: "0.1.0".into(),
            features: Vec::new(),
            config: serde_json::Value::Null,
            state_dir: None,
        };
        let json = serde_json::to_value(&p).unwrap();
        assert!(json.get("state_dir").is_none(), "{json}");

        p.state_dir = Some("/home/me/.local/state/tinybox/drivers/microvm".into());
        let json = serde_json::to_value(&p).unwrap();
        assert_eq!(json["state_dir"], "/home/me/.local/state/tinybox/drivers/microvm");
        let back: HandshakeParams = serde_json::from_value(json).unwrap();
        assert_eq!(back.state_dir, p.state_dir);

        // An older core sends none; null reads as none.
        let old: HandshakeParams = serde_json::from_str(r#"{"protocol":"0.1.0","core_version":"0.1.0"}"#).unwrap();
        assert_eq!(old.state_dir, None);
        let null: HandshakeParams =
            serde_json::from_str(r#"{"protocol":"0.1.0","core_version":"0.1.0","state_dir":null}"#).unwrap();
        assert_eq!(null.state_dir, None);
    }

    #[test]
    fn create_options_are_sent_only_when_there_are_some() {
        let json = r#"{"box_id":"box-0","namespace":"default"}"#;
        let mut p: CreateParams = serde_json::from_str(json).unwrap();
        assert!(p.options.is_empty());
        assert!(serde_json::to_value(&p).unwrap().get("options").is_none());

        p.options.insert("accel".into(), "tcg".into());
        let json = serde_json::to_value(&p).unwrap();
        assert_eq!(json["options"], serde_json::json!({"accel": "tcg"}));
        let back: CreateParams = serde_json::from_value(json).unwrap();
        assert_eq!(back.options.get("accel").map(String::as_str), Some("tcg"));
    }

    #[test]
    fn a_workspace_dir_is_sent_only_when_core_records_one() {
        let old: CreateParams = serde_json::from_str(r#"{"box_id":"box-0","namespace":"default"}"#).unwrap();
        assert_eq!(old.workspace_dir, None, "an older core sends none");
        assert!(serde_json::to_value(&old).unwrap().get("workspace_dir").is_none());
        let mut p = old;
        p.workspace_dir = Some("/home/me/project".into());
        let json = serde_json::to_value(&p).unwrap();
        assert_eq!(json["workspace_dir"], "/home/me/project");
        let back: CreateParams = serde_json::from_value(json).unwrap();
        assert_eq!(back.workspace_dir.as_deref(), Some(std::path::Path::new("/home/me/project")));
    }

    #[test]
    fn a_create_result_names_its_own_isolation_only_when_it_differs() {
        let plain: CreateResult = serde_json::from_str(r#"{"handle":{"vm":1}}"#).unwrap();
        assert_eq!(plain.isolation, None);
        assert!(serde_json::to_value(&plain).unwrap().get("isolation").is_none());

        let lowered: CreateResult = serde_json::from_str(r#"{"handle":null,"isolation":"process"}"#).unwrap();
        assert_eq!(lowered.isolation, Some(IsolationLevel::Process));
        assert_eq!(serde_json::to_value(&lowered).unwrap()["isolation"], "process");
        assert!(serde_json::from_str::<CreateResult>(r#"{"isolation":"total"}"#).is_err(), "isolation is closed");
    }
}
