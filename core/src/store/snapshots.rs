//! Every snapshot a store took, kept after its box is gone: a box's record
//! lists its snapshots only while the box exists, so without this file a
//! removed box's snapshots would stay with their sandbox, unknown to
//! `tinybox snapshot ls` and out of `tinybox prune`'s reach, forever.
//!
//! `snapshots.json`, beside the box document rather than in it, for the
//! reason templates are: an older tinybox still loads `boxes.json`.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::StoreError;
use super::file::{DOC_VERSION, Document, JsonDoc, check_version, legacy_version};
use crate::model::{BoxId, HostName, SandboxName, SnapshotId};

/// A snapshot as it was taken: of which box, in which namespace, by which sandbox where.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SnapshotEntry {
    pub id: SnapshotId,
    pub sandbox: SandboxName,
    pub host: HostName,
    /// The box's namespace, which `sandbox.snapshot_rm` is given.
    pub namespace: String,
    /// The box it was taken of (which may be gone).
    #[serde(rename = "box")]
    pub box_id: BoxId,
    #[serde(default)]
    pub taken_at: Option<u64>,
}

/// `snapshots.json`: `{"version": 1, "snapshots": [...]}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct SnapshotsDoc {
    #[serde(default = "legacy_version")]
    version: u32,
    snapshots: Vec<SnapshotEntry>,
}

impl Default for SnapshotsDoc {
    fn default() -> Self {
        SnapshotsDoc { version: DOC_VERSION, snapshots: Vec::new() }
    }
}

impl Document for SnapshotsDoc {
    fn check(&self) -> Result<(), String> {
        check_version(self.version)?;
        let mut seen = std::collections::BTreeSet::new();
        match self.snapshots.iter().find(|s| !seen.insert(&s.id)) {
            Some(dup) => Err(format!("snapshot {} appears twice; snapshot ids are unique", dup.id)),
            None => Ok(()),
        }
    }

    fn normalize(&mut self) {
        self.version = DOC_VERSION;
        self.snapshots.sort_by(|a, b| (a.taken_at, &a.id).cmp(&(b.taken_at, &b.id)));
    }
}

/// The snapshot record of a file store, locked through `snapshots.lock`.
#[derive(Debug)]
pub(crate) struct SnapshotFile {
    doc: JsonDoc<SnapshotsDoc>,
}

impl SnapshotFile {
    pub(crate) fn open(dir: impl Into<PathBuf>) -> Result<SnapshotFile, StoreError> {
        Ok(SnapshotFile { doc: JsonDoc::open(dir, "snapshots")? })
    }

    pub(crate) fn list(&self) -> Result<Vec<SnapshotEntry>, StoreError> {
        Ok(self.doc.read()?.snapshots)
    }

    /// Records `entry`, replacing one of the same id.
    pub(crate) fn record(&self, entry: SnapshotEntry) -> Result<(), StoreError> {
        self.doc.modify(|doc| {
            doc.snapshots.retain(|s| s.id != entry.id);
            doc.snapshots.push(entry);
            Ok(())
        })
    }

    pub(crate) fn forget(&self, id: &SnapshotId) -> Result<(), StoreError> {
        self.doc.modify(|doc| {
            doc.snapshots.retain(|s| &s.id != id);
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn entry(id: &str, taken_at: u64) -> SnapshotEntry {
        SnapshotEntry {
            id: SnapshotId::new(id).unwrap(),
            sandbox: SandboxName::new("docker").unwrap(),
            host: HostName::local(),
            namespace: "s-0123456789ab".into(),
            box_id: BoxId::new("box-0").unwrap(),
            taken_at: Some(taken_at),
        }
    }

    #[test]
    fn snapshots_are_recorded_once_in_the_order_taken_and_forgotten_by_id() {
        let tmp = tempfile::tempdir().unwrap();
        let file = SnapshotFile::open(tmp.path()).unwrap();
        assert!(file.list().unwrap().is_empty());
        assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0, "a read made a file");
        file.record(entry("sha-bbbbbbbbbbbb", 20)).unwrap();
        file.record(entry("sha-aaaaaaaaaaaa", 10)).unwrap();
        file.record(entry("sha-bbbbbbbbbbbb", 20)).unwrap();
        let doc: serde_json::Value =
            serde_json::from_slice(&std::fs::read(tmp.path().join("snapshots.json")).unwrap()).unwrap();
        assert_eq!(doc["version"], 1);
        assert_eq!(doc["snapshots"][0]["id"], "sha-aaaaaaaaaaaa");
        assert_eq!(doc["snapshots"][0]["box"], "box-0");
        assert_eq!(doc["snapshots"].as_array().unwrap().len(), 2);
        file.forget(&SnapshotId::new("sha-aaaaaaaaaaaa").unwrap()).unwrap();
        let left: Vec<String> = file.list().unwrap().iter().map(|s| s.id.to_string()).collect();
        assert_eq!(left, ["sha-bbbbbbbbbbbb"]);
    }
}
