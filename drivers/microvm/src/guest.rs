//! What the VM boots: a guest kernel from the host's /boot and an initramfs
//! tinybox builds itself from busybox-static, the guest agent and the few
//! kernel modules the devices need. Both are cached in the driver's state
//! directory under names derived from their contents, so a second box boots
//! what the first one built.
//!
//! Boot time under emulation is dominated by work the guest does before its
//! first instruction of ours, so two things are prepared on the host once:
//! the kernel's compressed payload is unpacked to a plain ELF (QEMU starts
//! it through its PVH entry, skipping the in-guest decompression: 5.9 s to
//! 2.3 s under TCG for Debian's xz-compressed kernel), and the initramfs is
//! left uncompressed.

use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The modules a box needs, by name, and for egress additionally.
pub const BASE_MODULES: &[&str] = &["virtio_mmio", "virtio_console", "9pnet_virtio", "9p"];
pub const NET_MODULES: &[&str] = &["virtio_net"];
/// For a box booted from an image's disk (ADR 0036): the block device and
/// ext4, with the crc32c its metadata checksums use (the guest has no
/// modprobe to fetch it when ext4 asks the crypto API).
pub const DISK_MODULES: &[&str] = &["virtio_blk", "crc32c_generic", "ext4"];

/// The agent, built static for the guest by build.rs.
pub const AGENT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/tinybox-microvm-agent"));

/// The guest's PID 1: mounts, modules, network, the pids cap, then the
/// agent. Parameters come from the kernel command line as `tb_*` variables.
pub const INIT: &str = include_str!("init.sh");

/// A guest kernel and the modules built for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kernel {
    /// The bootable image (bzImage), as installed.
    pub image: PathBuf,
    /// Its release, e.g. `6.1.0-57-amd64`.
    pub release: String,
    pub modules: PathBuf,
}

/// The kernel modules a box loads, in load order, as (name, path).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ModulePlan {
    pub base: Vec<(String, PathBuf)>,
    pub net: Vec<(String, PathBuf)>,
    /// Empty when the kernel lacks one of DISK_MODULES: `disk_missing` names it.
    pub disk: Vec<(String, PathBuf)>,
    pub disk_missing: Option<String>,
}

/// Release order: numeric runs compared as numbers ("6.10" after "6.9").
fn release_key(release: &str) -> Vec<(u64, String)> {
    let mut key = Vec::new();
    let mut digits = String::new();
    let mut text = String::new();
    for c in release.chars() {
        if c.is_ascii_digit() {
            if !text.is_empty() {
                key.push((0, std::mem::take(&mut text)));
            }
            digits.push(c);
        } else {
            if !digits.is_empty() {
                key.push((digits.parse().unwrap_or(0), String::new()));
                digits.clear();
            }
            text.push(c);
        }
    }
    if !digits.is_empty() {
        key.push((digits.parse().unwrap_or(0), String::new()));
    }
    if !text.is_empty() {
        key.push((0, text));
    }
    key
}

/// The kernels in `boot` (vmlinuz-RELEASE), newest first.
pub fn installed_kernels(boot: &Path, modules_root: &Path) -> Vec<Kernel> {
    let mut found: Vec<Kernel> = std::fs::read_dir(boot)
        .map(|d| {
            d.flatten()
                .filter_map(|e| {
                    let name = e.file_name().to_string_lossy().into_owned();
                    let release = name.strip_prefix("vmlinuz-")?.to_owned();
                    Some(Kernel { image: e.path(), modules: modules_root.join(&release), release })
                })
                .collect()
        })
        .unwrap_or_default();
    found.sort_by_key(|k| std::cmp::Reverse(release_key(&k.release)));
    found
}

/// Plans the modules `kernel` needs from its modules.dep; an error names
/// what the kernel lacks.
pub fn plan_modules(kernel: &Kernel) -> Result<ModulePlan, String> {
    let dep = std::fs::read_to_string(kernel.modules.join("modules.dep"))
        .map_err(|e| format!("cannot read {}: {e}", kernel.modules.join("modules.dep").display()))?;
    let builtin = std::fs::read_to_string(kernel.modules.join("modules.builtin")).unwrap_or_default();
    plan_from(&dep, &builtin, &kernel.modules).map_err(|missing| {
        format!(
            "kernel {} has no {missing} module (neither built in nor in {})",
            kernel.release,
            kernel.modules.display()
        )
    })
}

fn module_name(path: &str) -> String {
    let file = path.rsplit('/').next().unwrap_or(path);
    file.split(".ko").next().unwrap_or(file).replace('-', "_")
}

/// The load order for BASE_MODULES and NET_MODULES; Err names a missing one.
pub fn plan_from(dep: &str, builtin: &str, root: &Path) -> Result<ModulePlan, String> {
    let deps: std::collections::BTreeMap<String, (String, Vec<String>)> = dep
        .lines()
        .filter_map(|line| {
            let (path, rest) = line.split_once(':')?;
            Some((module_name(path), (path.to_owned(), rest.split_whitespace().map(module_name).collect())))
        })
        .collect();
    let builtin: BTreeSet<String> = builtin.lines().map(module_name).collect();
    fn visit(
        name: &str,
        deps: &std::collections::BTreeMap<String, (String, Vec<String>)>,
        builtin: &BTreeSet<String>,
        seen: &mut BTreeSet<String>,
        order: &mut Vec<(String, String)>,
    ) -> Result<(), String> {
        if builtin.contains(name) || seen.contains(name) {
            return Ok(());
        }
        let (path, needs) = deps.get(name).ok_or_else(|| name.to_owned())?;
        seen.insert(name.to_owned());
        // modules.dep lists what a module needs with the deepest last.
        for need in needs.iter().rev() {
            visit(need, deps, builtin, seen, order)?;
        }
        order.push((name.to_owned(), path.clone()));
        Ok(())
    }
    let mut seen = BTreeSet::new();
    let (mut base, mut net) = (Vec::new(), Vec::new());
    for m in BASE_MODULES {
        visit(m, &deps, &builtin, &mut seen, &mut base)?;
    }
    for m in NET_MODULES {
        visit(m, &deps, &builtin, &mut seen, &mut net)?;
    }
    // Image boxes only: a kernel without them still runs every other box.
    let (mut disk, mut disk_missing) = (Vec::new(), None);
    for m in DISK_MODULES {
        if let Err(missing) = visit(m, &deps, &builtin, &mut seen, &mut disk) {
            (disk, disk_missing) = (Vec::new(), Some(missing));
            break;
        }
    }
    let abs = |v: Vec<(String, String)>| v.into_iter().map(|(n, p)| (n, root.join(p))).collect();
    Ok(ModulePlan { base: abs(base), net: abs(net), disk: abs(disk), disk_missing })
}

/// The first kernel (newest first) that has every module a box needs.
pub fn choose_kernel(candidates: &[Kernel]) -> Result<(Kernel, ModulePlan), String> {
    let mut why = Vec::new();
    for k in candidates {
        match plan_modules(k) {
            Ok(plan) => return Ok((k.clone(), plan)),
            Err(e) => why.push(e),
        }
    }
    if why.is_empty() {
        return Err("no kernel in /boot (vmlinuz-*); install linux-image-amd64".into());
    }
    Err(format!(
        "no kernel here can run a box: {}; install linux-image-amd64 (Debian's cloud kernel has no 9p)",
        why.join("; ")
    ))
}

fn hex(hash: &blake3::Hash) -> String {
    hash.to_hex()[..16].to_owned()
}

/// Writes `bytes` to `path` atomically (a sibling temporary file, renamed).
fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)
}

/// The ELF inside a bzImage, when the kernel can start from it (PVH) and
/// its payload is xz (Debian's); `None` means boot the bzImage as it is.
pub fn unpack_kernel(image: &[u8], config: Option<&str>) -> Option<Vec<u8>> {
    if !config.is_some_and(|c| c.lines().any(|l| l == "CONFIG_PVH=y")) {
        return None;
    }
    // The setup header: 0x202 "HdrS", setup_sects at 0x1f1, payload
    // offset/length (relative to the protected-mode code) at 0x248/0x24c.
    if image.get(0x202..0x206)? != b"HdrS" {
        return None;
    }
    let sects = match image[0x1f1] {
        0 => 4,
        n => n as usize,
    };
    let u32_at = |o: usize| Some(u32::from_le_bytes(image.get(o..o + 4)?.try_into().ok()?) as usize);
    let start = (sects + 1) * 512 + u32_at(0x248)?;
    let payload = image.get(start..start + u32_at(0x24c)?)?;
    if !payload.starts_with(b"\xfd7zXZ\x00") {
        return None;
    }
    // The kernel's build appends the unpacked size after the xz stream,
    // whose footer ends in "YZ".
    let payload = if payload.ends_with(b"YZ") { payload } else { payload.get(..payload.len().checked_sub(4)?)? };
    let mut elf = Vec::with_capacity(payload.len() * 8);
    std::io::Read::read_to_end(&mut xz4rust::XzReader::new(std::io::Cursor::new(payload.to_vec())), &mut elf).ok()?;
    elf.starts_with(b"\x7fELF").then_some(elf)
}

/// The kernel file QEMU boots: the unpacked ELF (cached), else the image.
pub fn boot_kernel(kernel: &Kernel, cache: &Path) -> std::io::Result<PathBuf> {
    let image = std::fs::read(&kernel.image)?;
    let path = cache.join(format!("vmlinux-{}-{}", kernel.release, hex(&blake3::hash(&image))));
    if path.is_file() {
        return Ok(path);
    }
    let config = kernel.image.parent().map(|b| b.join(format!("config-{}", kernel.release)));
    let config = config.and_then(|c| std::fs::read_to_string(c).ok());
    match unpack_kernel(&image, config.as_deref()) {
        Some(elf) => {
            write_atomic(&path, &elf)?;
            Ok(path)
        }
        None => Ok(kernel.image.clone()),
    }
}

/// Everything that goes into an initramfs.
pub struct Inputs<'a> {
    pub busybox: &'a [u8],
    /// Applet paths relative to /, from `busybox --list-full`.
    pub applets: Vec<String>,
    pub agent: &'a [u8],
    pub init: &'a str,
    pub modules: &'a ModulePlan,
}

/// Module files as the guest's insmod takes them (uncompressed).
fn module_bytes(path: &Path) -> std::io::Result<Vec<u8>> {
    let raw = std::fs::read(path)?;
    if path.extension().is_some_and(|e| e == "xz") {
        let mut out = Vec::new();
        std::io::Read::read_to_end(&mut xz4rust::XzReader::new(std::io::Cursor::new(raw)), &mut out)
            .map_err(|e| std::io::Error::other(format!("cannot unpack {}: {e}", path.display())))?;
        return Ok(out);
    }
    if path.extension().is_some_and(|e| e != "ko") {
        return Err(std::io::Error::other(format!(
            "{} is compressed in a format this driver cannot unpack (it reads .ko and .ko.xz)",
            path.display()
        )));
    }
    Ok(raw)
}

/// The newc archive for `inputs`.
pub fn initramfs(inputs: &Inputs<'_>) -> std::io::Result<Vec<u8>> {
    use cpio::newc::{Builder, ModeFileType, trailer};
    let mut out = Vec::new();
    let mut ino = 1;
    let mut add = |out: &mut Vec<u8>, name: &str, kind: ModeFileType, perm: u32, data: &[u8]| -> std::io::Result<()> {
        ino += 1;
        let b = Builder::new(name).ino(ino).uid(0).gid(0).nlink(1).mode(perm).set_mode_file_type(kind);
        let mut w = b.write(&mut *out, data.len() as u32);
        w.write_all(data)?;
        w.finish()?;
        Ok(())
    };
    for dir in [
        "bin",
        "sbin",
        "usr",
        "usr/bin",
        "usr/sbin",
        "dev",
        "proc",
        "sys",
        "tmp",
        "run",
        "etc",
        "root",
        "workspace",
        "lib",
        "lib/modules",
        "var",
        "var/tmp",
    ] {
        let perm = if dir.ends_with("tmp") { 0o1777 } else { 0o755 };
        add(&mut out, dir, ModeFileType::Directory, perm, b"")?;
    }
    add(&mut out, "bin/busybox", ModeFileType::Regular, 0o755, inputs.busybox)?;
    for applet in &inputs.applets {
        if applet != "bin/busybox" {
            add(&mut out, applet, ModeFileType::Symlink, 0o777, b"/bin/busybox")?;
        }
    }
    add(&mut out, "sbin/tinybox-microvm-agent", ModeFileType::Regular, 0o755, inputs.agent)?;
    add(&mut out, "init", ModeFileType::Regular, 0o755, inputs.init.as_bytes())?;
    add(
        &mut out,
        "etc/passwd",
        ModeFileType::Regular,
        0o644,
        b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n",
    )?;
    add(&mut out, "etc/group", ModeFileType::Regular, 0o644, b"root:x:0:\nnogroup:x:65534:\n")?;
    for (list, modules) in
        [("base", &inputs.modules.base), ("net", &inputs.modules.net), ("disk", &inputs.modules.disk)]
    {
        let mut order = String::new();
        for (name, path) in modules.iter() {
            add(&mut out, &format!("lib/modules/{name}.ko"), ModeFileType::Regular, 0o644, &module_bytes(path)?)?;
            order.push_str(name);
            order.push('\n');
        }
        add(&mut out, &format!("lib/modules/{list}"), ModeFileType::Regular, 0o644, order.as_bytes())?;
    }
    trailer(&mut out)?;
    Ok(out)
}

/// The initramfs for `inputs`, built once and cached by content.
pub fn cached_initramfs(inputs: &Inputs<'_>, cache: &Path) -> std::io::Result<PathBuf> {
    let mut h = blake3::Hasher::new();
    h.update(b"tinybox-initramfs-v1\0");
    for part in [inputs.busybox, inputs.agent, inputs.init.as_bytes(), inputs.applets.join("\n").as_bytes()] {
        h.update(&(part.len() as u64).to_le_bytes());
        h.update(part);
    }
    for (name, path) in inputs.modules.base.iter().chain(&inputs.modules.net).chain(&inputs.modules.disk) {
        h.update(name.as_bytes());
        h.update(path.as_os_str().as_encoded_bytes());
        let meta = std::fs::metadata(path)?;
        h.update(&meta.len().to_le_bytes());
        h.update(&meta.modified()?.duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos().to_le_bytes());
    }
    let path = cache.join(format!("initramfs-{}.cpio", hex(&h.finalize())));
    if !path.is_file() {
        write_atomic(&path, &initramfs(inputs)?)?;
    }
    Ok(path)
}

#[cfg(test)]
mod tests;
