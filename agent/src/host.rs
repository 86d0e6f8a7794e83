//! The host's end of the agent's wire (see [`crate::wire`]), for every
//! sandbox whose boxes run this agent: a microVM's virtio-serial ports
//! (each a UNIX socket QEMU serves on the host) and a namespace image
//! box's socket. One connection is a stream of sessions; a session begins
//! with a nonce ([`begin`]) and runs at most one command ([`run`]), which
//! this side relays between the caller's descriptors and the agent until
//! its exit frame. Built with the `host` feature; the agent itself has none
//! of it.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio::sync::mpsc;

use crate::wire::{self, Exec, Exit, Hello, Kind};

/// Why a session could not begin or a command's run was lost.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error("the agent did not answer a begin within {0}s")]
    Timeout(u64),
    #[error("the agent's end closed before it answered")]
    Closed,
    #[error("the agent answered a begin with {0:?}, not a hello")]
    NotHello(Kind),
    #[error("opening a session with the agent: {0}")]
    Begin(io::Error),
    #[error("the agent sent {0:?} mid-command")]
    Unexpected(Kind),
    #[error("lost the agent mid-command ({0})")]
    Lost(io::Error),
    #[error("the agent's frame does not parse: {0}")]
    Frame(io::Error),
}

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

/// Opens a session on a connected `stream`: a begin with a fresh nonce,
/// then everything up to the agent's sync with it is skipped (a ready
/// greeting, or what an old session left in flight).
pub async fn begin(stream: UnixStream, wait: Duration) -> Result<Session, HostError> {
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
        Err(_) => return Err(HostError::Timeout(wait.as_secs())),
        Ok(Err(e)) if e.kind() == io::ErrorKind::UnexpectedEof => return Err(HostError::Closed),
        Ok(Err(e)) => return Err(HostError::Begin(e)),
        Ok(Ok(x)) => x,
    };
    match frame {
        Some((Kind::Hello, payload)) => {
            let hello = wire::decode(Kind::Hello, &payload).map_err(HostError::Frame)?;
            Ok(Session { rd, wr, hello })
        }
        Some((kind, _)) => Err(HostError::NotHello(kind)),
        None => Err(HostError::Closed),
    }
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

/// The caller's three descriptors for one command.
pub struct Stdio {
    pub stdin: OwnedFd,
    pub stdout: OwnedFd,
    pub stderr: OwnedFd,
}

/// Runs `exec` in an open session with `stdio`; the command's exit.
pub async fn run(
    session: Session,
    exec: &Exec,
    stdio: Stdio,
    exec_id: &str,
    running: &Running,
) -> Result<Exit, HostError> {
    let Session { mut rd, mut wr, .. } = session;
    let lost = HostError::Lost;
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
            () = &mut kill_deadline => break Ok(Exit { code: None, signal: Some(9) }),
        };
        match frame {
            Ok(Some((Kind::Stdout, data))) => {
                let _ = out_tx.send(data).await;
            }
            Ok(Some((Kind::Stderr, data))) => {
                let _ = err_tx.send(data).await;
            }
            Ok(Some((Kind::Exit, payload))) => {
                break wire::decode::<Exit>(Kind::Exit, &payload).map_err(HostError::Frame);
            }
            Ok(Some((kind, _))) => {
                break Err(HostError::Unexpected(kind));
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

/// How long a cancelled command that reached the agent has to end before
/// its session is dropped (which makes the agent kill it): the SIGTERM,
/// SIGKILL 2 s later, and the session's own 2 s grace after it.
pub const CANCEL_END: Duration = Duration::from_secs(6);

/// Why a cancelled exec ended without its command's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cancelled {
    /// The command never reached the agent: it never ran.
    BeforeStart,
    /// It did not end within [`CANCEL_END`]; its session was dropped.
    Dropped,
}

/// Runs `work` (one exec: open a session, run the command) for `exec_id`,
/// cancelled at whatever step it is by [`cancel`]: before the command
/// reached the agent it ends at once; after, it has [`CANCEL_END`] to end
/// on the signals `cancel` sends, then `work` is dropped.
pub async fn cancellable<T, E>(
    running: &Running,
    exec_id: &str,
    work: impl std::future::Future<Output = Result<T, E>>,
    cancelled: impl FnOnce(Cancelled) -> E,
) -> Result<T, E> {
    let watch = running.watch(exec_id);
    tokio::pin!(work);
    tokio::select! {
        r = &mut work => r,
        () = watch.cancelled() => {
            if !watch.started() {
                return Err(cancelled(Cancelled::BeforeStart));
            }
            match tokio::time::timeout(CANCEL_END, &mut work).await {
                Ok(r) => r,
                Err(_) => Err(cancelled(Cancelled::Dropped)),
            }
        }
    }
}

/// Cancels exec `exec_id`: SIGTERM to its command's processes, SIGKILL
/// two seconds later if it still runs.
pub fn cancel(running: &Running, exec_id: &str) {
    running.cancel(exec_id);
    if running.signal(exec_id, 15) {
        let running = running.clone();
        let exec_id = exec_id.to_owned();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(2)).await;
            running.signal(&exec_id, 9);
        });
    }
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
