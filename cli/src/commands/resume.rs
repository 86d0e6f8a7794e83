//! `tinybox resume BOX`: brings a stopped box back.

use clap::Args;
use tinybox_core::Error;
use tinybox_core::model::BoxId;

use super::App;
use crate::output;
use crate::output::outln;

#[derive(Debug, Args)]
pub struct ResumeCmd {
    /// The stopped box to bring back.
    pub id: BoxId,
}

impl ResumeCmd {
    pub async fn run(self, app: &App) -> Result<u8, Error> {
        let info = app.engine.resume(&self.id).await?;
        if app.json {
            output::json(&info);
        } else {
            let from = info.snapshots.last().map(|s| format!(" from snapshot {}", s.id)).unwrap_or_default();
            eprintln!("tinybox: resumed{from}: {}", output::created_summary(&info));
            outln!("{}", info.id);
        }
        Ok(0)
    }
}
