//! `relay`: a well-behaved sandbox that confines nothing and declares
//! exactly that. It reaches its host only through the reverse `host.run`
//! call, marking each command with RELAYED_BY=<box id>, so tests can see
//! the reverse path, split runner placements and forwarded cancellation.

use async_trait::async_trait;
use tinybox_sdk::model::{ExitStatus, SandboxCapabilities, SourceKind, WorkspaceSource};
use tinybox_sdk::protocol::{
    BoxRef, BoxState, CreateParams, CreateResult, DriverError, ExecParams, Health, InspectResult, RunParams,
};
use tinybox_sdk::{HostHandle, SandboxDriver, serve::DriverInfo};

use crate::Invocation;

/// A sandbox that runs every command on its host unconfined, declaring
/// whatever `capabilities` says — honestly for `relay`, falsely for
/// `overclaims`.
pub struct Relay {
    pub me: Invocation,
    pub capabilities: SandboxCapabilities,
    /// Words put before each command's argv (`unconfined-ns`'s unshare).
    pub wrap: Vec<String>,
    /// The command gets only its box's and request's variables and PATH.
    pub clean_env: bool,
    /// A terminal asked for is never made: the command runs on the handed
    /// streams as they are (`overclaims`, which declares the terminal feature).
    pub drop_tty: bool,
}

#[async_trait]
impl SandboxDriver for Relay {
    fn info(&self) -> DriverInfo {
        self.me.info(&self.me.name, Health::ok())
    }

    fn capabilities(&self) -> SandboxCapabilities {
        self.capabilities.clone()
    }

    async fn create(&self, _host: &HostHandle, params: CreateParams) -> Result<CreateResult, DriverError> {
        let workdir = match params.source {
            Some(WorkspaceSource::LocalDir { path }) => Some(path.to_string_lossy().into_owned()),
            _ => None,
        };
        Ok(CreateResult {
            handle: serde_json::json!({ "workdir": workdir }),
            workdir,
            isolation: None,
            persistent_paths: None,
            snapshot: None,
        })
    }

    async fn exec(&self, host: &HostHandle, p: ExecParams) -> Result<ExitStatus, DriverError> {
        let mut env = p.box_env;
        if self.clean_env {
            env.insert("PATH".into(), "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin".into());
        }
        env.extend(p.request.env);
        env.insert("RELAYED_BY".into(), p.target.box_id.to_string());
        let workdir = p.target.handle.get("workdir").and_then(|w| w.as_str()).map(str::to_owned);
        let mut argv = self.wrap.clone();
        argv.extend(p.request.argv);
        host.run(RunParams {
            exec_id: p.exec_id,
            argv,
            env,
            clear_env: self.clean_env,
            cwd: p.request.cwd.or(workdir),
            stdio: p.stdio,
            tty: if self.drop_tty { None } else { p.request.tty },
            tty_session_inside: false,
        })
        .await
    }

    async fn destroy(&self, _host: &HostHandle, _target: BoxRef) -> Result<(), DriverError> {
        Ok(())
    }

    async fn inspect(&self, _host: &HostHandle, _target: BoxRef) -> Result<InspectResult, DriverError> {
        Ok(InspectResult { state: BoxState::Ready, detail: None })
    }
}

pub fn relay(me: Invocation) -> ! {
    let capabilities = SandboxCapabilities { sources: [SourceKind::LocalDir].into(), ..SandboxCapabilities::nothing() };
    tinybox_sdk::run_sandbox_main(Relay { me, capabilities, wrap: Vec::new(), clean_env: false, drop_tty: false })
}
