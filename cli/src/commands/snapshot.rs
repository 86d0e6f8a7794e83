//! `tinybox snapshot BOX`: captures a box's filesystem.

use clap::Args;
use tinybox_core::Error;
use tinybox_core::model::BoxId;

use super::App;
use crate::output::outln;

#[derive(Debug, Args)]
pub struct SnapshotCmd {
    pub id: BoxId,
}

impl SnapshotCmd {
    pub async fn run(self, app: &App) -> Result<u8, Error> {
        let record = app.engine.snapshot(&self.id).await?;
        if app.json {
            crate::output::json(&record);
        } else {
            outln!("{}", record.id);
        }
        Ok(0)
    }
}
