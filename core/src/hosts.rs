//! Named hosts: how a host name is reached. `local` is built in; every
//! other host is an entry in `hosts.json` beside the store naming its driver,
//! that driver's configuration, and the inner host its own commands go
//! through (`local` when absent). An ssh host whose inner host is another
//! ssh host reaches through a jump box with no code that knows what one is.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use tinybox_sdk::model::HostName;

use crate::store::StoreError;
use crate::store::file::{DOC_VERSION, Document, JsonDoc, check_version, legacy_version};

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
    HostName::new(LOCAL).expect("valid")
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

    pub fn remove(&self, name: &HostName) -> Result<Option<HostEntry>, StoreError> {
        self.doc.modify(|d| Ok(d.hosts.remove(name)))
    }
}

/// The table a store without a hosts file has: `local` alone.
pub fn local_only() -> HostTable {
    [(local_name(), HostEntry::local())].into()
}
