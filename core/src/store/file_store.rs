//! `FileStore`, the store the CLI uses, in a directory shared by every
//! tinybox process on the machine: the box records (one file each, in
//! [`super::boxes`]) and the snapshot list beside them.

use std::path::{Path, PathBuf};

use tinybox_sdk::model::BoxId;

use super::{Store, StoreError};
use crate::model::BoxInfo;

/// Boxes recorded in `<dir>` one file each (see [`super::boxes`]), safe
/// to share between processes.
#[derive(Debug)]
pub struct FileStore {
    boxes: super::boxes::BoxFiles,
    snapshots: super::snapshots::SnapshotFile,
}

impl FileStore {
    /// A store in `dir`. Nothing is read or made until the first operation;
    /// the directory (mode 0700) is created by the first change.
    pub fn open(dir: impl Into<PathBuf>) -> Result<FileStore, StoreError> {
        let dir = dir.into();
        Ok(FileStore {
            snapshots: super::snapshots::SnapshotFile::open(&dir)?,
            boxes: super::boxes::BoxFiles::open(dir),
        })
    }

    /// `boxes.json`: the layout's marker (in a store an older build wrote
    /// and no change has migrated yet, every record).
    pub fn path(&self) -> &Path {
        self.boxes.marker_path()
    }
}

impl Store for FileStore {
    fn list(&self) -> Result<Vec<BoxInfo>, StoreError> {
        self.boxes.list()
    }

    fn get(&self, id: &BoxId) -> Result<Option<BoxInfo>, StoreError> {
        self.boxes.get(id)
    }

    fn get_many(&self, ids: &[BoxId]) -> Result<Vec<Option<BoxInfo>>, StoreError> {
        self.boxes.get_many(ids)
    }

    fn next_free_id(&self) -> Result<BoxId, StoreError> {
        self.boxes.next_free_id()
    }

    fn insert(&self, info: BoxInfo) -> Result<(), StoreError> {
        self.boxes.insert(info)
    }

    fn update(&self, id: &BoxId, change: &mut dyn FnMut(&mut BoxInfo)) -> Result<BoxInfo, StoreError> {
        self.boxes.update(id, change)
    }

    fn remove(&self, id: &BoxId) -> Result<Option<BoxInfo>, StoreError> {
        self.boxes.remove(id)
    }

    fn snapshots(&self) -> Result<Vec<super::SnapshotEntry>, StoreError> {
        self.snapshots.list()
    }

    fn record_snapshot(&self, entry: super::SnapshotEntry) -> Result<(), StoreError> {
        self.snapshots.record(entry)
    }

    fn forget_snapshot(&self, id: &tinybox_sdk::model::SnapshotId) -> Result<(), StoreError> {
        self.snapshots.forget(id)
    }
}
