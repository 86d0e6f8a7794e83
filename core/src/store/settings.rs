//! `config.json` in the store directory: defaults a request would otherwise
//! repeat every time. Anything a request says beats the file.
//!
//! ```text
//! {"namespace": "alice"}
//! ```
//!
//! `namespace` separates this store's boxes from another store's on a
//! shared Docker daemon (containers are named `tinybox-<namespace>-<box>`).

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::error::Error;

/// The file's contents; every setting is optional.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    /// The namespace a create uses when the request names none.
    #[serde(default)]
    pub namespace: Option<String>,
}

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
        if let Some(ns) = &settings.namespace {
            tinybox_sdk::model::names::validate_name("namespace", ns)
                .map_err(|e| Error::Settings { path, detail: e.to_string() })?;
        }
        Ok(settings)
    }
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
}
