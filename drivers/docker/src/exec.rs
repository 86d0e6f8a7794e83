//! `sandbox.exec` and `cancel`: a command run in its box's container by
//! `docker exec` under a wrapper that names a missing program, with a
//! lifeline watcher that stops the command when this driver dies, and
//! the stop itself (through the marker it runs with) when the client was
//! killed or core cancelled the exec.

use tinybox_sdk::model::{BoxId, ExitStatus};
use tinybox_sdk::protocol::{DriverError, ErrorCode, ExecParams, RunParams};
use tinybox_sdk::stdio::{StdioFds, StdioServer};

use crate::argv;
use crate::execs::{self, Running};
use crate::host::{Capture, Host};
use crate::sandbox::{Docker, Handle, docker_may_have_failed, read_state};

impl Docker {
    pub async fn exec(&self, host: &dyn Host, p: ExecParams) -> Result<ExitStatus, DriverError> {
        let handle = Handle::of(&p.target)?;
        let mut env = p.box_env;
        env.extend(p.request.env);
        if let Some(why) = crate::env_file::refusal(&env) {
            return Err(DriverError::invalid(why));
        }
        let cwd = argv::workdir(p.request.cwd.as_deref(), handle.workdir.as_deref());
        let marker = argv::marker(&p.exec_id);
        let command =
            argv::exec(&handle.container, cwd.as_deref(), &env, &marker, &p.request.argv, p.request.tty.is_some());
        let Some(running) = self.execs.start(&p.exec_id, &handle.container, &marker) else {
            // Cancelled before it started: it never does.
            return Ok(ExitStatus { code: None, signal: Some(execs::SIGTERM) });
        };
        let mut params = RunParams::forwarded(&p.exec_id, command, p.stdio, p.request.tty);
        // The values reach the client's wrapper in its environment, which
        // only its user reads, never in its arguments (env_file.rs).
        params.env = tinybox_sdk::carried_env::vars(&env);
        let (lifeline_end, mut lifeline) = match std::io::pipe() {
            Ok(pair) => pair,
            Err(e) => {
                self.execs.finish(&p.exec_id);
                return Err(DriverError::failed(format!("cannot make an exec's lifeline pipe: {e}")));
            }
        };
        let watcher = self.watch(host, &p.exec_id, argv::lifeline(&handle.container, &marker), lifeline_end);
        let command = async {
            let ended = self.run_command(host, params, &running).await;
            // Its end is known (a stopped command is dead): the watcher may
            // go. Without these bytes, as when this process dies, it stops
            // the command. A run that failed leaves the command's end
            // unknown — core went away (its daemon killed), or the host did
            // — so the watcher is not released: it stops the command
            // rather than leave it running with nobody to read it.
            if ended.is_ok() {
                let _ = std::io::Write::write_all(&mut lifeline, argv::LIFELINE_RELEASE);
            }
            drop(lifeline);
            ended
        };
        let (ended, ()) = tokio::join!(command, watcher);
        let status = ended?;
        // The client's own failures end with statuses a command may end with
        // too, so only then is the container looked at, and only to tell a
        // box or a daemon that has gone from a command that failed.
        if let Some(code) = status.code.filter(|c| docker_may_have_failed(*c)) {
            self.require_running(host, &p.target.box_id, &handle.container).await.map_err(|e| match e.code {
                ErrorCode::Unavailable => DriverError::unavailable(format!(
                    "box {}'s command lost docker (the client ended with status {code}), so how it ended is unknown: {}",
                    p.target.box_id, e.message
                )),
                _ => e,
            })?;
        }
        Ok(status)
    }

    /// Runs the command's `docker exec` client to its end, stopping the
    /// command inside the container when the client was killed; how the
    /// command ended.
    async fn run_command(
        &self,
        host: &dyn Host,
        params: RunParams,
        running: &Running,
    ) -> Result<ExitStatus, DriverError> {
        let exec_id = params.exec_id.clone();
        let status = host.run(params).await;
        // A signal ended the client's shell, not the command (docker reports
        // a command's own signal as 128+n): the command may run on inside.
        if status.as_ref().is_ok_and(|s| s.signal.is_some()) && running.claim_stop() {
            self.stop(host, running).await;
        }
        // A stopped command ended by our signal, whatever the client
        // reported (a terminated `docker exec` exits 0): a cancelled command
        // never reads as a success, and its exec answers once it is dead.
        if running.stopping() {
            let signal = running.stopped().await;
            self.execs.finish(&exec_id);
            return Ok(ExitStatus { code: None, signal: Some(signal) });
        }
        self.execs.finish(&exec_id);
        status
    }

    /// Runs an exec's lifeline watcher in its container until `input` ends;
    /// its own outcome does not matter (a container that has gone took the
    /// command with it), so it is not reported.
    async fn watch(&self, host: &dyn Host, exec_id: &str, argv: Vec<String>, input: std::io::PipeReader) {
        let Ok(null) = std::fs::File::options().write(true).open("/dev/null") else { return };
        let (Ok(out), Ok(err)) = (null.try_clone(), null.try_clone()) else { return };
        let Ok(dir) = tinybox_sdk::capture::runtime_dir() else { return };
        let id = format!("{exec_id}-lifeline");
        // Unique in this process whatever the exec id: ids are core's to choose.
        static WATCHERS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = WATCHERS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let socket = dir.join(format!("docker-lifeline-{}-{n}.sock", std::process::id()));
        // Only a dead process with our pid could have left this name behind.
        let _ = std::fs::remove_file(&socket);
        let fds = StdioFds { stdin: input.into(), stdout: out.into(), stderr: err.into() };
        let Ok(server) = StdioServer::start(socket, fds) else { return };
        let params = RunParams {
            exec_id: id,
            argv,
            env: Default::default(),
            clear_env: false,
            cwd: None,
            stdio: server.stdio_ref(),
            tty: None,
            tty_session_inside: false,
        };
        let _ = host.run(params).await;
    }

    async fn require_running(&self, host: &dyn Host, box_id: &BoxId, container: &str) -> Result<(), DriverError> {
        let seen = host.capture(argv::inspect_state(container)).await?;
        match read_state(box_id, container, &seen) {
            Ok(s) if s.state == tinybox_sdk::protocol::BoxState::Ready => Ok(()),
            Ok(s) if s.state == tinybox_sdk::protocol::BoxState::Gone => Err(DriverError::not_found(format!(
                "box {box_id} is gone: its container {container} no longer exists (removed outside tinybox); \
                 `tinybox rm {box_id}` forgets it"
            ))),
            Ok(s) => Err(DriverError::failed(format!(
                "box {box_id} cannot run commands: {}",
                s.detail.unwrap_or_else(|| "its container is not running".into())
            ))),
            // Not knowing is no reason to replace the command's own status.
            Err(e) if e.code == ErrorCode::Unavailable => Err(e),
            Err(_) => Ok(()),
        }
    }

    /// Stops the command of exec `exec_id` inside its container (unless
    /// its exec, seeing its client killed by core's cancellation of the
    /// forwarded run, does it first); an exec not started yet never starts.
    pub async fn cancel(&self, host: &dyn Host, exec_id: &str) -> Result<(), DriverError> {
        if let Some(running) = self.execs.cancel(exec_id) {
            self.stop(host, &running).await;
        }
        Ok(())
    }

    /// Stops a command inside its container (the caller claimed the stop)
    /// and records how it ended. Best effort: a container that has gone, or
    /// a host that cannot be reached, took the command with it or left
    /// nothing this driver can do; either way the stop is over.
    pub(crate) async fn stop(&self, host: &dyn Host, running: &Running) {
        if running.once {
            return self.stop_once(host, running).await;
        }
        let said = host.capture(argv::cancel(&running.container, &running.marker)).await;
        running.stop_done(argv::stopped_by(&said.map(|c| c.stdout_text()).unwrap_or_default()));
    }
}
