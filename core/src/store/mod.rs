//! The store owns the fact that a box exists. The CLI creates a box in one
//! process and runs commands in it from another, so the record outlives both.
//!
//! Synchronous on purpose: every implementation is a memory map or a small
//! local file, and async would push executor choice onto every caller.

mod boxes;
mod error;
pub(crate) mod file;
mod file_store;
pub mod hosts;
mod memory;
pub mod pools;
pub mod settings;
pub mod snapshots;
pub mod templates;
pub mod verdicts;

use tinybox_sdk::model::{BoxId, SnapshotId};

use crate::model::BoxInfo;

pub use error::StoreError;
pub use file_store::FileStore;
pub use hosts::HostStore;
pub use memory::MemoryStore;
pub use pools::{Pool, PoolStore};
pub use settings::Settings;
pub use snapshots::SnapshotEntry;
pub use templates::{Template, TemplateStore};

/// How many identifier collisions `insert_new` retries before giving up.
pub const INSERT_RETRIES: usize = 1000;

/// Where boxes are recorded.
pub trait Store: Send + Sync {
    /// Every box, ordered by identifier (box-2 before box-10).
    fn list(&self) -> Result<Vec<BoxInfo>, StoreError>;
    fn get(&self, id: &BoxId) -> Result<Option<BoxInfo>, StoreError>;
    /// Each of `ids`, in order, for a caller that needs several: the file
    /// store reads them under one shared lock and one read of its layout;
    /// this default asks for each in turn.
    fn get_many(&self, ids: &[BoxId]) -> Result<Vec<Option<BoxInfo>>, StoreError> {
        ids.iter().map(|id| self.get(id)).collect()
    }
    /// The lowest free `box-N`.
    fn next_free_id(&self) -> Result<BoxId, StoreError>;
    /// Records a new box; `Exists` if the identifier is taken.
    fn insert(&self, info: BoxInfo) -> Result<(), StoreError>;
    /// Changes a box in place under the store's lock; `NotFound` if absent.
    fn update(&self, id: &BoxId, change: &mut dyn FnMut(&mut BoxInfo)) -> Result<BoxInfo, StoreError>;
    /// Removes a box, returning it if it was there.
    fn remove(&self, id: &BoxId) -> Result<Option<BoxInfo>, StoreError>;
    /// Every snapshot recorded with [`Store::record_snapshot`], in the order taken.
    fn snapshots(&self) -> Result<Vec<SnapshotEntry>, StoreError>;
    /// Remembers a snapshot beyond its box's record (prune finds it there).
    fn record_snapshot(&self, entry: SnapshotEntry) -> Result<(), StoreError>;
    /// Forgets a snapshot's entry, once its sandbox no longer has it.
    fn forget_snapshot(&self, id: &SnapshotId) -> Result<(), StoreError>;
}

/// Allocates the lowest free identifier and records `make(id)` under it.
/// Allocation and insertion are two operations, so another writer can take
/// the identifier in between: a collision becomes a retry with the next
/// free name rather than a failure.
pub fn insert_new(store: &dyn Store, make: &mut dyn FnMut(BoxId) -> BoxInfo) -> Result<BoxId, StoreError> {
    for _ in 0..INSERT_RETRIES {
        let id = store.next_free_id()?;
        match store.insert(make(id.clone())) {
            Ok(()) => return Ok(id),
            Err(StoreError::Exists(_)) => continue,
            Err(e) => return Err(e),
        }
    }
    Err(StoreError::Exhausted(INSERT_RETRIES))
}

/// The numeric part of a `box-N` identifier, for ordering and allocation.
pub fn box_number(id: &BoxId) -> Option<u64> {
    // Only the canonical spelling counts: `box-01` is a name, not number 1.
    let n: u64 = id.as_str().strip_prefix("box-")?.parse().ok()?;
    (format!("box-{n}") == id.as_str()).then_some(n)
}

/// The lowest `box-N` not in `taken`.
pub fn lowest_free<'a>(taken: impl IntoIterator<Item = &'a BoxId>) -> BoxId {
    let used: std::collections::BTreeSet<u64> = taken.into_iter().filter_map(box_number).collect();
    let n = (0..).find(|n| !used.contains(n)).expect("a free number exists");
    BoxId::new(format!("box-{n}")).expect("box-N is a valid name")
}

/// Orders boxes by number where they have one, then by name.
pub fn sort_boxes(boxes: &mut [BoxInfo]) {
    let key = |b: &BoxInfo| (box_number(&b.id).is_none(), box_number(&b.id), b.id.as_str().to_owned());
    boxes.sort_by_key(key);
}
