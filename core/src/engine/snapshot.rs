//! Snapshots, forks and templates. A template is a named snapshot; a fork
//! is a new box started from a fresh snapshot of another.

use tinybox_sdk::model::{BoxId, TemplateName, WorkspaceSource};
use tinybox_sdk::protocol::BoxRef;

use super::Tinybox;
use crate::error::{Result, TemplateError};
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

    pub(super) fn templates(&self) -> Result<&crate::store::TemplateStore> {
        self.templates.as_ref().ok_or_else(|| TemplateError::NoTemplates.into())
    }
}
