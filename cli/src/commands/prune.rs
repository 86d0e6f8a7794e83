//! `tinybox prune [--dry-run]`: removes the snapshots nothing keeps — no
//! box was made from them, no persistent box resumes from them, no template
//! names them — each through its own sandbox.

use clap::Args;
use tinybox_core::Error;
use tinybox_core::engine::PruneResult;

use super::App;
use crate::output;

#[derive(Debug, Args)]
pub struct PruneCmd {
    /// Only list what would be removed.
    #[arg(long)]
    pub dry_run: bool,
}

impl PruneCmd {
    pub async fn run(self, app: &App) -> Result<u8, Error> {
        let outcomes = app.engine.prune(self.dry_run).await?;
        let failed = outcomes.iter().filter(|o| o.result == PruneResult::Failed).count();
        if app.json {
            output::json(&outcomes);
        } else if outcomes.is_empty() {
            eprintln!("tinybox: nothing to prune; `tinybox snapshot ls` shows what keeps each snapshot");
        } else {
            let mut t = output::table(&["SNAPSHOT", "PLACEMENT", "RESULT"]);
            for o in &outcomes {
                let result = match (o.result, &o.error) {
                    (PruneResult::WouldRemove, _) => "would remove".to_owned(),
                    (PruneResult::Removed, _) => "removed".to_owned(),
                    (PruneResult::Gone, _) => "already gone; forgotten".to_owned(),
                    (PruneResult::Failed, e) => format!("kept: {}", e.as_deref().unwrap_or("failed")),
                };
                t.add_row(vec![o.id.to_string(), format!("{}/{}", o.host, o.sandbox), result]);
            }
            output::print_table(&t);
        }
        Ok(if failed == 0 { 0 } else { 1 })
    }
}
