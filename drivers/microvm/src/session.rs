//! The microVM's end of the agent's wire: which port a session runs on.
//! The sessions themselves are the agent crate's
//! (`tinybox_agent::host`), shared with namespace image boxes. A
//! health check reads the hello and hangs up; an exec claims a free port
//! (an advisory lock per port, so concurrent tinybox processes never share
//! one) and runs its command there.

use std::path::Path;
use std::time::Duration;

use fs4::FileExt;
use tinybox_agent::host::{self, HostError};
use tinybox_agent::wire::Exec;
use tinybox_sdk::model::ExitStatus;
use tinybox_sdk::protocol::DriverError;
use tinybox_sdk::stdio::StdioFds;
use tokio::net::UnixStream;

pub use tinybox_agent::host::{Running, Session, nonce, skip_to};

use crate::vm;

/// What a VM's agent failing to answer means to the caller.
fn vm_error(n: usize, e: HostError) -> DriverError {
    match e {
        HostError::Timeout(secs) => {
            DriverError::failed(format!("the guest agent did not answer on port {n} within {secs}s"))
        }
        HostError::Closed => DriverError::failed("the VM closed the port before its agent answered; the VM stopped"),
        HostError::Lost(e) => {
            DriverError::failed(format!("lost the guest agent mid-command ({e}); the VM may have stopped"))
        }
        other => DriverError::failed(other.to_string()),
    }
}

/// Connects to port `n` of the VM in `dir` and opens a session.
pub async fn open(dir: &Path, n: usize, wait: Duration) -> Result<Session, DriverError> {
    let path = vm::port_socket(dir, n);
    let stream = UnixStream::connect(&path).await.map_err(|e| {
        DriverError::failed(format!("cannot reach the VM's port {} ({e}); the VM is not running", path.display()))
    })?;
    host::begin(stream, wait).await.map_err(|e| vm_error(n, e))
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
    let session = open(dir, claim.port, Duration::from_secs(90)).await?;
    let stdio = host::Stdio { stdin: stdio.stdin, stdout: stdio.stdout, stderr: stdio.stderr };
    let exit = host::run(session, exec, stdio, exec_id, running).await.map_err(|e| vm_error(claim.port, e))?;
    Ok(ExitStatus { code: exit.code, signal: exit.signal })
}
