//! Where tinybox keeps things: the store (boxes, templates) and a private
//! runtime directory for the sockets that carry command streams.

use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// The store directory: `TINYBOX_HOME`, else `$XDG_STATE_HOME/tinybox`,
/// else `~/.local/state/tinybox`.
pub fn default_store_dir() -> PathBuf {
    if let Some(home) = std::env::var_os("TINYBOX_HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(home);
    }
    if let Some(state) = std::env::var_os("XDG_STATE_HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(state).join("tinybox");
    }
    let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/"));
    home.join(".local/state/tinybox")
}

/// A directory only this user can enter, for stdio sockets. Short, because a
/// socket path is limited to 108 bytes: `$XDG_RUNTIME_DIR/tinybox`, else
/// `/tmp/tinybox-<uid>`.
pub fn runtime_dir() -> Result<PathBuf> {
    let uid = rustix::process::getuid().as_raw();
    let dir = match std::env::var_os("XDG_RUNTIME_DIR").filter(|v| !v.is_empty()) {
        Some(run) => PathBuf::from(run).join("tinybox"),
        None => std::env::temp_dir().join(format!("tinybox-{uid}")),
    };
    ensure_private_dir(&dir, uid)?;
    Ok(dir)
}

fn ensure_private_dir(dir: &Path, uid: u32) -> Result<()> {
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => return Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(Error::io(format!("cannot create runtime directory {}", dir.display()), e)),
    }
    // It existed: it must be ours, a real directory, and closed to others —
    // anything else could let another user read a command's streams.
    let meta = std::fs::symlink_metadata(dir)
        .map_err(|e| Error::io(format!("cannot inspect runtime directory {}", dir.display()), e))?;
    if !meta.is_dir() || meta.uid() != uid {
        return Err(Error::io(
            format!("runtime directory {} is not a directory owned by uid {uid}", dir.display()),
            std::io::Error::from(std::io::ErrorKind::PermissionDenied),
        ));
    }
    if meta.mode() & 0o077 != 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| Error::io(format!("cannot make {} private", dir.display()), e))?;
    }
    Ok(())
}
