//! The built TinyBus module and the environment a foreign host process
//! loading it runs with: shared by the module suites and the module
//! front end of the use-case suite (frontends/module.rs).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::SystemTime;

use crate::bin_dir;

/// The workspace's root directory.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace root").to_path_buf()
}

/// The built shared library. `cargo build --workspace` leaves it in
/// target/<profile>; `--bins` (as contrib/test-all builds) only in deps/,
/// so the newer of the two is used. One older than the module's sources
/// would test old code, so that fails the test.
pub fn library() -> PathBuf {
    let dir = bin_dir();
    let candidates = [dir.join("libtinybox_module.so"), dir.join("deps/libtinybox_module.so")];
    let newest = candidates
        .iter()
        .filter_map(|p| Some((std::fs::metadata(p).ok()?.modified().ok()?, p.clone())))
        .max()
        .unwrap_or_else(|| panic!("{candidates:?} are missing: build the workspace first (cargo build --workspace)"));
    let source = newest_under(&root().join("module"));
    assert!(
        newest.0 >= source,
        "{} is older than the module's sources: rebuild it (cargo build --workspace)",
        newest.1.display()
    );
    newest.1
}

fn newest_under(dir: &Path) -> SystemTime {
    let mut newest = SystemTime::UNIX_EPOCH;
    for entry in std::fs::read_dir(dir).expect("read module dir").flatten() {
        let path = entry.path();
        let name = entry.file_name();
        if name == "include" {
            continue;
        }
        let t = if path.is_dir() { newest_under(&path) } else { entry.metadata().and_then(|m| m.modified()).unwrap() };
        newest = newest.max(t);
    }
    newest
}

/// A foreign host process: only the workspace's built drivers, found
/// through TINYBOX_DRIVER_PATH (the library may sit in deps/, away from
/// them), and a PATH with none of ours on it.
pub fn host_env<'a>(cmd: &'a mut Command, store: &Path) -> &'a mut Command {
    cmd.env("TINYBOX_DRIVER_PATH", bin_dir())
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("TINYBOX_HOME", store)
        .stdin(std::process::Stdio::null())
}
