//! `tinybox drivers verify NAME`: the conformance kit's claim checks run
//! against an installed sandbox (the `tinybox-verify` crate does the work).

use clap::Args;
use tinybox_core::Error;
use tinybox_verify::{self as verify, Options, Report, Status};

use super::App;
use tinybox_core::request::merge_options;

use crate::output::outln;
use crate::{args, output};

#[derive(Debug, Args)]
pub struct VerifyCmd {
    /// The sandbox to verify (a driver's name, or passthrough).
    pub name: String,
    /// The image boxes start from when the sandbox takes images (default
    /// busybox:latest; a sandbox that boots images from tinybox's store,
    /// the microvm, gets the kit's own busybox image).
    #[arg(long, value_name = "REF")]
    pub image: Option<String>,
    /// microvm: make the kit's boxes with hardware virtualization (kvm) or emulation (tcg).
    #[arg(long, value_parser = ["kvm", "tcg"], value_name = "ACCEL")]
    pub accel: Option<String>,
    /// A sandbox-specific create option for every box the kit makes: KEY=VALUE (repeatable).
    #[arg(long = "option", value_parser = args::parse_option, value_name = "KEY=VALUE")]
    pub options: Vec<(String, String)>,
    /// A JSON file naming the caller's test services for the allowlist
    /// claims (docs/specs/conformance.md); without it they are skipped.
    #[arg(long, value_name = "FILE", env = "TINYBOX_VERIFY_EGRESS")]
    pub egress_target: Option<std::path::PathBuf>,
}

impl VerifyCmd {
    pub async fn run(self, app: &App) -> Result<u8, Error> {
        let create_options = merge_options(self.options.iter().cloned(), self.accel.as_deref())?;
        let egress_target = match &self.egress_target {
            Some(path) => Some(verify::EgressTarget::from_file(path).map_err(|e| Error::NotVerifiable(e.to_string()))?),
            None => None,
        };
        let opts = Options { image: self.image, create_options, egress_target };
        let report = verify::verify(&app.engine, &self.name, &opts).await?;
        let passed = report.passed();
        if let Some(verdict) = report.verdict(app.engine.now())
            && let Err(e) = app.engine.record_verdict(&verdict)
        {
            eprintln!("tinybox: the result was not recorded for `tinybox drivers`: {e}");
        }
        if app.json {
            output::json(&serde_json::json!({ "passed": passed, "report": report }));
        } else {
            print(&report);
        }
        Ok(if passed { 0 } else { 1 })
    }
}

fn print(r: &Report) {
    let options: Vec<String> = r.create_options.iter().map(|(k, v)| format!("{k}={v}")).collect();
    outln!(
        "sandbox {} ({}), isolation {}, boxes from {}{}",
        r.sandbox,
        r.driver_path.as_deref().unwrap_or("built in"),
        r.declared.isolation,
        r.source,
        if options.is_empty() { String::new() } else { format!(", create options {}", options.join(", ")) }
    );
    let mut t = output::table(&["CLAIM", "RESULT", "LATENCY", "DETAIL"]);
    for c in &r.claims {
        let result = match c.status {
            Status::Skipped => "SKIPPED".to_string(),
            s => s.to_string(),
        };
        let latency = c.latency_ms.map(|m| format!("{m}ms")).unwrap_or_else(|| "-".into());
        t.add_row(vec![c.claim.to_string(), result, latency, c.detail.clone()]);
    }
    output::print_table(&t);
    let ops: Vec<String> = r
        .operations
        .iter()
        .map(|o| format!("{} {}ms{}", o.op, o.latency_ms, if o.ok { "" } else { " (failed)" }))
        .collect();
    outln!("operations: {}", if ops.is_empty() { "none".into() } else { ops.join(", ") });
    let count = |s: Status| r.claims.iter().filter(|c| c.status == s).count();
    outln!(
        "{}: {} passed, {} failed, {} skipped, {} not claimed",
        if r.passed() { "verified" } else { "NOT VERIFIED" },
        count(Status::Pass),
        count(Status::Fail),
        count(Status::Skipped),
        count(Status::NotClaimed)
    );
}

#[cfg(test)]
#[path = "verify_tests.rs"]
mod tests;
