//! Reading a stopped persistent box without resuming it: a copy out of it
//! runs its `tar -c` from the box's newest snapshot, through the sandbox's
//! `sandbox.snapshot_exec` (a short-lived instance with no network, a
//! read-only root and no capabilities, removed after the command). Which
//! snapshot comes from this store's record of the box alone, never from
//! the sandbox. A sandbox that does not declare `snapshot_exec` and a box
//! with no snapshot keep the stopped box's refusal: resume it. A box bound
//! to a directory is read this way only outside its bind (its snapshot
//! does not hold the bind's files; copy/host_dir.rs serves those).
//! Nothing is ever written into a stopped box: a snapshot is immutable.

use tinybox_sdk::model::{BoxId, ExecRequest};
use tinybox_sdk::protocol::SnapshotExecParams;
use tinybox_sdk::stdio::{StdioFds, StdioServer};

use super::{ExecOutcome, Target, Tinybox};
use crate::error::{Error, Result};
use crate::gate;
use crate::model::{BoxInfo, Phase};

impl Tinybox {
    /// Runs a command that only reads (a copy's `tar -c`) in box `id`: in
    /// the box while it runs, from its newest snapshot while it is stopped
    /// and its sandbox can; `beside_bind`: what it reads is outside the
    /// box's bound directory.
    pub(super) async fn exec_to_read(
        &self,
        id: &BoxId,
        request: ExecRequest,
        stdio: StdioFds,
        beside_bind: bool,
        cancel: impl Future<Output = ()>,
    ) -> Result<ExecOutcome> {
        let info = self.get(id)?;
        if info.phase != Phase::Stopped {
            return self.exec(id, request, stdio, Target::Workspace, cancel).await;
        }
        request.validate()?;
        let Some(newest) = info.snapshots.last() else { return Err(stopped_refusal(&info)) };
        if let Some(dir) = info.bound_dir().filter(|_| !beside_bind) {
            return Err(Error::BoxNotReady {
                id: id.clone(),
                state: format!("stopped, and its files are the directory {} on this machine", dir.display()),
                hint: format!("copy from that directory, or `tinybox resume {id}` brings the box back"),
            });
        }
        let placement = &info.spec.workspace;
        let link = self.drivers.sandbox(&placement.sandbox, &placement.host).await?;
        let caps = link.capabilities();
        if gate::admit_snapshot_exec(&placement.sandbox, &caps).is_err() {
            return Err(stopped_refusal(&info));
        }
        gate::admit_exec(&placement.sandbox, &caps, &request)?;
        let exec_id = self.next_exec_id();
        let socket = self.runtime_dir()?.join(format!("{exec_id}.sock"));
        // A file by this name can only be left by a dead process whose pid
        // we now have: nothing live owns it.
        let _ = std::fs::remove_file(&socket);
        let server = StdioServer::start(socket, stdio).map_err(|e| Error::io("cannot open the stdio socket", e))?;
        let params = SnapshotExecParams {
            namespace: info.spec.namespace.clone(),
            box_id: id.clone(),
            snapshot: newest.id.clone(),
            exec_id,
            request,
            stdio: server.stdio_ref(),
        };
        let status = link.snapshot_exec(params).await?;
        drop(server);
        Ok(ExecOutcome { status, cancelled: false })
    }
}

/// The stopped box's own refusal: what running in it asks for.
fn stopped_refusal(info: &BoxInfo) -> Error {
    Error::BoxNotReady {
        id: info.id.clone(),
        state: "stopped".into(),
        hint: format!("`tinybox resume {}` brings it back", info.id),
    }
}
