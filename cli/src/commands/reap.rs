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
        eprintln!("tinybox: nothing has expired");
    } else {
        let mut t = output::table(&["ID", "EXPIRED", "RESULT"]);
        for o in &outcomes {
            let result = o.error.clone().map(|e| format!("failed: {e}")).unwrap_or_else(|| "removed".into());
            t.add_row(vec![o.id.to_string(), output::timestamp(o.expired_at), result]);
        }
        output::print_table(&t);
    }
    Ok(if failed == 0 { 0 } else { 1 })
}
