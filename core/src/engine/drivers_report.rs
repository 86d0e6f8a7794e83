//! `tinybox drivers`: every driver found, started, handshaken and described.

use serde::Serialize;
use tinybox_sdk::model::SandboxCapabilities;
use tinybox_sdk::protocol::{Health, Role};

use super::Tinybox;
use crate::driver::{Connection, discover, passthrough_capabilities};
use crate::model::PASSTHROUGH;
use crate::store::verdicts::{self, Verdict};

/// One driver in `tinybox drivers`: its report and, for a driver binary,
/// the verdict the conformance kit earned for exactly that binary.
#[derive(Debug, Clone, Serialize)]
pub struct DriverListing {
    #[serde(flatten)]
    pub report: DriverReport,
    pub verified: Option<Verdict>,
}

/// One driver as its handshake described it, or why it could not.
#[derive(Debug, Clone, Serialize)]
pub struct DriverReport {
    pub name: String,
    /// `None` for passthrough, which lives in core.
    pub path: Option<String>,
    pub role: Option<Role>,
    pub version: Option<String>,
    pub protocol: Option<String>,
    pub health: Option<Health>,
    pub capabilities: Option<SandboxCapabilities>,
    /// Set when the driver could not be started or handshaken.
    pub error: Option<String>,
}

impl DriverReport {
    /// A healthy sandbox whose handshake succeeded.
    pub fn usable_sandbox(&self) -> bool {
        self.error.is_none() && self.role == Some(Role::Sandbox) && self.health.as_ref().is_some_and(|h| h.ok)
    }

    /// One phrase for a listing: healthy, or why not.
    pub fn summary(&self) -> String {
        match (&self.error, &self.health) {
            (Some(e), _) => format!("error: {e}"),
            (None, Some(h)) if h.ok => "ok".into(),
            (None, Some(h)) => format!("unavailable: {}", h.detail.clone().unwrap_or_default()),
            (None, None) => "unknown".into(),
        }
    }
}

impl Tinybox {
    /// Every driver with its verdict: what `tinybox drivers` shows.
    pub async fn driver_listing(&self) -> Vec<DriverListing> {
        let store = self.store_dir.clone();
        self.driver_reports()
            .await
            .into_iter()
            .map(|report| {
                let verified = match (&store, &report.path) {
                    (Some(store), Some(path)) => verdicts::load(store, std::path::Path::new(path)),
                    _ => None,
                };
                DriverListing { report, verified }
            })
            .collect()
    }

    /// Describes passthrough and every installed driver, started in parallel.
    pub async fn driver_reports(&self) -> Vec<DriverReport> {
        let timeouts = self.drivers.config().timeouts;
        let mut set = tokio::task::JoinSet::new();
        for (name, path) in discover::installed(&self.drivers.config().search_dirs) {
            // The same directory it gets in use, as its declaration may depend on it.
            let state_dir = self.drivers.config().driver_state_dir(&name);
            set.spawn(async move {
                let mut report = DriverReport {
                    name: name.clone(),
                    path: Some(path.display().to_string()),
                    role: None,
                    version: None,
                    protocol: None,
                    health: None,
                    capabilities: None,
                    error: None,
                };
                let methods = jsonrpsee::RpcModule::new(());
                match Connection::spawn(&name, &path, methods, timeouts, serde_json::Value::Null, state_dir).await {
                    Ok(conn) => {
                        let h = &conn.hello;
                        report.role = Some(h.role);
                        report.version = Some(h.version.clone());
                        report.protocol = Some(h.protocol.to_string());
                        report.health = Some(h.health.clone());
                        report.capabilities = h.capabilities.clone();
                        report.error = crate::driver::hello_problem(&name, None, h);
                        conn.close().await;
                    }
                    Err(e) => report.error = Some(e.to_string()),
                }
                report
            });
        }
        let mut reports = vec![DriverReport {
            name: PASSTHROUGH.into(),
            path: None,
            role: Some(Role::Sandbox),
            version: Some(env!("CARGO_PKG_VERSION").into()),
            protocol: Some(tinybox_sdk::protocol::PROTOCOL_VERSION.into()),
            health: Some(Health::ok_with("built in; confines nothing")),
            capabilities: Some(passthrough_capabilities()),
            error: None,
        }];
        while let Some(r) = set.join_next().await {
            if let Ok(r) = r {
                reports.push(r);
            }
        }
        reports.sort_by(|a, b| a.name.cmp(&b.name));
        reports
    }
}
