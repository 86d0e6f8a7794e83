//! One running driver process: spawned, handshaken, called, and — when it
//! misbehaves — turned into an error that names it, says how it ended and
//! quotes the tail of its stderr. Nothing a driver does can hang core
//! beyond the timeouts here.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jsonrpsee::RpcModule;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tinybox_sdk::peer::{CallError, Peer, PeerOptions};
use tinybox_sdk::protocol::{HandshakeParams, HandshakeResult, method, version};
use tokio::io::AsyncReadExt;
use tokio::process::{Child, Command};

use crate::error::{Error, Result};

/// How much of a driver's stderr is kept for error messages.
const STDERR_TAIL_BYTES: usize = 4096;

/// Where drivers are found and how long they get to answer.
#[derive(Debug, Clone)]
pub struct DriverConfig {
    /// Searched in order; the first `tinybox-driver-<name>` found wins.
    pub search_dirs: Vec<std::path::PathBuf>,
    pub timeouts: Timeouts,
    /// The hosts that can be named, `local` included.
    pub hosts: crate::hosts::HostTable,
    /// Where drivers keep persistent files: driver `N` is offered `N`
    /// beneath it in its handshake. `None`: drivers get no state directory.
    /// `Tinybox::open_with` sets it to `<store>/drivers`.
    pub state_dir: Option<PathBuf>,
}

impl DriverConfig {
    /// Next to the running binary, then TINYBOX_DRIVER_PATH, then PATH; timeouts from the environment.
    pub fn from_env() -> Self {
        DriverConfig {
            search_dirs: super::discover::search_dirs_from_env(),
            timeouts: Timeouts::from_env(),
            hosts: crate::hosts::local_only(),
            state_dir: None,
        }
    }

    /// The state directory to offer driver `name`: `<state_dir>/<name>`,
    /// created (mode 0700, as is any missing parent) if need be. `None` when
    /// there is no state directory, `name` is not a valid name, or the
    /// directory cannot be made (a file in the way, say): a driver without
    /// one still works, so this never fails a spawn.
    pub fn driver_state_dir(&self, name: &str) -> Option<PathBuf> {
        use std::os::unix::fs::DirBuilderExt;
        let base = self.state_dir.as_ref()?;
        tinybox_sdk::model::names::validate_name("driver", name).ok()?;
        let dir = base.join(name);
        match std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&dir) {
            Ok(()) => Some(dir),
            Err(e) => {
                tracing::warn!("no state directory for driver {name}: cannot create {}: {e}", dir.display());
                None
            }
        }
    }
}

/// Time limits for talking to drivers.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    /// From spawn to the handshake's answer.
    pub handshake: Duration,
    /// For calls that are not a command run (create, destroy, inspect, snapshot).
    pub operation: Duration,
    /// From a cancellation to the cancelled command's end.
    pub cancel: Duration,
}

impl Timeouts {
    /// Defaults, overridable with TINYBOX_HANDSHAKE_TIMEOUT_MS and TINYBOX_DRIVER_TIMEOUT_MS.
    pub fn from_env() -> Self {
        let ms = |var: &str, default: u64| {
            std::env::var(var)
                .ok()
                .and_then(|v| v.parse().ok())
                .map(Duration::from_millis)
                .unwrap_or(Duration::from_millis(default))
        };
        Timeouts {
            handshake: ms("TINYBOX_HANDSHAKE_TIMEOUT_MS", 10_000),
            operation: ms("TINYBOX_DRIVER_TIMEOUT_MS", 600_000),
            cancel: ms("TINYBOX_CANCEL_TIMEOUT_MS", 10_000),
        }
    }
}

/// The last few KiB a driver wrote to stderr.
#[derive(Clone)]
pub struct StderrTail {
    buf: Arc<Mutex<Vec<u8>>>,
    /// Becomes true when the driver's stderr reaches end of file.
    drained: tokio::sync::watch::Receiver<bool>,
}

/// How long to wait for a dead driver's stderr to drain (a grandchild may hold it open).
const STDERR_DRAIN: Duration = Duration::from_millis(500);

impl StderrTail {
    /// Reads `stderr` to its end in the background, keeping the tail.
    fn collect(mut stderr: tokio::process::ChildStderr) -> StderrTail {
        let (done_tx, drained) = tokio::sync::watch::channel(false);
        let tail = StderrTail { buf: Arc::default(), drained };
        let sink = tail.clone();
        tokio::spawn(async move {
            let mut buf = [0u8; 4096];
            while let Ok(n) = stderr.read(&mut buf).await {
                if n == 0 {
                    break;
                }
                sink.push(&buf[..n]);
            }
            let _ = done_tx.send(true);
        });
        tail
    }

    /// Waits (briefly) until everything the driver wrote has been read.
    async fn drain(&self) {
        let mut rx = self.drained.clone();
        let _ = tokio::time::timeout(STDERR_DRAIN, rx.wait_for(|done| *done)).await;
    }

    fn push(&self, bytes: &[u8]) {
        let mut buf = self.buf.lock().expect("stderr tail");
        buf.extend_from_slice(bytes);
        if buf.len() > STDERR_TAIL_BYTES {
            let cut = buf.len() - STDERR_TAIL_BYTES;
            buf.drain(..cut);
        }
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.buf.lock().expect("stderr tail")).into_owned()
    }
}

/// A driver process that has answered the handshake.
pub struct Connection {
    pub path: PathBuf,
    pub hello: HandshakeResult,
    link: Link,
}

/// What a connection does is its link's: said once here, so a reader sees
/// exactly which calls a connection offers.
impl Connection {
    /// The driver's name.
    pub fn name(&self) -> &str {
        &self.link.name
    }

    /// A call bounded by the driver timeout.
    pub async fn call<P: Serialize + Send, T: DeserializeOwned>(&self, method: &str, params: P) -> Result<T> {
        self.link.call(method, params).await
    }

    /// A call that lasts as long as the command it runs.
    pub async fn call_unbounded<P: Serialize + Send, T: DeserializeOwned>(&self, method: &str, params: P) -> Result<T> {
        self.link.call_unbounded(method, params).await
    }

    /// The last of what the driver wrote on stderr.
    pub fn stderr_tail(&self) -> String {
        self.link.stderr_tail()
    }

    /// Closes the driver's stdin and waits for it to exit, killing it past the timeout.
    pub async fn close(&self) {
        self.link.close().await
    }

    /// How the driver's session ended, if it has: the process exited (its
    /// status), or its connection closed while the process lingers. `None`
    /// while it can still answer. Never waits: a session cached for reuse is
    /// looked at before each use.
    pub fn ended(&self) -> Option<String> {
        self.link.ended()
    }

    /// The driver's process id, as it was started.
    pub fn pid(&self) -> Option<u32> {
        self.link.pid
    }

    /// Turns true once the driver's connection has closed.
    pub fn closed_signal(&self) -> tokio::sync::watch::Receiver<bool> {
        self.link.peer.closed_signal()
    }
}

/// The process and the JSON-RPC peer talking to it.
pub struct Link {
    pub name: String,
    peer: Peer,
    pid: Option<u32>,
    child: tokio::sync::Mutex<Child>,
    tail: StderrTail,
    timeouts: Timeouts,
}

impl Connection {
    /// Starts the driver at `path`, serving `methods` for its reverse calls,
    /// and completes the handshake.
    pub async fn spawn<C: Send + Sync + 'static>(
        name: &str,
        path: &Path,
        methods: RpcModule<C>,
        timeouts: Timeouts,
        config: serde_json::Value,
        state_dir: Option<PathBuf>,
        features: Vec<String>,
    ) -> Result<Connection> {
        let mut child = Command::new(path)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| Error::io(format!("cannot start driver {name} ({})", path.display()), e))?;
        let stdin = child.stdin.take().expect("piped");
        let stdout = child.stdout.take().expect("piped");
        let tail = StderrTail::collect(child.stderr.take().expect("piped"));
        let peer = Peer::start(stdout, stdin, methods, PeerOptions { expect_response_first: true });
        let pid = child.id();
        let link = Link { name: name.to_owned(), peer, pid, child: tokio::sync::Mutex::new(child), tail, timeouts };
        let hello = link.handshake(config, state_dir, features).await?;
        Ok(Connection { path: path.to_owned(), hello, link })
    }
}

impl Link {
    async fn handshake(
        &self,
        config: serde_json::Value,
        state_dir: Option<PathBuf>,
        features: Vec<String>,
    ) -> Result<HandshakeResult> {
        let params = HandshakeParams {
            protocol: version::protocol_version(),
            core_version: env!("CARGO_PKG_VERSION").to_owned(),
            features,
            config,
            state_dir,
        };
        let call = self.peer.call::<_, HandshakeResult>(method::HANDSHAKE, params);
        let hello = match tokio::time::timeout(self.timeouts.handshake, call).await {
            Err(_) => return Err(self.timed_out("the handshake", self.timeouts.handshake).await),
            Ok(Err(e)) => return Err(self.explain(e).await),
            Ok(Ok(hello)) => hello,
        };
        let ours = version::protocol_version();
        if !version::compatible(&ours, &hello.protocol) {
            self.kill().await;
            return Err(Error::Protocol {
                driver: self.name.clone(),
                detail: format!("it speaks protocol {}, core speaks {ours}; install a matching driver", hello.protocol),
            });
        }
        Ok(hello)
    }

    /// Calls `method`, bounded by the operation timeout.
    pub async fn call<P: Serialize + Send, T: DeserializeOwned>(&self, method: &str, params: P) -> Result<T> {
        match tokio::time::timeout(self.timeouts.operation, self.peer.call::<P, T>(method, params)).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(self.explain(e).await),
            Err(_) => Err(self.timed_out(method, self.timeouts.operation).await),
        }
    }

    /// Calls `method` with no time limit (a command runs as long as it runs).
    pub async fn call_unbounded<P: Serialize + Send, T: DeserializeOwned>(&self, method: &str, params: P) -> Result<T> {
        match self.peer.call::<P, T>(method, params).await {
            Ok(v) => Ok(v),
            Err(e) => Err(self.explain(e).await),
        }
    }

    /// A driver that does not answer in time is presumed hung and killed, so
    /// it cannot finish the operation later behind core's back.
    async fn timed_out(&self, what: &str, after: Duration) -> Error {
        self.kill().await;
        self.tail.drain().await;
        Error::DriverTimeout { driver: self.name.clone(), what: what.to_owned(), after, stderr_tail: self.tail.text() }
    }

    /// Turns a failed call into an error naming the driver and, when it
    /// died, its exit status and last words.
    async fn explain(&self, e: CallError) -> Error {
        match e {
            CallError::Remote(err) => Error::Driver { driver: self.name.clone(), code: err.code, message: err.message },
            CallError::Malformed { method, detail } => {
                Error::Protocol { driver: self.name.clone(), detail: format!("malformed answer to {method}: {detail}") }
            }
            CallError::Violation(detail) => {
                self.kill().await;
                Error::Protocol { driver: self.name.clone(), detail }
            }
            CallError::Closed(reason) => {
                // Give a dying process a moment to be reaped so its status is known.
                let status = {
                    let mut child = self.child.lock().await;
                    match tokio::time::timeout(Duration::from_secs(2), child.wait()).await {
                        Ok(Ok(status)) => Some(status),
                        _ => {
                            let _ = child.start_kill();
                            None
                        }
                    }
                };
                self.tail.drain().await;
                match status {
                    Some(status) => Error::DriverDied {
                        driver: self.name.clone(),
                        status: describe_exit(status),
                        stderr_tail: self.tail.text(),
                    },
                    None => Error::Protocol { driver: self.name.clone(), detail: reason },
                }
            }
        }
    }

    /// The tail of the driver's stderr so far.
    pub fn stderr_tail(&self) -> String {
        self.tail.text()
    }

    async fn kill(&self) {
        let mut child = self.child.lock().await;
        let _ = child.start_kill();
        let _ = child.wait().await;
    }

    /// Closes the connection: the driver reads end-of-file and exits. One
    /// that does not exit promptly is killed.
    pub async fn close(&self) {
        self.peer.shutdown();
        let mut child = self.child.lock().await;
        if tokio::time::timeout(Duration::from_secs(5), child.wait()).await.is_err() {
            let _ = child.start_kill();
            let _ = child.wait().await;
        }
    }

    /// Whether the process has exited (reaping it if so) or the connection
    /// closed. Both are looked at: a driver killed while a process it
    /// started still holds its stdout has exited with its connection open,
    /// and one that closed its stdout may not have exited yet.
    fn ended(&self) -> Option<String> {
        // Busy: a close, a kill or an explanation is waiting on the process,
        // which then is ending; what the connection says is enough.
        if let Ok(mut child) = self.child.try_lock()
            && let Ok(Some(status)) = child.try_wait()
        {
            return Some(describe_exit(status));
        }
        self.peer.close_reason().map(|r| match r {
            tinybox_sdk::peer::CloseReason::Ended(why) | tinybox_sdk::peer::CloseReason::Violation(why) => {
                format!("its connection is gone: {why}")
            }
        })
    }
}

fn describe_exit(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("exit status {c}"),
        (None, Some(s)) => format!("killed by signal {s}"),
        _ => "unknown exit".into(),
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn config(state_dir: Option<PathBuf>) -> DriverConfig {
        DriverConfig { state_dir, ..DriverConfig::from_env() }
    }

    #[test]
    fn each_driver_gets_a_private_directory_of_its_own() {
        let store = tempfile::tempdir().unwrap();
        let cfg = config(Some(store.path().join("drivers")));
        let dir = cfg.driver_state_dir("microvm").expect("a state dir");
        assert_eq!(dir, store.path().join("drivers").join("microvm"));
        assert!(dir.is_dir());
        assert_eq!(std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777, 0o700);
        assert_eq!(std::fs::metadata(store.path().join("drivers")).unwrap().permissions().mode() & 0o777, 0o700);

        // Asking again finds it; what a driver left there stays.
        std::fs::write(dir.join("cache"), b"kept").unwrap();
        assert_eq!(cfg.driver_state_dir("microvm"), Some(dir.clone()));
        assert_eq!(std::fs::read(dir.join("cache")).unwrap(), b"kept");
        assert_eq!(cfg.driver_state_dir("docker"), Some(store.path().join("drivers").join("docker")));
    }

    #[test]
    fn no_state_dir_is_offered_rather_than_failing() {
        assert_eq!(config(None).driver_state_dir("microvm"), None, "none configured");

        let store = tempfile::tempdir().unwrap();
        let cfg = config(Some(store.path().join("drivers")));
        assert_eq!(cfg.driver_state_dir(".."), None, "not a name: it would escape");
        assert_eq!(cfg.driver_state_dir("a/b"), None);
        assert!(!store.path().join("drivers").join("a").exists());

        // A file where the directory should be.
        std::fs::write(store.path().join("drivers"), b"in the way").unwrap();
        assert_eq!(cfg.driver_state_dir("microvm"), None);
    }
}
