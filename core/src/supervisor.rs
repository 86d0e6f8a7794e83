//! The optional supervisor (`tinybox daemon`): one process per store that
//! gives tinybox a lifetime — ephemeral boxes reaped when their ttl passes,
//! persistent boxes snapshotted on their cadence, warm pools kept full.
//!
//! Nothing depends on it: every verb works without it, and everything it
//! manages is in the store, so a daemon killed at any moment loses nothing —
//! the next one (or `tinybox reap`) finishes or removes what was in flight.
//!
//! - `<store>/daemon.lock`: held (flock, exclusive) for the daemon's whole
//!   life, and by `pool create`/`pool fill` while they fill a pool with no
//!   daemon running. It holds the holder's pid, for messages only.
//! - `<store>/daemon.sock`: the daemon's UNIX socket (0600, inside the 0700
//!   store), one JSON line each way. A caller whose uid (SO_PEERCRED) is not
//!   the store owner's is refused; so is a caller of another version.

use std::cell::RefCell;
use std::io::{Read as _, Write as _};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use fs4::FileExt;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};

use futures_util::stream::{FuturesUnordered, StreamExt};
use tinybox_sdk::model::{BoxId, ExecRequest, ExitStatus};
use tinybox_sdk::protocol::StdioRef;

use crate::Tinybox;
use crate::engine::{Autosnapshot, Forward};

mod control;
mod error;
mod exec;
pub use control::{DaemonLog, LOG, await_started, log_path, stop};
pub use error::DaemonError;
use error::MAX_SOCKET_PATH;
pub use exec::exec_through;

pub const SOCKET: &str = "daemon.sock";
pub const LOCK: &str = "daemon.lock";
/// How often the daemon looks for expired boxes, due snapshots and short pools.
pub const TICK: Duration = Duration::from_secs(1);
/// How long the daemon waits for a caller's request.
pub const ANSWER_WITHIN: Duration = Duration::from_secs(10);
/// How long a caller waits for the daemon's answer (a forward starts a
/// driver and asks the gate first).
pub const FORWARD_WITHIN: Duration = Duration::from_secs(60);
/// This build's version, which caller and daemon must share.
pub fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> DaemonError {
    let context = context.into();
    move |source| DaemonError::Io { context, source }
}

/// What a caller asks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Call {
    Status,
    Stop,
    /// Hold a port forward (`port-forward --detach`) until the box is
    /// removed or the daemon stops; reopened by the next daemon after a kill.
    Forward {
        #[serde(rename = "box")]
        box_id: BoxId,
        local: u16,
        port: u16,
    },
    /// Run a command through the daemon's warm driver sessions; the
    /// caller's streams travel as descriptors through `stdio`, and a line
    /// the caller sends afterwards (or its going away) cancels it.
    Exec {
        #[serde(rename = "box")]
        box_id: BoxId,
        request: ExecRequest,
        #[serde(default)]
        runner: bool,
        stdio: StdioRef,
    },
}

#[derive(Debug, Serialize, Deserialize)]
struct Request {
    tinybox: String,
    call: Call,
}

#[derive(Debug, Serialize, Deserialize)]
struct Reply {
    tinybox: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    status: Option<DaemonStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    forward: Option<Forward>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    exit: Option<ExitReply>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

/// How a command run through the daemon ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct ExitReply {
    status: ExitStatus,
    cancelled: bool,
}

/// What `tinybox daemon status` shows.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DaemonStatus {
    pub pid: u32,
    pub version: String,
    pub store: PathBuf,
    /// Seconds since the epoch.
    pub started_at: u64,
    pub ticks: u64,
    pub reaped: u64,
    pub snapshots_taken: u64,
    pub pool_boxes_made: u64,
    /// Commands run through the daemon.
    #[serde(default)]
    pub execs: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

/// The supervisor's lock, held until dropped.
#[derive(Debug)]
pub struct SupervisorLock {
    _file: std::fs::File,
}

/// Takes the store's supervisor lock if nobody holds it: `None` when a
/// daemon (or a filling `pool` command) does.
pub fn try_supervise(store: &Path) -> Result<Option<SupervisorLock>, DaemonError> {
    let path = store.join(LOCK);
    std::fs::create_dir_all(store).map_err(io(format!("cannot make {}", store.display())))?;
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&path)
        .map_err(io(format!("cannot open {}", path.display())))?;
    if FileExt::try_lock(&file).is_err() {
        return Ok(None);
    }
    // For messages only: the lock, not this number, says who supervises.
    let _ = file.set_len(0).and_then(|()| write!(file, "{}", std::process::id()));
    Ok(Some(SupervisorLock { _file: file }))
}

/// Whether a daemon (or a filling `pool` command) holds the store's
/// supervisor lock now. Reads only; creates nothing.
pub fn supervised(store: &Path) -> bool {
    let Ok(file) = std::fs::File::open(store.join(LOCK)) else { return false };
    match FileExt::try_lock_shared(&file) {
        Ok(()) => false,
        Err(_) => true,
    }
}

/// The pid recorded by the holder of the supervisor lock, if readable.
fn holder_pid(store: &Path) -> Option<u32> {
    let mut text = String::new();
    std::fs::File::open(store.join(LOCK)).ok()?.read_to_string(&mut text).ok()?;
    text.trim().parse().ok()
}

fn socket_path(store: &Path) -> Result<PathBuf, DaemonError> {
    let path = store.join(SOCKET);
    let len = path.as_os_str().len();
    if len > MAX_SOCKET_PATH {
        return Err(DaemonError::PathTooLong { path, len });
    }
    Ok(path)
}

/// Asks the store's daemon `call`. `NotRunning` when none answers.
pub async fn ask(store: &Path, call: Call) -> Result<DaemonStatus, DaemonError> {
    let broken = |detail: String| DaemonError::Protocol { store: store.to_owned(), detail };
    exchange(store, call).await?.status.ok_or_else(|| broken("an answer without a status".into()))
}

/// Asks the store's daemon to hold a forward; returns it as held.
pub async fn ask_forward(store: &Path, box_id: BoxId, local: u16, port: u16) -> Result<Forward, DaemonError> {
    let broken = |detail: String| DaemonError::Protocol { store: store.to_owned(), detail };
    exchange(store, Call::Forward { box_id, local, port })
        .await?
        .forward
        .ok_or_else(|| broken("an answer without the forward".into()))
}

async fn exchange(store: &Path, call: Call) -> Result<Reply, DaemonError> {
    let path = socket_path(store)?;
    let mut stream = match UnixStream::connect(&path).await {
        Ok(s) => s,
        Err(e) if matches!(e.kind(), std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused) => {
            return Err(DaemonError::NotRunning { store: store.to_owned() });
        }
        Err(e) => return Err(io(format!("cannot reach the daemon at {}", path.display()))(e)),
    };
    let broken = |detail: String| DaemonError::Protocol { store: store.to_owned(), detail };
    let mut line =
        serde_json::to_vec(&Request { tinybox: version().into(), call }).map_err(|e| broken(e.to_string()))?;
    line.push(b'\n');
    let exchange = async {
        stream.write_all(&line).await?;
        let mut answer = String::new();
        BufReader::new(&mut stream).read_line(&mut answer).await?;
        Ok::<_, std::io::Error>(answer)
    };
    let answer = tokio::time::timeout(FORWARD_WITHIN, exchange)
        .await
        .map_err(|_| broken(format!("no answer within {}s", FORWARD_WITHIN.as_secs())))?
        .map_err(io("talking to the daemon"))?;
    let reply: Reply =
        serde_json::from_str(answer.trim()).map_err(|e| broken(format!("{e} in {:?}", answer.trim())))?;
    if reply.tinybox != version() {
        return Err(DaemonError::OtherVersion {
            store: store.to_owned(),
            theirs: reply.tinybox,
            ours: version().into(),
        });
    }
    if let Some(error) = reply.error {
        return Err(DaemonError::Refused(error));
    }
    Ok(reply)
}

/// Runs the daemon on `engine`'s store until `stop` completes or a caller
/// asks it to stop. Holds the supervisor lock throughout.
pub async fn serve(engine: &Tinybox, stop: impl std::future::Future<Output = ()>) -> Result<DaemonStatus, DaemonError> {
    let store = engine.store_dir().ok_or(DaemonError::NoStoreDir)?;
    let store = store.to_owned();
    let path = socket_path(&store)?;
    let Some(_lock) = try_supervise(&store)? else {
        return Err(DaemonError::AlreadyRunning { pid: holder_pid(&store), store });
    };
    // Holding the lock, no live daemon owns a socket file left here.
    let _ = std::fs::remove_file(&path);
    // Nor does any killed caller own its stream socket.
    crate::paths::sweep_runtime_dir();
    // A driver session that died is replaced at its next use; say so here.
    engine.drivers.on_notice(log);
    let listener = UnixListener::bind(&path).map_err(io(format!("cannot listen on {}", path.display())))?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
        .map_err(io(format!("cannot restrict {}", path.display())))?;
    let owner = std::fs::metadata(&store).map_err(io(format!("cannot read {}", store.display())))?.uid();
    let status = RefCell::new(DaemonStatus {
        pid: std::process::id(),
        version: version().into(),
        store: store.clone(),
        started_at: engine.now(),
        ..DaemonStatus::default()
    });
    let (stopping, mut stopped) = tokio::sync::watch::channel(false);
    let (to_forwarder, mut forward_requests) = tokio::sync::mpsc::unbounded_channel::<ForwardRequest>();

    let ticker = async {
        let mut interval = tokio::time::interval(TICK);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = interval.tick() => {}
                _ = stopped.changed() => {}
            }
            if *stopped.borrow() {
                break;
            }
            tick(engine, &status).await;
        }
    };
    let forwarder = async {
        let mut held = FuturesUnordered::new();
        // What a killed daemon held, it holds again.
        for f in engine.detached_forwards() {
            held.push(hold(engine, f.box_id, f.local_port, f.box_port, None, stopping.subscribe()));
        }
        loop {
            tokio::select! {
                request = forward_requests.recv() => match request {
                    Some((box_id, local, port, reply)) => {
                        held.push(hold(engine, box_id, local, port, Some(reply), stopping.subscribe()));
                    }
                    None => break,
                },
                Some(()) = held.next(), if !held.is_empty() => {}
            }
        }
        // The stop reached every forward; wait for them to close.
        while held.next().await.is_some() {}
    };
    let server = async {
        let to_forwarder = to_forwarder;
        tokio::pin!(stop);
        // Callers are answered side by side: an exec holds its connection
        // for as long as its command runs.
        let mut answering = FuturesUnordered::new();
        loop {
            tokio::select! {
                () = &mut stop => break,
                Some(call) = answering.next(), if !answering.is_empty() => {
                    if call == Some(Call::Stop) {
                        break;
                    }
                }
                accepted = listener.accept() => match accepted {
                    Ok((stream, _)) => answering.push(answer(engine, stream, owner, &status, &to_forwarder)),
                    Err(e) => log(&format!("accepting a caller failed: {e}")),
                },
            }
        }
        // Commands still running through this daemon end with it (their
        // callers hear that); nothing else is left half-done.
        drop(answering);
        let _ = stopping.send(true);
    };
    tokio::join!(ticker, forwarder, server);
    let _ = std::fs::remove_file(&path);
    log("stopped");
    Ok(status.into_inner())
}

/// A forward to hold, and where to say how it went.
type ForwardRequest = (BoxId, u16, u16, tokio::sync::oneshot::Sender<Result<Forward, String>>);

/// Holds one forward until its box goes or the daemon stops; `reply`
/// hears it held, or why not.
async fn hold(
    engine: &Tinybox,
    box_id: BoxId,
    local: u16,
    port: u16,
    reply: Option<tokio::sync::oneshot::Sender<Result<Forward, String>>>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let reply = RefCell::new(reply);
    let ready = |addr: std::net::SocketAddr| {
        log(&format!("forwarding 127.0.0.1:{} to port {port} of {box_id}", addr.port()));
        if let Some(r) = reply.borrow_mut().take() {
            let held = Forward {
                box_id: box_id.clone(),
                local_port: addr.port(),
                box_port: port,
                pid: std::process::id(),
                detached: true,
            };
            let _ = r.send(Ok(held));
        }
    };
    let stopped = async move {
        let _ = stop.wait_for(|s| *s).await;
    };
    let result = engine.port_forward(&box_id, local, port, true, ready, stopped).await;
    if let Err(e) = result {
        log(&format!("forward to port {port} of {box_id}: {e}"));
        let waiting = reply.borrow_mut().take();
        match waiting {
            Some(r) => {
                let _ = r.send(Err(e.to_string()));
            }
            // One reopened after a restart whose box is gone: forget it.
            None => {
                if let Some(dir) = engine.store_dir() {
                    let _ = std::fs::remove_file(dir.join("forwards").join(format!("{local}.json")));
                }
            }
        }
    }
}

/// Answers one caller; returns what it asked, if it was allowed to.
async fn answer(
    engine: &Tinybox,
    mut stream: UnixStream,
    owner: u32,
    status: &RefCell<DaemonStatus>,
    forwarder: &tokio::sync::mpsc::UnboundedSender<ForwardRequest>,
) -> Option<Call> {
    let reply = |status: Option<DaemonStatus>, error: Option<String>| Reply {
        tinybox: version().into(),
        status,
        forward: None,
        exit: None,
        error,
    };
    let cred = stream.peer_cred();
    let (read, mut write) = stream.split();
    let mut reader = BufReader::new(read);
    // The request is read whoever asks, so a refused caller reads its
    // refusal rather than a closed socket.
    let mut line = String::new();
    let read = tokio::time::timeout(ANSWER_WITHIN, reader.read_line(&mut line)).await;
    let (request, out) = match cred {
        Ok(cred) if cred.uid() != owner => {
            (None, reply(None, Some(format!("uid {} does not own this store (uid {owner} does)", cred.uid()))))
        }
        Err(e) => (None, reply(None, Some(format!("cannot tell who is asking: {e}")))),
        Ok(_) => match read.ok().and_then(Result::ok).and_then(|_| serde_json::from_str::<Request>(line.trim()).ok()) {
            None => (None, reply(None, Some(format!("not a request: {:?}", line.trim())))),
            // Another version's caller hears this one's version, and refuses.
            Some(r) if r.tinybox != version() => (None, reply(None, None)),
            Some(Request { call: Call::Forward { box_id, local, port }, .. }) => {
                let (tx, rx) = tokio::sync::oneshot::channel();
                let _ = forwarder.send((box_id.clone(), local, port, tx));
                let held = match rx.await {
                    Ok(Ok(f)) => Reply { forward: Some(f), ..reply(Some(status.borrow().clone()), None) },
                    Ok(Err(e)) => reply(None, Some(e)),
                    Err(_) => reply(None, Some("the daemon is stopping".into())),
                };
                (Some(Call::Forward { box_id, local, port }), held)
            }
            Some(Request { call: Call::Exec { box_id, request, runner, stdio }, .. }) => {
                // The caller offers its streams on a socket of its own; the
                // driver takes them from there, so this long-lived process
                // never holds a caller's descriptors.
                let target = if runner { crate::engine::Target::Runner } else { crate::engine::Target::Workspace };
                // A line from the caller (or its going away) cancels.
                let cancel = async {
                    let mut l = String::new();
                    let _ = reader.read_line(&mut l).await;
                };
                status.borrow_mut().execs += 1;
                let ran = engine.exec_offered(&box_id, request, stdio, target, cancel).await.map_err(|e| e.to_string());
                let out = match ran {
                    Ok(o) => Reply {
                        exit: Some(ExitReply { status: o.status, cancelled: o.cancelled }),
                        ..reply(None, None)
                    },
                    Err(e) => reply(None, Some(e)),
                };
                (None, out)
            }
            Some(r) => (Some(r.call), reply(Some(status.borrow().clone()), None)),
        },
    };
    let mut bytes = serde_json::to_vec(&out).unwrap_or_default();
    bytes.push(b'\n');
    let _ = tokio::time::timeout(ANSWER_WITHIN, write.write_all(&bytes)).await;
    request
}

/// One round of the daemon's work. A failure is logged and kept for
/// `status`; the next tick tries again.
async fn tick(engine: &Tinybox, status: &RefCell<DaemonStatus>) {
    status.borrow_mut().ticks += 1;
    let failed = |what: &str, e: &dyn std::fmt::Display| {
        let line = format!("{what}: {e}");
        log(&line);
        status.borrow_mut().last_error = Some(line);
    };
    match engine.reap().await {
        Ok(outcomes) => {
            for o in outcomes {
                match &o.error {
                    None => {
                        log(&format!("reaped {} ({})", o.id, o.why()));
                        status.borrow_mut().reaped += 1;
                    }
                    Some(e) => failed(&format!("reaping box {}", o.id), e),
                }
            }
        }
        Err(e) => failed("reaping", &e),
    }
    match engine.autosnapshot().await {
        Ok(outcomes) => {
            for o in outcomes {
                match &o.outcome {
                    Autosnapshot::Taken { snapshot } => {
                        log(&format!("snapshotted {} as {snapshot}", o.id));
                        status.borrow_mut().snapshots_taken += 1;
                    }
                    Autosnapshot::Failed { error } => failed(&format!("snapshotting box {}", o.id), error),
                    _ => {}
                }
            }
        }
        Err(e) => failed("autosnapshot", &e),
    }
    let pools = match engine.pools() {
        Ok(p) => p,
        Err(e) => return failed("reading the pools", &e),
    };
    for pool in pools.into_iter().filter(|p| p.ready < p.size as usize || p.filling > 0) {
        match engine.pool_fill(&pool.name).await {
            Ok(report) => {
                if !report.removed_stale.is_empty() {
                    log(&format!("pool {}: removed {} left half-made", pool.name, report.removed_stale.len()));
                }
                if !report.made.is_empty() {
                    log(&format!("pool {}: made {}", pool.name, report.made.len()));
                    status.borrow_mut().pool_boxes_made += report.made.len() as u64;
                }
                if let Some(e) = report.error {
                    failed(&format!("filling pool {}", pool.name), &e);
                }
            }
            Err(e) => failed(&format!("filling pool {}", pool.name), &e),
        }
    }
}

fn log(line: &str) {
    let _ = writeln!(std::io::stderr(), "tinybox daemon: {line}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_supervisor_lock_is_one_holder_at_a_time_and_visible_to_readers() {
        let store = tempfile::tempdir().unwrap();
        assert!(!supervised(store.path()));
        let held = try_supervise(store.path()).unwrap().expect("a free lock");
        assert!(supervised(store.path()));
        assert!(try_supervise(store.path()).unwrap().is_none(), "a second holder");
        assert_eq!(holder_pid(store.path()), Some(std::process::id()));
        drop(held);
        assert!(!supervised(store.path()));
    }

    #[test]
    fn a_socket_path_too_long_for_the_kernel_is_named() {
        let long = PathBuf::from(format!("/tmp/{}", "d".repeat(120)));
        assert!(matches!(socket_path(&long), Err(DaemonError::PathTooLong { .. })));
    }
}
