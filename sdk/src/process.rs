//! Running local processes for a driver: spawn with the descriptors core
//! handed over, track each run by its exec id, cancel by process group.
//! The local host driver is built on this; so is any driver that runs a
//! local tool (ssh, for one) as the command.

use std::collections::HashMap;
use std::os::unix::process::CommandExt;
use std::sync::Mutex;
use std::time::Duration;

use rustix::process::{Pid, Signal, kill_process_group};

use crate::model::ExitStatus;
use crate::protocol::{DriverError, RunParams};
use crate::stdio;

/// How long a cancelled command has between SIGTERM and SIGKILL.
pub const CANCEL_GRACE: Duration = Duration::from_secs(2);

/// The runs in flight, by exec id.
#[derive(Default)]
pub struct Processes {
    running: Mutex<HashMap<String, Pid>>,
}

impl Processes {
    pub fn new() -> Self {
        Self::default()
    }

    /// Runs `params` to completion. A program that cannot be started ends
    /// like it would in a shell: a message on the command's stderr and exit
    /// status 127 (not found) or 126 (not executable).
    pub async fn run(&self, params: &RunParams) -> Result<ExitStatus, DriverError> {
        let fds = stdio::receive(&params.stdio).await?;
        let Some((program, args)) = params.argv.split_first() else {
            return Err(DriverError::invalid("the argument vector is empty"));
        };
        let mut cmd = std::process::Command::new(program);
        cmd.args(args);
        if params.clear_env {
            cmd.env_clear();
        }
        cmd.envs(&params.env);
        if let Some(cwd) = &params.cwd {
            cmd.current_dir(cwd);
        }
        // Its own process group, so a cancellation reaches everything it starts.
        cmd.process_group(0);
        let stderr_copy = fds.stderr.try_clone()?;
        cmd.stdin(fds.stdin).stdout(fds.stdout).stderr(fds.stderr);
        let mut child = match tokio::process::Command::from(cmd).kill_on_drop(false).spawn() {
            Ok(child) => child,
            Err(e) => return Ok(report_spawn_failure(program, params.cwd.as_deref(), e, stderr_copy)),
        };
        drop(stderr_copy);
        let pid = child.id().and_then(|id| Pid::from_raw(id as i32));
        if let Some(pid) = pid {
            self.running.lock().expect("process table").insert(params.exec_id.clone(), pid);
        }
        let status = child.wait().await;
        self.running.lock().expect("process table").remove(&params.exec_id);
        Ok(status?.into())
    }

    /// Sends SIGTERM to the run's process group, then SIGKILL after the grace period.
    pub fn cancel(&self, exec_id: &str) {
        let pid = self.running.lock().expect("process table").get(exec_id).copied();
        if let Some(pid) = pid {
            let _ = kill_process_group(pid, Signal::TERM);
            tokio::spawn(async move {
                tokio::time::sleep(CANCEL_GRACE).await;
                let _ = kill_process_group(pid, Signal::KILL);
            });
        }
    }

    /// Kills every run still going (core went away).
    pub fn kill_all(&self) {
        for pid in self.running.lock().expect("process table").values() {
            let _ = kill_process_group(*pid, Signal::KILL);
        }
    }
}

fn report_spawn_failure(
    program: &str,
    cwd: Option<&str>,
    err: std::io::Error,
    stderr: std::os::fd::OwnedFd,
) -> ExitStatus {
    use std::io::Write;
    let (code, what) = match err.kind() {
        std::io::ErrorKind::NotFound if cwd.is_some_and(|d| !std::path::Path::new(d).is_dir()) => {
            (127, format!("working directory {:?} does not exist", cwd.unwrap_or_default()))
        }
        std::io::ErrorKind::NotFound => (127, "command not found".to_owned()),
        std::io::ErrorKind::PermissionDenied => (126, "permission denied".to_owned()),
        _ => (126, err.to_string()),
    };
    let mut f = std::fs::File::from(stderr);
    let _ = writeln!(f, "tinybox: {program}: {what}");
    ExitStatus::code(code)
}
