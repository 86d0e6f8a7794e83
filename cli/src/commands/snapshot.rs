//! `tinybox snapshot BOX`: captures a box's filesystem. `tinybox snapshot
//! ls`: every snapshot the store knows, and what keeps each from `prune`.

use clap::{Args, Subcommand};
use tinybox_core::Error;
use tinybox_core::engine::{KeptBy, SnapshotListing};
use tinybox_core::model::BoxId;

use super::App;
use crate::output;
use crate::output::outln;

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct SnapshotCmd {
    /// The box to snapshot.
    #[arg(required = true, value_name = "BOX")]
    pub id: Option<BoxId>,
    #[command(subcommand)]
    pub command: Option<SnapshotSub>,
}

#[derive(Debug, Subcommand)]
pub enum SnapshotSub {
    /// List every snapshot of this store and what keeps it (`tinybox prune` removes the rest).
    Ls,
}

impl SnapshotCmd {
    pub async fn run(self, app: &App) -> Result<u8, Error> {
        match (self.command, self.id) {
            (Some(SnapshotSub::Ls), _) => list(app),
            (None, Some(id)) => {
                let record = app.engine.snapshot(&id).await?;
                if app.json {
                    output::json(&record)
                } else {
                    outln!("{}", record.id)
                }
                Ok(0)
            }
            // clap requires one or the other.
            (None, None) => unreachable!("clap requires BOX or a subcommand"),
        }
    }
}

fn list(app: &App) -> Result<u8, Error> {
    let all = app.engine.snapshot_list()?;
    if app.json {
        output::json(&all);
        return Ok(0);
    }
    if all.is_empty() {
        eprintln!("tinybox: no snapshots; `tinybox snapshot BOX` takes one");
        return Ok(0);
    }
    let mut t = output::table(&["SNAPSHOT", "PLACEMENT", "OF", "TAKEN", "KEPT BY"]);
    for s in &all {
        t.add_row(vec![
            s.id.to_string(),
            format!("{}/{}", s.host, s.sandbox),
            s.taken_of.as_ref().map(ToString::to_string).unwrap_or_else(|| "-".into()),
            s.taken_at.map(output::timestamp).unwrap_or_else(|| "unknown".into()),
            kept_by(s),
        ]);
    }
    output::print_table(&t);
    Ok(0)
}

fn kept_by(s: &SnapshotListing) -> String {
    if s.kept_by.is_empty() {
        return "nothing (prune removes it)".into();
    }
    let each: Vec<String> = s
        .kept_by
        .iter()
        .map(|k| match k {
            KeptBy::Source { box_id } => format!("{box_id} (made from it)"),
            KeptBy::Resume { box_id } => format!("{box_id} (resumes from it)"),
            KeptBy::Template { template } => format!("template {template}"),
        })
        .collect();
    each.join(", ")
}
