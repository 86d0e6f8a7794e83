//! An image's base disk: its root filesystem as one ext4 filesystem in a
//! raw file, built once per image id and kept beside the root filesystem
//! (`disks/sha256/<image id>`), for a sandbox that boots a disk (a microVM)
//! rather than binding a directory. Each box puts a copy-on-write overlay
//! of its own above it (ADR 0036), so the base is read-only by contract
//! and its mode says so.
//!
//! `mkfs.ext4 -d ROOTFS` builds it as the caller, with no mount and no
//! privilege: the files keep the owners and modes they have in the root
//! filesystem (the store's owner; setuid and setgid already dropped by the
//! unpacker). It is built in `tmp/` and renamed, like everything else in
//! the store, so a name under `disks/` always means a whole disk; rm and
//! prune remove it with the image (`ImageStore::sweep`).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::digest::Digest;
use crate::error::{ImageError, Result};
use crate::store::ImageStore;

const MIB: u64 = 1024 * 1024;
/// Free space a box's root filesystem starts with, whatever the image:
/// what a box may write into its disk (its overlay grows as it does).
pub const FREE_SPACE: u64 = 1024 * MIB;

impl ImageStore {
    pub(crate) fn disks_dir(&self) -> PathBuf {
        self.root().join("disks/sha256")
    }

    /// Where image `id`'s base disk is (made by [`ImageStore::base_disk`]).
    pub fn disk_path(&self, id: &Digest) -> PathBuf {
        self.disks_dir().join(id.hex())
    }

    /// The base disk of image `name`, built now if it is not there yet.
    pub fn base_disk(&self, name: &str) -> Result<PathBuf> {
        let _lock = self.shared_lock()?;
        let record = self.resolve(name)?;
        let path = self.disk_path(&record.id);
        if path.is_file() {
            return Ok(path);
        }
        let rootfs = self.rootfs_path(&record.id);
        self.make_dirs()?;
        std::fs::create_dir_all(self.disks_dir())
            .map_err(|e| ImageError::io(format!("cannot make {}", self.disks_dir().display()), e))?;
        let tmp = tempfile::Builder::new()
            .prefix("disk-")
            .tempfile_in(self.tmp_dir())
            .map_err(|e| ImageError::io("cannot make a temporary file in the image store", e))?;
        let size = disk_size(tree_bytes(&rootfs));
        build(&rootfs, tmp.path(), size)?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o444))
            .map_err(|e| ImageError::io(format!("cannot make {} read-only", tmp.path().display()), e))?;
        tmp.persist(&path).map_err(|e| ImageError::io(format!("cannot name {}", path.display()), e.error))?;
        Ok(path)
    }
}

/// The filesystem's size for a root of `used` bytes: room for the files,
/// the filesystem's own metadata (inode tables, the journal), and
/// [`FREE_SPACE`] for the box, rounded up to a MiB. The file is sparse:
/// the free space costs nothing on the host until a box writes it (and
/// then in the box's overlay, not here).
pub fn disk_size(used: u64) -> u64 {
    let with_metadata = used + used / 4 + 64 * MIB;
    (with_metadata + FREE_SPACE).div_ceil(MIB) * MIB
}

/// Runs `mkfs.ext4` over `rootfs` into `file` of `size` bytes.
fn build(rootfs: &Path, file: &Path, size: u64) -> Result<()> {
    let out = Command::new(mkfs())
        // -q quiet, -F a regular file, -m 0 nothing reserved for root (the
        // box's root is the only user), inode tables written now so the
        // guest's kernel does not zero them lazily into every overlay.
        .args(["-q", "-F", "-m", "0", "-L", "tinybox-root", "-E", "lazy_itable_init=0,lazy_journal_init=0", "-d"])
        .arg(rootfs)
        .arg(file)
        .arg(format!("{}k", size / 1024))
        .output();
    let out = match out {
        Ok(out) => out,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(ImageError::Disk {
                detail: "mkfs.ext4 is not installed; install the e2fsprogs package".into(),
            });
        }
        Err(e) => return Err(ImageError::io("cannot run mkfs.ext4", e)),
    };
    if !out.status.success() {
        return Err(ImageError::Disk {
            detail: format!(
                "mkfs.ext4 -d {} failed ({}): {}",
                rootfs.display(),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        });
    }
    Ok(())
}

/// mkfs.ext4 from PATH, else where Debian installs it (/usr/sbin, /sbin:
/// not on an unprivileged user's PATH).
fn mkfs() -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin".into(), "/sbin".into()])
        .map(|d| d.join("mkfs.ext4"))
        .find(|p| p.is_file())
        .unwrap_or_else(|| "mkfs.ext4".into())
}

/// The bytes of the files under `path` (apparent sizes, each inode once),
/// not following symlinks.
fn tree_bytes(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut seen = std::collections::BTreeSet::new();
    let mut total = 0;
    let mut todo = vec![path.to_owned()];
    while let Some(p) = todo.pop() {
        let Ok(meta) = p.symlink_metadata() else { continue };
        if !seen.insert(meta.ino()) {
            continue;
        }
        total += meta.len().max(4096);
        if meta.is_dir()
            && let Ok(entries) = std::fs::read_dir(&p)
        {
            todo.extend(entries.flatten().map(|e| e.path()));
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_disk_has_room_for_its_files_their_metadata_and_the_box() {
        assert_eq!(disk_size(0), 1088 * MIB);
        let used = 100 * MIB;
        assert!(disk_size(used) >= used + FREE_SPACE);
        assert_eq!(disk_size(used) % MIB, 0);
    }

    #[test]
    fn a_tree_counts_each_file_once_however_many_links_it_has() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a"), vec![0u8; 10_000]).unwrap();
        std::fs::hard_link(dir.path().join("a"), dir.path().join("b")).unwrap();
        // The directory and one 10 kB file.
        assert_eq!(tree_bytes(dir.path()), 4096 + 10_000);
    }
}
