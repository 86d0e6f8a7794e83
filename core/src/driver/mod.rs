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
mod reverse;

use std::collections::HashMap;
use std::sync::Arc;

use jsonrpsee::RpcModule;
use tinybox_sdk::model::{ExitStatus, Feature, HostName, SandboxCapabilities, SandboxName, SnapshotId, TtySize};
use tinybox_sdk::protocol::{
    ArchiveParams, ArchiveResult, BoxRef, CancelParams, CreateParams, CreateResult, ExecParams, HandshakeResult,
    Health, InspectResult, ResizeParams, Role, RunOnceParams, RunParams, RunResult, SnapshotExecParams, SnapshotResult,
    SnapshotRmParams, SnapshotSweepParams, SnapshotSweepResult, method,
};

pub use connection::{Connection, DriverConfig, Timeouts};
pub use passthrough::capabilities as passthrough_capabilities;
pub use reverse::Reverse;
use reverse::reverse_methods;

use crate::error::{Error, Result};
use crate::model::PASSTHROUGH;

/// A host driver, ready to run commands.
pub struct HostLink {
    pub name: HostName,
    conn: Connection,
    /// The inner host this driver's own commands go through, if any.
    reverse: Option<Arc<Reverse>>,
}

impl HostLink {
    pub async fn run(&self, params: RunParams) -> Result<ExitStatus> {
        let r: RunResult = self.conn.call_unbounded(method::HOST_RUN, params).await?;
        Ok(r.status)
    }

    /// Stops a run here, and the run it forwarded to its inner host, if any.
    pub async fn cancel(&self, exec_id: &str) -> Result<()> {
        if let Some(reverse) = &self.reverse {
            reverse.cancel_forwarded(exec_id).await?;
        }
        self.conn.call::<_, serde_json::Value>(method::CANCEL, CancelParams { exec_id: exec_id.to_owned() }).await?;
        Ok(())
    }

    /// Resizes a run's terminal here, and the run it forwarded to its inner
    /// host, if any (whichever made the terminal sets its size).
    pub async fn resize(&self, exec_id: &str, size: TtySize) -> Result<()> {
        if let Some(reverse) = &self.reverse {
            reverse.resize_forwarded(exec_id, size).await?;
        }
        let params = ResizeParams { exec_id: exec_id.to_owned(), size };
        self.conn.call::<_, serde_json::Value>(method::EXEC_RESIZE, params).await?;
        Ok(())
    }

    pub fn connection(&self) -> &Connection {
        &self.conn
    }

    /// How this host's session ended, or that of the inner host it runs
    /// through; `None` while both answer.
    fn ended(&self) -> Option<String> {
        let inner = || self.reverse.as_ref().and_then(|r| r.current_host()).and_then(|h| h.ended());
        self.conn.ended().map(|how| session_ended(&self.conn, &how)).or_else(inner)
    }
}

/// "driver N (pid P) HOW", for the line that says a session is replaced.
fn session_ended(conn: &Connection, how: &str) -> String {
    let pid = conn.pid().map(|p| format!(" (pid {p})")).unwrap_or_default();
    format!("driver {}{pid} ended ({how})", conn.name())
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
            SandboxLink::Passthrough { .. } => SandboxName::passthrough(),
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

    /// Runs a read-only command from a snapshot, for a sandbox declaring
    /// `snapshot_exec` (core's gate checks before this is called).
    pub async fn snapshot_exec(&self, params: SnapshotExecParams) -> Result<ExitStatus> {
        match self {
            SandboxLink::Driver { conn, .. } if self.capabilities().has(&Feature::SnapshotExec) => {
                let r: RunResult = conn.call_unbounded(method::SANDBOX_SNAPSHOT_EXEC, params).await?;
                Ok(r.status)
            }
            _ => Err(Error::unsupported(&self.name(), crate::error::Capability::SnapshotExec)),
        }
    }

    /// Moves a tar into or out of a running box the sandbox's own way, for
    /// a sandbox declaring `archive` (core's copy checks
    /// before this is called). Unbounded like an exec: its length is the
    /// copy's.
    pub async fn archive(&self, params: ArchiveParams) -> Result<ArchiveResult> {
        match self {
            SandboxLink::Driver { conn, .. } if self.capabilities().has(&Feature::Archive) => {
                conn.call_unbounded(method::SANDBOX_ARCHIVE, params).await
            }
            _ => Err(Error::unsupported(&self.name(), crate::error::Capability::Archive)),
        }
    }

    /// Makes a box, runs one command in it and removes it, for a sandbox
    /// declaring `run_once` (core checks before this is called). Unbounded
    /// like an exec.
    pub async fn run_once(&self, params: RunOnceParams) -> Result<ExitStatus> {
        match self {
            SandboxLink::Driver { conn, .. } if self.capabilities().has(&Feature::RunOnce) => {
                let r: RunResult = conn.call_unbounded(method::SANDBOX_RUN_ONCE, params).await?;
                Ok(r.status)
            }
            _ => Err(Error::unsupported(&self.name(), crate::error::Capability::RunOnce)),
        }
    }

    /// Stops a running exec: tells the sandbox, and the host for any of the
    /// exec's runs the sandbox forwarded there.
    pub async fn cancel(&self, exec_id: &str) -> Result<()> {
        match self {
            SandboxLink::Passthrough { host } => host.cancel(exec_id).await,
            SandboxLink::Driver { conn, reverse, .. } => {
                reverse.cancel_forwarded(exec_id).await?;
                conn.call::<_, serde_json::Value>(method::CANCEL, CancelParams { exec_id: exec_id.to_owned() }).await?;
                Ok(())
            }
        }
    }

    /// Resizes an exec's terminal: in the sandbox, and on the host for the
    /// exec's runs the sandbox forwarded there.
    pub async fn resize(&self, exec_id: &str, size: TtySize) -> Result<()> {
        match self {
            SandboxLink::Passthrough { host } => host.resize(exec_id, size).await,
            SandboxLink::Driver { conn, reverse, .. } => {
                reverse.resize_forwarded(exec_id, size).await?;
                let params = ResizeParams { exec_id: exec_id.to_owned(), size };
                conn.call::<_, serde_json::Value>(method::EXEC_RESIZE, params).await?;
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
            SandboxLink::Passthrough { .. } => {
                Err(Error::unsupported(&self.name(), crate::error::Capability::Snapshot))
            }
            SandboxLink::Driver { conn, .. } => {
                let r: SnapshotResult = conn.call(method::SANDBOX_SNAPSHOT, target).await?;
                Ok(r.id)
            }
        }
    }

    /// Deletes a snapshot the sandbox took; passthrough takes none.
    pub async fn snapshot_rm(&self, params: SnapshotRmParams) -> Result<()> {
        match self {
            SandboxLink::Passthrough { .. } => {
                Err(Error::unsupported(&self.name(), crate::error::Capability::Snapshot))
            }
            SandboxLink::Driver { conn, .. } => {
                conn.call::<_, serde_json::Value>(method::SANDBOX_SNAPSHOT_RM, params).await?;
                Ok(())
            }
        }
    }

    /// Removes the snapshots of one box the store does not keep (an
    /// interrupted snapshot's among them). A sandbox that does not declare
    /// `snapshot_sweep` is not asked: it leaves nothing it could find.
    pub async fn snapshot_sweep(&self, params: SnapshotSweepParams) -> Result<SnapshotSweepResult> {
        match self {
            SandboxLink::Driver { conn, .. } if self.capabilities().has(&Feature::SnapshotSweep) => {
                conn.call(method::SANDBOX_SNAPSHOT_SWEEP, params).await
            }
            _ => Ok(SnapshotSweepResult::default()),
        }
    }

    /// How this session ended, or that of the host it runs on; `None`
    /// while both answer.
    fn ended(&self) -> Option<String> {
        match self {
            SandboxLink::Passthrough { host } => host.ended(),
            SandboxLink::Driver { conn, reverse, .. } => conn
                .ended()
                .map(|how| session_ended(conn, &how))
                .or_else(|| reverse.current_host().and_then(|h| h.ended())),
        }
    }

    pub fn connection(&self) -> Option<&Connection> {
        match self {
            SandboxLink::Passthrough { .. } => None,
            SandboxLink::Driver { conn, .. } => Some(conn),
        }
    }
}

/// Where `Drivers` says that it replaced a dead session.
type Notice = Box<dyn Fn(&str) + Send + Sync>;

/// Starts drivers on first use and keeps them for the life of the process.
pub struct Drivers {
    config: DriverConfig,
    /// The hosts that can be named: the configuration's, plus any a request
    /// saved since (an `ssh:DEST` host).
    table: std::sync::RwLock<crate::hosts::HostTable>,
    hosts: tokio::sync::Mutex<HashMap<HostName, Arc<HostLink>>>,
    sandboxes: tokio::sync::Mutex<HashMap<(SandboxName, HostName), Arc<SandboxLink>>>,
    /// Told when a session found dead is replaced (the daemon logs it).
    notice: std::sync::OnceLock<Notice>,
}

impl Drivers {
    pub fn new(config: DriverConfig) -> Self {
        let table = std::sync::RwLock::new(config.hosts.clone());
        Drivers {
            config,
            table,
            hosts: Default::default(),
            sandboxes: Default::default(),
            notice: std::sync::OnceLock::new(),
        }
    }

    /// How host `name` is reached, if it is known.
    pub fn host_entry(&self, name: &HostName) -> Option<crate::hosts::HostEntry> {
        self.table.read().unwrap_or_else(|p| p.into_inner()).get(name).cloned()
    }

    /// Makes hosts saved after this engine was opened reachable.
    pub fn add_hosts(&self, entries: impl IntoIterator<Item = (HostName, crate::hosts::HostEntry)>) {
        self.table.write().unwrap_or_else(|p| p.into_inner()).extend(entries);
    }

    /// The host driver behind host `name`, with its inner hosts started first.
    pub async fn host(&self, name: &HostName) -> Result<Arc<HostLink>> {
        self.host_via(name, &mut Vec::new()).await
    }

    async fn host_via(&self, name: &HostName, chain: &mut Vec<HostName>) -> Result<Arc<HostLink>> {
        {
            let mut hosts = self.hosts.lock().await;
            if let Some(h) = hosts.get(name) {
                // A session that died stays dead: drop it and start another
                // (docs/adr/0038-dead-driver-sessions.md).
                match h.ended() {
                    None => return Ok(h.clone()),
                    Some(why) => {
                        self.tell(&format!("host {name}: {why}; a new session serves the next request"));
                        hosts.remove(name);
                    }
                }
            }
        }
        let entry = self.host_entry(name).ok_or_else(|| Error::UnknownHost {
            name: name.to_string(),
            known: self.table.read().unwrap_or_else(|p| p.into_inner()).keys().map(|h| h.to_string()).collect(),
        })?;
        if chain.contains(name) {
            chain.push(name.clone());
            let path: Vec<String> = chain.iter().map(|h| h.to_string()).collect();
            return Err(crate::error::HostError::Loop(path).into());
        }
        chain.push(name.clone());
        let (methods, reverse) = if entry.driver == crate::hosts::LOCAL {
            (RpcModule::new(None), None)
        } else {
            let inner_name = entry.inner.clone().unwrap_or_else(HostName::local);
            let inner = Box::pin(self.host_via(&inner_name, chain)).await?;
            let reverse = Reverse::new(inner);
            (reverse_methods(Some(reverse.clone())), Some(reverse))
        };
        let conn =
            spawn_checked(&entry.driver, Role::Host, methods, &self.config, entry.config.clone(), Vec::new()).await?;
        if let Some(reverse) = &reverse {
            reverse.set_session(conn.closed_signal());
        }
        let link = Arc::new(HostLink { name: name.clone(), conn, reverse });
        self.hosts.lock().await.insert(name.clone(), link.clone());
        Ok(link)
    }

    /// Sandbox `name` on host `host`.
    pub async fn sandbox(&self, name: &SandboxName, host: &HostName) -> Result<Arc<SandboxLink>> {
        let key = (name.clone(), host.clone());
        // Held across the start, so concurrent callers share one driver process.
        let mut sandboxes = self.sandboxes.lock().await;
        if let Some(s) = sandboxes.get(&key) {
            match s.ended() {
                None => return Ok(s.clone()),
                Some(why) => {
                    self.tell(&format!("sandbox {name} on host {host}: {why}; a new session serves the next request"));
                    sandboxes.remove(&key);
                }
            }
        }
        let link = if name.as_str() == PASSTHROUGH {
            SandboxLink::Passthrough { host: self.host(host).await? }
        } else {
            // Start the sandbox driver and its host at once: each costs a
            // process start and a handshake, on every CLI command.
            let reverse = Reverse::pending();
            let methods = reverse_methods(Some(reverse.clone()));
            // A sandbox's declaration may depend on where its boxes run (a
            // cgroup writable here may not be over there): a driver serving
            // another machine is told so. This machine needs no word, so a
            // listing's handshake and a local box's describe the same thing.
            let remote = self.host_entry(host).is_some_and(|e| e.driver != crate::hosts::LOCAL);
            let config =
                if remote { serde_json::json!({ "host": { "remote": true } }) } else { serde_json::Value::Null };
            // The sandbox is chosen (by the request, or by the choice that
            // read a listing's health): a failure shows in the call that
            // meets it, so the driver need not spend its probes on health.
            let features = vec![tinybox_sdk::protocol::core_feature::HEALTH_NOT_READ.to_owned()];
            let (host_link, conn) = tokio::join!(
                self.host(host),
                spawn_checked(name.as_str(), Role::Sandbox, methods, &self.config, config, features)
            );
            let conn = conn?;
            // Before the host is set, which every reverse call waits for.
            reverse.set_session(conn.closed_signal());
            match host_link {
                Ok(h) => reverse.set_host(h),
                Err(e) => {
                    conn.close().await;
                    return Err(e);
                }
            }
            SandboxLink::Driver { name: name.clone(), conn, reverse }
        };
        let link = Arc::new(link);
        sandboxes.insert(key, link.clone());
        Ok(link)
    }

    pub fn config(&self) -> &DriverConfig {
        &self.config
    }

    /// Where to say that a dead session was replaced; the first setting
    /// holds. Unset, it is said nowhere (a CLI command ends with its error).
    pub fn on_notice(&self, notice: impl Fn(&str) + Send + Sync + 'static) {
        let _ = self.notice.set(Box::new(notice));
    }

    fn tell(&self, line: &str) {
        if let Some(notice) = self.notice.get() {
            notice(line);
        }
    }

    /// Closes every driver this process started.
    /// All at once: each close waits for its driver to exit, on every command.
    pub async fn close(&self) {
        let sandboxes: Vec<_> = self.sandboxes.lock().await.drain().map(|(_, s)| s).collect();
        let hosts: Vec<_> = self.hosts.lock().await.drain().map(|(_, h)| h).collect();
        let closing = sandboxes
            .iter()
            .filter_map(|s| s.connection())
            .chain(hosts.iter().map(|h| &h.conn))
            .map(|conn| conn.close());
        futures_util::future::join_all(closing).await;
    }
}

/// Starts driver `name` and checks its handshake says what it should.
pub async fn spawn_checked<C: Send + Sync + 'static>(
    name: &str,
    role: Role,
    methods: RpcModule<C>,
    config: &DriverConfig,
    driver_config: serde_json::Value,
    features: Vec<String>,
) -> Result<Connection> {
    let path = discover::find(&config.search_dirs, name)
        .ok_or_else(|| Error::DriverNotFound { name: name.to_owned(), searched: config.search_dirs.clone() })?;
    let state_dir = config.driver_state_dir(name);
    let conn = Connection::spawn(name, &path, methods, config.timeouts, driver_config, state_dir, features).await?;
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

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    /// Installs `tinybox-driver-<name>` in `dir`: a host driver in sh that
    /// saves core's first message to `<dir>/handshake.json`, answers it,
    /// and waits for end of file.
    fn install_recording_host(dir: &std::path::Path, name: &str) {
        let answer = serde_json::json!({"jsonrpc": "2.0", "id": 0, "result": {
            "name": name, "version": "0", "protocol": tinybox_sdk::protocol::PROTOCOL_VERSION,
            "role": "host", "health": {"ok": true}}});
        let script = format!(
            "#!/bin/sh\nIFS= read -r line\nprintf '%s\\n' \"$line\" > '{}'\nprintf '%s\\n' '{answer}'\ncat > /dev/null\n",
            dir.join("handshake.json").display()
        );
        let path = dir.join(format!("{}{name}", discover::PREFIX));
        std::fs::write(&path, script).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    fn handshake_params(dir: &std::path::Path) -> tinybox_sdk::protocol::HandshakeParams {
        let line = std::fs::read_to_string(dir.join("handshake.json")).unwrap();
        let msg: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(msg["method"], method::HANDSHAKE);
        serde_json::from_value(msg["params"].clone()).unwrap()
    }

    #[tokio::test]
    async fn a_driver_is_sent_its_state_dir_made_before_the_handshake() {
        let bin = tempfile::tempdir().unwrap();
        let store = tempfile::tempdir().unwrap();
        install_recording_host(bin.path(), "recorder");
        let config = DriverConfig {
            search_dirs: vec![bin.path().to_path_buf()],
            state_dir: Some(store.path().join("drivers")),
            ..DriverConfig::from_env()
        };
        let conn =
            spawn_checked("recorder", Role::Host, RpcModule::new(()), &config, serde_json::Value::Null, Vec::new())
                .await
                .unwrap();
        conn.close().await;
        let expected = store.path().join("drivers").join("recorder");
        assert_eq!(handshake_params(bin.path()).state_dir, Some(expected.clone()));
        assert!(expected.is_dir());
        assert_eq!(std::fs::metadata(&expected).unwrap().permissions().mode() & 0o777, 0o700);
    }

    #[tokio::test]
    async fn without_a_state_dir_the_handshake_names_none() {
        let bin = tempfile::tempdir().unwrap();
        install_recording_host(bin.path(), "recorder");
        let config = DriverConfig { search_dirs: vec![bin.path().to_path_buf()], ..DriverConfig::from_env() };
        let conn =
            spawn_checked("recorder", Role::Host, RpcModule::new(()), &config, serde_json::Value::Null, Vec::new())
                .await
                .unwrap();
        conn.close().await;
        assert_eq!(handshake_params(bin.path()).state_dir, None);
        let line = std::fs::read_to_string(bin.path().join("handshake.json")).unwrap();
        assert!(!line.contains("state_dir"), "an absent state dir is left out: {line}");
    }
}
