//! What boxes are made from on this machine: the driver's configuration,
//! QEMU, busybox-static, the guest kernel and its modules, the cache, and
//! what is known of KVM — found once per driver process, in the handshake,
//! which reads and never writes (the protocol: a handshake changes
//! nothing). The cache, the initramfs and the KVM probe's verdict are made
//! when a create first needs them.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde::Deserialize;
use tinybox_sdk::HostHandle;
use tinybox_sdk::protocol::DriverError;

use crate::accel;
use crate::guest::{self, Kernel};
use crate::vm::Accel;

/// The driver's configuration: the handshake's `config`, else
/// `config.json` in its state directory. Every key is optional.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
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
pub struct Setup {
    pub qemu: PathBuf,
    pub kernel: Kernel,
    plan: guest::ModulePlan,
    busybox: PathBuf,
    /// Built (or found in the cache) when first needed: a create, or a
    /// KVM probe. A command in a running box never pays for it.
    initramfs: OnceLock<Result<PathBuf, String>>,
    pub cache: PathBuf,
    pub passt: Option<PathBuf>,
    /// Makes an image box's overlay; without it no box boots an image.
    pub qemu_img: Option<PathBuf>,
    /// KVM's verdict as the handshake found it: `None` until a create has
    /// probed it (on this boot, kernel and QEMU). The declaration claims
    /// Hardware only on a recorded `Ok`.
    pub kvm_known: Option<accel::KvmStatus>,
    /// The verdict this process probed for a create, when none was known.
    kvm_probed: OnceLock<accel::KvmStatus>,
    pub default_accel: Option<Accel>,
    /// Where the operator's configuration lives, for messages.
    pub config_path: String,
    pub pids_cgroup: bool,
}

fn which(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(program)).find(|p| p.is_file())
}

/// Whether an ELF file needs a program interpreter (a dynamic loader).
pub fn is_dynamic(elf: &[u8]) -> bool {
    let u16_at = |o: usize| elf.get(o..o + 2).map(|b| u16::from_le_bytes([b[0], b[1]]) as usize);
    let u64_at = |o: usize| elf.get(o..o + 8).map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])) as usize);
    let (Some(phoff), Some(size), Some(count)) = (u64_at(0x20), u16_at(0x36), u16_at(0x38)) else { return true };
    (0..count).any(|i| elf.get(phoff + i * size..phoff + i * size + 4) == Some(&3u32.to_le_bytes()[..]))
}

/// The per-user cache for kernels, initramfs images and the KVM verdict,
/// shared by every store (its files are named by their contents).
pub fn cache_dir() -> PathBuf {
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
    // `host` is core's word on where the boxes run (driver protocol), not
    // this driver's configuration; create checks the machine itself.
    let mut given = host.config().clone();
    if let Some(o) = given.as_object_mut() {
        o.remove("host");
        if o.is_empty() {
            given = serde_json::Value::Null;
        }
    }
    if !given.is_null() {
        let c = serde_json::from_value(given).map_err(|e| format!("the microvm configuration is invalid: {e}"))?;
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

pub fn setup(host: &HostHandle) -> Result<Setup, String> {
    let (config, config_path) = load_config(host)?;
    setup_from(config, config_path)
}

pub fn setup_from(config: Config, config_path: String) -> Result<Setup, String> {
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
    let kvm_known = accel::known_kvm_status(&qemu, &kernel.image, &cache);
    let passt = config.passt.clone().or_else(|| which("passt"));
    let qemu_img = which("qemu-img");
    Ok(Setup {
        qemu,
        kernel,
        plan,
        busybox: busybox_path,
        initramfs: OnceLock::new(),
        cache,
        passt,
        qemu_img,
        kvm_known,
        kvm_probed: OnceLock::new(),
        default_accel,
        config_path,
        pids_cgroup,
    })
}

/// The initramfs for this busybox and module plan, built once and cached.
fn build_initramfs(busybox_path: &Path, plan: &guest::ModulePlan, cache: &Path) -> Result<PathBuf, String> {
    make_cache(cache)?;
    let busybox = std::fs::read(busybox_path).map_err(|e| format!("cannot read {}: {e}", busybox_path.display()))?;
    let list = std::process::Command::new(busybox_path)
        .arg("--list-full")
        .output()
        .map_err(|e| format!("cannot run {}: {e}", busybox_path.display()))?;
    let applets = String::from_utf8_lossy(&list.stdout).lines().map(str::to_owned).filter(|l| !l.is_empty()).collect();
    let inputs = guest::Inputs { busybox: &busybox, applets, agent: guest::AGENT, init: guest::INIT, modules: plan };
    guest::cached_initramfs(&inputs, cache).map_err(|e| format!("cannot build the initramfs: {e}"))
}

/// Makes the cache directory: by a create, never by a handshake.
pub fn make_cache(cache: &Path) -> Result<(), String> {
    std::fs::create_dir_all(cache).map_err(|e| format!("cannot make {}: {e}", cache.display()))
}

impl Setup {
    /// Why no box can boot an image here, if none can: the kernel lacks a
    /// module the disk needs, or qemu-img is missing.
    pub fn no_images(&self) -> Option<String> {
        if let Some(m) = &self.plan.disk_missing {
            return Some(format!(
                "kernel {} has no {m} module, which a box booted from an image's disk needs",
                self.kernel.release
            ));
        }
        if self.qemu_img.is_none() {
            return Some(
                "qemu-img is not installed (it makes each image box's disk); install the qemu-utils package".into(),
            );
        }
        None
    }

    /// KVM's verdict for a create: the known one, else a probe (a few
    /// seconds, once per boot of the machine; blocking).
    pub fn kvm(&self) -> Result<accel::KvmStatus, DriverError> {
        if let Some(known) = &self.kvm_known {
            return Ok(known.clone());
        }
        if let Some(probed) = self.kvm_probed.get() {
            return Ok(probed.clone());
        }
        let initramfs = self.initramfs()?;
        let status = accel::kvm_status(&self.qemu, &self.kernel.image, &self.cache, &initramfs);
        Ok(self.kvm_probed.get_or_init(|| status).clone())
    }

    pub fn initramfs(&self) -> Result<PathBuf, DriverError> {
        self.initramfs
            .get_or_init(|| build_initramfs(&self.busybox, &self.plan, &self.cache))
            .clone()
            .map_err(DriverError::failed)
    }
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
}
