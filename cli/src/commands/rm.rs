//! `tinybox rm BOX...`: removes boxes.

use clap::Args;
use tinybox_core::Error;
use tinybox_core::model::BoxId;

use super::App;
use crate::output::outln;

#[derive(Debug, Args)]
pub struct RmCmd {
    /// The boxes to remove.
    #[arg(required = true)]
    pub ids: Vec<BoxId>,
}

impl RmCmd {
    /// Removes each box; one failure does not stop the rest, and makes the exit status 1.
    pub async fn run(self, app: &App) -> Result<u8, Error> {
        let mut removed = Vec::new();
        let mut failed = Vec::new();
        for id in &self.ids {
            match app.engine.remove(id).await {
                Ok(_) => removed.push(id.to_string()),
                Err(e) => {
                    eprintln!("tinybox: {e}");
                    failed.push(serde_json::json!({ "id": id.to_string(), "error": e.to_string() }));
                }
            }
        }
        if app.json {
            crate::output::json(&serde_json::json!({ "removed": removed, "failed": failed }));
        } else {
            for id in &removed {
                outln!("{id}");
            }
        }
        Ok(if failed.is_empty() { 0 } else { 1 })
    }
}
