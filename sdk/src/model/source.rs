//! Where a box's workspace comes from, and the network policy it runs under.

use std::fmt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::names::SnapshotId;

/// The origin of a box's filesystem.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum WorkspaceSource {
    /// An OCI image reference.
    OciImage { reference: String },
    /// A directory on the workspace host, shared into the box.
    LocalDir { path: PathBuf },
    /// A snapshot taken earlier (resume, fork, or a template).
    Snapshot { id: SnapshotId },
    /// A git repository (no backend clones one yet).
    GitRepo {
        url: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rev: Option<String>,
    },
}

impl WorkspaceSource {
    pub fn kind(&self) -> SourceKind {
        match self {
            WorkspaceSource::OciImage { .. } => SourceKind::OciImage,
            WorkspaceSource::LocalDir { .. } => SourceKind::LocalDir,
            WorkspaceSource::Snapshot { .. } => SourceKind::Snapshot,
            WorkspaceSource::GitRepo { .. } => SourceKind::GitRepo,
        }
    }
}

/// The kind of a [`WorkspaceSource`], as sandboxes declare what they accept.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SourceKind {
    OciImage,
    LocalDir,
    Snapshot,
    GitRepo,
    #[serde(untagged)]
    Unknown(String),
}

impl fmt::Display for SourceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SourceKind::OciImage => "oci_image",
            SourceKind::LocalDir => "local_dir",
            SourceKind::Snapshot => "snapshot",
            SourceKind::GitRepo => "git_repo",
            SourceKind::Unknown(s) => s,
        })
    }
}

/// Whether a box may open outbound connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NetworkPolicy {
    /// No network beyond loopback. The default.
    #[default]
    Denied,
    /// Outbound connections allowed.
    Egress,
    /// Loopback only, plus an egress proxy that lets through only the
    /// box's allowlist (ADR 0020). Sent only to a sandbox declaring
    /// `network_allowlist`, with the proxy's endpoint.
    Allowlist,
}

/// The network confinement actually in force for a box.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NetworkInForce {
    Denied,
    Egress,
    /// Only through the box's egress proxy, to what its allowlist names.
    Allowlist,
    /// The sandbox confines no network at all (passthrough).
    NotConfined,
}

impl fmt::Display for NetworkInForce {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NetworkInForce::Denied => "denied",
            NetworkInForce::Egress => "egress",
            NetworkInForce::Allowlist => "allowlist",
            NetworkInForce::NotConfined => "not confined",
        })
    }
}

/// A port published from the box to its host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortMapping {
    pub host: u16,
    pub guest: u16,
}
