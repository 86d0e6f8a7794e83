//! Port forwarding: a port of a box made reachable on this machine's
//! 127.0.0.1, for as long as the caller (or the daemon) holds it.
//!
//! Each connection accepted locally becomes one exec in the box of a relay
//! (`nc 127.0.0.1 PORT`) whose stdin and stdout are the connection itself,
//! handed to the driver as descriptors like any exec's streams. So a
//! forward reaches wherever exec does — a local box, a box on an ssh host,
//! a box on a host behind another — and the box's own network policy
//! stays as it is (the relay connects to the box's loopback from inside).
//! Only a sandbox that declares `port_forward` is asked; the gate refuses
//! the rest before anything listens.
//!
//! Every forward is recorded in `<store>/forwards/<local port>.json` while
//! it is held (`tinybox ports BOX` lists them), and ends by itself once
//! its box's record is gone, so `rm` closes it.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use futures_util::stream::{FuturesUnordered, StreamExt};
use serde::{Deserialize, Serialize};
use tinybox_sdk::model::{BoxId, ExecRequest, Feature};
use tinybox_sdk::stdio::StdioFds;

use super::{Target, Tinybox};
use crate::error::{Capability, Error, Result};

/// How often a held forward checks that its box still exists.
const BOX_CHECK: Duration = Duration::from_secs(1);

/// The relay run in the box per connection: the box's own `nc`, else
/// busybox's. The port is an argument, never part of the script.
const RELAY: &str =
    r#"if command -v nc >/dev/null 2>&1; then exec nc 127.0.0.1 "$1"; fi; exec busybox nc 127.0.0.1 "$1""#;

/// One held forward, as recorded in the store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Forward {
    #[serde(rename = "box")]
    pub box_id: BoxId,
    /// The port on this machine's 127.0.0.1.
    pub local_port: u16,
    /// The port inside the box.
    pub box_port: u16,
    /// The process holding it (a `port-forward` command, or the daemon).
    pub pid: u32,
    /// Held by the daemon (`--detach`), which opens it again after a restart.
    #[serde(default)]
    pub detached: bool,
}

/// `[LOCAL:]PORT`: PORT in the box on LOCAL here (the same number when
/// LOCAL is left out; `:PORT` for any free local port).
pub fn parse_forward(s: &str) -> std::result::Result<(u16, u16), crate::request::RequestError> {
    let bad = || crate::request::RequestError::Port(s.to_owned());
    let port = |v: &str| v.parse::<u16>().ok().filter(|n| *n > 0);
    match s.split_once(':') {
        Some(("", p)) => Ok((0, port(p).ok_or_else(bad)?)),
        Some((l, p)) => Ok((port(l).ok_or_else(bad)?, port(p).ok_or_else(bad)?)),
        None => port(s).map(|p| (p, p)).ok_or_else(bad),
    }
}

impl Tinybox {
    fn forwards_dir(&self) -> Option<PathBuf> {
        self.store_dir.as_deref().map(|d| d.join("forwards"))
    }

    /// The forwards held now (records whose holder is gone are left out).
    pub fn forwards(&self, id: Option<&BoxId>) -> Result<Vec<Forward>> {
        let Some(dir) = self.forwards_dir() else { return Ok(Vec::new()) };
        let mut found = Vec::new();
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let Ok(bytes) = std::fs::read(entry.path()) else { continue };
            let Ok(f) = serde_json::from_slice::<Forward>(&bytes) else { continue };
            if id.is_none_or(|id| &f.box_id == id) && std::path::Path::new(&format!("/proc/{}", f.pid)).exists() {
                found.push(f);
            }
        }
        found.sort_by_key(|f| f.local_port);
        Ok(found)
    }

    /// Forwards the daemon held when it stopped, to open again.
    pub fn detached_forwards(&self) -> Vec<Forward> {
        let Some(dir) = self.forwards_dir() else { return Vec::new() };
        std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| serde_json::from_slice::<Forward>(&std::fs::read(e.path()).ok()?).ok())
            .filter(|f| f.detached)
            .collect()
    }

    /// Listens on 127.0.0.1:`local` (0: any free port) and relays each
    /// connection to `port` inside box `id`, until `stop` completes or the
    /// box is removed. `ready` hears the address once it listens.
    pub async fn port_forward(
        &self,
        id: &BoxId,
        local: u16,
        port: u16,
        detached: bool,
        ready: impl FnOnce(SocketAddr),
        stop: impl std::future::Future<Output = ()>,
    ) -> Result<()> {
        if port == 0 {
            return Err(crate::request::RequestError::Port("0".into()).into());
        }
        let info = self.get(id)?;
        let ws = self.instance(&info)?;
        let link = self.drivers.sandbox(&ws.placement.sandbox, &ws.placement.host).await?;
        if !link.capabilities().features.contains(&Feature::PortForward) {
            return Err(Error::unsupported(&ws.placement.sandbox, Capability::PortForward));
        }
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", local))
            .await
            .map_err(|e| Error::io(format!("cannot listen on 127.0.0.1:{local}"), e))?;
        let addr = listener.local_addr().map_err(|e| Error::io("cannot read the listening address", e))?;
        let record = self.forwards_dir().map(|d| d.join(format!("{}.json", addr.port())));
        if let Some(path) = &record {
            let forward = Forward {
                box_id: id.clone(),
                local_port: addr.port(),
                box_port: port,
                pid: std::process::id(),
                detached,
            };
            let _ = std::fs::create_dir_all(path.parent().unwrap_or(path));
            let bytes = serde_json::to_vec_pretty(&forward).unwrap_or_default();
            std::fs::write(path, bytes).map_err(|e| Error::io(format!("cannot record {}", path.display()), e))?;
        }
        ready(addr);
        let result = self.relay_connections(id, port, listener, stop).await;
        if let Some(path) = &record {
            let _ = std::fs::remove_file(path);
        }
        result
    }

    async fn relay_connections(
        &self,
        id: &BoxId,
        port: u16,
        listener: tokio::net::TcpListener,
        stop: impl std::future::Future<Output = ()>,
    ) -> Result<()> {
        tokio::pin!(stop);
        let mut relays = FuturesUnordered::new();
        let mut check = tokio::time::interval(BOX_CHECK);
        loop {
            tokio::select! {
                () = &mut stop => break,
                _ = check.tick() => {
                    // `rm` of the box ends its forwards.
                    if self.store.get(id)?.is_none() {
                        break;
                    }
                }
                Some(()) = relays.next(), if !relays.is_empty() => {}
                accepted = listener.accept() => {
                    let Ok((stream, _)) = accepted else { continue };
                    match self.relay_fds(stream) {
                        Ok(stdio) => relays.push(self.relay(id, port, stdio)),
                        Err(e) => tracing::warn!("port forward to box {id}: {e}"),
                    }
                }
            }
        }
        Ok(())
    }

    fn relay_fds(&self, stream: tokio::net::TcpStream) -> Result<StdioFds> {
        let stream = stream.into_std().map_err(|e| Error::io("cannot take the connection", e))?;
        stream.set_nonblocking(false).map_err(|e| Error::io("cannot take the connection", e))?;
        let stdout = stream.try_clone().map_err(|e| Error::io("cannot share the connection", e))?;
        let stderr = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/null")
            .map_err(|e| Error::io("cannot open /dev/null", e))?;
        Ok(StdioFds { stdin: stream.into(), stdout: stdout.into(), stderr: stderr.into() })
    }

    async fn relay(&self, id: &BoxId, port: u16, stdio: StdioFds) {
        let port = port.to_string();
        let request = ExecRequest::new(["sh", "-c", RELAY, "sh", port.as_str()]);
        if let Err(e) = self.exec(id, request, stdio, Target::Workspace, std::future::pending()).await {
            tracing::warn!("port forward to box {id}: {e}");
        }
    }
}
