//! `tinybox-driver-microvm`: each box is a QEMU `microvm` guest.
//!
//! The guest boots a kernel from the host's /boot with an initramfs built
//! here (busybox-static, the guest agent, the modules its devices need);
//! there is no disk image, so nothing the guest writes outside /workspace
//! survives the VM — hence no snapshots. The box's directory is shared at
//! /workspace over virtio-9p, so that no mode, owner or file type the guest
//! sets reaches the host (ADR 0013); commands travel to the agent over
//! virtio-serial ports (see `session`). A denied network is no NIC at all;
//! egress is one NIC on a passt user-mode stack that does not map the
//! host's loopback, run behind the egress fence in a network namespace of
//! its own (see `egress`): the guest reaches public addresses, never the
//! host's own, private, link-local, CGNAT or loopback ones unless listed.
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
mod create;
mod egress;
mod guest;
mod image;
mod memory;
mod qmp;
mod relay;
mod session;
mod setup;
mod snapshot;
mod vm;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use async_trait::async_trait;
use tinybox_agent::host::{self, Cancelled};
use tinybox_agent::wire::Exec;
use tinybox_sdk::capture::capture;
use tinybox_sdk::model::{
    ExitStatus, Feature, IsolationLevel, Limit, SandboxCapabilities, SnapshotId, SnapshotSupport, SourceKind, TtySize,
};
use tinybox_sdk::protocol::{
    BoxRef, BoxState, CreateParams, CreateResult, DriverError, ExecParams, Health, InspectResult, SnapshotRmParams,
    SnapshotSweepParams, SnapshotSweepResult,
};
use tinybox_sdk::{DriverInfo, HostHandle, SandboxDriver};

use crate::create::Handle;
use crate::setup::Setup;
use crate::vm::Accel;

struct Microvm {
    /// Found in the handshake (`configure`), from its configuration.
    setup: OnceLock<Result<Setup, String>>,
    /// Where this store keeps VM runtime directories: the handshake's state
    /// directory, private to one store, so a box's directory can be named
    /// after its identifier alone (`create::vm_dir`).
    state: OnceLock<Option<PathBuf>>,
    running: session::Running,
}

impl Microvm {
    fn state_dir(&self) -> Result<&Path, DriverError> {
        self.state.get().and_then(Option::as_deref).ok_or_else(|| {
            DriverError::unavailable(
                "the microvm sandbox keeps snapshots in the state directory core offers in the handshake, and got none",
            )
        })
    }

    fn setup(&self) -> Result<&Setup, DriverError> {
        let setup = self.setup.get_or_init(|| Err("the driver was asked before its handshake".into()));
        setup.as_ref().map_err(|e| DriverError::unavailable(e.clone()))
    }
}

#[async_trait]
impl SandboxDriver for Microvm {
    fn configure(&self, host: &HostHandle) {
        let _ = self.setup.set(setup::setup(host));
        let _ = self.state.set(host.state_dir().map(Path::to_path_buf));
    }

    fn info(&self) -> DriverInfo {
        DriverInfo { name: "microvm".into(), version: env!("CARGO_PKG_VERSION").into(), health: self.health() }
    }

    fn capabilities(&self) -> SandboxCapabilities {
        let (isolation, pids) = match self.setup() {
            // Hardware only on a recorded verdict that KVM boots a guest: before
            // any create has probed, the handshake (which never probes) claims
            // Kernel, what every box of this sandbox has at least.
            Ok(s) => {
                let kvm = matches!(s.kvm_known, Some(Ok(_)));
                (if kvm { IsolationLevel::Hardware } else { IsolationLevel::Kernel }, s.pids_cgroup)
            }
            Err(_) => (IsolationLevel::Kernel, false),
        };
        let mut limits = vec![Limit::Cpu, Limit::Memory];
        if pids {
            limits.push(Limit::Pids);
        }
        let images = self.setup().is_ok_and(|s| s.no_images().is_none());
        SandboxCapabilities {
            isolation,
            // A box's disk (an image box's overlay, with the guest's memory,
            // ADR 0037) or its own workspace is copied; a bound directory is
            // the caller's and stays where it is.
            snapshot: SnapshotSupport::FilesystemAndMemory,
            // The guest agent makes a command's terminal in the guest.
            // Every egress box's passt is behind the fence (`egress`). An
            // allowlist box has no NIC, only the agent's relay over a port
            // to the proxy (`relay`); its VM always runs on core's machine.
            features: {
                let mut features: std::collections::BTreeSet<Feature> =
                    [Feature::ResourceLimits, Feature::Terminal, Feature::NetworkAllowlist, Feature::SnapshotSweep]
                        .into();
                // Boxes from images: core sends the base disk it built.
                if images {
                    features.extend([Feature::ImageRoot, Feature::ImageDisk]);
                }
                // No fence without its tools here: plain egress is then
                // refused before dispatch, and nothing else is held to it.
                if self.setup().is_ok_and(|s| s.passt.is_some())
                    && tinybox_sdk::fence::missing_tools(tinybox_sdk::fence::NETWRAP_TOOLS).is_none()
                {
                    features.insert(Feature::EgressFence);
                }
                features
            },
            limits: limits.into_iter().collect(),
            network_deny: true,
            sources: {
                let mut sources: std::collections::BTreeSet<SourceKind> =
                    [SourceKind::LocalDir, SourceKind::Snapshot].into();
                if images {
                    sources.insert(SourceKind::OciImage);
                }
                sources
            },
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
        let state = self
            .state
            .get()
            .and_then(Option::as_ref)
            .ok_or_else(|| DriverError::unavailable("the microvm sandbox needs the state directory core offers in the handshake (its VMs' runtime files live there), and got none"))?;
        let accel = create::choose_accel(s, asked)?;
        // The VM's ports are sockets on this machine: its host must be this machine.
        let there =
            capture(host, vec!["cat".into(), "/proc/sys/kernel/random/boot_id".into()], BTreeMap::new(), b"").await?;
        if there.stdout_text().trim() != create::boot_id() {
            return Err(DriverError::unsupported(
                "the microvm sandbox runs its VMs on the machine tinybox runs on; this box's host is another machine",
            ));
        }
        create::launch(s, state, &p, accel).await
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
        // Cancelled at any step: a command that has not reached the guest
        // (still waiting for a port behind a stuck one, or for the agent's
        // answer) ends at once; one that has gets the signals `cancel`
        // sends and, past their grace, its session dropped. Either way its
        // port is let go, so a stuck command never queues the next ones.
        let ExecParams { exec_id, request, box_env, stdio: stdio_ref, egress, .. } = p;
        let work = async {
            if handle.allowlist
                && let Some(endpoint) = &egress
            {
                relay::ensure(&handle.dir, &endpoint.socket).await?;
            }
            let claim = session::claim(&handle.dir, handle.ports).await?;
            // The image's environment beneath the box's, the box's beneath the
            // command's: exactly these, nothing else.
            let mut env: BTreeMap<String, String> = handle.image.iter().flat_map(|i| i.env_pairs()).collect();
            env.extend(box_env);
            env.extend(request.env);
            let workdir = handle.image.as_ref().map_or("/workspace", |i| i.workdir.as_str());
            let exec = Exec {
                argv: match &handle.image {
                    Some(b) => b.as_user(request.argv),
                    None => request.argv,
                },
                env: env.into_iter().collect(),
                cwd: request.cwd.unwrap_or_else(|| workdir.into()),
                tty: request.tty.map(|t| tinybox_agent::wire::Tty { rows: t.rows, cols: t.cols }),
            };
            let stdio = tinybox_sdk::stdio::receive(&stdio_ref)
                .await
                .map_err(|e| DriverError::failed(format!("cannot receive the command's streams: {e}")))?;
            session::run(&handle.dir, &claim, &exec, stdio, &exec_id, &self.running).await
        };
        host::cancellable(&self.running, &exec_id, work, |c| match c {
            Cancelled::BeforeStart => DriverError::failed(
                "cancelled before the command reached the guest (waiting for a free exec port or for the agent's answer); it never ran",
            ),
            Cancelled::Dropped => DriverError::failed(format!(
                "the command did not end within {}s of its cancel; its session was dropped, which makes the guest's agent kill it",
                host::CANCEL_END.as_secs()
            )),
        })
        .await
    }

    /// With the box's handle, or with none (a create that never finished,
    /// whose record holds only the identifier): the VM's directory is named
    /// after the box, so it is found either way.
    async fn destroy(&self, _host: &HostHandle, target: BoxRef) -> Result<(), DriverError> {
        let dir = if target.handle.is_null() || target.interrupted_namespace().is_some() {
            let state = self.state.get().and_then(Option::as_ref).ok_or_else(|| {
                DriverError::not_found(format!("no state directory, so no VM of box {} to find", target.box_id))
            })?;
            create::vm_dir(state, &target.box_id)
        } else {
            Handle::parse(&target.handle)?.dir
        };
        tokio::task::spawn_blocking(move || create::tear_down(&dir))
            .await
            .map_err(|e| DriverError::failed(format!("stopping the VM failed: {e}")))?
    }

    async fn inspect(&self, _host: &HostHandle, target: BoxRef) -> Result<InspectResult, DriverError> {
        if target.handle.is_null() || target.interrupted_namespace().is_some() {
            let state = self.state.get().and_then(Option::as_ref).ok_or_else(|| {
                DriverError::not_found(format!("no state directory, so no VM of box {} to find", target.box_id))
            })?;
            return Ok(create::inspect_interrupted(&create::vm_dir(state, &target.box_id)));
        }
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
        let relay = vm::live_pid(&handle.dir.join(relay::PID), &handle.dir).is_some();
        let net = match (handle.egress, handle.fence.is_empty()) {
            (false, _) if handle.allowlist && relay => {
                "no network interface; the allowlist's egress proxy reached through the agent's relay on 127.0.0.1 over a virtio-serial port".to_owned()
            }
            (false, _) if handle.allowlist => {
                "no network interface; the egress relay is not running (the next command starts it again)".to_owned()
            }
            (false, _) => "no network interface".to_owned(),
            (true, true) => {
                "egress via passt behind the egress fence (public addresses only), no host loopback".to_owned()
            }
            (true, false) => format!(
                "egress via passt behind the egress fence (public addresses and {}), no host loopback",
                handle.fence.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
            ),
        };
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
        let files = match handle.files_as {
            Some((uid, gid)) => format!(
                "files the box writes there land as {uid}:{gid}, mode {:04o} (directories {:04o}), never with the modes, owners or file types the guest gives them (setuid, setgid, executable bits, symlinks and devices stay in user.virtfs.* attributes)",
                vm::FILE_MODE,
                vm::DIR_MODE
            ),
            None => "shared by an older driver that passes the guest's modes and owners (setuid included) to the host; recreate the box".into(),
        };
        let root = match &handle.image {
            Some(b) => format!(
                "root: an image's disk (base {}), its own overlay{}; no shared workspace",
                b.base.display(),
                if handle.from_memory { ", carried on from a memory snapshot" } else { "" }
            ),
            None => format!("workspace {} at /workspace, {files}", handle.workspace.display()),
        };
        Ok(InspectResult {
            state: BoxState::Ready,
            detail: Some(format!("{accel}; {} vCPU, {} MiB; {net}; {root}; {guest}", handle.cpus, handle.memory_mib)),
        })
    }

    async fn snapshot(&self, _host: &HostHandle, target: BoxRef) -> Result<SnapshotId, DriverError> {
        let handle = Handle::parse(&target.handle)?;
        if vm::live_pid(&handle.pid_file(), &handle.dir).is_none() {
            return Err(DriverError::failed(format!(
                "the VM of box {} is not running, so there is nothing to snapshot ({})",
                target.box_id,
                vm::console_tail(&handle.dir)
            )));
        }
        let of = snapshot::Of {
            dir: &handle.dir,
            ports: handle.ports,
            image: handle.image.as_ref(),
            own_workspace: (handle.owned && handle.image.is_none()).then_some(handle.workspace.as_path()),
            // An image box's memory goes with its disk (ADR 0037).
            machine: match (&handle.image, vm::live_pid(&handle.pid_file(), &handle.dir)) {
                (Some(_), Some(pid)) => {
                    memory::booted_files(pid.as_raw_nonzero().get()).map(|(kernel, initramfs)| memory::Machine {
                        qemu: memory::fingerprint(&self.setup().map(|s| s.qemu.clone()).unwrap_or_default()),
                        kernel,
                        initramfs,
                        accel: handle.accel,
                        cpus: handle.cpus,
                        memory_mib: handle.memory_mib,
                        ports: handle.ports,
                        pids: handle.pids,
                        egress: handle.egress,
                        allowlist: handle.allowlist,
                    })
                }
                _ => None,
            },
        };
        snapshot::take(self.state_dir()?, &of, &target.box_id, &handle.namespace).await
    }

    async fn snapshot_rm(&self, _host: &HostHandle, p: SnapshotRmParams) -> Result<(), DriverError> {
        snapshot::remove(self.state_dir()?, &p.id)
    }

    async fn snapshot_sweep(
        &self,
        _host: &HostHandle,
        p: SnapshotSweepParams,
    ) -> Result<SnapshotSweepResult, DriverError> {
        let removed = snapshot::sweep(self.state_dir()?, &p.namespace, &p.box_id, &p.keep)?;
        Ok(SnapshotSweepResult { removed })
    }

    /// The agent made the terminal in the guest: the size goes there.
    async fn resize(&self, _host: &HostHandle, exec_id: &str, size: TtySize) -> Result<(), DriverError> {
        self.running.resize(exec_id, size.rows, size.cols);
        Ok(())
    }

    async fn cancel(&self, _host: &HostHandle, exec_id: &str) -> Result<(), DriverError> {
        host::cancel(&self.running, exec_id);
        Ok(())
    }
}

impl Microvm {
    fn health(&self) -> Health {
        match self.setup() {
            Err(e) => Health::unavailable(e.message),
            Ok(s) => {
                let accel = match &s.kvm_known {
                    Some(Ok(detail)) => format!("KVM: {detail}"),
                    Some(Err(why)) => format!(
                        "no KVM ({why}); boxes run only under emulation, opted into with --accel tcg or \"accel\": \"tcg\" in {}",
                        s.config_path
                    ),
                    None => format!(
                        "KVM not yet probed (/dev/kvm opens; the first create that needs KVM boots a test guest to find out, and until it works isolation is declared kernel); emulation is opted into with --accel tcg or \"accel\": \"tcg\" in {}",
                        s.config_path
                    ),
                };
                let missing = tinybox_sdk::fence::missing_tools(tinybox_sdk::fence::NETWRAP_TOOLS);
                let egress = match (&s.passt, missing) {
                    (Some(_), None) => "egress via passt behind the egress fence".to_owned(),
                    (None, None) => "no egress (install passt)".to_owned(),
                    (Some(_), Some(m)) => format!("no plain egress (its fence needs: install {m})"),
                    (None, Some(m)) => format!("no plain egress (install passt, {m})"),
                };
                Health::ok_with(format!(
                    "{accel}; kernel {}; {egress}; workspace files a box writes land as the workspace's owner (a root caller's QEMU runs as that owner; an unprivileged caller's as the caller), mode {:04o}/{:04o}, without the guest's setuid, setgid, executable bits, owners or symlinks",
                    s.kernel.release,
                    vm::FILE_MODE,
                    vm::DIR_MODE
                ))
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
            let s = setup::setup_from(setup::Config::default(), "config.json".into()).unwrap_or_else(|e| {
                eprintln!("tinybox-driver-microvm: {e}");
                std::process::exit(1)
            });
            let kernel = setup::make_cache(&s.cache)
                .map_err(|e| e.to_string())
                .and_then(|()| guest::boot_kernel(&s.kernel, &s.cache).map_err(|e| e.to_string()))
                .unwrap_or_else(|e| {
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
                allowlist: None,
                // What a box with this memory gets.
                ports: vm::ports_for(256),
                tsc_khz: Some(vm::host_tsc_khz()),
                runas: None,
                disk: None,
                incoming: false,
            };
            let qemu_args = vm::qemu_args(&launch, Path::new(&args[2])).unwrap_or_else(|e| {
                eprintln!("tinybox-driver-microvm: {e}");
                std::process::exit(1)
            });
            println!("{}", s.qemu.display());
            for a in qemu_args {
                println!("{a}");
            }
            return;
        }
        // The host's end of an allowlist box's egress (see `relay`),
        // started detached by a create; not for people to run.
        Some("--egress-relay") if args.len() == 4 => std::process::exit(relay::main(&args[2], &args[3])),
        _ => {}
    }
    tinybox_sdk::run_sandbox_main(Microvm {
        setup: OnceLock::new(),
        state: OnceLock::new(),
        running: Default::default(),
    })
}
