//! `tinybox drivers [ls|verify]`: lists installed drivers or verifies one's claims.

use clap::{Args, Subcommand};
use tinybox_core::Error;

use super::App;
use crate::output;

#[derive(Debug, Args)]
pub struct DriversCmd {
    #[command(subcommand)]
    pub action: Option<DriversAction>,
}

#[derive(Debug, Subcommand)]
pub enum DriversAction {
    /// List installed drivers with their role, version, health and declared capabilities (the default).
    Ls,
    /// Check a sandbox's declared claims live, one probe each, in real boxes; exits 1 on any FAIL.
    Verify(super::verify::VerifyCmd),
}

impl DriversCmd {
    pub async fn run(self, app: &App) -> Result<u8, Error> {
        match self.action {
            None | Some(DriversAction::Ls) => run(app).await,
            Some(DriversAction::Verify(v)) => v.run(app).await,
        }
    }
}

pub async fn run(app: &App) -> Result<u8, Error> {
    let listing = app.engine.driver_listing().await;
    if app.json {
        output::json(&listing);
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
        "VERIFIED",
    ]);
    for tinybox_core::DriverListing { report: r, verified } in &listing {
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
            match verified {
                Some(v) if v.passed => format!("pass ({} claims)", v.passes),
                Some(v) if v.fails == 0 => format!("UNPROVEN ({} skipped)", v.skipped),
                Some(v) => format!("FAIL ({} claims)", v.fails),
                None => "-".into(),
            },
        ]);
    }
    output::print_table(&t);
    Ok(0)
}
