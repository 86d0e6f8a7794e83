//! Where tinybox keeps things: the store (boxes, templates) and a private
//! runtime directory for the sockets that carry command streams.

use std::path::PathBuf;

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

/// A directory only this user can enter, for stdio sockets:
/// `$XDG_RUNTIME_DIR/tinybox`, else `$TMPDIR/tinybox-<uid>`. The sdk owns
/// the rules, so a driver serving its own helper sockets picks the same one.
pub fn runtime_dir() -> Result<PathBuf> {
    tinybox_sdk::capture::runtime_dir().map_err(|e| Error::io("cannot prepare the runtime directory", e))
}
