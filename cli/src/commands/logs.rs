//! `tinybox logs --network BOX`: every connection an allowlist box's
//! egress proxy allowed or refused, oldest first, with why and how many
//! bytes went each way.

use clap::Args;
use tinybox_core::Error;
use tinybox_core::egress::{Decision, Method, Verdict};
use tinybox_core::model::BoxId;

use super::App;
use crate::output;

#[derive(Debug, Args)]
pub struct LogsCmd {
    /// The box's egress decisions (the only log there is so far).
    #[arg(long, required = true)]
    pub network: bool,
    pub id: BoxId,
}

impl LogsCmd {
    pub async fn run(self, app: &App) -> Result<u8, Error> {
        let decisions = app.engine.network_log(&self.id)?;
        if app.json {
            output::json(&decisions);
            return Ok(0);
        }
        if decisions.is_empty() {
            eprintln!("tinybox: box {} has made no connection through its egress proxy yet", self.id);
            return Ok(0);
        }
        let mut t = output::table(&["TIME", "METHOD", "NAME", "PORT", "DECISION", "UP", "DOWN", "REASON"]);
        for d in &decisions {
            t.add_row(row(d));
        }
        output::print_table(&t);
        Ok(0)
    }
}

fn row(d: &Decision) -> Vec<String> {
    let method = match d.method {
        Method::Connect => "CONNECT",
        Method::Http => "HTTP",
    };
    let decision = match d.decision {
        Verdict::Allowed => "allowed",
        Verdict::Refused => "refused",
    };
    vec![
        output::timestamp(d.time_ms / 1000),
        method.to_owned(),
        d.name.clone().unwrap_or_else(|| "-".into()),
        d.port.map_or_else(|| "-".into(), |p| p.to_string()),
        decision.to_owned(),
        d.bytes_up.to_string(),
        d.bytes_down.to_string(),
        d.reason.clone(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_says_what_was_asked_what_was_decided_and_why() {
        let d = Decision {
            time_ms: 1_700_000_000_500,
            method: Method::Http,
            name: Some("other.test".into()),
            port: Some(8080),
            address: None,
            decision: Verdict::Refused,
            reason: "name other.test port 8080 is not on the allowlist".into(),
            bytes_up: 0,
            bytes_down: 0,
            secret: None,
        };
        assert_eq!(
            row(&d),
            [
                "2023-11-14T22:13:20Z",
                "HTTP",
                "other.test",
                "8080",
                "refused",
                "0",
                "0",
                "name other.test port 8080 is not on the allowlist"
            ]
        );
        let broken = Decision { name: None, port: None, ..d };
        assert_eq!(row(&broken)[2..4], ["-", "-"]);
    }
}
