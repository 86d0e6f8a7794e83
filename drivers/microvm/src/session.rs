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

/// Connects to port `n` of the VM in `dir` and reads the agent's hello.
pub async fn open(dir: &Path, n: usize, wait: Duration) -> Result<(UnixStream, Hello), DriverError> {
    let path = vm::port_socket(dir, n);
    let mut stream = UnixStream::connect(&path).await.map_err(|e| {
        DriverError::failed(format!("cannot reach the VM's port {} ({e}); the VM is not running", path.display()))
    })?;
    let frame = tokio::time::timeout(wait, read_frame(&mut stream)).await.map_err(|_| {
        DriverError::failed(format!("the guest agent did not answer on port {n} within {}s", wait.as_secs()))
    })?;
    match frame {
        Ok(Some((Kind::Hello, payload))) => {
            let hello = wire::decode(Kind::Hello, &payload).map_err(|e| DriverError::failed(e.to_string()))?;
            Ok((stream, hello))
        }
        Ok(Some((kind, _))) => Err(DriverError::failed(format!("the guest agent opened with {kind:?}, not a hello"))),
        Ok(None) => Err(DriverError::failed("the VM closed the port before its agent answered; the VM stopped")),
        Err(e) => Err(DriverError::failed(format!("reading the guest agent's hello: {e}"))),
    }
}

/// An exec port this process holds until dropped.
pub struct Claim {
    pub port: usize,
    _lock: std::fs::File,
}

/// Claims a free exec port, or says how many commands are already running.
pub fn claim(dir: &Path) -> Result<Claim, DriverError> {
    for port in 1..vm::PORTS {
        let path = vm::port_lock(dir, port);
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| DriverError::failed(format!("cannot open {}: {e}", path.display())))?;
        if FileExt::try_lock(&file).is_ok() {
            return Ok(Claim { port, _lock: file });
        }
    }
    Err(DriverError::unavailable(format!(
        "the box is already running {} commands, as many as a microVM box runs at once; wait for one to end",
        vm::PORTS - 1
    )))
}

/// Signals for running execs, by exec id (for `cancel`).
#[derive(Default, Clone)]
pub struct Running(Arc<Mutex<HashMap<String, mpsc::UnboundedSender<i32>>>>);

impl Running {
    pub fn signal(&self, exec_id: &str, signal: i32) -> bool {
        let map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        map.get(exec_id).is_some_and(|tx| tx.send(signal).is_ok())
    }

    fn insert(&self, exec_id: &str, tx: mpsc::UnboundedSender<i32>) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).insert(exec_id.to_owned(), tx);
    }

    fn remove(&self, exec_id: &str) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).remove(exec_id);
    }
}

/// A thread writing what it is sent to `fd`, until the channel closes.
fn writer(fd: OwnedFd) -> (std::sync::mpsc::Sender<Vec<u8>>, std::thread::JoinHandle<()>) {
    let (tx, rx) = std::sync::mpsc::channel::<Vec<u8>>();
    let handle = std::thread::spawn(move || {
        let mut file = std::fs::File::from(fd);
        let mut open = true;
        for chunk in rx {
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
    let (stream, _hello) = open(dir, claim.port, Duration::from_secs(30)).await?;
    let (mut rd, mut wr) = stream.into_split();
    let lost =
        |e: io::Error| DriverError::failed(format!("lost the guest agent mid-command ({e}); the VM may have stopped"));
    wr.write_all(&wire::encode_json(Kind::Exec, exec)).await.map_err(lost)?;

    // Frames to the agent: stdin from a thread of its own (a caller's
    // stdin may never end), signals from `cancel`.
    let (to_agent, mut outbox) = mpsc::unbounded_channel::<Vec<u8>>();
    let (sig_tx, mut sig_rx) = mpsc::unbounded_channel::<i32>();
    running.insert(exec_id, sig_tx);
    {
        let to_agent = to_agent.clone();
        let mut stdin = std::fs::File::from(stdio.stdin);
        std::thread::spawn(move || {
            let mut buf = vec![0u8; wire::CHUNK];
            loop {
                match stdin.read(&mut buf) {
                    Ok(0) | Err(_) => {
                        let _ = to_agent.send(wire::encode(Kind::Stdin, b""));
                        break;
                    }
                    Ok(n) => {
                        if to_agent.send(wire::encode(Kind::Stdin, &buf[..n])).is_err() {
                            break;
                        }
                    }
                }
            }
        });
    }
    let sender = tokio::spawn(async move {
        loop {
            let frame = tokio::select! {
                Some(f) = outbox.recv() => f,
                Some(s) = sig_rx.recv() => wire::encode_json(Kind::Signal, &wire::Signal { signal: s }),
                else => break,
            };
            if wr.write_all(&frame).await.is_err() {
                break;
            }
        }
        wr
    });
    drop(to_agent);

    let (out_tx, out_join) = writer(stdio.stdout);
    let (err_tx, err_join) = writer(stdio.stderr);
    let result = loop {
        match read_frame(&mut rd).await {
            Ok(Some((Kind::Stdout, data))) => {
                let _ = out_tx.send(data);
            }
            Ok(Some((Kind::Stderr, data))) => {
                let _ = err_tx.send(data);
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
    running.remove(exec_id);
    sender.abort();
    drop((out_tx, err_tx));
    // Every byte is written before the status is reported.
    let _ = tokio::task::spawn_blocking(move || {
        let _ = out_join.join();
        let _ = err_join.join();
    })
    .await;
    result
}
