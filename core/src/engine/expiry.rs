//! Moving an ephemeral box's expiry: what E2B's `set_timeout` asks for
//! (the box ends `secs` from now), kept to the rules a create's ttl meets
//! (at least a second, at most [`crate::request::MAX_LIFETIME`] from its
//! creation). A persistent box has no expiry to move and is refused.

use tinybox_sdk::model::BoxId;

use super::Tinybox;
use crate::error::{Error, LifecycleError, Result};
use crate::model::{BoxInfo, Lifecycle};

impl Tinybox {
    /// Makes box `id` expire `secs` from now (its ttl, counted from its
    /// creation, becomes what that takes).
    pub fn expire_in(&self, id: &BoxId, secs: u64) -> Result<BoxInfo> {
        crate::request::check_duration("timeout", secs)?;
        let info = self.get(id)?;
        let Lifecycle::Ephemeral { .. } = info.spec.lifecycle else {
            return Err(LifecycleError::NoExpiry(id.clone()).into());
        };
        let created = info.created_at.unwrap_or_else(|| self.now());
        let ttl = self.now().saturating_sub(created).saturating_add(secs);
        crate::request::check_duration("ttl", ttl)?;
        let mut change = |b: &mut BoxInfo| b.spec.lifecycle = Lifecycle::Ephemeral { ttl_secs: ttl };
        self.store().update(id, &mut change).map_err(Error::from)
    }
}

#[cfg(test)]
#[path = "expiry_tests.rs"]
mod tests;
