//! `tinybox drivers`: every driver found, started, handshaken and described,
//! with the trust the engine gives its declaration (crate::trust).

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;
use tinybox_sdk::model::SandboxCapabilities;
use tinybox_sdk::protocol::{Health, Role};

use super::Tinybox;
use crate::driver::{Connection, discover, passthrough_capabilities};
use crate::model::PASSTHROUGH;
use crate::store::verdicts::{self, Verdict};
use crate::trust::{Trust, trust_of};

/// One driver in `tinybox drivers`: its report and what the engine makes
/// of its declaration for boxes made with no create options — the rule
/// every create applies, not merely whether its binary was ever verified.
#[derive(Debug, Clone, Serialize)]
pub struct DriverListing {
    #[serde(flatten)]
    pub report: DriverReport,
    /// `None` for a driver with no sandbox declaration (a host driver, or
    /// one whose handshake failed).
    pub trust: Option<TrustWord>,
    /// The verdict behind `trust`: one for exactly this binary, this
    /// declaration and no create options, passed or not.
    pub verified: Option<Verdict>,
    /// Verdicts for this binary and declaration earned with create options
    /// (a microVM's `accel=tcg`): they hold for boxes made with those only.
    pub with_options: Vec<Verdict>,
}

/// The trust in a declaration, in one word.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TrustWord {
    /// A passing verdict: relied on.
    Verified,
    /// A verdict in which claims failed.
    Failed,
    /// A verdict in which no claim failed but some could not be checked.
    Unproven,
    /// No verdict for this binary, declaration and options.
    Unverified,
    /// It claims no isolation, so there is nothing to verify (passthrough).
    NothingClaimed,
}

/// What `tinybox drivers` shows for `report`, from the verdicts in `store`.
fn listing(store: Option<&Path>, report: DriverReport) -> DriverListing {
    let caps = report.capabilities.as_ref().filter(|_| report.role == Some(Role::Sandbox));
    let Some(caps) = caps else {
        return DriverListing { report, trust: None, verified: None, with_options: Vec::new() };
    };
    let path = report.path.as_deref().map(Path::new);
    let (trust, verified) = match trust_of(store, path, caps, &BTreeMap::new()) {
        Trust::Verified(v) => (TrustWord::Verified, Some(v)),
        Trust::Failed(v) if v.fails > 0 => (TrustWord::Failed, Some(v)),
        Trust::Failed(v) => (TrustWord::Unproven, Some(v)),
        Trust::Unverified => (TrustWord::Unverified, None),
        Trust::NothingClaimed => (TrustWord::NothingClaimed, None),
    };
    let with_options = match (store, path, trust) {
        (_, _, TrustWord::NothingClaimed) => Vec::new(),
        (Some(store), Some(path), _) => verdicts::load_all(store, path)
            .into_iter()
            .filter(|v| !v.create_options.is_empty() && v.declared.as_ref() == Some(caps))
            .collect(),
        _ => Vec::new(),
    };
    DriverListing { report, trust: Some(trust), verified, with_options }
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
    /// Every driver with the trust in its declaration: what `tinybox drivers` shows.
    pub async fn driver_listing(&self) -> Vec<DriverListing> {
        let store = self.store_dir.as_deref();
        self.driver_reports().await.into_iter().map(|report| listing(store, report)).collect()
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
                match Connection::spawn(&name, &path, methods, timeouts, serde_json::Value::Null, state_dir, Vec::new())
                    .await
                {
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

#[cfg(test)]
mod tests {
    use tinybox_sdk::model::IsolationLevel;

    use super::*;

    fn sandbox_report(path: &Path, isolation: IsolationLevel) -> DriverReport {
        DriverReport {
            name: "x".into(),
            path: Some(path.display().to_string()),
            role: Some(Role::Sandbox),
            version: Some("0.1.0".into()),
            protocol: Some("0.1.0".into()),
            health: Some(Health::ok_with("fine")),
            capabilities: Some(SandboxCapabilities { isolation, ..SandboxCapabilities::nothing() }),
            error: None,
        }
    }

    fn verdict(path: &Path, declared: &SandboxCapabilities, options: &[(&str, &str)]) -> Verdict {
        Verdict {
            sandbox: "x".into(),
            digest: verdicts::digest(path).unwrap(),
            declared: Some(declared.clone()),
            passed: true,
            passes: 5,
            fails: 0,
            skipped: 0,
            failed: Vec::new(),
            verified_at: 1,
            kit_version: "0.1.0".into(),
            create_options: options.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        }
    }

    #[test]
    fn the_listing_shows_the_trust_every_create_applies() {
        let store = tempfile::tempdir().unwrap();
        let bin = store.path().join("tinybox-driver-x");
        std::fs::write(&bin, b"build 1").unwrap();
        let s = Some(store.path());
        let kernel = sandbox_report(&bin, IsolationLevel::Kernel);
        let shown = listing(s, kernel.clone());
        assert_eq!((shown.trust, shown.verified), (Some(TrustWord::Unverified), None), "never verified");

        let caps = kernel.capabilities.clone().unwrap();
        verdicts::save(store.path(), &verdict(&bin, &caps, &[])).unwrap();
        let shown = listing(s, kernel.clone());
        assert_eq!(shown.trust, Some(TrustWord::Verified));
        assert_eq!(shown.verified, Some(verdict(&bin, &caps, &[])));

        // The same binary now declaring hardware: the verdict for its digest
        // is stale, and the listing must not show it as a pass.
        let stale = listing(s, sandbox_report(&bin, IsolationLevel::Hardware));
        assert_eq!((stale.trust, stale.verified), (Some(TrustWord::Unverified), None));
        assert_eq!(stale.with_options, vec![]);

        // A verdict earned with options is shown beside, never as, the default one.
        let tcg = verdict(&bin, &caps, &[("accel", "tcg")]);
        verdicts::save(store.path(), &tcg).unwrap();
        let shown = listing(s, kernel.clone());
        assert_eq!(shown.trust, Some(TrustWord::Verified));
        assert_eq!(shown.with_options, vec![tcg]);

        let failed = Verdict { passed: false, fails: 2, ..verdict(&bin, &caps, &[]) };
        verdicts::save(store.path(), &failed).unwrap();
        assert_eq!(listing(s, kernel.clone()).trust, Some(TrustWord::Failed));
        let unproven = Verdict { passed: false, skipped: 2, ..verdict(&bin, &caps, &[]) };
        verdicts::save(store.path(), &unproven).unwrap();
        assert_eq!(listing(s, kernel).trust, Some(TrustWord::Unproven));
    }

    #[test]
    fn passthrough_claims_nothing_and_a_host_driver_has_no_declaration() {
        let passthrough = DriverReport {
            path: None,
            capabilities: Some(passthrough_capabilities()),
            ..sandbox_report(Path::new("/nonexistent"), IsolationLevel::None)
        };
        assert_eq!(listing(None, passthrough).trust, Some(TrustWord::NothingClaimed));
        let host = DriverReport {
            role: Some(Role::Host),
            capabilities: None,
            ..sandbox_report(Path::new("/nonexistent"), IsolationLevel::None)
        };
        let shown = listing(None, host);
        assert_eq!((shown.trust, shown.verified, shown.with_options), (None, None, vec![]));
    }
}
