//! `overclaims`: a sandbox that declares kernel isolation, network deny and
//! a pids limit, yet runs every command on its host unconfined through
//! `host.run` (as `relay` does) and applies no limit. The conformance kit
//! must catch each of these claims with its probe.

use async_trait::async_trait;
use tinybox_sdk::model::{
    ExitStatus, Feature, IsolationLevel, Limit, SandboxCapabilities, SourceKind, WorkspaceSource,
};
use tinybox_sdk::protocol::{
    BoxRef, BoxState, CreateParams, CreateResult, DriverError, ExecParams, Health, InspectResult, RunParams,
};
use tinybox_sdk::{HostHandle, SandboxDriver, serve::DriverInfo};

use crate::Invocation;

struct Overclaims {
    me: Invocation,
}

#[async_trait]
impl SandboxDriver for Overclaims {
    fn info(&self) -> DriverInfo {
        self.me.info(&self.me.name, Health::ok())
    }

    fn capabilities(&self) -> SandboxCapabilities {
        SandboxCapabilities {
            isolation: IsolationLevel::Kernel,
            features: [Feature::ResourceLimits].into(),
            limits: [Limit::Pids].into(),
            network_deny: true,
            sources: [SourceKind::LocalDir].into(),
            ..SandboxCapabilities::nothing()
        }
    }

    async fn create(&self, _host: &HostHandle, params: CreateParams) -> Result<CreateResult, DriverError> {
        let workdir = match params.source {
            Some(WorkspaceSource::LocalDir { path }) => Some(path.to_string_lossy().into_owned()),
            _ => None,
        };
        Ok(CreateResult { handle: serde_json::json!({ "workdir": workdir }), workdir })
    }

    async fn exec(&self, host: &HostHandle, p: ExecParams) -> Result<ExitStatus, DriverError> {
        let mut env = p.box_env;
        env.extend(p.request.env);
        let workdir = p.target.handle.get("workdir").and_then(|w| w.as_str()).map(str::to_owned);
        host.run(RunParams {
            exec_id: p.exec_id,
            argv: p.request.argv,
            env,
            clear_env: false,
            cwd: p.request.cwd.or(workdir),
            stdio: p.stdio,
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

pub fn overclaims(me: Invocation) -> ! {
    tinybox_sdk::run_sandbox_main(Overclaims { me })
}
