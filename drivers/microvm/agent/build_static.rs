// Shared by the build scripts of every driver that puts the agent in its
// boxes (`include!`d by drivers/microvm/build.rs and
// drivers/namespace/build.rs): builds the agent as a static executable
// into a target directory of its own and copies it to OUT_DIR as
// `tinybox-microvm-agent`. The guest has no C library, and an image's root
// may have any, so the agent must be statically linked; cargo has no
// per-package target features, so this is a second cargo invocation for
// that one package (one lock, shared by both drivers' scripts: the second
// finds it built).
//
// TINYBOX_MICROVM_AGENT=/path/to/static/agent skips the build and embeds
// that file instead (for packagers building the agent their own way).

use std::path::{Path, PathBuf};
use std::process::Command;

fn build_static_agent(workspace: &Path) {
    println!("cargo:rerun-if-changed={}", workspace.join("drivers/microvm/agent").display());
    println!("cargo:rerun-if-env-changed=TINYBOX_MICROVM_AGENT");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let dest = out.join("tinybox-microvm-agent");
    if let Some(prebuilt) = std::env::var_os("TINYBOX_MICROVM_AGENT") {
        std::fs::copy(&prebuilt, &dest).unwrap_or_else(|e| panic!("cannot copy TINYBOX_MICROVM_AGENT: {e}"));
        return;
    }
    // OUT_DIR is <target>/[<triple>/]<profile>/build/<pkg>-<hash>/out.
    let target_root = out.ancestors().nth(4).map(Path::to_path_buf).unwrap_or_else(|| out.clone());
    let agent_target = target_root.join("microvm-agent");
    let triple = std::env::var("TARGET").expect("cargo sets TARGET");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(workspace)
        .args(["build", "--release", "--locked", "--offline", "-p", "tinybox-microvm-agent", "--bin"])
        .arg("tinybox-microvm-agent")
        .arg("--target")
        .arg(&triple)
        .arg("--target-dir")
        .arg(&agent_target)
        // With an explicit --target these flags reach the agent and its
        // dependencies only, never build scripts or proc macros.
        .env("CARGO_ENCODED_RUSTFLAGS", "-Ctarget-feature=+crt-static")
        .env("CARGO_PROFILE_RELEASE_STRIP", "symbols")
        .env("CARGO_PROFILE_RELEASE_DEBUG", "false")
        .env_remove("RUSTFLAGS")
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        .env_remove("CLIPPY_ARGS")
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_BUILD_TARGET");
    let status = cmd.status().unwrap_or_else(|e| panic!("cannot run cargo to build the guest agent: {e}"));
    assert!(status.success(), "building the static guest agent failed ({status}); see the output above");
    let built = agent_target.join(&triple).join("release/tinybox-microvm-agent");
    std::fs::copy(&built, &dest).unwrap_or_else(|e| panic!("cannot copy {}: {e}", built.display()));
}
