//! Snapshots, forks and templates. A template is a named snapshot; a fork
//! is a new box started from a fresh snapshot of another.

use std::path::PathBuf;

use tinybox_sdk::model::{BoxId, SnapshotId, TemplateName, WorkspaceSource};
use tinybox_sdk::protocol::BoxRef;

use super::Tinybox;
use crate::error::{Error, Result, TemplateError};
use crate::gate;
use crate::model::{BoxInfo, PendingSnapshot, SnapshotRecord};
use crate::store::{SnapshotEntry, Template};

impl Tinybox {
    /// Captures the box's workspace; gated on the sandbox's declaration.
    pub async fn snapshot(&self, id: &BoxId) -> Result<SnapshotRecord> {
        let info = self.get(id)?;
        let ws = self.instance(&info)?.clone();
        let link = self.drivers.sandbox(&ws.placement.sandbox, &ws.placement.host).await?;
        gate::admit_snapshot(&ws.placement.sandbox, &link.capabilities())?;
        gate::admit_box_snapshot(&ws)?;
        // Recorded before the driver is asked: a snapshot killed between
        // the driver's work and the record below leaves this behind, and
        // `rm` of the box then sweeps the image no record names.
        let pending = PendingSnapshot { token: pending_token(), started_at: Some(self.clock.now()) };
        self.store.update(id, &mut |info| info.pending_snapshots.push(pending.clone()))?;
        let done = |info: &mut BoxInfo| info.pending_snapshots.retain(|p| p.token != pending.token);
        let snap = match link.snapshot(BoxRef { box_id: id.clone(), handle: ws.handle }).await {
            Ok(snap) => snap,
            Err(e) => {
                // A failure the driver reported cleanly made nothing; one it
                // could not account for keeps the mark for `rm`.
                if !e.outcome_unknown() {
                    let _ = self.store.update(id, &mut |info| done(info));
                }
                return Err(e);
            }
        };
        let record = SnapshotRecord { id: snap, taken_at: Some(self.clock.now()) };
        // First the store-wide record, which outlives the box: a snapshot
        // taken is never one prune cannot find.
        self.store.record_snapshot(SnapshotEntry {
            id: record.id.clone(),
            sandbox: ws.placement.sandbox.clone(),
            host: ws.placement.host.clone(),
            namespace: info.spec.namespace.clone(),
            box_id: id.clone(),
            taken_at: record.taken_at,
        })?;
        self.store.update(id, &mut |info| {
            info.snapshots.push(record.clone());
            done(info);
        })?;
        self.snapshot_holds_image(id, &record.id);
        Ok(record)
    }

    /// A new box from a fresh snapshot of `id`, with the same spec otherwise.
    pub async fn fork(&self, id: &BoxId) -> Result<BoxInfo> {
        let info = self.get(id)?;
        let ws = self.instance(&info)?.clone();
        let link = self.drivers.sandbox(&ws.placement.sandbox, &ws.placement.host).await?;
        gate::admit_fork(&ws.placement.sandbox, &link.capabilities())?;
        gate::admit_box_snapshot(&ws)?;
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

/// A token no other snapshot of any process has: this process's id, the
/// time, and a count within the process.
fn pending_token() -> String {
    static COUNT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
    let n = COUNT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("{}-{nanos}-{n}", std::process::id())
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::sync::Arc;

    use super::*;
    use crate::clock::ManualClock;
    use crate::driver::DriverConfig;
    use crate::error::ErrorKind;
    use crate::model::{BoxSpec, HostName, Placement, SandboxName};
    use crate::store::{MemoryStore, Store, TemplateStore};

    fn record(id: &str, snapshot: &str, source: Option<WorkspaceSource>, dir: Option<&str>) -> BoxInfo {
        let mut spec = BoxSpec::new(Placement::new(HostName::local(), SandboxName::new("docker").unwrap()));
        spec.source = source;
        let mut info = BoxInfo::creating(BoxId::new(id).unwrap(), spec, None);
        info.snapshots.push(SnapshotRecord { id: SnapshotId::new(snapshot).unwrap(), taken_at: None });
        info.workspace_dir = dir.map(Into::into);
        info
    }

    #[test]
    fn a_snapshot_brings_only_its_recorded_directory_and_an_unrecorded_one_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Arc::new(MemoryStore::new());
        let snap = |id: &str| Some(WorkspaceSource::Snapshot { id: SnapshotId::new(id).unwrap() });
        let local = |p: &str| Some(WorkspaceSource::LocalDir { path: p.into() });
        store.insert(record("box-0", "sha-aaaaaaaaaaaa", local("/w"), Some("/w"))).unwrap();
        // A fork records what it inherited; its own source is a snapshot.
        store.insert(record("box-1", "sha-bbbbbbbbbbbb", snap("sha-aaaaaaaaaaaa"), Some("/w"))).unwrap();
        // A record from before core kept the directory: its own LocalDir source.
        store.insert(record("box-2", "sha-cccccccccccc", local("/old"), None)).unwrap();
        store.insert(record("box-3", "sha-dddddddddddd", None, None)).unwrap();
        let templates = TemplateStore::open(tmp.path()).unwrap();
        templates
            .save(Template {
                name: TemplateName::new("t").unwrap(),
                snapshot: SnapshotId::new("sha-eeeeeeeeeeee").unwrap(),
                sandbox: SandboxName::new("docker").unwrap(),
                host: HostName::local(),
                created_at: None,
                workspace_dir: Some("/t".into()),
            })
            .unwrap();
        let config = DriverConfig { search_dirs: Vec::new(), ..DriverConfig::from_env() };
        let tb = Tinybox::with_parts(store, Some(templates), Arc::new(ManualClock::new(0)), config).unwrap();
        let dir = |id: &str| tb.snapshot_workspace_dir(&SnapshotId::new(id).unwrap());
        assert_eq!(dir("sha-aaaaaaaaaaaa").unwrap().as_deref(), Some(Path::new("/w")));
        assert_eq!(dir("sha-bbbbbbbbbbbb").unwrap().as_deref(), Some(Path::new("/w")), "kept through a fork");
        assert_eq!(dir("sha-cccccccccccc").unwrap().as_deref(), Some(Path::new("/old")));
        assert_eq!(dir("sha-dddddddddddd").unwrap(), None, "a box bound to nothing binds nothing");
        assert_eq!(dir("sha-eeeeeeeeeeee").unwrap().as_deref(), Some(Path::new("/t")), "a template keeps it");
        // Any other image on the daemon, whatever its labels, is not a snapshot of this store.
        let err = dir("sha-ffffffffffff").unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Invalid);
        let message = err.to_string();
        assert!(message.starts_with("snapshot sha-ffffffffffff was not made by this store"), "{message}");
        assert!(!message.contains('\n'));
    }
}
