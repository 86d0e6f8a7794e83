use tinybox_core::Error;

use super::App;
use crate::output;

pub async fn run(app: &App) -> Result<u8, Error> {
    let reports = app.engine.driver_reports().await;
    if app.json {
        output::json(&reports);
        return Ok(0);
    }
    let mut t = output::table(&[
        "NAME",
        "ROLE",
        "VERSION",
        "PROTOCOL",
        "HEALTH",
        "ISOLATION",
        "SNAPSHOT",
        "FEATURES",
        "LIMITS",
        "NETWORK",
    ]);
    for r in &reports {
        let dash = || "-".to_string();
        let caps = r.capabilities.as_ref();
        let join = |items: Vec<String>| if items.is_empty() { "none".to_string() } else { items.join(",") };
        t.add_row(vec![
            r.name.clone(),
            r.role.map(|x| x.to_string()).unwrap_or_else(dash),
            r.version.clone().unwrap_or_else(dash),
            r.protocol.clone().unwrap_or_else(dash),
            r.summary(),
            caps.map(|c| c.isolation.to_string()).unwrap_or_else(dash),
            caps.map(|c| format!("{:?}", c.snapshot).to_lowercase()).unwrap_or_else(dash),
            caps.map(|c| join(c.features.iter().map(|f| f.to_string()).collect())).unwrap_or_else(dash),
            caps.map(|c| join(c.limits.iter().map(|l| l.to_string()).collect())).unwrap_or_else(dash),
            caps.map(|c| if c.network_deny { "can deny".into() } else { "not confined".into() }).unwrap_or_else(dash),
        ]);
    }
    output::print_table(&t);
    Ok(0)
}
