//! A box booted from an OCI image (ADR 0036): core sends the image's base
//! disk (ext4, raw, read-only, built once per image by its image store)
//! and config; the box gets a qcow2 overlay of its own on that base in its
//! directory, attached as its one virtio-blk disk. The initramfs mounts it
//! and switch_roots into it, the agent beside it in a tmpfs, so commands
//! run the image's own programs. What the box writes lands in the overlay:
//! it survives from exec to exec, and a snapshot copies it (`snapshot`).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use tinybox_sdk::protocol::{DriverError, ImageRoot};

/// The overlay's name in the box's directory.
pub const OVERLAY: &str = "disk.qcow2";

/// What a box made from an image keeps in its handle.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageBox {
    /// The image's base disk, the overlay's backing file.
    pub base: PathBuf,
    /// The image's environment, `NAME=VALUE`, beneath the box's own.
    #[serde(default)]
    pub env: Vec<String>,
    /// Where commands start unless they say: the image's WorkingDir, else `/`.
    pub workdir: String,
    /// The image's User: every command runs as it (the agent's `--user`),
    /// resolved in the image's own passwd and group files in the guest.
    #[serde(default)]
    pub user: Option<String>,
}

impl ImageBox {
    /// From core's prepared root; refuses one without a base disk.
    pub fn from_root(root: &ImageRoot) -> Result<ImageBox, DriverError> {
        let base = root.disk.clone().ok_or_else(|| {
            DriverError::invalid(
                "the microvm sandbox boots an image from its base disk, and this core sent none (it needs a core that builds image disks)",
            )
        })?;
        if !base.is_file() {
            return Err(DriverError::invalid(format!("the image's base disk {} does not exist", base.display())));
        }
        let workdir = root.working_dir.clone().filter(|w| w.starts_with('/')).unwrap_or_else(|| "/".into());
        Ok(ImageBox { base, env: root.env.clone(), workdir, user: root.user.clone() })
    }

    /// The image's environment as pairs (entries without `=` are skipped,
    /// as docker does).
    pub fn env_pairs(&self) -> impl Iterator<Item = (String, String)> + '_ {
        self.env.iter().filter_map(|e| e.split_once('=')).map(|(k, v)| (k.to_owned(), v.to_owned()))
    }
}

/// The busybox the initramfs placed beside the agent in an image box.
pub const BUSYBOX: &str = "/run/tinybox/busybox";

/// Runs `argv` in box `dir`'s guest with no input or output (a helper of
/// the driver's own, never a caller's command); fails, naming `what`,
/// unless it exits 0.
pub async fn run_in_guest(dir: &Path, ports: usize, argv: Vec<String>, what: &str) -> Result<(), DriverError> {
    use std::os::fd::OwnedFd;
    let null = || -> Result<OwnedFd, DriverError> {
        std::fs::File::options()
            .read(true)
            .write(true)
            .open("/dev/null")
            .map(OwnedFd::from)
            .map_err(|e| DriverError::failed(format!("cannot open /dev/null: {e}")))
    };
    let stdio = tinybox_sdk::stdio::StdioFds { stdin: null()?, stdout: null()?, stderr: null()? };
    let exec = tinybox_agent::wire::Exec { argv, env: Vec::new(), cwd: "/".into(), tty: None };
    let claim = crate::session::claim(dir, ports).await?;
    let running = crate::session::Running::default();
    let status = crate::session::run(dir, &claim, &exec, stdio, "tinybox-driver", &running).await?;
    if status.code != Some(0) {
        return Err(DriverError::failed(format!("{what} ended with {status:?}")));
    }
    Ok(())
}

/// The agent's copy beside the image's root, in its tmpfs.
const AGENT: &str = "/run/tinybox/tinybox-microvm-agent";

impl ImageBox {
    /// `argv` as the image's User runs it: through the agent's `--user`,
    /// unless the image runs as root (or says nothing).
    pub fn as_user(&self, argv: Vec<String>) -> Vec<String> {
        match self.user.as_deref() {
            None | Some("" | "root" | "0" | "root:root" | "0:0") => argv,
            Some(user) => [AGENT, "--user", user, "--"].map(String::from).into_iter().chain(argv).collect(),
        }
    }
}

pub fn overlay(dir: &Path) -> PathBuf {
    dir.join(OVERLAY)
}

/// Makes `dir`'s overlay on `base` with `qemu-img` (a few ms, a few
/// hundred KiB). Its virtual size is the base's: the filesystem inside is
/// the base's, with the room the image store gave it.
pub async fn make_overlay(qemu_img: &Path, base: &Path, dir: &Path) -> Result<PathBuf, DriverError> {
    let path = overlay(dir);
    let out = tokio::process::Command::new(qemu_img)
        .args(["create", "-q", "-f", "qcow2", "-F", "raw", "-b"])
        .arg(base)
        .arg(&path)
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .map_err(|e| DriverError::failed(format!("cannot run {}: {e}", qemu_img.display())))?;
    if !out.status.success() {
        return Err(DriverError::failed(format!(
            "qemu-img could not make the box's disk on {} ({}): {}",
            base.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root(disk: Option<PathBuf>, workdir: Option<&str>) -> ImageRoot {
        ImageRoot {
            rootfs: "/store/rootfs".into(),
            env: vec!["PATH=/usr/bin:/bin".into(), "A=b=c".into(), "NOEQUALS".into()],
            working_dir: workdir.map(str::to_owned),
            disk,
            ..Default::default()
        }
    }

    #[test]
    fn an_image_box_takes_the_image_s_env_and_workdir() {
        let disk = tempfile::NamedTempFile::new().unwrap();
        let b = ImageBox::from_root(&root(Some(disk.path().to_owned()), Some("/srv/app"))).unwrap();
        assert_eq!(b.workdir, "/srv/app");
        let env: Vec<_> = b.env_pairs().collect();
        assert_eq!(env, [("PATH".into(), "/usr/bin:/bin".into()), ("A".into(), "b=c".into())]);
        let b = ImageBox::from_root(&root(Some(disk.path().to_owned()), None)).unwrap();
        assert_eq!(b.workdir, "/", "no WorkingDir: the root");
        let b = ImageBox::from_root(&root(Some(disk.path().to_owned()), Some("relative"))).unwrap();
        assert_eq!(b.workdir, "/", "a relative WorkingDir is not a place to start");
    }

    #[test]
    fn a_command_runs_as_the_image_s_user_unless_that_is_root() {
        let disk = tempfile::NamedTempFile::new().unwrap();
        let mut b = ImageBox::from_root(&root(Some(disk.path().to_owned()), None)).unwrap();
        let argv = || vec!["id".to_owned(), "-u".to_owned()];
        assert_eq!(b.as_user(argv()), argv(), "no User: root");
        for root in ["root", "0", "0:0", ""] {
            b.user = Some(root.into());
            assert_eq!(b.as_user(argv()), argv(), "{root:?}");
        }
        b.user = Some("app:staff".into());
        assert_eq!(b.as_user(argv()), [AGENT, "--user", "app:staff", "--", "id", "-u"]);
    }

    #[test]
    fn an_image_without_a_base_disk_is_refused_by_name() {
        let err = ImageBox::from_root(&root(None, None)).unwrap_err();
        assert!(err.message.contains("sent none"), "{}", err.message);
        let err = ImageBox::from_root(&root(Some("/nonexistent/disk".into()), None)).unwrap_err();
        assert!(err.message.contains("/nonexistent/disk does not exist"), "{}", err.message);
    }
}
