//! core's error type, and the one taxonomy every front end maps from. Every
//! message names the bad value and the rule, and where there is something
//! to do next, says it. Front ends never classify an error themselves:
//! [`Error::kind`] is the classification, and a front end only maps a kind
//! to its own spelling (the CLI's `--json` kind, the bus's code).

use std::collections::BTreeSet;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use tinybox_sdk::model::{
    BoxId, ExecRequestError, IsolationLevel, Limit, NameError, SandboxName, SnapshotId, SourceKind,
};
use tinybox_sdk::protocol::ErrorCode;

use crate::egress::EgressError;
use crate::model::SpecError;
use crate::request::RequestError;
use crate::store::StoreError;
use crate::sync::SyncError;

/// What a sandbox did not declare, so core refused before asking it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Capability {
    /// A resource limit; `enforced` is what the sandbox does enforce.
    Limit {
        limit: Limit,
        enforced: BTreeSet<Limit>,
    },
    /// Denying the network (the sandbox cannot confine it).
    NetworkDeny,
    PortForward,
    /// A create option; `takes` is what the sandbox declared.
    Option {
        name: String,
        takes: Vec<String>,
    },
    /// An isolation floor above the sandbox's declaration.
    Isolation {
        floor: IsolationLevel,
        declared: IsolationLevel,
    },
    /// An isolation floor above what this one box turned out to have.
    BoxIsolation {
        floor: IsolationLevel,
        has: IsolationLevel,
    },
    /// A workspace source kind the sandbox does not take.
    Source(SourceKind),
    /// Starting a box from a snapshot, in a sandbox that takes none.
    SnapshotSource,
    Snapshot,
    /// A snapshot of this one box, whose driver said it keeps nothing to
    /// take (a namespace box made without an image).
    BoxSnapshot,
    Fork,
    /// Running a read-only command from a stopped box's snapshot.
    SnapshotExec,
    /// Making a box, running one command in it and removing it as one step.
    RunOnce,
    /// Moving a tar into or out of a frozen box the sandbox's own way.
    Archive,
    /// Running a command on a terminal made for it.
    Terminal,
    /// An allowlist network (an egress proxy in front of a box with no other way out).
    NetworkAllowlist,
    /// Secrets put in by the egress proxy (`Feature::SecretInjection`).
    SecretInjection,
    /// Plain egress in a sandbox that cannot keep it from the host itself
    /// and private networks (`Feature::EgressFence`).
    EgressFence,
}

impl fmt::Display for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Capability::Limit { limit, enforced } => {
                let enforced = if enforced.is_empty() {
                    "no limits".to_owned()
                } else {
                    enforced.iter().map(|l| l.as_str()).collect::<Vec<_>>().join(", ")
                };
                write!(f, "{limit} limit (it enforces {enforced})")
            }
            Capability::NetworkDeny => f.write_str("network deny (it cannot confine the network)"),
            Capability::PortForward => f.write_str("port_forward"),
            Capability::Option { name, takes } => {
                let takes = if takes.is_empty() { "no options".to_owned() } else { takes.join(", ") };
                write!(f, "option {name} (it takes {takes})")
            }
            Capability::Isolation { floor, declared } => {
                write!(f, "isolation {floor} or stronger (it declares {declared})")
            }
            Capability::BoxIsolation { floor, has } => write!(f, "isolation {floor} or stronger (this box has {has})"),
            Capability::Source(kind) => write!(f, "workspace source {kind}"),
            Capability::SnapshotSource => f.write_str("snapshots"),
            Capability::Snapshot => f.write_str("snapshot"),
            Capability::BoxSnapshot => {
                f.write_str("snapshot of this box (its driver keeps nothing of it to take; make the box from an image)")
            }
            Capability::Fork => f.write_str("fork"),
            Capability::SnapshotExec => f.write_str("snapshot_exec (reading a stopped box from its snapshot)"),
            Capability::RunOnce => f.write_str("run_once (a box made for one command in one step)"),
            Capability::Archive => f.write_str("archive (a copy through the sandbox's own archive path)"),
            Capability::Terminal => f.write_str("a terminal (run the command without one)"),
            Capability::NetworkAllowlist => {
                f.write_str("network_allowlist (it cannot hold a box to an egress proxy; the namespace and docker sandboxes on this machine can)")
            }
            Capability::SecretInjection => f.write_str(
                "secret_injection (its boxes' egress does not go through tinybox's proxy; the namespace and docker sandboxes on this machine can take --secret)",
            ),
            Capability::EgressFence => f.write_str(
                "network egress (its egress could reach the host itself and private networks; use --allow-host NAME for an allowlist, or --network deny)",
            ),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The sandbox did not declare what the operation needs. Raised by core
    /// before any driver is called.
    #[error("sandbox {sandbox} does not support {capability}")]
    Unsupported { sandbox: SandboxName, capability: Capability },
    #[error(transparent)]
    Request(#[from] RequestError),
    #[error(transparent)]
    Spec(#[from] SpecError),
    #[error(transparent)]
    Exec(#[from] ExecRequestError),
    #[error(transparent)]
    Name(#[from] NameError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Sync(#[from] SyncError),
    #[error("no driver named {name} (looked for tinybox-driver-{name} in {}); `tinybox drivers` lists what is installed", display_paths(.searched))]
    DriverNotFound { name: String, searched: Vec<PathBuf> },
    #[error("driver {driver} is installed but cannot work here: {detail}")]
    DriverUnavailable { driver: String, detail: String },
    #[error("driver {driver}: {message}")]
    Driver { driver: String, code: ErrorCode, message: String },
    #[error("driver {driver} broke the protocol: {detail}")]
    Protocol { driver: String, detail: String },
    #[error("driver {driver} died ({status}){}", tail_suffix(.stderr_tail))]
    DriverDied { driver: String, status: String, stderr_tail: String },
    #[error("driver {driver} did not answer {what} within {}s{}", .after.as_secs_f64(), tail_suffix(.stderr_tail))]
    DriverTimeout { driver: String, what: String, after: Duration, stderr_tail: String },
    #[error("no host named {name}; the hosts known here are: {}", .known.join(", "))]
    UnknownHost { name: String, known: Vec<String> },
    /// A snapshot source naming an id no box and no template of this store
    /// recorded: any local image would do otherwise, labels and all.
    #[error(
        "snapshot {0} was not made by this store; a box starts only from a snapshot one of its boxes took or a template saved (`tinybox inspect BOX` and `tinybox template ls` list them)"
    )]
    UnknownSnapshot(SnapshotId),
    #[error("snapshot {id} is kept: {by}; remove that first")]
    SnapshotKept { id: SnapshotId, by: String },
    #[error("box {id} is {state}; {hint}")]
    BoxNotReady { id: BoxId, state: String, hint: String },
    /// The engine was asked to rely on a declaration it has no passing verdict for.
    #[error(
        "sandbox {sandbox} {detail}, so its declaration is not relied on for untrusted code or picked on its own; `tinybox drivers verify {sandbox}` checks it claim by claim"
    )]
    Unverified { sandbox: SandboxName, detail: String },
    /// No sandbox to pick on its own: none healthy, or none strong enough.
    #[error("{0}")]
    NoSandbox(String),
    #[error("{0}")]
    Host(#[from] HostError),
    #[error("{0}")]
    Template(#[from] TemplateError),
    #[error("{0}")]
    Lifecycle(#[from] LifecycleError),
    /// The store's `config.json` cannot be used.
    #[error(
        "{path} is not a valid configuration ({detail}); it holds one JSON object such as {{\"namespace\": \"alice\"}}"
    )]
    Settings { path: PathBuf, detail: String },
    /// The conformance kit could not start on a sandbox.
    #[error("{0}")]
    NotVerifiable(String),
    #[error(transparent)]
    Pool(#[from] crate::engine::PoolError),
    #[error(transparent)]
    Daemon(#[from] crate::supervisor::DaemonError),
    #[error(transparent)]
    Copy(#[from] crate::engine::CopyError),
    #[error(transparent)]
    Ceiling(#[from] crate::ceiling::CeilingError),
    #[error(transparent)]
    Allowlist(#[from] crate::egress::AllowlistError),
    #[error(transparent)]
    Egress(#[from] crate::egress::EgressError),
    #[error(transparent)]
    Image(#[from] crate::images::ImagesError),
    /// A create whose driver failed without saying what it made (it died,
    /// timed out, broke the protocol, or lost its daemon): the `creating`
    /// record is kept, so `rm` finds and removes whatever was made.
    #[error("{source}; box {id} may be partly made and is kept: `tinybox rm {id}` removes whatever was made")]
    CreateUnsettled { id: BoxId, source: Box<Error> },
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
}

/// Host administration and host reach that break a rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostError {
    #[error("host \"local\" is built in and cannot be {0}")]
    LocalIsBuiltIn(&'static str),
    #[error("host {name} is where {} {} placed; remove {} first", .boxes.join(", "), if .boxes.len() == 1 { "is" } else { "are" }, if .boxes.len() == 1 { "it" } else { "them" })]
    InUse { name: String, boxes: Vec<String> },
    #[error("host {name} is the inner host of {}; remove or change those first", .of.join(", "))]
    IsInner { name: String, of: Vec<String> },
    #[error(
        "host {name} already exists with another configuration; use --host {name}, or `tinybox host rm {name}` first"
    )]
    Conflict { name: String },
    #[error("{what} {value:?} starts with '-', which ssh would read as an option")]
    LooksLikeOption { what: &'static str, value: String },
    #[error("hosts reach each other in a loop: {}", .0.join(" -> "))]
    Loop(Vec<String>),
}

/// Templates: named snapshots.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    #[error("this store keeps no templates")]
    NoTemplates,
    #[error("no template named {0}; `tinybox template ls` lists them")]
    NotFound(String),
    #[error("template {name} is a {made_by} snapshot and cannot start a {wanted} box; pass --sandbox {made_by}")]
    OtherSandbox { name: String, made_by: String, wanted: String },
}

/// stop and resume asked of a box in the wrong state.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LifecycleError {
    #[error(
        "box {0} is ephemeral: only a persistent box (`tinybox create --persistent`) can be stopped and resumed; `tinybox rm {0}` removes this one"
    )]
    Ephemeral(BoxId),
    #[error("box {0} is persistent: it has no expiry to move; only an ephemeral box's can be")]
    NoExpiry(BoxId),
    #[error("box {0} is already stopped; `tinybox resume {0}` brings it back")]
    AlreadyStopped(BoxId),
    #[error("box {0} is not stopped; there is nothing to resume")]
    NotStopped(BoxId),
    #[error("box {0} has no snapshot to resume from; `tinybox rm {0}` removes it")]
    NoSnapshot(BoxId),
}

/// The class of an error: what a program calling tinybox branches on. The
/// CLI's `--json` kind and the bus's code are each one spelling of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// Not declared by the sandbox; refused before any driver heard of it.
    Unsupported,
    /// The request breaks a rule (a bad name, a zero limit, a conflict, ...).
    Invalid,
    /// The named box does not exist.
    BoxNotFound,
    /// The store could not be read or written.
    StoreIo,
    /// The store is corrupt, or refused the write.
    Store,
    /// No driver can serve it here.
    Unavailable,
    /// The driver answered and refused or failed, with its own code.
    Driver(ErrorCode),
    /// The driver broke: died, timed out, or broke the protocol.
    DriverFailure,
    UnknownHost,
    /// The box exists but cannot take the request now.
    NotReady,
    Io,
}

impl ErrorKind {
    /// The word `tinybox --json` prints as `{"error": {"kind": ...}}`.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Unsupported => "unsupported",
            ErrorKind::Invalid => "invalid",
            ErrorKind::BoxNotFound | ErrorKind::StoreIo | ErrorKind::Store => "store",
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::Driver(_) => "driver",
            ErrorKind::DriverFailure => "driver_failure",
            ErrorKind::UnknownHost => "unknown_host",
            ErrorKind::NotReady => "not_ready",
            ErrorKind::Io => "io",
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io { context: context.into(), source }
    }

    /// Whether a driver call that failed this way may still have made
    /// something: the driver gave no account of itself (it died, timed
    /// out, broke the protocol), or it says it was interrupted (its daemon
    /// or host went away mid-way). A refusal, or a failure the driver
    /// reported cleanly (unavailable included: nothing could start), made
    /// nothing that stays.
    pub fn outcome_unknown(&self) -> bool {
        match self {
            Error::DriverDied { .. } | Error::DriverTimeout { .. } | Error::Protocol { .. } => true,
            Error::Driver { code, .. } => *code == ErrorCode::Interrupted,
            Error::CreateUnsettled { .. } => true,
            _ => false,
        }
    }

    /// The error itself, under a create kept unsettled.
    pub fn root(&self) -> &Error {
        match self {
            Error::CreateUnsettled { source, .. } => source.root(),
            other => other,
        }
    }

    pub fn unsupported(sandbox: &SandboxName, capability: Capability) -> Self {
        Error::Unsupported { sandbox: sandbox.clone(), capability }
    }

    /// This error's class. Exhaustive on purpose: a new variant is
    /// classified here, once, for every front end.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Unsupported { .. } => ErrorKind::Unsupported,
            Error::Request(_)
            | Error::Spec(_)
            | Error::Exec(_)
            | Error::Name(_)
            | Error::Host(_)
            | Error::Template(_)
            | Error::Lifecycle(_)
            | Error::Settings { .. }
            | Error::UnknownSnapshot(_)
            | Error::SnapshotKept { .. }
            | Error::NotVerifiable(_) => ErrorKind::Invalid,
            Error::Copy(crate::engine::CopyError::BoxFailed { .. }) => ErrorKind::Io,
            Error::Copy(_) => ErrorKind::Invalid,
            Error::Ceiling(_) => ErrorKind::Invalid,
            Error::Allowlist(_) => ErrorKind::Invalid,
            Error::Egress(e) => match e {
                EgressError::NeedsFileStore | EgressError::Resolver(_) | EgressError::NoProxy { .. } => {
                    ErrorKind::Invalid
                }
                EgressError::NotFound { .. } => ErrorKind::Unavailable,
                EgressError::Start { .. } | EgressError::Stop { .. } | EgressError::Io { .. } | EgressError::Log(_) => {
                    ErrorKind::Io
                }
            },
            Error::Image(e) if e.is_refusal() => ErrorKind::Invalid,
            Error::Image(crate::images::ImagesError(tinybox_image::ImageError::Unreachable { .. })) => {
                ErrorKind::Unavailable
            }
            Error::Image(_) => ErrorKind::Io,
            Error::Sync(SyncError::Io { .. }) => ErrorKind::Io,
            Error::Sync(_) => ErrorKind::Invalid,
            Error::Store(StoreError::NotFound(_)) => ErrorKind::BoxNotFound,
            Error::Store(StoreError::Io { .. }) => ErrorKind::StoreIo,
            Error::Store(_) => ErrorKind::Store,
            Error::DriverNotFound { .. }
            | Error::DriverUnavailable { .. }
            | Error::NoSandbox(_)
            | Error::Unverified { .. } => ErrorKind::Unavailable,
            Error::Driver { code, .. } => ErrorKind::Driver(*code),
            Error::Protocol { .. } | Error::DriverDied { .. } | Error::DriverTimeout { .. } => ErrorKind::DriverFailure,
            Error::UnknownHost { .. } => ErrorKind::UnknownHost,
            Error::BoxNotReady { .. } => ErrorKind::NotReady,
            Error::Io { .. } => ErrorKind::Io,
            Error::CreateUnsettled { source, .. } => source.kind(),
            Error::Pool(crate::engine::PoolError::Empty { .. }) => ErrorKind::Unavailable,
            Error::Pool(_) => ErrorKind::Invalid,
            Error::Daemon(crate::supervisor::DaemonError::Io { .. }) => ErrorKind::Io,
            Error::Daemon(_) => ErrorKind::Unavailable,
        }
    }
}

fn display_paths(paths: &[PathBuf]) -> String {
    if paths.is_empty() {
        return "no directory".into();
    }
    paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
}

fn tail_suffix(tail: &str) -> String {
    let t = tail.trim();
    if t.is_empty() { String::new() } else { format!("; its last words: {}", t.replace('\n', " | ")) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capabilities_read_as_they_always_have() {
        let cases = [
            (
                Capability::Limit { limit: Limit::Memory, enforced: [Limit::Cpu, Limit::Pids].into() },
                "memory limit (it enforces cpu, pids)",
            ),
            (Capability::Limit { limit: Limit::Cpu, enforced: BTreeSet::new() }, "cpu limit (it enforces no limits)"),
            (Capability::NetworkDeny, "network deny (it cannot confine the network)"),
            (Capability::PortForward, "port_forward"),
            (Capability::Option { name: "accel".into(), takes: vec![] }, "option accel (it takes no options)"),
            (
                Capability::Isolation { floor: IsolationLevel::Kernel, declared: IsolationLevel::None },
                "isolation kernel or stronger (it declares none)",
            ),
            (
                Capability::BoxIsolation { floor: IsolationLevel::Hardware, has: IsolationLevel::Kernel },
                "isolation hardware or stronger (this box has kernel)",
            ),
            (Capability::Source(SourceKind::LocalDir), "workspace source local_dir"),
            (Capability::SnapshotSource, "snapshots"),
            (Capability::Snapshot, "snapshot"),
            (Capability::Fork, "fork"),
            (
                Capability::NetworkAllowlist,
                "network_allowlist (it cannot hold a box to an egress proxy; the namespace and docker sandboxes on this machine can)",
            ),
            (
                Capability::EgressFence,
                "network egress (its egress could reach the host itself and private networks; use --allow-host NAME for an allowlist, or --network deny)",
            ),
        ];
        for (cap, text) in cases {
            assert_eq!(cap.to_string(), text);
        }
    }

    #[test]
    fn only_a_driver_that_could_not_account_for_itself_leaves_the_outcome_unknown() {
        let driver = |code| Error::Driver { driver: "d".into(), code, message: "m".into() };
        let died = Error::DriverDied { driver: "d".into(), status: "signal 9".into(), stderr_tail: String::new() };
        let timeout = Error::DriverTimeout {
            driver: "d".into(),
            what: "sandbox.create".into(),
            after: Duration::from_secs(1),
            stderr_tail: String::new(),
        };
        let protocol = Error::Protocol { driver: "d".into(), detail: "x".into() };
        for unknown in [died, timeout, protocol, driver(ErrorCode::Interrupted)] {
            assert!(unknown.outcome_unknown(), "{unknown:?}");
        }
        let refusals = [ErrorCode::Failed, ErrorCode::NotFound, ErrorCode::InvalidRequest, ErrorCode::Unavailable];
        for clean in refusals.map(driver) {
            assert!(!clean.outcome_unknown(), "{clean:?}");
        }
        let sandbox = SandboxName::new("docker").unwrap();
        assert!(!Error::unsupported(&sandbox, Capability::Snapshot).outcome_unknown());
        let kept = Error::CreateUnsettled {
            id: BoxId::new("box-3").unwrap(),
            source: Box::new(driver(ErrorCode::Interrupted)),
        };
        assert_eq!(kept.kind(), ErrorKind::Driver(ErrorCode::Interrupted), "the kind is the cause's");
        assert_eq!(
            kept.to_string(),
            "driver d: m; box box-3 may be partly made and is kept: `tinybox rm box-3` removes whatever was made"
        );
    }

    #[test]
    fn every_class_has_its_cli_word() {
        let sandbox = SandboxName::passthrough();
        let e = Error::unsupported(&sandbox, Capability::Snapshot);
        assert_eq!(e.kind(), ErrorKind::Unsupported);
        assert_eq!(e.to_string(), "sandbox passthrough does not support snapshot");
        let id = BoxId::new("box-9").unwrap();
        assert_eq!(Error::Store(StoreError::NotFound(id.clone())).kind().as_str(), "store");
        assert_eq!(Error::Lifecycle(LifecycleError::NotStopped(id)).kind(), ErrorKind::Invalid);
        assert_eq!(Error::Host(HostError::LocalIsBuiltIn("removed")).kind().as_str(), "invalid");
        let driver = Error::Driver { driver: "d".into(), code: ErrorCode::NotFound, message: "m".into() };
        assert_eq!(driver.kind(), ErrorKind::Driver(ErrorCode::NotFound));
        assert_eq!(driver.kind().as_str(), "driver");
    }
}
