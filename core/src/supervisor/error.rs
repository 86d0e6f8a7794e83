//! What went wrong reaching, starting or stopping a store's daemon: a leaf
//! beneath the supervisor and its control side, gathered by `crate::Error`.

use std::path::PathBuf;
use std::time::Duration;

/// The longest path a UNIX socket can be bound at (sun_path less its NUL).
pub(super) const MAX_SOCKET_PATH: usize = 107;

#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error("no daemon runs on store {}; `tinybox daemon start` starts one", .store.display())]
    NotRunning { store: PathBuf },
    #[error("a daemon already runs on store {}{}; `tinybox daemon status` shows it", .store.display(), pid_suffix(*.pid))]
    AlreadyRunning { store: PathBuf, pid: Option<u32> },
    #[error(
        "the daemon on store {} is tinybox {theirs} and this is {ours}; `tinybox daemon stop` then `tinybox daemon start` runs this one",
        .store.display()
    )]
    OtherVersion { store: PathBuf, theirs: String, ours: String },
    /// The daemon would not serve this caller (another uid, a malformed
    /// request), or would not do what it asked: its words.
    #[error("the daemon refused this caller: {0}")]
    Refused(String),
    #[error("a daemon keeps a store's boxes, and this engine has no store directory (its boxes are in memory)")]
    NoStoreDir,
    #[error("the daemon exited at start ({status}): {last_line}")]
    ExitedAtStart { status: String, last_line: String },
    #[error("the daemon did not answer within {}s; its log is {}", .within.as_secs(), .log.display())]
    DidNotAnswer { within: Duration, log: PathBuf },
    #[error(
        "the daemon (pid {pid}) was asked to stop but still runs after {}s; its log is {}",
        .after.as_secs(),
        .log.display()
    )]
    StillRunning { pid: u32, after: Duration, log: PathBuf },
    /// What the daemon's engine said, as it said it.
    #[error("{0}")]
    Failed(String),
    #[error("the daemon on store {} broke its protocol: {detail}", .store.display())]
    Protocol { store: PathBuf, detail: String },
    #[error("the daemon's socket {} is {len} bytes, more than a UNIX socket allows ({MAX_SOCKET_PATH}); use a store with a shorter path", .path.display())]
    PathTooLong { path: PathBuf, len: usize },
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
}

fn pid_suffix(pid: Option<u32>) -> String {
    pid.map(|p| format!(" (pid {p})")).unwrap_or_default()
}
