//! `pools.json`: the warm pools of a store — each one's request, size and
//! the boxes made for it — locked through `pools.lock`, apart from the
//! box records. The records decide: a box is waiting in a pool exactly
//! while its record's `pool` names it; the member lists here are where to
//! look, pruned by whoever fills the pool.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use tinybox_sdk::model::BoxId;

use super::StoreError;
use super::file::{DOC_VERSION, Document, JsonDoc, check_version, legacy_version};
use crate::request::CreateRequest;

/// One pool: what its boxes are made from, and how many wait ready.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Pool {
    pub name: String,
    /// The request every member is made from; `ttl_secs` is the ttl a box
    /// gets at hand-out unless the taker asks for another, and `env` is
    /// never set (env is the taker's).
    pub request: CreateRequest,
    pub size: u32,
    /// Boxes made for the pool, oldest first (some may have been handed
    /// out or removed since: the records say).
    #[serde(default)]
    pub members: Vec<BoxId>,
    /// Seconds since the epoch.
    #[serde(default)]
    pub created_at: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct PoolsDoc {
    #[serde(default = "legacy_version")]
    version: u32,
    pools: BTreeMap<String, Pool>,
}

impl Default for PoolsDoc {
    fn default() -> Self {
        PoolsDoc { version: DOC_VERSION, pools: BTreeMap::new() }
    }
}

impl Document for PoolsDoc {
    fn check(&self) -> Result<(), String> {
        check_version(self.version)?;
        match self.pools.iter().find(|(k, p)| *k != &p.name) {
            Some((k, p)) => Err(format!("pool {k} is recorded under the name {}", p.name)),
            None => Ok(()),
        }
    }

    fn normalize(&mut self) {
        self.version = DOC_VERSION;
    }
}

/// The pools of the store in `dir`.
#[derive(Debug)]
pub struct PoolStore {
    doc: JsonDoc<PoolsDoc>,
}

impl PoolStore {
    pub fn open(dir: impl Into<PathBuf>) -> Result<PoolStore, StoreError> {
        Ok(PoolStore { doc: JsonDoc::open(dir, "pools")? })
    }

    /// Every pool, by name.
    pub fn list(&self) -> Result<Vec<Pool>, StoreError> {
        Ok(self.doc.read()?.pools.into_values().collect())
    }

    pub fn get(&self, name: &str) -> Result<Option<Pool>, StoreError> {
        Ok(self.doc.read()?.pools.remove(name))
    }

    /// Records a new pool; `false` (and nothing written) if the name is taken.
    pub fn insert(&self, pool: Pool) -> Result<bool, StoreError> {
        self.doc.modify(|doc| {
            if doc.pools.contains_key(&pool.name) {
                return Ok(false);
            }
            doc.pools.insert(pool.name.clone(), pool);
            Ok(true)
        })
    }

    /// Forgets a pool, returning it (its members are the caller's to remove).
    pub fn remove(&self, name: &str) -> Result<Option<Pool>, StoreError> {
        self.doc.modify(|doc| Ok(doc.pools.remove(name)))
    }

    /// Adds a member to a pool; `false` if the pool is gone.
    pub fn add_member(&self, name: &str, id: BoxId) -> Result<bool, StoreError> {
        self.doc.modify(|doc| match doc.pools.get_mut(name) {
            Some(pool) => {
                pool.members.push(id);
                Ok(true)
            }
            None => Ok(false),
        })
    }

    /// Keeps only the members `keep` says are still waiting.
    pub fn retain_members(&self, name: &str, keep: &mut dyn FnMut(&BoxId) -> bool) -> Result<(), StoreError> {
        self.doc.modify(|doc| {
            if let Some(pool) = doc.pools.get_mut(name) {
                pool.members.retain(|id| keep(id));
            }
            Ok(())
        })
    }
}
