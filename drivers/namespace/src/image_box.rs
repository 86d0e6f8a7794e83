//! Namespace boxes made from an image (docs/adr/0029-namespace-image-boxes.md):
//! a place that keeps its files and its processes until it is removed.
//!
//! The box's directory (its own workspace directory, found from its
//! namespace and identifier alone) holds `upper/` and `work/`, the box's
//! writable layer over the image's read-only root; `merged/`, where the two
//! meet; `ctl/`, the one directory of the host the box sees (at
//! [`CTL_IN_BOX`]), where its agent listens; and the box's log. The box's
//! processes are found from that directory alone ([`holders`]).
//!
//! One bwrap holds the box for its life: started detached through the same
//! start shell as every namespace command (cgroups, the seccomp program on
//! descriptor 3, the egress fence), then [`crate::overlay`] mounts the
//! overlay in a mount namespace of its own and becomes bwrap, whose command
//! is the agent (the `tinybox-agent` crate's `tinybox-microvm-agent
//! --listen`, the microVM's own agent and wire). Each exec is a session on the agent's socket: the command is
//! the agent's child, so it has the box's namespaces, seccomp program,
//! no-new-privileges, cgroups and dropped capabilities by inheritance, and
//! the environment the exec gives it and nothing else.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tinybox_agent::host::{self, Cancelled, HostError, Running};
use tinybox_agent::wire::{Exec, Tty};
use tinybox_sdk::model::ExitStatus;
use tinybox_sdk::protocol::{DriverError, ExecParams, ImageRoot};

/// The agent, built static (build.rs): an image's root may have any C library or none.
pub const AGENT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/tinybox-microvm-agent"));

/// Where the box sees its agent and the directory its socket is in.
pub const AGENT_IN_BOX: &str = "/run/tinybox/agent";
pub const CTL_IN_BOX: &str = "/run/tinybox/ctl";
pub const SOCKET: &str = "agent.sock";

/// What the box's record keeps of its image.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageHandle {
    pub id: String,
    pub rootfs: PathBuf,
    #[serde(default)]
    pub env: Vec<(String, String)>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub working_dir: Option<String>,
}

impl ImageHandle {
    /// The record of `image`; its `NAME=VALUE` lines split (a line with no
    /// `=` is refused, as docker does).
    pub fn of(image: &ImageRoot) -> Result<ImageHandle, DriverError> {
        let mut env = Vec::new();
        for line in &image.env {
            let (k, v) = line.split_once('=').ok_or_else(|| {
                DriverError::invalid(format!("image {} has an Env line {line:?} that is not NAME=VALUE", image.id))
            })?;
            env.push((k.to_owned(), v.to_owned()));
        }
        Ok(ImageHandle {
            id: image.id.clone(),
            rootfs: image.rootfs.clone(),
            env,
            working_dir: image.working_dir.clone().filter(|d| d.starts_with('/')),
        })
    }
}

/// The parts of a box's directory.
#[derive(Debug, Clone)]
pub struct Dirs {
    pub root: PathBuf,
}

impl Dirs {
    pub fn new(root: &Path) -> Dirs {
        Dirs { root: root.to_owned() }
    }
    pub fn upper(&self) -> PathBuf {
        self.root.join("upper")
    }
    pub fn work(&self) -> PathBuf {
        self.root.join("work")
    }
    pub fn merged(&self) -> PathBuf {
        self.root.join("merged")
    }
    pub fn ctl(&self) -> PathBuf {
        self.root.join("ctl")
    }
    pub fn log(&self) -> PathBuf {
        self.root.join("box.log")
    }

    /// Makes the layer directories (the box's directory itself exists; its
    /// layer may already, copied from a snapshot).
    pub fn make(&self) -> std::io::Result<()> {
        use std::os::unix::fs::DirBuilderExt as _;
        for d in [self.upper(), self.work(), self.merged(), self.ctl()] {
            match std::fs::DirBuilder::new().mode(0o700).create(&d) {
                // The layer, seeded from a snapshot.
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && d == self.upper() => {}
                other => other?,
            }
        }
        Ok(())
    }

    /// The last lines of the box's log, for an error that says why.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(self.log()).unwrap_or_default();
        let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
        lines[lines.len().saturating_sub(4)..].join("; ")
    }
}

/// The agent as a file in `dir` (the driver's state directory), named by
/// its contents so a newer driver never replaces the one a running box
/// uses; written whole (0755) when missing.
pub fn agent_file(dir: &Path) -> Result<PathBuf, DriverError> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let hash = blake3::hash(AGENT).to_hex();
    let path = dir.join(format!("agent-{}", &hash[..16]));
    if std::fs::metadata(&path).is_ok_and(|m| m.len() == AGENT.len() as u64) {
        return Ok(path);
    }
    let tmp = dir.join(format!(".agent.{}.tmp", std::process::id()));
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o755)
        .open(&tmp)
        .and_then(|mut f| f.write_all(AGENT))
        .and_then(|()| std::fs::rename(&tmp, &path))
        .map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            DriverError::failed(format!("cannot write the box agent to {}: {e}", path.display()))
        })?;
    Ok(path)
}

/// Connects to the box's agent. The socket's directory is the box's to
/// write, so the path is opened without following a link and must be a
/// socket: a box cannot point this process at another socket of the host.
async fn connect(dirs: &Dirs) -> std::io::Result<tokio::net::UnixStream> {
    use rustix::fs::{FileType, Mode, OFlags};
    let path = dirs.ctl().join(SOCKET);
    let fd = rustix::fs::open(&path, OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())?;
    let stat = rustix::fs::fstat(&fd)?;
    if FileType::from_raw_mode(stat.st_mode) != FileType::Socket {
        return Err(std::io::Error::other(format!("{} is not a socket", path.display())));
    }
    let via = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&fd));
    let stream = tokio::net::UnixStream::connect(&via).await;
    drop(fd);
    stream
}

/// Opens a session with the box's agent.
async fn open(dirs: &Dirs, wait: Duration) -> Result<host::Session, DriverError> {
    let stream = connect(dirs).await.map_err(|e| {
        DriverError::failed(format!(
            "cannot reach the box's agent ({e}); the box is not running: stop and resume it, or remove it"
        ))
    })?;
    host::begin(stream, wait).await.map_err(lost)
}

fn lost(e: HostError) -> DriverError {
    DriverError::failed(format!("the box's agent: {e}"))
}

/// Waits until the agent of a box just started answers, or `pid` (what
/// its start became: its bwrap, or the egress namespace's shell) has gone
/// (then the log says why). A bound on a box that never comes up, not
/// on speed.
pub async fn wait_ready(dirs: &Dirs, pid: i32) -> Result<(), DriverError> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(stream) = connect(dirs).await {
            return host::begin(stream, Duration::from_secs(10)).await.map(drop).map_err(lost);
        }
        if !Path::new(&format!("/proc/{pid}")).exists() {
            return Err(DriverError::failed(format!("the box stopped as it started: {}", dirs.log_tail())));
        }
        if Instant::now() > deadline {
            return Err(DriverError::failed(format!("the box's agent did not listen within 30s: {}", dirs.log_tail())));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The box's two bwrap processes on the host (the one this driver started
/// and the box's init, its fork, pid 1 of the box's pid namespace): every
/// process whose program is bwrap and whose arguments name the box's
/// `ctl` directory, which is unique to the box and named by its namespace
/// and identifier. Found this way, not from a pid file, so a create
/// interrupted at any step leaves nothing that `rm` cannot find.
pub fn holders(dirs: &Dirs) -> Vec<i32> {
    let ctl = dirs.ctl().display().to_string();
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let mut words = cmdline.split(|b| *b == 0);
            let program = words.next().unwrap_or_default();
            (program == b"bwrap" || program.ends_with(b"/bwrap")) && words.any(|w| w == ctl.as_bytes())
        })
        .collect()
}

/// Ends the box's processes: SIGKILL to its bwrap processes ([`holders`]);
/// the init's end takes every process of the box's pid namespace with it,
/// and the egress namespace's shell, whose bwrap ended, stops slirp4netns.
pub fn kill(dirs: &Dirs) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let pids = holders(dirs);
        if pids.is_empty() || Instant::now() > deadline {
            return;
        }
        for pid in pids {
            if let Some(p) = rustix::process::Pid::from_raw(pid) {
                let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
            }
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Whether the box's agent answers now.
pub async fn answers(dirs: &Dirs) -> bool {
    open(dirs, Duration::from_secs(5)).await.is_ok()
}

/// Runs one exec in the box through its agent.
pub async fn exec(
    dirs: &Dirs,
    image: &ImageHandle,
    p: ExecParams,
    running: &Running,
) -> Result<ExitStatus, DriverError> {
    let ExecParams { exec_id, request, box_env, stdio, .. } = p;
    // The image's environment, the box's over it, the command's over both.
    let mut env: std::collections::BTreeMap<String, String> = image.env.iter().cloned().collect();
    env.extend(box_env);
    env.extend(request.env);
    let cwd = match request.cwd {
        Some(c) if c.starts_with('/') => c,
        Some(c) => format!("{}/{c}", image.working_dir.as_deref().unwrap_or("").trim_end_matches('/')),
        None => image.working_dir.clone().unwrap_or_else(|| "/".to_owned()),
    };
    let exec = Exec {
        argv: request.argv,
        env: env.into_iter().collect(),
        cwd,
        tty: request.tty.map(|t| Tty { rows: t.rows, cols: t.cols }),
    };
    let work = async {
        let session = open(dirs, Duration::from_secs(30)).await?;
        let fds = tinybox_sdk::stdio::receive(&stdio)
            .await
            .map_err(|e| DriverError::failed(format!("cannot receive the command's streams: {e}")))?;
        let fds = host::Stdio { stdin: fds.stdin, stdout: fds.stdout, stderr: fds.stderr };
        let exit = host::run(session, &exec, fds, &exec_id, running).await.map_err(lost)?;
        Ok(ExitStatus { code: exit.code, signal: exit.signal })
    };
    host::cancellable(running, &exec_id, work, |c| match c {
        Cancelled::BeforeStart => DriverError::failed("cancelled before the command reached the box's agent; it never ran"),
        Cancelled::Dropped => DriverError::failed(format!(
            "the command did not end within {}s of its cancel; its session was dropped, which makes the box's agent kill it",
            host::CANCEL_END.as_secs()
        )),
    })
    .await
}
