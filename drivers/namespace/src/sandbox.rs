//! What each sandbox method does, as commands on the box's host: a probe
//! that checks the host and finds (or makes) the workspace, one bwrap per
//! command, `rm` and `test` for the rest. Written against the sdk's
//! `&dyn Host`, so `sandbox_tests.rs` runs it against a recording fake;
//! the `SandboxDriver` in main.rs only hands each call its host.

use std::collections::BTreeMap;

use tinybox_sdk::Host;
use tinybox_sdk::capture::capture;
use tinybox_sdk::model::{ExitStatus, NetworkPolicy, WorkspaceSource};
use tinybox_sdk::protocol::{
    BoxRef, BoxState, CreateParams, CreateResult, DriverError, ExecParams, InspectResult, RunParams,
};

use crate::bwrap;

/// The orchestration for egress, run by the host's `sh`.
const NETWRAP: &str = include_str!("netwrap.sh");

/// What core stores for a box and hands back on every call.
#[derive(Debug)]
struct Handle {
    workspace: String,
    /// The workspace was made for the box (no directory was given) and goes with it.
    owned: bool,
    egress: bool,
}

impl Handle {
    fn json(&self) -> serde_json::Value {
        serde_json::json!({ "workspace": self.workspace, "owned": self.owned, "egress": self.egress })
    }

    fn parse(v: &serde_json::Value) -> Result<Handle, DriverError> {
        let workspace = v
            .get("workspace")
            .and_then(|w| w.as_str())
            .ok_or_else(|| DriverError::invalid("the box record has no workspace; it was not made by this driver"))?;
        Ok(Handle {
            workspace: workspace.to_owned(),
            owned: v.get("owned").and_then(|o| o.as_bool()).unwrap_or(false),
            egress: v.get("egress").and_then(|e| e.as_bool()).unwrap_or(false),
        })
    }
}

fn host_env() -> BTreeMap<String, String> {
    [("PATH".to_owned(), bwrap::BWRAP_PATH.to_owned())].into()
}

/// Checks the host can run boxes and makes the workspace when none was
/// given; prints the workspace path. Exit codes name what is missing.
const PROBE: &str = r#"
ws="$1"
if [ -z "$ws" ]; then ws=$(mktemp -d "${TMPDIR:-/tmp}/tinybox-$2.XXXXXX") || exit 3; fi
[ -d "$ws" ] || exit 3
command -v bwrap >/dev/null 2>&1 || exit 4
bwrap --unshare-user --unshare-pid --ro-bind / / true || exit 5
if [ "$3" = egress ]; then
    command -v slirp4netns >/dev/null 2>&1 || exit 6
    command -v unshare >/dev/null 2>&1 || exit 6
    [ -r /dev/net/tun ] && [ -w /dev/net/tun ] || exit 7
fi
printf '%s' "$ws"
"#;

pub async fn create(host: &dyn Host, p: CreateParams) -> Result<CreateResult, DriverError> {
    let given = match &p.source {
        None => None,
        Some(WorkspaceSource::LocalDir { path }) => Some(path.to_string_lossy().into_owned()),
        Some(other) => {
            return Err(DriverError::unsupported(format!(
                "the namespace sandbox binds a directory you already have; it cannot start from {}",
                other.kind()
            )));
        }
    };
    let egress = p.network == Some(NetworkPolicy::Egress);
    let argv = vec![
        "sh".into(),
        "-c".into(),
        PROBE.into(),
        "tinybox-probe".into(),
        given.clone().unwrap_or_default(),
        p.box_id.to_string(),
        if egress { "egress".into() } else { "denied".into() },
    ];
    let out = capture(host, argv, host_env(), b"").await?;
    let workspace = match out.status.code {
        Some(0) => out.stdout_text(),
        Some(3) => {
            return Err(DriverError::invalid(format!(
                "workspace directory {} does not exist on the host",
                given.as_deref().unwrap_or("(temporary)")
            )));
        }
        Some(4) => {
            return Err(DriverError::unavailable("bwrap is not installed on the host; install the bubblewrap package"));
        }
        Some(5) => {
            return Err(DriverError::unavailable(format!(
                "the kernel or an AppArmor policy forbids unprivileged user namespaces on the host ({})",
                out.stderr_text()
            )));
        }
        Some(6) => {
            return Err(DriverError::unavailable(
                "egress needs slirp4netns and unshare on the host; install the slirp4netns and util-linux packages",
            ));
        }
        Some(7) => {
            return Err(DriverError::unavailable(
                "egress needs read-write access to /dev/net/tun, which the host denies to this user (Debian's udev makes it 0666)",
            ));
        }
        _ => {
            return Err(DriverError::failed(format!("the host check failed ({}): {}", out.status, out.stderr_text())));
        }
    };
    let handle = Handle { workspace, owned: given.is_none(), egress };
    Ok(CreateResult { handle: handle.json(), workdir: Some(bwrap::WORKSPACE.into()), isolation: None })
}

pub async fn exec(host: &dyn Host, p: ExecParams) -> Result<ExitStatus, DriverError> {
    let handle = Handle::parse(&p.target.handle)?;
    let mut env = p.box_env;
    env.extend(p.request.env);
    // With egress, the network namespace is the one netwrap.sh prepared.
    let layout = bwrap::Layout {
        workspace: &handle.workspace,
        cwd: p.request.cwd.as_deref(),
        env: &env,
        share_net: handle.egress,
    };
    let args = bwrap::args(&layout, &p.request.argv);
    let argv = if handle.egress {
        let mut v = vec!["sh".to_owned(), "-c".to_owned(), NETWRAP.to_owned(), "tinybox-netwrap".to_owned()];
        v.extend(args);
        v
    } else {
        let mut v = vec!["bwrap".to_owned()];
        v.extend(args);
        v
    };
    host.run(RunParams { exec_id: p.exec_id, argv, env: host_env(), clear_env: true, cwd: None, stdio: p.stdio }).await
}

pub async fn destroy(host: &dyn Host, target: BoxRef) -> Result<(), DriverError> {
    if target.interrupted_namespace().is_some() {
        // Its create starts no process that outlives it. The one thing an
        // unanswered create can leave is the private temporary workspace
        // of a box given none (mktemp's random name, which only the lost
        // answer knew): it holds nothing of the caller's and is left to
        // the system's temporary-file cleaning.
        return Err(DriverError::not_found(format!("box {} left nothing behind", target.box_id)));
    }
    let handle = Handle::parse(&target.handle)?;
    if !handle.owned {
        // The directory is the caller's own; the box never owned it.
        return Ok(());
    }
    let out =
        capture(host, vec!["rm".into(), "-rf".into(), "--".into(), handle.workspace.clone()], host_env(), b"").await?;
    if !out.success() {
        return Err(DriverError::failed(format!("cannot remove {}: {}", handle.workspace, out.stderr_text())));
    }
    Ok(())
}

pub async fn inspect(host: &dyn Host, target: BoxRef) -> Result<InspectResult, DriverError> {
    let handle = Handle::parse(&target.handle)?;
    let out = capture(host, vec!["test".into(), "-d".into(), handle.workspace.clone()], host_env(), b"").await?;
    Ok(if out.success() {
        let net = if handle.egress { "egress via slirp4netns, no host loopback" } else { "loopback only" };
        InspectResult {
            state: BoxState::Ready,
            detail: Some(format!(
                "workspace {} at /workspace; network {net}; a fresh bwrap per command",
                handle.workspace
            )),
        }
    } else {
        InspectResult {
            state: BoxState::Gone,
            detail: Some(format!("workspace {} no longer exists", handle.workspace)),
        }
    })
}

#[cfg(test)]
#[path = "sandbox_tests.rs"]
mod tests;
