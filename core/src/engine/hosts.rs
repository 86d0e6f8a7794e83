//! Host administration: the named hosts in the store's hosts file. Every
//! rule (local is built in, a host in use stays, values ssh would read as
//! options are refused) lives in `crate::hosts`; this is the engine's door
//! to it, so a front end never opens a store file itself.

use serde::Serialize;
use tinybox_sdk::model::HostName;

use super::Tinybox;
use crate::error::{Error, Result};
use crate::hosts::{HostEntry, HostTable, SshHostRequest};
use crate::store::HostStore;

/// What `host add` did.
#[derive(Debug, Clone, Serialize)]
pub struct HostAdded {
    pub name: HostName,
    pub host: HostEntry,
    /// An entry of that name existed and was replaced.
    pub replaced: bool,
}

impl Tinybox {
    fn host_store(&self) -> Result<HostStore> {
        let dir = self.store_dir.as_deref().ok_or_else(|| {
            Error::io("this engine keeps no hosts file", std::io::Error::from(std::io::ErrorKind::Unsupported))
        })?;
        Ok(HostStore::open(dir)?)
    }

    /// Names a host reached with ssh.
    pub fn host_add(&self, request: &SshHostRequest) -> Result<HostAdded> {
        let (host, replaced) = self.host_store()?.add_ssh(request)?;
        self.drivers.add_hosts([(request.name.clone(), host.clone())]);
        Ok(HostAdded { name: request.name.clone(), host, replaced })
    }

    /// Every host, `local` included.
    pub fn host_table(&self) -> Result<HostTable> {
        Ok(self.host_store()?.table()?)
    }

    /// Forgets a host no box is placed on and no host reaches through.
    pub fn host_remove(&self, name: &HostName) -> Result<HostEntry> {
        self.host_store()?.remove_unused(name, self.store.as_ref())
    }
}
