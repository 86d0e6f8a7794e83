//! Helpers for the microvm live suite: whether QEMU boxes can run here, the
//! create flags every test uses (emulation: these machines' KVM cannot run
//! a guest), and the processes a store's VMs are.

use std::path::{Path, PathBuf};

use crate::boxes::BoxEnv;

/// An emulated box, small enough for several at once on two cores.
pub const TCG: &[&str] = &["--sandbox", "microvm", "--accel", "tcg", "--cpus", "1", "--memory", "256M"];

/// Why microVM boxes cannot run here, if they cannot.
pub fn unavailable() -> Option<String> {
    if !crate::have("qemu-system-x86_64") {
        return Some("qemu-system-x86_64 is not installed (contrib/setup/install-deps installs it)".into());
    }
    let cli = crate::Cli::new();
    let (code, out, err) = cli.run(&["drivers", "--json"]);
    if code != 0 {
        return Some(format!("tinybox drivers failed: {err}"));
    }
    let reports: serde_json::Value = serde_json::from_str(&out).expect("drivers --json is JSON");
    let list = reports.as_array().cloned().unwrap_or_default();
    let Some(vm) = list.iter().find(|r| r["name"] == "microvm") else {
        return Some("the microvm driver is not built".into());
    };
    if vm["health"]["ok"] != true {
        return Some(format!("the microvm driver is unavailable: {}", vm["health"]["detail"]));
    }
    None
}

/// Skips the calling test (visibly) when microVMs cannot run here.
#[macro_export]
macro_rules! need_microvm {
    ($test:expr) => {
        if let Some(why) = $crate::microvm::unavailable() {
            $crate::skip($test, &why);
            return;
        }
    };
}

/// Live processes whose command line mentions `dir` (a store's VMs, their
/// passt): what must be gone once their boxes are removed.
pub fn processes_under(dir: &Path) -> Vec<(i32, String)> {
    let needle = dir.as_os_str().as_encoded_bytes().to_vec();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else { continue };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else { continue };
        let zombie = std::fs::read_to_string(entry.path().join("stat"))
            .ok()
            .and_then(|s| s.rsplit(')').next().map(|r| r.trim_start().starts_with('Z')))
            .unwrap_or(true);
        if !zombie && cmdline.windows(needle.len()).any(|w| w == needle) {
            found.push((pid, String::from_utf8_lossy(&cmdline).replace('\0', " ")));
        }
    }
    found
}

/// The runtime directories of a store's VMs.
pub fn vm_dirs(env: &BoxEnv) -> Vec<std::path::PathBuf> {
    let vms = env.store.path().join("drivers/microvm/vms");
    std::fs::read_dir(vms).map(|d| d.flatten().map(|e| e.path()).collect()).unwrap_or_default()
}

/// A static program that tries to give each file named on its command line
/// a file capability (CAP_SETUID, permitted and effective) and prints
/// `<file>=set` or `<file>=<error>`: what a box would run to plant a
/// privileged program in a shared workspace. Compiled once per test process.
pub fn file_capability_probe() -> std::path::PathBuf {
    const SOURCE: &str = r#"
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/xattr.h>
int main(int argc, char **argv) {
    /* struct vfs_cap_data, revision 2, effective; permitted: CAP_SETUID (7) */
    unsigned int cap[5] = {0x02000001u, 1u << 7, 0, 0, 0};
    for (int i = 1; i < argc; i++) {
        int r = setxattr(argv[i], "security.capability", cap, sizeof cap, 0);
        printf("%s=%s\n", argv[i], r == 0 ? "set" : strerror(errno));
    }
    return 0;
}
"#;
    static PROBE: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    PROBE.get_or_init(|| crate::compiled_probe("setcap", SOURCE)).clone()
}

/// The names of `path`'s extended attributes (not following a symlink).
pub fn xattr_names(path: &Path) -> Vec<String> {
    let mut buf = vec![0u8; 64 * 1024];
    let len =
        rustix::fs::llistxattr(path, &mut buf[..]).unwrap_or_else(|e| panic!("listxattr {}: {e}", path.display()));
    buf[..len].split(|b| *b == 0).filter(|n| !n.is_empty()).map(|n| String::from_utf8_lossy(n).into_owned()).collect()
}

/// Kills whatever processes under a store's directory (QEMU, passt, an
/// egress relay) a failing test leaves running, when dropped.
pub struct Reaper(pub PathBuf);

impl Drop for Reaper {
    fn drop(&mut self) {
        for (pid, _) in processes_under(&self.0) {
            if let Some(pid) = rustix::process::Pid::from_raw(pid) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
        }
    }
}
