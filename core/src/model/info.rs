//! What the store records about a box.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use tinybox_sdk::model::{BoxId, HostName, IsolationLevel, NetworkInForce, Resources, SnapshotId, WorkspaceSource};

use super::spec::{BoxSpec, Lifecycle, Placement};

/// Where a box is in its life, as far as the store knows. A sandbox's own
/// view of the box (running, gone) comes from the driver, not from here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// The identifier is reserved and the sandbox is creating the box.
    Creating,
    /// The sandbox made the box.
    #[default]
    Created,
    /// A persistent box captured by `tinybox stop`: its instances are gone,
    /// its snapshots remain, and `tinybox resume` makes it again.
    Stopped,
    /// `tinybox rm` began removing the box and has not finished: it runs
    /// now, or was interrupted (its driver's request may still be going on
    /// in a daemon). Its instances may be there, going or gone; nothing
    /// more runs in it, and `tinybox rm` finishes it. A box still being
    /// created stays `creating` instead: only that phase says its
    /// instances are found by name.
    Removing,
}

/// One sandbox instance backing a box: the workspace, or a separate runner.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Instance {
    pub placement: Placement,
    /// The driver's own record, handed back on every call.
    #[serde(default)]
    pub handle: serde_json::Value,
    /// The isolation this box has: what the sandbox declared when the box
    /// was made, or less when its driver said this box is weaker.
    pub isolation: IsolationLevel,
    /// The limits actually in force (only those the sandbox enforces).
    #[serde(default)]
    pub limits: Resources,
    /// The network confinement actually in force.
    pub network: NetworkInForce,
    /// With network `allowlist`: the entries its egress proxy enforces;
    /// with `egress`: the addresses let through its fence.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow_hosts: Vec<String>,
    /// Where commands start, when the box has a workspace directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workdir: Option<String>,
    /// A passing verdict of the conformance kit existed for the driver
    /// binary, its declaration and the box's create options when the box
    /// was made (crate::trust). Only then is its isolation relied on.
    #[serde(default)]
    pub verified: bool,
    /// The paths this box keeps from one command to the next, as its
    /// driver said when it made the box; `None`: all of them (a driver that
    /// says nothing, or a box recorded before drivers could say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persistent_paths: Option<Vec<String>>,
    /// The snapshots this box can take when its driver said they are fewer
    /// than its sandbox declared; `None`: the declaration's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<tinybox_sdk::model::SnapshotSupport>,
}

/// A snapshot taken of a box.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotRecord {
    pub id: SnapshotId,
    #[serde(default)]
    pub taken_at: Option<u64>,
}

/// A snapshot under way: recorded before its driver is asked, removed
/// with the snapshot's own record. One left behind (the snapshot was
/// killed, or its driver failed without saying what it made) means an
/// image may exist that no record names; `rm` of the box sweeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingSnapshot {
    /// Unique to the one snapshot: what it removes when it is done.
    pub token: String,
    #[serde(default)]
    pub started_at: Option<u64>,
}

/// A box as the store records it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BoxInfo {
    pub id: BoxId,
    pub spec: BoxSpec,
    /// Seconds since the Unix epoch. `None` for boxes recorded before tinybox
    /// tracked time: such a box never expires (defaulting to the epoch would
    /// make it look decades old and have the first reap destroy it).
    #[serde(default)]
    pub created_at: Option<u64>,
    #[serde(default)]
    pub phase: Phase,
    /// The sandbox instance the workspace lives in; `None` while creating.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<Instance>,
    /// A separate runner instance, when the runner placement differs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runner: Option<Instance>,
    #[serde(default)]
    pub snapshots: Vec<SnapshotRecord>,
    /// Snapshots begun and not (yet) recorded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending_snapshots: Vec<PendingSnapshot>,
    /// The host directory the workspace is bound from, recorded by core
    /// when the box is made (from a `LocalDir` source, or inherited from
    /// the record a snapshot source came from). The only place a box's
    /// bind comes from: never from an image or anything a box writes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace_dir: Option<PathBuf>,
    /// The warm pool this box waits in, until it is handed out (then
    /// `None`). A waiting box is listed only when asked for and never
    /// expires: its ttl starts at hand-out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
    /// While `creating`: the process making it, so a reaper removes a
    /// create whose creator died and leaves one under way. `None` in a
    /// record written before creators were recorded: left to its ttl.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub creator: Option<super::Creator>,
}

impl BoxInfo {
    /// A record reserving `id` while the sandbox creates the box.
    pub fn creating(id: BoxId, spec: BoxSpec, created_at: Option<u64>) -> Self {
        BoxInfo {
            id,
            spec,
            created_at,
            phase: Phase::Creating,
            workspace: None,
            runner: None,
            snapshots: Vec::new(),
            pending_snapshots: Vec::new(),
            workspace_dir: None,
            pool: None,
            creator: None,
        }
    }

    /// [`BoxInfo::creating`], made by this process.
    pub fn creating_here(id: BoxId, spec: BoxSpec, created_at: Option<u64>) -> Self {
        BoxInfo { creator: super::Creator::this_process(), ..BoxInfo::creating(id, spec, created_at) }
    }

    /// Whether this is a create whose creator has ended without finishing
    /// it: nobody will, and `rm` (or a reaper) removes what it made.
    pub fn interrupted_create(&self) -> bool {
        self.phase == Phase::Creating && self.creator.as_ref().is_some_and(|c| !c.may_be_running())
    }

    /// Whether the box is ready and waiting in a pool (not yet anyone's).
    pub fn is_pooled(&self) -> bool {
        self.pool.is_some() && self.phase == Phase::Created
    }

    /// The host directory the workspace is bound from. A record written
    /// before core recorded it falls back on its own `LocalDir` source on
    /// this machine, which the caller chose; a box from a snapshot then
    /// binds nothing.
    pub fn bound_dir(&self) -> Option<&Path> {
        if let Some(dir) = &self.workspace_dir {
            return Some(dir);
        }
        match &self.spec.source {
            Some(WorkspaceSource::LocalDir { path }) if self.spec.workspace.host == HostName::local() => Some(path),
            _ => None,
        }
    }

    /// Whether `id` is one of this box's snapshots.
    pub fn has_snapshot(&self, id: &SnapshotId) -> bool {
        self.snapshots.iter().any(|s| &s.id == id)
    }

    /// When the box expires, if it ever does.
    pub fn expires_at(&self) -> Option<u64> {
        if self.is_pooled() {
            return None;
        }
        match (self.spec.lifecycle, self.created_at) {
            (Lifecycle::Ephemeral { ttl_secs }, Some(created)) => Some(created.saturating_add(ttl_secs)),
            _ => None,
        }
    }

    /// Whether the box has outlived its ttl at `now` (seconds since the epoch).
    pub fn is_expired(&self, now: u64) -> bool {
        self.expires_at().is_some_and(|at| now >= at)
    }
}
