//! Starting and stopping a store's daemon from a front end: its log file,
//! the wait for a new daemon to answer and the wait for a stopped one to
//! let go of the store. The front end only spawns the process (it knows its
//! own executable); which file, and what counts as started or stopped, are
//! decided here.

use std::fs::File;
use std::io::Read as _;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use super::{Call, DaemonError, DaemonStatus, ask, io, supervised};

/// The daemon's log in its store: what a background daemon writes.
pub const LOG: &str = "daemon.log";
/// How often the waits below look again.
const POLL: Duration = Duration::from_millis(20);

/// Where the daemon of `store` logs.
pub fn log_path(store: &Path) -> PathBuf {
    store.join(LOG)
}

/// The daemon's log, opened for appending (0600, the store made if need be).
#[derive(Debug)]
pub struct DaemonLog {
    pub path: PathBuf,
    file: File,
}

impl DaemonLog {
    pub fn open(store: &Path) -> Result<DaemonLog, DaemonError> {
        std::fs::create_dir_all(store).map_err(io(format!("cannot make {}", store.display())))?;
        let path = log_path(store);
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(&path)
            .map_err(io(format!("cannot open {}", path.display())))?;
        Ok(DaemonLog { path, file })
    }

    /// Two handles on the log, for a daemon process's stdout and stderr.
    pub fn streams(&self) -> Result<(File, File), DaemonError> {
        let share = || self.file.try_clone().map_err(io("cannot share the daemon's log"));
        Ok((share()?, share()?))
    }

    /// The log's last line, trimmed: what a daemon that died said last.
    pub fn last_line(&self) -> String {
        let mut text = String::new();
        let _ = File::open(&self.path).and_then(|mut f| f.read_to_string(&mut text));
        text.lines().last().unwrap_or("").trim().to_owned()
    }
}

/// Waits until the daemon just spawned as `child` answers on `store`; an
/// error when it exits first (quoting its log) or stays silent `within`.
pub async fn await_started(
    store: &Path,
    child: &mut Child,
    log: &DaemonLog,
    within: Duration,
) -> Result<DaemonStatus, DaemonError> {
    let deadline = Instant::now() + within;
    loop {
        match ask(store, Call::Status).await {
            Ok(status) => return Ok(status),
            Err(DaemonError::NotRunning { .. }) => {}
            Err(e) => return Err(e),
        }
        if let Ok(Some(exit)) = child.try_wait() {
            return Err(DaemonError::ExitedAtStart { status: exit.to_string(), last_line: log.last_line() });
        }
        if Instant::now() > deadline {
            return Err(DaemonError::DidNotAnswer { within, log: log.path.clone() });
        }
        // A bounded poll: the new process gives no other sign of life.
        tokio::time::sleep(POLL).await;
    }
}

/// Asks the daemon of `store` to stop and waits, at most `within`, until it
/// has let go of the store (it finishes its current tick first).
pub async fn stop(store: &Path, within: Duration) -> Result<DaemonStatus, DaemonError> {
    let status = ask(store, Call::Stop).await?;
    let deadline = Instant::now() + within;
    while supervised(store) {
        if Instant::now() > deadline {
            return Err(DaemonError::StillRunning { pid: status.pid, after: within, log: log_path(store) });
        }
        // A bounded poll: a lock gives no sign when another process drops it.
        tokio::time::sleep(POLL).await;
    }
    Ok(status)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_is_the_store_s_own_file_and_its_last_line_is_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join("store");
        let log = DaemonLog::open(&store).unwrap();
        assert_eq!(log.path, store.join(LOG));
        assert_eq!(log.last_line(), "");
        let (mut out, _) = log.streams().unwrap();
        std::io::Write::write_all(&mut out, b"tinybox daemon: started\ntinybox daemon: cannot listen  \n").unwrap();
        assert_eq!(log.last_line(), "tinybox daemon: cannot listen");
        let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&log.path).unwrap().permissions());
        assert_eq!(mode & 0o777, 0o600);
    }

    #[tokio::test]
    async fn a_daemon_that_exits_at_start_is_named_with_what_it_said_last() {
        let dir = tempfile::tempdir().unwrap();
        let log = DaemonLog::open(dir.path()).unwrap();
        let (out, err) = log.streams().unwrap();
        let mut child = std::process::Command::new("sh")
            .args(["-c", "echo 'tinybox daemon: no luck' >&2; exit 3"])
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap();
        let e = await_started(dir.path(), &mut child, &log, Duration::from_secs(60)).await.unwrap_err();
        match &e {
            DaemonError::ExitedAtStart { status, last_line } => {
                assert!(status.contains('3'), "{status}");
                assert_eq!(last_line, "tinybox daemon: no luck");
            }
            other => panic!("expected ExitedAtStart, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn stopping_where_no_daemon_runs_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let e = stop(dir.path(), Duration::from_secs(1)).await.unwrap_err();
        assert!(matches!(e, DaemonError::NotRunning { .. }), "{e:?}");
    }
}
