//! Verification results kept per driver binary: `<store>/verified/<blake3
//! of the executable>.json`. A rebuilt or replaced driver has another
//! digest, so a result never outlives the binary it was earned by.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{Report, Status};

/// What `tinybox drivers` shows for a verified driver.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Cached {
    pub sandbox: String,
    pub digest: String,
    pub passed: bool,
    pub passes: usize,
    pub fails: usize,
    pub skipped: usize,
    /// Seconds since the epoch.
    pub verified_at: u64,
    /// The tinybox whose kit ran (claims may be added in later versions).
    pub kit_version: String,
    /// The create options the kit's boxes were made with (a verdict holds
    /// for boxes made with them, e.g. a microVM's `accel=tcg`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub create_options: BTreeMap<String, String>,
}

fn dir(store: &Path) -> PathBuf {
    store.join("verified")
}

/// The blake3 digest of the executable at `path` (symlinks followed).
pub fn digest(path: &Path) -> Option<String> {
    let bytes = std::fs::read(path).ok()?;
    Some(blake3::hash(&bytes).to_hex().to_string())
}

/// Records `report` for the driver at its path; passthrough (no binary) is not cached.
pub fn save(store: &Path, report: &Report, now: u64) -> std::io::Result<()> {
    let Some(digest) = report.driver_path.as_deref().and_then(|p| digest(Path::new(p))) else { return Ok(()) };
    let count = |s: Status| report.claims.iter().filter(|c| c.status == s).count();
    let c = Cached {
        sandbox: report.sandbox.clone(),
        digest: digest.clone(),
        passed: report.passed(),
        passes: count(Status::Pass),
        fails: count(Status::Fail),
        skipped: count(Status::Skipped),
        verified_at: now,
        kit_version: env!("CARGO_PKG_VERSION").into(),
        create_options: report.create_options.clone(),
    };
    std::fs::create_dir_all(dir(store))?;
    let tmp = dir(store).join(format!(".{digest}.{}", std::process::id()));
    std::fs::write(&tmp, serde_json::to_vec_pretty(&c).map_err(std::io::Error::other)?)?;
    std::fs::rename(tmp, dir(store).join(format!("{digest}.json")))
}

/// The recorded result for the driver binary at `path`, if any.
pub fn load(store: &Path, path: &Path) -> Option<Cached> {
    let digest = digest(path)?;
    let bytes = std::fs::read(dir(store).join(format!("{digest}.json"))).ok()?;
    serde_json::from_slice(&bytes).ok()
}
