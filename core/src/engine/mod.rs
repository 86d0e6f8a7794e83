//! `Tinybox`: the box API the CLI and the module front ends call. Each
//! operation validates, consults the capability gate, then asks a driver —
//! in that order, so nothing refused ever reaches a driver and nothing a
//! driver fails leaves the store changed.

mod choose;
mod copy;
mod create;
mod creating;
mod drivers_report;
mod egress;
mod exec;
mod expiry;
mod forward;
mod hosts;
mod image_root;
mod lifecycle;
mod pools;
mod prune;
mod remove;
mod run_once;
mod snapshot;
mod stopped;
mod sync;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tinybox_sdk::model::BoxId;
use tinybox_sdk::protocol::{BoxRef, BoxState};

pub use copy::{CopyError, CopyOutcome, CopyRequest, CopyRoute, DirEntry, Direction, Local, TarRefusal};
pub use drivers_report::{DriverListing, DriverReport, TrustWord};
pub use exec::{ExecOutcome, Target};
pub use forward::{Forward, parse_forward};
pub use hosts::HostAdded;
pub use lifecycle::{Autosnapshot, AutosnapshotOutcome, autosnapshot_due_at};
pub use pools::{FillReport, MAX_POOL_SIZE, PoolError, PoolHandOut, PoolOutcome, PoolView};
pub use prune::{KeptBy, PruneOutcome, PruneResult, SnapshotListing};
pub use remove::{ReapOutcome, RemoveFailure, Removed};
pub use run_once::OneShot;
pub use sync::{Observer, SyncEvent};

use crate::clock::{Clock, SystemClock};
use crate::driver::{DriverConfig, Drivers};
use crate::error::{Error, Result};
use crate::model::{BoxInfo, Instance, Phase};
use crate::store::{FileStore, Store, StoreError, TemplateStore};

/// Runs the conformance kit: what the engine calls to earn a verdict on first use.
#[async_trait::async_trait]
pub trait Verifier: Send + Sync {
    /// Verifies `sandbox` with boxes made with `options`, and returns the
    /// verdict for its current binary (the engine records it).
    async fn verify(
        &self,
        engine: &Tinybox,
        sandbox: &tinybox_sdk::model::SandboxName,
        options: &std::collections::BTreeMap<String, String>,
    ) -> Result<crate::store::verdicts::Verdict>;
}

/// The directory in a store holding each driver's state directory.
pub const DRIVER_STATE_DIR: &str = "drivers";

/// The engine: a store, a clock, and the drivers started so far.
pub struct Tinybox {
    store: Arc<dyn Store>,
    templates: Option<TemplateStore>,
    clock: Arc<dyn Clock>,
    pub(crate) drivers: Drivers,
    /// Made on first use (`runtime_dir`).
    runtime_dir: std::sync::OnceLock<PathBuf>,
    /// The store's directory, for a file store: where settings, hosts and
    /// verdicts live beside the boxes. `None` for an in-memory store.
    pub(crate) store_dir: Option<PathBuf>,
    /// Earns a verdict on first use (crate::trust); `None`: refuse instead.
    pub(crate) verifier: Option<Arc<dyn Verifier>>,
}

/// A box with its sandbox's current view of it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct BoxView {
    #[serde(flatten)]
    pub info: BoxInfo,
    /// The sandbox's state for the box, read now (never from the store).
    pub state: BoxState,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state_detail: Option<String>,
}

impl Tinybox {
    /// The engine over the file store in `store_dir`, with drivers found as
    /// the environment says.
    pub fn open(store_dir: &Path) -> Result<Tinybox> {
        Tinybox::open_with(store_dir, DriverConfig::from_env())
    }

    /// The engine over the file store in `store_dir`, with `drivers`' search
    /// directories and timeouts; the hosts come from the store's hosts file,
    /// and drivers keep their state in `<store_dir>/drivers/<name>`.
    /// Opening makes nothing: the store's files are made by its first
    /// change, and the runtime directory by the first command that needs
    /// a socket, so a request refused before that leaves no file behind.
    pub fn open_with(store_dir: &Path, mut drivers: DriverConfig) -> Result<Tinybox> {
        let store_dir = &crate::paths::check_store_dir(store_dir)?;
        let store = Arc::new(FileStore::open(store_dir)?);
        let templates = TemplateStore::open(store_dir)?;
        drivers.hosts = crate::store::HostStore::open(store_dir)?.table()?;
        // Absolute, as the protocol promises drivers, even for `--store rel/dir`.
        let state_dir = store_dir.join(DRIVER_STATE_DIR);
        drivers.state_dir = Some(std::path::absolute(&state_dir).unwrap_or(state_dir));
        let mut engine = Tinybox::with_parts(store, Some(templates), Arc::new(SystemClock), drivers)?;
        engine.store_dir = Some(store_dir.to_owned());
        Ok(engine)
    }

    /// The engine over any store and clock (tests use MemoryStore and ManualClock).
    pub fn with_parts(
        store: Arc<dyn Store>,
        templates: Option<TemplateStore>,
        clock: Arc<dyn Clock>,
        drivers: DriverConfig,
    ) -> Result<Tinybox> {
        Ok(Tinybox {
            store,
            templates,
            clock,
            drivers: Drivers::new(drivers),
            runtime_dir: std::sync::OnceLock::new(),
            store_dir: None,
            verifier: None,
        })
    }

    /// Stops every driver this engine started.
    pub async fn close(&self) {
        self.drivers.close().await;
    }

    pub fn store(&self) -> &dyn Store {
        self.store.as_ref()
    }

    /// This store's images (`<store>/images`); `None` for an in-memory store.
    pub fn images(&self) -> Option<crate::images::Images> {
        self.store_dir.as_deref().map(crate::images::Images::open)
    }

    /// The file store's directory; `None` for an in-memory store.
    pub fn store_dir(&self) -> Option<&Path> {
        self.store_dir.as_deref()
    }

    pub fn now(&self) -> u64 {
        self.clock.now()
    }

    pub fn list(&self) -> Result<Vec<BoxInfo>> {
        Ok(self.store.list()?)
    }

    /// The boxes a listing shows: every box, except those waiting in a
    /// warm pool (nobody's yet) unless `pooled` asks for them too.
    pub fn listed(&self, pooled: bool) -> Result<Vec<BoxInfo>> {
        Ok(self.store.list()?.into_iter().filter(|b| pooled || !b.is_pooled()).collect())
    }

    /// The box's record, or a NotFound error that says how to find boxes.
    pub fn get(&self, id: &BoxId) -> Result<BoxInfo> {
        self.store.get(id)?.ok_or_else(|| StoreError::NotFound(id.clone()).into())
    }

    /// The box's record and its sandbox's view of it now.
    pub async fn inspect(&self, id: &BoxId) -> Result<BoxView> {
        let info = self.get(id)?;
        if info.phase == Phase::Stopped {
            let detail = format!("stopped by `tinybox stop`; `tinybox resume {id}` brings it back");
            return Ok(BoxView { info, state: BoxState::Stopped, state_detail: Some(detail) });
        }
        if info.phase == Phase::Removing {
            let detail = format!("being removed (or its removal was interrupted); `tinybox rm {id}` finishes it");
            return Ok(BoxView { info, state: BoxState::Gone, state_detail: Some(detail) });
        }
        let Some(ws) = info.workspace.clone() else {
            return Ok(self.inspect_creating(info).await);
        };
        let link = self.drivers.sandbox(&ws.placement.sandbox, &ws.placement.host).await?;
        let r = link.inspect(BoxRef { box_id: info.id.clone(), handle: ws.handle.clone() }).await?;
        Ok(BoxView { info, state: r.state, state_detail: r.detail })
    }

    /// The private directory for stdio sockets, made when first needed.
    fn runtime_dir(&self) -> Result<&Path> {
        if let Some(dir) = self.runtime_dir.get() {
            return Ok(dir);
        }
        let dir = crate::paths::runtime_dir()?;
        Ok(self.runtime_dir.get_or_init(|| dir))
    }

    /// Unique among live processes: the pid names this process, the counter
    /// is shared by every engine in it.
    fn next_exec_id(&self) -> String {
        static EXEC_COUNTER: AtomicU64 = AtomicU64::new(0);
        format!("x{}-{}", std::process::id(), EXEC_COUNTER.fetch_add(1, Ordering::SeqCst))
    }

    /// The box's instance, for an operation that uses the box: refused for
    /// a box that is not ready, and for one still waiting in a warm pool —
    /// that box is nobody's yet, and whatever an exec or a copy left in it
    /// would be handed out with it.
    fn instance<'a>(&self, info: &'a BoxInfo) -> Result<&'a Instance> {
        not_pooled(info)?;
        match (&info.phase, &info.workspace) {
            (Phase::Created, Some(ws)) => Ok(ws),
            (Phase::Removing, _) => Err(being_removed(&info.id)),
            (Phase::Stopped, _) => Err(Error::BoxNotReady {
                id: info.id.clone(),
                state: "stopped".into(),
                hint: format!("`tinybox resume {}` brings it back", info.id),
            }),
            _ => Err(Error::BoxNotReady {
                id: info.id.clone(),
                state: "still being created (or its creation was interrupted)".into(),
                hint: format!("remove it with `tinybox rm {}`", info.id),
            }),
        }
    }
}

/// Refuses a box still waiting in a warm pool, for a use that does not go
/// through [`Tinybox::instance`] (a copy served from its bound directory).
pub(crate) fn not_pooled(info: &BoxInfo) -> Result<()> {
    match (info.is_pooled(), &info.pool) {
        (true, Some(pool)) => Err(waiting_in_pool(&info.id, pool)),
        _ => Ok(()),
    }
}

/// Why a box still waiting in a warm pool is used by nobody.
pub(crate) fn waiting_in_pool(id: &BoxId, pool: &str) -> Error {
    Error::BoxNotReady {
        id: id.clone(),
        state: format!("waiting in pool {pool}"),
        hint: format!("hand it out with `tinybox create --pool {pool}`"),
    }
}

/// Why nothing more is done with a box whose removal began.
pub(crate) fn being_removed(id: &BoxId) -> Error {
    Error::BoxNotReady {
        id: id.clone(),
        state: "being removed (or its removal was interrupted)".into(),
        hint: format!("`tinybox rm {id}` finishes it"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drivers_of_a_file_store_keep_their_state_beside_it() {
        let store = tempfile::tempdir().unwrap();
        let engine = Tinybox::open_with(store.path(), DriverConfig::from_env()).unwrap();
        assert_eq!(engine.drivers.config().state_dir, Some(store.path().join("drivers")));
        assert_eq!(
            engine.drivers.config().driver_state_dir("microvm"),
            Some(store.path().join(DRIVER_STATE_DIR).join("microvm"))
        );
    }
}
