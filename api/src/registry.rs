//! The boxes this server made: the only ones its callers can reach (a box
//! of another server, or of the CLI, is refused as if it did not exist),
//! with what E2B callers said about each (template, metadata), which
//! tinybox does not keep.

use std::collections::BTreeMap;
use std::sync::Mutex;

use tinybox_core::model::BoxId;

use crate::ApiError;

/// What was said about a box when it was made through E2B.
#[derive(Debug, Clone, Default)]
pub struct Made {
    pub template: Option<String>,
    pub metadata: BTreeMap<String, String>,
}

#[derive(Debug, Default)]
pub struct Registry {
    boxes: Mutex<BTreeMap<BoxId, Made>>,
}

impl Registry {
    pub fn insert(&self, id: BoxId, made: Made) {
        self.boxes.lock().expect("registry").insert(id, made);
    }

    pub fn remove(&self, id: &BoxId) {
        self.boxes.lock().expect("registry").remove(id);
    }

    pub fn ids(&self) -> Vec<BoxId> {
        self.boxes.lock().expect("registry").keys().cloned().collect()
    }

    pub fn made(&self, id: &BoxId) -> Option<Made> {
        self.boxes.lock().expect("registry").get(id).cloned()
    }

    /// `id` as a box this server made, or the refusal saying what can be used.
    pub fn mine(&self, id: &str) -> Result<BoxId, ApiError> {
        let id = BoxId::new(id).map_err(tinybox_core::Error::from)?;
        if self.boxes.lock().expect("registry").contains_key(&id) {
            return Ok(id);
        }
        Err(ApiError::NotMine(id.to_string()))
    }
}
