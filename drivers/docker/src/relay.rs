//! The egress relay an allowlist box's container runs as its entrypoint:
//! `tinybox-egress`, built static by build.rs (an image's userland may be
//! busybox or musl, so it cannot lean on the host's glibc) and embedded
//! here. It is written under the store's state directory on this machine,
//! named by its contents, and bound read-only into the container; the box's
//! record never needs to name it, since any build of this driver finds (or
//! writes) its own.

use std::io::Write;
use std::path::{Path, PathBuf};

/// The static `tinybox-egress` executable.
pub const RELAY: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/tinybox-egress-relay"));

/// Where under the state directory relays are written.
pub const RELAY_DIR: &str = "docker";

/// `<state>/docker/egress-relay-<hash>`, written (atomically, mode 0755) unless
/// a file with exactly these bytes is already there.
pub fn install(state_dir: &Path) -> Result<PathBuf, String> {
    install_bytes(state_dir, RELAY)
}

fn install_bytes(state_dir: &Path, bytes: &[u8]) -> Result<PathBuf, String> {
    let hash = blake3::hash(bytes).to_hex();
    let dir = state_dir.join(RELAY_DIR);
    let path = dir.join(format!("egress-relay-{}", &hash[..16]));
    if std::fs::read(&path).is_ok_and(|have| have == bytes) {
        return Ok(path);
    }
    let fail = |what: &str, e: std::io::Error| format!("cannot {what} the egress relay at {}: {e}", path.display());
    std::fs::create_dir_all(&dir).map_err(|e| fail("make the directory of", e))?;
    let tmp = dir.join(format!(".egress-relay-{}.{}.tmp", &hash[..16], std::process::id()));
    let written = (|| {
        let mut f = std::fs::File::options().write(true).create(true).truncate(true).mode_0755().open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, &path)
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(fail("write", e));
    }
    Ok(path)
}

trait Mode0755 {
    fn mode_0755(&mut self) -> &mut Self;
}

impl Mode0755 for std::fs::OpenOptions {
    fn mode_0755(&mut self) -> &mut Self {
        std::os::unix::fs::OpenOptionsExt::mode(self, 0o755)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether an ELF file needs a program interpreter (a dynamic loader).
    fn is_dynamic(elf: &[u8]) -> bool {
        let u16_at = |o: usize| elf.get(o..o + 2).map(|b| u16::from_le_bytes([b[0], b[1]]) as usize);
        let u64_at = |o: usize| elf.get(o..o + 8).map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])) as usize);
        let (Some(phoff), Some(size), Some(count)) = (u64_at(0x20), u16_at(0x36), u16_at(0x38)) else { return true };
        (0..count).any(|i| elf.get(phoff + i * size..phoff + i * size + 4) == Some(&3u32.to_le_bytes()[..]))
    }

    #[test]
    fn the_embedded_relay_is_a_static_executable() {
        assert_eq!(&RELAY[..4], b"\x7fELF");
        assert!(!is_dynamic(RELAY), "the relay names a program interpreter: it would not run on a busybox image");
        let host_binary = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        assert!(is_dynamic(&host_binary), "the check sees an interpreter where there is one");
    }

    #[test]
    fn the_relay_is_written_once_named_by_its_contents_and_rewritten_when_changed() {
        let state = tempfile::tempdir().unwrap();
        let a = install_bytes(state.path(), b"relay one").unwrap();
        assert!(a.starts_with(state.path().join(RELAY_DIR)));
        assert_eq!(std::fs::read(&a).unwrap(), b"relay one");
        let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&a).unwrap().permissions());
        assert_eq!(mode & 0o777, 0o755);
        assert_eq!(install_bytes(state.path(), b"relay one").unwrap(), a);
        std::fs::write(&a, b"damaged").unwrap();
        assert_eq!(install_bytes(state.path(), b"relay one").unwrap(), a);
        assert_eq!(std::fs::read(&a).unwrap(), b"relay one", "a damaged copy is replaced");
        let b = install_bytes(state.path(), b"relay two").unwrap();
        assert_ne!(a, b);
        let left: Vec<_> = std::fs::read_dir(state.path().join(RELAY_DIR)).unwrap().collect();
        assert_eq!(left.len(), 2, "no temporary file is left");
    }
}
