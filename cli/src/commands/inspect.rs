//! `tinybox inspect BOX`: what a box is and what confines it.

use clap::Args;
use tinybox_core::Error;
use tinybox_core::model::BoxId;

use super::App;
use crate::output;
use crate::output::outln;

#[derive(Debug, Args)]
pub struct InspectCmd {
    pub id: BoxId,
}

impl InspectCmd {
    pub async fn run(self, app: &App) -> Result<u8, Error> {
        let view = app.engine.inspect(&self.id).await?;
        if app.json {
            output::json(&view);
            return Ok(0);
        }
        let info = &view.info;
        let now = app.engine.now();
        let mut rows: Vec<(&str, String)> = Vec::new();
        rows.push(("id", info.id.to_string()));
        rows.push((
            "state",
            match &view.state_detail {
                Some(d) => format!("{} ({d})", view.state),
                None => view.state.to_string(),
            },
        ));
        if let Some(ws) = &info.workspace {
            rows.push(("placement", ws.placement.to_string()));
            let untrusted = match (ws.isolation >= tinybox_core::model::IsolationLevel::UNTRUSTED_FLOOR, ws.verified) {
                (true, true) => "suitable for untrusted code, declaration verified".to_owned(),
                (true, false) => format!(
                    "NOT relied on for untrusted code: sandbox {}'s declaration was not verified when the box was made; `tinybox drivers verify {}`",
                    ws.placement.sandbox, ws.placement.sandbox
                ),
                (false, _) => "NOT suitable for untrusted code".to_owned(),
            };
            rows.push(("isolation", format!("{} ({untrusted})", ws.isolation)));
            rows.push(("network", network(ws, &info.id)));
            rows.push(("limits", output::limits(&ws.limits)));
            rows.push(("workdir", ws.workdir.clone().unwrap_or_else(|| "(host default)".into())));
        }
        match &info.runner {
            Some(r) => rows.push(("runner", format!("{} — {}", r.placement, output::confinement(r)))),
            None => rows.push(("runner", "same as workspace".into())),
        }
        rows.push(("source", output::source(&info.spec.source)));
        rows.push(("lifecycle", output::lifecycle(info, now)));
        rows.push(("created", info.created_at.map(output::timestamp).unwrap_or_else(|| "unknown".into())));
        if !info.spec.ports.is_empty() {
            let ports: Vec<String> = info.spec.ports.iter().map(|p| format!("{}:{}", p.host, p.guest)).collect();
            rows.push(("ports", ports.join(", ")));
        }
        if !info.spec.env.is_empty() {
            rows.push(("env", info.spec.env.keys().cloned().collect::<Vec<_>>().join(", ")));
        }
        let snaps: Vec<String> = info.snapshots.iter().map(|s| s.id.to_string()).collect();
        rows.push(("snapshots", if snaps.is_empty() { "none".into() } else { snaps.join(", ") }));
        for (k, v) in rows {
            outln!("{k:<10} {v}");
        }
        Ok(0)
    }
}

/// The network in force: egress behind its fence and what it lets
/// through, or an allowlist's entries and where its log is.
fn network(ws: &tinybox_core::model::Instance, id: &BoxId) -> String {
    use tinybox_core::model::NetworkInForce;
    match (ws.network, ws.allow_hosts.is_empty()) {
        (NetworkInForce::Egress, true) => {
            "egress (public addresses only: not the host, private or local ranges)".into()
        }
        (NetworkInForce::Egress, false) => format!(
            "egress (public addresses only: not the host, private or local ranges, but for {})",
            ws.allow_hosts.join(", ")
        ),
        (_, true) => ws.network.to_string(),
        (_, false) => format!(
            "{}: {} (through its egress proxy; `tinybox logs --network {id}`)",
            ws.network,
            ws.allow_hosts.join(", ")
        ),
    }
}
