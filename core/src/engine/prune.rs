//! What each of a store's snapshots is kept for (`tinybox snapshot ls`),
//! and removing those nothing keeps (`tinybox prune`).
//!
//! A snapshot is kept while a box was made from it (its container may be
//! built on it), while it is the newest of a persistent box (`resume`
//! starts from it, and `stop` has just taken it), or while a template names
//! it. Any other — a removed box's, a fork's once the fork is gone, a live
//! box's older ones — is only disk space.

use serde::Serialize;
use tinybox_sdk::model::{BoxId, HostName, SandboxName, SnapshotId, TemplateName};
use tinybox_sdk::protocol::{ErrorCode, SnapshotRmParams};

use super::Tinybox;
use crate::error::{Error, Result};
use crate::model::{BoxInfo, Lifecycle, WorkspaceSource};
use crate::store::Template;

/// What keeps a snapshot from being pruned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum KeptBy {
    /// Box `box` was made from it.
    Source {
        #[serde(rename = "box")]
        box_id: BoxId,
    },
    /// It is the newest snapshot of persistent box `box`, which resumes from it.
    Resume {
        #[serde(rename = "box")]
        box_id: BoxId,
    },
    /// Template `template` names it.
    Template { template: TemplateName },
}

/// One snapshot the store knows of, and what keeps it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SnapshotListing {
    pub id: SnapshotId,
    pub sandbox: SandboxName,
    pub host: HostName,
    /// The namespace of the box it was taken of; unknown for a snapshot
    /// known only through a template.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The box it was taken of, which may be gone.
    #[serde(rename = "box", skip_serializing_if = "Option::is_none")]
    pub taken_of: Option<BoxId>,
    pub taken_at: Option<u64>,
    /// Empty: `prune` removes it.
    pub kept_by: Vec<KeptBy>,
}

/// What `prune` did, or would do, with one snapshot nothing keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PruneResult {
    /// A dry run: it would be removed.
    WouldRemove,
    Removed,
    /// Its sandbox no longer had it; the store forgot it.
    Gone,
    /// Its sandbox could not remove it; it stays, and so does the record.
    Failed,
}

/// One line of `prune`'s report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PruneOutcome {
    pub id: SnapshotId,
    pub sandbox: SandboxName,
    pub host: HostName,
    pub result: PruneResult,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What keeps snapshot `id`, given every box and template.
fn kept_by(id: &SnapshotId, boxes: &[BoxInfo], templates: &[Template]) -> Vec<KeptBy> {
    let mut kept = Vec::new();
    for b in boxes {
        if matches!(&b.spec.source, Some(WorkspaceSource::Snapshot { id: s }) if s == id) {
            kept.push(KeptBy::Source { box_id: b.id.clone() });
        }
        // `resume` starts from the last one listed, as here.
        if matches!(b.spec.lifecycle, Lifecycle::Persistent { .. }) && b.snapshots.last().is_some_and(|s| &s.id == id) {
            kept.push(KeptBy::Resume { box_id: b.id.clone() });
        }
    }
    kept.extend(templates.iter().filter(|t| &t.snapshot == id).map(|t| KeptBy::Template { template: t.name.clone() }));
    kept
}

/// What keeps a snapshot, as a person reads it.
fn kept_by_text(k: &KeptBy) -> String {
    match k {
        KeptBy::Source { box_id } => format!("box {box_id} was made from it"),
        KeptBy::Resume { box_id } => format!("persistent box {box_id} resumes from it"),
        KeptBy::Template { template } => format!("template {template} names it"),
    }
}

impl Tinybox {
    /// Every snapshot this store took or names — recorded when taken, listed
    /// by a box, or named by a template — in the order taken, each with
    /// what keeps it.
    pub fn snapshot_list(&self) -> Result<Vec<SnapshotListing>> {
        let boxes = self.store.list()?;
        let templates = match &self.templates {
            Some(t) => t.list()?,
            None => Vec::new(),
        };
        let mut all: Vec<SnapshotListing> = Vec::new();
        let mut add = |l: SnapshotListing| {
            if !all.iter().any(|o| o.id == l.id) {
                all.push(l);
            }
        };
        for e in self.store.snapshots()? {
            add(SnapshotListing {
                id: e.id,
                sandbox: e.sandbox,
                host: e.host,
                namespace: Some(e.namespace),
                taken_of: Some(e.box_id),
                taken_at: e.taken_at,
                kept_by: Vec::new(),
            });
        }
        // Snapshots taken before the store kept its own record of them.
        for b in &boxes {
            for s in &b.snapshots {
                add(SnapshotListing {
                    id: s.id.clone(),
                    sandbox: b.spec.workspace.sandbox.clone(),
                    host: b.spec.workspace.host.clone(),
                    namespace: Some(b.spec.namespace.clone()),
                    taken_of: Some(b.id.clone()),
                    taken_at: s.taken_at,
                    kept_by: Vec::new(),
                });
            }
        }
        for t in &templates {
            add(SnapshotListing {
                id: t.snapshot.clone(),
                sandbox: t.sandbox.clone(),
                host: t.host.clone(),
                namespace: None,
                taken_of: None,
                taken_at: t.created_at,
                kept_by: Vec::new(),
            });
        }
        for l in &mut all {
            l.kept_by = kept_by(&l.id, &boxes, &templates);
        }
        all.sort_by(|a, b| (a.taken_at, &a.id).cmp(&(b.taken_at, &b.id)));
        Ok(all)
    }

    /// Removes every snapshot nothing keeps, each through its own sandbox;
    /// with `dry_run`, only says which. One failure does not stop the rest.
    pub async fn prune(&self, dry_run: bool) -> Result<Vec<PruneOutcome>> {
        let mut outcomes = Vec::new();
        for l in self.snapshot_list()?.into_iter().filter(|l| l.kept_by.is_empty()) {
            let (result, error) = if dry_run {
                (PruneResult::WouldRemove, None)
            } else {
                match self.remove_snapshot(&l).await {
                    Ok(result) => (result, None),
                    Err(e) => (PruneResult::Failed, Some(e.to_string())),
                }
            };
            outcomes.push(PruneOutcome { id: l.id, sandbox: l.sandbox, host: l.host, result, error });
        }
        Ok(outcomes)
    }

    /// Removes one snapshot nothing keeps, as `prune` would, leaving every
    /// other alone: for a caller that took it and is done with it (the
    /// conformance kit). One something keeps is refused, naming what.
    pub async fn snapshot_remove(&self, id: &SnapshotId) -> Result<PruneResult> {
        let listing = self.snapshot_list()?.into_iter().find(|l| &l.id == id);
        let Some(l) = listing else { return Err(Error::UnknownSnapshot(id.clone())) };
        if let Some(kept) = l.kept_by.first() {
            return Err(Error::SnapshotKept { id: id.clone(), by: kept_by_text(kept) });
        }
        self.remove_snapshot(&l).await
    }

    /// Deletes one snapshot in its sandbox, then forgets it everywhere the
    /// store lists it.
    async fn remove_snapshot(&self, l: &SnapshotListing) -> Result<PruneResult> {
        let link = self.drivers.sandbox(&l.sandbox, &l.host).await?;
        // Only a snapshot known through a template has no namespace, and a
        // template keeps its snapshot: the fallback is never sent in practice.
        let namespace = l.namespace.clone().unwrap_or_else(crate::model::spec::default_namespace);
        let result = match link.snapshot_rm(SnapshotRmParams { id: l.id.clone(), namespace }).await {
            Ok(()) => PruneResult::Removed,
            Err(Error::Driver { code: ErrorCode::NotFound, .. }) => PruneResult::Gone,
            Err(e) => return Err(e),
        };
        self.store.forget_snapshot(&l.id)?;
        self.snapshot_releases_image(&l.id);
        for b in self.store.list()?.into_iter().filter(|b| b.has_snapshot(&l.id)) {
            self.store.update(&b.id, &mut |info| info.snapshots.retain(|s| s.id != l.id))?;
        }
        Ok(result)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::clock::ManualClock;
    use crate::driver::DriverConfig;
    use crate::model::{BoxSpec, Phase, Placement, SnapshotRecord};
    use crate::store::{MemoryStore, SnapshotEntry, Store, TemplateStore};

    fn sid(s: &str) -> SnapshotId {
        SnapshotId::new(format!("sha-{}", s.repeat(12))).unwrap()
    }

    fn docker() -> Placement {
        Placement::new(HostName::local(), SandboxName::new("docker").unwrap())
    }

    fn boxed(id: &str, spec: BoxSpec, snapshots: &[&str], phase: Phase) -> BoxInfo {
        let mut info = BoxInfo::creating(BoxId::new(id).unwrap(), spec, Some(1));
        info.phase = phase;
        info.snapshots = snapshots.iter().map(|s| SnapshotRecord { id: sid(s), taken_at: Some(5) }).collect();
        info
    }

    fn engine(store: Arc<MemoryStore>, dir: &std::path::Path) -> Tinybox {
        let config = DriverConfig { search_dirs: Vec::new(), ..DriverConfig::from_env() };
        let templates = TemplateStore::open(dir).unwrap();
        Tinybox::with_parts(store, Some(templates), Arc::new(ManualClock::new(0)), config).unwrap()
    }

    #[tokio::test]
    async fn only_what_no_box_template_or_resume_keeps_is_pruned() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Arc::new(MemoryStore::new());
        // A live box with two snapshots; the second was forked into box-1.
        store.insert(boxed("box-0", BoxSpec::new(docker()), &["a", "b"], Phase::Created)).unwrap();
        let mut fork = BoxSpec::new(docker());
        fork.source = Some(WorkspaceSource::Snapshot { id: sid("b") });
        store.insert(boxed("box-1", fork, &[], Phase::Created)).unwrap();
        // A stopped persistent box resumes from its newest.
        let mut persistent = BoxSpec::new(docker());
        persistent.lifecycle = Lifecycle::persistent(std::time::Duration::from_secs(60));
        store.insert(boxed("box-2", persistent, &["c", "d"], Phase::Stopped)).unwrap();
        // A removed box's snapshot, known only from the store's own record.
        store
            .record_snapshot(SnapshotEntry {
                id: sid("f"),
                sandbox: SandboxName::new("docker").unwrap(),
                host: HostName::local(),
                namespace: "s-0".into(),
                box_id: BoxId::new("box-9").unwrap(),
                taken_at: Some(1),
            })
            .unwrap();
        let tb = engine(store.clone(), tmp.path());
        tb.templates()
            .unwrap()
            .save(Template {
                name: TemplateName::new("t").unwrap(),
                snapshot: sid("e"),
                sandbox: SandboxName::new("docker").unwrap(),
                host: HostName::local(),
                created_at: Some(9),
                workspace_dir: None,
            })
            .unwrap();

        let listed = tb.snapshot_list().unwrap();
        let kept = |s: &str| listed.iter().find(|l| l.id == sid(s)).unwrap().kept_by.clone();
        assert_eq!(listed.len(), 6, "{listed:?}");
        assert_eq!(kept("a"), []);
        assert_eq!(kept("b"), [KeptBy::Source { box_id: BoxId::new("box-1").unwrap() }]);
        assert_eq!(kept("c"), []);
        assert_eq!(kept("d"), [KeptBy::Resume { box_id: BoxId::new("box-2").unwrap() }]);
        assert_eq!(kept("e"), [KeptBy::Template { template: TemplateName::new("t").unwrap() }]);
        assert_eq!(kept("f"), []);
        assert_eq!(listed[0].id, sid("f"), "in the order taken");
        assert_eq!(listed[0].taken_of, Some(BoxId::new("box-9").unwrap()), "a removed box's snapshot says whose");

        // A dry run touches no driver and changes nothing.
        let dry = tb.prune(true).await.unwrap();
        let named: Vec<SnapshotId> = dry.iter().map(|o| o.id.clone()).collect();
        assert_eq!(named, [sid("f"), sid("a"), sid("c")]);
        assert!(dry.iter().all(|o| o.result == PruneResult::WouldRemove && o.error.is_none()));
        assert_eq!(tb.snapshot_list().unwrap(), listed);

        let json = serde_json::to_value(&listed).unwrap();
        assert_eq!(json[0]["box"], "box-9");
        assert_eq!(json[0]["kept_by"], serde_json::json!([]));
        let d = json.as_array().unwrap().iter().find(|l| l["id"] == sid("d").as_str()).unwrap();
        assert_eq!(d["kept_by"], serde_json::json!([{"kind": "resume", "box": "box-2"}]));
    }

    #[tokio::test]
    async fn a_snapshot_that_cannot_be_removed_stays_recorded_and_says_why() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Arc::new(MemoryStore::new());
        let entry = SnapshotEntry {
            id: sid("a"),
            // No such driver here: removing fails, as with a sandbox that removes none.
            sandbox: SandboxName::new("nosuch").unwrap(),
            host: HostName::local(),
            namespace: "s-0".into(),
            box_id: BoxId::new("box-0").unwrap(),
            taken_at: Some(1),
        };
        store.record_snapshot(entry.clone()).unwrap();
        let tb = engine(store.clone(), tmp.path());
        let out = tb.prune(false).await.unwrap();
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].result, PruneResult::Failed);
        let error = out[0].error.as_deref().unwrap();
        assert!(error.contains("no driver named nosuch") && !error.contains('\n'), "{error}");
        assert_eq!(store.snapshots().unwrap(), [entry], "a snapshot still there is still recorded");
    }

    #[tokio::test]
    async fn one_snapshot_is_removed_alone_and_a_kept_or_unknown_one_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Arc::new(MemoryStore::new());
        store.insert(boxed("box-0", BoxSpec::new(docker()), &["a", "b"], Phase::Created)).unwrap();
        let mut fork = BoxSpec::new(docker());
        fork.source = Some(WorkspaceSource::Snapshot { id: sid("b") });
        store.insert(boxed("box-1", fork, &[], Phase::Created)).unwrap();
        let tb = engine(store.clone(), tmp.path());
        let err = tb.snapshot_remove(&sid("b")).await.unwrap_err();
        assert!(
            matches!(&err, Error::SnapshotKept { id, by } if *id == sid("b") && by == "box box-1 was made from it"),
            "{err}"
        );
        let err = tb.snapshot_remove(&sid("z")).await.unwrap_err();
        assert!(matches!(err, Error::UnknownSnapshot(_)), "{err:?}");
        // Nothing keeps a: it goes to its sandbox (none installed here, so
        // that fails), and b is not touched.
        let err = tb.snapshot_remove(&sid("a")).await.unwrap_err();
        assert!(matches!(&err, Error::DriverNotFound { name, .. } if name == "docker"), "{err}");
        assert!(store.get(&BoxId::new("box-0").unwrap()).unwrap().unwrap().has_snapshot(&sid("b")));
    }
}
