//! `tinybox run`: creates a box, runs one command in it and removes it.

use clap::Args;
use tinybox_core::Error;

use super::App;
use crate::args::{BoxArgs, CommandArgs};

#[derive(Debug, Args)]
pub struct RunCmd {
    #[command(flatten)]
    pub box_args: BoxArgs,
    /// Run on the runner placement instead of the workspace.
    #[arg(long)]
    pub runner: bool,
    #[command(flatten)]
    pub command: CommandArgs,
}

impl RunCmd {
    pub async fn run(self, app: &App) -> Result<u8, Error> {
        // The command is checked before a box is made for it.
        let plan = self.command.options(self.runner).plan()?;
        // `--env` belongs to the command here; the box gets none of its own.
        let info = super::create::make(app, &self.box_args, &[]).await?.info;
        if !app.json {
            eprintln!("tinybox: {}", crate::output::created_summary(&info));
        }
        let result = super::exec::run_in(app, &info.id, plan, self.command.interactive, self.command.tty).await;
        let removed = app.engine.remove(&info.id).await;
        let code = result?;
        removed?;
        Ok(code)
    }
}
