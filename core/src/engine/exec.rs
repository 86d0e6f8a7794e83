//! Running a command in a box. The command's streams are the caller's own
//! descriptors, handed to the driver over a private socket; JSON carries
//! only the request and the exit status.

use std::future::Future;

use tinybox_sdk::model::{BoxId, ExecRequest, ExitStatus, TtySize};
use tinybox_sdk::protocol::{BoxRef, ExecParams, StdioRef};
use tinybox_sdk::stdio::{StdioFds, StdioServer};

use super::Tinybox;
use crate::driver::SandboxLink;
use crate::error::{Error, Result};

/// Which of a box's instances runs the command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Target {
    /// Where the code being worked on sits (the default).
    #[default]
    Workspace,
    /// Where the agent driving the work sits; the workspace itself when colocated.
    Runner,
}

/// How an exec ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExecOutcome {
    pub status: ExitStatus,
    /// The caller's cancellation fired and the command was stopped.
    pub cancelled: bool,
}

/// Where a command's streams come from: descriptors this process holds
/// (offered to the driver on a socket of its own), or a socket another
/// process already offers them on.
enum Streams {
    Fds(StdioFds),
    Offered(StdioRef),
}

impl Tinybox {
    /// Runs `request` in box `id` with `stdio` as its streams. When `cancel`
    /// resolves first, the command is stopped and its end is still awaited.
    pub async fn exec(
        &self,
        id: &BoxId,
        request: ExecRequest,
        stdio: StdioFds,
        target: Target,
        cancel: impl Future<Output = ()>,
    ) -> Result<ExecOutcome> {
        self.exec_resizable(id, request, stdio, target, cancel, None).await
    }

    /// [`Tinybox::exec`], for a request on a terminal (`request.tty`): each
    /// size `resizes` yields is sent to whichever driver made the terminal.
    /// A resize that fails leaves the command running at its old size.
    pub async fn exec_resizable(
        &self,
        id: &BoxId,
        request: ExecRequest,
        stdio: StdioFds,
        target: Target,
        cancel: impl Future<Output = ()>,
        resizes: Option<tokio::sync::mpsc::UnboundedReceiver<TtySize>>,
    ) -> Result<ExecOutcome> {
        self.exec_streams(id, request, Streams::Fds(stdio), target, cancel, resizes).await
    }

    /// [`Tinybox::exec`], with streams another process already offers on a
    /// socket of its own (the daemon's callers): the driver takes them from
    /// there, so they never pass through this process.
    pub async fn exec_offered(
        &self,
        id: &BoxId,
        request: ExecRequest,
        stdio: StdioRef,
        target: Target,
        cancel: impl Future<Output = ()>,
    ) -> Result<ExecOutcome> {
        self.exec_streams(id, request, Streams::Offered(stdio), target, cancel, None).await
    }

    async fn exec_streams(
        &self,
        id: &BoxId,
        request: ExecRequest,
        streams: Streams,
        target: Target,
        cancel: impl Future<Output = ()>,
        mut resizes: Option<tokio::sync::mpsc::UnboundedReceiver<TtySize>>,
    ) -> Result<ExecOutcome> {
        request.validate()?;
        let info = self.get(id)?;
        let ws = self.instance(&info)?;
        self.autosnapshot_if_due(&info).await;
        let instance = match (target, &info.runner) {
            (Target::Runner, Some(runner)) => runner,
            _ => ws,
        };
        let link = self.drivers.sandbox(&instance.placement.sandbox, &instance.placement.host).await?;
        crate::gate::admit_exec(&link.name(), &link.capabilities(), &request)?;
        let (egress, box_env) = self.egress_for_exec(&info, instance).await?;
        let exec_id = self.next_exec_id();
        let (server, stdio) = match streams {
            Streams::Fds(fds) => {
                let socket = self.runtime_dir()?.join(format!("{exec_id}.sock"));
                // A file by this name can only be left by a dead process whose pid we
                // now have: nothing live owns it.
                let _ = std::fs::remove_file(&socket);
                let server =
                    StdioServer::start(socket, fds).map_err(|e| Error::io("cannot open the stdio socket", e))?;
                let stdio = server.stdio_ref();
                (Some(server), stdio)
            }
            Streams::Offered(stdio) => (None, stdio),
        };
        let params = ExecParams {
            target: BoxRef { box_id: info.id.clone(), handle: instance.handle.clone() },
            exec_id: exec_id.clone(),
            request,
            box_env,
            stdio,
            egress,
        };
        let run = link.exec(params);
        tokio::pin!(run);
        tokio::pin!(cancel);
        let outcome = loop {
            tokio::select! {
            status = &mut run => break ExecOutcome { status: status?, cancelled: false },
            size = next_size(&mut resizes) => match size {
                Some(size) => {
                    let _ = link.resize(&exec_id, size).await;
                }
                None => resizes = None,
            },
            () = &mut cancel => break self.end_cancelled(&link, &exec_id, &mut run).await?,
            }
        };
        drop(server);
        Ok(outcome)
    }

    /// Cancels exec `exec_id` and waits for `run`, its call, to answer: a
    /// driver that acknowledges the cancel but never ends the run must not
    /// hold the caller forever.
    pub(super) async fn end_cancelled(
        &self,
        link: &SandboxLink,
        exec_id: &str,
        run: &mut (impl Future<Output = Result<ExitStatus>> + Unpin),
    ) -> Result<ExecOutcome> {
        link.cancel(exec_id).await?;
        let deadline = self.drivers.config().timeouts.cancel;
        match tokio::time::timeout(deadline, run).await {
            Ok(status) => Ok(ExecOutcome { status: status?, cancelled: true }),
            Err(_) => Err(Error::DriverTimeout {
                driver: link.name().to_string(),
                what: "the end of a cancelled command".into(),
                after: deadline,
                stderr_tail: link.connection().map(|c| c.stderr_tail()).unwrap_or_default(),
            }),
        }
    }
}

/// The next size asked for; never, once there are no more.
async fn next_size(resizes: &mut Option<tokio::sync::mpsc::UnboundedReceiver<TtySize>>) -> Option<TtySize> {
    match resizes {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}
