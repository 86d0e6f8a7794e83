//! An image for the secrets suites' docker boxes (ADR 0032): the base
//! busybox image plus this machine's curl and Python (with their shared
//! libraries, found by `ldd`, and Python's standard library) and
//! `requests` from PyPI, imported once per machine under [`TAG`]. Docker's
//! own images have neither client, and nothing here may pull one.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::docker::{BASE_IMAGE, docker};

/// The image's tag; made again only when it is missing.
pub const TAG: &str = "tinybox-secrets-clients:test";
/// Where `requests` is in the image (its `PYTHONPATH`).
pub const PYLIB: &str = "/opt/pylib";

const PYTHON: &str = "/usr/lib/python3.11";
const BINARIES: [&str; 2] = ["/usr/bin/curl", "/usr/bin/python3.11"];

fn sh(script: &str) -> Result<(), String> {
    let out = Command::new("sh").args(["-c", script]).stdin(Stdio::null()).output().map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("{script}: {}", String::from_utf8_lossy(&out.stderr).trim()))
    }
}

/// The shared libraries `ldd` says `file` loads (with the loader).
fn libraries(file: &Path) -> Vec<PathBuf> {
    let Ok(out) = Command::new("ldd").arg(file).output() else { return Vec::new() };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().find(|w| w.starts_with('/')).map(PathBuf::from))
        .collect()
}

/// Copies `from` (symlinks followed) to the same path under `root`.
fn place(root: &Path, from: &Path) -> Result<(), String> {
    let to = root.join(from.strip_prefix("/").unwrap_or(from));
    std::fs::create_dir_all(to.parent().unwrap_or(root)).map_err(|e| e.to_string())?;
    std::fs::copy(from, &to).map(drop).map_err(|e| format!("{}: {e}", from.display()))
}

/// The image's tag, made when missing; the reason when it cannot be.
pub fn client_image() -> Result<&'static str, String> {
    if docker(&["image", "inspect", TAG]).0 == 0 {
        return Ok(TAG);
    }
    for b in BINARIES {
        if !Path::new(b).exists() {
            return Err(format!("{b} is not installed"));
        }
    }
    let root = tempfile::tempdir().map_err(|e| e.to_string())?;
    let r = root.path().display().to_string();
    let (code, id, err) = docker(&["create", BASE_IMAGE, "true"]);
    if code != 0 {
        return Err(format!("docker create {BASE_IMAGE}: {}", err.trim()));
    }
    let exported = sh(&format!("docker export {} | tar -x -C {r}", id.trim()));
    let _ = docker(&["rm", "-f", id.trim()]);
    exported?;
    let mut files: BTreeSet<PathBuf> = BINARIES.iter().map(PathBuf::from).collect();
    for entry in std::fs::read_dir(format!("{PYTHON}/lib-dynload")).map_err(|e| e.to_string())?.flatten() {
        files.insert(entry.path());
    }
    let libs: BTreeSet<PathBuf> = files.iter().flat_map(|f| libraries(f)).collect();
    for lib in &libs {
        place(root.path(), lib)?;
    }
    place(root.path(), Path::new("/usr/bin/curl"))?;
    place(root.path(), Path::new("/usr/bin/python3.11"))?;
    sh(&format!("ln -s python3.11 {r}/usr/bin/python3 && mkdir -p {r}/usr/lib && cp -a {PYTHON} {r}/usr/lib/"))?;
    crate::tls_world::install_requests(&root.path().join(PYLIB.trim_start_matches('/')))?;
    sh(&format!("tar -C {r} -c . | docker import - {TAG} >/dev/null"))?;
    Ok(TAG)
}
