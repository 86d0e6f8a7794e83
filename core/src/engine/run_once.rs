//! `tinybox run` as one step: where the sandbox declares `run_once` and
//! nothing needs the box to outlive its command (no ports, no network but
//! a denied one, no terminal, no separate runner, no workspace to sync to
//! another machine, no isolation floor: the kit's verdicts are about boxes
//! `sandbox.create` makes), the box is made, runs the command and goes in one
//! `sandbox.run_once` call (one `docker run --rm` for docker) instead of
//! create, exec and destroy.
//!
//! The model stays as it is for a create: the request is validated and
//! gated exactly as a create's, the box's record is reserved (phase
//! `creating`) before any driver makes anything, and the driver names
//! whatever it makes from that record alone (namespace and box id). The
//! record stays `creating` for the command's whole run, so nothing else
//! runs in the box; it is removed when the driver answers. A run that
//! never answered (the caller was killed, the driver died) keeps it, and
//! `rm` (or `reap`, once its ttl passes) removes what was made, as for an
//! interrupted create (ADR 0023).

use std::future::Future;
use std::sync::Arc;

use tinybox_sdk::model::{ExecRequest, Feature, NetworkPolicy, WorkspaceSource};
use tinybox_sdk::protocol::{CreateParams, RunOnceParams};
use tinybox_sdk::stdio::{StdioFds, StdioServer};

use super::{ExecOutcome, Tinybox};
use crate::driver::SandboxLink;
use crate::error::{Error, Result};
use crate::gate;
use crate::model::{BoxInfo, BoxSpec, Instance};
use crate::store::insert_new;

/// A `run` that will be one `sandbox.run_once`: its record is reserved.
pub struct OneShot {
    /// The box's record as reserved: phase `creating`, no instance.
    pub info: BoxInfo,
    /// What will be in force for the command, as a create would record it
    /// (a `run_once` sandbox never makes a box below its declaration).
    pub instance: Instance,
    link: Arc<SandboxLink>,
    create: CreateParams,
}

impl OneShot {
    /// The box as it will be while its command runs, for what its caller
    /// is told (`created_summary`, `warnings`); the store never holds this.
    pub fn preview(&self) -> BoxInfo {
        BoxInfo { workspace: Some(self.instance.clone()), ..self.info.clone() }
    }
}

impl Tinybox {
    /// Reserves a one-step run of `request` in a box made as `spec` says,
    /// when the sandbox and the request allow one; `None` when they do not
    /// (then create, exec and remove it as before). A request the gate
    /// refuses is refused here as create would refuse it, with nothing
    /// reserved.
    pub async fn one_shot(&self, spec: &BoxSpec, request: &ExecRequest) -> Result<Option<OneShot>> {
        spec.validate()?;
        request.validate()?;
        let ws = &spec.workspace;
        let link = self.drivers.sandbox(&ws.sandbox, &ws.host).await?;
        let caps = link.capabilities();
        let synced =
            matches!(spec.source, Some(WorkspaceSource::LocalDir { .. })) && ws.host.as_str() != crate::hosts::LOCAL;
        // A floor relies on a verdict, and the kit probes boxes made by
        // `sandbox.create`, not by `sandbox.run_once`: a box for untrusted
        // code keeps the path its verdict is about.
        let plain = caps.has(&Feature::RunOnce)
            && spec.min_isolation.is_none()
            && !spec.has_separate_runner()
            && spec.ports.is_empty()
            && request.tty.is_none()
            && !synced;
        if !plain {
            return Ok(None);
        }
        let admitted = gate::admit_create(&ws.sandbox, &caps, spec)?;
        if !matches!(admitted.network, None | Some(NetworkPolicy::Denied)) {
            // A fenced or allowlisted network is made before the box and
            // kept beside it: the box's create does that.
            return Ok(None);
        }
        gate::admit_exec(&ws.sandbox, &caps, request)?;
        let workspace_dir = match &spec.source {
            Some(WorkspaceSource::Snapshot { id }) => self.snapshot_workspace_dir(id)?,
            Some(WorkspaceSource::LocalDir { path }) => Some(path.clone()),
            _ => None,
        };
        let isolation = caps.isolation;
        let instance = Instance {
            placement: ws.clone(),
            handle: serde_json::Value::Null,
            isolation,
            limits: admitted.limits,
            network: admitted.network_in_force,
            allow_hosts: Vec::new(),
            workdir: None,
            // Nothing relies on this box's isolation (no floor takes this
            // path), so no verdict is looked up: that reads and hashes the
            // driver's binary, a cost the one step exists to save.
            verified: false,
            // A one-shot box takes no copy.
            persistent_paths: None,
            snapshot: None,
        };
        let now = self.clock.now();
        let id = insert_new(self.store.as_ref(), &mut |id| BoxInfo::creating_here(id, spec.clone(), Some(now)))?;
        // `host rm` removes a host under its file's lock; one it removed
        // before seeing this reservation must not be used.
        if let Err(e) = self.hosts_still_known(spec) {
            self.store.remove(&id)?;
            return Err(e);
        }
        let info = self.get(&id)?;
        let create = CreateParams {
            box_id: id.clone(),
            namespace: spec.namespace.clone(),
            source: spec.source.clone(),
            resources: admitted.limits,
            network: admitted.network,
            ports: Vec::new(),
            env: spec.env.clone(),
            options: spec.options.clone(),
            workspace_dir,
            egress: None,
            egress_exceptions: Vec::new(),
            image: None,
        };
        Ok(Some(OneShot { info, instance, link, create }))
    }

    /// Forgets a reserved run that never started (its caller could not
    /// prepare the command's streams): nothing was made for it.
    pub fn abandon_one_shot(&self, shot: OneShot) -> Result<()> {
        self.store.remove(&shot.info.id)?;
        Ok(())
    }

    /// Runs a reserved one-step run with `stdio` as the command's streams;
    /// when `cancel` resolves first the command is stopped and its end is
    /// still awaited. The record goes when the driver has answered, unless
    /// the driver could not say what it left (then `rm` removes it).
    pub async fn run_one_shot(
        &self,
        shot: OneShot,
        request: ExecRequest,
        stdio: StdioFds,
        cancel: impl Future<Output = ()>,
    ) -> Result<ExecOutcome> {
        let OneShot { info, link, create, .. } = shot;
        let id = info.id.clone();
        let ran = async {
            let exec_id = self.next_exec_id();
            let socket = self.runtime_dir()?.join(format!("{exec_id}.sock"));
            // Only a dead process whose pid we now have can have left it.
            let _ = std::fs::remove_file(&socket);
            let server = StdioServer::start(socket, stdio).map_err(|e| Error::io("cannot open the stdio socket", e))?;
            let params = RunOnceParams { create, exec_id: exec_id.clone(), request, stdio: server.stdio_ref() };
            let run = link.run_once(params);
            tokio::pin!(run);
            tokio::pin!(cancel);
            let outcome = tokio::select! {
                status = &mut run => ExecOutcome { status: status?, cancelled: false },
                () = &mut cancel => self.end_cancelled(&link, &exec_id, &mut run).await?,
            };
            drop(server);
            Ok::<_, Error>(outcome)
        }
        .await;
        match ran {
            Err(e) if e.outcome_unknown() => Err(Error::CreateUnsettled { id, source: Box::new(e) }),
            ran => {
                self.store.remove(&id)?;
                ran
            }
        }
    }
}
