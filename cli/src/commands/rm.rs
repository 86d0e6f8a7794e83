//! `tinybox rm BOX...`: removes boxes.

use clap::Args;
use tinybox_core::Error;
use tinybox_core::model::BoxId;

use super::App;
use crate::output::outln;

#[derive(Debug, Args)]
pub struct RmCmd {
    /// The boxes to remove.
    #[arg(required = true)]
    pub ids: Vec<BoxId>,
}

impl RmCmd {
    /// Removes each box; one failure does not stop the rest, and makes the exit status 1.
    pub async fn run(self, app: &App) -> Result<u8, Error> {
        let done = app.engine.remove_each(&self.ids).await;
        for f in &done.failed {
            eprintln!("tinybox: {}", f.error);
        }
        if app.json {
            crate::output::json(&done);
        } else {
            for id in &done.removed {
                outln!("{id}");
            }
        }
        Ok(if done.failed.is_empty() { 0 } else { 1 })
    }
}
