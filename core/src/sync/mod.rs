//! Workspace sync: sending a local directory to a box's remote host.
//!
//! - [`fingerprint`]: which files are sent (the root's .gitignore, then
//!   .boxignore) and the blake3 merkle fingerprint over them.
//! - [`leaf_cache`]: each file's hash from last time, trusted while its
//!   metadata is unchanged, so an unchanged tree is not read again.
//! - [`transfer`]: the tar stream and the far side's receiving script.
//!
//! Whole-tree transfer with a skip: the far side keeps the fingerprint of
//! what it last received in `.tinybox-fingerprint`; an unchanged tree sends
//! nothing, a changed one sends everything (docs/adr/0012-sync.md). The
//! engine drives it (`Tinybox::sync`, and `create` on a remote host).

pub mod fingerprint;
pub mod leaf_cache;
pub mod transfer;

use std::path::PathBuf;

use serde::Serialize;

pub use fingerprint::{MARKER, Tree};

/// What one sync did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SyncReport {
    /// Whether anything was sent (false: the far side already had this tree).
    pub sent: bool,
    /// Files in the tree (all sent, or none).
    pub files: u64,
    /// Bytes of file contents in the tree.
    pub bytes: u64,
    /// Bytes of tar stream sent (0 when nothing was).
    pub stream_bytes: u64,
    pub fingerprint: String,
    /// The synced directory on the far side, as the host resolves it.
    pub remote_dir: String,
}

/// Where a box's synced workspace lives on its host, relative to the
/// directory the host starts commands in (an ssh user's home).
pub fn remote_workspace(namespace: &str, box_id: &str) -> String {
    format!(".tinybox/workspaces/{namespace}-{box_id}")
}

#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    #[error("{0} is not a directory")]
    NotADirectory(PathBuf),
    #[error("exclusion rules: {0}")]
    Rules(String),
    #[error("walking the workspace: {0}")]
    Walk(String),
    #[error("box {0} is on this machine and uses its directory in place; there is nothing to sync")]
    Local(String),
    #[error("box {0} was not made from a directory (create it with --workspace DIR), so it has no synced workspace")]
    NotFromDirectory(String),
    #[error("cannot sync to host {host}: {detail}")]
    NoTar { host: String, detail: String },
    #[error(
        "sync to host {host} failed ({status}): {detail}; the far side's marker was not written, so the next sync sends again"
    )]
    Failed { host: String, status: String, detail: String },
    #[error("{0}")]
    Task(String),
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
}

impl SyncError {
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        SyncError::Io { context: context.into(), source }
    }
}
