//! `tinybox create`: makes a box from the flags (core decides and creates).

use clap::Args;
use tinybox_core::{Created, Error};

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
        let created = make(app, &self.box_args, &self.env.env).await?;
        output::print_created(app.json, &created.document());
        Ok(0)
    }
}

/// Makes the box the flags ask for — from a warm pool when they name one —
/// and says on stderr what was chosen and what to watch for.
pub async fn make(app: &App, args: &BoxArgs, env: &[(String, String)]) -> Result<Created, Error> {
    let created = match &args.pool {
        None => return make_planned(app, super::plan(app, args, env).await?).await,
        Some(_) => {
            let request = args.request(env)?;
            let created =
                crate::progress::spin(app.json, "taking a box".into(), app.engine.create_requested(&request)).await?;
            if !app.json {
                if let Some(choice) = &created.choice {
                    eprintln!(
                        "tinybox: using sandbox {} (isolation {}), {}",
                        choice.sandbox, choice.isolation, choice.reason
                    );
                }
                if let Some(hand_out) = &created.pool {
                    eprintln!("tinybox: {}", hand_out.note);
                }
            }
            created
        }
    };
    warn(app, &created);
    Ok(created)
}

/// Makes the box `plan` describes (no pool), saying what to watch for.
pub async fn make_planned(app: &App, plan: tinybox_core::CreatePlan) -> Result<Created, Error> {
    let what = format!("creating a box on {}/{}", plan.spec.workspace.host, plan.spec.workspace.sandbox);
    let created = crate::progress::spin(app.json, what, app.engine.create_planned(plan)).await?;
    warn(app, &created);
    Ok(created)
}

fn warn(app: &App, created: &Created) {
    if !app.json {
        for warning in &created.warnings {
            eprintln!("tinybox: warning: {warning}");
        }
    }
}
