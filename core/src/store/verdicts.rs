//! Verification verdicts kept per driver binary: `<store>/verified/<blake3
//! of the executable>.json`. A rebuilt or replaced driver has another
//! digest, so a verdict never outlives the binary it was earned by.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// What the conformance kit concluded about one driver binary, and what
/// `tinybox drivers` shows for it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    pub sandbox: String,
    pub digest: String,
    /// The declaration the kit checked; a verdict holds only for it. Absent
    /// in verdicts recorded before declarations were kept: those hold for none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub declared: Option<tinybox_sdk::model::SandboxCapabilities>,
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

/// Records `verdict` for the driver at `driver_path` (under its digest,
/// which the verdict carries).
pub fn save(store: &Path, verdict: &Verdict) -> std::io::Result<()> {
    std::fs::create_dir_all(dir(store))?;
    let digest = &verdict.digest;
    let tmp = dir(store).join(format!(".{digest}.{}", std::process::id()));
    std::fs::write(&tmp, serde_json::to_vec_pretty(verdict).map_err(std::io::Error::other)?)?;
    std::fs::rename(tmp, dir(store).join(format!("{digest}.json")))
}

/// The recorded verdict for the driver binary at `path`, if any.
pub fn load(store: &Path, path: &Path) -> Option<Verdict> {
    let digest = digest(path)?;
    let bytes = std::fs::read(dir(store).join(format!("{digest}.json"))).ok()?;
    serde_json::from_slice(&bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_verdict_belongs_to_the_exact_binary() {
        let store = tempfile::tempdir().unwrap();
        let bin = store.path().join("tinybox-driver-x");
        std::fs::write(&bin, b"one build").unwrap();
        assert_eq!(load(store.path(), &bin), None, "never verified");
        let verdict = Verdict {
            sandbox: "x".into(),
            digest: digest(&bin).unwrap(),
            declared: None,
            passed: true,
            passes: 3,
            fails: 0,
            skipped: 0,
            verified_at: 7,
            kit_version: "0.1.0".into(),
            create_options: BTreeMap::new(),
        };
        save(store.path(), &verdict).unwrap();
        assert_eq!(load(store.path(), &bin), Some(verdict));
        std::fs::write(&bin, b"another build").unwrap();
        assert_eq!(load(store.path(), &bin), None, "a rebuilt driver has earned nothing yet");
    }
}
