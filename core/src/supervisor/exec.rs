//! An exec through the store's daemon (`exec_through`): the caller's side.
//! The daemon runs the command over its warm driver sessions; the caller's
//! streams reach the driver as descriptors on a socket of the caller's
//! own, never through the daemon's JSON.

use std::path::Path;

use tinybox_sdk::model::{BoxId, ExecRequest};
use tinybox_sdk::stdio::{StdioFds, StdioServer};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;

use super::{Call, DaemonError, Reply, Request, io, socket_path, supervised, version};

/// Runs a command through the store's daemon, whose driver sessions are
/// already started, when one of this version runs; the caller's streams
/// go to the driver as descriptors, never through the daemon's JSON.
/// `Ok(Err(stdio))` hands the streams back when none answers, to run the
/// command directly — the daemon is a shortcut, never a requirement.
pub async fn exec_through(
    store: &Path,
    id: &BoxId,
    request: ExecRequest,
    stdio: StdioFds,
    runner: bool,
    cancel: impl std::future::Future<Output = ()>,
) -> Result<Result<crate::engine::ExecOutcome, StdioFds>, DaemonError> {
    if !supervised(store) {
        return Ok(Err(stdio));
    }
    let Ok(path) = socket_path(store) else { return Ok(Err(stdio)) };
    let Ok(mut stream) = UnixStream::connect(&path).await else { return Ok(Err(stdio)) };
    let broken = |detail: String| DaemonError::Protocol { store: store.to_owned(), detail };
    // The daemon takes copies; the originals stay for a direct run.
    let copies = StdioFds {
        stdin: stdio.stdin.try_clone().map_err(io("cannot share the command's streams"))?,
        stdout: stdio.stdout.try_clone().map_err(io("cannot share the command's streams"))?,
        stderr: stdio.stderr.try_clone().map_err(io("cannot share the command's streams"))?,
    };
    static EXECS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = EXECS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    // Opened as every engine opens it, so what killed callers left is swept.
    let dir = crate::paths::runtime_dir().map_err(|e| DaemonError::Failed(e.to_string()))?;
    let socket = dir.join(format!("daemon-exec-{}-{n}.sock", std::process::id()));
    let _ = std::fs::remove_file(&socket);
    let server = StdioServer::start(socket, copies).map_err(io("cannot offer the command's streams"))?;
    let call = Call::Exec { box_id: id.clone(), request, runner, stdio: server.stdio_ref() };
    let mut line =
        serde_json::to_vec(&Request { tinybox: version().into(), call }).map_err(|e| broken(e.to_string()))?;
    line.push(b'\n');
    let (read, mut write) = stream.split();
    write.write_all(&line).await.map_err(io("talking to the daemon"))?;
    let mut reader = BufReader::new(read);
    let mut answer = String::new();
    tokio::pin!(cancel);
    let mut cancelled = false;
    loop {
        tokio::select! {
            got = reader.read_line(&mut answer) => {
                got.map_err(io("talking to the daemon"))?;
                break;
            }
            () = &mut cancel, if !cancelled => {
                cancelled = true;
                let _ = write.write_all(b"cancel\n").await;
            }
        }
    }
    drop(server);
    if answer.trim().is_empty() {
        return Err(broken("it ended while running the command (the command ended with it)".into()));
    }
    let reply: Reply =
        serde_json::from_str(answer.trim()).map_err(|e| broken(format!("{e} in {:?}", answer.trim())))?;
    if reply.tinybox != version() {
        return Ok(Err(stdio));
    }
    if let Some(error) = reply.error {
        return Err(DaemonError::Failed(error));
    }
    let exit = reply.exit.ok_or_else(|| broken("an answer without the command's end".into()))?;
    Ok(Ok(crate::engine::ExecOutcome { status: exit.status, cancelled: exit.cancelled }))
}
