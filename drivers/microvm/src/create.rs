//! Making a box: which acceleration, its runtime directory, its workspace,
//! passt behind the egress fence, QEMU detached, the agent's first hello,
//! and for an allowlist box the egress relay; and tearing one down.
//! `Handle` is what core stores for a box.

use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tinybox_sdk::fence::Exception;
use tinybox_sdk::model::{BoxId, IsolationLevel, NetworkPolicy, Resources, WorkspaceSource};
use tinybox_sdk::protocol::{BoxState, CreateParams, CreateResult, DriverError, EgressEndpoint, InspectResult};

use crate::image::{self, ImageBox};
use crate::memory::{self, Machine};
use crate::setup::Setup;
use crate::snapshot::{self, Restored};
use crate::vm::{self, Accel};
use crate::{egress, guest, relay, session};

const MIB: u64 = 1024 * 1024;
/// Below this the guest's kernel and initramfs do not fit comfortably.
const MIN_MEMORY_MIB: u64 = 128;

/// What core stores for a box.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Handle {
    pub dir: PathBuf,
    pub accel: Accel,
    pub workspace: PathBuf,
    /// The workspace was made for the box and goes with it.
    pub owned: bool,
    pub egress: bool,
    /// The network is an allowlist: no NIC, the agent's relay to the box's
    /// egress proxy (`relay`).
    #[serde(default)]
    pub allowlist: bool,
    /// With egress: the addresses the caller let through its fence (every
    /// egress box is fenced; a record from before the fence has none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fence: Vec<Exception>,
    pub cpus: u32,
    pub memory_mib: u64,
    #[serde(default)]
    pub pids: Option<u64>,
    /// Its virtio-serial ports, health check included.
    #[serde(default = "all_ports")]
    pub ports: usize,
    /// The uid:gid that files the box writes into the workspace land as on
    /// the host (ADR 0013). Absent in a record made by a driver that shared
    /// the workspace with `security_model=none`.
    #[serde(default)]
    pub files_as: Option<(u32, u32)>,
    /// A box booted from an image (ADR 0036): its root is the overlay in
    /// `dir`, and it shares no workspace (`workspace` is empty).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<ImageBox>,
    /// The box's namespace (core's), which its snapshots are swept by.
    #[serde(default)]
    pub namespace: String,
    /// It carried on from a memory snapshot (ADR 0037), rather than booting.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub from_memory: bool,
}

fn all_ports() -> usize {
    vm::PORTS
}

impl Handle {
    pub fn parse(v: &serde_json::Value) -> Result<Handle, DriverError> {
        serde_json::from_value(v.clone())
            .map_err(|e| DriverError::invalid(format!("the box record was not made by the microvm driver ({e})")))
    }

    pub fn pid_file(&self) -> PathBuf {
        self.dir.join("qemu.pid")
    }
}

pub fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default().trim().to_owned()
}

/// Removes a box's directory and stops what runs in it.
pub fn tear_down(dir: &Path) -> Result<(), DriverError> {
    let qemu = vm::stop(&dir.join("qemu.pid"), dir, Duration::from_secs(3));
    let passt = vm::stop(&dir.join("passt.pid"), dir, Duration::from_secs(1));
    let relay = vm::stop(&dir.join(relay::PID), dir, Duration::from_secs(1));
    // Then whatever names the directory and has no (complete) pid file: a
    // create killed between starting QEMU and QEMU writing its pid.
    let rest = vm::kill_all_naming(dir);
    if !(qemu && passt && relay && rest) {
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

/// The acceleration a box gets: what it asked for, else the operator's
/// configured choice, else KVM where it works. Emulation is never chosen
/// for the caller.
/// Asking for KVM runs the KVM probe if no verdict is known yet.
pub fn choose_accel(s: &Setup, asked: Option<Accel>) -> Result<Accel, DriverError> {
    let wanted = asked.or(s.default_accel);
    if wanted == Some(Accel::Tcg) {
        return Ok(Accel::Tcg);
    }
    match (wanted, &s.kvm()?) {
        (Some(Accel::Tcg), _) => Ok(Accel::Tcg),
        (_, Ok(_)) => Ok(Accel::Kvm),
        (Some(Accel::Kvm), Err(why)) => Err(DriverError::unavailable(format!("--accel kvm: {why}"))),
        (None, Err(why)) => Err(DriverError::unavailable(format!(
            "no hardware virtualization for this box: {why}; to run it under emulation instead (much slower, no hardware isolation), pass --accel tcg or set \"accel\": \"tcg\" in {}",
            s.config_path
        ))),
    }
}

/// Whom QEMU runs as, and so whom box-written files belong to on the host
/// (ADR 0013): the caller, except that a root caller's QEMU becomes the
/// workspace's owner once it has opened its files, so a box never writes
/// as root into somebody else's directory and QEMU keeps no root privilege
/// while the guest runs. Returns the `-runas` pair (None: stay the caller)
/// and the uid:gid files land as.
pub fn qemu_user(caller: (u32, u32), workspace_owner: (u32, u32)) -> (Option<(u32, u32)>, (u32, u32)) {
    if caller.0 == 0 && workspace_owner.0 != 0 { (Some(workspace_owner), workspace_owner) } else { (None, caller) }
}

/// Refuses a workspace whose filesystem has no `user.*` extended
/// attributes: 9p's mapped-xattr keeps the guest's modes and owners there,
/// and without them no box could write into it.
fn check_user_xattrs(ws: &Path) -> Result<(), DriverError> {
    let mut value = [0u8; 64];
    match rustix::fs::getxattr(ws, "user.virtfs.mode", &mut value[..]) {
        Err(rustix::io::Errno::NOTSUP) => Err(DriverError::unsupported(format!(
            "the workspace {} is on a filesystem without user extended attributes, where the microvm sandbox keeps the modes and owners the guest sets so that none reach the host; use a directory on ext4, xfs or btrfs",
            ws.display()
        ))),
        _ => Ok(()),
    }
}

/// Whole vCPUs and MiB from the limits in force.
pub fn resources(r: &Resources) -> Result<(u32, u64), DriverError> {
    let defaults = Resources::defaults();
    let cpus = r.cpus.or(defaults.cpus).unwrap_or(1.0);
    if cpus.fract() != 0.0 || !(1.0..=255.0).contains(&cpus) {
        return Err(DriverError::invalid(format!(
            "cpu limit {cpus} is not a whole number of vCPUs from 1 to 255; a microVM gets whole processors"
        )));
    }
    let memory_mib = r.memory_bytes.or(defaults.memory_bytes).unwrap_or(MIN_MEMORY_MIB * MIB) / MIB;
    if memory_mib < MIN_MEMORY_MIB {
        return Err(DriverError::invalid(format!(
            "memory limit {memory_mib} MiB is below the {MIN_MEMORY_MIB} MiB a microVM guest needs"
        )));
    }
    Ok((cpus as u32, memory_mib))
}

/// The runtime directory of box `box_id`'s VM under `state`, the store's
/// own state directory: named after the box alone, so that a record with
/// no handle (a create interrupted before it returned one) still leads to
/// everything the box made. A store's identifiers are unique, so the name
/// is too; the namespace adds nothing within one store.
pub fn vm_dir(state: &Path, box_id: &BoxId) -> PathBuf {
    state.join("vms").join(box_id.as_str())
}

/// What a create whose answer was lost made, from the VM directory its
/// box's name gives: a QEMU naming a file there (its pid file may not be
/// written yet), a directory and nothing running, or nothing.
pub fn inspect_interrupted(dir: &Path) -> InspectResult {
    if !dir.is_dir() {
        return InspectResult {
            state: BoxState::Gone,
            detail: Some(format!("no VM directory {} was made", dir.display())),
        };
    }
    // passt names the directory too; the VM is the QEMU.
    let running = vm::processes_naming(dir).into_iter().any(|pid| {
        std::fs::read_to_string(format!("/proc/{}/comm", pid.as_raw_nonzero()))
            .is_ok_and(|comm| comm.starts_with("qemu-system"))
    });
    if running {
        InspectResult { state: BoxState::Ready, detail: Some(format!("its VM runs, in {}", dir.display())) }
    } else {
        InspectResult {
            state: BoxState::Gone,
            detail: Some(format!(
                "its VM directory {} is there, and no VM runs; {}",
                dir.display(),
                vm::console_tail(dir)
            )),
        }
    }
}

/// A fresh runtime directory for box `box_id` under `state`, private to
/// this user. One left there already belongs to an earlier box of the same
/// identifier whose record is gone (the store only hands out a free one):
/// whatever it still runs is stopped, and it is removed first.
fn make_dir(state: &Path, box_id: &BoxId) -> Result<PathBuf, DriverError> {
    let dir = vm_dir(state, box_id);
    if vm::port_socket(&dir, vm::PORTS - 1).as_os_str().len() > 100 {
        return Err(DriverError::invalid(format!(
            "the box directory {} is too deep for a UNIX socket path (at most 108 bytes); use a shorter TINYBOX_HOME",
            dir.display()
        )));
    }
    tear_down(&dir)?;
    let fail = |e: std::io::Error| DriverError::failed(format!("cannot make {}: {e}", dir.display()));
    std::fs::create_dir_all(dir.parent().expect("vms dir")).map_err(fail)?;
    std::fs::DirBuilder::new().mode(0o700).create(&dir).map_err(fail)?;
    Ok(dir)
}

/// Refuses more vCPUs than the host has under emulation, where each is a
/// host thread that emulates a CPU flat out: beyond the host's count they
/// only take turns, and booting took minutes (64 on 2 cores: 80 s).
pub fn check_host_cpus(cpus: u32, accel: Accel, host_cpus: usize) -> Result<(), DriverError> {
    if accel == Accel::Tcg && cpus as usize > host_cpus {
        return Err(DriverError::invalid(format!(
            "cpu limit {cpus} is more than the {host_cpus} CPUs this host has; under emulation (--accel tcg) a box gets at most {host_cpus} vCPUs"
        )));
    }
    Ok(())
}

/// Makes box `p` under `state` with `accel`; on any failure nothing of it is left.
pub async fn launch(s: &Setup, state: &Path, p: &CreateParams, accel: Accel) -> Result<CreateResult, DriverError> {
    let (cpus, memory_mib) = resources(&p.resources)?;
    check_host_cpus(cpus, accel, std::thread::available_parallelism().map_or(1, usize::from))?;
    let passt = match (p.network == Some(NetworkPolicy::Egress), &s.passt) {
        (true, None) => {
            return Err(DriverError::unavailable(
                "egress for a microVM needs passt (a user-mode network stack that keeps the host's loopback out of reach); install the passt package",
            ));
        }
        (egress, passt) => passt.clone().filter(|_| egress),
    };
    if passt.is_some() {
        egress::check_tools()?;
    }
    let allowlist = match (p.network == Some(NetworkPolicy::Allowlist), &p.egress) {
        (false, _) => None,
        (true, Some(endpoint)) => Some(endpoint),
        (true, None) => {
            return Err(DriverError::invalid(
                "an allowlist box needs its egress proxy's endpoint, which core sends with the create; this core sent none",
            ));
        }
    };
    let dir = make_dir(state, &p.box_id)?;
    let result = boot(s, state, p, accel, &dir, (cpus, memory_mib), passt, allowlist).await;
    if result.is_err() {
        let _ = tear_down(&dir);
    }
    result
}

#[allow(clippy::too_many_arguments)]
async fn boot(
    s: &Setup,
    state: &Path,
    p: &CreateParams,
    accel: Accel,
    dir: &Path,
    (cpus, memory_mib): (u32, u64),
    passt: Option<PathBuf>,
    allowlist: Option<&EgressEndpoint>,
) -> Result<CreateResult, DriverError> {
    let owned_workspace = || {
        let ws = dir.join("workspace");
        std::fs::create_dir(&ws).map_err(|e| DriverError::failed(format!("cannot make {}: {e}", ws.display())))?;
        Ok::<_, DriverError>((ws, true))
    };
    let bound = |path: &Path| {
        if !path.is_dir() {
            return Err(DriverError::invalid(format!("workspace directory {} does not exist", path.display())));
        }
        Ok((std::fs::canonicalize(path).unwrap_or_else(|_| path.to_owned()), false))
    };
    let image_box = |root: &ImageBox| -> Result<ImageBox, DriverError> {
        if let Some(why) = s.no_images() {
            return Err(DriverError::unavailable(why));
        }
        Ok(root.clone())
    };
    // An image box has a disk and no shared workspace; every other box the reverse.
    let mut resume = None;
    let (image, workspace) = match &p.source {
        None => (None, Some(owned_workspace()?)),
        Some(WorkspaceSource::LocalDir { path }) => (None, Some(bound(path)?)),
        Some(WorkspaceSource::OciImage { reference }) => {
            let root = p.image.as_ref().ok_or_else(|| {
                DriverError::unsupported(format!(
                    "the microvm sandbox boots image {reference} from tinybox's image store, and this core sent no prepared image; import or pull it with `tinybox image` first"
                ))
            })?;
            let b = image_box(&ImageBox::from_root(root)?)?;
            let qemu_img = s.qemu_img.as_deref().expect("no_images checked qemu-img");
            image::make_overlay(qemu_img, &b.base, dir).await?;
            (Some(b), None)
        }
        Some(WorkspaceSource::Snapshot { id }) => match snapshot::restore(state, id, dir).await? {
            Restored::Image(r) => {
                resume = r.memory;
                (Some(image_box(&r.image)?), None)
            }
            Restored::Workspace => (None, Some((dir.join("workspace"), true))),
            Restored::Bound => match &p.workspace_dir {
                Some(path) => (None, Some(bound(path)?)),
                None => (None, Some(owned_workspace()?)),
            },
        },
        Some(other) => {
            return Err(DriverError::unsupported(format!(
                "the microvm sandbox shares a directory you already have at /workspace, or boots an image; it cannot start from {}",
                other.kind()
            )));
        }
    };
    let Some((workspace, owned)) = workspace else {
        return boot_vm(s, p, accel, dir, (cpus, memory_mib), passt, allowlist, None, image, resume).await;
    };
    check_user_xattrs(&workspace)?;
    let owner = std::fs::metadata(&workspace)
        .map(|m| {
            use std::os::unix::fs::MetadataExt;
            (m.uid(), m.gid())
        })
        .map_err(|e| DriverError::failed(format!("cannot read {}: {e}", workspace.display())))?;
    boot_vm(s, p, accel, dir, (cpus, memory_mib), passt, allowlist, Some((workspace, owned, owner)), image, None).await
}

/// Boots the VM of a box whose root (an image's overlay, or the
/// initramfs with `shared` at /workspace, its owner's uid and gid) is ready.
#[allow(clippy::too_many_arguments)]
async fn boot_vm(
    s: &Setup,
    p: &CreateParams,
    accel: Accel,
    dir: &Path,
    (cpus, memory_mib): (u32, u64),
    passt: Option<PathBuf>,
    allowlist: Option<&EgressEndpoint>,
    shared: Option<(PathBuf, bool, (u32, u32))>,
    image: Option<ImageBox>,
    resume: Option<(PathBuf, Machine)>,
) -> Result<CreateResult, DriverError> {
    let caller = (rustix::process::getuid().as_raw(), rustix::process::getgid().as_raw());
    // No shared directory, no one else's files to write: QEMU stays the caller.
    let (runas, files_as) = match &shared {
        Some((_, _, owner)) => qemu_user(caller, *owner),
        None => (None, caller),
    };
    let (workspace, owned) = match shared {
        Some((ws, owned, _)) => (Some(ws), owned),
        None => (None, false),
    };
    let (kernel_image, cache) = (s.kernel.clone(), s.cache.clone());
    let kernel = tokio::task::spawn_blocking(move || {
        crate::setup::make_cache(&cache).map_err(std::io::Error::other)?;
        guest::boot_kernel(&kernel_image, &cache)
    })
    .await
    .map_err(|e| DriverError::failed(format!("preparing the kernel failed: {e}")))?
    .map_err(|e| DriverError::failed(format!("cannot prepare the kernel {}: {e}", s.kernel.image.display())))?;
    let egress = match passt {
        None => None,
        Some(passt) => Some(egress::start(&passt, dir, &p.egress_exceptions).await?),
    };
    let ports = vm::ports_for(memory_mib);
    // The snapshot's memory only on the machine that wrote it; else its disk boots cold.
    let here = |m: &Machine| Machine {
        qemu: memory::fingerprint(&s.qemu),
        kernel: m.kernel.clone(),
        initramfs: m.initramfs.clone(),
        accel,
        cpus,
        memory_mib,
        ports,
        pids: p.resources.pids,
        egress: egress.is_some(),
        allowlist: allowlist.is_some(),
    };
    let resume =
        resume.filter(|(file, m)| *m == here(m) && file.is_file() && m.kernel.is_file() && m.initramfs.is_file());
    let cold = (kernel, s.initramfs()?);
    let (kernel, initramfs) = match &resume {
        Some((_, m)) => (m.kernel.clone(), m.initramfs.clone()),
        None => cold.clone(),
    };
    let mut launch = vm::Launch {
        accel,
        kernel,
        initramfs,
        cpus,
        memory_mib,
        pids: p.resources.pids,
        workspace: workspace.clone(),
        egress,
        allowlist: allowlist.map(|e| e.port),
        ports,
        tsc_khz: Some(vm::host_tsc_khz()),
        runas,
        disk: image.as_ref().map(|_| image::overlay(dir)),
        incoming: resume.is_some(),
    };
    let qemu_args = vm::qemu_args(&launch, dir).map_err(DriverError::invalid)?;
    run_detached(&s.qemu, qemu_args, "QEMU could not start the VM").await?;
    let mut resume = resume;
    if let Some((file, _)) = &resume
        && let Err(e) = memory::load(dir, file).await
    {
        // A memory file that does not load (truncated, damaged) leaves the
        // disk, which boots cold. passt quits with the QEMU it served, so a
        // box with egress cannot start again here: its error stands.
        if launch.egress.is_some() {
            return Err(e);
        }
        let pid_file = dir.join("qemu.pid");
        let stop_dir = dir.to_owned();
        tokio::task::spawn_blocking(move || vm::stop(&pid_file, &stop_dir, Duration::from_secs(3)))
            .await
            .map_err(|e| DriverError::failed(format!("stopping the VM failed: {e}")))?;
        (launch.kernel, launch.initramfs) = cold;
        launch.incoming = false;
        resume = None;
        let qemu_args = vm::qemu_args(&launch, dir).map_err(DriverError::invalid)?;
        run_detached(&s.qemu, qemu_args, "QEMU could not start the VM").await?;
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
    if resume.is_some() {
        memory::after_restore(dir, ports).await?;
    } else if let Some(b) = &image {
        // Where commands start must exist, as docker makes it.
        let argv = vec![image::BUSYBOX.into(), "mkdir".into(), "-p".into(), "--".into(), b.workdir.clone()];
        image::run_in_guest(dir, launch.ports, argv, &format!("making the image's working directory {}", b.workdir))
            .await?;
    }
    if let Some(endpoint) = allowlist {
        // The agent is up: the relay's session opens at once.
        relay::start(dir, &endpoint.socket).await?;
    }
    let workdir = image.as_ref().map_or_else(|| "/workspace".to_owned(), |b| b.workdir.clone());
    let handle = Handle {
        dir: dir.to_owned(),
        accel,
        workspace: workspace.unwrap_or_default(),
        owned,
        egress: launch.egress.is_some(),
        allowlist: allowlist.is_some(),
        fence: if launch.egress.is_some() { p.egress_exceptions.clone() } else { Vec::new() },
        cpus,
        memory_mib,
        pids: p.resources.pids,
        ports: launch.ports,
        files_as: Some(files_as),
        image,
        namespace: p.namespace.clone(),
        from_memory: resume.is_some(),
    };
    Ok(CreateResult {
        handle: serde_json::to_value(&handle).expect("handle serializes"),
        workdir: Some(workdir),
        // Emulation has no hardware boundary: never claim one for it.
        isolation: (accel == Accel::Tcg).then_some(IsolationLevel::Kernel),
        // The guest's disk outlives each command: everything is kept.
        persistent_paths: None,
        snapshot: None,
    })
}

/// Runs `program`, which daemonizes once it is ready; fails with `what` and its stderr.
async fn run_detached(program: &Path, args: Vec<String>, what: &str) -> Result<(), DriverError> {
    let out = tokio::process::Command::new(program)
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .map_err(|e| DriverError::failed(format!("cannot run {}: {e}", program.display())))?;
    if !out.status.success() {
        return Err(DriverError::failed(format!(
            "{what} ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(cpus: Option<f64>, memory_mib: Option<u64>) -> Resources {
        Resources { cpus, memory_bytes: memory_mib.map(|m| m * MIB), pids: None, disk_bytes: None }
    }

    #[test]
    fn vcpus_are_whole_and_memory_has_a_floor() {
        assert_eq!(resources(&limits(Some(3.0), Some(300))).unwrap(), (3, 300));
        assert_eq!(resources(&limits(None, None)).unwrap(), (2, 2048), "the spec's defaults");
        for bad in [0.5, 1.5, 0.0, 256.0] {
            let err = resources(&limits(Some(bad), None)).unwrap_err();
            assert!(err.message.contains(&format!("cpu limit {bad} is not a whole number")), "{}", err.message);
        }
        let err = resources(&limits(Some(1.0), Some(64))).unwrap_err();
        assert!(err.message.contains("64 MiB is below the 128 MiB"), "{}", err.message);
    }

    #[test]
    fn emulation_gets_no_more_vcpus_than_the_host_has() {
        let err = check_host_cpus(64, Accel::Tcg, 2).unwrap_err();
        assert!(err.message.contains("cpu limit 64 is more than the 2 CPUs this host has"), "{}", err.message);
        assert!(check_host_cpus(2, Accel::Tcg, 2).is_ok());
        assert!(check_host_cpus(64, Accel::Kvm, 2).is_ok(), "KVM vCPUs are scheduled like threads");
    }

    #[test]
    fn a_box_s_vm_directory_follows_from_its_identifier_alone() {
        let state = Path::new("/s/drivers/microvm");
        let id = BoxId::new("box-1").unwrap();
        assert_eq!(vm_dir(state, &id), Path::new("/s/drivers/microvm/vms/box-1"));
        // What a later create of the same identifier finds is cleared first.
        let tmp = tempfile::tempdir().unwrap();
        let stale = vm_dir(tmp.path(), &id);
        std::fs::create_dir_all(stale.join("workspace")).unwrap();
        std::fs::write(stale.join("qemu.pid"), "999999999").unwrap();
        assert_eq!(make_dir(tmp.path(), &id).unwrap(), stale);
        assert_eq!(std::fs::read_dir(&stale).unwrap().count(), 0, "the stale directory's files are gone");
    }

    #[test]
    fn a_workspace_without_user_extended_attributes_is_refused_by_name() {
        let ws = std::env::temp_dir();
        assert!(check_user_xattrs(&ws).is_ok(), "{} keeps user xattrs", ws.display());
        // procfs has no user.* attributes.
        let err = check_user_xattrs(Path::new("/proc/self")).unwrap_err();
        assert!(
            err.message.contains("/proc/self") && err.message.contains("without user extended attributes"),
            "{}",
            err.message
        );
    }

    #[test]
    fn a_root_caller_s_qemu_becomes_the_workspace_owner_and_nobody_else_s_does() {
        // Root over a user's workspace: QEMU drops to that user, files land as it.
        assert_eq!(qemu_user((0, 0), (1001, 1002)), (Some((1001, 1002)), (1001, 1002)));
        // Root over root's own workspace: root's files, in root's directory.
        assert_eq!(qemu_user((0, 0), (0, 0)), (None, (0, 0)));
        assert_eq!(qemu_user((0, 0), (0, 1001)), (None, (0, 0)), "a root-owned directory is root's");
        // An unprivileged caller cannot become anyone else: its files are its own.
        assert_eq!(qemu_user((1001, 1001), (1001, 1001)), (None, (1001, 1001)));
        assert_eq!(qemu_user((1001, 1001), (1002, 1002)), (None, (1001, 1001)));
        assert_eq!(qemu_user((1001, 1001), (0, 0)), (None, (1001, 1001)));
    }
}
