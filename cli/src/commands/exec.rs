//! `tinybox exec BOX -- CMD`: runs a command in a box with the caller's
//! streams, or with `-t` on a terminal made for it in the box.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::Args;
use tinybox_core::model::{BoxId, ExecRequest};
use tinybox_core::request::ExecPlan;
use tinybox_core::{Error, Target};

use super::App;
use crate::args::CommandArgs;
use crate::terminal::Terminal;

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
        let c = &self.command;
        run_in(app, &self.id, c.options(self.runner).plan()?, c.interactive, c.tty).await
    }
}

/// Runs `plan` in `id` with this process's streams; returns the exit
/// status to leave with: the command's own, 130 when interrupted, 143 when
/// terminated, 124 when it timed out.
pub async fn run_in(app: &App, id: &BoxId, plan: ExecPlan, interactive: bool, tty: bool) -> Result<u8, Error> {
    run_on(app, Where::Box(id), plan, interactive, tty).await
}

/// Where a command runs: in a box that exists, or in the box a one-step
/// `run` makes for it (never on a terminal: core does not plan one then).
pub enum Where<'a> {
    Box(&'a BoxId),
    Once(Box<tinybox_core::engine::OneShot>),
}

/// [`run_in`], wherever the command runs.
pub async fn run_on(app: &App, place: Where<'_>, plan: ExecPlan, interactive: bool, tty: bool) -> Result<u8, Error> {
    let ExecPlan { mut request, target, timeout, .. } = plan;
    let terminal = match tty {
        true => Some(Terminal::on_stdin().map_err(|e| Error::io("-t runs the command on a terminal", e))?),
        false => None,
    };
    let resizes = match &terminal {
        Some(t) => {
            request.tty = Some(t.size());
            Some(t.resizes().map_err(|e| Error::io("cannot watch the terminal's size", e))?)
        }
        None => None,
    };
    let (stdio, pumps) = match crate::stdio::command_stdio(interactive) {
        Ok(prepared) => prepared,
        Err(e) => {
            if let Where::Once(shot) = place {
                app.engine.abandon_one_shot(*shot)?;
            }
            return Err(Error::io("cannot prepare the command's streams", e));
        }
    };
    let reason = Arc::new(Mutex::new(None));
    let stop = stop_signal(timeout, reason.clone(), tty);
    let raw = match &terminal {
        Some(t) => Some(t.raw().map_err(|e| Error::io("cannot put the terminal in raw mode", e))?),
        None => None,
    };
    let ran = match (place, resizes) {
        (Where::Once(shot), _) => app.engine.run_one_shot(*shot, request, stdio, stop).await,
        // A terminal's resizes go to the driver directly; the daemon carries none.
        (Where::Box(id), Some(resizes)) => {
            app.engine.exec_resizable(id, request, stdio, target, stop, Some(resizes)).await
        }
        (Where::Box(id), None) => run_through_daemon_or_here(app, id, request, stdio, target, stop).await,
    };
    // The command's output reaches the caller before anything tinybox says,
    // and before the terminal's modes change back.
    pumps.finish().await;
    drop(raw);
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

/// Resolves when the command should be stopped: Ctrl-C (SIGINT), SIGTERM,
/// the timeout, and on a terminal SIGHUP too (the terminal went away; the
/// modes are put back on the way out either way).
/// Through the store's daemon when one runs (its driver sessions are
/// warm), otherwise here; the command and its streams are the same either way.
async fn run_through_daemon_or_here(
    app: &App,
    id: &BoxId,
    request: ExecRequest,
    stdio: tinybox_sdk::stdio::StdioFds,
    target: Target,
    stop: impl std::future::Future<Output = ()>,
) -> Result<tinybox_core::engine::ExecOutcome, Error> {
    let stop = futures_util::FutureExt::shared(Box::pin(stop));
    let runner = target == Target::Runner;
    let through =
        tinybox_core::supervisor::exec_through(&app.store_dir, id, request.clone(), stdio, runner, stop.clone());
    match through.await? {
        Ok(outcome) => Ok(outcome),
        Err(stdio) => app.engine.exec_resizable(id, request, stdio, target, stop, None).await,
    }
}

async fn stop_signal(timeout: Option<Duration>, reason: Arc<Mutex<Option<StopReason>>>, hangup: bool) {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    let mut hup = match hangup {
        true => tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok(),
        false => None,
    };
    let hung_up = async {
        match hup.as_mut() {
            Some(h) => {
                h.recv().await;
            }
            None => std::future::pending().await,
        }
    };
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
        () = hung_up => StopReason::Terminated,
        () = sleep => StopReason::TimedOut,
    };
    *reason.lock().expect("stop reason") = Some(why);
}
