//! Warm pools: boxes made ahead of time from one request, handed out at
//! once to a create that asks for the pool and matches it.
//!
//! A member is an ordinary box record whose `pool` names its pool; handing
//! it out is one change to that record under the store's lock (the pool
//! field cleared, its ttl and env set, its clock started), so a box is
//! never handed out twice and never goes back. Filling is the job of
//! whoever holds the supervisor's lock — the daemon, or `pool create`/`pool
//! fill` when none runs — so a member still being made with nobody holding
//! that lock was left by a filler that died, and is removed.

mod error;
mod outcome;

use std::collections::BTreeSet;

use serde::Serialize;
use tinybox_sdk::model::BoxId;
use tinybox_sdk::model::names::validate_name;

use super::Tinybox;
use crate::error::Result;
use crate::model::{BoxInfo, Phase};
use crate::request::CreateRequest;
use crate::store::{Pool, PoolStore};

pub use error::{MAX_POOL_SIZE, PoolError};
pub use outcome::{PoolHandOut, PoolOutcome};

/// Request fields a taker sets for itself; every other field must match
/// the pool's for a pooled box to be handed out.
const BOUND_AT_HANDOUT: [&str; 4] = ["ttl_secs", "env", "pool", "pool_only"];

/// A pool as `pool ls` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct PoolView {
    pub name: String,
    pub size: u32,
    /// Members ready to hand out.
    pub ready: usize,
    /// Members being made now.
    pub filling: usize,
    pub request: CreateRequest,
}

/// What one fill did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct FillReport {
    pub pool: String,
    pub made: Vec<BoxId>,
    /// Members left half-made by a filler that died, now removed.
    pub removed_stale: Vec<BoxId>,
    /// Why a member could not be made (the pool stays short until the next fill).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Tinybox {
    fn pool_store(&self) -> Result<PoolStore> {
        let dir = self.store_dir.as_deref().ok_or(PoolError::NoStore)?;
        Ok(PoolStore::open(dir)?)
    }

    /// Records a pool of `size` boxes made from `request`, after checking
    /// the request as a create would (and choosing its sandbox, which the
    /// pool keeps). Makes no box: [`Tinybox::pool_fill`] does.
    pub async fn pool_create(&self, name: &str, mut request: CreateRequest, size: u32) -> Result<Pool> {
        validate_name("pool", name)?;
        if size == 0 || size > MAX_POOL_SIZE {
            return Err(PoolError::Size(size).into());
        }
        if request.persistent == Some(true) {
            return Err(PoolError::Persistent.into());
        }
        if !request.env.is_empty() {
            return Err(PoolError::Env.into());
        }
        request.pool = None;
        request.pool_only = false;
        let plan = self.plan_create(&request).await?;
        request.sandbox = Some(plan.spec.workspace.sandbox.clone());
        let pool = Pool { name: name.to_owned(), request, size, members: Vec::new(), created_at: Some(self.now()) };
        if !self.pool_store()?.insert(pool.clone())? {
            return Err(PoolError::Exists(name.to_owned()).into());
        }
        Ok(pool)
    }

    /// Every pool with its ready and filling counts.
    pub fn pools(&self) -> Result<Vec<PoolView>> {
        let pools = self.pool_store()?.list()?;
        let boxes = self.store.list()?;
        Ok(pools
            .into_iter()
            .map(|p| {
                let mine = || boxes.iter().filter(|b| b.pool.as_deref() == Some(p.name.as_str()));
                PoolView {
                    ready: mine().filter(|b| b.phase == Phase::Created).count(),
                    filling: mine().filter(|b| b.phase == Phase::Creating).count(),
                    name: p.name,
                    size: p.size,
                    request: p.request,
                }
            })
            .collect())
    }

    /// How many members of pool `name` are being made now (none when the
    /// store cannot be read: this only words a refusal).
    pub(crate) fn pool_filling(&self, name: &str) -> usize {
        let boxes = self.store.list().unwrap_or_default();
        boxes.iter().filter(|b| b.pool.as_deref() == Some(name) && b.phase == Phase::Creating).count()
    }

    /// Forgets a pool and removes every box still waiting in it (or being
    /// made for it). Boxes already handed out are the takers' and stay.
    pub async fn pool_remove(&self, name: &str) -> Result<Vec<BoxId>> {
        self.pool_store()?.remove(name)?.ok_or_else(|| PoolError::NotFound(name.to_owned()))?;
        let mut removed = Vec::new();
        for info in self.store.list()? {
            if info.pool.as_deref() == Some(name) {
                self.remove(&info.id).await?;
                removed.push(info.id);
            }
        }
        Ok(removed)
    }

    /// Brings a pool up to its size. Only for the holder of the
    /// supervisor's lock: a member being made that it did not start was
    /// left by a filler that died, and is removed first.
    pub async fn pool_fill(&self, name: &str) -> Result<FillReport> {
        let store = self.pool_store()?;
        let pool = store.get(name)?.ok_or_else(|| PoolError::NotFound(name.to_owned()))?;
        let mut report = FillReport { pool: name.to_owned(), ..FillReport::default() };
        let mut ready = BTreeSet::new();
        for info in self.store.list()? {
            if info.pool.as_deref() != Some(name) {
                continue;
            }
            match info.phase {
                Phase::Created => {
                    ready.insert(info.id);
                }
                _ => {
                    self.remove(&info.id).await?;
                    report.removed_stale.push(info.id);
                }
            }
        }
        // The list holds exactly the ready members, oldest first.
        store.retain_members(name, &mut |id| ready.contains(id))?;
        let listed: BTreeSet<BoxId> = store.get(name)?.map(|p| p.members.into_iter().collect()).unwrap_or_default();
        for id in ready.iter().filter(|id| !listed.contains(*id)) {
            store.add_member(name, id.clone())?;
        }
        for _ in ready.len()..pool.size as usize {
            match self.make_member(&pool).await {
                Ok(Some(id)) => report.made.push(id),
                // The pool was removed meanwhile.
                Ok(None) => break,
                Err(e) => {
                    report.error = Some(e.to_string());
                    break;
                }
            }
        }
        Ok(report)
    }

    async fn make_member(&self, pool: &Pool) -> Result<Option<BoxId>> {
        let plan = self.plan_create(&pool.request).await?;
        let info = self.create_in_pool(plan.spec, Some(pool.name.clone())).await?;
        if self.pool_store()?.add_member(&pool.name, info.id.clone())? {
            return Ok(Some(info.id));
        }
        self.remove(&info.id).await?;
        Ok(None)
    }

    /// Hands out a ready member of pool `name` to `request`, binding its
    /// ttl and env now. `Ok(Err(outcome))` says why none was: the pool is
    /// empty, or the request differs from the pool's (naming the fields).
    /// With the box, how many others were still waiting after it.
    pub fn pool_take(
        &self,
        name: &str,
        request: &CreateRequest,
    ) -> Result<std::result::Result<(BoxInfo, usize), PoolOutcome>> {
        let store = self.pool_store()?;
        let pool = store.get(name)?.ok_or_else(|| PoolError::NotFound(name.to_owned()))?;
        let fields = differences(&pool.request, request);
        if !fields.is_empty() {
            return Ok(Err(PoolOutcome::Differs { pool: name.to_owned(), fields }));
        }
        let bound = CreateRequest { ttl_secs: request.ttl_secs.or(pool.request.ttl_secs), ..CreateRequest::default() };
        let lifecycle = bound.lifecycle()?;
        let now = self.now();
        // One read of every member first (one shared lock): members handed
        // out since the list was pruned cost no exclusive lock, and the
        // count left after a take comes from the same read.
        let waiting: Vec<bool> = self
            .store
            .get_many(&pool.members)?
            .iter()
            .map(|b| b.as_ref().is_some_and(|b| b.pool.as_deref() == Some(name) && b.is_pooled()))
            .collect();
        for (at, id) in pool.members.iter().enumerate() {
            if !waiting[at] {
                continue;
            }
            let mut taken = false;
            let result = self.store.update(id, &mut |b| {
                if b.pool.as_deref() == Some(name) && b.phase == Phase::Created {
                    b.pool = None;
                    b.created_at = Some(now);
                    b.spec.lifecycle = lifecycle;
                    b.spec.env = request.env.clone();
                    taken = true;
                }
            });
            match result {
                Ok(info) if taken => {
                    // Those before it were not waiting a moment ago; those
                    // after it were (a taker since then is not subtracted).
                    let left = waiting[at + 1..].iter().filter(|w| **w).count();
                    return Ok(Ok((info, left)));
                }
                // Taken by someone else, or removed: try the next.
                Ok(_) | Err(crate::store::StoreError::NotFound(_)) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Ok(Err(PoolOutcome::Empty { pool: name.to_owned() }))
    }

    /// The request a cold create makes for a taker of pool `name`: the
    /// pool's, with what the taker set itself laid over it.
    pub fn pool_request(&self, name: &str, taker: &CreateRequest) -> Result<CreateRequest> {
        let pool = self.pool_store()?.get(name)?.ok_or_else(|| PoolError::NotFound(name.to_owned()))?;
        let mut merged = to_object(&pool.request);
        let unset = to_object(&CreateRequest::default());
        for (key, value) in to_object(taker) {
            if unset.get(&key) != Some(&value) {
                merged.insert(key, value);
            }
        }
        let mut request: CreateRequest = serde_json::from_value(serde_json::Value::Object(merged))
            .map_err(|e| PoolError::Unreadable { pool: name.to_owned(), detail: e.to_string() })?;
        request.pool = None;
        request.pool_only = false;
        Ok(request)
    }
}

fn to_object(request: &CreateRequest) -> serde_json::Map<String, serde_json::Value> {
    match serde_json::to_value(request) {
        Ok(serde_json::Value::Object(map)) => map,
        _ => serde_json::Map::new(),
    }
}

/// The fields a taker set (away from their defaults) to something other
/// than the pool's, leaving out those bound at hand-out.
fn differences(pool: &CreateRequest, taker: &CreateRequest) -> Vec<String> {
    let (pool, taker, unset) = (to_object(pool), to_object(taker), to_object(&CreateRequest::default()));
    taker
        .iter()
        .filter(|(k, _)| !BOUND_AT_HANDOUT.contains(&k.as_str()))
        .filter(|(k, v)| unset.get(*k) != Some(*v) && pool.get(*k) != Some(*v))
        .map(|(k, _)| k.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::SandboxName;

    fn pool_request() -> CreateRequest {
        CreateRequest {
            sandbox: Some(SandboxName::new("docker").unwrap()),
            pids: Some(64),
            ttl_secs: Some(600),
            ..CreateRequest::default()
        }
    }

    #[test]
    fn a_taker_matches_by_leaving_fields_unset_or_equal_and_binds_ttl_and_env_itself() {
        let pool = pool_request();
        assert!(differences(&pool, &CreateRequest::default()).is_empty());
        let same = CreateRequest { pids: Some(64), ttl_secs: Some(5), ..CreateRequest::default() };
        let mut with_env = same.clone();
        with_env.env.insert("K".into(), "V".into());
        assert!(differences(&pool, &with_env).is_empty());
        let other = CreateRequest {
            sandbox: Some(SandboxName::new("namespace").unwrap()),
            pids: Some(32),
            untrusted: true,
            ..CreateRequest::default()
        };
        assert_eq!(differences(&pool, &other), ["pids", "sandbox", "untrusted"]);
    }
}

#[cfg(test)]
#[path = "pools/pool_only_tests.rs"]
mod pool_only_tests;
