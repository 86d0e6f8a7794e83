//! The conformance kit as the engine's verifier: when the engine is asked
//! to rely on a declaration it has no verdict for (an isolation floor, or
//! picking a sandbox on its own), it runs the kit once for that driver
//! binary and keeps the verdict (core's `trust` holds the rule).

use std::collections::BTreeMap;

use tinybox_core::model::SandboxName;
use tinybox_core::store::verdicts::Verdict;
use tinybox_core::trust::Verifier;
use tinybox_core::{Error, Tinybox};
use tinybox_verify::{self as verify, Options};

/// Runs the kit with a spinner, telling the user why it runs.
pub struct Kit {
    pub json: bool,
}

#[async_trait::async_trait]
impl Verifier for Kit {
    async fn verify(
        &self,
        engine: &Tinybox,
        sandbox: &SandboxName,
        options: &BTreeMap<String, String>,
    ) -> Result<Verdict, Error> {
        let what = format!(
            "verifying sandbox {sandbox} before relying on its declaration (once per driver binary; `tinybox drivers verify {sandbox}` shows each claim)"
        );
        if !self.json {
            eprintln!("tinybox: {what}");
        }
        let opts = Options { image: None, create_options: options.clone(), egress_target: None };
        let report = crate::progress::spin(self.json, what, verify::verify(engine, sandbox.as_str(), &opts)).await?;
        // A claim that failed is named with what its probe saw, here where
        // the report is: the verdict kept in the store has the names only.
        if !self.json {
            for c in report.claims.iter().filter(|c| c.status == verify::Status::Fail) {
                eprintln!("tinybox: {sandbox}: claim {} FAILED: {}", c.claim, c.detail);
            }
        }
        report.verdict(engine.now()).ok_or_else(|| {
            Error::NotVerifiable(format!("sandbox {sandbox}'s driver binary cannot be read, so no verdict can be kept"))
        })
    }
}
