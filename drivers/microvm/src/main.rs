//! `tinybox-driver-microvm`: each box is a QEMU `microvm` guest.
//!
//! The guest boots a kernel from the host's /boot with an initramfs built
//! here (busybox-static, the guest agent, the modules its devices need);
//! there is no disk image, so nothing the guest writes outside /workspace
//! survives the VM — hence no snapshots. The box's directory is shared at
//! /workspace over virtio-9p; commands travel to the agent over
//! virtio-serial ports (see `session`). A denied network is no NIC at all;
//! egress is one NIC on a passt user-mode stack that does not map the
//! host's loopback.
//!
//! Isolation is declared from what this machine really does: Hardware only
//! when a test guest boots under KVM (see `accel`). Without KVM a box runs
//! only when the operator opts into emulation, and such a box is recorded
//! at Kernel isolation — the guest still has its own kernel, but no
//! hardware boundary stands behind it.
//!
//! The VM runs on this machine: its ports are local sockets. Create checks
//! that the box's host is this machine and refuses otherwise.

mod accel;
mod guest;
mod session;
mod vm;

use std::collections::BTreeMap;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tinybox_microvm_agent::wire::Exec;
use tinybox_sdk::capture::capture;
use tinybox_sdk::model::{
    ExitStatus, Feature, IsolationLevel, Limit, NetworkPolicy, SandboxCapabilities, SnapshotSupport, SourceKind,
    WorkspaceSource,
};
use tinybox_sdk::protocol::{
    BoxRef, BoxState, CreateParams, CreateResult, DriverError, ExecParams, Health, InspectResult,
};
use tinybox_sdk::{DriverInfo, HostHandle, SandboxDriver};

use crate::guest::Kernel;
use crate::vm::Accel;

const MIB: u64 = 1024 * 1024;
/// Below this the guest's kernel and initramfs do not fit comfortably.
const MIN_MEMORY_MIB: u64 = 128;

/// The driver's configuration: the handshake's `config`, else
/// `config.json` in its state directory. Every key is optional.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    /// "kvm" or "tcg": the acceleration boxes use when create names none.
    accel: Option<String>,
    /// A guest kernel image (bzImage); default: the newest /boot/vmlinuz-*
    /// whose modules include 9p and virtio.
    kernel: Option<PathBuf>,
    /// That kernel's modules directory; default /lib/modules/<release>.
    modules: Option<PathBuf>,
    qemu: Option<PathBuf>,
    busybox: Option<PathBuf>,
    passt: Option<PathBuf>,
}

/// What boxes are made from on this machine, found once per driver process.
struct Setup {
    qemu: PathBuf,
    kernel: Kernel,
    plan: guest::ModulePlan,
    busybox: PathBuf,
    /// Built (or found in the cache) when first needed: a create, or a
    /// KVM probe. A command in a running box never pays for it.
    initramfs: OnceLock<Result<PathBuf, String>>,
    cache: PathBuf,
    passt: Option<PathBuf>,
    kvm: accel::KvmStatus,
    default_accel: Option<Accel>,
    config_path: String,
    pids_cgroup: bool,
}

fn which(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(program)).find(|p| p.is_file())
}

/// Whether an ELF file needs a program interpreter (a dynamic loader).
fn is_dynamic(elf: &[u8]) -> bool {
    let u16_at = |o: usize| elf.get(o..o + 2).map(|b| u16::from_le_bytes([b[0], b[1]]) as usize);
    let u64_at = |o: usize| elf.get(o..o + 8).map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])) as usize);
    let (Some(phoff), Some(size), Some(count)) = (u64_at(0x20), u16_at(0x36), u16_at(0x38)) else { return true };
    (0..count).any(|i| elf.get(phoff + i * size..phoff + i * size + 4) == Some(&3u32.to_le_bytes()[..]))
}

/// The per-user cache for kernels, initramfs images and the KVM verdict,
/// shared by every store (its files are named by their contents).
fn cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("TINYBOX_CACHE_DIR").filter(|v| !v.is_empty()) {
        return PathBuf::from(dir);
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    base.join("tinybox").join("microvm")
}

fn load_config(host: &HostHandle) -> Result<(Config, String), String> {
    if !host.config().is_null() {
        let c = serde_json::from_value(host.config().clone())
            .map_err(|e| format!("the microvm configuration is invalid: {e}"))?;
        return Ok((c, "the driver configuration".into()));
    }
    let Some(state) = host.state_dir() else { return Ok((Config::default(), "config.json".into())) };
    let path = state.join("config.json");
    let shown = path.display().to_string();
    match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map(|c| (c, shown.clone())).map_err(|e| {
            format!(
                "{shown} is not a valid microvm configuration ({e}); keys: accel, kernel, modules, qemu, busybox, passt"
            )
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok((Config::default(), shown)),
        Err(e) => Err(format!("cannot read {shown}: {e}")),
    }
}

fn setup(host: &HostHandle) -> Result<Setup, String> {
    let (config, config_path) = load_config(host)?;
    setup_from(config, config_path)
}

fn setup_from(config: Config, config_path: String) -> Result<Setup, String> {
    let default_accel = match config.accel.as_deref() {
        None => None,
        Some(a) => Some(Accel::parse(a).ok_or_else(|| format!("{config_path}: accel {a:?} is not kvm or tcg"))?),
    };
    let qemu = config
        .qemu
        .clone()
        .or_else(|| which("qemu-system-x86_64"))
        .ok_or("qemu-system-x86_64 is not installed; install the qemu-system-x86 package".to_owned())?;
    let busybox_path = config
        .busybox
        .clone()
        .or_else(|| ["/bin/busybox", "/usr/bin/busybox"].into_iter().map(PathBuf::from).find(|p| p.is_file()))
        .ok_or("busybox is not installed; install the busybox-static package".to_owned())?;
    // The ELF header and program headers are at the front.
    let head = {
        use std::io::Read;
        let mut head = Vec::with_capacity(64 * 1024);
        std::fs::File::open(&busybox_path)
            .and_then(|f| f.take(64 * 1024).read_to_end(&mut head))
            .map_err(|e| format!("cannot read {}: {e}", busybox_path.display()))?;
        head
    };
    if is_dynamic(&head) {
        return Err(format!(
            "{} is dynamically linked and cannot run in the guest; install the busybox-static package",
            busybox_path.display()
        ));
    }
    let (kernel, plan) = match &config.kernel {
        Some(image) => {
            let name = image.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            let release = name.strip_prefix("vmlinuz-").unwrap_or(&name).to_owned();
            let modules = config.modules.clone().unwrap_or_else(|| Path::new("/lib/modules").join(&release));
            let k = Kernel { image: image.clone(), release, modules };
            let plan = guest::plan_modules(&k)?;
            (k, plan)
        }
        None => guest::choose_kernel(&guest::installed_kernels(Path::new("/boot"), Path::new("/lib/modules")))?,
    };
    let pids_cgroup = kernel
        .image
        .parent()
        .and_then(|b| std::fs::read_to_string(b.join(format!("config-{}", kernel.release))).ok())
        .is_some_and(|c| c.lines().any(|l| l == "CONFIG_CGROUP_PIDS=y"));
    let cache = cache_dir();
    std::fs::create_dir_all(&cache).map_err(|e| format!("cannot make {}: {e}", cache.display()))?;
    let initramfs = OnceLock::new();
    let kvm = accel::kvm_status(&qemu, &kernel.image, &cache, || {
        initramfs.get_or_init(|| build_initramfs(&busybox_path, &plan, &cache)).clone()
    });
    let passt = config.passt.clone().or_else(|| which("passt"));
    Ok(Setup {
        qemu,
        kernel,
        plan,
        busybox: busybox_path,
        initramfs,
        cache,
        passt,
        kvm,
        default_accel,
        config_path,
        pids_cgroup,
    })
}

/// The initramfs for this busybox and module plan, built once and cached.
fn build_initramfs(busybox_path: &Path, plan: &guest::ModulePlan, cache: &Path) -> Result<PathBuf, String> {
    let busybox = std::fs::read(busybox_path).map_err(|e| format!("cannot read {}: {e}", busybox_path.display()))?;
    let list = std::process::Command::new(busybox_path)
        .arg("--list-full")
        .output()
        .map_err(|e| format!("cannot run {}: {e}", busybox_path.display()))?;
    let applets = String::from_utf8_lossy(&list.stdout).lines().map(str::to_owned).filter(|l| !l.is_empty()).collect();
    let inputs = guest::Inputs { busybox: &busybox, applets, agent: guest::AGENT, init: guest::INIT, modules: plan };
    guest::cached_initramfs(&inputs, cache).map_err(|e| format!("cannot build the initramfs: {e}"))
}

impl Setup {
    fn initramfs(&self) -> Result<PathBuf, DriverError> {
        self.initramfs
            .get_or_init(|| build_initramfs(&self.busybox, &self.plan, &self.cache))
            .clone()
            .map_err(DriverError::failed)
    }
}

struct Microvm {
    setup: OnceLock<Result<Setup, String>>,
    host: OnceLock<HostHandle>,
    running: session::Running,
}

impl Microvm {
    fn setup(&self) -> Result<&Setup, DriverError> {
        let host = self.host.get().cloned();
        let setup = self.setup.get_or_init(|| match host {
            Some(h) => setup(&h),
            None => Err("the driver was asked before its handshake".into()),
        });
        setup.as_ref().map_err(|e| DriverError::unavailable(e.clone()))
    }
}

/// What core stores for a box.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Handle {
    dir: PathBuf,
    accel: Accel,
    workspace: PathBuf,
    /// The workspace was made for the box and goes with it.
    owned: bool,
    egress: bool,
    cpus: u32,
    memory_mib: u64,
    #[serde(default)]
    pids: Option<u64>,
    /// Its virtio-serial ports, health check included.
    #[serde(default = "all_ports")]
    ports: usize,
}

fn all_ports() -> usize {
    vm::PORTS
}

impl Handle {
    fn parse(v: &serde_json::Value) -> Result<Handle, DriverError> {
        serde_json::from_value(v.clone())
            .map_err(|e| DriverError::invalid(format!("the box record was not made by the microvm driver ({e})")))
    }

    fn pid_file(&self) -> PathBuf {
        self.dir.join("qemu.pid")
    }
}

fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default().trim().to_owned()
}

/// Removes a box's directory and stops what runs in it.
fn tear_down(dir: &Path) -> Result<(), DriverError> {
    let qemu = vm::stop(&dir.join("qemu.pid"), dir, Duration::from_secs(3));
    let passt = vm::stop(&dir.join("passt.pid"), dir, Duration::from_secs(1));
    if !(qemu && passt) {
        return Err(DriverError::failed(format!(
            "the VM in {} would not stop; its processes are still running",
            dir.display()
        )));
    }
    match std::fs::remove_dir_all(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(DriverError::failed(format!("cannot remove {}: {e}", dir.display()))),
    }
}

impl Microvm {
    fn choose_accel(&self, s: &Setup, asked: Option<Accel>) -> Result<Accel, DriverError> {
        let opt_in = format!(
            "to run it under emulation instead (much slower, no hardware isolation), pass --accel tcg or set \"accel\": \"tcg\" in {}",
            s.config_path
        );
        match (asked.or(s.default_accel), &s.kvm) {
            (Some(Accel::Tcg), _) => Ok(Accel::Tcg),
            (_, Ok(_)) => Ok(Accel::Kvm),
            (Some(Accel::Kvm), Err(why)) => Err(DriverError::unavailable(format!("--accel kvm: {why}"))),
            (None, Err(why)) => {
                Err(DriverError::unavailable(format!("no hardware virtualization for this box: {why}; {opt_in}")))
            }
        }
    }

    async fn launch(&self, s: &Setup, p: &CreateParams, accel: Accel) -> Result<CreateResult, DriverError> {
        let (cpus, memory_mib) = resources(p)?;
        let egress = p.network == Some(NetworkPolicy::Egress);
        let passt = match (egress, &s.passt) {
            (true, None) => {
                return Err(DriverError::unavailable(
                    "egress for a microVM needs passt (a user-mode network stack that keeps the host's loopback out of reach); install the passt package",
                ));
            }
            (true, Some(p)) => Some(p.clone()),
            (false, _) => None,
        };
        let state = self
            .host
            .get()
            .and_then(|h| h.state_dir().map(Path::to_path_buf))
            .unwrap_or_else(|| cache_dir().join("state"));
        let nonce = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
        let dir = state.join("vms").join(format!("{}-{:x}", p.box_id, nonce & 0xffff_ffff_ffff));
        std::fs::create_dir_all(dir.parent().expect("vms dir"))
            .map_err(|e| DriverError::failed(format!("cannot make {}: {e}", dir.display())))?;
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(|e| DriverError::failed(format!("cannot make {}: {e}", dir.display())))?;
        if vm::port_socket(&dir, vm::PORTS - 1).as_os_str().len() > 100 {
            let _ = std::fs::remove_dir_all(&dir);
            return Err(DriverError::invalid(format!(
                "the box directory {} is too deep for a UNIX socket path (at most 108 bytes); use a shorter TINYBOX_HOME",
                dir.display()
            )));
        }
        let result = self.boot(s, p, accel, &dir, cpus, memory_mib, passt).await;
        if result.is_err() {
            let _ = tear_down(&dir);
        }
        result
    }

    #[allow(clippy::too_many_arguments)]
    async fn boot(
        &self,
        s: &Setup,
        p: &CreateParams,
        accel: Accel,
        dir: &Path,
        cpus: u32,
        memory_mib: u64,
        passt: Option<PathBuf>,
    ) -> Result<CreateResult, DriverError> {
        let (workspace, owned) = match &p.source {
            None => {
                let ws = dir.join("workspace");
                std::fs::create_dir(&ws)
                    .map_err(|e| DriverError::failed(format!("cannot make {}: {e}", ws.display())))?;
                (ws, true)
            }
            Some(WorkspaceSource::LocalDir { path }) => {
                if !path.is_dir() {
                    return Err(DriverError::invalid(format!("workspace directory {} does not exist", path.display())));
                }
                (std::fs::canonicalize(path).unwrap_or_else(|_| path.clone()), false)
            }
            Some(other) => {
                return Err(DriverError::unsupported(format!(
                    "the microvm sandbox shares a directory you already have at /workspace; it cannot start from {}",
                    other.kind()
                )));
            }
        };
        let (image, cache) = (s.kernel.clone(), s.cache.clone());
        let kernel = tokio::task::spawn_blocking(move || guest::boot_kernel(&image, &cache))
            .await
            .map_err(|e| DriverError::failed(format!("preparing the kernel failed: {e}")))?
            .map_err(|e| DriverError::failed(format!("cannot prepare the kernel {}: {e}", s.kernel.image.display())))?;
        let egress = match passt {
            None => None,
            Some(passt) => {
                let sock = dir.join("passt.sock");
                let out = tokio::process::Command::new(&passt)
                    // As this user: passt, started as root, would otherwise become nobody.
                    .arg("--runas")
                    .arg(format!("{}:{}", rustix::process::getuid().as_raw(), rustix::process::getgid().as_raw()))
                    .args([
                        "--one-off",
                        "--no-map-gw",
                        "--quiet",
                        "--ipv4-only",
                        "--address",
                        "10.0.2.15",
                        "--netmask",
                        "24",
                    ])
                    .args(["--gateway", "10.0.2.2", "--dns-forward", "10.0.2.3", "--socket"])
                    .arg(&sock)
                    .arg("--pid")
                    .arg(dir.join("passt.pid"))
                    .arg("--log-file")
                    .arg(dir.join("passt.log"))
                    .stdin(std::process::Stdio::null())
                    .output()
                    .await
                    .map_err(|e| DriverError::failed(format!("cannot run {}: {e}", passt.display())))?;
                if !out.status.success() {
                    return Err(DriverError::failed(format!(
                        "passt failed ({}): {}",
                        out.status,
                        String::from_utf8_lossy(&out.stderr).trim()
                    )));
                }
                Some(sock)
            }
        };
        let launch = vm::Launch {
            accel,
            kernel,
            initramfs: s.initramfs()?,
            cpus,
            memory_mib,
            pids: p.resources.pids,
            workspace: Some(workspace.clone()),
            egress: egress.clone(),
            ports: vm::ports_for(memory_mib),
            tsc_khz: vm::host_tsc_khz(),
        };
        let out = tokio::process::Command::new(&s.qemu)
            .args(vm::qemu_args(&launch, dir))
            .stdin(std::process::Stdio::null())
            .output()
            .await
            .map_err(|e| DriverError::failed(format!("cannot run {}: {e}", s.qemu.display())))?;
        if !out.status.success() {
            return Err(DriverError::failed(format!(
                "QEMU could not start the VM ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        let boot_limit = if accel == Accel::Kvm { Duration::from_secs(30) } else { Duration::from_secs(180) };
        let hello = session::open(dir, 0, boot_limit)
            .await
            .map_err(|e| DriverError::failed(format!("{}: {}", e.message, vm::console_tail(dir))))?
            .hello;
        if let Some(asked) = p.resources.pids
            && hello.pids_max != Some(asked)
        {
            return Err(DriverError::failed(format!(
                "the guest did not apply the pids cap of {asked} (it reports {:?})",
                hello.pids_max
            )));
        }
        let handle = Handle {
            dir: dir.to_owned(),
            accel,
            workspace,
            owned,
            egress: egress.is_some(),
            cpus,
            memory_mib,
            pids: p.resources.pids,
            ports: vm::ports_for(memory_mib),
        };
        Ok(CreateResult {
            handle: serde_json::to_value(&handle).expect("handle serializes"),
            workdir: Some("/workspace".into()),
            // Emulation has no hardware boundary: never claim one for it.
            isolation: (accel == Accel::Tcg).then_some(IsolationLevel::Kernel),
        })
    }
}

/// Whole vCPUs and MiB from the limits in force.
fn resources(p: &CreateParams) -> Result<(u32, u64), DriverError> {
    let cpus = p.resources.cpus.unwrap_or(2.0);
    if cpus.fract() != 0.0 || !(1.0..=255.0).contains(&cpus) {
        return Err(DriverError::invalid(format!(
            "cpu limit {cpus} is not a whole number of vCPUs from 1 to 255; a microVM gets whole processors"
        )));
    }
    let memory_mib = p.resources.memory_bytes.unwrap_or(2048 * MIB) / MIB;
    if memory_mib < MIN_MEMORY_MIB {
        return Err(DriverError::invalid(format!(
            "memory limit {memory_mib} MiB is below the {MIN_MEMORY_MIB} MiB a microVM guest needs"
        )));
    }
    Ok((cpus as u32, memory_mib))
}

#[async_trait]
impl SandboxDriver for Microvm {
    fn configure(&self, host: &HostHandle) {
        let _ = self.host.set(host.clone());
    }

    fn info(&self) -> DriverInfo {
        DriverInfo { name: "microvm".into(), version: env!("CARGO_PKG_VERSION").into(), health: self.health() }
    }

    fn capabilities(&self) -> SandboxCapabilities {
        let (isolation, pids) = match self.setup() {
            Ok(s) => (if s.kvm.is_ok() { IsolationLevel::Hardware } else { IsolationLevel::Kernel }, s.pids_cgroup),
            Err(_) => (IsolationLevel::Kernel, false),
        };
        let mut limits = vec![Limit::Cpu, Limit::Memory];
        if pids {
            limits.push(Limit::Pids);
        }
        SandboxCapabilities {
            isolation,
            snapshot: SnapshotSupport::None,
            features: [Feature::ResourceLimits].into(),
            limits: limits.into_iter().collect(),
            network_deny: true,
            sources: [SourceKind::LocalDir].into(),
            options: ["accel".to_owned()].into(),
        }
    }

    async fn create(&self, host: &HostHandle, p: CreateParams) -> Result<CreateResult, DriverError> {
        let s = self.setup()?;
        let mut asked = None;
        for (key, value) in &p.options {
            match key.as_str() {
                "accel" => {
                    asked = Some(
                        Accel::parse(value)
                            .ok_or_else(|| DriverError::invalid(format!("accel {value:?} is not one of kvm, tcg")))?,
                    );
                }
                other => {
                    return Err(DriverError::invalid(format!(
                        "the microvm sandbox has no option {other:?}; it takes accel"
                    )));
                }
            }
        }
        let accel = self.choose_accel(s, asked)?;
        // The VM's ports are sockets on this machine: its host must be this machine.
        let there =
            capture(host, vec!["cat".into(), "/proc/sys/kernel/random/boot_id".into()], BTreeMap::new(), b"").await?;
        if there.stdout_text().trim() != boot_id() {
            return Err(DriverError::unsupported(
                "the microvm sandbox runs its VMs on the machine tinybox runs on; this box's host is another machine",
            ));
        }
        self.launch(s, &p, accel).await
    }

    async fn exec(&self, _host: &HostHandle, p: ExecParams) -> Result<ExitStatus, DriverError> {
        let handle = Handle::parse(&p.target.handle)?;
        if vm::live_pid(&handle.pid_file(), &handle.dir).is_none() {
            return Err(DriverError::failed(format!(
                "the VM of box {} is not running ({}); remove the box with `tinybox rm {}`",
                p.target.box_id,
                vm::console_tail(&handle.dir),
                p.target.box_id
            )));
        }
        let claim = session::claim(&handle.dir, handle.ports).await?;
        let mut env: Vec<(String, String)> = Vec::new();
        let mut merged = p.box_env.clone();
        merged.extend(p.request.env.clone());
        env.extend(merged);
        let exec = Exec {
            argv: p.request.argv.clone(),
            env,
            cwd: p.request.cwd.clone().unwrap_or_else(|| "/workspace".into()),
        };
        let stdio = tinybox_sdk::stdio::receive(&p.stdio)
            .await
            .map_err(|e| DriverError::failed(format!("cannot receive the command's streams: {e}")))?;
        session::run(&handle.dir, &claim, &exec, stdio, &p.exec_id, &self.running).await
    }

    async fn destroy(&self, _host: &HostHandle, target: BoxRef) -> Result<(), DriverError> {
        let handle = Handle::parse(&target.handle)?;
        tokio::task::spawn_blocking(move || tear_down(&handle.dir))
            .await
            .map_err(|e| DriverError::failed(format!("stopping the VM failed: {e}")))?
    }

    async fn inspect(&self, _host: &HostHandle, target: BoxRef) -> Result<InspectResult, DriverError> {
        let handle = Handle::parse(&target.handle)?;
        if vm::live_pid(&handle.pid_file(), &handle.dir).is_none() {
            return Ok(InspectResult {
                state: BoxState::Gone,
                detail: Some(format!("the VM is not running; {}", vm::console_tail(&handle.dir))),
            });
        }
        let accel = match handle.accel {
            Accel::Kvm => "KVM (hardware virtualization)".to_owned(),
            Accel::Tcg => "EMULATED (TCG): no hardware isolation".to_owned(),
        };
        let net = if handle.egress { "egress via passt, no host loopback" } else { "no network interface" };
        let guest = match session::open(&handle.dir, 0, Duration::from_secs(10)).await {
            Ok(session::Session { hello: h, .. }) => format!(
                "guest {} sees {} vCPU, {} MiB{}",
                h.kernel,
                h.cpus,
                h.mem_total_kib / 1024,
                h.pids_max.map(|p| format!(", pids cap {p}")).unwrap_or_default()
            ),
            Err(e) => format!("the guest agent does not answer: {}", e.message),
        };
        Ok(InspectResult {
            state: BoxState::Ready,
            detail: Some(format!(
                "{accel}; {} vCPU, {} MiB; {net}; workspace {} at /workspace; {guest}",
                handle.cpus,
                handle.memory_mib,
                handle.workspace.display()
            )),
        })
    }

    async fn cancel(&self, _host: &HostHandle, exec_id: &str) -> Result<(), DriverError> {
        if self.running.signal(exec_id, 15) {
            let running = self.running.clone();
            let exec_id = exec_id.to_owned();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_secs(2)).await;
                running.signal(&exec_id, 9);
            });
        }
        Ok(())
    }
}

impl Microvm {
    fn health(&self) -> Health {
        match self.setup() {
            Err(e) => Health::unavailable(e.message),
            Ok(s) => {
                let accel = match &s.kvm {
                    Ok(detail) => format!("KVM: {detail}"),
                    Err(why) => format!(
                        "no KVM ({why}); boxes run only under emulation, opted into with --accel tcg or \"accel\": \"tcg\" in {}",
                        s.config_path
                    ),
                };
                let egress = if s.passt.is_some() { "egress via passt" } else { "no egress (install passt)" };
                Health::ok_with(format!("{accel}; kernel {}; {egress}", s.kernel.release))
            }
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("--version") => {
            println!("tinybox-driver-microvm {}", env!("CARGO_PKG_VERSION"));
            return;
        }
        // For benchmarks: QEMU's arguments for an emulated box with one vCPU,
        // 256 MiB, no network and WORKSPACE shared, its runtime files in DIR,
        // one per line; the same kernel and initramfs a box boots.
        Some("--print-qemu-args") if args.len() == 4 => {
            let s = setup_from(Config::default(), "config.json".into()).unwrap_or_else(|e| {
                eprintln!("tinybox-driver-microvm: {e}");
                std::process::exit(1)
            });
            let kernel = guest::boot_kernel(&s.kernel, &s.cache).unwrap_or_else(|e| {
                eprintln!("tinybox-driver-microvm: {e}");
                std::process::exit(1)
            });
            let launch = vm::Launch {
                accel: Accel::Tcg,
                kernel,
                initramfs: s.initramfs().unwrap_or_else(|e| {
                    eprintln!("tinybox-driver-microvm: {}", e.message);
                    std::process::exit(1)
                }),
                cpus: 1,
                memory_mib: 256,
                pids: Some(512),
                workspace: Some(PathBuf::from(&args[3])),
                egress: None,
                ports: vm::PORTS,
                tsc_khz: vm::host_tsc_khz(),
            };
            println!("{}", s.qemu.display());
            for a in vm::qemu_args(&launch, Path::new(&args[2])) {
                println!("{a}");
            }
            return;
        }
        _ => {}
    }
    tinybox_sdk::run_sandbox_main(Microvm {
        setup: OnceLock::new(),
        host: OnceLock::new(),
        running: Default::default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_embedded_agent_is_static_and_a_dynamic_program_is_told_apart() {
        assert!(guest::AGENT.starts_with(b"\x7fELF"));
        assert!(!is_dynamic(guest::AGENT), "the guest has no C library: the agent must be static");
        let me = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        assert!(is_dynamic(&me), "this test binary is dynamically linked");
        assert!(is_dynamic(b"short"), "what cannot be read is not trusted to be static");
    }

    fn params(cpus: Option<f64>, memory_mib: Option<u64>) -> CreateParams {
        serde_json::from_value(serde_json::json!({
            "box_id": "box-0",
            "namespace": "default",
            "resources": { "cpus": cpus, "memory_bytes": memory_mib.map(|m| m * MIB) },
        }))
        .unwrap()
    }

    #[test]
    fn vcpus_are_whole_and_memory_has_a_floor() {
        assert_eq!(resources(&params(Some(3.0), Some(300))).unwrap(), (3, 300));
        assert_eq!(resources(&params(None, None)).unwrap(), (2, 2048), "the spec's defaults");
        for bad in [0.5, 1.5, 0.0, 256.0] {
            let err = resources(&params(Some(bad), None)).unwrap_err();
            assert!(err.message.contains(&format!("cpu limit {bad} is not a whole number")), "{}", err.message);
        }
        let err = resources(&params(Some(1.0), Some(64))).unwrap_err();
        assert!(err.message.contains("64 MiB is below the 128 MiB"), "{}", err.message);
    }
}
