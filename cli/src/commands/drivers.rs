//! `tinybox drivers [ls|verify]`: lists installed drivers or verifies one's claims.

use clap::{Args, Subcommand};
use tinybox_core::{Error, TrustWord};

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
    for row in &listing {
        let r = &row.report;
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
            verified_column(row),
        ]);
    }
    output::print_table(&t);
    Ok(0)
}

/// The VERIFIED column: whether creates rely on the driver's declaration
/// (its exact binary, declaration and no create options), then what it
/// earned with create options, which holds for boxes made with those only.
fn verified_column(row: &tinybox_core::DriverListing) -> String {
    let main = match (row.trust, &row.verified) {
        (None | Some(TrustWord::NothingClaimed), _) => return "-".into(),
        (Some(TrustWord::Unverified), _) | (_, None) => "UNVERIFIED".to_string(),
        (Some(TrustWord::Verified), Some(v)) => format!("pass ({} claims)", v.passes),
        (Some(TrustWord::Unproven), Some(v)) => format!("UNPROVEN ({} skipped)", v.skipped),
        (Some(TrustWord::Failed), Some(v)) => format!("FAIL ({} claims)", v.fails),
    };
    let others = row.with_options.iter().map(|v| {
        let word = if v.passed {
            "pass"
        } else if v.fails == 0 {
            "UNPROVEN"
        } else {
            "FAIL"
        };
        let options: Vec<String> = v.create_options.iter().map(|(k, v)| format!("{k}={v}")).collect();
        format!("; {word} with {}", options.join(","))
    });
    std::iter::once(main).chain(others).collect()
}
