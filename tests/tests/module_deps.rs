//! The released library links core and the sdk only: no driver crate and
//! no backend's dependencies, which live in the driver executables. Read
//! from `cargo tree` on the workspace's lock file.

mod module_support;

use std::collections::BTreeSet;
use std::process::Command;

use module_support::root;

/// The crates `package` depends on, normal (non-dev, non-build) edges only.
fn tree(package: &str) -> BTreeSet<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .current_dir(root())
        .args(["tree", "--offline", "-p", package, "-e", "normal", "--prefix", "none", "--format", "{p}"])
        .output()
        .expect("run cargo tree");
    assert!(out.status.success(), "cargo tree -p {package}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .filter(|name| name != package)
        .collect()
}

#[test]
fn the_module_links_core_and_the_sdk_and_no_backend() {
    let module = tree("tinybox-module");
    for wanted in ["tinybox-core", "tinybox-sdk", "safer-ffi"] {
        assert!(module.contains(wanted), "{wanted} missing from {module:?}");
    }
    let drivers: Vec<&String> = module.iter().filter(|n| n.starts_with("tinybox-driver-")).collect();
    assert!(drivers.is_empty(), "the module links driver crates: {drivers:?}");
    for other in ["tinybox-cli", "tinybox-tests", "clap"] {
        assert!(!module.contains(other), "the module links {other}");
    }
    for backend in ["bollard", "shiplift", "docker-api", "ssh2", "russh", "openssh", "thrussh", "libssh2-sys"] {
        assert!(!module.contains(backend), "the module links the backend crate {backend}");
    }

    // Everything it links besides the FFI crate's own tree is already core's or the sdk's.
    let mut allowed = tree("tinybox-core");
    allowed.extend(tree("tinybox-sdk"));
    allowed.extend(tree("safer-ffi"));
    allowed.extend(["tinybox-core".to_owned(), "tinybox-sdk".to_owned(), "safer-ffi".to_owned()]);
    let extra: Vec<&String> = module.difference(&allowed).collect();
    assert!(extra.is_empty(), "the module links crates neither core, the sdk nor safer-ffi needs: {extra:?}");

    // And nothing only a driver needs.
    let mut drivers_only = BTreeSet::new();
    for manifest in std::fs::read_dir(root().join("drivers")).unwrap().flatten() {
        let name = format!("tinybox-driver-{}", manifest.file_name().to_string_lossy());
        if manifest.path().join("Cargo.toml").exists() {
            drivers_only.extend(tree(&name).difference(&allowed).cloned().collect::<Vec<_>>());
        }
    }
    let shared: Vec<&String> = module.intersection(&drivers_only).collect();
    assert!(shared.is_empty(), "the module links crates only drivers need: {shared:?}");
}
