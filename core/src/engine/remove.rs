//! Removing boxes, one on request or every expired one on `reap`.

use serde::Serialize;
use tinybox_sdk::model::BoxId;
use tinybox_sdk::protocol::{BoxRef, ErrorCode, SnapshotSweepParams};

use super::Tinybox;
use crate::error::{Error, Result};
use crate::model::{BoxInfo, Instance, Phase};

/// What reaping did to one box.
#[derive(Debug, Clone, Serialize)]
pub struct ReapOutcome {
    pub id: BoxId,
    /// When its ttl ended; `None` for an interrupted create.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expired_at: Option<u64>,
    /// For a create whose creator ended before it finished: that creator's pid.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interrupted_by: Option<u32>,
    /// `None` when the box was destroyed; otherwise why it was not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl ReapOutcome {
    /// Why the box was reaped, for a log line or a table.
    pub fn why(&self) -> String {
        match (self.expired_at, self.interrupted_by) {
            (Some(at), _) => format!("its ttl ended at {at}"),
            (None, Some(pid)) => format!("its create was interrupted: its creator, pid {pid}, has ended"),
            (None, None) => "its create was interrupted".into(),
        }
    }
}

/// What `rm` did to the boxes it was given (`tinybox rm --json` and the
/// bus's `rm` answer this): one failure does not stop the rest.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Removed {
    pub removed: Vec<BoxId>,
    pub failed: Vec<RemoveFailure>,
}

/// One box `rm` could not remove, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RemoveFailure {
    pub id: BoxId,
    pub error: String,
}

impl Tinybox {
    /// Removes each of `ids` in turn ([`Tinybox::remove`]), going on past
    /// a failure; says which went and why the others stayed.
    pub async fn remove_each(&self, ids: &[BoxId]) -> Removed {
        let mut done = Removed::default();
        for id in ids {
            match self.remove(id).await {
                Ok(_) => done.removed.push(id.clone()),
                Err(e) => done.failed.push(RemoveFailure { id: id.clone(), error: e.to_string() }),
            }
        }
        done
    }

    /// Destroys the box in its sandbox(es), then forgets it. A box its
    /// sandbox no longer has is simply forgotten.
    pub async fn remove(&self, id: &BoxId) -> Result<BoxInfo> {
        let mut info = self.get(id)?;
        // Marked first: a removal interrupted from here on leaves a box
        // nobody runs anything in, that `ls` shows as being removed, and
        // whose state is not read back from a daemon still finishing it.
        if matches!(info.phase, Phase::Created | Phase::Stopped) {
            info = self.store.update(id, &mut |info| info.phase = Phase::Removing)?;
        }
        for instance in info.runner.iter().chain(info.workspace.iter()) {
            self.destroy_instance(id, instance).await?;
        }
        if info.phase == Phase::Creating {
            // The create never answered, so there is no handle: each driver
            // finds what it made from the box's namespace and identifier.
            let mut placements = vec![&info.spec.workspace];
            if info.spec.has_separate_runner() {
                placements.push(&info.spec.runner);
            }
            for placement in placements {
                let link = self.drivers.sandbox(&placement.sandbox, &placement.host).await?;
                match link.destroy(BoxRef::interrupted(id.clone(), &info.spec.namespace)).await {
                    Err(Error::Driver { code: ErrorCode::NotFound, .. }) | Ok(()) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        self.sweep_unrecorded_snapshots(id).await?;
        // Its egress proxy, found from the record alone (none for most boxes).
        self.egress_discard(&info.spec.namespace, id).await?;
        self.release_image(id, &info.spec);
        // A local directory on a remote host was synced there for this box.
        let host = &info.spec.workspace.host;
        let synced = matches!(info.spec.source, Some(tinybox_sdk::model::WorkspaceSource::LocalDir { .. }));
        if synced && host.as_str() != crate::hosts::LOCAL {
            self.discard_synced(host, &crate::sync::remote_workspace(&info.spec.namespace, id.as_str())).await;
        }
        self.store.remove(id)?;
        Ok(info)
    }

    /// After the box's instances are gone (so no snapshot of it can start
    /// again), removes the images of snapshots that began and were never
    /// recorded: the record still marks them pending. Every snapshot the
    /// store names is kept. A snapshot of this box still running in another
    /// process loses its image to the box's removal and fails.
    async fn sweep_unrecorded_snapshots(&self, id: &BoxId) -> Result<()> {
        let info = self.get(id)?;
        if info.pending_snapshots.is_empty() {
            return Ok(());
        }
        let placement = &info.spec.workspace;
        let link = self.drivers.sandbox(&placement.sandbox, &placement.host).await?;
        let keep = self.snapshot_list()?.into_iter().map(|l| l.id).collect();
        let params = SnapshotSweepParams { namespace: info.spec.namespace.clone(), box_id: id.clone(), keep };
        let swept = link.snapshot_sweep(params).await?;
        if !swept.removed.is_empty() {
            tracing::info!("box {id}: removed unrecorded snapshot images {}", swept.removed.join(", "));
        }
        Ok(())
    }

    pub(super) async fn destroy_instance(&self, id: &BoxId, instance: &Instance) -> Result<()> {
        let link = self.drivers.sandbox(&instance.placement.sandbox, &instance.placement.host).await?;
        match link.destroy(BoxRef { box_id: id.clone(), handle: instance.handle.clone() }).await {
            Err(Error::Driver { code: ErrorCode::NotFound, .. }) | Ok(()) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Destroys every ephemeral box whose ttl has passed, and every create
    /// whose creator ended before finishing it (what it made is found by
    /// the box's name, as `rm` finds it). One failure does not stop the
    /// rest; each box's outcome is reported.
    pub async fn reap(&self) -> Result<Vec<ReapOutcome>> {
        // What killed commands left is reaped too: their stream sockets.
        crate::paths::sweep_runtime_dir();
        let now = self.clock.now();
        let mut outcomes = Vec::new();
        for info in self.store.list()? {
            let expired_at = info.expires_at().filter(|_| info.is_expired(now));
            let interrupted_by = info.creator.as_ref().filter(|_| info.interrupted_create()).map(|c| c.pid);
            if expired_at.is_none() && interrupted_by.is_none() {
                continue;
            }
            let error = self.remove(&info.id).await.err().map(|e| e.to_string());
            outcomes.push(ReapOutcome {
                id: info.id,
                expired_at,
                interrupted_by: interrupted_by.filter(|_| expired_at.is_none()),
                error,
            });
        }
        Ok(outcomes)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::clock::ManualClock;
    use crate::driver::DriverConfig;
    use crate::error::ErrorKind;
    use crate::model::{BoxSpec, HostName, Placement, SandboxName};
    use crate::store::{MemoryStore, Store};
    use tinybox_sdk::protocol::BoxState;

    #[tokio::test]
    async fn a_box_whose_removal_began_runs_nothing_and_reads_gone_until_rm_finishes_it() {
        let store = Arc::new(MemoryStore::new());
        let placement = Placement::new(HostName::local(), SandboxName::new("docker").unwrap());
        let mut info = BoxInfo::creating(BoxId::new("box-0").unwrap(), BoxSpec::new(placement), Some(1));
        info.phase = Phase::Removing;
        store.insert(info).unwrap();
        let config = DriverConfig { search_dirs: Vec::new(), ..DriverConfig::from_env() };
        let tb = Tinybox::with_parts(store.clone(), None, Arc::new(ManualClock::new(5)), config).unwrap();
        let id = BoxId::new("box-0").unwrap();
        // No driver is installed: each answer comes from the record alone.
        let seen = tb.inspect(&id).await.unwrap();
        assert_eq!(seen.state, BoxState::Gone);
        assert!(seen.state_detail.unwrap().contains("`tinybox rm box-0` finishes it"));
        for err in [tb.snapshot(&id).await.unwrap_err(), tb.resume(&id).await.unwrap_err()] {
            assert_eq!(err.kind(), ErrorKind::NotReady, "{err}");
            assert!(
                matches!(&err, Error::BoxNotReady { id: refused, state, .. } if *refused == id && state.starts_with("being removed")),
                "{err}"
            );
        }
        // It has no instances left to destroy: rm finishes it.
        tb.remove(&id).await.unwrap();
        assert!(store.list().unwrap().is_empty());
    }

    #[tokio::test]
    async fn remove_each_goes_on_past_a_failure_and_names_it() {
        let store = Arc::new(MemoryStore::new());
        let placement = Placement::new(HostName::local(), SandboxName::passthrough());
        let mut info = BoxInfo::creating(BoxId::new("box-0").unwrap(), BoxSpec::new(placement), Some(1));
        info.phase = Phase::Removing;
        store.insert(info).unwrap();
        let config = DriverConfig { search_dirs: Vec::new(), ..DriverConfig::from_env() };
        let tb = Tinybox::with_parts(store.clone(), None, Arc::new(ManualClock::new(5)), config).unwrap();
        let (gone, missing) = (BoxId::new("box-0").unwrap(), BoxId::new("box-9").unwrap());
        let done = tb.remove_each(&[missing.clone(), gone.clone()]).await;
        assert_eq!(done.removed, [gone]);
        assert_eq!(done.failed.len(), 1);
        assert_eq!(done.failed[0].id, missing);
        assert_eq!(done.failed[0].error, Error::from(crate::store::StoreError::NotFound(missing)).to_string());
        let json = serde_json::to_value(&done).unwrap();
        assert_eq!(json["removed"], serde_json::json!(["box-0"]));
        assert_eq!(json["failed"][0]["id"], "box-9");
    }
}
