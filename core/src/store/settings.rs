//! `config.json` in the store directory: defaults a request would otherwise
//! repeat every time. Anything a request says beats the file.
//!
//! ```text
//! {"namespace": "alice"}
//! ```
//!
//! `namespace` separates this store's boxes from another store's on a
//! shared Docker daemon (containers are named `tinybox-<namespace>-<box>`).
//! A store gets its own on its first create ([`Settings::settle_namespace`]):
//! a fresh one a generated name, one that already has boxes in the old
//! shared `default` keeps `default`, so its live containers keep their names.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::StoreError;
use super::file::{Document, JsonDoc};
use crate::error::Error;

/// The file's contents; every setting is optional.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    /// The namespace a create uses when the request names none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

impl Document for Settings {
    fn check(&self) -> Result<(), String> {
        match &self.namespace {
            Some(ns) => tinybox_sdk::model::names::validate_name("namespace", ns).map_err(|e| e.to_string()),
            None => Ok(()),
        }
    }
}

/// The namespace every store shared before each got its own.
pub const LEGACY_NAMESPACE: &str = "default";

impl Settings {
    pub fn path(store_dir: &Path) -> PathBuf {
        store_dir.join("config.json")
    }

    /// The store's settings; none at all when the file does not exist.
    pub fn load(store_dir: &Path) -> Result<Settings, Error> {
        let path = Settings::path(store_dir);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Settings::default()),
            Err(e) => return Err(Error::io(format!("cannot read {}", path.display()), e)),
        };
        let settings: Settings =
            serde_json::from_str(&text).map_err(|e| Error::Settings { path: path.clone(), detail: e.to_string() })?;
        settings.check().map_err(|detail| Error::Settings { path, detail })?;
        Ok(settings)
    }

    /// The store's namespace, recorded in `config.json` if it had none:
    /// [`LEGACY_NAMESPACE`] when `has_legacy_boxes` says the store already
    /// has boxes there (renaming them would orphan their containers),
    /// otherwise a name made for this store. Under the file's lock, so two
    /// first creates in one store agree on one name.
    pub fn settle_namespace(
        store_dir: &Path,
        has_legacy_boxes: impl FnOnce() -> Result<bool, StoreError>,
    ) -> Result<String, Error> {
        let doc: JsonDoc<Settings> = JsonDoc::open(store_dir, "config")?;
        Ok(doc.modify(|settings| {
            if let Some(ns) = &settings.namespace {
                return Ok(ns.clone());
            }
            let ns = if has_legacy_boxes()? { LEGACY_NAMESPACE.to_owned() } else { fresh_namespace(store_dir) };
            settings.namespace = Some(ns.clone());
            Ok(ns)
        })?)
    }
}

/// `s-` and twelve hex digits of a digest of the store's path, the time and
/// this process: unique per store without a random-number dependency, and
/// short enough for a container name (`tinybox-s-…-box-0`).
fn fresh_namespace(store_dir: &Path) -> String {
    let at = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let path = std::path::absolute(store_dir).unwrap_or_else(|_| store_dir.to_owned());
    let mut hasher = blake3::Hasher::new();
    hasher.update(path.as_os_str().as_encoded_bytes());
    hasher.update(&at.as_nanos().to_le_bytes());
    hasher.update(&std::process::id().to_le_bytes());
    format!("s-{}", &hasher.finalize().to_hex()[..12])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_file_is_no_settings() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(Settings::load(dir.path()).unwrap(), Settings::default());
    }

    #[test]
    fn the_namespace_is_read_and_checked() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(Settings::path(dir.path()), r#"{"namespace": "alice"}"#).unwrap();
        assert_eq!(Settings::load(dir.path()).unwrap().namespace.as_deref(), Some("alice"));
        std::fs::write(Settings::path(dir.path()), r#"{"namespace": "a/b"}"#).unwrap();
        let err = Settings::load(dir.path()).unwrap_err();
        assert!(matches!(&err, Error::Settings { detail, .. } if detail.contains("contains '/'")), "{err}");
        std::fs::write(Settings::path(dir.path()), r#"{"namepsace": "alice"}"#).unwrap();
        let err = Settings::load(dir.path()).unwrap_err();
        assert!(matches!(&err, Error::Settings { detail, .. } if detail.contains("namepsace")), "{err}");
        assert!(err.to_string().contains("config.json is not a valid configuration"), "{err}");
    }

    #[test]
    fn a_fresh_store_gets_its_own_namespace_once_and_keeps_it() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        let first = Settings::settle_namespace(a.path(), || Ok(false)).unwrap();
        let other = Settings::settle_namespace(b.path(), || Ok(false)).unwrap();
        assert_ne!(first, other, "two stores share a namespace");
        assert_ne!(first, LEGACY_NAMESPACE);
        tinybox_sdk::model::names::validate_name("namespace", &first).unwrap();
        assert_eq!(Settings::load(a.path()).unwrap().namespace.as_deref(), Some(first.as_str()));
        let again = Settings::settle_namespace(a.path(), || panic!("a recorded namespace is not decided again"));
        assert_eq!(again.unwrap(), first);
    }

    #[test]
    fn a_store_with_boxes_in_the_shared_namespace_keeps_it() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(Settings::settle_namespace(dir.path(), || Ok(true)).unwrap(), LEGACY_NAMESPACE);
        assert_eq!(Settings::load(dir.path()).unwrap().namespace.as_deref(), Some(LEGACY_NAMESPACE));
    }

    #[test]
    fn a_configured_namespace_is_kept_and_the_file_is_not_rewritten() {
        let dir = tempfile::tempdir().unwrap();
        let text = "{ \"namespace\":   \"alice\" }";
        std::fs::write(Settings::path(dir.path()), text).unwrap();
        assert_eq!(Settings::settle_namespace(dir.path(), || Ok(false)).unwrap(), "alice");
        assert_eq!(std::fs::read_to_string(Settings::path(dir.path())).unwrap(), text);
    }
}
