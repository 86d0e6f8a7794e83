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
/// closed to others when it was open. Any local user can make that name in
/// a shared `/tmp` first (a file, or a directory of theirs): a squatted one
/// is never used, and the user's own cache directory
/// (`$XDG_CACHE_HOME/tinybox/run`, else `~/.cache/tinybox/run`), which no
/// one else can make, serves instead. Only when that fails too is it an
/// error, one line naming both and what to do.
pub fn runtime_dir() -> std::io::Result<PathBuf> {
    let uid = rustix::process::getuid().as_raw();
    let env = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(run) = env("XDG_RUNTIME_DIR") {
        let dir = run.join("tinybox");
        ensure_private_dir(&dir, uid)?;
        return Ok(dir);
    }
    let shared = std::env::temp_dir().join(format!("tinybox-{uid}"));
    let squatted = match ensure_private_dir(&shared, uid) {
        Ok(()) => return Ok(shared),
        Err(e) => e,
    };
    let cache = env("XDG_CACHE_HOME").or_else(|| env("HOME").map(|h| h.join(".cache")));
    let own = cache.map(|c| c.join("tinybox").join("run"));
    match own.as_deref().map(|dir| ensure_own_dir(dir, uid).map(|()| dir.to_owned())) {
        Some(Ok(dir)) => Ok(dir),
        Some(Err(fallback)) => Err(std::io::Error::new(
            squatted.kind(),
            format!("{squatted}, and the fallback failed: {fallback}; set XDG_RUNTIME_DIR to a directory of your own"),
        )),
        None => Err(std::io::Error::new(
            squatted.kind(),
            format!("{squatted}, and no HOME to fall back on; set XDG_RUNTIME_DIR to a directory of your own"),
        )),
    }
}

/// Removes the stream sockets in runtime directory `dir` whose maker is
/// gone. A process that made one and was killed (SIGKILL, a crash) could
/// not remove it itself. Every socket tinybox makes there is named
/// `<prefix><pid>-<n>.sock`; only a socket whose pid has no process is
/// removed, so a live one (ours or a reused pid's) is never touched.
pub fn remove_stale_sockets(dir: &Path) {
    use std::os::unix::fs::FileTypeExt;
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(socket_maker) else { continue };
        if entry.file_type().is_ok_and(|t| t.is_socket()) && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// The pid in a runtime socket's name `<prefix><pid>-<n>.sock`, for the
/// prefixes tinybox gives them: `x` (core's exec ids), or a name ending in
/// `-` (`daemon-exec-`, `docker-lifeline-`, a driver's `<name>-`). Any other
/// name is not ours to judge.
fn socket_maker(name: &str) -> Option<u32> {
    let (head, n) = name.strip_suffix(".sock")?.rsplit_once('-')?;
    if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let digits = head.len() - head.bytes().rev().take_while(u8::is_ascii_digit).count();
    let prefix = &head[..digits];
    let named = prefix.len() > 1
        && prefix.ends_with('-')
        && prefix.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if prefix != "x" && !named {
        return None;
    }
    head[digits..].parse().ok().filter(|pid| *pid > 0)
}

/// `dir` and the parents it lacks, made this user's own; the last made
/// (or found) private.
fn ensure_own_dir(dir: &Path, uid: u32) -> std::io::Result<()> {
    if let Some(parent) = dir.parent() {
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(parent).map_err(|e| {
            std::io::Error::new(e.kind(), format!("cannot create runtime directory {}: {e}", parent.display()))
        })?;
    }
    ensure_private_dir(dir, uid)
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
            format!(
                "runtime directory {} is not a directory owned by uid {uid} (another user may have made it first)",
                dir.display()
            ),
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
    fn an_own_dir_is_made_with_its_parents_and_private() {
        let tmp = tempfile::tempdir().unwrap();
        let uid = rustix::process::getuid().as_raw();
        let dir = tmp.path().join("cache/tinybox/run");
        ensure_own_dir(&dir, uid).unwrap();
        assert_eq!(std::fs::metadata(&dir).unwrap().mode() & 0o777, 0o700);
        assert_eq!(std::fs::metadata(dir.parent().unwrap()).unwrap().mode() & 0o777, 0o700);
    }

    #[test]
    fn a_socket_s_maker_is_read_from_its_name() {
        assert_eq!(socket_maker("x123-4.sock"), Some(123));
        assert_eq!(socket_maker("daemon-exec-77-0.sock"), Some(77));
        assert_eq!(socket_maker("docker-lifeline-9-12.sock"), Some(9));
        assert_eq!(socket_maker("pools-0f2f4325-55-3.sock"), Some(55));
        for not_ours in [
            "x123.sock",
            "x-4.sock",
            "abc-4.sock",
            "x0-1.sock",
            "x12-4.pipe",
            "x12-a.sock",
            "abc12-4.sock",
            "-12-4.sock",
            "a b-12-4.sock",
            "12-4.sock",
        ] {
            assert_eq!(socket_maker(not_ours), None, "{not_ours}");
        }
    }

    #[test]
    fn only_the_sockets_of_gone_processes_are_swept() {
        let dir = tempfile::tempdir().unwrap();
        let mine = dir.path().join(format!("x{}-0.sock", std::process::id()));
        // A pid above the kernel's limit (4194304) names no process.
        let gone = dir.path().join("x4194305-0.sock");
        let file = dir.path().join("x4194305-1.sock");
        let _live = std::os::unix::net::UnixListener::bind(&mine).unwrap();
        let _stale = std::os::unix::net::UnixListener::bind(&gone).unwrap();
        std::fs::write(&file, b"not a socket").unwrap();
        remove_stale_sockets(dir.path());
        assert!(mine.exists(), "a live process's socket was removed");
        assert!(!gone.exists(), "a gone process's socket was left");
        assert!(file.exists(), "something not a socket was removed");
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
