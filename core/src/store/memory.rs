//! A store that lives and dies with the process: for tests and for runs
//! that never hand a box to another process.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

use tinybox_sdk::model::{BoxId, SnapshotId};

use super::{SnapshotEntry, Store, StoreError, lowest_free, sort_boxes};
use crate::model::BoxInfo;

/// Boxes kept in a map behind a mutex.
#[derive(Debug, Default)]
pub struct MemoryStore {
    boxes: Mutex<BTreeMap<BoxId, BoxInfo>>,
    snapshots: Mutex<Vec<SnapshotEntry>>,
}

impl MemoryStore {
    pub fn new() -> Self {
        Self::default()
    }

    fn boxes(&self) -> MutexGuard<'_, BTreeMap<BoxId, BoxInfo>> {
        // Every change is applied to a copy and stored whole, so a panic
        // while the lock was held cannot have left a half-changed map.
        self.boxes.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn snapshot_entries(&self) -> MutexGuard<'_, Vec<SnapshotEntry>> {
        // As for boxes: each change is one call on the vector, whole or not at all.
        self.snapshots.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Store for MemoryStore {
    fn list(&self) -> Result<Vec<BoxInfo>, StoreError> {
        let mut boxes: Vec<BoxInfo> = self.boxes().values().cloned().collect();
        sort_boxes(&mut boxes);
        Ok(boxes)
    }

    fn get(&self, id: &BoxId) -> Result<Option<BoxInfo>, StoreError> {
        Ok(self.boxes().get(id).cloned())
    }

    fn next_free_id(&self) -> Result<BoxId, StoreError> {
        Ok(lowest_free(self.boxes().keys()))
    }

    fn insert(&self, info: BoxInfo) -> Result<(), StoreError> {
        let mut boxes = self.boxes();
        if boxes.contains_key(&info.id) {
            return Err(StoreError::Exists(info.id));
        }
        boxes.insert(info.id.clone(), info);
        Ok(())
    }

    fn update(&self, id: &BoxId, change: &mut dyn FnMut(&mut BoxInfo)) -> Result<BoxInfo, StoreError> {
        let mut boxes = self.boxes();
        let mut changed = boxes.get(id).cloned().ok_or_else(|| StoreError::NotFound(id.clone()))?;
        change(&mut changed);
        // The identifier is the record's key: an update changes a box in
        // place and cannot rename it (FileStore behaves the same).
        changed.id = id.clone();
        boxes.insert(id.clone(), changed.clone());
        Ok(changed)
    }

    fn remove(&self, id: &BoxId) -> Result<Option<BoxInfo>, StoreError> {
        Ok(self.boxes().remove(id))
    }

    fn snapshots(&self) -> Result<Vec<SnapshotEntry>, StoreError> {
        Ok(self.snapshot_entries().clone())
    }

    fn record_snapshot(&self, entry: SnapshotEntry) -> Result<(), StoreError> {
        let mut all = self.snapshot_entries();
        all.retain(|s| s.id != entry.id);
        all.push(entry);
        Ok(())
    }

    fn forget_snapshot(&self, id: &SnapshotId) -> Result<(), StoreError> {
        self.snapshot_entries().retain(|s| &s.id != id);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{BoxSpec, Placement};

    fn record(id: &str) -> BoxInfo {
        BoxInfo::creating(BoxId::new(id).unwrap(), BoxSpec::new(Placement::local_passthrough()), Some(7))
    }

    #[test]
    fn update_cannot_rename_a_box() {
        let store = MemoryStore::new();
        store.insert(record("box-0")).unwrap();
        let id = BoxId::new("box-0").unwrap();
        let out = store.update(&id, &mut |b| b.id = BoxId::new("box-9").unwrap()).unwrap();
        assert_eq!(out.id, id);
        assert!(store.get(&BoxId::new("box-9").unwrap()).unwrap().is_none());
        assert_eq!(store.list().unwrap().len(), 1);
    }

    #[test]
    fn a_panicking_update_leaves_the_record_unchanged() {
        let store = MemoryStore::new();
        store.insert(record("box-0")).unwrap();
        let id = BoxId::new("box-0").unwrap();
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _ = store.update(&id, &mut |b| {
                b.created_at = Some(99);
                panic!("change failed half-way");
            });
        }));
        assert!(caught.is_err());
        assert_eq!(store.get(&id).unwrap().unwrap().created_at, Some(7));
    }
}
