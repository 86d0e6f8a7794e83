//! `tinybox port-forward BOX [LOCAL:]PORT` and `tinybox ports BOX`: a box's
//! port on this machine's 127.0.0.1, held by this command (until Ctrl-C)
//! or by the daemon (`--detach`); core's `port_forward` does the work.

use clap::Args;
use tinybox_core::Error;
use tinybox_core::model::BoxId;
use tinybox_core::supervisor;

use super::App;
use crate::output;
use crate::output::outln;

fn parse_forward(s: &str) -> Result<(u16, u16), String> {
    tinybox_core::engine::parse_forward(s).map_err(|e| e.to_string())
}

#[derive(Debug, Args)]
pub struct PortForwardCmd {
    pub id: BoxId,
    /// PORT in the box, on the same port here; LOCAL:PORT to choose the local port; :PORT for any free one.
    #[arg(value_parser = parse_forward, value_name = "[LOCAL:]PORT")]
    pub ports: (u16, u16),
    /// Have the daemon hold it (until the box is removed or the daemon stops) and return at once.
    #[arg(long)]
    pub detach: bool,
}

impl PortForwardCmd {
    pub async fn run(self, app: &App) -> Result<u8, Error> {
        let (local, port) = self.ports;
        if self.detach {
            let f = supervisor::ask_forward(&app.store_dir, self.id.clone(), local, port).await?;
            if app.json {
                output::json(&f);
            } else {
                eprintln!("tinybox: the daemon forwards 127.0.0.1:{} to port {port} of {}", f.local_port, self.id);
                outln!("127.0.0.1:{}", f.local_port);
            }
            return Ok(0);
        }
        let json = app.json;
        let id = self.id.clone();
        let ready = move |addr: std::net::SocketAddr| {
            if json {
                output::json(&serde_json::json!({ "box": id, "local": addr.to_string(), "port": port }));
            } else {
                eprintln!("tinybox: forwarding {addr} to port {port} of {id}; Ctrl-C stops it");
                outln!("{addr}");
            }
        };
        app.engine.port_forward(&self.id, local, port, false, ready, super::daemon::shutdown()).await?;
        Ok(0)
    }
}

#[derive(Debug, Args)]
pub struct PortsCmd {
    /// Only this box's forwards.
    pub id: Option<BoxId>,
}

impl PortsCmd {
    pub async fn run(self, app: &App) -> Result<u8, Error> {
        let forwards = app.engine.forwards(self.id.as_ref())?;
        if app.json {
            output::json(&forwards);
            return Ok(0);
        }
        if forwards.is_empty() {
            eprintln!("tinybox: no port is forwarded; `tinybox port-forward BOX PORT` forwards one");
            return Ok(0);
        }
        let mut t = output::table(&["LOCAL", "BOX", "PORT", "HELD BY"]);
        for f in &forwards {
            let by = if f.detached { format!("daemon (pid {})", f.pid) } else { format!("pid {}", f.pid) };
            t.add_row(vec![format!("127.0.0.1:{}", f.local_port), f.box_id.to_string(), f.box_port.to_string(), by]);
        }
        output::print_table(&t);
        Ok(0)
    }
}
