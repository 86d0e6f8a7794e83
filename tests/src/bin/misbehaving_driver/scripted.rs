//! Modes built on the SDK's serve loop: each handshakes as the SDK does and
//! then misbehaves in one way, described by a [`Script`].

use std::collections::BTreeSet;
use std::io::Write;
use std::path::PathBuf;

use async_trait::async_trait;
use tinybox_sdk::model::{
    ExitStatus, Feature, IsolationLevel, SandboxCapabilities, SnapshotSupport, SourceKind, WorkspaceSource,
};
use tinybox_sdk::protocol::{
    BoxRef, BoxState, CreateParams, CreateResult, DriverError, ExecParams, Health, InspectResult, RunParams, method,
};
use tinybox_sdk::{DriverInfo, HostDriver, HostHandle, SandboxDriver};

use crate::Invocation;

/// A small declaration this driver can keep: process isolation (nothing is
/// run, so nothing escapes) and boxes that start in an existing directory.
pub fn honest_capabilities() -> SandboxCapabilities {
    SandboxCapabilities {
        isolation: IsolationLevel::Process,
        snapshot: SnapshotSupport::None,
        features: BTreeSet::new(),
        limits: BTreeSet::new(),
        network_deny: false,
        sources: [SourceKind::LocalDir].into(),
        options: Default::default(),
    }
}

/// What a call does when it arrives.
#[derive(Clone, Copy)]
enum Step {
    /// Answers as a trivial, well-behaved sandbox would.
    Answer,
    /// Says "about to die" on stderr and exits 7 mid-call.
    Die,
    /// Never answers.
    Hang,
}

impl Step {
    async fn take(self) {
        match self {
            Step::Answer => {}
            Step::Die => {
                eprintln!("about to die");
                std::process::exit(7);
            }
            Step::Hang => std::future::pending::<()>().await,
        }
    }
}

/// A sandbox driver whose handshake and calls follow a script.
struct Script {
    info: DriverInfo,
    capabilities: SandboxCapabilities,
    on_create: Step,
    on_exec: Step,
    /// Where each method received is appended as a line, when recording.
    log: Option<PathBuf>,
    /// Makes boxes weaker than declared, as a microVM under emulation is
    /// (see [`lowers_isolation`]).
    lowers_isolation: bool,
}

impl Script {
    /// A healthy sandbox named as core expects, answering every call.
    fn new(me: &Invocation) -> Script {
        Script {
            info: me.info(&me.name, Health::ok()),
            capabilities: honest_capabilities(),
            on_create: Step::Answer,
            on_exec: Step::Answer,
            log: None,
            lowers_isolation: false,
        }
    }

    fn record(&self, method: &str) {
        let Some(path) = &self.log else { return };
        let file = std::fs::OpenOptions::new().create(true).append(true).open(path);
        if let Ok(mut file) = file {
            let _ = writeln!(file, "{method}");
        }
    }

    fn serve(self) -> ! {
        tinybox_sdk::run_sandbox_main(self)
    }
}

#[async_trait]
impl SandboxDriver for Script {
    /// The serve loop asks for this only to answer the handshake.
    fn info(&self) -> DriverInfo {
        self.record(method::HANDSHAKE);
        self.info.clone()
    }

    fn capabilities(&self) -> SandboxCapabilities {
        self.capabilities.clone()
    }

    async fn create(&self, host: &HostHandle, params: CreateParams) -> Result<CreateResult, DriverError> {
        self.record(method::SANDBOX_CREATE);
        self.on_create.take().await;
        let workdir = match &params.source {
            Some(WorkspaceSource::LocalDir { path }) => Some(path.to_string_lossy().into_owned()),
            _ => None,
        };
        let mut handle = serde_json::json!({ "box": params.box_id.to_string() });
        let mut isolation = None;
        if self.lowers_isolation {
            // `accel=kvm` claims more than was declared, which core must cap.
            let accel = params.options.get("accel").map(String::as_str);
            isolation = Some(if accel == Some("kvm") { IsolationLevel::Hardware } else { IsolationLevel::Process });
            // What arrived, for the tests to see.
            handle["options"] = serde_json::json!(params.options);
            handle["state_dir"] = serde_json::json!(host.state_dir());
        }
        Ok(CreateResult { handle, workdir, isolation, persistent_paths: None, snapshot: None })
    }

    async fn exec(&self, _host: &HostHandle, _params: ExecParams) -> Result<ExitStatus, DriverError> {
        self.record(method::SANDBOX_EXEC);
        self.on_exec.take().await;
        Ok(ExitStatus::code(0))
    }

    async fn destroy(&self, _host: &HostHandle, _target: BoxRef) -> Result<(), DriverError> {
        self.record(method::SANDBOX_DESTROY);
        Ok(())
    }

    async fn inspect(&self, _host: &HostHandle, _target: BoxRef) -> Result<InspectResult, DriverError> {
        self.record(method::SANDBOX_INSPECT);
        Ok(InspectResult { state: BoxState::Ready, detail: None })
    }

    async fn snapshot(
        &self,
        _host: &HostHandle,
        _target: BoxRef,
    ) -> Result<tinybox_sdk::model::SnapshotId, DriverError> {
        self.record(method::SANDBOX_SNAPSHOT);
        Err(DriverError::unsupported("this sandbox takes no snapshots"))
    }

    async fn cancel(&self, _host: &HostHandle, _exec_id: &str) -> Result<(), DriverError> {
        self.record(method::CANCEL);
        Ok(())
    }
}

/// `dies-mid-call`: handshakes, then dies in the first create or exec.
pub fn dies_mid_call(me: Invocation) -> ! {
    Script { on_create: Step::Die, on_exec: Step::Die, ..Script::new(&me) }.serve()
}

/// `dies-mid-exec`: creates boxes, then dies in the first exec.
pub fn dies_mid_exec(me: Invocation) -> ! {
    Script { on_exec: Step::Die, ..Script::new(&me) }.serve()
}

/// `hangs-mid-call`: handshakes, then never answers a create.
pub fn hangs_mid_call(me: Invocation) -> ! {
    Script { on_create: Step::Hang, ..Script::new(&me) }.serve()
}

/// `hangs-mid-exec`: creates boxes, acknowledges `cancel`, but never ends an exec.
pub fn hangs_mid_exec(me: Invocation) -> ! {
    Script { on_exec: Step::Hang, ..Script::new(&me) }.serve()
}

/// `declares-nothing`: declares no capability beyond starting in a
/// directory, and records every call it receives in the file named by
/// MISBEHAVING_LOG, else `calls.log` beside its symlink.
pub fn declares_nothing(me: Invocation) -> ! {
    let log = std::env::var_os("MISBEHAVING_LOG").map(PathBuf::from).unwrap_or_else(|| me.dir.join("calls.log"));
    let mut capabilities = SandboxCapabilities::nothing();
    capabilities.sources.insert(SourceKind::LocalDir);
    Script { capabilities, log: Some(log), ..Script::new(&me) }.serve()
}

/// `lowers-isolation`: declares kernel isolation and one create option,
/// `accel`, like a microVM that can fall back to emulation. Every box it
/// makes says it has only process isolation, except with `accel=kvm`, when
/// it claims hardware: more than it declared. Each box's handle echoes the
/// options and the state directory it received. Records every call in
/// `calls.log` beside its symlink.
pub fn lowers_isolation(me: Invocation) -> ! {
    let capabilities = SandboxCapabilities {
        isolation: IsolationLevel::Kernel,
        options: ["accel".to_owned()].into(),
        ..honest_capabilities()
    };
    let log = me.dir.join("calls.log");
    Script { capabilities, log: Some(log), lowers_isolation: true, ..Script::new(&me) }.serve()
}

/// `liar`: declares resource_limits but lists no limit it enforces.
pub fn liar(me: Invocation) -> ! {
    let mut capabilities = honest_capabilities();
    capabilities.features.insert(Feature::ResourceLimits);
    Script { capabilities, ..Script::new(&me) }.serve()
}

/// `wrong-name`: a handshake that gives another driver's name.
pub fn wrong_name(me: Invocation) -> ! {
    Script { info: me.info("someone-else", Health::ok()), ..Script::new(&me) }.serve()
}

/// `unhealthy`: a sandbox that says it cannot work on this machine.
pub fn unhealthy(me: Invocation) -> ! {
    let health = Health::unavailable("needs frobnicator; install package frob");
    Script { info: me.info(&me.name, health), ..Script::new(&me) }.serve()
}

/// A host driver that runs nothing.
struct IdleHost {
    info: DriverInfo,
}

#[async_trait]
impl HostDriver for IdleHost {
    fn info(&self) -> DriverInfo {
        self.info.clone()
    }

    async fn run(&self, _inner: &HostHandle, _params: RunParams) -> Result<ExitStatus, DriverError> {
        Err(DriverError::unsupported("this test host runs nothing"))
    }

    async fn cancel(&self, _exec_id: &str) -> Result<(), DriverError> {
        Ok(())
    }
}

/// `wrong-role`: a host driver, installed where a sandbox is asked for.
pub fn wrong_role(me: Invocation) -> ! {
    tinybox_sdk::run_host_main(IdleHost { info: me.info(&me.name, Health::ok()) })
}
