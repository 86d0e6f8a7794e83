//! Callers SIGKILLed mid-exec leave their stream sockets in the runtime
//! directory (`x<pid>-<n>.sock` of a direct exec, `daemon-exec-<pid>-<n>.sock`
//! of one through the daemon): `reap`, a daemon's start and a running
//! daemon's rounds remove them. Never a socket whose pid lives (ours, here,
//! stands for a live process that is not tinybox), a name not of ours, or a
//! file that is not a socket.

use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::Child;

use tinybox_tests::Cli;
use tinybox_tests::chaos::kill;

use super::supervised::{Daemon, wait_until};
use crate::GUARD;

/// A store whose commands use a runtime directory of the test's own.
struct World {
    cli: Cli,
    runtime: tempfile::TempDir,
}

impl World {
    fn new() -> World {
        World { cli: Cli::new(), runtime: tempfile::tempdir().unwrap() }
    }

    fn cmd(&self, args: &[&str]) -> std::process::Command {
        let mut c = self.cli.cmd(args);
        c.env("XDG_RUNTIME_DIR", self.runtime.path());
        c
    }

    fn run_ok(&self, args: &[&str]) -> String {
        let out = self.cmd(args).stdin(std::process::Stdio::null()).output().unwrap();
        assert!(out.status.success(), "tinybox {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// Where tinybox makes its sockets: `$XDG_RUNTIME_DIR/tinybox`.
    fn dir(&self) -> PathBuf {
        self.runtime.path().join("tinybox")
    }

    /// An exec of box `id` that has started, killed; the socket it left.
    fn killed_exec(&self, id: &str, prefix: &str) -> PathBuf {
        let mut child: Child = self
            .cmd(&["exec", id, "--", "sh", "-c", "echo started; exec sleep 300"])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let stdout = std::io::BufReader::new(child.stdout.take().unwrap());
        let (line, _) = tinybox_tests::read_line_within(stdout, GUARD);
        assert_eq!(line, "started\n");
        let left = self.dir().join(format!("{prefix}{}-0.sock", child.id()));
        assert!(left.exists(), "no {} while the exec runs: {:?}", left.display(), entries(&self.dir()));
        kill(child.id());
        child.wait().unwrap();
        assert!(left.exists(), "the killed exec removed its own socket");
        left
    }
}

fn entries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default()
}

#[test]
fn sockets_of_killed_callers_are_removed_at_reap_daemon_start_and_by_a_running_daemon() {
    let world = World::new();
    let id = world.run_ok(&["create", "--sandbox", "passthrough"]);
    // What must stay: a live process's socket (this test's pid, not a
    // tinybox process), a dead pid's file that is no socket, a dead pid's
    // socket under a name that is not ours.
    let dead = 4_194_305; // above the kernel's pid limit: no process has it
    std::fs::create_dir_all(world.dir()).unwrap();
    let live = world.dir().join(format!("x{}-0.sock", std::process::id()));
    let _live = UnixListener::bind(&live).unwrap();
    let not_socket = world.dir().join(format!("x{dead}-1.sock"));
    std::fs::write(&not_socket, b"").unwrap();
    let not_ours = world.dir().join(format!("other{dead}-0.sock"));
    let _not_ours = UnixListener::bind(&not_ours).unwrap();
    let kept = [&live, &not_socket, &not_ours];

    let direct = world.killed_exec(&id, "x");
    world.run_ok(&["reap"]);
    assert!(!direct.exists(), "reap left {}", direct.display());

    let before_daemon = world.killed_exec(&id, "x");
    world.run_ok(&["daemon", "start"]);
    let daemon = Daemon { cli: &world.cli };
    assert!(!before_daemon.exists(), "daemon start left {}", before_daemon.display());

    let through = world.killed_exec(&id, "daemon-exec-");
    wait_until("the running daemon removing the killed caller's socket", || !through.exists());
    drop(daemon);
    for path in kept {
        assert!(path.exists(), "{} was removed", path.display());
    }
    world.run_ok(&["rm", &id]);
}
