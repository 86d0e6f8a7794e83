//! `tinybox daemon run|start|stop|status`: the optional supervisor of a
//! store (core's `supervisor`): reaps boxes whose ttl has passed, takes due
//! autosnapshots and keeps warm pools full. Nothing else needs it.

use std::os::unix::process::CommandExt;
use std::time::Duration;

use clap::Subcommand;
use tinybox_core::Error;
use tinybox_core::supervisor::{self, Call, DaemonError, DaemonLog, DaemonStatus};

use super::App;
use crate::output;
use crate::output::outln;

/// How long `start` waits for a new daemon to answer.
const START_WITHIN: Duration = Duration::from_secs(15);
/// How long `stop` waits for the daemon to finish what it is doing.
const STOP_WITHIN: Duration = Duration::from_secs(300);

#[derive(Debug, Subcommand)]
pub enum DaemonCmd {
    /// Run in the foreground (for a service manager); SIGTERM, SIGINT or `daemon stop` stops it.
    Run,
    /// Start one in the background (its log: <store>/daemon.log) and wait until it answers.
    Start,
    /// Ask the store's daemon to stop, and wait until it has finished its current work.
    Stop,
    /// Whether a daemon runs on this store, and what it has done.
    Status,
}

impl DaemonCmd {
    pub async fn run(self, app: &App) -> Result<u8, Error> {
        match self {
            DaemonCmd::Run => {
                let status = supervisor::serve(&app.engine, shutdown()).await?;
                if app.json {
                    output::json(&status);
                }
                Ok(0)
            }
            DaemonCmd::Start => start(app).await,
            DaemonCmd::Stop => {
                let status = supervisor::stop(&app.store_dir, STOP_WITHIN).await?;
                if !app.json {
                    eprintln!("tinybox: the daemon (pid {}) stopped", status.pid);
                }
                Ok(0)
            }
            DaemonCmd::Status => {
                let status = supervisor::ask(&app.store_dir, Call::Status).await?;
                print_status(app, &status);
                Ok(0)
            }
        }
    }
}

async fn start(app: &App) -> Result<u8, Error> {
    match supervisor::ask(&app.store_dir, Call::Status).await {
        Ok(status) => {
            if !app.json {
                eprintln!("tinybox: a daemon already runs on this store (pid {})", status.pid);
            }
            print_status(app, &status);
            return Ok(0);
        }
        Err(DaemonError::NotRunning { .. }) => {}
        Err(e) => return Err(e.into()),
    }
    let log = DaemonLog::open(&app.store_dir)?;
    let (out, err) = log.streams()?;
    let exe = std::env::current_exe().map_err(|e| Error::io("cannot find this tinybox's executable", e))?;
    let mut child = std::process::Command::new(exe)
        .arg("--store")
        .arg(&app.store_dir)
        .args(["daemon", "run"])
        .stdin(std::process::Stdio::null())
        .stdout(out)
        .stderr(err)
        // Its own process group: a Ctrl-C at this terminal is not for it.
        .process_group(0)
        .spawn()
        .map_err(|e| Error::io("cannot start the daemon", e))?;
    let status = supervisor::await_started(&app.store_dir, &mut child, &log, START_WITHIN).await?;
    if !app.json {
        eprintln!("tinybox: the daemon runs (pid {}); its log is {}", status.pid, log.path.display());
    }
    print_status(app, &status);
    Ok(0)
}

fn print_status(app: &App, s: &DaemonStatus) {
    if app.json {
        output::json(s);
        return;
    }
    let now = app.engine.now();
    outln!("pid             {}", s.pid);
    outln!("version         {}", s.version);
    outln!("store           {}", s.store.display());
    outln!("up              {}", output::span(now.saturating_sub(s.started_at)));
    outln!("reaped          {}", s.reaped);
    outln!("snapshots taken {}", s.snapshots_taken);
    outln!("pool boxes made {}", s.pool_boxes_made);
    outln!("execs served    {}", s.execs);
    if let Some(e) = &s.last_error {
        outln!("last error      {e}");
    }
}

/// Completes on SIGTERM, SIGINT or SIGHUP.
pub async fn shutdown() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int), Ok(mut hup)) =
        (signal(SignalKind::terminate()), signal(SignalKind::interrupt()), signal(SignalKind::hangup()))
    else {
        // Without signal handlers the default actions still end the process.
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
        _ = hup.recv() => {}
    }
}
