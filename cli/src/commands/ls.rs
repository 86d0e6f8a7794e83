//! `tinybox ls`: the boxes in the store.

use clap::Args;
use tinybox_core::Error;

use super::App;
use crate::output;

#[derive(Debug, Args)]
pub struct LsCmd {
    /// Also list the boxes waiting in warm pools (nobody's until handed out).
    #[arg(long, short = 'a')]
    pub all: bool,
}

pub async fn run(app: &App, cmd: LsCmd) -> Result<u8, Error> {
    let boxes = app.engine.listed(cmd.all)?;
    if app.json {
        output::json(&boxes);
        return Ok(0);
    }
    if boxes.is_empty() {
        eprintln!("tinybox: no boxes; `tinybox create` makes one");
        return Ok(0);
    }
    let now = app.engine.now();
    let mut t = output::table(&["ID", "PLACEMENT", "ISOLATION", "NETWORK", "LIFECYCLE", "EXPIRES", "AGE"]);
    for b in &boxes {
        let (placement, isolation, network) = match &b.workspace {
            Some(ws) => (ws.placement.to_string(), ws.isolation.to_string(), ws.network.to_string()),
            None => (b.spec.workspace.to_string(), "-".into(), "(creating)".into()),
        };
        let pooled = b.pool.as_ref().map(|p| format!("pooled ({p})"));
        let lifecycle = match (b.spec.lifecycle, b.phase) {
            _ if pooled.is_some() && b.phase == tinybox_core::model::Phase::Created => pooled.as_deref().unwrap_or(""),
            (_, tinybox_core::model::Phase::Creating) => "(creating)",
            (_, tinybox_core::model::Phase::Removing) => "(removing)",
            (tinybox_core::model::Lifecycle::Persistent { .. }, tinybox_core::model::Phase::Stopped) => {
                "persistent (stopped)"
            }
            (tinybox_core::model::Lifecycle::Ephemeral { .. }, _) => "ephemeral",
            (tinybox_core::model::Lifecycle::Persistent { .. }, _) => "persistent",
        };
        let age = b.created_at.map(|c| output::span(now.saturating_sub(c))).unwrap_or_else(|| "unknown".into());
        t.add_row(vec![
            b.id.to_string(),
            placement,
            isolation,
            network,
            lifecycle.into(),
            output::expires(b, now),
            age,
        ]);
    }
    output::print_table(&t);
    Ok(0)
}
