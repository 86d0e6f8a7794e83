//! Running one probe command in a box and keeping what it printed: the
//! kit's only way into a box, core's captured exec (`tinybox_core::capture`),
//! so every probe goes through exactly the path a caller's command takes.

use std::time::Duration;

use tinybox_core::capture::{self, Capture};
use tinybox_core::model::{BoxId, ExecRequest, ExitStatus};
use tinybox_core::{Result, Target, Tinybox};

/// How long one probe command may run before the kit cancels it.
pub const GUARD: Duration = Duration::from_secs(60);

/// What the kit keeps of each stream: probes print a few lines.
const MAX_OUTPUT: usize = 4 * 1024 * 1024;

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
    let mut request = ExecRequest::new(argv.iter().copied());
    request.env = env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    let how = Capture { timeout: Some(GUARD), ..Capture::new(MAX_OUTPUT) };
    let done = capture::run(tb, id, request, Target::Workspace, &how, stop).await?;
    let text = |s: capture::Stream| String::from_utf8_lossy(&s.bytes).into_owned();
    Ok(Output {
        status: done.status,
        cancelled: done.cancelled || done.timed_out,
        elapsed: done.elapsed,
        stdout: text(done.stdout),
        stderr: text(done.stderr),
    })
}
