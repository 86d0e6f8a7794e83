//! The client side of the driver protocol: finding drivers, starting them,
//! and routing a sandbox driver's reverse `host.run` calls to the host its
//! box is placed on.
//!
//! One sandbox driver process serves one (sandbox, host) pair, so every
//! reverse call on a connection belongs to that pair's host and no call
//! needs to say which host it means.

pub mod connection;
pub mod discover;
mod passthrough;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use jsonrpsee::RpcModule;
use tinybox_sdk::model::{ExitStatus, HostName, SandboxCapabilities, SandboxName, SnapshotId};
use tinybox_sdk::protocol::{
    BoxRef, CancelParams, CreateParams, CreateResult, DriverError, ErrorCode, ExecParams, HandshakeResult, Health,
    InspectResult, Role, RunParams, RunResult, SnapshotResult, method,
};

pub use connection::{Connection, DriverConfig, Timeouts};
pub use passthrough::capabilities as passthrough_capabilities;

use crate::error::{Error, Result};
use crate::model::PASSTHROUGH;

/// A host driver, ready to run commands.
pub struct HostLink {
    pub name: HostName,
    conn: Connection,
}

impl HostLink {
    pub async fn run(&self, params: RunParams) -> Result<ExitStatus> {
        let r: RunResult = self.conn.call_unbounded(method::HOST_RUN, params).await?;
        Ok(r.status)
    }

    pub async fn cancel(&self, exec_id: &str) -> Result<()> {
        self.conn.call::<_, serde_json::Value>(method::CANCEL, CancelParams { exec_id: exec_id.to_owned() }).await?;
        Ok(())
    }

    pub fn connection(&self) -> &Connection {
        &self.conn
    }
}

/// What a sandbox driver's reverse calls can reach.
pub struct Reverse {
    host: Arc<HostLink>,
    /// Exec ids of `host.run` calls in flight, so a cancellation reaches them.
    forwarded: Mutex<HashSet<String>>,
}

fn reverse_methods(reverse: Arc<Reverse>) -> RpcModule<Arc<Reverse>> {
    let mut module = RpcModule::new(reverse);
    module
        .register_async_method(method::HOST_RUN, |params, ctx, _| async move {
            let p: RunParams = params.parse()?;
            let exec_id = p.exec_id.clone();
            ctx.forwarded.lock().expect("forwarded runs").insert(exec_id.clone());
            let result = ctx.host.run(p).await;
            ctx.forwarded.lock().expect("forwarded runs").remove(&exec_id);
            result.map(|status| RunResult { status }).map_err(|e| {
                jsonrpsee::types::ErrorObjectOwned::from(DriverError::new(ErrorCode::Failed, e.to_string()))
            })
        })
        .expect("unique method");
    module
}

/// A sandbox, ready to make and drive boxes on one host.
// One per (sandbox, host) per process, behind an Arc: its size is irrelevant.
#[allow(clippy::large_enum_variant)]
pub enum SandboxLink {
    /// Lives in core, confines nothing, delegates every command to its host.
    Passthrough {
        host: Arc<HostLink>,
    },
    Driver {
        name: SandboxName,
        conn: Connection,
        reverse: Arc<Reverse>,
    },
}

impl SandboxLink {
    pub fn name(&self) -> SandboxName {
        match self {
            SandboxLink::Passthrough { .. } => SandboxName::new(PASSTHROUGH).expect("valid"),
            SandboxLink::Driver { name, .. } => name.clone(),
        }
    }

    pub fn capabilities(&self) -> SandboxCapabilities {
        match self {
            SandboxLink::Passthrough { .. } => passthrough::capabilities(),
            SandboxLink::Driver { conn, .. } => {
                conn.hello.capabilities.clone().unwrap_or_else(SandboxCapabilities::nothing)
            }
        }
    }

    pub fn health(&self) -> Health {
        match self {
            SandboxLink::Passthrough { .. } => Health::ok_with("confines nothing"),
            SandboxLink::Driver { conn, .. } => conn.hello.health.clone(),
        }
    }

    pub async fn create(&self, params: CreateParams) -> Result<CreateResult> {
        match self {
            SandboxLink::Passthrough { host } => passthrough::create(host, params).await,
            SandboxLink::Driver { conn, .. } => conn.call(method::SANDBOX_CREATE, params).await,
        }
    }

    pub async fn exec(&self, params: ExecParams) -> Result<ExitStatus> {
        match self {
            SandboxLink::Passthrough { host } => passthrough::exec(host, params).await,
            SandboxLink::Driver { conn, .. } => {
                let r: RunResult = conn.call_unbounded(method::SANDBOX_EXEC, params).await?;
                Ok(r.status)
            }
        }
    }

    /// Stops a running exec: tells the sandbox, and the host for any of the
    /// exec's runs the sandbox forwarded there.
    pub async fn cancel(&self, exec_id: &str) -> Result<()> {
        match self {
            SandboxLink::Passthrough { host } => host.cancel(exec_id).await,
            SandboxLink::Driver { conn, reverse, .. } => {
                let forwarded = reverse.forwarded.lock().expect("forwarded runs").contains(exec_id);
                if forwarded {
                    reverse.host.cancel(exec_id).await?;
                }
                conn.call::<_, serde_json::Value>(method::CANCEL, CancelParams { exec_id: exec_id.to_owned() }).await?;
                Ok(())
            }
        }
    }

    pub async fn destroy(&self, target: BoxRef) -> Result<()> {
        match self {
            SandboxLink::Passthrough { .. } => Ok(()),
            SandboxLink::Driver { conn, .. } => {
                conn.call::<_, serde_json::Value>(method::SANDBOX_DESTROY, target).await?;
                Ok(())
            }
        }
    }

    pub async fn inspect(&self, target: BoxRef) -> Result<InspectResult> {
        match self {
            SandboxLink::Passthrough { host } => passthrough::inspect(host, target).await,
            SandboxLink::Driver { conn, .. } => conn.call(method::SANDBOX_INSPECT, target).await,
        }
    }

    pub async fn snapshot(&self, target: BoxRef) -> Result<SnapshotId> {
        match self {
            SandboxLink::Passthrough { .. } => Err(Error::unsupported(&self.name(), "snapshot")),
            SandboxLink::Driver { conn, .. } => {
                let r: SnapshotResult = conn.call(method::SANDBOX_SNAPSHOT, target).await?;
                Ok(r.id)
            }
        }
    }

    pub fn connection(&self) -> Option<&Connection> {
        match self {
            SandboxLink::Passthrough { .. } => None,
            SandboxLink::Driver { conn, .. } => Some(conn),
        }
    }
}

/// Starts drivers on first use and keeps them for the life of the process.
pub struct Drivers {
    config: DriverConfig,
    hosts: tokio::sync::Mutex<HashMap<HostName, Arc<HostLink>>>,
    sandboxes: tokio::sync::Mutex<HashMap<(SandboxName, HostName), Arc<SandboxLink>>>,
}

impl Drivers {
    pub fn new(config: DriverConfig) -> Self {
        Drivers { config, hosts: Default::default(), sandboxes: Default::default() }
    }

    /// The host driver behind host `name`.
    pub async fn host(&self, name: &HostName) -> Result<Arc<HostLink>> {
        let mut hosts = self.hosts.lock().await;
        if let Some(h) = hosts.get(name) {
            return Ok(h.clone());
        }
        // Configured remote hosts arrive with the ssh driver; today a host's
        // name is its driver's name.
        if name.as_str() != "local" {
            return Err(Error::UnknownHost(name.to_string()));
        }
        let conn = spawn_checked(name.as_str(), Role::Host, RpcModule::new(()), &self.config).await?;
        let link = Arc::new(HostLink { name: name.clone(), conn });
        hosts.insert(name.clone(), link.clone());
        Ok(link)
    }

    /// Sandbox `name` on host `host`.
    pub async fn sandbox(&self, name: &SandboxName, host: &HostName) -> Result<Arc<SandboxLink>> {
        let key = (name.clone(), host.clone());
        // Held across the start, so concurrent callers share one driver process.
        let mut sandboxes = self.sandboxes.lock().await;
        if let Some(s) = sandboxes.get(&key) {
            return Ok(s.clone());
        }
        let host_link = self.host(host).await?;
        let link = if name.as_str() == PASSTHROUGH {
            SandboxLink::Passthrough { host: host_link }
        } else {
            let reverse = Arc::new(Reverse { host: host_link, forwarded: Mutex::new(HashSet::new()) });
            let conn =
                spawn_checked(name.as_str(), Role::Sandbox, reverse_methods(reverse.clone()), &self.config).await?;
            SandboxLink::Driver { name: name.clone(), conn, reverse }
        };
        let link = Arc::new(link);
        sandboxes.insert(key, link.clone());
        Ok(link)
    }

    pub fn config(&self) -> &DriverConfig {
        &self.config
    }

    /// Closes every driver this process started.
    pub async fn close(&self) {
        for s in self.sandboxes.lock().await.drain().map(|(_, s)| s) {
            if let Some(conn) = s.connection() {
                conn.close().await;
            }
        }
        for h in self.hosts.lock().await.drain().map(|(_, h)| h) {
            h.conn.close().await;
        }
    }
}

/// Starts driver `name` and checks its handshake says what it should.
pub async fn spawn_checked<C: Send + Sync + 'static>(
    name: &str,
    role: Role,
    methods: RpcModule<C>,
    config: &DriverConfig,
) -> Result<Connection> {
    let path = discover::find(&config.search_dirs, name)
        .ok_or_else(|| Error::DriverNotFound { name: name.to_owned(), searched: config.search_dirs.clone() })?;
    let conn = Connection::spawn(name, &path, methods, config.timeouts).await?;
    check_hello(name, role, &conn).await?;
    Ok(conn)
}

async fn check_hello(name: &str, role: Role, conn: &Connection) -> Result<()> {
    let problem =
        hello_problem(name, Some(role), &conn.hello).map(|detail| Error::Protocol { driver: name.to_owned(), detail });
    if let Some(err) = problem {
        conn.close().await;
        return Err(err);
    }
    let hello = &conn.hello;
    if !hello.health.ok {
        let detail = hello.health.detail.clone().unwrap_or_else(|| "it reports itself unhealthy".into());
        conn.close().await;
        return Err(Error::DriverUnavailable { driver: name.to_owned(), detail });
    }
    Ok(())
}

/// What is wrong with a handshake answer, if anything: a name other than
/// the executable's suffix, the wrong role (when one is expected), or a
/// sandbox whose declaration is missing or contradicts itself.
pub fn hello_problem(name: &str, role: Option<Role>, hello: &HandshakeResult) -> Option<String> {
    if hello.name != name {
        return Some(format!("its handshake calls it {:?}; a driver's name is its executable's suffix", hello.name));
    }
    if let Some(role) = role
        && hello.role != role
    {
        return Some(format!("it is a {} driver, but a {role} driver was needed", hello.role));
    }
    if hello.role == Role::Sandbox {
        return match &hello.capabilities {
            None => Some("a sandbox driver must declare its capabilities in the handshake".into()),
            Some(caps) => caps.check_consistent().err().map(|d| format!("its declaration {d}")),
        };
    }
    None
}
