//! Finding driver executables: next to the `tinybox` binary, then each
//! directory of `TINYBOX_DRIVER_PATH`, then `PATH`. The first match wins.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

pub const PREFIX: &str = "tinybox-driver-";

/// The directories searched, in order, as this process's environment says.
pub fn search_dirs_from_env() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Some(dir) = std::env::current_exe().ok().and_then(|p| p.parent().map(Path::to_path_buf)) {
        dirs.push(dir);
    }
    for var in ["TINYBOX_DRIVER_PATH", "PATH"] {
        if let Some(value) = std::env::var_os(var) {
            dirs.extend(std::env::split_paths(&value).filter(|p| !p.as_os_str().is_empty()));
        }
    }
    let mut seen = std::collections::HashSet::new();
    dirs.retain(|d| seen.insert(d.clone()));
    dirs
}

fn is_executable(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The executable for driver `name` in `dirs`, if one is installed.
pub fn find(dirs: &[PathBuf], name: &str) -> Option<PathBuf> {
    dirs.iter().map(|d| d.join(format!("{PREFIX}{name}"))).find(|p| is_executable(p))
}

/// The executable `file_name` (a program of tinybox's that is not a
/// driver, such as `tinybox-egress`) in `dirs`, the first found.
pub fn find_program(dirs: &[PathBuf], file_name: &str) -> Option<PathBuf> {
    dirs.iter().map(|d| d.join(file_name)).find(|p| is_executable(p))
}

/// Every driver installed in `dirs`, by name, with the path that wins.
pub fn installed(dirs: &[PathBuf]) -> BTreeMap<String, PathBuf> {
    let mut found = BTreeMap::new();
    for dir in dirs {
        let Ok(entries) = std::fs::read_dir(dir) else { continue };
        for entry in entries.flatten() {
            let file_name = entry.file_name();
            let Some(name) = file_name.to_str().and_then(|n| n.strip_prefix(PREFIX)) else { continue };
            if tinybox_sdk::model::names::validate_name("driver", name).is_err() || name.ends_with(".d") {
                continue;
            }
            let path = entry.path();
            if is_executable(&path) {
                found.entry(name.to_owned()).or_insert(path);
            }
        }
    }
    found
}
