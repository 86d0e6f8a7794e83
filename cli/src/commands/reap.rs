//! `tinybox reap`: removes expired boxes.

use tinybox_core::Error;

use super::App;
use crate::output;

pub async fn run(app: &App) -> Result<u8, Error> {
    let outcomes = app.engine.reap().await?;
    let failed = outcomes.iter().filter(|o| o.error.is_some()).count();
    if app.json {
        output::json(&outcomes);
    } else if outcomes.is_empty() {
        eprintln!("tinybox: nothing has expired, and no create was left half-made");
    } else {
        let mut t = output::table(&["ID", "EXPIRED", "RESULT"]);
        for o in &outcomes {
            let result = o.error.clone().map(|e| format!("failed: {e}")).unwrap_or_else(|| "removed".into());
            let when = match o.expired_at {
                Some(at) => output::timestamp(at),
                None => o.why(),
            };
            t.add_row(vec![o.id.to_string(), when, result]);
        }
        output::print_table(&t);
    }
    Ok(if failed == 0 { 0 } else { 1 })
}
