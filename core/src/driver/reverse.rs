//! A driver's reverse calls (`host.run`), routed to the host beneath it,
//! and the runs so forwarded ended when the session that asked for them
//! dies (docs/adr/0038-dead-driver-sessions.md).
//!
//! A sandbox driver starts its commands through `host.run` on core, which
//! forwards each to the host driver. Were the sandbox driver killed, the
//! host would go on running what it asked for — nobody left to read its
//! end or to stop it — for as long as the host lives: in a daemon, until
//! the daemon stops. So each forwarded run watches the connection of the
//! session that asked, and is cancelled on the host when it closes.

use std::sync::{Arc, OnceLock};

use jsonrpsee::RpcModule;
use tinybox_sdk::model::TtySize;
use tinybox_sdk::protocol::{DriverError, ErrorCode, RunParams, RunResult, method};
use tokio::sync::watch;

use super::HostLink;
use crate::error::{Error, Result};

/// What a driver's reverse calls can reach: a sandbox's host, or a host's
/// inner host. The host may still be starting when the driver is (both start
/// at once); a reverse call waits for it.
pub struct Reverse {
    host: watch::Sender<Option<Arc<HostLink>>>,
    /// The asking driver's connection, closed when its session has ended.
    session: OnceLock<watch::Receiver<bool>>,
}

impl Reverse {
    pub(super) fn pending() -> Arc<Reverse> {
        Arc::new(Reverse { host: watch::Sender::new(None), session: OnceLock::new() })
    }

    pub(super) fn new(host: Arc<HostLink>) -> Arc<Reverse> {
        let r = Reverse::pending();
        r.set_host(host);
        r
    }

    pub(super) fn set_host(&self, host: Arc<HostLink>) {
        self.host.send_replace(Some(host));
    }

    /// Names the session whose calls these are: its runs end with it. Set
    /// once its connection exists, before anything is asked of it.
    pub(super) fn set_session(&self, closed: watch::Receiver<bool>) {
        let _ = self.session.set(closed);
    }

    /// The host beneath, once it is known.
    pub(super) fn current_host(&self) -> Option<Arc<HostLink>> {
        self.host.borrow().clone()
    }

    async fn host(&self) -> Arc<HostLink> {
        let mut rx = self.host.subscribe();
        let ready = rx.wait_for(Option::is_some).await.expect("the sender lives in self");
        ready.clone().expect("waited for Some")
    }

    /// Resolves when the asking session's connection has closed; never for
    /// one not named yet.
    async fn session_ended(&self) {
        match self.session.get().cloned() {
            // A dropped sender is a closed connection too.
            Some(mut closed) => {
                let _ = closed.wait_for(|c| *c).await;
            }
            None => std::future::pending().await,
        }
    }

    /// Cancels the exec's run on the host beneath, whether or not it has
    /// been forwarded yet: a host marks an id it has not seen so that run
    /// never starts (a cancel may overtake the driver's `host.run`).
    pub(super) async fn cancel_forwarded(&self, exec_id: &str) -> Result<()> {
        let host = self.current_host();
        if let Some(host) = host {
            Box::pin(host.cancel(exec_id)).await?;
        }
        Ok(())
    }

    /// Resizes the terminal of the exec's run on the host beneath, if it
    /// has been forwarded there.
    pub(super) async fn resize_forwarded(&self, exec_id: &str, size: TtySize) -> Result<()> {
        let host = self.current_host();
        if let Some(host) = host {
            Box::pin(host.resize(exec_id, size)).await?;
        }
        Ok(())
    }

    /// Runs `p` on the host beneath until it ends, or until the session
    /// that asked for it ends: then the run is cancelled on the host, which
    /// stops it as any cancellation does.
    async fn run(&self, p: RunParams) -> Result<tinybox_sdk::model::ExitStatus> {
        let host = self.host().await;
        let exec_id = p.exec_id.clone();
        tokio::select! {
            ran = host.run(p) => ran,
            () = self.session_ended() => {
                let cancelled = Box::pin(host.cancel(&exec_id)).await;
                let why = match cancelled {
                    Ok(()) => "so it was stopped".to_owned(),
                    Err(e) => format!("and stopping it failed: {e}"),
                };
                Err(Error::Driver {
                    driver: host.conn.name().to_owned(),
                    code: ErrorCode::Interrupted,
                    message: format!("run {exec_id} outlived the driver session that asked for it, {why}"),
                })
            }
        }
    }
}

/// The methods a driver may call back: `host.run`, forwarded to the host
/// beneath it. A driver with nothing beneath it gets a clear refusal.
pub(super) fn reverse_methods(reverse: Option<Arc<Reverse>>) -> RpcModule<Option<Arc<Reverse>>> {
    let mut module = RpcModule::new(reverse);
    module
        .register_async_method(method::HOST_RUN, |params, ctx, _| async move {
            let Some(ctx) = ctx.as_ref().clone() else {
                return Err(jsonrpsee::types::ErrorObjectOwned::from(DriverError::new(
                    ErrorCode::Unsupported,
                    "this driver has no host beneath it to run commands on",
                )));
            };
            let p: RunParams = params.parse()?;
            let result = ctx.run(p).await;
            result.map(|status| RunResult { status }).map_err(|e| {
                // The host driver's own error code travels on. A host driver
                // that died or broke mid-run leaves the command's fate
                // unknown (it may have run, or run on): interrupted, so the
                // sandbox driver and core treat it as a lost host, not as a
                // clean failure of the command.
                let err = match e {
                    Error::Driver { code, message, .. } => DriverError::new(code, message),
                    other if other.outcome_unknown() => DriverError::new(ErrorCode::Interrupted, other.to_string()),
                    other => DriverError::new(ErrorCode::Failed, other.to_string()),
                };
                jsonrpsee::types::ErrorObjectOwned::from(err)
            })
        })
        .expect("unique method");
    module
}
