//! Whether KVM can really run a guest here. /dev/kvm existing proves
//! nothing: under some nested, paravirtual KVMs it opens fine and a stock
//! kernel then hangs at 100% CPU. So the answer comes from booting the
//! box's own kernel and initramfs under KVM and waiting (bounded) for the
//! agent's hello. The result is cached per boot of this machine, per
//! kernel and QEMU, so only the first create after a boot pays; a
//! handshake only reads the cached verdict.

use std::io::Read;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tinybox_agent::wire::Kind;

use crate::vm::{self, Accel, Launch};

/// How long a test guest gets to greet under KVM (it needs well under a
/// second where KVM works).
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(4);

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Cached {
    key: String,
    usable: bool,
    reason: String,
}

/// What KVM can do here: Ok(detail) or Err(why not).
pub type KvmStatus = Result<String, String>;

fn file_key(h: &mut blake3::Hasher, path: &Path) {
    h.update(path.as_os_str().as_encoded_bytes());
    if let Ok(meta) = std::fs::metadata(path) {
        h.update(&meta.len().to_le_bytes());
        if let Ok(t) = meta.modified() {
            h.update(&t.duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos().to_le_bytes());
        }
    }
}

/// What is known of KVM here without running or writing anything:
/// `Some(Err)` when /dev/kvm cannot be opened, `Some` of the recorded
/// verdict when a probe already ran for this boot, kernel and QEMU, and
/// `None` when only a probe can tell (the handshake's case on a fresh
/// machine: it changes nothing, so it never probes).
pub fn known_kvm_status(qemu: &Path, kernel: &Path, cache_dir: &Path) -> Option<KvmStatus> {
    if let Err(e) = std::fs::OpenOptions::new().read(true).write(true).open("/dev/kvm") {
        return Some(Err(match e.kind() {
            std::io::ErrorKind::NotFound => "there is no /dev/kvm (no hardware virtualization here)".into(),
            std::io::ErrorKind::PermissionDenied => {
                "cannot open /dev/kvm (permission denied; add this user to the kvm group)".into()
            }
            _ => format!("cannot open /dev/kvm ({e})"),
        }));
    }
    let cached = std::fs::read(verdict_file(cache_dir)).ok()?;
    let c = serde_json::from_slice::<Cached>(&cached).ok()?;
    (c.key == verdict_key(qemu, kernel)).then_some(if c.usable { Ok(c.reason) } else { Err(c.reason) })
}

fn verdict_file(cache_dir: &Path) -> PathBuf {
    cache_dir.join("kvm-probe.json")
}

fn verdict_key(qemu: &Path, kernel: &Path) -> String {
    let mut h = blake3::Hasher::new();
    h.update(b"kvm-probe-v3\0");
    h.update(env!("CARGO_PKG_VERSION").as_bytes());
    h.update(std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default().trim().as_bytes());
    for p in [qemu, kernel] {
        file_key(&mut h, p);
    }
    h.finalize().to_hex().to_string()
}

/// KVM's status: the known one, else a probe booting `initramfs` under KVM,
/// whose verdict is recorded in `cache_dir` for every later driver process
/// (and handshake) of this boot. Run by a create, never by a handshake.
pub fn kvm_status(qemu: &Path, kernel: &Path, cache_dir: &Path, initramfs: &Path) -> KvmStatus {
    if let Some(known) = known_kvm_status(qemu, kernel, cache_dir) {
        return known;
    }
    let result = probe(qemu, kernel, initramfs, cache_dir);
    let record = match &result {
        Ok(r) => Cached { key: verdict_key(qemu, kernel), usable: true, reason: r.clone() },
        Err(r) => Cached { key: verdict_key(qemu, kernel), usable: false, reason: r.clone() },
    };
    let cache = verdict_file(cache_dir);
    if let Ok(bytes) = serde_json::to_vec(&record) {
        let tmp = cache.with_extension(format!("tmp-{}", std::process::id()));
        if std::fs::write(&tmp, bytes).is_ok() {
            let _ = std::fs::rename(&tmp, &cache);
        }
    }
    result
}

fn probe(qemu: &Path, kernel: &Path, initramfs: &Path, cache_dir: &Path) -> KvmStatus {
    let dir: PathBuf = cache_dir.join(format!("kvm-probe-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot make {}: {e}", dir.display()))?;
    let launch = Launch {
        accel: Accel::Kvm,
        kernel: kernel.to_owned(),
        initramfs: initramfs.to_owned(),
        cpus: 1,
        memory_mib: 256,
        pids: None,
        workspace: None,
        egress: None,
        allowlist: None,
        ports: 1,
        tsc_khz: None,
        runas: None,
        disk: None,
        incoming: false,
    };
    let started = Instant::now();
    let result = (|| {
        let out = std::process::Command::new(qemu)
            .args(vm::qemu_args(&launch, &dir)?)
            .stdin(std::process::Stdio::null())
            .output()
            .map_err(|e| format!("cannot run {}: {e}", qemu.display()))?;
        if !out.status.success() {
            let stderr = String::from_utf8_lossy(&out.stderr);
            let first = stderr.lines().next().unwrap_or("no message").trim_start_matches("qemu-system-x86_64: ");
            return Err(format!("QEMU cannot run a guest under KVM ({first})"));
        }
        let mut s =
            UnixStream::connect(vm::port_socket(&dir, 0)).map_err(|e| format!("cannot reach the test guest: {e}"))?;
        s.set_read_timeout(Some(PROBE_TIMEOUT)).map_err(|e| e.to_string())?;
        let mut first = [0u8; 1];
        match s.read(&mut first) {
            Ok(1) if first[0] == Kind::Hello as u8 => {
                Ok(format!("KVM runs guests here (a test guest greeted in {} ms)", started.elapsed().as_millis()))
            }
            Ok(_) => Err("the test guest under KVM stopped before greeting".into()),
            Err(_) => Err(format!(
                "/dev/kvm opens, but a test guest did not boot under KVM within {} s (a nested KVM that cannot run this kernel?)",
                PROBE_TIMEOUT.as_secs()
            )),
        }
    })();
    vm::stop(&dir.join("qemu.pid"), &dir, Duration::from_millis(200));
    let _ = std::fs::remove_dir_all(&dir);
    result
}
