//! `tinybox create`: makes a box from the flags (core decides and creates).

use clap::Args;
use tinybox_core::Error;

use super::App;
use crate::args::{BoxArgs, BoxEnvArgs};
use crate::output;

#[derive(Debug, Args)]
pub struct CreateCmd {
    #[command(flatten)]
    pub box_args: BoxArgs,
    #[command(flatten)]
    pub env: BoxEnvArgs,
}

impl CreateCmd {
    pub async fn run(self, app: &App) -> Result<u8, Error> {
        let spec = super::plan(app, &self.box_args, &self.env.env).await?.spec;
        let what = format!("creating a box on {}/{}", spec.workspace.host, spec.workspace.sandbox);
        let info = crate::progress::spin(app.json, what, app.engine.create(spec)).await?;
        if !app.json {
            for warning in tinybox_core::request::warnings(&info) {
                eprintln!("tinybox: warning: {warning}");
            }
        }
        output::print_created(app.json, &info);
        Ok(0)
    }
}
