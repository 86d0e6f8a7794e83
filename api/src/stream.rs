//! One command in a box with its output handed over as it comes: the
//! streamed exec both `/v1/boxes/{id}/exec/stream` and envd's
//! `Process.Start` serve. stdout and stderr are pipes read concurrently;
//! stdin is `/dev/null` or a pipe the caller writes; the command is
//! stopped (by core, as a cancelled exec) when asked or when its timeout
//! passes. Output still arriving after the command ended is awaited for
//! core's grace ([`DRAIN_GRACE`]), as a captured exec's is.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tinybox_core::capture::DRAIN_GRACE;
use tinybox_core::model::{BoxId, ExecRequest};
use tinybox_core::{Error, ExecOutcome, Target, Tinybox};
use tinybox_sdk::stdio::StdioFds;
use tokio::io::AsyncReadExt;
use tokio::net::unix::pipe;
use tokio::sync::{Notify, mpsc};

/// What a running command says, in order; `End` is last.
#[derive(Debug)]
pub enum Chunk {
    Stdout(Vec<u8>),
    Stderr(Vec<u8>),
    End { outcome: Result<ExecOutcome, Error>, timed_out: bool },
}

/// A command started by [`start`].
pub struct Running {
    pub chunks: mpsc::Receiver<Chunk>,
    /// Its stdin, when one was asked for: dropping it closes the stream.
    pub stdin: Option<pipe::Sender>,
    pub stop: Stop,
}

/// Stops a running command (once; later calls do nothing more).
#[derive(Clone, Default)]
pub struct Stop(Arc<Notify>);

impl Stop {
    pub fn stop(&self) {
        self.0.notify_one();
    }
}

/// Starts `request` in box `id`; with `stdin`, its stdin is a pipe. A
/// request on a terminal (`request.tty`) is resized by what `resizes` yields.
pub fn start(
    engine: Arc<Tinybox>,
    id: BoxId,
    request: ExecRequest,
    stdin: bool,
    timeout: Option<Duration>,
    resizes: Option<mpsc::UnboundedReceiver<tinybox_core::model::TtySize>>,
) -> Result<Running, Error> {
    let io = |e| Error::io("cannot prepare a streamed command's streams", e);
    let (stdin_fd, stdin_tx) = if stdin {
        let (tx, rx) = pipe::pipe().map_err(io)?;
        (rx.into_blocking_fd().map_err(io)?, Some(tx))
    } else {
        (tinybox_core::capture::stdin_file(None)?, None)
    };
    let (out_w, out_r) = pipe::pipe().map_err(io)?;
    let (err_w, err_r) = pipe::pipe().map_err(io)?;
    let fds = StdioFds {
        stdin: stdin_fd,
        stdout: out_w.into_blocking_fd().map_err(io)?,
        stderr: err_w.into_blocking_fd().map_err(io)?,
    };
    let (tx, chunks) = mpsc::channel(64);
    let stop = Stop::default();
    let notify = stop.0.clone();
    tokio::spawn(async move {
        let timed_out = AtomicBool::new(false);
        let cancel = async {
            match timeout {
                Some(limit) => tokio::select! {
                    () = notify.notified() => {}
                    () = tokio::time::sleep(limit) => timed_out.store(true, Ordering::SeqCst),
                },
                None => notify.notified().await,
            }
        };
        let drain = async { tokio::join!(pump(out_r, &tx, Chunk::Stdout), pump(err_r, &tx, Chunk::Stderr)) };
        tokio::pin!(drain);
        let exec = engine.exec_resizable(&id, request, fds, Target::Workspace, cancel, resizes);
        tokio::pin!(exec);
        let mut drained = false;
        let outcome = loop {
            tokio::select! {
                outcome = &mut exec => break outcome,
                _ = &mut drain, if !drained => drained = true,
            }
        };
        if !drained {
            let _ = tokio::time::timeout(DRAIN_GRACE, &mut drain).await;
        }
        let timed_out = timed_out.load(Ordering::SeqCst);
        let _ = tx.send(Chunk::End { outcome, timed_out }).await;
    });
    Ok(Running { chunks, stdin: stdin_tx, stop })
}

async fn pump(mut from: pipe::Receiver, to: &mpsc::Sender<Chunk>, wrap: fn(Vec<u8>) -> Chunk) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match from.read(&mut buf).await {
            Ok(0) => return,
            Ok(n) => {
                // A caller gone away stops nothing: the command runs to its end.
                let _ = to.send(wrap(buf[..n].to_vec())).await;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}
