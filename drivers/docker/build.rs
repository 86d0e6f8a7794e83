//! Builds the egress relay (`tinybox-egress`, whose `relay` subcommand an
//! allowlist box's container runs as its entrypoint) as a static
//! executable, and hands its path to the driver, which embeds it
//! (`include_bytes!`) and writes it under the store's state directory. An
//! image's userland may be busybox or musl, so the relay cannot lean on the
//! host's glibc; cargo has no per-package target features, so this is a
//! second cargo invocation for that one package, into a target directory
//! of its own (no lock shared with the build that runs this script), as
//! drivers/microvm's build.rs does for its guest agent.
//!
//! TINYBOX_DOCKER_RELAY=/path/to/static/tinybox-egress skips the build and
//! embeds that file instead (for packagers building it their own way).

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=../../egress/src");
    println!("cargo:rerun-if-changed=../../egress/Cargo.toml");
    println!("cargo:rerun-if-env-changed=TINYBOX_DOCKER_RELAY");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let dest = out.join("tinybox-egress-relay");
    if let Some(prebuilt) = std::env::var_os("TINYBOX_DOCKER_RELAY") {
        std::fs::copy(&prebuilt, &dest).unwrap_or_else(|e| panic!("cannot copy TINYBOX_DOCKER_RELAY: {e}"));
        return;
    }
    let manifest_dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let workspace = manifest_dir.join("../..");
    // OUT_DIR is <target>/[<triple>/]<profile>/build/<pkg>-<hash>/out.
    let target_root = out.ancestors().nth(4).map(Path::to_path_buf).unwrap_or_else(|| out.clone());
    let relay_target = target_root.join("docker-relay");
    let triple = std::env::var("TARGET").expect("cargo sets TARGET");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(&workspace)
        .args(["build", "--release", "--locked", "--offline", "-p", "tinybox-egress", "--bin", "tinybox-egress"])
        .arg("--target")
        .arg(&triple)
        .arg("--target-dir")
        .arg(&relay_target)
        // With an explicit --target these flags reach the relay and its
        // dependencies only, never build scripts or proc macros.
        .env("CARGO_ENCODED_RUSTFLAGS", "-Ctarget-feature=+crt-static")
        .env("CARGO_PROFILE_RELEASE_STRIP", "symbols")
        .env("CARGO_PROFILE_RELEASE_DEBUG", "false")
        .env_remove("RUSTFLAGS")
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        .env_remove("CLIPPY_ARGS")
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_BUILD_TARGET");
    let status = cmd.status().unwrap_or_else(|e| panic!("cannot run cargo to build the static egress relay: {e}"));
    assert!(status.success(), "building the static egress relay failed ({status}); see the output above");
    let built = relay_target.join(&triple).join("release/tinybox-egress");
    std::fs::copy(&built, &dest).unwrap_or_else(|e| panic!("cannot copy {}: {e}", built.display()));
}
