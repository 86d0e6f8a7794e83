//! Box records, one file each, so that finding, adding or changing one box
//! costs the same in a store of ten boxes as in one of ten thousand.
//!
//! ```text
//! <store>/boxes.json        {"version": 2, "layout": "boxes/", "boxes": []}
//! <store>/boxes/<id>.json   one BoxInfo each
//! <store>/boxes/.lowest     a lower bound on the lowest free box number
//! <store>/boxes.lock        flock: shared to read, exclusive to change
//! <store>/.boxes.tmp/       where records are written before their rename
//! ```
//!
//! `boxes.json` stays as the layout's marker. A store written by a build
//! that kept every box in that one document (version 1) is read as it is
//! and moved to this layout by the first change, under the exclusive lock;
//! an older build that meets a version 2 marker refuses the store ("upgrade
//! tinybox") instead of taking it for empty. See ADR 0018.

use std::fs::{self, File};
use std::io::{self, Write};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use tinybox_sdk::model::BoxId;

use super::file::legacy_version;
use super::{StoreError, box_number, sort_boxes};
use crate::model::BoxInfo;

/// The layout version of `boxes.json` this build writes: 1 held every
/// record in the document, 2 holds them in `boxes/`.
pub(crate) const LAYOUT_VERSION: u32 = 2;

/// `boxes.json`: every record in version 1, the marker in version 2.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Marker {
    #[serde(default = "legacy_version")]
    version: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    layout: Option<String>,
    boxes: Vec<BoxInfo>,
}

impl Marker {
    fn current() -> Marker {
        Marker { version: LAYOUT_VERSION, layout: Some("boxes/".into()), boxes: Vec::new() }
    }
}

/// What `boxes.json` says about where the records are.
enum Layout {
    /// Nothing was ever written: no boxes.
    Empty,
    /// Version 1: the records are in the document.
    Document(Vec<BoxInfo>),
    /// Version 2: the records are in `boxes/`; `marked` is false when the
    /// marker is missing beside them (removed by hand): the records are
    /// adopted, never thrown away.
    Files { marked: bool },
}

/// The records of one store directory.
#[derive(Debug)]
pub(crate) struct BoxFiles {
    dir: PathBuf,
    marker: PathBuf,
    records: PathBuf,
    temps: PathBuf,
    lock: PathBuf,
}

impl BoxFiles {
    /// Touches nothing: directories and files are made by the first change.
    pub(crate) fn open(dir: impl Into<PathBuf>) -> BoxFiles {
        let dir = dir.into();
        BoxFiles {
            marker: dir.join("boxes.json"),
            records: dir.join("boxes"),
            temps: dir.join(".boxes.tmp"),
            lock: dir.join("boxes.lock"),
            dir,
        }
    }

    /// The layout's marker (in an old store, the document of every box).
    pub(crate) fn marker_path(&self) -> &Path {
        &self.marker
    }

    pub(crate) fn list(&self) -> Result<Vec<BoxInfo>, StoreError> {
        let _lock = self.lock_shared()?;
        let mut boxes = match self.layout()? {
            Layout::Empty => Vec::new(),
            Layout::Document(boxes) => boxes,
            Layout::Files { .. } => {
                let mut boxes = Vec::new();
                for id in self.record_ids()? {
                    // Removed between the listing and the read: not a box any more.
                    if let Some(info) = self.read_record(&id)? {
                        boxes.push(info);
                    }
                }
                boxes
            }
        };
        sort_boxes(&mut boxes);
        Ok(boxes)
    }

    pub(crate) fn get(&self, id: &BoxId) -> Result<Option<BoxInfo>, StoreError> {
        Ok(self.get_many(std::slice::from_ref(id))?.pop().flatten())
    }

    /// Each of `ids` under one shared lock and one read of the layout:
    /// a pool's members, say, at the cost of their records alone.
    pub(crate) fn get_many(&self, ids: &[BoxId]) -> Result<Vec<Option<BoxInfo>>, StoreError> {
        let _lock = self.lock_shared()?;
        match self.layout()? {
            Layout::Empty => Ok(vec![None; ids.len()]),
            Layout::Document(boxes) => Ok(ids.iter().map(|id| boxes.iter().find(|b| &b.id == id).cloned()).collect()),
            Layout::Files { .. } => ids.iter().map(|id| self.read_record(id)).collect(),
        }
    }

    /// The lowest free `box-N`: probed upwards from the recorded lower
    /// bound, so it costs one lookup per box above the bound, not one per box.
    pub(crate) fn next_free_id(&self) -> Result<BoxId, StoreError> {
        let _lock = self.lock_shared()?;
        match self.layout()? {
            Layout::Empty => Ok(numbered(0)),
            Layout::Document(boxes) => Ok(super::lowest_free(boxes.iter().map(|b| &b.id))),
            Layout::Files { .. } => {
                let mut n = self.lowest_bound();
                while self.record_path(&numbered(n)).exists() {
                    n += 1;
                }
                Ok(numbered(n))
            }
        }
    }

    pub(crate) fn insert(&self, info: BoxInfo) -> Result<(), StoreError> {
        let _lock = self.lock_for_change()?;
        let path = self.record_path(&info.id);
        if path.exists() {
            return Err(StoreError::Exists(info.id));
        }
        self.write_record(&info)?;
        if let Some(n) = box_number(&info.id)
            && n == self.lowest_bound()
        {
            // Best effort: a bound left lower than it could be only costs
            // a lookup at the next allocation.
            let _ = self.set_lowest_bound(n + 1);
        }
        Ok(())
    }

    pub(crate) fn update(&self, id: &BoxId, change: &mut dyn FnMut(&mut BoxInfo)) -> Result<BoxInfo, StoreError> {
        let _lock = self.lock_for_change()?;
        let before = self.read_record(id)?.ok_or_else(|| StoreError::NotFound(id.clone()))?;
        let mut after = before.clone();
        change(&mut after);
        // The identifier is the record's key: an update cannot rename.
        after.id = id.clone();
        if after != before {
            self.write_record(&after)?;
        }
        Ok(after)
    }

    pub(crate) fn remove(&self, id: &BoxId) -> Result<Option<BoxInfo>, StoreError> {
        let _lock = self.lock_for_change()?;
        let Some(info) = self.read_record(id)? else { return Ok(None) };
        // The bound is lowered before the record goes, so that it is never
        // above a free number, whatever is interrupted.
        if let Some(n) = box_number(id)
            && n < self.lowest_bound()
        {
            self.set_lowest_bound(n)?;
        }
        let path = self.record_path(id);
        fs::remove_file(&path).map_err(io_at(&path))?;
        sync_dir(&self.records)?;
        Ok(Some(info))
    }

    fn layout(&self) -> Result<Layout, StoreError> {
        let bytes = match fs::read(&self.marker) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound && self.records.is_dir() => {
                return Ok(Layout::Files { marked: false });
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Layout::Empty),
            Err(e) => return Err(io_at(&self.marker)(e)),
        };
        let corrupt = |detail: String| StoreError::Corrupt { path: self.marker.clone(), detail };
        let marker: Marker = serde_json::from_slice(&bytes).map_err(|e| corrupt(e.to_string()))?;
        match marker.version {
            1 => {
                let mut seen = std::collections::BTreeSet::new();
                if let Some(dup) = marker.boxes.iter().find(|b| !seen.insert(&b.id)) {
                    return Err(corrupt(format!("box {} appears twice; identifiers are unique", dup.id)));
                }
                Ok(Layout::Document(marker.boxes))
            }
            LAYOUT_VERSION if marker.boxes.is_empty() => Ok(Layout::Files { marked: true }),
            LAYOUT_VERSION => Err(corrupt(format!(
                "a version {LAYOUT_VERSION} store keeps its boxes in {}, yet this document lists {}",
                self.records.display(),
                marker.boxes.len()
            ))),
            v => Err(corrupt(format!(
                "version {v} is newer than this tinybox reads (up to {LAYOUT_VERSION}); upgrade tinybox"
            ))),
        }
    }

    fn record_path(&self, id: &BoxId) -> PathBuf {
        // Box names are [A-Za-z0-9._-], never `.` or `..`: always one file name.
        self.records.join(format!("{id}.json"))
    }

    fn record_ids(&self) -> Result<Vec<BoxId>, StoreError> {
        let entries = match fs::read_dir(&self.records) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io_at(&self.records)(e)),
        };
        let mut ids = Vec::new();
        for entry in entries {
            let entry = entry.map_err(io_at(&self.records))?;
            let name = entry.file_name();
            // `.lowest` has no suffix; a box's own name may start with a dot.
            let Some(stem) = name.to_str().and_then(|n| n.strip_suffix(".json")) else { continue };
            let id = BoxId::new(stem)
                .map_err(|e| StoreError::Corrupt { path: entry.path(), detail: format!("not a box record: {e}") })?;
            ids.push(id);
        }
        Ok(ids)
    }

    fn read_record(&self, id: &BoxId) -> Result<Option<BoxInfo>, StoreError> {
        let path = self.record_path(id);
        let bytes = match fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_at(&path)(e)),
        };
        let corrupt = |detail: String| StoreError::Corrupt { path: path.clone(), detail };
        let info: BoxInfo = serde_json::from_slice(&bytes).map_err(|e| corrupt(e.to_string()))?;
        if &info.id != id {
            return Err(corrupt(format!("the file is named for {id} but records box {}", info.id)));
        }
        Ok(Some(info))
    }

    /// Temporary file, fsync, rename, fsync the directory: a reader sees
    /// the old record or the new one, and after a crash the rename holds.
    fn write_record(&self, info: &BoxInfo) -> Result<(), StoreError> {
        self.replace(&self.record_path(&info.id), &pretty(info, &self.records)?, true)?;
        sync_dir(&self.records)
    }

    fn replace(&self, path: &Path, bytes: &[u8], durable: bool) -> Result<(), StoreError> {
        let mut temp = tempfile::Builder::new()
            .prefix("record.")
            .suffix(".tmp")
            .tempfile_in(&self.temps)
            .map_err(io_at(&self.temps))?;
        temp.write_all(bytes).map_err(io_at(temp.path()))?;
        if durable {
            temp.as_file().sync_all().map_err(io_at(temp.path()))?;
        }
        temp.persist(path).map_err(|e| io_at(path)(e.error))?;
        Ok(())
    }

    fn bound_path(&self) -> PathBuf {
        self.records.join(".lowest")
    }

    /// No free box number is below this (0 when unknown).
    fn lowest_bound(&self) -> u64 {
        fs::read_to_string(self.bound_path()).ok().and_then(|s| s.trim().parse().ok()).unwrap_or(0)
    }

    fn set_lowest_bound(&self, n: u64) -> Result<(), StoreError> {
        // Not fsynced: after a power loss an older bound may come back, and
        // one above a free number would only skip that number, never reuse a
        // taken one (insert checks the record itself).
        self.replace(&self.bound_path(), format!("{n}\n").as_bytes(), false)
    }

    fn lock_shared(&self) -> Result<Option<File>, StoreError> {
        super::file::lock_shared(&self.lock)
    }

    /// The exclusive lock, with the layout made current and the temporary
    /// directory cleared of what killed writers left.
    fn lock_for_change(&self) -> Result<File, StoreError> {
        let mut builder = fs::DirBuilder::new();
        builder.recursive(true).mode(0o700);
        builder.create(&self.dir).map_err(io_at(&self.dir))?;
        let file = super::file::lock_exclusive(&self.lock)?;
        builder.create(&self.temps).map_err(io_at(&self.temps))?;
        self.clear_temps();
        match self.layout()? {
            Layout::Files { marked: true } => {}
            Layout::Files { marked: false } | Layout::Empty => self.migrate(None)?,
            Layout::Document(boxes) => self.migrate(Some(boxes))?,
        }
        Ok(file)
    }

    /// Writes every record of a version 1 document to its own file (with
    /// `None`, keeps the records already in `boxes/`), then replaces the
    /// document by the marker. Interrupted, it leaves the old document in
    /// force and is redone by the next change.
    fn migrate(&self, document: Option<Vec<BoxInfo>>) -> Result<(), StoreError> {
        fs::DirBuilder::new().recursive(true).mode(0o700).create(&self.records).map_err(io_at(&self.records))?;
        let taken = match document {
            Some(boxes) => {
                // Files a previous, interrupted migration wrote for boxes
                // the document no longer holds are not boxes.
                for id in self.record_ids()? {
                    if !boxes.iter().any(|b| b.id == id) {
                        let path = self.record_path(&id);
                        fs::remove_file(&path).map_err(io_at(&path))?;
                    }
                }
                for info in &boxes {
                    self.replace(&self.record_path(&info.id), &pretty(info, &self.records)?, true)?;
                }
                boxes.into_iter().map(|b| b.id).collect()
            }
            None => self.record_ids()?,
        };
        let lowest = box_number(&super::lowest_free(&taken)).unwrap_or(0);
        self.set_lowest_bound(lowest)?;
        sync_dir(&self.records)?;
        self.replace(&self.marker, &pretty(&Marker::current(), &self.marker)?, true)?;
        sync_dir(&self.dir)
    }

    /// Only under the exclusive lock, when no writer can be using one.
    fn clear_temps(&self) {
        let Ok(entries) = fs::read_dir(&self.temps) else { return };
        for entry in entries.flatten() {
            // Best effort: a leftover only costs disk space.
            let _ = fs::remove_file(entry.path());
        }
    }
}

/// `value` as the pretty JSON the store writes, ending in a newline.
fn pretty(value: &impl Serialize, path: &Path) -> Result<Vec<u8>, StoreError> {
    let mut bytes =
        serde_json::to_vec_pretty(value).map_err(|e| io_at(path)(io::Error::new(io::ErrorKind::InvalidData, e)))?;
    bytes.push(b'\n');
    Ok(bytes)
}

fn numbered(n: u64) -> BoxId {
    BoxId::new(format!("box-{n}")).expect("box-N is a valid name")
}

fn io_at(path: &Path) -> impl FnOnce(io::Error) -> StoreError {
    let path = path.to_owned();
    move |source| StoreError::Io { path, source }
}

fn sync_dir(dir: &Path) -> Result<(), StoreError> {
    File::open(dir).and_then(|d| d.sync_all()).map_err(io_at(dir))
}

#[cfg(test)]
#[path = "boxes_tests.rs"]
mod tests;
