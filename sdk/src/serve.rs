//! The driver side: implement [`HostDriver`] or [`SandboxDriver`] and call
//! [`serve_host`] / [`serve_sandbox`] (or [`run_host_main`] /
//! [`run_sandbox_main`] from `main`). The loop speaks the protocol on
//! stdin/stdout, refuses every call before the handshake, refuses an
//! incompatible core, and tells the driver when core has gone away.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use jsonrpsee::RpcModule;
use jsonrpsee::types::{ErrorObjectOwned, Params};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::model::{ExitStatus, SandboxCapabilities, SnapshotId, TtySize};
use crate::peer::{CallError, Peer, PeerOptions};
use crate::protocol::{
    ArchiveParams, ArchiveResult, BoxRef, CancelParams, CreateParams, CreateResult, DriverError, ErrorCode, ExecParams,
    HandshakeParams, HandshakeResult, Health, InspectResult, ResizeParams, Role, RunOnceParams, RunParams, RunResult,
    SnapshotExecParams, SnapshotResult, SnapshotRmParams, SnapshotSweepParams, SnapshotSweepResult, method, version,
};

/// Who a driver is, as its handshake says.
#[derive(Debug, Clone)]
pub struct DriverInfo {
    pub name: String,
    pub version: String,
    pub health: Health,
}

/// A host backend: where commands run. A host may itself reach its machine
/// through an inner host (ssh runs `ssh` on its inner host, which is how a
/// jump box works with no code that knows what a jump box is); `inner` is
/// that host, and its `run` fails for a host configured without one.
#[async_trait]
pub trait HostDriver: Send + Sync + 'static {
    fn info(&self) -> DriverInfo;
    /// Runs `params.argv` to completion with the descriptors `params.stdio` names.
    async fn run(&self, inner: &HostHandle, params: RunParams) -> Result<ExitStatus, DriverError>;
    /// Stops the run named `exec_id`, if it is still going.
    async fn cancel(&self, exec_id: &str) -> Result<(), DriverError>;
    /// The terminal of the run named `exec_id` has a new size. The default,
    /// for a host that makes no terminals, does nothing.
    async fn resize(&self, _exec_id: &str, _size: TtySize) -> Result<(), DriverError> {
        Ok(())
    }
    /// Core has gone away: stop whatever is still running.
    async fn shutdown(&self) {}
}

/// A sandbox backend: what confines commands. It reaches its host only
/// through the [`HostHandle`], so it composes with any host.
#[async_trait]
pub trait SandboxDriver: Send + Sync + 'static {
    /// Called once in the handshake, before `info` and `capabilities`,
    /// with the handle whose `config()` and `state_dir()` are now set: a
    /// driver whose health or declaration depends on them keeps it here.
    fn configure(&self, _host: &HostHandle) {}
    fn info(&self) -> DriverInfo;
    /// The declaration core enforces. Declare only what you really deliver.
    fn capabilities(&self) -> SandboxCapabilities;
    async fn create(&self, host: &HostHandle, params: CreateParams) -> Result<CreateResult, DriverError>;
    async fn exec(&self, host: &HostHandle, params: ExecParams) -> Result<ExitStatus, DriverError>;
    async fn destroy(&self, host: &HostHandle, target: BoxRef) -> Result<(), DriverError>;
    async fn inspect(&self, host: &HostHandle, target: BoxRef) -> Result<InspectResult, DriverError>;
    async fn snapshot(&self, _host: &HostHandle, _target: BoxRef) -> Result<SnapshotId, DriverError> {
        Err(DriverError::unsupported("this sandbox takes no snapshots"))
    }
    /// Deletes a snapshot [`SandboxDriver::snapshot`] took. The default, for
    /// a driver that takes none or cannot delete them, answers unsupported.
    async fn snapshot_rm(&self, _host: &HostHandle, _params: SnapshotRmParams) -> Result<(), DriverError> {
        Err(DriverError::unsupported("this sandbox removes no snapshots"))
    }
    /// Deletes the snapshots of one box that core's `keep` does not name
    /// (`SnapshotSweepParams`). A driver declaring `snapshot_sweep`
    /// implements it; the default answers unsupported.
    async fn snapshot_sweep(
        &self,
        _host: &HostHandle,
        _params: SnapshotSweepParams,
    ) -> Result<SnapshotSweepResult, DriverError> {
        Err(DriverError::unsupported("this sandbox sweeps no snapshots"))
    }
    /// Runs a read-only command from a snapshot (`SnapshotExecParams`). A
    /// driver declaring `snapshot_exec` implements it; the default answers
    /// unsupported.
    async fn snapshot_exec(&self, _host: &HostHandle, _params: SnapshotExecParams) -> Result<ExitStatus, DriverError> {
        Err(DriverError::unsupported("this sandbox runs nothing from a snapshot"))
    }
    /// Makes a box, runs one command in it and removes it, as one step
    /// (`RunOnceParams`). A driver declaring `run_once` implements it; the
    /// default answers unsupported.
    async fn run_once(&self, _host: &HostHandle, _params: RunOnceParams) -> Result<ExitStatus, DriverError> {
        Err(DriverError::unsupported("this sandbox makes no box for one command"))
    }
    /// Moves a tar into or out of a running box its own way
    /// (`ArchiveParams`). A driver declaring `archive` implements
    /// it; the default answers unsupported.
    async fn archive(&self, _host: &HostHandle, _params: ArchiveParams) -> Result<ArchiveResult, DriverError> {
        Err(DriverError::unsupported("this sandbox has no archive path of its own"))
    }
    /// Stops an exec. Runs forwarded to the host through `host.run` with the
    /// same `exec_id` are cancelled by core itself.
    async fn cancel(&self, _host: &HostHandle, _exec_id: &str) -> Result<(), DriverError> {
        Ok(())
    }
    /// The terminal of an exec has a new size. Runs forwarded to the host
    /// with the same `exec_id` are resized by core itself; a sandbox that
    /// makes its own terminal (in a guest, say) sets its size here.
    async fn resize(&self, _host: &HostHandle, _exec_id: &str, _size: TtySize) -> Result<(), DriverError> {
        Ok(())
    }
    async fn shutdown(&self) {}
}

/// A driver's way back to the host beneath it: `host.run` calls into core,
/// which forwards them to whatever host the placement (for a sandbox) or
/// the configuration (for a host's inner host) names. It also holds the
/// configuration and the state directory core sent in the handshake.
#[derive(Clone)]
pub struct HostHandle {
    peer: Arc<OnceLock<Peer>>,
    config: Arc<OnceLock<serde_json::Value>>,
    state_dir: Arc<OnceLock<Option<PathBuf>>>,
    core_features: Arc<OnceLock<Vec<String>>>,
}

impl HostHandle {
    fn new() -> Self {
        HostHandle {
            peer: Arc::new(OnceLock::new()),
            config: Arc::new(OnceLock::new()),
            state_dir: Arc::default(),
            core_features: Arc::default(),
        }
    }

    /// The driver-specific configuration from the handshake (`null` if none).
    pub fn config(&self) -> &serde_json::Value {
        static NULL: serde_json::Value = serde_json::Value::Null;
        self.config.get().unwrap_or(&NULL)
    }

    /// The directory core gave this driver in the handshake for persistent
    /// files (caches, runtime files of detached processes), private to this
    /// store and this driver; `None` when core gave none (or before the
    /// handshake). Set before `info()` and `capabilities()` are asked for.
    pub fn state_dir(&self) -> Option<&Path> {
        self.state_dir.get().and_then(|d| d.as_deref())
    }

    /// Whether core's handshake named `feature` (a
    /// [`core_feature`](crate::protocol::core_feature)); set before
    /// `info()` and `capabilities()` are asked for.
    pub fn core_has(&self, feature: &str) -> bool {
        self.core_features.get().is_some_and(|f| f.iter().any(|x| x == feature))
    }

    pub async fn run(&self, params: RunParams) -> Result<ExitStatus, DriverError> {
        let peer = self.peer.get().ok_or_else(|| DriverError::failed("no connection to core yet"))?;
        let result: RunResult = peer.call(method::HOST_RUN, params).await.map_err(|e| match e {
            CallError::Remote(err) => err,
            other => DriverError::failed(format!("host.run: {other}")),
        })?;
        Ok(result.status)
    }
}

/// The host beneath a driver, as the driver's own logic sees it: somewhere
/// to run one command (`host.run`). [`HostHandle`] is the real one; with the
/// sdk's `testing` feature, [`FakeHost`](crate::testing::FakeHost) scripts
/// answers and records every call. A driver whose logic takes `&dyn Host`
/// (and leaves [`HostHandle::config`] to its trait methods) is unit-tested
/// without core, a host driver, or the commands it sends.
#[async_trait]
pub trait Host: Send + Sync {
    /// Runs `params.argv` to completion with the descriptors `params.stdio` names.
    async fn run(&self, params: RunParams) -> Result<ExitStatus, DriverError>;
}

#[async_trait]
impl Host for HostHandle {
    async fn run(&self, params: RunParams) -> Result<ExitStatus, DriverError> {
        HostHandle::run(self, params).await
    }
}

struct State<D: ?Sized> {
    driver: Arc<D>,
    role: Role,
    handshaken: AtomicBool,
    host: HostHandle,
}

fn refuse_before_handshake<D: ?Sized>(state: &State<D>) -> Result<(), ErrorObjectOwned> {
    if state.handshaken.load(Ordering::SeqCst) {
        Ok(())
    } else {
        Err(DriverError::new(ErrorCode::Handshake, "call handshake before any other method").into())
    }
}

fn parse<T: DeserializeOwned>(params: &Params<'_>) -> Result<T, ErrorObjectOwned> {
    params.parse::<T>()
}

/// Answers the handshake. `describe` runs after the configuration and the
/// state directory are stored, so a driver's health and declaration may
/// depend on them.
fn handshake<D: ?Sized>(
    state: &State<D>,
    params: &Params<'_>,
    describe: impl FnOnce() -> (DriverInfo, Option<SandboxCapabilities>),
) -> Result<HandshakeResult, ErrorObjectOwned> {
    let p: HandshakeParams = parse(params)?;
    let ours = version::protocol_version();
    if !version::compatible(&ours, &p.protocol) {
        return Err(DriverError::new(
            ErrorCode::Handshake,
            format!("core speaks protocol {}, this driver speaks {ours}; they are not compatible", p.protocol),
        )
        .into());
    }
    let _ = state.host.config.set(p.config);
    let _ = state.host.state_dir.set(p.state_dir);
    let _ = state.host.core_features.set(p.features);
    let (info, capabilities) = describe();
    state.handshaken.store(true, Ordering::SeqCst);
    Ok(HandshakeResult {
        name: info.name,
        version: info.version,
        protocol: ours,
        role: state.role,
        health: info.health,
        capabilities,
        features: Vec::new(),
    })
}

fn ok<T: Serialize>(v: Result<T, DriverError>) -> Result<T, ErrorObjectOwned> {
    v.map_err(Into::into)
}

/// Serves a host driver on stdin/stdout until core closes the connection.
pub async fn serve_host<D: HostDriver>(driver: D) -> std::io::Result<()> {
    let driver = Arc::new(driver);
    let host = HostHandle::new();
    let host_slot = host.peer.clone();
    let state = State { driver: driver.clone(), role: Role::Host, handshaken: AtomicBool::new(false), host };
    let mut module = RpcModule::new(state);
    module
        .register_method(method::HANDSHAKE, |params, s, _| handshake(s, &params, || (s.driver.info(), None)))
        .expect("unique method");
    module
        .register_async_method(method::HOST_RUN, |params, s, _| async move {
            refuse_before_handshake(&s)?;
            let p: RunParams = parse(&params)?;
            ok(s.driver.run(&s.host, p).await.map(|status| RunResult { status }))
        })
        .expect("unique method");
    module
        .register_async_method(method::CANCEL, |params, s, _| async move {
            refuse_before_handshake(&s)?;
            let p: CancelParams = parse(&params)?;
            ok(s.driver.cancel(&p.exec_id).await)
        })
        .expect("unique method");
    module
        .register_async_method(method::EXEC_RESIZE, |params, s, _| async move {
            refuse_before_handshake(&s)?;
            let p: ResizeParams = parse(&params)?;
            ok(s.driver.resize(&p.exec_id, p.size).await)
        })
        .expect("unique method");
    run_loop(module, move |peer| {
        let _ = host_slot.set(peer);
    })
    .await;
    driver.shutdown().await;
    Ok(())
}

/// Serves a sandbox driver on stdin/stdout until core closes the connection.
pub async fn serve_sandbox<D: SandboxDriver>(driver: D) -> std::io::Result<()> {
    let driver = Arc::new(driver);
    let host = HostHandle::new();
    let state = State { driver: driver.clone(), role: Role::Sandbox, handshaken: AtomicBool::new(false), host };
    let host_slot = state.host.peer.clone();
    let mut module = RpcModule::new(state);
    module
        .register_method(method::HANDSHAKE, |params, s, _| {
            handshake(s, &params, || {
                s.driver.configure(&s.host);
                (s.driver.info(), Some(s.driver.capabilities()))
            })
        })
        .expect("unique method");
    module
        .register_async_method(method::SANDBOX_CREATE, |params, s, _| async move {
            refuse_before_handshake(&s)?;
            let p: CreateParams = parse(&params)?;
            ok(s.driver.create(&s.host, p).await)
        })
        .expect("unique method");
    module
        .register_async_method(method::SANDBOX_EXEC, |params, s, _| async move {
            refuse_before_handshake(&s)?;
            let p: ExecParams = parse(&params)?;
            ok(s.driver.exec(&s.host, p).await.map(|status| RunResult { status }))
        })
        .expect("unique method");
    module
        .register_async_method(method::SANDBOX_DESTROY, |params, s, _| async move {
            refuse_before_handshake(&s)?;
            let p: BoxRef = parse(&params)?;
            ok(s.driver.destroy(&s.host, p).await)
        })
        .expect("unique method");
    module
        .register_async_method(method::SANDBOX_INSPECT, |params, s, _| async move {
            refuse_before_handshake(&s)?;
            let p: BoxRef = parse(&params)?;
            ok(s.driver.inspect(&s.host, p).await)
        })
        .expect("unique method");
    module
        .register_async_method(method::SANDBOX_SNAPSHOT, |params, s, _| async move {
            refuse_before_handshake(&s)?;
            let p: BoxRef = parse(&params)?;
            ok(s.driver.snapshot(&s.host, p).await.map(|id| SnapshotResult { id }))
        })
        .expect("unique method");
    module
        .register_async_method(method::SANDBOX_SNAPSHOT_RM, |params, s, _| async move {
            refuse_before_handshake(&s)?;
            let p: SnapshotRmParams = parse(&params)?;
            ok(s.driver.snapshot_rm(&s.host, p).await)
        })
        .expect("unique method");
    module
        .register_async_method(method::SANDBOX_SNAPSHOT_EXEC, |params, s, _| async move {
            refuse_before_handshake(&s)?;
            let p: SnapshotExecParams = parse(&params)?;
            ok(s.driver.snapshot_exec(&s.host, p).await.map(|status| RunResult { status }))
        })
        .expect("unique method");
    module
        .register_async_method(method::SANDBOX_ARCHIVE, |params, s, _| async move {
            refuse_before_handshake(&s)?;
            let p: ArchiveParams = parse(&params)?;
            ok(s.driver.archive(&s.host, p).await)
        })
        .expect("unique method");
    module
        .register_async_method(method::SANDBOX_RUN_ONCE, |params, s, _| async move {
            refuse_before_handshake(&s)?;
            let p: RunOnceParams = parse(&params)?;
            ok(s.driver.run_once(&s.host, p).await.map(|status| RunResult { status }))
        })
        .expect("unique method");
    module
        .register_async_method(method::SANDBOX_SNAPSHOT_SWEEP, |params, s, _| async move {
            refuse_before_handshake(&s)?;
            let p: SnapshotSweepParams = parse(&params)?;
            ok(s.driver.snapshot_sweep(&s.host, p).await)
        })
        .expect("unique method");
    module
        .register_async_method(method::CANCEL, |params, s, _| async move {
            refuse_before_handshake(&s)?;
            let p: CancelParams = parse(&params)?;
            ok(s.driver.cancel(&s.host, &p.exec_id).await)
        })
        .expect("unique method");
    module
        .register_async_method(method::EXEC_RESIZE, |params, s, _| async move {
            refuse_before_handshake(&s)?;
            let p: ResizeParams = parse(&params)?;
            ok(s.driver.resize(&s.host, &p.exec_id, p.size).await)
        })
        .expect("unique method");
    run_loop(module, move |peer| {
        let _ = host_slot.set(peer);
    })
    .await;
    driver.shutdown().await;
    Ok(())
}

async fn run_loop<C: Send + Sync + 'static>(module: RpcModule<C>, on_peer: impl FnOnce(Peer)) {
    // Ctrl-C at a terminal signals the whole foreground group, this driver
    // included; core decides what a cancellation means, so ignore it here.
    if let Ok(mut sigint) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt()) {
        tokio::spawn(async move { while sigint.recv().await.is_some() {} });
    }
    let peer =
        Peer::start(tokio::io::stdin(), tokio::io::stdout(), module, PeerOptions { expect_response_first: false });
    on_peer(peer.clone());
    peer.closed().await;
}

fn main_with<F>(serve: F) -> !
where
    F: std::future::Future<Output = std::io::Result<()>>,
{
    crate::process::seal_inherited_fds();
    // One connection, mostly waiting: a single-threaded runtime starts faster,
    // and every tinybox command starts each driver it uses.
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio runtime");
    let code = match runtime.block_on(serve) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("driver failed: {e}");
            1
        }
    };
    runtime.shutdown_timeout(std::time::Duration::from_millis(100));
    std::process::exit(code)
}

/// `main` for a host driver binary.
pub fn run_host_main<D: HostDriver>(driver: D) -> ! {
    main_with(serve_host(driver))
}

/// `main` for a sandbox driver binary.
pub fn run_sandbox_main<D: SandboxDriver>(driver: D) -> ! {
    main_with(serve_sandbox(driver))
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Nothing;

    #[async_trait]
    impl HostDriver for Nothing {
        fn info(&self) -> DriverInfo {
            DriverInfo { name: "nothing".into(), version: "0".into(), health: Health::ok() }
        }
        async fn run(&self, _inner: &HostHandle, _params: RunParams) -> Result<ExitStatus, DriverError> {
            Err(DriverError::unsupported("runs nothing"))
        }
        async fn cancel(&self, _exec_id: &str) -> Result<(), DriverError> {
            Ok(())
        }
    }

    fn state() -> State<Nothing> {
        State {
            driver: Arc::new(Nothing),
            role: Role::Host,
            handshaken: AtomicBool::new(false),
            host: HostHandle::new(),
        }
    }

    /// Answers `params` as the serve loop would, returning what `describe`
    /// saw of the state directory.
    fn handshake_seeing(state: &State<Nothing>, params: serde_json::Value) -> Option<PathBuf> {
        let text = params.to_string();
        let mut seen = None;
        handshake(state, &Params::new(Some(&text)), || {
            seen = state.host.state_dir().map(Path::to_path_buf);
            (state.driver.info(), None)
        })
        .expect("a compatible handshake is answered");
        seen
    }

    #[test]
    fn the_state_dir_is_stored_before_the_driver_describes_itself() {
        let s = state();
        assert_eq!(s.host.state_dir(), None, "nothing before the handshake");
        let seen = handshake_seeing(
            &s,
            serde_json::json!({"protocol": version::PROTOCOL_VERSION, "core_version": "0.1.0",
                               "state_dir": "/store/drivers/nothing"}),
        );
        assert_eq!(seen.as_deref(), Some(Path::new("/store/drivers/nothing")));
        assert_eq!(s.host.state_dir(), Some(Path::new("/store/drivers/nothing")));
        // Every clone of the handle (each call gets one) sees it.
        assert_eq!(s.host.clone().state_dir(), Some(Path::new("/store/drivers/nothing")));
    }

    #[test]
    fn without_a_state_dir_there_is_none() {
        let s = state();
        let seen =
            handshake_seeing(&s, serde_json::json!({"protocol": version::PROTOCOL_VERSION, "core_version": "0.1.0"}));
        assert_eq!(seen, None);
        assert_eq!(s.host.state_dir(), None);
        assert!(s.handshaken.load(Ordering::SeqCst));
    }
}
