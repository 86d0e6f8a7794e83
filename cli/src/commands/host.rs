//! `tinybox host add|ls|rm`: the named hosts in the store's hosts.json, and
//! the entries `--host ssh:DEST` saves so later commands reach the same box.

use clap::{Args, Subcommand};
use tinybox_core::Error;
use tinybox_core::hosts::{HostEntry, HostStore, LOCAL};
use tinybox_core::model::HostName;

use super::App;
use crate::args::HostArg;
use crate::output;

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

/// The name `--host ssh:DEST` is saved under: `ssh-` and DEST with every
/// character outside the name set made `_`. When that loses information (or
/// is too long), a hash of DEST keeps two destinations from sharing a name.
pub fn ad_hoc_name(dest: &str) -> HostName {
    let safe: String =
        dest.chars().map(|c| if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') { c } else { '_' }).collect();
    let name = format!("ssh-{safe}");
    if safe == dest && name.len() <= 64 {
        return HostName::new(name).expect("only name characters");
    }
    let hash = blake3::hash(dest.as_bytes()).to_hex();
    let mut short = name;
    short.truncate(64 - 9);
    HostName::new(format!("{short}-{}", &hash[..8])).expect("only name characters")
}

fn ssh_entry(dest: &str, inner: Option<HostName>) -> HostEntry {
    HostEntry { driver: "ssh".into(), config: serde_json::json!({ "destination": dest }), inner }
}

fn refuse_dash(what: &str, value: &str) -> Result<(), Error> {
    if value.starts_with('-') {
        return Err(Error::Refused(format!("{what} {value:?} starts with '-', which ssh would read as an option")));
    }
    Ok(())
}

/// Saves the entries `--host ssh:DEST` / `--runner-host ssh:DEST` imply,
/// before the engine loads the host table. An existing entry under the
/// derived name that says something else is never overwritten.
pub fn save_ad_hoc(store_dir: &std::path::Path, hosts: &[&HostArg]) -> Result<(), Error> {
    let dests: Vec<&String> =
        hosts.iter().filter_map(|h| if let HostArg::Ssh(d) = h { Some(d) } else { None }).collect();
    if dests.is_empty() {
        return Ok(());
    }
    let store = HostStore::open(store_dir)?;
    let table = store.table()?;
    for dest in dests {
        let name = ad_hoc_name(dest);
        let entry = ssh_entry(dest, None);
        match table.get(&name) {
            Some(existing) if *existing == entry => {}
            Some(_) => {
                return Err(Error::Refused(format!(
                    "host {name} already exists with another configuration; use --host {name}, or `tinybox host rm {name}` first"
                )));
            }
            None => {
                store.save(name, entry)?;
            }
        }
    }
    Ok(())
}

impl HostCmd {
    pub async fn run(self, app: &App) -> Result<u8, Error> {
        let store = HostStore::open(&app.store_dir)?;
        match self {
            HostCmd::Add(a) => {
                if a.name.as_str() == LOCAL {
                    return Err(Error::Refused("host \"local\" is built in and cannot be configured".into()));
                }
                refuse_dash("ssh destination", &a.ssh)?;
                for (what, v) in
                    [("user", &a.user), ("identity file", &a.identity), ("known_hosts file", &a.known_hosts)]
                {
                    if let Some(v) = v {
                        refuse_dash(what, v)?;
                    }
                }
                let table = store.table()?;
                if let Some(inner) = &a.inner
                    && !table.contains_key(inner)
                {
                    let known: Vec<String> = table.keys().map(|h| h.to_string()).collect();
                    return Err(Error::UnknownHost { name: inner.to_string(), known });
                }
                let mut config = serde_json::json!({ "destination": a.ssh });
                if let Some(p) = a.port {
                    config["port"] = p.into();
                }
                if let Some(u) = a.user {
                    config["user"] = u.into();
                }
                if let Some(i) = a.identity {
                    config["identity_file"] = i.into();
                }
                if a.accept_new_host_key {
                    config["accept_new_host_key"] = true.into();
                }
                if let Some(k) = a.known_hosts {
                    config["known_hosts_file"] = k.into();
                }
                if a.no_multiplex {
                    config["multiplex"] = false.into();
                }
                let entry = HostEntry { driver: "ssh".into(), config, inner: a.inner };
                let replaced = store.save(a.name.clone(), entry.clone())?;
                if app.json {
                    output::json(&serde_json::json!({ "name": a.name, "host": entry, "replaced": replaced.is_some() }));
                } else {
                    println!("{}", a.name);
                }
            }
            HostCmd::Ls => {
                let table = store.table()?;
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
                if name.as_str() == LOCAL {
                    return Err(Error::Refused("host \"local\" is built in and cannot be removed".into()));
                }
                let users: Vec<String> = app
                    .engine
                    .list()?
                    .into_iter()
                    .filter(|b| b.spec.workspace.host == name || b.spec.runner.host == name)
                    .map(|b| b.id.to_string())
                    .collect();
                if !users.is_empty() {
                    return Err(Error::Refused(format!(
                        "host {name} is where {} {} placed; remove {} first",
                        users.join(", "),
                        if users.len() == 1 { "is" } else { "are" },
                        if users.len() == 1 { "it" } else { "them" }
                    )));
                }
                let inner_of: Vec<String> = store
                    .table()?
                    .into_iter()
                    .filter(|(_, e)| e.inner.as_ref() == Some(&name))
                    .map(|(n, _)| n.to_string())
                    .collect();
                if !inner_of.is_empty() {
                    return Err(Error::Refused(format!(
                        "host {name} is the inner host of {}; remove or change those first",
                        inner_of.join(", ")
                    )));
                }
                match store.remove(&name)? {
                    Some(_) => {
                        if app.json {
                            output::json(&serde_json::json!({ "removed": name }));
                        } else {
                            println!("{name}");
                        }
                    }
                    None => {
                        let known: Vec<String> = store.table()?.keys().map(|h| h.to_string()).collect();
                        return Err(Error::UnknownHost { name: name.to_string(), known });
                    }
                }
            }
        }
        Ok(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ad_hoc_names_are_valid_and_distinct() {
        assert_eq!(ad_hoc_name("builder-01").as_str(), "ssh-builder-01");
        let a = ad_hoc_name("me@builder");
        let b = ad_hoc_name("me_builder");
        assert_ne!(a, b, "a lossy name carries a hash");
        assert!(a.as_str().starts_with("ssh-me_builder-"), "{a}");
        let long = ad_hoc_name(&"h".repeat(200));
        assert!(long.as_str().len() <= 64);
        assert_eq!(ad_hoc_name("me@builder"), a, "stable");
    }

    #[test]
    fn host_args_parse_names_and_ssh_destinations() {
        assert_eq!("local".parse::<HostArg>().unwrap(), HostArg::Named(HostName::new("local").unwrap()));
        assert_eq!("ssh:me@b:22".parse::<HostArg>().unwrap(), HostArg::Ssh("me@b:22".into()));
        assert!("ssh:".parse::<HostArg>().is_err());
        assert!("ssh:-oProxyCommand=x".parse::<HostArg>().unwrap_err().contains("starts with '-'"));
        assert!("bad name".parse::<HostArg>().is_err());
    }
}
