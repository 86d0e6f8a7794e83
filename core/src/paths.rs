//! Where tinybox keeps things: the store (boxes, templates) and a private
//! runtime directory for the sockets that carry command streams.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::store::StoreError;

/// System directories, each with what binding it would hand a box (and
/// what a store there would write into: [`check_store_dir`]).
pub(crate) const SYSTEM_DIRS: &[(&str, &str)] = &[
    ("/proc", "the kernel's view of every process"),
    ("/sys", "the kernel's devices and settings"),
    ("/dev", "the machine's devices"),
    ("/etc", "the machine's configuration and secrets"),
    ("/boot", "the machine's kernels and boot loader"),
    ("/usr", "the programs everyone on the machine runs"),
    ("/bin", "the programs everyone on the machine runs"),
    ("/sbin", "the programs everyone on the machine runs"),
    ("/lib", "the libraries everyone on the machine loads"),
    ("/lib32", "the libraries everyone on the machine loads"),
    ("/lib64", "the libraries everyone on the machine loads"),
    ("/libx32", "the libraries everyone on the machine loads"),
    ("/run", "the machine's running services and their sockets"),
    ("/var/run", "the machine's running services and their sockets"),
];

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

/// The store directory `dir` resolved (symlinks too, as far as it exists)
/// and checked before anything is read or written in it: never `/` or a
/// system directory (a store that is a symlink to /etc would write its
/// lock files and documents there), and, where it exists, a directory owned
/// by the caller (another user could swap its files under us). A store that
/// does not exist yet is made by the caller on its first change.
pub fn check_store_dir(dir: &Path) -> std::result::Result<PathBuf, StoreError> {
    let refuse = |problem: String| StoreError::Refused { path: dir.to_owned(), problem };
    let abs = std::path::absolute(dir).map_err(|source| StoreError::Io { path: dir.to_owned(), source })?;
    // The nearest part of the path that exists, resolved, and the rest as written.
    let (existing, rest) = abs
        .ancestors()
        .find_map(|a| Some((std::fs::canonicalize(a).ok()?, abs.strip_prefix(a).ok()?.to_owned())))
        .ok_or_else(|| refuse("cannot be resolved".into()))?;
    // (Joining an empty rest would add a trailing slash.)
    let resolved = if rest.as_os_str().is_empty() { existing } else { existing.join(&rest) };
    let shown = if resolved == abs { String::new() } else { format!("resolves to {}, which ", resolved.display()) };
    if resolved == Path::new("/") {
        return Err(refuse(format!("{shown}is the root of the machine")));
    }
    if let Some((sys, what)) = SYSTEM_DIRS.iter().find(|(sys, _)| resolved.starts_with(sys)) {
        return Err(refuse(format!("{shown}is inside {sys} ({what})")));
    }
    if rest.as_os_str().is_empty() {
        let meta = std::fs::metadata(&resolved).map_err(|source| StoreError::Io { path: resolved.clone(), source })?;
        if !meta.is_dir() {
            return Err(refuse(format!("{shown}is not a directory")));
        }
        let me = rustix::process::geteuid().as_raw();
        if meta.uid() != me {
            return Err(refuse(format!("{shown}belongs to uid {}, not to this user (uid {me})", meta.uid())));
        }
    }
    Ok(resolved)
}

/// A directory only this user can enter, for stdio sockets:
/// `$XDG_RUNTIME_DIR/tinybox`, else `$TMPDIR/tinybox-<uid>`. The sdk owns
/// the rules, so a driver serving its own helper sockets picks the same one.
/// Sockets left there by a process that was killed are removed then
/// (`remove_stale_sockets`): once per engine, one read of a small directory.
pub fn runtime_dir() -> Result<PathBuf> {
    let dir = tinybox_sdk::capture::runtime_dir().map_err(|e| Error::io("cannot prepare the runtime directory", e))?;
    tinybox_sdk::capture::remove_stale_sockets(&dir);
    Ok(dir)
}

/// Removes the sockets killed processes left in the runtime directory
/// (`remove_stale_sockets`), for `reap` and a daemon's start: a store
/// driven only through its daemon opens no engine that would. A directory
/// that cannot be had has nothing to sweep.
pub fn sweep_runtime_dir() {
    let _ = runtime_dir();
}

/// The environment variable naming the DNS server egress proxies resolve
/// names with, `IP:PORT` (the kit's and the tests' own server). Unset or
/// empty: the system's resolver.
pub const EGRESS_RESOLVER_VAR: &str = "TINYBOX_EGRESS_RESOLVER";

/// The nameserver [`EGRESS_RESOLVER_VAR`] names, read when a proxy starts.
pub fn egress_resolver() -> std::result::Result<Option<std::net::SocketAddr>, crate::egress::EgressError> {
    match std::env::var(EGRESS_RESOLVER_VAR) {
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(v)) => Err(crate::egress::EgressError::Resolver(v.to_string_lossy().into())),
        Ok(v) if v.is_empty() => Ok(None),
        Ok(v) => v.parse().map(Some).map_err(|_| crate::egress::EgressError::Resolver(v)),
    }
}
