//! `tinybox sync BOX [DIR]`: send a directory to a remote box's workspace,
//! or nothing when the far side already holds the same tree. A progress bar
//! (bytes, files, rate) on a terminal; quiet otherwise.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use tinybox_core::Error;
use tinybox_core::engine::SyncEvent;
use tinybox_core::model::{BoxId, WorkspaceSource};

use super::App;
use crate::output;

#[derive(Debug, Args)]
pub struct SyncCmd {
    pub id: BoxId,
    /// The directory to send (default: the one the box was created from).
    pub dir: Option<PathBuf>,
}

/// The bar and the ticker that moves it while bytes are sent.
#[derive(Default)]
struct Bar {
    bar: Option<ProgressBar>,
    ticker: Option<tokio::task::JoinHandle<()>>,
}

impl SyncCmd {
    pub async fn run(self, app: &App) -> Result<u8, Error> {
        let dir = match self.dir {
            Some(d) => d,
            None => match app.engine.get(&self.id)?.spec.source {
                Some(WorkspaceSource::LocalDir { path }) => path,
                _ => return Err(tinybox_core::sync::SyncError::NotFromDirectory(self.id.to_string()).into()),
            },
        };
        let dir = std::fs::canonicalize(&dir).map_err(|e| Error::io(format!("cannot use {}", dir.display()), e))?;
        let show = !app.json && std::io::stderr().is_terminal();
        let state = Arc::new(Mutex::new(Bar::default()));
        let observer_state = state.clone();
        let observe = move |event: SyncEvent| {
            if !show {
                return;
            }
            if let SyncEvent::Sending { files, bytes, counters } = event {
                let bar = ProgressBar::new(bytes);
                bar.set_style(
                    ProgressStyle::with_template(
                        "{bar:30} {bytes}/{total_bytes} {binary_bytes_per_sec} {msg} {elapsed_precise}",
                    )
                    .expect("valid template"),
                );
                let ticking = bar.clone();
                let ticker = tokio::spawn(async move {
                    loop {
                        let sent = counters.bytes.load(Ordering::Relaxed);
                        let done = counters.files.load(Ordering::Relaxed);
                        // The stream carries headers too: never past the total.
                        ticking.set_position(sent.min(bytes));
                        ticking.set_message(format!("{done}/{files} files"));
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                });
                let mut s = observer_state.lock().expect("bar");
                s.bar = Some(bar);
                s.ticker = Some(ticker);
            }
        };
        let result = app.engine.sync_observed(&self.id, &dir, &observe).await;
        let bar = std::mem::take(&mut *state.lock().expect("bar"));
        if let Some(t) = bar.ticker {
            t.abort();
        }
        if let Some(b) = bar.bar {
            b.finish_and_clear();
        }
        let report = result?;
        if app.json {
            output::json(&report);
        } else if report.sent {
            eprintln!(
                "tinybox: sent {} files ({}) to {}",
                report.files,
                tinybox_core::model::resources::format_size(report.bytes),
                report.remote_dir
            );
        } else {
            eprintln!("tinybox: {} is unchanged ({} files); nothing sent", dir.display(), report.files);
        }
        Ok(0)
    }
}
