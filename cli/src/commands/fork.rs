//! `tinybox fork BOX`: a new box from a box's current state.

use clap::Args;
use tinybox_core::Error;
use tinybox_core::model::BoxId;
use tinybox_core::request::CreatedDocument;

use super::App;
use crate::output;

#[derive(Debug, Args)]
pub struct ForkCmd {
    /// The box to fork.
    pub id: BoxId,
}

impl ForkCmd {
    pub async fn run(self, app: &App) -> Result<u8, Error> {
        let info = app.engine.fork(&self.id).await?;
        output::print_created(app.json, &CreatedDocument { info: &info, warnings: &[], from_pool: None });
        Ok(0)
    }
}
