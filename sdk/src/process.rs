//! Running local processes for a driver: spawn with the descriptors core
//! handed over, track each run by its exec id, cancel by process group.
//! The local host driver is built on this; so is any driver that runs a
//! local tool (ssh, for one) as the command.

use std::collections::{HashMap, HashSet};
use std::os::unix::process::CommandExt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rustix::process::{Pid, Signal, kill_process_group};

use crate::model::ExitStatus;
use crate::protocol::{DriverError, RunParams};
use crate::stdio;

/// Marks every descriptor this process inherited above stderr close-on-exec.
///
/// A process inherits whatever its parent left open (a shell's, a CI
/// harness's); Rust marks only the descriptors it opens itself. Without
/// this, an inherited descriptor would pass through core and the driver into
/// a box. Every tinybox process that starts others calls it first.
pub fn seal_inherited_fds() {
    close_fds::CloseFdsBuilder::new().cloexecfrom(3);
}

/// A POSIX sh fragment that checks `$1`, the program a box is asked to
/// run, before it is run: a missing one ends the command with 127 and an
/// unrunnable one with 126, each with one line naming it — the statuses a
/// shell gives, and words a caller can act on instead of a sandbox tool's
/// own (`bwrap: execvp ...`, runc's). A sandbox that starts commands through
/// a shell inside the box follows it with its own way to run "$@".
pub const PROGRAM_CHECK: &str = r#"case $1 in
*/*) [ -e "$1" ] || { printf 'tinybox: no program %s in the box\n' "$1" >&2; exit 127; }
     [ -f "$1" ] && [ -x "$1" ] || { printf 'tinybox: %s in the box is not an executable file\n' "$1" >&2; exit 126; } ;;
*) command -v "$1" >/dev/null 2>&1 || { printf 'tinybox: no program %s in the box\n' "$1" >&2; exit 127; } ;;
esac"#;

/// How long a cancelled command has between SIGTERM and SIGKILL.
pub const CANCEL_GRACE: Duration = Duration::from_secs(2);

/// The runs in flight, by exec id, and cancellations that arrived first.
#[derive(Default, Clone)]
pub struct Processes {
    table: Arc<Mutex<Table>>,
}

#[derive(Default)]
struct Table {
    running: HashMap<String, Pid>,
    /// The terminal masters of runs on a terminal, for `resize`.
    terminals: HashMap<String, Arc<std::os::fd::OwnedFd>>,
    /// Cancelled before their process existed: they must never start.
    cancelled_early: HashSet<String>,
}

impl Processes {
    pub fn new() -> Self {
        Self::default()
    }

    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().expect("process table")
    }

    /// Runs `params` to completion. A program that cannot be started ends
    /// like it would in a shell: a message on the command's stderr and exit
    /// status 127 (not found) or 126 (not executable).
    pub async fn run(&self, params: &RunParams) -> Result<ExitStatus, DriverError> {
        let fds = stdio::receive(&params.stdio).await?;
        let Some((program, args)) = params.argv.split_first() else {
            return Err(DriverError::invalid("the argument vector is empty"));
        };
        let pty = params.tty.map(crate::pty::Pty::open).transpose()?;
        let host_session = pty.is_some() && !params.tty_session_inside;
        let mut cmd = match host_session {
            true => {
                // setsid reports a program it cannot run in words of its own
                // and status 1; the check keeps a shell's 127 and 126, each
                // with one tinybox line, as without a terminal.
                let mut cmd = std::process::Command::new(crate::pty::setsid_program()?);
                cmd.args(["-c", "/bin/sh", "-c", &format!("{PROGRAM_CHECK}\nexec \"$@\""), "sh", program]);
                cmd
            }
            false => std::process::Command::new(program),
        };
        cmd.args(args);
        if params.clear_env {
            cmd.env_clear();
        }
        cmd.envs(&params.env);
        if let Some(cwd) = &params.cwd {
            cmd.current_dir(cwd);
        }
        let stderr_copy = fds.stderr.try_clone()?;
        let mut pump = None;
        match pty {
            Some(pty) => {
                // setsid makes it lead a session (and so a process group) of
                // its own, which is what a cancellation reaches. It does so
                // without forking only when it is not a group leader already.
                if !host_session {
                    cmd.process_group(0);
                }
                cmd.stdin(pty.slave.try_clone()?).stdout(pty.slave.try_clone()?).stderr(pty.slave);
                pump = Some(crate::pty::Pump::start(&pty.master, fds.stdin, fds.stdout)?);
                self.table().terminals.insert(params.exec_id.clone(), Arc::new(pty.master));
            }
            None => {
                // Its own process group, so a cancellation reaches everything it starts.
                cmd.process_group(0);
                cmd.stdin(fds.stdin).stdout(fds.stdout).stderr(fds.stderr);
            }
        }
        // Spawn and register under one lock, so a cancel either finds the
        // process or leaves a mark that stops it from starting.
        let mut child = {
            let mut table = self.table();
            if table.cancelled_early.remove(&params.exec_id) {
                table.terminals.remove(&params.exec_id);
                return Ok(ExitStatus { code: None, signal: Some(Signal::TERM.as_raw()) });
            }
            let child = match tokio::process::Command::from(cmd).kill_on_drop(false).spawn() {
                Ok(child) => child,
                Err(e) => {
                    table.terminals.remove(&params.exec_id);
                    return Ok(report_spawn_failure(program, params.cwd.as_deref(), e, stderr_copy));
                }
            };
            if let Some(pid) = child.id().and_then(|id| Pid::from_raw(id as i32)) {
                table.running.insert(params.exec_id.clone(), pid);
            }
            child
        };
        drop(stderr_copy);
        let status = child.wait().await;
        {
            let mut table = self.table();
            table.running.remove(&params.exec_id);
            table.terminals.remove(&params.exec_id);
        }
        if let Some(pump) = pump {
            pump.finish().await;
        }
        Ok(status?.into())
    }

    /// Sets the window size of a terminal run; a run that has ended or has
    /// no terminal is left alone.
    pub fn resize(&self, exec_id: &str, size: crate::model::TtySize) -> Result<(), DriverError> {
        let master = self.table().terminals.get(exec_id).cloned();
        if let Some(master) = master {
            crate::pty::set_size(std::os::fd::AsFd::as_fd(&*master), size)?;
        }
        Ok(())
    }

    /// Sends SIGTERM to the run's process group, then SIGKILL after the
    /// grace period if that same run is still going. A run not started yet
    /// is marked so it never starts.
    pub fn cancel(&self, exec_id: &str) {
        let mut table = self.table();
        let Some(pid) = table.running.get(exec_id).copied() else {
            table.cancelled_early.insert(exec_id.to_owned());
            return;
        };
        drop(table);
        let _ = kill_process_group(pid, Signal::TERM);
        let this = self.clone();
        let exec_id = exec_id.to_owned();
        tokio::spawn(async move {
            tokio::time::sleep(CANCEL_GRACE).await;
            // Only the group we signalled, never one that reused its id.
            if this.table().running.get(&exec_id) == Some(&pid) {
                let _ = kill_process_group(pid, Signal::KILL);
            }
        });
    }

    /// Kills every run still going (core went away).
    pub fn kill_all(&self) {
        for pid in self.table().running.values() {
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
        // The kernel knows no format for it (ENOEXEC): not something to run here.
        _ if err.raw_os_error() == Some(rustix::io::Errno::NOEXEC.raw_os_error()) => {
            (126, "not a program this machine can run (exec format error)".to_owned())
        }
        _ => (126, err.to_string()),
    };
    let mut f = std::fs::File::from(stderr);
    let _ = writeln!(f, "tinybox: {program}: {what}");
    ExitStatus::code(code)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::StdioRef;
    use crate::stdio::{StdioFds, StdioServer};

    fn devnull() -> std::os::fd::OwnedFd {
        std::fs::File::options().read(true).write(true).open("/dev/null").unwrap().into()
    }

    #[tokio::test]
    async fn a_cancel_that_arrives_first_stops_the_run_from_starting() {
        let dir = tempfile::tempdir().unwrap();
        let server = StdioServer::start(
            dir.path().join("s.sock"),
            StdioFds { stdin: devnull(), stdout: devnull(), stderr: devnull() },
        )
        .unwrap();
        let marker = dir.path().join("ran");
        let procs = Processes::new();
        procs.cancel("x-early");
        let params = RunParams {
            exec_id: "x-early".into(),
            argv: vec!["touch".into(), marker.display().to_string()],
            env: Default::default(),
            clear_env: false,
            cwd: None,
            stdio: StdioRef { socket: server.stdio_ref().socket },
            tty: None,
            tty_session_inside: false,
        };
        let status = procs.run(&params).await.unwrap();
        assert_eq!(status.signal, Some(15));
        assert!(!marker.exists(), "a cancelled run must not start");
        // The mark is used once: the same id may run later.
        let status = procs.run(&params).await.unwrap();
        assert!(status.success());
        assert!(marker.exists());
    }
}
