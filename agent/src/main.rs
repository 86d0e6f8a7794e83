//! `tinybox-microvm-agent`, the in-box agent: the guest side of the microvm
//! sandbox, and the init of a namespace image box (`--listen`).
//!
//! Started by the initramfs's `/init` once the devices are up. It serves
//! every `tinybox.N` virtio-serial port on a thread of its own (see
//! [`tinybox_agent::wire`] for the sessions), and runs each command
//! in a cgroup of its own under `/sys/fs/cgroup/box`, where the box's pids
//! cap applies: when the command ends, or its host goes away, everything it
//! started is killed with the cgroup.
//!
//! An allowlist box's agent also serves its egress port (see `egress`):
//! `tb_egress=PORT` on the kernel command line names the loopback port the
//! box's proxy variables point at.
//!
//! `tinybox-microvm-agent --enter CGROUP -- ARGV...` is the agent's own
//! helper: it moves itself into CGROUP and becomes ARGV, so a command is
//! inside its cgroup before its first instruction.
//!
//! `tinybox-microvm-agent --session -- ARGV...` is the other: it leads a
//! session of its own whose controlling terminal is its standard input,
//! then becomes ARGV, so a command on a terminal needs no `setsid` of the
//! image's (a box may be made from any image).
//!
//! `tinybox-microvm-agent --listen PATH` is the same agent as the init of
//! a namespace image box (docs/adr/0029-namespace-image-boxes.md): it
//! serves the same wire on a UNIX socket it binds at PATH, one session per
//! connection, and what a command leaves running when it exits keeps
//! running for the next (the box is a place); a command whose host goes
//! away mid-run is still killed with everything it started. With `--relay
//! PORT SOCKET` (an allowlist box) it also carries the box's
//! `127.0.0.1:PORT` to its egress proxy's socket (see `relay`).

use std::fs::File;
use std::io::{self, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use rustix::process::Pid;
use tinybox_agent::mux;
use tinybox_agent::wire::{self, Exec, Exit, Hello, Kind, Tty};

mod egress;
mod group;
mod port;
mod relay;
mod user;

use group::{BOX_CGROUP, Group};
use port::{Leftovers, Port, log, pump_stream, set_nonblocking};

/// Stdin frames queued for a command before the port stops being read.
const STDIN_QUEUE: usize = 8;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("--version") => {
            println!("tinybox-microvm-agent {}", env!("CARGO_PKG_VERSION"));
            ExitCode::SUCCESS
        }
        Some("--enter") if args.len() >= 5 && args[3] == "--" => enter(&args[2], &args[4..]),
        Some("--listen") if args.len() == 3 => listen(Path::new(&args[2])),
        // An allowlist box's: `--listen PATH --relay PORT SOCKET` (relay.rs).
        Some("--listen") if args.len() == 6 && args[3] == "--relay" => match args[4].parse::<u16>() {
            Ok(port) => match relay::bind(port) {
                Ok(listener) => {
                    let socket = PathBuf::from(&args[5]);
                    std::thread::spawn(move || relay::serve(listener, socket));
                    listen(Path::new(&args[2]))
                }
                Err(e) => {
                    log(format_args!("cannot listen on 127.0.0.1:{port} for the egress relay: {e}"));
                    ExitCode::FAILURE
                }
            },
            Err(_) => {
                log(format_args!("--relay takes a port, not {:?}", args[4]));
                ExitCode::from(2)
            }
        },
        Some("--user") if args.len() >= 5 && args[3] == "--" => user::run_as(&args[2], &args[4..]),
        Some("--session") if args.len() >= 4 && args[2] == "--" => lead_session(&args[3..]),
        Some(other) => {
            log(format_args!("unknown argument {other:?}"));
            ExitCode::from(2)
        }
        None => serve(),
    }
}

/// Joins `cgroup`, then becomes `argv` (only returns if that fails). The
/// agent is shielded from the OOM killer (init.sh) and this process
/// inherited that: the command gives it up, so a command that exhausts the
/// guest's memory is what the kernel kills, never the agent.
fn enter(cgroup: &str, argv: &[String]) -> ExitCode {
    if let Err(e) = std::fs::write("/proc/self/oom_score_adj", "0") {
        eprintln!("tinybox: cannot make the command killable when memory runs out: {e}");
        return ExitCode::from(125);
    }
    if let Err(e) = std::fs::write(Path::new(cgroup).join("cgroup.procs"), "0") {
        eprintln!("tinybox: cannot enter cgroup {cgroup}: {e}");
        return ExitCode::from(125);
    }
    let err = Command::new(&argv[0]).args(&argv[1..]).exec();
    eprintln!("tinybox: cannot run {}: {err}", argv[0]);
    ExitCode::from(if err.kind() == io::ErrorKind::NotFound { 127 } else { 126 })
}

/// The command ports to serve: (device node, is it the health-check
/// port); and the egress port, if the box has one.
fn find_ports() -> (Vec<(PathBuf, bool)>, Option<PathBuf>) {
    let (mut ports, mut egress) = (Vec::new(), None);
    let Ok(entries) = std::fs::read_dir("/sys/class/virtio-ports") else { return (ports, egress) };
    for entry in entries.flatten() {
        let name = std::fs::read_to_string(entry.path().join("name")).unwrap_or_default();
        let dev = Path::new("/dev").join(entry.file_name());
        match name.trim().strip_prefix(wire::PORT_PREFIX) {
            Some(n) if n.parse::<usize>().is_ok() => ports.push((dev, n == "0")),
            _ if name.trim() == mux::PORT_NAME => egress = Some(dev),
            _ => {}
        }
    }
    (ports, egress)
}

fn serve() -> ExitCode {
    let expected: usize = std::env::var("tb_ports").ok().and_then(|v| v.parse().ok()).unwrap_or(wire::EXEC_PORTS + 1);
    let egress_port: Option<u16> = std::env::var("tb_egress").ok().and_then(|v| v.parse().ok());
    // The ports appear as the host's control messages arrive after the
    // module loads; wait for all of them (bounded) rather than serve a few.
    let deadline = Instant::now() + Duration::from_secs(30);
    let (mut ports, mut egress) = find_ports();
    while (ports.len() < expected || (egress_port.is_some() && egress.is_none())) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
        (ports, egress) = find_ports();
    }
    if ports.is_empty() {
        log(format_args!("no tinybox.N virtio-serial ports appeared"));
        return ExitCode::FAILURE;
    }
    match (egress_port, egress) {
        (Some(port), Some(dev)) => {
            std::thread::spawn(move || {
                if let Err(e) = egress::serve(&dev, port) {
                    log(format_args!("egress on 127.0.0.1:{port} over {}: {e}", dev.display()));
                }
            });
        }
        (Some(_), None) => log(format_args!("no {} virtio-serial port appeared", mux::PORT_NAME)),
        (None, _) => {}
    }
    let threads: Vec<_> = ports
        .into_iter()
        .map(|(dev, control)| {
            std::thread::spawn(move || {
                if let Err(e) = serve_port(&dev, control) {
                    log(format_args!("{}: {e}", dev.display()));
                }
            })
        })
        .collect();
    for t in threads {
        let _ = t.join();
    }
    ExitCode::FAILURE
}

fn hello() -> Hello {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let mem_total_kib = read("/proc/meminfo")
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0);
    let mut interfaces: Vec<String> = std::fs::read_dir("/sys/class/net")
        .map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).filter(|n| n != "lo").collect())
        .unwrap_or_default();
    interfaces.sort();
    Hello {
        agent: env!("CARGO_PKG_VERSION").into(),
        kernel: read("/proc/sys/kernel/osrelease").trim().to_owned(),
        cpus: std::thread::available_parallelism().map(|n| n.get() as u32).unwrap_or(1),
        mem_total_kib,
        pids_max: read(&format!("{BOX_CGROUP}/pids.max")).trim().parse().ok(),
        interfaces,
    }
}

/// What a port does next, once a session is over.
enum Next {
    /// Wait for a host to begin one.
    Idle,
    /// A host already has: answer it.
    Begin(Vec<u8>),
}

fn serve_port(dev: &Path, control: bool) -> io::Result<()> {
    let file = Arc::new(std::fs::OpenOptions::new().read(true).write(true).open(dev)?);
    let port = Port { file: file.clone(), writing: Arc::new(Mutex::new(())) };
    let mut next = Next::Idle;
    loop {
        let nonce = match next {
            Next::Begin(nonce) => nonce,
            Next::Idle => wait_for_begin(&port, dev)?,
        };
        if let Err(e) = answer(&port, &nonce) {
            // Never the end of the port: returning would leave it unserved
            // for the VM's life, every later command on it waiting out its open.
            log(format_args!("{}: answering a begin: {e}; waiting for the next", dev.display()));
            std::thread::sleep(Duration::from_millis(100));
            next = Next::Idle;
            continue;
        }
        next = if control {
            Next::Idle
        } else {
            session(&port, Leftovers::Kill).unwrap_or_else(|e| {
                log(format_args!("{}: {e}", dev.display()));
                Next::Idle
            })
        };
    }
}

/// Answers a begin with its sync and a fresh hello, in one write that
/// waits in the guest kernel until a host is connected.
///
/// Waiting, not failing, when the port looks closed: the guest reads a
/// host's data as it arrives but learns of hosts connecting and leaving
/// later (the port's open and close events come on the control queue and
/// are handled in a workqueue). So the next host's begin can be read while
/// the port still looks closed from the previous host leaving. Giving up
/// then (as this once did) lost that begin, and its host waited out its
/// whole open with the guest idle. If the begin's host did leave, the next
/// host skips this sync (not its nonce), and its own begin arrives in the
/// session that follows.
fn answer(port: &impl Writes, nonce: &[u8]) -> io::Result<()> {
    let mut frames = wire::encode(Kind::Sync, nonce);
    frames.extend(wire::encode(Kind::Hello, &serde_json::to_vec(&hello())?));
    send_answer(port, &frames)
}

/// Sends the answer to a begin (`frames`, one write's worth): at once, or,
/// when the port looks closed, once a host is connected (see [`answer`]).
fn send_answer(port: &impl Writes, frames: &[u8]) -> io::Result<()> {
    match port.send_now(frames) {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => {
            log(format_args!("the port looked closed when a begin came; answering once a host is connected"));
            port.send_waiting(frames)
        }
        sent => sent,
    }
}

/// The two ways a port writes (a trait so the rule above has a unit test).
trait Writes {
    /// Writes `bytes` whole; fails with `BrokenPipe` while no host is connected.
    fn send_now(&self, bytes: &[u8]) -> io::Result<()>;
    /// Writes `bytes` whole once a host is connected, however long that takes.
    fn send_waiting(&self, bytes: &[u8]) -> io::Result<()>;
}

impl Writes for Port {
    fn send_now(&self, bytes: &[u8]) -> io::Result<()> {
        self.send_raw(bytes)
    }

    fn send_waiting(&self, bytes: &[u8]) -> io::Result<()> {
        let _one = self.writing.lock().unwrap_or_else(|p| p.into_inner());
        // A blocking write to a virtio-serial port waits in the guest kernel
        // until a host is connected and there is room.
        set_nonblocking(&self.file, false)?;
        let written = (&*self.file).write_all(bytes);
        set_nonblocking(&self.file, true)?;
        written
    }
}

/// Greets until a host connects and sends a begin; its nonce.
fn wait_for_begin(port: &Port, dev: &Path) -> io::Result<Vec<u8>> {
    loop {
        // Blocks until a host is connected (the ready signal at boot).
        let greeting = port.send_waiting(&wire::encode(Kind::Hello, &serde_json::to_vec(&hello())?));
        if let Err(e) = greeting {
            log(format_args!("{}: hello: {e}", dev.display()));
            std::thread::sleep(Duration::from_millis(100));
            continue;
        }
        // Read until a begin; the end of the stream means no host is
        // connected (greet again); anything else was left by an old session.
        loop {
            match wire::read_frame(&mut &*port) {
                Ok(Some((Kind::Begin, nonce))) if nonce.len() == wire::NONCE => return Ok(nonce),
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => break,
            }
        }
    }
}

/// What ends a running command's session.
enum Event {
    Exited(std::process::ExitStatus),
    /// The host left (`None`) or another began a session (its nonce).
    HostGone(Option<Vec<u8>>),
}

/// Serves sessions on a UNIX socket bound at `path`, a thread per
/// connection, until the box ends.
fn listen(path: &Path) -> ExitCode {
    let _ = std::fs::remove_file(path);
    let listener = match std::os::unix::net::UnixListener::bind(path) {
        Ok(l) => l,
        Err(e) => {
            log(format_args!("cannot listen on {}: {e}", path.display()));
            return ExitCode::FAILURE;
        }
    };
    for conn in listener.incoming() {
        let stream = match conn {
            Ok(s) => s,
            Err(e) => {
                log(format_args!("accepting on {}: {e}", path.display()));
                continue;
            }
        };
        std::thread::spawn(move || {
            if let Err(e) = serve_connection(stream) {
                log(format_args!("a connection: {e}"));
            }
        });
    }
    ExitCode::FAILURE
}

/// One connection: sessions until the host hangs up. The host begins each
/// as on a port; the connection being its own, nothing before its sync
/// belongs to anyone else.
fn serve_connection(stream: std::os::unix::net::UnixStream) -> io::Result<()> {
    let file = File::from(std::os::fd::OwnedFd::from(stream));
    set_nonblocking(&file, true)?;
    let port = Port { file: Arc::new(file), writing: Arc::new(Mutex::new(())) };
    let mut next = Next::Idle;
    loop {
        let nonce = match next {
            Next::Begin(nonce) => nonce,
            Next::Idle => loop {
                match wire::read_frame(&mut &port)? {
                    Some((Kind::Begin, nonce)) if nonce.len() == wire::NONCE => break nonce,
                    Some(_) => {}
                    None => return Ok(()),
                }
            },
        };
        answer(&port, &nonce)?;
        next = session(&port, Leftovers::Keep)?;
        if matches!(next, Next::Idle) {
            return Ok(());
        }
    }
}

/// Runs one session's command; what the port does next.
fn session(port: &Port, leftovers: Leftovers) -> io::Result<Next> {
    let mut reader = port;
    let exec: Exec = loop {
        match wire::read_frame(&mut reader) {
            Ok(None) | Err(_) => return Ok(Next::Idle),
            Ok(Some((Kind::Exec, payload))) => break wire::decode(Kind::Exec, &payload)?,
            Ok(Some((Kind::Begin, nonce))) if nonce.len() == wire::NONCE => return Ok(Next::Begin(nonce)),
            Ok(Some((kind, _))) => log(format_args!("expected an exec frame, got {kind:?}")),
        }
    };
    if exec.argv.is_empty() {
        port.send(Kind::Stderr, b"tinybox: an empty argument vector cannot run\n")?;
        port.send(Kind::Exit, &serde_json::to_vec(&Exit { code: Some(127), signal: None })?)?;
        return Ok(after_exit(port));
    }
    let group = Group::new();
    let terminal = match exec.tty {
        Some(size) => Some(open_terminal(size)?),
        None => None,
    };
    // On a terminal the command leads a session of its own that the
    // terminal controls (the agent's own `--session`, as `setsid -c`): it
    // is no group leader, so setsid needs no fork, and that session is also
    // its process group.
    let argv: Vec<String> = match terminal {
        Some(_) => ["/proc/self/exe", "--session", "--"]
            .map(String::from)
            .into_iter()
            .chain(exec.argv.iter().cloned())
            .collect(),
        None => exec.argv.clone(),
    };
    let mut cmd = match &group.cgroup {
        Some(cg) => {
            let mut c = Command::new("/proc/self/exe");
            c.arg("--enter").arg(cg).arg("--").args(&argv);
            c
        }
        None => {
            let mut c = Command::new(&argv[0]);
            c.args(&argv[1..]);
            c
        }
    };
    cmd.env_clear().envs(exec.env.iter().map(|(k, v)| (k, v))).current_dir(&exec.cwd);
    match &terminal {
        Some((_, slave)) => {
            cmd.stdin(slave.try_clone()?).stdout(slave.try_clone()?).stderr(slave.try_clone()?);
        }
        None => {
            cmd.process_group(0).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
        }
    }
    let spawned = cmd.spawn();
    // Its copies of the slave: with them gone, the master reads EIO once
    // the command and all it started have closed theirs.
    drop(cmd);
    let terminal = terminal.map(|(master, _slave)| master);
    let mut child = match spawned {
        Ok(child) => child,
        Err(e) => {
            let msg = format!("tinybox: cannot run {} in {}: {e}\n", exec.argv[0], exec.cwd);
            port.send(Kind::Stderr, msg.as_bytes())?;
            port.send(Kind::Exit, &serde_json::to_vec(&Exit { code: Some(127), signal: None })?)?;
            return Ok(after_exit(port));
        }
    };
    let pid = Pid::from_child(&child);
    let (events, ended) = mpsc::channel::<Event>();

    // stdin: its own thread, so a command that does not read at once does
    // not stop this session from seeing signals or the host leaving. The
    // queue is short: when it is full the port is not read, which holds
    // the host back (a box's memory is small; stdin can be gigabytes).
    let (stdin_tx, stdin_rx) = mpsc::sync_channel::<Vec<u8>>(STDIN_QUEUE);
    let mut stdin: Option<Box<dyn Write + Send>> = match &terminal {
        Some(master) => Some(Box::new(File::from(master.try_clone()?))),
        None => child.stdin.take().map(|w| Box::new(w) as Box<dyn Write + Send>),
    };
    std::thread::spawn(move || {
        for chunk in stdin_rx {
            let Some(w) = stdin.as_mut() else { continue };
            if chunk.is_empty() || w.write_all(&chunk).is_err() {
                stdin = None;
            }
        }
    });
    // Dropped when the command exits: its streams are then read until
    // empty (Leftovers::Keep), not until every leftover closes them.
    let (exited_rd, exited_wr) = rustix::pipe::pipe()?;
    let pump = |r: File, kind: Kind| {
        let port = port.clone();
        let exited = match leftovers {
            Leftovers::Keep => Some(exited_rd.try_clone()),
            Leftovers::Kill => None,
        };
        std::thread::spawn(move || {
            let exited = exited.transpose().ok().flatten();
            pump_stream(r, kind, &port, exited.as_ref());
        })
    };
    let (out, err) = match &terminal {
        Some(master) => (pump(File::from(master.try_clone()?), Kind::Stdout), None),
        None => (
            pump(File::from(std::os::fd::OwnedFd::from(child.stdout.take().expect("piped"))), Kind::Stdout),
            Some(pump(File::from(std::os::fd::OwnedFd::from(child.stderr.take().expect("piped"))), Kind::Stderr)),
        ),
    };
    let resize_to = match &terminal {
        Some(master) => Some(master.try_clone()?),
        None => None,
    };
    {
        let events = events.clone();
        std::thread::spawn(move || {
            if let Ok(status) = child.wait() {
                let _ = events.send(Event::Exited(status));
            }
        });
    }
    {
        let port = port.clone();
        let group = group.clone();
        std::thread::spawn(move || {
            let mut reader = &port;
            loop {
                match wire::read_frame(&mut reader) {
                    Ok(Some((Kind::Stdin, data))) => {
                        let _ = stdin_tx.send(data);
                    }
                    Ok(Some((Kind::Signal, payload))) => {
                        if let Ok(s) = wire::decode::<wire::Signal>(Kind::Signal, &payload) {
                            group.signal(pid, s.signal);
                        }
                    }
                    Ok(Some((Kind::Resize, payload))) => {
                        if let (Some(master), Ok(size)) = (&resize_to, wire::decode::<Tty>(Kind::Resize, &payload)) {
                            let _ = set_size(master, size);
                        }
                    }
                    Ok(Some((Kind::Begin, nonce))) if nonce.len() == wire::NONCE => {
                        let _ = events.send(Event::HostGone(Some(nonce)));
                        return;
                    }
                    Ok(Some((kind, _))) => log(format_args!("unexpected {kind:?} frame during a command")),
                    Ok(None) | Err(_) => break,
                }
            }
            let _ = events.send(Event::HostGone(None));
        });
    }
    let next = match ended.recv().expect("the waiter or the reader reports") {
        Event::Exited(status) => {
            match leftovers {
                // Whatever the command left running ends with it.
                Leftovers::Kill => group.kill(pid),
                Leftovers::Keep => drop(exited_wr),
            }
            let _ = out.join();
            let _ = err.map(|e| e.join());
            let exit = Exit { code: status.code(), signal: status.signal() };
            if let Err(e) = port.send(Kind::Exit, &serde_json::to_vec(&exit)?) {
                // The host left first. Still wait for the reader below: left
                // running, it would take the next host's begin for itself.
                log(format_args!("the exit of a command: {e}"));
            }
            // The session lasts until the host leaves or another begins.
            loop {
                match ended.recv() {
                    Ok(Event::HostGone(nonce)) => break nonce,
                    Ok(Event::Exited(_)) => {}
                    Err(_) => break None,
                }
            }
        }
        Event::HostGone(nonce) => {
            group.kill(pid);
            while let Ok(Event::HostGone(_)) = ended.recv() {}
            let _ = out.join();
            let _ = err.map(|e| e.join());
            nonce
        }
    };
    group.remove();
    Ok(next.map(Next::Begin).unwrap_or(Next::Idle))
}

/// Leads a new session whose controlling terminal is standard input (a
/// terminal's slave), then becomes `argv` (only returns if that fails).
fn lead_session(argv: &[String]) -> ExitCode {
    if let Err(e) = rustix::process::setsid() {
        eprintln!("tinybox: cannot start a session for the terminal: {e}");
        return ExitCode::from(125);
    }
    if let Err(e) = rustix::process::ioctl_tiocsctty(std::io::stdin()) {
        eprintln!("tinybox: cannot make the terminal the session's: {e}");
        return ExitCode::from(125);
    }
    let err = Command::new(&argv[0]).args(&argv[1..]).exec();
    eprintln!("tinybox: cannot run {}: {err}", argv[0]);
    ExitCode::from(if err.kind() == io::ErrorKind::NotFound { 127 } else { 126 })
}

/// A fresh pseudo-terminal of `size`: (master, slave).
fn open_terminal(size: Tty) -> io::Result<(std::os::fd::OwnedFd, std::os::fd::OwnedFd)> {
    use rustix::pty::OpenptFlags;
    let flags = OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC;
    let master = rustix::pty::openpt(flags)?;
    rustix::pty::grantpt(&master)?;
    rustix::pty::unlockpt(&master)?;
    let slave = rustix::pty::ioctl_tiocgptpeer(&master, flags)?;
    set_size(&master, size)?;
    Ok((master, slave))
}

fn set_size(master: &std::os::fd::OwnedFd, size: Tty) -> io::Result<()> {
    let ws = rustix::termios::Winsize { ws_row: size.rows, ws_col: size.cols, ws_xpixel: 0, ws_ypixel: 0 };
    Ok(rustix::termios::tcsetwinsize(master, ws)?)
}

/// After an exit sent outside a running command: the session lasts until
/// the host leaves or another begins.
fn after_exit(port: &Port) -> Next {
    loop {
        match wire::read_frame(&mut &*port) {
            Ok(Some((Kind::Begin, nonce))) if nonce.len() == wire::NONCE => return Next::Begin(nonce),
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => return Next::Idle,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Condvar;

    /// A port as the guest sees it between two hosts: closed until
    /// `connect`, with what was written once it was open.
    struct Between {
        open: Mutex<bool>,
        opened: Condvar,
        written: Mutex<Vec<u8>>,
        /// Told when a write starts waiting for a host.
        waiting: mpsc::Sender<Option<io::Result<()>>>,
    }

    impl Between {
        fn connect(&self) {
            *self.open.lock().unwrap() = true;
            self.opened.notify_all();
        }
    }

    impl Writes for Between {
        fn send_now(&self, bytes: &[u8]) -> io::Result<()> {
            if !*self.open.lock().unwrap() {
                return Err(io::Error::new(io::ErrorKind::BrokenPipe, "no host"));
            }
            self.written.lock().unwrap().extend_from_slice(bytes);
            Ok(())
        }

        fn send_waiting(&self, bytes: &[u8]) -> io::Result<()> {
            self.waiting.send(None).unwrap();
            drop(self.opened.wait_while(self.open.lock().unwrap(), |open| !*open).unwrap());
            self.written.lock().unwrap().extend_from_slice(bytes);
            Ok(())
        }
    }

    /// A begin read while the port still looks closed (the previous host's
    /// leaving seen, the next one's arrival not yet) is not given up on: it
    /// is answered once the port opens, its sync first, then a hello.
    #[test]
    fn a_begin_read_while_the_port_looks_closed_is_answered_once_it_opens() {
        let (tx, events) = mpsc::channel();
        let port = Arc::new(Between {
            open: Mutex::new(false),
            opened: Condvar::new(),
            written: Mutex::new(Vec::new()),
            waiting: tx.clone(),
        });
        let nonce = [0x5a; wire::NONCE];
        let answering = {
            let port = port.clone();
            std::thread::spawn(move || tx.send(Some(answer(&*port, &nonce))).unwrap())
        };
        // Either the answer waits for a host, or it ended without one.
        match events.recv().unwrap() {
            None => {}
            Some(ended) => panic!("the answer ended with the port closed: {ended:?}"),
        }
        assert!(port.written.lock().unwrap().is_empty());
        port.connect();
        let ended = events.recv().unwrap();
        assert!(matches!(ended, Some(Ok(()))), "{ended:?}");
        answering.join().unwrap();
        let written = port.written.lock().unwrap().clone();
        let mut r = written.as_slice();
        assert_eq!(wire::read_frame(&mut r).unwrap(), Some((Kind::Sync, nonce.to_vec())));
        let (kind, payload) = wire::read_frame(&mut r).unwrap().unwrap();
        assert_eq!(kind, Kind::Hello);
        let hello: Hello = wire::decode(Kind::Hello, &payload).unwrap();
        assert!(!hello.agent.is_empty());
        assert!(r.is_empty(), "{} bytes after the hello", r.len());
    }
}
