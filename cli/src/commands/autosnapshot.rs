//! `tinybox autosnapshot`: takes every due autosnapshot, for cron.

use tinybox_core::Error;
use tinybox_core::engine::Autosnapshot;

use super::App;
use crate::output;

/// Snapshots every persistent box whose autosnapshot is due and reports on
/// each; exit status 1 when any snapshot failed. Meant for cron: tinybox
/// has no long-running process to keep a timer.
pub async fn run(app: &App) -> Result<u8, Error> {
    let outcomes = app.engine.autosnapshot().await?;
    let failed = outcomes.iter().filter(|o| matches!(o.outcome, Autosnapshot::Failed { .. })).count();
    if app.json {
        output::json(&outcomes);
    } else if outcomes.is_empty() {
        eprintln!("tinybox: no persistent boxes");
    } else {
        let now = app.engine.now();
        let mut t = output::table(&["ID", "RESULT"]);
        for o in &outcomes {
            let result = match &o.outcome {
                Autosnapshot::Taken { snapshot } => format!("snapshot {snapshot}"),
                Autosnapshot::NotDue { due_at } => {
                    format!("not due (next in {})", output::span(due_at - now.min(*due_at)))
                }
                Autosnapshot::Stopped => "stopped (captured when it stopped)".into(),
                Autosnapshot::Unsupported { reason } => format!("skipped: {reason}"),
                Autosnapshot::Failed { error } => format!("failed: {error}"),
            };
            t.add_row(vec![o.id.to_string(), result]);
        }
        output::print_table(&t);
    }
    Ok(if failed == 0 { 0 } else { 1 })
}
