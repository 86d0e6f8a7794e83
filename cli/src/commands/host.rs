//! `tinybox host add|ls|rm`: the named hosts boxes can be placed on. Every
//! rule is core's (`Tinybox::host_add`, `host_table`, `host_remove`); this
//! file maps flags to the request and prints.

use clap::{Args, Subcommand};
use tinybox_core::Error;
use tinybox_core::hosts::{LOCAL, SshHostRequest};
use tinybox_core::model::HostName;

use super::App;
use crate::output;
use crate::output::outln;

#[derive(Debug, Subcommand)]
pub enum HostCmd {
    /// Name a host reached with ssh (the system ssh, with your ~/.ssh/config, keys and agent).
    Add(AddArgs),
    /// List the hosts boxes can be placed on.
    Ls,
    /// Forget a host (refused while a box is placed on it).
    Rm { name: HostName },
}

#[derive(Debug, Args)]
pub struct AddArgs {
    pub name: HostName,
    /// The destination as ssh takes it: host, user@host, or a ~/.ssh/config alias.
    #[arg(long, value_name = "DEST")]
    pub ssh: String,
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    pub port: Option<u16>,
    #[arg(long, value_name = "USER")]
    pub user: Option<String>,
    /// Private key file (on the inner host, where ssh runs).
    #[arg(long, value_name = "FILE")]
    pub identity: Option<String>,
    /// The host ssh runs on (a jump box); default local.
    #[arg(long, value_name = "HOST")]
    pub inner: Option<HostName>,
    /// Accept and record an unknown host key (a changed key is still refused).
    #[arg(long)]
    pub accept_new_host_key: bool,
    /// known_hosts file to check the host key against, instead of your own.
    #[arg(long, value_name = "FILE")]
    pub known_hosts: Option<String>,
    /// Open a connection per command instead of sharing one (ssh's ControlMaster, kept 60 s).
    #[arg(long)]
    pub no_multiplex: bool,
}

impl HostCmd {
    pub async fn run(self, app: &App) -> Result<u8, Error> {
        match self {
            HostCmd::Add(a) => {
                let added = app.engine.host_add(&SshHostRequest {
                    name: a.name,
                    ssh: a.ssh,
                    port: a.port,
                    user: a.user,
                    identity: a.identity,
                    inner: a.inner,
                    accept_new_host_key: a.accept_new_host_key,
                    known_hosts: a.known_hosts,
                    no_multiplex: a.no_multiplex,
                })?;
                if app.json {
                    output::json(&added);
                } else {
                    outln!("{}", added.name);
                }
            }
            HostCmd::Ls => {
                let table = app.engine.host_table()?;
                if app.json {
                    output::json(&table);
                } else {
                    let mut t = output::table(&["NAME", "DRIVER", "DESTINATION", "VIA"]);
                    for (name, e) in &table {
                        let dest = match e.config.get("destination").and_then(|d| d.as_str()) {
                            Some(d) => {
                                let user = e.config.get("user").and_then(|u| u.as_str()).map(|u| format!("{u}@"));
                                let port = e.config.get("port").and_then(|p| p.as_u64()).map(|p| format!(":{p}"));
                                format!("{}{d}{}", user.unwrap_or_default(), port.unwrap_or_default())
                            }
                            None => "this machine".into(),
                        };
                        let via = if e.driver == LOCAL {
                            "-".to_owned()
                        } else {
                            e.inner.as_ref().map(|i| i.to_string()).unwrap_or_else(|| LOCAL.into())
                        };
                        t.add_row(vec![name.to_string(), e.driver.clone(), dest, via]);
                    }
                    output::print_table(&t);
                }
            }
            HostCmd::Rm { name } => {
                app.engine.host_remove(&name)?;
                if app.json {
                    output::json(&serde_json::json!({ "removed": name }));
                } else {
                    outln!("{name}");
                }
            }
        }
        Ok(0)
    }
}
