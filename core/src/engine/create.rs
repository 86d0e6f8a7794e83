//! Creating a box: validate, gate, reserve an identifier, ask the driver,
//! record. A refusal, or a failure the driver reported cleanly, leaves the
//! store as it was. A driver that failed without saying what it made (it
//! died, timed out, broke the protocol, or lost its daemon mid-way) may
//! have left a container or a VM: its `creating` reservation is kept, so
//! `rm` (or a reaper) finds and removes it by the box's identifier.

use std::path::PathBuf;

use tinybox_sdk::model::{BoxId, Feature, IsolationLevel, TemplateName, WorkspaceSource};
use tinybox_sdk::protocol::{BoxRef, CreateParams};

use super::Tinybox;
use crate::driver::SandboxLink;
use crate::error::{Capability, Error, Result, TemplateError};
use crate::gate;
use crate::model::{BoxInfo, BoxSpec, Instance, Phase, Placement};
use crate::store::insert_new;

impl Tinybox {
    /// Creates a box as `spec` says.
    pub async fn create(&self, spec: BoxSpec) -> Result<BoxInfo> {
        self.create_in_pool(spec, None).await
    }

    /// [`Tinybox::create`], the record marked as waiting in `pool` from
    /// its reservation on (so it is never handed out half-made).
    pub(super) async fn create_in_pool(&self, spec: BoxSpec, pool: Option<String>) -> Result<BoxInfo> {
        spec.validate()?;
        let ws_link = self.drivers.sandbox(&spec.workspace.sandbox, &spec.workspace.host).await?;
        let admitted = gate::admit_create(&spec.workspace.sandbox, &ws_link.capabilities(), &spec)?;
        // Before anything is reserved: earning a verdict makes boxes of its own.
        if spec.min_isolation.is_some() {
            self.require_verified_link(&ws_link, &spec.options).await?;
        }
        // The runner gets no workspace of its own and only what its sandbox
        // enforces by default; it is gated like any other instance.
        let runner_spec = BoxSpec { source: None, ports: Vec::new(), ..BoxSpec::new(spec.runner.clone()) };
        let runner = if spec.has_separate_runner() {
            let link = self.drivers.sandbox(&spec.runner.sandbox, &spec.runner.host).await?;
            let admitted = gate::admit_create(&spec.runner.sandbox, &link.capabilities(), &runner_spec)?;
            Some((link, admitted))
        } else {
            None
        };

        // A snapshot source must be one this store recorded, and brings the
        // directory its original box was bound from: checked before
        // anything is reserved, so a refusal leaves nothing behind.
        let inherited_dir = match &spec.source {
            Some(WorkspaceSource::Snapshot { id }) => self.snapshot_workspace_dir(id)?,
            _ => None,
        };

        // An image core hands the sandbox is had before anything is reserved.
        if let Some(WorkspaceSource::OciImage { reference }) = &spec.source
            && ws_link.capabilities().has(&Feature::ImageRoot)
        {
            self.ensure_image(&reference.clone()).await?;
        }

        let now = self.clock.now();
        let id = insert_new(self.store.as_ref(), &mut |id| BoxInfo {
            pool: pool.clone(),
            ..BoxInfo::creating_here(id, spec.clone(), Some(now))
        })?;
        let mut synced_dir = None;
        let result = async {
            // `host rm` checks for boxes and removes under the hosts file's
            // lock; a host it removed before seeing this reservation is gone
            // from the file now, and this box must not be made on it.
            self.hosts_still_known(&spec)?;
            // On a remote host a local directory is synced there first, and
            // the box is made over the synced copy.
            let (ws_spec, synced) = self.workspace_spec(&id, &spec).await?;
            synced_dir = synced;
            let bound_dir = match &ws_spec.source {
                Some(WorkspaceSource::LocalDir { path }) => Some(path.clone()),
                _ => inherited_dir.clone(),
            };
            let workspace =
                self.make_instance(&ws_link, &id, &ws_spec, &spec.workspace, admitted, bound_dir.clone()).await?;
            let runner_instance = match &runner {
                None => None,
                Some((link, admitted)) => {
                    match self.make_instance(link, &id, &runner_spec, &spec.runner, admitted.clone(), None).await {
                        Ok(i) => Some(i),
                        Err(e) => {
                            let _ =
                                ws_link.destroy(BoxRef { box_id: id.clone(), handle: workspace.handle.clone() }).await;
                            return Err(e);
                        }
                    }
                }
            };
            Ok::<_, Error>((workspace, runner_instance, bound_dir))
        }
        .await;
        match result {
            Ok((workspace, runner, bound_dir)) => Ok(self.store.update(&id, &mut |info| {
                info.phase = Phase::Created;
                info.workspace = Some(workspace.clone());
                info.runner = runner.clone();
                info.workspace_dir = bound_dir.clone();
                info.creator = None;
            })?),
            Err(e) => {
                if e.outcome_unknown() {
                    // `rm` of a creating record removes the synced copy too.
                    return Err(Error::CreateUnsettled { id, source: Box::new(e) });
                }
                if let Some(dir) = &synced_dir {
                    self.discard_synced(&spec.workspace.host, dir).await;
                }
                self.egress_discard(&spec.namespace, &id).await?;
                self.release_image(&id, &spec);
                self.store.remove(&id)?;
                Err(e)
            }
        }
    }

    pub(super) fn hosts_still_known(&self, spec: &BoxSpec) -> Result<()> {
        let Some(dir) = self.store_dir.as_deref() else { return Ok(()) };
        let table = crate::store::HostStore::open(dir)?.table()?;
        for host in [&spec.workspace.host, &spec.runner.host] {
            if !table.contains_key(host) {
                let known = table.keys().map(|h| h.to_string()).collect();
                return Err(Error::UnknownHost { name: host.to_string(), known });
            }
        }
        Ok(())
    }

    /// The snapshot a template names, checked against the sandbox it was taken with.
    pub fn template_source(&self, name: &TemplateName, workspace: &Placement) -> Result<WorkspaceSource> {
        let t = self.templates()?.get(name)?.ok_or_else(|| TemplateError::NotFound(name.to_string()))?;
        if t.sandbox != workspace.sandbox {
            return Err(TemplateError::OtherSandbox {
                name: name.to_string(),
                made_by: t.sandbox.to_string(),
                wanted: workspace.sandbox.to_string(),
            }
            .into());
        }
        Ok(WorkspaceSource::Snapshot { id: t.snapshot })
    }
}

impl Tinybox {
    /// Makes one instance of a box, as admitted. A floor relies on the
    /// declaration, so it needs a verified one (crate::trust) before the
    /// driver is asked; every instance records whether its declaration was.
    /// `workspace_dir` is the host directory to bind, from this store's
    /// records; the driver binds nothing else.
    pub(super) async fn make_instance(
        &self,
        link: &SandboxLink,
        id: &BoxId,
        spec: &BoxSpec,
        placement: &Placement,
        admitted: gate::Admitted,
        workspace_dir: Option<PathBuf>,
    ) -> Result<Instance> {
        if spec.min_isolation.is_some() {
            self.require_verified_link(link, &spec.options).await?;
        }
        let verified = self.trust_link(link, &spec.options).relied_on();
        let caps = link.capabilities();
        // An allowlist box's proxy runs before its sandbox makes it (engine/egress.rs).
        let allowlist = admitted.network == Some(tinybox_sdk::model::NetworkPolicy::Allowlist);
        let fenced = admitted.network == Some(tinybox_sdk::model::NetworkPolicy::Egress);
        let egress_exceptions = match fenced {
            true => crate::egress::exceptions(&spec.allow_hosts)?,
            false => Vec::new(),
        };
        let egress = match allowlist {
            true => Some(self.egress_ensure(&spec.namespace, id, &spec.allow_hosts, &spec.secrets).await?.0),
            false => None,
        };
        let image_ref = match &spec.source {
            Some(WorkspaceSource::OciImage { reference }) if caps.has(&Feature::ImageRoot) => Some(reference.clone()),
            _ => None,
        };
        let image = match image_ref {
            Some(reference) => Some(self.image_root(id, &reference, caps.has(&Feature::ImageDisk)).await?),
            None => None,
        };
        if let Some(WorkspaceSource::Snapshot { id: snapshot }) = &spec.source
            && caps.has(&Feature::ImageRoot)
        {
            self.box_from_snapshot_holds_image(id, snapshot)?;
        }
        let created = link
            .create(CreateParams {
                box_id: id.clone(),
                namespace: spec.namespace.clone(),
                source: spec.source.clone(),
                resources: admitted.limits,
                network: admitted.network,
                ports: spec.ports.clone(),
                env: spec.env.clone(),
                options: spec.options.clone(),
                workspace_dir,
                egress,
                egress_exceptions,
                image,
            })
            .await?;
        let isolation = box_isolation(created.isolation, caps.isolation);
        if let Some(floor) = spec.min_isolation
            && isolation < floor
        {
            // The declaration passed the gate, but this box is weaker: it must
            // not be used. Best effort, the same link takes it down again.
            let _ = link.destroy(BoxRef { box_id: id.clone(), handle: created.handle }).await;
            return Err(Error::unsupported(&placement.sandbox, Capability::BoxIsolation { floor, has: isolation }));
        }
        Ok(Instance {
            placement: placement.clone(),
            handle: created.handle,
            isolation,
            limits: admitted.limits,
            network: admitted.network_in_force,
            allow_hosts: if allowlist || fenced { spec.allow_hosts.clone() } else { Vec::new() },
            workdir: created.workdir,
            verified: verified && isolation > tinybox_sdk::model::IsolationLevel::None,
            persistent_paths: created.persistent_paths,
            snapshot: created.snapshot.filter(|s| *s < caps.snapshot),
        })
    }
}

/// The isolation one box has: what its driver says of it, never more than
/// the sandbox declared (a driver claiming more for one box is capped), and
/// the declaration when the driver says nothing.
pub(crate) fn box_isolation(reported: Option<IsolationLevel>, declared: IsolationLevel) -> IsolationLevel {
    reported.map(|i| i.min(declared)).unwrap_or(declared)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_box_has_its_own_isolation_but_never_more_than_declared() {
        use IsolationLevel as L;
        assert_eq!(box_isolation(None, L::Hardware), L::Hardware, "silence means the declaration");
        assert_eq!(box_isolation(Some(L::Process), L::Hardware), L::Process, "lowered for this box");
        assert_eq!(box_isolation(Some(L::Hardware), L::Hardware), L::Hardware);
        assert_eq!(box_isolation(Some(L::Hardware), L::Kernel), L::Kernel, "a claim above the declaration is capped");
        assert_eq!(box_isolation(Some(L::None), L::Kernel), L::None);
    }
}
