//! The persistent lifecycle: `stop` captures a box and removes its
//! instances, `resume` makes new ones from the newest snapshot under the
//! same identifier, and autosnapshots keep a persistent box's snapshot no
//! older than its cadence.
//!
//! tinybox has no long-running process, so no timer takes an autosnapshot.
//! The trigger is explicit: a command that runs in a box takes one first
//! when it is due, and `tinybox autosnapshot` (meant for cron) takes every
//! one that is due.

use serde::Serialize;
use tinybox_sdk::model::{BoxId, SnapshotId, SnapshotSupport, WorkspaceSource};
use tinybox_sdk::protocol::{BoxRef, BoxState};

use super::Tinybox;
use crate::error::{Error, LifecycleError, Result};
use crate::gate;
use crate::model::{BoxInfo, BoxSpec, Lifecycle, Phase};

/// What `autosnapshot` did with one persistent box.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum Autosnapshot {
    /// A snapshot was due and was taken.
    Taken {
        snapshot: SnapshotId,
    },
    /// The newest snapshot is younger than the cadence.
    NotDue {
        due_at: u64,
    },
    /// The box is stopped: it changes no more, and stopping captured it.
    Stopped,
    /// Its sandbox takes no snapshots; nothing can be done for it.
    Unsupported {
        reason: String,
    },
    Failed {
        error: String,
    },
}

/// One box's line in `tinybox autosnapshot`'s report.
#[derive(Debug, Clone, Serialize)]
pub struct AutosnapshotOutcome {
    pub id: BoxId,
    #[serde(flatten)]
    pub outcome: Autosnapshot,
}

/// When a persistent box's next autosnapshot is due: its cadence after its
/// newest snapshot, or after its creation when it has none. A box with
/// neither time recorded is due now. `None` for an ephemeral box.
pub fn autosnapshot_due_at(info: &BoxInfo) -> Option<u64> {
    let Lifecycle::Persistent { autosnapshot_secs } = info.spec.lifecycle else { return None };
    let newest = info.snapshots.iter().filter_map(|s| s.taken_at).max();
    Some(newest.or(info.created_at).map_or(0, |t| t.saturating_add(autosnapshot_secs)))
}

impl Tinybox {
    /// Snapshots a persistent box, then removes its instances; the record
    /// stays, stopped, until `resume` or `rm`.
    pub async fn stop(&self, id: &BoxId) -> Result<BoxInfo> {
        let info = self.get(id)?;
        if let Lifecycle::Ephemeral { .. } = info.spec.lifecycle {
            return Err(LifecycleError::Ephemeral(id.clone()).into());
        }
        if info.phase == Phase::Stopped {
            return Err(LifecycleError::AlreadyStopped(id.clone()).into());
        }
        // Refuses a box still being created, and a sandbox that takes no snapshots.
        self.snapshot(id).await?;
        let info = self.get(id)?;
        for instance in info.runner.iter().chain(info.workspace.iter()) {
            self.destroy_instance(id, instance).await?;
        }
        if !info.spec.secrets.is_empty() {
            self.egress_end_secrets(&info.spec.namespace, id).await?;
        }
        Ok(self.store.update(id, &mut |info| info.phase = Phase::Stopped)?)
    }

    /// Brings a stopped box back: new instances, the workspace made from its
    /// newest snapshot, under the same identifier. A box whose instance
    /// stopped or went outside tinybox is stopped first (`stop_lost`).
    pub async fn resume(&self, id: &BoxId) -> Result<BoxInfo> {
        let mut info = self.get(id)?;
        match info.phase {
            Phase::Stopped => {}
            Phase::Created => {
                self.stop_lost(&info).await?;
                info = self.get(id)?;
            }
            Phase::Creating => {
                return Err(Error::BoxNotReady {
                    id: id.clone(),
                    state: "still being created (or its creation was interrupted)".into(),
                    hint: format!("remove it with `tinybox rm {id}`"),
                });
            }
            Phase::Removing => return Err(super::being_removed(id)),
        }
        let newest = info.snapshots.last().ok_or_else(|| LifecycleError::NoSnapshot(id.clone()))?;
        let spec = BoxSpec { source: Some(WorkspaceSource::Snapshot { id: newest.id.clone() }), ..info.spec.clone() };
        let ws_link = self.drivers.sandbox(&spec.workspace.sandbox, &spec.workspace.host).await?;
        let admitted = gate::admit_create(&spec.workspace.sandbox, &ws_link.capabilities(), &spec)?;
        // The directory comes from this box's own record, never the snapshot.
        let bound_dir = info.bound_dir().map(ToOwned::to_owned);
        let workspace = self.make_instance(&ws_link, id, &spec, &spec.workspace, admitted, bound_dir).await?;
        let runner = match &info.runner {
            None => None,
            Some(_) => {
                let runner_spec = BoxSpec { source: None, ports: Vec::new(), ..BoxSpec::new(spec.runner.clone()) };
                let made = async {
                    let link = self.drivers.sandbox(&spec.runner.sandbox, &spec.runner.host).await?;
                    let admitted = gate::admit_create(&spec.runner.sandbox, &link.capabilities(), &runner_spec)?;
                    self.make_instance(&link, id, &runner_spec, &spec.runner, admitted, None).await
                }
                .await;
                match made {
                    Ok(instance) => Some(instance),
                    Err(e) => {
                        let _ = self.destroy_instance(id, &workspace).await;
                        return Err(e);
                    }
                }
            }
        };
        Ok(self.store.update(id, &mut |info| {
            info.phase = Phase::Created;
            info.workspace = Some(workspace.clone());
            info.runner = runner.clone();
        })?)
    }

    /// A box whose workspace instance stopped or went behind tinybox's back
    /// (a daemon restart, `docker stop`) is stopped here as `stop` would
    /// have: captured as it is when it still exists (a stopped container
    /// keeps its files), its instances removed, so that resume makes it
    /// anew from the newest snapshot. One that still runs is not stopped.
    async fn stop_lost(&self, info: &BoxInfo) -> Result<()> {
        let id = &info.id;
        let not_stopped = || Error::from(LifecycleError::NotStopped(id.clone()));
        let ws = info.workspace.as_ref().ok_or_else(not_stopped)?;
        let link = self.drivers.sandbox(&ws.placement.sandbox, &ws.placement.host).await?;
        let seen = link.inspect(BoxRef { box_id: id.clone(), handle: ws.handle.clone() }).await?;
        match seen.state {
            BoxState::Ready => return Err(not_stopped()),
            // Refuses a sandbox that takes no snapshots, before anything is removed.
            BoxState::Stopped => {
                self.snapshot(id).await?;
            }
            BoxState::Gone if info.snapshots.is_empty() => {
                return Err(LifecycleError::NoSnapshot(id.clone()).into());
            }
            BoxState::Gone => {}
        }
        let info = self.get(id)?;
        for instance in info.runner.iter().chain(info.workspace.iter()) {
            self.destroy_instance(id, instance).await?;
        }
        self.store.update(id, &mut |info| info.phase = Phase::Stopped)?;
        Ok(())
    }

    /// Takes every autosnapshot that is due, one box's failure not stopping
    /// the rest, and reports on each persistent box.
    pub async fn autosnapshot(&self) -> Result<Vec<AutosnapshotOutcome>> {
        let mut outcomes = Vec::new();
        for info in self.store.list()? {
            let Some(due_at) = autosnapshot_due_at(&info) else { continue };
            let outcome = match info.phase {
                Phase::Stopped => Autosnapshot::Stopped,
                _ if due_at > self.clock.now() => Autosnapshot::NotDue { due_at },
                _ => match self.snapshot(&info.id).await {
                    Ok(record) => Autosnapshot::Taken { snapshot: record.id },
                    Err(Error::Unsupported { sandbox, capability }) => {
                        Autosnapshot::Unsupported { reason: format!("sandbox {sandbox} does not support {capability}") }
                    }
                    Err(e) => Autosnapshot::Failed { error: e.to_string() },
                },
            };
            outcomes.push(AutosnapshotOutcome { id: info.id, outcome });
        }
        Ok(outcomes)
    }

    /// Takes the box's autosnapshot if it is due, before a command runs in
    /// it. A failure does not stop the command — its work matters more
    /// than the snapshot — and `tinybox autosnapshot` reports it.
    pub(super) async fn autosnapshot_if_due(&self, info: &BoxInfo) {
        let Some(due_at) = autosnapshot_due_at(info) else { return };
        let Some(ws) = info.workspace.as_ref().filter(|_| info.phase == Phase::Created) else { return };
        if due_at > self.clock.now() {
            return;
        }
        let takes_snapshots = match self.drivers.sandbox(&ws.placement.sandbox, &ws.placement.host).await {
            Ok(link) => link.capabilities().snapshot != SnapshotSupport::None,
            Err(_) => false,
        };
        if takes_snapshots && let Err(e) = self.snapshot(&info.id).await {
            tracing::warn!("autosnapshot of box {} failed: {e}", info.id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Placement, SnapshotRecord};

    fn persistent(every: u64, created_at: Option<u64>) -> BoxInfo {
        let mut spec = BoxSpec::new(Placement::local_passthrough());
        spec.lifecycle = Lifecycle::Persistent { autosnapshot_secs: every };
        let mut info = BoxInfo::creating(BoxId::new("box-0").unwrap(), spec, created_at);
        info.phase = Phase::Created;
        info
    }

    #[test]
    fn due_is_the_cadence_after_the_newest_snapshot_or_creation() {
        let mut info = persistent(60, Some(1000));
        assert_eq!(autosnapshot_due_at(&info), Some(1060));
        info.snapshots.push(SnapshotRecord { id: SnapshotId::new("sha-1").unwrap(), taken_at: Some(1500) });
        info.snapshots.push(SnapshotRecord { id: SnapshotId::new("sha-2").unwrap(), taken_at: None });
        assert_eq!(autosnapshot_due_at(&info), Some(1560));
        assert_eq!(autosnapshot_due_at(&persistent(60, None)), Some(0), "no time known: due now");
        let mut ephemeral = persistent(60, Some(1000));
        ephemeral.spec.lifecycle = Lifecycle::default();
        assert_eq!(autosnapshot_due_at(&ephemeral), None);
    }
}
