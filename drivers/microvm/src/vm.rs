//! One box's QEMU: its command line, its runtime directory, and how it is
//! found alive or stopped. The process is detached (`-daemonize`) so it
//! outlives the tinybox command that made it; everything it needs at run
//! time lives in the box's directory under the driver's state directory:
//!
//!     qemu.pid  console.log  port-N.sock  port-N.lock
//!     [passt.sock passt.pid passt.log netwrap.log tinybox-net.*/]   (egress, see `egress`)
//!     [egress.sock relay.pid relay.log relay.lock]   (allowlist, see `relay`)
//!
//! State is read from the process, never from a record: a pid file whose
//! process is gone, or is no longer this box's QEMU, means the VM is gone.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal, kill_process};
use tinybox_agent::wire::EXEC_PORTS;

/// How the guest's CPU runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Accel {
    /// Hardware virtualization: the guest's code runs on the CPU, confined by it.
    Kvm,
    /// Emulation: QEMU interprets the guest; no hardware boundary.
    Tcg,
}

impl Accel {
    pub fn as_str(self) -> &'static str {
        match self {
            Accel::Kvm => "kvm",
            Accel::Tcg => "tcg",
        }
    }

    pub fn parse(s: &str) -> Option<Accel> {
        match s {
            "kvm" => Some(Accel::Kvm),
            "tcg" => Some(Accel::Tcg),
            _ => None,
        }
    }
}

/// A host path as one value of a QEMU `-opt key=value,...` string (QemuOpts
/// and keyval parse them alike). A value ends at the first comma unless
/// the comma is doubled, so commas are doubled; nothing else is special
/// inside a value (a key ends at the first `=`, so `=` after it is data;
/// there is no quoting, and newlines or other control characters are
/// passed to the system call as they are). `what` names the value in the
/// error for a path that is not UTF-8, which QEMU's options cannot carry
/// unchanged here.
pub fn option_value(what: &str, path: &Path) -> Result<String, String> {
    Ok(whole_argument(what, path)?.replace(',', ",,"))
}

/// A host path as a whole argument (`-kernel`, `-pidfile`, the rest of
/// `-serial file:`, passt's flags): the program takes it unparsed, so it
/// goes as it is, but it must be UTF-8 to go at all.
pub fn whole_argument(what: &str, path: &Path) -> Result<String, String> {
    path.to_str().map(str::to_owned).ok_or_else(|| {
        format!(
            "{what} {} is not valid UTF-8, which QEMU's and passt's arguments cannot carry; rename it",
            path.display()
        )
    })
}

/// The initramfs path for `-initrd`: QEMU takes it whole for a Linux
/// kernel, but splits it at commas (`,,` escaping one) when the kernel is
/// a multiboot image, and the configured kernel may be one. A path whose
/// meaning depends on the kernel is refused rather than guessed at.
fn initrd_argument(path: &Path) -> Result<String, String> {
    let value = whole_argument("the initramfs", path)?;
    if value.contains(',') {
        return Err(format!(
            "the initramfs {value} has a comma in its path, which QEMU reads differently for different kernels; set TINYBOX_CACHE_DIR to a directory without commas"
        ));
    }
    Ok(value)
}

/// The VM's egress port, a chardev socket QEMU listens on (the relay
/// connects to it).
pub const PORT_SOCKET: &str = "egress.sock";

/// How box-written files land on the host (9p `mapped-xattr`, ADR 0013):
/// created by QEMU's user with these modes; the modes, owners and file
/// types the guest sets live in `user.virtfs.*` extended attributes.
pub const FILE_MODE: u32 = 0o640;
pub const DIR_MODE: u32 = 0o750;

/// Everything a launch needs.
#[derive(Debug, Clone)]
pub struct Launch {
    pub accel: Accel,
    pub kernel: PathBuf,
    pub initramfs: PathBuf,
    pub cpus: u32,
    pub memory_mib: u64,
    pub pids: Option<u64>,
    /// The host directory shared at /workspace, if any.
    pub workspace: Option<PathBuf>,
    /// The passt socket giving the guest egress, if any.
    pub egress: Option<PathBuf>,
    /// For an allowlist box: the guest's loopback port its agent listens
    /// on for the egress relay (no NIC; one more virtio-serial port).
    pub allowlist: Option<u16>,
    /// How many ports (health check + exec).
    pub ports: usize,
    /// Under emulation, the guest's TSC runs at the host's rate; telling the
    /// kernel that rate spares it calibrating against an emulated PIT,
    /// which hangs the boot outright when the host is busy.
    pub tsc_khz: Option<u64>,
    /// The uid:gid QEMU becomes once it has opened its files (`-runas`):
    /// the workspace's owner when tinybox runs as root (ADR 0013).
    pub runas: Option<(u32, u32)>,
    /// For a box made from an image: its qcow2 overlay, the guest's root
    /// disk (ADR 0036); such a box also gets QEMU's monitor (`qmp`).
    pub disk: Option<PathBuf>,
    /// Start waiting for a migration stream on the monitor
    /// (`-incoming defer`): a restore from a memory snapshot (ADR 0037).
    pub incoming: bool,
}

/// The kernel command line: quiet, no probing of hardware a microvm lacks.
pub fn cmdline(l: &Launch) -> String {
    let mut words = vec![
        "console=ttyS0",
        "quiet",
        "panic=-1",
        "pci=off",
        "cryptomgr.notests",
        "random.trust_cpu=on",
        "i8042.noaux",
        "i8042.nomux",
        "i8042.nopnp",
        "i8042.dumbkbd",
        "no_timer_check",
        "tsc=reliable",
    ]
    .into_iter()
    .map(String::from)
    .collect::<Vec<_>>();
    words.push(format!("tb_ports={}", l.ports));
    if l.workspace.is_some() {
        words.push("tb_ws=1".into());
    }
    words.push(format!("tb_net={}", if l.egress.is_some() { "egress" } else { "none" }));
    if let Some(port) = l.allowlist {
        words.push(format!("tb_egress={port}"));
    }
    if let (Accel::Tcg, Some(khz)) = (l.accel, l.tsc_khz) {
        words.push(format!("tsc_early_khz={khz}"));
    }
    if let Some(p) = l.pids {
        words.push(format!("tb_pids={p}"));
    }
    if l.disk.is_some() {
        words.push("tb_root=1".into());
    }
    words.join(" ")
}

pub fn port_socket(dir: &Path, n: usize) -> PathBuf {
    dir.join(format!("port-{n}.sock"))
}

pub fn port_lock(dir: &Path, n: usize) -> PathBuf {
    dir.join(format!("port-{n}.lock"))
}

/// QEMU's arguments (after the program) for a box in `dir`; refused when a
/// path cannot reach QEMU unchanged (see `option_value`).
pub fn qemu_args(l: &Launch, dir: &Path) -> Result<Vec<String>, String> {
    let mut a: Vec<String> =
        vec!["-M".into(), "microvm,x-option-roms=off".into(), "-accel".into(), l.accel.as_str().into()];
    if l.accel == Accel::Kvm {
        a.extend(["-cpu".into(), "host".into()]);
    }
    a.extend([
        "-smp".into(),
        l.cpus.to_string(),
        "-m".into(),
        format!("{}M", l.memory_mib),
        "-nodefaults".into(),
        "-no-user-config".into(),
        "-nographic".into(),
        "-no-reboot".into(),
        "-kernel".into(),
        whole_argument("the kernel", &l.kernel)?,
        "-initrd".into(),
        initrd_argument(&l.initramfs)?,
        "-append".into(),
        cmdline(l),
        "-serial".into(),
        // `file:` takes the rest of the argument whole: no escaping.
        format!("file:{}", whole_argument("the box directory", &dir.join("console.log"))?),
        "-device".into(),
        format!("virtio-serial-device,max_ports={}", l.ports + 1 + usize::from(l.allowlist.is_some())),
    ]);
    for n in 0..l.ports {
        a.push("-chardev".into());
        a.push(format!(
            "socket,id=p{n},path={},server=on,wait=off",
            option_value("the box directory", &port_socket(dir, n))?
        ));
        a.push("-device".into());
        a.push(format!("virtserialport,chardev=p{n},name=tinybox.{n}"));
    }
    if l.allowlist.is_some() {
        a.push("-chardev".into());
        a.push(format!(
            "socket,id=eg,path={},server=on,wait=off",
            option_value("the box directory", &dir.join(PORT_SOCKET))?
        ));
        a.push("-device".into());
        a.push(format!("virtserialport,chardev=eg,name={}", tinybox_agent::mux::PORT_NAME));
    }
    if let Some(ws) = &l.workspace {
        a.push("-fsdev".into());
        a.push(format!(
            "local,id=ws,path={},security_model=mapped-xattr,fmode={FILE_MODE:04o},dmode={DIR_MODE:04o}",
            option_value("the workspace", ws)?
        ));
        a.push("-device".into());
        a.push("virtio-9p-device,fsdev=ws,mount_tag=ws".into());
    }
    if let Some(sock) = &l.egress {
        a.push("-netdev".into());
        a.push(format!(
            "stream,id=n0,server=off,addr.type=unix,addr.path={}",
            option_value("the box directory", sock)?
        ));
        a.push("-device".into());
        a.push("virtio-net-device,netdev=n0".into());
    }
    if let Some(disk) = &l.disk {
        a.push("-drive".into());
        a.push(format!("file={},if=none,id=root,format=qcow2,discard=unmap", option_value("the box's disk", disk)?));
        a.push("-device".into());
        a.push("virtio-blk-device,drive=root".into());
        a.push("-chardev".into());
        a.push(format!(
            "socket,id=qmp,path={},server=on,wait=off",
            option_value("the box directory", &crate::qmp::socket(dir))?
        ));
        a.extend(["-mon".into(), "chardev=qmp,mode=control".into()]);
    }
    if l.incoming {
        a.extend(["-incoming".into(), "defer".into()]);
    }
    if let Some((uid, gid)) = l.runas {
        a.extend(["-runas".into(), format!("{uid}:{gid}")]);
    }
    a.extend(["-daemonize".into(), "-pidfile".into(), whole_argument("the box directory", &dir.join("qemu.pid"))?]);
    Ok(a)
}

/// The most ports a box has: one health check, EXEC_PORTS for commands.
pub const PORTS: usize = EXEC_PORTS + 1;

/// The ports a box with `memory_mib` gets (health check included). The
/// guest fills each port's receive queue with 1024 pages, 4 MiB of kernel
/// memory a port: a 128 MiB box with every port would keep 10 MiB free.
/// So one command at a time per 128 MiB, from one to EXEC_PORTS; more
/// commands wait for a port.
pub fn ports_for(memory_mib: u64) -> usize {
    1 + ((memory_mib / 128) as usize).clamp(1, EXEC_PORTS)
}

/// The pid in `file`, if it names a live process whose command line
/// mentions `dir` (so a recycled pid is never mistaken for the VM).
pub fn live_pid(file: &Path, dir: &Path) -> Option<Pid> {
    let pid: i32 = std::fs::read_to_string(file).ok()?.trim().parse().ok()?;
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    // Every path of ours in its arguments is a file in `dir`; the slash keeps
    // box-1's directory from matching box-10's.
    let mut needle = dir.as_os_str().as_encoded_bytes().to_vec();
    needle.push(b'/');
    if !cmdline.windows(needle.len()).any(|w| w == needle.as_slice()) {
        return None;
    }
    // A zombie still has a cmdline only until reaped; its state says.
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let state = stat.rsplit(')').next()?.split_whitespace().next()?;
    if state == "Z" {
        return None;
    }
    Pid::from_raw(pid)
}

/// Live processes whose command line names a file in `dir`: a box's QEMU
/// and passt, found without their pid files — which a create interrupted
/// early may not have written yet.
pub fn processes_naming(dir: &Path) -> Vec<Pid> {
    let mut needle = dir.as_os_str().as_encoded_bytes().to_vec();
    needle.push(b'/');
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else { continue };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else { continue };
        if cmdline.windows(needle.len()).any(|w| w == needle.as_slice())
            && let Some(pid) = Pid::from_raw(pid)
            && pid.as_raw_nonzero().get() != std::process::id() as i32
        {
            found.push(pid);
        }
    }
    found
}

/// Kills every process [`processes_naming`] `dir`; true once none is left.
pub fn kill_all_naming(dir: &Path) -> bool {
    for pid in processes_naming(dir) {
        let _ = kill_process(pid, Signal::KILL);
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left: Vec<Pid> = processes_naming(dir).into_iter().filter(|p| !is_zombie(*p)).collect();
        if left.is_empty() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn is_zombie(pid: Pid) -> bool {
    std::fs::read_to_string(format!("/proc/{}/stat", pid.as_raw_nonzero()))
        .map(|s| s.rsplit(')').next().and_then(|r| r.split_whitespace().next()) == Some("Z"))
        .unwrap_or(true)
}

/// Stops the process in `file` (TERM, then KILL after `grace`); true once
/// it is gone.
pub fn stop(file: &Path, dir: &Path, grace: Duration) -> bool {
    let Some(pid) = live_pid(file, dir) else { return true };
    let _ = kill_process(pid, Signal::TERM);
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        if live_pid(file, dir).is_none() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = kill_process(pid, Signal::KILL);
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if live_pid(file, dir).is_none() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

/// The last lines of the console log, for errors.
pub fn console_tail(dir: &Path) -> String {
    let text = std::fs::read_to_string(dir.join("console.log")).unwrap_or_default();
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let tail = lines[lines.len().saturating_sub(6)..].join(" | ");
    if tail.is_empty() { "the console printed nothing".into() } else { format!("console: {tail}") }
}

/// The host's TSC rate in kHz, as /proc/cpuinfo reports the processor's
/// clock (constant-rate TSCs tick at it). Where it does not say, 2 GHz: a
/// guest clock that runs somewhat off beats a boot that hangs.
pub fn host_tsc_khz() -> u64 {
    tsc_khz_from(&std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default()).unwrap_or(2_000_000)
}

fn tsc_khz_from(cpuinfo: &str) -> Option<u64> {
    let mhz: f64 = cpuinfo.lines().find_map(|l| l.strip_prefix("cpu MHz")?.split(':').nth(1)?.trim().parse().ok())?;
    (mhz > 0.0).then_some((mhz * 1000.0) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn launch() -> Launch {
        Launch {
            accel: Accel::Tcg,
            kernel: "/k".into(),
            initramfs: "/i".into(),
            cpus: 1,
            memory_mib: 256,
            pids: Some(64),
            workspace: None,
            egress: None,
            allowlist: None,
            ports: PORTS,
            tsc_khz: Some(2_900_000),
            runas: None,
            disk: None,
            incoming: false,
        }
    }

    #[test]
    fn an_image_box_boots_its_overlay_as_its_root_with_a_monitor_beside_it() {
        let mut l = launch();
        l.disk = Some("/run/a,b/disk.qcow2".into());
        let dir = Path::new("/run/a,b");
        let args = qemu_args(&l, dir).unwrap();
        let drive = after(&args, "-drive");
        assert_eq!(drive.len(), 1);
        assert_eq!(
            parse_opts(drive[0]),
            [
                ("file".to_owned(), "/run/a,b/disk.qcow2".to_owned()),
                ("if".to_owned(), "none".to_owned()),
                ("id".to_owned(), "root".to_owned()),
                ("format".to_owned(), "qcow2".to_owned()),
                ("discard".to_owned(), "unmap".to_owned()),
            ]
        );
        assert!(args.contains(&"virtio-blk-device,drive=root".to_owned()), "{args:?}");
        assert!(args.contains(&"socket,id=qmp,path=/run/a,,b/qmp.sock,server=on,wait=off".to_owned()), "{args:?}");
        assert!(cmdline(&l).contains("tb_root=1"));
        assert!(!cmdline(&launch()).contains("tb_root"), "a box without an image boots the initramfs");
        assert!(after(&qemu_args(&launch(), dir).unwrap(), "-drive").is_empty());
    }

    /// A `key=value,...` string split the way QEMU's QemuOpts and keyval
    /// do: a single comma separates, a doubled one is a comma; a key ends
    /// at the first `=`, and an element without one is the implied key.
    fn parse_opts(s: &str) -> Vec<(String, String)> {
        let mut elements = vec![String::new()];
        let mut chars = s.chars().peekable();
        while let Some(c) = chars.next() {
            match (c, chars.peek()) {
                (',', Some(',')) => {
                    chars.next();
                    elements.last_mut().unwrap().push(',');
                }
                (',', _) => elements.push(String::new()),
                (c, _) => elements.last_mut().unwrap().push(c),
            }
        }
        elements
            .into_iter()
            .map(|e| match e.split_once('=') {
                Some((k, v)) => (k.to_owned(), v.to_owned()),
                None => (String::new(), e),
            })
            .collect()
    }

    fn after<'a>(args: &'a [String], flag: &str) -> Vec<&'a str> {
        args.windows(2).filter(|w| w[0] == flag).map(|w| w[1].as_str()).collect()
    }

    #[test]
    fn an_option_value_doubles_commas_and_keeps_everything_else() {
        for (path, value) in [
            ("/srv/ws", "/srv/ws"),
            ("/srv/a,path=/srv/other", "/srv/a,,path=/srv/other"),
            ("/a,,b", "/a,,,,b"),
            ("/a,", "/a,,"),
            ("/a=b/c=", "/a=b/c="),
            ("/a\nb/\t", "/a\nb/\t"),
            ("/ü b", "/ü b"),
        ] {
            assert_eq!(option_value("the workspace", Path::new(path)).unwrap(), value, "{path:?}");
            assert_eq!(parse_opts(&format!("path={value}")), [("path".to_owned(), path.to_owned())], "{path:?}");
        }
        use std::os::unix::ffi::OsStrExt;
        let bad = Path::new(std::ffi::OsStr::from_bytes(b"/srv/\xff"));
        let err = option_value("the workspace", bad).unwrap_err();
        assert!(err.starts_with("the workspace /srv/") && err.contains("not valid UTF-8"), "{err}");
        assert!(whole_argument("the box directory", bad).is_err());
    }

    /// Every path that reaches a QEMU option, with commas and `key=` in it,
    /// comes back out of QEMU's parsing as exactly that path and adds no key.
    #[test]
    fn every_path_reaches_qemu_as_itself_whatever_it_holds() {
        let dir = Path::new("/run/a,path=/etc,b");
        let mut l = launch();
        l.workspace = Some("/srv/a,path=/srv/other".into());
        l.egress = Some(dir.join("passt.sock"));
        l.kernel = "/k,id=x".into();
        let args = qemu_args(&l, dir).unwrap();
        let opts =
            |flag: &str| -> Vec<Vec<(String, String)>> { after(&args, flag).into_iter().map(parse_opts).collect() };
        let kv = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
        };

        // -fsdev: the workspace, shared so that no guest mode or owner reaches the host.
        assert_eq!(
            opts("-fsdev"),
            [kv(&[
                ("", "local"),
                ("id", "ws"),
                ("path", "/srv/a,path=/srv/other"),
                ("security_model", "mapped-xattr"),
                ("fmode", "0640"),
                ("dmode", "0750"),
            ])]
        );
        // -chardev socket: each port's socket in the box directory.
        let chardevs = opts("-chardev");
        assert_eq!(chardevs.len(), PORTS);
        for (n, c) in chardevs.iter().enumerate() {
            let path = format!("/run/a,path=/etc,b/port-{n}.sock");
            let id = format!("p{n}");
            assert_eq!(c, &kv(&[("", "socket"), ("id", &id), ("path", &path), ("server", "on"), ("wait", "off")]));
        }
        // -netdev stream (keyval): passt's socket.
        assert_eq!(
            opts("-netdev"),
            [kv(&[
                ("", "stream"),
                ("id", "n0"),
                ("server", "off"),
                ("addr.type", "unix"),
                ("addr.path", "/run/a,path=/etc,b/passt.sock"),
            ])]
        );
        // Whole arguments, taken unparsed: as they are.
        assert_eq!(after(&args, "-serial"), ["file:/run/a,path=/etc,b/console.log"]);
        assert_eq!(after(&args, "-kernel"), ["/k,id=x"]);
        assert_eq!(after(&args, "-pidfile"), ["/run/a,path=/etc,b/qemu.pid"]);
        assert_eq!(after(&args, "-initrd"), ["/i"]);
        // -initrd: split at commas for a multiboot kernel, whole otherwise; refused.
        l.initramfs = "/cache,x/initramfs".into();
        let err = qemu_args(&l, dir).unwrap_err();
        assert!(err.contains("/cache,x/initramfs") && err.contains("TINYBOX_CACHE_DIR"), "{err}");
    }

    #[test]
    fn qemu_runs_as_the_user_it_is_given_and_otherwise_as_its_caller() {
        let mut l = launch();
        assert!(after(&qemu_args(&l, Path::new("/run/b")).unwrap(), "-runas").is_empty());
        l.runas = Some((1001, 1002));
        assert_eq!(after(&qemu_args(&l, Path::new("/run/b")).unwrap(), "-runas"), ["1001:1002"]);
    }

    #[test]
    fn the_tsc_rate_comes_from_cpuinfo() {
        assert_eq!(tsc_khz_from("processor\t: 0\ncpu MHz\t\t: 2445.406\n"), Some(2_445_406));
        assert_eq!(tsc_khz_from("processor\t: 0\n"), None);
        assert_eq!(tsc_khz_from("cpu MHz\t\t: 0.000\n"), None);
        assert!(host_tsc_khz() > 0);
    }

    #[test]
    fn concurrent_commands_grow_with_memory_up_to_the_port_count() {
        assert_eq!(ports_for(128), 2);
        assert_eq!(ports_for(255), 2);
        assert_eq!(ports_for(256), 3);
        assert_eq!(ports_for(512), 5);
        assert_eq!(ports_for(2048), PORTS);
        assert_eq!(ports_for(1 << 20), PORTS);
    }

    #[test]
    fn a_denied_network_has_no_nic_at_all() {
        let args = qemu_args(&launch(), Path::new("/run/b")).unwrap();
        assert!(args.iter().all(|a| !a.contains("netdev") && !a.contains("virtio-net")), "{args:?}");
        assert!(args.contains(&"-nodefaults".to_owned()), "no default devices (and so no default NIC)");
        assert!(cmdline(&launch()).contains("tb_net=none"));
    }

    #[test]
    fn egress_is_one_nic_on_the_passt_socket() {
        let mut l = launch();
        l.egress = Some("/run/b/passt.sock".into());
        let args = qemu_args(&l, Path::new("/run/b")).unwrap();
        assert_eq!(args.iter().filter(|a| a.starts_with("virtio-net-device")).count(), 1);
        assert!(args.iter().any(|a| a == "stream,id=n0,server=off,addr.type=unix,addr.path=/run/b/passt.sock"));
        assert!(cmdline(&l).contains("tb_net=egress"));
    }

    #[test]
    fn an_allowlist_box_has_no_nic_and_one_more_port_for_the_egress_relay() {
        let mut l = launch();
        l.allowlist = Some(3128);
        let dir = Path::new("/run/a,b");
        let args = qemu_args(&l, dir).unwrap();
        assert!(args.iter().all(|a| !a.contains("netdev") && !a.contains("virtio-net")), "{args:?}");
        assert!(args.contains(&"socket,id=eg,path=/run/a,,b/egress.sock,server=on,wait=off".to_owned()), "{args:?}");
        assert!(args.contains(&"virtserialport,chardev=eg,name=tinybox-egress".to_owned()), "{args:?}");
        assert!(args.contains(&format!("virtio-serial-device,max_ports={}", PORTS + 2)), "{args:?}");
        let words = cmdline(&l);
        assert!(words.contains("tb_net=none") && words.contains("tb_egress=3128"), "{words}");
        assert!(!cmdline(&launch()).contains("tb_egress"), "only an allowlist box's agent listens");
    }

    #[test]
    fn limits_and_acceleration_reach_qemu_and_the_guest() {
        let mut l = launch();
        l.cpus = 3;
        l.memory_mib = 300;
        l.accel = Accel::Kvm;
        let args = qemu_args(&l, Path::new("/run/b")).unwrap();
        let after = |flag: &str| args.iter().position(|a| a == flag).map(|i| args[i + 1].clone());
        assert_eq!(after("-smp").as_deref(), Some("3"));
        assert_eq!(after("-m").as_deref(), Some("300M"));
        assert_eq!(after("-accel").as_deref(), Some("kvm"));
        assert_eq!(after("-cpu").as_deref(), Some("host"));
        assert!(cmdline(&l).contains("tb_pids=64"));
        assert!(!cmdline(&l).contains("tsc_early_khz"), "under KVM the kernel has kvmclock");
        l.accel = Accel::Tcg;
        assert!(cmdline(&l).contains("tsc_early_khz=2900000"));
        assert_eq!(qemu_args(&l, Path::new("/run/b")).unwrap().iter().position(|a| a == "-cpu"), None);
    }

    #[test]
    fn every_port_has_a_socket_in_the_box_directory_and_a_name_the_agent_serves() {
        let args = qemu_args(&launch(), Path::new("/run/b")).unwrap();
        for n in 0..PORTS {
            assert!(args.contains(&format!("socket,id=p{n},path=/run/b/port-{n}.sock,server=on,wait=off")));
            assert!(args.contains(&format!("virtserialport,chardev=p{n},name=tinybox.{n}")));
        }
        assert!(args.ends_with(&["-daemonize".into(), "-pidfile".into(), "/run/b/qemu.pid".into()]));
    }

    #[test]
    fn a_pid_file_naming_another_process_is_not_the_vm() {
        let dir = std::env::temp_dir().join(format!("tinybox-vm-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("qemu.pid");
        // This test process is alive, but its command line does not name the box directory.
        std::fs::write(&file, std::process::id().to_string()).unwrap();
        assert_eq!(live_pid(&file, &dir), None);
        std::fs::write(&file, "not a pid").unwrap();
        assert_eq!(live_pid(&file, &dir), None);
        assert!(stop(&file, &dir, Duration::from_millis(1)), "nothing to stop is stopped");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn box_1_s_directory_never_claims_box_10_s_process() {
        let vms = tempfile::tempdir().unwrap();
        let (one, ten) = (vms.path().join("box-1"), vms.path().join("box-10"));
        std::fs::create_dir(&one).unwrap();
        std::fs::create_dir(&ten).unwrap();
        // A process whose arguments name a file in box-10's directory, as QEMU's do.
        let mut child = std::process::Command::new("sh")
            .args(["-c", "read line"])
            .arg(ten.join("qemu.pid"))
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        for dir in [&one, &ten] {
            std::fs::write(dir.join("qemu.pid"), child.id().to_string()).unwrap();
        }
        // Until it has exec'd, the child's command line is this test's (bounded poll).
        let deadline = Instant::now() + Duration::from_secs(10);
        while !std::fs::read(format!("/proc/{}/cmdline", child.id())).unwrap_or_default().starts_with(b"sh\0") {
            assert!(Instant::now() < deadline, "sh did not start");
            std::thread::yield_now();
        }
        let found = |dir: &Path| live_pid(&dir.join("qemu.pid"), dir).map(|p| p.as_raw_nonzero().get());
        assert_eq!(found(&ten), Some(child.id() as i32));
        assert_eq!(found(&one), None, "a stale pid file of box-1 named box-10's process");
        child.kill().unwrap();
        child.wait().unwrap();
    }
}
