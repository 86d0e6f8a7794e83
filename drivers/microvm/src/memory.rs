//! Memory snapshots of an image box (ADR 0037): QEMU's migration stream
//! (guest RAM and device state) written to a file while the guest is held
//! still, and read back by a new QEMU started with `-incoming defer` and
//! the same machine, so the box's processes carry on where they were.
//!
//! QEMU 7.2 has no `file:` migration URI; `exec:cat` is the portable one.
//! A restore is only attempted on the machine that wrote the snapshot —
//! the same QEMU build, kernel and initramfs files, vCPUs, memory, ports
//! and network devices ([`Machine`]); anything else boots the snapshot's
//! disk cold instead.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tinybox_sdk::protocol::DriverError;

use crate::qmp;
use crate::vm::Accel;

/// The memory file's name in a snapshot.
pub const FILE: &str = "memory";

/// Everything a restoring QEMU must match for the saved state to load.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Machine {
    /// The QEMU binary: its path, size and modification time.
    pub qemu: String,
    pub kernel: PathBuf,
    pub initramfs: PathBuf,
    pub accel: Accel,
    pub cpus: u32,
    pub memory_mib: u64,
    pub ports: usize,
    pub pids: Option<u64>,
    pub egress: bool,
    pub allowlist: bool,
}

/// The QEMU build at `qemu`, as far as the file tells.
pub fn fingerprint(qemu: &Path) -> String {
    use std::os::unix::fs::MetadataExt;
    match std::fs::metadata(qemu) {
        Ok(m) => format!("{} {} {}", qemu.display(), m.size(), m.mtime()),
        Err(_) => format!("{} missing", qemu.display()),
    }
}

/// The `-kernel` and `-initrd` files the QEMU of pid `pid` was started with.
pub fn booted_files(pid: i32) -> Option<(PathBuf, PathBuf)> {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
    let after = |flag: &[u8]| {
        let i = args.iter().position(|a| *a == flag)?;
        Some(PathBuf::from(String::from_utf8_lossy(args.get(i + 1)?).into_owned()))
    };
    Some((after(b"-kernel")?, after(b"-initrd")?))
}

/// `path` in single quotes for the shell QEMU runs `exec:` through;
/// refused when it holds a quote.
fn quoted(path: &Path) -> Result<String, DriverError> {
    let s = path.to_str().filter(|s| !s.contains('\'')).ok_or_else(|| {
        DriverError::invalid(format!(
            "the snapshot path {} holds a quote or is not UTF-8, which QEMU's migration command cannot carry; use a plainer TINYBOX_HOME",
            path.display()
        ))
    })?;
    Ok(format!("'{s}'"))
}

/// Writes the stopped guest of box `dir` to `to`.
pub async fn save(dir: &Path, to: &Path) -> Result<(), DriverError> {
    let uri = format!("exec:cat > {}", quoted(to)?);
    qmp::command(dir, "migrate", Some(serde_json::json!({ "uri": uri }))).await?;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let state = qmp::command(dir, "query-migrate", None).await?;
        match state["status"].as_str() {
            Some("completed") => return Ok(()),
            Some("failed") | Some("cancelled") => {
                return Err(DriverError::failed(format!(
                    "QEMU could not save the guest's memory: {}",
                    state["error-desc"].as_str().unwrap_or("no reason given")
                )));
            }
            _ if Instant::now() >= deadline => {
                let _ = qmp::command(dir, "migrate_cancel", None).await;
                return Err(DriverError::failed("saving the guest's memory took over 120 s; it was cancelled"));
            }
            _ => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

/// Loads `from` into box `dir`'s QEMU (started with `-incoming defer`)
/// and waits until the guest runs again: bytes sent to it before then
/// would be lost. The guest was saved held still, and the stream says so,
/// so once it is in it is let go (`cont`).
pub async fn load(dir: &Path, from: &Path) -> Result<(), DriverError> {
    let uri = format!("exec:cat {}", quoted(from)?);
    qmp::command(dir, "migrate-incoming", Some(serde_json::json!({ "uri": uri }))).await?;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let status = qmp::command(dir, "query-status", None).await?;
        match status["status"].as_str() {
            Some("running") => return Ok(()),
            Some("paused") if qmp::command(dir, "query-migrate", None).await?["status"] == "completed" => {
                qmp::command(dir, "cont", None).await?;
            }
            Some("inmigrate") | Some("prelaunch") | Some("paused") if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            other => {
                return Err(DriverError::failed(format!(
                    "the guest did not run again from its memory snapshot (QEMU says {})",
                    other.unwrap_or("nothing")
                )));
            }
        }
    }
}

/// What a restored guest must not keep from the snapshot: its clock (it
/// resumes at the time the snapshot was taken) is set from the host's, and
/// host randomness is mixed into its pool (a write to /dev/urandom mixes
/// but does not force a reseed: ADR 0037 says what that leaves).
pub async fn after_restore(dir: &Path, ports: usize) -> Result<(), DriverError> {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_secs();
    let busybox = crate::image::BUSYBOX.to_owned();
    let date = vec![busybox.clone(), "date".into(), "-u".into(), "-s".into(), format!("@{now}")];
    crate::image::run_in_guest(dir, ports, date, "setting the restored guest's clock").await?;
    let mut seed = [0u8; 64];
    std::io::Read::read_exact(
        &mut std::fs::File::open("/dev/urandom")
            .map_err(|e| DriverError::failed(format!("cannot open /dev/urandom: {e}")))?,
        &mut seed,
    )
    .map_err(|e| DriverError::failed(format!("cannot read /dev/urandom: {e}")))?;
    let hex: String = seed.iter().map(|b| format!("{b:02x}")).collect();
    let mix = vec![busybox, "sh".into(), "-c".into(), "echo \"$1\" > /dev/urandom".into(), "sh".into(), hex];
    crate::image::run_in_guest(dir, ports, mix, "mixing host randomness into the restored guest").await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_reaches_the_migration_shell_quoted_or_not_at_all() {
        assert_eq!(quoted(Path::new("/s/a b/memory")).unwrap(), "'/s/a b/memory'");
        assert_eq!(quoted(Path::new("/s/$(x);y/memory")).unwrap(), "'/s/$(x);y/memory'");
        let err = quoted(Path::new("/s/it's/memory")).unwrap_err();
        assert!(err.message.contains("holds a quote"), "{}", err.message);
    }

    #[test]
    fn the_booted_files_come_from_qemu_s_own_command_line() {
        let mut child = std::process::Command::new("sh")
            .args(["-c", "read x", "-kernel", "/k/vmlinux", "-initrd", "/c/initramfs.cpio"])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        // Until it has exec'd, the child's command line is this test's (bounded poll).
        let deadline = Instant::now() + Duration::from_secs(10);
        while !std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default().starts_with(b"sh\0") {
            assert!(Instant::now() < deadline, "sh did not start");
            std::thread::yield_now();
        }
        assert_eq!(booted_files(pid), Some(("/k/vmlinux".into(), "/c/initramfs.cpio".into())));
        child.kill().unwrap();
        child.wait().unwrap();
    }
}
