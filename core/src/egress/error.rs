//! What goes wrong with an allowlist or a box's egress proxy: a leaf beneath
//! the egress rules and the proxy's process, gathered by `crate::Error`.

use std::io;
use std::path::PathBuf;

use tinybox_egress::{LogError, PolicyError};
use tinybox_sdk::model::BoxId;

use super::dir::PROGRAM;

/// An allowlist asked for in a way that breaks a rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllowlistError {
    /// One entry (the first bad one) is not an entry.
    #[error("{0}")]
    Entry(#[from] PolicyError),
    #[error("allow_hosts goes with network allowlist (or no network given), not network {0}; leave out one of them")]
    OtherNetwork(&'static str),
    #[error("network allowlist needs at least one allow_hosts entry (--allow-host NAME[:PORT])")]
    Empty,
    /// With plain egress, an entry that is not an address or network.
    #[error(
        "allow entry {value:?} with network egress: {rule}; with egress, list only addresses or networks to let through its fence (a name needs an allowlist: leave out --network egress)"
    )]
    NotAnException { value: String, rule: String },
}

/// What went wrong with a box's egress proxy.
#[derive(Debug, thiserror::Error)]
pub enum EgressError {
    #[error("an allowlist box needs a file store: its egress proxy keeps its files beside the box records")]
    NeedsFileStore,
    #[error("no {PROGRAM} program to run the box's egress proxy (looked in {}); it is installed next to tinybox", display_paths(.searched))]
    NotFound { searched: Vec<PathBuf> },
    #[error("TINYBOX_EGRESS_RESOLVER {0:?} is not a nameserver IP:PORT, like 127.0.0.1:53")]
    Resolver(String),
    #[error("cannot start the egress proxy in {}: {detail}", .dir.display())]
    Start { dir: PathBuf, detail: String },
    #[error("cannot stop the egress proxy in {} (pid {pid}): it outlived SIGKILL", .dir.display())]
    Stop { dir: PathBuf, pid: i32 },
    #[error("{context} {}: {source}", .path.display())]
    Io {
        context: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(
        "box {id} has no egress proxy: its network is {network}, and only an allowlist box's connections are logged"
    )]
    NoProxy { id: BoxId, network: String },
    #[error(transparent)]
    Log(#[from] LogError),
}

fn display_paths(paths: &[PathBuf]) -> String {
    if paths.is_empty() {
        return "no directory".into();
    }
    paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
}
