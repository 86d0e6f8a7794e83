//! Named hosts: how a host name is reached. `local` is built in; every
//! other host is an entry in `hosts.json` beside the store naming its driver,
//! that driver's configuration, and the inner host its own commands go
//! through (`local` when absent). An ssh host whose inner host is another
//! ssh host reaches through a jump box with no code that knows what one is.
//! The file itself, read and changed under its lock, is `store/hosts.rs`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use tinybox_sdk::model::HostName;

use crate::error::{Error, HostError};

/// The built-in host: this machine.
pub const LOCAL: &str = "local";

/// How one named host is reached.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostEntry {
    /// The host driver's name: `tinybox-driver-<driver>` runs it.
    pub driver: String,
    /// Sent to the driver in its handshake (destination, port, user, ...).
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub config: serde_json::Value,
    /// The host the driver's own commands run on; `local` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inner: Option<HostName>,
}

impl HostEntry {
    /// The built-in entry for `local`.
    pub fn local() -> HostEntry {
        HostEntry { driver: LOCAL.into(), config: serde_json::Value::Null, inner: None }
    }
}

/// Every host known to a store, `local` included.
pub type HostTable = BTreeMap<HostName, HostEntry>;

/// A host as a request names it: a configured name (`local`, or one
/// `tinybox host add` made), or `ssh:DEST` with DEST as ssh itself takes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostRef {
    Named(HostName),
    /// Reached with ssh, needing no configuration; saved under a derived name.
    Ssh(String),
}

impl std::str::FromStr for HostRef {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.strip_prefix("ssh:") {
            Some("") => Err(format!("{s:?} names no destination; use ssh:DEST, e.g. ssh:builder-01")),
            Some(dest) if dest.starts_with('-') => {
                Err(format!("ssh destination {dest:?} starts with '-', which ssh would read as an option"))
            }
            Some(dest) if dest.chars().any(char::is_control) => {
                Err(format!("ssh destination {dest:?} contains a control character"))
            }
            Some(dest) => Ok(HostRef::Ssh(dest.to_owned())),
            None => HostName::new(s).map(HostRef::Named).map_err(|e| format!("{e} (or use ssh:DEST)")),
        }
    }
}

impl<'de> Deserialize<'de> for HostRef {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

impl Serialize for HostRef {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            HostRef::Named(n) => s.serialize_str(n.as_str()),
            HostRef::Ssh(dest) => s.serialize_str(&format!("ssh:{dest}")),
        }
    }
}

impl HostRef {
    /// The host name a box placed here records.
    pub fn name(&self) -> HostName {
        match self {
            HostRef::Named(n) => n.clone(),
            HostRef::Ssh(dest) => ad_hoc_name(dest),
        }
    }

    /// The ssh destination, for a reference that needs an entry saved.
    pub fn ad_hoc(&self) -> Option<&str> {
        match self {
            HostRef::Named(_) => None,
            HostRef::Ssh(dest) => Some(dest),
        }
    }
}

/// The name `ssh:DEST` is saved under: `ssh-` and DEST with every character
/// outside the name set made `_`. When that loses information (or is too
/// long), a hash of DEST keeps two destinations from sharing a name.
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

/// The entry an `ssh:DEST` host reference is saved as.
pub(crate) fn ssh_entry(dest: &str) -> HostEntry {
    HostEntry { driver: "ssh".into(), config: serde_json::json!({ "destination": dest }), inner: None }
}

/// `tinybox host add NAME --ssh DEST ...`, and the bus's equivalent.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SshHostRequest {
    pub name: HostName,
    /// The destination as ssh takes it: host, user@host, or a ~/.ssh/config alias.
    pub ssh: String,
    #[serde(default)]
    pub port: Option<u16>,
    #[serde(default)]
    pub user: Option<String>,
    /// Private key file (on the inner host, where ssh runs).
    #[serde(default)]
    pub identity: Option<String>,
    /// The host ssh runs on (a jump box); default local.
    #[serde(default)]
    pub inner: Option<HostName>,
    #[serde(default)]
    pub accept_new_host_key: bool,
    #[serde(default)]
    pub known_hosts: Option<String>,
    #[serde(default)]
    pub no_multiplex: bool,
}

impl SshHostRequest {
    /// The entry this request describes, or the rule it breaks.
    pub(crate) fn entry(&self) -> Result<HostEntry, Error> {
        if self.name.as_str() == LOCAL {
            return Err(HostError::LocalIsBuiltIn("configured").into());
        }
        let values = [
            ("ssh destination", Some(&self.ssh)),
            ("user", self.user.as_ref()),
            ("identity file", self.identity.as_ref()),
            ("known_hosts file", self.known_hosts.as_ref()),
        ];
        for (what, value) in values {
            if let Some(v) = value
                && v.starts_with('-')
            {
                return Err(HostError::LooksLikeOption { what, value: v.clone() }.into());
            }
        }
        if self.port == Some(0) {
            return Err(crate::request::RequestError::Port(0.to_string()).into());
        }
        let mut config = serde_json::json!({ "destination": self.ssh });
        if let Some(p) = self.port {
            config["port"] = p.into();
        }
        if let Some(u) = &self.user {
            config["user"] = u.clone().into();
        }
        if let Some(i) = &self.identity {
            config["identity_file"] = i.clone().into();
        }
        if self.accept_new_host_key {
            config["accept_new_host_key"] = true.into();
        }
        if let Some(k) = &self.known_hosts {
            config["known_hosts_file"] = k.clone().into();
        }
        if self.no_multiplex {
            config["multiplex"] = false.into();
        }
        Ok(HostEntry { driver: "ssh".into(), config, inner: self.inner.clone() })
    }
}

/// The table a store without a hosts file has: `local` alone.
pub fn local_only() -> HostTable {
    [(HostName::local(), HostEntry::local())].into()
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
    fn host_refs_parse_names_and_ssh_destinations() {
        assert_eq!("local".parse::<HostRef>().unwrap(), HostRef::Named(HostName::local()));
        assert_eq!("ssh:me@b:22".parse::<HostRef>().unwrap(), HostRef::Ssh("me@b:22".into()));
        assert!("ssh:".parse::<HostRef>().is_err());
        assert!("ssh:-oProxyCommand=x".parse::<HostRef>().unwrap_err().contains("starts with '-'"));
        assert!("ssh:a\nb".parse::<HostRef>().unwrap_err().contains("control character"));
        assert!("bad name".parse::<HostRef>().is_err());
        let from_json: HostRef = serde_json::from_str(r#""ssh:builder""#).unwrap();
        assert_eq!(from_json.name().as_str(), "ssh-builder");
        assert_eq!(serde_json::to_string(&from_json).unwrap(), r#""ssh:builder""#);
    }
}
