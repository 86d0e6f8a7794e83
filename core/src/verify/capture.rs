//! Running one command in a box through the engine and keeping what it
//! printed: the kit's only way into a box, so every probe goes through
//! exactly the path a caller's command takes.

use std::io::Read;
use std::time::{Duration, Instant};

use tinybox_sdk::model::{BoxId, ExecRequest, ExitStatus};
use tinybox_sdk::stdio::StdioFds;

use crate::Tinybox;
use crate::engine::Target;
use crate::error::{Error, Result};

/// How long one probe command may run before the kit cancels it.
pub const GUARD: Duration = Duration::from_secs(60);

/// A finished command: its status, its output, how long the exec took.
#[derive(Debug, Clone)]
pub struct Output {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
    /// The kit's guard (or the caller's stop) ended the command.
    pub cancelled: bool,
}

impl Output {
    /// stderr as one line, for a report's detail.
    pub fn stderr_line(&self) -> String {
        let lines: Vec<&str> = self.stderr.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
        lines.join(" | ")
    }
}

/// Runs `argv` (with `env` added) in box `id`, stdin empty, and captures
/// stdout and stderr. `stop` resolving, or [`GUARD`] passing, cancels it.
pub async fn run(
    tb: &Tinybox,
    id: &BoxId,
    argv: &[&str],
    env: &[(&str, &str)],
    stop: impl std::future::Future<Output = ()>,
) -> Result<Output> {
    let io = |e| Error::io("cannot prepare a probe's streams", e);
    let (out_r, out_w) = std::io::pipe().map_err(io)?;
    let (err_r, err_w) = std::io::pipe().map_err(io)?;
    let stdin = std::fs::File::open("/dev/null").map_err(io)?;
    let fds = StdioFds { stdin: stdin.into(), stdout: out_w.into(), stderr: err_w.into() };
    let out_t = tokio::task::spawn_blocking(move || read_all(out_r));
    let err_t = tokio::task::spawn_blocking(move || read_all(err_r));
    let mut request = ExecRequest::new(argv.iter().copied());
    request.env = env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    let started = Instant::now();
    let cancel = async move {
        tokio::select! {
            () = stop => {}
            () = tokio::time::sleep(GUARD) => {}
        }
    };
    // The engine drops its copies of the write ends when the exec ends, so
    // the readers see end of file unless the command left children behind
    // holding them (probes redirect any they start).
    let outcome = tb.exec(id, request, fds, Target::Workspace, cancel).await;
    let elapsed = started.elapsed();
    let stdout = out_t.await.unwrap_or_default();
    let stderr = err_t.await.unwrap_or_default();
    let outcome = outcome?;
    Ok(Output { status: outcome.status, stdout, stderr, elapsed, cancelled: outcome.cancelled })
}

fn read_all(mut r: std::io::PipeReader) -> String {
    let mut buf = Vec::new();
    let _ = r.read_to_end(&mut buf);
    String::from_utf8_lossy(&buf).into_owned()
}
