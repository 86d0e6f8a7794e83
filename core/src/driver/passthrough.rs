//! The passthrough sandbox: confines nothing, declares nothing, and hands
//! every command to its host. It lives in core because it performs no I/O
//! of its own — and because it is generic over the host, pairing it with a
//! remote host gives "run it over there, unconfined" with no code naming
//! that pair.

use tinybox_sdk::model::{ExitStatus, Feature, SandboxCapabilities, SourceKind, WorkspaceSource};
use tinybox_sdk::protocol::{BoxRef, BoxState, CreateParams, CreateResult, ExecParams, InspectResult, RunParams};

use super::HostLink;
use crate::error::Result;

/// Passthrough's declaration: nothing at all, except that it can start in a
/// directory that already exists on the host, and run a command on a
/// terminal its host makes.
pub fn capabilities() -> SandboxCapabilities {
    SandboxCapabilities {
        sources: [SourceKind::LocalDir].into(),
        features: [Feature::Terminal].into(),
        ..SandboxCapabilities::nothing()
    }
}

pub async fn create(_host: &HostLink, params: CreateParams) -> Result<CreateResult> {
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

pub async fn exec(host: &HostLink, params: ExecParams) -> Result<ExitStatus> {
    let workdir = params.target.handle.get("workdir").and_then(|w| w.as_str()).map(str::to_owned);
    let mut env = params.box_env;
    env.extend(params.request.env);
    host.run(RunParams {
        exec_id: params.exec_id,
        argv: params.request.argv,
        env,
        clear_env: false,
        cwd: params.request.cwd.or(workdir),
        stdio: params.stdio,
        tty: params.request.tty,
        tty_session_inside: false,
    })
    .await
}

pub async fn inspect(_host: &HostLink, target: BoxRef) -> Result<InspectResult> {
    if target.interrupted_namespace().is_some() {
        return Ok(InspectResult { state: BoxState::Gone, detail: Some("a passthrough create makes nothing".into()) });
    }
    Ok(InspectResult { state: BoxState::Ready, detail: Some("passthrough boxes have no state of their own".into()) })
}
