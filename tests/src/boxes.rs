//! Running the CLI as a given principal — root, or an unprivileged user for
//! rootless suites — against a store and workspace that principal owns,
//! cgroups delegated to that principal, and compiling the C probe that
//! escape suites run inside boxes.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

use crate::bin;

/// The unprivileged user rootless suites use (made by contrib/setup/start-test-user).
pub const TEST_USER: &str = "tinybox-test";

/// Who runs the CLI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Principal {
    /// This process's own user.
    Me,
    /// Another user, switched to with setpriv (which execs in place, so the
    /// process a test signals is tinybox itself).
    User { name: String, uid: u32, gid: u32 },
}

impl Principal {
    /// Every principal a suite should run as here: always this process's
    /// user, plus the unprivileged test user when we are root and it exists.
    /// Prints a `skipped:` line for the rootless run when it cannot happen.
    pub fn all(test: &str) -> Vec<Principal> {
        let mut all = vec![Principal::Me];
        match Principal::test_user() {
            Ok(p) => all.push(p),
            Err(why) => crate::skip(&format!("{test} (rootless)"), &why),
        }
        all
    }

    fn test_user() -> Result<Principal, String> {
        if rustix::process::getuid().as_raw() != 0 {
            return Err("not root, so cannot switch to another user (run as root, or as the test user directly)".into());
        }
        let id = |flag: &str| -> Result<u32, String> {
            let out = Command::new("id").arg(flag).arg(TEST_USER).output().map_err(|e| e.to_string())?;
            if !out.status.success() {
                return Err(format!("no user {TEST_USER}; contrib/setup/start-test-user creates it"));
            }
            String::from_utf8_lossy(&out.stdout).trim().parse().map_err(|e| format!("{e}"))
        };
        Ok(Principal::User { name: TEST_USER.into(), uid: id("-u")?, gid: id("-g")? })
    }

    pub fn label(&self) -> &str {
        match self {
            Principal::Me => "as this user",
            Principal::User { .. } => "rootless",
        }
    }

    /// Hands `path` to this principal.
    /// A symbolic link itself is handed over, never what it points to: a
    /// tree holding a link to `/etc` must not give the test user `/etc`.
    pub fn own(&self, path: &Path) {
        if let Principal::User { uid, gid, .. } = self {
            std::os::unix::fs::lchown(path, Some(*uid), Some(*gid)).expect("chown to the test user");
        }
    }

    /// Hands everything under `root` (itself included) to this principal,
    /// never descending through a symbolic link.
    pub fn own_tree(&self, root: &Path) {
        self.own(root);
        if std::fs::symlink_metadata(root).is_ok_and(|m| m.is_dir()) {
            for entry in std::fs::read_dir(root).expect("read a directory to hand over").flatten() {
                self.own_tree(&entry.path());
            }
        }
    }

    /// `program args` as this principal, with a minimal environment.
    pub fn command(&self, program: &Path, args: &[&str]) -> Command {
        let mut c = match self {
            Principal::Me => Command::new(program),
            Principal::User { uid, gid, name } => {
                let mut c = Command::new("setpriv");
                c.arg(format!("--reuid={uid}"))
                    .arg(format!("--regid={gid}"))
                    .arg("--init-groups")
                    .arg("--")
                    .arg(program);
                c.env("HOME", format!("/home/{name}")).env("USER", name);
                c
            }
        };
        c.args(args);
        c.env_remove("XDG_RUNTIME_DIR").env("PATH", "/usr/local/bin:/usr/bin:/bin").env("TINYBOX_DRIVER_PATH", "");
        c
    }
}

/// A cgroup v1 directory per controller, `/sys/fs/cgroup/<controller>/<name>`,
/// delegated to a user the way an administrator does: the directory and
/// its `cgroup.procs` and `tasks` chowned to the user. Removed when dropped,
/// with whatever was made under it and every process left in it, also when
/// the test failed.
pub struct DelegatedCgroup {
    /// The cgroup path from each hierarchy's root (`/<name>`).
    pub path: String,
    pub dirs: Vec<PathBuf>,
}

impl DelegatedCgroup {
    /// Makes `/sys/fs/cgroup/<c>/<name>` for each of `controllers`, handed
    /// to `uid:gid`. Only root can; the error says why it could not.
    pub fn make(name: &str, controllers: &[&str], uid: u32, gid: u32) -> Result<DelegatedCgroup, String> {
        let mut made = DelegatedCgroup { path: format!("/{name}"), dirs: Vec::new() };
        for c in controllers {
            let hierarchy = Path::new("/sys/fs/cgroup").join(c);
            if !hierarchy.join("cgroup.procs").is_file() || hierarchy.join("cgroup.controllers").exists() {
                return Err(format!("no cgroup v1 {c} hierarchy at {}", hierarchy.display()));
            }
            let dir = hierarchy.join(name);
            std::fs::create_dir(&dir).map_err(|e| format!("cannot make {}: {e}", dir.display()))?;
            made.dirs.push(dir.clone());
            for handed in [dir.clone(), dir.join("cgroup.procs"), dir.join("tasks")] {
                std::os::unix::fs::chown(&handed, Some(uid), Some(gid))
                    .map_err(|e| format!("cannot chown {}: {e}", handed.display()))?;
            }
        }
        Ok(made)
    }
}

/// Removes cgroup `dir` and every cgroup under it, deepest first, killing
/// what runs there. Bounded: gives up on a directory after 10 s.
fn remove_cgroup_tree(dir: &Path) {
    let children: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| d.flatten().map(|e| e.path()).filter(|p| p.is_dir()).collect())
        .unwrap_or_default();
    for child in children {
        remove_cgroup_tree(&child);
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::fs::remove_dir(dir).is_err() && dir.exists() && std::time::Instant::now() < deadline {
        let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
        for pid in procs.split_whitespace().filter_map(|p| p.parse().ok()).filter_map(rustix::process::Pid::from_raw) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
        }
        std::thread::yield_now();
    }
}

impl Drop for DelegatedCgroup {
    fn drop(&mut self) {
        for dir in &self.dirs {
            remove_cgroup_tree(dir);
            if dir.exists() {
                eprintln!("warning: cannot remove the test's cgroup {}", dir.display());
            }
        }
    }
}

/// A store and a workspace owned by one principal, and the CLI to drive them.
pub struct BoxEnv {
    pub who: Principal,
    pub store: tempfile::TempDir,
    pub workspace: tempfile::TempDir,
}

impl BoxEnv {
    pub fn new(who: &Principal) -> BoxEnv {
        let store = tempfile::tempdir().expect("store dir");
        let workspace = tempfile::tempdir().expect("workspace dir");
        who.own(store.path());
        who.own(workspace.path());
        BoxEnv { who: who.clone(), store, workspace }
    }

    /// `tinybox --store STORE ARGS` as the principal.
    pub fn cli(&self, args: &[&str]) -> Command {
        let mut all = vec!["--store", self.store.path().to_str().expect("utf-8 path")];
        all.extend_from_slice(args);
        self.who.command(&bin("tinybox"), &all)
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.cli(args).stdin(Stdio::null()).output().expect("run tinybox")
    }

    /// Creates a box over the workspace and returns its id.
    pub fn create(&self, extra: &[&str]) -> String {
        let ws = self.workspace.path().to_str().expect("utf-8 path").to_owned();
        let mut args = vec!["create", "--workspace", &ws];
        args.extend_from_slice(extra);
        let out = self.run(&args);
        assert!(
            out.status.success(),
            "{} create {extra:?}: {}",
            self.who.label(),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// Copies the compiled escape probe into the workspace, as /workspace/escape.
    pub fn install_probe(&self) {
        let dest = self.workspace.path().join("escape");
        std::fs::copy(escape_probe(), &dest).expect("copy probe");
        std::fs::set_permissions(&dest, std::fs::Permissions::from_mode(0o755)).expect("chmod probe");
        self.who.own(&dest);
    }
}

/// The escape probe (tests/probes/escape.c), compiled once per test process.
pub fn escape_probe() -> PathBuf {
    static PROBE: OnceLock<PathBuf> = OnceLock::new();
    PROBE
        .get_or_init(|| {
            let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("probes/escape.c");
            crate::compiled_probe("escape", &std::fs::read_to_string(src).expect("read the escape probe"))
        })
        .clone()
}

/// `name=value` lines from a probe's output.
pub fn probe_value(output: &[u8], name: &str) -> Option<String> {
    String::from_utf8_lossy(output).lines().find_map(|l| l.strip_prefix(&format!("{name}=")).map(str::to_owned))
}
