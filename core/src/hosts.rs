//! Named hosts: how a host name is reached. `local` is built in; every
//! other host is an entry in `hosts.json` beside the store naming its driver,
//! that driver's configuration, and the inner host its own commands go
//! through (`local` when absent). An ssh host whose inner host is another
//! ssh host reaches through a jump box with no code that knows what one is.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use tinybox_sdk::model::HostName;

use crate::error::{Error, HostError};
use crate::store::file::{DOC_VERSION, Document, JsonDoc, check_version, legacy_version};
use crate::store::{Store, StoreError};

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

/// `hosts.json`: `{"version": 1, "hosts": {"name": {...}}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct HostsDoc {
    #[serde(default = "legacy_version")]
    version: u32,
    #[serde(default)]
    hosts: BTreeMap<HostName, HostEntry>,
}

impl Default for HostsDoc {
    fn default() -> Self {
        HostsDoc { version: DOC_VERSION, hosts: BTreeMap::new() }
    }
}

impl Document for HostsDoc {
    fn check(&self) -> Result<(), String> {
        check_version(self.version)?;
        if self.hosts.contains_key(&local_name()) {
            return Err("host \"local\" is built in and cannot be configured".into());
        }
        Ok(())
    }
}

fn local_name() -> HostName {
    HostName::local()
}

/// The hosts file of a store directory.
pub struct HostStore {
    doc: JsonDoc<HostsDoc>,
}

impl HostStore {
    pub fn open(dir: impl Into<PathBuf>) -> Result<HostStore, StoreError> {
        Ok(HostStore { doc: JsonDoc::open(dir, "hosts")? })
    }

    /// Every host, `local` included.
    pub fn table(&self) -> Result<HostTable, StoreError> {
        let mut table = self.doc.read()?.hosts;
        table.insert(local_name(), HostEntry::local());
        Ok(table)
    }

    /// Adds or replaces a host; returns the entry it replaced.
    pub fn save(&self, name: HostName, entry: HostEntry) -> Result<Option<HostEntry>, StoreError> {
        self.doc.modify(|d| Ok(d.hosts.insert(name, entry)))
    }

    /// Adds (or replaces) host `name` reached with ssh as `request` says;
    /// returns the entry and whether it replaced one.
    pub fn add_ssh(&self, request: &SshHostRequest) -> Result<(HostEntry, bool), Error> {
        let entry = request.entry()?;
        let name = request.name.clone();
        let replaced = self.doc.modify(|d| {
            if let Some(inner) = &entry.inner
                && *inner != local_name()
                && !d.hosts.contains_key(inner)
            {
                let mut known: Vec<String> = d.hosts.keys().map(|h| h.to_string()).collect();
                known.push(LOCAL.into());
                known.sort();
                return Ok(Err(Error::UnknownHost { name: inner.to_string(), known }));
            }
            Ok(Ok(d.hosts.insert(name, entry.clone()).is_some()))
        })??;
        Ok((entry, replaced))
    }

    /// Forgets host `name`, refused while a box in `boxes` is placed on it
    /// or another host reaches through it. The check and the removal happen
    /// under the hosts file's lock, and a create re-reads the table after
    /// reserving its box (see `Tinybox::create`), so neither can slip past
    /// the other.
    pub fn remove_unused(&self, name: &HostName, boxes: &dyn Store) -> Result<HostEntry, Error> {
        if name.as_str() == LOCAL {
            return Err(HostError::LocalIsBuiltIn("removed").into());
        }
        self.doc.modify(|d| {
            let users: Vec<String> = boxes
                .list()?
                .into_iter()
                .filter(|b| b.spec.workspace.host == *name || b.spec.runner.host == *name)
                .map(|b| b.id.to_string())
                .collect();
            if !users.is_empty() {
                return Ok(Err(HostError::InUse { name: name.to_string(), boxes: users }.into()));
            }
            let inner_of: Vec<String> =
                d.hosts.iter().filter(|(_, e)| e.inner.as_ref() == Some(name)).map(|(n, _)| n.to_string()).collect();
            if !inner_of.is_empty() {
                return Ok(Err(HostError::IsInner { name: name.to_string(), of: inner_of }.into()));
            }
            match d.hosts.remove(name) {
                Some(entry) => Ok(Ok(entry)),
                None => {
                    let mut known: Vec<String> = d.hosts.keys().map(|h| h.to_string()).collect();
                    known.push(LOCAL.into());
                    known.sort();
                    Ok(Err(Error::UnknownHost { name: name.to_string(), known }))
                }
            }
        })?
    }

    /// Saves the entries `ssh:DEST` host references imply; returns every
    /// one of them. An existing entry under the derived name that says
    /// something else is never overwritten.
    pub fn save_ad_hoc(&self, dests: &[&str]) -> Result<Vec<(HostName, HostEntry)>, Error> {
        if dests.is_empty() {
            return Ok(Vec::new());
        }
        self.doc.modify(|d| {
            let mut saved = Vec::new();
            for dest in dests {
                let name = ad_hoc_name(dest);
                let entry = ssh_entry(dest);
                match d.hosts.get(&name) {
                    Some(existing) if *existing == entry => {}
                    Some(_) => return Ok(Err(HostError::Conflict { name: name.to_string() }.into())),
                    None => {
                        d.hosts.insert(name.clone(), entry.clone());
                    }
                }
                saved.push((name, entry));
            }
            Ok(Ok(saved))
        })?
    }
}

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
    fn entry(&self) -> Result<HostEntry, Error> {
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
    [(local_name(), HostEntry::local())].into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{BoxInfo, BoxSpec, Placement};
    use crate::store::MemoryStore;

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

    fn request(name: &str, dest: &str) -> SshHostRequest {
        SshHostRequest {
            name: HostName::new(name).unwrap(),
            ssh: dest.into(),
            port: None,
            user: None,
            identity: None,
            inner: None,
            accept_new_host_key: false,
            known_hosts: None,
            no_multiplex: false,
        }
    }

    #[test]
    fn adding_checks_every_value_and_the_inner_host() {
        let dir = tempfile::tempdir().unwrap();
        let hosts = HostStore::open(dir.path()).unwrap();
        let err = hosts.add_ssh(&request("local", "b")).unwrap_err();
        assert!(matches!(err, Error::Host(HostError::LocalIsBuiltIn("configured"))), "{err}");
        let err = hosts.add_ssh(&request("b", "-oProxyCommand=x")).unwrap_err();
        assert!(matches!(err, Error::Host(HostError::LooksLikeOption { what: "ssh destination", .. })), "{err}");
        let mut r = request("b", "builder");
        r.user = Some("-x".into());
        assert!(matches!(hosts.add_ssh(&r).unwrap_err(), Error::Host(HostError::LooksLikeOption { what: "user", .. })));
        let mut r = request("b", "builder");
        r.inner = Some(HostName::new("jump").unwrap());
        assert!(matches!(hosts.add_ssh(&r).unwrap_err(), Error::UnknownHost { name, .. } if name == "jump"));
        assert_eq!(hosts.table().unwrap().len(), 1, "nothing was written: {:?}", hosts.table());

        let (entry, replaced) = hosts.add_ssh(&request("jump", "j")).unwrap();
        assert!(!replaced);
        assert_eq!(entry.config, serde_json::json!({"destination": "j"}));
        let (_, replaced) = hosts.add_ssh(&r).unwrap();
        assert!(!replaced);
        assert!(hosts.add_ssh(&r).unwrap().1, "a second add replaces");
    }

    #[test]
    fn removing_refuses_a_host_in_use_or_reached_through() {
        let dir = tempfile::tempdir().unwrap();
        let hosts = HostStore::open(dir.path()).unwrap();
        let boxes = MemoryStore::new();
        hosts.add_ssh(&request("jump", "j")).unwrap();
        let mut via = request("far", "f");
        via.inner = Some(HostName::new("jump").unwrap());
        hosts.add_ssh(&via).unwrap();

        let local = HostName::local();
        assert!(matches!(hosts.remove_unused(&local, &boxes), Err(Error::Host(HostError::LocalIsBuiltIn("removed")))));
        let jump = HostName::new("jump").unwrap();
        let err = hosts.remove_unused(&jump, &boxes).unwrap_err();
        assert!(matches!(&err, Error::Host(HostError::IsInner { of, .. }) if *of == ["far"]), "{err}");

        let far = HostName::new("far").unwrap();
        let placed = BoxSpec::new(Placement::new(far.clone(), crate::model::SandboxName::passthrough()));
        boxes.insert(BoxInfo::creating(crate::model::BoxId::new("box-0").unwrap(), placed, None)).unwrap();
        let err = hosts.remove_unused(&far, &boxes).unwrap_err();
        assert!(matches!(&err, Error::Host(HostError::InUse { boxes, .. }) if *boxes == ["box-0"]), "{err}");
        assert_eq!(err.to_string(), "host far is where box-0 is placed; remove it first");

        boxes.remove(&crate::model::BoxId::new("box-0").unwrap()).unwrap();
        assert_eq!(hosts.remove_unused(&far, &boxes).unwrap().config["destination"], "f");
        assert!(matches!(hosts.remove_unused(&far, &boxes), Err(Error::UnknownHost { .. })));
        assert!(hosts.remove_unused(&jump, &boxes).is_ok(), "no longer anyone's inner host");
    }

    #[test]
    fn ad_hoc_entries_are_saved_once_and_never_overwrite_another() {
        let dir = tempfile::tempdir().unwrap();
        let hosts = HostStore::open(dir.path()).unwrap();
        let saved = hosts.save_ad_hoc(&["me@builder"]).unwrap();
        assert_eq!(saved[0].0, ad_hoc_name("me@builder"));
        assert_eq!(hosts.save_ad_hoc(&["me@builder"]).unwrap(), saved, "the same entry again is no change");
        let mut other = request("ssh-builder", "elsewhere");
        other.port = Some(2222);
        hosts.add_ssh(&other).unwrap();
        let err = hosts.save_ad_hoc(&["builder"]).unwrap_err();
        assert!(matches!(err, Error::Host(HostError::Conflict { .. })), "{err}");
    }
}
