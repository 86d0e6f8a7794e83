//! `tinybox exec BOX -- CMD`: runs a command in a box with the caller's streams.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::Args;
use tinybox_core::model::{BoxId, ExecRequest};
use tinybox_core::{Error, Target};

use super::App;
use crate::args::CommandArgs;

#[derive(Debug, Args)]
pub struct ExecCmd {
    /// The box to run in.
    pub id: BoxId,
    /// Run on the box's runner placement instead of its workspace.
    #[arg(long)]
    pub runner: bool,
    #[command(flatten)]
    pub command: CommandArgs,
}

/// Why a command was stopped before it ended by itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StopReason {
    Interrupted,
    Terminated,
    TimedOut,
}

impl ExecCmd {
    pub async fn run(self, app: &App) -> Result<u8, Error> {
        let target = if self.runner { Target::Runner } else { Target::Workspace };
        run_in(app, &self.id, self.command.request(), target, self.command.timeout, self.command.interactive).await
    }
}

/// Runs `request` in `id` with this process's streams; returns the exit
/// status to leave with: the command's own, 130 when interrupted, 143 when
/// terminated, 124 when it timed out.
pub async fn run_in(
    app: &App,
    id: &BoxId,
    request: ExecRequest,
    target: Target,
    timeout: Option<Duration>,
    interactive: bool,
) -> Result<u8, Error> {
    let (stdio, pumps) =
        crate::stdio::command_stdio(interactive).map_err(|e| Error::io("cannot prepare the command's streams", e))?;
    let reason = Arc::new(Mutex::new(None));
    let stop = stop_signal(timeout, reason.clone());
    let ran = app.engine.exec(id, request, stdio, target, stop).await;
    // The command's output reaches the caller before anything tinybox says.
    pumps.finish().await;
    let outcome = ran?;
    let stopped = *reason.lock().expect("stop reason");
    let code = match (outcome.cancelled, stopped) {
        (true, Some(StopReason::TimedOut)) => {
            eprintln!(
                "tinybox: the command ran longer than {} and was stopped",
                humantime::format_duration(timeout.unwrap_or_default())
            );
            124
        }
        (true, Some(StopReason::Interrupted)) => 130,
        (true, Some(StopReason::Terminated)) => 143,
        _ => u8::try_from(outcome.status.shell_code()).unwrap_or(255),
    };
    Ok(code)
}

async fn stop_signal(timeout: Option<Duration>, reason: Arc<Mutex<Option<StopReason>>>) {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    let sleep = async {
        match timeout {
            Some(d) => tokio::time::sleep(d).await,
            None => std::future::pending().await,
        }
    };
    let terminated = async {
        match term.as_mut() {
            Some(t) => {
                t.recv().await;
            }
            None => std::future::pending().await,
        }
    };
    let why = tokio::select! {
        _ = tokio::signal::ctrl_c() => StopReason::Interrupted,
        () = terminated => StopReason::Terminated,
        () = sleep => StopReason::TimedOut,
    };
    *reason.lock().expect("stop reason") = Some(why);
}
