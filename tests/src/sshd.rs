//! Real sshd instances on loopback for the ssh live suites: each with its own
//! generated host key, authorized_keys and a known_hosts file for clients,
//! on a free 127.0.0.1 port, killed when dropped. Test users with different
//! login shells are made once (sshd and useradd need root; without it the
//! suites print `skipped:`). Never any address that is not on this machine.

use std::io::Read;
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tinybox_core::Tinybox;
use tinybox_core::clock::ManualClock;
use tinybox_core::driver::Timeouts;
use tinybox_core::hosts::HostEntry;
use tinybox_core::model::HostName;
use tinybox_core::store::MemoryStore;

/// Bounds a hung ssh call in a test; asserts nothing about speed.
pub const GUARD: Duration = Duration::from_secs(60);

/// Why the ssh suites cannot run here, or `None` when they can.
pub fn unavailable() -> Option<String> {
    if rustix::process::getuid().as_raw() != 0 {
        return Some("not root: sshd and test users need root (CI runs as root)".into());
    }
    for tool in ["/usr/sbin/sshd", "/usr/bin/ssh", "/usr/bin/ssh-keygen"] {
        if !Path::new(tool).exists() {
            return Some(format!("{tool} is missing (apt-get install openssh-server)"));
        }
    }
    None
}

fn run_ok(cmd: &mut Command) {
    let out = cmd.stdin(Stdio::null()).output().expect("run helper");
    assert!(out.status.success(), "{cmd:?} failed: {}", String::from_utf8_lossy(&out.stderr));
}

/// A key pair in `dir`, returning the private key's path.
pub fn keygen(dir: &Path, name: &str) -> PathBuf {
    let key = dir.join(name);
    run_ok(Command::new("ssh-keygen").args(["-q", "-t", "ed25519", "-N", "", "-C", name, "-f"]).arg(&key));
    key
}

/// Makes `name` with login shell `shell` (once), unlocked for key logins.
/// `None` when the shell is not installed here.
pub fn ensure_user(name: &str, shell: &str) -> Option<String> {
    if !Path::new(shell).exists() {
        return None;
    }
    // useradd is not safe to run concurrently (two can race for one uid).
    static USERS: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one_at_a_time = USERS.lock().unwrap_or_else(|e| e.into_inner());
    let exists =
        Command::new("id").arg(name).stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok_and(|s| s.success());
    if !exists {
        // A concurrent test may have made it first; the check after settles it.
        let _ = Command::new("useradd").args(["--create-home", "--shell", shell, name]).stderr(Stdio::null()).status();
    }
    run_ok(Command::new("usermod").args(["--shell", shell, name]));
    // `*` is "no password", not "locked": sshd without PAM refuses locked accounts.
    run_ok(Command::new("usermod").args(["-p", "*", name]));
    // The home is the user's own, whatever an earlier interrupted run left.
    let home = Path::new("/home").join(name);
    std::fs::create_dir_all(&home).expect("home directory");
    run_ok(Command::new("chown").arg(format!("{name}:{name}")).arg(&home));
    Some(name.to_owned())
}

/// `ensure_user` as a principal the CLI can run as.
pub fn principal(name: &str) -> crate::boxes::Principal {
    let id = |flag: &str| -> u32 {
        let out = Command::new("id").arg(flag).arg(name).output().expect("id");
        String::from_utf8_lossy(&out.stdout).trim().parse().expect("numeric id")
    };
    crate::boxes::Principal::User { name: name.to_owned(), uid: id("-u"), gid: id("-g") }
}

/// One sshd on 127.0.0.1, with a client key every listed user accepts.
pub struct Sshd {
    pub dir: tempfile::TempDir,
    pub port: u16,
    /// The client's private key (authorized for every user).
    pub client_key: PathBuf,
    /// A known_hosts file holding this server's key.
    pub known_hosts: PathBuf,
    child: Child,
}

impl Sshd {
    /// Starts one, or says why it cannot here.
    pub fn start() -> Result<Sshd, String> {
        Sshd::start_with("")
    }

    /// Starts one with extra sshd_config lines.
    pub fn start_with(extra_config: &str) -> Result<Sshd, String> {
        if let Some(why) = unavailable() {
            return Err(why);
        }
        std::fs::create_dir_all("/run/sshd").map_err(|e| format!("mkdir /run/sshd: {e}"))?;
        let dir = tempfile::Builder::new().prefix("tbx-sshd").tempdir().map_err(|e| e.to_string())?;
        // sshd reads authorized_keys as the user logging in.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).map_err(|e| e.to_string())?;
        let host_key = keygen(dir.path(), "host_key");
        let client_key = keygen(dir.path(), "client_key");
        let authorized = dir.path().join("authorized_keys");
        std::fs::copy(client_key.with_extension("pub"), &authorized).map_err(|e| e.to_string())?;
        std::fs::set_permissions(&authorized, std::fs::Permissions::from_mode(0o644)).map_err(|e| e.to_string())?;
        let mut last_err = String::new();
        for _ in 0..5 {
            let port = free_port();
            let config = dir.path().join("sshd_config");
            std::fs::write(
                &config,
                format!(
                    "Port {port}\nListenAddress 127.0.0.1\nHostKey {hk}\nPidFile {d}/sshd.pid\nAuthorizedKeysFile {ak}\n\
                     PasswordAuthentication no\nKbdInteractiveAuthentication no\nPubkeyAuthentication yes\nUsePAM no\n\
                     StrictModes no\nPermitRootLogin prohibit-password\nMaxStartups 50:30:100\nMaxSessions 50\n{extra_config}\n",
                    hk = host_key.display(),
                    d = dir.path().display(),
                    ak = authorized.display(),
                ),
            )
            .map_err(|e| e.to_string())?;
            let log = dir.path().join("sshd.log");
            let mut child = Command::new("/usr/sbin/sshd")
                .arg("-D")
                .arg("-f")
                .arg(&config)
                .arg("-E")
                .arg(&log)
                .stdin(Stdio::null())
                .spawn()
                .map_err(|e| format!("cannot start sshd: {e}"))?;
            let deadline = Instant::now() + Duration::from_secs(10);
            let up = loop {
                if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                    break true;
                }
                if child.try_wait().ok().flatten().is_some() || Instant::now() > deadline {
                    break false;
                }
                std::thread::sleep(Duration::from_millis(20));
            };
            if !up {
                let _ = child.kill();
                let _ = child.wait();
                last_err = std::fs::read_to_string(&log).unwrap_or_default();
                continue;
            }
            let known_hosts = dir.path().join("known_hosts");
            let pubkey = std::fs::read_to_string(host_key.with_extension("pub")).map_err(|e| e.to_string())?;
            std::fs::write(&known_hosts, format!("[127.0.0.1]:{port} {pubkey}")).map_err(|e| e.to_string())?;
            std::fs::set_permissions(&known_hosts, std::fs::Permissions::from_mode(0o644))
                .map_err(|e| e.to_string())?;
            return Ok(Sshd { dir, port, client_key, known_hosts, child });
        }
        Err(format!("sshd did not start: {last_err}"))
    }

    /// The host configuration tinybox needs to reach `user` here.
    pub fn config(&self, user: &str) -> serde_json::Value {
        serde_json::json!({
            "destination": "127.0.0.1",
            "port": self.port,
            "user": user,
            "identity_file": self.client_key,
            "known_hosts_file": self.known_hosts,
        })
    }

    /// `tinybox host add NAME ...`'s arguments reaching `user` here.
    pub fn host_add_args(&self, name: &str, user: &str) -> Vec<String> {
        let mut args: Vec<String> = ["host", "add", name, "--ssh", "127.0.0.1", "--port"].map(String::from).into();
        args.push(self.port.to_string());
        args.extend(["--user".into(), user.into(), "--identity".into()]);
        args.push(self.client_key.display().to_string());
        args.push("--known-hosts".into());
        args.push(self.known_hosts.display().to_string());
        args
    }

    /// A host entry reaching `user` here through `inner` (local when `None`).
    pub fn entry(&self, user: &str, inner: Option<&str>) -> HostEntry {
        HostEntry { driver: "ssh".into(), config: self.config(user), inner: inner.map(|i| HostName::new(i).unwrap()) }
    }

    /// Authorizes one more public key (for every user).
    pub fn authorize(&self, public_key: &Path) {
        let mut keys = std::fs::read_to_string(self.dir.path().join("authorized_keys")).unwrap();
        keys.push_str(&std::fs::read_to_string(public_key).unwrap());
        std::fs::write(self.dir.path().join("authorized_keys"), keys).unwrap();
    }

    /// sshd's own log, for assertion messages.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("sshd.log")).unwrap_or_default()
    }

    /// `ssh` to `user` here with this server's key and known_hosts: (status, stdout, stderr).
    pub fn ssh(&self, user: &str, remote: &str) -> (i32, String, String) {
        let out = Command::new("ssh")
            .args(["-T", "-o", "BatchMode=yes", "-p", &self.port.to_string(), "-l", user, "-i"])
            .arg(&self.client_key)
            .arg("-o")
            .arg(format!("UserKnownHostsFile={}", self.known_hosts.display()))
            .args(["--", "127.0.0.1", remote])
            .stdin(Stdio::null())
            .output()
            .expect("run ssh");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// Kills every connection this sshd serves (its per-connection processes
    /// and everything under them), as a network failure would end them.
    pub fn kill_connections(&self) -> usize {
        let pids = descendants(self.child.id() as i32);
        for &p in &pids {
            if let Some(pid) = rustix::process::Pid::from_raw(p) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
        }
        pids.len()
    }
}

/// Every process below `root` (children, their children, ...).
pub fn descendants(root: i32) -> Vec<i32> {
    let mut parent_of = Vec::new();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for entry in dir.flatten() {
            let Some(pid) = entry.file_name().to_str().and_then(|p| p.parse::<i32>().ok()) else { continue };
            let mut stat = String::new();
            if std::fs::File::open(entry.path().join("stat")).and_then(|mut f| f.read_to_string(&mut stat)).is_err() {
                continue;
            }
            // pid (comm) state ppid ...
            let ppid: Option<i32> =
                stat.rsplit(')').next().and_then(|rest| rest.split_whitespace().nth(1)).and_then(|p| p.parse().ok());
            if let Some(ppid) = ppid {
                parent_of.push((pid, ppid));
            }
        }
    }
    let mut found = vec![root];
    let mut i = 0;
    while i < found.len() {
        let p = found[i];
        found.extend(parent_of.iter().filter(|(_, pp)| *pp == p).map(|(c, _)| *c));
        i += 1;
    }
    found.remove(0);
    found
}

impl Drop for Sshd {
    fn drop(&mut self) {
        // Shared connections (ssh's ControlPersist masters) end with their sessions.
        self.kill_connections();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    l.local_addr().expect("local addr").port()
}

/// An engine over a memory store whose host table has `hosts` besides local.
pub fn engine(hosts: &[(&str, HostEntry)]) -> Tinybox {
    let timeouts = Timeouts { handshake: Duration::from_secs(10), operation: GUARD, cancel: Duration::from_secs(15) };
    let mut config = crate::driver_config(&[], timeouts);
    for (name, entry) in hosts {
        config.hosts.insert(HostName::new(*name).unwrap(), entry.clone());
    }
    Tinybox::with_parts(Arc::new(MemoryStore::new()), None, Arc::new(ManualClock::new(1000)), config).expect("engine")
}
