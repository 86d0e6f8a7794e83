//! The host's end of the agent's wire (see the agent crate's `wire`): one
//! connection to a port is one session. A health check reads the hello and
//! hangs up; an exec claims a free port (an advisory lock per port, so
//! concurrent tinybox processes never share one), sends the command, and
//! relays the command's streams between the caller's descriptors and the
//! port until the agent's exit frame.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fs4::FileExt;
use tinybox_microvm_agent::wire::{self, Exec, Exit, Hello, Kind};
use tinybox_sdk::model::ExitStatus;
use tinybox_sdk::protocol::DriverError;
use tinybox_sdk::stdio::StdioFds;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio::sync::mpsc;

use crate::vm;

/// Reads one frame; `None` at a clean end of stream.
pub async fn read_frame<R: AsyncRead + Unpin>(r: &mut R) -> io::Result<Option<(Kind, Vec<u8>)>> {
    let mut h = [0u8; 5];
    let mut got = 0;
    while got < h.len() {
        match r.read(&mut h[got..]).await? {
            0 if got == 0 => return Ok(None),
            0 => return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the agent's stream ended inside a frame")),
            n => got += n,
        }
    }
    let (kind, len) = wire::header(h)?;
    let mut payload = vec![0u8; len];
    r.read_exact(&mut payload).await?;
    Ok(Some((kind, payload)))
}

/// The reading end of a session: what was read past the sync, then the socket.
pub type Reader = tokio::io::Chain<std::io::Cursor<Vec<u8>>, tokio::net::unix::OwnedReadHalf>;

/// An open session on one port.
pub struct Session {
    pub rd: Reader,
    pub wr: tokio::net::unix::OwnedWriteHalf,
    pub hello: Hello,
}

/// 16 bytes no other session on this port will use.
pub fn nonce() -> [u8; wire::NONCE] {
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let mut h = blake3::Hasher::new();
    h.update(&std::process::id().to_le_bytes());
    h.update(&COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed).to_le_bytes());
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    h.update(&now.as_nanos().to_le_bytes());
    let mut out = [0u8; wire::NONCE];
    out.copy_from_slice(&h.finalize().as_bytes()[..wire::NONCE]);
    out
}

/// Reads until `marker`; what followed it in the last read.
pub async fn skip_to(rd: &mut tokio::net::unix::OwnedReadHalf, marker: &[u8]) -> io::Result<Vec<u8>> {
    let mut seen: Vec<u8> = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = rd.read(&mut buf).await?;
        if n == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the port closed"));
        }
        seen.extend_from_slice(&buf[..n]);
        if let Some(at) = seen.windows(marker.len()).position(|w| w == marker) {
            return Ok(seen.split_off(at + marker.len()));
        }
        // Keep only what could still be the start of the marker.
        let keep = seen.len().min(marker.len() - 1);
        seen.drain(..seen.len() - keep);
    }
}

/// Connects to port `n` of the VM in `dir` and opens a session: a begin
/// with a fresh nonce, then everything up to the agent's sync with it is
/// skipped (a ready greeting, or what an old session left in flight).
pub async fn open(dir: &Path, n: usize, wait: Duration) -> Result<Session, DriverError> {
    let path = vm::port_socket(dir, n);
    let stream = UnixStream::connect(&path).await.map_err(|e| {
        DriverError::failed(format!("cannot reach the VM's port {} ({e}); the VM is not running", path.display()))
    })?;
    let (mut rd, mut wr) = stream.into_split();
    let nonce = nonce();
    let begin = async {
        wr.write_all(&wire::encode(Kind::Begin, &nonce)).await?;
        let rest = skip_to(&mut rd, &wire::encode(Kind::Sync, &nonce)).await?;
        let mut reader: Reader = AsyncReadExt::chain(std::io::Cursor::new(rest), rd);
        let frame = read_frame(&mut reader).await?;
        Ok::<_, io::Error>((reader, frame))
    };
    let (rd, frame) = match tokio::time::timeout(wait, begin).await {
        Err(_) => {
            return Err(DriverError::failed(format!(
                "the guest agent did not answer on port {n} within {}s",
                wait.as_secs()
            )));
        }
        Ok(Err(e)) if e.kind() == io::ErrorKind::UnexpectedEof => {
            return Err(DriverError::failed("the VM closed the port before its agent answered; the VM stopped"));
        }
        Ok(Err(e)) => return Err(DriverError::failed(format!("opening a session with the guest agent: {e}"))),
        Ok(Ok(x)) => x,
    };
    match frame {
        Some((Kind::Hello, payload)) => {
            let hello = wire::decode(Kind::Hello, &payload).map_err(|e| DriverError::failed(e.to_string()))?;
            Ok(Session { rd, wr, hello })
        }
        Some((kind, _)) => {
            Err(DriverError::failed(format!("the guest agent answered a begin with {kind:?}, not a hello")))
        }
        None => Err(DriverError::failed("the VM closed the port before its agent answered; the VM stopped")),
    }
}

/// An exec port this process holds until dropped.
pub struct Claim {
    pub port: usize,
    _lock: std::fs::File,
}

/// Claims a free exec port of the `ports` the box has (health check
/// included). When every one is busy, waits for one: a box runs as many
/// commands at once as it has exec ports, and the rest queue.
pub async fn claim(dir: &Path, ports: usize) -> Result<Claim, DriverError> {
    let open = |port: usize| {
        let path = vm::port_lock(dir, port);
        std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| DriverError::failed(format!("cannot open {}: {e}", path.display())))
    };
    for port in 1..ports {
        let file = open(port)?;
        if FileExt::try_lock(&file).is_ok() {
            return Ok(Claim { port, _lock: file });
        }
    }
    // Spread the waiters over the ports.
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let port =
        1 + (NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + std::process::id() as usize) % (ports - 1);
    let file = open(port)?;
    tokio::task::spawn_blocking(move || FileExt::lock(&file).map(|()| file))
        .await
        .map_err(|e| DriverError::failed(format!("waiting for a free port failed: {e}")))?
        .map(|file| Claim { port, _lock: file })
        .map_err(|e| DriverError::failed(format!("cannot lock port {port}: {e}")))
}

/// What a running exec is told besides its input.
#[derive(Debug, Clone, Copy)]
enum Control {
    /// A signal for the command's processes (`cancel`).
    Signal(i32),
    /// A new size for the command's terminal (`exec.resize`).
    Resize(wire::Tty),
}

/// Signals and resizes for running execs, by exec id, and a cancel for
/// every exec from its first step (waiting for a port, opening the session)
/// to its end.
#[derive(Default, Clone)]
pub struct Running {
    controls: Arc<Mutex<HashMap<String, mpsc::UnboundedSender<Control>>>>,
    watches: Arc<Mutex<HashMap<String, Arc<Watched>>>>,
}

/// One exec's cancel: asked (a permit kept if nobody waits yet), and whether
/// its command has reached the guest.
#[derive(Default)]
struct Watched {
    cancel: tokio::sync::Notify,
    started: std::sync::atomic::AtomicBool,
}

/// An exec's registration for [`Running::cancel`], removed when dropped.
pub struct Watch {
    running: Running,
    exec_id: String,
    watched: Arc<Watched>,
}

impl Watch {
    /// Resolves once the exec is cancelled (also if it was before this call).
    pub async fn cancelled(&self) {
        self.watched.cancel.notified().await;
    }

    /// Whether the command was sent to the guest; before that, a cancelled
    /// exec has nothing in the guest to end.
    pub fn started(&self) -> bool {
        self.watched.started.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let mut map = self.running.watches.lock().unwrap_or_else(|p| p.into_inner());
        if map.get(&self.exec_id).is_some_and(|w| Arc::ptr_eq(w, &self.watched)) {
            map.remove(&self.exec_id);
        }
    }
}

impl Running {
    fn send(&self, exec_id: &str, control: Control) -> bool {
        let map = self.controls.lock().unwrap_or_else(|p| p.into_inner());
        map.get(exec_id).is_some_and(|tx| tx.send(control).is_ok())
    }

    pub fn signal(&self, exec_id: &str, signal: i32) -> bool {
        self.send(exec_id, Control::Signal(signal))
    }

    /// Resizes the exec's terminal in the guest; false when no such exec runs.
    pub fn resize(&self, exec_id: &str, rows: u16, cols: u16) -> bool {
        self.send(exec_id, Control::Resize(wire::Tty { rows, cols }))
    }

    /// Registers exec `exec_id` for [`Running::cancel`] until the watch drops.
    pub fn watch(&self, exec_id: &str) -> Watch {
        let watched = Arc::new(Watched::default());
        self.watches.lock().unwrap_or_else(|p| p.into_inner()).insert(exec_id.to_owned(), watched.clone());
        Watch { running: self.clone(), exec_id: exec_id.to_owned(), watched }
    }

    /// Cancels exec `exec_id` at whatever step it is; false when none is known.
    pub fn cancel(&self, exec_id: &str) -> bool {
        let map = self.watches.lock().unwrap_or_else(|p| p.into_inner());
        map.get(exec_id).inspect(|w| w.cancel.notify_one()).is_some()
    }

    fn insert(&self, exec_id: &str, tx: mpsc::UnboundedSender<Control>) {
        self.controls.lock().unwrap_or_else(|p| p.into_inner()).insert(exec_id.to_owned(), tx);
        if let Some(w) = self.watches.lock().unwrap_or_else(|p| p.into_inner()).get(exec_id) {
            w.started.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }

    fn remove(&self, exec_id: &str) {
        self.controls.lock().unwrap_or_else(|p| p.into_inner()).remove(exec_id);
    }
}

/// Undoes a running exec's registration and stops its sender however the
/// run ends, also when its future is dropped mid-command (a cancel that
/// outlived its grace): the session's socket then closes, and the agent
/// kills the command.
struct Registered<'a> {
    running: &'a Running,
    exec_id: &'a str,
    sender: tokio::task::AbortHandle,
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        self.running.remove(self.exec_id);
        self.sender.abort();
    }
}

/// Frames queued on the host between the port and a slow reader or writer:
/// a bound, so a command's output never piles up in this process.
const QUEUE: usize = 16;

/// How long a command has to end after SIGKILL was asked of the guest
/// before the session is dropped (which makes the agent kill it too).
const KILL_GRACE: Duration = Duration::from_secs(2);

/// A thread writing what it is sent to `fd`, until the channel closes.
fn writer(fd: OwnedFd) -> (mpsc::Sender<Vec<u8>>, std::thread::JoinHandle<()>) {
    let (tx, mut rx) = mpsc::channel::<Vec<u8>>(QUEUE);
    let handle = std::thread::spawn(move || {
        let mut file = std::fs::File::from(fd);
        let mut open = true;
        while let Some(chunk) = rx.blocking_recv() {
            // A reader that went away stops the writes, not the command.
            if open && file.write_all(&chunk).is_err() {
                open = false;
            }
        }
    });
    (tx, handle)
}

/// Runs `exec` on a claimed port with `stdio`; the command's status.
pub async fn run(
    dir: &Path,
    claim: &Claim,
    exec: &Exec,
    stdio: StdioFds,
    exec_id: &str,
    running: &Running,
) -> Result<ExitStatus, DriverError> {
    // A bound on a live VM that stopped answering, not on speed: an
    // emulated guest on a loaded host (the whole suite at once on two
    // cores) took over 30 s to answer after a command that filled its memory.
    let Session { mut rd, mut wr, .. } = open(dir, claim.port, Duration::from_secs(90)).await?;
    let lost =
        |e: io::Error| DriverError::failed(format!("lost the guest agent mid-command ({e}); the VM may have stopped"));
    wr.write_all(&wire::encode_json(Kind::Exec, exec)).await.map_err(lost)?;

    // Frames to the agent: stdin from a thread of its own (a caller's
    // stdin may never end), signals from `cancel`.
    let (to_agent, mut outbox) = mpsc::channel::<Vec<u8>>(QUEUE);
    let (sig_tx, mut sig_rx) = mpsc::unbounded_channel::<Control>();
    running.insert(exec_id, sig_tx);
    {
        let mut stdin = std::fs::File::from(stdio.stdin);
        std::thread::spawn(move || {
            let mut buf = vec![0u8; wire::CHUNK];
            loop {
                match stdin.read(&mut buf) {
                    Ok(0) | Err(_) => {
                        let _ = to_agent.blocking_send(wire::encode(Kind::Stdin, b""));
                        break;
                    }
                    Ok(n) => {
                        if to_agent.blocking_send(wire::encode(Kind::Stdin, &buf[..n])).is_err() {
                            break;
                        }
                    }
                }
            }
        });
    }
    let killed = Arc::new(tokio::sync::Notify::new());
    let sender = {
        let killed = killed.clone();
        tokio::spawn(async move {
            let mut stdin_open = true;
            loop {
                let frame = tokio::select! {
                    Some(c) = sig_rx.recv() => match c {
                        Control::Signal(s) => {
                            if s == 9 {
                                killed.notify_one();
                            }
                            wire::encode_json(Kind::Signal, &wire::Signal { signal: s })
                        }
                        Control::Resize(size) => wire::encode_json(Kind::Resize, &size),
                    },
                    f = outbox.recv(), if stdin_open => match f {
                        Some(f) => f,
                        None => {
                            stdin_open = false;
                            continue;
                        }
                    },
                    else => break,
                };
                if wr.write_all(&frame).await.is_err() {
                    break;
                }
            }
            wr
        })
    };
    let registered = Registered { running, exec_id, sender: sender.abort_handle() };

    let (out_tx, out_join) = writer(stdio.stdout);
    let (err_tx, err_join) = writer(stdio.stderr);
    // After a SIGKILL the agent may be stuck behind a full stdin queue and
    // never read it: then dropping the session is what kills the command.
    let kill_deadline = async {
        killed.notified().await;
        tokio::time::sleep(KILL_GRACE).await;
    };
    tokio::pin!(kill_deadline);
    let result = loop {
        let frame = tokio::select! {
            f = read_frame(&mut rd) => f,
            () = &mut kill_deadline => break Ok(ExitStatus { code: None, signal: Some(9) }),
        };
        match frame {
            Ok(Some((Kind::Stdout, data))) => {
                let _ = out_tx.send(data).await;
            }
            Ok(Some((Kind::Stderr, data))) => {
                let _ = err_tx.send(data).await;
            }
            Ok(Some((Kind::Exit, payload))) => {
                break wire::decode::<Exit>(Kind::Exit, &payload)
                    .map(|e| ExitStatus { code: e.code, signal: e.signal })
                    .map_err(|e| DriverError::failed(e.to_string()));
            }
            Ok(Some((kind, _))) => {
                break Err(DriverError::failed(format!("the guest agent sent {kind:?} mid-command")));
            }
            Ok(None) => break Err(lost(io::Error::new(io::ErrorKind::UnexpectedEof, "the port closed"))),
            Err(e) => break Err(lost(e)),
        }
    };
    drop(registered);
    drop((out_tx, err_tx));
    // Every byte is written before the status is reported.
    let _ = tokio::task::spawn_blocking(move || {
        let _ = out_join.join();
        let _ = err_join.join();
    })
    .await;
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_session_starts_after_its_own_sync_whatever_came_before() {
        let (a, b) = UnixStream::pair().unwrap();
        let (mut rd, _wr) = a.into_split();
        let (_, mut peer) = b.into_split();
        let nonce = nonce();
        let mut other = nonce;
        other[0] ^= 1;
        // An old session's leftovers: a partial frame, a ready hello, another nonce's sync.
        let mut stream = vec![b'O', 9, 0];
        stream.extend(wire::encode(Kind::Hello, b"{}"));
        stream.extend(wire::encode(Kind::Sync, &other));
        stream.extend(wire::encode(Kind::Sync, &nonce));
        stream.extend(wire::encode(Kind::Stdout, b"after"));
        // Written in two pieces that split the marker.
        let cut = stream.len() - 12;
        let (first, second) = stream.split_at(cut);
        let (first, second) = (first.to_vec(), second.to_vec());
        tokio::spawn(async move {
            peer.write_all(&first).await.unwrap();
            tokio::task::yield_now().await;
            peer.write_all(&second).await.unwrap();
        });
        let rest = skip_to(&mut rd, &wire::encode(Kind::Sync, &nonce)).await.unwrap();
        let mut reader: Reader = AsyncReadExt::chain(std::io::Cursor::new(rest), rd);
        assert_eq!(read_frame(&mut reader).await.unwrap(), Some((Kind::Stdout, b"after".to_vec())));
    }

    #[test]
    fn nonces_differ_between_sessions() {
        assert_ne!(nonce(), nonce());
    }
}
