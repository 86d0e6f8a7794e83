//! `hosts.json`, the store's host table: every host but the built-in
//! `local`, each checked and changed under the file's lock, so a check and
//! the write it allows cannot be split by another process. What an entry
//! means, and the rules a request must meet, are `crate::hosts`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use tinybox_sdk::model::HostName;

use crate::error::{Error, HostError};
use crate::hosts::{HostEntry, HostTable, LOCAL, SshHostRequest, ad_hoc_name, ssh_entry};
use crate::store::file::{DOC_VERSION, Document, JsonDoc, check_version, legacy_version};
use crate::store::{Store, StoreError};

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
        if self.hosts.contains_key(&HostName::local()) {
            return Err("host \"local\" is built in and cannot be configured".into());
        }
        Ok(())
    }
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
        table.insert(HostName::local(), HostEntry::local());
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
                && *inner != HostName::local()
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{BoxInfo, BoxSpec, Placement};
    use crate::store::MemoryStore;

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
