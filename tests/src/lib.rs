//! Shared helpers for tinybox's cross-crate and live suites: where the built
//! binaries are, an engine wired to them, and the visible "skipped" line a
//! live test prints when this machine lacks the real part it needs.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tinybox_core::Tinybox;
use tinybox_core::clock::Clock;
use tinybox_core::driver::{DriverConfig, Timeouts};
use tinybox_core::store::MemoryStore;

/// The directory holding the workspace's built binaries (target/<profile>).
pub fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    // target/<profile>/deps/<test> -> target/<profile>
    let dir = exe.parent().and_then(Path::parent).expect("target dir").to_path_buf();
    for needed in ["tinybox", "tinybox-driver-local"] {
        assert!(
            dir.join(needed).exists(),
            "{} is missing: build the workspace's binaries first (cargo build --workspace --bins)",
            dir.join(needed).display()
        );
    }
    dir
}

/// A built binary of this workspace.
pub fn bin(name: &str) -> PathBuf {
    bin_dir().join(name)
}

/// Driver settings that find drivers in `extra` first, then the built ones.
pub fn driver_config(extra: &[PathBuf], timeouts: Timeouts) -> DriverConfig {
    let mut search_dirs = extra.to_vec();
    search_dirs.push(bin_dir());
    DriverConfig { search_dirs, timeouts }
}

/// Short timeouts, so a misbehaving driver fails a test fast.
pub fn short_timeouts() -> Timeouts {
    Timeouts { handshake: Duration::from_secs(3), operation: Duration::from_secs(5) }
}

/// An engine over a memory store, with drivers from `extra` and the build.
pub fn engine(extra: &[PathBuf], clock: Arc<dyn Clock>) -> Tinybox {
    Tinybox::with_parts(Arc::new(MemoryStore::new()), None, clock, driver_config(extra, short_timeouts()))
        .expect("engine")
}

/// Prints the line a live test shows when it cannot run here.
pub fn skip(test: &str, reason: &str) {
    eprintln!("skipped: {test}: {reason}");
    println!("skipped: {test}: {reason}");
}

/// Whether `program` is on PATH.
pub fn have(program: &str) -> bool {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file()))
        .unwrap_or(false)
}
