//! Starting, finding and stopping one box's proxy: the impure edge of
//! egress. The proxy runs detached (a process group of its own, its stderr
//! in its directory) and outlives the command that started it; it is
//! found again by its pid file, trusted only when `/proc/PID/cmdline`
//! names its directory, so a recycled pid (after a reboot, say) is never
//! taken for it.

use std::io::{self, BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal, kill_process};
use tinybox_egress::{InjectRules, SecretsSpec, layout};

use super::{EgressError, ProxyDir};

/// How long a starting proxy has to say it listens.
pub const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a proxy has to end after SIGTERM, and again after SIGKILL.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(5);
/// Between two looks at a process that is going away.
const POLL: Duration = Duration::from_millis(10);

fn io_error(context: &'static str, path: &Path) -> impl FnOnce(io::Error) -> EgressError {
    let path = path.to_owned();
    move |source| EgressError::Io { context, path, source }
}

/// A box's secrets, for its proxy (ADR 0032).
#[derive(Debug, Clone, Copy)]
pub struct Injection<'a> {
    pub box_id: &'a str,
    pub spec: &'a SecretsSpec,
}

/// Makes sure the proxy for `dir` runs, starting it from `entries` (the
/// box's allowlist, canonical) when none does, and waiting until it
/// listens. Called under the directory's lock, so two commands on one box
/// never start two proxies. With secrets: their rules (made once, kept in
/// the directory, so the placeholders are the box's for its life), and a
/// proxy started here is handed the values, read now from their sources.
pub fn ensure_running(
    dir: &ProxyDir,
    entries: &[String],
    program: &Path,
    resolver: Option<SocketAddr>,
    secrets: Option<Injection<'_>>,
) -> Result<Option<InjectRules>, EgressError> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir.path())
        .map_err(io_error("cannot make the egress directory", dir.path()))?;
    let _lock = crate::store::file::lock_exclusive(&dir.lock())
        .map_err(|e| EgressError::Start { dir: dir.path().to_owned(), detail: e.to_string() })?;
    let rules = secrets.map(|s| secret_rules(dir, s)).transpose()?;
    if live_pid(dir).is_some() {
        if dir.socket().exists() {
            return Ok(rules);
        }
        // A proxy that listens elsewhere (an older layout's): ended, and started here.
        end_all(dir)?;
    }
    write_policy(dir, entries)?;
    let values = match secrets {
        Some(s) => Some(s.spec.values().map_err(|e| EgressError::Start {
            dir: dir.path().to_owned(),
            detail: format!("{e}; its secrets are read when its proxy starts"),
        })?),
        None => None,
    };
    start(dir, program, resolver, values)?;
    Ok(rules)
}

/// The box's rules, as kept in its directory, or made now (fresh
/// placeholders) for a box that has none yet.
fn secret_rules(dir: &ProxyDir, secrets: Injection<'_>) -> Result<InjectRules, EgressError> {
    let path = dir.path().join(layout::SECRETS);
    match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| io_error("cannot read", &path)(e.into())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let mut failed = None;
            let rules = InjectRules::new(secrets.box_id, secrets.spec, || {
                random_hex().unwrap_or_else(|e| {
                    failed = Some(e);
                    String::new()
                })
            });
            if let Some(e) = failed {
                return Err(io_error("cannot read", Path::new("/dev/urandom"))(e));
            }
            let text = serde_json::to_vec(&rules).map_err(|e| io_error("cannot encode", &path)(e.into()))?;
            write_private(dir, layout::SECRETS, &text)?;
            Ok(rules)
        }
        Err(e) => Err(io_error("cannot read", &path)(e)),
    }
}

/// 128 random bits as hex, from the kernel.
fn random_hex() -> io::Result<String> {
    use std::io::Read;
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// `name` in `dir`, written whole and readable by its owner only.
fn write_private(dir: &ProxyDir, name: &str, text: &[u8]) -> Result<(), EgressError> {
    let path = dir.path().join(name);
    let tmp = dir.path().join(format!("{name}.tmp"));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(io_error("cannot write", &tmp))?;
    f.write_all(text).and_then(|()| f.sync_all()).map_err(io_error("cannot write", &tmp))?;
    std::fs::rename(&tmp, &path).map_err(io_error("cannot write", &path))
}

/// The policy file, written whole (a temporary file renamed over it).
fn write_policy(dir: &ProxyDir, entries: &[String]) -> Result<(), EgressError> {
    let path = dir.policy();
    let text = serde_json::to_vec(entries).map_err(|e| io_error("cannot encode", &path)(e.into()))?;
    write_private(dir, layout::POLICY, &text)
}

fn start(
    dir: &ProxyDir,
    program: &Path,
    resolver: Option<SocketAddr>,
    values: Option<tinybox_egress::secrets::Values>,
) -> Result<(), EgressError> {
    let fail = |detail: String| EgressError::Start { dir: dir.path().to_owned(), detail };
    let stderr = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(dir.stderr())
        .map_err(io_error("cannot open", &dir.stderr()))?;
    let mut command = Command::new(program);
    command.arg("serve").arg("--dir").arg(dir.path());
    if let Some(server) = resolver {
        command.arg("--resolver").arg(server.to_string());
    }
    // Detached: its own process group, so a Ctrl-C at the caller's
    // terminal does not reach it, and nothing of the caller's environment.
    // Secrets' values go on a pipe, never in an argument, a variable or a file.
    let stdin = if values.is_some() { Stdio::piped() } else { Stdio::null() };
    command.env_clear().stdin(stdin).stdout(Stdio::piped()).stderr(stderr).process_group(0);
    if let Some(ca) = std::env::var_os(layout::UPSTREAM_CA_VAR).filter(|v| !v.is_empty()) {
        // Absolute: the proxy works in its own directory.
        command.env(layout::UPSTREAM_CA_VAR, std::path::absolute(Path::new(&ca)).unwrap_or_else(|_| ca.into()));
    }
    // The conformance suite's negative control only (ADR 0020): a proxy
    // that does not check SNI, which the kit's SNI claim must catch.
    if std::env::var_os(layout::UNCHECKED_SNI_VAR).is_some_and(|v| v == "1") {
        command.env(layout::UNCHECKED_SNI_VAR, "1");
    }
    let mut child = command.spawn().map_err(|e| fail(format!("cannot run {}: {e}", program.display())))?;
    if let (Some(values), Some(mut pipe)) = (values, child.stdin.take()) {
        // The proxy reads all of it before it listens.
        let text = serde_json::to_vec(&values).unwrap_or_default();
        let written = pipe.write_all(&text);
        drop(pipe);
        if let Err(e) = written {
            let _ = child.kill();
            let _ = child.wait();
            return Err(fail(format!("cannot hand the proxy its secrets: {e}")));
        }
    }
    let stdout = child.stdout.take().ok_or_else(|| fail("no pipe from the proxy".into()))?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = tx.send(BufReader::new(stdout).read_line(&mut line).map(|_| line));
    });
    match rx.recv_timeout(READY_TIMEOUT) {
        Ok(Ok(line)) if line.trim() == layout::READY => {
            // Reaped here if this process outlives it (a daemon, the module).
            std::thread::spawn(move || child.wait());
            Ok(())
        }
        outcome => {
            let _ = child.kill();
            let _ = child.wait();
            let why = match outcome {
                Err(_) => format!("it did not listen within {}s", READY_TIMEOUT.as_secs()),
                _ => "it ended before listening".to_owned(),
            };
            let said = std::fs::read_to_string(dir.stderr()).unwrap_or_default();
            let last = said.lines().last().unwrap_or("").trim().to_owned();
            Err(fail(if last.is_empty() { why } else { format!("{why}: {last}") }))
        }
    }
}

/// Whether `pid` is a live process (not a zombie) with `dir` as one of its
/// arguments.
fn names_dir(pid: i32, dir: &Path) -> bool {
    let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else { return false };
    let wanted = dir.as_os_str().as_encoded_bytes();
    cmdline.split(|b| *b == 0).any(|arg| arg == wanted) && alive(pid)
}

/// Whether `pid` exists and has not exited (a zombie has; so has one whose
/// exit is under way, which `/proc/PID/cmdline` no longer shows).
fn alive(pid: i32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = stat.rsplit(')').next().and_then(|s| s.split_whitespace().next());
    !matches!(state, None | Some("Z") | Some("X"))
}

/// The running proxy's pid, if its pid file names one that serves `dir`.
pub fn live_pid(dir: &ProxyDir) -> Option<i32> {
    let pid: i32 = std::fs::read_to_string(dir.pid()).ok()?.trim().parse().ok()?;
    names_dir(pid, dir.path()).then_some(pid)
}

/// Every live process serving `dir`: the pid file's, and any other (a
/// proxy started by a create interrupted before its pid file was written).
fn serving(dir: &ProxyDir) -> Vec<i32> {
    let me = std::process::id() as i32;
    let mut found: Vec<i32> = live_pid(dir).into_iter().collect();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else { continue };
        if pid != me && !found.contains(&pid) && names_dir(pid, dir.path()) {
            found.push(pid);
        }
    }
    found
}

/// Stops the proxy for `dir` (SIGTERM, then SIGKILL) and removes the
/// directory. Nothing there is no error.
pub fn stop(dir: &ProxyDir) -> Result<(), EgressError> {
    if !dir.path().exists() {
        return Ok(());
    }
    let lock = crate::store::file::lock_exclusive(&dir.lock())
        .map_err(|e| EgressError::Start { dir: dir.path().to_owned(), detail: e.to_string() })?;
    end_all(dir)?;
    drop(lock);
    match std::fs::remove_dir_all(dir.path()) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => {
            Err(EgressError::Io { context: "cannot remove", path: dir.path().to_owned(), source: e })
        }
        _ => Ok(()),
    }
}

/// For a box with secrets that stops (ADR 0032): its proxy is stopped and
/// its rules (the placeholders) and CA bundle removed, so the box resumed
/// gets a new CA and new placeholders; the decision log stays.
pub fn end_secrets(dir: &ProxyDir) -> Result<(), EgressError> {
    if !dir.path().exists() {
        return Ok(());
    }
    let _lock = crate::store::file::lock_exclusive(&dir.lock())
        .map_err(|e| EgressError::Start { dir: dir.path().to_owned(), detail: e.to_string() })?;
    end_all(dir)?;
    for name in [layout::SECRETS, layout::CA_BUNDLE] {
        let path = dir.path().join(name);
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(io_error("cannot remove", &path)(e)),
            _ => {}
        }
    }
    Ok(())
}

/// Ends every process serving `dir`, under its lock.
fn end_all(dir: &ProxyDir) -> Result<(), EgressError> {
    for signal in [Signal::TERM, Signal::KILL] {
        let pids = serving(dir);
        if pids.is_empty() {
            break;
        }
        for pid in &pids {
            if let Some(pid) = Pid::from_raw(*pid) {
                let _ = kill_process(pid, signal);
            }
        }
        let start = Instant::now();
        // Identified by its command line above; from here only whether it still runs counts.
        while pids.iter().any(|p| alive(*p)) && start.elapsed() < STOP_TIMEOUT {
            std::thread::sleep(POLL);
        }
    }
    if let Some(pid) = serving(dir).first() {
        return Err(EgressError::Stop { dir: dir.path().to_owned(), pid: *pid });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use tinybox_sdk::model::BoxId;

    use super::*;

    fn dir_in(tmp: &tempfile::TempDir) -> ProxyDir {
        ProxyDir::of(tmp.path(), "ns", &BoxId::new("box-1").unwrap())
    }

    #[test]
    fn a_pid_file_naming_a_process_that_does_not_serve_the_directory_is_no_proxy() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = dir_in(&tmp);
        std::fs::create_dir_all(dir.path()).unwrap();
        assert_eq!(live_pid(&dir), None, "no pid file");
        // This test process is alive, but its command line does not name the directory.
        std::fs::write(dir.pid(), std::process::id().to_string()).unwrap();
        assert_eq!(live_pid(&dir), None);
        std::fs::write(dir.pid(), "not a pid").unwrap();
        assert_eq!(live_pid(&dir), None);
    }

    #[test]
    fn a_process_naming_the_directory_is_found_stopped_and_the_directory_removed() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = dir_in(&tmp);
        std::fs::create_dir_all(dir.path()).unwrap();
        // A stand-in for the proxy: a shell with the directory as an
        // argument, waiting on a pipe nobody writes (a builtin, so the
        // shell itself is the process).
        let mut child =
            Command::new("sh").args(["-c", "read x", "proxy"]).arg(dir.path()).stdin(Stdio::piped()).spawn().unwrap();
        std::fs::write(dir.pid(), child.id().to_string()).unwrap();
        // Kept open here: `wait` would close it, and the shell would end on its own.
        let _stdin = child.stdin.take();
        let reaper = std::thread::spawn(move || child.wait());
        let start = Instant::now();
        while live_pid(&dir).is_none() {
            assert!(start.elapsed() < READY_TIMEOUT, "the stand-in never showed the directory");
            std::thread::sleep(POLL);
        }
        stop(&dir).unwrap();
        assert!(!dir.path().exists());
        assert!(reaper.join().unwrap().is_ok());
        stop(&dir).unwrap();
    }

    #[test]
    fn a_program_that_never_says_ready_is_a_start_error_quoting_its_stderr() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = dir_in(&tmp);
        let fake = tmp.path().join("fake-egress");
        std::fs::write(&fake, "#!/bin/sh\necho \"tinybox-egress: no policy here\" >&2\nexit 1\n").unwrap();
        std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let err = ensure_running(&dir, &["a.test".into()], &fake, None, None).unwrap_err().to_string();
        assert_eq!(
            err,
            format!(
                "cannot start the egress proxy in {}: it ended before listening: tinybox-egress: no policy here",
                dir.path().display()
            )
        );
        assert_eq!(std::fs::read_to_string(dir.policy()).unwrap(), r#"["a.test"]"#);
    }
}
