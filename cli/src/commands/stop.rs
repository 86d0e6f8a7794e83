//! `tinybox stop BOX`: stops a persistent box, keeping its state.

use clap::Args;
use tinybox_core::Error;
use tinybox_core::model::BoxId;

use super::App;
use crate::output::outln;

#[derive(Debug, Args)]
pub struct StopCmd {
    /// The persistent box to stop.
    pub id: BoxId,
}

impl StopCmd {
    pub async fn run(self, app: &App) -> Result<u8, Error> {
        let info = app.engine.stop(&self.id).await?;
        if app.json {
            crate::output::json(&info);
        } else {
            let snapshot = info.snapshots.last().map(|s| s.id.to_string()).unwrap_or_default();
            eprintln!(
                "tinybox: stopped {} as snapshot {snapshot}; `tinybox resume {}` brings it back",
                info.id, info.id
            );
            outln!("{}", info.id);
        }
        Ok(0)
    }
}
