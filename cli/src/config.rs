//! `config.json` in the store directory: defaults a flag would otherwise
//! repeat on every command. A flag always beats the file.
//!
//!     {"namespace": "alice"}
//!
//! `namespace` separates this store's boxes from another store's on a
//! shared Docker daemon (containers are named `tinybox-<namespace>-<box>`).

use std::path::{Path, PathBuf};

use serde::Deserialize;
use tinybox_core::Error;

/// The file's contents; every setting is optional.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The namespace `create` uses without `--namespace`.
    #[serde(default)]
    pub namespace: Option<String>,
}

impl Config {
    pub fn path(store_dir: &Path) -> PathBuf {
        store_dir.join("config.json")
    }

    /// The store's configuration; none at all when the file does not exist.
    pub fn load(store_dir: &Path) -> Result<Config, Error> {
        let path = Config::path(store_dir);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Config::default()),
            Err(e) => return Err(Error::io(format!("cannot read {}", path.display()), e)),
        };
        let config: Config = serde_json::from_str(&text).map_err(|e| {
            Error::Refused(format!(
                "{} is not a valid configuration ({e}); it holds one JSON object such as {{\"namespace\": \"alice\"}}",
                path.display()
            ))
        })?;
        if let Some(ns) = &config.namespace {
            tinybox_core::model::names::validate_name("namespace", ns)
                .map_err(|e| Error::Refused(format!("{}: {e}", path.display())))?;
        }
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh directory of this test's own, removed when dropped.
    struct Dir(PathBuf);

    impl Dir {
        fn new(name: &str) -> Dir {
            let dir = std::env::temp_dir().join(format!("tinybox-config-{}-{name}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            Dir(dir)
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn a_missing_file_is_no_configuration() {
        let dir = Dir::new("missing");
        assert_eq!(Config::load(&dir.0).unwrap(), Config::default());
    }

    #[test]
    fn the_namespace_is_read_and_checked() {
        let dir = Dir::new("namespace");
        std::fs::write(Config::path(&dir.0), r#"{"namespace": "alice"}"#).unwrap();
        assert_eq!(Config::load(&dir.0).unwrap().namespace.as_deref(), Some("alice"));
        std::fs::write(Config::path(&dir.0), r#"{"namespace": "a/b"}"#).unwrap();
        assert!(Config::load(&dir.0).unwrap_err().to_string().contains("contains '/'"));
        std::fs::write(Config::path(&dir.0), r#"{"namepsace": "alice"}"#).unwrap();
        let err = Config::load(&dir.0).unwrap_err().to_string();
        assert!(err.contains("config.json is not a valid configuration") && err.contains("namepsace"), "{err}");
    }
}
