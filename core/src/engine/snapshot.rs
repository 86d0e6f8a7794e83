//! Snapshots, forks and templates. A template is a named snapshot; a fork
//! is a new box started from a fresh snapshot of another.

use std::path::PathBuf;

use tinybox_sdk::model::{BoxId, SnapshotId, TemplateName, WorkspaceSource};
use tinybox_sdk::protocol::BoxRef;

use super::Tinybox;
use crate::error::{Error, Result, TemplateError};
use crate::gate;
use crate::model::{BoxInfo, SnapshotRecord};
use crate::store::Template;

impl Tinybox {
    /// Captures the box's workspace; gated on the sandbox's declaration.
    pub async fn snapshot(&self, id: &BoxId) -> Result<SnapshotRecord> {
        let info = self.get(id)?;
        let ws = self.instance(&info)?.clone();
        let link = self.drivers.sandbox(&ws.placement.sandbox, &ws.placement.host).await?;
        gate::admit_snapshot(&ws.placement.sandbox, &link.capabilities())?;
        let snap = link.snapshot(BoxRef { box_id: id.clone(), handle: ws.handle }).await?;
        let record = SnapshotRecord { id: snap, taken_at: Some(self.clock.now()) };
        self.store.update(id, &mut |info| info.snapshots.push(record.clone()))?;
        Ok(record)
    }

    /// A new box from a fresh snapshot of `id`, with the same spec otherwise.
    pub async fn fork(&self, id: &BoxId) -> Result<BoxInfo> {
        let info = self.get(id)?;
        let ws = self.instance(&info)?.clone();
        let link = self.drivers.sandbox(&ws.placement.sandbox, &ws.placement.host).await?;
        gate::admit_fork(&ws.placement.sandbox, &link.capabilities())?;
        let snap = self.snapshot(id).await?;
        let mut spec = info.spec.clone();
        spec.source = Some(WorkspaceSource::Snapshot { id: snap.id });
        self.create(spec).await
    }

    /// Names a fresh snapshot of `id` as template `name`.
    pub async fn template_save(&self, name: TemplateName, id: &BoxId) -> Result<Template> {
        let templates = self.templates()?;
        let info = self.get(id)?;
        let placement = self.instance(&info)?.placement.clone();
        let snap = self.snapshot(id).await?;
        let t = Template {
            name,
            snapshot: snap.id,
            sandbox: placement.sandbox,
            host: placement.host,
            created_at: Some(self.clock.now()),
            workspace_dir: info.bound_dir().map(ToOwned::to_owned),
        };
        templates.save(t.clone())?;
        Ok(t)
    }

    pub fn template_list(&self) -> Result<Vec<Template>> {
        Ok(self.templates()?.list()?)
    }

    pub fn template_remove(&self, name: &TemplateName) -> Result<Template> {
        self.templates()?.remove(name)?.ok_or_else(|| TemplateError::NotFound(name.to_string()).into())
    }

    /// The host directory a box made from snapshot `id` binds: the one
    /// recorded for the box that took it, or for the template that names
    /// it. A snapshot this store has no record of is refused, whatever the
    /// sandbox holds under that name: an image anyone built is not one.
    pub(super) fn snapshot_workspace_dir(&self, id: &SnapshotId) -> Result<Option<PathBuf>> {
        if let Some(info) = self.store.list()?.into_iter().find(|info| info.has_snapshot(id)) {
            return Ok(info.bound_dir().map(ToOwned::to_owned));
        }
        if let Some(templates) = &self.templates
            && let Some(t) = templates.list()?.into_iter().find(|t| &t.snapshot == id)
        {
            return Ok(t.workspace_dir);
        }
        Err(Error::UnknownSnapshot(id.clone()))
    }

    pub(super) fn templates(&self) -> Result<&crate::store::TemplateStore> {
        self.templates.as_ref().ok_or_else(|| TemplateError::NoTemplates.into())
    }
}
