//! Shared helpers for tinybox's cross-crate and live suites: where the built
//! binaries are, an engine wired to them, and the visible "skipped" line a
//! live test prints when this machine lacks the real part it needs.

pub mod docker;

pub mod boxes;
pub mod microvm;
pub mod netns;
pub mod sshd;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tinybox_core::Tinybox;
use tinybox_core::clock::Clock;
use tinybox_core::driver::{DriverConfig, Timeouts};
use tinybox_core::store::MemoryStore;

/// The directory holding the workspace's built binaries (target/<profile>).
pub fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    // target/<profile>/deps/<test> -> target/<profile>
    let dir = exe.parent().and_then(Path::parent).expect("target dir").to_path_buf();
    for needed in ["tinybox", "tinybox-driver-local"] {
        assert!(
            dir.join(needed).exists(),
            "{} is missing: build the workspace's binaries first (cargo build --workspace --bins)",
            dir.join(needed).display()
        );
    }
    dir
}

/// A built binary of this workspace.
pub fn bin(name: &str) -> PathBuf {
    bin_dir().join(name)
}

/// Driver settings that find drivers in `extra` first, then the built ones.
pub fn driver_config(extra: &[PathBuf], timeouts: Timeouts) -> DriverConfig {
    let mut search_dirs = extra.to_vec();
    search_dirs.push(bin_dir());
    DriverConfig { search_dirs, timeouts, hosts: tinybox_core::hosts::local_only(), state_dir: None }
}

/// Short timeouts, so a misbehaving driver fails a test fast.
pub fn short_timeouts() -> Timeouts {
    Timeouts { handshake: Duration::from_secs(3), operation: Duration::from_secs(5), cancel: Duration::from_secs(4) }
}

/// An engine over a memory store, with drivers from `extra` and the build.
pub fn engine(extra: &[PathBuf], clock: Arc<dyn Clock>) -> Tinybox {
    Tinybox::with_parts(Arc::new(MemoryStore::new()), None, clock, driver_config(extra, short_timeouts()))
        .expect("engine")
}

/// Prints the line a live test shows when it cannot run here.
pub fn skip(test: &str, reason: &str) {
    eprintln!("skipped: {test}: {reason}");
    println!("skipped: {test}: {reason}");
}

/// Whether `program` is on PATH.
pub fn have(program: &str) -> bool {
    std::env::var_os("PATH").map(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file())).unwrap_or(false)
}

/// A `tinybox` command against its own store in a temporary directory.
pub struct Cli {
    pub home: tempfile::TempDir,
}

impl Cli {
    pub fn new() -> Cli {
        Cli { home: tempfile::tempdir().expect("temp dir") }
    }

    /// `tinybox --store <home> ARGS`, with only the workspace's built drivers.
    pub fn cmd(&self, args: &[&str]) -> std::process::Command {
        let mut c = std::process::Command::new(bin("tinybox"));
        c.arg("--store").arg(self.home.path()).args(args);
        c.env("TINYBOX_DRIVER_PATH", "").env("PATH", "/usr/local/bin:/usr/bin:/bin");
        c
    }

    /// `tinybox --store <home> ARGS`, finding drivers in `dirs` as well as
    /// the built ones (as a third party's installed driver is found).
    pub fn cmd_with_drivers(&self, dirs: &[&Path], args: &[&str]) -> std::process::Command {
        let mut c = self.cmd(args);
        c.env("TINYBOX_DRIVER_PATH", std::env::join_paths(dirs).expect("driver dirs"));
        c
    }

    /// Runs to completion with empty stdin; returns (status, stdout, stderr).
    pub fn run(&self, args: &[&str]) -> (i32, String, String) {
        let out = self.cmd(args).stdin(std::process::Stdio::null()).output().expect("run tinybox");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// Creates a box and returns its identifier.
    pub fn create(&self, args: &[&str]) -> String {
        let mut all = vec!["create"];
        all.extend_from_slice(args);
        let (code, out, err) = self.run(&all);
        assert_eq!(code, 0, "create {args:?} failed: {err}");
        out.trim().to_owned()
    }

    /// The store document's bytes (empty when there is none yet).
    pub fn store_bytes(&self) -> Vec<u8> {
        std::fs::read(self.home.path().join("boxes.json")).unwrap_or_default()
    }
}

impl Default for Cli {
    fn default() -> Self {
        Cli::new()
    }
}

/// Reads one line from `r`, failing the test if none arrives within `guard`.
/// The guard only stops a hung test; it asserts nothing about speed.
pub fn read_line_within<R: std::io::BufRead + Send + 'static>(mut r: R, guard: Duration) -> (String, R) {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let n = r.read_line(&mut line).expect("read line");
        let _ = tx.send((n, line, r));
    });
    match rx.recv_timeout(guard) {
        Ok((_, line, r)) => (line, r),
        Err(_) => panic!("no line within {guard:?}: output is not streaming or the command hung"),
    }
}

/// Streams for an in-process exec: empty stdin, stdout and stderr to pipes
/// the test reads.
pub fn piped_stdio() -> (tinybox_sdk::stdio::StdioFds, std::io::PipeReader, std::io::PipeReader) {
    let (out_r, out_w) = std::io::pipe().expect("pipe");
    let (err_r, err_w) = std::io::pipe().expect("pipe");
    let stdin = std::fs::File::open("/dev/null").expect("/dev/null");
    (tinybox_sdk::stdio::StdioFds { stdin: stdin.into(), stdout: out_w.into(), stderr: err_w.into() }, out_r, err_r)
}

/// Installs the test driver as `tinybox-driver-<mode>` in `dir`.
pub fn install_test_driver(dir: &Path, mode: &str) {
    let target = bin_dir().join("misbehaving-driver");
    std::os::unix::fs::symlink(target, dir.join(format!("tinybox-driver-{mode}"))).expect("symlink test driver");
}

/// Runs `argv` in box `id` and cancels it as soon as it has written its
/// first output (so the cancel surely finds it running); returns how it ended.
pub async fn exec_cancelled_once_started(
    tb: &Tinybox,
    id: &tinybox_core::model::BoxId,
    argv: &[&str],
) -> tinybox_core::ExecOutcome {
    use std::io::Read;
    let (stdio, mut out, _err) = piped_stdio();
    let (started_tx, started_rx) = tokio::sync::oneshot::channel::<()>();
    std::thread::spawn(move || {
        let mut first = [0u8; 1];
        let _ = out.read(&mut first);
        let _ = started_tx.send(());
    });
    let cancel = async move {
        let _ = started_rx.await;
    };
    let req = tinybox_core::model::ExecRequest::new(argv.iter().copied());
    tokio::time::timeout(Duration::from_secs(30), tb.exec(id, req, stdio, tinybox_core::Target::Workspace, cancel))
        .await
        .expect("a cancelled exec ends")
        .expect("the exec ran")
}

/// A child process killed (and reaped) when dropped, so a failing test
/// never leaves one holding the test runner's output pipe open.
pub struct KillOnDrop(pub std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
