//! Verification verdicts kept per driver binary and create options:
//! `<store>/verified/<blake3 of the executable>/<options key>.json`, where
//! the key is `default` for boxes made with no create options and a digest
//! of the options otherwise (the file records them in full). A rebuilt or
//! replaced driver has another digest, so a verdict never outlives the
//! binary it was earned by, and a verdict earned with one set of options
//! never replaces another's. The declaration the kit checked is kept
//! inside, for `crate::trust` to compare. A binary's digest is remembered
//! in `<store>/verified/digests/` with the file's identity (device, inode,
//! size, mtime, ctime) and used while that identity holds, as git's index
//! does, so a create does not read its driver whole again.
//!
//! Earlier builds kept one file per binary, `<store>/verified/<digest>.json`.
//! Such a file is still read, as the verdict for the options it records
//! (none, for most): it says truthfully what was checked, and the trust
//! rule still compares its declaration.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::sync::leaf_cache::StatKey;

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
    /// The names of the claims that failed, so a refusal can say which.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed: Vec<String>,
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

/// The file an earlier build kept its one verdict per binary in.
fn legacy_file(store: &Path, digest: &str) -> PathBuf {
    dir(store).join(format!("{digest}.json"))
}

/// The name a verdict for `options` is kept under, next to its binary's others.
fn options_key(options: &BTreeMap<String, String>) -> String {
    if options.is_empty() {
        return "default".into();
    }
    // A BTreeMap serializes in key order, so equal options give one key.
    let canonical = serde_json::to_vec(options).unwrap_or_default();
    format!("options-{}", &blake3::hash(&canonical).to_hex()[..32])
}

/// The blake3 digest of the executable at `path` (symlinks followed).
pub fn digest(path: &Path) -> Option<String> {
    let bytes = std::fs::read(path).ok()?;
    Some(blake3::hash(&bytes).to_hex().to_string())
}

/// One remembered digest: the file it is of, as it was when hashed.
#[derive(Debug, Serialize, Deserialize)]
struct Remembered {
    path: PathBuf,
    /// As the sync's leaf cache keys a file: a write, a truncation, a
    /// chmod or a rename over it changes one of its fields.
    identity: StatKey,
    digest: String,
}

fn remembered_file(store: &Path, path: &Path) -> PathBuf {
    use std::os::unix::ffi::OsStrExt;
    let key = blake3::hash(path.as_os_str().as_bytes()).to_hex();
    dir(store).join("digests").join(format!("{}.json", &key[..32]))
}

/// [`digest`], without reading the binary again while its identity is the
/// one it had when the store last hashed it: every create looks its
/// sandbox's verdict up, and a driver binary is tens of megabytes. With
/// `remember`, a settled binary's digest is kept (best effort: a store
/// that cannot be written just hashes again next time).
pub fn digest_in(store: &Path, path: &Path, remember: bool) -> Option<String> {
    digest_at(store, path, remember, SystemTime::now())
}

fn digest_at(store: &Path, path: &Path, remember: bool, now: SystemTime) -> Option<String> {
    let identity = StatKey::of(&std::fs::metadata(path).ok()?);
    let file = remembered_file(store, path);
    if let Some(r) = std::fs::read(&file).ok().and_then(|b| serde_json::from_slice::<Remembered>(&b).ok())
        && r.path == path
        && r.identity == identity
    {
        return Some(r.digest);
    }
    let digest = digest(path)?;
    // Unchanged while it was read, and not changed just now.
    let after = std::fs::metadata(path).ok().map(|m| StatKey::of(&m));
    if remember && after == Some(identity) && identity.settled_before(now) {
        let r = Remembered { path: path.to_owned(), identity, digest: digest.clone() };
        let _ = write_atomically(&file, &serde_json::to_vec(&r).unwrap_or_default());
    }
    Some(digest)
}

fn write_atomically(file: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let parent = file.parent().expect("a file in the store");
    std::fs::create_dir_all(parent)?;
    let mut temp = tempfile::NamedTempFile::new_in(parent)?;
    std::io::Write::write_all(&mut temp, bytes)?;
    temp.persist(file).map(drop).map_err(|e| e.error)
}

/// Records `verdict` under the digest and the create options it carries,
/// replacing only an earlier verdict for the same binary and options.
pub fn save(store: &Path, verdict: &Verdict) -> std::io::Result<()> {
    let digest_dir = dir(store).join(&verdict.digest);
    std::fs::create_dir_all(&digest_dir)?;
    let key = options_key(&verdict.create_options);
    let tmp = digest_dir.join(format!(".{key}.{}", std::process::id()));
    std::fs::write(&tmp, serde_json::to_vec_pretty(verdict).map_err(std::io::Error::other)?)?;
    std::fs::rename(tmp, digest_dir.join(format!("{key}.json")))
}

/// The recorded verdict for the driver binary at `path` and boxes made with
/// `options`, if any. With `remember`, a digest computed on the way is
/// kept ([`digest_in`]); a listing passes `false` and writes nothing.
pub fn load(store: &Path, path: &Path, options: &BTreeMap<String, String>, remember: bool) -> Option<Verdict> {
    let digest = digest_in(store, path, remember)?;
    let keyed = dir(store).join(&digest).join(format!("{}.json", options_key(options)));
    [keyed, legacy_file(store, &digest)]
        .iter()
        .filter_map(|file| read(file, &digest))
        .find(|v| v.create_options == *options)
}

/// Every recorded verdict for the driver binary at `path`, one per set of
/// create options, default options first.
pub fn load_all(store: &Path, path: &Path) -> Vec<Verdict> {
    // A listing only reads: it remembers nothing.
    let Some(digest) = digest_in(store, path, false) else { return Vec::new() };
    let mut found: Vec<Verdict> = std::fs::read_dir(dir(store).join(&digest))
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_str().is_some_and(|n| n.ends_with(".json") && !n.starts_with('.')))
        .filter_map(|e| read(&e.path(), &digest))
        .collect();
    if let Some(old) = read(&legacy_file(store, &digest), &digest)
        && !found.iter().any(|v| v.create_options == old.create_options)
    {
        found.push(old);
    }
    found.sort_by(|a, b| a.create_options.cmp(&b.create_options));
    found
}

/// The verdict in `file`, when it is one for the binary with `digest`.
fn read(file: &Path, digest: &str) -> Option<Verdict> {
    let verdict: Verdict = serde_json::from_slice(&std::fs::read(file).ok()?).ok()?;
    (verdict.digest == digest).then_some(verdict)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_settled_binarys_digest_is_remembered_until_it_changes() {
        let store = tempfile::tempdir().unwrap();
        let bin = store.path().join("tinybox-driver-x");
        std::fs::write(&bin, b"one build").unwrap();
        let later = SystemTime::now() + std::time::Duration::from_secs(60);
        let first = digest(&bin).unwrap();
        // Just written: not settled, so nothing is remembered.
        assert_eq!(digest_at(store.path(), &bin, true, SystemTime::now()).as_deref(), Some(first.as_str()));
        assert!(!remembered_file(store.path(), &bin).exists(), "a racily clean binary was remembered");
        // Settled: remembered, and then served without reading the binary.
        assert_eq!(digest_at(store.path(), &bin, true, later).as_deref(), Some(first.as_str()));
        let file = remembered_file(store.path(), &bin);
        let mut r: Remembered = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
        r.digest = "what the store remembers".into();
        std::fs::write(&file, serde_json::to_vec(&r).unwrap()).unwrap();
        assert_eq!(digest_at(store.path(), &bin, false, later).as_deref(), Some("what the store remembers"));
        // Any change to the file (same size, same mtime even) is a new identity: hashed again.
        let mtime = std::fs::metadata(&bin).unwrap().modified().unwrap();
        std::fs::write(&bin, b"two build").unwrap();
        std::fs::File::options().write(true).open(&bin).unwrap().set_modified(mtime).unwrap();
        let second = digest(&bin).unwrap();
        assert_ne!(first, second);
        assert_eq!(digest_at(store.path(), &bin, false, later).as_deref(), Some(second.as_str()));
        // A file another path's digest was remembered for is not taken for it.
        let other = store.path().join("tinybox-driver-y");
        std::fs::write(&other, b"one build").unwrap();
        assert_eq!(digest_at(store.path(), &other, false, later), digest(&other));
    }

    fn verdict(bin: &Path, options: &[(&str, &str)], passed: bool) -> Verdict {
        Verdict {
            sandbox: "x".into(),
            digest: digest(bin).unwrap(),
            declared: None,
            passed,
            passes: 3,
            fails: usize::from(!passed),
            skipped: 0,
            failed: Vec::new(),
            verified_at: 7,
            kit_version: "0.1.0".into(),
            create_options: options.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        }
    }

    #[test]
    fn a_verdict_belongs_to_the_exact_binary() {
        let store = tempfile::tempdir().unwrap();
        let bin = store.path().join("tinybox-driver-x");
        std::fs::write(&bin, b"one build").unwrap();
        let none = BTreeMap::new();
        assert_eq!(load(store.path(), &bin, &none, true), None, "never verified");
        let verdict = verdict(&bin, &[], true);
        save(store.path(), &verdict).unwrap();
        assert_eq!(load(store.path(), &bin, &none, true), Some(verdict));
        std::fs::write(&bin, b"another build").unwrap();
        assert_eq!(load(store.path(), &bin, &none, true), None, "a rebuilt driver has earned nothing yet");
        assert_eq!(load_all(store.path(), &bin), vec![]);
    }

    #[test]
    fn verdicts_for_other_options_are_kept_side_by_side() {
        let store = tempfile::tempdir().unwrap();
        let bin = store.path().join("tinybox-driver-microvm");
        std::fs::write(&bin, b"one build").unwrap();
        let default = verdict(&bin, &[], false);
        let tcg = verdict(&bin, &[("accel", "tcg")], true);
        let tcg_map = tcg.create_options.clone();
        save(store.path(), &default).unwrap();
        save(store.path(), &tcg).unwrap();
        assert_eq!(load(store.path(), &bin, &BTreeMap::new(), true), Some(default.clone()), "tcg did not overwrite it");
        assert_eq!(load(store.path(), &bin, &tcg_map, true), Some(tcg.clone()));
        let kvm: BTreeMap<String, String> = [("accel".to_owned(), "kvm".to_owned())].into();
        assert_eq!(load(store.path(), &bin, &kvm, true), None, "never verified with accel=kvm");
        assert_eq!(load_all(store.path(), &bin), vec![default.clone(), tcg.clone()]);

        // Verifying again replaces only the verdict for the same options.
        let again = Verdict { verified_at: 8, passed: true, fails: 0, ..default };
        save(store.path(), &again).unwrap();
        assert_eq!(load_all(store.path(), &bin), vec![again, tcg]);
    }

    #[test]
    fn a_verdict_file_an_earlier_build_wrote_is_read_for_the_options_it_records() {
        let store = tempfile::tempdir().unwrap();
        let bin = store.path().join("tinybox-driver-x");
        std::fs::write(&bin, b"one build").unwrap();
        let old = verdict(&bin, &[], true);
        // What an earlier build wrote: one file per digest, no `create_options` when none.
        std::fs::create_dir_all(dir(store.path())).unwrap();
        let old_json = serde_json::json!({
            "sandbox": "x", "digest": old.digest, "passed": true, "passes": 3, "fails": 0,
            "skipped": 0, "verified_at": 7, "kit_version": "0.1.0"
        });
        std::fs::write(legacy_file(store.path(), &old.digest), old_json.to_string()).unwrap();
        let none = BTreeMap::new();
        assert_eq!(load(store.path(), &bin, &none, true), Some(old.clone()), "read as the default-options verdict");
        let tcg: BTreeMap<String, String> = [("accel".to_owned(), "tcg".to_owned())].into();
        assert_eq!(load(store.path(), &bin, &tcg, true), None, "it says nothing of other options");
        assert_eq!(load_all(store.path(), &bin), vec![old.clone()]);

        // A verdict recorded now for the same options takes its place.
        let new = Verdict { verified_at: 9, ..old };
        save(store.path(), &new).unwrap();
        assert_eq!(load(store.path(), &bin, &none, true), Some(new.clone()));
        assert_eq!(load_all(store.path(), &bin), vec![new]);

        // An old file that recorded options is theirs, not the defaults'.
        let bin2 = store.path().join("tinybox-driver-y");
        std::fs::write(&bin2, b"other").unwrap();
        let old_tcg = verdict(&bin2, &[("accel", "tcg")], true);
        std::fs::write(legacy_file(store.path(), &old_tcg.digest), serde_json::to_vec(&old_tcg).unwrap()).unwrap();
        assert_eq!(load(store.path(), &bin2, &none, true), None);
        assert_eq!(load(store.path(), &bin2, &tcg, true), Some(old_tcg));
    }
}
