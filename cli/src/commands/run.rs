//! `tinybox run`: creates a box, runs one command in it and removes it —
//! in one step where core plans one (`Tinybox::one_shot`: the sandbox
//! declares `run_once` and nothing needs the box to outlive the command),
//! otherwise as create, exec and rm.

use clap::Args;
use tinybox_core::Error;

use super::App;
use super::exec::Where;
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
        let (interactive, tty) = (self.command.interactive, self.command.tty);
        // `--env` belongs to the command here; the box gets none of its own.
        let created = match (&self.box_args.pool, tty) {
            (None, false) => {
                let create = super::plan(app, &self.box_args, &[]).await?;
                if let Some(shot) = app.engine.one_shot(&create.spec, &plan.request).await? {
                    let preview = shot.preview();
                    if !app.json {
                        eprintln!("tinybox: {}", crate::output::created_summary(&preview));
                        for warning in tinybox_core::request::warnings(&preview) {
                            eprintln!("tinybox: warning: {warning}");
                        }
                    }
                    return super::exec::run_on(app, Where::Once(Box::new(shot)), plan, interactive, tty).await;
                }
                super::create::make_planned(app, create).await?
            }
            _ => super::create::make(app, &self.box_args, &[]).await?,
        };
        let info = created.info;
        if !app.json {
            eprintln!("tinybox: {}", crate::output::created_summary(&info));
        }
        let result = super::exec::run_in(app, &info.id, plan, interactive, tty).await;
        let removed = app.engine.remove(&info.id).await;
        let code = result?;
        removed?;
        Ok(code)
    }
}
