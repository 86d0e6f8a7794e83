//! Helper commands whose output a sandbox driver needs (`docker inspect`,
//! `docker commit`), run on its host through the reverse `host.run` call.
//!
//! `host.run` never carries bytes in JSON: it takes a [`StdioRef`], a socket
//! that hands over three descriptors. A box's command gets the caller's own
//! descriptors; a helper run gets pipes the driver reads itself, served from
//! a socket in the same private runtime directory core uses.
//!
//! [`StdioRef`]: crate::protocol::StdioRef

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::model::ExitStatus;
use crate::protocol::{DriverError, RunParams};
use crate::serve::Host;
use crate::stdio::{StdioFds, StdioServer};

/// How a helper command ended and what it printed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Captured {
    pub status: ExitStatus,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

impl Captured {
    pub fn success(&self) -> bool {
        self.status.success()
    }

    /// stdout as text, trailing whitespace removed.
    pub fn stdout_text(&self) -> String {
        String::from_utf8_lossy(&self.stdout).trim_end().to_owned()
    }

    /// stderr as one line of text, for quoting in an error message.
    pub fn stderr_text(&self) -> String {
        let text = String::from_utf8_lossy(&self.stderr);
        let lines: Vec<&str> = text.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
        lines.join(" | ")
    }
}

/// Runs `argv` on the driver's host with `stdin` as its input and returns
/// its status, stdout and stderr. The run's exec id is
/// `<driver>-<pid>-<n>`, unique among the runs in flight.
pub async fn capture<H: Host + ?Sized>(
    host: &H,
    argv: Vec<String>,
    env: BTreeMap<String, String>,
    stdin: &[u8],
) -> Result<Captured, DriverError> {
    let exec_id = next_exec_id();
    let dir = runtime_dir().map_err(|e| DriverError::failed(format!("cannot prepare a stdio socket: {e}")))?;
    let socket = dir.join(format!("{exec_id}.sock"));
    // Only a dead process with our pid could have left this name behind.
    let _ = std::fs::remove_file(&socket);

    let (stdin_r, mut stdin_w) = std::io::pipe()?;
    let (stdout_r, stdout_w) = std::io::pipe()?;
    let (stderr_r, stderr_w) = std::io::pipe()?;
    let input = stdin.to_vec();
    // Writing and both reads run at once: a command that fills one pipe
    // while nobody drains it would otherwise never finish.
    let writer = tokio::task::spawn_blocking(move || {
        // A command that does not read its input closes the pipe early; that is not an error.
        let _ = stdin_w.write_all(&input);
    });
    let out = tokio::task::spawn_blocking(move || read_all(stdout_r));
    let err = tokio::task::spawn_blocking(move || read_all(stderr_r));

    let server = StdioServer::start(
        socket,
        StdioFds { stdin: stdin_r.into(), stdout: stdout_w.into(), stderr: stderr_w.into() },
    )
    .map_err(|e| DriverError::failed(format!("cannot open a stdio socket: {e}")))?;
    let params = RunParams {
        exec_id,
        argv,
        env,
        clear_env: false,
        cwd: None,
        stdio: server.stdio_ref(),
        tty: None,
        tty_session_inside: false,
    };
    let status = host.run(params).await;
    // The server holds our copies of the write ends: the readers see end of
    // file once it is gone and the command (and anything it started) closed theirs.
    drop(server);
    let status = status?;
    let joined = |e: tokio::task::JoinError| DriverError::failed(format!("reading a helper's output failed: {e}"));
    let stdout = out.await.map_err(joined)?;
    let stderr = err.await.map_err(joined)?;
    let _ = writer.await;
    Ok(Captured { status, stdout, stderr })
}

fn read_all(mut r: std::io::PipeReader) -> Vec<u8> {
    let mut buf = Vec::new();
    let _ = r.read_to_end(&mut buf);
    buf
}

fn next_exec_id() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let exe = std::env::current_exe().ok();
    let name = exe
        .as_deref()
        .and_then(Path::file_name)
        .and_then(|n| n.to_str())
        .map(|n| n.strip_prefix("tinybox-driver-").unwrap_or(n))
        .filter(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
        .unwrap_or("driver");
    format!("{name}-{}-{}", std::process::id(), COUNTER.fetch_add(1, Ordering::SeqCst))
}

/// A directory only this user can enter, for stdio sockets. Short, because a
/// socket path is limited to 108 bytes: `$XDG_RUNTIME_DIR/tinybox`, else
/// `$TMPDIR/tinybox-<uid>` (usually `/tmp`). Created mode 0700 when missing;
/// refused when it exists but is not a directory owned by this user, and
/// closed to others when it was open.
pub fn runtime_dir() -> std::io::Result<PathBuf> {
    let uid = rustix::process::getuid().as_raw();
    let dir = match std::env::var_os("XDG_RUNTIME_DIR").filter(|v| !v.is_empty()) {
        Some(run) => PathBuf::from(run).join("tinybox"),
        None => std::env::temp_dir().join(format!("tinybox-{uid}")),
    };
    ensure_private_dir(&dir, uid)?;
    Ok(dir)
}

fn ensure_private_dir(dir: &Path, uid: u32) -> std::io::Result<()> {
    let context =
        |what: &str, e: std::io::Error| std::io::Error::new(e.kind(), format!("{what} {}: {e}", dir.display()));
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => return Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(context("cannot create runtime directory", e)),
    }
    // It existed: it must be ours, a real directory, and closed to others —
    // anything else could let another user read a command's streams.
    let meta = std::fs::symlink_metadata(dir).map_err(|e| context("cannot inspect runtime directory", e))?;
    if !meta.is_dir() || meta.uid() != uid {
        return Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!("runtime directory {} is not a directory owned by uid {uid}", dir.display()),
        ));
    }
    if meta.mode() & 0o077 != 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| context("cannot make private the runtime directory", e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_private_dir_is_made_and_an_open_one_is_closed() {
        let tmp = tempfile::tempdir().unwrap();
        let uid = rustix::process::getuid().as_raw();
        let dir = tmp.path().join("rt");
        ensure_private_dir(&dir, uid).unwrap();
        assert_eq!(std::fs::metadata(&dir).unwrap().mode() & 0o777, 0o700);
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        ensure_private_dir(&dir, uid).unwrap();
        assert_eq!(std::fs::metadata(&dir).unwrap().mode() & 0o777, 0o700);
    }

    #[test]
    fn a_file_or_a_stranger_s_dir_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let uid = rustix::process::getuid().as_raw();
        let file = tmp.path().join("f");
        std::fs::write(&file, b"").unwrap();
        assert!(ensure_private_dir(&file, uid).unwrap_err().to_string().contains("not a directory owned by"));
        let dir = tmp.path().join("d");
        std::fs::create_dir(&dir).unwrap();
        let err = ensure_private_dir(&dir, uid.wrapping_add(1)).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::PermissionDenied);
    }

    #[test]
    fn exec_ids_are_unique_and_are_names() {
        let a = next_exec_id();
        let b = next_exec_id();
        assert_ne!(a, b);
        assert!(crate::model::names::validate_name("exec", &a).is_ok(), "{a}");
    }

    #[test]
    fn stderr_is_quoted_on_one_line() {
        let c = Captured { status: ExitStatus::code(1), stdout: b"x\n".to_vec(), stderr: b"a\n\n  b \n".to_vec() };
        assert_eq!(c.stderr_text(), "a | b");
        assert_eq!(c.stdout_text(), "x");
        assert!(!c.success());
    }
}
